"""Diagnosis: layer verdicts, primary cause and consequences, refusals, and the run's records."""

from __future__ import annotations

import json
import math

import pytest

from lewisrag.eval.reports import markdown as report_md
from lewisrag.eval.records import parse_answer
from lewisrag.eval.bughunt import load_bughunt
from lewisrag.eval.diagnose import CAUSE_ORDER, LAYERS, Thresholds, diagnose, is_refusal, layer_verdicts
from lewisrag.eval.judges import FunctionJudge, LexicalJudge
from lewisrag.eval.evaluator import EvalConfig, evaluate_answers, evaluate_bughunt


def test_layers_thresholds_and_na():
    m = {"recall_at_k": {"1": 0.0, "5": 1.0}, "context_recall": 0.0, "answer_completeness": 1.0, "faithfulness": 0.9,
         "on_topic_rate": None, "answer_relevancy": 0.7, "citation_recall": 1.0, "citation_precision": None}
    layers = layer_verdicts(m)
    assert layers == {"retrieval": "pass", "generation_not_used": "pass", "generation_distorted": "fail",
                      "generation_off_topic": "pass", "citation": "pass"}  # recall@5 (largest k) decides retrieval
    assert layer_verdicts(m, k=1)["retrieval"] == "fail"
    assert layer_verdicts(m, Thresholds(faithfulness=0.8))["generation_distorted"] == "pass"
    assert layer_verdicts({"faithfulness": float("nan")})["generation_distorted"] == "n/a"
    assert set(LAYERS) == set(CAUSE_ORDER)


def test_primary_cause_follows_the_chain():
    d = diagnose({"context_recall": 1 / 3, "answer_completeness": 1 / 3, "faithfulness": 2 / 3, "citation_recall": 0.5})
    assert d["primary"] == "retrieval" and d["consequences"] == ["generation_distorted", "generation_not_used", "citation"]
    d = diagnose({"context_recall": 1.0, "answer_completeness": 0.0, "faithfulness": 1.0, "on_topic_rate": 0.0})
    assert d["primary"] == "generation_off_topic" and d["consequences"] == ["generation_not_used"]
    assert diagnose({"context_recall": 1.0, "faithfulness": 1.0})["primary"] is None


def test_not_in_kb_is_judged_on_refusal():
    assert diagnose({"faithfulness": 0.0}, "not_in_kb", refused=True)["primary"] is None
    d = diagnose({"faithfulness": 1.0}, "not_in_kb", refused=False)
    assert d["primary"] == "generation_distorted" and d["expected_refusal"] is True


@pytest.mark.parametrize("text,refused", [
    ("知识库里没有找到相关信息。", True), ("没查到这个问题的答案。", True), ("抱歉，我无法回答这个问题。", True),
    ("文档中未提及账号锁定策略。", True), ("I could not find this in the knowledge base.", True),
    ("The provided context does not mention lockouts.", True), ("I don't know.", True), ("", True),
    ("登录失败时接口返回 422。", False), ("前端不会清空表单。", False), ("It returns 422 with no toast.", False),
    ("Login returns HTTP 422 and lists the errors.", False),
    ("系统没有记录失败次数。", False), ("没有相关记录。", True),  # a fact about logging, then a refusal
    # refusals the phrase list missed: contractions, 暂无, 并没有, 未在…找到, 无法提供
    ("The context doesn't contain this information.", True), ("The documents don't say.", True),
    ("I don't have enough information to answer.", True), ("The information is not available.", True),
    ("暂无相关信息。", True), ("未在知识库中找到相关内容。", True), ("参考资料中并没有涉及这个问题。", True),
    ("对不起，我无法提供答案。", True), ("根据现有资料，无法确定。", True),
    # claims about a system that a bare "cannot determine" / 不知道 / 找不到 took for refusals
    ("The server cannot determine the user.", False), ("Users who don't know their password reset it.", False),
    ("No information is leaked to the client.", False), ("前端不知道用户是否存在。", False),
    ("系统找不到用户时返回 404。", False), ("未找到用户时接口返回 404。", False), ("系统无法确定用户时锁定账号。", False),
    # a refusal that answers after all
    ("知识库里没有相关信息，但根据经验，账号会锁定 30 分钟。", False),
    ("The documents do not mention it, but the account locks for 30 minutes.", False),
])
def test_is_refusal(text, refused):
    assert is_refusal(text) is refused


def _records():
    rows = [
        {"id": "zh", "user_input": "登录密码错误返回什么？", "response": "登录失败返回 422 [1]。前端弹出 toast [1]。",
         "retrieved_contexts": [{"id": "1", "title": "REQ", "text": "登录失败返回 422。"}],
         "reference_statements": ["登录失败返回 422"], "gold_passage_ids": ["1"], "category": "single_doc"},
        {"id": "en", "user_input": "What does login return?", "response": "Login returns 422.",
         "retrieved_contexts": ["Login returns 422."], "reference": "Login returns 422."},
        {"id": "nik", "user_input": "账号会被锁定吗？", "response": "知识库里没有相关信息。", "retrieved_contexts": ["登录失败返回 422。"],
         "category": "not_in_kb"},
        {"id": "nik2", "user_input": "Is the account locked?", "response": "Yes, for 15 minutes.",
         "retrieved_contexts": ["Login returns 422."], "category": "not_in_kb"},
    ]
    return [parse_answer(r, "answers.jsonl", i, {}) for i, r in enumerate(rows, start=1)]


