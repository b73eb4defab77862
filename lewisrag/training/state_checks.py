"""A checkpoint's optimizer and scheduler state (and data position) checked against the live objects
it is loaded into, before `checkpoint.load_checkpoint` restores anything.

Their `load_state_dict` takes what it is given: a learning rate, a beta or a step count damaged in
state.json was loaded as it was, and the resumed run crashed at its first step (a TypeError of the
scheduler, a ValueError inside AdamW), its start-up spent. Each saved field is checked against the
live object's own, so the rules follow what the optimizer and scheduler hold, not a list of names.
"""

from __future__ import annotations

from pathlib import Path

import torch

from lewisrag.data.io import InputError, expect, is_count, is_finite_number, is_number


DAMAGED = "; the checkpoint is damaged"
# the scheduler's counts of steps: its step (-1 before the first) and torch's count of step() calls,
# which the constructor's first call starts at 1; (lowest, what the training step adds to the highest)
COUNTS = {"last_epoch": (-1, 0), "_step_count": (0, 1)}


def check_torch_state(file: Path, blob, optimizer, scheduler, step: int | None = None) -> None:
    """The decoded "torch_state" of `file` against the `optimizer` and `scheduler` it is for: one line
    naming the first damaged field. `step`: the state's training step, which no count of the
    scheduler's passes (each training step steps it once)."""
    expect(isinstance(blob, dict), file, "torch_state", "an object", blob, DAMAGED)
    for part in ("optimizer", "scheduler"):
        _need(isinstance(blob.get(part), dict), file, f"torch_state.{part}", "an object", blob.get(part))
    _check_optimizer(file, blob["optimizer"], optimizer)
    field, live, saved = "torch_state.scheduler", scheduler.state_dict(), blob["scheduler"]
    for key, like in live.items():
        if key in COUNTS and key not in saved:  # the schedule began again in silence
            raise InputError(file, "missing: the checkpoint is damaged", field=f"{field}.{key}")
        if key in saved:
            low, more = COUNTS.get(key, (0, 0))
            counts = (low, None if step is None else step + more) if key in COUNTS else None
            _check_like(file, f"{field}.{key}", saved[key], like, counts)


def _check_optimizer(file: Path, saved: dict, optimizer) -> None:
    """Each saved parameter group like the live one it replaces, and each parameter's saved state
    (AdamW's moments and step) of that parameter's shape."""
    field, groups, live = "torch_state.optimizer", saved.get("param_groups"), optimizer.param_groups
    if not isinstance(groups, list) or len(groups) != len(live):
        got = f"{len(groups)}" if isinstance(groups, list) else type(groups).__name__
        raise InputError(file, f"expected a list of {len(live)} parameter groups, as the optimizer has, got {got}{DAMAGED}",
                         field=f"{field}.param_groups")
    params = {}  # the saved number of each parameter -> the live parameter it is loaded into
    for i, (group, now) in enumerate(zip(groups, live)):
        where = f"{field}.param_groups[{i}]"
        _need(isinstance(group, dict), file, where, "an object", group)
        numbers, n = group.get("params"), len(now["params"])
        _need(isinstance(numbers, list) and len(numbers) == n and all(is_count(k) for k in numbers), file,
              f"{where}.params", f"a list of {n} parameter numbers, as the optimizer's group has", numbers)
        params.update(zip(numbers, now["params"]))
        for key, like in now.items():
            if key != "params" and key in group:  # one the saved group lacks keeps the live value
                _check_like(file, f"{where}.{key}", group[key], like)
    if len(params) != sum(len(g["params"]) for g in live):  # another's moments, and one parameter's reset in silence
        raise InputError(file, f"expected each parameter numbered once{DAMAGED}", field=f"{field}.param_groups")
    state = saved.get("state")
    _need(isinstance(state, dict), file, f"{field}.state", "an object of each parameter's state", state)
    for key, entry in state.items():
        if key not in params or not isinstance(entry, dict):
            raise InputError(file, f"expected the state of a parameter numbered in param_groups{DAMAGED}",
                             field=f"{field}.state.{key}")
        for name, value in entry.items():
            _check_param_state(file, f"{field}.state.{key}.{name}", value, tuple(params[key].shape))


def _check_param_state(file: Path, field: str, value, shape: tuple[int, ...]) -> None:
    """A tensor of a parameter's optimizer state: of the parameter's shape (a moment of another shape
    failed inside AdamW's first step), else a count of steps, a single number >= 0."""
    if isinstance(value, torch.Tensor) and value.shape != shape and value.dim():
        raise InputError(file, f"expected a tensor of its parameter's shape {shape}, or a single number, got one of shape "
                         f"{tuple(value.shape)}{DAMAGED}", field=field)
    if not isinstance(value, torch.Tensor) or value.shape != shape:
        number = value.item() if isinstance(value, torch.Tensor) else value
        _need(is_finite_number(number) and number >= 0, file, field, "a step count, a finite number >= 0", number)


def _check_like(file: Path, field: str, value, like, counts: tuple[int, int | None] | None = None) -> None:
    """`value`, saved in place of the live `like`, of its kind: for a flag, true, false or null; for a
    count of steps (`counts`: its lowest and highest, None: no highest), a whole number in range; for
    any other number, a finite one >= 0 (AdamW refuses a negative learning rate, eps or weight decay,
    and the schedule's rates are theirs); for a tuple (AdamW's betas), as many numbers in [0, 1), as
    AdamW requires; for a list, as many entries, each like its live one. Anything else is
    `load_state_dict`'s to take."""
    if like is None or isinstance(like, bool):
        _need(value is None or isinstance(value, bool), file, field, "true, false or null", value)
    elif is_number(like) and counts is not None:
        low, high = counts
        _need(isinstance(value, int) and not isinstance(value, bool) and low <= value and (high is None or value <= high),
              file, field, f"a whole number from {low}" + (f" to {high}, the training step" if high is not None else ""), value)
    elif is_number(like):
        _need(is_finite_number(value) and value >= 0, file, field, "a finite number >= 0", value)
    elif isinstance(like, tuple):
        betas = isinstance(value, tuple | list) and len(value) == len(like)
        _need(betas and all(is_finite_number(v) and 0 <= v < 1 for v in value), file, field, f"{len(like)} numbers in [0, 1)",
              value)
    elif isinstance(like, list):
        _need(isinstance(value, list) and len(value) == len(like), file, field, f"a list of {len(like)} entries", value)
        for i, (v, live) in enumerate(zip(value, like)):
            _check_like(file, f"{field}[{i}]", v, live)


def check_position(file: Path, position, examples: int | None) -> None:
    """The data position (`rag_data.DataPosition`: an epoch, and `index`, the next example of the
    epoch's order) within the `examples` its order holds: an index past them began the next epoch
    in silence. Its kind is the training loop's to check."""
    if examples is not None and isinstance(position, dict) and is_count(position.get("index")):
        _need(position["index"] <= examples, file, "position.index",
              f"a whole number from 0 to {examples}, the training examples", position["index"])


def _need(ok: bool, file: Path, field: str, what: str, value: object) -> None:
    """`expect` for the checkpoint's state: a long value (a group's parameter list) cut to its start."""
    if not ok and not is_number(value) and len(shown := repr(value)) > 80:
        raise InputError(file, f"expected {what}, got {shown[:60]}...{DAMAGED}", field=field)
    expect(ok, file, field, what, value, DAMAGED)
