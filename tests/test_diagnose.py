"""Diagnosis: layer verdicts, primary cause and consequences, refusals, and the run's records."""

from __future__ import annotations

import json
import math

import pytest

from lewisrag.eval.reports import markdown as report_md
from lewisrag.eval.records import parse_answer
from lewisrag.eval.bughunt import load_bughunt
from lewisrag.eval.diagnose import CAUSE_ORDER, LAYERS, Thresholds, diagnose, layer_verdicts
from lewisrag.eval.refusals import is_refusal
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


def test_not_used_is_not_blamed_while_relevance_is_unmeasured(tmp_path):
    """A faithful answer to another question leaves the reference uncovered as an unused context does:
    with no on-topic labels and no answer relevancy (`eval answers` without an LLM judge and an embedder,
    the default) both stay possible. It was blamed on "not used" (the chapter's off-topic answer, 2/2 so)."""
    m = {"context_recall": 1.0, "answer_completeness": 0.0, "faithfulness": 1.0, "citation_recall": 1.0}
    d = diagnose(m)
    assert d["primary"] == "generation_not_used_or_off_topic" and d["consequences"] == []
    assert diagnose({**m, "on_topic_rate": 1.0})["primary"] == "generation_not_used"  # measured on topic
    assert diagnose({**m, "answer_relevancy": 0.1})["primary"] == "generation_off_topic"
    assert diagnose({**m, "faithfulness": 0.5})["primary"] == "generation_distorted"  # invented facts come first
    # the chapter's off-topic answer through eval answers: every sentence cited and supported, about registration
    ctx = [{"id": "1", "text": "注册时用户名已被占用，接口返回 422，errors 为 username has already been taken。"},
           {"id": "2", "text": "登录时邮箱或密码错误，接口返回 422，errors 为 email or password is invalid。"}]
    rec = parse_answer({"id": "q1", "question": "登录时密码输错了，接口返回什么？", "category": "single_doc",
                        "response": "注册时用户名已被占用，接口返回 422[1]。", "retrieved_contexts": ctx,
                        "reference_statements": ["登录时邮箱或密码错误，接口返回 422", "errors 为 email or password is invalid"]}, "t.jsonl", 1, {})
    res = evaluate_answers([rec], LexicalJudge()).to_json()
    d = res["records"][0]["diagnosis"]
    assert d["layers"]["generation_off_topic"] == "n/a" and d["primary"] == "generation_not_used_or_off_topic"
    assert res["aggregates"]["primary_cause_counts"] == {"generation_not_used_or_off_topic": 1}
    md = report_md.render_results(res)
    assert "| generation_not_used_or_off_topic | 1 |" in md
    assert "| q1 | – | pass 1.000 | **fail** 0.000 | pass 1.000 | **n/a**  |" in md  # both blamed layers in bold
    assert "| 生成：没用上或答非所问（未测答案相关性） | 1 |" in report_md.render_results(res, "zh")


def test_not_in_kb_is_judged_on_refusal():
    assert diagnose({"faithfulness": 0.0}, "not_in_kb", refused=True)["primary"] is None
    d = diagnose({"faithfulness": 1.0}, "not_in_kb", refused=False)
    assert d["primary"] == "generation_distorted" and d["expected_refusal"] is True


