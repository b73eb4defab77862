"""`train rag`'s --max-combined-length and --max-target-length against a generator of few positions: a
RagModel cuts its inputs at min(--max-combined-length, max_position_embeddings) (`fit_to_generator`),
so the room check reads that capped length, and the decoder reads targets and decoded answers in the
same positions, so a --max-target-length past them is refused; each in one line, before anything is written."""

from __future__ import annotations

import re

import pytest

from conftest import one_thread, run_cli
from lewisrag.data.io import InputError
from test_rag_positions import generator_with_positions
from test_rag_train import cli_flags, make_config, rag_inputs  # noqa: F401  (session fixture)


@pytest.fixture(scope="module")
def generators(rag_inputs, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("few_positions")
    return {n: generator_with_positions(rag_inputs["gen"], root / f"gen_{n}", n) for n in (3, 8)}


def test_a_combined_length_capped_below_the_room_is_refused(rag_inputs, generators, tmp_path):  # noqa: F811
    """3 positions hold BART's <s> and </s> and one token: --max-combined-length 128 passed the check
    (128 >= 4), and the run went on to an IndexError in its first step."""
    from lewisrag.training.rag import train_rag

    cfg = make_config(rag_inputs, generator=str(generators[3]), steps=1, eval_every=0)
    assert cfg.max_combined_length == 128
    with pytest.raises(InputError, match=re.escape("--max-combined-length: 128 is capped at the generator's 3 positions "
                                                   "(max_position_embeddings), which leave no room for content: at "
                                                   "least 4 are needed")):
        train_rag(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    r = run_cli("train", "rag", *cli_flags(cfg), "--out", str(tmp_path / "cli"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "--max-combined-length" in r.stderr and "3 positions" in r.stderr and "note:" not in r.stderr
    assert not (tmp_path / "cli").exists()


def test_a_target_length_past_the_decoders_positions_is_refused(rag_inputs, generators, tmp_path):  # noqa: F811
    """8 positions: the combined length is capped at 8, room enough; the targets (--max-target-length 16)
    and the dev evaluations' decoding run past the decoder's 8 positions (an IndexError mid-training)."""
    from lewisrag.training.rag import train_rag

    cfg = make_config(rag_inputs, generator=str(generators[8]), steps=1, eval_every=1)
    assert cfg.max_target_length == 16
    with pytest.raises(InputError, match=re.escape("--max-target-length: 16 exceeds the generator's 8 positions "
                                                   "(max_position_embeddings)")):
        train_rag(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    r = run_cli("train", "rag", *cli_flags(cfg), "--out", str(tmp_path / "cli"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "--max-target-length" in r.stderr and "must be at most 8" in r.stderr


def test_lengths_within_the_positions_load_capped(rag_inputs, generators):  # noqa: F811
    from lewisrag.training.rag_data import load_components

    with one_thread():
        parts = load_components(make_config(rag_inputs, generator=str(generators[8]), max_target_length=8))
    assert parts.model.settings.max_combined_length == 8


def test_check_lengths_reads_the_capped_length(rag_inputs):  # noqa: F811
    from transformers import AutoTokenizer

    from lewisrag.training.rag_data import check_lengths

    tok = AutoTokenizer.from_pretrained(rag_inputs["gen"])
    check_lengths(16, 300, tok)  # no positions: no cap
    check_lengths(4, 300, tok, positions=4)
    with pytest.raises(InputError, match="--max-combined-length: 300 is capped at the generator's 3 positions"):
        check_lengths(3, 300, tok, positions=3)
    with pytest.raises(InputError, match=re.escape("--max-combined-length: must be at least 4 with this generator's "
                                                   "tokenizer (its 2 special tokens, one passage token and one question "
                                                   "token), got 3")):
        check_lengths(16, 3, tok, positions=256)  # the flag itself too small: the message it always had
    with pytest.raises(InputError, match="--max-target-length: 5 exceeds the generator's 4 positions"):
        check_lengths(5, 300, tok, positions=4)
