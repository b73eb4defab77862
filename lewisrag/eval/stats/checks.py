"""Argument checks shared by the statistics: a confidence level, paired inputs."""

from __future__ import annotations

from collections.abc import Sequence


def check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def check_paired(a: Sequence, b: Sequence, what: str) -> None:
    if len(a) != len(b):
        raise ValueError(f"{what}: paired inputs must have the same length, got {len(a)} and {len(b)}")
