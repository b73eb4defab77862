"""The position probe: accuracy against where the gold passage sits in a stitched input.

Liu et al. 2023 ("Lost in the Middle") found that readers of one long input use a relevant
passage best at the start or end and worst in the middle. A prompt-stitching RAG has that
exposure; the Lewis model does not: it reads every document on its own and sums over them, so
reordering the retrieved documents cannot change its answer (the marginal is a sum over z).

For each question the probe takes its top-k passages, makes sure the gold one is among them
(replacing the last non-gold passage if retrieval missed it), moves it to every position 1..k in
turn, and measures exact match at each position.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence

import matplotlib
import matplotlib.pyplot as plt

from lewisrag.data.io import atomic_path
from lewisrag.data.records import QAExample
from lewisrag.eval.reports.i18n import plot_messages
from lewisrag.scoring.qa import answer_exact_match

AnswerFn = Callable[[list[str], list[list]], list[str | None]]  # (questions, passages per question) -> answers (None: failed)


def with_gold_at(passages: Sequence, gold, position: int) -> list:
    """`passages` with `gold` moved (or put, replacing the last other passage) to 1-based `position`.

    >>> with_gold_at(["a", "b", "c"], "g", 2)
    ['a', 'g', 'b']
    >>> with_gold_at(["a", "g", "c"], "g", 3)
    ['a', 'c', 'g']
    """
    others = [p for p in passages if p != gold][: len(passages) - 1]
    return others[: position - 1] + [gold] + others[position - 1 :]


def position_probe(examples: Sequence[QAExample], passages: Sequence[Sequence], gold: Sequence, answer: AnswerFn,
                   batch_size: int = 32, on_batch: Callable[[int], None] | None = None) -> dict:
    """EM at each gold position 1..k; `passages[i]` are question i's k passages, `gold[i]` its gold one.

    An answer an outside generator failed to give (None) is left out of its position's mean, not
    scored 0. When there are any, each position's count is kept: "scored" (the answers its EM is
    over) and "failed" (those left out), since a point that rests on 1 answer of 4 reads like one
    over all 4 (a position with none answered is NaN)."""
    k = len(passages[0])
    em, scored = [], []
    for position in range(1, k + 1):
        hits, answered = 0.0, 0
        for s in range(0, len(examples), batch_size):
            batch = range(s, min(s + batch_size, len(examples)))
            answers = answer([examples[i].question for i in batch], [with_gold_at(passages[i], gold[i], position) for i in batch])
            given = [(a, i) for a, i in zip(answers, batch) if a is not None]
            hits += sum(answer_exact_match(a, examples[i]) for a, i in given)
            answered += len(given)
            if on_batch:
                on_batch(len(batch))
        em.append(hits / answered if answered else math.nan)
        scored.append(answered)
    out = {"positions": list(range(1, k + 1)), "exact_match": em, "n": len(examples)}
    failed = [len(examples) - a for a in scored]
    return {**out, "scored": scored, "failed": failed} if any(failed) else out


def plot_positions(curves: dict[str, dict], path: str | os.PathLike, lang: str = "en") -> None:
    """EM against gold position, one line per system (a PNG at `path`), labelled in `lang`."""
    matplotlib.use("Agg")

    with plot_messages(lang) as t:
        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=120)
        for name, c in curves.items():
            ax.plot(c["positions"], c["exact_match"], marker="o", label=name)
        ax.set_xlabel(t("plot.position_x"))
        ax.set_ylabel(t("plot.position_y"))
        ax.set_ylim(0, 1.02)
        ax.set_xticks(sorted({p for c in curves.values() for p in c["positions"]}))  # every system's (k and K differ)
        ax.grid(alpha=0.3)
        ax.legend()
        ax.set_title(t("plot.position_title"))
        fig.tight_layout()

        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png")
        plt.close(fig)
