"""`train rag`'s guards of a run across a kill: a --resume whose --index was rebuilt at the same path
from other passages (refused, naming the index and both fingerprints; a run recorded before the
field resumes), an fp16 run whose every step the gradient scaler skipped (refused as diverged, the
count kept across a resume), and a killed --overwrite run rerun with a flag a resume may change
(RESUMABLE_CHANGES: it goes on from its checkpoint). Also the warmup steps of every trainer, not cut
below a whole number by floating point (int(0.58 * 50) was 28)."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from conftest import one_thread
from lewisrag.data.io import InputError
from lewisrag.training import rag
from test_rag_train import log_lines, make_config, rag_inputs  # noqa: F401  (session fixture)


class Interrupted(Exception):
    pass


def _killed_at(cfg, out: Path, step: int, **kwargs) -> None:
    """`cfg`'s run in `out`, stopped as a kill would after `step` steps (its later checkpoints unsaved)."""

    def stop(done: int, total: int, record: dict) -> None:
        if done == step:
            raise Interrupted

    with one_thread(), pytest.raises(Interrupted):
        rag.train_rag(cfg, out, on_progress=stop, **kwargs)


def _own_index(rag_inputs, folder: Path) -> Path:  # noqa: F811
    return Path(shutil.copytree(rag_inputs["index"], folder))


def _rebuild_from_snapshot_b(rag_inputs, index: Path) -> dict:  # noqa: F811
    """The index at `index` built again from the world's other snapshot (the same ids, other texts); its manifest."""
    from lewisrag.data.records import read_passages
    from lewisrag.index.dense import build_dense_index
    from lewisrag.index.store import read_manifest

    shutil.rmtree(index)
    with one_thread():
        build_dense_index(read_passages(rag_inputs["world"] / "passages_b.jsonl"), rag_inputs["dpr"], index)
    return read_manifest(index)


def _refusal(file: Path, index: Path, now: dict, was: dict) -> str:
    return re.escape(f"{file}: field 'index_passages': --resume with another index than the run's, the same path holding "
                     f"other passages: --index {index} (content_hash {now['content_hash']}, {now['n_passages']} passages; "
                     f"the run's {was['content_hash']}, {was['n_passages']} passages)")


# --- 1. the index's passages, not only its path -------------------------------------------------------


def test_a_resume_whose_index_was_rebuilt_from_other_passages_is_refused(rag_inputs, tmp_path):  # noqa: F811
    from lewisrag.index.store import read_manifest

    index = _own_index(rag_inputs, tmp_path / "index")
    cfg = make_config(rag_inputs, index=str(index), steps=3, eval_every=0, save_every=1)
    run = tmp_path / "run"
    _killed_at(cfg, run, 2)
    was = {k: read_manifest(index)[k] for k in ("content_hash", "n_passages")}
    state = run / "checkpoint" / "state.json"
    assert json.loads(state.read_text())["index_passages"] == was
    assert json.loads((run / "config.json").read_text())["index_passages"] == was
    now = _rebuild_from_snapshot_b(rag_inputs, index)
    assert now["content_hash"] != was["content_hash"]
    with pytest.raises(InputError, match=_refusal(state, index, now, was)) as e:
        rag.train_rag(cfg, run, resume=True)
    assert "\n" not in str(e.value) and len(log_lines(run)) == 2
    # a run recorded before the field existed resumes unchecked, and records it from then on
    for file in (state, run / "config.json"):
        record = json.loads(file.read_text())
        del record["index_passages"]
        file.write_text(json.dumps(record))
    with one_thread():
        assert rag.train_rag(cfg, run, resume=True)["steps"] == 3
    assert json.loads(state.read_text())["index_passages"]["content_hash"] == now["content_hash"]


