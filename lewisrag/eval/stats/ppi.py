"""Prediction-powered inference: a metric's mean from few human labels and many judge labels."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from lewisrag.eval.stats.checks import check_confidence, check_paired


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
    # scipy (~1 s) loads on first use: every evaluator run imports lewisrag.eval.stats, for score_distribution only
    from scipy.stats import norm

    check_confidence(confidence)
    check_paired(human_labels, judge_on_labeled, "ppi_mean")
    y = np.asarray(human_labels, dtype=float)
    f_lab = np.asarray(judge_on_labeled, dtype=float)
    f_unl = np.asarray(judge_on_unlabeled, dtype=float)
    if y.size < 2 or f_unl.size < 2:
        raise ValueError(f"ppi_mean needs at least 2 labelled and 2 unlabelled items, got {y.size} and {f_unl.size}")
    if np.isnan(y).any() or np.isnan(f_lab).any() or np.isnan(f_unl).any():
        raise ValueError("ppi_mean: inputs contain NaN; drop undecided items before calling")
    for name, x in (("human_labels", y), ("judge_on_labeled", f_lab), ("judge_on_unlabeled", f_unl)):
        infinite = np.flatnonzero(np.isinf(x))  # an inf estimate with NaN bounds, and numpy's warnings, came back
        if infinite.size:
            i = int(infinite[0])
            raise ValueError(f"ppi_mean: {name} must be finite numbers, got {name}[{i}] = {x[i]}")
    residual = y - f_lab  # (n,) how far the judge is from the human on each labelled item
    estimate = float(f_unl.mean() + residual.mean())
    se = math.sqrt(f_unl.var(ddof=1) / f_unl.size + residual.var(ddof=1) / y.size)
    z = float(norm.ppf(0.5 + confidence / 2))
    return {
        "estimate": estimate, "low": estimate - z * se, "high": estimate + z * se, "se": se,
        "rectifier": float(residual.mean()), "n_labeled": int(y.size), "n_unlabeled": int(f_unl.size),
    }
