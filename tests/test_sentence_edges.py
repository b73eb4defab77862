"""Splitter version 12: quotes that never closed on their line, and abbreviations before a small word or
a number. Version 11 made the rest of a line one sentence after “ closed by ", an inch mark or a stray
mark (an uncited claim there borrowed the quote's citation: no MISSING_CITATION), and ended a sentence
at "a.m.", "Jan.", "Ph.D.", "min.", "Mt.", "Gen." (an uncited fragment: a MISSING_CITATION on a cited
claim)."""

from __future__ import annotations

import pytest

from lewisrag.eval.citations import check_answer
from lewisrag.eval.statements import sentence_spans, split_sentences
from lewisrag.rag_model import implicit_citations as ic


@pytest.mark.parametrize("text, expected", [
    # “ closed by ", " closed by ”: the quote closes, and 。 after it ends the sentence
    ('页面提示“用户名或密码错误"[1]。账户会被永久删除。', ['页面提示“用户名或密码错误"[1]。', "账户会被永久删除。"]),
    ('提示"错误”[1]。账户删除。', ['提示"错误”[1]。', "账户删除。"]),
    ('他说“好。"然后走了[1]。还有“坏。"[2]', ['他说“好。"然后走了[1]。', '还有“坏。"[2]']),
    ('He said “Stop." and left [1]. It locks [2].', ['He said “Stop." and left [1].', "It locks [2]."]),
    # a " after a digit is an inch mark, not a quote; one closing a quote after a digit still closes it
    ('The monitor is 27" wide [2]. The account is deleted forever.',
     ['The monitor is 27" wide [2].', "The account is deleted forever."]),
    ('It returns "422" [1]. It locks [2].', ['It returns "422" [1].', "It locks [2]."]),
    # a quote still open at the end of its line or text: the line splits as if its marks were not there
    ("提示“用户名或密码错误“[1]。账户锁定 15 分钟[2]。前端显示红色[3]。",
     ["提示“用户名或密码错误“[1]。", "账户锁定 15 分钟[2]。", "前端显示红色[3]。"]),
    ("他说「没完。\n下一行。再一句。", ["他说「没完。", "下一行。", "再一句。"]),
    ('A "stray mark [1]. B is true.\nC 「is quoted。」 [2]', ['A "stray mark [1].', "B is true.", "C 「is quoted。」 [2]"]),
    # ... but quotes closed on their line, nested or not, still hold their stops
    ("“他说‘好。’”[1]然后离开了 [2]。", ["“他说‘好。’”[1]", "然后离开了 [2]。"]),
    ('「他说"好。然后走了"」[1]。', ['「他说"好。然后走了"」[1]。']),
    ('提示“He said "Stop. Now." and left.”[1] 然后 [2]。', ['提示“He said "Stop. Now." and left.”[1]', "然后 [2]。"]),
])
def test_quotes_that_never_close_on_their_line_hold_no_stops(text, expected):
    assert sentence_spans(text) == expected


def test_an_uncited_claim_after_a_mismatched_quote_is_missing_its_citation():
    docs = {"1": "页面提示“用户名或密码错误”。", "2": "The monitor is 27 inches wide."}
    for answer in ('页面提示“用户名或密码错误"[1]。账户会被永久删除。',
                   'The monitor is 27" wide [2]. The account is deleted forever.'):
        assert [c.status for _, c in check_answer(answer, docs, set(docs))][-1] == "MISSING_CITATION"


@pytest.mark.parametrize("text", [
    "The job runs at 9 a.m. every day [1].",
    "It shipped in Jan. 2020 [1].",
    "It shipped on Sept. 5 [1].",
    "The lockout lasts 15 min. after 5 failed attempts [1].",
    "He has a Ph.D. in physics [1].",
    "It was founded ca. 1900 [1].",
    "Mt. Everest is 8,849 m tall [1].",
    "Gen. Smith led it [1].",
    "It costs 5 dollars incl. taxes [1].",
])
def test_an_abbreviation_before_a_small_word_or_a_number_ends_nothing(text):
    assert sentence_spans(text) == [text]


@pytest.mark.parametrize("text, expected", [
    ("It shipped in 2020. The next one ships in 2021 [1].", ["It shipped in 2020.", "The next one ships in 2021 [1]."]),
    ("He left at 5 p.m. The office closed [1].", ["He left at 5 p.m.", "The office closed [1]."]),
    ("The job runs at 9 a.m. [1] It stops at 5 p.m. [2]", ["The job runs at 9 a.m. [1]", "It stops at 5 p.m. [2]"]),
    ("It shipped in Jan. 它很快 [1]。", ["It shipped in Jan.", "它很快 [1]。"]),
    ("It reads JSON, XML, etc. It caches them [1].", ["It reads JSON, XML, etc.", "It caches them [1]."]),
    ("It runs on Android. iOS support is coming [1].", ["It runs on Android.", "iOS support is coming [1]."]),
    ("It returns 422 [1]. then it locks [2].", ["It returns 422 [1].", "then it locks [2]."]),
    ("it returns 422. it locks [1].", ["it returns 422.", "it locks [1]."]),  # an answer in small letters
    ("the form is red. it locks [1].", ["the form is red.", "it locks [1]."]),
    ("He has a Ph.D.", ["He has a Ph.D."]),
])
def test_a_sentence_still_ends_before_a_capital_a_name_or_after_a_citation(text, expected):
    assert sentence_spans(text) == expected


@pytest.mark.parametrize("sentences", [
    ["The job runs at 9 a.m. every day.", "He left at 5 p.m.", "The office closed."],
    ["It shipped in Jan.", "The next one in Feb."],
    ["He has a Ph.D.", "It is in physics."],
    ['The monitor is 27" wide.', "It is deleted forever."],
    ['页面提示“用户名或密码错误"。', "账户会被永久删除。"],
])
def test_implicit_citations_cite_the_sentences_the_evaluator_splits(sentences):
    cited = ic.cite([(s, [str(k)]) for k, s in enumerate(sentences, 1)])
    assert [(s.text, s.citations) for s in split_sentences(cited)] == [(s, (str(k),)) for k, s in enumerate(sentences, 1)]


def test_many_unclosed_quotes_split_where_their_stops_are():
    """Each unclosed mark sends the line back to be read again: a line of thousands of them still ends at
    each stop (and, read again once per mark, would have made this test run for minutes, not milliseconds)."""
    assert len(sentence_spans("“a。" * 20_000)) == 20_000
    assert len(sentence_spans("「“" * 10_000 + "a。\n" + '27" wide. ' * 10_000)) == 10_001
