"""What `data.cpu_linear` chooses, as far as it can be told without torch: $LEWISRAG_CPU_LINEAR, and
the CPUs on which auto may take oneDNN. A command that runs models reads it before torch has loaded
(`commands._ui.Command`): where the choice keeps torch's own linear (BLAS, on every CPU but AMD's Zen 5
and later), the `cpu_linear` block would change nothing, so the command checks its flags first and
loads torch only to run."""

from __future__ import annotations

import os

from lewisrag.data.io import cpuinfo

ENV = "LEWISRAG_CPU_LINEAR"  # auto, blas or onednn: the choice of every command that takes no flag for it

# AMD's first family whose cores execute 512-bit vectors at full width: Zen 5 (0x1A). Zen 4 (family
# 0x19) has AVX-512 but splits each 512-bit operation into two 256-bit halves, so its peak is the AVX2
# rate MKL already reaches there. Measured on 2-core EPYCs, 2 threads (`scripts/bench_cpu_linear.py`):
# Zen 5, oneDNN's GEMMs 2.2-2.4x MKL's and a DPR training step 1.28-1.30x faster; Zen 4 (family 25
# model 17), GEMMs 1.06-1.16x and whole steps slower, a DPR step 0.88x and a BART step 0.95x.
FULL_WIDTH_AVX512_AMD_FAMILY = 26


def avx512_at_full_width(vendor: str, flags: set[str], family: int | None) -> bool:
    """Whether a CPU of this maker, /proc/cpuinfo flags and family executes AVX-512 at full width
    (AMD's Zen 5 and later), where MKL runs its AVX2 code at half oneDNN's rate.

    >>> avx512_at_full_width("AuthenticAMD", {"avx512f"}, 26), avx512_at_full_width("AuthenticAMD", {"avx512f"}, 25)
    (True, False)
    """
    return vendor == "AuthenticAMD" and family is not None and family >= FULL_WIDTH_AVX512_AMD_FAMILY and "avx512f" in flags


def keeps_torch_linear() -> bool:
    """Whether $LEWISRAG_CPU_LINEAR keeps torch's own linear on this CPU, told from the environment and
    /proc/cpuinfo alone: blas, or auto on a CPU that does not execute AVX-512 at full width. False where
    it may not (auto on such a CPU, where torch's build decides; onednn) and for a name that
    `cpu_linear.resolve_kind` refuses."""
    kind = os.environ.get(ENV) or "auto"
    family = cpuinfo("cpu family")
    full_width = avx512_at_full_width(cpuinfo("vendor_id"), set(cpuinfo("flags").split()),
                                      int(family) if family.isdigit() else None)
    return kind == "blas" or (kind == "auto" and not full_width)
