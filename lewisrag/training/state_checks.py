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

from lewisrag.data.io import InputError, expect, is_count, is_finite_number, is_number, shown_value


DAMAGED = "; the checkpoint is damaged"
# the scheduler's counts of steps: its step (-1 before the first) and torch's count of step() calls,
# which the constructor's first call starts at 1; (lowest, what the training step adds to the highest)
COUNTS = {"last_epoch": (-1, 0), "_step_count": (0, 1)}
# torch_state's list of the parameters (by their number in the optimizer's state dict) that the optimizer held
# no state for, never having had a gradient (`checkpoint.save_checkpoint`): any other one without state lost
# it, and load_state_dict would start its moments again from zero in silence
STATELESS = "stateless_params"


def check_torch_state(file: Path, blob, optimizer, scheduler, step: int | None = None) -> None:
    """The decoded "torch_state" of `file` against the `optimizer` and `scheduler` it is for: one line
    naming the first damaged field. `step`: the state's training step, which no count of the
    scheduler's passes (each training step steps it once)."""
    expect(isinstance(blob, dict), file, "torch_state", "an object", blob, DAMAGED)
    for part in ("optimizer", "scheduler"):
        _need(isinstance(blob.get(part), dict), file, f"torch_state.{part}", "an object", blob.get(part))
    _check_optimizer(file, blob["optimizer"], optimizer, blob.get(STATELESS))
    field, live, saved = "torch_state.scheduler", scheduler.state_dict(), blob["scheduler"]
    for key, like in live.items():
        if key in COUNTS and key not in saved:  # the schedule began again in silence
            raise InputError(file, "missing: the checkpoint is damaged", field=f"{field}.{key}")
        if key in saved:
            low, more = COUNTS.get(key, (0, 0))
            counts = (low, None if step is None else step + more) if key in COUNTS else None
            _check_like(file, f"{field}.{key}", saved[key], like, counts)


def _check_optimizer(file: Path, saved: dict, optimizer, stateless) -> None:
    """Each saved parameter group like the live one it replaces, and each parameter's saved state
    (`_check_states`; `stateless`: the checkpoint's STATELESS list)."""
    field, groups, live = "torch_state.optimizer", saved.get("param_groups"), optimizer.param_groups
    if not isinstance(groups, list) or len(groups) != len(live):
        got = f"{len(groups)}" if isinstance(groups, list) else type(groups).__name__
        raise InputError(file, f"expected a list of {len(live)} parameter groups, as the optimizer has, got {got}{DAMAGED}",
                         field=f"{field}.param_groups")
    params, kinds = {}, {}  # the saved number of each parameter -> the live parameter it is loaded into, its state's kinds
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
        kinds.update(dict.fromkeys(numbers, _state_kinds(optimizer, {**now, **group})))
    if len(params) != sum(len(g["params"]) for g in live):  # another's moments, and one parameter's reset in silence
        raise InputError(file, f"expected each parameter numbered once{DAMAGED}", field=f"{field}.param_groups")
    _check_states(file, saved.get("state"), params, kinds, stateless)


def _state_kinds(optimizer, group: dict) -> dict[str, bool]:
    """The state `optimizer`'s step keeps for a parameter of `group` (the settings load_state_dict gives
    its group), each name with whether it is a tensor of the parameter's shape (AdamW's moments, and with
    amsgrad a third) or a single number (its step count): what one step of a throwaway optimizer of its
    class makes, so that the rules follow the optimizer. On the CPU, by the for-loop implementation:
    the fused and foreach ones keep the same state."""
    probe = torch.zeros(2, requires_grad=True)
    probe.grad = torch.ones(2)
    throwaway = type(optimizer)([probe])
    throwaway.param_groups[0].update({k: v for k, v in group.items() if k != "params"}, foreach=None, fused=None,
                                     capturable=False, differentiable=False)
    throwaway.step()
    return {name: value.dim() > 0 for name, value in throwaway.state[probe].items()}


def _check_states(file: Path, state, params: dict, kinds: dict, stateless) -> None:
    """Each saved parameter state (`state`, by parameter number) that of a parameter of `params`, holding
    every entry of its `kinds` (`_state_kinds`: without exp_avg_sq, AdamW's first step was a KeyError),
    each of its kind. A parameter without state must be one of `stateless` (STATELESS; None, in a
    checkpoint written before it was recorded: not checked): load_state_dict gives it fresh moments."""
    field = "torch_state.optimizer.state"
    _need(isinstance(state, dict), file, field, "an object of each parameter's state", state)
    for key, entry in state.items():
        if key not in params or not isinstance(entry, dict):
            raise InputError(file, f"expected the state of a parameter numbered in param_groups{DAMAGED}",
                             field=f"{field}.{key}")
        for name in kinds[key]:
            if name not in entry:
                raise InputError(file, f"missing: the optimizer keeps it for each parameter it stepped{DAMAGED}",
                                 field=f"{field}.{key}.{name}")
        for name, value in entry.items():
            _check_param_state(file, f"{field}.{key}.{name}", value, tuple(params[key].shape), kinds[key].get(name))
    if stateless is None:
        return
    _need(isinstance(stateless, list) and all(is_count(k) and k in params and k not in state for k in stateless),
          file, f"torch_state.{STATELESS}", "a list of the numbers of the parameters without state", stateless)
    for key in params:
        if key not in state and key not in stateless:
            raise InputError(file, f"missing, while torch_state.{STATELESS} does not list parameter {key} as one the "
                             f"optimizer never stepped (its moments would start again from zero){DAMAGED}",
                             field=f"{field}.{key}")


def _check_param_state(file: Path, field: str, value, shape: tuple[int, ...], moment: bool | None) -> None:
    """An entry of a parameter's optimizer state: where the optimizer keeps a tensor of the parameter's
    shape (`moment`, AdamW's moments), a tensor of `shape` (one of another shape, or a single number,
    failed inside AdamW's first step); where it keeps a single number (its step count), a finite number
    >= 0. None, a name the optimizer does not keep: either."""
    tensor = isinstance(value, torch.Tensor)
    if moment or (moment is None and tensor and value.dim() > 0):
        if not tensor or tuple(value.shape) != shape:
            got = f"one of shape {tuple(value.shape)}" if tensor else shown_value(value)
            raise InputError(file, f"expected a tensor of its parameter's shape {shape}, got {got}{DAMAGED}", field=field)
        return
    if tensor and value.numel() != 1:
        raise InputError(file, f"expected a step count, a single number, got a tensor of shape {tuple(value.shape)}"
                         f"{DAMAGED}", field=field)
    number = value.item() if tensor else value
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
