"""Edges of the layered evaluation: the retrieval verdict over every context the generator read, no
context at all, Markdown headings, courtesy and declining sentences, and answers with no words."""

from __future__ import annotations

import pytest

from lewisrag.eval.citations import MISSING_CITATION
from lewisrag.eval.diagnose import diagnose
from lewisrag.eval.evaluator import REFUSAL_REASON, EvalConfig, evaluate_answers
from lewisrag.eval.judges import LexicalJudge
from lewisrag.eval.records import parse_answer
from lewisrag.eval.refusals import is_refusal
from lewisrag.eval.statements import sentence_spans

CTX_EN = [{"id": "1", "text": "Login failure returns 422."}, {"id": "2", "text": "Errors are listed in red above the form."}]
CTX_ZH = [{"id": "1", "text": "登录失败返回 422。"}]


def _run(*rows: dict, cfg: EvalConfig = EvalConfig()) -> dict:
    records = [parse_answer(row, "answers.jsonl", i, {}) for i, row in enumerate(rows, start=1)]
    return evaluate_answers(records, LexicalJudge(), cfg).to_json()


def _en(response: str, **extra) -> dict:
    return {"id": "en", "user_input": "What does a failed login return?", "response": response,
            "retrieved_contexts": CTX_EN, "reference": "Login failure returns 422.", **extra}


def _zh(response: str, **extra) -> dict:
    return {"id": "zh", "user_input": "登录失败返回什么？", "response": response, "retrieved_contexts": CTX_ZH,
            "reference": "登录失败返回 422。", **extra}


def _missing(rec: dict) -> list[str]:
    return [c["sentence"] for c in rec["citation_checks"] if c["status"] == MISSING_CITATION]


# --- 1. retrieval is judged on every context the generator read ----------------------------------------

def test_a_gold_passage_read_below_the_last_cut_off_is_retrieved():
    """With the default cut-offs (1, 5, 10) a gold passage at rank 12, which the answer read and cited,
    was a retrieval failure: the verdict read recall@10."""
    filler = [{"id": f"d{i}", "text": f"Filler passage number {i} about weather."} for i in range(1, 12)]
    rec = _run(_en("Login failure returns 422 [12].", retrieved_contexts=[*filler, {"id": "gold", "text": CTX_EN[0]["text"]}],
                   gold_passage_ids=["gold"]), cfg=EvalConfig(claims=False))["records"][0]
    assert rec["metrics"]["recall_at_k"] == {"1": 0.0, "5": 0.0, "10": 0.0}  # the rows stay at their cut-offs
    assert rec["diagnosis"]["layers"]["retrieval"] == "pass" and rec["diagnosis"]["primary"] is None


def test_recall_at_one_does_not_decide_the_retrieval_verdict():
    """`--recall-at 1` and the gold passage at rank 2: retrieval failed, though the answer used it."""
    row = _en("Login failure returns 422 [2].", retrieved_contexts=[CTX_EN[1], {"id": "g", "text": CTX_EN[0]["text"]}],
              gold_passage_ids=["g"])
    rec = _run(row, cfg=EvalConfig(ks=(1,), claims=False))["records"][0]
    assert rec["metrics"]["recall_at_k"] == {"1": 0.0}
    assert rec["diagnosis"]["layers"]["retrieval"] == "pass"
    # a gold passage the generator never got still fails it
    missed = _run({**row, "gold_passage_ids": ["g", "elsewhere"]}, cfg=EvalConfig(ks=(1,), claims=False))["records"][0]
    assert missed["diagnosis"]["primary"] == "retrieval"


# --- 5. no context is a retrieval failure, whatever the reference ----------------------------------------

