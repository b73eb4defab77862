"""The built-in world's edges: an output written inside it, the QA fields a record gives blank, and what
`lewisrag world --help` and `data/tasks.py` say of its files.

- `index build --out WORLD/bm25` was passed, and every rerun then refused, --overwrite or not, as "the
  index of the lewisrag world at WORLD, whose other parts were made from it": a world writes no index.
  A folder is a part of an output only where that output wrote it (`outputs.holds_part`: its marker
  lists it, or its kind writes outputs of its own there, a reproduction's RUN/world); another output
  inside one stands alone, and the world's rerun keeps it, with a warning, never deleting it.
- `read_qa` read a blank reference statement, which the evaluator refused only once `compare` had
  answered every question, and an empty group, which made every such example one training unit.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from conftest import run_main
from lewisrag.data.io import InputError, LewisragWarning
from lewisrag.data.outputs import MARKER, made_by, mark, record_files
from lewisrag.data.records import read_qa


def _state(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _bm25(passages: Path, out: Path, *flags: str) -> list:
    return ["index", "build", "--encoder", "bm25", "--passages", passages, "--out", out, *flags]


# --- 1. an output inside another that is not its part --------------------------------------------


def test_an_index_built_inside_a_world_is_rerun_and_kept_by_the_worlds_rerun(tmp_path, monkeypatch, capsys):
    """The reviewer's case: `world --out t2`, `index build --out t2/bm25` (exit 0), then the same build
    refused with --overwrite or without. The index stands alone: rerun either way. The world's rerun
    (and with --overwrite) keeps it byte for byte, with a warning that names it, as it does not make it
    again; --overwrite onto the world by another kind is refused, not a loss of the index with it."""
    world = tmp_path / "t2"
    assert run_main(monkeypatch, capsys, "world", "--out", world, "--entities", 40)[0] == 0
    index = world / "bm25"
    for flags in ((), (), ("--overwrite",)):  # the first write, then its reruns
        code, _, err = run_main(monkeypatch, capsys, *_bm25(world / "passages_a.jsonl", index, *flags))
        assert code == 0, (flags, err)
        assert made_by(index) == "index" and "other parts" not in err
    kept, passages = _state(index), (world / "passages_a.jsonl").read_bytes()
    for flags in ((), ("--overwrite",)):
        with pytest.warns(LewisragWarning, match=rf"{index}: a lewisrag index inside the world, kept as it was") as caught:
            code, _, err = run_main(monkeypatch, capsys, "world", "--out", world, "--entities", 41, *flags)
        assert code == 0 and len(caught) == 1, err
        assert _state(index) == kept and made_by(world) == "world"
    assert (world / "passages_a.jsonl").read_bytes() != passages  # the world was redrawn around it
    other = tmp_path / "passages.jsonl"
    other.write_bytes(passages)
    before = _state(world)
    code, _, err = run_main(monkeypatch, capsys, *_bm25(other, world, "--overwrite"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "'bm25/" in err and "world" in err, err
    assert _state(world) == before


def test_a_world_rerun_with_nothing_inside_it_warns_of_nothing(tmp_path, monkeypatch, capsys):
    world = tmp_path / "w"
    assert run_main(monkeypatch, capsys, "world", "--out", world, "--entities", 40)[0] == 0
    (world / "notes").mkdir()
    (world / "notes" / "mine.txt").write_text("mine")  # the user's folder: carried over, no output of lewisrag's
    with warnings.catch_warnings():
        warnings.simplefilter("error", LewisragWarning)
        assert run_main(monkeypatch, capsys, "world", "--out", world, "--entities", 41)[0] == 0
    assert (world / "notes" / "mine.txt").read_text() == "mine"


def test_a_stage_of_a_reproduction_is_still_never_replaced_on_its_own(tmp_path, monkeypatch, capsys):
    """What the rule keeps: RUN/world and RUN/tasks/index_a, written by the reproduction, are refused to
    a command on its own, --overwrite or not; an index the user built elsewhere in RUN is theirs, rerun."""
    run = tmp_path / "RUN"
    mark(run, "reproduction")
    (run / "config.json").write_text("{}")
    record_files(run, ["config.json"])
    assert run_main(monkeypatch, capsys, "world", "--out", tmp_path / "w", "--entities", 40)[0] == 0
    passages = tmp_path / "w" / "passages_a.jsonl"
    mark(run / "world", "world")
    (run / "world" / "passages_a.jsonl").write_text("the run's world\n")
    record_files(run / "world")
    mark(run / "tasks" / "index_a", "index")
    (run / "tasks" / "index_a" / "manifest.json").write_text("{}")
    record_files(run / "tasks" / "index_a")
    before = _state(run)
    for args, stage in ((["world", "--entities", 40], "world"), (_bm25(passages, run / "tasks" / "index_a")[:-2], "tasks/index_a")):
        for flags in ((), ("--overwrite",)):
            code, _, err = run_main(monkeypatch, capsys, *args, "--out", run / stage, *flags)
            assert code == 2 and len(err.strip().splitlines()) == 1, err
            assert f"is the {made_by(run / stage)} of the lewisrag reproduction at {run.resolve()}" in err, err
    assert _state(run) == before
    for flags in ((), (), ("--overwrite",)):
        code, _, err = run_main(monkeypatch, capsys, *_bm25(passages, run / "mine", *flags))
        assert code == 0, err


def test_a_part_is_what_the_output_wrote_or_where_its_kind_writes_its_own_outputs(tmp_path):
    from lewisrag.data.outputs import PARTS, holds_part
    from lewisrag.experiments.stages import STAGE_FOLDERS

    run = tmp_path / "RUN"
    mark(run, "reproduction")
    (run / "stages").mkdir()
    (run / "stages" / "world.json").write_text("{}")
    (run / "config.json").write_text("{}")
    (run / MARKER).write_text(json.dumps({"made_by": "lewisrag", "kind": "reproduction", "files": ["config.json"],
                                          "tree": ["stages/world.json"]}))
    for rel in ["world", "stages", *(rel for rel, _ in STAGE_FOLDERS.values())]:  # every stage folder it writes
        assert holds_part(run, rel), rel
    for rel in ("mine", "world/bm25", "stages/mine", "dpr/sub"):
        assert not holds_part(run, rel), rel
    assert set(PARTS) == {"reproduction"}  # the only kind that writes outputs of its own
    world = tmp_path / "w"
    mark(world, "world")
    (world / "passages_a.jsonl").write_text("")
    record_files(world)
    assert not holds_part(world, "bm25")
    index = tmp_path / "idx"
    mark(index, "index")
    (index / "bm25").mkdir()
    (index / "bm25" / "params.index.json").write_text("{}")
    record_files(index)
    assert holds_part(index, "bm25") and holds_part(index, "bm25/deeper") and not holds_part(index, "other")
    (index / MARKER).write_text(json.dumps({"made_by": "lewisrag", "kind": "index"}))  # lists nothing: not known
    assert holds_part(index, "other")
    assert not holds_part(tmp_path, "w")  # no marker: no output to be part of


# --- 2. blank fields of a QA record --------------------------------------------------------------


def _qa(tmp_path: Path, second: dict) -> Path:
    path = tmp_path / "qa.jsonl"
    first = {"id": "a", "question": "q1?", "answers": ["x"], "reference_statements": ["X is so."], "group": "g"}
    path.write_text(json.dumps(first) + "\n" + json.dumps({"id": "b", "question": "q2?", "answers": ["y"], **second}) + "\n")
    return path


@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_reference_statement_is_refused_where_it_is_read(tmp_path, blank):
    """The reviewer's case: `"reference_statements": ["  "]` was read, and `compare` answered every
    question before the evaluator refused it at "compare:0"."""
    path = _qa(tmp_path, {"reference_statements": ["Y is so.", blank]})
    with pytest.raises(InputError) as e:
        read_qa(path)
    assert (e.value.line, e.value.field) == (2, "reference_statements[1]") and "empty statement" in str(e.value)
    assert str(path) in str(e.value)


@pytest.mark.parametrize("blank", ["", "  "])
def test_an_empty_group_is_refused_naming_its_line(tmp_path, blank):
    """`"group": ""` was read as a group: every such example trained as one unit, never shuffled."""
    path = _qa(tmp_path, {"group": blank})
    with pytest.raises(InputError) as e:
        read_qa(path)
    assert (e.value.line, e.value.field) == (2, "group") and "empty" in str(e.value)
    examples = read_qa(_qa(tmp_path, {"group": "g"}))  # a group given, and none: read as before
    assert [ex.group for ex in examples] == ["g", "g"]
    assert read_qa(_qa(tmp_path, {}))[1].group is None


def test_an_empty_kind_is_refused_naming_its_line(tmp_path):
    """`"kind": ""` was read as short in silence, while an empty category or group is refused."""
    with pytest.raises(InputError, match="unknown kind ''") as e:
        read_qa(_qa(tmp_path, {"kind": ""}))
    assert (e.value.line, e.value.field) == (2, "kind")
    assert [ex.kind for ex in read_qa(_qa(tmp_path, {}))] == ["short", "short"]


# --- 3. what the help and the docstrings say -----------------------------------------------------


def test_world_help_says_what_the_world_writes(tmp_path, monkeypatch, capsys):
    """`--entities` said "two passages each"; archive entities have three. The summary left out the
    Jeopardy and FEVER files that an English world writes."""
    from lewisrag.data.world import build_world

    monkeypatch.setenv("COLUMNS", "400")
    code, help_text, _ = run_main(monkeypatch, capsys, "world", "--help")
    assert code == 0 and "two passages each)" not in help_text and "archive passage" in help_text
    assert "Jeopardy and FEVER files" in help_text.split("Options")[0]
    w = build_world(0, 40)
    archived = sum(e.archive is not None for e in w.entities)
    assert archived and len(w.passages_a) == 2 * len(w.entities) + archived
    assert {stem.split("_")[0] for stem in w.tasks} == {"jeopardy", "fever"}


def test_refutes_claims_take_the_snapshot_b_value_in_every_split_as_the_docstring_says():
    """tasks.py said a REFUTES claim takes snapshot B's value "of a test entity"; every split's do."""
    from lewisrag.data import tasks as T
    from lewisrag.data.world import build_world

    w = build_world(0, 120)
    for split in ("train", "dev", "test"):
        claims = [ex for ex in w.tasks[f"fever_{split}"] if ex.answers == [T.REFUTES]]
        about = [(ex, *T._about(ex, w.entities)) for ex in claims]
        b = [ex for ex, e, attr in about if e is not None and attr and e.snapshots[1][attr] != e.snapshots[0][attr]
             and e.snapshots[1][attr] in ex.question]
        assert b, split
    doc = " ".join(T.__doc__.split())
    assert "of a test entity" not in doc and "snapshot-B value, in every split" in doc


def test_the_place_of_a_missing_stage_is_refused_as_the_stage_is(tmp_path, monkeypatch, capsys):
    """`index build --out RUN/index_a` after RUN/index_a was deleted was passed (exit 0), and every rerun
    of it then refused as the reproduction's part: the first write made it one, and a resume read an index
    the run never built as its stage. A command on its own is refused there the first time too, whether
    the reproduction's kind writes that folder (`PARTS`) or its marker lists it; a new folder of the
    user's in RUN stays theirs."""
    run = tmp_path / "RUN"
    mark(run, "reproduction")
    (run / "config.json").write_text("{}")
    (run / "notes").mkdir()
    record_files(run, ["config.json", "notes"])  # "notes": a part its marker lists, deleted below
    (run / "notes").rmdir()
    assert run_main(monkeypatch, capsys, "world", "--out", tmp_path / "w", "--entities", 40)[0] == 0
    passages = tmp_path / "w" / "passages_a.jsonl"
    (run / "index_b").mkdir()  # an empty folder in its place: the same
    before = _state(run)
    for rel in ("index_a", "index_b", "tasks/index_a", "notes"):
        for flags in ((), ("--overwrite",)):
            code, _, err = run_main(monkeypatch, capsys, *_bm25(passages, run / rel, *flags))
            assert code == 2 and len(err.strip().splitlines()) == 1, err
            assert f"is where the lewisrag reproduction at {run.resolve()} keeps its own {rel}" in err, err
    code, _, err = run_main(monkeypatch, capsys, "world", "--out", run / "world", "--entities", 40)
    assert code == 2 and "keeps its own world" in err, err
    assert _state(run) == before and sorted(p.name for p in run.iterdir()) == [".lewisrag", "config.json", "index_b"]
    assert run_main(monkeypatch, capsys, *_bm25(passages, run / "mine"))[0] == 0  # not a part: the user's own
    assert made_by(run / "mine") == "index"
