"""Chinese as Chinese is written: a numbered list with no space after "1." (splitter version 13), a number
in Chinese numerals beside a refusal phrase, the katakana middle dot of a transliterated name in ROUGE-L, and
the lines `eval answers --lang zh` prints beside its tables."""

from __future__ import annotations

import json
import re

import pytest

from conftest import run_main, write_jsonl
from lewisrag.eval.refusals import declines_only, is_courtesy, is_refusal
from lewisrag.eval.statements import SPLITTER_VERSION, sentence_spans
from lewisrag.scoring.qa import rouge_l, token_f1

# ---------------------------------------------------------------------------------------------
# A. a Chinese numbered list: "1.登录失败", no space after the marker


@pytest.mark.parametrize("text", [
    "1.登录失败返回 422 [1]\n2.锁定 15 分钟 [2]",
    "一.登录失败返回 422 [1]\n二.锁定 15 分钟 [2]",
    "１.登录失败返回 422 [1]\n２.锁定 15 分钟 [2]",  # full-width digits
    "1)登录失败返回 422 [1]\n2)锁定 15 分钟 [2]",
    "两点：\n  1.登录失败返回 422 [1]\n  2.锁定 15 分钟 [2]",
])
def test_a_chinese_list_without_a_space_after_its_marker_is_a_list(text):
    """Version 12 read "1." as a marker only before a space: "1.登录失败返回 422 [1]" was an uncited "1." and its
    text (MISSING_CITATION, faithfulness 0.5), and "1)" stayed in its item, a number the context had to hold."""
    assert SPLITTER_VERSION == "15"
    assert sentence_spans(text)[-2:] == ["登录失败返回 422 [1]", "锁定 15 分钟 [2]"]


@pytest.mark.parametrize("text, expected", [
    ("版本3.5发布了[1]。\n价格2.5元[2]。", ["版本3.5发布了[1]。", "价格2.5元[2]。"]),  # decimals: no marker
    ("e.g.北京是首都 [1]\ni.e.上海 [2]", ["e.g.北京是首都 [1]", "i.e.上海 [2]"]),
    # "1." opening an answer's first line is a list's first item (version 15), as "1. It is": "42." is kept
    ("1.登录失败返回 422 [1]", ["登录失败返回 422 [1]"]),
    ("价格涨到1.北京的房价 [1]\n2.上海 [2]", ["价格涨到1.", "北京的房价 [1]", "2.", "上海 [2]"]),  # "1." inside a line opens nothing
    ("Steps:\n1.It returns 422 [1].\n2.It locks [2].", ["1.It returns 422 [1].", "2.It locks [2]."]),  # "Steps:" a label
])
def test_a_dot_before_a_cjk_character_is_a_marker_only_opening_the_lines_of_a_list(text, expected):
    assert sentence_spans(text) == expected


def test_the_marker_regexes_read_cjk_as_is_cjk_does():
    from lewisrag.scoring.text import _CJK, is_cjk

    cjk = re.compile(_CJK)
    assert all(bool(cjk.fullmatch(chr(o))) == is_cjk(chr(o)) for o in range(0x30000))


def test_a_chinese_list_without_spaces_scores_as_the_same_list_with_them():
    from lewisrag.data.records import Passage
    from lewisrag.eval.evaluator import EvalConfig, evaluate_answers
    from lewisrag.eval.judges import LexicalJudge
    from lewisrag.eval.records import AnswerRecord

    contexts = (Passage("1", "A", "登录失败返回 422。"), Passage("2", "B", "连续失败五次后锁定 15 分钟。"))

    def scored(response: str) -> dict:
        record = AnswerRecord("q", "登录失败会怎样？", response, contexts, reference="返回 422；锁定 15 分钟。",
                              has_context_ids=True)
        (rec,) = evaluate_answers([record], LexicalJudge(), EvalConfig()).to_json()["records"]
        metrics = {k: v for k, v in rec["metrics"].items() if k not in ("exact_match", "f1", "rougeL", "bleu_1")}
        return {"metrics": metrics, "checks": [c["status"] for c in rec["citation_checks"]]}

    spaced = scored("1. 登录失败返回 422 [1]\n2. 锁定 15 分钟 [2]")
    assert spaced["checks"] == ["PASS", "PASS"] and spaced["metrics"]["faithfulness"] == 1.0
    for marker in (".", ")"):
        assert scored(f"1{marker}登录失败返回 422 [1]\n2{marker}锁定 15 分钟 [2]") == spaced, marker


