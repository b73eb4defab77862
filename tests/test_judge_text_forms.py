"""Text the judges must read as it is written: a "</s>" inside a premise (HTML strikethrough, a leaked
end-of-sequence marker) is text to the NLI tokenizer, and a model that still fails on one pair costs
that pair only; the lexical judge's words are letters of any alphabet ("Jürgen", "Ólafsson") and
its numbers include Chinese numerals that count something (三个月, 十五分钟, 二〇一六年), not the 一 of
一些 or the 十 of 十分; an LLM's reply that drafts then corrects its verdicts is undecided, and a label
in Chinese, full width or bold, keys in another case and a null reason are read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_layouts import BART_SPECIALS
from lewisrag.eval import numbers
from lewisrag.eval.judges import LexicalJudge, NLIJudge, Verdict, parse_label
from lewisrag.eval.judges import lexical, llm
from lewisrag.eval.judges.llm import LLMJudge, parse_verdicts
from test_judge_replies import L3, _tiny_nli

# ---------------------------------------------------------------------------------------------
# NLI: special tokens' spellings are text; a model's error on one pair is that pair's undecided verdict


def _tiny_bart_nli(path: Path) -> Path:
    """A random BART classifier with its own byte-level BPE tokenizer: BART's head counts the <eos>
    tokens of every row, and refuses a batch whose rows differ."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import BartConfig, BartForSequenceClassification, BartTokenizerFast

    path.mkdir(parents=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(["login returns 422 the page shows a toast", "old price now"] * 20, vocab_size=300,
                            min_frequency=1, special_tokens=BART_SPECIALS, show_progress=False)
    bpe.save_model(str(path))
    tok = BartTokenizerFast.from_pretrained(path)
    tok.save_pretrained(path)
    torch.manual_seed(0)
    labels = {0: "contradiction", 1: "neutral", 2: "entailment"}
    cfg = BartConfig(vocab_size=len(tok), d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                     decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=256,
                     bos_token_id=0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2, num_labels=3,
                     id2label=labels, label2id={v: k for k, v in labels.items()})
    BartForSequenceClassification(cfg).save_pretrained(path)
    return path


def test_a_special_tokens_spelling_in_a_pair_is_text_not_a_second_eos(tmp_path):
    """"<s>10</s>" in a premise became BART's <s> and </s>: a row with one <eos> more than the others,
    and "All examples must have the same number of <eos> tokens", a traceback ending the run."""
    j = NLIJudge.from_pretrained(_tiny_bart_nli(tmp_path / "bart"))
    pairs = [("Old price <s>10</s>, now 8.", "login returns 422"), ("login returns 422", "login returns 422 </s>"),
             ("login returns 422", "login returns 422")]
    got = j.judge(pairs)
    assert all(v.supported is not None and v.reason.startswith("p(entailment)=") for v in got)
    eos = j.tokenizer.eos_token_id
    # </s> </s> between the two texts and </s> last, in every row
    assert [row.tolist().count(eos) for row in j._encode(pairs)["input_ids"]] == [3, 3, 3]
    assert j._lengths(["<s>10</s>"]) == [len(j.tokenizer("<s>10</s>", add_special_tokens=False,
                                                         split_special_tokens=True)["input_ids"])]
    assert j._lengths(["<s>10</s>"])[0] > 3  # its characters, not three tokens


def test_ordinary_text_gets_the_same_ids_as_before(tmp_path):
    """`split_special_tokens` changes nothing where no special token is spelt out: the verdicts the gate's
    baselines hold do not move."""
    premises, statements = ["login returns 422. The page shows a toast.", "old price"], ["login returns 422", "now"]
    for folder in (_tiny_bart_nli(tmp_path / "bart"), _tiny_nli(tmp_path / "bert", L3)):
        j = NLIJudge.from_pretrained(folder)
        plain = j.tokenizer(premises, statements, truncation="only_first", max_length=j.max_length, padding=True,
                            return_tensors="pt")
        assert j._encode(list(zip(premises, statements)))["input_ids"].tolist() == plain["input_ids"].tolist()
        assert j._lengths(premises) == [len(x) for x in j.tokenizer(premises, add_special_tokens=False)["input_ids"]]


class _FailsOnToast:
    """The model, raising as BART's head does (a ValueError of two lines) on any batch holding "toast"."""

    def __init__(self, model, toast: int):
        self.model, self.toast = model, toast

    def __call__(self, **enc):
        if (enc["input_ids"] == self.toast).any():
            raise ValueError("All examples must have the same number of <eos> tokens.\nsecond line")
        return self.model(**enc)


def test_a_model_error_on_one_pair_leaves_it_undecided_and_judges_the_rest(tmp_path):
    j = NLIJudge.from_pretrained(_tiny_nli(tmp_path / "m", L3), batch_size=3)
    j.model = _FailsOnToast(j.model, j.tokenizer.convert_tokens_to_ids("toast"))
    got = j.judge([("login returns 422", "login returns"), ("toast", "login"), ("login", "login"), ("422", "returns")])
    assert [v.supported for v in got] == [True, None, True, True]
    assert got[1].reason == ("NLI model could not judge the pair: All examples must have the same number of <eos> "
                             "tokens.")  # its first line
    assert got[0].reason.startswith("p(entailment)=")


# ---------------------------------------------------------------------------------------------
# lexical: words of any alphabet


@pytest.mark.parametrize(("premise", "statement"), [
    ("Jürgen Mägi became head of state of Valdoria in 2016.", "Jörgen Mögi became head of state of Valdoria in 2016."),
    ("The capital of Valdoria is Pärnu.", "The capital of Valdoria is Pörnu."),
    ("The head of state of Valdoria is Kõiv.", "The head of state of Valdoria is Käiv."),
    ("The head of state of Valdoria is Jónsson.", "The head of state of Valdoria is Ólafsson."),
])
def test_a_name_with_letters_past_ascii_is_one_word(premise, statement):
    """[a-z] cut "Mägi" into "m" and "gi", so "Mögi" was the same two words; "Ólafsson" lost its capital."""
    (v,) = LexicalJudge().judge([(premise, statement)])
    assert v.supported is False
    assert LexicalJudge().judge([(premise, premise)])[0].supported is True


def test_words_keep_their_letters_and_cjk_stays_one_character_a_unit():
    assert lexical.content_tokens("Jürgen Müller met Ólafsson in Zürich") == [
        "jürgen", "müller", "met", "ólafsson", "zürich"]
    assert lexical.content_tokens("Привет мир, 登录 4ü") == ["привет", "мир", "4ü", "登", "录"]
    assert lexical._names("The head of state is Ólafsson.") == ["Ólafsson"]
    assert LexicalJudge.version == "14"


# ---------------------------------------------------------------------------------------------
# lexical: Chinese numerals are numbers where they count something


@pytest.mark.parametrize(("premise", "statement", "lacks"), [
    ("账户锁定三个月。", "账户锁定六个月。", "六"),
    ("账户锁定十五分钟。", "账户锁定五十分钟。", "五十"),
    ("项目预算为三百万元。", "项目预算为三千万元。", "三千万"),
    ("他于二〇一六年当选。", "他于二〇一七年当选。", "二〇一七"),
    ("账户锁定三个月。", "账户锁定一个月。", "一"),
    ("账户锁定15分钟。", "账户锁定五十分钟。", "五十"),
])
def test_a_chinese_numeral_the_premise_lacks_makes_a_statement_unsupported(premise, statement, lacks):
    (v,) = LexicalJudge().judge([(premise, statement)])
    assert v.supported is False and v.reason.endswith(f"but the premise lacks the number {lacks}")


@pytest.mark.parametrize(("premise", "statement"), [
    ("账户锁定3个月。", "账户锁定三个月。"), ("账户锁定三个月。", "账户锁定3个月。"),
    ("锁定15分钟", "锁定十五分钟"), ("锁定十五分钟", "锁定15分钟"), ("他在1998年出生。", "他在一九九八年出生。"),
    ("返回一个错误", "返回1个错误"), ("预算为三千万元。", "预算为三千万元。"),
])
def test_digits_and_numerals_back_each_other(premise, statement):
    """A number is its value however it is written: the numeral's characters count as covered too, so a
    short statement does not fall under the share for writing 十五 where the premise writes 15."""
    (v,) = LexicalJudge().judge([(premise, statement)])
    assert v.supported is True and "missing" not in v.reason


ORDINARY_WORDS = ("一些 一起 统一 一般 唯一 万一 十分 一样 不一 第一 三角 一直 一定 一切 一致 千万 一下 一点 同一天 每一天 之一 "
                  "七八 三四天 乱七八糟 七七八八 一一 三三两两 一五一十 十足 一旦 一次性 一个问题 一种方法 一名用户 一家公司 "
                  "一条消息 再试一次 第一次 第一步 统一年度 万万 百分百 三角形 五花八门 九九 一心一意 三心二意 十分重要 一部分 "
                  "一方面 一共 十字路口 二手 三明治 七夕 星期一 周三 一度 张三 两岸 两者 一会儿 一向 一律 一再 一同 一系列").split()


@pytest.mark.parametrize("word", ORDINARY_WORDS)
def test_everyday_words_written_with_numerals_hold_no_number(word):
    assert numbers.zh_numbers(word, quantities=True) == []
    (v,) = LexicalJudge().judge([("登录失败时系统返回错误码。", f"登录失败时{word}返回错误码。")])
    assert "the number" not in v.reason


def test_chinese_numerals_read_as_their_values():
    assert [numbers.zh_value(r) for r in ("三", "两", "十", "十五", "二十", "一百零五", "一万五", "三亿五千万", "一九九八")] == [
        3, 2, 10, 15, 20, 105, 15000, 350000000, 1998]
    assert [numbers.zh_value(r) for r in ("千万", "万一", "一五一十", "三三两两", "百", "十十", "一百一千")] == [None] * 7
    found = numbers.zh_numbers("锁定三个月，十分钟后重试，五千克，百分之五，一九九八年和二〇一六", quantities=True)
    assert [v for *_, v in found] == ["3", "10", "5", "5", "1998", "2016"]


def test_a_run_of_numerals_too_long_for_a_quantity_is_none_not_a_traceback():
    """int() refuses a string of 4,300 digits or more, and str() such a number: a ValueError that ended the run."""
    assert numbers.zh_value("一" * 5000) is None and numbers.zh_value("一亿" * 3000) is None
    got = LexicalJudge().judge([("一" * 5000 + "年", "一" * 5000 + "年"), ("锁定", "一亿" * 3000 + "年")])
    assert [v.supported for v in got] == [True, False]


# ---------------------------------------------------------------------------------------------
# lexical: a number with a magnitude is one quantity


@pytest.mark.parametrize(("premise", "statement", "lacks"), [
    ("人口为3000万。", "人口为3000。", "3000"),  # the digits alone are not what the premise says
    ("人口为 1,290 万。", "人口为 1,290。", "1290"),
    ("瓦尔多利亚的人口为3000万，首都人口为120万。", "瓦尔多利亚的人口为3000亿。", "3000亿"),  # one character among nine
    ("The population is 3 million.", "The population is 3.", "3"),
    ("The city of Valdoria has 2 million people, 40 parks and 12 museums in its old centre.",
     "The city of Valdoria has 2 billion people, 40 parks and 12 museums in its old centre.", "2 billion"),
])
def test_a_number_with_another_magnitude_is_unsupported(premise, statement, lacks):
    (v,) = LexicalJudge().judge([(premise, statement)])
    assert v.supported is False and v.reason.endswith(f"but the premise lacks the number {lacks}")


@pytest.mark.parametrize(("premise", "statement"), [
    ("人口为3000万。", "人口为三千万。"), ("人口为3千万。", "人口为3000万。"), ("人口为3000万。", "人口为3000万。"),
    ("The population is 3 million.", "The population is 3,000,000."),
    ("The population is 3,000,000.", "The population is 3 million."), ("重5千克。", "重5千克。"),
])
def test_a_quantity_is_its_value_however_its_magnitude_is_written(premise, statement):
    (v,) = LexicalJudge().judge([(premise, statement)])
    assert v.supported is True and "missing" not in v.reason


@pytest.mark.parametrize(("premise", "statement"), [
    ("凯特洛研究所成立于 1999 年，总部在北方。", "1999年"), ("拥有 4,350 名会员。", "4,350名"),
    ("丹洛加的人口为1,290万。", "丹洛加的人口为 1,290 万。"), ("丹洛加的人口为 1,290 万。", "丹洛加的人口为1,290万。"),
])
def test_a_space_between_a_number_and_chinese_text_changes_nothing(premise, statement):
    """Mixed text spaces digits off ("成立于 1999 年"): the statement "1999年" found no "9年" in the premise,
    so a short right reference read as missing from its passage, and retrieval was blamed."""
    (v,) = LexicalJudge().judge([(premise, statement)])
    assert v.supported is True and "missing" not in v.reason


@pytest.mark.parametrize(("premise", "statement"), [
    ("Ruus leads the country of Valdoria.", "Ruus's country is Valdoria."),
    ("The leader of Valdoria is Ruus.", "Valdoria's leader is Ruus."),
])
def test_a_possessive_is_backed_by_its_word(premise, statement):
    """The name rule read "Ruus's" as Ruus, but the share counted "ruus's" as a word of its own: missing."""
    (v,) = LexicalJudge().judge([(premise, statement)])
    assert v.supported is True and "missing" not in v.reason


def test_scaled_numbers_read_as_their_values():
    found = numbers.scaled_numbers("3000万、1.5亿、1万2千、1亿2000万、2 million、5千克、3千米、5百分点、2016年、1.2.3万、" + "1" * 5000 + "万")
    assert [v for *_, v in found] == ["30000000", "150000000", "12000", "120000000", "2000000"]


# ---------------------------------------------------------------------------------------------
# LLM replies: several answers must agree; labels and keys as models write them


def _reply(*labels: str, key: str = "verdicts") -> str:
    return json.dumps({key: [{"id": i, "label": lab} for i, lab in enumerate(labels, start=1)]}, ensure_ascii=False)


@pytest.mark.parametrize("content", [
    f"Draft: {_reply('contradiction', 'neutral')} Wait, statement 1 is stated. Final: {_reply('entailment', 'neutral')}",
    f"Format:\n```json\n{_reply('neutral', 'neutral')}\n```\nAnswer:\n```json\n{_reply('entailment', 'neutral')}\n```",
    f"<think>ok</think> {_reply('entailment', 'neutral')} or maybe {_reply('entailment', 'contradiction')}",
])
def test_a_reply_with_verdicts_that_disagree_decides_nothing(content):
    """The first object was read: a model that drafts then corrects itself had its draft read, and cached."""
    got = parse_verdicts(content, 2)
    assert got == [Verdict(None, "malformed reply: several verdict objects that disagree")] * 2


def test_verdicts_that_agree_are_read_with_the_last_ones_reasons():
    first = json.dumps({"verdicts": [{"id": 1, "label": "entailment", "reason": "draft"}]})
    final = json.dumps({"verdicts": [{"id": 1, "label": "Entailment", "reason": "final"}]})
    assert parse_verdicts(f"Draft: {first}\nFinal:\n```json\n{final}\n```", 1) == [Verdict(True, "final", "entailment")]


@pytest.mark.parametrize(("spelling", "label"), [
    ("蕴含", "entailment"), ("支持", "entailment"), ("蕴涵。", "entailment"), ("中立", "neutral"), ("中性", "neutral"),
    ("矛盾", "contradiction"), ("“矛盾”", "contradiction"), ("ｅｎｔａｉｌｍｅｎｔ", "entailment"), ("ＮＥＵＴＲＡＬ！", "neutral"),
    ("**entailment**", "entailment"), ("**Contradiction**.", "contradiction"), ("*neutral*", "neutral"),
])
def test_labels_in_chinese_full_width_or_bold_are_read(spelling, label):
    assert parse_label(spelling) == label
    (v,) = parse_verdicts(_reply(spelling), 1)
    assert (v.supported, v.label) == (label == "entailment", label)


@pytest.mark.parametrize("spelling", ["不支持", "不矛盾", "蕴含或中立", "entailment（蕴含）", "**", "支持 entailment"])
def test_more_than_one_whole_label_is_still_none(spelling):
    assert parse_label(spelling) is None


def test_keys_in_another_case_are_read_and_a_null_reason_is_empty():
    content = json.dumps({"Verdicts": [{"ID": 1, "Label": "entailment", "Reason": "stated"},
                                       {"Id": "2", "LABEL": "neutral", "reason": None}]})
    assert parse_verdicts(content, 2) == [Verdict(True, "stated", "entailment"), Verdict(False, "", "neutral")]
    twice = json.dumps({"verdicts": [{"id": 1, "label": "entailment", "Label": "contradiction"}]})
    assert parse_verdicts(twice, 1)[0].supported is None  # two labels, one in capitals: none is read


def test_a_disagreeing_reply_is_not_cached_and_the_version_moved(tmp_path):
    j = LLMJudge("http://127.0.0.1:9/v1", "fake", api_key="k", cache_dir=tmp_path, max_workers=1)
    replies = [f"Draft: {_reply('contradiction')} Final: {_reply('entailment')}", f"Sure: {_reply('蕴含')}"]
    j.client.complete = lambda system, user, json_mode=False, key_only=False: replies.pop(0)
    pair = ("登录失败返回 422。", "登录失败返回 422")
    assert j.judge([pair])[0].reason == "malformed reply: several verdict objects that disagree"
    assert j.judge([pair]) == [Verdict(True, "", "entailment")] and not replies  # asked again: nothing was cached
    assert llm.VERDICTS_VERSION == "lewisrag-verdicts-5"
