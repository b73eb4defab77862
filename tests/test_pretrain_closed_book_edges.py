"""Edges of `lewisrag pretrain` and the closed-book baseline: the closed book's length limit counted as
RAG's, a loss already NaN before any update blamed on its real cause (not the lr), and the `--set`
caps of tokenizer_docs and snapshot_b_share."""

from __future__ import annotations

import pytest
import torch

from conftest import one_thread, run_main
from lewisrag.data.io import InputError
from lewisrag.data.pretrained import load_generator
from lewisrag.training.closed_book import answer_closed_book, train_closed_book
from lewisrag.training.configs import ClosedBookConfig
from lewisrag.training.pretrain import SHIPPED_DIR


def _shipped():
    return load_generator(SHIPPED_DIR / "generator-small")


@pytest.mark.parametrize("max_length", [2, 6])
def test_the_closed_book_decodes_as_many_tokens_as_rag_at_the_same_max_length(max_length):
    """answer_closed_book passed max_new_tokens=max_length, while RAG's max_length counts the decoder
    start token (rag_model.decoding._max_length): at 6, RAG's sequences were 6 long, the closed book's 7,
    one answer token more for the same limit (stages._answers, Table 1, Jeopardy pass both the same)."""
    from lewisrag.rag_model.checkpoints import from_hf
    from lewisrag.rag_model.model import RagModel
    from lewisrag.rag_model.testing import tiny_batch, tiny_hf_rag

    rag_lengths = set()
    for variant in ("token", "sequence"):
        model = from_hf(RagModel, tiny_hf_rag(variant, eos_bias=-100.0))  # never ends early
        ids, mask, scores, _ = tiny_batch(2, 3, 8, 4, 100)
        rag_lengths.add(model.generate(ids, mask, scores, num_beams=1, max_length=max_length).shape[1])

    generator, tokenizer = _shipped()
    with torch.no_grad():
        generator.final_logits_bias[0, tokenizer.eos_token_id] = -1e4  # an answer that runs to the limit
    shapes, generate = [], generator.generate

    def spy(*args, **kwargs):
        out = generate(*args, **kwargs)
        shapes.append(out.shape[1])
        return out

    generator.generate = spy
    with one_thread():
        answer_closed_book(generator, tokenizer, ["Who is the president of Palzer?", "Where is Fikzerair?"],
                           max_length=max_length)
    assert rag_lengths == {max(2, max_length)} and shapes == [max(2, max_length)], (rag_lengths, shapes)


@pytest.fixture
def broken_generator(tmp_path):
    """Save the shipped generator, its weights changed by `change`, to tmp_path/name."""
    def save(name, change):
        generator, tokenizer = _shipped()
        with torch.no_grad():
            change(generator)
        generator.save_pretrained(tmp_path / name, safe_serialization=True)
        tokenizer.save_pretrained(tmp_path / name)
        return tmp_path / name
    return save


def _closed_book(tiny_corpus, generator, out):
    cfg = ClosedBookConfig(generator=str(generator), train=str(tiny_corpus["qa"]), steps=3, batch_size=4, device="cpu")
    with one_thread():
        return train_closed_book(cfg, out)


def test_a_closed_book_from_a_generator_holding_nan_names_the_generator_not_the_lr(tiny_corpus, broken_generator,
                                                                                     tmp_path):
    """A starting generator with a NaN weight made the loss NaN at step 1 and the run said "--lr: ... lower
    --lr", of a flag its only caller (reproduce) does not have, though no lr could help."""
    folder = broken_generator("gnan", lambda g: g.model.encoder.layernorm_embedding.weight.__setitem__(0, float("nan")))
    with pytest.raises(InputError) as e:
        _closed_book(tiny_corpus, folder, tmp_path / "cb")
    assert e.value.source == str(folder) and "model.encoder.layernorm_embedding.weight" in e.value.message
    assert "lr" not in e.value.message and "\n" not in str(e.value)
    assert not (tmp_path / "cb").exists()


def test_a_closed_book_loss_overflowing_before_any_update_names_the_generator(tiny_corpus, broken_generator, tmp_path):
    """Finite weights too large for the loss (embeddings x 1e36): NaN at step 1, blamed on --lr as well."""
    folder = broken_generator("gbig", lambda g: g.model.shared.weight.mul_(1e36))
    with pytest.raises(InputError) as e:
        _closed_book(tiny_corpus, folder, tmp_path / "cb")
    assert e.value.source == str(folder) and "at step 1, before any update" in e.value.message
    assert "--lr" not in str(e.value) and not (tmp_path / "cb").exists()


@pytest.mark.parametrize("setting, field, names", [
    ("init_std=1e30", "init_std", ["init_std (now 1e+30)"]),
    ("denoise_weight=1e308", None, ["init_std", "denoise_weight (now 1e+308)"]),
])
def test_pretraining_whose_loss_overflows_at_step_1_does_not_blame_the_lr(setting, field, names, tmp_path,
                                                                          monkeypatch, capsys):
    """--set init_std=1e30 (or denoise_weight=1e308): the loss was NaN (inf) at step 1, before any update,
    and the line said "field 'lr': ... lower lr". A loss that overflows after updates still names lr
    (test_audit_pretrain_dpr: lr=1e30)."""
    out = tmp_path / "g"
    code, _, err = run_main(monkeypatch, capsys, "pretrain", "--preset", "tiny", "--steps", 2, "--device", "cpu",
                            "--set", setting, "--out", out)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("error: --set: " + (f"field '{field}': " if field else "") + "the loss was ")
    assert "at step 1, before any update" in err and all(n in err for n in names), err
    assert "field 'lr'" not in err and "lower lr" not in err
    assert not out.exists()


@pytest.mark.parametrize("key, fine, refused", [("tokenizer_docs", 1_000_000, 10**12),
                                                 ("snapshot_b_share", 0.9, 0.999)])
def test_pretrain_caps_tokenizer_docs_and_snapshot_b_share(key, fine, refused, tmp_path, monkeypatch, capsys):
    """tokenizer_docs=1e12 was accepted (a corpus of 3e12 questions built before any step); snapshot_b_share
    0.999 passed its `< 1` check and its first refill buffered 226,000 pairs (762 MB), more hung."""
    from lewisrag.commands.pretrain import parse_overrides

    assert parse_overrides([f"{key}={fine}"]) == {key: fine}
    with pytest.raises(InputError):  # before the command: an old build would run it for hours
        parse_overrides([f"{key}={refused}"])
    code, _, err = run_main(monkeypatch, capsys, "pretrain", "--preset", "tiny", "--steps", 1, "--device", "cpu",
                            "--set", f"{key}={refused}", "--out", tmp_path / "g")
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"error: --set: {key} must be at most {fine}, "), err
    assert not (tmp_path / "g").exists()
