"""Statistics that make an evaluation score hold up: intervals, paired tests, distributions.

Every function is a thin, documented layer over scipy or statsmodels, so the numbers can be checked
against those libraries. Scores arrive as plain Python lists; a NaN score (a metric that could not
be computed, e.g. faithfulness of an answer with no statements) is counted apart and never averaged.

The chapter's numbers, checkable by hand:

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

import math
from collections.abc import Hashable, Sequence

import numpy as np


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def _check_paired(a: Sequence, b: Sequence, what: str) -> None:
    if len(a) != len(b):
        raise ValueError(f"{what}: paired inputs must have the same length, got {len(a)} and {len(b)}")


# ---------------------------------------------------------------------------------------------
# proportions


def proportion_interval(
    k: int, n: int, confidence: float = 0.95, method: str = "wilson", side: str = "two"
) -> tuple[float, float]:
    """Interval for a proportion `k / n`.

    method: "wilson" (score interval) or "exact" (Clopper–Pearson, from the beta distribution).
    side: "two" for a two-sided interval at `confidence`; "upper" for the one-sided upper bound at
    `confidence`, returned as `(0.0, upper)` — the number a gate like "rate ≤ 5%" must compare.
    With `n == 0` nothing is known and the interval is `(0.0, 1.0)`.

    >>> proportion_interval(0, 0)
    (0.0, 1.0)
    """
    from statsmodels.stats.proportion import proportion_confint

    _check_confidence(confidence)
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
        return float(max(low, 0.0)), float(min(high, 1.0))
    return 0.0, min(_upper_bound(k, n, confidence, method), 1.0)


def sample_size_for_upper_bound(
    observed_rate: float, target: float, confidence: float = 0.95, method: str = "wilson", max_n: int = 10**9
) -> int | None:
    """Smallest n whose one-sided upper bound, at `observed_rate`, is ≤ `target` (None if never).

    Answers "how many questions would prove the rate ≤ target if the rate stays what we saw".
    The count `observed_rate * n` is allowed to be fractional so the answer is smooth in n.

    >>> sample_size_for_upper_bound(0.0, 0.05, method="exact")     # zero failures: 1 - 0.05**(1/n) <= 5%
    59
    >>> sample_size_for_upper_bound(0.06, 0.05) is None            # observed above the target: never
    True
    """
    _check_confidence(confidence)
    if not 0.0 <= observed_rate <= 1.0 or not 0.0 < target <= 1.0:
        raise ValueError(f"need rates in [0, 1] and target > 0, got {observed_rate}, {target}")
    if observed_rate >= target:
        return None

    def ok(n: int) -> bool:
        return _upper_bound(observed_rate * n, n, confidence, method) <= target

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


def _upper_bound(count: float, n: int, confidence: float, method: str) -> float:
    from statsmodels.stats.proportion import proportion_confint

    if method not in ("wilson", "exact"):
        raise ValueError(f"method must be 'wilson' or 'exact', got {method!r}")
    if confidence <= 0.5:
        raise ValueError(f"a one-sided upper bound needs confidence > 0.5, got {confidence}")
    if method == "exact" and count >= n:
        return 1.0
    # statsmodels accepts a fractional count; one-sided at 1 - alpha = two-sided at 1 - 2 alpha.
    alpha = 2 * (1.0 - confidence)
    _, high = proportion_confint(count, n, alpha=alpha, method="wilson" if method == "wilson" else "beta")
    return float(high)


# ---------------------------------------------------------------------------------------------
# paired comparisons


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
    from scipy.stats import binomtest
    from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar

    _check_paired(a_correct, b_correct, "mcnemar")
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
    if alternative != "two-sided":
        pvalue = binomtest(b, b + c, 0.5, alternative=alternative).pvalue
    else:
        table = [[int(np.sum(a & b_)), b], [c, int(np.sum(~a & ~b_))]]
        pvalue = sm_mcnemar(table, exact=method == "exact", correction=True).pvalue
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
    from scipy.stats import bootstrap

    _check_confidence(confidence)
    _check_paired(a_scores, b_scores, "paired_bootstrap")
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


# ---------------------------------------------------------------------------------------------
# distributions and agreement


def score_distribution(scores: Sequence[float | None], bins: int = 10) -> dict:
    """Question-level summary of one metric: the mean alone hides how the failures are spread.

    None and NaN are counted in "nan" and left out of everything else; "n" counts the rest. With
    n == 0 the statistics are None (JSON null). The histogram spans [0, 1] unless scores fall
    outside it (answer relevancy can be negative).

    >>> d = score_distribution([1.0] * 95 + [0.0] * 5)             # situation A
    >>> d["mean"], d["share_below_1"], d["share_below_0.5"]
    (0.95, 0.05, 0.05)
    >>> d = score_distribution([0.95] * 100 + [float("nan")])      # situation B, one NaN apart
    >>> d["n"], d["nan"], round(d["mean"], 2), d["share_below_1"], d["share_below_0.5"]
    (100, 1, 0.95, 1.0, 0.0)
    """
    values = np.array([math.nan if s is None else float(s) for s in scores], dtype=float)
    finite = values[~np.isnan(values)]
    n, n_nan = int(finite.size), int(values.size - finite.size)
    if n == 0:
        empty = dict.fromkeys(("mean", "median", "min", "max", "share_below_1", "share_below_0.5"))
        return {"n": 0, "nan": n_nan, **empty, "count_below_1": 0, "count_below_0.5": 0,
                "histogram": {"edges": [], "counts": []}}
    below_1, below_half = int(np.sum(finite < 1.0)), int(np.sum(finite < 0.5))
    lo, hi = min(0.0, float(finite.min())), max(1.0, float(finite.max()))
    counts, edges = np.histogram(finite, bins=bins, range=(lo, hi))
    return {
        "n": n,
        "nan": n_nan,
        "mean": float(finite.mean()),
        "median": float(np.median(finite)),
        "min": float(finite.min()),
        "max": float(finite.max()),
        "share_below_1": below_1 / n,
        "share_below_0.5": below_half / n,
        "count_below_1": below_1,
        "count_below_0.5": below_half,
        "histogram": {"edges": [round(float(e), 6) for e in edges], "counts": [int(c) for c in counts]},
    }


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """Cohen's κ between two raters' labels (statsmodels); NaN when chance agreement is 1.

    >>> round(cohen_kappa([1, 1, 0, 0], [1, 0, 0, 0]), 3)       # p_o = 0.75, p_e = 0.5
    0.5
    """
    from statsmodels.stats.inter_rater import cohens_kappa

    _check_paired(a, b, "cohen_kappa")
    if len(a) == 0:
        return math.nan
    labels = sorted(set(a) | set(b), key=repr)
    index = {label: i for i, label in enumerate(labels)}
    table = np.zeros((len(labels), len(labels)))  # (rater a, rater b)
    for x, y in zip(a, b):
        table[index[x], index[y]] += 1
    p = table / table.sum()
    if math.isclose(float(p.sum(axis=1) @ p.sum(axis=0)), 1.0):
        return math.nan  # both raters used one and the same label: κ is 0/0
    return float(cohens_kappa(table).kappa)


def judge_confusion(human: Sequence[bool], judge: Sequence[bool | None], confidence: float = 0.95) -> dict:
    """How a judge's supported/unsupported verdicts compare with human labels.

    The two errors cost different things and are reported apart, each with a Wilson interval:
    miss rate = unsupported statements the judge calls supported / unsupported statements (lets a
    fabrication through); false-kill rate = supported statements the judge calls unsupported /
    supported statements (makes the gate cry wolf). Undecided verdicts (None) are counted apart.

    >>> r = judge_confusion([True, True, False, False], [True, False, True, None])
    >>> r["misses"], r["false_kills"], r["undecided"], r["miss_rate"], r["false_kill_rate"]
    (1, 1, 1, 1.0, 0.5)
    """
    _check_paired(human, judge, "judge_confusion")
    pairs = [(bool(h), j) for h, j in zip(human, judge) if j is not None]
    h = [p[0] for p in pairs]
    j = [bool(p[1]) for p in pairs]
    n_unsup, n_sup = h.count(False), h.count(True)
    misses = sum(1 for x, y in zip(h, j) if not x and y)
    false_kills = sum(1 for x, y in zip(h, j) if x and not y)
    agree = len(pairs) - misses - false_kills

    def rate(k: int, n: int) -> tuple[float | None, list[float]]:
        return (k / n if n else None), list(proportion_interval(k, n, confidence))

    miss_rate, miss_ci = rate(misses, n_unsup)
    fk_rate, fk_ci = rate(false_kills, n_sup)
    agreement, agreement_ci = rate(agree, len(pairs))
    kappa = cohen_kappa(h, j)
    return {
        "n": len(pairs), "undecided": len(human) - len(pairs),
        "human_supported": n_sup, "human_unsupported": n_unsup,
        "misses": misses, "false_kills": false_kills,
        "miss_rate": miss_rate, "miss_rate_interval": miss_ci,
        "false_kill_rate": fk_rate, "false_kill_rate_interval": fk_ci,
        "agreement": agreement, "agreement_interval": agreement_ci,
        "kappa": None if math.isnan(kappa) else kappa,
        "confidence": confidence,
    }


# ---------------------------------------------------------------------------------------------
# prediction-powered inference


def ppi_mean(
    human_labels: Sequence[float],
    judge_on_labeled: Sequence[float],
    judge_on_unlabeled: Sequence[float],
    confidence: float = 0.95,
) -> dict:
    """Mean of a metric from a few human labels and many judge labels (Angelopoulos et al. 2023).

    The judge's mean on the large unlabelled set is corrected by the rectifier, the mean of
    (human - judge) on the small labelled set, so a biased judge does not bias the estimate; the
    normal interval adds both sampling variances. This is the estimator ARES uses.

    >>> r = ppi_mean([1, 0, 1, 1], [1, 1, 1, 1], [1.0] * 8)     # the judge says 1 too often
    >>> r["estimate"], r["rectifier"]
    (0.75, -0.25)
    """
    from scipy.stats import norm

    _check_confidence(confidence)
    _check_paired(human_labels, judge_on_labeled, "ppi_mean")
    y = np.asarray(human_labels, dtype=float)
    f_lab = np.asarray(judge_on_labeled, dtype=float)
    f_unl = np.asarray(judge_on_unlabeled, dtype=float)
    if y.size < 2 or f_unl.size < 2:
        raise ValueError(f"ppi_mean needs at least 2 labelled and 2 unlabelled items, got {y.size} and {f_unl.size}")
    if np.isnan(y).any() or np.isnan(f_lab).any() or np.isnan(f_unl).any():
        raise ValueError("ppi_mean: inputs contain NaN; drop undecided items before calling")
    residual = y - f_lab  # (n,) how far the judge is from the human on each labelled item
    estimate = float(f_unl.mean() + residual.mean())
    se = math.sqrt(f_unl.var(ddof=1) / f_unl.size + residual.var(ddof=1) / y.size)
    z = float(norm.ppf(0.5 + confidence / 2))
    return {
        "estimate": estimate, "low": estimate - z * se, "high": estimate + z * se, "se": se,
        "rectifier": float(residual.mean()), "n_labeled": int(y.size), "n_unlabeled": int(f_unl.size),
    }
