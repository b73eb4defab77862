"""An endpoint that refuses every request for a reason that will not change (HTTP 401/403: the key;
404: the model or the path; a redirect, not followed) once went on being asked for every question,
each answer null, and the command exited 0 as if it had scored something. Now the client stops at
the first such refusal (the remaining requests fail at once, unsent, with the same reason) and the
commands end with one line naming the endpoint's base URL (never the key) and the flag or variable
to fix, exit 2, nothing written. A run in which no request got a reply ends the same way; one in
which some failed is scored, the failures counted and null, exit 0, as before. And `ChatGenerator`'s
failed answers are told from empty ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ModeEndpoint, endpoint_root, run_main, send_json
from test_rag_train import build_rag_inputs

from lewisrag.chat_client import ChatClient, ChatError, EndpointError
from lewisrag.eval.judges.llm import LLMJudge
from lewisrag.rag_model.stitched import ChatGenerator, FailedAnswer, PromptStitchingRAG

KEY = "sk-failfast-SECRET-92c4d7"
FATAL = ["401", "403", "404", "302"]


class Endpoint(ModeEndpoint):
    """POST /MODE/v1/chat/completions. MODE 401/403/404/400/503: that status with an error body
    (which echoes the Authorization header: it must reach no message); 302: a redirect; "ok":
    verdicts (all entailment) for a judge's request, else "Ana Kel [1]"; "mixed": "ok", but 400 for
    a request whose user message holds FAILME. Every request is logged in `seen`."""

    def answer(self, mode: str, body: dict, first: bool) -> None:
        user = body["messages"][1]["content"]
        if mode == "302":
            return self.reply(302, "", {"Location": "https://elsewhere.example/v1/chat/completions"})
        if mode.isdigit() or (mode == "mixed" and "FAILME" in user):
            code = 400 if mode == "mixed" else int(mode)
            echo = f"bad request; you sent {self.headers.get('Authorization')}"
            return self.reply(code, json.dumps({"error": {"message": echo}}))
        if "Statements:" in user:  # the judge: one verdict per numbered statement
            n = len(user.split("Statements:\n", 1)[1].splitlines())
            content = json.dumps({"verdicts": [{"id": i, "label": "entailment", "reason": "r"} for i in range(1, n + 1)]})
        else:
            content = "Ana Kel [1]"
        self.reply(200, json.dumps({"choices": [{"message": {"content": content}, "finish_reason": "stop"}],
                                    "usage": {"prompt_tokens": 3, "completion_tokens": 2}}))

    def reply(self, code: int, payload: str, headers: dict | None = None) -> None:
        send_json(self, code, payload, headers)


@pytest.fixture
def base():
    """The fake endpoint's root: f"{base}/MODE/v1" is a base URL."""
    with endpoint_root(Endpoint, deadline=120) as root:
        yield root


def client(url: str, **kw) -> ChatClient:
    return ChatClient(url, "m", KEY, **{"max_retries": 2, "backoff": 0.001, "timeout": 5.0, "seed": 0, **kw})


# ---------------------------------------------------------------------------------------------
# the client


@pytest.mark.parametrize("mode", FATAL)
def test_a_refusal_every_request_would_get_stops_the_client(base, mode):
    c = client(f"{base}/{mode}/v1")
    with pytest.raises(EndpointError) as first:
        c.complete("s", "u1")
    reason = str(first.value)
    assert reason.startswith(f"HTTP {mode} (1 attempt)") and KEY not in reason and c.broken is not None
    for i in range(5):  # the same reason at once, nothing sent
        with pytest.raises(EndpointError) as again:
            c.complete("s", f"u{i + 2}")
        assert str(again.value) == reason
    assert Endpoint.seen == [mode] and c.usage["failures"] == 6 and c.usage["calls"] == 1 and c.answered == 0


@pytest.mark.parametrize("mode", ["400", "503"])
def test_a_refusal_that_may_differ_per_request_does_not(base, mode):
    """400 (a prompt too long) is one request's; 503 may heal. Both keep asking once the endpoint has answered
    (before any reply, a request that spent its retries on 503s stops the client: test_llm_unanswered_and_errors.py)."""
    c = client(f"{base}/{mode}/v1", max_retries=0)
    c.count(answered=1)  # an earlier request of the run got its reply
    for _ in range(3):
        with pytest.raises(ChatError) as e:
            c.complete("s", "u")
        assert not isinstance(e.value, EndpointError)
    assert Endpoint.seen == [mode] * 3 and c.broken is None


