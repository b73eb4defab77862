"""Argument checks shared by the statistics: a confidence level, paired inputs, counts, right/wrong marks."""

from __future__ import annotations

from collections.abc import Sequence, Sized
from numbers import Integral

import numpy as np


def check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def check_paired(a: Sequence, b: Sequence, what: str) -> None:
    """`a` and `b` are sequences of one length: a generator or iterator (no len()) is refused, naming
    itself, before its entries are consumed by a check that could not read them again."""
    for side, x in (("first", a), ("second", b)):
        if not isinstance(x, Sized):
            raise ValueError(f"{what}: the {side} input must be a list or array, got {type(x).__name__} (wrap it in list())")
    if len(a) != len(b):
        raise ValueError(f"{what}: paired inputs must have the same length, got {len(a)} and {len(b)}")


def check_count(value, name: str) -> None:
    """`value` is a whole count: an int or a numpy integer, not a bool (True is no count) nor a float
    (1.5 or inf questions gave an interval, (1, inf) the interval (0, 0))."""
    if isinstance(value, bool) or not isinstance(value, Integral):  # numpy integers are Integral
        raise ValueError(f"{name}: expected an integer count, got {value!r}")


def check_marks(marks: Sequence, name: str) -> None:
    """Every entry of `marks` says right or wrong: True/False (numpy's too), or the ints 1/0.

    Anything else was cast with bool(): NaN and "False" counted as right, 0.4 as right, None as
    wrong, and a str was taken for a list of its characters. 1 and 0 stay: they are the usual
    encoding of a right/wrong label (a CSV column, a numpy int array), and mean nothing else; a
    float score (0.4) must be cut by the caller, who knows where the cut lies.
    """
    if isinstance(marks, str | bytes):
        raise ValueError(f"{name}: expected a list of True or False, got the string {marks!r}")
    for i, x in enumerate(marks):
        if not is_mark(x):
            raise ValueError(f"{name}[{i}]: expected True or False, got {x!r}")


def is_mark(x) -> bool:
    """True or False (numpy's too), or the int 1 or 0."""
    return x is True or x is False or isinstance(x, np.bool_) or (isinstance(x, (int, np.integer)) and x in (0, 1))


RESAMPLE_CELLS = 1 << 23  # floats scipy's bootstrap and permutation test hold a batch: 64 MB


def resample_batch(n: int) -> int:
    """The resamples scipy draws at once over `n` values: 1,000 (as before) up to 8,388 values, fewer above,
    so that a batch holds about RESAMPLE_CELLS floats. At 1,000 a batch grew with n: 6.4 GB at 100,000
    questions. (The draws, and so the last digits, differ above 8,388 values from a run at 1,000.)

    >>> resample_batch(100), resample_batch(100_000)
    (1000, 83)
    """
    return max(1, min(1000, RESAMPLE_CELLS // max(n, 1)))
