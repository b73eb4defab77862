"""`train stitched`, audited: training that diverges (--lr 1e30 saved NaN weights, exit 0), a generator
without learned positions (a T5: a traceback), stitched inputs longer than the generator reads
(the gold passage, or with --question-last the question, cut in silence), cited answers longer than
the target (the citation cut in silence), and a --train file with no gold passage ids (a message that
did not name the file)."""

from __future__ import annotations

import json
import re

import pytest

from conftest import one_thread, run_main
from lewisrag.data.io import InputError
from test_rag_train import rag_inputs  # noqa: F401  (session fixture)


def _config(rag_inputs, **overrides):  # noqa: F811
    from lewisrag.training.stitched_train import StitchedTrainConfig

    base = dict(index=str(rag_inputs["index"]), generator=str(rag_inputs["gen"]),
                train=str(rag_inputs["world"] / "train.jsonl"), train_kinds="short", k=2, steps=2, batch_size=2,
                device="cpu")
    return StitchedTrainConfig(**{**base, **overrides})


def test_training_that_diverges_exits_2_and_writes_nothing(rag_inputs, tmp_path, monkeypatch, capsys):  # noqa: F811
    """--lr 1e30: the loss was nan from step 2, the NaN weights were saved and the table read
    `final loss nan`, exit 0."""
    out = tmp_path / "stitched"
    code, _, err = run_main(monkeypatch, capsys, "train", "stitched", "--index", rag_inputs["index"], "--generator",
                            rag_inputs["gen"], "--train", rag_inputs["world"] / "train.jsonl", "--train-kinds", "short",
                            "--n-docs", 2, "--steps", 3, "--batch-size", 2, "--device", "cpu", "--lr", "1e30",
                            "--out", out)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert re.fullmatch(r"error: --lr: the loss became nan at step \d+: training diverged; lower --lr \(now 1e\+30\)\n",
                        err), err
    assert not out.exists() and not list(tmp_path.iterdir())


def test_a_t5_generator_trains(rag_inputs, tmp_path):  # noqa: F811
    """A T5 (relative positions: its config has no max_position_embeddings) passed every check, then
    the first step raised AttributeError: a traceback, exit 3."""
    import torch
    from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration

    from lewisrag.training.stitched_train import train_stitched

    t5 = tmp_path / "t5"
    tok = AutoTokenizer.from_pretrained(rag_inputs["gen"])
    torch.manual_seed(0)
    T5ForConditionalGeneration(T5Config(vocab_size=len(tok), d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2,
                                        pad_token_id=1, eos_token_id=2, decoder_start_token_id=1)).save_pretrained(t5)
    tok.save_pretrained(t5)
    with one_thread():
        summary = train_stitched(_config(rag_inputs, generator=str(t5)), tmp_path / "stitched")
    assert summary["steps"] == 2 and not summary["positions_extended"]
    assert (tmp_path / "stitched" / "stitched.json").is_file()


@pytest.mark.parametrize("question_last", [False, True])
def test_inputs_longer_than_the_generator_reads_are_refused(rag_inputs, tmp_path, question_last):  # noqa: F811
    """Truncated to 20 tokens, the stitched input lost its later passages (the gold one at the draws
    that put it there) or, question last, the question: training went on and taught the reader to cite
    and answer what it was never shown. (The reproduce stage keeps its designed cut at k x
    max_combined_length: the check is `train stitched`'s.)"""
    from lewisrag.training.stitched_train import train_stitched

    cfg = _config(rag_inputs, max_input_length=20, question_last=question_last)
    cut = "the question \\(--question-last\\)" if question_last else "the passages stitched last"
    with pytest.raises(InputError, match=rf"^{re.escape(cfg.train)}: field '--n-docs': question '.+': its 2 stitched "
                                         rf"passages and question are \d+ tokens, more than the 20 the generator reads: "
                                         rf"truncation would cut {cut}, .* lower --n-docs$"):
        train_stitched(cfg, tmp_path / "stitched", check_lengths=True)  # as `train stitched` does
    assert not list(tmp_path.iterdir())


