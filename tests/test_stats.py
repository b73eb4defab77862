"""lewisrag.eval.stats: the chapter's numbers, and agreement with scipy/statsmodels on random inputs."""

import doctest
import math

import numpy as np
import pytest
from scipy.stats import beta, binomtest
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.inter_rater import cohens_kappa
from statsmodels.stats.proportion import proportion_confint

from lewisrag.eval import stats
from lewisrag.eval.stats.intervals import upper_bound


# --- the chapter's numbers -----------------------------------------------------------------------


def test_three_in_hundred_wilson_two_sided():
    low, high = stats.proportion_interval(3, 100)
    assert round(low * 100, 1) == 1.0 and round(high * 100, 1) == 8.5


def test_three_in_hundred_one_sided_upper_bounds():
    assert stats.proportion_interval(3, 100, side="upper") == (0.0, pytest.approx(0.073, abs=5e-4))
    assert stats.proportion_interval(3, 100, method="exact", side="upper") == (0.0, pytest.approx(0.076, abs=5e-4))
    # neither proves "unfaithful rate <= 5%"
    assert stats.proportion_interval(3, 100, side="upper")[1] > 0.05


def test_ten_of_ten_correct_bounds_failure_rate_at_26_percent():
    _, high = stats.proportion_interval(0, 10, method="exact", side="upper")
    assert high == pytest.approx(1 - 0.05 ** (1 / 10))
    assert round(high, 2) == 0.26


def test_situations_a_and_b():
    a = stats.score_distribution([1.0] * 95 + [0.0] * 5)
    b = stats.score_distribution([0.95] * 100)
    assert a["mean"] == pytest.approx(0.95) and b["mean"] == pytest.approx(0.95)
    assert (a["share_below_1"], b["share_below_1"]) == (0.05, 1.0)
    assert (a["share_below_0.5"], b["share_below_0.5"]) == (0.05, 0.0)


# --- score_distribution ------------------------------------------------------------------------


def test_nan_is_counted_apart_never_averaged():
    d = stats.score_distribution([1.0, None, float("nan"), 0.0])
    assert (d["n"], d["nan"], d["mean"]) == (2, 2, 0.5)
    assert sum(d["histogram"]["counts"]) == 2


def test_all_nan_gives_nulls():
    d = stats.score_distribution([None, float("nan")])
    assert d["n"] == 0 and d["nan"] == 2 and d["mean"] is None and d["share_below_1"] is None


def test_histogram_widens_for_negative_scores():
    d = stats.score_distribution([-0.5, 0.2, 1.0], bins=3)
    assert d["histogram"]["edges"][0] == -0.5 and d["histogram"]["edges"][-1] == 1.0
    assert d["histogram"]["counts"] == [1, 1, 1]


# --- intervals and sample sizes against statsmodels / scipy ------------------------------------


def test_intervals_match_statsmodels_and_scipy():
    rng = np.random.default_rng(1)
    for _ in range(60):
        n = int(rng.integers(1, 300))
        k = int(rng.integers(0, n + 1))
        conf = float(rng.choice([0.9, 0.95, 0.99]))
        assert stats.proportion_interval(k, n, conf) == pytest.approx(
            proportion_confint(k, n, alpha=1 - conf, method="wilson"))
        exact = binomtest(k, n).proportion_ci(conf, method="exact")
        assert stats.proportion_interval(k, n, conf, method="exact") == pytest.approx((exact.low, exact.high))
        upper = 1.0 if k == n else beta.ppf(conf, k + 1, n - k)
        assert stats.proportion_interval(k, n, conf, method="exact", side="upper")[1] == pytest.approx(upper)
        one_sided = binomtest(k, n, alternative="less").proportion_ci(conf, method="wilson").high
        assert stats.proportion_interval(k, n, conf, side="upper")[1] == pytest.approx(one_sided)


def test_bad_proportion_arguments_raise():
    for args in [(4, 3), (-1, 3)]:
        with pytest.raises(ValueError):
            stats.proportion_interval(*args)
    with pytest.raises(ValueError):
        stats.proportion_interval(1, 3, method="wald")
    with pytest.raises(ValueError):
        stats.proportion_interval(1, 3, confidence=1.5)


@pytest.mark.parametrize("rate,target,method", [(0.0, 0.05, "exact"), (0.03, 0.05, "wilson"),
                                                (0.03, 0.05, "exact"), (0.01, 0.02, "wilson")])
def test_sample_size_is_the_smallest_that_proves_the_target(rate, target, method):
    n = stats.sample_size_for_upper_bound(rate, target, method=method)
    assert upper_bound(rate * n, n, 0.95, method) <= target
    assert upper_bound(rate * (n - 1), n - 1, 0.95, method) > target


def test_sample_size_three_percent_needs_hundreds_of_questions():
    n = stats.sample_size_for_upper_bound(0.03, 0.05)
    assert 200 < n < 1000
    assert stats.sample_size_for_upper_bound(0.05, 0.05) is None


