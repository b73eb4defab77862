"""Outputs are complete or absent, at their edges: what a run removes or replaces is checked again right
before it goes, not only when the run began, and never reaches past what lewisrag wrote.

- a run begun afresh removed every results and plot name at RUN's top (`stages.FINISHED`), the user's
  jeopardy_posteriors.png beside a QA run too, and then listed such a file as the run's own;
- a file put into a missing or empty `--out` while the command ran, or into RUN/closed_book during a
  rerun, was deleted with the old folder at the swap (the check was from the start of the run);
- `--overwrite` onto another kind's output deleted the files the user had added to it;
- a mount point inside an output: its files deleted through the mount, or copied to the parent disk;
- an input reached through a bind mount was replaced by `chunk --out ... --overwrite`;
- a kill between the two renames of a replace left `.NAME.old`, which the next run removed, the
  user's files in it too;
- a symbolic link loop in a path was a traceback.

Races are simulated in order (the check, then the file, then the swap), not with sleeps. The mount
cases run for real where this process may mount (root), and are skipped, saying so, where it may not;
their logic is also tested without mounts.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import copy_run, run_main
from lewisrag.data import outputs
from lewisrag.data.io import InputError
from lewisrag.data.outputs import (MARKER, check_inputs_outside, check_out_dir, check_out_file, check_part,
                                   discard_output, mark, record_files, replace_dir, rewritten_dir, staged_dir)
from lewisrag.experiments import stages as S
from lewisrag.experiments.presets import PRESETS
from lewisrag.experiments.reproduce import reproduce
from lewisrag.training.closed_book import KIND as CLOSED_BOOK_KIND
from lewisrag.training.closed_book import LAYOUT as CLOSED_BOOK_LAYOUT


def _state(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


def _output(out: Path, kind: str, files: dict[str, str]) -> Path:
    """A finished output of `kind` at `out` holding `files`, its marker listing them."""
    with staged_dir(out, kind) as tmp:
        for rel, text in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_text(text)
    return out


# --- 1. a run begun afresh removes only the results and plots the run wrote --------------------------


@pytest.fixture(scope="module")
def qa_run(tiny_qa_run, tmp_path_factory):
    return copy_run(tiny_qa_run, tmp_path_factory.mktemp("qa") / "run")


def test_a_fresh_start_removes_only_the_finished_files_the_run_wrote(tmp_path):
    """stages.start_run unlinked every name in FINISHED, consulting nothing: a user's jeopardy_posteriors.png
    beside a QA run (which writes none) was deleted by a plain `reproduce --preset tiny --out R1`."""
    run = tmp_path / "R1"
    mark(run, "reproduction")
    for name in ("results.json", "report.md", "em_vs_k.png"):
        (run / name).write_text("the run's")
    outputs.note_written(run, ["results.json", "report.md", "em_vs_k.png"])
    (run / "jeopardy_posteriors.png").write_text("mine")
    before = _state(run)
    with pytest.raises(InputError, match=r"jeopardy_posteriors\.png.*not written by lewisrag.*--overwrite"):
        S.start_run(run, {"seed": 0}, resume=False)
    assert _state(run) == before  # nothing removed, the run's own files neither
    (run / "jeopardy_posteriors.png").unlink()
    (run / "mine").mkdir()
    S.start_run(run, {"seed": 0}, resume=False)
    assert not any((run / n).exists() for n in ("results.json", "report.md", "em_vs_k.png")) and (run / "mine").is_dir()
    (run / "position.png").write_text("mine")
    S.start_run(run, {"seed": 0}, resume=False, overwrite=True)  # --overwrite: the user asked
    assert not (run / "position.png").exists()
    (run / "report.md").mkdir()
    with pytest.raises(InputError, match="is a folder"):  # a folder of such a name is never removed
        S.start_run(run, {"seed": 0}, resume=False, overwrite=True)


def test_a_rerun_refuses_a_users_file_of_a_finished_name_and_never_lists_it(qa_run, tmp_path, monkeypatch, capsys):
    """The reviewer's case, through the CLI, and the run's marker: reproduce listed a user's file of such
    a name as the run's own (`note_written(run, [..., *FINISHED])`), which `check_out_file` then guarded
    against its owner."""
    run = copy_run(qa_run, tmp_path / "R1")
    mine = run / "jeopardy_posteriors.png"
    mine.write_text("mine")
    reproduce(PRESETS["tiny"], run, resume=True)  # every stage recorded: only the report is redone
    marker = json.loads((run / MARKER).read_text())
    assert "jeopardy_posteriors.png" not in marker["files"] and "report.md" in marker["files"]
    assert mine.read_text() == "mine"
    before = _state(run)
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run)
    assert code == 2 and len(err.strip().splitlines()) == 1 and str(mine) in err and "--overwrite" in err, err
    assert _state(run) == before


# --- 2. what appears after the check is not deleted at the swap -------------------------------------


def test_a_file_put_into_an_empty_out_while_the_command_runs_is_kept(tmp_path):
    """`mkdir ev/new; lewisrag eval answers --out ev/new & sleep 3; echo draft > ev/new/draft.txt` exited 0
    and draft.txt was gone: the folder was empty at the check, so nothing was carried over."""
    out = tmp_path / "new"
    out.mkdir()
    check_out_dir(out, "evaluation")
    with rewritten_dir(out, "evaluation") as d:
        (d / "results.json").write_text("1")
        (out / "draft.txt").write_text("draft")  # after the check, before the swap
        (out / "notes").mkdir()
        (out / "notes" / "a.txt").write_text("a")
    assert (out / "draft.txt").read_text() == "draft" and (out / "notes" / "a.txt").read_text() == "a"
    assert (out / "results.json").read_text() == "1"
    assert json.loads((out / MARKER).read_text())["files"] == ["results.json"]  # still the user's, not listed


@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "--overwrite"])
def test_a_file_of_an_output_name_put_into_a_new_out_meanwhile_is_refused(tmp_path, overwrite):
    out = tmp_path / "new"
    check_out_dir(out, "evaluation", overwrite=overwrite)
    with pytest.raises(InputError, match=r"results\.json.*not written by lewisrag"):
        with rewritten_dir(out, "evaluation", overwrite=overwrite) as d:
            (d / "results.json").write_text("1")
            (out / "results.json").write_text("mine")
    assert (out / "results.json").read_text() == "mine" and not (out / MARKER).exists()


def test_a_file_added_to_a_stage_folder_after_check_rerun_is_refused_not_removed(tmp_path):
    """discard_output trusted check_rerun from the start of the run: a file put into RUN/closed_book 7 s
    into a rerun was gone when the closed_book stage came."""
    run = tmp_path / "R1"
    mark(run, "reproduction")
    folder = _output(run / "closed_book", CLOSED_BOOK_KIND, {"config.json": "{}", "final/w.bin": "w"})
    S.check_rerun(run, ["closed_book"], resume=False)
    (folder / "final" / "mine.txt").write_text("mine")  # while the stages before it run
    with pytest.raises(InputError, match=r"final/mine\.txt.*not written by lewisrag.*--overwrite"):
        discard_output(folder, CLOSED_BOOK_KIND, legacy=CLOSED_BOOK_LAYOUT)
    assert (folder / "final" / "mine.txt").read_text() == "mine" and (folder / "config.json").exists()
    discard_output(folder, CLOSED_BOOK_KIND, legacy=CLOSED_BOOK_LAYOUT, overwrite=True)
    assert not folder.exists() and not (run / ".closed_book.old").exists()


def test_replace_dir_never_removes_a_folder_lewisrag_did_not_mark(tmp_path):
    """A marked output moved onto a folder that holds anything without a marker (the user's files,
    come since the check): refused, naming one, and both left as they are."""
    dst, src = tmp_path / "out", tmp_path / ".out.new"
    dst.mkdir()
    (dst / "mine.txt").write_text("mine")
    mark(src, "evaluation")
    (src / "results.json").write_text("1")
    with pytest.raises(InputError, match=r"mine\.txt.*not written by lewisrag"):
        replace_dir(src, dst)
    assert (dst / "mine.txt").read_text() == "mine" and (src / "results.json").exists()


# --- 3. --overwrite onto another kind never takes the files the user added to it ---------------------


def test_overwrite_onto_another_kind_refuses_the_files_the_user_added(tiny_corpus, tmp_path, monkeypatch, capsys):
    """A world w2 with notes.txt and sub/d.txt: `index build --out w2 --overwrite` left only the index."""
    w2 = tmp_path / "w2"
    assert run_main(monkeypatch, capsys, "world", "--out", w2, "--entities", 40)[0] == 0
    (w2 / "notes.txt").write_text("mine")
    (w2 / "sub").mkdir()
    (w2 / "sub" / "d.txt").write_text("mine too")
    before = _state(w2)
    build = ["index", "build", "--passages", tiny_corpus["passages"], "--encoder", "bm25", "--out", w2]
    for flags in ((), ("--overwrite",)):
        code, _, err = run_main(monkeypatch, capsys, *build, *flags)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "holds a lewisrag world and 2 files lewisrag did not write there (such as 'notes.txt')" in err, err
        assert _state(w2) == before
    (w2 / "notes.txt").unlink()
    (w2 / "sub" / "d.txt").unlink()
    (w2 / "sub").rmdir()
    assert run_main(monkeypatch, capsys, *build, "--overwrite")[0] == 0  # the world's own files: replaced, as documented
    assert outputs.made_by(w2) == "index"


def test_a_reproduction_holds_no_foreign_file_of_its_own_parts(qa_run, tmp_path):
    """A run's marker lists none of its stage folders (outputs of their own) and its stage records under
    "tree": none of them is taken for the user's; a note in its world is."""
    run = copy_run(qa_run, tmp_path / "run")
    assert outputs._foreign(run) == []
    (run / "world" / "mine.txt").write_text("mine")
    assert outputs._foreign(run) == ["world/mine.txt"]
    with pytest.raises(InputError, match=r"1 file lewisrag did not write there \(such as 'world/mine.txt'\)"):
        check_out_dir(run, "index", overwrite=True)


