"""`lewisrag reproduce`: the edges of --resume and --overwrite. A resume of a run whose config.json is gone
(its stage records kept) is refused, not relabelled with the new flags; a refused resume advises only what
the command accepts beside --resume; --overwrite never takes over a `.NAME.overwrite` folder of the user's;
and the test questions no score counts (no answer: results.json's test_unscored) are said under Table 1
and on stderr. Each run here stops after its world stage (`_killed`): no model is trained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_main
from lewisrag.data.io import InputError, LewisragWarning
from lewisrag.data.outputs import check_out_dir, made_by, mark, note_written
from lewisrag.experiments import stages as S
from lewisrag.experiments.presets import PRESETS
from lewisrag.experiments.report import render_report
from lewisrag.training.dpr import KIND as DPR_KIND

BASELINE = Path(__file__).parent / "data" / "gate_baseline_tiny" / "results.json"  # a tiny run's results.json


class Killed(Exception):
    """A stand-in for a kill: raised by a stage the test replaces."""


def _killed(*a, **kw):
    raise Killed


@pytest.fixture
def stop_after_world(monkeypatch):
    """reproduce, whose dpr stage (the first after the world) is a kill."""
    import lewisrag.experiments.reproduce as R

    monkeypatch.setattr(R, "train_world_dpr", _killed)
    return R


def _state(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


def _one_error_line(err: str) -> str:
    errors = [line for line in err.strip().splitlines() if not line.startswith("warning:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def test_a_resume_without_config_json_is_refused_not_relabelled(stop_after_world, tmp_path, monkeypatch, capsys):
    """`rm RUN/config.json; reproduce --out RUN --resume --seed 5` skipped every finished stage (nothing to
    compare the flags with) and wrote seed 5 over records made with seed 0, exit 0. Now: one line naming
    config.json (exit 2), nothing changed; a resume with no stage record left still runs."""
    R = stop_after_world
    run = tmp_path / "run"
    with pytest.raises(Killed):
        R.reproduce(PRESETS["tiny"], run, seed=0)
    (run / "config.json").unlink()
    before = _state(run)
    with pytest.raises(InputError) as e:
        R.reproduce(PRESETS["tiny"], run, seed=5, resume=True)
    assert e.value.source == str(run / "config.json") and "world.json" in e.value.message, e.value
    assert "drop --resume" in e.value.message and "--overwrite" not in e.value.message, e.value
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run, "--resume", "--seed", 5)
    line = _one_error_line(err)
    assert code == 2 and str(run / "config.json") in line and "missing" in line, err
    assert _state(run) == before  # no config.json written for seed 5, no record forgotten

    (run / "stages" / "world.json").unlink()  # nothing finished to mix with: the resume starts at the world
    events = []
    with pytest.raises(Killed):
        R.reproduce(PRESETS["tiny"], run, seed=5, resume=True, on_stage=lambda name, event, _: events.append((name, event)))
    assert events[:2] == [("world", "started"), ("world", "done")]
    assert json.loads((run / "config.json").read_text())["seed"] == 5


def test_a_killed_overwrite_run_without_config_json_advises_deleting_its_folder(stop_after_world, tmp_path):
    """The same refusal for the staging folder `reproduce --overwrite` resumes by itself: it advises deleting
    that folder, not dropping a --resume never given (`_staged_advice`)."""
    R = stop_after_world
    w = tmp_path / "W"
    mark(w, "world")
    (w / "passages_a.jsonl").write_text("replaced, as --overwrite says\n")
    staging = tmp_path / ".W.overwrite"
    with pytest.raises(Killed):
        R.reproduce(PRESETS["tiny"], w, overwrite=True)
    (staging / "config.json").unlink()
    with pytest.warns(LewisragWarning, match="resuming the killed --overwrite run"), pytest.raises(InputError) as e:
        R.reproduce(PRESETS["tiny"], w, overwrite=True)
    assert e.value.source == str(staging / "config.json") and f"delete {staging} to start afresh" in e.value.message
    assert "drop --resume" not in e.value.message, e.value
    assert not (staging / "config.json").exists() and (staging / "stages" / "world.json").is_file()


def test_a_refused_resume_never_advises_overwrite_alone(stop_after_world, tmp_path, monkeypatch, capsys):
    """A user's file that a resume would replace was refused with "pass --overwrite to replace it", which the
    CLI then refused beside --resume ("--overwrite: does not apply with --resume"). A resume's advice now drops
    --resume first; a run begun afresh still advises --overwrite as it did."""
    R = stop_after_world
    run = tmp_path / "run"
    with pytest.raises(Killed):
        R.reproduce(PRESETS["tiny"], run)
    mine = run / "training_curves.png"  # one the end of every run rewrites (`stages.REWRITTEN`)
    mine.write_bytes(b"the user's plot")
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run, "--resume")
    line = _one_error_line(err)
    assert code == 2 and str(mine) in line, err
    assert "move it away, or drop --resume and pass --overwrite to replace it" in line, line
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run)  # afresh: as before
    assert code == 2 and "move it away, or pass --overwrite to remove it" in _one_error_line(err), err
    assert mine.read_bytes() == b"the user's plot"

    # a user's file in the folder of a stage a resume redoes (`stages.check_rerun` -> `outputs.check_part`)
    dpr = run / "dpr"
    mark(dpr, DPR_KIND)
    (dpr / "config.json").write_text("{}")
    note_written(dpr, ["config.json"])
    (dpr / "NOTES_user.txt").write_text("mine\n")
    with pytest.raises(InputError) as resumed:
        S.check_rerun(run, ["world", "dpr"], resume=True)
    assert "move it away, or drop --resume and pass --overwrite to replace it" in resumed.value.message, resumed.value
    with pytest.raises(InputError) as afresh:
        S.check_rerun(run, ["world", "dpr"], resume=False)
    assert "move it away, or pass --overwrite to replace it" in afresh.value.message, afresh.value

    # --out not a reproduction (`outputs.check_out_dir`): --resume would be refused beside --overwrite too
    w = tmp_path / "W"
    mark(w, "world")
    (w / "world.json").write_text("{}")
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", w, "--resume")
    assert code == 2 and "choose another or drop --resume and pass --overwrite to replace it" in _one_error_line(err), err
    with pytest.raises(InputError, match="choose another or pass --overwrite to replace it"):
        check_out_dir(w, "reproduction")


def test_overwrite_never_takes_over_a_users_staging_folder(tmp_path, monkeypatch, capsys):
    """`reproduce --out W --overwrite` (W another kind of output) stages its run in `.W.overwrite`; one of the
    user's there, not empty and not a reproduction, lost its results.json and was marked a reproduction before
    the world stage refused it. Now one line naming it (exit 2), before anything is removed; an empty one is used."""
    import lewisrag.experiments.reproduce as R

    monkeypatch.setattr(R, "_world", _killed)  # the first stage: reached only when the run goes on
    w = tmp_path / "W"
    mark(w, "world")
    (w / "passages_a.jsonl").write_text("replaced, as --overwrite says\n")
    staging = tmp_path / ".W.overwrite"
    (staging / "world").mkdir(parents=True)
    (staging / "results.json").write_text("the user's\n")
    before = _state(tmp_path)
    with pytest.raises(InputError) as e:
        R.reproduce(PRESETS["tiny"], w, overwrite=True)
    assert e.value.source == str(staging) and e.value.field == "--out" and "move it away" in e.value.message
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", w, "--overwrite")
    assert code == 2 and str(staging) in _one_error_line(err), err
    assert _state(tmp_path) == before and made_by(staging) is None

    for path in ((staging / "world"), (staging / "results.json")):  # emptied: the run goes on into it
        path.rmdir() if path.is_dir() else path.unlink()
    with pytest.raises(Killed):
        R.reproduce(PRESETS["tiny"], w, overwrite=True)
    assert made_by(staging) == R.KIND


def _results(unscored: int, lang: str = "en") -> dict:
    results = json.loads(BASELINE.read_text())
    results["test_unscored"] = unscored
    results["config"] = results["config"] | ({"lang": lang} if lang != "en" else {})
    return results


@pytest.mark.parametrize("lang, said", [("en", "Test questions left out of every QA score, having no reference "
                                                "answer to score against: 3 of 43."),
                                        ("zh", "所有问答得分都不含没有参考答案、无从计分的测试题：43 道中的 3 道。")])
def test_the_report_says_how_many_test_questions_no_score_counts(lang, said):
    """results.json's test_unscored (test questions without an answer, dropped from scoring) was in no
    report: Table 1 read as over every test question. Said under it now, out of the split's (34 short and 6
    long scored here, and those 3)."""
    text = render_report(_results(3, lang))
    assert said in text
    table1 = text.index("## 开放域问答" if lang == "zh" else "## Open-domain QA")
    assert table1 < text.index(said) < text.index("\n## ", table1 + 1)  # under Table 1, before the next section
    assert said not in render_report(_results(0, lang))


def test_the_command_notes_the_unscored_test_questions_on_stderr(tmp_path, monkeypatch, capsys):
    import lewisrag.experiments.reproduce as R

    for unscored, note in ((3, "note: the test QA scores leave out 3 test questions without a reference answer"),
                           (1, "note: the test QA scores leave out 1 test question without"), (0, None)):
        monkeypatch.setattr(R, "reproduce", lambda *a, n=unscored, **kw: _results(n))  # a stand-in run
        for flags in ((), ("--json",)):
            code, out, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", tmp_path / "run",
                                      *flags)
            assert code == 0, err
            notes = [line for line in err.splitlines() if "test_unscored" in line]
            assert notes == ([] if note is None else [notes[0]]) and "test_unscored" not in out
            assert note is None or notes[0].startswith(note), notes
