"""The gate on lower-is-better metrics (RAGChecker's claims.hallucination and noise sensitivities), and
its test of a paired mean (a sign-flip permutation test) on small and sparse changes.

A rise of hallucination is a regression: every check (the paired mean, the cuts, ceilings) must fail
on it, and pass on a fall, the mirror of the higher-is-better metrics; the evidence says which way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lewisrag.data.io import InputError
from lewisrag.eval import gate
from lewisrag.eval.gate import load_config
from lewisrag.eval.results import LOWER_IS_BETTER, METRIC_RANGES, better_direction
from test_gate import _check, _failed, fixtures

HALL = "claims.hallucination"


def _run(path: Path, scores: dict[str, list[float]]) -> Path:
    n = len(next(iter(scores.values())))
    records = [{"id": f"q{i:03d}", "system": None, "category": "single_doc",
                "metrics": {m: v[i] for m, v in scores.items()}, "nan_reasons": {}} for i in range(n)]
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.json").write_text(json.dumps({"judge": fixtures.JUDGE, "splitter": fixtures.SPLITTER,
                                                   "records": records}), encoding="utf-8")
    return path


def _gate(tmp_path: Path, base: dict, cand: dict, config: str) -> gate.GateReport:
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = tmp_path / "gate.toml"
    cfg.write_text(config, encoding="utf-8")
    return gate.gate(_run(tmp_path / "b", base), _run(tmp_path / "c", cand), cfg)


def _metric(metric: str, **extra) -> str:
    return f'[tier3]\nmetrics = ["{metric}"]\n' + "".join(f"{k} = {v}\n" for k, v in extra.items())


def test_the_directions_are_recorded_once_beside_the_ranges():
    assert LOWER_IS_BETTER == {"claims.hallucination", "claims.noise_sensitivity_in_relevant",
                               "claims.noise_sensitivity_in_irrelevant"}
    assert LOWER_IS_BETTER <= METRIC_RANGES.keys()
    assert better_direction("faithfulness") == better_direction("claims.faithfulness") == 1
    assert all(better_direction(m) == -1 for m in LOWER_IS_BETTER)


@pytest.mark.parametrize("metric", sorted(LOWER_IS_BETTER))
def test_a_rise_of_a_lower_is_better_metric_fails_and_a_fall_passes(tmp_path, metric):
    """The reviewer's case: hallucination 0.0 -> 1.0 on 20 questions passed, 1.0 -> 0.0 failed."""
    zero, one = {metric: [0.0] * 20}, {metric: [1.0] * 20}
    worse = _gate(tmp_path / "up", zero, one, _metric(metric))
    assert _failed(worse) == {f"{metric}: paired mean", f"{metric} > 0", f"{metric} > 0.5"}
    mean = _check(worse, f"{metric}: paired mean")
    assert "significantly higher" in mean.evidence and "allowed rise 0.02" in mean.evidence
    assert mean.evidence.startswith("mean rose more than 0.02 |") and "worse on 20" in mean.evidence
    assert mean.details["better"] == "lower" and mean.details["sign_flip"]["alternative"] == "greater"
    cut = _check(worse, f"{metric} > 0.5")
    assert "share above 0.5: 0.0% -> 100.0%" in cut.evidence and cut.details["mcnemar"]["b"] == 20
    assert (cut.details["baseline_failing"], cut.details["candidate_failing"]) == (0, 20)
    better = _gate(tmp_path / "down", one, zero, _metric(metric))
    assert better.passed and not _failed(better)
    assert "worse on 0" in _check(better, f"{metric}: paired mean").evidence
    assert _check(better, f"{metric} > 0").details["mcnemar"]["c"] == 20  # recovered


