"""RAGChecker's claim-level diagnostics (Ru et al. 2024, arXiv 2408.08067): eleven metrics, one judge call.

Sources: the paper's Sec. 3.3 and Appendix B (formulas), and `ragchecker/computation.py` in
github.com/amazon-science/RAGChecker (what the released tool computes). The metric names are
RAGChecker's.

The judge makes every check in one batch (a pair asked twice is asked once): each response claim
against the reference text ("correct", c ∈ gt), each reference claim against the response
("covered", c ∈ m), and every claim, response and reference alike, against each retrieved context
on its own. A context is *relevant* iff it entails at least one reference claim, *irrelevant*
otherwise. "In a chunk" below means entailed by at least one context.

With R the response claims, G the reference claims and k the number of contexts:

    precision                        |{r in R: correct}| / |R|
    recall                           |{g in G: covered}| / |G|
    f1                               2PR / (P + R), 0 when P = R = 0
    claim_recall                     |{g in G: in a chunk}| / |G|
    context_precision                |{relevant contexts}| / k
    context_utilization              |{g in G: in a chunk and covered}| / |{g in G: in a chunk}|
    noise_sensitivity_in_relevant    |{r in R: not correct, in a relevant chunk}| / |R|
    noise_sensitivity_in_irrelevant  |{r in R: not correct, in an irrelevant chunk, in no relevant one}| / |R|
    hallucination                    |{r in R: not correct, in no chunk}| / |R|
    self_knowledge                   |{r in R: correct, in no chunk}| / |R|
    faithfulness                     |{r in R: in a chunk}| / |R|

"In no relevant one" is computation.py's rule, not Appendix B's formula: an incorrect claim found
in both kinds of context counts as relevant noise only. So every incorrect claim is exactly one of
relevant noise, irrelevant noise or hallucination, and every claim is faithful, hallucinated or
self-knowledge: NS_rel + NS_irr + hallucination = 1 - precision, faithfulness + hallucination +
self_knowledge = 1.

When a metric is NaN: exactly when its denominator is empty (or, for f1, an input is NaN). The
result's `undefined` maps each NaN metric to the reason. computation.py returns 0 instead:

    metric                      NaN here when                             RAGChecker there
    precision                   no response claims                        0
    recall                      no reference claims                       0
    f1                          precision or recall is NaN                0 (as whenever P or R is 0)
    claim_recall                no reference claims                       0
    context_precision           no contexts                               0
    context_utilization         no reference claim is in a chunk (no      0
                                reference claims, no contexts, or no
                                relevant context)
    noise_sensitivity_in_*      no response claims                        0
    hallucination               no response claims                        0
    self_knowledge              no response claims                        0
    faithfulness                no response claims                        0

Where the denominator is not empty the formula holds, which differs from RAGChecker in three more
cases. With no contexts it reports hallucination and self_knowledge as 0; here they are the
incorrect and the correct share (every claim is in no chunk). With no contexts its claim_recall is
the mean of an empty array (NaN and a numpy warning); here it is 0 (no reference claim is in a
chunk). With no reference claims it reports both noise sensitivities as 0; here every context is
irrelevant, so incorrect claims found in a context count as irrelevant noise. Some values are 0 by
construction, not by merit, and are kept as the formula gives them: context_precision with no
reference claims, noise_sensitivity_in_relevant with no relevant context,
noise_sensitivity_in_irrelevant with no irrelevant one.

A verdict the judge could not give (`Verdict(None, reason)`) stays unknown; RAGChecker reads
anything but "Entailment" as not entailed. Unknowns combine by three-valued logic ("in a chunk" is
true if any context entails, false if all decidedly do not, unknown otherwise), and a claim or
context whose place in a metric's count is unknown is left out of numerator and denominator, as in
`metrics.py`. `undecided` counts the unknown labels.

These are one answer's numbers. RAGChecker's printed figures are the mean over answers x 100,
rounded to one decimal; averaging, and skipping NaN, are the caller's.

Three-way labels. The metrics read the binary verdict only (entailed or not), as RAGChecker does.
Where the judge also tells neutral from contradiction (`Verdict.label`), `claim_checks` keeps each
check's label beside its verdict and `contradictions` counts the response claims the reference, or
some context, contradicts: a wrong claim that the evidence says is false, not merely unsupported;
`total_contradictions` sums them over a run's answers for the reports.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

NAN = float("nan")

METRICS = (
    "precision", "recall", "f1", "claim_recall", "context_precision", "context_utilization",
    "noise_sensitivity_in_relevant", "noise_sensitivity_in_irrelevant", "hallucination", "self_knowledge",
    "faithfulness",
)

Label = bool | None  # entailed, not entailed, or unknown (the judge could not decide)

# The metrics that read the reference claims, directly or through which contexts are relevant: when
# the reference claims could not be made (a failed extraction), these are unknown, not computed
# from an empty list (context_precision would read 0 and every context as irrelevant).
REFERENCE_CLAIM_METRICS = ("recall", "f1", "claim_recall", "context_precision", "context_utilization",
                           "noise_sensitivity_in_relevant", "noise_sensitivity_in_irrelevant")


@dataclass(frozen=True)
class ClaimLabels:
    """The entailment labels of one answer. Lists, tuples and numpy arrays are accepted and stored as tuples.

    >>> ClaimLabels([True], [], [[True, None]], [], n_contexts=2).response_in_chunks
    ((True, None),)
    """

    response_correct: Sequence[Label]  # [i]: the reference text entails response claim i
    reference_covered: Sequence[Label]  # [i]: the response entails reference claim i
    response_in_chunks: Sequence[Sequence[Label]]  # [i][j]: context j entails response claim i
    reference_in_chunks: Sequence[Sequence[Label]]  # [i][j]: context j entails reference claim i
    n_contexts: int  # stated, not inferred: with no claims the matrices have no rows to count columns in

    def __post_init__(self):
        if self.n_contexts < 0:
            raise ValueError(f"n_contexts must be >= 0, got {self.n_contexts}")
        for name, claims, matrix in (("response", self.response_correct, self.response_in_chunks),
                                     ("reference", self.reference_covered, self.reference_in_chunks)):
            if len(matrix) != len(claims):
                raise ValueError(f"{name}_in_chunks has {len(matrix)} rows for {len(claims)} {name} claims")
            if any(len(row) != self.n_contexts for row in matrix):
                raise ValueError(f"every row of {name}_in_chunks needs {self.n_contexts} labels, one per context")
        set_ = object.__setattr__  # frozen: normalize once, here
        set_(self, "response_correct", _labels(self.response_correct))
        set_(self, "reference_covered", _labels(self.reference_covered))
        set_(self, "response_in_chunks", tuple(_labels(row) for row in self.response_in_chunks))
        set_(self, "reference_in_chunks", tuple(_labels(row) for row in self.reference_in_chunks))


def _labels(values: Iterable) -> tuple[Label, ...]:
    out = []
    for v in values:
        if v is not None and v not in (True, False):
            raise ValueError(f"a label is True, False or None, got {v!r}")
        out.append(None if v is None else bool(v))
    return tuple(out)


def claim_diagnostics(response_claims: Sequence[str], reference_claims: Sequence[str], response: str,
                      reference: str, contexts: Sequence[str], judge) -> dict:
    """RAGChecker's eleven metrics for one answer, plus `undefined` {metric: reason} and `undecided`.

    >>> from lewisrag.eval.judges import FunctionJudge
    >>> judge = FunctionJudge(lambda premise, hypothesis: hypothesis in premise)
    >>> d = claim_diagnostics(["返回 422", "锁定 15 分钟"], ["返回 422", "红色列表"],
    ...                       response="登录失败返回 422，账号锁定 15 分钟。",
    ...                       reference="登录失败返回 422，错误以红色列表显示。",
    ...                       contexts=["登录失败返回 422。", "账号锁定 15 分钟。"], judge=judge)
    >>> {m: d[m] for m in ("precision", "context_precision", "noise_sensitivity_in_irrelevant", "faithfulness")}
    {'precision': 0.5, 'context_precision': 0.5, 'noise_sensitivity_in_irrelevant': 0.5, 'faithfulness': 1.0}
    """
    return diagnostics_from_labels(judge_claims(response_claims, reference_claims, response, reference, contexts, judge))


def check_texts(texts: Sequence[str], name: str) -> None:
    """`texts` is a list or tuple of strings, else a TypeError naming `name`: a str was judged one
    character at a time ("ab" as the claims "a" and "b"), a generator was used up by the first reader."""
    if not isinstance(texts, (list, tuple)):
        raise TypeError(f"{name}: expected a list of strings, got {texts!r}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{name}[{i}]: expected a string, got {text!r}")


def claim_pairs(response_claims: Sequence[str], reference_claims: Sequence[str], response: str,
                reference: str | None, contexts: Sequence[str]) -> list[tuple[str, str]]:
    """Every (premise, claim) pair RAGChecker's metrics read: response claims against the reference,
    reference claims against the response, and every claim against each context on its own; with
    no reference (None), only the claims against the contexts.

    >>> claim_pairs(["a"], ["b"], "R", None, ["c1"])
    [('c1', 'a'), ('c1', 'b')]
    """
    check_texts(response_claims, "response_claims")
    check_texts(reference_claims, "reference_claims")
    check_texts(contexts, "contexts")
    if not isinstance(response, str):
        raise TypeError(f"response: expected a string, got {response!r}")
    if reference is not None and not isinstance(reference, str):
        raise TypeError(f"reference: expected a string or None, got {reference!r}")
    in_contexts = [(ctx, c) for c in [*response_claims, *reference_claims] for ctx in contexts]
    if reference is None:
        return in_contexts
    return [(reference, c) for c in response_claims] + [(response, c) for c in reference_claims] + in_contexts


def judge_claims(response_claims: Sequence[str], reference_claims: Sequence[str], response: str, reference: str,
                 contexts: Sequence[str], judge) -> ClaimLabels:
    """Every (premise, claim) check RAGChecker needs, in one batched judge call; nothing asked twice."""
    verdicts = claim_verdicts(response_claims, reference_claims, response, reference, contexts, judge)
    return labels_from_verdicts(verdicts, response_claims, reference_claims, response, reference, contexts)


def claim_verdicts(response_claims: Sequence[str], reference_claims: Sequence[str], response: str,
                   reference: str | None, contexts: Sequence[str], judge) -> dict:
    """{(premise, claim): Verdict} for every pair of `claim_pairs`, in one judge call, each pair once."""
    pairs = list(dict.fromkeys(claim_pairs(response_claims, reference_claims, response, reference, contexts)))
    verdicts = judge.judge(pairs) if pairs else []
    if len(verdicts) != len(pairs):
        raise ValueError(f"judge returned {len(verdicts)} verdicts for {len(pairs)} pairs")
    return dict(zip(pairs, verdicts))


def labels_from_verdicts(verdicts: dict, response_claims: Sequence[str], reference_claims: Sequence[str],
                         response: str, reference: str | None, contexts: Sequence[str]) -> ClaimLabels:
    """The binary labels the metrics read; with no reference (None) correctness is unknown."""
    return ClaimLabels(
        response_correct=[None if reference is None else verdicts[reference, c].supported for c in response_claims],
        reference_covered=[verdicts[response, c].supported for c in reference_claims],
        response_in_chunks=[[verdicts[ctx, c].supported for ctx in contexts] for c in response_claims],
        reference_in_chunks=[[verdicts[ctx, c].supported for ctx in contexts] for c in reference_claims],
        n_contexts=len(contexts),
    )


def claim_checks(verdicts: dict, response_claims: Sequence[str], reference_claims: Sequence[str], response: str,
                 reference: str | None, contexts: Sequence[str]) -> dict:
    """Each claim's checks as written to results.json: the verdict (true, false or null: undecided or,
    for correctness without a reference, not asked) and the three-way label (null where the judge gives none);
    a claim with an undecided check also has the first such check's `reason` (what a null alone never said).

        {"response":  [{"correct", "correct_label", "in_contexts": [...], "in_contexts_labels": [...]}, ...],
         "reference": [{"covered", "covered_label", "in_contexts": [...], "in_contexts_labels": [...]}, ...]}

    >>> from lewisrag.eval.judges import Verdict
    >>> v = {("ref", "a"): Verdict(False, "", "contradiction"), ("c1", "a"): Verdict(True, "", "entailment")}
    >>> claim_checks(v, ["a"], [], "resp", "ref", ["c1"])["response"]
    [{'correct': False, 'correct_label': 'contradiction', 'in_contexts': [True], 'in_contexts_labels': ['entailment']}]
    >>> claim_checks({("c1", "a"): Verdict(None, "no label")}, ["a"], [], "resp", None, ["c1"])["response"][0]["reason"]
    'no label'
    """
    def row(key: str, premise: str | None, claim: str) -> dict:
        first = verdicts[premise, claim] if premise is not None else None
        in_ctx = [verdicts[ctx, claim] for ctx in contexts]
        out = {key: first.supported if first else None, f"{key}_label": first.label if first else None,
               "in_contexts": [v.supported for v in in_ctx], "in_contexts_labels": [v.label for v in in_ctx]}
        undecided = [v for v in (first, *in_ctx) if v is not None and v.supported is None]
        if undecided:
            out["reason"] = undecided[0].reason
        return out

    return {"response": [row("correct", reference, c) for c in response_claims],
            "reference": [row("covered", response, c) for c in reference_claims]}


def contradictions(checks: dict) -> dict | None:
    """How many response claims the evidence contradicts, from `claim_checks`' three-way labels; None
    when no check has a label (a judge that cannot tell neutral from contradiction).

        by_reference       response claims whose check against the reference is labelled contradiction
        labelled           response claims whose check against the reference has a label
        by_reference_rate  by_reference / labelled (null when nothing is labelled)
        by_a_context       response claims some retrieved context contradicts

    >>> contradictions({"response": [{"correct_label": "contradiction", "in_contexts_labels": ["neutral"]},
    ...                              {"correct_label": "neutral", "in_contexts_labels": ["contradiction"]}], "reference": []})
    {'by_reference': 1, 'labelled': 2, 'by_reference_rate': 0.5, 'by_a_context': 1}
    """
    rows = checks["response"]
    every = [r["correct_label"] for r in rows] + [lab for r in rows for lab in r["in_contexts_labels"]]
    every += [lab for r in checks["reference"] for lab in [r["covered_label"], *r["in_contexts_labels"]]]
    if all(lab is None for lab in every):
        return None
    labelled = sum(r["correct_label"] is not None for r in rows)
    by_reference = sum(r["correct_label"] == "contradiction" for r in rows)
    return {"by_reference": by_reference, "labelled": labelled,
            "by_reference_rate": by_reference / labelled if labelled else None,
            "by_a_context": sum("contradiction" in r["in_contexts_labels"] for r in rows)}


def total_contradictions(counts: Sequence[dict]) -> dict:
    """`contradictions` of several answers summed (a run's or a system's), with how many answers were
    counted and how many hold a contradicted claim; the rate is the pooled one, claims over claims.

    >>> total_contradictions([{"by_reference": 1, "labelled": 2, "by_reference_rate": 0.5, "by_a_context": 0},
    ...                       {"by_reference": 0, "labelled": 2, "by_reference_rate": 0.0, "by_a_context": 1}])
    {'by_reference': 1, 'labelled': 4, 'by_reference_rate': 0.25, 'by_a_context': 1, 'answers': 2, 'answers_contradicted': 2}
    """
    by_reference, labelled = sum(c["by_reference"] for c in counts), sum(c["labelled"] for c in counts)
    return {"by_reference": by_reference, "labelled": labelled,
            "by_reference_rate": by_reference / labelled if labelled else None,
            "by_a_context": sum(c["by_a_context"] for c in counts), "answers": len(counts),
            "answers_contradicted": sum(bool(c["by_reference"] or c["by_a_context"]) for c in counts)}


def diagnostics_from_labels(labels: ClaimLabels) -> dict:
    """The eleven metrics from labels alone (no judge), with `undefined` and `undecided`.

    >>> d = diagnostics_from_labels(ClaimLabels([], [True], [], [[True]], n_contexts=1))
    >>> d["recall"], d["context_utilization"], d["precision"], d["undefined"]["precision"]
    (1.0, 1.0, nan, 'no response claims')
    """
    k = labels.n_contexts
    relevant = [_any(row[j] for row in labels.reference_in_chunks) for j in range(k)]
    in_chunk = [_any(row) for row in labels.response_in_chunks]
    in_relevant = [_any(_and(relevant[j], row[j]) for j in range(k)) for row in labels.response_in_chunks]
    in_irrelevant = [_any(_and(_not(relevant[j]), row[j]) for j in range(k)) for row in labels.response_in_chunks]
    correct = labels.response_correct
    incorrect = [_not(c) for c in correct]
    recalled = [_any(row) for row in labels.reference_in_chunks]

    no_response, no_reference = "no response claims", "no reference claims"
    shares = {
        "precision": _share(correct, no_response),
        "recall": _share(labels.reference_covered, no_reference),
        "claim_recall": _share(recalled, no_reference),
        "context_precision": _share(relevant, "no contexts"),
        "context_utilization": _share([cov for cov, rec in zip(labels.reference_covered, recalled) if rec is True],
                                      _why_nothing_recalled(labels, recalled)),
        "noise_sensitivity_in_relevant": _share([_and(bad, rel) for bad, rel in zip(incorrect, in_relevant)],
                                                no_response),
        "noise_sensitivity_in_irrelevant": _share(
            [_and(bad, _and(irr, _not(rel))) for bad, irr, rel in zip(incorrect, in_irrelevant, in_relevant)],
            no_response),
        "hallucination": _share([_and(bad, _not(f)) for bad, f in zip(incorrect, in_chunk)], no_response),
        "self_knowledge": _share([_and(ok, _not(f)) for ok, f in zip(correct, in_chunk)], no_response),
        "faithfulness": _share(in_chunk, no_response),
    }
    shares["f1"] = _f1(shares["precision"][0], shares["recall"][0])
    out = {m: shares[m][0] for m in METRICS}
    out["undefined"] = {m: shares[m][1] for m in METRICS if shares[m][1] is not None}
    out["undecided"] = sum(v is None for v in _all_labels(labels))
    return out


def _any(labels: Iterable[Label]) -> Label:
    """Three-valued OR: True if one is True, False if all are False (or there are none), else unknown."""
    labels = list(labels)
    if any(v is True for v in labels):
        return True
    return None if any(v is None for v in labels) else False


def _and(a: Label, b: Label) -> Label:
    """Three-valued AND: False if either is False, True if both are True, else unknown."""
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _not(a: Label) -> Label:
    return None if a is None else not a


def _share(flags: Sequence[Label], empty: str) -> tuple[float, str | None]:
    """(share of True among the known flags, None), or (NaN, why) when there are none to count."""
    known = [f for f in flags if f is not None]
    if not flags:
        return NAN, empty
    if not known:
        return NAN, f"all {len(flags)} labels it counts are undecided"
    return sum(known) / len(known), None


def _f1(precision: float, recall: float) -> tuple[float, str | None]:
    if math.isnan(precision) or math.isnan(recall):
        return NAN, "precision or recall is undefined"
    if precision + recall == 0:
        return 0.0, None
    return 2 * precision * recall / (precision + recall), None


def _why_nothing_recalled(labels: ClaimLabels, recalled: Sequence[Label]) -> str:
    """Why context_utilization's denominator (reference claims in a chunk) is empty."""
    if not labels.reference_covered:
        return "no reference claims"
    if labels.n_contexts == 0:
        return "no contexts"
    if any(r is None for r in recalled):
        return "no reference claim is known to be in a context (undecided verdicts)"
    return "no reference claim is entailed by any context (no relevant context)"


def _all_labels(labels: ClaimLabels) -> Iterable[Label]:
    yield from labels.response_correct
    yield from labels.reference_covered
    for row in (*labels.response_in_chunks, *labels.reference_in_chunks):
        yield from row