# --- 4. a mount point inside an output ---------------------------------------------------------------


def _mount(*args: str) -> None:
    if os.name != "posix" or os.geteuid() != 0:
        pytest.skip("mounting needs root; the logic is tested with os.path.ismount replaced")
    r = subprocess.run(["mount", *args], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"mount {' '.join(args)} is not possible here: {r.stderr.strip()}")


def _umount_below(folder: Path) -> None:
    """Unmount every mount below `folder`, deepest first, wherever a rename moved it (`.run.old/mnt`)."""
    below = str(folder.resolve()) + "/"
    mounts = [line.split(" ")[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(below)), key=len, reverse=True):
        subprocess.run(["umount", mount], capture_output=True)


def test_a_mount_point_inside_an_output_is_refused_before_any_work(tmp_path, monkeypatch):
    """With os.path.ismount saying so: check_out_dir, check_part and the swap refuse it by name, and the
    removal of an old folder never empties it."""
    out = tmp_path / "run"
    with rewritten_dir(out, "evaluation") as d:
        (d / "results.json").write_text("1")
    (out / "mnt").mkdir()
    (out / "mnt" / "p.txt").write_text("on the mount")
    monkeypatch.setattr(outputs.removal.os.path, "ismount", lambda p: Path(p) == out / "mnt")
    with pytest.raises(InputError, match=r"mnt: .*mount point"):
        check_out_dir(out, "evaluation")
    with pytest.raises(InputError, match=r"mnt: .*mount point"):
        check_part(out, "evaluation", overwrite=True)
    with pytest.raises(InputError, match=r"mnt: .*mount point"):  # one mounted after the check
        with rewritten_dir(out, "evaluation") as d:
            (d / "results.json").write_text("2")
    assert (out / "mnt" / "p.txt").read_text() == "on the mount" and (out / "results.json").read_text() == "1"
    outputs._discard(out)  # a folder being removed: everything of its own file system, not the mount's
    assert (out / "mnt" / "p.txt").read_text() == "on the mount" and not (out / "results.json").exists()


