"""Splitter version 9 and lexical judge version 9: Chinese list numbers (①, ⑴, ⒈, 一、, （一）), initials
before a name ("J.K."), the quotes the citation checker holds to the letter (「」 and 『』 only), and a
Chinese name set off by punctuation ("女王是：范凌", "总统“戴菲”", "安娜·凯尔")."""

import pytest

from lewisrag.eval.citations import (
    HARD_GATE_STATUSES,
    MISSING_CITATION,
    PASS,
    QUOTE_NOT_FOUND,
    TOKEN_NOT_FOUND,
    UNVERIFIABLE,
    check_answer,
    check_sentence,
)
from lewisrag.eval.judges import LexicalJudge
from lewisrag.eval.statements import sentence_spans, to_statement


def supported(pairs: list[tuple[str, str]]) -> list[bool | None]:
    return [v.supported for v in LexicalJudge().judge(pairs)]


# ---------------------------------------------------------------------------------------------
# the lexical judge: punctuation around a Chinese name does not decide whether it is checked

QUEEN = "卡温拉斯的女王是贺璐钧。"
PRESIDENT = "贝特奥兰是一个共和国，由总统周杰远领导。"
FOUNDER = "玛丽·凯尔于2010年创立了这家公司。"


@pytest.mark.parametrize("premise, wrong, bare", [
    (QUEEN, "卡温拉斯的女王是：范凌。", "卡温拉斯的女王是范凌。"),
    (PRESIDENT, "贝特奥兰是一个共和国，由总统“戴菲”领导。", "贝特奥兰是一个共和国，由总统戴菲领导。"),
    (PRESIDENT, "贝特奥兰是一个共和国，由总统「戴菲」领导。", "贝特奥兰是一个共和国，由总统戴菲领导。"),
    (FOUNDER, "安娜·凯尔于2010年创立了这家公司。", "安娜凯尔于2010年创立了这家公司。"),
    (FOUNDER, "安娜・凯尔于2010年创立了这家公司。", "安娜凯尔于2010年创立了这家公司。"),
], ids=["colon", "curly-quotes", "corner-quotes", "middle-dot", "katakana-dot"])
def test_a_wrong_chinese_name_set_off_by_punctuation_is_unsupported(premise, wrong, bare):
    """A run of CJK characters ended at every punctuation mark, and a name that was a run of its own was
    never compared with the premise's name: the share passed it, where the same name without the
    punctuation was caught (and the English twin, "... is: Fanling.", was)."""
    wrong_verdict, bare_verdict = LexicalJudge().judge([(premise, wrong), (premise, bare)])
    assert wrong_verdict.supported is False and bare_verdict.supported is False
    assert "but the premise lacks the name" in wrong_verdict.reason


def test_the_english_twin_was_caught_already():
    assert supported([("The current reigning queen of Kavinras is Helujun.",
                       "The current reigning queen of Kavinras is: Fanling.")]) == [False]


def test_the_premise_may_set_its_name_off_with_punctuation_too():
    assert supported([("贝特奥兰是一个共和国，由总统“周杰远”领导。", "贝特奥兰是一个共和国，由总统戴菲领导。"),
                      ("卡温拉斯的女王是：贺璐钧。", "卡温拉斯的女王是范凌。")]) == [False, False]


def test_the_right_name_passes_whatever_its_punctuation():
    assert supported([(QUEEN, "卡温拉斯的女王是：贺璐钧。"),
                      (PRESIDENT, "贝特奥兰是一个共和国，由总统“周杰远”领导。"),
                      ("贝特奥兰是一个共和国，由总统“周杰远”领导。", "贝特奥兰是一个共和国，由总统周杰远领导。"),
                      (FOUNDER, "玛丽·凯尔于2010年创立了这家公司。"),
                      ("玛丽凯尔于2010年创立了这家公司。", "玛丽·凯尔于2010年创立了这家公司。")]) == [True] * 5


def test_a_name_after_a_comma_is_still_compared_with_the_name_before_a_stop():
    # the run's end still matches the premise's name before any punctuation, across the comma or not
    assert supported([(QUEEN + "她出生于北港。", "卡温拉斯的女王是范凌，她出生于北港。")]) == [False]


def test_a_word_set_off_by_punctuation_where_the_premise_has_no_name_is_no_name():
    # 许多 opens with a surname, but the premise holds no name in its place: a paraphrase, not a name
    assert supported([("此外，大量居民住在北港。", "此外，许多居民住在北港。")]) == [True]


# ---------------------------------------------------------------------------------------------
# splitter: list numbers written as one character or as Chinese numerals

DOCS = {"1": "卡温拉斯的首都是丹弗克。卡温拉斯的货币是贝格币。"}


@pytest.mark.parametrize("answer", [
    "① 首都是丹弗克【1】\n② 货币是贝格币【1】",
    "⑴首都是丹弗克【1】\n⑵货币是贝格币【1】",
    "⒈首都是丹弗克【1】\n⒉货币是贝格币【1】",
    "一、首都是丹弗克【1】\n二、货币是贝格币【1】",
    "（一）首都是丹弗克【1】\n（二）货币是贝格币【1】",
    "两点：\n  ①首都是丹弗克【1】。\n  ②货币是贝格币【1】。",
], ids=["circled", "parenthesized", "full-stop", "numeral-comma", "numeral-parens", "indented"])
def test_a_list_numbered_with_circled_or_chinese_numbers_drops_its_markers(answer):
    """NFKC makes ① the number 1, which the citation checker (TOKEN_NOT_FOUND "1") and the lexical
    judge ("premise lacks the number 1") read as a claim; 二、 stayed in its item."""
    spans = [s for s in sentence_spans(answer) if s != "两点："]
    assert [s.rstrip("。") for s in spans] == ["首都是丹弗克【1】", "货币是贝格币【1】"]
    assert [c.status for _, c in check_answer(answer, DOCS, {"1"})] in (
        [UNVERIFIABLE, UNVERIFIABLE], [MISSING_CITATION, UNVERIFIABLE, UNVERIFIABLE])
    statements = [s for s, _ in check_answer(answer, DOCS, {"1"}) if s.citations]
    assert supported([(DOCS["1"], s.text) for s in statements]) == [True, True]


