"""Lexical judge: an English name the premise lacks is caught at the start of a sentence too (v6), and a
typographic apostrophe reads as a straight one (v7)."""

import doctest

import pytest

from lewisrag.eval.judges import LexicalJudge, Verdict, lexical
from lewisrag.eval.judges.base import digest

PREMISE = "Ruus became head of state of Valdoria in 2016 after the election. The capital of Valdoria is Zerth."


def supported(premise: str, hypotheses: list[str]) -> list[bool | None]:
    return [v.supported for v in LexicalJudge().judge([(premise, h) for h in hypotheses])]


def test_version_and_fingerprint_moved_with_the_rule():
    assert LexicalJudge.version == "7"
    # the fingerprint carries the version: runs judged by v5, v6 and v7 are not compared as one judge
    assert LexicalJudge().fingerprint == digest("LexicalJudge", "", {"threshold": 0.75}, "7")
    assert LexicalJudge().fingerprint != digest("LexicalJudge", "", {"threshold": 0.75}, "5")


def test_a_wrong_name_opening_a_sentence_is_unsupported_whatever_the_share():
    wrong = LexicalJudge().judge([(PREMISE, "Tamm is the head of state of Valdoria."),
                                  (PREMISE, "Tamm became head of state of Valdoria in 2016 after the election."),
                                  (PREMISE, "The capital is Zerth. Tamm became head of state of Valdoria in 2016.")])
    # 3/4, 6/7 and 6/7 units are in the premise: the share alone passed each
    assert wrong[0] == Verdict(False, "3/4 content tokens in premise (0.75 ≥ 0.75); missing: tamm; "
                                      "but the premise lacks the name Tamm")
    assert [v.supported for v in wrong] == [False, False, False]
    assert all(v.reason.endswith("but the premise lacks the name Tamm") for v in wrong)
    # after a colon, a quote or a bullet the first word still opens a sentence
    assert supported(PREMISE, ["Answer: Tamm became head of state of Valdoria in 2016.",
                               "\u201cTamm\u201d became head of state of Valdoria in 2016.",
                               "- Tamm became head of state of Valdoria in 2016."]) == [False, False, False]


def test_the_name_the_premise_holds_passes_at_the_start_of_a_sentence():
    assert supported(PREMISE, ["Ruus is the head of state of Valdoria.",
                               "Ruus became head of state of Valdoria in 2016 after the election.",
                               "Zerth is the capital of Valdoria.",
                               "RUUS became head of state of Valdoria.",  # case folded: the premise holds it
                               # a possessive's name is its host
                               "Ruus's election made Ruus head of state of Valdoria in 2016."]) == [True] * 5


@pytest.mark.parametrize("statement", [
    "According to the election results, Ruus became head of state of Valdoria in 2016.",
    "However, Ruus became head of state of Valdoria in 2016 after the election.",
    "Yes, Ruus became head of state of Valdoria in 2016 after the election.",
    "In 2016 Ruus became head of state of Valdoria after the election.",
    "The head of state of Valdoria became Ruus after the election in 2016.",
    "After the election, Ruus became head of state of Valdoria in 2016.",
    "Overall, Ruus became head of state of Valdoria in 2016 after the election.",
    "Both the election and the capital Zerth are in Valdoria; Ruus became head of state in 2016.",
    "It's Ruus who became head of state of Valdoria in 2016 after the election.",
    "Notably, Ruus became head of state of Valdoria in 2016 after the election.",  # an -ly adverb set off by a comma
])
def test_ordinary_openers_with_supported_content_still_pass(statement):
    v = LexicalJudge().judge([(PREMISE, statement)])[0]
    assert v.supported is True and "lacks the name" not in v.reason


def test_a_capitalised_first_word_written_in_small_letters_elsewhere_is_an_ordinary_word():
    premise = "the login endpoint returns 422 for a wrong password and shows the message on the page"
    # "Errors" is the statement's own "errors", capitalised by the sentence: the premise lacks it, yet no name
    ordinary = ("Errors of the login endpoint: it returns 422 for a wrong password "
                "and shows the errors message on the page.")
    wrong = "Conduit's login endpoint returns 422 for a wrong password and shows the message on the page."
    v = LexicalJudge().judge([(premise, ordinary), (premise, wrong)])
    assert v[0] == Verdict(True, "9/11 content tokens in premise (0.82 ≥ 0.75); missing: errors")
    # without that evidence a capitalised opener the premise lacks reads as a name
    assert v[1].supported is False and v[1].reason.endswith("but the premise lacks the name Conduit's")


def test_chinese_statements_are_judged_as_before():
    premise = "塔姆于2016年在选举后成为瓦尔多利亚的国家元首。"
    v = LexicalJudge().judge([(premise, "塔姆于2016年成为瓦尔多利亚的国家元首。"),
                              ("国家元首是塔姆。", "国家元首是首塔"),
                              (premise, "鲁斯于2016年在选举后成为瓦尔多利亚的国家元首。")])
    assert v[0] == Verdict(True, "15/15 content tokens in premise (1.00 ≥ 0.75)")
    assert v[1] == Verdict(False, "4/6 content tokens in premise (0.67 < 0.75); missing: 首塔")
    # Chinese has no capitals: a wrong Chinese name is still judged on its share alone
    assert v[2].supported is True and "lacks the name" not in v[2].reason
    # a Latin name inside Chinese text is read as it was in v5: a capitalised word after CJK text is a name
    mixed = "瓦尔多利亚的国家元首 Ruus 和 head of state"
    assert supported(mixed, [mixed.replace("Ruus", "Tamm"), mixed]) == [False, True]


def test_the_judges_docstring_examples_hold():
    assert doctest.testmod(lexical).failed == 0


@pytest.mark.parametrize("opener", ["Don\u2019t", "Isn\u2019t it true that you should not", "It\u2019s true:", "Don\u02bct"])
def test_a_typographic_apostrophe_reads_as_a_straight_one(opener):
    """v7: NFKC keeps U+2019, so "Don’t" was the words "Don" and "t", and "Don" a name the premise lacks:
    an LLM's answer with curly quotes failed where the same with "'" passed."""
    premise = "The login page returns HTTP 422 when the password field is empty, so users cannot sign in."
    hypothesis = f"{opener} leave the password field empty: the login page returns HTTP 422 and users cannot sign in."
    curly, straight = LexicalJudge().judge([(premise, hypothesis), (premise, hypothesis.replace("\u2019", "'").replace("\u02bc", "'"))])
    assert curly == straight and curly.supported is True
