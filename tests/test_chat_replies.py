"""What a chat endpoint's reply says, read as it is meant, and an endpoint nothing answers at: token
counts that are no counts (NaN, -5, true, 10**30) were summed and shown as "-4.000 forward passes /
answer"; a body that is not UTF-8 was read with replacement characters, scored and cached as the
model's answer, and a declared charset was ignored ("café" from a latin-1 server became "caf\ufffd");
connections refused on every request were retried for every question (275 s for 83 questions,
about an hour for the small preset) before the run ended as "no answer to any of the questions"."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error

import pytest
from conftest import canned_endpoint, endpoint_root, local_server

from lewisrag import chat_client as chat
from lewisrag.chat_client import ChatClient, ChatError, EndpointError
from lewisrag.data.io import InputError
from lewisrag.data.records import Passage
from lewisrag.eval.judges.base import DiskCache
from lewisrag.eval.judges.llm import LLMJudge
from lewisrag.experiments import stitched_llm

KEY = "sk-replies-SECRET-7e31b0"
QUESTION = "[1] Valdoria / Valdoria is led by Ana Kel.\n\nQuestion: Who leads Valdoria?"


def completion(content: str, usage: str = '{"prompt_tokens": 7, "completion_tokens": 3}') -> str:
    """A chat completion whose usage is spliced in as written (JSON's NaN is no json.dumps output)."""
    message = json.dumps({"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}, ensure_ascii=False)
    return f'{{"choices": [{message}], "usage": {usage}}}'


VERDICT = '{"verdicts": [{"id": 1, "label": "entailment", "reason": "REASON"}]}'
REPLIES = {  # path -> (the 200 reply's body, its Content-Type)
    "nan": (completion("Ana Kel [1]", '{"prompt_tokens": NaN, "completion_tokens": -5}'), "application/json"),
    "bool": (completion("Ana Kel [1]", '{"prompt_tokens": true, "completion_tokens": 1000000000000000000000000000000}'),
             "application/json"),
    "float": (completion("Ana Kel [1]", '{"prompt_tokens": 7.0, "completion_tokens": "3"}'), "application/json"),
    "good": (completion("Ana Kel [1]"), "application/json"),
    # "Pufos" with two bytes no UTF-8 text holds, and no charset declared
    "nonutf8": (completion("Puf__os [1]").replace("__", "\udcff\udcfe"), "application/json"),
    "latin1": (completion("café [1]"), "application/json; charset=ISO-8859-1"),
    "utf8bom": ("\ufeff" + completion("café [1]"), 'application/json; charset="utf-8"'),
    "nocharset": (completion("café [1]"), "application/json; charset=x-no-such-charset"),
    "notext": (completion("café [1]"), "application/json; charset=base64"),
    "verdict_nonutf8": (completion(VERDICT.replace("REASON", "says \udce9 so")), "application/json"),
    "verdict": (completion(VERDICT.replace("REASON", "stated")), "application/json"),
}
ENCODING = {"latin1": "latin-1", "nonutf8": "utf-8", "verdict_nonutf8": "utf-8"}


# POST /MODE/v1/chat/completions answers 200 with REPLIES[MODE], encoded as ENCODING[MODE]
Endpoint = canned_endpoint(REPLIES, ENCODING)


@pytest.fixture
def base():
    """The fake endpoint's root: f"{base}/MODE/v1" is a base URL."""
    with endpoint_root(Endpoint) as root:
        yield root


def client(url: str, **kw) -> ChatClient:
    return ChatClient(url, "m", KEY, **{"max_retries": 1, "backoff": 0.001, "max_backoff": 0.01, "timeout": 5.0,
                                        "seed": 0, **kw})


def refused_url() -> str:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


# ---------------------------------------------------------------------------------------------
# token counts


@pytest.mark.parametrize("mode", ["nan", "bool", "float"])
def test_token_counts_that_are_not_counts_are_unknown_fresh_and_cached(base, tmp_path, mode):
    """-5 was kept fresh ("-4.000 forward passes / answer") but dropped from the cache ("–" on a rerun);
    true counted as 1 and 10**30 as itself."""
    c = client(f"{base}/{mode}/v1")
    assert c.reply("s", "u") == ("Ana Kel [1]", {})
    assert c.usage["prompt_tokens"] == c.usage["completion_tokens"] == 0
    answers = stitched_llm.ChatAnswers(client(f"{base}/{mode}/v1"), DiskCache(tmp_path, "answers"))
    (fresh,) = answers([QUESTION])
    (cached,) = answers([QUESTION])
    assert answers.cache_hits == 1 and Endpoint.seen == [mode, mode]
    assert (fresh.answer, fresh.input_tokens, fresh.new_tokens) == ("Ana Kel [1]", None, None)
    assert (cached.answer, cached.input_tokens, cached.new_tokens) == (fresh.answer, None, None)


def test_a_cached_count_past_any_context_is_unknown_as_a_fresh_one(base, tmp_path):
    """The cache kept 10**30 as a count (only its type and sign were checked); counts in range are kept."""
    answers = stitched_llm.ChatAnswers(client(f"{base}/good/v1"), DiskCache(tmp_path, "answers"))
    answers.cache.put(answers.key("Q1"), {"content": "Ana Kel [1]", "seconds": 0.5, "prompt_tokens": 10**30,
                                          "completion_tokens": 3})
    (reply,) = answers(["Q1"])
    assert (reply.input_tokens, reply.new_tokens) == (None, 3) and Endpoint.seen == []
    assert chat.token_count(chat.MAX_TOKENS) == chat.MAX_TOKENS and chat.token_count(chat.MAX_TOKENS + 1) is None


# ---------------------------------------------------------------------------------------------
# charsets


def test_a_body_that_is_not_utf8_is_malformed_retried_and_never_cached(base, tmp_path):
    """It was read as "Puf\ufffd\ufffdos [1]", scored, and cached for good."""
    c = client(f"{base}/nonutf8/v1")
    with pytest.raises(ChatError, match=r"^malformed reply: body is not UTF-8 \(2 attempts\): invalid start byte") as e:
        c.complete("s", "u")
    assert "\ufffd" not in str(e.value) and "\\xff\\xfeos" in str(e.value) and Endpoint.seen == ["nonutf8"] * 2
    assert c.broken is None  # one bad body is no reason to stop asking
    answers = stitched_llm.ChatAnswers(client(f"{base}/nonutf8/v1"), DiskCache(tmp_path, "answers"))
    (reply,) = answers([QUESTION])
    assert reply.answer == "" and reply.failure.startswith("malformed reply: body is not UTF-8"), reply
    assert answers.cache.get(answers.key(QUESTION)) is None  # the next run asks again


def test_a_verdict_in_a_body_that_is_not_utf8_is_undecided_and_not_cached(base, tmp_path):
    judge = LLMJudge(f"{base}/verdict_nonutf8/v1", "m", KEY, cache_dir=tmp_path, max_retries=0, timeout=5.0)
    (verdict,) = judge.judge([("Ana Kel leads Valdoria.", "Ana Kel leads")])
    assert verdict.supported is None and verdict.reason.startswith("malformed reply: body is not UTF-8"), verdict
    judge = LLMJudge(f"{base}/verdict/v1", "m", KEY, cache_dir=tmp_path, max_retries=0, timeout=5.0)
    (verdict,) = judge.judge([("Ana Kel leads Valdoria.", "Ana Kel leads")])
    assert verdict.supported is True and Endpoint.seen == ["verdict_nonutf8", "verdict"]  # nothing was cached: asked again


@pytest.mark.parametrize("mode", ["latin1", "utf8bom"])
def test_the_declared_charset_is_the_one_read(base, mode):
    """A latin-1 server's "café" became "caf\ufffd"."""
    assert client(f"{base}/{mode}/v1").complete("s", "u") == "café [1]"


@pytest.mark.parametrize("mode, charset", [("nocharset", "x-no-such-charset"), ("notext", "base64")])
def test_a_charset_python_cannot_decode_is_malformed(base, mode, charset):
    """It was ignored: the body read as UTF-8 whatever it said it was."""
    with pytest.raises(ChatError, match=rf"^malformed reply: unknown charset '{charset}' \(2 attempts\)"):
        client(f"{base}/{mode}/v1").complete("s", "u")
    assert Endpoint.seen == [mode] * 2


# ---------------------------------------------------------------------------------------------
# nothing listening


def test_an_endpoint_that_refuses_every_attempt_stops_the_client():
    """Every request was retried to its end, each a connection failure: 275 s for 83 questions."""
    url = refused_url()
    c = client(url, max_retries=2)
    with pytest.raises(EndpointError, match=r"^connection failed \(3 attempts\): ConnectionRefusedError"):
        c.complete("s", "u")
    with pytest.raises(EndpointError, match=r"^connection failed \(3 attempts\)"):
        c.complete("s", "u")
    assert c.usage["calls"] == 3 and c.usage["failures"] == 2  # the second request sent nothing
    err = c.run_error(key="$K", model="--stitched-generator", url="--llm-base-url")
    assert str(err).startswith(f"--llm-base-url: stopped asking {url}: connection failed (3 attempts)"), err
    assert "check the base URL's host and port" in str(err) and KEY not in str(err)


def test_a_host_name_not_resolved_on_every_attempt_stops_the_client(monkeypatch):
    def urlopen(req, timeout):
        raise urllib.error.URLError(socket.gaierror(-2, "Name or service not known"))

    monkeypatch.setattr(chat.client, "_open", urlopen)  # the module whose _open ChatClient calls
    c = client("http://no-such-host.invalid/v1")
    with pytest.raises(EndpointError, match=r"^connection failed \(2 attempts\): gaierror"):
        c.complete("s", "u")
    assert c.broken is not None and c.broken.fix == "connect"


def test_a_refusal_among_other_faults_does_not_stop_the_client(monkeypatch):
    """Only a request refused on every attempt says nothing is there: a reset means something answered. (With
    nothing answered yet the client still stops, as for any request that spent its retries: not as "connect".)"""
    faults = [ConnectionRefusedError(111, "Connection refused"), ConnectionResetError(104, "reset")]

    def urlopen(req, timeout):
        raise urllib.error.URLError(faults.pop(0) if faults else ConnectionRefusedError(111, "Connection refused"))

    monkeypatch.setattr(chat.client, "_open", urlopen)  # the module whose _open ChatClient calls
    c = client("http://127.0.0.1:9/v1", max_retries=2)
    with pytest.raises(ChatError) as e:
        c.complete("s", "u")
    assert isinstance(e.value, EndpointError) and c.broken.fix == "unanswered"


def test_after_a_reply_a_refused_connection_fails_that_request_alone():
    """A flaky network in the middle of a long run must not end it."""
    with local_server(Endpoint, quiet_errors=True) as url:
        c = client(url.replace("/v1", "/good/v1"))
        assert c.complete("s", "u") == "Ana Kel [1]"
    for _ in range(2):  # the server is gone: every attempt refused, each request its own failure
        with pytest.raises(ChatError, match=r"^connection failed \(2 attempts\): ConnectionRefusedError") as e:
            c.complete("s", "u")
        assert not isinstance(e.value, EndpointError)
    assert c.broken is None and c.usage["calls"] == 5


def test_concurrent_requests_to_a_refused_endpoint_stop_after_one_requests_retries(tmp_path):
    """With 4 requests in flight and 40 questions, each question was retried to its end."""
    c = client(refused_url(), max_workers=4, max_retries=3, backoff=0.02, max_backoff=0.05)
    answers = stitched_llm.ChatAnswers(c, DiskCache(tmp_path, "answers"))
    system = stitched_llm.LLMStitchedSystem(None, answers, stitched_llm.prompt_settings(1), {"generator": "chat:m"})
    questions = [f"Who leads country {i}?" for i in range(40)]
    start = time.monotonic()
    with pytest.raises(InputError) as e:  # the command's one-line error, nothing written
        system.answer_from(questions, [[Passage("p1", "Valdoria", "Valdoria is led by Ana Kel.")]] * 40)
    assert time.monotonic() - start < 2.0
    assert str(e.value).startswith("--llm-base-url: stopped asking http://127.0.0.1:"), e.value
    assert "ConnectionRefusedError" in str(e.value)
    assert c.usage["calls"] <= 4 * 4 and c.usage["failures"] == 40  # only the requests in flight sent anything
    assert c.usage["retries"] <= 4 * 3


def test_a_request_waiting_to_retry_stops_when_another_stops_the_client():
    """No race: a request in its backoff when the client stops does not go on retrying to its end."""
    c = client(refused_url(), max_retries=3, backoff=10.0, max_backoff=10.0)  # its first wait: 5 s at least
    failed: list[BaseException] = []

    def ask() -> None:
        try:
            c.complete("s", "u")
        except ChatError as e:
            failed.append(e)

    waiting = threading.Thread(target=ask, daemon=True)
    waiting.start()
    deadline = time.monotonic() + 5
    while c.usage["calls"] < 1 and time.monotonic() < deadline:  # its first attempt was refused: now it waits
        time.sleep(0.01)
    c.max_retries = 0  # the next request has no retries: its one refusal stops the client
    start = time.monotonic()
    with pytest.raises(EndpointError, match=r"^connection failed \(1 attempt\)"):
        c.complete("s", "u")
    waiting.join(timeout=3)
    assert not waiting.is_alive() and time.monotonic() - start < 3
    assert isinstance(failed[0], EndpointError) and str(failed[0]) == str(c.broken)
    assert c.usage["calls"] == 2 and c.usage["retries"] == 0 and c.usage["failures"] == 2
