"""Advice that sent users the wrong way, and help that lost a word:

- `compare --run RUN` on a reproduction killed before its stitched stage advised `lewisrag reproduce`,
  which, followed as written (no --resume), redid every stage; a folder that is no reproduction keeps
  that advice.
- a base preset's refused resume named a flag left out as Python's None (`--steps None (the run's: 1)`).
- `lewisrag gate --help` lost its example system name: rich read `[rag_token]` as markup.
"""

from __future__ import annotations

import json

import pytest

from lewisrag.data.io import InputError
from lewisrag.data.outputs import mark
from lewisrag.experiments.compare import check_systems
from lewisrag.experiments.presets import resume_differences


def test_a_reproduction_missing_a_stage_is_finished_by_resume(tmp_path):
    run = tmp_path / "RUN"
    mark(run, "reproduction")
    (run / "config.json").write_text(json.dumps({"preset": {"name": "tiny"}}))
    (run / "world").mkdir()
    (run / "stages").mkdir()
    (run / "stages" / "world.json").write_text("{}")
    with pytest.raises(InputError, match=r"no trained 'stitched' system in this run \(`lewisrag reproduce --resume` "
                                         r"with the run's own flags finishes it\)"):
        check_systems(run, ["stitched"])
    plain = tmp_path / "plain"  # no reproduction: made by none
    plain.mkdir()
    with pytest.raises(InputError, match=r"\(run `lewisrag reproduce` first\)"):
        check_systems(plain, ["rag_token"])


def test_a_flag_left_out_is_named_as_not_given():
    run = {"preset": {"name": "base", "lang": "en"}, "seed": 0, "assets": {"steps": 1, "passages_b": "b.jsonl"}}
    said = resume_differences(run, {**run, "assets": {"steps": None, "max_passages": 100}})
    assert said == ["--max-passages 100 (the run's: not given)", "--passages-b not given (the run's: b.jsonl)",
                    "--steps not given (the run's: 1)"]
    assert not any("None" in s for s in said)


def test_the_gate_help_keeps_its_example_system(monkeypatch, capsys):
    from conftest import run_main

    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_main(monkeypatch, capsys, "gate", "--help")
    assert code == 0 and "(faithfulness < 1 [rag_token])" in out, out
