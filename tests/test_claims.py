"""RAGChecker's claim-level diagnostics: its published example, a brute-force reading of the paper's
formulas, the NaN policy, one judge batch, and Chinese and English text alike."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import Counting
from lewisrag.eval.claims import (
    METRICS,
    ClaimLabels,
    claim_diagnostics,
    diagnostics_from_labels,
    judge_claims,
)
from lewisrag.eval.judges import FunctionJudge, Verdict

NAN = float("nan")
SUBSTRING = FunctionJudge(lambda premise, hypothesis: hypothesis in premise)


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-12)


# ---------------------------------------------------------------------------------------------
# 1. RAGChecker's published example: examples/checking_outputs.json in amazon-science/RAGChecker,
# two questions (the longest river; the DR Congo flag). The checker's labels are written one letter
# each: E = "Entailment", N = "Neutral", C = "Contradiction"; RAGChecker counts only E as entailed.
# answer2response: response claim i vs the reference; response2answer: reference claim i vs the
# response; retrieved2*: one string per claim, one letter per retrieved chunk.

RIVER = {
    "answer2response": "NEEEEEEEENC",
    "response2answer": "EEEEEECNEENNNNNENNNNEE",
    "retrieved2response": ["NENN", "NNNN", "NNNN", "NNNN", "NNNN", "NNNN", "NENN", "NNNN", "ENNE", "NNNE", "NNNN"],
    "retrieved2answer": ["NENN", "NNNN", "NNNN", "ENNN", "EENN", "ENNE", "CCNN"] + ["NNNN"] * 14 + ["NENN"],
}
FLAG = {
    "answer2response": "NEEEE",
    "response2answer": "EECENEEE",
    "retrieved2response": ["NEN", "NEE", "CEE", "ENE", "CEE"],
    "retrieved2answer": ["NEN", "NEE", "NEN", "CEE", "NNE", "ENE", "EEE", "NEE"],
}
# An earlier version of the file, whose numbers README.md and the tutorial still print, had a 12th
# response claim in the river answer ("Amazon River, longest tributaries, included"): not in the
# reference, entailed by the 4th chunk only.
RIVER_12 = {**RIVER, "answer2response": RIVER["answer2response"] + "N",
            "retrieved2response": RIVER["retrieved2response"] + ["NNNE"]}

# The per-question metrics the current checking_outputs.json records ("metrics" of each result).
RIVER_PRINTED = {"precision": 0.7272727272727273, "recall": 0.5, "claim_recall": 0.22727272727272727,
                 "context_precision": 0.75, "faithfulness": 0.36363636363636365,
                 "noise_sensitivity_in_relevant": 0.18181818181818182, "noise_sensitivity_in_irrelevant": 0.0,
                 "f1": 0.5925925925925926, "hallucination": 0.09090909090909091,
                 "self_knowledge": 0.5454545454545454, "context_utilization": 1.0}
FLAG_PRINTED = {"precision": 0.8, "recall": 0.75, "claim_recall": 1.0, "context_precision": 1.0, "faithfulness": 1.0,
                "noise_sensitivity_in_relevant": 0.2, "noise_sensitivity_in_irrelevant": 0.0,
                "f1": 0.7741935483870969, "hallucination": 0.0, "self_knowledge": 0.0, "context_utilization": 0.75}
# What RAGChecker prints for the two questions (mean over questions x 100, one decimal): README.md's
# Python example output and checking_outputs.json's "metrics" for the current file; README.md's CLI
# example and tutorial/ragchecker_tutorial_en.md for the earlier one.
PRINTED = [76.4, 62.5, 68.3, 61.4, 87.5, 87.5, 19.1, 0.0, 4.5, 27.3, 68.2]
PRINTED_12 = [73.3, 62.5, 67.3, 61.4, 87.5, 87.5, 22.5, 0.0, 4.2, 25.0, 70.8]


def labels_of(checked: dict) -> ClaimLabels:
    def entailed(letters: str) -> list[bool]:
        return [x == "E" for x in letters]

    return ClaimLabels(entailed(checked["answer2response"]), entailed(checked["response2answer"]),
                       [entailed(row) for row in checked["retrieved2response"]],
                       [entailed(row) for row in checked["retrieved2answer"]],
                       n_contexts=len(checked["retrieved2answer"][0]))


def judged(checked: dict) -> tuple[dict, Counting]:
    """claim_diagnostics on stand-in texts, with a judge that returns the recorded verdicts."""
    n_resp, n_ref = len(checked["answer2response"]), len(checked["response2answer"])
    resp = [f"response claim {i}" for i in range(n_resp)]
    ref = [f"reference claim {i}" for i in range(n_ref)]
    chunks = [f"chunk {j}" for j in range(len(checked["retrieved2answer"][0]))]
    recorded = {("REFERENCE", c): x for c, x in zip(resp, checked["answer2response"])}
    recorded |= {("RESPONSE", c): x for c, x in zip(ref, checked["response2answer"])}
    for claims, rows in ((resp, checked["retrieved2response"]), (ref, checked["retrieved2answer"])):
        recorded |= {(chunk, c): x for c, row in zip(claims, rows) for chunk, x in zip(chunks, row)}
    judge = Counting(lambda p, h: recorded[p, h] == "E")
    return claim_diagnostics(resp, ref, "RESPONSE", "REFERENCE", chunks, judge), judge


def ragchecker_print(per_question: list[dict]) -> list[float]:
    return [round(sum(d[m] for d in per_question) / len(per_question) * 100, 1) for m in METRICS]


def test_ragchecker_example_per_question_through_a_judge():
    for checked, printed in ((RIVER, RIVER_PRINTED), (FLAG, FLAG_PRINTED)):
        d, judge = judged(checked)
        assert {m: d[m] for m in METRICS} == pytest.approx(printed, abs=1e-12)
        assert d["undefined"] == {} and d["undecided"] == 0
        assert len(judge.calls) == 1


def test_ragchecker_example_printed_figures():
    assert ragchecker_print([judged(RIVER)[0], judged(FLAG)[0]]) == PRINTED
    per_question = [diagnostics_from_labels(labels_of(c)) for c in (RIVER_12, FLAG)]
    assert ragchecker_print(per_question) == PRINTED_12
    # result.txt of that version printed f1 67.5: the tool then took the harmonic mean of the averaged
    # precision and recall instead of averaging each question's f1.
    p, r = (sum(d[m] for d in per_question) / 2 for m in ("precision", "recall"))
    assert round(2 * p * r / (p + r) * 100, 1) == 67.5


def test_incorrect_claim_in_relevant_and_irrelevant_chunks_is_relevant_noise_only():
    # The example has no such claim, so its printed irrelevant noise (0.0) cannot tell computation.py's
    # exclusive split from Appendix B's formula read alone, which counts this claim as irrelevant noise too.
    labels = ClaimLabels([False], [True], [[True, True]], [[True, False]], n_contexts=2)
    d = diagnostics_from_labels(labels)  # chunk 0 relevant, chunk 1 irrelevant; the wrong claim is in both
    assert (d["noise_sensitivity_in_relevant"], d["noise_sensitivity_in_irrelevant"]) == (1.0, 0.0)


# ---------------------------------------------------------------------------------------------
# 2. A brute-force reading of the paper's formulas (Appendix B), against the implementation.


def brute_force(lab: ClaimLabels) -> dict:
    """Appendix B's set formulas, one set at a time; NaN where the denominator is empty."""
    R, G, k = range(len(lab.response_correct)), range(len(lab.reference_covered)), lab.n_contexts
    chunks = range(k)

    def ratio(numerator: list, denominator) -> float:
        return len(numerator) / len(denominator) if len(denominator) else NAN

    def entailed_in(row, some_chunks) -> bool:  # c ∈ {chunk_j : j in some_chunks}
        return any(row[j] for j in some_chunks)

    correct = [i for i in R if lab.response_correct[i]]  # c(m) ∈ gt
    covered = [i for i in G if lab.reference_covered[i]]  # c(gt) ∈ m
    relevant = [j for j in chunks if any(lab.reference_in_chunks[i][j] for i in G)]  # r-chunk: ∃i c(gt)_i ∈ chunk_j
    irrelevant = [j for j in chunks if j not in relevant]
    resp, ref = lab.response_in_chunks, lab.reference_in_chunks

    faithful = [i for i in R if entailed_in(resp[i], chunks)]
    relevant_noise = [i for i in R if i not in correct and entailed_in(resp[i], relevant)]
    # computation.py keeps the noise types apart: a claim in a relevant chunk too is relevant noise only
    irrelevant_noise = [i for i in R if i not in correct and entailed_in(resp[i], irrelevant) and i not in relevant_noise]
    hallucinated = [i for i in R if i not in correct and not entailed_in(resp[i], chunks)]
    self_known = [i for i in R if i in correct and not entailed_in(resp[i], chunks)]
    recalled = [i for i in G if entailed_in(ref[i], chunks)]
    used = [i for i in recalled if i in covered]

    p, r = ratio(correct, R), ratio(covered, G)
    f1 = NAN if math.isnan(p) or math.isnan(r) else (2 * p * r / (p + r) if p + r else 0.0)
    return {"precision": p, "recall": r, "f1": f1, "claim_recall": ratio(recalled, G),
            "context_precision": ratio(relevant, chunks), "context_utilization": ratio(used, recalled),
            "noise_sensitivity_in_relevant": ratio(relevant_noise, R),
            "noise_sensitivity_in_irrelevant": ratio(irrelevant_noise, R),
            "hallucination": ratio(hallucinated, R), "self_knowledge": ratio(self_known, R),
            "faithfulness": ratio(faithful, R)}