def test_a_resume_before_the_first_checkpoint_compares_the_index_of_config_json(rag_inputs, tmp_path):  # noqa: F811
    from lewisrag.index.store import read_manifest

    index = _own_index(rag_inputs, tmp_path / "index")
    cfg = make_config(rag_inputs, index=str(index), steps=3, eval_every=0, save_every=3)
    run = tmp_path / "run"
    _killed_at(cfg, run, 1)
    assert not (run / "checkpoint").exists()
    was = {k: read_manifest(index)[k] for k in ("content_hash", "n_passages")}
    now = _rebuild_from_snapshot_b(rag_inputs, index)
    with pytest.raises(InputError, match=_refusal(run / "config.json", index, now, was)):
        rag.train_rag(cfg, run, resume=True)


def test_a_damaged_index_record_is_one_line_naming_the_field(rag_inputs, tmp_path):  # noqa: F811
    from lewisrag.training import rag_run

    cfg = make_config(rag_inputs, steps=3, eval_every=0, save_every=3)
    run = tmp_path / "run"
    _killed_at(cfg, run, 1)
    record = json.loads((run / "config.json").read_text())
    record["index_passages"] = {"content_hash": 7}
    (run / "config.json").write_text(json.dumps(record))
    with pytest.raises(InputError, match=re.escape(f"{run / 'config.json'}: field 'index_passages'") + ".*damaged"):
        rag_run._check_out(run, cfg, True, index=rag_run.index_fingerprint(cfg))


# --- 2. fp16: every step skipped by the gradient scaler -------------------------------------------------


def test_an_fp16_run_whose_every_step_the_scaler_skipped_is_refused_as_diverged(rag_inputs, tmp_path,  # noqa: F811
                                                                                   monkeypatch):
    """Skipped steps leave the weights as they were, finite: the run saved its untrained model, exit 0.
    The count is kept in the checkpoint, so a resumed run counts the steps skipped before its kill."""
    monkeypatch.setattr(rag, "_check_precision", lambda cfg: None)  # fp16 on the CPU, as tests/test_rag_precision.py
    micro_step = rag._micro_step

    def overflowing(cfg, acc, parts, model, *rest):
        result = micro_step(cfg, acc, parts, model, *rest)
        with torch.no_grad():
            next(p for p in model.generator.parameters() if p.grad is not None).grad.view(-1)[0] = float("inf")
        return result

    monkeypatch.setattr(rag, "_micro_step", overflowing)
    cfg = make_config(rag_inputs, steps=3, eval_every=0, save_every=1, mixed_precision="fp16")
    run = tmp_path / "run"
    _killed_at(cfg, run, 2)  # before step 2's checkpoint
    state = run / "checkpoint" / "state.json"
    saved = json.loads(state.read_text())
    assert (saved["step"], saved["skipped_inf"]) == (1, 1)
    state.write_text(json.dumps({**saved, "skipped_inf": 2}))  # more steps than the checkpoint's
    with pytest.raises(InputError, match=re.escape(f"{state}: field 'skipped_inf'") + ".*the checkpoint is damaged"):
        rag.train_rag(cfg, run, resume=True)
    state.write_text(json.dumps(saved))
    with one_thread(), pytest.raises(InputError) as e:
        rag.train_rag(cfg, run, resume=True)
    assert re.fullmatch(re.escape("--lr: under fp16 the gradient scaler skipped 3 of the 3 steps (inf or NaN gradients) "
                                  "and the last loss was ") + r"\S+: training diverged; lower --lr \(now 0\.01\) or "
                        r"--retriever-lr-scale \(now 1\) or train with --mixed-precision bf16", str(e.value))
    assert all(json.loads(line)["skipped_inf"] for line in log_lines(run))
    assert not (run / "final").exists() and not (run / "best").exists()


# --- 3. a killed --overwrite run, rerun with a flag a resume may change --------------------------------


