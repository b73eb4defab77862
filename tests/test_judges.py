"""Judges: the protocol, the lexical baseline, NLI wiring, human labels, and the LLM judge against a
real local chat-completions server with scripted replies."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lewisrag.data.io import InputError
from conftest import local_server
from lewisrag.eval import judges
from lewisrag.eval.judges import FunctionJudge, LabelJudge, LexicalJudge, NLIJudge, Verdict
from lewisrag.eval.judges import llm
from lewisrag.eval.judges.llm import JudgeError, LLMJudge

KEY = "sk-test-SECRET-4f1d9c"


def test_function_judge_and_fingerprints():
    j = FunctionJudge(lambda p, h: h in p)
    assert j.judge([("登录返回 422", "422"), ("login returns 422", "toast")]) == [Verdict(True), Verdict(False)]
    assert FunctionJudge(lambda p, h: None).judge([("a", "b")])[0].supported is None
    assert LexicalJudge(0.5).fingerprint != LexicalJudge(0.75).fingerprint
    assert len(LexicalJudge().fingerprint) == 64


def test_function_judges_of_different_rules_differ_in_fingerprint():
    """Every lambda was "<lambda>" in the fingerprint: a candidate judged by `lambda p, h: False` passed the
    gate's judge check against a baseline judged by `lambda p, h: h in p`, its drop blamed on the system."""
    assert FunctionJudge(lambda p, h: h in p).fingerprint == FunctionJudge(lambda p, h: h in p).fingerprint
    assert FunctionJudge(lambda p, h: h in p).fingerprint != FunctionJudge(lambda p, h: False).fingerprint

    def at_least(n):
        return lambda p, h: len(h) >= n

    assert FunctionJudge(at_least(2)).fingerprint != FunctionJudge(at_least(3)).fingerprint  # the value closed over
    assert FunctionJudge(at_least(2), label="rule-v1").fingerprint == FunctionJudge(at_least(3), label="rule-v1").fingerprint

    class Rule:  # a callable object: its class and plain attributes, never its address
        def __init__(self, k):
            self.k, self.cache = k, object()

        def __call__(self, p, h):
            return len(h) >= self.k

    assert FunctionJudge(Rule(2)).fingerprint == FunctionJudge(Rule(2)).fingerprint != FunctionJudge(Rule(3)).fingerprint
    # builtins by name, partials by their arguments, bound methods by their object, helpers closed over by theirs
    import functools
    import operator

    def fp(rule):
        return FunctionJudge(rule).fingerprint

    assert fp(operator.contains) != fp(operator.eq) and fp(str.startswith) != fp(str.endswith)
    assert fp(functools.partial(at_least, 2)) != fp(functools.partial(at_least, 3))
    assert fp(Rule(2).__call__) != fp(Rule(3).__call__)

    def through(n):
        helper = at_least(n)
        return lambda p, h: helper(p, h)

    assert fp(through(2)) == fp(through(2)) != fp(through(3))

    def defined_later():  # a helper closed over but not yet assigned: known as such, no ValueError
        rule = lambda p, h: later(h)  # noqa: E731
        fingerprint = fp(rule)
        later = len  # noqa: F841
        return fingerprint

    assert defined_later() == defined_later()


def test_lexical_judge_chinese_and_english():
    j = LexicalJudge()
    v = j.judge([
        ("用户登录时密码错误，接口返回 422。", "接口返回 422"),
        ("用户登录时密码错误，接口返回 422。", "前端弹出 toast"),
        ("Login with a wrong password returns 422.", "Login returns 422"),
        ("Login with a wrong password returns 422.", "The account is locked for 15 minutes"),
        ("anything", "the of and"),  # no content tokens: cannot judge
    ])
    assert [x.supported for x in v] == [True, False, True, False, None]
    assert "missing" in v[1].reason and "toast" in v[1].reason


VALDORIA_ZH = "瓦尔多利亚的国家元首是塔姆。"