# ---------------------------------------------------------------------------------------------
# B. a number in Chinese numerals makes a sentence beside a refusal phrase an answer, as digits do

FOUNDER = "凯特洛研究所的创始人是谁？"


@pytest.mark.parametrize("digits, numerals", [
    ("文档未提及创始人，该研究所成立于1999年。", "文档未提及创始人，该研究所成立于一九九九年。"),
    ("知识库里没有相关信息，账号会锁定 30 分钟。", "知识库里没有相关信息，账号会锁定三十分钟。"),
    ("没有关于创始人的信息，该研究所有 12 名研究员。", "没有关于创始人的信息，该研究所有十二名研究员。"),
])
def test_a_number_in_chinese_numerals_is_a_claim_as_in_digits(digits, numerals):
    """`_own_number` read only [0-9]: "...成立于一九九九年" was a refusal (faithfulness null, no citation
    checks) while "...成立于1999年" was not."""
    for text in (digits, numerals):
        assert not is_refusal(text, FOUNDER) and not is_refusal(text) and not declines_only(text), text


def test_a_number_the_question_asks_about_refuses_in_either_script():
    assert is_refusal("没有找到一九九九年的收入。", "1999年的收入是多少？")
    assert is_refusal("没有找到1999年的收入。", "一九九九年的收入是多少？")
    assert declines_only("没有找到一九九九年的收入。", "一九九九年的收入是多少？")
    assert is_refusal("文档里没有一九九九年的记录。", "") is False  # a year of its own


def test_a_courtesy_sentence_holds_no_number_in_chinese_numerals_either():
    """`is_courtesy` read only [0-9]: "请提供一九九九年的记录" was courtesy beside a refusal, "请提供1999年的记录" a claim."""
    assert is_courtesy("请联系管理员。") and is_refusal("知识库里没有相关信息。请联系管理员。")
    for numbers in ("请提供1999年的记录。", "请提供一九九九年的记录。", "建议咨询三号窗口。"):
        assert not is_courtesy(numbers) and not is_refusal("知识库里没有相关信息。" + numbers), numbers


@pytest.mark.parametrize("zh, en", [
    ("根据提供的上下文，没有关于凯特洛研究所创始人的信息。",
     "According to the provided context, there is no information about the founder of the Katelo Institute."),
    ("没有关于创始人的信息。", "There is no information about the founder."),
])
def test_there_is_no_information_about_x_refuses_in_both_languages(zh, en):
    assert is_refusal(en) and is_refusal(zh) and declines_only(zh)


@pytest.mark.parametrize("zh, en", [
    ("系统没有关于用户的记录。", "The system has no information about the user."),
    ("没有关于用户的记录时，接口返回 404。", "If there is no information about the user, the API returns 404."),
])
def test_no_information_about_x_owned_by_a_subject_or_a_condition_refuses_in_neither(zh, en):
    assert not is_refusal(en) and not is_refusal(zh)


# ---------------------------------------------------------------------------------------------
# C. ROUGE-L tokens: a CJK character that is no letter separates, as punctuation


def test_the_katakana_middle_dot_of_a_name_is_no_rouge_token():
    """`rouge_tokens` made "・" (U+30FB, in is_cjk's kana range) a token: 0.8889 against "安娜·凯尔", F1 1.0."""
    assert rouge_l("安娜・凯尔", ["安娜·凯尔"]) == 1.0 == token_f1("安娜・凯尔", ["安娜·凯尔"])
    assert rouge_l("アンナ・ケル", ["アンナケル"]) == 1.0  # kana letters stay tokens


# ---------------------------------------------------------------------------------------------
# D. eval answers --lang zh prints its notes, the judge's usage and the files it wrote in Chinese

ANSWER = {"id": "q1", "user_input": "登录失败返回什么？", "response": "登录失败返回 422 [1]。",
          "retrieved_contexts": ["登录失败返回 422。"], "gold_passage_ids": ["1"]}
USAGE = {"calls": 3, "cache_hits": 1, "retries": 0, "failures": 0, "prompt_tokens": 120, "completion_tokens": 30}


