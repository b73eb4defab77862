"""Lexical judge: an English name the premise lacks is caught at the start of a sentence too (v6), a
typographic apostrophe reads as a straight one (v7), and a Chinese name or a function word written as a
name ("Will Tamm") the premise lacks is caught too (v8)."""

import doctest

import pytest

from lewisrag.eval.judges import LexicalJudge, Verdict, lexical
from lewisrag.eval.judges.base import digest

PREMISE = "Ruus became head of state of Valdoria in 2016 after the election. The capital of Valdoria is Zerth."


def supported(premise: str, hypotheses: list[str]) -> list[bool | None]:
    return [v.supported for v in LexicalJudge().judge([(premise, h) for h in hypotheses])]


def test_version_and_fingerprint_moved_with_the_rule():
    assert LexicalJudge.version == "14"
    # the fingerprint carries the version: runs judged by v5 to v12 are not compared as one judge
    assert LexicalJudge().fingerprint == digest("LexicalJudge", "", {"threshold": 0.75}, "14")
    assert LexicalJudge().fingerprint != digest("LexicalJudge", "", {"threshold": 0.75}, "9")


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
    # v8: the wrong name 鲁斯 (16/18 units in the premise) is caught by its transliteration characters
    assert v[2] == Verdict(False, "16/18 content tokens in premise (0.89 ≥ 0.75); missing: 鲁斯; "
                                  "but the premise lacks the name 鲁斯")
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


ZH_PREMISE = ("鲁斯于2016年成为瓦尔多利亚的国家元首。瓦尔多利亚的首都是泽尔斯堡，官方语言为维兰语。"
              "总统李明华领导着卡莫尼亚。")


@pytest.mark.parametrize("statement, name", [
    ("塔姆于2016年成为瓦尔多利亚的国家元首。", "塔姆"),  # person (transliteration-style)
    ("鲁斯于2016年成为塔维尼亚的国家元首。", "塔维"),  # country: 尼亚 is covered by the premise's 卡莫尼亚
    ("鲁斯于2016年成为奥伦兰的国家元首。", "奥伦兰"),
    ("瓦尔多利亚的首都是罗德港，官方语言为维兰语。", "罗德"),  # city: 港 is the kind, the name is 罗德
    ("瓦尔多利亚的首都是泽尔斯堡，官方语言为米托语。", "米托语"),  # language: two unmarked characters, in place of 维兰语
    ("特朗普于2016年成为瓦尔多利亚的国家元首。", "特朗普"),  # a real transliterated name
    ("默克尔于2016年成为瓦尔多利亚的国家元首。", "默克尔"),
    ("总统王伟领导着卡莫尼亚。", "王伟"),  # a Chinese person's name where the premise has another
])
def test_a_wrong_chinese_name_is_unsupported_whatever_the_share(statement, name):
    v = LexicalJudge().judge([(ZH_PREMISE, statement)])[0]
    assert v.supported is False and v.reason.endswith(f"but the premise lacks the name {name}")


@pytest.mark.parametrize("statement", [
    "瓦尔多利亚的首府是泽尔斯堡，官方语言为维兰语。",  # 首府 for 首都
    "鲁斯于2016年当选瓦尔多利亚的国家元首。",  # 当选 for 成为
    "鲁斯在2016年成为了瓦尔多利亚的国家元首。",
    "2016年，鲁斯成为瓦尔多利亚的国家元首。",
    "鲁斯于2016年基本上成为瓦尔多利亚的国家元首。",  # 基本: every character is a transliteration one
    "鲁斯于2016年成为瓦尔多利亚国家元首，方法是选举。",  # 方法 too, and 方 is a surname
    "卡莫尼亚由总统李明华领导。",
    "李明华总统领导着卡莫尼亚。",
])
def test_ordinary_chinese_paraphrases_are_not_read_as_names(statement):
    v = LexicalJudge().judge([(ZH_PREMISE, statement)])[0]
    assert v.supported is True and "lacks the name" not in v.reason


def test_a_word_of_surname_shape_is_a_name_only_in_place_of_a_name():
    # 高度 opens with the surname 高, 许多 with 许: where the premise has no name in their place they are words
    premise = "泽尔斯堡位于北部高原，海拔一千米，城内有很多古老的建筑。"
    assert supported(premise, ["泽尔斯堡位于北部高原，海拔高度一千米，城内有许多古老的建筑。"]) == [True]
    # where it has one, a surname and a given character is a name: 高明 for 李明华
    assert supported(ZH_PREMISE, ["总统高明领导着卡莫尼亚。"]) == [False]