def test_lexical_judge_chinese_name_needs_a_contiguous_match():
    j = LexicalJudge()
    # 亚 and 利 both occur in the premise (in 瓦尔多利亚), but "亚利" does not: the wrong name is rejected
    wrong, right = j.judge([(VALDORIA_ZH, "国家元首是亚利"), (VALDORIA_ZH, "国家元首是塔姆")])
    assert wrong == Verdict(False, "4/6 content tokens in premise (0.67 < 0.75); missing: 亚利")
    assert right == Verdict(True, "6/6 content tokens in premise (1.00 ≥ 0.75)")
    # the 元 of "金元" no longer counts because of 元首 (it did under single-character matching: 10/11);
    # in so long a statement two wrong characters out of 11 clear the threshold; since v8 金元 (a surname
    # and a character) standing where the premise has the name 塔姆 is a name the premise lacks
    long_wrong, long_right = j.judge([(VALDORIA_ZH, "瓦尔多利亚的国家元首是金元"), (VALDORIA_ZH, "瓦尔多利亚的国家元首是塔姆")])
    assert long_wrong == Verdict(False, "9/11 content tokens in premise (0.82 ≥ 0.75); missing: 金元; "
                                        "but the premise lacks the name 金元")
    assert long_right == Verdict(True, "11/11 content tokens in premise (1.00 ≥ 0.75)")
    # the English counterpart of the short statement is rejected too, as it always was
    assert not j.judge([("The head of state is Tam.", "The head of state is Kim")])[0].supported


def test_lexical_judge_chinese_paraphrase_single_characters_and_line_breaks():
    j = LexicalJudge()
    premise = "瓦尔多利亚的首都是卡斯隆，货币是瓦尔元。"
    v = j.judge([
        (premise, "瓦尔多利亚的货币是瓦尔元，首都是卡斯隆"),  # reordered two-character words: still supported
        (VALDORIA_ZH, "塔姆是瓦尔多利亚的国家元首"),
        ("错误码 E7 对应 HTTP 422", "E7 码 422"),  # an isolated character: supported by the character alone
        ("错误码 E7 对应 HTTP 422", "E7 吗 422"),
        ("瓦尔多利\n亚的国家元首是塔姆。", "瓦尔多利亚的国家元首是塔姆"),  # a line break inside a premise word
    ])
    assert [x.supported for x in v] == [True, True, True, False, True]
    assert v[2].reason == "3/3 content tokens in premise (1.00 ≥ 0.75)"
    assert v[3].reason == "2/3 content tokens in premise (0.67 < 0.75); missing: 吗"
    assert v[4].reason == "11/11 content tokens in premise (1.00 ≥ 0.75)"


def test_lexical_judge_english_unchanged_and_missing_in_statement_order():
    j = LexicalJudge()
    v = j.judge([
        ("Login with a wrong password returns 422.", "Login returns 422"),
        ("Login with a wrong password returns 422.", "The account is locked for 15 minutes"),
        ("用户登录时密码错误，接口返回 422。", "前端弹出 toast"),
    ])
    assert v[0] == Verdict(True, "3/3 content tokens in premise (1.00 ≥ 0.75)")
    assert v[1] == Verdict(False, "0/4 content tokens in premise (0.00 < 0.75); missing: account, locked, 15, minutes")
    assert v[2] == Verdict(False, "0/5 content tokens in premise (0.00 < 0.75); missing: 前端弹出, toast")
    assert LexicalJudge.version != "1"  # the rule changed: judge caches and fingerprints must not mix the two


def test_lexical_judge_a_number_the_premise_lacks_is_unsupported_whatever_the_share():
    premise_en = "Tamm became head of state of Valdoria in 2016 after the election."
    premise_zh = "塔姆于2016年在选举后成为瓦尔多利亚的国家元首。"
    wrong = LexicalJudge().judge([(premise_en, "Tamm became head of state of Valdoria in 2018."),
                                  (premise_zh, "塔姆于2018年成为瓦尔多利亚的国家元首。")])
    # 5 of 6 and 13 of 15 units are in the premise: the share alone passed both
    assert [v.supported for v in wrong] == [False, False]
    assert all("(0.8" in v.reason and v.reason.endswith("lacks the number 2018") for v in wrong)
    right = LexicalJudge().judge([(premise_en, "Tamm became head of state of Valdoria in 2016."),
                                  (premise_zh, "塔姆于2016年成为瓦尔多利亚的国家元首。")])
    assert [v.supported for v in right] == [True, True]
    # the character after a number is read with it: "2016年" in the premise covers 年 (it was missing: 14/15)
    assert right[1].reason == "15/15 content tokens in premise (1.00 ≥ 0.75)"
    # numbers are whole, as the citation checker reads them: separators folded, decimals not reordered
    pairs = [("About 1,000 users.", "about 1000 users"), ("Rate 3.5% in 2020.", "rate 5.3% in 2020"),
             ("Rate 3.5% in 2020, 4k screens.", "rate 3.5% 2020 4k"), ("The covid19 wave.", "covid19 wave")]
    assert [v.supported for v in LexicalJudge().judge(pairs)] == [True, False, True, True]
    # below the threshold already: the reason is the share's, as before
    assert LexicalJudge().judge([("x", "account locked 15 minutes")])[0].reason == \
        "0/4 content tokens in premise (0.00 < 0.75); missing: account, locked, 15, minutes"