@pytest.mark.parametrize("text,refused", [
    ("知识库里没有找到相关信息。", True), ("没查到这个问题的答案。", True), ("抱歉，我无法回答这个问题。", True),
    ("文档中未提及账号锁定策略。", True), ("I could not find this in the knowledge base.", True),
    ("The provided context does not mention lockouts.", True), ("I don't know.", True), ("", False),
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
    # a courtesy asserts nothing, in any answer: it need not cite (it was MISSING_CITATION)
    assert _missing("知识库里没有相关信息。请联系管理员。") == []


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


# --- a refusal is the whole answer, not a phrase anywhere in it (review 4) ---------------------------------

def _nik(response: str, rid: str = "nik") -> dict:
    row = {"id": rid, "user_input": "Who founded the company?", "response": response,
           "retrieved_contexts": [{"id": "1", "title": "", "text": "Login returns 422 on a wrong password."}],
           "category": "not_in_kb"}
    return evaluate_answers([parse_answer(row, "answers.jsonl", 1, {})], LexicalJudge()).to_json()["records"][0]


@pytest.mark.parametrize("response", [
    "The company was founded by Ana Kel in 2010. The documents do not mention anything else.",
    "公司由安娜于 2010 年创立。文档中没有更多信息。",
    "Ana Kel founded the company. I could not find anything else in the knowledge base.",
    "安娜创立了公司。知识库里没有更多信息。",
])
def test_a_made_up_claim_beside_a_refusal_is_no_refusal_and_must_cite(response):
    """A phrase match anywhere made the whole answer a refusal, and a not_in_kb refusal has every
    sentence excused from citing: the invented founder passed uncited, refused: true."""
    assert not is_refusal(response)
    rec = _nik(response)
    assert rec["refused"] is False and rec["diagnosis"]["primary"] == "generation_distorted"
    assert [c["status"] for c in rec["citation_checks"]] == ["MISSING_CITATION"]  # the claim; the refusal sentence is excused


@pytest.mark.parametrize("response", [
    "The documents do not mention who founded the company.", "知识库里没有相关信息。",
    "Sorry. The documents do not mention who founded it. Please contact the company's support team.",
    "抱歉，知识库里没有相关信息。建议联系管理员确认。", "文档中未提及创立者。如有其他问题，欢迎继续提问。",
    "I don't know. I hope this helps!",
])
def test_a_refusal_with_its_courtesies_still_refuses(response):
    rec = _nik(response)
    assert is_refusal(response) and rec["refused"] is True and rec["citation_checks"] == []
    assert rec["diagnosis"]["primary"] is None


@pytest.mark.parametrize("response", [
    "Sorry, the account locks after three tries.", "抱歉，账号会被锁定。",
    "知识库里没有相关信息。建议联系管理员，账号会被锁定。",  # a courtesy with a claim after its comma
    "The documents do not mention it. Please call 555 0100.",  # a number is a claim to check
    "I don't know. The founder is Ana.",
])
def test_a_courtesy_hides_no_claim(response):
    assert not is_refusal(response)


@pytest.mark.parametrize("text", [
    # Chinese with the reports' own word for a retrieved text (段落), 文中, 片段, 来源, 原文
    "段落中没有提到锁定时长。", "所提供的段落未包含答案。", "文中未提及。", "检索到的片段中没有相关内容。",
    "来源中未提及锁定时长。", "原文没有提到锁定时长。", "检索结果中没有提及。", "提供的内容没有提及锁定时长。",
    # English, the same sources
    "The passages do not mention the lockout time.", "The excerpts do not mention it.", "The snippets don't say.",
    "The sources do not mention the lockout time.", "Not found in the provided text.", "The text does not mention it.",
    "The retrieved results do not mention it.", "The reference materials do not cover this.",
    "The content provided does not mention it.", "The provided information does not specify it.",
])
def test_refusals_name_the_same_sources_in_both_languages(text):
    assert is_refusal(text)


@pytest.mark.parametrize("text", ["The response text does not contain the password.", "段落之间用空行分隔。",
                                  "文本中没有空格。"])
def test_a_source_word_alone_is_no_refusal(text):
    assert not is_refusal(text)


def test_the_reviewers_refusals_with_passages_in_both_languages():
    """"段落中没有提到锁定时长。" went unrecognised where "The passages do not mention..." was: the zh
    refusal sentence beside a cited claim had to cite, and the not_in_kb zh refusal was blamed."""
    rows = [{"id": "en", "user_input": "How long is the lockout?", "response": "Login returns 422 [1]. The passages do not mention the lockout time.",
             "retrieved_contexts": [{"id": "1", "title": "", "text": "Login returns 422 on a wrong password."}], "reference": "15 minutes"},
            {"id": "zh", "user_input": "锁定多久？", "response": "登录失败返回 422 [1]。段落中没有提到锁定时长。",
             "retrieved_contexts": [{"id": "1", "title": "", "text": "Login returns 422 on a wrong password."}], "reference": "15 分钟"},
            {"id": "zh_nik", "user_input": "谁创立的？", "response": "段落中没有提到创立者。",
             "retrieved_contexts": [{"id": "1", "title": "", "text": "Login returns 422 on a wrong password."}], "category": "not_in_kb"}]
    res = evaluate_answers([parse_answer(r, "answers.jsonl", i, {}) for i, r in enumerate(rows, 1)], LexicalJudge()).to_json()
    en, zh, nik = res["records"]
    assert [c["status"] for c in en["citation_checks"]] == [c["status"] for c in zh["citation_checks"]] == ["PASS"]
    assert nik["refused"] is True and nik["diagnosis"]["primary"] is None


# --- review 6: a sentence beside a refusal is excused when it carries no claim ------------------------
# Realistic answers to a not_in_kb question. Each refusal's other sentences are an apology, a restated
# inability, thanks, a pointer or request, an offer of help or the sources' scope; each claim answer has
# a sentence that asserts something (a number, a name, a fact) beside a refusal. On this table the rule
# of d5fa37c (a refusal phrase anywhere) read 20/22 refusals and 18/22 claims as refusals; that of
# b45439c (only a short courtesy list beside a refusal) 8/22 and 0/22; this one 22/22 and 0/22.
REALISTIC_REFUSALS = [
    # English
    "The passages don't mention it. I'm not able to answer based on the given context.",
    "I could not find the answer in the provided context. If you can provide more details, I can try to help.",
    "The answer is not in the documents. Sorry I couldn't be more helpful.",
    "Sorry, I don't have enough information to answer that. The documents only cover login errors.",
    "I'm sorry, but the provided documents do not contain information about this. Please consult the official website.",
    "The documents do not mention the founding year. You may want to check the company's official website for more details.",
    "Unfortunately, the knowledge base does not contain this information. Sorry for the inconvenience!",
    "The context does not say. I'm unable to answer this question. Is there anything else I can help with?",
    "I can't answer that from the retrieved passages. Could you rephrase the question?",
    "The provided context doesn't cover this topic. I'd be happy to help with anything else about the product.",
    "Sorry, I can't help with this. The documents don't contain the answer.",
    "There is no information about the founder in the documents. Thanks for your patience, and feel free to ask another question.",
    # Chinese
    "文档中没有提到这一点。很抱歉无法帮到您。",
    "抱歉，提供的文档中没有相关信息。请您咨询客服。",
    "根据提供的资料，无法回答这个问题。建议您查阅官方文档。",
    "知识库中没有找到相关内容。如有其他问题，欢迎随时提问。",
    "很抱歉，我无法回答这个问题。如果您能提供更多细节，我可以尝试帮助。",
    "文中未提及创始人。抱歉，未能提供更多帮助。希望您理解。",
    "提供的段落没有涉及这个问题。文档只涉及登录错误。",
    "对不起，知识库里没有相关记录。您可以联系管理员确认。谢谢您的耐心。",
    "我没法回答这个问题，上下文没有相关信息。如需进一步帮助，请随时告诉我。",
    "检索结果中没有找到答案。不好意思，无法帮到您。",
]
CLAIMS_BESIDE_A_REFUSAL = [
    # English
    "The company was founded by Ana Kel in 2010. The documents do not mention anything else.",
    "It was founded in 2010. Sorry, I couldn't find more in the documents.",
    "The documents do not mention the founder. The company is probably run by John Smith.",
    "I couldn't find this in the context. The account locks after five failed attempts.",
    "The passages don't say. You should restart the server to fix the error.",
    "Sorry, the documents don't cover it. Please contact Ana Kel, who founded the company.",
    "The context does not mention the CEO. Please call support at 555 0100.",
    "I'm not able to answer based on the given context. It is likely a rate limit.",
    "The knowledge base does not contain this. The password must be 8 characters long.",
    "There is no information in the documents. The documents only mention that the founder was Ana Kel.",
    "I don't know. The API returns 422 on a bad password.",
    "Unfortunately, the documents do not say. If you reset the password, the account unlocks immediately.",
    # Chinese
    "公司由安娜于 2010 年创立。文档中没有更多信息。",
    "文档中没有提到创始人。不过公司大概成立于上世纪九十年代。",
    "知识库里没有相关信息。账号会在连续失败五次后锁定。",
    "抱歉，文档未提及。建议联系管理员，账号会被锁定。",
    "我无法回答这个问题。据我所知，创始人是特朗普。",
    "上下文中没有相关记录。请拨打 400-800-1234 联系客服。",
    "文档中没有找到答案。密码长度必须为 8 位。",
    "很抱歉无法帮到您。接口在密码错误时返回 422。",
    "检索结果中没有相关内容。系统默认使用 UTF-8 编码。",
    "文档只提到了账号会被永久锁定。抱歉，无法提供更多信息。",
]


@pytest.mark.parametrize("response", REALISTIC_REFUSALS)
def test_a_realistic_refusal_with_apology_offer_or_request_refuses(response):
    """b45439c read 14 of these as answers (each then MISSING_CITATION, tier 1 and the not_in_kb check failed)."""
    rec = _nik(response)
    assert is_refusal(response) and rec["refused"] is True and rec["citation_checks"] == []
    assert rec["diagnosis"]["primary"] is None


@pytest.mark.parametrize("response", CLAIMS_BESIDE_A_REFUSAL)
def test_a_claim_beside_a_refusal_makes_no_refusal(response):
    """d5fa37c read 18 of these as refusals, their claims excused from citing."""
    rec = _nik(response)
    assert not is_refusal(response) and rec["refused"] is False
    assert rec["diagnosis"]["primary"] == "generation_distorted"
    assert "MISSING_CITATION" in [c["status"] for c in rec["citation_checks"]]


@pytest.mark.parametrize("text", [
    "I'm not able to answer based on the given context.", "We are unable to answer this.", "I won't be able to tell.",
    "Sorry, I can't help with this.", "I cannot answer that.",
    "抱歉，我无法回答。", "很抱歉无法帮到您。", "我没法回答这个问题。", "未能解答这个问题。", "对不起，没有办法给出答案。",
])
def test_inability_to_answer_refuses_in_both_languages(text):
    assert is_refusal(text)


@pytest.mark.parametrize("text", ["The server is unable to answer requests during maintenance.", "系统无法帮助用户找回密码。",
                                  "The client can't help with retries."])
def test_a_system_unable_to_answer_states_a_fact(text):
    assert not is_refusal(text)
