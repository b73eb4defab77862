"""A `lewisrag reproduce` rerun into a finished run keeps the output-safety promise of the standalone
commands: every folder its stages replace whole (RUN/dpr, RUN/index_a, RUN/rag_token, RUN/closed_book, ...)
is checked before anything is removed, and a file the user added to one is refused by name (exit 2,
one line), not lost once the stages before it were redone, unless --overwrite. A plain rerun once
deleted them all but world/'s and stitched/'s (the last refused only after the others were half redone).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import copy_run, one_thread, run_main
from lewisrag.data.io import InputError
from lewisrag.data.outputs import MARKER
from lewisrag.data.records import read_passages
from lewisrag.experiments.presets import PRESETS
from lewisrag.experiments.reproduce import reproduce
from lewisrag.index.bm25 import build_bm25_index
from test_reproduce_base import _flags, assets, finished_base_run  # noqa: F401 (a fixture)


@pytest.fixture(scope="module")
def qa_run(tiny_qa_run, tmp_path_factory):
    """A finished tiny reproduction (QA only), this module's own copy of the session's."""
    return copy_run(tiny_qa_run, tmp_path_factory.mktemp("qa") / "run")


def _state(run: Path) -> dict:
    """Every file and folder in `run`, with its size and modification time."""
    return {str(p.relative_to(run)): (p.is_dir(), p.stat().st_size if p.is_file() else 0, p.stat().st_mtime_ns)
            for p in sorted(run.rglob("*"))}


def _refused(monkeypatch, capsys, run: Path, note: Path, *flags) -> None:
    before = _state(run)
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run, *flags)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and str(note) in err and "--overwrite" in err, err
    assert _state(run) == before  # nothing removed, nothing redone: the stage records too


STAGE_FOLDERS = ["dpr", "index_a", "index_b", "bm25_a", "generator", "rag_token", "rag_token/best",
                 "rag_sequence/final", "rag_token_frozen/checkpoint", "closed_book", "closed_book/final", "stitched"]


@pytest.mark.parametrize("folder", STAGE_FOLDERS)
def test_a_plain_rerun_refuses_a_users_file_in_a_stage_folder_before_removing_anything(qa_run, tmp_path, monkeypatch,
                                                                                     capsys, folder):
    run = copy_run(qa_run, tmp_path / "run")
    note = run / folder / "NOTES_user.txt"
    note.write_text("mine\n")
    _refused(monkeypatch, capsys, run, note)


def test_the_first_users_file_is_named_whatever_stage_folder_holds_it(qa_run, tmp_path, monkeypatch, capsys):
    """The reviewer's case: a note in every folder of the run; the first stage's is named, and none is lost."""
    run = copy_run(qa_run, tmp_path / "run")
    for folder in ["world", "stages", ".", *STAGE_FOLDERS]:
        (run / folder / "NOTES_user.txt").write_text("mine\n")
    _refused(monkeypatch, capsys, run, run / "dpr" / "NOTES_user.txt")


def test_folders_written_before_their_markers_listed_files_are_checked_by_their_layout(qa_run, tmp_path, monkeypatch,
                                                                                      capsys):
    """A RAG run's marker listed nothing and a closed book had no marker before this check: what they
    write is known by name (train_rag's folders and what they hold; config.json, log.jsonl, final/)."""
    run = copy_run(qa_run, tmp_path / "run")
    marker = run / "rag_token" / MARKER
    marker.write_text(json.dumps({"made_by": "lewisrag", "kind": "rag run"}))
    (run / "closed_book" / MARKER).unlink()
    for note in (run / "rag_token" / "best" / "NOTES_user.txt", run / "closed_book" / "NOTES_user.txt"):
        note.write_text("mine\n")
        _refused(monkeypatch, capsys, run, note)
        note.unlink()


@pytest.mark.parametrize("stage, folder", [("closed_book", "closed_book/final"), ("dpr", "dpr"),
                                           ("rag_token", "rag_token/best")])
def test_resume_refuses_a_users_file_in_a_stage_it_runs_again(qa_run, tmp_path, monkeypatch, capsys, stage, folder):
    """--resume runs the stages without a record again: their folders are checked as a plain rerun's
    (the closed book was removed even on resume); the finished stages' folders are left alone."""
    run = copy_run(qa_run, tmp_path / "run")
    (run / "stages" / f"{stage}.json").unlink()
    note = run / folder / "NOTES_user.txt"
    note.write_text("mine\n")
    _refused(monkeypatch, capsys, run, note, "--resume")
    note.unlink()
    kept = [run / f / "NOTES_user.txt" for f in STAGE_FOLDERS if f.split("/")[0] != stage]
    for other in kept:
        other.write_text("mine\n")
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run, "--resume")
    assert code == 0, err
    assert all(other.read_text() == "mine\n" for other in kept)