def test_inputs_that_fit_train_as_before(rag_inputs, tmp_path):  # noqa: F811
    """The check reads lengths only: a run whose inputs fit trains (the default 1024 positions)."""
    from lewisrag.training.stitched_train import train_stitched

    with one_thread():
        assert train_stitched(_config(rag_inputs), tmp_path / "stitched", check_lengths=True)["steps"] == 2


def test_a_train_file_without_gold_ids_is_named(rag_inputs, tmp_path, monkeypatch, capsys):  # noqa: F811
    """No row has gold_passage_ids: the message said `--train: ...`, not which file."""
    rows = [json.loads(line) for line in (rag_inputs["world"] / "train.jsonl").read_text().splitlines()][:10]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "gold_passage_ids"}) + "\n" for r in rows))
    code, _, err = run_main(monkeypatch, capsys, "train", "stitched", "--index", rag_inputs["index"], "--generator",
                            rag_inputs["gen"], "--train", train, "--n-docs", 2, "--steps", 1, "--batch-size", 2,
                            "--device", "cpu", "--out", tmp_path / "out")
    assert code == 2 and err == (f"error: {train}: field '--train': no example has both an answer and a gold passage id "
                                 "(gold_passage_ids): train stitched needs both\n"), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("cite_first", [False, True])
def test_a_cited_answer_longer_than_the_target_is_refused(rag_inputs, tmp_path, monkeypatch, capsys, cite_first):  # noqa: F811
    """Targets were cut at --max-target-length (40 by default, and long answers run past it): the cut
    dropped the citation the reader is trained to write after its answer, or with --cite-first the
    answer's end, without a word."""
    cut = "the answer's end \\(--cite-first\\)" if cite_first else "its citation"
    code, _, err = run_main(monkeypatch, capsys, "train", "stitched", "--index", rag_inputs["index"], "--generator",
                            rag_inputs["gen"], "--train", rag_inputs["world"] / "train.jsonl", "--n-docs", 2, "--steps", 1,
                            "--batch-size", 2, "--device", "cpu", "--max-target-length", 4, "--out", tmp_path / "out",
                            *(["--cite-first"] if cite_first else []))
    assert code == 2 and re.fullmatch(rf"error: .+train\.jsonl: field '--max-target-length': question '.+': its cited "
                                      rf"answer is \d+ tokens, more than --max-target-length 4: the cut would drop {cut}; "
                                      r"raise --max-target-length \(or --train-kinds short\)\n", err), err
    assert not (tmp_path / "out").exists()
    code, _, err = run_main(monkeypatch, capsys, "train", "stitched", "--index", rag_inputs["index"], "--generator",
                            rag_inputs["gen"], "--train", rag_inputs["world"] / "train.jsonl", "--max-target-length", 2,
                            "--out", tmp_path / "out")
    assert code == 2 and err == "error: --max-target-length: must be at least 3, got 2\n", err


def test_by_default_every_target_is_whole(rag_inputs, tmp_path):  # noqa: F811
    """`train stitched` without --max-target-length (None) reads the longest cited answer's length, which
    stitched.json records: long answers (60 tokens here) kept their citation."""
    from transformers import AutoTokenizer

    from lewisrag.training.stitched_train import cited_target, train_stitched

    with one_thread():
        train_stitched(_config(rag_inputs, train_kinds="", max_target_length=None), tmp_path / "s", check_lengths=True)
    recorded = json.loads((tmp_path / "s" / "stitched.json").read_text())["config"]["max_target_length"]
    tokenizer = AutoTokenizer.from_pretrained(rag_inputs["gen"])
    answers = [json.loads(line)["answers"][0] for line in (rag_inputs["world"] / "train.jsonl").read_text().splitlines()]
    longest = max(len(tokenizer(cited_target(a, 2))["input_ids"]) for a in answers)
    assert recorded == longest > 40