def test_lexical_judge_an_english_name_the_premise_lacks_is_unsupported_whatever_the_share():
    premise = "Ruus became head of state of Valdoria in 2016 after the election."
    # head, state, valdoria are in the premise, tamm is not: 3/4 passed the share
    wrong = LexicalJudge().judge([(premise, "The head of state of Valdoria is Tamm."),
                                  (premise, "After the election the head of state of Valdoria became Tamm.")])
    assert [v.supported for v in wrong] == [False, False]
    assert all(v.reason.endswith("but the premise lacks the name Tamm") for v in wrong)
    assert "(0.75 ≥ 0.75)" in wrong[0].reason  # the share alone would have passed it
    # the right name, a capitalised word the premise has in lowercase, and one with a number too
    assert LexicalJudge().judge([(premise, "The head of state of Valdoria is Ruus."),
                                 ("the valdoria head of state is ruus", "The head of state of Valdoria is Ruus.")
                                 ])[0].supported is True
    both = LexicalJudge().judge([(premise + " It has 4 regions and 12 ports.",
                                  "Valdoria has 4 regions, 12 ports, an election and Tamm as head of state in 2018.")])[0]
    assert both.supported is False and both.reason.endswith("lacks the number 2018 and the name Tamm")
    # not names: a sentence's first word that reads as ordinary ("According"), all capitals (terms: POST,
    # HTTP), function words; so these pass on their share as before
    kept = LexicalJudge().judge([
        ("the login endpoint returns 422 for a wrong password", "According to it, login returns 422 for a wrong password."),
        ("the login endpoint returns 422 for a wrong password", "The POST login endpoint returns HTTP 422 for a wrong password."),
    ])
    assert [v.supported for v in kept] == [True, True]
    # a name opening a sentence is one since version 6 (4/5 passed on its share before)
    assert LexicalJudge().judge([("Ruus became head of state of Valdoria.",
                                  "Tamm became head of state of Valdoria.")])[0].supported is False
    # a capital after CJK text or a closing quote inside a sentence still marks a name
    assert LexicalJudge().judge([("瓦尔多利亚的国家元首 Ruus 和 head of state", "瓦尔多利亚的国家元首 Tamm 和 head of state")])[0].supported is False


def test_label_judge_lookup_and_file_errors(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text(
        json.dumps({"id": "a", "premise": "登录返回 422。", "hypothesis": "返回 422", "supported": True}, ensure_ascii=False) + "\n"
        + json.dumps({"id": "b", "premise": "Login returns 422.", "hypothesis": "A toast appears", "supported": False}) + "\n",
        encoding="utf-8")
    j = LabelJudge.from_file(path)
    got = j.judge([("登录返回  422。", "返回 422"), ("Login returns 422.", "A toast appears"), ("x", "y")])
    assert [v.supported for v in got] == [True, False, None]
    assert got[2].reason == "no label"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "premise": "p", "hypothesis": "h", "supported": "yes"}\n')
    with pytest.raises(InputError, match=r"bad.jsonl:1: field 'supported'"):
        LabelJudge.from_file(bad)
    bad.write_text('{"id": "a", "premise": "p", "hypothesis": "h", "supported": true}\n'
                   '{"id": "b", "premise": "p", "hypothesis": "h", "supported": false}\n')
    with pytest.raises(InputError, match=r":2: field 'supported': contradicts the label on line 1"):
        LabelJudge.from_file(bad)


