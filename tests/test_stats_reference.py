"""lewisrag.eval.stats against independent references: closed forms, scipy, hand computations.

tests/test_stats.py checks random inputs against statsmodels; this file covers the edge cases
(k = 0, k = n, n = 1, no discordant pairs, ties, one label, no score left) and the references
that do not share statsmodels' code.
"""

import json
import math

import numpy as np
import pytest
from scipy.stats import binomtest, bootstrap, chi2, norm, ttest_rel
from typer.testing import CliRunner

from conftest import write_jsonl
from lewisrag.cli import app
from lewisrag.eval import stats

GRID_N = (1, 2, 3, 5, 10, 37, 100)
LEVELS = (0.8, 0.9, 0.95, 0.99)


def _wilson(k: int, n: int, z: float) -> tuple[float, float]:
    """Wilson's score interval in closed form, for a normal quantile z."""
    p, den = k / n, 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z / den * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


# --- proportion intervals ------------------------------------------------------------------------


@pytest.mark.parametrize("confidence", LEVELS)
def test_wilson_two_sided_matches_the_closed_form_and_scipy(confidence):
    z = norm.ppf(0.5 + confidence / 2)
    for n in GRID_N:
        for k in range(n + 1):
            ours = stats.proportion_interval(k, n, confidence)
            ref = binomtest(k, n).proportion_ci(confidence, method="wilson")
            assert ours == pytest.approx(_wilson(k, n, z), abs=1e-12)
            assert ours == pytest.approx((ref.low, ref.high), abs=1e-12)


@pytest.mark.parametrize("confidence", LEVELS)
def test_wilson_one_sided_upper_bound_matches_the_closed_form_and_scipy(confidence):
    """The gate's bound: one-sided at `confidence` is the upper end of the z = Φ⁻¹(confidence) interval."""
    z = norm.ppf(confidence)
    for n in GRID_N:
        for k in range(n + 1):
            low, high = stats.proportion_interval(k, n, confidence, side="upper")
            ref = binomtest(k, n, alternative="less").proportion_ci(confidence, method="wilson")
            assert low == 0.0
            assert high == pytest.approx(_wilson(k, n, z)[1], abs=1e-12)
            assert high == pytest.approx(ref.high, abs=1e-12)


def test_wilson_bounds_at_k_0_and_k_n_are_0_and_1_exactly():
    """statsmodels rounded them to 5.6e-17 and 0.9999999999999999: n of n failures had a bound below 100%."""
    for n in GRID_N:
        for confidence in LEVELS:
            for side, alternative in (("two", "two-sided"), ("upper", "less")):
                for k in (0, n):
                    ours = stats.proportion_interval(k, n, confidence, side=side)
                    ref = binomtest(k, n, alternative=alternative).proportion_ci(confidence, method="wilson")
                    if k == n:
                        assert ours[1] == ref.high == 1.0
                    if k == 0 and side == "two":
                        assert ours[0] == ref.low == 0.0
                    assert ours[0] <= k / n <= ours[1]


@pytest.mark.parametrize("confidence", LEVELS)
def test_exact_intervals_match_scipy_at_the_edges(confidence):
    for n in GRID_N:
        for k in {0, 1 % (n + 1), n - 1, n}:
            two = binomtest(k, n).proportion_ci(confidence, method="exact")
            one = binomtest(k, n, alternative="less").proportion_ci(confidence, method="exact")
            assert stats.proportion_interval(k, n, confidence, method="exact") == pytest.approx((two.low, two.high))
            assert stats.proportion_interval(k, n, confidence, method="exact", side="upper") == pytest.approx((0.0, one.high))


# --- McNemar -------------------------------------------------------------------------------------


def _runs(b: int, c: int, agree: int = 3) -> tuple[list[bool], list[bool]]:
    """Two systems with b questions only A passes, c only B passes, and `agree` each both pass and fail."""
    a = [True] * b + [False] * c + [True] * agree + [False] * agree
    return a, [False] * b + [True] * c + [True] * agree + [False] * agree


DISCORDANT = [(0, 0), (1, 0), (0, 1), (5, 0), (3, 3), (7, 2), (2, 9), (12, 13), (400, 350), (1000, 1100)]


