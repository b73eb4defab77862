"""Numbers read one way by the citation checker and the lexical judge: Chinese numerals and magnitudes,
signs, decimals by value; and the judge setting aside a leading clause that only names the sources."""

import pytest

from lewisrag.eval.citations import PASS, TOKEN_NOT_FOUND, UNVERIFIABLE, Check, check_sentence, checkable_tokens
from lewisrag.eval.evaluator import EvalConfig, evaluate_answers
from lewisrag.eval.judges import LexicalJudge
from lewisrag.eval.records import parse_answer
from lewisrag.eval.statements import strip_citations

# (sentence, the one cited document, the checker's status and detail, whether the judge supports the sentence)
NUMBER_CASES = [
    ("账号锁定 30 分钟[1]。", "连续失败五次后账号锁定三十分钟。", PASS, "", True),
    ("该研究所成立于1999年[1]。", "该研究所成立于一九九九年。", PASS, "", True),
    ("人口约 3000 万[1]。", "该市人口约三千万。", PASS, "", True),
    ("账号锁定三十分钟[1]。", "连续失败五次后账号锁定 15 分钟。", TOKEN_NOT_FOUND, "not in the cited documents: 30", False),
    ("人口约三千万[1]。", "该市人口约 300 万。", TOKEN_NOT_FOUND, "not in the cited documents: 30000000", False),
    ("人口约三千万[1]。", "该市人口约 3000 万。", PASS, "", True),
    # a magnitude makes one quantity, for both: the judge reads 3000万 as 30,000,000, not as 3000
    ("人口约 3000[1]。", "该市人口约 3000 万。", TOKEN_NOT_FOUND, "not in the cited documents: 3000", False),
    ("Revenue was 3 million dollars [1].", "Revenue was 3,000,000 dollars.", PASS, "", True),
    # signs
    ("The outdoor temperature in Oslo fell to -12 degrees on Monday [1].",
     "The outdoor temperature in Oslo fell to 12 degrees on Monday.", TOKEN_NOT_FOUND, "not in the cited documents: -12", False),
    ("The outdoor temperature in Oslo fell to 12 degrees on Monday [1].",
     "The outdoor temperature in Oslo fell to \u221212 degrees on Monday.", TOKEN_NOT_FOUND, "not in the cited documents: 12", False),
    ("The loss was -3.2 million dollars [1].", "The loss was 3.2 million dollars.",
     TOKEN_NOT_FOUND, "not in the cited documents: -3200000", False),
    ("The balance is 500 dollars [1].", "The balance is -500 dollars.", TOKEN_NOT_FOUND, "not in the cited documents: 500", False),
    ("It is described on pages 10-12 [1].", "It is described on pages 10 to 12.", PASS, "", True),
    # decimals by value
    ("The fee is 5 dollars [1].", "The fee is 5.00 dollars.", PASS, "", True),
    ("价格是3.5元[1]。", "价格是3.50元。", PASS, "", True),
    ("It grew by 2.0 percent [1].", "It grew by 2 percent.", PASS, "", True),
    ("The rate is 5.3 percent [1].", "The rate is 3.5 percent.", TOKEN_NOT_FOUND, "not in the cited documents: 5.3", False),
    ("The rate is 1.5 percent [1].", "The rate is 1.05 percent.", TOKEN_NOT_FOUND, "not in the cited documents: 1.5", False),
]


@pytest.mark.parametrize(("sentence", "doc", "status", "detail", "supported"), NUMBER_CASES)
def test_checker_and_judge_read_numbers_alike(sentence, doc, status, detail, supported):
    assert check_sentence(sentence, {"1": doc}, {"1"}) == Check(status, detail)
    verdict = LexicalJudge().judge([(doc, strip_citations(sentence))])[0]
    assert verdict.supported is supported, verdict.reason


def test_checker_reads_a_chinese_numeral_as_a_number():
    """Before, a sentence written only in Chinese numerals had nothing to check (UNVERIFIABLE)."""
    assert check_sentence("锁定三十分钟[1]。", {"1": "锁定三十分钟。"}, {"1"}).status == PASS
    assert check_sentence("锁定若干分钟[1]。", {"1": "锁定三十分钟。"}, {"1"}).status == UNVERIFIABLE
    # the judge's rules for what counts: 第一, 一些, 十分 are no quantities in a sentence
    assert checkable_tokens("第一，一些，十分重要") == frozenset()


def test_a_minus_sign_needs_no_letter_or_digit_before_it():
    assert checkable_tokens("(-5), x = \u22123.20, 10-12, COVID-19, REQ-AUTH-03") == {
        "-5", "x", "-3.2", "10", "12", "covid", "19", "req", "auth", "3"}
    assert checkable_tokens("2020年-2022年") == {"2020", "2022"}  # after a unit closing a quantity: a range
    assert checkable_tokens("3天-5天，第3章-第5章") == {"3", "5"}