def test_from_spec(tmp_path, monkeypatch):
    assert isinstance(judges.from_spec("lexical"), LexicalJudge)
    with pytest.raises(InputError, match="unknown judge"):
        judges.from_spec("gpt")
    monkeypatch.delenv("LEWISRAG_LLM_BASE_URL", raising=False)
    with pytest.raises(InputError, match="base URL"):
        judges.from_spec("llm:some-model")
    monkeypatch.setenv("LEWISRAG_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    j = judges.from_spec("llm:some-model", cache_dir=tmp_path, concurrency=2)
    assert isinstance(j, LLMJudge) and j.max_workers == 2 and judges.LLMJudge is LLMJudge


# ---------------------------------------------------------------------------------------------
# NLI: a tiny random BERT classifier saved locally; wiring and label mapping, not accuracy


def _tiny_nli(path: Path, id2label: dict, bias: list[float], positions: int = 64) -> Path:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "login", "returns", "422", "toast", "登", "录", "返", "回"]
    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    BertTokenizerFast(vocab_file=str(path / "vocab.txt")).save_pretrained(path)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=positions, num_labels=len(id2label),
                     id2label=id2label, label2id={v: k for k, v in id2label.items()})
    torch.manual_seed(0)
    model = BertForSequenceClassification(cfg)
    with torch.no_grad():  # make the prediction independent of the input: the bias decides the class
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor(bias))
    model.save_pretrained(path)
    return path


def test_nli_judge_maps_the_entailment_label(tmp_path):
    labels = {0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}
    yes = NLIJudge.from_pretrained(_tiny_nli(tmp_path / "yes", labels, [0.0, 0.0, 5.0]), batch_size=2)
    no = NLIJudge.from_pretrained(_tiny_nli(tmp_path / "no", labels, [5.0, 0.0, 0.0]))
    pairs = [("login returns 422", "login returns 422"), ("登录返回 422", "toast"), ("a", "b")]
    got = yes.judge(pairs)
    assert [v.supported for v in got] == [True, True, True] and got[0].reason.startswith("p(entailment)=0.9")
    assert [v.supported for v in no.judge(pairs)] == [False, False, False]
    assert yes.entail == 2 and yes.fingerprint != no.fingerprint  # different weights, different judge
    two = NLIJudge.from_pretrained(_tiny_nli(tmp_path / "two", {0: "entailment", 1: "not_entailment"}, [3.0, 0.0]))
    assert two.entail == 0 and two.judge(pairs[:1])[0].supported is True


def test_nli_judge_never_cuts_a_statement_nor_raises_on_a_long_one(tmp_path):
    """A statement past 512 tokens raised the fast tokenizer's bare Exception ("Sequence to truncate too
    short"): truncation="only_first" may cut only the premise. A statement that does not fit whole is
    undecided with the reason; a premise cut to fit says so in the verdict's reason."""
    labels = {0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}
    # the reviewer's model: 1024 positions, so the 512 default is the limit
    j = NLIJudge.from_pretrained(_tiny_nli(tmp_path / "yes", labels, [0.0, 0.0, 5.0], positions=1024), batch_size=4)
    assert j.max_length == 512
    pairs = [("login returns", "login " * 600), ("login returns 422", "login returns"),
             ("login returns 422 " * 300, "login returns"), ("login", "login " * 510)]
    long, short, cut_premise, edge = j.judge(pairs)
    assert long.supported is None and "statement too long" in long.reason and "600 tokens" in long.reason
    assert short.supported is True and "cut" not in short.reason
    assert cut_premise.supported is True and cut_premise.reason.endswith("premise cut to 507 of 900 tokens")
    assert edge.supported is None  # 510 statement tokens + [CLS] [SEP] [SEP] leave no room for the premise
    assert [v.supported for v in j.judge(pairs[1:2] + pairs[:1])] == [True, None]  # the order kept around the undecided


def test_nli_judge_keeps_to_the_models_positions(tmp_path):
    """A model with fewer positions than 512 (the tiny one has 64) indexed past its position table on a
    long pair; the judge cuts at the model's own limit."""
    j = NLIJudge.from_pretrained(_tiny_nli(tmp_path / "m", {0: "entailment", 1: "not_entailment"}, [3.0, 0.0]))
    assert j.max_length == 64
    got = j.judge([("login returns 422 " * 40, "login returns"), ("login", "login " * 70)])
    assert got[0].supported is True and "premise cut to 59 of 120 tokens" in got[0].reason
    assert got[1].supported is None and "statement too long" in got[1].reason


