"""The evaluate modules load offline from the installed package and compose with evaluate.combine."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

evaluate = pytest.importorskip("evaluate")

from lewisrag.eval import hf_metrics, metrics, qa  # noqa: E402
from lewisrag.eval.judges import LexicalJudge  # noqa: E402


@pytest.fixture(scope="module")
def modules():
    return evaluate.load(hf_metrics.path("lewisrag_qa")), evaluate.load(hf_metrics.path("lewisrag_faithfulness"))


def test_path():
    import doctest

    assert doctest.testmod(hf_metrics).failed == 0
    assert os.path.isfile(os.path.join(hf_metrics.path("lewisrag_qa"), "lewisrag_qa.py"))
    with pytest.raises(ValueError, match="unknown metric module"):
        hf_metrics.path("squad")


def test_qa_module_matches_library(modules):
    qa_mod, _ = modules
    preds, refs = ["Paris", "返回四二"], [["paris"], ["返回四二二"]]
    got = qa_mod.compute(predictions=preds, references=refs)
    assert got["exact_match"] == 0.5
    assert got["f1"] == pytest.approx((1 + 2 * 0.8 / 1.8) / 2)
    assert got["rougeL"] == pytest.approx(sum(qa.rouge_l(p, r) for p, r in zip(preds, refs)) / 2)


def test_faithfulness_module_and_combine(modules):
    qa_mod, faith_mod = modules
    preds = ["登录失败返回 422 [1]。前端弹出 toast [1]。", "Login returns 422 [2]."]
    contexts = [["登录失败返回 422。"], ["Signup returns 422.", "Login returns 422."]]
    refs = [["登录失败返回 422"], ["Login returns 422."]]
    got = faith_mod.compute(predictions=preds, contexts=contexts, reference_statements=[["登录失败返回 422"], ["Login returns 422"]])
    judge = LexicalJudge()
    want = (metrics.faithfulness(["登录失败返回 422。", "前端弹出 toast。"], contexts[0], judge) + 1.0) / 2
    assert got["faithfulness"] == pytest.approx(want) and got["faithfulness_nan"] == 0
    assert got["citation_recall"] == pytest.approx(0.75) and got["context_recall"] == 1.0
    assert got["judge_fingerprint"] == judge.fingerprint
    both = evaluate.combine([qa_mod, faith_mod]).compute(predictions=preds, references=refs, contexts=contexts)
    assert {"exact_match", "f1", "rougeL", "faithfulness", "citation_recall", "citation_precision"} <= set(both)
    assert both["faithfulness"] == pytest.approx(want)


def test_a_declining_sentence_is_excused_from_citing_as_in_eval_answers(modules):
    """The evaluate module counted a sentence that only declines as an uncited statement (recall 0.5
    for a cited answer that says what the documents lack) where `lewisrag eval answers` excuses it."""
    _, faith = modules
    answers = ["The API returns 422 [1]. The documents do not mention the lockout time.", "The documents do not say."]
    out = faith.compute(predictions=answers, contexts=[["The API returns 422 when login fails."]] * 2)
    assert out["citation_recall"] == 1.0 and out["citation_recall_nan"] == 1  # the second has nothing to cite


def test_undecided_verdicts_are_counted_not_dropped_in_silence(modules):
    """A verdict the judge cannot give is left out of its score, as in `lewisrag eval answers`, and counted:
    the module scored a half-undecided answer 1.0 with nothing in its output saying so."""
    _, faith = modules
    from lewisrag.eval.judges import FunctionJudge

    judge = FunctionJudge(lambda premise, hypothesis: True if "422" in hypothesis else None)
    out = faith.compute(predictions=["Login returns 422 [1]. The account is deleted [1][2]."],
                        contexts=[["Login returns 422.", "Accounts are kept."]], judge=judge,
                        reference_statements=[["Login returns 422.", "The account is kept."]])
    assert out["faithfulness"] == 1.0 and out["faithfulness_undecided"] == 1
    assert out["citation_recall"] == 1.0 and out["citation_recall_undecided"] == 1
    assert out["citation_precision_undecided"] == 2  # both citations of the undecided statement
    assert out["context_recall_undecided"] == 1 and out["answer_completeness_undecided"] == 1
    decided = faith.compute(predictions=["Login returns 422 [1]."], contexts=[["Login returns 422."]])
    assert decided["faithfulness_undecided"] == decided["citation_precision_undecided"] == 0
