"""Statistics refuse input they would have read wrongly.

`mean_interval` and `ppi_mean` took ±inf and returned an infinite mean with a finite or NaN bound
(and numpy's warnings); they now refuse it, naming the input, as `sign_flip_test` does.
`judge_confusion` cast its labels with bool(): a NaN verdict or the string "False" counted as
supported. Human labels are now checked as marks (`check_marks`), verdicts as True, False or None.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from lewisrag.eval import stats

INF = math.inf


@pytest.mark.parametrize(("scores", "where"), [
    ([0.5, INF, 0.2], "scores[1] = inf"),
    ([-INF, 0.5], "scores[0] = -inf"),
    ([0.5, math.nan, INF], "scores[2] = inf"),
    (np.array([0.1, np.inf]), "scores[1] = inf"),
])
def test_mean_interval_refuses_infinite_scores(scores, where):
    with pytest.raises(ValueError, match=r"^mean_interval: scores must be finite") as e:
        stats.mean_interval(scores)
    assert where in str(e.value)


def test_mean_interval_still_leaves_nan_out():
    r = stats.mean_interval([1.0, 1.0, math.nan])
    assert (r["n"], r["nan"], r["mean"]) == (2, 1, 1.0)


@pytest.mark.parametrize(("args", "where"), [
    (([1, 0, 1], [1, 1, 1], [1.0, INF, 0.5]), "judge_on_unlabeled[1] = inf"),
    (([1, 0, 1], [1, -INF, 1], [1.0, 0.0, 0.5]), "judge_on_labeled[1] = -inf"),
    (([INF, 0, 1], [1, 1, 1], [1.0, 0.0, 0.5]), "human_labels[0] = inf"),
])
def test_ppi_mean_refuses_infinite_labels(args, where):
    with pytest.raises(ValueError, match=r"^ppi_mean: ") as e:
        stats.ppi_mean(*args)
    assert where in str(e.value)


def test_ppi_mean_still_estimates_finite_labels():
    r = stats.ppi_mean([1, 0, 1, 1], [1, 1, 1, 1], [1.0] * 8)
    assert (r["estimate"], r["rectifier"]) == (0.75, -0.25)


@pytest.mark.parametrize(("human", "judge", "message"), [
    ([False, True], [math.nan, True], r"judge_confusion: judge\[0\]: expected True, False or None"),
    ([False, True], ["False", True], r"judge_confusion: judge\[0\]: expected True, False or None"),
    ([False, True], [False, 0.4], r"judge_confusion: judge\[1\]: expected True, False or None"),
    (["False", True], [False, True], r"judge_confusion: human\[0\]: expected True or False, got 'False'"),
    ([math.nan, True], [False, True], r"judge_confusion: human\[0\]: expected True or False, got nan"),
    ([None, True], [False, True], r"judge_confusion: human\[0\]: expected True or False, got None"),
])
def test_judge_confusion_refuses_labels_that_are_not_true_or_false(human, judge, message):
    with pytest.raises(ValueError, match=message):
        stats.judge_confusion(human, judge)


def test_judge_confusion_still_takes_marks_and_undecided_verdicts():
    r = stats.judge_confusion([True, True, False, False], [True, False, True, None])
    assert (r["misses"], r["false_kills"], r["undecided"]) == (1, 1, 1)
    r = stats.judge_confusion(np.array([1, 0]), [np.bool_(True), 0])  # 1/0 and numpy's bools are marks
    assert (r["misses"], r["false_kills"], r["n"]) == (0, 0, 2)
