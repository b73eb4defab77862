"""Citation edge cases: RAG-Sequence's implicit citations per sentence, footnote definitions,
the full-width comma between numbers, declining sentences in citation recall, refusals in the
diagnosis, and "[1]-[3]" as a range."""

from __future__ import annotations

import pytest
import torch

from lewisrag.eval import citations
from lewisrag.eval.citations import check_answer, check_sentence, checkable_tokens, fold
from lewisrag.eval.diagnose import diagnose
from lewisrag.eval import evaluator
from lewisrag.eval.evaluator import EvalConfig, evaluate_answers
from lewisrag.eval.judges import LexicalJudge
from lewisrag.eval.records import parse_answer
from lewisrag.eval.statements import canonical_citations, sentence_spans, split_sentences, strip_citations
from lewisrag.rag_model import implicit_citations as ic
from lewisrag.rag_model.decoding import Decoded
from lewisrag.scoring.markers import MAX_RANGE, citation_ids


def _evaluate(response: str, contexts: list[str], reference: str | None = None) -> dict:
    row = {"user_input": "q", "response": response, "retrieved_contexts": contexts}
    if reference is not None:
        row["reference"] = reference
    res = evaluate_answers([parse_answer(row, "answers.jsonl", 1, {})], LexicalJudge(), EvalConfig(claims=False))
    return res.to_json()["records"][0]


# --- 1. RAG-Sequence: every sentence cites the document ----------------------------------------------

class WordTokenizer:
    """Each id decodes to one piece of `VOCAB`; 0-2 are special (start, pad, end)."""

    VOCAB = {3: "Ana Kel leads Valdoria", 4: ".", 5: " She took office in 2016", 6: "。", 7: "登录失败返回 422"}
    all_special_ids = [0, 1, 2]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.VOCAB[i] for i in ids if i not in self.all_special_ids)


def test_a_rag_sequence_answer_cites_the_document_in_every_sentence():
    """The whole answer went to `cite` as one sentence, so its marker went only before the last stop:
    "Ana Kel leads Valdoria. She took office in 2016 [2]." left the first sentence uncited, a
    MISSING_CITATION for a sentence the document backs (RAG-Token already cited per sentence)."""
    seq = torch.tensor([[2, 3, 4, 5, 4, 2], [2, 7, 6, 3, 4, 2]])
    dec = Decoded(seq, torch.tensor([[0.1, 0.9], [0.8, 0.2]]), torch.zeros(2))
    answers = ic.cited_answers(dec, WordTokenizer(), [["1", "2"], ["1", "2"]], "sequence")
    assert answers == ["Ana Kel leads Valdoria [2]. She took office in 2016 [2].", "登录失败返回 422 [1]。Ana Kel leads Valdoria [1]."]
    assert [s.citations for s in split_sentences(answers[0])] == [("2",), ("2",)]
    docs = {"1": "登录失败返回 422。Ana Kel leads Valdoria."}
    assert [c.status for _, c in check_answer(answers[1], docs, {"1", "2"})] == ["PASS", "PASS"]


def test_a_one_sentence_rag_sequence_answer_is_cited_as_before():
    """Guard: a single sentence keeps its one marker before the stop."""
    dec = Decoded(torch.tensor([[2, 3, 4, 2]]), torch.tensor([[0.1, 0.9]]), torch.zeros(1))
    assert ic.cited_answers(dec, WordTokenizer(), [["p1", "p2"]], "sequence") == ["Ana Kel leads Valdoria [p2]."]


# --- 2. A footnote definition line is no statement --------------------------------------------------

@pytest.mark.parametrize("definition", ["[^1]: REQ-AUTH-03 登录需求文档", "  [^1]：REQ-AUTH-03 登录需求文档",
                                        "［^1］: REQ-AUTH-03 登录需求文档", "【^1】：REQ-AUTH-03 登录需求文档"])