# --- McNemar -------------------------------------------------------------------------------------


def test_mcnemar_matches_statsmodels_on_random_pairs():
    rng = np.random.default_rng(2)
    for _ in range(60):
        n = int(rng.integers(1, 200))
        a = rng.random(n) < rng.random()
        b = rng.random(n) < rng.random()
        table = [[np.sum(a & b), np.sum(a & ~b)], [np.sum(~a & b), np.sum(~a & ~b)]]
        ours = stats.mcnemar(a.tolist(), b.tolist())
        assert (ours["b"], ours["c"]) == (table[0][1], table[1][0])
        assert ours["pvalue"] == pytest.approx(min(1.0, sm_mcnemar(table, exact=True).pvalue))
        chi2 = stats.mcnemar(a.tolist(), b.tolist(), method="chi2")
        if chi2["b"] != chi2["c"]:  # at b = c statsmodels squares |b - c| - 1 = -1 (tests/test_stats_reference.py)
            assert chi2["pvalue"] == pytest.approx(sm_mcnemar(table, exact=False, correction=True).pvalue)


def test_mcnemar_auto_switches_to_chi2_for_many_discordant_pairs():
    assert stats.mcnemar([True] * 10, [False] * 10, method="auto")["method"] == "exact"
    assert stats.mcnemar([True] * 30, [False] * 30, method="auto")["method"] == "chi2"


def test_mcnemar_one_sided_and_degenerate():
    assert stats.mcnemar([True] * 5, [False] * 5, alternative="greater")["pvalue"] == pytest.approx(0.5**5)
    assert stats.mcnemar([True] * 5, [False] * 5, alternative="less")["pvalue"] == 1.0
    assert stats.mcnemar([True, False], [True, False])["pvalue"] == 1.0
    with pytest.raises(ValueError):
        stats.mcnemar([True], [True, False])


# --- bootstrap -----------------------------------------------------------------------------------


def test_paired_bootstrap_is_seeded_and_sensible():
    rng = np.random.default_rng(3)
    a = rng.random(80)
    b = a + 0.1 + rng.normal(0, 0.05, 80)
    r1 = stats.paired_bootstrap(a.tolist(), b.tolist(), n_resamples=2000, seed=7)
    r2 = stats.paired_bootstrap(a.tolist(), b.tolist(), n_resamples=2000, seed=7)
    assert r1 == r2
    assert r1["mean_diff"] == pytest.approx(float(np.mean(b - a)))
    assert r1["low"] < r1["mean_diff"] < r1["high"] and r1["low"] > 0
    assert r1["pvalue"] < 0.01
    same = stats.paired_bootstrap(a.tolist(), (a + rng.normal(0, 0.05, 80)).tolist(), n_resamples=2000)
    assert same["low"] < 0 < same["high"] and same["pvalue"] > 0.01


def test_paired_bootstrap_drops_nan_pairs():
    r = stats.paired_bootstrap([1.0, float("nan"), 0.0], [1.0, 1.0, 0.0])
    assert (r["n"], r["nan"], r["mean_diff"]) == (2, 1, 0.0)
    assert math.isnan(stats.paired_bootstrap([float("nan")], [1.0])["mean_diff"])


# --- kappa and judge confusion -------------------------------------------------------------------


def test_kappa_matches_statsmodels_on_random_labels():
    rng = np.random.default_rng(4)
    for _ in range(40):
        n = int(rng.integers(5, 100))
        a = rng.integers(0, 3, n)
        b = np.where(rng.random(n) < 0.6, a, rng.integers(0, 3, n))
        table = np.zeros((3, 3))
        for x, y in zip(a, b):
            table[x, y] += 1
        keep = (table.sum(0) + table.sum(1)) > 0
        expected = cohens_kappa(table[keep][:, keep]).kappa
        assert stats.cohen_kappa(a.tolist(), b.tolist()) == pytest.approx(expected)


def test_kappa_hand_formula_and_undefined_case():
    # p_o = 0.8; p_e = 0.6*0.6 + 0.4*0.4 = 0.52; kappa = 0.28 / 0.48
    a = [True] * 6 + [False] * 4
    b = [True] * 5 + [False] * 4 + [True]
    assert stats.cohen_kappa(a, b) == pytest.approx(0.28 / 0.48)
    assert math.isnan(stats.cohen_kappa([True, True], [True, True]))