def _missing(response: str, category: str | None = None) -> list[str]:
    rec = parse_answer({"user_input": "q", "response": response, "category": category,
                        "retrieved_contexts": [{"id": "1", "title": "", "text": "登录失败返回 422。Login returns 422."}]},
                       "answers.jsonl", 1, {})
    (out,) = evaluate_answers([rec], FunctionJudge(lambda p, h: True)).to_json()["records"]
    return [c["sentence"] for c in out["citation_checks"] if c["status"] == "MISSING_CITATION"]


def test_a_refusal_phrase_exempts_only_its_own_sentence_from_citing():
    """One refusal phrase anywhere used to lift the citation rule from every sentence of the answer,
    so a made-up uncited claim beside it passed the hard gate."""
    assert _missing("登录失败返回 500。锁定时长文档未提及。") == ["登录失败返回 500。"]
    assert _missing("Login returns 500. I could not find the lockout time.") == ["Login returns 500."]
    assert _missing("知识库里没有相关信息。") == [] and _missing("I don't know.") == []
    # a not_in_kb question's refusal is exempt whole; its answer's other sentences too
    assert _missing("知识库里没有相关信息。请联系管理员。", "not_in_kb") == []
    assert _missing("知识库里没有相关信息。请联系管理员。") == ["请联系管理员。"]


@pytest.mark.parametrize("claim", [
    "未找到用户时接口返回 404。", "系统无法确定用户时锁定账号 30 分钟。", "文档未提及锁定时长，但账号会锁定 30 分钟。",
    "If no information is given, the account is locked for 30 minutes.",
    "The documents do not mention it, but the account locks for 30 minutes.",
])
def test_a_claim_beside_a_refusal_phrase_must_cite(claim):
    """A refusal phrase anywhere in a sentence excused it from citing, so these uncited claims passed
    the hard gate: a sentence is excused only when it declines and states nothing (no number, no
    "but")."""
    assert _missing("登录失败返回 422 [1]。" + claim) == [claim]


def test_evaluate_answers_records_and_aggregates():
    calls = []
    inner = FunctionJudge(lambda p, h: h.rstrip("。.") in p)

    class Spy:
        name, fingerprint = "spy", "f" * 64

        def judge(self, pairs):
            calls.append(len(pairs))
            return inner.judge(pairs)

    res = evaluate_answers(_records(), Spy()).to_json()
    text = json.dumps(res, allow_nan=False)  # no NaN anywhere
    assert "NaN" not in text and len(calls) == 1  # one batched judge call for all first-level pairs
    recs = {r["id"]: r for r in res["records"]}
    zh = recs["zh"]
    assert zh["metrics"]["faithfulness"] == 0.5 and zh["metrics"]["recall_at_k"] == {"1": 1.0, "5": 1.0, "10": 1.0}
    assert [s["supported"] for s in zh["statements"]] == [True, False] and zh["statements"][0]["citations"] == ["1"]
    assert zh["diagnosis"]["primary"] == "generation_distorted"
    # an answer that cites nothing: recall 0 (its statement lacks a citation), no precision (nothing to count)
    assert recs["en"]["metrics"]["exact_match"] == 1.0 and recs["en"]["metrics"]["citation_recall"] == 0.0
    assert recs["en"]["metrics"]["citation_precision"] is None and "citation_recall" not in recs["en"]["nan_reasons"]
    assert recs["en"]["nan_reasons"]["citation_precision"] == "the answer cites nothing"
    assert recs["en"]["citation_verdicts"][0]["reason"] == "no citation"
    assert recs["nik"]["refused"] and recs["nik"]["metrics"]["faithfulness"] is None and recs["nik"]["citation_checks"] == []
    assert not recs["nik2"]["refused"] and recs["nik2"]["diagnosis"]["primary"] == "generation_distorted"
    agg = res["aggregates"]
    assert agg["faithfulness"]["n"] == 2 and agg["faithfulness"]["mean"] == 0.75  # not_in_kb never averaged
    assert agg["not_in_kb"] == {"n": 2, "refused": 1, "not_refused_ids": ["nik2"]}
    assert agg["citation_status_counts"]["MISSING_CITATION"] == 2 and agg["recall_at_k@1"]["n"] == 1
    assert res["judge"] == {"name": "spy", "fingerprint": "f" * 64} and res["splitter"]["name"] == "sentences"
    assert "## Layers per question" in report_md.render_results(res)