def test_concurrent_requests_stop_at_the_first_refusal(base):
    gen = ChatGenerator(client(f"{base}/401/v1", max_workers=2))
    answers = gen([f"prompt {i}" for i in range(40)])
    assert len(Endpoint.seen) <= 2  # those already in flight, then none
    assert all(isinstance(a, FailedAnswer) and a.failure.startswith("HTTP 401 (1 attempt)") for a in answers)
    assert len(gen.failures) == 40


def test_run_error_names_the_base_url_and_what_to_fix_never_the_key(base):
    url = f"{base}/401/v1"
    c = client(url)
    assert c.run_error(key="$K", model="--m", url="--u") is None  # nothing asked yet
    with pytest.raises(EndpointError):
        c.complete("s", "u")
    e = c.run_error(key="$K", model="--m", url="--u")
    text = str(e)
    assert text.startswith(f"$K: stopped asking {url}: HTTP 401 (1 attempt): the endpoint rejected the API key"), text
    assert "set it to a key this endpoint accepts" in text and KEY not in text and "\n" not in text
    c = client(f"{base}/404/v1")
    with pytest.raises(EndpointError):
        c.complete("s", "u")
    assert str(c.run_error(key="$K", model="--m", url="--u")).startswith(f"--m: stopped asking {base}/404/v1: HTTP 404")
    c = client(f"{base}/302/v1")
    with pytest.raises(EndpointError):
        c.complete("s", "u")
    assert str(c.run_error(key="$K", model="--m", url="--u")).startswith(f"--u: stopped asking {base}/302/v1: HTTP 302")
    c = client(f"{base}/400/v1", max_retries=0)  # nothing answered, nothing broken
    for _ in range(2):
        with pytest.raises(ChatError):
            c.complete("s", "u")
    text = str(c.run_error(key="$K", model="--m", url="--u"))
    assert text.startswith(f"--u: none of the 2 requests to {base}/400/v1 got a reply (the first: HTTP 400 (1 attempt)")
    assert KEY not in text and c.run_error(key="$K", model="--m", url="--u", served=1) is None  # a cache hit answered


def test_the_judge_stops_and_its_verdicts_keep_the_reason(base, tmp_path):
    j = LLMJudge(f"{base}/403/v1", "m", KEY, cache_dir=tmp_path, max_workers=1, batch_size=1, max_retries=2, backoff=0.001)
    verdicts = j.judge([(f"premise {i}", "hypothesis") for i in range(10)])
    assert Endpoint.seen == ["403"] and all(v.supported is None and v.reason.startswith("HTTP 403 (1 attempt)") for v in verdicts)
    e = j.run_error()
    assert str(e).startswith(f"$LEWISRAG_LLM_API_KEY: stopped asking {base}/403/v1: HTTP 403") and KEY not in str(e)


# ---------------------------------------------------------------------------------------------
# ChatGenerator: a failed answer is not an empty one


def test_chat_generator_tells_a_failed_answer_from_an_empty_one():
    """A failed request answered "", which is also what a model that says nothing answers."""
    class Client:
        max_workers = 2

        def complete(self, system, prompt):
            if "fail" in prompt:
                raise ChatError("HTTP 503 (3 attempts): try later")
            return "   "  # the model's empty answer

    gen = ChatGenerator(Client())
    failed, empty = gen(["fail", "ok"])
    assert isinstance(failed, FailedAnswer) and failed.failure == "HTTP 503 (3 attempts): try later"
    assert empty == "" and not isinstance(empty, FailedAnswer) and getattr(empty, "failure", None) is None
    assert failed == "" and gen.failures == [("fail", "HTTP 503 (3 attempts): try later")]  # the protocol's str still
    from lewisrag.data.records import Passage

    (a,) = PromptStitchingRAG(None, gen).answer_with(["fail"], [[Passage("p1", "T", "x")]])
    assert isinstance(a.answer, FailedAnswer) and a.cited == []  # what PromptStitchingRAG returns keeps it


# ---------------------------------------------------------------------------------------------
# the commands


