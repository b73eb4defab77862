"""Presets of `lewisrag reproduce`: sizes and schedules, each field with its reason."""

from __future__ import annotations

from dataclasses import dataclass

from lewisrag.training.dpr import DPRTrainConfig


@dataclass(frozen=True)
class Preset:
    name: str
    entities: int  # world size: entities (about two passages each)
    dpr: DPRTrainConfig  # retriever schedule
    index_factory: str = "Flat"  # FAISS factory of the dense indexes (exact search at these sizes)
    eval_split: str = "test"  # recall is measured on this split: its entities never appear in training questions
    ks: tuple[int, ...] = (1, 5, 20)  # recall cut-offs
    notes: str = ""


PRESETS: dict[str, Preset] = {
    # The smoke test: every stage runs, on a world small enough for the default test suite.
    "tiny": Preset(
        name="tiny",
        entities=60,
        dpr=DPRTrainConfig(vocab_size=1000, hidden_size=32, layers=1, heads=2, batch_size=16, steps=30),
        notes="smoke test: numbers are not meaningful",
    ),
    # The demo: the default world; a small DPR trained from scratch on its training questions.
    "small": Preset(
        name="small",
        entities=2000,
        dpr=DPRTrainConfig(),
    ),
}


def get_preset(name: str) -> Preset:
    from lewisrag.data.io import InputError

    if name not in PRESETS:
        raise InputError("--preset", f"unknown preset '{name}' (one of {', '.join(PRESETS)})")
    return PRESETS[name]