@pytest.mark.parametrize("response", ["Login failure returns 422.", "I could not find this in the knowledge base."])
def test_no_context_fails_retrieval_without_a_reference(response):
    """retrieved_contexts [] with no reference and no gold ids was retrieval "n/a": the blame went to
    generation_distorted, or to nothing for a refusal."""
    row = {"id": "q", "user_input": "What does a failed login return?", "response": response, "retrieved_contexts": []}
    d = _run(row)["records"][0]["diagnosis"]
    assert d["layers"]["retrieval"] == "fail" and d["primary"] == "retrieval"
    assert diagnose({"faithfulness": 1.0, "context_recall": 1.0}, contexts=0)["primary"] == "retrieval"


# --- 2. a heading is no sentence; a courtesy asserts nothing ----------------------------------------------

@pytest.mark.parametrize("text,spans", [
    ("## Answer\n\nLogin failure returns 422 [1].", ["Login failure returns 422 [1]."]),
    ("### 结论\n登录失败返回 422 [1]。", ["登录失败返回 422 [1]。"]),
    ("   # Title\nIt locks [1].", ["It locks [1]."]),
    ("#hashtag: it locks [1].", ["#hashtag: it locks [1]."]),  # no space after #: text
    ("####### Seven\nIt locks [1].", ["####### Seven", "It locks [1]."]),  # seven #: text
    ("Run it [1]:\n```\n# a comment\nrun\n```", ["Run it [1]:\n```\n# a comment\nrun\n```"]),  # code
])
def test_a_markdown_heading_line_is_no_sentence(text, spans):
    assert sentence_spans(text) == spans


@pytest.mark.parametrize("row,statement", [
    (_en("## Answer\n\nLogin failure returns 422 [1]."), "Login failure returns 422."),
    (_zh("### 结论\n登录失败返回 422 [1]。"), "登录失败返回 422。"),
    (_en("Login failure returns 422 [1]. Hope this helps!"), "Login failure returns 422."),
    (_zh("登录失败返回 422 [1]。希望对您有帮助！"), "登录失败返回 422。"),
    (_zh("登录失败返回 422 [1]。如有其他问题，欢迎随时提问。"), "登录失败返回 422。"),
])
def test_a_heading_or_a_courtesy_is_neither_judged_nor_asked_to_cite(row, statement):
    """Each was an uncited, unsupported statement: faithfulness and citation recall 0.5, a
    MISSING_CITATION for the hard gate, and the answer blamed on generation_distorted."""
    rec = _run(row)["records"][0]
    m = rec["metrics"]
    assert _missing(rec) == [] and [s["text"] for s in rec["statements"]] == [statement]
    assert (m["faithfulness"], m["citation_recall"], m["claims.faithfulness"], m["claims.precision"]) == (1.0, 1.0, 1.0, 1.0)
    assert rec["diagnosis"]["primary"] is None


def test_a_headings_words_are_no_answer_text():
    m = _run(_en("## Answer\n\nLogin failure returns 422 [1]."))["records"][0]["metrics"]
    assert (m["exact_match"], m["f1"]) == (1.0, 1.0)


# --- 3. a sentence that only declines is no judged statement ----------------------------------------------

@pytest.mark.parametrize("row", [
    _en("Login failure returns 422 [1]. The documents do not mention the lockout time."),
    _zh("登录失败返回 422 [1]。文档未提及锁定时长。"),
])
def test_a_declining_sentence_beside_an_answer_is_not_judged(row):
    """Exempt from citing, it was still an unsupported statement: faithfulness 0.5, claims.hallucination
    0.5, the answer blamed on generation_distorted."""
    rec = _run(row)["records"][0]
    m = rec["metrics"]
    assert len(rec["statements"]) == 1 and not rec["refused"]
    assert (m["faithfulness"], m["claims.faithfulness"], m["claims.hallucination"], m["claims.precision"]) == (1.0, 1.0, 0.0, 1.0)
    assert rec["claims"]["response"] == [rec["statements"][0]["text"]]
    assert rec["diagnosis"]["primary"] is None