@pytest.mark.parametrize("b,c", DISCORDANT)
def test_mcnemar_exact_is_a_binomial_test_on_the_discordant_pairs(b, c):
    for alternative in ("two-sided", "greater", "less"):
        r = stats.mcnemar(*_runs(b, c), alternative=alternative)
        expected = 1.0 if b + c == 0 else binomtest(b, b + c, 0.5, alternative=alternative).pvalue
        assert (r["b"], r["c"], r["method"]) == (b, c, "exact")
        assert r["pvalue"] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("b,c", DISCORDANT)
def test_mcnemar_chi2_is_the_continuity_corrected_statistic(b, c):
    r = stats.mcnemar(*_runs(b, c), method="chi2")
    expected = 1.0 if b + c == 0 else chi2.sf(max(abs(b - c) - 1, 0) ** 2 / (b + c), df=1)
    assert r["pvalue"] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("n", [1, 2, 13, 40])
def test_mcnemar_chi2_of_a_tie_is_1(n):
    """b = c is no difference at all; the correction squared |b - c| - 1 = -1 and gave p = 0.48 at b = c = 1."""
    assert stats.mcnemar(*_runs(n, n), method="chi2")["pvalue"] == 1.0
    assert stats.mcnemar(*_runs(n, n), method="auto")["pvalue"] == 1.0


# --- bootstrap intervals -------------------------------------------------------------------------


def test_paired_bootstrap_is_scipys_paired_percentile_bootstrap():
    rng = np.random.default_rng(0)
    a = rng.random(50)
    b = a + rng.normal(0.02, 0.1, 50)
    ours = stats.paired_bootstrap(a.tolist(), b.tolist(), n_resamples=3000, seed=11, confidence=0.9)
    ref = bootstrap((a, b), lambda x, y, axis: np.mean(y - x, axis=axis), paired=True, n_resamples=3000,
                    confidence_level=0.9, method="percentile", rng=np.random.default_rng(11))
    assert (ours["low"], ours["high"]) == pytest.approx((ref.confidence_interval.low, ref.confidence_interval.high))
    # its p-value is the two-sided sign-flip test's, not a share of the bootstrap distribution (too small
    # where few questions differ: tests/test_stats_sign_flip.py)
    assert ours["pvalue"] == stats.sign_flip_test(a.tolist(), b.tolist(), "two-sided", 3000, 11)["pvalue"]
    assert ours["pvalue_method"] == "monte carlo"  # 50 differences: 2**50 sign assignments, 3000 drawn


def test_bootstrap_agrees_with_the_paired_t_test_on_many_questions():
    """With 400 questions the mean difference is nearly normal: the t interval and p-value are a reference."""
    rng = np.random.default_rng(1)
    a = rng.random(400)
    b = a + rng.normal(0.01, 0.1, 400)
    ours = stats.paired_bootstrap(a.tolist(), b.tolist(), n_resamples=4000)
    t = ttest_rel(b, a)
    ci = t.confidence_interval(0.95)
    width = ci.high - ci.low
    assert abs(ours["low"] - ci.low) < 0.05 * width and abs(ours["high"] - ci.high) < 0.05 * width
    assert ours["pvalue"] == pytest.approx(t.pvalue, abs=0.03)


def test_mean_interval_is_seeded_and_covers_a_known_mean():
    """A 95% interval of the mean of Bernoulli(0.3) draws covers 0.3 about 95% of the time."""
    p, n, sims = 0.3, 60, 200
    covered = 0
    for sim in range(sims):
        x = (np.random.default_rng(100 + sim).random(n) < p).astype(float).tolist()
        r = stats.mean_interval(x, n_resamples=1000, seed=sim)
        assert r == stats.mean_interval(x, n_resamples=1000, seed=sim)
        covered += r["low"] <= p <= r["high"]
    assert 0.9 <= covered / sims <= 0.99


def test_none_is_a_missing_score_like_nan():
    paired = stats.paired_bootstrap([1.0, None, 0.2, 0.4], [0.5, 1.0, None, 0.9])
    assert (paired["n"], paired["nan"]) == (2, 2)
    assert paired == stats.paired_bootstrap([1.0, 0.4], [0.5, 0.9]) | {"nan": 2}
    single = stats.mean_interval([None, 0.25, 0.75])
    assert (single["n"], single["nan"], single["mean"]) == (2, 1, 0.5)
    nothing = stats.mean_interval([None])
    assert nothing["n"] == 0 and math.isnan(nothing["mean"]) and math.isnan(nothing["low"])