def test_nli_judge_without_entailment_label(tmp_path):
    with pytest.raises(InputError, match="id2label"):
        NLIJudge.from_pretrained(_tiny_nli(tmp_path / "m", {0: "NEGATIVE", 1: "POSITIVE"}, [0.0, 0.0]))
    with pytest.raises(InputError, match="config.json"):
        NLIJudge.from_pretrained(tmp_path / "nowhere")


# ---------------------------------------------------------------------------------------------
# LLM judge against a local chat-completions server


class Server:
    """A scripted OpenAI-compatible endpoint. Replies: the next entry of `script` if any
    ({"status": int} | {"sleep": s} | {"content": str}), else verdicts by the rule
    "supported iff the statement occurs in the evidence"."""

    def __init__(self):
        self.script: list[dict] = []
        self.requests: list[dict] = []
        self.auth: list[str] = []
        self.in_flight = self.max_in_flight = 0
        self.delay = 0.0
        self.lock = threading.Lock()

    def reply(self, body: dict) -> tuple[int, str, float]:
        with self.lock:
            self.requests.append(body)
            step = self.script.pop(0) if self.script else {}
        if "status" in step:
            return step["status"], json.dumps({"error": {"message": "try later"}}), 0.0
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        if "content" in step:
            content = step["content"]
        elif system.startswith("Split"):
            content = json.dumps({"statements": [s for s in user.replace("。", "，").split("，") if s]}, ensure_ascii=False)
        elif system.startswith("Write questions"):
            content = json.dumps({"questions": [{"question": q, "noncommittal": False} for q in ("接口返回什么？", "What does login return?")]},
                                 ensure_ascii=False)
        else:
            evidence, listing = user.split("\n\nStatements:\n")
            evidence = evidence.removeprefix("Evidence:\n")
            verdicts = []
            for line in listing.splitlines():
                n, text = line.split(". ", 1)
                verdicts.append({"id": int(n), "supported": text in evidence, "reason": "rule"})
            content = json.dumps({"verdicts": verdicts}, ensure_ascii=False)
        reply = {"choices": [{"message": {"role": "assistant", "content": content}}],
                 "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
        return 200, json.dumps(reply), step.get("sleep", self.delay)


@pytest.fixture
def server():
    state = Server()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.auth.append(self.headers.get("Authorization", ""))
                state.in_flight += 1
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
            try:
                status, payload, sleep = state.reply(body)
                time.sleep(sleep)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(payload.encode())
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client timed out and left
            finally:
                with state.lock:
                    state.in_flight -= 1

        def log_message(self, *args):
            pass

    with local_server(Handler) as url:
        state.url = url
        yield state


def _judge(server, tmp_path, **kw) -> LLMJudge:
    kw = {"max_retries": 2, "backoff": 0.01, "timeout": 5.0, **kw}
    return LLMJudge(server.url, "judge-model", KEY, cache_dir=tmp_path / "cache", **kw)


def test_llm_batches_one_call_per_premise_and_caches(server, tmp_path):
    pairs = [("登录失败返回 422。", "返回 422"), ("登录失败返回 422。", "弹出 toast"), ("Login returns 422.", "returns 422")]
    j = _judge(server, tmp_path, price_in=0.001, price_out=0.002)
    got = j.judge(pairs)
    assert [v.supported for v in got] == [True, False, True] and got[0].reason == "rule"
    assert len(server.requests) == 2  # two premises, one request each
    assert j.usage["prompt_tokens"] == 20 and j.usage["completion_tokens"] == 10
    assert j.cost == pytest.approx(20 * 0.001 + 10 * 0.002)
    again = _judge(server, tmp_path)  # a new process would see the same disk cache
    assert again.judge(pairs) == got
    assert len(server.requests) == 2 and again.usage["calls"] == 0 and again.usage["cache_hits"] == 3
    other = LLMJudge(server.url, "another-model", KEY, cache_dir=tmp_path / "cache")
    other.judge(pairs[:1])  # the cache key includes the judge model
    assert len(server.requests) == 3 and other.fingerprint != j.fingerprint


def test_llm_retries_429_and_500(server, tmp_path):
    server.script = [{"status": 429}, {"status": 500}]
    j = _judge(server, tmp_path)
    assert j.judge([("login returns 422", "returns 422")]) == [Verdict(True, "rule")]
    assert len(server.requests) == 3 and j.usage["retries"] == 2
    server.script = [{"status": 503}] * 3
    v = _judge(server, tmp_path / "b").judge([("p", "q")])[0]
    assert v.supported is None and "HTTP 503" in v.reason and "3 attempts" in v.reason
    server.script = [{"status": 400}]
    v = _judge(server, tmp_path / "c").judge([("p", "q")])[0]
    assert v.supported is None and "HTTP 400 (1 attempt)" in v.reason  # a client error is not retried


def test_llm_timeout_and_malformed_reply_become_nan_with_reason(server, tmp_path):
    server.script = [{"sleep": 1.0}]
    j = _judge(server, tmp_path, timeout=0.2, max_retries=0)
    v = j.judge([("p", "q")])[0]
    assert v.supported is None and "timeout" in v.reason
    j = _judge(server, tmp_path, timeout=0.2, max_retries=0)  # a timeout before any reply stopped that one's client
    server.script = [{"content": "Sure! Both statements are supported."}]
    v = j.judge([("p2", "q")])[0]
    assert v == Verdict(None, "malformed reply: not JSON")
    server.script = [{"content": '{"verdicts": [{"id": 1, "supported": "maybe"}]}'}]
    got = j.judge([("p3", "q1"), ("p3", "q2")])
    assert got[0].supported is None and "maybe" in got[0].reason and "statement 2" in got[1].reason
    n = len(server.requests)
    assert j.judge([("p2", "q")])[0].supported is False  # undecided verdicts were not cached: asked again
    assert len(server.requests) == n + 1


def test_llm_concurrency_bound(server, tmp_path):
    server.delay = 0.15
    j = _judge(server, tmp_path, max_workers=3)
    got = j.judge([(f"premise {i} says x", "x") for i in range(10)])
    assert all(v.supported for v in got) and len(server.requests) == 10
    assert 2 <= server.max_in_flight <= 3


def test_llm_decompose_and_questions(server, tmp_path):
    j = _judge(server, tmp_path)
    assert j.decompose("前端弹出 toast，3 秒后消失。") == ["前端弹出 toast", "3 秒后消失"]
    qs, noncommittal = j.generate_questions("It returns 422.", 2)
    assert qs == ["接口返回什么？", "What does login return?"] and noncommittal == [False, False]
    server.script = [{"content": "[]"}]
    with pytest.raises(JudgeError, match="malformed"):
        j.decompose("另一段话。")


def test_a_json_reply_is_read_whole_whatever_its_strings_hold(server, tmp_path):
    """A reply that is valid JSON was cut at its first ``` (a fence) or at <think> before being read
    whole: a statement quoting a Markdown fence or a reason naming the tag gave "malformed reply"."""
    j = _judge(server, tmp_path)
    fenced = {"statements": ["Run ```ls -l``` to list files.", "The API returns 422."]}
    server.script = [{"content": json.dumps(fenced)}]
    assert j.decompose("Run `ls -l` to list files. The API returns 422.") == fenced["statements"]
    think = {"statements": ["The <think> tag wraps the model's reasoning.", "它返回 422。"]}
    server.script = [{"content": json.dumps(think, ensure_ascii=False)}]
    assert j.decompose("The think tag wraps reasoning. 它返回 422。") == think["statements"]
    verdicts = {"verdicts": [{"id": 1, "label": "entailment", "reason": "the evidence says ```422``` <think>"}]}
    server.script = [{"content": json.dumps(verdicts)}]
    got = j.judge([("Login returns 422.", "Login returns 422 (verdicts).")])
    assert got[0].supported is True and got[0].reason == "the evidence says ```422``` <think>"


@pytest.mark.parametrize("content,want", [
    ('<think>{"no": 1}</think>Sure! {"statements": ["a"]} Done.', {"statements": ["a"]}),  # the fallbacks stay
    ('<think>weighing it</think>\n```json\n{"statements": ["a"]}\n```', {"statements": ["a"]}),
    ('Here you go:\n```json\n{"statements": ["Run ```ls``` first."]}\n```', {"statements": ["Run ```ls``` first."]}),
    ('Sure: {"statements": ["The <think> tag."]}', {"statements": ["The <think> tag."]}),
    ('{"statements": ["```"]}', {"statements": ["```"]}), ('{"statements": ["<think>"]}', {"statements": ["<think>"]}),
])
def test_llm_reply_json_whole_first_then_the_fallbacks(content, want):
    from lewisrag.eval.judges.llm import _loads

    assert _loads(content) == want


def test_a_malformed_decompose_or_questions_reply_is_not_cached(server, tmp_path):
    """A JSON object of the wrong shape used to be cached: every later run failed the same way."""
    j = _judge(server, tmp_path)
    server.script = [{"content": '{"statements": "one string"}'}, {"content": '{"questions": ["q?"]}'}]
    with pytest.raises(JudgeError, match="malformed"):
        j.decompose("前端弹出 toast，3 秒后消失。")
    with pytest.raises(JudgeError, match="malformed"):
        j.generate_questions("It returns 422.", 2)
    n = len(server.requests)
    assert j.decompose("前端弹出 toast，3 秒后消失。") == ["前端弹出 toast", "3 秒后消失"]  # asked again, now well formed
    assert j.generate_questions("It returns 422.", 2)[0] == ["接口返回什么？", "What does login return?"]
    assert len(server.requests) == n + 2
    again = _judge(server, tmp_path)
    assert again.decompose("前端弹出 toast，3 秒后消失。") == ["前端弹出 toast", "3 秒后消失"]  # the good reply is cached
    assert len(server.requests) == n + 2 and again.usage["cache_hits"] == 1


def test_llm_api_key_never_written(server, tmp_path):
    from lewisrag.data.io import write_json
    from lewisrag.eval.records import parse_answer
    from lewisrag.eval.reports.markdown import render_results
    from lewisrag.eval.evaluator import EvalConfig, evaluate_answers

    rec = parse_answer({"id": "q1", "user_input": "登录返回什么？", "response": "登录失败返回 422 [1]。弹出 toast [1]。",
                        "retrieved_contexts": ["登录失败返回 422。"], "reference_statements": ["返回 422"]}, "t", 1, {})
    server.script = [{}, {"status": 500}, {}]  # a failure on the way must not leak the key into a reason either
    j = _judge(server, tmp_path, max_retries=0)
    results = evaluate_answers([rec], j, EvalConfig(splitter="atomic")).to_json()
    write_json(tmp_path / "run" / "results.json", results)
    (tmp_path / "run" / "report.md").write_text(render_results(results), encoding="utf-8")
    assert all(a == f"Bearer {KEY}" for a in server.auth)  # it was sent ...
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) >= 3
    for p in written:  # ... and is nowhere on disk, cache included
        assert KEY.encode() not in p.read_bytes(), p
    assert KEY not in repr(j) and KEY not in json.dumps(results) and KEY not in j.fingerprint


