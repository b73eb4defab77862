"""Paired comparisons of two systems on the same questions: McNemar's test, a paired bootstrap."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from lewisrag.eval.stats.checks import check_confidence, check_paired


def mcnemar(
    a_correct: Sequence[bool], b_correct: Sequence[bool], method: str = "exact", alternative: str = "two-sided"
) -> dict:
    """McNemar's test for two systems judged on the same questions.

    b = questions A gets right and B gets wrong, c = the reverse; only these discordant pairs count.
    method: "exact" (binomial test of b against Binomial(b + c, 1/2)), "chi2" (chi-square with
    continuity correction), or "auto" (exact below 25 discordant pairs, chi-square above).
    alternative: "two-sided", "greater" (B is worse: b > c) or "less" (B is better); one-sided
    tests are exact.

    >>> r = mcnemar([True] * 5 + [False] * 5, [False] * 5 + [False] * 5)
    >>> r["b"], r["c"], r["pvalue"]                       # 2 * 0.5**5
    (5, 0, 0.0625)
    >>> mcnemar([True] * 5, [False] * 5, alternative="greater")["pvalue"]
    0.03125
    """
    # scipy (~1 s) loads on first use: every evaluator run imports lewisrag.eval.stats, for score_distribution only
    from scipy.stats import binomtest, chi2

    check_paired(a_correct, b_correct, "mcnemar")
    if method not in ("exact", "chi2", "auto"):
        raise ValueError(f"method must be 'exact', 'chi2' or 'auto', got {method!r}")
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative must be 'two-sided', 'greater' or 'less', got {alternative!r}")
    a = np.asarray(a_correct, dtype=bool)
    b_ = np.asarray(b_correct, dtype=bool)
    b, c = int(np.sum(a & ~b_)), int(np.sum(~a & b_))
    if method == "auto":
        method = "exact" if b + c < 25 else "chi2"
    if alternative != "two-sided":
        method = "exact"
    if b + c == 0:
        return {"pvalue": 1.0, "b": b, "c": c, "method": method}
    if method == "exact":
        pvalue = binomtest(b, b + c, 0.5, alternative=alternative).pvalue
    else:  # the continuity correction moves |b - c| towards 0, never past it: statsmodels' squared
        # |b - c| - 1 = -1 gave b = c, no difference at all, p = 0.48 at b = c = 1
        pvalue = chi2.sf(max(abs(b - c) - 1, 0) ** 2 / (b + c), df=1)
    return {"pvalue": float(min(pvalue, 1.0)), "b": b, "c": c, "method": method}


def paired_bootstrap(
    a_scores: Sequence[float],
    b_scores: Sequence[float],
    n_resamples: int = 10000,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict:
    """Bootstrap of the mean difference `mean(b - a)` over questions, resampled in pairs.

    Pairs where either score is NaN are dropped and counted in "nan". Returns "mean_diff", the
    percentile interval "low"/"high" at `confidence`, and a two-sided "pvalue" read off the
    bootstrap distribution (twice the smaller share of resampled means on either side of 0).

    >>> r = paired_bootstrap([0.5, 0.5, 0.5], [1.0, 1.0, 1.0])
    >>> r["mean_diff"], r["low"], r["high"], r["n"]
    (0.5, 0.5, 0.5, 3)
    """
    # scipy loads on first use, as in mcnemar
    from scipy.stats import bootstrap

    check_confidence(confidence)
    check_paired(a_scores, b_scores, "paired_bootstrap")
    a = np.asarray(a_scores, dtype=float)
    b = np.asarray(b_scores, dtype=float)
    keep = ~(np.isnan(a) | np.isnan(b))
    diff = b[keep] - a[keep]  # (N,) one difference per question
    out = {"n": int(keep.sum()), "nan": int((~keep).sum())}
    if diff.size == 0:
        return out | {"mean_diff": math.nan, "low": math.nan, "high": math.nan, "pvalue": math.nan}
    mean_diff = float(diff.mean())
    if diff.size == 1 or np.all(diff == diff[0]):  # every resample has the same mean
        return out | {"mean_diff": mean_diff, "low": mean_diff, "high": mean_diff, "pvalue": float(mean_diff == 0.0)}
    res = bootstrap(
        (diff,), np.mean, n_resamples=n_resamples, confidence_level=confidence,
        method="percentile", rng=np.random.default_rng(seed), batch=1000,
    )
    dist = res.bootstrap_distribution
    pvalue = min(1.0, 2.0 * min(float(np.mean(dist <= 0.0)), float(np.mean(dist >= 0.0))))
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return out | {"mean_diff": mean_diff, "low": low, "high": high, "pvalue": pvalue}
