"""Training checkpoints that resume exactly, and trained-model directories with their tokenizers.

A training checkpoint directory holds:

    model.safetensors   every weight of the RagModel (question encoder + generator)
    state.pt            optimizer and scheduler state dicts and torch's RNG state: tensors and plain
                        containers only, read back with torch.load(weights_only=True)
    state.json          step, data position, best dev EM, python/numpy RNG states, the config
    log.jsonl           the training log up to this step (the resumed log starts from it)

It is built in a temporary directory and swapped into place, so a kill at any moment leaves either
the previous checkpoint or the new one, never half of one. Nothing is unpickled.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from lewisrag.data.io import InputError, _umask, read_json, write_json

WEIGHTS = "model.safetensors"
STATE_PT = "state.pt"
STATE_JSON = "state.json"
LOG = "log.jsonl"


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory beside `path`; it replaces `path` only if the block succeeds."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp.", dir=target.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; outputs should get the usual mode
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = _old(target)
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        os.replace(target, old)
    os.replace(tmp, target)  # a kill between the two renames leaves `old`, which existing() finds
    shutil.rmtree(old, ignore_errors=True)


def _old(target: Path) -> Path:
    return target.with_name(f".{target.name}.old")


def existing(path: str | os.PathLike) -> Path | None:
    """`path` if it exists, else the previous version a kill mid-swap left behind, else None."""
    target = Path(path)
    if target.exists():
        return target
    return _old(target) if _old(target).exists() else None


def capture_rng() -> tuple[dict, dict]:
    """(JSON-able python and numpy global RNG states, torch RNG tensors)."""
    import torch

    version, state, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    as_json = {"python": [version, list(state), gauss], "numpy": [name, keys.tolist(), pos, has_gauss, cached]}
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        tensors["cuda"] = torch.cuda.get_rng_state_all()
    return as_json, tensors


def restore_rng(as_json: dict, tensors: dict) -> None:
    import torch

    version, state, gauss = as_json["python"]
    random.setstate((version, tuple(state), gauss))
    name, keys, pos, has_gauss, cached = as_json["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(tensors["torch"])
    if "cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(tensors["cuda"])


def save_checkpoint(path: str | os.PathLike, model, optimizer, scheduler, state: dict, log_file: Path | None) -> None:
    """Write a resumable checkpoint of the training run (see the module docstring)."""
    import torch
    from safetensors.torch import save_file

    rng_json, rng_tensors = capture_rng()
    # clones: tied weights (BART's shared embeddings) share storage, which safetensors refuses
    weights = {k: v.detach().cpu().clone().contiguous() for k, v in model.state_dict().items()}
    with atomic_dir(path) as tmp:
        save_file(weights, str(tmp / WEIGHTS))
        torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "rng": rng_tensors},
                   tmp / STATE_PT)
        write_json(tmp / STATE_JSON, {**state, "rng": rng_json})
        if log_file is not None and log_file.exists():
            shutil.copyfile(log_file, tmp / LOG)


def load_checkpoint(path: str | os.PathLike, model, optimizer, scheduler) -> dict:
    """Restore weights, optimizer, scheduler and RNG states in place; returns state.json."""
    import torch
    from safetensors.torch import load_file

    p = Path(path)
    for name in (WEIGHTS, STATE_PT, STATE_JSON):
        if not (p / name).is_file():
            raise InputError(p / name, "checkpoint file missing: the checkpoint is damaged")
    model.load_state_dict(load_file(str(p / WEIGHTS)))
    blob = torch.load(p / STATE_PT, weights_only=True)
    optimizer.load_state_dict(blob["optimizer"])
    scheduler.load_state_dict(blob["scheduler"])
    state = read_json(p / STATE_JSON)
    restore_rng(state.pop("rng"), blob["rng"])
    return state


def save_model(model, tokenizers, path: str | os.PathLike, train_config: dict | None = None) -> None:
    """A trained model directory: RagModel.save_pretrained, both tokenizers, and the training config.

    The settings name the tokenizers by their path inside this directory, so the directory can be
    moved; `lewisrag.experiments.ask.load_trained` reads them back.
    """
    from dataclasses import replace

    path = Path(path)
    settings = model.settings
    model.settings = replace(settings, question_tokenizer=str(path.resolve() / "question_tokenizer"),
                             generator_tokenizer=str(path.resolve() / "generator_tokenizer"))
    try:
        with atomic_dir(path) as tmp:
            model.save_pretrained(tmp / "model")  # save_pretrained builds its own directory atomically
            for name in os.listdir(tmp / "model"):
                os.replace(tmp / "model" / name, tmp / name)
            (tmp / "model").rmdir()
            tokenizers.question.save_pretrained(tmp / "question_tokenizer")
            tokenizers.generator.save_pretrained(tmp / "generator_tokenizer")
            if train_config is not None:
                write_json(tmp / "train_config.json", train_config)
    finally:
        model.settings = settings


def state_summary(state: dict[str, Any]) -> str:
    """One line about a checkpoint, for messages.

    >>> state_summary({"step": 12, "best_em": 0.5})
    'step 12, best dev EM 0.500'
    """
    best = state.get("best_em")
    return f"step {state['step']}" + ("" if best is None else f", best dev EM {best:.3f}")
