"""A reproduction lists each file it writes at the top of RUN in its marker before writing it
(`outputs.note_writing`), not once its stage or the run is done: killed between the two (SIGKILL,
SIGTERM, Ctrl-C), it left results.json, position.png or predictions.json unlisted, and the next
rerun, --resume or not, refused lewisrag's own file as the user's (exit 2, "was not written by
lewisrag"); only --overwrite or deleting it by hand got going again.

Each kill is a KeyboardInterrupt raised right after the file is written, in a --resume of a finished
tiny run whose stage (or end) was made to run again with that file gone and unlisted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import copy_run, run_main
from lewisrag.data.outputs import MARKER, _foreign, added_files, note_writing, note_written, wrote
from lewisrag.experiments import compare as compare_module
from lewisrag.experiments import reproduce as reproduce_module
from lewisrag.experiments import stages as S
from lewisrag.experiments.presets import PRESETS
from lewisrag.experiments.report import report_files, write_report
from lewisrag.experiments.reproduce import reproduce


@pytest.fixture(scope="module")
def qa_run(tiny_qa_run, tmp_path_factory):
    """A finished tiny reproduction (QA only), this module's own copy of the session's."""
    return copy_run(tiny_qa_run, tmp_path_factory.mktemp("qa") / "run")


def _boom(*args, **kwargs):
    raise KeyboardInterrupt


def _after(fn):
    """`fn`, then a KeyboardInterrupt: a kill right after it wrote its file."""
    def killed(*args, **kwargs):
        fn(*args, **kwargs)
        raise KeyboardInterrupt
    return killed


# kill point -> (stage records to forget, files to remove and unlist, where to interrupt, the file left there)
KILLS = {
    "finish": ((), (*S.REWRITTEN, "em_vs_k.png", "swap_matrix.png"),
               (reproduce_module, "write_report", lambda: _boom), "results.json"),
    "compare": (("compare",), ("position.png", "report.html"),
                (compare_module, "plot_positions", lambda: _after(compare_module.plot_positions)), "position.png"),
    "evaluate": (("evaluate",), ("predictions.json", "evidence.json"),
                 (S, "write_evidence", lambda: _boom), "predictions.json"),
}


def _killed(qa_run: Path, to: Path, monkeypatch, where: str) -> Path:
    """A copy of the finished run at `to`, its stage `where` (or its end) killed right after it wrote a
    file new to the run: one its marker did not list before."""
    forget, remove, (module, name, make), left = KILLS[where]
    run = copy_run(qa_run, to)
    for stage in forget:
        S.stage_record(run, stage).unlink()
    for f in remove:
        (run / f).unlink(missing_ok=True)
    note_written(run, [])  # the marker drops the names no longer there: the files are new to the run
    assert not wrote(run, left)
    with monkeypatch.context() as m:
        m.setattr(module, name, make())
        with pytest.raises(KeyboardInterrupt):
            reproduce(PRESETS["tiny"], run, seed=0, resume=True)
    assert (run / left).is_file()
    return run


@pytest.mark.parametrize("where", list(KILLS))
def test_a_file_the_run_wrote_before_a_kill_is_its_own_to_resume_and_rerun(qa_run, tmp_path, monkeypatch, capsys, where):
    run = _killed(qa_run, tmp_path / "run", monkeypatch, where)
    assert wrote(run, KILLS[where][3])  # listed before it was written
    plain = copy_run(run, tmp_path / "plain")
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run, "--seed", "0", "--resume")
    assert code == 0, err
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", plain, "--seed", "0")
    assert code == 0, err
    for folder in (run, plain):
        assert (folder / "results.json").is_file() and wrote(folder, "results.json") and wrote(folder, KILLS[where][3])
        assert not _foreign(folder)  # nothing the run wrote taken for the user's


def test_the_end_lists_before_writing_them_the_report_files_it_writes_and_no_other(qa_run, tmp_path):
    """`report_files` names what `write_report` writes: no more (a QA run's marker never lists a
    jeopardy_posteriors.png, which the user may keep beside it), no less (each is listed before it is there)."""
    run = copy_run(qa_run, tmp_path / "run")
    for name in S.FINISHED:
        if name.endswith(".png") and name != "position.png" or name == "report.md":
            (run / name).unlink(missing_ok=True)
    before = set(p.name for p in run.iterdir())
    results = json.loads((run / "results.json").read_text())
    write_report(run, results)
    assert set(p.name for p in run.iterdir()) - before == set(report_files(results))
    assert "jeopardy_posteriors.png" not in report_files(results) and "token_posteriors.png" in report_files(results)
    assert set(S.REWRITTEN) - {"results.json", "timings.json"} <= set(report_files({}))  # drawn for any results


def test_resume_names_what_would_replace_a_users_results(qa_run, tmp_path, monkeypatch, capsys):
    """A user's results.json where a resumed run ends: refused, saying the end of a resumed run rewrites
    it (it said "a run begun afresh removes" the file, which a --resume does not do)."""
    run = copy_run(qa_run, tmp_path / "run")
    (run / "results.json").unlink()
    note_written(run, [])
    (run / "results.json").write_text("{}\n")  # the user's
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run, "--seed", "0", "--resume")
    assert code == 2, err
    assert str(run / "results.json") in err and "resumed run rewrites" in err and "begun afresh" not in err, err
    assert (run / "results.json").read_text() == "{}\n"


def _marked(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir()
    (folder / MARKER).write_text(json.dumps({"made_by": "lewisrag", "kind": "reproduction", "files": [], "tree": []}))
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def test_a_name_listed_before_its_write_never_claims_a_users_file_and_harms_nothing_unwritten(tmp_path):
    run = _marked(tmp_path / "run", {"config.json": "{}", "results.json": "the user's"})
    note_written(run, ["config.json"])
    note_writing(run, ["results.json", "report.md", "jeopardy/predictions.json", "config.json"])
    assert not wrote(run, "results.json")  # there, and not the run's: left to `note_written` once rewritten
    assert wrote(run, "report.md") and wrote(run, "jeopardy/predictions.json") and wrote(run, "config.json")
    # never written (a kill during the write): nothing there to take for lewisrag's or the user's
    assert added_files(run) == ["results.json"] and _foreign(run) == ["results.json"]
    assert S.finished_files(run, names=("report.md",)) == []
    note_written(run, [])  # the next listing drops what is not there
    assert json.loads((run / MARKER).read_text())["files"] == ["config.json"]
    assert json.loads((run / MARKER).read_text())["tree"] == []


def test_listing_before_a_write_leaves_a_folder_without_a_marker_as_it_is(tmp_path):
    (tmp_path / "plain").mkdir()
    note_writing(tmp_path / "plain", ["results.json"])
    assert list((tmp_path / "plain").iterdir()) == []


@pytest.mark.parametrize("stage,name", [(None, "training_curves.png"), (None, "token_posteriors.png"),
                                        ("evaluate", "predictions.json"), ("compare", "position.png"),
                                        ("compare", "report.html"), (None, "em_vs_k.png"), (None, "swap_matrix.png")])
def test_resume_refuses_a_users_file_it_would_rewrite(qa_run, tmp_path, monkeypatch, capsys, stage, name):
    """A resumed run's end draws the plots every report draws and the plot of each section the run has
    (em_vs_k.png with ablations), and a stage it reruns writes its files at RUN's top: --resume checked
    only results.json, timings.json and report.md, so a user's file of such a name was replaced in silence."""
    run = copy_run(qa_run, tmp_path / "run")
    if stage:
        S.stage_record(run, stage).unlink()
    (run / name).unlink()
    note_written(run, [])
    (run / name).write_bytes(b"the user's")
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run, "--seed", "0", "--resume")
    assert code == 2 and str(run / name) in err and "resumed run rewrites" in err, err
    assert (run / name).read_bytes() == b"the user's"
