"""Replies real OpenAI-compatible endpoints send that test_chat_faults.py and test_endpoint_faults.py
do not cover: content as an array of parts, reasoning_content beside empty content, a tool call in
place of an answer, an SSE stream though none was asked, a UTF-8 BOM, JSON nested past the parser's
depth, a judge reply with prose around its JSON (or ids as 1.0, or a bare list), a damaged answer
cache, a judge concurrency no process holds and a proxy's login page in place of the API. Each was
once rejected after every retry, retried in vain, a traceback or a verdict lost."""

from __future__ import annotations

import json

import pytest
from conftest import canned_endpoint, endpoint_root

from lewisrag.chat_client import ChatClient, ChatError
from lewisrag.data.io import InputError
from lewisrag.eval.judges.base import DiskCache
from lewisrag.eval.judges.llm import LLMJudge, parse_verdicts
from lewisrag.experiments import stitched_llm

KEY = "sk-audit-SECRET-5a7c03"


def completion(content, finish: str = "stop", **message) -> str:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content, **message}, "finish_reason": finish}],
                       "usage": {"prompt_tokens": 7, "completion_tokens": 3}})


def events(*chunks: str, done: bool = True) -> str:
    return "".join(f"data: {c}\n\n" for c in chunks) + ("data: [DONE]\n\n" if done else "")


