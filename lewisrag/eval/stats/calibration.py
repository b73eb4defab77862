"""Calibrate a judge against human labels before trusting its scores.

Agreement alone hides which way a judge errs. A miss (a fabricated statement judged supported)
lets a hallucination through; a false kill (a supported statement judged unsupported) makes the
gate cry wolf. Both are reported apart with intervals, next to Cohen's κ, and every disagreement is
listed so the error analysis can start from the cases themselves.

Labels are JSON Lines: `{"id": str, "premise": str, "hypothesis": str, "supported": bool}`, with an
optional three-way `"label"` (entailment, neutral, contradiction). Where both the humans and the judge
give one, `three_way` measures them too: the results' contradiction counts (`claims.contradictions`)
need the judge to tell a contradicted statement from one the premise does not address, which
`supported` alone cannot show.
"""

from __future__ import annotations

from collections.abc import Callable

from lewisrag.eval.judges.labels import Label
from lewisrag.eval.stats.agreement import cohen_kappa, judge_confusion


def calibrate(
    judge,
    labels: list[Label],
    batch_size: int = 32,
    confidence: float = 0.95,
    on_batch: Callable[[int], None] | None = None,
) -> dict:
    """Run `judge` (a `name`, a `fingerprint` and `.judge(pairs) -> list[Verdict]`) on the labels and compare.

    Returns the judge as `eval answers` records it (`evaluator.judge_info`: name and fingerprint, and the
    model, checkpoint or labels file and the settings that made the verdicts), `judge_confusion` (κ,
    agreement, miss rate and false-kill rate with Wilson intervals, undecided count) and the
    disagreements, undecided ones included, in label order. `on_batch(n)` is called after each batch
    of n pairs. Where humans and judge both gave three-way labels, "three_way" holds their count,
    agreement and κ, and each pair whose labels differ while `supported` agrees is listed too, of kind
    "label" (neutral against contradiction).

    >>> from lewisrag.eval.judges import FunctionJudge
    >>> labels = [Label("a", "x y", "x", True), Label("b", "x y", "z", False), Label("c", "x", "x z", True)]
    >>> r = calibrate(FunctionJudge(lambda p, h: set(h.split()) <= set(p.split())), labels)
    >>> r["misses"], r["false_kills"], [d["id"] for d in r["disagreements"]]
    (0, 1, ['c'])
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    verdicts = []
    for start in range(0, len(labels), batch_size):
        batch = labels[start:start + batch_size]
        got = judge.judge([(lab.premise, lab.hypothesis) for lab in batch])
        if len(got) != len(batch):
            raise ValueError(f"judge {getattr(judge, 'name', judge)!r} returned {len(got)} verdicts for {len(batch)} pairs")
        verdicts += got
        if on_batch is not None:
            on_batch(len(batch))
    confusion = judge_confusion([lab.supported for lab in labels], [v.supported for v in verdicts], confidence)
    both = [(lab, v) for lab, v in zip(labels, verdicts) if lab.label and getattr(v, "label", None)]
    disagreements = [
        {"id": lab.id, "human": lab.supported, "judge": v.supported, "reason": v.reason,
         "kind": _kind(lab.supported, v.supported), "hypothesis": lab.hypothesis}
        | ({"human_label": lab.label, "judge_label": v.label} if lab.label and getattr(v, "label", None) else {})
        for lab, v in zip(labels, verdicts)
        if v.supported != lab.supported or (lab.label and getattr(v, "label", None) and v.label != lab.label)
    ]
    three_way = {}
    if both:  # read and checked, so measured: a judge that swaps neutral and contradiction was called perfect
        human, judged = [lab.label for lab, _ in both], [v.label for _, v in both]
        three_way = {"three_way": {"n": len(both), "agreement": sum(a == b for a, b in zip(human, judged)) / len(both),
                                   "kappa": _or_none(cohen_kappa(human, judged))}}
    from lewisrag.eval.evaluator import judge_info  # here: the evaluator imports these statistics

    return {
        # a fingerprint alone named no model: two calibrations of llm judges read alike in calibration.json
        "judge": judge_info(judge),
        **confusion,
        **three_way,
        "disagreements": disagreements,
    }


def _or_none(x: float) -> float | None:
    return None if x != x else x  # NaN (chance agreement 1) is no JSON number


def _kind(human: bool, judge: bool | None) -> str:
    if judge is None:
        return "undecided"
    if judge == human:  # the three-way labels differ: neutral against contradiction
        return "label"
    return "false_kill" if human else "miss"