def test_a_real_mount_inside_an_output_is_refused_and_its_files_kept(tmp_path, monkeypatch, capsys):
    """The reviewer's case: a tmpfs at ev/run/mnt holding p.txt; `eval answers --out ev/run` deleted p.txt
    on the mount, left a copy on the parent disk and `.run.old` behind."""
    answers = tmp_path / "a.jsonl"
    answers.write_text(json.dumps({"id": "q1", "question": "Who?", "answer": "Ann [1].", "contexts": ["Ann leads."]}) + "\n")
    ev = ["eval", "answers", "--answers", answers, "--judge", "lexical", "--out", tmp_path / "run"]
    assert run_main(monkeypatch, capsys, *ev)[0] == 0
    mnt = tmp_path / "run" / "mnt"
    mnt.mkdir()
    _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt))
    try:
        (mnt / "p.txt").write_text("on the mount")
        code, _, err = run_main(monkeypatch, capsys, *ev)
        assert code == 2 and str(mnt) in err and "mount point" in err and len(err.strip().splitlines()) == 1, err
        assert (mnt / "p.txt").read_text() == "on the mount"
        assert not (tmp_path / ".run.old").exists()
        before = _state(tmp_path / "run")
        outputs._remove_tree(tmp_path / "run")  # never crosses onto the mount
        assert (mnt / "p.txt").read_text() == "on the mount" and before != _state(tmp_path / "run")
    finally:
        _umount_below(tmp_path)