def _answers(tmp_path: Path, n: int = 3, fail: set[int] = frozenset()) -> Path:
    src = tmp_path / "answers.jsonl"
    src.write_text("".join(json.dumps({"id": f"q{i}", "user_input": "Who leads?", "response": f"Ana Kel leads {i} [1].",
                                       "retrieved_contexts": [f"Ana Kel leads Veloria {'FAILME' if i in fail else ''}."],
                                       "reference": "Ana Kel"}) + "\n" for i in range(n)))
    return src


def _eval(monkeypatch, capsys, tmp_path, url, *extra):
    monkeypatch.setenv("LEWISRAG_LLM_API_KEY", KEY)
    return run_main(monkeypatch, capsys, "eval", "answers", "--answers", _answers(tmp_path, *extra), "--judge", "llm:m",
                    "--llm-base-url", url, "--out", tmp_path / "out", "--cache-dir", tmp_path / "cache", "--concurrency", "1")


@pytest.mark.parametrize("mode, source", [("401", "$LEWISRAG_LLM_API_KEY"), ("403", "$LEWISRAG_LLM_API_KEY"),
                                          ("404", "--judge"), ("302", "--llm-base-url")])
def test_eval_answers_ends_at_the_first_refusal_in_one_line(monkeypatch, capsys, tmp_path, base, mode, source):
    url = f"{base}/{mode}/v1"
    code, out, err = _eval(monkeypatch, capsys, tmp_path, url)
    assert code == 2 and err.startswith(f"error: {source}: stopped asking {url}: HTTP {mode}"), err
    assert len(err.strip().splitlines()) == 1 and KEY not in err + out
    assert Endpoint.seen == [mode] and not (tmp_path / "out").exists()


def test_eval_answers_with_no_reply_at_all_exits_2(monkeypatch, capsys, tmp_path, base):
    code, _, err = _eval(monkeypatch, capsys, tmp_path, f"{base}/400/v1")
    assert code == 2 and err.startswith("error: --llm-base-url: none of the ") and f"requests to {base}/400/v1 got a reply" in err
    assert len(err.strip().splitlines()) == 1 and KEY not in err and not (tmp_path / "out").exists()
    assert len(Endpoint.seen) > 1  # a 400 is one request's: each was asked


def test_eval_answers_with_some_failures_is_scored_and_exits_0(monkeypatch, capsys, tmp_path, base):
    url = f"{base}/mixed/v1"
    code, _, err = _eval(monkeypatch, capsys, tmp_path, url, 3, {1})
    assert code == 0, err
    text = (tmp_path / "out" / "results.json").read_text(encoding="utf-8")
    assert "HTTP 400 (1 attempt)" in text and base not in text and KEY not in text  # reasons kept, without the URL


def test_eval_bughunt_ends_at_the_first_refusal(monkeypatch, capsys, tmp_path, base):
    url = f"{base}/401/v1"
    monkeypatch.setenv("LEWISRAG_LLM_BASE_URL", url)
    monkeypatch.setenv("LEWISRAG_LLM_API_KEY", KEY)
    code, out, err = run_main(monkeypatch, capsys, "eval", "bughunt", "--judge", "llm:m", "--cache-dir", tmp_path / "c",
                              "--out", tmp_path / "out")
    assert code == 2 and err.startswith(f"error: $LEWISRAG_LLM_API_KEY: stopped asking {url}: HTTP 401"), err
    assert len(err.strip().splitlines()) == 1 and KEY not in err + out and not (tmp_path / "out").exists()


def test_calibrate_ends_at_the_first_refusal_naming_the_endpoint(monkeypatch, capsys, tmp_path, base):
    """calibrate ended with its own "decided none" line, which named neither the endpoint nor the key."""
    url = f"{base}/401/v1"
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"id": f"l{i}", "premise": "Ana Kel leads Veloria.", "hypothesis": "Ana Kel leads.",
                                          "supported": True}) + "\n" for i in range(4)))
    monkeypatch.setenv("LEWISRAG_LLM_BASE_URL", url)
    monkeypatch.setenv("LEWISRAG_LLM_API_KEY", KEY)
    code, out, err = run_main(monkeypatch, capsys, "calibrate", "--judge", "llm:m", "--labels", labels,
                              "--out", tmp_path / "cal")
    assert code == 2 and err.startswith(f"error: $LEWISRAG_LLM_API_KEY: stopped asking {url}: HTTP 401"), err
    assert len(err.strip().splitlines()) == 1 and KEY not in err + out and not (tmp_path / "cal").exists()
    assert Endpoint.seen == ["401"]


