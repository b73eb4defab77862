"""The evaluate module agrees with `lewisrag eval answers` on a refusal that repeats its question's
number; the sentence embedder cuts a text to the model's positions, as the NLI judge does; a
full-width full stop inside a word reads as its ASCII form; and real-data.md names every case where
lewisrag's exact match is stricter than SQuAD's."""

from __future__ import annotations

import os
import re
import string
from pathlib import Path

import pytest

from lewisrag.scoring.qa import exact_match, normalize_answer, token_f1

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]

# a sentence that declines and repeats the question's number: no claim of its own, so it need not cite
DECLINING = [
    ("登录返回 422 是什么意思？", "密码错误时登录返回 422 [1]。文档没有说明 422 的含义。", "密码错误时登录返回 422。"),
    ("What does 422 mean on login?",
     "Login returns 422 when the password is wrong [1]. The documents do not say what 422 means.",
     "Login returns 422 when the password is wrong."),
]


@pytest.fixture(scope="module")
def faith_module():
    evaluate = pytest.importorskip("evaluate")
    from lewisrag.eval import hf_metrics

    return evaluate.load(hf_metrics.path("lewisrag_faithfulness"))


@pytest.mark.parametrize("question, answer, context", DECLINING)
def test_the_module_given_questions_agrees_with_eval_answers(faith_module, question, answer, context):
    """The module called `declines_only` without the question: the second sentence, which only
    repeats the question's 422, read as an uncited claim (citation recall 0.5) where `eval answers`
    excuses it (1.0). `questions` passes each answer's question, as eval answers reads the record's."""
    from lewisrag.eval.evaluator import evaluate_answers
    from lewisrag.eval.judges import LexicalJudge
    from lewisrag.eval.records import parse_answer

    row = {"user_input": question, "response": answer, "retrieved_contexts": [{"id": "1", "title": "", "text": context}]}
    want = evaluate_answers([parse_answer(row, "answers.jsonl", 1, {})], LexicalJudge()).to_json()["records"][0]["metrics"]
    got = faith_module.compute(predictions=[answer], contexts=[[context]], questions=[question])
    assert want["citation_recall"] == 1.0
    for name in ("faithfulness", "citation_recall", "citation_precision"):
        assert got[name] == pytest.approx(want[name]), name


@pytest.mark.parametrize("questions, says", [
    (["登录返回 422 是什么意思？"], "one string per prediction: 2 predictions, got 1 questions"),
    ("登录返回 422 是什么意思？", "one string per prediction: 2 predictions, got '登录"),
    (["登录返回 422 是什么意思？", None], r"questions\[1\] must be a string, got None"),
    (["登录返回 422 是什么意思？", ["What does 422 mean?"]], r"questions\[1\] must be a string"),
])
def test_the_module_checks_questions(faith_module, questions, says):
    preds = [DECLINING[0][1], DECLINING[1][1]]
    contexts = [[DECLINING[0][2]], [DECLINING[1][2]]]
    with pytest.raises(ValueError, match=says):
        faith_module.compute(predictions=preds, contexts=contexts, questions=questions)


def _short_encoder(path: Path, positions: int) -> Path:
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "login", "returns", "422"]
    path.mkdir(parents=True)
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    BertTokenizerFast(vocab_file=str(path / "vocab.txt")).save_pretrained(path)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=positions)).save_pretrained(path)
    return path


def test_the_embedder_cuts_a_text_to_the_models_positions(tmp_path):
    """`load_embedder` cut every text at 256 tokens whatever the model: an encoder of 64 positions
    raised a RuntimeError inside the model (tensor sizes 122 and 64) on a 122-token answer. It cuts to
    `model_limit` now, as the NLI judge does: a long text embeds as its first 64 tokens do."""
    import math

    from lewisrag.eval.metrics import load_embedder

    embed = load_embedder(str(_short_encoder(tmp_path / "enc", positions=64)))
    long = embed("login returns 422 " * 40)
    assert len(long) == 16 and all(math.isfinite(x) for x in long)
    cut = embed("login returns 422 " * 20 + "login returns")  # [CLS] + 62 words + [SEP]: the 64 tokens kept
    assert long == pytest.approx(cut)