def test_a_killed_overwrite_run_goes_on_with_a_resumable_change_and_starts_afresh_on_another_index(rag_inputs,  # noqa: F811
                                                                                                   tmp_path):
    index = _own_index(rag_inputs, tmp_path / "index")
    cfg = make_config(rag_inputs, index=str(index), steps=4, save_every=2, eval_every=0)
    runs = tmp_path / "runs"
    runs.mkdir()
    out = runs / "run"
    with one_thread():
        rag.train_rag(replace(cfg, steps=1), out)  # an earlier run to overwrite
    _killed_at(cfg, out, 3, overwrite=True)
    seen = []
    with one_thread():
        rag.train_rag(replace(cfg, gradient_checkpointing=True), out, overwrite=True,
                      on_progress=lambda step, steps, record: seen.append(step))
    assert seen == [3, 4] and len(log_lines(out)) == 4  # from the checkpoint at step 2, not from step 0
    assert [p.name for p in runs.iterdir()] == ["run"]
    # a killed one whose index was then rebuilt from other passages: a new run beside it, not a refused resume
    _killed_at(cfg, out, 3, overwrite=True)
    _rebuild_from_snapshot_b(rag_inputs, index)
    seen.clear()
    with one_thread():
        rag.train_rag(cfg, out, overwrite=True, on_progress=lambda step, steps, record: seen.append(step))
    assert seen == [1, 2, 3, 4] and [p.name for p in runs.iterdir()] == ["run"]


# --- 4. warmup steps: not cut below a whole number by floating point -----------------------------------------------------------------


class Scheduled(Exception):
    pass


def _warmup(monkeypatch, module, name: str, position: int, run) -> int:
    """The warmup steps `run` hands `module.name` (argument `position`), the run stopped there."""

    def caught(*args, **kwargs):
        raise Scheduled(args[position])

    monkeypatch.setattr(module, name, caught)
    with one_thread(), pytest.raises(Scheduled) as e:
        run()
    return e.value.args[0]


def test_every_trainer_warms_up_for_its_whole_share_of_its_steps(rag_inputs, tmp_path, monkeypatch):  # noqa: F811
    """0.58 * 50 is 28.999999999999996 in floating point: int() gave 28 warmup steps for 29."""
    from lewisrag.data.records import read_passages, read_qa
    from lewisrag.training import closed_book, dpr, stitched_train
    from lewisrag.training.configs import ClosedBookConfig, DPRTrainConfig, StitchedTrainConfig

    assert int(0.58 * 50) == 28
    world, schedule = rag_inputs["world"], dict(steps=50, warmup=0.58)
    assert _warmup(monkeypatch, rag, "learning_rate_factor", 2,
                   lambda: rag.train_rag(make_config(rag_inputs, eval_every=0, **schedule), tmp_path / "rag")) == 29
    cb = ClosedBookConfig(generator=str(rag_inputs["gen"]), train=str(world / "train.jsonl"), batch_size=4, device="cpu",
                          **schedule)
    assert _warmup(monkeypatch, closed_book, "learning_rate_factor", 2,
                   lambda: closed_book.train_closed_book(cb, tmp_path / "closed_book")) == 29
    st = StitchedTrainConfig(index=str(rag_inputs["index"]), generator=str(rag_inputs["gen"]), train=str(world / "train.jsonl"),
                             train_kinds="short", k=2, batch_size=2, device="cpu", **schedule)
    assert _warmup(monkeypatch, stitched_train, "learning_rate_factor", 2,
                   lambda: stitched_train.train_stitched(st, tmp_path / "stitched")) == 29
    d = DPRTrainConfig(vocab_size=300, hidden_size=16, layers=1, heads=2, batch_size=8, hard_negatives=False, device="cpu",
                       **schedule)
    qa, passages = read_qa(world / "train.jsonl"), read_passages(world / "passages_a.jsonl")
    assert _warmup(monkeypatch, dpr, "get_linear_schedule_with_warmup", 1,
                   lambda: dpr.train_dpr(d, qa, passages, tmp_path / "dpr")) == 29