def test_a_minus_sign_after_a_chinese_character_is_a_sign():
    """"降至-12度" read 12 (a Chinese character counted as a letter before the "-"), so a statement's wrong 12
    passed both the checker and the judge against it."""
    assert checkable_tokens("夜间气温降至-12度，为−3.5℃以下") >= {"-12", "-3.5"}
    assert check_sentence("气温降至12度[1]。", {"1": "夜间气温降至-12度。"}, {"1"}).status == TOKEN_NOT_FOUND
    assert check_sentence("气温降至-12度[1]。", {"1": "夜间气温降至-12度。"}, {"1"}).status == PASS
    wrong, right = LexicalJudge().judge([("夜间气温降至-12度。", "气温降至12度。"), ("夜间气温降至-12度。", "气温降至-12度。")])
    assert wrong.supported is False and "12" in wrong.reason and right.supported is True
    assert checkable_tokens("3度至-12度") == {"3", "-12"}  # 至 opens the range's other end: its "-" is a sign
    # a unit closes a range's first end only after a number: 温度, 得分 and 今年 end in 度, 分 and 年
    assert checkable_tokens("最低温度-5℃，得分-3分，今年-2%") >= {"-5", "-3", "-2"}
    assert check_sentence("最低温度5℃[1]。", {"1": "夜间最低温度-5℃。"}, {"1"}).status == TOKEN_NOT_FOUND


@pytest.mark.parametrize(("sentence", "doc"), [
    ("Rates rose 3%-5% [1].", "Rates rose 3-5%."), ("月薪为1万-2万元 [1]。", "月薪为1万到2万元。"),
    ("上午9点-11点营业 [1]。", "上午9点到11点营业。"), ("每组3人-5人 [1]。", "每组3-5人。"),
    ("年利率为3.5%-4.5% [1]。", "年利率为3.5%至4.5%。"), ("等待10分钟-15分钟 [1]。", "等待10到15分钟。"),
    ("距离3公里-5公里 [1]。", "距离3到5公里。"), ("每箱3公斤-5公斤 [1]。", "每箱3到5公斤。"),
    ("耗时2个小时-3个小时 [1]。", "耗时2到3个小时。"), ("售价3块-5块 [1]。", "售价3到5块。"),
])
def test_a_dash_after_a_numbers_unit_joins_a_range(sentence, doc):
    """After a number's unit, percent or magnitude the "-" joins a range: "3%-5%" read 3 and -5, and a correct
    cited sentence was TOKEN_NOT_FOUND and unsupported."""
    assert check_sentence(sentence, {"1": doc}, {"1"}) == Check(PASS, "")
    assert LexicalJudge().judge([(doc, strip_citations(sentence))])[0].supported is True


def test_thousands_separators_read_as_before():
    assert checkable_tokens("共 1,000 人，第 1,2,3 条，１，０００次") == {"1000", "1", "2", "3"}
    verdict = LexicalJudge().judge([("The population is 1,000,000.", "The population is 1000000.")])[0]
    assert verdict.supported, verdict.reason


ZH_PREMISE, ZH_CLAIM = "登录失败时接口返回 422，errors 为 email or password is invalid。", "登录失败时接口返回 422。"
EN_PREMISE, EN_CLAIM = "Login failure returns HTTP 422 with errors email or password is invalid.", "login failure returns 422."


@pytest.mark.parametrize(("premise", "statement"), [
    *((ZH_PREMISE, opener + ZH_CLAIM) for opener in ("根据提供的上下文，", "根据文档[1]，", "据资料显示，", "根据上述段落中的内容：")),
    *((EN_PREMISE, opener + EN_CLAIM) for opener in ("According to the documents, ", "According to [1], ",
                                                      "According to [1] and [2], ", "Based on the provided context, ",
                                                      "Based on the passages provided [2], ")),
])
def test_judge_sets_aside_a_clause_naming_the_sources(premise, statement):
    verdict = LexicalJudge().judge([(premise, strip_citations(statement))])[0]
    assert verdict.supported, verdict.reason



@pytest.mark.parametrize("sentence", ["According to [1], login failure returns 422.",
                                      "Based on the provided documents, login failure returns 422 [1].",
                                      "According to the passages [1], login failure returns 422."])
def test_checker_sets_aside_a_clause_naming_the_sources_as_the_judge_does(sentence):
    """"According to [1], ..." was TOKEN_NOT_FOUND: according; "Based on the documents" named "based, documents"."""
    assert check_sentence(sentence, {"1": EN_PREMISE}, {"1"}) == Check(PASS, "")
    named = check_sentence("According to the CEO, login failure returns 422 [1].", {"1": EN_PREMISE}, {"1"})
    assert named.status == TOKEN_NOT_FOUND and "ceo" in named.detail  # someone named: still to be found

def test_judge_still_needs_what_an_attribution_names():
    judge = LexicalJudge()
    ceo, zh_rule, bare = judge.judge([
        ("Revenue rose.", "According to the CEO, revenue rose."),
        ("退款需七天。", "根据合同规定，退款需七天。"),
        ("登录失败时接口返回 422。", "根据文档："),  # nothing follows: the sentence is judged as written
    ])
    assert ceo.supported is False and "ceo" in ceo.reason
    assert zh_rule.supported is False and "合同规定" in zh_rule.reason
    assert bare.supported is False
    assert LexicalJudge.version == "14"


def test_an_attributed_answer_keeps_its_faithfulness():
    """The reviewer's case: the opener alone cost the sentence its support, faithfulness 0.0."""
    contexts = ["登录失败时接口返回 422，errors 为 email or password is invalid。", "注册时用户名被占用返回 422。"]
    record = parse_answer({"id": "a", "question": "登录密码错误返回什么？", "contexts": contexts, "ground_truth": "返回 422。",
                           "answer": "根据提供的上下文，登录失败时接口返回 422 [1]。"}, "answers.jsonl", 1, {})
    result = evaluate_answers([record], LexicalJudge(), EvalConfig()).to_json()
    assert result["records"][0]["metrics"]["faithfulness"] == 1.0
