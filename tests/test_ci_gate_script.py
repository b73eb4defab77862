"""scripts/ci_gate.sh's own logic, with a stand-in for the lewisrag command ($LEWISRAG): a run that
fails before the gate says why (the tail of its log, the log kept) and exits 3; --tiny honours
GATE_BASELINE."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "ci_gate.sh"

FAKE = """#!/usr/bin/env bash
echo "$*" >> "$CALLS"
case "$1" in
  reproduce|eval)
    for i in $(seq 1 100); do echo "progress line $i"; done
    echo "the reason it stopped" >&2
    exit "${RUN_RC:-0}" ;;
  gate) echo "gate called"; exit "${GATE_RC:-0}" ;;
esac
"""


def _env(tmp_path: Path, script: str = FAKE, **extra) -> dict:
    """The environment that runs ci_gate.sh with `script` as its lewisrag."""
    fake = tmp_path / "lewisrag"
    fake.write_text(script)
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "GATE_BASELINE"}
    return {**env, "LEWISRAG": str(fake), "CALLS": str(tmp_path / "calls.txt"), "TMPDIR": str(tmp_path), **extra}


def _gate_call(tmp_path: Path) -> list[str]:
    return next(line for line in (tmp_path / "calls.txt").read_text().splitlines() if line.startswith("gate ")).split()


def test_a_failed_run_exits_3_with_the_tail_of_its_log(tmp_path):
    for mode, command in (("--tiny", "reproduce"), ("--bughunt", "eval")):
        r = subprocess.run(["bash", str(SCRIPT), mode], capture_output=True, text=True, env=_env(tmp_path, RUN_RC="2"))
        assert r.returncode == 3, (mode, r.stdout + r.stderr)
        assert f"{command}" in r.stderr and "exited 2" in r.stderr and "the reason it stopped" in r.stderr
        assert "progress line 100" in r.stderr and "progress line 1\n" not in r.stderr  # the tail, not all of it
        kept = Path(r.stderr.split("(all of it: ", 1)[1].split(")", 1)[0])
        assert kept.is_file() and "progress line 1\n" in kept.read_text()
        assert "gate called" not in r.stdout  # no verdict on a run that did not finish
        kept.unlink()


def test_tiny_gates_against_its_baseline_or_gate_baseline(tmp_path):
    r = subprocess.run(["bash", str(SCRIPT), "--tiny", "--json"], capture_output=True, text=True, env=_env(tmp_path))
    assert r.returncode == 0 and "gate called" in r.stdout and "progress line" not in r.stdout + r.stderr, r.stderr
    tiny = ROOT / "tests" / "data" / "gate_baseline_tiny"
    call = _gate_call(tmp_path)
    assert call[call.index("--baseline") + 1] == str(tiny) and call[call.index("--config") + 1] == str(tiny / "gate.toml")
    assert call[-1] == "--json"
    for with_config in (False, True):
        (tmp_path / "calls.txt").unlink()
        mine = tmp_path / f"baseline-{with_config}"
        mine.mkdir()
        if with_config:
            (mine / "gate.toml").write_text("[tier1]\n")
        r = subprocess.run(["bash", str(SCRIPT), "--tiny"], capture_output=True, text=True,
                           env=_env(tmp_path, GATE_BASELINE=str(mine), GATE_RC="1"))
        assert r.returncode == 1, r.stderr  # the gate's verdict passes through
        call = _gate_call(tmp_path)
        assert call[call.index("--baseline") + 1] == str(mine)
        assert ("--config" in call) == with_config and (not with_config or call[call.index("--config") + 1] == str(mine / "gate.toml"))


def _results(folder: Path, kind: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text('{"lewisrag": {"kind": "%s", "version": "0.1.0", "format": 1}}\n' % kind)
    return folder


def _update(tmp_path: Path, baseline: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), "--update-baseline", *args], capture_output=True, text=True,
                          env=_env(tmp_path, GATE_BASELINE=str(baseline)))


def test_update_baseline_replaces_only_a_baseline_of_the_same_kind(tmp_path):
    run = _results(tmp_path / "run", "bughunt")
    baseline = _results(tmp_path / "baseline", "bughunt")
    (baseline / "results.json").write_text('{"lewisrag": {"kind": "bughunt"}, "old": true}\n')
    r = _update(tmp_path, baseline, str(run))
    assert r.returncode == 0 and "baseline updated" in r.stdout, r.stderr
    assert (baseline / "results.json").read_text() == (run / "results.json").read_text()

    fresh = tmp_path / "fresh"  # a first baseline: an empty folder made for it
    fresh.mkdir()
    assert _update(tmp_path, fresh, str(run)).returncode == 0 and (fresh / "results.json").is_file()

    reproduction = _results(tmp_path / "reproduction", "reproduce")  # a run folder named by mistake
    (reproduction / ".lewisrag").write_text("{}\n")
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("mine\n")
    a_file = tmp_path / "a_file"
    a_file.write_text("mine\n")
    refusals = [
        (_update(tmp_path, reproduction, str(run)), "a lewisrag output folder"),
        (_update(tmp_path, tmp_path / "typo", str(run)), "no such baseline folder"),
        (_update(tmp_path, junk, str(run)), "holds files but no results.json"),
        (_update(tmp_path, a_file, str(run)), "not a folder"),
        (_update(tmp_path, baseline, str(_results(tmp_path / "other_kind", "reproduce"))), "field 'lewisrag.kind'"),
        (_update(tmp_path, baseline, str(run), "--json"), "usage:"),
        (_update(tmp_path, baseline), "usage:"),
    ]
    for r, says in refusals:
        assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, (says, r.stderr)
    assert (reproduction / "results.json").read_text().count("reproduce") == 1 and not (tmp_path / "typo").exists()
    assert sorted(p.name for p in junk.iterdir()) == ["notes.txt"] and a_file.read_text() == "mine\n"


def test_a_config_among_the_gate_flags_replaces_the_baselines(tmp_path):
    baseline = _results(tmp_path / "baseline", "bughunt")
    (baseline / "gate.toml").write_text("[tier1]\n")
    mine = tmp_path / "mine.toml"
    mine.write_text("[tier1]\n")
    for mode in (["RUN"], ["--tiny"], ["--bughunt"]):
        for flags in (["--config", str(mine)], [f"--config={mine}"]):
            (tmp_path / "calls.txt").unlink(missing_ok=True)
            r = subprocess.run(["bash", str(SCRIPT), *mode, *flags], capture_output=True, text=True,
                               env=_env(tmp_path, GATE_BASELINE=str(baseline)))
            assert r.returncode == 0, (mode, r.stderr)
            call = _gate_call(tmp_path)
            assert str(baseline / "gate.toml") not in call and call[-len(flags):] == flags, (mode, call)
