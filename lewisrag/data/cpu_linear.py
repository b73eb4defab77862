"""Which library multiplies a float32 linear layer's matrices on the CPU: torch's BLAS, or oneDNN.

torch's x86 wheels link Intel's MKL as their BLAS, and MKL runs its AVX-512 kernels only on Intel
CPUs: on an AMD EPYC Zen 5 (AVX-512 in hardware) its single-precision GEMM ran at 91-99 GFLOP/s
per core, the AVX2 rate, for the shapes of the demo's models and for 2048^3 alike, where oneDNN,
shipped in the same wheel and dispatching on the CPU's features instead of its maker, ran at 209-224
(`scripts/bench_cpu_linear.py`). On such a CPU `reproduce --preset small` spent 23% less time in
DPR training and 30-40% less in decoding with oneDNN. On an AMD EPYC Zen 4, whose AVX-512 splits each
512-bit operation into two 256-bit halves, MKL's AVX2 code already runs at the core's peak: oneDNN's
products were 1.06-1.16x faster there and its whole training steps 5-12% slower, so auto keeps BLAS.

torch offers no switch for float32 (its oneDNN matmul path takes bf16, fp16 and the reduced-precision
float32 modes), so `cpu_linear("onednn")` replaces `torch.nn.functional.linear`, which every
`nn.Linear` calls, for the length of a block, with a function that sends float32 CPU inputs to
`torch.ops.mkldnn._linear_pointwise` (the op inductor lowers linear layers to) in the forward pass
and in both products of the backward, and anything else (products under `MIN_MACS`, autocast, other
dtypes, GPUs, torch.compile tracing) to torch's own. This is what Intel's extension for PyTorch does to `nn.Linear` for float32.
A `TorchFunctionMode` would be the sanctioned hook, but it runs Python for every torch call in the
block, which these small models' many small ops pay for. Results differ from BLAS's in the last
bits, as they do between CPUs: a run records the choice (`data.threads.environment`, in
results.json and report.md's first line).
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from lewisrag.data.cpu_linear_choice import ENV, avx512_at_full_width
from lewisrag.data.io import InputError, cpuinfo

KINDS = ("blas", "onednn")

_torch_linear = F.linear  # torch's own, restored when a block ends
# Products smaller than this many multiply-adds (rows x in x out) stay on BLAS. Measured on the AMD
# EPYC Zen 5 (2 threads), per call with the kernel made: at 2^19 (40 rows of a 128 x 128 layer) oneDNN
# took 27 us against BLAS's 18, at 2^20 19-20 us against 17; at 2^21 (a decoding step's 160 rows)
# 33 against 38, and from 2^23 up about half BLAS's time. Generating a kernel for a shape oneDNN has
# not met costs 0.5-1 ms, which the test suite's tiny models would pay again and again for nothing.
# (At 2^22 the demo's evaluation took 32 s instead of 22: its decoding steps fell under it.)
MIN_MACS = 1 << 21


def cpu_vendor() -> str:
    """The CPU's maker as /proc/cpuinfo's vendor_id says it ("GenuineIntel", "AuthenticAMD"), else ""."""
    return cpuinfo("vendor_id")


def cpu_family() -> int | None:
    """/proc/cpuinfo's "cpu family" as a number (AMD: 25 for Zen 3 and 4, 26 for Zen 5), else None."""
    family = cpuinfo("cpu family")
    return int(family) if family.isdigit() else None