# --- 5. an input through a bind mount ----------------------------------------------------------------


def test_an_input_reached_by_another_name_of_its_folder_is_refused(tmp_path, monkeypatch):
    """The kernel's identity of the folders, not their names: with bB standing for bA (as a bind mount
    makes it), bB/docs.jsonl is the input bA/docs.jsonl, and bB/x is inside the input folder bA."""
    a, b = tmp_path / "bA", tmp_path / "bB"
    a.mkdir()
    b.mkdir()
    (a / "docs.jsonl").write_text("{}\n")
    (b / "docs.jsonl").write_text("{}\n")
    real = outputs._identity
    monkeypatch.setattr(outputs.checks, "_identity", lambda p: real(a if Path(p) == b else p))
    with pytest.raises(InputError, match=r"is --docs .*bA/docs.jsonl"):
        check_out_file(b / "docs.jsonl", overwrite=True, inputs=[("--docs", a / "docs.jsonl")])
    with pytest.raises(InputError, match="is inside --model"):
        check_out_file(b / "new.json", inputs=[("--model", a)])
    with pytest.raises(InputError, match="holds --docs"):
        check_inputs_outside(b, {"--docs": a / "docs.jsonl"})
    os.link(a / "docs.jsonl", tmp_path / "linked.jsonl")  # a hard link: another entry, which a rename leaves alone
    assert check_out_file(tmp_path / "linked.jsonl", overwrite=True, inputs=[("--docs", a / "docs.jsonl")])


def test_chunk_through_a_real_bind_mount_never_replaces_its_input(tmp_path, monkeypatch, capsys):
    a, b = tmp_path / "bA", tmp_path / "bB"
    a.mkdir()
    b.mkdir()
    docs = a / "docs.jsonl"
    docs.write_text(json.dumps({"id": "d1", "title": "T", "text": "one two three four five six seven eight"}) + "\n")
    _mount("--bind", str(a), str(b))
    try:
        before = docs.read_bytes()
        code, _, err = run_main(monkeypatch, capsys, "chunk", "--docs", docs, "--out", b / "docs.jsonl", "--overwrite",
                                "--words", 5)
        assert code == 2 and "--docs" in err and len(err.strip().splitlines()) == 1, err
        assert docs.read_bytes() == before
    finally:
        _umount_below(tmp_path)


# --- 6. a kill between the two renames of a replace -------------------------------------------------


def test_an_output_left_at_dot_old_by_a_kill_is_put_back_with_the_users_files(tmp_path):
    """Killed between `replace_dir`'s renames: `.NAME.old` held the old output and the user's files,
    NAME was missing; the next run carried nothing over and removed `.NAME.old`."""
    out = tmp_path / "run"
    with rewritten_dir(out, "evaluation") as d:
        (d / "results.json").write_text("1")
    (out / "mine.txt").write_text("mine")
    os.replace(out, tmp_path / ".run.old")  # the first rename done, the kill before the second
    check_out_dir(out, "evaluation")
    assert (out / "mine.txt").read_text() == "mine" and not (tmp_path / ".run.old").exists()
    with rewritten_dir(out, "evaluation") as d:
        (d / "results.json").write_text("2")
    assert (out / "mine.txt").read_text() == "mine" and (out / "results.json").read_text() == "2"


# --- 7. a symbolic link loop ------------------------------------------------------------------------


