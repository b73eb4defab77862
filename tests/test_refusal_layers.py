"""Refusals and undecided answers in the layers: a refusal blamed on generation_off_topic once answer
relevancy was measured, a refusal's faithfulness (0 with the sentence splitter, NaN with the atomic
one) in the means, and an answer the judge decided none of blamed on "not used" alone."""

from __future__ import annotations


import pytest

from lewisrag.eval.bughunt import answer_records, human_labels, load_bughunt
from lewisrag.eval.diagnose import CAUSES, diagnose
from lewisrag.eval.evaluator import REFUSAL_REASON, EvalConfig, evaluate_answers, evaluate_bughunt
from lewisrag.eval.judges import LabelJudge, LexicalJudge, Verdict
from lewisrag.eval.metrics import join_contexts
from lewisrag.eval.records import parse_answer
from lewisrag.eval.refusals import is_refusal
from lewisrag.eval.reports.i18n import MESSAGES
from lewisrag.eval.statements import split_sentences

QUESTION = "What does login return on a wrong password?"
CONTEXT = "Login with a wrong password returns 422."
REFUSAL = "The documents do not mention it."


def _records(*responses: str, reference: str = "It returns 422.") -> list:
    rows = [{"id": f"a{i}", "user_input": QUESTION, "response": r, "retrieved_contexts": [CONTEXT], "reference": reference}
            for i, r in enumerate(responses)]
    return [parse_answer(row, "answers.jsonl", i, {}) for i, row in enumerate(rows, start=1)]


class RelevancyJudge(LexicalJudge):
    """Writes questions back as ragas does: those of a refusal are all noncommittal (relevancy 0)."""

    def generate_questions(self, answer, n):
        return [QUESTION] * n, [is_refusal(answer)] * n


class DecomposingJudge(LexicalJudge):
    """The atomic splitter's judge: a refusal decomposes into no statement (ragas may)."""

    def decompose(self, text):
        return [] if "do not mention" in text else [text]


# --- 1. a refusal is not off topic ---------------------------------------------------------------------

def test_a_refusal_with_answer_relevancy_measured_is_blamed_on_not_used():
    """Noncommittal, a refusal's answer relevancy is 0, and with only generation_distorted set "n/a" it
    was blamed on generation_off_topic: never on the context not used, where docs/evaluator.md puts it."""
    m = {"recall_at_k": {"5": 1.0}, "context_recall": 1.0, "answer_completeness": 0.0, "faithfulness": 0.0,
         "answer_relevancy": 0.0}
    d = diagnose(m, refused=True, k=5)
    assert d["primary"] == "generation_not_used"
    assert d["layers"]["generation_off_topic"] == "n/a" and d["layers"]["generation_distorted"] == "n/a"
    assert diagnose({**m, "recall_at_k": {"5": 0.0}}, refused=True, k=5)["primary"] == "retrieval"
    assert diagnose(m, refused=False, k=5)["primary"] == "generation_off_topic"  # an answer is still judged

    res = evaluate_answers(_records("It returns 422 [1].", REFUSAL), RelevancyJudge(), EvalConfig(claims=False),
                           embed=lambda s: [1.0, 0.0]).to_json()
    ok, refusal = res["records"]
    assert refusal["refused"] and refusal["metrics"]["answer_relevancy"] == 0.0
    assert refusal["diagnosis"]["primary"] == "generation_not_used"
    assert ok["diagnosis"]["primary"] is None
    assert res["aggregates"]["primary_cause_counts"] == {"none": 1, "generation_not_used": 1}


def test_a_refusal_without_relevancy_is_blamed_on_not_used_too():
    """Measured or not, a refusal answers no other question: "not used or off-topic" does not apply."""
    m = {"context_recall": 1.0, "answer_completeness": 0.0, "faithfulness": 0.0}
    assert diagnose(m, refused=True)["primary"] == "generation_not_used"
    assert diagnose({**m, "faithfulness": 1.0})["primary"] == "generation_not_used_or_off_topic"  # an answer: unmeasured


# --- 2. neither 0 nor NaN of a refusal enters a mean ------------------------------------------------------

@pytest.mark.parametrize("splitter", ["sentences", "atomic"])
def test_a_refusals_faithfulness_enters_no_mean(splitter):
    """With the sentence splitter "The documents do not mention it." was one unsupported statement: 0,
    in the mean (0.5 over a faithful answer and the refusal), in the share below 0.5 and in the gate; the
    atomic splitter's NaN left it out. The chapter lets neither into an average."""
    res = evaluate_answers(_records("It returns 422 [1].", REFUSAL), DecomposingJudge(),
                           EvalConfig(claims=False, splitter=splitter)).to_json()
    refusal = res["records"][1]
    assert refusal["refused"] and refusal["metrics"]["faithfulness"] is None
    assert refusal["nan_reasons"]["faithfulness"] == (REFUSAL_REASON if splitter == "sentences" else "no statements in the answer")
    f = res["aggregates"]["faithfulness"]
    assert (f["n"], f["nan"], f["mean"], f["share_below_0.5"]) == (1, 1, 1.0, 0.0)
    # the miss is still recorded, by completeness and by the diagnosis
    assert refusal["metrics"]["answer_completeness"] == 0.0 and res["aggregates"]["answer_completeness"]["mean"] == 0.5
    assert refusal["diagnosis"]["primary"] == "generation_not_used"


