"""Retrieval scores from passage ids: recall@k and its relatives, one definition for every caller.

Training logs recall of the passages it retrieved, `reproduce` reports recall@{1,5,20} of its
indexes, the evaluator scores each answer's contexts and the scorecard each system's: all of them
count a question as a hit when any of its gold passage ids is among the first k retrieved ids (DPR's
top-k accuracy). Questions without gold ids are not measurable: NaN per question, left out of rates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

NAN = float("nan")


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")


def first_gold_rank(retrieved_ids: Sequence[str], gold_ids: Sequence[str]) -> int | None:
    """0-based rank of the first gold id among the retrieved ids; None when none was retrieved.

    >>> first_gold_rank(["d3", "d1", "d2"], ["d2", "d1"]), first_gold_rank(["d3"], ["d1"])
    (1, None)
    """
    gold = set(gold_ids)
    return next((rank for rank, pid in enumerate(retrieved_ids) if pid in gold), None)


def recall_at_k(retrieved_ids: Sequence[str], gold_ids: Sequence[str], k: int | None = None) -> float:
    """1.0 if any gold id is among the first k retrieved ids (all of them when k is None), else 0.0.

    NaN when there are no gold ids. ID-based: no judge, deterministic, cheap.

    >>> recall_at_k(["REQ-USER-02", "REQ-AUTH-03"], ["REQ-AUTH-03"], 1), recall_at_k(["d2", "d1"], ["d1"], 2)
    (0.0, 1.0)
    """
    if k is not None:
        _check_k(k)
    if not gold_ids:
        return NAN
    rank = first_gold_rank(retrieved_ids, gold_ids)
    return float(rank is not None and (k is None or rank < k))


def recall_rate(retrieved_ids: Sequence[Sequence[str]], gold_ids: Sequence[Sequence[str]],
                k: int | None = None) -> tuple[int, int]:
    """(hits, questions) over the questions that have gold ids: `recall_at_k` summed, NaNs left out.

    >>> recall_rate([["a", "b"], ["c"], ["d"]], [["b"], ["x"], []])
    (1, 2)
    """
    scores = [recall_at_k(got, gold, k) for got, gold in zip(retrieved_ids, gold_ids)]
    measured = [s for s in scores if not math.isnan(s)]
    return int(sum(measured)), len(measured)


def gold_fraction_at_k(retrieved_ids: Sequence[str], gold_ids: Sequence[str], k: int) -> float:
    """Share of the gold ids found in the first k retrieved ids (for multi-document questions).

    >>> gold_fraction_at_k(["需求-1", "bug-7", "需求-2"], ["需求-1", "需求-2"], 2)
    0.5
    """
    _check_k(k)
    gold = set(gold_ids)
    return len(set(retrieved_ids[:k]) & gold) / len(gold) if gold else NAN
