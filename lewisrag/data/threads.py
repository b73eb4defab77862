"""torch's intra-op thread count for the length of a block, restored after (the setting is per process)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


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
