"""stats.sign_flip_test where float differences do not cancel: sums that are equal as numbers must tie.

0.5 - 0.3 and 0.5 - 0.7 are 0.2 and -0.19999999999999996 in floats; their sum, 5.6e-17, is no rise,
yet scipy's tie tolerance (relative to the observed sum, so 0 here) counted the assignment of the
observed signs alone as "as high": 0.5 where the exact p is 0.75. Checked against an enumeration of
every sign assignment in exact rational arithmetic, on scores as they arise: tenths (0.1, 0.2, 0.3),
hundredths, shares k/n of a few statements, cosines in [-1, 1]."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import numpy as np
import pytest

from lewisrag.eval import stats

ALTERNATIVES = ("less", "greater", "two-sided")


def _rational_p(a: list[Fraction], b: list[Fraction], alternative: str) -> float:
    """The exact p-value: the share of all 2**n sign assignments whose sum is as extreme as the
    observed one, in integers over the differences' common denominator (no float anywhere)."""
    d = [y - x for x, y in zip(a, b)]
    den = math.lcm(*(x.denominator for x in d))
    di = np.array([int(x * den) for x in d], dtype=np.int64)
    sums = np.array(list(itertools.product((1, -1), repeat=len(d))), dtype=np.int64) @ np.abs(di)
    obs = int(di.sum())
    hits = {"less": sums <= obs, "greater": sums >= obs, "two-sided": np.abs(sums) >= abs(obs)}[alternative]
    return int(hits.sum()) / len(sums)


def _score(rng: random.Random, kind: str) -> Fraction:
    if kind == "tenths":
        return Fraction(rng.randint(0, 10), 10)
    if kind == "hundredths":
        return Fraction(rng.randint(0, 100), 100)
    if kind == "share":  # k of n statements supported
        n = rng.randint(1, 12)
        return Fraction(rng.randint(0, n), n)
    if kind == "cosine":
        return Fraction(rng.randint(-20, 20), 20)
    return Fraction(rng.choice([0, 1, 2, 3, 7, 9]), 10)  # 0.1 + 0.2 != 0.3 in floats


def _cases(seed: int, count: int):
    rng = random.Random(seed)
    for _ in range(count):
        n = rng.randint(1, 9)
        kind = rng.choice(["tenths", "hundredths", "share", "cosine", "mix"])
        a = [_score(rng, kind) for _ in range(n)]
        # half the cases: the candidate's scores are the baseline's, moved one question along, so the
        # differences sum to exactly 0 and many sign assignments tie with it
        b = [a[(i + 1) % n] for i in range(n)] if rng.random() < 0.5 else [_score(rng, kind) for _ in range(n)]
        yield a, b


def test_the_reviewers_case_ties_at_a_sum_of_0():
    """[0.3, 0.7] -> [0.5, 0.5]: differences +0.2 and -0.2, sum 0; of four assignments, three are >= 0."""
    for a in ([0.3, 0.7], [0.25, 0.75]):  # 0.25 and 0.75 are exact in binary; 0.3 and 0.7 are not
        assert stats.sign_flip_test(a, [0.5, 0.5], "greater")["pvalue"] == 0.75
        assert stats.sign_flip_test(a, [0.5, 0.5], "less")["pvalue"] == 0.75
        assert stats.sign_flip_test(a, [0.5, 0.5], "two-sided")["pvalue"] == 1.0


@pytest.mark.parametrize("seed", [0, 1])
def test_exact_p_values_match_a_rational_enumeration(seed):
    """200 random small cases per seed (n 1-9), every alternative. The scratch run of this check on
    4,500 cases found no difference; scipy's own tie rule differed on 182 of 1,800."""
    wrong = []
    for a, b in _cases(seed, 200):
        for alternative in ALTERNATIVES:
            r = stats.sign_flip_test([float(x) for x in a], [float(y) for y in b], alternative)
            want = _rational_p(a, b, alternative)
            if r["pvalue"] != pytest.approx(want, abs=1e-12):
                wrong.append((alternative, [str(x) for x in a], [str(y) for y in b], r["pvalue"], want))
            assert r["method"] == "exact"
    assert not wrong, wrong[:5]


def test_a_difference_of_float_noise_is_no_change():
    r = stats.sign_flip_test([0.1 + 0.2, 0.5], [0.3, 0.5], "less")  # 0.30000000000000004 -> 0.3
    assert (r["nonzero"], r["pvalue"], r["min_pvalue"]) == (0, 1.0, 1.0)
    # beside a real change, the noise neither counts as a changed question nor moves the p-value
    r = stats.sign_flip_test([0.1 + 0.2, 0.5], [0.3, 0.4], "less")
    assert (r["nonzero"], r["pvalue"]) == (1, 0.5)


def test_monte_carlo_ties_like_integers_do():
    """30 differences in tenths that sum to exactly 0 (a shift of the same scores), 2**30 assignments
    drawn 4000 times: the p-value equals the one of the same scores times 10, whole numbers whose
    float sums are exact, with the same draws."""
    rng = random.Random(3)
    a = [Fraction(rng.randint(0, 10), 10) for _ in range(30)]
    b = a[1:] + a[:1]
    for alternative in ALTERNATIVES:
        tenths = stats.sign_flip_test([float(x) for x in a], [float(y) for y in b], alternative, 4000, 7)
        whole = stats.sign_flip_test([float(10 * x) for x in a], [float(10 * y) for y in b], alternative, 4000, 7)
        assert tenths["method"] == whole["method"] == "monte carlo"
        assert tenths["nonzero"] == whole["nonzero"] and tenths["pvalue"] == whole["pvalue"], alternative
    assert stats.sign_flip_test([float(x) for x in a], [float(y) for y in b], "greater", 4000, 7)["pvalue"] > 0.5


def test_min_pvalue_is_the_smallest_p_the_test_can_give():
    r = stats.sign_flip_test([1.0] * 6, [0.9] * 3 + [1.0] * 3, "less")
    assert (r["method"], r["pvalue"], r["min_pvalue"]) == ("exact", 0.125, 0.125)  # all three down: the floor
    assert stats.sign_flip_test([1.0] * 6, [0.9] * 3 + [1.0] * 3, "two-sided")["min_pvalue"] == 0.25
    assert stats.sign_flip_test([1.0], [0.9], "less")["min_pvalue"] == 0.5
    mc = stats.sign_flip_test([1.0] * 20, [0.9] * 20, "less", n_resamples=999)
    assert (mc["method"], mc["pvalue"], mc["min_pvalue"]) == ("monte carlo", 0.001, 0.001)
    assert math.isnan(stats.sign_flip_test([math.nan], [1.0])["min_pvalue"])


def test_infinite_scores_are_refused():
    with pytest.raises(ValueError, match="finite"):
        stats.sign_flip_test([1.0, math.inf], [0.5, 0.5])