def test_one_score_or_equal_scores_give_a_point_interval():
    """Every resample of one question, or of equal differences, has the same mean (scipy calls it degenerate).
    The p-value is the exact two-sided sign-flip test's, never 0: one question proves nothing (p = 1),
    five equal differences are as extreme in 2 of 32 sign assignments, none at all gives 1."""
    for (a, b), p in ((([0.3], [0.1]), 1.0), (([0.3] * 5, [0.5] * 5), 2 / 32), (([0.7] * 4, [0.7] * 4), 1.0)):
        r = stats.paired_bootstrap(a, b)
        diff = b[0] - a[0]
        assert (r["mean_diff"], r["low"], r["high"]) == (diff, diff, diff)
        assert r["pvalue"] == pytest.approx(p) and r["pvalue_method"] == "exact"
    r = stats.mean_interval([0.4] * 3)
    assert r["low"] == r["high"] == r["mean"] == pytest.approx(0.4)


# --- Cohen's kappa and the judge's confusion -----------------------------------------------------


def _kappa_by_hand(a: list, b: list) -> float:
    n = len(a)
    p_o = sum(x == y for x, y in zip(a, b)) / n
    p_e = sum(a.count(label) / n * b.count(label) / n for label in set(a) | set(b))
    return math.nan if p_e == 1 else (p_o - p_e) / (1 - p_e)


@pytest.mark.parametrize("a,b", [
    ([True] * 4, [False] * 4),                               # each rater one label, not the same: p_o = p_e = 0
    ([True] * 4, [True] * 4),                                # one label for both: 0/0
    ([True], [False]),
    ([True, False] * 3, [True, False] * 3),                  # perfect agreement
    ([True, False] * 3, [False, True] * 3),                  # perfect disagreement
    ([True] * 3 + [False], [True] * 4),                      # the judge always says supported
    ([False] * 4, [False] * 3 + [True]),                     # the humans always say unsupported
    ([True] * 6 + [False] * 4, [True] * 5 + [False] * 4 + [True]),
    (["a", "b", "c", "a"], ["a", "c", "c", "b"]),
])
def test_kappa_matches_the_hand_computation(a, b):
    expected = _kappa_by_hand(a, b)
    got = stats.cohen_kappa(a, b)
    assert math.isnan(got) if math.isnan(expected) else got == pytest.approx(expected, abs=1e-12)


def test_a_judge_that_decides_nothing_measures_nothing():
    r = stats.judge_confusion([True, False, True], [None, None, None])
    assert (r["n"], r["undecided"], r["kappa"], r["miss_rate"], r["false_kill_rate"]) == (0, 3, None, None, None)
    assert r["miss_rate_interval"] == [0.0, 1.0]


def test_calibrate_table_counts_the_decided_labels_as_decided(tmp_path):
    """The rates' denominators leave undecided labels out; the table said "5 (2 supported, ...)" of 3 supported."""
    rows = [{"id": f"s{i}", "premise": "p", "hypothesis": f"h{i}", "supported": i % 2 == 0} for i in range(5)]
    labels = write_jsonl(tmp_path / "labels.jsonl", rows)
    judge = write_jsonl(tmp_path / "judge.jsonl", rows[:4])  # s4 has no judge label: undecided
    args = ["calibrate", "--judge", f"labels:{judge}", "--labels", str(labels)]
    res = CliRunner().invoke(app, args, terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "labels 5; decided by the judge: 4 (2 supported, 2 unsupported)" in " ".join(res.stdout.replace("│", " ").split())
    r = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert (r["n"], r["undecided"], r["human_supported"], r["human_unsupported"]) == (4, 1, 2, 2)


# --- prediction-powered inference ----------------------------------------------------------------


def test_ppi_mean_is_the_rectified_mean_with_both_variances():
    rng = np.random.default_rng(3)
    human = (rng.random(40) < 0.6).astype(float)
    judged = (rng.random(40) < 0.7).astype(float)
    unlabeled = rng.random(500)
    r = stats.ppi_mean(human, judged, unlabeled, confidence=0.9)
    estimate = unlabeled.mean() + (human - judged).mean()
    se = math.sqrt(np.var(unlabeled, ddof=1) / 500 + np.var(human - judged, ddof=1) / 40)
    z = norm.ppf(0.95)
    assert (r["estimate"], r["low"], r["high"]) == pytest.approx((estimate, estimate - z * se, estimate + z * se))
