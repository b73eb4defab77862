"""Label lines are no statements (splitter version "15").

Version "14" read a line that only names what follows ("**结论**", "答案如下：", "Here is the answer:",
"Sources:", a Markdown table's header row) and the "1." of a one-item list as sentences of their own: over a
cited, supported answer each was an uncited, unsupported statement (a MISSING_CITATION the gate fails on,
faithfulness 0.5), and "**结论**" over "知识库中没有相关信息。" made a refusal no refusal.
"""

from __future__ import annotations

import pytest

from lewisrag.eval.evaluator import EvalConfig, answer_text, evaluate_answers
from lewisrag.eval.judges import LexicalJudge
from lewisrag.eval.records import parse_answer
from lewisrag.eval.refusals import is_refusal
from lewisrag.eval.statements import SPLITTER_VERSION, sentence_spans

CLAIM = "瓦尔多利亚由安娜·凯尔领导【1】。"
CONTEXT = "瓦尔多利亚由安娜·凯尔领导。"


def test_the_version_is_bumped():
    assert SPLITTER_VERSION == "15"


@pytest.mark.parametrize("text, expected", [
    (f"**结论**\n{CLAIM}", [CLAIM]),
    (f"**结论：**\n{CLAIM}", [CLAIM]),
    (f"__Answer__:\n{CLAIM}", [CLAIM]),
    (f"答案如下：\n1. {CLAIM}", [CLAIM]),  # the lead-in, and the number of a one-item list
    (f"答案如下：\n1.{CLAIM}", [CLAIM]),
    (f"1. {CLAIM}", [CLAIM]),
    ("Here is the answer:\nAna Kel leads Valdoria [1].", ["Ana Kel leads Valdoria [1]."]),
    ("Based on the provided context, here is what I found:\n- Ana Kel leads Valdoria [1].",
     ["Ana Kel leads Valdoria [1]."]),
    ("Two facts:\n1. It returns 422 [1].\n2. It locks [2].", ["It returns 422 [1].", "It locks [2]."]),
    ("Ana Kel leads Valdoria [1].\n\nSources:\n[1] Valdoria is led by Ana Kel",
     ["Ana Kel leads Valdoria [1].", "[1] Valdoria is led by Ana Kel"]),  # a reference list's line still is one
    ("| 国家 | 领导人 |\n|---|:---:|\n| 瓦尔多利亚 | 安娜·凯尔 [1] |", ["| 瓦尔多利亚 | 安娜·凯尔 [1] |"]),
    ("**结论**\n\n  \n瓦尔多利亚由安娜·凯尔领导【1】。", [CLAIM]),
])
def test_a_label_line_is_no_sentence(text, expected):
    assert sentence_spans(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("Note: the API returns 422.\nIt locks [1].", ["Note: the API returns 422.", "It locks [1]."]),  # a claim after the colon
    ("It is led by **Ana Kel**", ["It is led by **Ana Kel**"]),
    ("Who? Read on.\n**Ana Kel**", ["Who?", "Read on.", "**Ana Kel**"]),  # ending the answer, it may be the answer
    ("**Step 1**\nIt returns 422 [1].", ["**Step 1**", "It returns 422 [1]."]),  # a number: a context must hold it
    ("**Ana Kel leads Valdoria.**\nShe was elected [1].", ["**Ana Kel leads Valdoria.**", "She was elected [1]."]),
    ("The login endpoint returns these codes:\n- 422 [1]", ["The login endpoint returns these codes:", "422 [1]"]),
    ("It locks. Details:\nIt returns 422 [1].", ["It locks.", "Details:", "It returns 422 [1]."]),
    ("Run this:\n```\npip install foo\n```\nIt installs foo [1].", ["Run this:\n```\npip install foo\n```", "It installs foo [1]."]),
    ("```\nSources:\nfoo\n```\nIt works [1].", ["```\nSources:\nfoo\n```\nIt works [1]."]),  # code is no label
    ("42. It is the answer [1].", ["42.", "It is the answer [1]."]),  # one numbered line: 42 is kept
    ("Ana Kel leads Valdoria.\nSources:", ["Ana Kel leads Valdoria.", "Sources:"]),  # nothing after it
])
def test_a_line_that_may_state_something_stays_a_sentence(text, expected):
    assert sentence_spans(text) == expected