def test_a_footnote_definition_line_is_no_statement(definition):
    """"[^1]: REQ-AUTH-03 登录需求文档" was split as the statement ": REQ-AUTH-03 登录需求文档" citing 1: judged
    for faithfulness (0.5 for a correct answer) and blamed as generation_distorted."""
    answer = f"密码错误时接口返回 422[^1]。\n\n{definition}"
    assert sentence_spans(answer) == ["密码错误时接口返回 422[^1]。"]
    rec = _evaluate(answer, ["REQ-AUTH-03：密码错误时接口返回 422。"])
    assert rec["metrics"]["faithfulness"] == 1.0 and rec["metrics"]["citation_recall"] == 1.0
    assert [c["sentence"] for c in rec["citation_checks"]] == ["密码错误时接口返回 422。"]
    assert rec["diagnosis"]["primary"] is None


def test_reference_lists_and_code_keep_their_lines():
    """Guard: a reference list's "[1] ..." line is still a sentence, and a footnote-like line inside code stays code."""
    assert sentence_spans("返回 422 [1]。\n[1] REQ-AUTH-03 登录需求文档") == ["返回 422 [1]。", "[1] REQ-AUTH-03 登录需求文档"]
    fenced = "Write it so [1]:\n```\n[^1]: note\n```"
    assert sentence_spans(fenced) == [fenced]


def test_implicit_citations_skip_a_footnote_definition_as_the_splitter_does():
    """RAG-Sequence's sentences are the evaluator's: a footnote definition line gets no marker."""
    text = "It returns 422.\n[^1]: REQ-AUTH-03"
    assert [text[a:b] for a, b in ic.sentences_of(text)] == ["It returns 422."]


# --- 3. "，" between numbers --------------------------------------------------------------------------

def test_a_full_width_comma_between_numbers_separates_them():
    """NFKC makes "，" a ",", so "401，403" was the number 401403: TOKEN_NOT_FOUND against a document
    saying 401 and 403, and the lexical judge found the premise lacking "401403"."""
    docs = {"1": "未登录返回 401，无权限返回 403。"}
    assert checkable_tokens("分别返回 401，403") == {"401", "403"}
    assert check_sentence("未登录或无权限时分别返回 401，403 [1]。", docs, {"1"}).status == citations.PASS
    assert check_sentence("分别返回 401，404 [1]。", docs, {"1"}).detail == "not in the cited documents: 404"
    (v,) = LexicalJudge().judge([(docs["1"], "未登录和无权限返回 401，403")])
    assert v.supported is True, v.reason
    # a document that writes the two numbers with "，" backs a sentence that writes them with "、"
    assert check_sentence("返回 401、403 [1]。", {"1": "返回 401，403。"}, {"1"}).status == citations.PASS


def test_thousands_separators_and_quotes_are_read_as_before():
    """Guard: the ASCII "," still groups digits, as "，" inside a number written in full-width forms does, and
    quotes are still compared in NFKC (fold keeps ",")."""
    assert checkable_tokens("共 1,000 人") == {"1000"} == checkable_tokens("共１，０００人")  # as scoring.qa reads it
    assert fold("401，403") == "401,403"
    assert check_sentence("提示「401，403」[1]。", {"1": "提示 401，403。"}, {"1"}).status == citations.PASS
    assert check_sentence("提示「401，404」[1]。", {"1": "提示 401，403。"}, {"1"}).status == citations.QUOTE_NOT_FOUND


# --- 4. A declining sentence is out of citation recall ---------------------------------------------

@pytest.mark.parametrize("response", ["登录失败时接口返回 422 状态码[1]。文档中没有提到锁定时长。",
                                      "The API returns 422 [1]. The documents do not mention the lockout time."])
def test_a_sentence_excused_from_citing_is_not_an_uncited_statement(response):
    """The rule layer excuses a sentence that only declines from citing, yet citation recall counted it as
    an uncited statement (0): a correct, cited answer that says what it could not find scored 0.5."""
    rec = _evaluate(response, ["The API returns 422 when login fails. 登录失败时接口返回 422 状态码。"])
    assert [c["status"] for c in rec["citation_checks"]] == ["PASS"]
    assert rec["metrics"]["citation_recall"] == 1.0 and rec["metrics"]["citation_precision"] == 1.0


def test_an_answer_that_only_declines_has_no_citation_recall():
    """With every sentence excused nothing is asked to cite: recall is null with the reason, not 0."""
    rec = _evaluate("抱歉，知识库里没有相关信息。", ["登录失败时接口返回 422 状态码。"], reference="登录失败返回 422。")
    assert rec["metrics"]["citation_recall"] is None and rec["metrics"]["citation_precision"] is None
    assert rec["nan_reasons"]["citation_recall"] == rec["nan_reasons"]["citation_precision"] == evaluator.DECLINES_ONLY_REASON