VERDICT = '{"verdicts": [{"id": 1, "label": "entailment", "reason": "stated"}]}'
REPLIES = {  # path -> the 200 reply's body
    "parts": completion([{"type": "text", "text": "Ana Kel"}, {"type": "text", "text": " [1]"}]),
    "think_null": completion(None, reasoning_content="The passages say Ana Kel [1]"),
    "think_empty": completion("", reasoning="Thinking about passage 1"),
    "think_cut": completion(None, "length", reasoning_content="Let me think about"),
    "tool": completion(None, "tool_calls", tool_calls=[{"id": "c1", "type": "function",
                                                         "function": {"name": "search", "arguments": "{}"}}]),
    "function": completion("", "function_call", function_call={"name": "search", "arguments": "{}"}),
    "tool_nokey": json.dumps({"choices": [{"message": {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function"}]},
                                            "finish_reason": "tool_calls"}]}),
    "sse_tool": events('{"choices": [{"delta": {"role": "assistant", "tool_calls": [{"index": 0, "id": "c1"}]}}]}',
                       '{"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}'),
    "sse": events('{"choices": [{"delta": {"role": "assistant", "content": "Ana"}}]}',
                  '{"choices": [{"delta": {"content": " Kel [1]"}, "finish_reason": "stop"}]}',
                  '{"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}'),
    "sse_cut": events('{"choices": [{"delta": {"content": "Ana"}}]}', done=False),
    "bom": "\ufeff" + completion("Ana Kel [1]"),
    "deep": "[" * 50_000,
    "judge_prose": completion(f"Here are the verdicts:\n{VERDICT}\nHope this helps!"),
    "judge_deep": completion("[" * 50_000),
    "login": "<!DOCTYPE html><html><body><form action='/sso'>Sign in to continue</form></body></html>",
}


# POST /MODE/v1/chat/completions answers 200 with REPLIES[MODE] (server-sent events for the sse modes)
Endpoint = canned_endpoint({mode: (text, "text/event-stream" if mode.startswith("sse") else "application/json")
                            for mode, text in REPLIES.items()})


@pytest.fixture
def base():
    """The fake endpoint's root: f"{base}/MODE/v1" is a base URL."""
    with endpoint_root(Endpoint) as root:
        yield root


def client(url: str, **kw) -> ChatClient:
    return ChatClient(url, "m", KEY, **{"max_retries": 2, "backoff": 0.001, "timeout": 5.0, "seed": 0, **kw})


@pytest.mark.parametrize("mode", ["parts", "sse", "bom"])
def test_content_arrays_streams_and_a_bom_are_read_as_the_answer(base, mode):
    c = client(f"{base}/{mode}/v1")
    assert c.complete("s", "u") == "Ana Kel [1]"
    assert c.usage["calls"] == 1 and c.usage["failures"] == 0


def test_a_stream_cut_before_its_end_is_retried_not_taken_as_the_answer(base):
    with pytest.raises(ChatError, match=r"^malformed reply: body is not JSON \(3 attempts\)"):
        client(f"{base}/sse_cut/v1").complete("s", "u")


@pytest.mark.parametrize("mode, why", [
    ("think_null", r"reply has no content, only reasoning \(28 characters in reasoning_content\) \(1 attempt\)"),
    ("think_empty", r"reply has no content, only reasoning \(24 characters in reasoning\) \(1 attempt\)"),
    ("think_cut", r"reply cut off by the endpoint \(finish_reason 'length'\) \(1 attempt\)"),
    ("tool", r"reply is a tool call, not an answer \(finish_reason 'tool_calls'\) \(1 attempt\)"),
    ("function", r"reply is a tool call, not an answer \(finish_reason 'function_call'\) \(1 attempt\)"),
    ("tool_nokey", r"reply is a tool call, not an answer \(finish_reason 'tool_calls'\) \(1 attempt\)"),
    ("sse_tool", r"reply is a tool call, not an answer \(finish_reason 'tool_calls'\) \(1 attempt\)"),  # was read as ""
])
def test_a_reply_with_only_reasoning_or_a_tool_call_fails_at_once_saying_so(base, mode, why):
    c = client(f"{base}/{mode}/v1")
    with pytest.raises(ChatError, match="^" + why):
        c.complete("s", "u")
    assert Endpoint.seen == [mode]  # not retried: asking again gets the same


def test_a_body_nested_past_the_parsers_depth_is_malformed_not_a_traceback(base):
    with pytest.raises(ChatError, match=r"^malformed reply: body is not JSON \(3 attempts\)"):
        client(f"{base}/deep/v1").complete("s", "u")


def test_the_judge_finds_its_json_in_prose_and_survives_a_nested_reply(base, tmp_path):
    j = LLMJudge(f"{base}/judge_prose/v1", "m", KEY, cache_dir=tmp_path / "a", max_retries=0)
    assert [(v.supported, v.label) for v in j.judge([("p", "q")])] == [(True, "entailment")]
    j = LLMJudge(f"{base}/judge_deep/v1", "m", KEY, cache_dir=tmp_path / "b", max_retries=0)
    assert j.judge([("p", "q")])[0].reason == "malformed reply: not JSON"


@pytest.mark.parametrize("content", [
    '```json\n{"verdicts": [{"id": 1, "label": "entailment"}]}\n```',
    '<think>Is {"id": 2} the one?</think>{"verdicts": [{"id": 1, "label": "entailment"}]}',
    'Sure. {"verdicts": [{"id": 1.0, "label": "entailment"}]} That is all.',
    '[{"id": "1", "label": "entailment"}]',
])
def test_verdicts_are_read_wherever_the_reply_puts_its_json(content):
    assert [(v.supported, v.label) for v in parse_verdicts(content, 2)] == [(True, "entailment"), (None, None)]


def test_a_damaged_answer_cache_entry_is_read_without_its_counts(tmp_path):
    class Client:  # ChatClient's surface, without a server
        model, temperature, max_workers, usage = "m", 0.0, 1, {}

        def reply(self, system, prompt):
            raise AssertionError("the cache answers")

        def scrub_key(self, text):
            return text

    answers = stitched_llm.ChatAnswers(Client(), DiskCache(tmp_path, "answers"))
    answers.cache.put(answers.key("Q1"), {"content": "Ana Kel [1]", "seconds": None, "prompt_tokens": "9"})
    answers.cache.put(answers.key("Q2"), {"content": "Bo Ren [2]", "seconds": "1.5", "completion_tokens": True})
    one, two = answers(["Q1", "Q2"])
    assert (one.answer, one.seconds, one.input_tokens) == ("Ana Kel [1]", 0.0, None)
    assert (two.answer, two.seconds, two.new_tokens) == ("Bo Ren [2]", 0.0, None)


def test_a_judge_concurrency_no_process_holds_is_bad_input(tmp_path):
    with pytest.raises(InputError, match="--concurrency"):
        LLMJudge("http://127.0.0.1:9/v1", "m", KEY, cache_dir=tmp_path, max_workers=10**9)


def test_a_login_page_on_every_attempt_stops_the_client(base):
    """A proxy's sign-in page answered every request with 200 HTML: each was retried to the end, every
    request of the run the same, before "none got a reply". Now the first request's last attempt stops
    the client: later requests send nothing, and the run ends naming the base URL and the page."""
    from lewisrag.chat_client import EndpointError

    c = client(f"{base}/login/v1")
    with pytest.raises(EndpointError, match=r"body is not JSON \(3 attempts\): the base URL answers with a web page"):
        c.complete("s", "u")
    with pytest.raises(EndpointError):
        c.complete("s", "u")
    assert Endpoint.seen == ["login"] * 3  # the second request sent nothing
    err = c.run_error(key="--api-key-env", model="--stitched-generator", url="--base-url")
    assert str(err).startswith("--base-url: stopped asking") and "a proxy lets this machine through" in str(err)
    # one page between answers is a hiccup: retried, and no stop
    c = client(f"{base}/parts/v1")
    assert c.complete("s", "u") == "Ana Kel [1]"
    c.base_url = f"{base}/login/v1"
    with pytest.raises(ChatError) as e:
        c.complete("s", "u")
    assert not isinstance(e.value, EndpointError) and c.broken is None
