"""`lewisrag reproduce`'s reliability, as review 74 found it: a SIGTERM landing in a finalizer was dropped
and the run finished with exit 0; a link, a file or a foreign folder at RUN/world was refused by the world
stage only after the earlier run's results and stage records were removed; `--out` could be the shipped
generator the small preset copies; a second command called a live `--overwrite` run killed and advised
deleting it; a damaged compare record replaced Table 1's RAG-Token row; and the base preset's question
sets, left by a kill in its data stage, were refused by the next run begun afresh as the user's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
import warnings
from pathlib import Path

import pytest

from conftest import copy_run, one_thread, run_main
from lewisrag.data.io import InputError, LewisragWarning
from lewisrag.data.outputs import exclusive, made_by, mark
from lewisrag.experiments.presets import PRESETS
from test_reproduce_base import _flags, assets  # noqa: F401 (a fixture)


class Killed(Exception):
    """A stand-in for a kill: raised where the run would go on."""


def _killed(*a, **kw):
    raise Killed


def _state(folder: Path) -> dict:
    """Every path below `folder` (links not followed), with its size and modification time."""
    return {str(p.relative_to(folder)): (p.is_symlink(), p.lstat().st_size, p.lstat().st_mtime_ns)
            for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def qa_run(tiny_qa_run, tmp_path_factory):
    """A finished tiny reproduction (QA only), this module's own copy of the session's."""
    return copy_run(tiny_qa_run, tmp_path_factory.mktemp("qa") / "run")


class _TerminateWhenCollected:
    """Sends this process SIGTERM from its finalizer, as torch's weakref callbacks may be running when one comes."""

    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)


def test_a_sigterm_that_lands_in_a_finalizer_still_stops_the_command(tmp_path, monkeypatch, capsys):
    """The handler's KeyboardInterrupt, raised inside a `__del__`, was dropped by Python ("Exception
    ignored in ..."): the command ran on to exit 0 and wrote its output. Now it stops at once, exit 143."""
    import lewisrag.cli as cli
    import lewisrag.data.world as W

    real = W.build_world

    def build(*a, **kw):
        _TerminateWhenCollected()  # collected at once: SIGTERM lands in its __del__
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # the command's own work, where the signal must land
            time.sleep(0.01)
        return real(*a, **kw)

    monkeypatch.setattr(W, "build_world", build)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # the CLI's hook, undone after the test
    monkeypatch.setattr(cli, "_TERMINATED", [])
    handler = signal.getsignal(signal.SIGTERM)
    began = time.monotonic()
    try:
        code, _, err = run_main(monkeypatch, capsys, "world", "--out", tmp_path / "w", "--entities", 40)
    finally:
        signal.signal(signal.SIGTERM, handler)
    assert code == 143 and err.strip() == "terminated (SIGTERM)", (code, err)
    assert time.monotonic() - began < 2.5 and not (tmp_path / "w").exists()


def _foreign_world(world: Path, how: str) -> None:
    """Put `how` in the place of the run's world (moved aside, beside the run, where a link points)."""
    aside = world.parent.parent / "world_elsewhere"
    shutil.move(world, aside)
    if how == "link":
        world.symlink_to(aside)
    elif how == "file":
        world.write_text("mine\n")
    elif how == "unmarked":
        world.mkdir()
        (world / "notes.txt").write_text("mine\n")
    else:  # another kind of lewisrag output
        mark(world, "index")
        (world / "index.faiss").write_text("")


@pytest.mark.parametrize("how", ["link", "file", "unmarked", "another kind"])
def test_a_rerun_refuses_what_is_in_the_worlds_place_before_removing_anything(qa_run, tmp_path, monkeypatch, how):
    """`mv RUN/world elsewhere; ln -s ../elsewhere RUN/world`: a rerun removed results.json, the reports and
    every stage record, then the world stage refused the link as "--out". Now one error naming RUN/world as
    the world stage's folder, and the run as it was."""
    import lewisrag.experiments.reproduce as R

    monkeypatch.setattr(R, "train_world_dpr", _killed)  # the stage after the world: reached only if the run goes on
    run = copy_run(qa_run, tmp_path / "box" / "run")
    _foreign_world(run / "world", how)
    before = _state(run)
    with pytest.raises(InputError) as e:
        R.reproduce(PRESETS["tiny"], run)
    assert _state(run) == before  # results.json, the reports and the stage records too
    assert e.value.source == str(run / "world") and e.value.field is None and "the world stage" in e.value.message
    assert "move it away" in e.value.message or "move them away" in e.value.message


def test_a_users_file_in_the_world_is_kept_not_refused(qa_run, tmp_path, monkeypatch):
    """The world is rewritten with the user's files carried over (`rewritten_dir`): its check refuses none."""
    import lewisrag.experiments.reproduce as R

    monkeypatch.setattr(R, "train_world_dpr", _killed)
    run = copy_run(qa_run, tmp_path / "run")
    (run / "world" / "notes.txt").write_text("mine\n")
    with pytest.raises(Killed):
        R.reproduce(PRESETS["tiny"], run)
    assert (run / "world" / "notes.txt").read_text() == "mine\n" and made_by(run / "world") == "world"


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """A copy of the package's shipped generators, which the small preset reads from here."""
    from lewisrag.experiments import stages as S

    package = tmp_path / "pretrained"
    shutil.copytree(S.SHIPPED_DIR / "generator-small", package / "generator-small")
    monkeypatch.setattr(S, "SHIPPED_DIR", package)
    return package


