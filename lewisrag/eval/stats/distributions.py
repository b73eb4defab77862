"""Question-level distributions of one metric: the failures a mean hides."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def score_distribution(scores: Sequence[float | None], bins: int = 10) -> dict:
    """Question-level summary of one metric: the mean alone hides how the failures are spread.

    None and NaN are counted in "nan" and left out of everything else; "n" counts the rest; ±inf is
    a ValueError (no metric gives it). With n == 0 the statistics are None (JSON null). The
    histogram spans [0, 1] unless scores fall outside it (answer relevancy can be negative).

    >>> d = score_distribution([1.0] * 95 + [0.0] * 5)             # situation A
    >>> d["mean"], d["share_below_1"], d["share_below_0.5"]
    (0.95, 0.05, 0.05)
    >>> d = score_distribution([0.95] * 100 + [float("nan")])      # situation B, one NaN apart
    >>> d["n"], d["nan"], round(d["mean"], 2), d["share_below_1"], d["share_below_0.5"]
    (100, 1, 0.95, 1.0, 0.0)
    """
    values = np.array([math.nan if s is None else float(s) for s in scores], dtype=float)
    # NaN is a score that could not be computed; ±inf is no score any metric gives (each is bounded),
    # so it is a fault upstream, and it failed inside np.histogram with a message naming neither
    infinite = np.flatnonzero(np.isinf(values))
    if infinite.size:
        i = int(infinite[0])
        raise ValueError(f"scores[{i}]: expected a finite number, None or NaN, got {float(values[i])}")
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
