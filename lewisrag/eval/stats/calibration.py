"""Calibrate a judge against human labels before trusting its scores.

Agreement alone hides which way a judge errs. A miss (a fabricated statement judged supported)
lets a hallucination through; a false kill (a supported statement judged unsupported) makes the
gate cry wolf. Both are reported apart with intervals, next to Cohen's κ, and every disagreement is
listed so the error analysis can start from the cases themselves.

Labels are JSON Lines: `{"id": str, "premise": str, "hypothesis": str, "supported": bool}`.
"""

from __future__ import annotations

from collections.abc import Callable

from lewisrag.eval.judges.labels import Label
from lewisrag.eval.stats.agreement import judge_confusion


def calibrate(
    judge,
    labels: list[Label],
    batch_size: int = 32,
    confidence: float = 0.95,
    on_batch: Callable[[int], None] | None = None,
) -> dict:
    """Run `judge` (anything with `.judge(pairs) -> list[Verdict]`) on the labels and compare.

    Returns the judge's name and fingerprint, `judge_confusion` (κ, agreement, miss rate and
    false-kill rate with Wilson intervals, undecided count) and the disagreements, undecided ones
    included, in label order. `on_batch(n)` is called after each batch of n pairs.

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
    disagreements = [
        {"id": lab.id, "human": lab.supported, "judge": v.supported, "reason": v.reason,
         "kind": _kind(lab.supported, v.supported), "hypothesis": lab.hypothesis}
        for lab, v in zip(labels, verdicts) if v.supported != lab.supported
    ]
    return {
        "judge": {"name": getattr(judge, "name", type(judge).__name__), "fingerprint": getattr(judge, "fingerprint", None)},
        **confusion,
        "disagreements": disagreements,
    }


def _kind(human: bool, judge: bool | None) -> str:
    if judge is None:
        return "undecided"
    return "false_kill" if human else "miss"