def test_a_rerun_of_an_untouched_run_still_works_and_keeps_what_it_does_not_replace(qa_run, tmp_path):
    """The user's files in world/ (rewritten, theirs carried over), stages/ (only the records are
    forgotten) and RUN itself stay; the run is the same."""
    run = copy_run(qa_run, tmp_path / "run")
    notes = [run / folder / "NOTES_user.txt" for folder in ("world", "stages", ".")]
    for note in notes:
        note.write_text("mine\n")
    events = []
    reproduce(PRESETS["tiny"], run, seed=0, on_stage=lambda name, event, _: events.append((name, event)))
    assert ("rag_token", "done") in events and ("closed_book", "done") in events
    assert all(note.read_text() == "mine\n" for note in notes)
    assert (run / "results.json").read_bytes() == (qa_run / "results.json").read_bytes()
    assert not [p.name for p in run.iterdir() if p.name.startswith(".") and p.name != MARKER]  # no .NAME.old left
    assert {p.name for p in (run / "stages").iterdir()} == {p.name for p in (qa_run / "stages").iterdir()} | {"NOTES_user.txt"}
    # a rerun now lists what the RAG runs and the closed book wrote: a later file of the user's is told from them
    assert "best" in json.loads((run / "rag_token" / MARKER).read_text())["files"]
    assert json.loads((run / "closed_book" / MARKER).read_text())["kind"] == "closed book"


def test_overwrite_replaces_the_users_files_as_documented(qa_run, tmp_path, monkeypatch, capsys):
    """--overwrite reaches every stage (the stitched stage refused the user's file after the others were redone)."""
    run = copy_run(qa_run, tmp_path / "run")
    notes = [run / folder / "NOTES_user.txt" for folder in ("dpr", "rag_token/best", "stitched")]
    for note in notes:
        note.write_text("mine\n")
    with one_thread():
        code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run, "--overwrite")
    assert code == 0, err
    assert not any(note.exists() for note in notes)


@pytest.fixture(scope="module")
def base_run(assets, tmp_path_factory):  # noqa: F811 (the imported fixture)
    return finished_base_run(assets, tmp_path_factory.mktemp("base") / "run")


@pytest.mark.parametrize("folder", ["index_a", "generator", "rag_token/best", "closed_book"])
def test_the_base_preset_refuses_a_users_file_in_its_stage_folders(assets, base_run, tmp_path, monkeypatch, capsys,  # noqa: F811
                                                                  folder):
    """The base preset built its indexes with overwrite=True, checking nothing."""
    run = copy_run(base_run, tmp_path / "run")
    note = run / folder / "NOTES_user.txt"
    note.write_text("mine\n")
    before = _state(run)
    code, _, err = run_main(monkeypatch, capsys, *_flags(assets, run))
    assert code == 2 and len(err.strip().splitlines()) == 1 and str(note) in err, err
    assert _state(run) == before


def test_index_builders_refuse_a_users_file_as_index_build_does(tiny_corpus, tmp_path, monkeypatch, capsys):
    """`lewisrag index build --out IDX` refuses IDX/NOTES.txt as before; the builder it calls (which
    reproduce calls too) now refuses it as well, unless overwrite."""
    out = tmp_path / "idx"
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", tiny_corpus["passages"], "--encoder",
                            "bm25", "--out", out)
    assert code == 0, err
    (out / "NOTES.txt").write_text("mine\n")
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", tiny_corpus["passages"], "--encoder",
                            "bm25", "--out", out)
    assert code == 2 and "NOTES.txt" in err and len(err.strip().splitlines()) == 1, err
    with pytest.raises(InputError, match="NOTES.txt"):
        build_bm25_index(read_passages(tiny_corpus["passages"]), out)
    assert (out / "NOTES.txt").read_text() == "mine\n"
    build_bm25_index(read_passages(tiny_corpus["passages"]), out, overwrite=True)
    assert not (out / "NOTES.txt").exists()