def test_a_label_goes_with_its_citations_as_a_heading():
    """RAG-Token's implicit citations cite a label as a line of its own (`rag_model.implicit_citations`): read
    with its citation, the label was a sentence again, and the answer split otherwise than uncited."""
    assert sentence_spans("Facts: [1]\nIt costs $3.50 [2].") == ["It costs $3.50 [2]."]
    assert sentence_spans("1 [1]. It costs $3.50 [2].") == ["It costs $3.50 [2]."]


def test_answer_text_leaves_the_labels_out():
    assert answer_text(f"**结论**\n{CLAIM}") == "瓦尔多利亚由安娜·凯尔领导。"
    assert answer_text("Here is the answer:\nAna Kel [1].") == "Ana Kel."


def test_a_refusal_under_a_bold_heading_is_a_refusal():
    assert is_refusal("**结论**\n知识库中没有相关信息。")
    assert is_refusal("Here is the answer:\nThe documents do not mention it.")
    assert not is_refusal("**结论**\n知识库中没有相关信息，但安娜·凯尔领导瓦尔多利亚。")


def _evaluate(*responses: str) -> list[dict]:
    rows = [{"id": f"a{i}", "user_input": "瓦尔多利亚由谁领导？", "response": r, "retrieved_contexts": [CONTEXT],
             "reference": CONTEXT} for i, r in enumerate(responses)]
    records = [parse_answer(row, "answers.jsonl", i, {}) for i, row in enumerate(rows, start=1)]
    return evaluate_answers(records, LexicalJudge(), EvalConfig(claims=False)).to_json()["records"]


@pytest.mark.parametrize("response", [
    f"**结论**\n{CLAIM}", f"答案如下：\n1. {CLAIM}", f"以下是相关信息：\n{CLAIM}",
    f"| 问题 | 答案 |\n| --- | --- |\n| 领导人 | {CLAIM} |",
])
def test_a_supported_cited_answer_under_a_label_scores_as_without_it(response):
    """The reviewer's answers: faithfulness 0.5, citation recall 0 and a MISSING_CITATION on "**结论**",
    "答案如下：" and "1." under version "14"."""
    labelled, plain = _evaluate(response, CLAIM)
    assert [c["status"] for c in labelled["citation_checks"]] == [c["status"] for c in plain["citation_checks"]]
    assert "MISSING_CITATION" not in [c["status"] for c in labelled["citation_checks"]]
    for name in ("faithfulness", "citation_recall", "citation_precision"):
        assert labelled["metrics"][name] == plain["metrics"][name] == 1.0, name


@pytest.mark.parametrize("response", ["瓦尔多利亚由安娜·凯尔领导。\n来源：【1】", "瓦尔多利亚由安娜·凯尔领导。\n**Sources:** [1]"])
def test_a_last_line_naming_the_sources_cites_the_answer(response):
    """"Source: [1]" under the answer was the one sentence citing, the claim uncited (faithfulness 0.5,
    citation recall 0), where the stitched system's reply parser reads its markers as the answer's."""
    assert [" ".join(s.split()) for s in sentence_spans("Ana Kel leads it.\nSources: [1], [2]")] == ["Ana Kel leads it. [1] [2]"]
    sourced, plain = _evaluate(response, CLAIM)
    assert [c["status"] for c in sourced["citation_checks"]] == [c["status"] for c in plain["citation_checks"]] == ["UNVERIFIABLE"]
    for name in ("faithfulness", "citation_recall", "citation_precision"):
        assert sourced["metrics"][name] == plain["metrics"][name] == 1.0, name
    assert sentence_spans("It returns 422.\nSource: the manual [1]")[-1] == "Source: the manual [1]"  # words: a sentence


def test_a_refusal_under_a_bold_heading_is_scored_as_one():
    rec, = _evaluate("**结论**\n知识库中没有相关信息。")
    assert rec["refused"] and rec["metrics"]["faithfulness"] is None
    assert "MISSING_CITATION" not in [c["status"] for c in rec["citation_checks"]]

