"""Retrieval scores, one definition of each for every caller.

Two scores from passage ids, equal when a question has one gold passage, different when it needs several:

- `recall_at_k`: the share of a question's gold passages among the first k retrieved (plain recall,
  as an id-based context recall is defined). The evaluator's per-answer `recall_at_k`, the per-question
  records the gate compares (tier 2), the diagnosis and the systems' retrieval row in `compare` read
  this one: an answer that needed two passages and got one lost half its evidence at the retrieval layer.
- `hit_at_k`: 1 when any gold passage is among the first k. Training logs and `reproduce`'s retrieval
  tables read this one. It is not DPR's top-k accuracy, which the DPR and RAG papers report: that
  counts any passage holding an answer string (`answer_recall`). The two agree where a question's
  gold passages are the only ones that hold its answer, as in the built-in world; on Wikipedia many
  other passages hold NQ's answers, and DPR's measure is the higher.

Questions without gold ids are not measurable: NaN per question, left out of rates.

One score from the passages' texts: `answer_recall`, DPR's top-k accuracy, over which of each
question's retrieved passages hold an answer (`scoring.qa.has_answer`); `index cut` and the base
preset's retrieval stage record it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

NAN = float("nan")


def _check_k(k: int | None) -> None:
    if k is not None and k < 1:
        raise ValueError(f"k must be at least 1, got {k}")


def _check_ids(retrieved_ids: Sequence[str], gold_ids: Sequence[str]) -> None:
    # a string is a sequence of its characters: gold "d1" would be the ids "d" and "1"
    for name, ids in (("retrieved_ids", retrieved_ids), ("gold_ids", gold_ids)):
        if isinstance(ids, str | bytes):
            raise ValueError(f"{name} must be a list of ids, got the string {ids!r}")


def first_gold_rank(retrieved_ids: Sequence[str], gold_ids: Sequence[str]) -> int | None:
    """0-based rank of the first gold id among the retrieved ids; None when none was retrieved.

    >>> first_gold_rank(["d3", "d1", "d2"], ["d2", "d1"]), first_gold_rank(["d3"], ["d1"])
    (1, None)
    """
    _check_ids(retrieved_ids, gold_ids)
    gold = set(gold_ids)
    return next((rank for rank, pid in enumerate(retrieved_ids) if pid in gold), None)


def recall_at_k(retrieved_ids: Sequence[str], gold_ids: Sequence[str], k: int | None = None) -> float:
    """Share of the gold ids among the first k retrieved ids (all of them when k is None).

    NaN when there are no gold ids. ID-based: no judge, deterministic, cheap.

    >>> recall_at_k(["REQ-USER-02", "REQ-AUTH-03"], ["REQ-AUTH-03"], 1), recall_at_k(["d2", "d1"], ["d1"], 2)
    (0.0, 1.0)
    >>> recall_at_k(["需求-1", "bug-7", "需求-2"], ["需求-1", "需求-2"], 2)
    0.5
    """
    _check_k(k)
    _check_ids(retrieved_ids, gold_ids)
    gold = set(gold_ids)
    if not gold:
        return NAN
    return len(set(retrieved_ids[:k]) & gold) / len(gold)


def hit_at_k(retrieved_ids: Sequence[str], gold_ids: Sequence[str], k: int | None = None) -> float:
    """1.0 if any gold id is among the first k retrieved ids (all of them when k is None), else 0.0.

    A gold passage in the top k, not DPR's top-k accuracy (an answer string in one: `answer_recall`);
    NaN when there are no gold ids.

    >>> hit_at_k(["需求-1", "bug-7", "需求-2"], ["需求-1", "需求-2"], 2), hit_at_k(["d3"], ["d1"])
    (1.0, 0.0)
    """
    _check_k(k)
    _check_ids(retrieved_ids, gold_ids)
    if not gold_ids:
        return NAN
    rank = first_gold_rank(retrieved_ids, gold_ids)
    return float(rank is not None and (k is None or rank < k))


def hit_rate(retrieved_ids: Sequence[Sequence[str]], gold_ids: Sequence[Sequence[str]],
             k: int | None = None) -> tuple[int, int]:
    """(hits, questions) over the questions that have gold ids: `hit_at_k` summed, NaNs left out.

    >>> hit_rate([["a", "b"], ["c"], ["d"]], [["b"], ["x"], []])
    (1, 2)
    """
    if len(retrieved_ids) != len(gold_ids):  # zip would drop the questions past the shorter list
        raise ValueError(f"got {len(retrieved_ids)} retrieved lists and {len(gold_ids)} gold lists")
    scores = [hit_at_k(got, gold, k) for got, gold in zip(retrieved_ids, gold_ids)]
    measured = [s for s in scores if not math.isnan(s)]
    return int(sum(measured)), len(measured)


def answer_recall(holds_answer: Sequence[Sequence[bool]], ks: Sequence[int]) -> dict[str, float | None]:
    """DPR's top-k retrieval accuracy at each k of `ks`: the share of questions with an answer in a
    passage among their first k retrieved. `holds_answer` has a row per question, whether each of its
    retrieved passages, best first, holds one of its answers (`scoring.qa.has_answer`). None at every
    k when there is no question.

    >>> answer_recall([[False, True], [False, False]], [1, 2]), answer_recall([], [1])
    ({'1': 0.0, '2': 0.5}, {'1': None})
    """
    for k in ks:
        _check_k(k)
    return {str(k): sum(any(row[:k]) for row in holds_answer) / len(holds_answer) if holds_answer else None for k in ks}
