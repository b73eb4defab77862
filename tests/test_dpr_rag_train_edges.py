"""Edges of DPR and RAG training a run used to pass in silence: an fp16 `train dpr` whose gradient scaler
skipped every step (the starting encoders saved as trained, exit 0), a `train rag --resume` whose index
was rebuilt at its path from the same passages by another context encoder, and questions or steps left
without a negative to learn from (no BM25 or self-mined negative; a batch whose passages are all gold
for all its questions, a loss of 0)."""

from __future__ import annotations

import json
import re
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from conftest import one_thread, run_main, write_jsonl
from lewisrag.commands import _ui
from lewisrag.data.io import InputError, LewisragWarning
from lewisrag.data.records import read_passages, read_qa
from lewisrag.index.encoders import DPRCheckpoint
from lewisrag.training import dpr as dpr_module
from lewisrag.training import rag
from lewisrag.training.dpr import DPRTrainConfig, train_dpr
from test_rag_train import log_lines, make_config, rag_inputs  # noqa: F401  (session fixture)

TINY = dict(vocab_size=300, hidden_size=16, layers=1, heads=2, batch_size=4, device="cpu")


# --- 1. fp16 DPR: every step skipped by the gradient scaler ---------------------------------------------


def test_an_fp16_dpr_run_whose_every_step_overflows_is_refused_and_saves_nothing(tiny_corpus, tmp_path, monkeypatch):
    """Weights finite in float32 but past fp16's 65504: every fp16 step's gradients overflow, the scaler
    skips them all and the weights stay the starting ones, finite, which the NaN check let through."""
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    with one_thread():
        train_dpr(DPRTrainConfig(steps=0, **TINY), qa, passages, tmp_path / "start")
    ckpt = DPRCheckpoint.load(tmp_path / "start")
    with torch.no_grad():
        for enc in (ckpt.question_encoder.question_encoder, ckpt.ctx_encoder.ctx_encoder):
            enc.bert_model.encoder.layer[0].intermediate.dense.weight.mul_(1e7)
    ckpt.save(tmp_path / "start")
    # the CPU standing in for a GPU: fp16 autocast with an enabled gradient scaler
    monkeypatch.setattr(dpr_module, "single_device",
                        lambda device, mp: (torch.device("cpu"), torch.amp.GradScaler("cpu", enabled=True)))
    cfg = DPRTrainConfig(init=str(tmp_path / "start"), batch_size=4, steps=3, self_negatives_at=0.0, device="cpu",
                         mixed_precision="fp16")
    with one_thread(), pytest.raises(InputError, match=re.escape("under fp16 the gradient scaler skipped 3 of the 3 "
                                                                 "steps")) as e:
        train_dpr(cfg, qa, passages, tmp_path / "out")
    assert "training diverged" in str(e.value) and "--mixed-precision bf16" in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "out").exists()


# --- 2. train rag --resume: the index's context encoder, not only its passages -------------------------------


class Killed(Exception):
    pass


def _reencoded(rag_inputs, dpr: Path, index: Path) -> None:  # noqa: F811
    """`dpr` changed (both encoders' weights scaled) and `index` built again at its path from the same
    passages by it: another context encoder's vectors."""
    from lewisrag.index.dense import build_dense_index

    ckpt = DPRCheckpoint.load(dpr)
    with torch.no_grad():
        for enc in (ckpt.question_encoder.question_encoder, ckpt.ctx_encoder.ctx_encoder):
            for p in enc.parameters():
                p.mul_(1.5)
    ckpt.save(dpr)
    shutil.rmtree(index)
    with one_thread():
        build_dense_index(read_passages(rag_inputs["world"] / "passages_a.jsonl"), dpr, index)


def test_a_resume_whose_index_another_context_encoder_rebuilt_is_refused(rag_inputs, tmp_path):  # noqa: F811
    from lewisrag.index.store import read_manifest

    dpr = Path(shutil.copytree(rag_inputs["dpr"], tmp_path / "dpr"))
    index = Path(shutil.copytree(rag_inputs["index"], tmp_path / "index"))
    cfg = make_config(rag_inputs, index=str(index), encoder=str(dpr), steps=3, eval_every=0, save_every=1)
    run = tmp_path / "run"

    def stop(done: int, total: int, record: dict) -> None:  # a kill after step 2, its checkpoint saved
        if done == 2:
            raise Killed

    with one_thread(), pytest.raises(Killed):
        rag.train_rag(cfg, run, on_progress=stop)
    was = read_manifest(index)
    state = run / "checkpoint" / "state.json"
    for file in (state, run / "config.json"):
        assert json.loads(file.read_text())["index_ctx_fingerprint"] == was["encoder"]["ctx_fingerprint"]
    _reencoded(rag_inputs, dpr, index)
    now = read_manifest(index)
    assert now["content_hash"] == was["content_hash"]
    assert now["encoder"]["ctx_fingerprint"] != was["encoder"]["ctx_fingerprint"]
    with pytest.raises(InputError, match=re.escape(
            f"{state}: field 'index_ctx_fingerprint': --resume with another index than the run's, the same passages "
            f"encoded by another context encoder: --index {index} was built by context encoder "
            f"{now['encoder']['ctx_fingerprint']}, the run's by {was['encoder']['ctx_fingerprint']}")) as e:
        rag.train_rag(cfg, run, resume=True)
    assert "--encoder" in str(e.value) and "\n" not in str(e.value) and len(log_lines(run)) == 2
    # a run recorded before the field existed resumes as it did, and records it from then on
    for file in (state, run / "config.json"):
        record = json.loads(file.read_text())
        del record["index_ctx_fingerprint"]
        file.write_text(json.dumps(record))
    with one_thread():
        assert rag.train_rag(cfg, run, resume=True)["steps"] == 3
    assert json.loads(state.read_text())["index_ctx_fingerprint"] == now["encoder"]["ctx_fingerprint"]