def test_an_uncited_claim_beside_a_refusal_phrase_still_scores_zero():
    """Guard: only a sentence that declines and states nothing is left out."""
    rec = _evaluate("登录失败返回 422 [1]。未找到用户时接口返回 404。", ["登录失败返回 422。"])
    assert rec["metrics"]["citation_recall"] == 0.5


# --- 5. A refusal of an answerable question is not "distorted" -------------------------------------

def test_a_refusal_is_not_blamed_on_distortion():
    """A refusal's faithfulness is 0 when "not found" is judged a statement the contexts lack: an
    artefact, yet the refusal of a question whose answer was retrieved was diagnosed generation_distorted."""
    m = {"context_recall": 1.0, "answer_completeness": 0.0, "faithfulness": 0.0, "on_topic_rate": 1.0}
    d = diagnose(m, "single_doc", refused=True)
    assert d["layers"]["generation_distorted"] == "n/a" and d["primary"] == "generation_not_used"
    assert diagnose({**m, "context_recall": 0.0}, refused=True)["primary"] == "retrieval"
    assert diagnose(m, "single_doc", refused=False)["primary"] == "generation_distorted"  # an answer is still judged
    rec = _evaluate("抱歉，知识库里没有相关信息。", ["登录失败时接口返回 422 状态码。"], reference="登录失败返回 422。")
    assert rec["refused"] is True and rec["diagnosis"]["layers"]["generation_distorted"] == "n/a"
    # a refusal answers no other question either: off-topic is n/a for it, measured or not
    assert rec["diagnosis"]["layers"]["generation_off_topic"] == "n/a"
    assert rec["diagnosis"]["primary"] == "generation_not_used"


# --- 6. [1]-[3] is a range --------------------------------------------------------------------------

@pytest.mark.parametrize("marker", ["[1]-[3]", "[1] - [3]", "[1]–[3]", "[1]－[3]", "[1]～[3]", "[1]~[3]",
                                    "［１］－［３］", "【1】～【3】", "[^1]-[^3]"])
def test_two_markers_joined_by_a_dash_are_a_range(marker):
    """"[1]-[3]" was read as citing 1 and 3, the "-" left in the statement ("登录失败返回 422-。")."""
    (s,) = split_sentences(f"登录失败返回 422 {marker}。")
    assert s.text == "登录失败返回 422。" and s.citations == ("1", "2", "3")
    assert canonical_citations(f"见 {marker}。") == "见 [1][2][3]。"
    docs = {"1": "登录失败返回 422。", "2": "无关", "3": "无关"}
    assert check_sentence(f"登录失败返回 422 {marker}。", docs, {"1", "2", "3"}).status == citations.PASS


def test_a_dashed_range_follows_the_range_rules():
    """Guard: as [1-30] and [3-1], too long or backwards it cites its two ends; across a line break, no range."""
    assert citation_ids(f"[1]-[{MAX_RANGE + 10}]") == ("1", str(MAX_RANGE + 10)) and citation_ids("[3]-[1]") == ("3", "1")
    assert citation_ids("A [1]\n- [3] B") == ("1", "3")
    assert strip_citations("A [1]\n- [3] B") == "A\n- B"


# --- a not_in_kb question whose generator failed --------------------------------------------------

def test_a_failed_generator_is_no_missed_refusal_in_the_aggregates():
    """compare's layer summary leaves a not_in_kb question whose generator failed out of the refusal
    counts, while the evaluator's aggregates in the same results.json counted it as not refused."""
    from lewisrag.experiments.compare import layer_summary, mark_failed

    recs = [{"id": i, "category": "not_in_kb", "refused": True, "metrics": {}, "nan_reasons": {},
             "citation_checks": [], "diagnosis": {"primary": None}} for i in ("a", "b")]
    mark_failed(recs[1], "timeout")
    assert evaluator.aggregate(recs)["not_in_kb"] == {"n": 1, "refused": 1, "not_refused_ids": []}
    assert layer_summary(recs)["not_in_kb"] == {"n": 1, "refused": 1}
