"""Edges of reading an LLM's replies: a <think> left open (a reply cut off while thinking) is no answer;
a decompose reply whose objects disagree is refused; an empty decomposition or question list of a text
with words is asked again, not cached; a statement's line break stays inside its numbered line; a chat answer loses the
key alone ("Bearer bonds" is what it says); an NLI model copied to another folder is the same judge;
and every request refused with HTTP 400 in JSON mode names --no-llm-json-mode."""

from __future__ import annotations

import json
import shutil
from http.server import BaseHTTPRequestHandler

import pytest
from conftest import local_server, send_json

from lewisrag.chat_client import ChatClient
from lewisrag.eval.judges import LLMJudge
from lewisrag.eval.judges.base import DiskCache, Verdict
from lewisrag.eval.judges.llm import JudgeError, _loads, parse_verdicts
from lewisrag.experiments import stitched_llm

KEY = "sk-test-SECRET-123456"
DRAFT = '{"verdicts": [{"id": 1, "label": "contradiction"}]}'
FINAL = '{"verdicts": [{"id": 1, "label": "entailment"}]}'


def _judge(tmp_path, replies: list[str], asked: list[str] | None = None) -> LLMJudge:
    """A judge whose endpoint gives `replies` in turn (recording each request's user text in `asked`)."""
    j = LLMJudge("http://127.0.0.1:9/v1", "fake", api_key=KEY, cache_dir=tmp_path, max_workers=1)

    def complete(system, user, json_mode=False, key_only=False):
        if asked is not None:
            asked.append(user)
        return replies.pop(0)

    j.client.complete = complete
    return j


@pytest.mark.parametrize("reply", [f"<think>Maybe {DRAFT}", f"<THINK>{DRAFT}", f"<think>a</think> <think>{DRAFT}",
                                   f"<think>```json\n{DRAFT}\n```"])
def test_a_think_left_open_is_no_verdict_and_is_asked_again(tmp_path, reply):
    assert parse_verdicts(reply, 1)[0].supported is None
    j = _judge(tmp_path, [reply, FINAL])
    pair = ("Login returns 422.", "Login returns 422")
    assert j.judge([pair])[0].supported is None  # the draft inside the thinking was read, and cached
    assert j.judge([pair]) == [Verdict(True, "", "entailment")]  # asked again: nothing was cached


def test_an_answer_before_a_think_left_open_is_still_read():
    assert _loads('Sure: {"statements": ["The <think> tag."]}') == {"statements": ["The <think> tag."]}
    assert _loads(f'{FINAL}\n<think>or {DRAFT}') == json.loads(FINAL)
    assert [v.label for v in parse_verdicts(f'{FINAL}\n<think>or {DRAFT}', 1)] == ["entailment"]


def test_a_decompose_reply_cut_off_while_thinking_is_malformed_not_cached(tmp_path):
    j = _judge(tmp_path, ['<think>Split: {"statements": ["Login fails."]}', '{"statements": ["Login returns 422."]}'])
    with pytest.raises(JudgeError, match="not JSON"):
        j.decompose("Login returns 422.")
    assert j.decompose("Login returns 422.") == ["Login returns 422."]


def test_decompose_objects_that_disagree_are_refused_those_that_agree_read(tmp_path):
    draft_final = 'Draft: {"statements": ["Login fails."]} Final: {"statements": ["Login returns 422."]}'
    j = _judge(tmp_path, [draft_final, 'Here: {"statements": ["Login returns 422."]} ```json\n{"statements": '
                                       '["Login returns 422."]}\n``` (note: {"model": "x"})'])
    with pytest.raises(JudgeError, match="several JSON objects that disagree"):
        j.decompose("Login returns 422.")
    assert j.decompose("Login returns 422.") == ["Login returns 422."]  # an aside that is no answer is no disagreement


def test_an_empty_decomposition_or_question_list_is_asked_again(tmp_path):
    asked: list[str] = []
    j = _judge(tmp_path, ['{"statements": []}', '{"questions": []}', '{"statements": ["It returns 422."]}',
                          '{"questions": [{"question": "What does it return?", "noncommittal": false}]}'], asked)
    # returned (a refusal's right reply, the evaluator tells a failure apart), not cached
    assert j.decompose("It returns 422.") == [] and j.generate_questions("It returns 422.") == ([], [])
    assert j.decompose("It returns 422.") == ["It returns 422."]  # the rerun asks: the failure was cached for good
    assert j.generate_questions("It returns 422.") == (["What does it return?"], [False])
    assert len(asked) == 4
    k = _judge(tmp_path / "k", ['{"statements": []}'])
    assert k.decompose("……") == [] and k.decompose("……") == []  # no words: nothing to state, cached


def test_a_statement_with_a_line_break_keeps_its_number(tmp_path):
    asked: list[str] = []
    reply = json.dumps({"verdicts": [{"id": 1, "label": "entailment"}, {"id": 2, "label": "neutral"}]})
    j = _judge(tmp_path, [reply], asked)
    got = j.judge([("Login needs a password.", "Login needs:\na  password"), ("Login needs a password.", "It locks.")])
    assert asked[0].endswith("Statements:\n1. Login needs: a password\n2. It locks.")
    assert [v.label for v in got] == ["entailment", "neutral"]


class _Answers(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        content = f"Bearer bonds [1], not {KEY} [2]."
        send_json(self, 200, json.dumps({"choices": [{"message": {"content": content}, "finish_reason": "stop"}]}))


def test_a_chat_answer_loses_the_key_alone(tmp_path):
    with local_server(_Answers) as url:
        answers = stitched_llm.ChatAnswers(ChatClient(url, "m", KEY), DiskCache(tmp_path, "answers"))
        fresh = answers(["Question: What did they buy?"])[0]
        cached = answers(["Question: What did they buy?"])[0]
    assert fresh.answer == cached.answer == "Bearer bonds [1], not [redacted] [2]."
    assert answers.cache_hits == 1 and KEY not in (tmp_path / "answers.sqlite").read_bytes().decode("latin-1")


def test_an_nli_model_copied_to_another_folder_is_the_same_judge(tmp_path):
    from test_judge_replies import L3, _tiny_nli

    from lewisrag.eval.judges import NLIJudge

    a = _tiny_nli(tmp_path / "nli-a", L3)
    shutil.copytree(a, tmp_path / "nli-copy")
    one, copy = NLIJudge.from_pretrained(a), NLIJudge.from_pretrained(tmp_path / "nli-copy")
    assert one.fingerprint == copy.fingerprint and one.model_id != copy.model_id  # the name is still shown
    assert one.version == "3"


class _RejectsJsonMode(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        send_json(self, 400, '{"error": {"message": "response_format is not supported"}}')


@pytest.mark.parametrize("json_mode", [True, False])
def test_every_request_refused_with_http_400_in_json_mode_names_the_flag(tmp_path, json_mode):
    with local_server(_RejectsJsonMode) as url:
        j = LLMJudge(url, "m", api_key=KEY, cache_dir=tmp_path, max_workers=1, json_mode=json_mode)
        assert j.judge([("Login returns 422.", "Login returns 422")])[0].supported is None
    error = str(j.run_error())
    assert "HTTP 400" in error and ("--no-llm-json-mode" in error) is json_mode