def test_higher_is_better_metrics_keep_their_direction(tmp_path):
    one, zero = {"faithfulness": [1.0] * 20}, {"faithfulness": [0.0] * 20}
    worse = _gate(tmp_path / "down", one, zero, _metric("faithfulness"))
    assert _failed(worse) == {"faithfulness: paired mean", "faithfulness < 1", "faithfulness < 0.5"}
    assert "significantly lower" in _check(worse, "faithfulness: paired mean").evidence
    assert "share below 0.5" in _check(worse, "faithfulness < 0.5").evidence
    assert _gate(tmp_path / "up", zero, one, _metric("faithfulness")).passed


def test_a_small_rise_is_within_the_allowed_rise_and_a_mean_rising_too_far_fails(tmp_path):
    """0.2 -> 0.21 on every question: a rise of 0.01 (allowed 0.02) that every question shares, so the
    sign-flip test calls it significant; cuts: the cut at 1.0 mirrored is "above 0", both runs fail it."""
    report = _gate(tmp_path / "a", {HALL: [0.2] * 20}, {HALL: [0.21] * 20}, _metric(HALL))
    mean = _check(report, f"{HALL}: paired mean")
    assert mean.verdict == "fail" and "significantly higher" in mean.evidence
    assert _check(report, f"{HALL} > 0").verdict == "pass"  # 100% -> 100% above 0: nothing regressed
    # one question of 20 from 0 to 0.3: the mean rises 0.015, allowed, p = 0.5; but it newly exceeds 0
    sparse = _gate(tmp_path / "b", {HALL: [0.0] * 20}, {HALL: [0.3] + [0.0] * 19},
                   _metric(HALL, cuts="[{ below = 1.0, max_regressions = 0 }]"))
    assert _check(sparse, f"{HALL}: paired mean").verdict == "pass"
    assert _failed(sparse) == {f"{HALL} > 0"}
    # the allowed rise, crossed without significance (one question: p = 0.5)
    far = _gate(tmp_path / "c", {HALL: [0.0] * 10}, {HALL: [0.5] + [0.0] * 9}, _metric(HALL, cuts="[]"))
    check = _check(far, f"{HALL}: paired mean")
    assert check.verdict == "fail" and check.evidence.startswith("mean rose more than 0.02 |")
    assert "not significant" in check.evidence


def test_a_ceiling_on_a_lower_is_better_metric_counts_the_questions_above(tmp_path):
    ceiling = f'ceilings = [{{ metric = "{HALL}", above = 0.0, max_share = 0.2 }}]'
    clean, bad = {HALL: [0.0] * 60}, {HALL: [0.0] * 30 + [0.5] * 30}
    name = f"share {HALL} > 0 <= 20.0%"
    ok = _gate(tmp_path / "ok", clean, clean, _metric(HALL, cuts="[]") + ceiling + "\n")
    assert _check(ok, name).verdict == "pass" and _check(ok, name).details["k"] == 0
    assert "above 0: 0/60" in _check(ok, name).evidence
    fail = _gate(tmp_path / "bad", clean, bad, _metric(HALL, cuts="[]") + ceiling + "\n")
    assert _check(fail, name).verdict == "fail" and _check(fail, name).details["k"] == 30


