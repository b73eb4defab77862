"""`train stitched` and the closed-book baseline, audited: the length check measured a question with
several gold passages as `place_gold` stitches it (the other gold ones dropped), while
`--gold-position retrieved` trains on `keep_rank`'s top k (every gold one kept), so longer inputs
passed and were cut in silence; and under fp16 a run whose every step the gradient scaler skipped
(or whose last loss was inf) saved the untrained generator with exit 0. fp16 is simulated on the CPU:
a scaler that is enabled, and a loss multiplied by inf at the steps that overflow."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
import torch

from conftest import one_thread, write_jsonl
from lewisrag.data.io import InputError
from lewisrag.training import closed_book as CB
from lewisrag.training import stitched_train as S
from lewisrag.training.pretrain import SHIPPED_DIR
from test_rag_train import rag_inputs  # noqa: F401  (session fixture)


def _stitched_config(rag_inputs, **overrides):  # noqa: F811
    base = dict(index=str(rag_inputs["index"]), generator=str(rag_inputs["gen"]),
                train=str(rag_inputs["world"] / "train.jsonl"), train_kinds="short", k=2, steps=2, batch_size=2,
                device="cpu")
    return S.StitchedTrainConfig(**{**base, **overrides})


def _several_gold(rag_inputs, path, k: int):  # noqa: F811
    """Short questions whose gold ids are their gold passage and every passage of their top k: `place_gold`
    stitches the gold one alone (no non-gold other is left), `keep_rank` all k. Returns (file, limit):
    the longest input as `place_gold` stitches it, in tokens (what the old check measured)."""
    from transformers import AutoTokenizer

    from lewisrag.index import open_retriever
    from lewisrag.rag_model.stitched import StitchSettings, stitch

    rows = [json.loads(line) for line in (rag_inputs["world"] / "train.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r.get("kind") == "short" and r.get("answers") and r.get("gold_passage_ids")][:6]
    retriever = open_retriever(rag_inputs["index"], None)
    for r, hits in zip(rows, retriever.search([r["question"] for r in rows], k)):
        r["gold_passage_ids"] = [r["gold_passage_ids"][0], *(h.id for h in hits if h.id != r["gold_passage_ids"][0])]
    write_jsonl(path, rows)
    by_id = {p.id: p for p in retriever.index.passages}
    tokenizer, settings = AutoTokenizer.from_pretrained(rag_inputs["gen"]), StitchSettings(k=k)
    placed = [len(tokenizer(stitch(r["question"], [by_id[r["gold_passage_ids"][0]]], settings))["input_ids"]) for r in rows]
    kept = [len(tokenizer(stitch(r["question"], [by_id[i] for i in r["gold_passage_ids"][1 : k + 1]], settings))["input_ids"])
            for r in rows]
    assert all(len(r["gold_passage_ids"]) > 2 for r in rows) and max(kept) > max(placed)  # the fixture shows the gap
    return path, max(placed)


def test_several_gold_passages_are_measured_as_retrieval_rank_stitches_them(rag_inputs, tmp_path):  # noqa: F811
    """--gold-position retrieved with questions of several gold ids: the check measured the gold passage
    alone (`place_gold` drops the other gold ones, and here no non-gold one is left), training stitched
    the top k as retrieved (`keep_rank` keeps them all), longer than the generator reads: the check
    passed and `_loss` cut the later passages in silence. At a random position the same file trains:
    `place_gold` stitches there what it measured."""
    train, limit = _several_gold(rag_inputs, tmp_path / "train.jsonl", 2)
    cfg = _stitched_config(rag_inputs, train=str(train), train_kinds="", gold_position="retrieved",
                           max_input_length=limit, max_target_length=None, steps=1)
    with one_thread(), pytest.raises(InputError, match=rf"^{re.escape(str(train))}: field '--n-docs': question '.+': its 2 "
                                                       rf"stitched passages and question are \d+ tokens, more than the "
                                                       rf"{limit} the generator reads: .* lower --n-docs$"):
        S.train_stitched(cfg, tmp_path / "retrieved", check_lengths=True)
    assert not (tmp_path / "retrieved").exists()
    with one_thread():
        S.train_stitched(replace(cfg, gold_position="random"), tmp_path / "random", check_lengths=True)


def _scaled_cpu(monkeypatch, module):
    """fp16's gradient scaler, enabled on the CPU (the forward passes stay float32: nothing overflows by itself)."""
    monkeypatch.setattr(module, "single_device", lambda device, mp: (torch.device("cpu"), torch.amp.GradScaler("cpu")))