@pytest.mark.parametrize("where", ["generator-small", "."])
def test_out_is_never_the_shipped_generator_the_run_copies(shipped, monkeypatch, capsys, where):
    """`reproduce --preset small --out <package>/pretrained/generator-small --overwrite` was accepted: the
    finished run would have replaced the generator every later small run copies."""
    import lewisrag.experiments.reproduce as R

    monkeypatch.setattr(R, "_reproduce", _killed)
    out = (shipped / where).resolve()
    before = _state(shipped.parent)
    with pytest.raises(InputError) as e:
        R.reproduce(PRESETS["small"], out, overwrite=True)
    assert e.value.field == "--out" and f"holds --preset {shipped / 'generator-small'}" in e.value.message
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "small", "--out", out, "--overwrite")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "holds --preset" in err, err
    assert _state(shipped.parent) == before  # no staging folder beside it


def test_a_staging_folder_another_process_writes_is_not_called_killed(tmp_path, monkeypatch):
    """A second `reproduce --out W --overwrite` while the first wrote `.W.overwrite` warned "resuming the killed
    --overwrite run ... (delete that folder to start afresh)" before it found the lock: following that advice
    destroyed a live run. Now the lock is taken first: the one refusal, and no such warning."""
    import lewisrag.experiments.reproduce as R

    monkeypatch.setattr(R, "_reproduce", _killed)
    w = tmp_path / "W"
    mark(w, "world")
    (w / "passages_a.jsonl").write_text("replaced, as --overwrite says\n")
    staging = tmp_path / ".W.overwrite"
    mark(staging, R.KIND)  # the live run's
    with exclusive(staging), warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with pytest.raises(InputError, match="another lewisrag process is writing here") as e:
            R.reproduce(PRESETS["tiny"], w, overwrite=True)
    assert e.value.source == str(staging)
    assert not [w for w in said if issubclass(w.category, LewisragWarning)], [str(w.message) for w in said]
    with pytest.raises(Killed), warnings.catch_warnings(record=True) as said:  # once it ended: resumed, and said so
        warnings.simplefilter("always")
        R.reproduce(PRESETS["tiny"], w, overwrite=True)
    assert any("resuming the killed --overwrite run" in str(w.message) for w in said)


def test_a_damaged_compare_record_cannot_replace_a_trained_systems_numbers(qa_run, tmp_path, monkeypatch, capsys):
    """stages/compare.json with out.qa.rag_token added replaced Table 1's RAG-Token row on --resume (exit 0,
    n and long lost, the report showing 0.990). A stage adds under out.qa only the systems it scores."""
    from lewisrag.experiments.record_schema import check_stage_record

    run = copy_run(qa_run, tmp_path / "run")
    record = run / "stages" / "compare.json"
    damaged = json.loads(record.read_text())
    damaged["out"]["qa"]["rag_token"] = {"exact_match": 0.99, "f1": 0.99, "rougeL": 0.99}
    record.write_text(json.dumps(damaged))
    before = {name: (run / name).read_bytes() for name in ("results.json", "report.md")}
    with one_thread():
        code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run, "--resume")
    errors = [line for line in err.splitlines() if line.startswith("error:")]  # the rest: the stages skipped
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err
    assert str(record) in errors[0] and "out.qa.rag_token" in errors[0] and "does not score" in errors[0], err
    assert {name: (run / name).read_bytes() for name in before} == before  # Table 1 as the run wrote it
    evaluate = json.loads((run / "stages" / "evaluate.json").read_text())
    evaluate["out"]["qa"]["stitched"] = evaluate["out"]["qa"]["rag_token"]
    with pytest.raises(InputError, match="does not score") as e:
        check_stage_record(run / "stages" / "evaluate.json", "evaluate", evaluate)
    assert e.value.field == "out.qa.stitched"


def test_a_base_run_killed_in_its_data_stage_reruns_afresh(assets, tmp_path, monkeypatch, capsys):  # noqa: F811
    """The base preset's data stage wrote data/questions_a.jsonl unlisted (listed once the stage ended): after a
    kill there, a run begun afresh without --passages-b refused it as "not written by lewisrag". Each is
    listed before it is written now, and that run removes it as the earlier run's."""
    import lewisrag.experiments.base as B

    real = B.write_jsonl

    def write(path, records):
        n = real(path, records)
        if Path(path).name == "questions_a.jsonl":
            raise KeyboardInterrupt  # the kill, once the file is written and before the stage records itself
        return n

    out = tmp_path / "run"
    swap = ["--passages-b", assets["passages_b"], "--questions-a", assets["questions_a"], "--questions-b",
            assets["questions_b"]]
    monkeypatch.setattr(B, "write_jsonl", write)
    with one_thread():
        code, _, err = run_main(monkeypatch, capsys, *_flags(assets, out), *swap)
    assert code == 130 and (out / "data" / "questions_a.jsonl").is_file(), err
    assert not (out / "stages" / "data.json").exists()

    monkeypatch.setattr(B, "write_jsonl", real)
    monkeypatch.setattr(B, "_dense", _killed_by_ctrl_c)  # the stage after the data: the checks are what is tested
    with one_thread():
        code, _, err = run_main(monkeypatch, capsys, *_flags(assets, out))
    assert code == 130, err
    assert not (out / "data" / "questions_a.jsonl").exists() and (out / "data" / "train.jsonl").is_file()


def _killed_by_ctrl_c(*a, **kw):
    raise KeyboardInterrupt