@pytest.fixture(scope="module")
def light_run(tmp_path_factory) -> Path:
    """What `compare --systems stitched --stitched-generator chat:...` reads: the world, DPR and index A."""
    inputs = build_rag_inputs(tmp_path_factory.getbasetemp() / "rag_inputs")
    run = tmp_path_factory.mktemp("light_run")
    for name, src in (("world", "world"), ("dpr", "dpr"), ("index_a", "index")):
        (run / name).symlink_to(inputs[src])
    return run


def _compare(monkeypatch, capsys, run: Path, tmp_path: Path, url: str, *extra: str):
    monkeypatch.setenv("LEWISRAG_TEST_FF_KEY", KEY)
    return run_main(monkeypatch, capsys, "compare", "--run", run, "--out", tmp_path / "out", "--systems", "stitched",
                    "--stitched-generator", "chat:m", "--llm-base-url", url, "--api-key-env", "LEWISRAG_TEST_FF_KEY",
                    "--cache-dir", tmp_path / "cache", "--n-docs", "2", "--max-retries", "1", "--concurrency", "2", *extra)


@pytest.mark.parametrize("mode, source", [("401", "$LEWISRAG_TEST_FF_KEY"), ("404", "--stitched-generator"),
                                          ("302", "--llm-base-url")])
def test_compare_ends_at_the_first_refusal_in_one_line(monkeypatch, capsys, light_run, tmp_path, base, mode, source):
    url = f"{base}/{mode}/v1"
    code, out, err = _compare(monkeypatch, capsys, light_run, tmp_path, url)
    assert code == 2 and err.startswith(f"error: {source}: stopped asking {url}: HTTP {mode}"), err
    assert len(err.strip().splitlines()) == 1 and KEY not in err + out
    assert len(Endpoint.seen) <= 2 and not (tmp_path / "out").exists()  # the two in flight, then none


def test_compare_with_an_unset_key_variable_names_the_flag_not_the_variable(monkeypatch, capsys, light_run, tmp_path, base):
    """The variable is unset: its "name" may be a key pasted in its place, so it is not echoed."""
    monkeypatch.delenv("sk_pasted_KEY_123", raising=False)
    url = f"{base}/401/v1"
    code, _, err = run_main(monkeypatch, capsys, "compare", "--run", light_run, "--out", tmp_path / "out", "--systems",
                            "stitched", "--stitched-generator", "chat:m", "--llm-base-url", url, "--api-key-env",
                            "sk_pasted_KEY_123", "--cache-dir", tmp_path / "cache", "--n-docs", "2")
    assert code == 2 and err.startswith(f"error: --api-key-env: stopped asking {url}: HTTP 401 (1 attempt): no API key was sent")
    assert "set the variable it names to the endpoint's API key" in err and "sk_pasted" not in err, err


def test_compare_with_no_answer_at_all_exits_2(monkeypatch, capsys, light_run, tmp_path, base):
    url = f"{base}/400/v1"
    code, out, err = _compare(monkeypatch, capsys, light_run, tmp_path, url, "--position-questions", "0")
    assert code == 2 and err.startswith("error: --stitched-generator: chat:m gave no answer to any of the "), err
    assert f"asked from {url} (the first failure: HTTP 400 (1 attempt)" in err and KEY not in err + out
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_compare_with_some_failures_is_scored_and_exits_0(monkeypatch, capsys, light_run, tmp_path, base):
    evals = [json.loads(line) for line in (light_run / "world" / "eval.jsonl").read_text().splitlines()]
    evals[0]["question"] += " FAILME"  # its prompt gets a 400; the others are answered
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    code, out, err = _compare(monkeypatch, capsys, light_run, tmp_path, f"{base}/mixed/v1", "--position-questions", "0",
                              "--questions", tmp_path / "eval.jsonl")
    assert code == 0, err
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    g = results["generators"]["stitched"]
    assert g["failed"] == 1 < g["answers"] and "1 failed" in out
    failed = [r for r in results["records"] if r.get("generator_error")]
    assert [r["id"] for r in failed] == [evals[0]["id"]] and failed[0]["generator_error"].startswith("HTTP 400 (1 attempt)")
    assert base not in json.dumps(results)  # reasons without the endpoint's URL
