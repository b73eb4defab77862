"""A `train rag` run folder that holds a checkpoint but no model yet (killed, or still training, before it saved
best/ or final/) is told as such, with its checkpoint's step and how to finish it, not as "not a RAG model ...
(train one with `lewisrag train rag`)"."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import run_cli
from test_rag_train import rag_inputs, trained_rag  # noqa: F401  (session fixtures)

from lewisrag.data.io import InputError
from lewisrag.data.outputs import MARKER, record_files
from lewisrag.training.checkpoint import resolve_model_dir


@pytest.fixture
def unfinished(trained_rag, tmp_path):  # noqa: F811
    """A copy of a finished run with its models gone and its marker listing what is left: checkpoint/ (step 3),
    config.json and log.jsonl, as a run killed between its checkpoint and its first saved model leaves it."""
    run = shutil.copytree(trained_rag, tmp_path / "run")
    for part in ("best", "final"):
        shutil.rmtree(run / part)
    record_files(run)
    assert sorted(p.name for p in run.iterdir() if not p.name.startswith(".")) == ["checkpoint", "config.json", "log.jsonl"]
    return run


@pytest.mark.parametrize("command", ["export", "ask"])
def test_a_run_with_no_model_yet_says_so(command, unfinished, rag_inputs, tmp_path):  # noqa: F811
    args = ["--out", str(tmp_path / "hf")] if command == "export" else ["Who is the leader of Valdoria?"]
    r = run_cli(command, "--model", str(unfinished), "--index", str(rag_inputs["index"]), *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip() == (
        f"error: {unfinished}: this training run has saved no model yet: no best/ nor final/ (it is still training, or "
        f"it stopped before the end; its last checkpoint is at step 3); finish it with `lewisrag train rag --out "
        f"{unfinished} --resume` and the flags it was started with")
    assert "not a RAG model" not in r.stderr


def test_an_unreadable_checkpoint_step_is_a_question_mark(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)
    (run / "checkpoint" / "state.json").write_text("{not json")
    with pytest.raises(InputError, match=r"saved no model yet: .*its last checkpoint is at step \?\)") as e:
        resolve_model_dir(run)
    assert e.value.source == str(run)


def test_a_run_whose_saved_model_was_deleted_is_not_told_it_saved_none(unfinished):
    """Its marker lists best/ (or final/): the run did save a model, so "saved no model yet" would be wrong."""
    marker = unfinished / MARKER
    listed = json.loads(marker.read_text())
    marker.write_text(json.dumps({**listed, "files": sorted([*listed["files"], "best"])}))
    with pytest.raises(InputError) as e:
        resolve_model_dir(unfinished)
    assert "saved no model yet" not in str(e.value) and "not a RAG model" in str(e.value)


def test_a_folder_without_a_checkpoint_is_still_not_a_rag_model(tmp_path):
    with pytest.raises(InputError, match=r"not a RAG model: no rag.json here nor in best/ or final/ \(train one with"):
        resolve_model_dir(tmp_path)
