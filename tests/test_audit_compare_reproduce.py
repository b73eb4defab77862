"""`lewisrag compare` and `lewisrag reproduce` as a user drives them: runs killed mid-stage, runs of
the base preset, flags that do not apply, resumes with other flags, stage outputs gone since they
were recorded. Built from folders and records alone: nothing here trains."""

from __future__ import annotations

import json

import pytest

from conftest import run_main
from lewisrag.data.io import InputError
from lewisrag.data.outputs import mark
from lewisrag.experiments import reproduce as R
from lewisrag.experiments.reproduce import check_resumed_config


def _killed_run(tmp_path, finished=("world",)):
    """A reproduction run folder whose listed stages finished, with rag_token's best/ from a first dev evaluation."""
    run = tmp_path / "run"
    (run / "world").mkdir(parents=True)
    (run / "rag_token" / "best").mkdir(parents=True)
    (run / "stages").mkdir()
    mark(run, "reproduction")
    (run / "config.json").write_text(json.dumps({"preset": {"name": "tiny"}, "seed": 0, "threads": 1}))
    for name in finished:
        (run / "stages" / f"{name}.json").write_text(json.dumps({"dir": name, "seconds": 1.0}))
    return run


def test_compare_refuses_a_system_whose_stage_did_not_finish(tmp_path, monkeypatch, capsys):
    """A run killed mid rag_token holds its best/ of the first dev evaluation: scored, it looked trained."""
    run = _killed_run(tmp_path)
    code, _, err = run_main(monkeypatch, capsys, "compare", "--run", run, "--systems", "rag_token",
                            "--position-questions", 0, "--out", tmp_path / "cmp")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "the run's rag_token stage did not finish" in err and "reproduce --resume" in err
    assert not (tmp_path / "cmp").exists()


def test_compare_says_a_base_run_has_no_world(tmp_path, monkeypatch, capsys):
    run = _killed_run(tmp_path, finished=("rag_token",))
    (run / "config.json").write_text(json.dumps({"preset": {"name": "base", "hub": ["model:facebook/bart-large"]}}))
    code, _, err = run_main(monkeypatch, capsys, "compare", "--run", run, "--systems", "rag_token", "--out", tmp_path / "cmp")
    assert code == 2 and "field '--run': a `reproduce --preset base` run, which has no built-in world" in err, err


def test_compare_systems_naming_none_says_so(tmp_path, monkeypatch, capsys):
    code, _, err = run_main(monkeypatch, capsys, "compare", "--run", _killed_run(tmp_path), "--systems", ",,",
                            "--out", tmp_path / "cmp")
    assert code == 2 and "--systems: names no system (choose from rag_token, rag_sequence, stitched)" in err, err


def test_compare_refuses_qa_fields_without_questions(tmp_path, monkeypatch, capsys):
    """The mapping was applied to the run's own eval.jsonl, which was then blamed for lacking the fields."""
    code, _, err = run_main(monkeypatch, capsys, "compare", "--run", _killed_run(tmp_path), "--qa-fields",
                            "question=q,answers=golds", "--out", tmp_path / "cmp")
    assert code == 2 and "--qa-fields: only applies with --questions" in err, err


@pytest.mark.parametrize(("change", "named"), [
    ({"seed": 1}, "--seed 1 (the run's: 0)"),
    ({"threads": 2, "preset": {"name": "tiny", "lang": "en", "threads": 2}}, "--threads 2 (the run's: 1)"),
    ({"preset": {"name": "tiny", "lang": "zh", "threads": 1, "generator": "pretrain:tiny"}}, "--lang zh (the run's: en)"),
    ({"tasks": ["qa", "fever"]}, "--tasks qa,fever (the run's: qa)"),
])
def test_a_refused_resume_names_the_flag_that_differs(tmp_path, change, named):
    saved = {"preset": {"name": "tiny", "lang": "en", "threads": 1, "device": "cpu"}, "seed": 0, "threads": 1}
    (tmp_path / "config.json").write_text(json.dumps(saved))
    with pytest.raises(InputError) as e:
        check_resumed_config(tmp_path, {**saved, **change}, True, "preset, seed or --tasks")
    assert named in e.value.message and "use a new --out or drop --resume" in e.value.message


@pytest.mark.parametrize(("name", "record", "gone"), [
    ("index_b", {"dir": "index_b"}, "index_b"),
    ("evaluate", {}, "predictions.json"),
    ("compare", {"available": True}, "report.html"),
])
def test_resume_checks_a_skipped_stage_s_outputs_are_there(tmp_path, monkeypatch, name, record, gone):
    """A recorded stage whose folder or file was deleted since failed later stages with their own
    errors (or drew an empty plot): --resume names what is missing and how to redo it. (The records
    here hold only what this check reads; the record's own schema is test_run_state_input's.)"""
    monkeypatch.setattr(R, "check_stage_record", lambda *a: None)
    (tmp_path / "stages").mkdir()
    path = tmp_path / "stages" / f"{name}.json"
    path.write_text(json.dumps({**record, "seconds": 1.0}))
    ran = []
    with pytest.raises(InputError) as e:
        R._run_stage(tmp_path, name, True, lambda: ran.append(name) or {}, lambda *a: None)
    assert e.value.source == str(tmp_path / gone) and "records the" in e.value.message and not ran
    (tmp_path / gone).mkdir()
    events = []
    R._run_stage(tmp_path, name, True, lambda: ran.append(name) or {}, lambda n, event, r: events.append(event))
    assert events == ["skipped"] and not ran
