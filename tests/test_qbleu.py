"""Q-BLEU-1 (lewisrag.scoring.qbleu): hand-computed values.

Weights: w_ne = .6, w_q = .2, w_r = .1, w_f = .1, delta = .7. BLEU-1 is lewisrag.scoring.qa.bleu_1
(clipped unigram precision times the brevity penalty). Classes: ne = named entities, q = question words,
r = content words, f = function words.
"""

from __future__ import annotations

import doctest
import math

import pytest

from lewisrag.scoring import qbleu
from lewisrag.scoring.qa import bleu_1
from lewisrag.scoring.qbleu import answerability, classify, q_bleu1, question_tokens


def _classes(text: str, known: frozenset[str] = frozenset()) -> dict[str, list[str]]:
    return {name: sorted(c.elements()) for name, c in classify(question_tokens(text), set(known)).items()}


def test_weights_and_delta():
    assert (qbleu.W_NE, qbleu.W_Q, qbleu.W_R, qbleu.W_F, qbleu.DELTA) == (0.6, 0.2, 0.1, 0.1, 0.7)
    assert math.fsum(qbleu.WEIGHTS.values()) == pytest.approx(1.0, abs=1e-12)
    assert qbleu.W_F == pytest.approx(1 - qbleu.W_NE - qbleu.W_Q - qbleu.W_R)


@pytest.mark.parametrize("text", [
    "In which year did Valdoria join the Kelmora Treaty?",
    # no question word: the reference script would score the empty class 0 and give 0.7 * 0.8 + 0.3 = 0.86
    "This Valdorian river flows into the Kelmora Sea.",
])
def test_identical_strings_score_one(text):
    assert answerability(text, text) == 1.0
    assert q_bleu1(text, [text]) == 1.0


def test_precision_recall_arithmetic():
    # reference: Which(q) river(q, after "which") flows(r) through(f) Kelmora(ne) in(f) 1921(ne)
    # candidate: Which(q) river(q) runs(r) through(f) Valdoria(ne) and(f) Kelmora(ne) in(f) 1921(ne)
    # ne: {valdoria, kelmora, 1921} vs {kelmora, 1921}: 2 common, P = 2/3, R = 2/2 = 1
    # q : {which, river} on both sides:                 P = 1,   R = 1
    # r : {runs} vs {flows}:                             P = 0,   R = 0
    # f : {through, and, in} vs {through, in}:           P = 2/3, R = 1
    # P_avg = .6*2/3 + .2*1 + .1*0 + .1*2/3 = .4 + .2 + .0667 = 2/3;  R_avg = .6 + .2 + 0 + .1 = .9
    # answerability = 2 * (2/3) * .9 / (2/3 + .9) = 1.2 / (47/30) = 36/47 = 0.76596
    # BLEU-1: 9 candidate tokens, 6 in the reference (which river through kelmora in 1921); 9 > 7: BP = 1 -> 2/3
    # Q-BLEU-1 = .7 * 36/47 + .3 * 2/3 = 25.2/47 + 9.4/47 = 34.6/47 = 0.73617
    cand = "Which river runs through Valdoria and Kelmora in 1921"
    ref = "Which river flows through Kelmora in 1921"
    assert _classes(ref) == {"ne": ["1921", "kelmora"], "q": ["river", "which"], "r": ["flows"], "f": ["in", "through"]}
    assert answerability(cand, ref) == pytest.approx(36 / 47, rel=1e-12)
    assert bleu_1(cand, [ref]) == pytest.approx(2 / 3, rel=1e-12)
    assert q_bleu1(cand, [ref]) == pytest.approx(34.6 / 47, rel=1e-12)


def test_right_entity_beats_right_function_word_at_equal_bleu1():
    # reference: Who(q) founded(r) the(f) Kelmora(ne) Institute(ne)
    # a: Who praised our Kelmora Institute -> ne 2/2 both ways, q 1, r 0, f {our} vs {the} 0
    #    P_avg = R_avg = .6 + .2 = .8 -> answerability .8
    # b: Who praised the Valdoria Institute -> ne {valdoria, institute}: 1/2 both ways, q 1, r 0, f 1
    #    P_avg = R_avg = .6*.5 + .2 + .1 = .6 -> answerability .6
    # BLEU-1, both: 3 of 5 unigrams match, equal lengths -> .6
    # Q-BLEU-1: a = .7*.8 + .3*.6 = .74, b = .7*.6 + .3*.6 = .60
    ref = "Who founded the Kelmora Institute"
    a, b = "Who praised our Kelmora Institute", "Who praised the Valdoria Institute"
    assert bleu_1(a, [ref]) == pytest.approx(0.6) == bleu_1(b, [ref])
    assert answerability(a, ref) == pytest.approx(0.8)
    assert answerability(b, ref) == pytest.approx(0.6)
    assert q_bleu1(a, [ref]) == pytest.approx(0.74)
    assert q_bleu1(b, [ref]) == pytest.approx(0.60)