def test_a_damaged_encoder_record_is_one_line_naming_the_field(rag_inputs, tmp_path):  # noqa: F811
    from lewisrag.training import rag_run

    cfg = make_config(rag_inputs, steps=3)
    run = tmp_path / "run"
    run.mkdir()
    rag_run.mark(run, rag_run.KIND)
    recorded = rag_run._recorded(rag_run.data_fingerprints(cfg), rag_run.index_fingerprint(cfg))
    (run / "config.json").write_text(json.dumps(rag_run._run_config(cfg, {**recorded, "index_ctx_fingerprint": 7})))
    with pytest.raises(InputError, match=re.escape(f"{run / 'config.json'}: field 'index_ctx_fingerprint'") + ".*damaged"):
        rag_run._check_out(run, cfg, True, recorded["data_sha256"], None, recorded["index_passages"],
                           recorded["index_ctx_fingerprint"])


# --- 3. questions and steps without a negative ----------------------------------------------------------------


def _write(tmp_path: Path, passages: list[dict], questions: list[dict]) -> tuple[Path, Path]:
    return write_jsonl(tmp_path / "p.jsonl", passages), write_jsonl(tmp_path / "q.jsonl", questions)


def test_questions_without_a_bm25_or_self_mined_negative_are_counted(tmp_path):
    """Every passage holds every question's answer: BM25 and the model find no negative for any of them."""
    p, q = _write(tmp_path, [{"id": f"p{i}", "title": f"T{i}", "text": f"Thing{i} is red and round."} for i in range(6)],
                  [{"id": f"q{i}", "question": f"What colour is thing{i}?", "answers": ["red"],
                    "gold_passage_ids": [f"p{i}"]} for i in range(6)])
    with one_thread(), warnings.catch_warnings():
        warnings.simplefilter("error", LewisragWarning)  # in-batch negatives are there: no step without one
        meta = train_dpr(DPRTrainConfig(steps=2, self_negatives_at=0.5, **TINY), read_qa(q), read_passages(p),
                         tmp_path / "out")
    assert meta["config"]["hard_negatives_from"] == "bm25"
    assert (meta["n_no_bm25_negative"], meta["n_no_self_negative"], meta["n_steps_no_negative"]) == (6, 6, 0)
    saved = json.loads((tmp_path / "out" / "lewisrag_dpr.json").read_text())
    assert (saved["n_no_bm25_negative"], saved["n_no_self_negative"]) == (6, 6)


def test_a_step_with_no_negative_at_all_is_warned_once_and_counted(tmp_path, monkeypatch, capsys):
    """One passage, gold for all three questions: each step's batch masks every column but each
    question's own, and the loss is 0."""
    p, q = _write(tmp_path, [{"id": "p0", "title": "T", "text": "Thing is red and round."}],
                  [{"id": f"q{i}", "question": f"What colour is thing {i}?", "answers": ["blue"],
                    "gold_passage_ids": ["p0"]} for i in range(3)])
    with one_thread(), warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        meta = train_dpr(DPRTrainConfig(**{**TINY, "batch_size": 3, "steps": 3, "self_negatives_at": 0.5}),
                         read_qa(q), read_passages(p), tmp_path / "a")
    ours = [str(w.message) for w in said if issubclass(w.category, LewisragWarning)]
    assert len(ours) == 1 and ours[0].startswith("3 of the 3 steps (the first: step 1) had no negative to learn from")
    assert meta["n_steps_no_negative"] == 3 and meta["n_no_bm25_negative"] == meta["n_no_self_negative"] == 3
    assert json.loads((tmp_path / "a" / "lewisrag_dpr.json").read_text())["n_steps_no_negative"] == 3
    args = ["train", "dpr", "--train", q, "--passages", p, "--steps", 2, "--batch-size", 3, "--vocab-size", 300,
            "--hidden-size", 16, "--layers", 1, "--device", "cpu", "--self-negatives-at", 0]
    with one_thread():
        code, out, err = run_main(monkeypatch, capsys, *args, "--out", tmp_path / "b", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["n_steps_no_negative"], summary["n_no_bm25_negative"]) == (2, 3)
    assert "n_no_self_negative" not in summary  # --self-negatives-at 0 mines none
    monkeypatch.setattr(_ui.out, "width", 200)  # the summary's cells on one line each
    with one_thread():
        code, out, err = run_main(monkeypatch, capsys, *args, "--out", tmp_path / "c")
    assert code == 0, err
    assert re.search(r"without a BM25 negative\s*│\s*3", out) and re.search(r"steps without a negative \(loss 0\)\s*│\s*2", out), out