@pytest.mark.parametrize(("ceiling", "field", "message"), [
    (f'{{ metric = "{HALL}", below = 1.0, max_share = 0.05 }}', "tier3.ceilings[0].below", "lower-is-better: set `above`"),
    ('{ metric = "faithfulness", above = 0.0, max_share = 0.05 }', "tier3.ceilings[0].above", "higher-is-better"),
    (f'{{ metric = "{HALL}", above = 1.0, max_share = 0.05 }}', "tier3.ceilings[0].above", "outside [0, 1)"),
    (f'{{ metric = "{HALL}", above = 0.0, below = 1.0, max_share = 0.05 }}', "tier3.ceilings[0]", "expected a table"),
])
def test_a_ceiling_must_name_the_worse_side_of_its_metric(tmp_path, ceiling, field, message):
    cfg = tmp_path / "gate.toml"
    cfg.write_text(f"[tier3]\nceilings = [{ceiling}]\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        load_config(cfg)
    assert e.value.field == field and message in e.value.message and e.value.line == 2


# --- the paired mean on small and sparse changes -----------------------------------------------


def test_a_drop_on_one_question_is_not_significant(tmp_path):
    """n = 1, 1.0 -> 0.99 (allowed drop 0.02): the bootstrap gave a point interval and p = 0, a failure."""
    report = _gate(tmp_path, {"faithfulness": [1.0]}, {"faithfulness": [0.99]}, _metric("faithfulness"))
    mean = _check(report, "faithfulness: paired mean")
    assert mean.verdict == "pass" and mean.details["sign_flip"]["pvalue"] == 0.5, mean.evidence
    assert "sign-flip p=0.5 (one-sided, 1 changed, exact), not significant at 0.025" in mean.evidence


@pytest.mark.parametrize(("n", "changed", "drop", "p"), [(6, 3, 0.01, 0.125), (40, 4, 0.1, 0.0625), (3, 3, 0.01, 0.125)])
def test_a_few_questions_dropping_are_not_significant(tmp_path, n, changed, drop, p):
    """The reviewer's n=6 (bootstrap p 0.032) and n=40 (0.025) cases: exact sign-flip p = 0.5**changed."""
    base = {"faithfulness": [1.0] * n}
    cand = {"faithfulness": [1.0 - drop] * changed + [1.0] * (n - changed)}
    report = _gate(tmp_path, base, cand, _metric("faithfulness", cuts="[]"))
    mean = _check(report, "faithfulness: paired mean")
    assert mean.verdict == "pass" and report.passed, mean.evidence
    assert mean.details["sign_flip"]["pvalue"] == pytest.approx(p) and mean.details["sign_flip"]["method"] == "exact"
    assert f"sign-flip p={p:.3g}" in mean.evidence and "(bootstrap)" in mean.evidence


def test_a_large_regression_still_fails(tmp_path):
    """30 of 40 questions drop by 0.01 (a mean drop of 0.0075, allowed): significant, p well under 0.025."""
    base = {"faithfulness": [1.0] * 40}
    cand = {"faithfulness": [0.99] * 30 + [1.0] * 10}
    report = _gate(tmp_path / "a", base, cand, _metric("faithfulness", cuts="[]"))
    mean = _check(report, "faithfulness: paired mean")
    assert mean.verdict == "fail" and "significantly lower (p <= 0.025)" in mean.evidence
    assert mean.details["sign_flip"]["pvalue"] < 0.001
    # and a collapse on 20 questions of 20, with the packaged cuts
    report = _gate(tmp_path / "b", {"faithfulness": [0.9] * 20}, {"faithfulness": [0.4] * 20}, _metric("faithfulness"))
    assert {"faithfulness: paired mean", "faithfulness < 0.5"} <= _failed(report)


def test_retrievals_mean_is_decided_by_the_sign_flip_test_too(tmp_path):
    """Recall@5 lost on 3 of 6 questions at 0.9 (hit_at 0.5 keeps them hits): a mean drop of 0.05
    fails on the allowed drop alone, not on significance (p = 0.125)."""
    def run(path, recalls):
        records = [{"id": f"q{i}", "system": None, "category": "single_doc",
                    "metrics": {"recall_at_k": {"5": r}}, "nan_reasons": {}} for i, r in enumerate(recalls)]
        path.mkdir(parents=True)
        (path / "results.json").write_text(json.dumps({"records": records}), encoding="utf-8")
        return path
    cfg = tmp_path / "gate.toml"
    cfg.write_text("[tier2]\nhit_at = 0.5\n", encoding="utf-8")
    report = gate.gate(run(tmp_path / "b", [1.0] * 6), run(tmp_path / "c", [0.9] * 3 + [1.0] * 3), cfg)
    check = _check(report, "recall@5")
    assert check.verdict == "fail" and check.evidence.startswith("mean dropped more than 0 |"), check.evidence
    assert "significantly" not in check.evidence.split("|")[0]
    assert check.details["sign_flip"]["pvalue"] == pytest.approx(0.125)
