"""The llm judge and the chat client against replies they misread or waited out: a draft verdict inside
a closed <think> block, an endpoint that never answers (every request spent its retries), an error sent
as a 200 or a streamed chunk, a quoted credential scrubbed out of the statements judged, CJK punctuation
around a label, and temperature 0 vs 0.0. Each test's docstring says what was wrong."""

from __future__ import annotations

import json
import time

import pytest
from conftest import ModeEndpoint, endpoint_root, run_main, send_json

from lewisrag.chat_client import ChatClient, ChatError
from lewisrag.data.io import InputError
from lewisrag.eval.judges.base import digest, parse_label
from lewisrag.eval.judges.llm import LLMJudge, parse_verdicts

KEY = "sk-unanswered-SECRET-7c1e"
PREMISE, STATEMENT = "The login endpoint returns 500 on a wrong password.", "The login endpoint returns 422."
DRAFT = '<think>Maybe {"verdicts": [{"id": 1, "label": "entailment", "reason": "draft"}]}? No: it says 500.</think>\n'
BROKEN = '{"verdicts": [{"id": 1, "label": "contradiction"，"reason": "it says 500"}]}'  # a full-width comma: not JSON
QUOTED = "Requests send the header Authorization: Bearer demo-token-123."


def completion(content, finish_reason="stop", **extra) -> str:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}],
                       "usage": {"prompt_tokens": 7, "completion_tokens": 3}, **extra})


def chunk(delta: dict, finish=None, **extra) -> str:
    return "data: " + json.dumps({"choices": [{"delta": delta, "finish_reason": finish}], **extra}) + "\n\n"


SSE = "text/event-stream"
REPLIES = {  # MODE -> (status, body, content type)
    "think": (200, completion(DRAFT + BROKEN), "application/json"),
    "templated": (200, completion(DRAFT.removeprefix("<think>") + BROKEN), "application/json"),  # <think> in the template
    "hang": None,
    "500": (500, json.dumps({"error": {"message": "model not loaded"}}), "application/json"),
    "sse_error_object": (200, chunk({"content": "Ana Kel le"}) + "data: " + json.dumps(
        {"object": "error", "message": "CUDA out of memory", "code": 500}) + "\n\ndata: [DONE]\n\n", SSE),
    "sse_finish_error": (200, chunk({"content": "Ana Kel le"}) + chunk({"content": ""}, "error", error={
        "code": 502, "message": "provider disconnected"}) + "data: [DONE]\n\n", SSE),
    "body_error": (200, completion("Ana Kel le", "error", error={"code": 502, "message": "provider returned error"}),
                   "application/json"),
    "finish_error": (200, completion("Ana Kel le", "error"), "application/json"),
    "vllm_error": (200, json.dumps({"object": "error", "message": "CUDA out of memory", "type": "InternalServerError",
                                    "code": 500}), "application/json"),
    "ok": (200, completion("Ana Kel [1]"), "application/json"),
}


class Endpoint(ModeEndpoint):
    """POST /MODE/v1/chat/completions: REPLIES[MODE]; "hang" accepts the request and never replies (within
    the tests' timeouts); "echo" answers a decompose, claims or judge request with QUOTED, the key beside it;
    "flaky" answers its first request and hangs on the others. `seen` logs the modes."""

    def answer(self, mode: str, body: dict, first: bool) -> None:
        if mode == "hang" or (mode == "flaky" and not first):
            time.sleep(3)
            return
        if mode in ("echo", "flaky"):
            system, user = body["messages"][0]["content"], body["messages"][1]["content"]
            said = f"{QUOTED} Key: {KEY}"
            if "Split the text" in system:
                content = {"statements": [said]}
            elif "Extract the claims" in system:
                content = {"claims": [{"claim": said}]}
            else:
                n = len(user.split("Statements:\n", 1)[1].splitlines())
                content = {"verdicts": [{"id": i, "label": "neutral", "reason": f"the docs say {QUOTED}"}
                                        for i in range(1, n + 1)]}
            return send_json(self, 200, completion(json.dumps(content)))
        status, text, ctype = REPLIES[mode]
        send_json(self, status, text, {"Content-Type": ctype})


@pytest.fixture
def root():
    with endpoint_root(Endpoint, deadline=60) as url:
        yield url


def judge(url: str, tmp_path, **kw) -> LLMJudge:
    kw = {"timeout": 0.3, "max_retries": 2, "backoff": 0.01, "max_backoff": 0.02, "json_mode": False} | kw
    return LLMJudge(url, "m", KEY, cache_dir=tmp_path / "cache", **kw)


# -- 1. a draft verdict inside the thinking ---------------------------------------------------------