def auto_kind(vendor: str | None = None, flags: set[str] | None = None, family: int | None = -1) -> str:
    """"onednn" where torch's BLAS is MKL and the CPU is an AMD x86 that executes AVX-512 at full width
    (Zen 5 and later: MKL runs its AVX2 code there, at half oneDNN's rate); "blas" everywhere else:
    Intel's CPUs (MKL's AVX-512 kernels run there, and the digits of the runs measured on them are
    kept), Zen 4 (MKL's AVX2 code is at its peak), CPUs without AVX-512 and CPUs whose maker or
    family cannot be read. `family` -1 reads it from /proc/cpuinfo.

    >>> auto_kind("GenuineIntel", {"avx512f"}, 6), auto_kind("AuthenticAMD", {"avx2"}, 26)
    ('blas', 'blas')
    >>> auto_kind("AuthenticAMD", {"avx512f"}, 25)  # Zen 4
    'blas'
    """
    vendor = cpu_vendor() if vendor is None else vendor
    flags = set(cpuinfo("flags").split()) if flags is None else flags
    family = cpu_family() if family == -1 else family
    usable = (platform.machine() in ("x86_64", "AMD64") and torch.backends.mkl.is_available()
              and torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"))
    return "onednn" if usable and avx512_at_full_width(vendor, flags, family) else "blas"


def resolve_kind(kind: str | None, flag: str = "--cpu-linear") -> str:
    """"auto" (or None: $LEWISRAG_CPU_LINEAR, else auto) as `auto_kind` decides; "blas" and "onednn" as given.

    >>> resolve_kind("blas")
    'blas'
    >>> resolve_kind("fast")
    Traceback (most recent call last):
    lewisrag.data.io.InputError: --cpu-linear: must be auto, blas or onednn, got 'fast'
    """
    if kind is None:
        kind, flag = os.environ.get(ENV) or "auto", f"${ENV}"
    if kind == "auto":
        return auto_kind()
    if kind not in KINDS:
        raise InputError(flag, f"must be auto, blas or onednn, got {kind!r}")
    return kind


def current_kind() -> str:
    """The kind in force now: "onednn" inside a `cpu_linear("onednn")` block, else "blas"."""
    return "onednn" if F.linear is _onednn_linear else "blas"


@contextlib.contextmanager
def cpu_linear(kind: str | None) -> Iterator[str]:
    """Inside the block, float32 linear layers on the CPU multiply through `kind` (resolved by
    `resolve_kind`); yields the kind. The setting is per process, like torch's thread count, and
    the one before the block is restored after it."""
    kind = resolve_kind(kind)
    before = F.linear
    F.linear = _onednn_linear if kind == "onednn" else _torch_linear
    try:
        yield kind
    finally:
        F.linear = before


def _eligible(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    return (x.device.type == "cpu" and x.dtype == torch.float32 and weight.dtype == torch.float32
            and (bias is None or bias.dtype == torch.float32) and x.dim() >= 2 and x.numel() * weight.shape[0] >= MIN_MACS
            and x.numel() > 0 and not torch.is_autocast_enabled("cpu") and not torch.compiler.is_compiling())


def _product(x2: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x2 @ weight.T + bias through oneDNN; x2 (M, in), weight (out, in): strided views are read as they are."""
    return torch.ops.mkldnn._linear_pointwise(x2, weight, bias, "none", [], "")


class _OneDNNLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        x2 = x.reshape(-1, x.shape[-1])  # (M, in)
        ctx.save_for_backward(x2, weight)
        ctx.x_shape, ctx.has_bias = x.shape, bias is not None
        return _product(x2, weight, bias).view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x2, weight = ctx.saved_tensors
        g2 = grad.reshape(-1, grad.shape[-1])  # (M, out)
        gx = _product(g2, weight.t()).view(ctx.x_shape) if ctx.needs_input_grad[0] else None  # g @ W
        gw = _product(g2.t(), x2.t()) if ctx.needs_input_grad[1] else None  # g.T @ x: (out, in)
        gb = g2.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return gx, gw, gb


def _onednn_linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`torch.nn.functional.linear` with float32 CPU products through oneDNN (see the module's docstring)."""
    if not _eligible(input, weight, bias):
        return _torch_linear(input, weight, bias)
    if torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)):
        return _OneDNNLinear.apply(input, weight, bias)
    return _product(input.reshape(-1, input.shape[-1]), weight, bias).view(*input.shape[:-1], weight.shape[0])
