"""stats.sign_flip_test, the paired test that decides whether a mean got significantly worse, against
brute-force enumeration of every sign assignment; and the cases where the percentile bootstrap's
p-value was far too small (one question, a few questions differing all one way)."""

import itertools
import math

import numpy as np
import pytest

from lewisrag.eval import stats


def _brute(diffs, alternative: str) -> float:
    """The exact p-value: the share of all 2**n sign assignments whose sum is as extreme as the observed one."""
    d = np.asarray(diffs, dtype=float)
    obs = d.sum()
    sums = np.array([np.dot(signs, np.abs(d)) for signs in itertools.product([1, -1], repeat=d.size)])
    tol = 1e-12
    if alternative == "less":
        return float(np.mean(sums <= obs + tol))
    if alternative == "greater":
        return float(np.mean(sums >= obs - tol))
    return float(np.mean(np.abs(sums) >= abs(obs) - tol))


CASES = [
    [-0.01],
    [-0.01, -0.01, -0.01],
    [-0.1, -0.1, -0.1, -0.1],
    [-0.5, 0.1, -0.2],
    [0.3, -0.1, -0.25, -0.4, 0.05, -0.6],
    [0.2, 0.2, -0.2, -0.5, -0.75, 0.25, -1.0, -0.1],
    [-0.2, 0.4, -0.6, -0.8, 1.0, -0.3, -0.7, 0.5, -0.9, -0.05, -0.45],
]


@pytest.mark.parametrize("diffs", CASES)
@pytest.mark.parametrize("alternative", ["less", "greater", "two-sided"])
def test_small_cases_are_exact_and_match_brute_force_enumeration(diffs, alternative):
    a = [1.0] * len(diffs)
    b = [1.0 + d for d in diffs]
    r = stats.sign_flip_test(a, b, alternative)
    expect = _brute(np.array(b) - np.array(a), alternative)
    assert r["method"] == "exact" and r["pvalue"] == pytest.approx(expect, rel=1e-12)
    assert r["nonzero"] == len(diffs)


def test_zero_differences_are_left_out_so_the_test_stays_exact():
    """The reviewer's n=40 case: 4 questions drop by 0.1, 36 unchanged; exact one-sided p = 0.5**4, where
    the percentile bootstrap said about 0.025 (and a drop of 2**40 assignments to 10,000 draws)."""
    r = stats.sign_flip_test([1.0] * 40, [0.9] * 4 + [1.0] * 36, "less")
    assert (r["n"], r["nonzero"], r["method"]) == (40, 4, "exact")
    assert r["pvalue"] == pytest.approx(0.5**4)
    # three of six questions drop by 0.01: 0.5**3, where the bootstrap said 0.032
    assert stats.sign_flip_test([1.0] * 6, [0.99] * 3 + [1.0] * 3, "less")["pvalue"] == pytest.approx(0.125)


def test_one_question_or_none_changed_is_never_significant():
    one = stats.sign_flip_test([1.0], [0.99], "less")
    assert one["pvalue"] == 0.5 and one["method"] == "exact"  # the only other assignment is the rise
    assert stats.sign_flip_test([1.0], [0.99], "greater")["pvalue"] == 1.0
    assert stats.sign_flip_test([1.0], [0.99])["pvalue"] == 1.0
    assert stats.sign_flip_test([0.5] * 7, [0.5] * 7, "less")["pvalue"] == 1.0
    nan = stats.sign_flip_test([float("nan")], [1.0], "less")
    assert math.isnan(nan["pvalue"]) and (nan["n"], nan["nan"]) == (0, 1)


def test_many_differences_use_the_seeded_monte_carlo_and_never_give_zero():
    rng = np.random.default_rng(5)
    a = rng.random(60)
    b = a - 0.3  # every question worse: the exact p is 2**-60
    r1 = stats.sign_flip_test(a.tolist(), b.tolist(), "less", n_resamples=2000, seed=3)
    assert r1 == stats.sign_flip_test(a.tolist(), b.tolist(), "less", n_resamples=2000, seed=3)
    assert r1["method"] == "monte carlo" and r1["pvalue"] == pytest.approx(1 / 2001)
    noise = (a + rng.normal(0, 0.1, 60)).tolist()
    p = stats.sign_flip_test(a.tolist(), noise, "two-sided", n_resamples=5000)["pvalue"]
    exact_ish = stats.sign_flip_test(a.tolist(), noise, "two-sided", n_resamples=200_000, seed=1)["pvalue"]
    assert p == pytest.approx(exact_ish, abs=0.03)


def test_a_large_real_regression_is_significant():
    rng = np.random.default_rng(2)
    a = rng.uniform(0.5, 1.0, 100)
    b = np.clip(a - rng.normal(0.1, 0.1, 100), 0, 1)
    assert stats.sign_flip_test(a.tolist(), b.tolist(), "less")["pvalue"] < 0.001


def test_paired_bootstrap_reports_the_two_sided_sign_flip_p():
    """The bootstrap keeps its interval (the size of the change); its p-value is the sign-flip test's,
    so one question no longer gives p = 0."""
    r = stats.paired_bootstrap([1.0], [0.99])
    assert (r["low"], r["high"]) == (r["mean_diff"], r["mean_diff"]) and r["pvalue"] == 1.0
    r = stats.paired_bootstrap([1.0] * 6, [0.99] * 3 + [1.0] * 3)
    assert r["high"] < 0 and r["pvalue"] == pytest.approx(0.25) and r["pvalue_method"] == "exact"


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="alternative"):
        stats.sign_flip_test([1.0], [0.5], "lower")
    with pytest.raises(ValueError, match="n_resamples"):
        stats.sign_flip_test([1.0], [0.5], "less", n_resamples=0)
    with pytest.raises(ValueError):
        stats.sign_flip_test([1.0, 0.5], [0.5])
