"""Where torch computes: its intra-op thread count for the length of a block, restored after (the
setting is per process), and the device a command runs on (`resolve_device`)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

from lewisrag.data.io import InputError


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
    """"auto" is "cuda" when a GPU is visible, else "cpu"; "cpu" and "cuda[:N]" are kept as given.

    >>> resolve_device("cpu")
    'cpu'
    >>> resolve_device("gpu")
    Traceback (most recent call last):
    lewisrag.data.io.InputError: --device: must be auto, cpu or cuda[:N], got 'gpu'
    """
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name != "cpu" and not re.fullmatch(r"cuda(:\d+)?", name):
        raise InputError(flag, f"must be auto, cpu or cuda[:N], got {name!r}")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(flag, f"{name}: no GPU is visible to torch")
    return name
