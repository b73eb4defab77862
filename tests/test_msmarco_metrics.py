"""Long-form (MS MARCO) scores as MS MARCO's official evaluation computes them: coco-caption's ROUGE-L
(beta 1.2, precision and recall each the best over the references, a mean over questions) and its
corpus BLEU-1 (clipped matches and lengths summed over the corpus, the closest reference length);
and the evaluate stage reporting the long-form columns so."""

import math
from types import SimpleNamespace

import pytest
from sacrebleu.metrics import BLEU

import lewisrag.experiments.stages as stages
import lewisrag.scoring.qa as Q
from lewisrag.data.records import QAExample

B2 = 1.2**2


def _f(p: float, r: float) -> float:
    return (1 + B2) * p * r / (r + B2 * p)


def test_rouge_l_takes_precision_and_recall_each_at_its_best_reference():
    # P = max(2/3, 3/3), R = max(2/2, 3/6): 1.0, which no single reference gives (rouge-score's F1: 0.8)
    assert Q.msmarco_rouge_l("a b c", ["a b", "a b c d e f"]) == 1.0
    assert Q.rouge_l("a b c", ["a b", "a b c d e f"]) == pytest.approx(0.8)


def test_rouge_l_weighs_recall_by_beta_1_2():
    # LCS 4 ("the capital of france") of 6 and 6 tokens, and 1 ("paris") of 6 and 1: P = 4/6, R = 1
    score = Q.msmarco_rouge_l("Paris is the capital of France", ["The capital of France is Paris.", "Paris."])
    assert score == pytest.approx(_f(4 / 6, 1.0)) and round(score, 4) == 0.8299
    # one reference: LCS 3 of 3 and 6 tokens
    assert Q.msmarco_rouge_l("the cat sat", ["the cat sat on the mat"]) == pytest.approx(_f(1.0, 0.5))


def test_rouge_l_with_no_token_scores_zero():
    assert Q.msmarco_rouge_l("", ["Paris"]) == 0.0
    assert Q.msmarco_rouge_l("...", ["Paris"]) == 0.0  # punctuation only: no token
    assert Q.msmarco_rouge_l("Paris", ["", "."]) == 0.0
    assert Q.msmarco_rouge_l("London", ["Paris"]) == 0.0
    # a blank reference takes no part: the other one scores alone
    assert Q.msmarco_rouge_l("the cat sat", ["", "the cat sat on the mat"]) == pytest.approx(_f(1.0, 0.5))


def test_rouge_l_reads_chinese_one_character_a_token():
    # LCS 前端红色列表 = 6 of 8 and 9 characters
    assert Q.msmarco_rouge_l("前端显示红色列表", ["前端用红色列表显示"]) == pytest.approx(_f(6 / 8, 6 / 9))
    assert Q.msmarco_rouge_l("锁定１５分钟", ["锁定 15 分钟"]) == 1.0  # NFKC: full-width digits are 15


def test_rouge_l_refuses_what_rouge_l_refuses():
    with pytest.raises(ValueError):
        Q.msmarco_rouge_l("Paris", "Paris")
    with pytest.raises(ValueError):
        Q.msmarco_rouge_l(None, ["Paris"])


def test_bleu_1_sums_over_the_corpus():
    # 5 of 5 tokens match; lengths 5 against 4 + 3: exp(1 - 7/5), where the sentence scores' mean is
    # (exp(1 - 4/3) + exp(1 - 3/2)) / 2
    preds, refs = ["the cat sat", "a dog"], [["the cat sat down"], ["a dog barked"]]
    assert Q.msmarco_bleu_1(preds, refs) == pytest.approx(math.exp(-0.4))
    assert Q.msmarco_bleu_1(preds[:1], refs[:1]) == pytest.approx(math.exp(1 - 4 / 3))


def test_bleu_1_closest_reference_length_the_shorter_of_two_as_close():
    # 3 tokens against 2 and 4 (both 1 away): 2, so no brevity penalty; 3 matches clipped by the most
    # of each word one reference holds ("the" twice in none)
    assert Q.msmarco_bleu_1(["the cat sat"], [["the cat", "cat sat down now"]]) == 1.0
    assert Q.msmarco_bleu_1(["the the the"], [["the cat", "the dog"]]) == pytest.approx(1 / 3)