def test_a_refusals_claim_diagnostics_over_its_claims_enter_no_mean():
    """claims.faithfulness (0) and claims.hallucination (1) of a refusal's one claim entered their means."""
    res = evaluate_answers(_records("It returns 422 [1].", REFUSAL), LexicalJudge(), EvalConfig()).to_json()
    refusal = res["records"][1]
    for name in ("faithfulness", "hallucination", "precision", "self_knowledge"):
        assert refusal["metrics"][f"claims.{name}"] is None
        assert refusal["nan_reasons"][f"claims.{name}"] == REFUSAL_REASON
    assert refusal["metrics"]["claims.recall"] == 0.0  # the reference it did not cover
    agg = res["aggregates"]
    assert (agg["claims.faithfulness"]["n"], agg["claims.faithfulness"]["nan"]) == (1, 1)
    assert agg["claims.hallucination"]["mean"] == 0.0


def test_an_answer_is_still_scored():
    res = evaluate_answers(_records("It returns 500 [1]."), LexicalJudge(), EvalConfig()).to_json()
    rec = res["records"][0]
    assert not rec["refused"] and rec["metrics"]["faithfulness"] == 0.0 and rec["metrics"]["claims.faithfulness"] == 0.0


# --- 3. an undecided answer is not "not used" alone ------------------------------------------------------

def _partial_label_judge(sample, name: str) -> LabelJudge:
    """The sample's human labels without those of `name`'s answer statements: none of them is decided."""
    recs = [parse_answer(r, "bughunt", i, {}) for i, r in enumerate(answer_records(sample), start=1)]
    rec = next(r for r, a in zip(recs, sample.answers) if a.name == name)
    premise = join_contexts([c.text for c in rec.contexts])
    drop = {(premise, s.text) for s in split_sentences(rec.response)}
    return LabelJudge({(r["premise"], r["hypothesis"]): r["supported"] for r in human_labels(sample)
                       if (r["premise"], r["hypothesis"]) not in drop}, "partial labels")


def test_an_answer_the_judge_decided_none_of_is_not_blamed_on_not_used_alone():
    """Labels that miss the hallucinated answer's statements left its faithfulness undecided ("n/a"), and
    its invented facts were blamed on the context not used, which needs a faithful answer."""
    sample = load_bughunt()
    res = evaluate_bughunt(sample, _partial_label_judge(sample, "hallucinated")).to_json()
    rec = next(r for r in res["records"] if r["name"] == "hallucinated")
    assert rec["metrics"]["faithfulness"] is None and rec["nan_reasons"]["faithfulness"].startswith("judge undecided")
    assert rec["diagnosis"]["layers"]["generation_distorted"] == "n/a"
    assert rec["diagnosis"]["primary"] == "generation_not_used_or_distorted"
    assert CAUSES["generation_not_used_or_distorted"] == ("generation_distorted", "generation_not_used")
    assert res["aggregates"]["primary_cause_counts"] == {
        "none": 1, "retrieval": 1, "generation_not_used": 1, "generation_not_used_or_distorted": 1,
        "generation_off_topic": 1, "citation": 1}  # "not used": retrieved_not_used's alone


class UndecidedJudge(LexicalJudge):
    """Times out on every statement of the answer (the LLM judge's Verdict(None, reason))."""

    def judge(self, pairs):
        verdicts = super().judge(pairs)
        return [Verdict(None, "timeout") if h.startswith("It returns 500") else v for (_, h), v in zip(pairs, verdicts)]


def test_an_undecided_answer_in_eval_answers_blames_every_unknown_layer():
    res = evaluate_answers(_records("It returns 500 [1]."), UndecidedJudge(), EvalConfig(claims=False)).to_json()
    rec = res["records"][0]
    assert rec["metrics"]["faithfulness"] is None and rec["metrics"]["answer_completeness"] == 0.0
    assert rec["diagnosis"]["primary"] == "generation_not_used_distorted_or_off_topic"  # relevance not measured either
    assert set(CAUSES[rec["diagnosis"]["primary"]]) == {"generation_off_topic", "generation_distorted", "generation_not_used"}


def test_nothing_to_judge_blames_nothing_undecided_does():
    m = {"context_recall": 1.0, "answer_completeness": 0.0, "faithfulness": None, "on_topic_rate": 1.0}
    assert diagnose(m)["primary"] == "generation_not_used"  # no statements: nothing was invented
    assert diagnose(m, undecided={"faithfulness"})["primary"] == "generation_not_used_or_distorted"
    assert diagnose({**m, "on_topic_rate": None}, undecided={"faithfulness"})["primary"] == \
        "generation_not_used_distorted_or_off_topic"
    assert diagnose(m, refused=True, undecided={"faithfulness"})["primary"] == "generation_not_used"


def test_every_cause_is_named_in_both_languages():
    for cause in CAUSES:
        assert f"layer.{cause}" in MESSAGES, cause


def test_answer_relevancy_writes_questions_from_what_the_answer_says():
    """The judge wrote questions back from the raw response, [n] markers and footnote definitions
    included, so it could ask about the sources; every other metric reads `answer_text`."""
    seen = []

    class Recording(RelevancyJudge):
        def generate_questions(self, answer, n):
            seen.append(answer)
            return super().generate_questions(answer, n)

    response = "It returns 422 [1][^2].\n\n[^2]: REQ-AUTH-03 login requirements"
    evaluate_answers(_records(response), Recording(), EvalConfig(claims=False), embed=lambda s: [1.0, 0.0])
    assert seen == ["It returns 422."]