def test_llm_judge_through_the_cli_keeps_the_key_out(server, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from lewisrag.cli import app

    monkeypatch.setenv("LEWISRAG_LLM_BASE_URL", server.url)
    monkeypatch.setenv("LEWISRAG_LLM_API_KEY", KEY)
    src = tmp_path / "answers.jsonl"
    src.write_text(json.dumps({"id": "q1", "user_input": "登录返回什么？", "response": "登录失败返回 422 [1]。",
                               "retrieved_contexts": ["登录失败返回 422。"], "reference_statements": ["返回 422"]},
                              ensure_ascii=False) + "\n", encoding="utf-8")
    args = ["eval", "answers", "--answers", str(src), "--judge", "llm:judge-model", "--out", str(tmp_path / "run"),
            "--cache-dir", str(tmp_path / "cache"), "--concurrency", "2", "--splitter", "atomic"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "run" / "results.json").read_text(encoding="utf-8"))
    assert res["judge"]["name"] == "llm" and res["judge"]["model"] == "judge-model" and res["judge"]["prompt_version"]
    # every version in the fingerprint is named beside it: results.json said which prompt, not how its reply was read
    assert (res["judge"]["verdicts_version"], res["judge"]["questions_version"]) == (llm.VERDICTS_VERSION, llm.QUESTIONS_VERSION)
    assert res["judge"]["extraction_version"] == llm.EXTRACTION_VERSION
    assert res["records"][0]["metrics"]["faithfulness"] == 1.0 and res["splitter"]["name"] == "atomic"
    n = len(server.requests)
    again = CliRunner().invoke(app, args)  # warm cache: no request at all
    assert again.exit_code == 0 and len(server.requests) == n
    assert KEY not in r.output + again.output
    for p in tmp_path.rglob("*"):
        assert not p.is_file() or KEY.encode() not in p.read_bytes(), p


