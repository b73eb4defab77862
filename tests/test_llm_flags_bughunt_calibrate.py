"""`eval bughunt` and `calibrate` take an llm judge's endpoint flags as `eval answers` does
(`--llm-base-url`, `--llm-temperature`, `--llm-json-mode/--no-llm-json-mode`, `--cache-dir`,
`--concurrency`): before, the base URL came from $LEWISRAG_LLM_BASE_URL alone, and a server that
rejects response_format json_object could not judge either command's pairs at all. The settings reach
every request, the judge's fingerprint and cache keys, and what the run writes (bughunt's config.json,
calibration.json); with a judge that is not llm:MODEL each flag is refused (one line, exit 2), as is a
temperature outside 0..2. The three commands define the flags once (`commands/_llm_options.py`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from conftest import run_main
from test_llm_judge_flags import KEY, Endpoint, base  # noqa: F401  (fixture: the fake endpoint, its requests logged)

from lewisrag.cli import app
from lewisrag.data.io import InputError
from lewisrag.eval import judges
from lewisrag.eval.judges.llm import LLMJudge

LLM_ONLY = "applies to an llm judge (--judge llm:MODEL)"


def _labels(tmp_path: Path) -> Path:
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"id": f"l{i}", "premise": "Ana Kel leads Veloria.", "hypothesis": f"Ana Kel leads {i}.",
                                          "supported": True}) + "\n" for i in range(3)), encoding="utf-8")
    return labels


def _bughunt(tmp_path: Path, out: Path, *flags) -> list:
    return ["eval", "bughunt", "--out", out, *flags]


def _calibrate(tmp_path: Path, out: Path, *flags) -> list:
    return ["calibrate", "--labels", _labels(tmp_path), "--out", out, *flags]


COMMANDS = {"eval bughunt": (_bughunt, "config.json"), "calibrate": (_calibrate, "calibration.json")}


def _run(monkeypatch, capsys, tmp_path, command, url, out, *flags):
    """`command` with llm:m at `url`, given by the flag (the variable unset), and a cache of its own."""
    monkeypatch.delenv("LEWISRAG_LLM_BASE_URL", raising=False)
    monkeypatch.setenv("LEWISRAG_LLM_API_KEY", KEY)
    make, _ = COMMANDS[command]
    return run_main(monkeypatch, capsys, *make(tmp_path, out, "--judge", "llm:m", "--llm-base-url", url,
                                               "--cache-dir", tmp_path / "cache", "--concurrency", "1", *flags))


def _written(out: Path, command: str) -> dict:
    return json.loads((out / COMMANDS[command][1]).read_text(encoding="utf-8"))


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_server_that_rejects_json_mode_judges_with_no_llm_json_mode(command, monkeypatch, capsys, tmp_path, base):
    url = f"{base}/strict/v1"
    code, _, err = _run(monkeypatch, capsys, tmp_path, command, url, tmp_path / "json")  # json mode on: every request 400
    assert code == 2 and "got a reply" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "json").exists()
    assert Endpoint.bodies and all(b["response_format"] == {"type": "json_object"} and b["temperature"] == 0.0
                                   for b in Endpoint.bodies)
    Endpoint.bodies = []
    out = tmp_path / "plain"
    code, printed, err = _run(monkeypatch, capsys, tmp_path, command, url, out, "--no-llm-json-mode", "--llm-temperature", "0.3")
    assert code == 0, err
    assert command != "calibrate" or "temperature 0.3, JSON mode off" in printed, printed  # its table says so too
    assert Endpoint.bodies and all("response_format" not in b and b["temperature"] == 0.3 for b in Endpoint.bodies)
    written = _written(out, command)
    assert (written["llm_temperature"], written["llm_json_mode"]) == (0.3, False)
    want = LLMJudge(url, "m", KEY, cache_dir=tmp_path / "c", temperature=0.3, json_mode=False).fingerprint
    got = written["judge_fingerprint"] if command == "eval bughunt" else written["judge"]["fingerprint"]
    assert got == want != LLMJudge(url, "m", KEY, cache_dir=tmp_path / "c").fingerprint


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_verdict_cached_under_other_settings_is_asked_again(command, monkeypatch, capsys, tmp_path, base):
    url = f"{base}/ok/v1"
    fingerprints = []
    for n, flags in enumerate([(), ("--no-llm-json-mode",), ("--llm-temperature", "0.7"), ("--llm-temperature", "0.7")]):
        Endpoint.bodies = []
        code, _, err = _run(monkeypatch, capsys, tmp_path, command, url, tmp_path / f"out{n}", *flags)
        assert code == 0, err
        written = _written(tmp_path / f"out{n}", command)
        fingerprints.append(written["judge_fingerprint"] if command == "eval bughunt" else written["judge"]["fingerprint"])
        assert bool(Endpoint.bodies) is (n < 3), (flags, len(Endpoint.bodies))  # the last: the third run's verdicts, cached
    assert len(set(fingerprints[:3])) == 3 and fingerprints[3] == fingerprints[2]
    assert any((tmp_path / "cache").iterdir())  # --cache-dir, not the default cache


@pytest.mark.parametrize("command", list(COMMANDS))
def test_concurrency_cache_dir_and_base_url_reach_the_judge(command, monkeypatch, capsys, tmp_path):
    seen = {}

    def from_spec(spec, **kw):
        seen.update(kw, spec=spec)
        raise InputError("--judge", "stop here")

    monkeypatch.setattr(judges, "from_spec", from_spec)
    make, _ = COMMANDS[command]
    code, _, err = run_main(monkeypatch, capsys, *make(tmp_path, tmp_path / "out", "--judge", "llm:m", "--concurrency", "3",
                                                       "--cache-dir", tmp_path / "c", "--llm-base-url", "http://127.0.0.1:9/v1",
                                                       "--llm-temperature", "0.4", "--no-llm-json-mode",
                                                       "--timeout", "7", "--max-retries", "2"))
    assert code == 2 and err == "error: --judge: stop here\n", err
    assert seen == {"spec": "llm:m", "cache_dir": tmp_path / "c", "concurrency": 3, "base_url": "http://127.0.0.1:9/v1",
                    "temperature": 0.4, "json_mode": False, "timeout": 7.0, "max_retries": 2}


# each command with a judge that is not llm:MODEL (bughunt's own: the sample's human labels), each flag;
# bughunt's --cache-dir is left out: it was refused before (tests/test_faults.py)
JUDGES = [("eval bughunt", []), ("eval bughunt", ["--judge", "lexical"]), ("calibrate", ["--judge", "lexical"])]
FLAGS = [["--no-llm-json-mode"], ["--llm-temperature", "0.5"], ["--llm-base-url", "http://127.0.0.1:9/v1"], ["--concurrency", "2"],
         ["--cache-dir", "cache"]]
REFUSED = [(c, j, f) for c, j in JUDGES for f in FLAGS if (c, f[0]) != ("eval bughunt", "--cache-dir")]


@pytest.mark.parametrize("command, judge, flags", REFUSED, ids=[" ".join([c, *j, f[0]]) for c, j, f in REFUSED])
def test_the_flags_are_refused_with_a_judge_that_is_not_llm(command, judge, flags, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    make, _ = COMMANDS[command]
    code, out, err = run_main(monkeypatch, capsys, *make(tmp_path, tmp_path / "out", *judge, *flags))
    assert code == 2 and not out and err == f"error: {flags[0]}: {LLM_ONLY}\n", err
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("value", ["2.5", "-0.1", "nan", "inf"])
def test_a_temperature_outside_0_to_2_is_one_line(command, value, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("LEWISRAG_LLM_API_KEY", KEY)
    make, _ = COMMANDS[command]
    code, out, err = run_main(monkeypatch, capsys, *make(tmp_path, tmp_path / "out", "--judge", "llm:m", "--llm-base-url",
                                                         "http://127.0.0.1:9/v1", "--llm-temperature", value))
    assert code == 2 and not out and err.startswith("error: --llm-temperature: must be between 0 and 2"), err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_the_three_commands_define_the_llm_flags_alike():
    """One definition (`commands/_llm_options.py`): the same spellings, defaults, types and help everywhere."""
    commands = {" ".join(path): cmd for path, cmd in _leaves(typer.main.get_command(app), ())}
    names = ("cache_dir", "concurrency", "llm_base_url", "llm_temperature", "llm_json_mode", "timeout", "max_retries")

    def shape(cmd):
        params = {p.name: p for p in cmd.params}
        return [(p.opts, p.secondary_opts, p.default, p.help, p.min, p.is_flag) for p in (params.get(n) for n in names) if p]

    want = shape(commands["eval answers"])
    assert len(want) == len(names)
    assert shape(commands["eval bughunt"]) == want and shape(commands["calibrate"]) == want


def _leaves(cmd, path):
    for name, sub in (getattr(cmd, "commands", None) or {}).items():
        if getattr(sub, "commands", None):
            yield from _leaves(sub, (*path, name))
        else:
            yield (*path, name), sub