@st.composite
def boolean_labels(draw) -> ClaimLabels:
    n_resp, n_ref, k = draw(st.integers(0, 6)), draw(st.integers(0, 6)), draw(st.integers(0, 4))

    def flags(n: int) -> list[bool]:
        return draw(st.lists(st.booleans(), min_size=n, max_size=n))

    return ClaimLabels(flags(n_resp), flags(n_ref), [flags(k) for _ in range(n_resp)],
                       [flags(k) for _ in range(n_ref)], n_contexts=k)


@settings(max_examples=400, deadline=None)
@given(boolean_labels())
def test_matches_brute_force_on_random_labels(labels):
    got, want = diagnostics_from_labels(labels), brute_force(labels)
    assert all(same(got[m], want[m]) for m in METRICS), {m: (got[m], want[m]) for m in METRICS}
    assert set(got["undefined"]) == {m for m in METRICS if math.isnan(want[m])}
    if labels.response_correct:  # every response claim lands in exactly one cell of the paper's Figure 1
        assert got["noise_sensitivity_in_relevant"] + got["noise_sensitivity_in_irrelevant"] + got["hallucination"] \
            == pytest.approx(1 - got["precision"])
        assert got["faithfulness"] + got["hallucination"] + got["self_knowledge"] == pytest.approx(1)


