"""Failed writes leave nothing half-written behind: a `train rag` refused or diverged before its first
checkpoint left config.json, log.jsonl and its marker in --out (the rerun with a lower --lr that a
divergence asks for was refused as a non-empty --out), while one that fails after a checkpoint, or is
interrupted, keeps what --resume needs; and a staged folder whose swap `replace_dir` refuses left its
`.NAME.tmp.*` staging folder until a sweep."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest
import torch

from conftest import one_thread
from lewisrag.data.io import InputError
from lewisrag.data.outputs import staged_dir
from test_rag_train import make_config, rag_inputs  # noqa: F401  (session fixture)


def _nan_from(monkeypatch, call: int) -> None:
    """Every optimizer step from the `call`-th on leaves a NaN weight (the run stops at the next check)."""
    from lewisrag.training import rag

    real, calls = rag.optimizer_step, []

    def step(opt, sched, scaler):
        out = real(opt, sched, scaler)
        calls.append(1)
        if len(calls) >= call:
            with torch.no_grad():
                opt.param_groups[0]["params"][-1].fill_(float("nan"))
        return out

    monkeypatch.setattr(rag, "optimizer_step", step)


def _interrupted(step, steps, record):
    raise KeyboardInterrupt  # Ctrl-C after step 1, before any checkpoint


@pytest.mark.parametrize("empty", [False, True])
def test_a_run_that_diverges_before_its_first_checkpoint_leaves_out_as_it_was(rag_inputs, tmp_path, monkeypatch,
                                                                              empty):  # noqa: F811
    from lewisrag.training.rag import train_rag

    out = tmp_path / "run"
    if empty:
        out.mkdir()
    cfg = make_config(rag_inputs, steps=3, eval_every=1, save_every=3, cpu=True)
    _nan_from(monkeypatch, 1)
    with one_thread(), pytest.raises(InputError, match="training diverged"):
        train_rag(cfg, out)
    assert (sorted(os.listdir(out)) == [] if empty else not out.exists()), sorted(os.listdir(out))
    assert os.listdir(tmp_path) == (["run"] if empty else [])
    monkeypatch.undo()
    with one_thread():  # the rerun with a lower --lr, into the same --out, was refused as a non-empty folder
        assert train_rag(replace(cfg, lr=1e-3, steps=1, eval_every=0, save_every=1), out)["steps"] == 1


def test_a_diverged_run_keeps_a_file_the_user_put_there_and_no_marker(rag_inputs, tmp_path, monkeypatch):  # noqa: F811
    from lewisrag.training.rag import train_rag

    out = tmp_path / "run"

    def users_file(step, steps, record):
        (out / "notes.txt").write_text("mine")

    _nan_from(monkeypatch, 2)  # step 1 logs, step 2's evaluation finds NaN weights
    with one_thread(), pytest.raises(InputError, match="after step 2: training diverged"):
        train_rag(make_config(rag_inputs, steps=3, eval_every=2, save_every=3, cpu=True), out, on_progress=users_file)
    assert sorted(os.listdir(out)) == ["notes.txt"]


def test_an_interrupted_run_before_its_first_checkpoint_is_kept_for_its_resume(rag_inputs, tmp_path):  # noqa: F811
    """As a kill leaves it: a --resume with other settings is refused by its config.json."""
    from lewisrag.training.rag import train_rag

    out = tmp_path / "run"
    with one_thread(), pytest.raises(KeyboardInterrupt):
        train_rag(make_config(rag_inputs, steps=3, eval_every=0, save_every=3, cpu=True), out, on_progress=_interrupted)
    assert sorted(os.listdir(out)) == [".lewisrag", "config.json", "log.jsonl"]


def test_a_failed_overwrite_leaves_no_staging_folder_and_the_old_run(rag_inputs, tmp_path, monkeypatch):  # noqa: F811
    from lewisrag.training.rag import train_rag

    out = tmp_path / "run"
    cfg = make_config(rag_inputs, steps=1, eval_every=0, save_every=1, cpu=True)
    with one_thread():
        train_rag(cfg, out)
    before = sorted(os.listdir(out))
    _nan_from(monkeypatch, 1)
    with one_thread(), pytest.raises(InputError, match="training diverged"):
        train_rag(replace(cfg, steps=3, save_every=3, eval_every=1), out, overwrite=True)
    assert os.listdir(tmp_path) == ["run"] and sorted(os.listdir(out)) == before


def test_a_run_that_fails_after_a_checkpoint_keeps_what_resume_needs(rag_inputs, tmp_path, monkeypatch):  # noqa: F811
    from lewisrag.training import rag

    out = tmp_path / "run"
    cfg = make_config(rag_inputs, steps=3, eval_every=0, save_every=1, cpu=True)
    real = rag.optimizer_step
    _nan_from(monkeypatch, 2)  # step 1 checkpoints, step 2's weights turn NaN
    with one_thread(), pytest.raises(InputError, match="after step 2: training diverged"):
        rag.train_rag(cfg, out)
    assert {"config.json", "log.jsonl", "checkpoint", ".lewisrag"} <= set(os.listdir(out))
    assert json.loads((out / "checkpoint" / "state.json").read_text())["step"] == 1
    monkeypatch.setattr(rag, "optimizer_step", real)
    with one_thread():
        summary = rag.train_rag(cfg, out, resume=True)
    assert summary["steps"] == 3 and [json.loads(line)["step"] for line in
                                      (out / "log.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_a_resumed_run_without_a_checkpoint_that_diverges_keeps_its_folder(rag_inputs, tmp_path,
                                                                            monkeypatch):  # noqa: F811
    """A run killed before its first checkpoint, resumed and diverging: the folder held the run's files
    before this attempt, and keeps them (its config.json names the run a --resume compares with)."""
    from lewisrag.training.rag import train_rag

    out = tmp_path / "run"
    cfg = make_config(rag_inputs, steps=3, eval_every=1, save_every=3, cpu=True)
    with one_thread(), pytest.raises(KeyboardInterrupt):
        train_rag(cfg, out, on_progress=_interrupted)
    _nan_from(monkeypatch, 1)
    with one_thread(), pytest.raises(InputError, match="training diverged"):
        train_rag(cfg, out, resume=True)
    assert sorted(os.listdir(out)) == [".lewisrag", "config.json", "log.jsonl"]


def test_a_refused_swap_removes_its_staging_folder(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(InputError, match="was not written by lewisrag"):
        with staged_dir(out, "index") as tmp:
            (tmp / "a.txt").write_text("new")
            out.mkdir()
            (out / "users.txt").write_text("mine")  # put into --out while the command ran
    assert os.listdir(tmp_path) == ["out"] and os.listdir(out) == ["users.txt"]


def test_a_refused_swap_onto_a_file_removes_its_staging_folder(tmp_path):
    out = tmp_path / "new" / "out"
    with pytest.raises(InputError, match="exists and is not a folder"):
        with staged_dir(out) as tmp:
            (tmp / "a.txt").write_text("new")
            out.write_text("a file where the folder goes")
    assert os.listdir(tmp_path / "new") == ["out"] and out.is_file()