def test_load_embedder_from_a_local_encoder(tmp_path):
    from lewisrag.eval.metrics import answer_relevancy, load_embedder

    embed = load_embedder(str(_tiny_nli(tmp_path / "enc", {0: "entailment", 1: "neutral"}, [0.0, 0.0])))
    v = embed("login returns 422")
    assert len(v) == 16 and abs(sum(x * x for x in v) - 1.0) < 1e-5
    assert 0.0 <= answer_relevancy("login returns 422", ["登录返回 422", "toast"], embed, [False, False]) <= 1.0
    assert answer_relevancy("login returns 422", ["login returns 422"], embed, [False]) == pytest.approx(1.0)


def test_an_embedder_without_token_states_is_refused_when_loaded(tmp_path):
    """A DPR encoder folder as --embedder: its outputs hold pooled vectors only, and `eval answers`
    ended in an AttributeError at the first answer, after the judge's calls were paid for."""
    import sys

    from lewisrag.eval.metrics import load_embedder

    sys.path.insert(0, str(Path(__file__).parent))
    from hf_layouts import dpr_pair

    question = dpr_pair(tmp_path / "dpr", ["who leads talfo", "the capital of talfo is purstar"])["question"]
    with pytest.raises(InputError, match="a DPRQuestionEncoder gives no token states") as e:
        load_embedder(str(question))
    assert e.value.field == "--embedder" and e.value.source == str(question)