@pytest.mark.parametrize("statement, name", [
    ("The head of state of Valdoria is Will Ruus.", "Will"),  # a function word inside a sentence
    ("Valdoria has been led by May Ruus since 2016.", "May"),
    ("Valdoria has been led by Can Ruus since 2016.", "Can"),
    ("Will Ruus became head of state of Valdoria in 2016.", "Will"),  # opening: the premise writes Bill Ruus
])
def test_a_function_word_written_as_a_name_is_a_name(statement, name):
    premise = "Bill Ruus became head of state of Valdoria in 2016, and Valdoria has been led by Bill Ruus since."
    v = LexicalJudge().judge([(premise, statement)])[0]
    assert v.supported is False and v.reason.endswith(f"but the premise lacks the name {name}")


def test_function_words_that_are_not_names_pass():
    premise = "Will Ruus became head of state of Valdoria in May 2016; the capital of Valdoria is Zerth."
    assert supported(premise, [
        "Will Ruus became head of state of Valdoria in May 2016.",  # the premise writes Will and May so
        "In May 2016 Will Ruus became head of state of Valdoria.",
        "Will Ruus will remain head of state of Valdoria, as of May 2016.",
        "The capital of Valdoria is Zerth.",  # an opening function word is the word
        "Can Zerth be the capital of Valdoria? It is Zerth.",  # opening, and the premise writes no first name there
    ]) == [True] * 5
    # a title's words are capitalised after a capitalised word: not names
    assert supported("Zerth Of The Valdoria heads of state", ["Zerth Of The Valdoria heads of state"]) == [True]


def test_a_number_with_thousands_separators_is_no_name():
    """v7 read "1,890" as a name (neither lower- nor upper-case nor digits only) and the premise's words
    as "1890": a statement that copied the premise's number failed."""
    premise = "About 1,890 people live in Zerth, the capital of Valdoria."
    assert supported(premise, ["About 1,890 people live in Zerth.", "Zerth has 1,890 residents."]) == [True, False]
    assert LexicalJudge().judge([("约有1,890万人生活在里格洛。", "约有1,890万人生活在里格洛。")])[0].supported is True


@pytest.mark.parametrize("premise, statement", [
    # an article, a preposition or an auxiliary is no first name: today's v8 read "The", "Do", "May" as names
    ("Paul McCartney was a member of the Beatles from 1960 to 1970.",
     "McCartney was a member of The Beatles from 1960 to 1970."),
    ("the product is called do not disturb mode and it mutes calls.",
     "The product, called Do Not Disturb mode, mutes calls."),
    # a month before a number is a month, as v7 read it
    ("The meeting was held on 2020-05-03 in Berlin.", "The meeting was held in Berlin in May 2020."),
    ("Valdoria has been led by Ruus since 2016; the vote was in may.",
     "Valdoria has been led by Ruus since May 2016, after the vote."),
])
def test_a_function_word_that_reads_as_no_first_name_is_no_name(premise, statement):
    v = LexicalJudge().judge([(premise, statement)])[0]
    assert v.supported is True and "lacks the name" not in v.reason


def test_only_the_function_words_that_are_given_names_are_read_as_first_names():
    assert lexical._names("The leader is Will Tamm since May 2016; a member of The Lord Of The Rings.") == [
        "Will", "Tamm", "Lord", "Rings"]
    # before a capitalised word that is no function word, and not "Will," or "May The"
    assert lexical._names("the head is Will, and in May The Beatles played; led by Can Ruus") == ["Beatles", "Can", "Ruus"]
    assert lexical._first_names("The Tamm family leads Valdoria.", "Bill Tamm leads Valdoria.") == []


@pytest.mark.parametrize("ordinary, word", [
    ("乐观", "明朗"), ("平静", "安宁"), ("健康", "安康"), ("文雅", "斯文"), ("著名", "赫赫"),
])
def test_an_everyday_word_in_transliteration_characters_is_no_name(ordinary, word):
    """Today's v8 read any two table characters with one mark as a name: 明朗 (朗), 安宁 (宁), 安康 (康),
    斯文 (斯); 赫赫 doubles a mark. The paraphrase passed v7 on its share and passes again."""
    for sentence in ("该公司的前景十分{}，投资者信心增强。", "该地区的居民生活在过去十年里一直{}，经济稳定增长。"):
        v = LexicalJudge().judge([(sentence.format(ordinary), sentence.format(word))])[0]
        assert v.supported is True and "lacks the name" not in v.reason


@pytest.mark.parametrize("statement, name", [
    ("鲁斯于2016年成为芬多尼亚的国家元首。", "芬多"),  # 芬多 uncovered, 尼亚 covered: a longer table stretch
    ("瓦尔多利亚的首都是泽尔斯堡，官方语言为利丹语。", "利丹"),  # before a kind's character
    ("鲁斯于2016年成为伊朗的国家元首。", "伊朗"),  # two marks: a name by its letters alone
])
def test_a_pair_with_one_mark_is_a_name_where_its_surroundings_say_so(statement, name):
    v = LexicalJudge().judge([(ZH_PREMISE, statement)])[0]
    assert v.supported is False and v.reason.endswith(f"but the premise lacks the name {name}")