def test_a_multi_document_question_missing_one_gold_passage_fails_retrieval():
    """recall@k is plain recall: one of two needed passages is 0.5, and the retrieval layer fails even
    though the answer reads what it got faithfully."""
    row = {"id": "two", "user_input": "登录和注册失败各返回什么？", "response": "登录失败返回 422 [1]。",
           "retrieved_contexts": [{"id": "1", "title": "REQ", "text": "登录失败返回 422。"}, {"id": "7", "title": "BUG", "text": "无关"}],
           "reference_statements": ["登录失败返回 422", "注册失败返回 409"], "gold_passage_ids": ["1", "2"], "category": "multi_doc"}
    res = evaluate_answers([parse_answer(row, "answers.jsonl", 1, {})], FunctionJudge(lambda p, h: h.rstrip("。.") in p)).to_json()
    rec = res["records"][0]
    assert rec["metrics"]["recall_at_k"] == {"1": 0.5, "5": 0.5, "10": 0.5} and rec["metrics"]["faithfulness"] == 1.0
    assert rec["diagnosis"]["layers"]["retrieval"] == "fail" and rec["diagnosis"]["primary"] == "retrieval"


def test_evaluate_answers_is_deterministic_and_atomic_needs_decompose():
    a, b = evaluate_answers(_records(), LexicalJudge()).to_json(), evaluate_answers(_records(), LexicalJudge()).to_json()
    assert json.dumps(a) == json.dumps(b)
    with pytest.raises(ValueError, match="decompose"):
        evaluate_answers(_records(), LexicalJudge(), EvalConfig(splitter="atomic"))


def test_bughunt_presets_land_in_their_layers():
    res = evaluate_bughunt(load_bughunt()).to_json()
    by = {a["name"]: a for a in res["records"]}
    for a in res["records"]:
        assert a["diagnosis"]["primary"] == a["expected_primary"], a["name"]
    mis = by["misplaced_citations"]["metrics"]
    assert mis["faithfulness"] == 1.0 and mis["citation_recall"] == 0.0 and mis["citation_precision"] == 0.0
    g = by["hallucinated"]["granularity"]
    assert [round(g[k]["faithfulness"], 3) for k in ("sentences", "atomic", "whole")] == [0.333, 0.167, 0.0]
    assert [g[k]["statements"] for k in ("sentences", "atomic", "whole")] == [3, 6, 1]
    assert res["rule_checker"]["table"] == {"caught": 7, "passed": 12, "false_block": 1, "missed": 1, "unverifiable": 1}
    assert by["correct"]["metrics"]["answer_completeness"] == 1.0 and by["off_topic"]["metrics"]["on_topic_rate"] == 0.0
    assert not math.isnan(by["not_retrieved"]["metrics"]["context_recall"])


def test_an_answer_read_as_a_refusal_still_has_its_citations_checked():
    """A phrase match took "...文档不允许空密码 [9]" for a refusal and skipped the rule checks, so its
    bad citation never reached the hard gate. A refusal need not cite; what it cites is checked."""
    rows = [{"id": "a", "user_input": "空密码能登录吗？", "response": "The context does not mention empty passwords [9].",
             "retrieved_contexts": ["The endpoint returns 404 for an unknown user."]},
            {"id": "b", "user_input": "空密码能登录吗？", "response": "知识库里没有相关信息。", "retrieved_contexts": ["无关"]}]
    res = evaluate_answers([parse_answer(r, "answers.jsonl", i, {}) for i, r in enumerate(rows, 1)], LexicalJudge()).to_json()
    a, b = res["records"]
    assert a["refused"] and [c["status"] for c in a["citation_checks"]] == ["BAD_ID"]
    assert b["refused"] and b["citation_checks"] == []  # a real refusal is not asked to cite
    assert not is_refusal("接口文档不允许空密码 [9]。") and is_refusal("文档不包含这个接口。")


def test_a_blank_reference_is_no_reference():
    row = {"user_input": "q?", "response": "422 [1]。", "retrieved_contexts": ["422"], "reference": "   "}
    rec = evaluate_answers([parse_answer(row, "answers.jsonl", 1, {})], LexicalJudge()).to_json()["records"][0]
    assert rec["metrics"]["exact_match"] is None and rec["nan_reasons"]["exact_match"] == "no reference answer"


def test_contexts_with_ids_that_are_not_numbers_are_cited_by_position():
    """Citations are numbers: contexts with ids such as "REQ-AUTH-03" could never be cited, and
    every sentence citing them by their prompt number was a BAD_ID."""
    row = {"user_input": "登录失败返回什么？", "response": "登录失败返回 422 [2]。",
           "retrieved_contexts": [{"id": "BUG-7", "text": "无关"}, {"id": "REQ-AUTH-03", "text": "登录失败返回 422。"}]}
    rec = evaluate_answers([parse_answer(row, "answers.jsonl", 1, {})], LexicalJudge()).to_json()["records"][0]
    assert [c["status"] for c in rec["citation_checks"]] == ["PASS"]
    padded = parse_answer({**row, "response": "登录失败返回 422 [1]。", "retrieved_contexts": [{"id": "01", "text": "登录失败返回 422。"}]},
                          "answers.jsonl", 1, {})
    assert padded.docs == {"1": "登录失败返回 422。"}  # read as a number, as [01] and [1] are
