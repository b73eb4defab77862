"""How an output's path is named: by the kernel (`physical`, `_resolved`), by the kernel's identity
of what is there (`_identity`, which sees through a bind mount), and the mount points the process sees."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from lewisrag.data.io import InputError


def physical(path: str | os.PathLike) -> Path:
    """`path` as the kernel reaches it: its parent with links and `..` resolved, then its own name.

    Every check and every write of an output goes through this one path. `os.path.abspath` drops the
    folder before a `..` from the text, while the kernel follows a link first: with `L` a link,
    `U/L/../data` is `U/data` to the one and the link target's sibling to the other, and checking the
    one while writing the other replaced a folder no check had seen. The last name is kept as it is
    (a link there is refused by `check_out_dir`), and `.`, `..` and `/` are resolved whole.
    """
    p = Path(path)
    if p.name in ("", ".", ".."):
        return Path(os.path.realpath(p))
    return Path(os.path.realpath(p.parent)) / p.name


def _resolved(path: str | os.PathLike, flag: str | None = None, given: str | os.PathLike | None = None) -> Path:
    """`Path(path).resolve()`, or an InputError naming `path` (`given`) when a symbolic link loop is in its way."""
    try:
        return Path(path).resolve()
    except RuntimeError:  # Python before 3.13
        pass
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
    raise InputError(path if given is None else given, "is inside a symbolic link loop", field=flag)


def _identity(path: str | os.PathLike) -> tuple[int, int] | None:
    """The kernel's name for the file or folder at `path` (device, inode), links followed; None if none is there."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _mount_points() -> set[str]:
    """The mount points this process sees (`/proc/self/mountinfo`; none where it is missing)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return set()
    unescape = re.compile(r"\\([0-7]{3})")  # a space is \040, a backslash \134
    return {unescape.sub(lambda m: chr(int(m[1], 8)), f[4]) for f in (ln.split(" ") for ln in lines) if len(f) > 4}
