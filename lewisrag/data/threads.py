"""Where torch computes: its intra-op thread count for the length of a block, restored after (the
setting is per process), the device a command runs on (`resolve_device`; its flag checked before torch
loads, `check_device_flag`, `check_device`), and what a run's numbers depend on besides its config
(`environment`). Which library multiplies float32 matrices on the CPU is `data.cpu_linear`'s."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

from lewisrag.data.io import InputError, cpuinfo


@contextlib.contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Run torch on `count` threads inside the block (None: leave the count as it is)."""
    import torch  # loads on first use: most of `data` never needs it

    before = torch.get_num_threads()
    try:
        if count is not None:
            torch.set_num_threads(count)
        yield
    finally:
        torch.set_num_threads(before)


def resolve_device(name: str, flag: str = "--device") -> str:
    """"auto" is "cuda" when a GPU is visible, else "cpu"; "cpu" and "cuda[:N]" are kept as given,
    a GPU that torch does not see refused in one line (not a traceback when the model moves there).

    >>> resolve_device("cpu")
    'cpu'
    >>> resolve_device("gpu")
    Traceback (most recent call last):
    lewisrag.data.io.InputError: --device: must be auto, cpu or cuda[:N], got 'gpu'
    """
    if name not in ("auto", "cpu") and not re.fullmatch(r"cuda(:\d+)?", name):
        raise InputError(flag, f"must be auto, cpu or cuda[:N], got {name!r}")
    if name == "cpu":
        return name
    import torch  # to pick for auto or see the GPU named: a mistyped name is refused before it loads

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available():
        raise InputError(flag, f"{name}: no GPU is visible to torch")
    if name.startswith("cuda:") and int(name[5:]) >= torch.cuda.device_count():
        raise InputError(flag, f"{name}: only {torch.cuda.device_count()} GPU(s) visible to torch")
    return name


def check_device_flag(name: str, flag: str = "--device") -> str:
    """`name` checked as `resolve_device` checks it, "auto" kept for the run to resolve: torch loads only
    to see a GPU named, so a command refuses a mistyped device before it loads.

    >>> check_device_flag("auto"), check_device_flag("cpu")
    ('auto', 'cpu')
    """
    return name if name == "auto" else resolve_device(name, flag)


def check_device(name: str) -> str:
    """`--device` of the commands that train a RAG model (`train rag`, `reproduce`): auto, cpu or
    cuda, checked (a GPU asked for must be visible); accelerate picks the GPU itself.

    >>> check_device("cpu")
    'cpu'
    >>> check_device("gpu")
    Traceback (most recent call last):
    lewisrag.data.io.InputError: --device: must be auto, cpu or cuda, got 'gpu'
    """
    if name not in ("auto", "cpu", "cuda") and not re.fullmatch(r"cuda:\d+", name):
        raise InputError("--device", f"must be auto, cpu or cuda, got {name!r}")
    if name.startswith("cuda:"):
        raise InputError("--device", f"{name}: the RAG runs train on the first visible GPU (accelerate's); "
                         "choose it with CUDA_VISIBLE_DEVICES and pass cuda")
    return check_device_flag(name)


def cpu_model() -> str:
    """The CPU's model name as `lscpu` prints it ("model name" of /proc/cpuinfo), else platform's guess."""
    import platform

    return cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_id() -> str:
    """Maker, family and model from /proc/cpuinfo ("AuthenticAMD family 25 model 17"), else "": the
    model name alone ("AMD EPYC") does not tell a Zen 4 from a Zen 5, whose kernels and speeds differ."""
    vendor, family, model = cpuinfo("vendor_id"), cpuinfo("cpu family"), cpuinfo("model")
    return f"{vendor} family {family} model {model}" if vendor and family and model else ""


def environment(device: str = "cpu") -> dict:
    """What a run's numbers depend on besides its config, for results.json: Python, torch and
    transformers, the CPU model (`cpu_id`: its maker, family and model numbers), torch's thread count
    now, the library multiplying float32 linear layers on the CPU now (`data.cpu_linear`), and the
    device (with the GPU's name). Floating-point kernels differ between CPUs, thread counts,
    libraries and devices, so a run's digits are exact only where these match."""
    import platform

    import torch
    import transformers

    from lewisrag.data.cpu_linear import current_kind

    out = {"python": platform.python_version(), "machine": platform.machine(), "cpu": cpu_model(),
           "cpu_id": cpu_id(), "torch": torch.__version__, "transformers": transformers.__version__,
           "threads": torch.get_num_threads(), "cpu_linear": current_kind(), "device": resolve_device(device)}
    if out["device"].startswith("cuda"):
        out["gpu"] = torch.cuda.get_device_name(out["device"])
    return out
