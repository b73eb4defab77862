"""`lewisrag reproduce`: the advice of a refused resume of a killed --overwrite run (which the command
resumes by itself, without --resume), and a run folder inside another lewisrag output, refused."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import run_main
from lewisrag.data.io import InputError, LewisragWarning
from lewisrag.data.outputs import check_out_dir, made_by, mark
from lewisrag.experiments.presets import PRESETS
from lewisrag.experiments.reproduce import reproduce


class Killed(Exception):
    """A stand-in for a kill: raised by a stage the test replaces."""


def _killed(*a, **kw):
    raise Killed


def _world_output(folder):
    """What `lewisrag world --out W` leaves, as far as `reproduce --overwrite` looks: another kind's output."""
    mark(folder, "world")
    (folder / "passages_a.jsonl").write_text("replaced, as --overwrite says\n")
    return folder


def test_a_refused_resume_of_a_killed_overwrite_run_says_what_to_do_not_drop_a_resume_never_given(
        tmp_path, monkeypatch, capsys):
    """`reproduce --overwrite` killed mid-run left `.W.overwrite`, which the next `reproduce --overwrite`
    resumes by itself; with other flags (`--seed 1`, another `--cpu-linear`) it was refused with "use a new
    --out or drop --resume", though no --resume was given and dropping one changes nothing. It now says
    what does: the killed run's flags finish it, deleting `.W.overwrite` starts afresh (both checked here)."""
    import lewisrag.experiments.reproduce as R

    w = _world_output(tmp_path / "W")
    staging = tmp_path / ".W.overwrite"
    monkeypatch.setattr(R, "train_world_dpr", _killed)  # killed after the world stage
    with pytest.raises(Killed):
        reproduce(PRESETS["tiny"], w, overwrite=True, cpu_linear="onednn")
    assert made_by(staging) == "reproduction" and (staging / "stages" / "world.json").is_file()
    before = (staging / "config.json").read_bytes()

    for kw, why in (({"seed": 1, "cpu_linear": "onednn"}, "--seed 1 (the run's: 0)"),
                    ({"cpu_linear": "blas"}, "--cpu-linear blas (the run's: onednn)")):
        with pytest.warns(LewisragWarning, match="resuming the killed --overwrite run"):
            with pytest.raises(InputError) as e:
                reproduce(PRESETS["tiny"], w, overwrite=True, **kw)
        message = str(e.value)
        assert why in message and "--resume to run" not in message and "drop --resume" not in message, message
        assert f"delete {staging} to start afresh" in message and "rerun with that run's flags" in message, message
        assert e.value.source == str(staging / "config.json")
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", w, "--overwrite", "--seed", 1,
                            "--cpu-linear", "onednn")
    errors = [line for line in err.strip().splitlines() if not line.startswith("warning:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err
    assert "--seed 1 (the run's: 0)" in errors[0] and "drop --resume" not in errors[0] and str(staging) in errors[0]
    assert (staging / "config.json").read_bytes() == before and (w / "passages_a.jsonl").is_file()  # nothing changed

    # the advice holds: the killed run's flags go on with it (world skipped, dpr reached) ...
    events = []
    with pytest.warns(LewisragWarning, match="resuming the killed --overwrite run"), pytest.raises(Killed):
        reproduce(PRESETS["tiny"], w, overwrite=True, cpu_linear="onednn",
                  on_stage=lambda name, event, _: events.append((name, event)))
    assert events == [("world", "skipped"), ("dpr", "started")]
    # ... and with .W.overwrite deleted, the new flags start afresh
    shutil.rmtree(staging)
    events.clear()
    with pytest.raises(Killed):
        reproduce(PRESETS["tiny"], w, overwrite=True, seed=1, cpu_linear="onednn",
                  on_stage=lambda name, event, _: events.append((name, event)))
    assert events == [("world", "started"), ("world", "done"), ("dpr", "started")]
    assert json.loads((staging / "config.json").read_text())["seed"] == 1


def test_a_run_folder_inside_another_lewisrag_output_is_refused(tmp_path, monkeypatch, capsys):
    """`reproduce --out C/dpr/sub`, C a finished run, ran to exit 0, though reproduce's docstring says its
    --out is "never a folder inside another lewisrag output": it left C/dpr holding a folder that C's next
    fresh run refused. It is now one line naming the enclosing output (exit 2), before anything is written,
    new folder or a reproduction already there, --overwrite or not; other commands' new folders inside a run
    (`compare --out RUN/compare`, `swap --out RUN/swap`) are still allowed."""
    import lewisrag.experiments.reproduce as R

    monkeypatch.setattr(R, "_world", _killed)  # the old code went on to run the stages
    c = tmp_path / "C"
    mark(c, R.KIND)
    mark(c / "dpr", "dpr")
    (c / "dpr" / "config.json").write_text("{}")
    before = sorted(p.relative_to(c) for p in c.rglob("*"))
    for out, enclosing in ((c / "dpr" / "sub", "dpr at " + str(c / "dpr")), (c / "new", "reproduction at " + str(c))):
        for flags in ((), ("--overwrite",)):
            with pytest.raises(InputError, match="is inside the lewisrag " + enclosing) as e:
                reproduce(PRESETS["tiny"], out, overwrite=bool(flags))
            assert e.value.field == "--out" and e.value.source == str(out)
            code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", out, *flags)
            assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
            assert f"is inside the lewisrag {enclosing}" in err and str(out) in err, err
    mark(c / "dpr" / "old", R.KIND)  # a reproduction the old code wrote there: not resumed either
    (c / "dpr" / "old" / "config.json").write_text("{}")
    with pytest.raises(InputError, match="is inside the lewisrag dpr at"):
        reproduce(PRESETS["tiny"], c / "dpr" / "old", resume=True)
    (c / "dpr" / "old" / "config.json").unlink()
    (c / "dpr" / "old" / ".lewisrag").unlink()
    (c / "dpr" / "old").rmdir()
    assert sorted(p.relative_to(c) for p in c.rglob("*")) == before  # nothing written, no staging folder
    # a command that adds its output to a run on purpose still may (the default of check_out_dir)
    assert check_out_dir(c / "compare", "comparison") == c / "compare"
    # and a run folder outside any output, beside C, still runs (to its first stage here)
    with pytest.raises(Killed):
        reproduce(PRESETS["tiny"], tmp_path / "D")