def _overflow_at(steps: set[int]):
    """A wrapper of a loss function multiplying the loss by inf at `steps` (1-based): the scaler skips them."""
    def wrap(loss_fn):
        calls = [0]

        def loss(*a, **kw):
            calls[0] += 1
            out = loss_fn(*a, **kw)
            if calls[0] not in steps:
                return out
            return (out[0] * float("inf"), *out[1:]) if isinstance(out, tuple) else out * float("inf")
        return loss
    return wrap


def _unchanged(generator_dir, saved_dir) -> bool:
    from transformers import AutoModelForSeq2SeqLM

    a, b = (AutoModelForSeq2SeqLM.from_pretrained(d).state_dict() for d in (generator_dir, saved_dir))
    return all(torch.equal(a[n], b[n]) for n in a if n in b and a[n].shape == b[n].shape)


@pytest.mark.parametrize("overflows, steps, skipped, last", [({1, 2}, 2, 2, "inf"), ({2}, 2, 1, "inf")])
def test_stitched_fp16_run_whose_scaler_skipped_every_step_is_refused(rag_inputs, tmp_path, monkeypatch,  # noqa: F811
                                                                      overflows, steps, skipped, last):
    """Under fp16 the loss check was skipped ("the scaler skips such a step") and the weights check passed,
    skipped steps never changing the weights: a run whose every step overflowed, or whose last loss was
    inf, exited 0 and saved the generator as it started (`--json` printed Infinity)."""
    _scaled_cpu(monkeypatch, S)
    monkeypatch.setattr(S, "_loss", _overflow_at(overflows)(S._loss))
    with one_thread(), pytest.raises(InputError) as e:
        S.train_stitched(_stitched_config(rag_inputs, steps=steps), tmp_path / "s")
    assert str(e.value) == (f"--lr: under fp16 the gradient scaler skipped {skipped} of the {steps} steps (inf or NaN "
                            f"gradients) and the last loss was {last}: training diverged; lower --lr (now 0.0001) or "
                            "train with --mixed-precision bf16"), e.value
    assert not list(tmp_path.iterdir())


def test_stitched_fp16_run_with_early_skipped_steps_trains(rag_inputs, tmp_path, monkeypatch):  # noqa: F811
    """The scaler calibrating: the first steps overflow and are skipped, the last one updates the weights."""
    _scaled_cpu(monkeypatch, S)
    monkeypatch.setattr(S, "_loss", _overflow_at({1, 2})(S._loss))
    with one_thread():
        summary = S.train_stitched(_stitched_config(rag_inputs, steps=3), tmp_path / "s")
    assert summary["first_loss"] == float("inf") and summary["final_loss"] < float("inf")
    assert not _unchanged(rag_inputs["gen"], tmp_path / "s")


def _closed_book(tiny_corpus, **kw) -> CB.ClosedBookConfig:
    base = dict(generator=str(SHIPPED_DIR / "generator-small"), train=str(tiny_corpus["qa"]), steps=2, batch_size=4,
                lr=1e-3, device="cpu")
    return CB.ClosedBookConfig(**{**base, **kw})


@pytest.mark.parametrize("overflows, skipped", [({1, 2}, 2), ({2}, 1)])
def test_closed_book_fp16_run_whose_scaler_skipped_every_step_is_refused(tiny_corpus, tmp_path, monkeypatch,
                                                                         overflows, skipped):
    """The closed-book loop had the same gap: every step skipped (or the last loss inf), its log all
    `skipped_inf`, the untrained generator saved in final/ with exit 0."""
    _scaled_cpu(monkeypatch, CB)
    monkeypatch.setattr(CB, "_step_loss", _overflow_at(overflows)(CB._step_loss))
    with one_thread(), pytest.raises(InputError) as e:
        CB.train_closed_book(_closed_book(tiny_corpus), tmp_path / "cb")
    assert str(e.value) == (f"--lr: under fp16 the gradient scaler skipped {skipped} of the 2 steps (inf or NaN "
                            "gradients) and the last loss was inf: training diverged; lower --lr (now 0.001) or train "
                            "with --mixed-precision bf16"), e.value
    assert not list(tmp_path.iterdir())


def test_closed_book_fp16_run_with_an_early_skipped_step_trains(tiny_corpus, tmp_path, monkeypatch):
    """The scaler calibrating: step 1 skipped (logged), step 2 updates the weights; the run is kept."""
    _scaled_cpu(monkeypatch, CB)
    monkeypatch.setattr(CB, "_step_loss", _overflow_at({1})(CB._step_loss))
    with one_thread():
        CB.train_closed_book(_closed_book(tiny_corpus), tmp_path / "cb")
    log = [json.loads(line) for line in (tmp_path / "cb" / "log.jsonl").read_text().splitlines()]
    assert [r["skipped_inf"] for r in log] == [True, False]
    assert not _unchanged(SHIPPED_DIR / "generator-small", tmp_path / "cb" / "final")
