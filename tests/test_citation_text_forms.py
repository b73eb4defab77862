"""The forms a correct answer writes its text in: a footnote definition under it, Markdown inside a
quote, a number without its leading zero, a negation's n't."""

from __future__ import annotations

import pytest

from lewisrag.eval.citations import PASS, QUOTE_NOT_FOUND, TOKEN_NOT_FOUND, check_sentence, checkable_tokens
from lewisrag.eval.evaluator import EvalConfig, answer_text, evaluate_answers
from lewisrag.eval.judges import LexicalJudge
from lewisrag.eval.records import parse_answer

ANSWER = "It returns 422[^1].\n\n[^1]: REQ-AUTH-03 login requirements"


class RecordingJudge(LexicalJudge):
    """The lexical judge with an atomic splitter and a claim extractor that keep the text they were given."""

    def __init__(self):
        super().__init__()
        self.read = []

    def decompose(self, text: str) -> list[str]:
        self.read.append(text)
        return [text]

    def extract_claims(self, text: str, question: str) -> list[str]:
        self.read.append(text)
        return [text]


def _evaluate(judge, **cfg) -> dict:
    row = {"user_input": "q", "response": ANSWER, "reference": "It returns 422.",
           "retrieved_contexts": ["REQ-AUTH-03: it returns 422."]}
    return evaluate_answers([parse_answer(row, "answers.jsonl", 1, {})], judge, EvalConfig(**cfg)).to_json()["records"][0]


# --- a footnote definition line is no part of what the answer says ------------------------------------

def test_a_footnote_definition_is_not_scored_as_answer_text():
    """The sentences dropped "[^1]: REQ-AUTH-03 ...", but exact match, F1 and ROUGE-L read it (": REQ-AUTH-03
    login requirements" left behind): a correct answer had EM 0.0, 1.0 without the definition line."""
    assert answer_text(ANSWER) == "It returns 422."
    rec = _evaluate(LexicalJudge(), claims=True)
    assert (rec["metrics"]["exact_match"], rec["metrics"]["f1"], rec["metrics"]["rougeL"]) == (1.0, 1.0, 1.0)
    assert rec["metrics"]["answer_completeness"] == 1.0


@pytest.mark.parametrize("cfg", [{"splitter": "atomic", "claims": False}, {"claim_extractor": "llm"}])
def test_the_decomposer_and_the_claim_extractor_read_no_footnote_definition(cfg):
    """The atomic splitter and LLM claim extraction were given the definition line as part of the answer."""
    judge = RecordingJudge()
    _evaluate(judge, **cfg)
    assert judge.read and all(t == "It returns 422." for t in judge.read)


# --- Markdown inside a verbatim quote ---------------------------------------------------------------

DOCS = {"1": '登录失败返回 422，errors 为 {"email or password": ["is invalid"]}。页面提示：用户名或密码错误。',
        "2": "Run `make test` first, then press **Build**. The lock ends at 09:05 on 2024-01-05.",
        "3": "The token does not expire. It will not be renewed. Sessions need not be closed."}


@pytest.mark.parametrize("sentence", ["错误信息为「`is invalid`」[1]。", "页面提示「**用户名或密码错误**」[1]。",
                                      "页面提示「*用户名或密码错误。*」[1]。", "页面提示「__用户名或密码错误__」[1]。",
                                      "先运行「`make test`」[2]。", "再点「**Build**」[2]。"])
def test_markdown_inside_a_quote_is_not_part_of_it(sentence):
    """The quote was looked up with its backticks and asterisks: QUOTE_NOT_FOUND, a hard-gate status,
    for words the document holds. A Markdown document that holds them as written still backs them."""
    assert check_sentence(sentence, DOCS, set(DOCS)).status == PASS


def test_a_quote_in_markdown_is_still_held_to_its_words():
    """Guard: removing the formatting does not let other words pass, and an underscore inside a word stays."""
    assert check_sentence("错误信息为「`is valid`」[1]。", DOCS, {"1"}).status == QUOTE_NOT_FOUND
    assert check_sentence("再点「**Rebuild**」[2]。", DOCS, {"2"}).status == QUOTE_NOT_FOUND
    assert check_sentence("字段为「user_name」[1]。", {"1": "字段为 username。"}, {"1"}).status == QUOTE_NOT_FOUND
    assert check_sentence("字段为「`user_name`」[1]。", {"1": "字段为 user_name。"}, {"1"}).status == PASS


# --- leading zeros ----------------------------------------------------------------------------------

def test_a_number_is_read_without_its_leading_zeros():
    """Numbers were compared as strings: "1 月 5 日" against a document's "2024-01-05" was TOKEN_NOT_FOUND "1, 5",
    "9:05" against "09:05" TOKEN_NOT_FOUND "9"."""
    assert check_sentence("2024 年 1 月 5 日发布 [1]。", {"1": "发布日期：2024-01-05。"}, {"1"}).status == PASS
    assert check_sentence("The lock ends at 9:05 [2].", DOCS, {"2"}).status == PASS
    assert check_sentence("It was released on 2024-01-05 [1].", {"1": "Released 2024-1-5."}, {"1"}).status == PASS


def test_a_number_keeps_its_value():
    """Guard: 0 stays a number, a decimal keeps its fraction, and another number still fails."""
    assert checkable_tokens("0 个，0.5 元，00 号，007") == {"0", "0.5", "7"}
    assert check_sentence("利率 1.5% [1]。", {"1": "利率 1.05%。"}, {"1"}).status == TOKEN_NOT_FOUND
    assert check_sentence("The lock ends at 9:15 [2].", DOCS, {"2"}).detail == "not in the cited documents: 15"


# --- n't ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sentence", ["The token doesn't expire [3].", "The token doesn’t expire [3].",
                                      "It won't be renewed [3].", "It can't be renewed [3].", "Sessions needn't be closed [3]."])
def test_a_negation_is_checked_by_its_stem(sentence):
    """Only the "'t" of "n't" was dropped: "doesn't" was the word "doesn" (TOKEN_NOT_FOUND against "does
    not"), "won't" the word "won"."""
    assert check_sentence(sentence, DOCS, {"3"}).status == PASS


def test_a_negated_word_that_the_document_lacks_still_fails():
    """Guard: the stem of an ordinary verb is checked: "needn't" needs "need"."""
    assert checkable_tokens("won't can't isn't didn’t") == frozenset() and checkable_tokens("shan't") == {"shall"}
    assert check_sentence("Sessions needn't be closed [1].", {"1": "Sessions may stay open."}, {"1"}).detail == \
        "not in the cited documents: closed, need"