def test_kappa_of_a_judge_that_gives_one_label_is_zero_without_a_warning():
    """statsmodels' z-test divides by a zero variance then: calibrate printed its RuntimeWarning."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert stats.cohen_kappa([True, True, False, True], [True] * 4) == 0.0


def test_judge_confusion_separates_misses_from_false_kills():
    human = [False] * 10 + [True] * 20
    judge = [True] * 2 + [False] * 8 + [False] * 5 + [True] * 14 + [None]
    r = stats.judge_confusion(human, judge)
    assert (r["misses"], r["false_kills"], r["undecided"], r["n"]) == (2, 5, 1, 29)
    assert r["miss_rate"] == pytest.approx(0.2) and r["false_kill_rate"] == pytest.approx(5 / 19)
    assert r["miss_rate_interval"] == pytest.approx(list(proportion_confint(2, 10, alpha=0.05, method="wilson")))
    assert r["agreement"] == pytest.approx(22 / 29)
    assert r["kappa"] == pytest.approx(stats.cohen_kappa(human[:-1], [bool(x) for x in judge[:-1]]))


# --- prediction-powered inference ----------------------------------------------------------------


def test_ppi_interval_covers_the_true_mean():
    """A judge that says "supported" too often: PPI stays centred, the judge's own mean does not."""
    rng = np.random.default_rng(5)
    p_true, n_lab, n_unl, sims = 0.7, 150, 2000, 200
    covered, naive_covered = 0, 0
    for _ in range(sims):
        y = rng.random(n_lab + n_unl) < p_true
        # the judge misses 30% of unsupported statements and false-kills 5% of supported ones
        f = np.where(y, rng.random(y.size) > 0.05, rng.random(y.size) < 0.3)
        r = stats.ppi_mean(y[:n_lab], f[:n_lab], f[n_lab:])
        covered += r["low"] <= p_true <= r["high"]
        naive_covered += abs(f[n_lab:].mean() - p_true) < 0.02
    assert covered / sims >= 0.9
    assert naive_covered / sims < 0.1  # the uncorrected judge mean is biased


def test_ppi_rejects_nan_and_tiny_inputs():
    with pytest.raises(ValueError):
        stats.ppi_mean([1.0, float("nan")], [1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError):
        stats.ppi_mean([1.0], [1.0], [1.0, 1.0])


# --- report sections and the docs ----------------------------------------------------------------


def test_report_docstrings_and_sections():
    from lewisrag.eval.reports import distributions as stats_report

    assert doctest.testmod(stats_report).failed == 0
    agg = {"faithfulness": stats.score_distribution([1.0, 0.4, None]), "citation_status_counts": {"PASS": 3},
           "not_in_kb": {"n": 2, "refused": 1}}
    md = stats_report.distribution_markdown(agg)
    assert "| faithfulness | 2 | 1 | 0.700 |" in md and "citation_status_counts" not in md
    assert "1 of 2 refused" in md


def test_figures_are_written(tmp_path):
    from lewisrag.eval.reports import distributions as stats_report

    stats_report.situations_figure(tmp_path / "s.png")
    stats_report.histogram_figure({"faithfulness": stats.score_distribution([1.0, 0.5])}, tmp_path / "h.png")
    for name in ("s.png", "h.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_docs_quote_the_numbers_the_code_computes():
    from pathlib import Path

    from lewisrag.eval.reports import distributions as stats_report

    doc = (Path(__file__).parents[1] / "docs" / "statistics.md").read_text(encoding="utf-8")
    table = [line for line in stats_report.situations_markdown().splitlines() if line.startswith("| A") or line.startswith("| B")]
    assert table and all(line in doc for line in table)
    assert (Path(__file__).parents[1] / "docs" / "statistics_situations.png").exists()
    low, high = stats.proportion_interval(3, 100)
    assert f"{low:.1%} to {high:.1%}" in doc
    for n in (stats.sample_size_for_upper_bound(0.03, 0.05), stats.sample_size_for_upper_bound(0.03, 0.05, method="exact"),
              stats.sample_size_for_upper_bound(0.0, 0.05, method="exact")):
        assert f"# {n}" in doc


def test_the_gate_runs_one_sign_flip_test_per_mean_and_a_batch_that_does_not_grow_with_n(monkeypatch):
    """paired_bootstrap ran a two-sided sign-flip test whose p-value the gate overwrote with its own one-sided
    test's (the same cost again per metric); and scipy's batch of 1,000 resamples held n floats each (6.4 GB
    at 100,000 questions)."""
    import lewisrag.eval.stats.paired as paired
    from lewisrag.eval.stats.checks import resample_batch

    calls = []
    real = paired.sign_flip_test
    monkeypatch.setattr(paired, "sign_flip_test", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    r = paired.paired_bootstrap([0.5, 0.2, 0.9, 0.4], [0.7, 0.1, 1.0, 0.6], 200, 0, 0.95, pvalue=False)
    assert "pvalue" not in r and r["n"] == 4 and calls == []
    assert "pvalue" in paired.paired_bootstrap([0.5, 0.2], [0.7, 0.1], 200) and calls == ["two-sided"]
    assert resample_batch(8_000) == 1000 and resample_batch(1_000_000) * 1_000_000 <= 1 << 23
