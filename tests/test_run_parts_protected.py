"""What a reproduction wrote is its own, and a rerun's up-front check is its promise.

- A reproduction's marker lists the files it writes outside its stages' folders (config.json,
  results.json, the reports, RUN/stages/<name>.json, ...): `swap --out RUN/config.json --overwrite`
  replaced a finished run's config.json (exit 0), and its `--resume` was then refused. A run written
  before its marker listed them keeps them protected by their names (`outputs.UNLISTED`).
- A file output refuses only what a marked output wrote (a listed name, a path of its recorded tree),
  not a file the user wrote into one of its folders since (`chunk --out RUN/dpr/tokenizer/mine.jsonl`,
  then the same with --overwrite, was refused as "part of the lewisrag dpr").
- `stages.check_rerun` takes for lewisrag's exactly the folders the stages then remove: a RAG run's
  folder without its marker passed the check, and the rag_token stage refused it only after world to
  generator had been redone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import copy_run, run_main
from lewisrag.data.io import InputError
from lewisrag.data.outputs import MARKER, check_out_file, check_part, discard_output, made_by, mark, record_files
from lewisrag.experiments import stages as S
from lewisrag.experiments.presets import PRESETS
from lewisrag.experiments.reproduce import reproduce
from lewisrag.training.closed_book import KIND as CLOSED_BOOK_KIND
from lewisrag.training.closed_book import LAYOUT as CLOSED_BOOK_LAYOUT
from lewisrag.training.rag import KIND as RAG_KIND
from test_reproduce_rerun_safety import _state, qa_run  # noqa: F401 (a fixture)

# what a finished tiny run wrote outside its stages' folders
RUN_FILES = ["config.json", "results.json", "timings.json", "report.md", "report.html", "predictions.json", "evidence.json",
             "knowledge_update.json", "training_curves.png", "stages/world.json", "stages/rag_token.json",
             "stages/compare.json"]


def _docs(tmp_path: Path) -> Path:
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"id": "d1", "title": "T", "text": "one two three"}) + "\n")
    return docs


def test_a_reproductions_own_files_are_never_replaced_by_a_file_output(qa_run, tmp_path, monkeypatch, capsys):
    """The reviewer's case: `swap --out RUN/config.json --overwrite --json` exited 0 and replaced the
    run's config.json; `reproduce --resume` was then refused. Every file the run wrote outside its stages'
    folders is refused by name, naming the run; a file of the user's there (an earlier swap's) is not."""
    run = copy_run(qa_run, tmp_path / "run")
    config = (run / "config.json").read_bytes()
    code, out, err = run_main(monkeypatch, capsys, "swap", "--model", run / "rag_token", "--index", run / "index_a",
                              "--questions", run / "world" / "questions_a.jsonl", "--device", "cpu",
                              "--out", run / "config.json", "--overwrite", "--json")
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert str(run / "config.json") in err and "reproduction" in err and "'--out'" in err
    assert (run / "config.json").read_bytes() == config
    for rel in RUN_FILES:
        before = (run / rel).read_bytes()
        with pytest.raises(InputError, match=rf"is part of the lewisrag reproduction at {run}\b") as e:
            check_out_file(run / rel, overwrite=True)
        assert e.value.field == "--out" and (run / rel).read_bytes() == before
    marker = json.loads((run / MARKER).read_text())  # the marker lists them
    assert set(RUN_FILES) <= set(marker["files"]) | set(marker["tree"])
    assert not [f for f in marker["files"] if (run / f).is_dir()]  # not its stages' folders: they list their own
    # a file the user wrote into the run (not listed) is theirs: written, then replaced with --overwrite
    docs = _docs(tmp_path)
    for path in (run / "mine.jsonl", run / "stages" / "mine.jsonl"):
        assert run_main(monkeypatch, capsys, "chunk", "--docs", docs, "--out", path)[0] == 0
        code, _, err = run_main(monkeypatch, capsys, "chunk", "--docs", docs, "--out", path, "--overwrite")
        assert code == 0, err
    events = []
    reproduce(PRESETS["tiny"], run, seed=0, resume=True, on_stage=lambda name, event, _: events.append(event))
    assert "started" not in [e for e in events[:-2]]  # every stage skipped; the report redone
    assert (run / "results.json").read_bytes() == (qa_run / "results.json").read_bytes()


def test_every_file_a_run_lists_is_one_an_unlisted_run_protects_by_name(qa_run):
    """`outputs.UNLISTED` names what a reproduction writes, for a run whose marker lists nothing: it
    covers what the run lists, the run's own names (`stages.FINISHED`, STAGE_FILES) and nothing in its
    stages' folders."""
    from lewisrag.data.outputs import UNLISTED, _matches

    marker = json.loads((qa_run / MARKER).read_text())
    patterns = UNLISTED["reproduction"]

    for rel in [*marker["files"], *marker["tree"], "config.json", *S.FINISHED,
                *(p for paths in S.STAGE_FILES.values() for p in paths), "data/train.jsonl"]:
        assert any(_matches(rel, p) for p in patterns), rel
    for rel in ["rag_token/config.json", "world/passages_a.jsonl", "dpr/config.json", "mine.jsonl", "stages/notes.txt"]:
        assert not any(_matches(rel, p) for p in patterns), rel