def test_one_line_opening_a_circled_number_is_no_list():
    # as with "42. It is ...": a lone number opening the answer is kept
    assert sentence_spans("① 首都是丹弗克【1】") == ["① 首都是丹弗克【1】"]


def test_a_chinese_list_scores_as_the_same_answer_in_prose():
    from lewisrag.data.records import Passage
    from lewisrag.eval.evaluator import EvalConfig, evaluate_answers
    from lewisrag.eval.records import AnswerRecord

    contexts = (Passage("1", "卡温拉斯", DOCS["1"]),)

    def scored(response: str) -> dict:
        record = AnswerRecord("q", "卡温拉斯的首都和货币？", response, contexts, reference="首都是丹弗克；货币是贝格币。",
                              has_context_ids=True)
        (rec,) = evaluate_answers([record], LexicalJudge(), EvalConfig()).to_json()["records"]
        metrics = {k: v for k, v in rec["metrics"].items() if k not in ("exact_match", "f1", "rougeL", "bleu_1")}
        return {"metrics": metrics, "checks": [c["status"] for c in rec["citation_checks"]]}

    prose = scored("首都是丹弗克【1】。货币是贝格币【1】。")
    assert scored("① 首都是丹弗克【1】。\n② 货币是贝格币【1】。") == prose
    assert scored("一、首都是丹弗克【1】。\n二、货币是贝格币【1】。") == prose


# ---------------------------------------------------------------------------------------------
# splitter: initials before a name end no sentence


@pytest.mark.parametrize("text", ["由J.K.罗琳创作[1]。", "written by J.K. Rowling [1].", "The U.S.A. team won [1].",
                                  "《哈利·波特》由J. K.罗琳创作[1]。"], ids=["zh", "en", "usa", "spaced"])
def test_initials_before_a_name_end_no_sentence(text):
    """"J.K." ended a sentence: "由J.K." became an uncited sentence, a MISSING_CITATION the gate fails on."""
    assert sentence_spans(text) == [text]
    docs = {"1": "《哈利·波特》由J.K.罗琳创作。It was written by J.K. Rowling. The U.S.A. team won."}
    assert not {c.status for _, c in check_answer(text, docs, {"1"})} & set(HARD_GATE_STATUSES)


def test_the_abbreviations_around_initials_keep_their_rules():
    assert sentence_spans("Use a list, e.g. a red one. Done.") == ["Use a list, e.g. a red one.", "Done."]
    assert sentence_spans("It is in the U.S. It is big [1].") == ["It is in the U.S. It is big [1]."]
    assert sentence_spans("JSON, XML, etc. It caches them [1].") == ["JSON, XML, etc.", "It caches them [1]."]
    assert sentence_spans("JSON, XML, etc. 它会缓存 [1]。") == ["JSON, XML, etc.", "它会缓存 [1]。"]
    assert sentence_spans("It was built in 1999. Then it fell [1].") == ["It was built in 1999.", "Then it fell [1]."]


# ---------------------------------------------------------------------------------------------
# the citation checker: only 「」 and 『』 quote a passage to the letter

PROMPT = {"2": "输错密码时系统会提示密码错误，并在 5 次后锁定账户。The form shows Invalid credentials."}


def test_curly_and_straight_quotes_are_ordinary_text_for_the_checker():
    """“” and "..." were verbatim claims: a paraphrased message was QUOTE_NOT_FOUND, a hard-gate status,
    where the specification's checker (QUOTE = 「([^」]+)」) has nothing to find."""
    assert check_sentence("系统会提示“密码不对”[2]。", PROMPT, {"2"}).status == UNVERIFIABLE
    assert check_sentence('The form says "wrong password" [2].', PROMPT, {"2"}).status == TOKEN_NOT_FOUND
    assert check_sentence('The form shows "Invalid credentials" [2].', PROMPT, {"2"}).status == PASS
    # their numbers are still checked: the passage says 5, not 3
    assert check_sentence("系统会提示“3 次后锁定”[2]。", PROMPT, {"2"}).status == TOKEN_NOT_FOUND


def test_corner_brackets_and_their_nested_form_are_verbatim_quotes():
    assert check_sentence("系统会提示「密码不对」[2]。", PROMPT, {"2"}).status == QUOTE_NOT_FOUND
    assert check_sentence("系统会提示「密码错误」[2]。", PROMPT, {"2"}).status == PASS
    assert check_sentence("他说「系统会提示『密码不对』」[2]。", PROMPT, {"2"}).status == QUOTE_NOT_FOUND
    assert check_sentence("文中写道「系统会提示『密码错误』」[2]。", PROMPT, {"2"}).status == QUOTE_NOT_FOUND  # the outer one


def test_the_splitter_still_reads_every_quote_style():
    # no split inside “” or "...", and Statement.quotes lists them: only the checker's scope changed
    assert sentence_spans("系统会提示“密码不对。请重试”[2]。") == ["系统会提示“密码不对。请重试”[2]。"]
    assert to_statement('系统会提示“密码不对”，key "email" [2]。').quotes == ("密码不对", "email")