def _with_unknowns(labels: ClaimLabels, positions: list[int]) -> ClaimLabels:
    """`labels` with the labels at these flat positions (correct, covered, then both matrices by row) unknown."""
    rows = [list(labels.response_correct), list(labels.reference_covered),
            *map(list, labels.response_in_chunks), *map(list, labels.reference_in_chunks)]
    cells = [(r, c) for r, row in enumerate(rows) for c in range(len(row))]
    for p in positions:
        r, c = cells[p % len(cells)]
        rows[r][c] = None
    n_resp = len(labels.response_correct)
    return ClaimLabels(rows[0], rows[1], rows[2:2 + n_resp], rows[2 + n_resp:], n_contexts=labels.n_contexts)


def _completions(labels: ClaimLabels):
    """Every way of deciding the unknown labels."""
    rows = [labels.response_correct, labels.reference_covered, *labels.response_in_chunks, *labels.reference_in_chunks]
    unknown = [(r, c) for r, row in enumerate(rows) for c, v in enumerate(row) if v is None]
    for values in itertools.product([True, False], repeat=len(unknown)):
        filled = [list(row) for row in rows]
        for (r, c), v in zip(unknown, values):
            filled[r][c] = v
        n_resp = len(labels.response_correct)
        yield ClaimLabels(filled[0], filled[1], filled[2:2 + n_resp], filled[2 + n_resp:], n_contexts=labels.n_contexts)


@settings(max_examples=150, deadline=None)
@given(boolean_labels(), st.lists(st.integers(0, 10_000), max_size=4))
def test_undecided_labels_never_push_a_metric_outside_what_deciding_them_could_give(labels, positions):
    if not positions or not (labels.response_correct or labels.reference_covered):
        return
    partial = _with_unknowns(labels, positions)
    got = diagnostics_from_labels(partial)
    outcomes = [brute_force(full) for full in _completions(partial)]
    for m in METRICS:
        if math.isnan(got[m]):
            continue
        values = [o[m] for o in outcomes]
        assert min(values) - 1e-12 <= got[m] <= max(values) + 1e-12, (m, got[m], values)


# ---------------------------------------------------------------------------------------------
# 3. NaN policy, undecided verdicts, one batch.