def test_a_run_from_before_markers_listed_its_files_keeps_them_protected_and_lists_them_on_resume(qa_run, tmp_path,
                                                                                                monkeypatch, capsys):
    """A run that finished before this change: its marker names its kind only. Its files are refused by
    their names, a user's file there is not; a --resume lists them, the ones of the stages it skips too."""
    run = copy_run(qa_run, tmp_path / "run")
    (run / MARKER).write_text(json.dumps({"made_by": "lewisrag", "kind": "reproduction"}))
    (run / "mine.json").write_text("the user's\n")
    for rel in RUN_FILES:
        with pytest.raises(InputError, match="is part of the lewisrag reproduction at"):
            check_out_file(run / rel, overwrite=True)
    assert check_out_file(run / "mine.json", overwrite=True) == run / "mine.json"
    reproduce(PRESETS["tiny"], run, seed=0, resume=True)
    marker = json.loads((run / MARKER).read_text())
    assert set(RUN_FILES) <= set(marker["files"]) | set(marker["tree"]) and "mine.json" not in marker["files"]
    assert check_out_file(run / "mine.json", overwrite=True) == run / "mine.json"
    with pytest.raises(InputError, match="is part of the lewisrag reproduction at"):
        check_out_file(run / "predictions.json", overwrite=True)  # the evaluate stage was skipped


def test_a_users_file_in_a_folder_of_an_output_may_be_replaced(tmp_path, monkeypatch, capsys):
    """The reviewer's case: `chunk --out RUN/dpr/tokenizer/mine.jsonl` wrote a new file there, and the
    same with --overwrite was refused as "part of the lewisrag dpr": the marker's tree says what the
    output wrote in its folders. A marker with no tree (written before markers kept one) still refuses
    every file of a listed folder: what lewisrag wrote there is not known."""
    out = tmp_path / "dpr"
    mark(out, "dpr")
    (out / "tokenizer").mkdir()
    (out / "tokenizer" / "vocab.txt").write_text("the dpr's\n")
    (out / "config.json").write_text("{}")
    record_files(out)
    docs = _docs(tmp_path)
    mine = out / "tokenizer" / "mine.jsonl"
    assert run_main(monkeypatch, capsys, "chunk", "--docs", docs, "--out", mine)[0] == 0
    code, _, err = run_main(monkeypatch, capsys, "chunk", "--docs", docs, "--out", mine, "--overwrite")
    assert code == 0, err
    assert check_out_file(mine, overwrite=True) == mine
    for own in (out / "tokenizer" / "vocab.txt", out / "config.json"):
        with pytest.raises(InputError, match="is part of the lewisrag dpr at"):
            check_out_file(own, overwrite=True)
    # the reproduction above it did not write it either
    mark(tmp_path, "reproduction")
    assert check_out_file(mine, overwrite=True) == mine
    marker = json.loads((out / MARKER).read_text())
    del marker["tree"]
    (out / MARKER).write_text(json.dumps(marker))
    with pytest.raises(InputError, match="is part of the lewisrag dpr at"):
        check_out_file(mine, overwrite=True)


def test_a_rag_run_without_its_marker_is_refused_before_any_stage_is_redone(qa_run, tmp_path, monkeypatch, capsys):
    """The reviewer's case: with RUN/rag_token/.lewisrag removed, a plain rerun redid world to generator
    (42 s) and then stopped at "is not a rag run lewisrag wrote, so it is not removed". A RAG run always
    had its marker: without it the folder is refused up front, --overwrite or not, --resume too, and
    nothing in the run changes."""
    run = copy_run(qa_run, tmp_path / "run")
    (run / "rag_token" / MARKER).unlink()
    (run / "stages" / "rag_token.json").unlink()  # for --resume: the stage still to run
    before = _state(run)
    for flags in ((), ("--overwrite",), ("--resume",)):
        code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run, *flags)
        assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert str(run / "rag_token") in err and "marker" in err, err
        assert _state(run) == before, flags  # nothing removed, nothing redone


