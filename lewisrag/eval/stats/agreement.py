"""Agreement between a judge and human labels: Cohen's κ and the confusion table with intervals."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np

from lewisrag.eval.stats.checks import check_marks, check_paired, is_mark
from lewisrag.eval.stats.intervals import proportion_interval


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """Cohen's κ between two raters' labels (statsmodels); NaN when chance agreement is 1.

    >>> round(cohen_kappa([1, 1, 0, 0], [1, 0, 0, 0]), 3)       # p_o = 0.75, p_e = 0.5
    0.5
    >>> cohen_kappa([1, 1, 0, 1], [1, 1, 1, 1])                 # one rater used one label: 0, and no warning
    0.0
    """
    # statsmodels (~2 s) loads on first use: every evaluator run imports lewisrag.eval.stats, for score_distribution only
    from statsmodels.stats.inter_rater import cohens_kappa

    check_paired(a, b, "cohen_kappa")
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
    with np.errstate(invalid="ignore", divide="ignore"):  # its z-test (unused here) divides by 0 when one rater
        return float(cohens_kappa(table).kappa)            # gave one label only; κ itself is defined (0)


def judge_confusion(human: Sequence[bool], judge: Sequence[bool | None], confidence: float = 0.95) -> dict:
    """How a judge's supported/unsupported verdicts compare with human labels.

    The two errors cost different things and are reported apart, each with a Wilson interval:
    miss rate = unsupported statements the judge calls supported / unsupported statements (lets a
    fabrication through); false-kill rate = supported statements the judge calls unsupported /
    supported statements (makes the gate cry wolf). Undecided verdicts (None) are counted apart.
    Each human label is True or False (or 1/0, `check_marks`), each verdict that or None: bool() read
    NaN and "False" as supported.

    >>> r = judge_confusion([True, True, False, False], [True, False, True, None])
    >>> r["misses"], r["false_kills"], r["undecided"], r["miss_rate"], r["false_kill_rate"]
    (1, 1, 1, 1.0, 0.5)
    """
    check_paired(human, judge, "judge_confusion")
    check_marks(human, "judge_confusion: human")
    for i, j in enumerate(judge):
        if j is not None and not is_mark(j):
            raise ValueError(f"judge_confusion: judge[{i}]: expected True, False or None (undecided), got {j!r}")
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