@pytest.mark.parametrize("full, ascii_", [
    ("J．K．罗琳", "J.K.罗琳"), ("Ｎｏ．１", "No.1"), ("Ｕ．Ｓ．Ａ．", "U.S.A."), ("U．S．A．", "U.S.A."),
    ("Ph．D．", "Ph.D."), ("e．g．北京", "e.g. 北京"), ("第１．２条", "第1.2条"),
])
def test_a_full_width_full_stop_inside_a_word_is_its_ascii_form(full, ascii_):
    """"．" (U+FF0E) between letters was spaced: "J．K．罗琳" was "j k罗琳" against "jk罗琳", "Ｎｏ．１"
    "no 1" against "no1", and "Ｕ．Ｓ．Ａ．" the half-joined "u sa" (the second mark went beside the
    initial "a"), though NFKC makes it the ASCII stop. Between two letters or digits it is that stop now."""
    assert normalize_answer(full) == normalize_answer(ascii_)
    assert exact_match(full, [ascii_]) == 1.0 and token_f1(full, [ascii_]) == 1.0


def test_other_full_width_marks_between_words_still_separate_them():
    assert normalize_answer("Paris，France") == "paris france" and normalize_answer("email：invalid") == "email invalid"
    assert normalize_answer("Ｕ．Ｓ．Ａ．") == "usa" and normalize_answer("北京．上海") == "北京上海"


def _squad_normalize(s: str) -> str:
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())


def test_real_data_names_the_lone_a_before_chinese_text_as_stricter_than_squad():
    """real-data.md said one case only was stricter than SQuAD's scorer (an answer that normalizes to
    nothing); "A 型血" (blood type A) keeps its "a", so "型血", which SQuAD's scorer matches, misses."""
    assert _squad_normalize("A 型血") == _squad_normalize("型血") and exact_match("型血", ["A 型血"]) == 0.0
    text = " ".join((ROOT / "docs" / "real-data.md").read_text(encoding="utf-8").split())
    assert "Two cases are stricter" in text and '"A 型血"' in text


@pytest.mark.parametrize("answer, context", [
    ("The documents do not mention it.", "Login returns 422 when the password is wrong."),
    ("抱歉，知识库里没有相关信息。", "登录失败时接口返回 422 状态码。"),
])
def test_the_module_leaves_a_refusal_out_of_faithfulness_as_eval_answers_does(faith_module, answer, context):
    """A refusal's faithfulness (0 when its sentence is judged a statement the context lacks) entered
    the module's mean, where `eval answers` leaves it null: the two disagreed on the same answers."""
    from lewisrag.eval.evaluator import EvalConfig, evaluate_answers
    from lewisrag.eval.judges import LexicalJudge
    from lewisrag.eval.records import parse_answer

    answers = [answer, "Login returns 422 when the password is wrong [1]."]
    rows = [{"user_input": "What does login return?", "response": a,
             "retrieved_contexts": [{"id": "1", "title": "", "text": context}]} for a in answers]
    got = faith_module.compute(predictions=answers, contexts=[[context]] * 2)
    report = evaluate_answers([parse_answer(r, "answers.jsonl", i, {}) for i, r in enumerate(rows, 1)],
                              LexicalJudge(), EvalConfig(splitter="sentences")).to_json()
    assert report["records"][0]["refused"] is True and report["records"][0]["metrics"]["faithfulness"] is None
    assert got["faithfulness_nan"] == 1
    assert got["faithfulness"] == pytest.approx(report["records"][1]["metrics"]["faithfulness"])


FOOTNOTED = [("It returns 422[^1].\n\n[^1]: REQ-AUTH-03 login requirements", "It returns 422."),
             ("登录失败返回 422[^1]。\n\n[^1]: REQ-AUTH-03 前端用红色列表显示错误", "登录失败返回 422。")]


@pytest.mark.parametrize("answer, reference", FOOTNOTED)
def test_the_modules_read_an_answer_without_its_footnote_definitions_as_eval_answers_does(faith_module, answer, reference):
    """The modules stripped the [n] markers only: the definition line's text counted in EM, F1 and ROUGE-L
    (EM 0 for a right answer) and was the premise of answer completeness."""
    evaluate = pytest.importorskip("evaluate")
    from lewisrag.eval import hf_metrics

    qa_module = evaluate.load(hf_metrics.path("lewisrag_qa"))
    assert qa_module.compute(predictions=[answer], references=[[reference]]) == {"exact_match": 1.0, "f1": 1.0, "rougeL": 1.0}
    got = faith_module.compute(predictions=[answer], contexts=[[reference]], reference_statements=[["REQ-AUTH-03"]])
    assert got["answer_completeness"] == 0.0  # the source's name is no part of what the answer says