def test_no_response_claims():
    d = diagnostics_from_labels(ClaimLabels([], [True, False], [], [[True], [False]], n_contexts=1))
    response_side = {"precision", "f1", "noise_sensitivity_in_relevant", "noise_sensitivity_in_irrelevant",
                     "hallucination", "self_knowledge", "faithfulness"}
    assert set(d["undefined"]) == response_side
    assert d["undefined"]["precision"] == "no response claims"
    assert d["undefined"]["f1"] == "precision or recall is undefined"
    assert (d["recall"], d["claim_recall"], d["context_precision"], d["context_utilization"]) == (0.5, 0.5, 1.0, 1.0)


def test_no_reference_claims():
    # claim 0 is correct and in chunk 0; claim 1 is wrong and in chunk 1: with no reference claims every chunk is irrelevant
    d = diagnostics_from_labels(ClaimLabels([True, False], [], [[True, False], [False, True]], [], n_contexts=2))
    assert set(d["undefined"]) == {"recall", "f1", "claim_recall", "context_utilization"}
    assert all(d["undefined"][m] == "no reference claims" for m in ("recall", "claim_recall", "context_utilization"))
    assert d["context_precision"] == 0.0  # 0 of 2 chunks relevant: 0 by construction, as the formula gives
    assert (d["noise_sensitivity_in_relevant"], d["noise_sensitivity_in_irrelevant"]) == (0.0, 0.5)


def test_no_contexts():
    d = diagnostics_from_labels(ClaimLabels([True, True, False], [True, False], [[], [], []], [[], []], n_contexts=0))
    assert d["undefined"] == {"context_precision": "no contexts", "context_utilization": "no contexts"}
    assert (d["claim_recall"], d["faithfulness"]) == (0.0, 0.0)
    assert d["self_knowledge"] == pytest.approx(2 / 3) == pytest.approx(d["precision"])  # every claim is in no chunk
    assert d["hallucination"] == pytest.approx(1 / 3)
    assert d["noise_sensitivity_in_relevant"] == d["noise_sensitivity_in_irrelevant"] == 0.0


def test_no_relevant_context():
    d = diagnostics_from_labels(ClaimLabels([False], [True], [[True]], [[False]], n_contexts=1))
    assert d["undefined"] == {"context_utilization": "no reference claim is entailed by any context (no relevant context)"}
    assert (d["context_precision"], d["noise_sensitivity_in_relevant"], d["noise_sensitivity_in_irrelevant"]) == (0.0, 0.0, 1.0)


def test_precision_and_recall_zero_give_f1_zero_not_nan():
    d = diagnostics_from_labels(ClaimLabels([False], [False], [[False]], [[False]], n_contexts=1))
    assert (d["precision"], d["recall"], d["f1"]) == (0.0, 0.0, 0.0)


def test_undecided_verdicts_are_left_out():
    # response claim 0 correct, in chunk 0 (relevant); claim 1 correctness unknown, in chunk 1 unknown
    labels = ClaimLabels([True, None], [True], [[True, False], [False, None]], [[True, False]], n_contexts=2)
    d = diagnostics_from_labels(labels)
    assert d["undecided"] == 2
    assert d["precision"] == 1.0  # claim 1 left out
    assert d["faithfulness"] == 1.0  # claim 1: not in chunk 0, unknown for chunk 1 -> left out
    assert d["hallucination"] == 0.0 and d["self_knowledge"] == 0.0
    # a True for one chunk decides "in a chunk" whatever the others say
    d = diagnostics_from_labels(ClaimLabels([True], [True], [[None, True]], [[True, None]], n_contexts=2))
    assert (d["faithfulness"], d["claim_recall"], d["context_utilization"]) == (1.0, 1.0, 1.0)
    assert d["context_precision"] == 1.0  # chunk 1's relevance is unknown: left out
    # reference claim 1 is known to be missing from the response, but not whether a chunk holds it: left out
    d = diagnostics_from_labels(ClaimLabels([], [True, False], [], [[True, False], [False, None]], n_contexts=2))
    assert (d["context_utilization"], d["claim_recall"]) == (1.0, 1.0)
    d = diagnostics_from_labels(ClaimLabels([], [False], [], [[None]], n_contexts=1))
    assert d["undefined"]["context_utilization"] == "no reference claim is known to be in a context (undecided verdicts)"
    d = diagnostics_from_labels(ClaimLabels([None, None], [True], [[True], [True]], [[True]], n_contexts=1))
    assert math.isnan(d["precision"]) and d["undefined"]["precision"] == "all 2 labels it counts are undecided"
    assert d["faithfulness"] == 1.0


