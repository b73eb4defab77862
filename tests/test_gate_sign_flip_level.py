"""The gate's sign-flip test of a mean must be able to reach the level it is held to.

A Monte Carlo p-value is never below 1 / (draws + 1), and an exact one over k changed questions never
below 0.5**k. With n_resamples = 100 (allowed) and correction = "holm" over three means, the level is
0.025 / 3 = 0.0083, under the 0.0099 that 100 draws can give: a rise of claims.hallucination on 40 of
141 questions passed, where 10,000 draws failed it at p = 0.0001. The draws are now raised to 20 / level
whatever n_resamples says; where the data cannot reach the level (k changed questions, 0.5**k above
it), the evidence says so instead of a bare "not significant"."""

from __future__ import annotations

import json

import pytest

from lewisrag.eval.gate import checks
from test_gate import _check
from test_gate_direction import HALL, _gate  # results.json of given scores, gated

CLAIMS = [HALL, "claims.noise_sensitivity_in_relevant", "claims.noise_sensitivity_in_irrelevant"]


def _config(metrics: list[str], n_resamples: int, correction: str = "holm", **top) -> str:
    head = f'n_resamples = {n_resamples}\ncorrection = "{correction}"\n'
    head += "".join(f"{k} = {v}\n" for k, v in top.items())
    return head + f"[tier3]\nmetrics = {json.dumps(metrics)}\nmax_mean_drop = 1.0\ncuts = []\n"


@pytest.mark.parametrize("n_resamples", [100, 10000])
def test_a_rise_on_40_of_141_questions_fails_under_holm_whatever_n_resamples(tmp_path, n_resamples):
    """The reviewer's case: with 100 resamples it passed ("sign-flip p=0.0099 ... not significant")."""
    base = {m: [0.0] * 141 for m in CLAIMS}
    cand = {m: [0.0] * 141 for m in CLAIMS} | {HALL: [0.1] * 40 + [0.0] * 101}
    report = _gate(tmp_path, base, cand, _config(CLAIMS, n_resamples))
    mean = _check(report, f"{HALL}: paired mean")
    level = 0.025 / 3
    assert mean.verdict == "fail" and not report.passed, mean.evidence
    assert f"significantly higher (p <= {level:.3g})" in mean.evidence
    flip = mean.details["sign_flip"]
    assert flip["level"] == pytest.approx(level) and flip["draws"] >= 20 / level and flip["reachable"]
    assert flip["pvalue"] <= level and flip["method"] == "monte carlo"
    assert f"monte carlo, {flip['draws']} draws" in mean.evidence


def test_the_draws_follow_the_level_not_only_n_resamples():
    assert checks.sign_flip_draws(0.025, 100) == 800
    assert checks.sign_flip_draws(0.025 / 3, 100) == 2400
    assert checks.sign_flip_draws(0.025 / 7, 100) == 5600  # seven means under Holm: 0.00357
    # the packaged defaults (10,000, 0.025) and the tiny baseline's (1,000) keep their draws and their verdicts
    assert checks.sign_flip_draws(0.025, 10000) == 10000 and checks.sign_flip_draws(0.025, 1000) == 1000
    assert checks.sign_flip_draws(1e-9, 100) == checks.MAX_SIGN_FLIP_DRAWS
    for level in (0.025, 0.01, 0.025 / 7, 1e-3, 1e-4, 1e-5):  # a drawn p can always reach the level
        assert 1 / (checks.sign_flip_draws(level, 100) + 1) <= level


def test_few_changed_questions_say_they_cannot_reach_the_level(tmp_path):
    """Three of six questions down by 0.01: the exact p is 0.125 at best, above 0.025."""
    report = _gate(tmp_path, {"faithfulness": [1.0] * 6}, {"faithfulness": [0.99] * 3 + [1.0] * 3},
                   _config(["faithfulness"], 10000, "none"))
    mean = _check(report, "faithfulness: paired mean")
    assert mean.verdict == "pass" and mean.details["sign_flip"]["reachable"] is False
    assert ("sign-flip p=0.125 (one-sided, 3 changed, exact), not significant at 0.025: 3 changed questions "
            "cannot reach significance at 0.025 (smallest p 0.5**3 = 0.125)") in mean.evidence


def test_six_questions_all_worse_reach_0_025_but_not_holms_level(tmp_path):
    """Six of six down: 0.5**6 = 0.0156 <= 0.025 fails uncorrected; under Holm over three means (0.0083)
    no six questions can be significant, and the evidence says so; the allowed drop still decides."""
    base = {m: [1.0] * 6 for m in ("faithfulness", "context_recall", "answer_completeness")}
    cand = base | {"faithfulness": [0.9] * 6}
    three = ["faithfulness", "context_recall", "answer_completeness"]
    plain = _check(_gate(tmp_path / "none", base, cand, _config(three, 100, "none")), "faithfulness: paired mean")
    assert plain.verdict == "fail" and "significantly lower (p <= 0.025)" in plain.evidence
    assert plain.details["sign_flip"]["pvalue"] == pytest.approx(0.5**6)
    holm = _check(_gate(tmp_path / "holm", base, cand, _config(three, 100)), "faithfulness: paired mean")
    assert holm.verdict == "pass" and holm.details["sign_flip"]["reachable"] is False
    assert "6 changed questions cannot reach significance at 0.00833 (smallest p 0.5**6 = 0.0156)" in holm.evidence
    # the verdict rule is unchanged: the same drop beyond max_mean_drop fails on it
    tight = _config(three, 100).replace("max_mean_drop = 1.0", "max_mean_drop = 0.05")
    held = _check(_gate(tmp_path / "tight", base, cand, tight), "faithfulness: paired mean")
    assert held.verdict == "fail" and held.evidence.startswith("mean dropped more than 0.05 |")


def test_a_reachable_level_missed_stays_a_bare_not_significant(tmp_path):
    """Ten questions down and ten up: p near 0.5, a level 0.5**20 could reach: no excuse is printed."""
    base = {"faithfulness": [0.5] * 20}
    cand = {"faithfulness": [0.4] * 10 + [0.6] * 10}
    mean = _check(_gate(tmp_path, base, cand, _config(["faithfulness"], 10000, "none")), "faithfulness: paired mean")
    assert mean.verdict == "pass" and mean.details["sign_flip"]["reachable"] is True
    assert mean.evidence.count("not significant at 0.025;") == 1 and "cannot reach" not in mean.evidence


def test_draws_capped_below_what_the_level_needs_say_so(tmp_path, monkeypatch):
    """Past the cap of draws (1,000,000; here 1,000 to keep the test fast) the Monte Carlo p cannot reach
    a tiny level (confidence 0.999: 0.0005): the evidence says the draws, not the data, fell short."""
    monkeypatch.setattr(checks, "MAX_SIGN_FLIP_DRAWS", 1000)
    base, cand = {"faithfulness": [1.0] * 20}, {"faithfulness": [0.9] * 20}
    mean = _check(_gate(tmp_path, base, cand, _config(["faithfulness"], 100, "none", confidence=0.999)),
                  "faithfulness: paired mean")
    flip = mean.details["sign_flip"]
    assert (flip["draws"], flip["method"], flip["reachable"]) == (1000, "monte carlo", False)
    assert "1000 draws cannot reach significance at 0.0005 (smallest p 1/1001)" in mean.evidence
