"""Many tests at once: m checks each at level α fail by chance far more often than α.

Under no change at all, each of 20 independent tests at α = 0.05 has a 5% chance to reject, so at
least one rejects with chance 1 − 0.95²⁰ ≈ 64%. A family-wise correction bounds that chance (the
family-wise error rate) by α again:

- **Holm–Bonferroni** (`holm`) for p-values: sort them, compare the smallest with α/m, the next with
  α/(m − 1), and so on, stopping at the first that is not below its level. It rejects everything
  Bonferroni (each at α/m) rejects, and sometimes more, under any dependence between the tests.
- **Bonferroni** (`bonferroni_confidence`) for intervals: m intervals at confidence 1 − (1 − c)/m
  all hold together with chance at least c. Holm's step-down has no such interval form.
"""

from __future__ import annotations

from collections.abc import Sequence

from lewisrag.eval.stats.checks import check_confidence


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the order given: reject a test when its adjusted p-value is below α.

    With the p-values sorted, p₍₁₎ ≤ … ≤ p₍ₘ₎, the i-th becomes the largest (m − j + 1)·p₍ⱼ₎ over
    j ≤ i, capped at 1, so adjusted p-values keep the order of the raw ones (a test is rejected only
    when every smaller p-value is). Ties keep the order given.

    >>> holm([0.01, 0.04, 0.03])   # 3 × 0.01; 2 × 0.03; 1 × 0.04 raised to 0.06: only the first is below 0.05
    [0.03, 0.06, 0.06]
    >>> holm([0.2])                # one test: nothing to correct
    [0.2]
    """
    for p in pvalues:
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:  # False for NaN
            raise ValueError(f"holm: p-values must be numbers in [0, 1], got {p!r}")
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(pvalues[i])))
        adjusted[i] = running
    return adjusted


def bonferroni_confidence(confidence: float, m: int) -> float:
    """The confidence of each of `m` intervals that all hold together with chance at least `confidence`.

    >>> round(bonferroni_confidence(0.95, 5), 6)    # 1 − 0.05/5
    0.99
    >>> bonferroni_confidence(0.95, 1)
    0.95
    """
    check_confidence(confidence)
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ValueError(f"bonferroni_confidence: need a number of intervals >= 1, got {m!r}")
    return confidence if m == 1 else 1.0 - (1.0 - confidence) / m

