"""Atomic writers: a temporary file beside the target, renamed onto it only when complete, and the
parent folders a failed write made taken away again."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds."""
    target = Path(path)
    made = make_parents(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{owner_tag()}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs should get the usual mode
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        remove_if_empty(made)
        raise


def make_parents(path: Path) -> list[Path]:
    """Create `path`'s missing parent folders; returns those it created, deepest first, so that a
    failed write can take them away again (`remove_if_empty`) instead of leaving empty folders."""
    missing, parent = [], path.parent
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    path.parent.mkdir(parents=True, exist_ok=True)
    return missing


def remove_if_empty(folders: Iterable[Path]) -> None:
    """Remove each folder, deepest first, while it is empty (another process may have written there)."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def owner_tag() -> str:
    """`PID-HOST` for temporary names, so that a later run can tell the leftovers of a killed process
    from another live run's (`outputs.sweep_leftovers`). HOST: 6 hex digits of a hash of the host
    name and, on Linux, the process-id namespace: two containers may share a host name and a folder,
    but a process id means something only in its own namespace.

    >>> import re; bool(re.fullmatch(r"[0-9]+-[0-9a-f]{6}", owner_tag()))
    True
    """
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:  # not Linux
        namespace = ""
    host = hashlib.sha1(f"{socket.gethostname()} {namespace}".encode()).hexdigest()[:6]
    return f"{os.getpid()}-{host}"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=False) + "\n")


def write_jsonl(path: str | os.PathLike, records: Iterable[dict]) -> int:
    n = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            n += 1
    return n