@pytest.mark.parametrize("kind, name", [(RAG_KIND, "rag_token"), (CLOSED_BOOK_KIND, "closed_book")])
@pytest.mark.parametrize("state", ["listed", "marked, no list", "no marker", "no marker, not its layout"])
def test_what_the_rerun_check_passes_the_stage_removes(tmp_path, kind, name, state):
    """`check_rerun` (with --overwrite: the user's files are not the question here) and the stage's
    `discard_output` agree on every folder: passed by the one, removed by the other; refused by the one,
    never reached by the other."""
    run = tmp_path / "run"
    folder = run / name
    folder.mkdir(parents=True)
    layout = S.LEGACY[kind]
    for rel in ([n for n in layout if "/" not in n][:2] if state != "no marker, not its layout" else ["mine.txt"]):
        (folder / rel).mkdir() if rel in ("final", "best", "checkpoint") else (folder / rel).write_text("x")
    if state in ("listed", "marked, no list"):
        (folder / MARKER).write_text(json.dumps({"made_by": "lewisrag", "kind": kind}))
        if state == "listed":
            record_files(folder)
    try:
        S.check_rerun(run, [name], resume=False, overwrite=True)
        passed = True
    except InputError:
        passed = False
    if passed:
        discard_output(folder, kind, legacy=CLOSED_BOOK_LAYOUT if kind == CLOSED_BOOK_KIND else ())  # as the stages call it
        assert not folder.exists()
    else:
        assert folder.exists()
    assert passed == (state != "no marker, not its layout" and (state != "no marker" or kind == CLOSED_BOOK_KIND))


def test_check_part_refuses_an_unmarked_folder_unless_its_kind_was_once_unmarked(tmp_path):
    folder = tmp_path / "rag_token"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "log.jsonl").write_text("")
    with pytest.raises(InputError, match=r"has no \.lewisrag marker, so its files \(such as 'config.json'\)"):
        check_part(folder, RAG_KIND, overwrite=True, legacy=S.LEGACY[RAG_KIND])
    check_part(folder, RAG_KIND, overwrite=True, legacy=S.LEGACY[RAG_KIND], unmarked=True)


@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "--overwrite"])
def test_a_command_on_its_own_never_replaces_a_stage_of_a_reproduction(qa_run, tmp_path, monkeypatch, capsys, overwrite):
    """`world --out RUN/world` redrew a finished reproduction's world in place (exit 0): a folder of the
    command's own kind counted as free wherever it lay, and RUN's models, indexes and results were then
    those of another world. Refused in one line, --overwrite or not, with the stage as it was (so are
    index build, train rag and train stitched into their stages); a world that stands alone is still
    replaced, and reproduce --resume still redoes its own world."""
    run = copy_run(qa_run, tmp_path / "run")
    before = _state(run)
    flags = ["--overwrite"] if overwrite else []
    for args, stage in ((["world", "--entities", "40"], "world"),
                        (["index", "build", "--passages", run / "world" / "passages_a.jsonl", "--encoder", "bm25"], "bm25_a"),
                        (_train_rag(run), "rag_token"), (_train_stitched(run), "stitched")):
        code, out, err = run_main(monkeypatch, capsys, *args, "--out", run / stage, *flags)
        assert code == 2 and not out and len(err.strip().splitlines()) == 1, err
        assert f"is the {made_by(run / stage)} of the lewisrag reproduction at {run.resolve()}" in err, err
    assert _state(run) == before
    run_main(monkeypatch, capsys, "world", "--entities", "40", "--out", tmp_path / "alone")  # then replaced:
    code, _, err = run_main(monkeypatch, capsys, "world", "--entities", "41", "--out", tmp_path / "alone")
    assert code == 0, err
    (run / "stages" / "world.json").unlink()
    reproduce(PRESETS["tiny"], run, seed=0, resume=True)
    assert (run / "results.json").read_bytes() == (qa_run / "results.json").read_bytes()


def _train_rag(run: Path) -> list:
    return ["train", "rag", "--index", run / "index_a", "--encoder", run / "dpr", "--generator", run / "generator",
            "--train", run / "world" / "train.jsonl", "--dev", run / "world" / "dev.jsonl", "--steps", "1"]


def _train_stitched(run: Path) -> list:
    return ["train", "stitched", "--index", run / "index_a", "--encoder", run / "dpr", "--generator", run / "generator",
            "--train", run / "world" / "train.jsonl", "--steps", "1"]


def test_train_rag_never_resumes_a_stage_of_a_reproduction(qa_run, tmp_path, monkeypatch, capsys):
    """`train rag --resume --out RUN/rag_token` continued a reproduction's RAG run on its own, under the
    evaluations RUN had made of it (train rag and train stitched check their folders in the functions
    reproduce's stages share: the command now checks first)."""
    run = copy_run(qa_run, tmp_path / "run")
    before = _state(run)
    code, out, err = run_main(monkeypatch, capsys, *_train_rag(run), "--out", run / "rag_token", "--resume")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1, err
    assert f"is the {RAG_KIND} of the lewisrag reproduction at {run.resolve()}" in err, err
    assert _state(run) == before
