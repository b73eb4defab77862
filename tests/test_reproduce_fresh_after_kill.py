"""A run begun afresh over a finished reproduction, then killed, and what the next `--resume` of it
finds; and a refused `--resume` that must leave the run as it was.

The kill is a KeyboardInterrupt raised where the first RAG stage would start, in a fresh run (no
--resume) over a copy of the session's finished tiny run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import copy_run, run_main
from lewisrag.experiments import stages as S
from lewisrag.experiments.presets import PRESETS
from lewisrag.experiments.reproduce import reproduce

RAG_STAGES = ("rag_token", "rag_sequence", "rag_token_frozen")


def _boom(*args, **kwargs):
    raise KeyboardInterrupt


def test_a_resume_after_a_fresh_run_killed_before_its_rag_stages_trains_them_anew(tiny_qa_run, tmp_path, monkeypatch,
                                                                                 capsys):
    """A fresh run forgot the former run's stage records but kept its RAG folders, and its RAG stages
    always call train_rag(resume=True), discarding the folder only when the current call has no
    --resume. Killed before those stages, the fresh run (seed 1) left seed 0's RUN/rag_token; the next
    --resume took that run's checkpoint and final model for its own (refused here, with advice the
    user could not follow, as --seed differs from the RAG run's; with another --threads it was
    recorded "done" in 0.2 s and failed later on the index pairing). start_run now discards the RAG
    folders of the fresh run's stages before any stage runs."""
    run = copy_run(tiny_qa_run, tmp_path / "run")
    with monkeypatch.context() as m:
        m.setattr(S, "rag", _boom)
        with pytest.raises(KeyboardInterrupt):
            reproduce(PRESETS["tiny"], run, seed=1)
    assert S.stage_record(run, "generator").exists() and not S.stage_record(run, "rag_token").exists()
    assert not any((run / name).exists() for name in RAG_STAGES)  # the former run's RAG models are gone
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run, "--seed", "1", "--resume")
    assert code == 0, err
    for name in RAG_STAGES:  # trained by this run, from its own seed, retriever and index
        config = json.loads((run / name / "final" / "train_config.json").read_text(encoding="utf-8"))
        assert config["seed"] == 1, name
    assert json.loads((run / "config.json").read_text(encoding="utf-8"))["seed"] == 1


def test_a_refused_resume_in_another_report_language_keeps_the_compare_record(tiny_qa_run, tmp_path, monkeypatch, capsys):
    """A --resume in another --report-lang forgot stages/compare.json (to redo it in the new language)
    before start_run checked --cpu-linear: the resume was then refused (exit 2), yet the run had lost
    its finished compare stage. The record goes now only once every check passed."""
    run = copy_run(tiny_qa_run, tmp_path / "run")
    was = json.loads((run / "config.json").read_text(encoding="utf-8"))["cpu_linear"]
    other = "onednn" if was == "blas" else "blas"
    before = S.stage_record(run, "compare").read_bytes()
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run, "--seed", "0", "--resume",
                            "--report-lang", "zh", "--cpu-linear", other)
    assert code == 2 and f"--cpu-linear {was}" in err, err
    assert S.stage_record(run, "compare").read_bytes() == before