def test_a_symbolic_link_loop_is_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"id": "d1", "title": "T", "text": "one two three"}) + "\n")
    with pytest.raises(InputError, match="is inside a symbolic link loop"):
        check_out_file(loop / "out.jsonl")
    with pytest.raises(InputError, match="loop.*field '--docs': is inside a symbolic link loop"):
        check_inputs_outside(tmp_path / "out", {"--docs": loop / "docs.jsonl"})
    code, _, err = run_main(monkeypatch, capsys, "chunk", "--docs", docs, "--out", loop / "out.jsonl")
    assert code == 2 and "symbolic link loop" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_a_resume_refuses_a_users_file_where_its_end_writes_the_report(tmp_path):
    """--resume skipped the check: its end rewrote a user's report.md (a name it always writes) without a word.
    A user's file of a name the run may not write (jeopardy_posteriors.png beside a QA run) is left alone."""
    run = tmp_path / "R1"
    mark(run, "reproduction")
    (run / "results.json").write_text("the run's")
    outputs.note_written(run, ["results.json"])
    (run / "report.md").write_text("mine")
    (run / "jeopardy_posteriors.png").write_text("mine")
    before = _state(run)
    with pytest.raises(InputError, match=r"report\.md.*not written by lewisrag.*--overwrite"):
        S.start_run(run, {"seed": 0}, resume=True)
    assert _state(run) == before
    (run / "report.md").unlink()
    S.start_run(run, {"seed": 0}, resume=True)  # nothing removed on a resume
    assert (run / "results.json").read_text() == "the run's" and (run / "jeopardy_posteriors.png").exists()


# --- 8. a file put into an output of the command's own kind after its check -------------------------


@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "--overwrite"])
def test_a_file_added_to_an_output_of_its_kind_after_the_check_is_refused_at_the_swap(tmp_path, overwrite):
    """`train dpr`, `pretrain`, `index build`, `export` check their `--out` (replaces=True), run for hours,
    then swap the new output in (`staged_dir`, `replace_dir`): a note put into the old output meanwhile was
    deleted with it, the user's files that --overwrite approved at the check with it. Now the late one is
    refused by name and the old output kept; those approved at the check are replaced, as documented."""
    out = _output(tmp_path / "out", "demo", {"data.bin": "old", "sub/w.bin": "w"})
    if overwrite:  # a file of the user's there at the check, which --overwrite approves
        (out / "approved.txt").write_text("replace me")
    check_out_dir(out, "demo", overwrite=overwrite, replaces=True)
    (out / "sub" / "late.txt").write_text("mine")  # while the command runs
    before = _state(out)
    with pytest.raises(InputError, match=r"sub/late\.txt: was not written by lewisrag .*move it away, then run "
                       r"the command again$"):
        with staged_dir(out, "demo") as tmp:
            (tmp / "data.bin").write_text("new")
    assert _state(out) == before
    (out / "sub" / "late.txt").unlink()  # moved away: the swap goes on
    with staged_dir(out, "demo") as tmp:
        (tmp / "data.bin").write_text("new")
    assert (out / "data.bin").read_text() == "new" and not (out / "approved.txt").exists() and not (out / "sub").exists()


def test_index_build_refuses_a_file_put_into_the_old_index_while_it_builds(tiny_corpus, tmp_path, monkeypatch, capsys):
    """`index build --out IDX` twice, a note put into IDX between the check and the swap: it was deleted
    with the old index (exit 0). Now exit 2, one line naming it, the old index and the note as they were."""
    from lewisrag.index import store

    idx = tmp_path / "idx"
    build = ["index", "build", "--passages", tiny_corpus["passages"], "--encoder", "bm25", "--out", idx]
    assert run_main(monkeypatch, capsys, *build)[0] == 0
    before = _state(idx)
    write = store.write_passages

    def meanwhile(partial, passages):  # called after the checks, before the new index is swapped in
        (idx / "NOTES.txt").write_text("mine")
        return write(partial, passages)

    monkeypatch.setattr(store, "write_passages", meanwhile)
    code, _, err = run_main(monkeypatch, capsys, *build)
    errors = [line for line in err.strip().splitlines() if not line.startswith("note: ")]  # "holds an index" is a note
    assert code == 2 and len(errors) == 1, err
    assert "NOTES.txt: was not written by lewisrag" in err and "move it away, then run the command again" in err, err
    assert _state(idx) == {**before, "NOTES.txt": b"mine"}
    assert [p.name for p in tmp_path.iterdir()] == ["idx"]  # no partial build left beside it
    monkeypatch.setattr(store, "write_passages", write)
    assert run_main(monkeypatch, capsys, *build, "--overwrite")[0] == 0  # there at the check: --overwrite replaces it
    assert not (idx / "NOTES.txt").exists() and outputs.made_by(idx) == "index"