def test_all_checks_in_one_batch_each_pair_once_and_the_same_batch_on_a_rerun():
    judge = Counting(lambda p, h: h in p)
    args = (["returns 422", "shows a toast"], ["returns 422", "lists errors"], "It returns 422 and shows a toast.",
            "It returns 422 and lists errors.", ["Login returns 422.", "Errors: lists errors in red."], judge)
    first = claim_diagnostics(*args)
    assert len(judge.calls) == 1
    # 2 + 2 claim checks, and (2 + 2 claims) x 2 chunks less the shared claim's 2 repeats
    assert len(judge.calls[0]) == 2 + 2 + 4 * 2 - 2 == len(set(judge.calls[0]))
    assert claim_diagnostics(*args) == first and judge.calls[1] == judge.calls[0]  # same keys: a cache answers all


def test_no_judge_call_when_there_is_nothing_to_check():
    judge = Counting(lambda p, h: True)
    d = claim_diagnostics([], [], "答", "参考", ["上下文"], judge)
    assert judge.calls == [] and set(d["undefined"]) == set(METRICS) - {"context_precision"}
    assert d["context_precision"] == 0.0


def test_judge_returning_the_wrong_number_of_verdicts_is_an_error():
    class Short:
        def judge(self, pairs):
            return [Verdict(True)] * (len(pairs) - 1)

    with pytest.raises(ValueError, match="verdicts for"):
        judge_claims(["a"], ["b"], "a", "b", ["ab"], Short())


def test_labels_are_checked():
    with pytest.raises(ValueError, match="one per context"):
        ClaimLabels([True], [], [[True]], [], n_contexts=2)
    with pytest.raises(ValueError, match="rows"):
        ClaimLabels([True, False], [], [[True]], [], n_contexts=1)
    with pytest.raises(ValueError, match="True, False or None"):
        ClaimLabels(["Entailment"], [], [[True]], [], n_contexts=1)


# ---------------------------------------------------------------------------------------------
# 4. Chinese and English alike: the judge decides entailment, nothing assumes spaces or ASCII.

ZH = {
    "response_claims": ["登录失败返回422", "账号锁定15分钟", "前端弹出提示框"],
    "reference_claims": ["登录失败返回422", "错误以红色列表显示"],
    "response": "登录失败返回422；账号锁定15分钟；前端弹出提示框。",
    "reference": "登录失败返回422，错误以红色列表显示。",
    "contexts": ["接口文档：登录失败返回422。", "安全策略：账号锁定15分钟。", "前端规范：错误以红色列表显示。"],
}
EN = {
    "response_claims": ["login failure returns 422", "the account locks for 15 minutes", "a toast pops up"],
    "reference_claims": ["login failure returns 422", "errors are listed in red"],
    "response": "login failure returns 422; the account locks for 15 minutes; a toast pops up.",
    "reference": "login failure returns 422, and errors are listed in red.",
    "contexts": ["API: login failure returns 422.", "Security: the account locks for 15 minutes.",
              "UI: errors are listed in red."],
}


@pytest.mark.parametrize("case", [ZH, EN], ids=["zh", "en"])
def test_chinese_and_english_give_the_same_diagnostics(case):
    d = claim_diagnostics(**case, judge=SUBSTRING)
    # response claims: 422 correct, in chunk 0 (relevant); lock-out wrong, in chunk 1 (irrelevant); toast wrong, in none
    # reference claims: 422 covered, in chunk 0; red list not covered, in chunk 2 -> chunks 0 and 2 relevant
    assert {m: d[m] for m in METRICS} == pytest.approx({
        "precision": 1 / 3, "recall": 1 / 2, "f1": 2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2),
        "claim_recall": 1.0, "context_precision": 2 / 3, "context_utilization": 1 / 2,
        "noise_sensitivity_in_relevant": 0.0, "noise_sensitivity_in_irrelevant": 1 / 3, "hallucination": 1 / 3,
        "self_knowledge": 0.0, "faithfulness": 2 / 3})
    assert d["undefined"] == {} and d["undecided"] == 0


def test_mixed_scripts_and_no_spaces_within_one_answer():
    d = claim_diagnostics(["返回422", "HTTP 422"], ["返回422"], "返回422（HTTP 422）", "返回422", ["文档：返回422"], SUBSTRING)
    assert (d["precision"], d["recall"], d["faithfulness"], d["self_knowledge"]) == (0.5, 1.0, 0.5, 0.0)
    assert d["hallucination"] == 0.5
