"""The update every trainer shares: AdamW (`adamw`), its linear warmup and decay
(`warmup_steps`, `learning_rate_factor`), and the stop of a run whose loss or weights turned NaN or inf
(`finite`, `diverged`) or whose every fp16 step overflowed (`all_overflowed`), and the optimizer step after a backward pass, under fp16 through the gradient
scaler (`optimizer_step`, `backward_step`).
"""

from __future__ import annotations

import math
import warnings

import torch

from lewisrag.data.io import InputError


def warmup_steps(share: float, steps: int) -> int:
    """The steps spent warming up: `share` of `steps`, rounded down, as int() did, but not below a whole
    number that floating point writes a hair under it (0.29 * 100 is 28.999..., which int() cut to 28).

    >>> [warmup_steps(0.29, 100), warmup_steps(0.58, 50), warmup_steps(0.1, 7), warmup_steps(0.0, 10)]
    [29, 29, 0, 0]
    """
    return int(share * steps + 1e-9)


def all_overflowed(skipped: int, steps: int, last_loss: float) -> str | None:
    """Why an fp16 run diverged, where it did: its gradient scaler skipped every step, or its last loss is
    not finite (a skipped step leaves the weights as they were, finite, so the NaN checks pass: the
    untrained model was saved); None otherwise. For `diverged`, which each trainer names its flags in.

    >>> all_overflowed(3, 3, 0.5)
    'under fp16 the gradient scaler skipped 3 of the 3 steps (inf or NaN gradients) and the last loss was 0.5'
    >>> all_overflowed(1, 3, 0.5) is None
    True
    """
    if skipped < steps and math.isfinite(last_loss):
        return None
    return f"under fp16 the gradient scaler skipped {skipped} of the {steps} steps (inf or NaN gradients) and the last loss was {last_loss}"


def learning_rate_factor(step: int, steps: int, warmup_steps: int) -> float:
    """Linear warmup to 1, then linear decay to 0 at `steps` (transformers' linear schedule).

    >>> [learning_rate_factor(s, 10, 2) for s in (0, 1, 2, 6, 10)]
    [0.0, 0.5, 1.0, 0.5, 0.0]
    """
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    return max(0.0, (steps - step) / max(1, steps - warmup_steps))


def adamw(params, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW over `params` (tensors or groups), fused into one kernel per step when the weights are on
    a GPU, as nanoGPT does (torch's default there launches several multi-tensor kernels per step).

    On the CPU, the multi-tensor (foreach) implementation: torch's default there is the for-loop one,
    about ten small ops per parameter from Python (7.6 ms of a 63 ms step of the small preset's
    stitched reader, 91 parameters, on 2 cores), and the foreach one does the same arithmetic in
    the same order, bit for bit (`tests/test_devices.py`), without the Python loop. The fused CPU
    kernel is faster still but rounds differently, and with it the small preset's FEVER runs ended
    under their 0.85 target (0.849 / 0.847).

    Every parameter decays, biases and LayerNorm weights too, where the paper's fine-tuning script and
    DPR's trainer exclude them: at 0.01 over these runs' steps the difference is small, and every
    number the docs record was trained this way."""
    params = list(params)
    first = params[0]["params"][0] if isinstance(params[0], dict) else params[0]
    on_gpu = first.device.type == "cuda"
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True if on_gpu else None,
                             foreach=None if on_gpu else True)


def diverged(what: str, lr: float, flag: str = "--lr", field: str | None = None, also: str = "") -> InputError:
    """The one line a trainer (DPR, the stitched reader, pretraining, FEVER's verifier, RAG fine-tuning)
    stops with when its loss or weights turn NaN or inf, saving nothing: its NaN weights were saved,
    with exit 0."""
    return InputError(flag, f"{what}: training diverged; lower {field or flag} (now {lr:g}){also}", field=field)


def finite(params) -> bool:
    """Whether every tensor of `params` holds finite numbers only (a trainer checks once, after its last step)."""
    return all(bool(torch.isfinite(w).all()) for w in params)


def first_non_finite(named_params) -> str | None:
    """The name of the first tensor of `named_params` ((name, tensor) pairs) holding NaN or inf; None
    when all are finite. A loss that is NaN before any update comes from such weights, not the lr.

    >>> first_non_finite([("a", torch.ones(2)), ("b", torch.tensor([1.0, float("nan")]))])
    'b'
    """
    return next((name for name, w in named_params if not bool(torch.isfinite(w).all())), None)


def optimizer_step(opt, sched, scaler) -> dict:
    """The optimizer and schedule step; under fp16, the log fields of the gradient scaler."""
    if not scaler.is_enabled():
        opt.step()
        sched.step()
        return {}
    scale = scaler.get_scale()
    scaler.step(opt)  # leaves the weights (and AdamW's moments) alone when a gradient is inf or NaN
    scaler.update()  # halves the scale after a skipped step and never lowers it otherwise
    skipped = scaler.get_scale() < scale
    with warnings.catch_warnings():
        # a skipped first step never called opt.step(); the schedule follows the step count all the same
        warnings.filterwarnings("ignore", r"Detected call of `lr_scheduler\.step\(\)` before", UserWarning)
        sched.step()
    return {"loss_scale": scale, "skipped_inf": skipped}


def backward_step(loss, opt, sched, scaler, params, max_grad_norm: float) -> dict:
    """A one-process trainer's step after its forward pass: backward (scaled under fp16), the clip of
    the true gradients (none for 0), then `optimizer_step`; returns its log fields."""
    scaler.scale(loss).backward()  # as is without fp16
    scaler.unscale_(opt)
    if max_grad_norm:
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    return optimizer_step(opt, sched, scaler)