def test_a_broken_judge_cache_is_bad_input_not_a_traceback(tmp_path):
    from lewisrag.eval.judges.base import DiskCache

    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "judge.sqlite").write_text("not a database", encoding="utf-8")
    with pytest.raises(InputError, match="not a usable lewisrag cache") as e:
        DiskCache(tmp_path / "junk").get("k")
    assert e.value.source == str(tmp_path / "junk" / "judge.sqlite") and e.value.field == "--cache-dir"
    (tmp_path / "file").write_text("x", encoding="utf-8")
    with pytest.raises(InputError, match="cannot be the cache folder"):
        DiskCache(tmp_path / "file").put("k", 1)
    cache = DiskCache(tmp_path / "ok")
    cache.put("k", 1)
    cache._db().execute("UPDATE cache SET value = '{not json'")
    assert cache.get("k") is None  # a value that does not read is a miss, asked again


def test_a_corrupt_cache_through_the_cli_exits_2_in_one_line(server, tmp_path):
    from conftest import run_cli, write_jsonl

    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "judge.sqlite").write_text("not a database", encoding="utf-8")
    src = write_jsonl(tmp_path / "a.jsonl", [{"user_input": "q", "response": "Login returns 422 [1].",
                                             "retrieved_contexts": ["Login returns 422."]}])
    r = run_cli("eval", "answers", "--answers", str(src), "--judge", "llm:m", "--llm-base-url", server.url,
                "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith(f"error: {tmp_path / 'cache' / 'judge.sqlite'}: field '--cache-dir'")
    assert not (tmp_path / "run").exists()


def _covered_by_definition(run: str, premise: str) -> list[bool]:
    """Every substring of length >= 2 tried: the rule as written, for checking the linear scan."""
    if len(run) == 1:
        return [run in premise]
    return [any(run[a:b] in premise for a in range(i + 1) for b in range(max(a + 2, i + 1), len(run) + 1))
            for i in range(len(run))]


@settings(max_examples=300, deadline=None)
@given(run=st.text(alphabet="甲乙丙丁戊", min_size=1, max_size=12), premise=st.text(alphabet="甲乙丙丁戊。", max_size=30))
def test_lexical_cover_scan_matches_its_definition(run, premise):
    from lewisrag.eval.judges.lexical import _covered

    assert _covered(run, premise) == _covered_by_definition(run, premise)


def test_lexical_judge_reads_ideographs_past_the_basic_plane():
    """Ideographs of CJK extension B and later were no tokens: a wrong rare name borrowed nothing
    and was never counted, so "是𨭉𡈼" passed as support for "是塔姆"."""
    v = LexicalJudge().judge([("国家元首是塔姆。", "国家元首是𨭉𡈼"), ("国家元首是𨭉𡈼。", "国家元首是𨭉𡈼")])
    assert [x.supported for x in v] == [False, True]
