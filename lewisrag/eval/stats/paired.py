"""Paired comparisons of two systems on the same questions: McNemar's test, a paired bootstrap, a sign-flip test."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from lewisrag.eval.stats.checks import check_confidence, check_marks, check_paired, resample_batch


def mcnemar(
    a_correct: Sequence[bool], b_correct: Sequence[bool], method: str = "exact", alternative: str = "two-sided"
) -> dict:
    """McNemar's test for two systems judged on the same questions.

    b = questions A gets right and B gets wrong, c = the reverse; only these discordant pairs count.
    method: "exact" (binomial test of b against Binomial(b + c, 1/2)), "chi2" (chi-square with
    continuity correction), or "auto" (exact below 25 discordant pairs, chi-square above).
    alternative: "two-sided", "greater" (B is worse: b > c) or "less" (B is better); one-sided
    tests are exact. Each entry is True or False (numpy's too) or the int 1 or 0; anything else is
    a ValueError naming it.

    >>> r = mcnemar([True] * 5 + [False] * 5, [False] * 5 + [False] * 5)
    >>> r["b"], r["c"], r["pvalue"]                       # 2 * 0.5**5
    (5, 0, 0.0625)
    >>> mcnemar([True] * 5, [False] * 5, alternative="greater")["pvalue"]
    0.03125
    """
    # scipy (~1 s) loads on first use: every evaluator run imports lewisrag.eval.stats, for score_distribution only
    from scipy.stats import binomtest, chi2

    check_paired(a_correct, b_correct, "mcnemar")
    check_marks(a_correct, "a_correct")
    check_marks(b_correct, "b_correct")
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
    pvalue: bool = True,
) -> dict:
    """Bootstrap of the mean difference `mean(b - a)` over questions, resampled in pairs: how large a change is.

    Pairs where either score is NaN are dropped and counted in "nan". Returns "mean_diff" and the
    percentile interval "low"/"high" at `confidence`; with one question, or equal differences, every
    resample has the same mean and the interval is that point (it says nothing about the spread).

    "pvalue" is not read off the bootstrap: it is the two-sided paired sign-flip permutation test
    (`sign_flip_test`, same `n_resamples` and `seed`; its "method" under "pvalue_method"). A
    percentile bootstrap over a few differing questions, all of one sign, never draws the other sign,
    so its share of resampled means past 0 was 0 with one question (p = 0) and far too small with
    three (n = 6: 0.032 where the exact test says 0.25 two-sided); the sign-flip p is 1 for one
    question, 1 with no difference, and exact wherever the questions that differ are few. With
    `pvalue=False` it is left out (the gate runs its own one-sided test: this one cost as much again).

    >>> r = paired_bootstrap([0.5, 0.5, 0.5], [1.0, 1.0, 1.0])
    >>> r["mean_diff"], r["low"], r["high"], r["n"], r["pvalue"]      # 2 of 8 sign assignments are as extreme
    (0.5, 0.5, 0.5, 3, 0.25)
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
        return out | {"mean_diff": math.nan, "low": math.nan, "high": math.nan, "pvalue": math.nan,
                      "pvalue_method": "none"}
    p = {}
    if pvalue:
        test = sign_flip_test(a[keep], b[keep], "two-sided", n_resamples, seed)
        p = {"pvalue": test["pvalue"], "pvalue_method": test["method"]}
    mean_diff = float(diff.mean())
    if diff.size == 1 or np.all(diff == diff[0]):  # every resample has the same mean
        return out | {"mean_diff": mean_diff, "low": mean_diff, "high": mean_diff} | p
    res = bootstrap(
        (diff,), np.mean, n_resamples=n_resamples, confidence_level=confidence,
        method="percentile", rng=np.random.default_rng(seed), batch=resample_batch(diff.size),
    )
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return out | {"mean_diff": mean_diff, "low": low, "high": high} | p


def sign_flip_test(
    a_scores: Sequence[float],
    b_scores: Sequence[float],
    alternative: str = "two-sided",
    n_resamples: int = 10000,
    seed: int = 0,
) -> dict:
    """Paired sign-flip permutation test of the mean difference `mean(b - a)` over questions.

    Under "no change" each question's difference is as likely to have either sign, so the null
    distribution is that of the summed differences under every assignment of signs. Pairs where
    either score is NaN are dropped and counted in "nan"; a difference of 0 (to float noise) flips to
    itself and is left out ("nonzero" counts the rest), which keeps the test exact over many more questions.
    With 2**nonzero <= n_resamples every sign assignment is enumerated and the p-value is exact
    ("method": "exact"); otherwise `n_resamples` random assignments are drawn from `seed`, and
    p = (hits + 1) / (n_resamples + 1), never 0 ("method": "monte carlo").

    "pvalue" is the chance under "no change" of a mean difference at least as extreme as the one seen:
    "two-sided" either way, "less" as low or lower (b worse, for a higher-is-better score),
    "greater" as high or higher. Unlike a percentile bootstrap's, it cannot be small when few
    questions differ: k differences all of one sign give at best 0.5**k one-sided, a single question
    0.5; no difference at all gives 1; no pair at all, NaN.

    "min_pvalue" is the smallest p-value the test could have given here: one-sided 0.5**nonzero when
    exact (only the assignment of the observed signs is as extreme), 1 / (n_resamples + 1) by Monte
    Carlo; two-sided twice that (at most 1). A level below it cannot be reached, whatever changed.

    Sums are compared with an absolute tolerance of 1e-12 of the data's largest |score| per changed
    question (`_tolerance`), so that sums equal as numbers are equal: 0.5 - 0.3 and 0.5 - 0.7 are
    0.2 and -0.19999999999999996, whose sum 5.6e-17 is no rise, yet scipy's own tie tolerance,
    relative to the observed sum, took it for one ("greater": 0.5 where the exact p is 0.75). Sums of
    different differences tie too (4/9 + (6/7 - 4/9) against 6/7), so rounding each difference to a
    grid would not do. A difference within that tolerance of 0 is float noise: no change.

    scipy.stats.permutation_test computes it (permutation_type="samples" with one sample flips the
    signs; exact when 2**n fits in n_resamples). It needs two observations, so a lone nonzero
    difference is paired with a 0, which changes no sum.

    >>> r = sign_flip_test([1.0] * 6, [0.99, 0.99, 0.99, 1.0, 1.0, 1.0], alternative="less")
    >>> r["pvalue"], r["nonzero"], r["method"]            # 3 questions worse: 0.5**3
    (0.125, 3, 'exact')
    >>> sign_flip_test([0.9], [0.89], alternative="less")["pvalue"]
    0.5
    >>> sign_flip_test([0.3, 0.7], [0.5, 0.5], alternative="greater")["pvalue"]   # a rise of 0 (3 of 4 assignments)
    0.75
    """
    from scipy.stats import permutation_test  # scipy loads on first use, as in mcnemar

    check_paired(a_scores, b_scores, "sign_flip_test")
    if alternative not in ("two-sided", "greater", "less"):
        raise ValueError(f"alternative must be 'two-sided', 'greater' or 'less', got {alternative!r}")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    a = np.asarray(a_scores, dtype=float)
    b = np.asarray(b_scores, dtype=float)
    if np.isinf(a).any() or np.isinf(b).any():
        raise ValueError("sign_flip_test: scores must be finite numbers (or NaN, left out)")
    keep = ~(np.isnan(a) | np.isnan(b))
    a, b = a[keep], b[keep]
    diff = b - a
    tie = _tolerance(a, b)  # per changed question: float noise is far below it, any change the data can state above
    nonzero = diff[np.abs(diff) > tie]
    out = {"n": int(keep.sum()), "nan": int((~keep).sum()), "nonzero": int(nonzero.size), "alternative": alternative}
    if diff.size == 0:
        return out | {"pvalue": math.nan, "method": "none", "min_pvalue": math.nan}
    if nonzero.size == 0:  # every sign assignment sums to 0: nothing is evidence of a change
        return out | {"pvalue": 1.0, "method": "exact", "min_pvalue": 1.0}
    data = nonzero if nonzero.size > 1 else np.append(nonzero, 0.0)
    res = permutation_test(
        (data,), _sum, permutation_type="samples", vectorized=True, n_resamples=n_resamples,
        batch=resample_batch(data.size), alternative=alternative, rng=np.random.default_rng(seed),
    )
    exact = 2 ** data.size <= n_resamples
    # the p-value from scipy's null distribution, its ties within our tolerance (scipy's is relative to
    # the observed sum, 0 where the differences cancel); + 1 for the observed assignment by Monte Carlo
    null, observed, gamma = np.asarray(res.null_distribution, dtype=float), float(res.statistic), tie * nonzero.size
    extra = 0 if exact else 1
    less = (np.count_nonzero(null <= observed + gamma) + extra) / (null.size + extra)
    greater = (np.count_nonzero(null >= observed - gamma) + extra) / (null.size + extra)
    pvalue = {"less": less, "greater": greater, "two-sided": 2 * min(less, greater)}[alternative]
    floor = 0.5 ** nonzero.size if exact else 1.0 / (n_resamples + 1)
    if alternative == "two-sided":
        floor *= 2
    return out | {"pvalue": float(min(pvalue, 1.0)), "method": "exact" if exact else "monte carlo",
                  "min_pvalue": float(min(floor, 1.0))}


_TIE = 1e-12  # scores equal to 12 significant digits of the data's largest |score| are equal


def _tolerance(a: np.ndarray, b: np.ndarray) -> float:
    """How far apart two differences (and, times the changed questions, two sums of them) may be and
    still be equal: 1e-12 of the largest |score|. Scores carry a rounding error of half an ulp
    (1.1e-16 of it), a difference and a sum a few more; a change the data can state (a score's
    share k/n of statements, 0.01 of a rating) is many orders larger."""
    return _TIE * float(max(np.max(np.abs(a), initial=0.0), np.max(np.abs(b), initial=0.0)))


def _sum(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.sum(x, axis=axis)