@pytest.mark.parametrize("mode", ["think", "templated"])
def test_a_draft_verdict_inside_closed_thinking_is_not_read_nor_cached(mode, root, tmp_path):
    """When the JSON after "</think>" did not parse, `_loads` searched the reply as it came, the thinking
    included, and took the draft verdict there ("entailment", where the answer meant contradiction):
    judged, and cached, so every rerun reused it. Now only what follows the last "</think>" is searched."""
    url = f"{root}/{mode}/v1"
    assert parse_verdicts(DRAFT + BROKEN, 1)[0].supported is None
    first = judge(url, tmp_path).judge([(PREMISE, STATEMENT)])
    assert first[0].supported is None and first[0].reason == "malformed reply: not JSON", first
    again = judge(url, tmp_path)
    assert again.judge([(PREMISE, STATEMENT)])[0].supported is None
    assert again.usage["cache_hits"] == 0 and again.usage["calls"] == 1  # asked again: nothing was cached


def test_a_verdict_cached_under_the_old_reading_is_not_reused(root, tmp_path):
    """A draft verdict cached by the old reading (VERDICTS_VERSION lewisrag-verdicts-2) would be read
    back by every rerun: the version is bumped, so the old key is never read."""
    j = judge(f"{root}/think/v1", tmp_path)
    old_key = digest(j.name, j.model, j.params, "lewisrag-judge-2", "lewisrag-verdicts-2", "judge", PREMISE, STATEMENT)
    j.cache.put(old_key, {"supported": True, "reason": "draft", "label": "entailment"})
    assert j.judge([(PREMISE, STATEMENT)])[0].supported is None and j.usage["cache_hits"] == 0


# -- 2. an endpoint that never answers ----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["hang", "500"])
def test_an_endpoint_that_never_answers_stops_the_client_after_one_request(mode, root, tmp_path):
    """An endpoint that accepts connections but never replies (or answers 5xx to everything) cost every
    request all its retries: 100 requests at 60 s x 5 attempts were hours before the one-line error.
    Only refused connections stopped the client. Now, while no request has been answered, the first
    request that spends its retries on a transient fault stops it: the rest fail at once, unsent."""
    j = judge(f"{root}/{mode}/v1", tmp_path, max_workers=1)
    Endpoint.seen = []
    verdicts = j.judge([(f"premise {i}", f"statement {i}") for i in range(8)])
    assert all(v.supported is None for v in verdicts)
    assert len(Endpoint.seen) == 3, Endpoint.seen  # one request's three attempts, then nothing (was 8 x 3)
    error = j.run_error()
    assert isinstance(error, InputError) and "no request had been answered" in str(error) and KEY not in str(error)
    assert str(error).startswith("--llm-base-url: stopped asking") and "\n" not in str(error)


def test_once_a_request_was_answered_a_timeout_fails_that_request_alone(root, tmp_path):
    """The stop applies only before any answer: once the endpoint has answered, a request that times out
    is a flaky network's failure, that request's alone, and the run goes on."""
    j = judge(f"{root}/flaky/v1", tmp_path, max_workers=1, max_retries=0)
    Endpoint.seen = []
    verdicts = j.judge([(f"premise {i}", f"statement {i}") for i in range(3)])
    assert verdicts[0].supported is False and [v.supported for v in verdicts[1:]] == [None, None]
    assert len(Endpoint.seen) == 3 and j.client.broken is None and j.run_error() is None


def _answers(tmp_path):
    src = tmp_path / "answers.jsonl"
    src.write_text("".join(json.dumps({"id": f"q{i}", "user_input": "Who leads?", "response": f"Ana Kel leads {i}.",
                                       "retrieved_contexts": [f"Ana Kel leads Veloria {i}."], "reference": "Ana Kel"}) + "\n"
                           for i in range(4)), encoding="utf-8")
    return src


def test_eval_answers_takes_timeout_and_max_retries_for_the_judge(root, tmp_path, monkeypatch, capsys):
    """The judge's timeout and retries were fixed at 60 s and 4 (compare's chat generator had --timeout and
    --max-retries): a hanging endpoint could not be given up on sooner. Now `eval answers`, `eval bughunt`
    and `calibrate` take both, pass them to the judge and record them in config.json."""
    monkeypatch.setenv("LEWISRAG_LLM_API_KEY", KEY)
    args = ("eval", "answers", "--answers", _answers(tmp_path), "--judge", "llm:m", "--cache-dir", tmp_path / "cache",
            "--concurrency", "1", "--no-claims")
    Endpoint.seen = []
    start = time.monotonic()
    code, out, err = run_main(monkeypatch, capsys, *args, "--llm-base-url", f"{root}/hang/v1", "--out", tmp_path / "hang",
                              "--timeout", "0.3", "--max-retries", "0")
    assert code == 2 and "no request had been answered" in err and len(err.strip().splitlines()) == 1, err
    assert Endpoint.seen == ["hang"] and time.monotonic() - start < 10 and not (tmp_path / "hang").exists()
    code, out, err = run_main(monkeypatch, capsys, *args, "--llm-base-url", f"{root}/echo/v1", "--out", tmp_path / "ok",
                              "--timeout", "7", "--max-retries", "2")
    assert code == 0, err
    config = json.loads((tmp_path / "ok" / "config.json").read_text(encoding="utf-8"))
    assert (config["llm_timeout_s"], config["llm_max_retries"]) == (7.0, 2)


