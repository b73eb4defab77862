"""The levels one gate run decides its significance tests at: `GateConfig.correction`.

A gate run is one decision made of many paired tests, and it fails when any of them rejects, so
its chance of failing an unchanged candidate grows with their number. With "holm" the run's tests
are two families, each held to the level the gate already states for it:

- the one-sided McNemar tests (tier 2 per recall@k, tier 3 per metric and cut): p-values, adjusted
  by Holm–Bonferroni and compared with `alpha`;
- the tests of a mean difference (tier 2 per recall@k, tier 3 per metric), by Bonferroni: each
  bootstrap interval shown at 1 − (1 − `confidence`)/m, so that all m hold together with chance
  `confidence`, and each one-sided sign-flip p-value, which decides "significantly worse", compared
  with the matching level, (1 − `interval_confidence`)/2 = (1 − `confidence`)/(2m).

A false failure then needs one family to err: at most alpha + (1 − confidence)/2 for the run
(0.075 by default), where 20 independent tests at 0.05 make it about 64%. The sign-flip test,
exact where few questions differ, holds its level, which the percentile bootstrap that decided
before did not (it was liberal over a few differing questions). The checks that are not
tests against "no change" (rules, counts, allowed drops, ceilings, whose bound proves a pass) are
left as they are. docs/statistics.md explains the choice.
"""

from __future__ import annotations

from dataclasses import dataclass

from lewisrag.eval import stats
from lewisrag.eval.gate.inputs import GateConfig


@dataclass(frozen=True)
class Correction:
    method: str  # "none" or "holm"
    alpha: float  # the level adjusted McNemar p-values are compared with
    tests: int  # McNemar tests in the run's family
    intervals: int  # tests of a mean in the run's family (each a sign-flip test with its bootstrap interval)
    # the confidence each bootstrap interval is computed at; each sign-flip p is compared with (1 - this) / 2
    interval_confidence: float

    @property
    def on(self) -> bool:
        return self.method != "none"

    def to_json(self) -> dict:
        return {"method": self.method, "alpha": self.alpha, "tests": self.tests, "intervals": self.intervals,
                "interval_confidence": self.interval_confidence}

    def ci_label(self, confidence: float) -> str:
        """The interval's level as the evidence writes it: "95%", or "99.17% (Bonferroni over 6)"."""
        if not self.on:
            return f"{100 * confidence:.4g}%"
        return f"{100 * self.interval_confidence:.4g}% (Bonferroni over {self.intervals})"


def family(cfg: GateConfig, pvalues: list[float], intervals: int) -> tuple[Correction, list[float]]:
    """The run's levels, and `pvalues` (its McNemar tests', in order) as they are compared with alpha:
    Holm-adjusted with "holm", as given with "none"."""
    if cfg.correction == "none":
        return Correction("none", cfg.alpha, len(pvalues), intervals, cfg.confidence), list(pvalues)
    confidence = stats.bonferroni_confidence(cfg.confidence, intervals) if intervals else cfg.confidence
    return Correction(cfg.correction, cfg.alpha, len(pvalues), intervals, confidence), stats.holm(pvalues)
