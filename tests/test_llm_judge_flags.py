"""The llm judge's temperature and JSON mode from the CLI (`eval answers --llm-temperature T
--no-llm-json-mode`): `LLMJudge` took both, but `judges.from_spec` and the command never passed them,
so a server that rejects response_format json_object could not judge at all. Both reach every request,
config.json and the judge's fingerprint, and a verdict cached under other settings is not reused;
with a judge that is not llm: they are refused (one line, exit 2), as is a temperature outside 0..2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ModeEndpoint, endpoint_root, run_main, send_json

from lewisrag.eval import judges
from lewisrag.eval.judges.llm import LLMJudge

KEY = "sk-judge-flags-test"


class Endpoint(ModeEndpoint):
    """POST /MODE/v1/chat/completions: verdicts (all entailment), one per numbered statement; MODE
    "strict" answers 400 to a request that asks for response_format, as some servers do. Each
    request's body is logged in `bodies`."""

    def answer(self, mode: str, body: dict, first: bool) -> None:
        if mode == "strict" and "response_format" in body:
            return send_json(self, 400, json.dumps({"error": {"message": "response_format is not supported"}}))
        user = body["messages"][1]["content"]
        n = len(user.split("Statements:\n", 1)[1].splitlines())
        content = json.dumps({"verdicts": [{"id": i, "label": "entailment", "reason": "r"} for i in range(1, n + 1)]})
        send_json(self, 200, json.dumps({"choices": [{"message": {"content": content}, "finish_reason": "stop"}],
                                         "usage": {"prompt_tokens": 3, "completion_tokens": 2}}))


@pytest.fixture
def base():
    Endpoint.bodies = []
    with endpoint_root(Endpoint, deadline=120) as root:
        yield root


def _answers(tmp_path: Path) -> Path:
    src = tmp_path / "answers.jsonl"
    src.write_text("".join(json.dumps({"id": f"q{i}", "user_input": "Who leads?", "response": f"Ana Kel leads {i}.",
                                       "retrieved_contexts": ["Ana Kel leads Veloria."], "reference": "Ana Kel"}) + "\n"
                           for i in range(2)), encoding="utf-8")
    return src


def _eval(monkeypatch, capsys, tmp_path, url, out, *extra):
    monkeypatch.setenv("LEWISRAG_LLM_API_KEY", KEY)
    return run_main(monkeypatch, capsys, "eval", "answers", "--answers", _answers(tmp_path), "--judge", "llm:m",
                    "--llm-base-url", url, "--out", out, "--cache-dir", tmp_path / "cache", "--concurrency", "1",
                    "--no-claims", *extra)


def test_a_server_that_rejects_json_mode_judges_with_no_llm_json_mode(monkeypatch, capsys, tmp_path, base):
    url = f"{base}/strict/v1"
    code, _, err = _eval(monkeypatch, capsys, tmp_path, url, tmp_path / "json")  # json mode on by default: every request 400
    assert code == 2 and "got a reply" in err and len(err.strip().splitlines()) == 1, err
    assert Endpoint.bodies and all(b["response_format"] == {"type": "json_object"} and b["temperature"] == 0.0
                                   for b in Endpoint.bodies)
    Endpoint.bodies = []
    code, _, err = _eval(monkeypatch, capsys, tmp_path, url, tmp_path / "plain", "--no-llm-json-mode", "--llm-temperature", "0.3")
    assert code == 0, err
    assert Endpoint.bodies and all("response_format" not in b and b["temperature"] == 0.3 for b in Endpoint.bodies)
    config = json.loads((tmp_path / "plain" / "config.json").read_text(encoding="utf-8"))
    assert (config["llm_temperature"], config["llm_json_mode"]) == (0.3, False)
    want = LLMJudge(url, "m", KEY, cache_dir=tmp_path / "c", temperature=0.3, json_mode=False).fingerprint
    assert config["judge_fingerprint"] == want != LLMJudge(url, "m", KEY, cache_dir=tmp_path / "c").fingerprint


def test_a_verdict_cached_under_other_settings_is_asked_again(monkeypatch, capsys, tmp_path, base):
    url = f"{base}/ok/v1"
    fingerprints = []
    for n, flags in enumerate([(), ("--no-llm-json-mode",), ("--no-llm-json-mode", "--llm-temperature", "0.7"),
                               ("--no-llm-json-mode", "--llm-temperature", "0.7")]):
        Endpoint.bodies = []
        code, _, err = _eval(monkeypatch, capsys, tmp_path, url, tmp_path / f"out{n}", *flags)
        assert code == 0, err
        fingerprints.append(json.loads((tmp_path / f"out{n}" / "config.json").read_text(encoding="utf-8"))["judge_fingerprint"])
        assert bool(Endpoint.bodies) is (n < 3), (flags, len(Endpoint.bodies))  # the last: the third run's verdicts, cached
    assert len(set(fingerprints[:3])) == 3 and fingerprints[3] == fingerprints[2]


def test_from_spec_passes_temperature_and_json_mode(tmp_path):
    a = judges.from_spec("llm:m", base_url="http://127.0.0.1:9/v1", cache_dir=tmp_path)
    b = judges.from_spec("llm:m", base_url="http://127.0.0.1:9/v1", cache_dir=tmp_path, temperature=0.5, json_mode=False)
    assert (a.temperature, a.json_mode, b.temperature, b.json_mode) == (0.0, True, 0.5, False)
    assert a.fingerprint != b.fingerprint and a._key_for("judge", "p", "h") != b._key_for("judge", "p", "h")


@pytest.mark.parametrize("flags, flag", [(["--no-llm-json-mode"], "--no-llm-json-mode"),
                                         (["--llm-temperature", "0.5"], "--llm-temperature")])
def test_the_flags_are_refused_with_a_judge_that_is_not_llm(monkeypatch, capsys, tmp_path, flags, flag):
    code, out, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", _answers(tmp_path), "--out",
                              tmp_path / "out", *flags)
    assert code == 2 and not out and err == f"error: {flag}: applies to an llm judge (--judge llm:MODEL)\n", err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["2.5", "-0.1", "nan", "inf"])
def test_a_temperature_outside_0_to_2_is_one_line(monkeypatch, capsys, tmp_path, value):
    monkeypatch.setenv("LEWISRAG_LLM_API_KEY", KEY)
    code, out, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", _answers(tmp_path), "--judge", "llm:m",
                              "--llm-base-url", "http://127.0.0.1:9/v1", "--out", tmp_path / "out", "--llm-temperature", value)
    assert code == 2 and not out and err.startswith("error: --llm-temperature: must be between 0 and 2"), err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_minus_zero_is_the_temperature_zero(tmp_path):
    """`--llm-temperature -0` passed the range check and made a fingerprint and cache keys of its own."""
    url = "http://127.0.0.1:9/v1"
    zero = LLMJudge(url, "m", KEY, cache_dir=tmp_path, temperature=0.0)
    for same in (-0.0, 0):
        judge = LLMJudge(url, "m", KEY, cache_dir=tmp_path, temperature=same)
        assert judge.fingerprint == zero.fingerprint and json.dumps(judge.client.temperature) == "0.0"