def test_a_declining_statement_of_the_atomic_splitter_is_not_judged_either():
    class Decomposer(LexicalJudge):
        def decompose(self, text):
            return ["Login failure returns 422.", "The documents do not mention the lockout time."]

    row = _en("Login failure returns 422 [1]. The documents do not mention the lockout time.")
    rec = evaluate_answers([parse_answer(row, "a.jsonl", 1, {})], Decomposer(), EvalConfig(splitter="atomic")).to_json()["records"][0]
    assert [s["text"] for s in rec["statements"]] == ["Login failure returns 422."] and rec["metrics"]["faithfulness"] == 1.0


def test_a_declining_claim_the_llm_extracted_is_not_judged_either():
    class Extractor(LexicalJudge):
        def extract_claims(self, text, question):
            return ["Login failure returns 422.", "The lockout time is not mentioned in the documents."]

    row = _en("Login failure returns 422 [1]. The documents do not mention the lockout time.")
    rec = evaluate_answers([parse_answer(row, "a.jsonl", 1, {})], Extractor(),
                           EvalConfig(claim_extractor="llm")).to_json()["records"][0]
    assert rec["claims"]["response"] == ["Login failure returns 422."] and rec["metrics"]["claims.hallucination"] == 0.0


def test_a_refusal_still_says_why_its_scores_are_null():
    """Its declining sentences left out, a refusal has no statements: its reason stays the refusal's."""
    rec = _run(_en("The documents do not mention it. Sorry."))["records"][0]
    assert rec["refused"] and rec["statements"] == []
    for name in ("faithfulness", "claims.faithfulness", "claims.hallucination"):
        assert rec["metrics"][name] is None and rec["nan_reasons"][name] == REFUSAL_REASON
    assert rec["diagnosis"]["primary"] == "generation_not_used"


@pytest.mark.parametrize("row,advice", [
    (_en("Login failure returns 422 [1]. Please check that the token has not expired."),
     "Please check that the token has not expired."),
    (_en("Login failure returns 422 [1]. If you have admin rights you can reset the password."),
     "If you have admin rights you can reset the password."),
    (_zh("登录失败返回 422 [1]。请查看登录页面的红色错误列表。"), "请查看登录页面的红色错误列表。"),
])
def test_advice_in_an_answer_still_cites_and_is_judged(row, advice):
    """A pointer or request with words of its own is courtesy beside a refusal only: in an answer it is
    advice a context must back, so it still must cite and is judged."""
    rec = _run(row)["records"][0]
    assert _missing(rec) == [advice] and advice in [s["text"] for s in rec["statements"]]


def test_asserts_nothing():
    from lewisrag.eval.refusals import asserts_nothing

    assert asserts_nothing("Hope this helps!") and asserts_nothing("文档未提及锁定时长。")
    assert not asserts_nothing("Login failure returns 422.") and not asserts_nothing("## Answer")


# --- 4. an answer with no words is no refusal, and not distorted ------------------------------------------

@pytest.mark.parametrize("response", ["", "   \n ", "[1]", "……"])
def test_an_answer_with_no_words_neither_refuses_nor_distorts(response):
    """An empty or whitespace answer counted as a refusal of a not_in_kb question; "[1]" and "……" did not,
    and were blamed on generation_distorted, though they assert nothing."""
    assert not is_refusal(response)
    nik = {"id": "nik", "user_input": "Who founded the company?", "response": response, "retrieved_contexts": CTX_EN,
           "category": "not_in_kb"}
    res = _run(nik, _en(response))
    miss, answerable = res["records"]
    assert not miss["refused"] and miss["diagnosis"]["primary"] == "generation_not_used"
    assert miss["diagnosis"]["layers"]["generation_distorted"] == "n/a"
    assert res["aggregates"]["not_in_kb"] == {"n": 1, "refused": 0, "not_refused_ids": ["nik"]}
    # an answerable question: the reference not given, nothing off topic or distorted to blame beside it
    assert not answerable["refused"] and answerable["diagnosis"]["primary"] == "generation_not_used"
