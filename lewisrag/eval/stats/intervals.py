"""Intervals for a rate: how far the true failure rate can be from the one observed.

Every function is a thin, documented layer over scipy or statsmodels, so the numbers can be checked
against those libraries. Scores arrive as plain Python lists; a NaN score (a metric that could not
be computed, e.g. faithfulness of an answer with no statements) is counted apart and never averaged.

The reference chapter's numbers (docs/architecture.md, docs/statistics.md), checkable by hand:

>>> [round(x, 3) for x in proportion_interval(3, 100)]                 # Wilson, two-sided 95%
[0.01, 0.085]
>>> round(proportion_interval(3, 100, side="upper")[1], 3)              # one-sided 95% upper bound
0.073
>>> round(proportion_interval(3, 100, method="exact", side="upper")[1], 3)
0.076
>>> round(proportion_interval(0, 10, method="exact", side="upper")[1], 3)   # 10/10 correct: 1 - 0.05**(1/10)
0.259
"""

from __future__ import annotations

from lewisrag.eval.stats.checks import check_confidence, check_count, resample_batch


def proportion_interval(
    k: int, n: int, confidence: float = 0.95, method: str = "wilson", side: str = "two"
) -> tuple[float, float]:
    """Interval for a proportion `k / n`.

    method: "wilson" (score interval) or "exact" (Clopper–Pearson, from the beta distribution).
    side: "two" for a two-sided interval at `confidence`; "upper" for the one-sided upper bound at
    `confidence`, returned as `(0.0, upper)` — the number a gate like "rate ≤ 5%" must compare.
    With `n == 0` nothing is known and the interval is `(0.0, 1.0)`. `k` and `n` are integers (numpy's
    too); a float or a bool is a ValueError.

    >>> proportion_interval(0, 0)
    (0.0, 1.0)
    """
    # statsmodels (~2 s) loads on first use: every evaluator run imports lewisrag.eval.stats, for score_distribution only
    from statsmodels.stats.proportion import proportion_confint

    check_confidence(confidence)
    check_count(k, "k")
    check_count(n, "n")
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if method not in ("wilson", "exact"):
        raise ValueError(f"method must be 'wilson' or 'exact', got {method!r}")
    if side not in ("two", "upper"):
        raise ValueError(f"side must be 'two' or 'upper', got {side!r}")
    if n == 0:
        return 0.0, 1.0
    if side == "two":
        sm_method = "wilson" if method == "wilson" else "beta"
        low, high = proportion_confint(k, n, alpha=1.0 - confidence, method=sm_method)
        # Wilson's bounds at k = 0 and k = n are 0 and 1 exactly; statsmodels' rounding gave 5.6e-17 and
        # 0.9999999999999999, an interval without the observed rate in it
        low = 0.0 if k == 0 else max(float(low), 0.0)
        high = 1.0 if k == n else min(float(high), 1.0)
        return low, high
    return 0.0, min(upper_bound(k, n, confidence, method), 1.0)


def sample_size_for_upper_bound(
    observed_rate: float, target: float, confidence: float = 0.95, method: str = "wilson", max_n: int = 10**9
) -> int | None:
    """Smallest n whose one-sided upper bound, at `observed_rate`, is ≤ `target`: None if never (the rate
    is not below the target) or not within `max_n` questions (a rate just below it).

    Answers "how many questions would prove the rate ≤ target if the rate stays what we saw".
    The count `observed_rate * n` is allowed to be fractional so the answer is smooth in n.

    >>> sample_size_for_upper_bound(0.0, 0.05, method="exact")     # zero failures: 1 - 0.05**(1/n) <= 5%
    59
    >>> sample_size_for_upper_bound(0.06, 0.05) is None            # observed above the target: never
    True
    """
    check_confidence(confidence)
    if not 0.0 <= observed_rate <= 1.0 or not 0.0 < target <= 1.0:
        raise ValueError(f"need rates in [0, 1] and target > 0, got {observed_rate}, {target}")
    if observed_rate >= target:
        return None

    def ok(n: int) -> bool:
        return upper_bound(observed_rate * n, n, confidence, method) <= target

    hi = 1
    while not ok(hi):  # the bound shrinks towards observed_rate as n grows, so doubling finds a bracket
        hi *= 2
        if hi > max_n:
            return None
    lo = hi // 2  # ok(lo) is False (or lo == 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def upper_bound(count: float, n: int, confidence: float, method: str) -> float:
    # statsmodels loads on first use, as in proportion_interval
    from statsmodels.stats.proportion import proportion_confint

    if method not in ("wilson", "exact"):
        raise ValueError(f"method must be 'wilson' or 'exact', got {method!r}")
    if confidence <= 0.5:
        raise ValueError(f"a one-sided upper bound needs confidence > 0.5, got {confidence}")
    if count >= n:  # both bounds are 1 here; Wilson's rounded to 0.9999999999999999, below the observed rate
        return 1.0
    # statsmodels accepts a fractional count; one-sided at 1 - alpha = two-sided at 1 - 2 alpha.
    alpha = 2 * (1.0 - confidence)
    _, high = proportion_confint(count, n, alpha=alpha, method="wilson" if method == "wilson" else "beta")
    return float(high)


def mean_interval(scores, n_resamples: int = 10000, seed: int = 0, confidence: float = 0.95) -> dict:
    """Percentile bootstrap interval of the mean of `scores` (scipy.stats.bootstrap), NaN scores
    left out and counted: {"n", "nan", "mean", "low", "high"}; NaN bounds when fewer than two
    scores are left: one score bounds nothing (its resamples are all itself, and [x, x] read as
    certainty). Identical scores still give [x, x], what the bootstrap says of them: it sees no
    spread, and is overconfident on few questions (docs/statistics.md).

    >>> r = mean_interval([1.0, 1.0, float("nan")])
    >>> r["n"], r["nan"], r["mean"], r["low"], r["high"]
    (2, 1, 1.0, 1.0, 1.0)
    >>> r = mean_interval([0.5])
    >>> r["n"], r["mean"], r["low"], r["high"]
    (1, 0.5, nan, nan)
    """
    import math

    import numpy as np
    from scipy.stats import bootstrap  # loads on first use, as in paired

    check_confidence(confidence)
    x = np.asarray(scores, dtype=float)
    infinite = np.flatnonzero(np.isinf(x))
    if infinite.size:  # an inf mean with a finite low bound, and numpy's warnings, came back
        i = int(infinite[0])
        raise ValueError(f"mean_interval: scores must be finite numbers (or NaN, left out), got scores[{i}] = {x[i]}")
    keep = ~np.isnan(x)
    out = {"n": int(keep.sum()), "nan": int((~keep).sum())}
    values = x[keep]
    mean = float(values.mean()) if values.size else math.nan
    if values.size < 2:
        return out | {"mean": mean, "low": math.nan, "high": math.nan}
    if np.all(values == values[0]):  # every resample has the same mean
        return out | {"mean": mean, "low": mean, "high": mean}
    res = bootstrap((values,), np.mean, n_resamples=n_resamples, confidence_level=confidence, method="percentile",
                    rng=np.random.default_rng(seed), batch=resample_batch(values.size))
    return out | {"mean": mean, "low": float(res.confidence_interval.low), "high": float(res.confidence_interval.high)}