def _run(tmp_path, monkeypatch, capsys, lang: str, *extra) -> tuple[str, str]:
    from lewisrag.eval import judges

    real = judges.from_spec

    def with_usage(*args, **kwargs):  # an endpoint's counters, as an llm judge keeps them
        judge = real(*args, **kwargs)
        judge.usage, judge.cost = dict(USAGE), 0.0123
        return judge

    monkeypatch.setattr(judges, "from_spec", with_usage)
    src = write_jsonl(tmp_path / "answers.jsonl", [ANSWER])
    code, out, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", src, "--out", tmp_path / lang,
                              "--lang", lang, *extra)
    assert code == 0, err
    return out.replace("\n", ""), err.replace("\n", "")  # rich wraps its lines at the console's width


def test_eval_answers_prints_its_other_lines_in_chinese(tmp_path, monkeypatch, capsys):
    out, err = _run(tmp_path, monkeypatch, capsys, "zh")
    run = tmp_path / "zh"
    assert "裁判调用 3 次，缓存命中 1 次，重试 0 次，失败 0 次，token 120+30，费用 0.0123" in out
    assert f"已写入 {run}/results.json、report.md、report.html、config.json" in err
    assert f"注意：{tmp_path / 'answers.jsonl'} 中带 gold_passage_ids 的 1 条记录里，有 1 条没有测 recall@k" in err
    assert "记为 NaN" in err
    for english in ("judge calls", "cache hits", "wrote ", "note:", "not measured", "counted as NaN"):
        assert english not in out + err, english


def test_eval_answers_prints_the_same_english_lines_as_before(tmp_path, monkeypatch, capsys):
    out, err = _run(tmp_path, monkeypatch, capsys, "en", "--export", "ragas")
    run = tmp_path / "en"
    assert "judge calls 3, cache hits 1, retries 0, failures 0, tokens 120+30, cost 0.0123" in out
    assert f"wrote {run}/results.json, report.md, report.html, config.json, distributions.png, ragas.jsonl" in err
    assert (f"note: recall@k not measured on 1 of the 1 records of {tmp_path / 'answers.jsonl'} with gold_passage_ids: "
            "their retrieved_contexts are plain strings, without ids to match (give each context an id, or "
            "retrieved_context_ids); counted as NaN") in err
    assert not re.search(r"[\u4e00-\u9fff]", out + err)


def test_the_undecided_judge_note_is_in_chinese(tmp_path, monkeypatch, capsys):
    passage = "Acme was founded in 1985. It makes anvils."
    src = write_jsonl(tmp_path / "answers.jsonl", [
        {"id": "q1", "user_input": "When?", "response": "Acme was founded in 1990 [1]. It makes anvils [1].",
         "retrieved_contexts": [{"id": "1", "text": passage}]}])
    labels = write_jsonl(tmp_path / "some.jsonl", [{"id": "a", "premise": passage, "hypothesis": "Acme was founded in 1990.",
                                                    "supported": False}])
    code, _, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", src, "--judge", f"labels:{labels}",
                            "--out", tmp_path / "run", "--json", "--lang", "zh")
    assert code == 0, err
    notes = [line for line in err.splitlines() if line.startswith("注意：")]
    assert notes[0] == (f"注意：这些回答共有 2 条陈述，--judge labels:{labels} 判定了其中 1 条；没有判定的 1 条不计入忠实度"
                        "（第一条：没有标注；每条的原因见 results.json）"), err
    # the citation and claim checks the labels leave undecided: their notes in Chinese too
    assert [n.split("，")[0] for n in notes[1:]] == ["注意：这些回答中有 2 个带引用的句子要对照所引段落检查", "注意：这些回答共有 2 项陈述级检查"]
    assert all("没有标注" in n for n in notes)  # the reason too, in Chinese
    assert json.loads((tmp_path / "run" / "results.json").read_text())["config"]["lang"] == "zh"


@pytest.mark.parametrize("answer", [
    "The documents do not mention the founder. Please contact Ana Kel at the Zorb Institute.",
    "文档未提及创始人。请联系安娜·凯尔。",
])
def test_a_refusal_beside_a_named_contact_is_an_answer_in_either_language(answer):
    """A courtesy sentence holds no name, read by its capitals: the English one was lowercased before the
    check, so an invented contact passed as a refusal (faithfulness null) while its Chinese twin did not."""
    assert is_refusal(answer) is False