def test_bleu_1_with_no_token_scores_zero():
    assert Q.msmarco_bleu_1([""], [["Paris"]]) == 0.0
    assert Q.msmarco_bleu_1(["", "..."], [["Paris"], ["London"]]) == 0.0
    # a blank reference takes no part: "the cat" is scored against the 4-token one (exp(1 - 4/2))
    assert Q.msmarco_bleu_1(["the cat"], [["", "the cat sat down"]]) == pytest.approx(math.exp(-1))


def test_bleu_1_reads_chinese_one_character_a_token():
    assert Q.msmarco_bleu_1(["红色列表"], [["红色的列表"]]) == pytest.approx(math.exp(1 - 5 / 4))
    assert Q.msmarco_bleu_1(["锁定１５分钟"], [["锁定 15 分钟"]]) == 1.0


def test_bleu_1_agrees_with_sacrebleus_corpus_bleu():
    """sacrebleu's corpus BLEU (unigrams, no smoothing) is the same convention: given the same tokens,
    the references as streams padded with None, it scores the same."""
    preds = ["the cat sat on a mat", "a dog", "red red red", "Paris is the capital of France", "", "前端显示红色列表"]
    refs = [["the cat sat on the mat", "a cat was on the mat"], ["a dog barked", "dog"], ["red blue"],
            ["The capital of France is Paris.", "Paris."], ["nothing here"], ["前端用红色列表显示", "红色列表"]]
    joined = lambda text: " ".join(Q.rouge_tokens(text))  # noqa: E731
    streams = [[joined(r[i]) if i < len(r) else None for r in refs] for i in range(max(map(len, refs)))]
    expected = BLEU(max_ngram_order=1, tokenize="none", smooth_method="none").corpus_score(list(map(joined, preds)), streams)
    assert Q.msmarco_bleu_1(preds, refs) == pytest.approx(expected.score / 100)


def test_bleu_1_refuses_mismatched_lists():
    with pytest.raises(ValueError):
        Q.msmarco_bleu_1(["a"], [["a"], ["b"]])
    with pytest.raises(ValueError):
        Q.msmarco_bleu_1([], [])
    with pytest.raises(ValueError):
        Q.msmarco_bleu_1(["a"], ["a"])  # a reference list must be a list, not a string


def test_evaluate_scores_long_answers_as_ms_marco_does(monkeypatch, tmp_path):
    """The evaluate stage's `qa.<system>.long`: ROUGE-L the mean of the questions' coco-caption ROUGE-L,
    BLEU-1 the corpus score (not the mean of the records' per-question BLEU-1)."""
    long = [QAExample("q1", "one?", ["a b", "a b c d e f"], kind="long"),
            QAExample("q2", "two?", ["The capital of France is Paris.", "Paris."], kind="long"),
            QAExample("q3", "three?", ["the dog barked"], kind="long")]
    said = {"one?": "a b c", "two?": "Paris is the capital of France", "three?": "dog"}
    monkeypatch.setattr(stages, "read_qa", lambda path: long)
    monkeypatch.setattr(stages, "DenseIndex", SimpleNamespace(load=lambda *a, **k: None))
    monkeypatch.setattr(stages, "place_search", lambda *a, **k: None)
    monkeypatch.setattr(stages, "_answers", lambda run, preset, system, questions, *a: [said[q] for q in questions])
    monkeypatch.setattr(stages, "write_json", lambda *a, **k: None)
    monkeypatch.setattr(stages, "claimed", lambda run, path: path)
    preset = SimpleNamespace(eval_split="test", device="cpu", rag=SimpleNamespace(max_target_length=8), long_max_length=32)

    out = stages.evaluate(tmp_path, preset, lambda *a: None, test_file=tmp_path / "test.jsonl")

    rouge = [1.0, _f(4 / 6, 1.0), _f(1.0, 1 / 3)]  # P and R each at its best reference
    for system in stages.SYSTEMS:
        got = out["out"]["qa"][system]["long"]
        assert got["n"] == 3
        assert got["rougeL"] == pytest.approx(sum(rouge) / 3)
        # 10 of 10 tokens match; reference lengths 2 (closest to 3) + 6 + 3 = 11 against 10
        assert got["bleu1"] == pytest.approx(math.exp(1 - 11 / 10))
        records = [r["metrics"] for r in out["records"] if r["system"] == system]
        assert [m["rougeL"] for m in records] == pytest.approx(rouge)
        assert [m["bleu1"] for m in records] == pytest.approx([1.0, 1.0, math.exp(1 - 3)])