@pytest.mark.parametrize("flags, refused", [(("--judge", "lexical", "--timeout", "5"), "--timeout"),
                                            (("--judge", "lexical", "--max-retries", "1"), "--max-retries"),
                                            (("--judge", "llm:m", "--timeout", "0"), "--timeout"),
                                            (("--judge", "llm:m", "--max-retries", "101"), "--max-retries")])
def test_timeout_and_max_retries_are_refused_where_they_do_not_apply(flags, refused, tmp_path, monkeypatch, capsys):
    """New flags, checked as compare checks its own: with a judge that is not llm:MODEL they would be
    ignored in silence, and a timeout of 0 or 101 retries is no setting (one line, exit 2)."""
    monkeypatch.setenv("LEWISRAG_LLM_API_KEY", KEY)
    monkeypatch.setenv("LEWISRAG_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    code, out, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", _answers(tmp_path), "--out",
                              tmp_path / "out", *flags)
    assert code == 2 and err.startswith(f"error: {refused}:") and len(err.strip().splitlines()) == 1, err


# -- 3. an error sent as a 200 ------------------------------------------------------------------------


@pytest.mark.parametrize("mode, message", [("sse_error_object", "CUDA out of memory"),
                                           ("sse_finish_error", "provider disconnected"),
                                           ("body_error", "provider returned error"),
                                           ("finish_error", "finish_reason 'error'"),
                                           ("vllm_error", "CUDA out of memory")])
def test_an_error_sent_as_a_200_is_a_malformed_reply_retried(mode, message, root):
    """A streamed chunk without choices was dropped, so vLLM's mid-stream {"object": "error"} vanished and
    the text before it ("Ana Kel le") was the answer; a 200 body with an "error" key, or finish_reason
    "error", was read as an answer too. Now each is a malformed reply carrying the endpoint's message,
    retried like any other."""
    client = ChatClient(f"{root}/{mode}/v1", "m", KEY, timeout=5, max_retries=1, backoff=0.001, max_backoff=0.01)
    Endpoint.seen = []
    with pytest.raises(ChatError) as e:
        client.complete("s", "u")
    assert str(e.value).startswith("malformed reply: the endpoint sent an error (2 attempts)") and message in str(e.value)
    assert Endpoint.seen == [mode, mode]  # retried


def test_a_good_reply_still_reads(root):
    """The error checks leave a plain reply alone."""
    assert ChatClient(f"{root}/ok/v1", "m", KEY, timeout=5).complete("s", "u") == "Ana Kel [1]"


# -- 4. a credential the answer quotes ------------------------------------------------------------------


def test_statements_and_claims_keep_a_quoted_credential_and_lose_the_key(root, tmp_path):
    """Decompose and claims content went through the full scrub, so the statement an answer made,
    "Authorization: Bearer demo-token-123", was judged as "Authorization: [redacted]". Now their content
    loses the API key alone; reasons still lose any Authorization/Bearer string."""
    j = judge(f"{root}/echo/v1", tmp_path)
    statements = j.decompose(QUOTED)
    assert statements == [f"{QUOTED} Key: [redacted]"]
    assert j.extract_claims(QUOTED) == [f"{QUOTED} Key: [redacted]"]
    assert judge(f"{root}/echo/v1", tmp_path).decompose(QUOTED) == statements  # the cache hit reads the same
    reason = j.judge([("The docs.", statements[0])])[0].reason
    assert reason == "the docs say Requests send the header Authorization: [redacted]", reason


# -- 5. a label in CJK punctuation --------------------------------------------------------------------


@pytest.mark.parametrize("raw, label", [("entailment。", "entailment"), ("“entailment”", "entailment"),
                                        ("entailment！", "entailment"), ("「neutral」", "neutral"),
                                        ("\u3000contradiction．", "contradiction"), ("『contradicts』。", "contradiction")])
def test_a_label_in_cjk_punctuation_or_quotes_reads(raw, label):
    """Only ASCII punctuation and quotes were stripped around a label, so "entailment。" or "“entailment”"
    (what a model writing Chinese gives) was a malformed verdict."""
    assert parse_label(raw) == label
    assert parse_label(f"{raw} no") is None  # still one label word, nothing more


# -- 6. temperature 0 and 0.0 ----------------------------------------------------------------------------


def test_temperature_0_and_0_point_0_are_one_judge(tmp_path):
    """`LLMJudge.params` kept the temperature as given: 0 and 0.0 hashed apart, two fingerprints and two
    cache keys for one setting (verdicts cached at 0.0 asked again at 0)."""
    a, b = (LLMJudge("http://127.0.0.1:9/v1", "m", KEY, cache_dir=tmp_path, temperature=t) for t in (0, 0.0))
    assert a.fingerprint == b.fingerprint and a._key_for("judge", "p", "h") == b._key_for("judge", "p", "h")
