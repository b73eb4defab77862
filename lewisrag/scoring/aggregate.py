"""Averages over questions: the one mean every report uses."""

from __future__ import annotations

import math
from collections.abc import Iterable


def mean(values: Iterable[float | None]) -> float | None:
    """Mean of the measured values; None (JSON null) when there are none.

    A None or NaN value (a score that could not be measured) is left out, never counted as 0.

    >>> mean([1.0, 0.0, None, float("nan")]), mean([])
    (0.5, None)
    """
    measured = [float(v) for v in values if v is not None and not math.isnan(v)]
    return sum(measured) / len(measured) if measured else None