def test_only_function_words_in_common_scores_low():
    # reference: In(f) 1921(ne) Valdoria(ne) exported(r) copper(r) to(f) Kelmora(ne)
    # candidate: In the it was to them (f), end sent (r); no entity, no question word
    # ne: one side empty -> P = R = 0;  q: absent from both -> left out, weights rescaled by 1/.8
    # r: {end, sent} vs {exported, copper} -> 0, 0;  f: {in, the, it, was, to, them} vs {in, to}: P = 2/6, R = 1
    # P_avg = .1 * (1/3) / .8 = 1/24;  R_avg = .1 * 1 / .8 = 1/8
    # answerability = 2 * (1/24) * (1/8) / (1/24 + 1/8) = (1/96) / (1/6) = 1/16
    # BLEU-1: in, to of 8 tokens = 1/4 (8 > 7, no brevity penalty)
    # Q-BLEU-1 = .7/16 + .3/4 = .04375 + .075 = .11875, below the plain BLEU-1
    ref = "In 1921 Valdoria exported copper to Kelmora"
    cand = "In the end it was sent to them"
    assert answerability(cand, ref) == pytest.approx(1 / 16)
    assert bleu_1(cand, [ref]) == pytest.approx(0.25)
    assert q_bleu1(cand, [ref]) == pytest.approx(0.11875)
    assert q_bleu1(cand, [ref]) < bleu_1(cand, [ref])


def test_entities_numbers_and_sentence_starts():
    text = "Valdoria's population is 12.9 million. Its Kelmora Institute has 4,350 students."
    # "Valdoria" opens the sentence: an entity only when it is capitalised mid-sentence somewhere
    assert _classes(text)["ne"] == ["12.9", "4350", "institute", "kelmora"]
    assert _classes(text)["r"] == ["million", "population", "students", "valdoria"]
    assert "valdoria" in _classes(text, frozenset({"valdoria"}))["ne"]
    # same words in another order: every class matches once "Valdoria" is known from the reference
    assert answerability("Valdoria joined the Kelmora Treaty in 1921", "In 1921 Valdoria joined the Kelmora Treaty") == 1.0


def test_answer_type_word_after_what_joins_the_question_class():
    assert _classes("In what year did Valdoria vote")["q"] == ["what", "year"]


def test_chinese_gives_a_score_in_range():
    score = q_bleu1("哪一年瓦尔多利亚加入了条约？", ["瓦尔多利亚在1921年加入了条约。"])
    assert isinstance(score, float) and 0.0 <= score <= 1.0
    assert [t.key for t in question_tokens("在１９２１年")] == ["在", "1921", "年"]


def test_chinese_hand_computed():
    # all characters are content words: 4 of 4 candidate characters in the 5 of the reference
    # answerability = 2 * 1 * .8 / 1.8 = 8/9; BLEU-1 = 4/4 * exp(1 - 5/4) -> .7 * 8/9 + .3 * exp(-.25)
    assert q_bleu1("红色列表", ["红色的列表"]) == pytest.approx(0.7 * 8 / 9 + 0.3 * math.exp(-0.25))


def test_best_reference_counts():
    ref = "Which river flows through Kelmora in 1921"
    cand = "Which river runs through Valdoria and Kelmora in 1921"
    assert q_bleu1(cand, ["Who wrote it", ref]) == q_bleu1(cand, [ref]) == pytest.approx(34.6 / 47)
    assert q_bleu1(ref, ["Who wrote it", ref]) == 1.0


@pytest.mark.parametrize("prediction", ["", "   ", "?!"])
def test_empty_prediction_scores_zero(prediction):
    assert q_bleu1(prediction, ["Which river flows through Kelmora?"]) == 0.0
    assert answerability(prediction, "Which river flows through Kelmora?") == 0.0


@pytest.mark.parametrize("references", [[], (), "Which river?"])
def test_bad_references_raise(references):
    with pytest.raises(ValueError):
        q_bleu1("Which river?", references)
    with pytest.raises(ValueError):
        q_bleu1("", references)


def test_doctests():
    result = doctest.testmod(qbleu)
    assert result.attempted > 0 and result.failed == 0
