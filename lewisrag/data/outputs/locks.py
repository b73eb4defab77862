"""Holding an output folder while a command writes it (`exclusive`), and the checks it passed in this
process, remembered with the files lewisrag did not write that it held then (`_remember_check`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from lewisrag.data.io import InputError
from lewisrag.data.outputs.markers import _foreign, made_by
from lewisrag.data.outputs.paths import _identity


# The marked folders a check passed in this process (`check_out_dir`, `check_part`), by their resolved
# path and the kernel's identity, with the files lewisrag did not write (`_foreign`) that they held then
_CHECKED: dict[tuple[str, int, int], frozenset[str]] = {}


def _remember_check(folder: Path) -> None:
    """Note that a check passed the marked `folder` holding the files `_foreign` finds there now: those
    `--overwrite` approved (or none, without it), which `replace_dir` replaces; a later one it refuses.
    A folder without a marker (missing, empty) is not noted: `replace_dir` refuses any file in it."""
    ident = _identity(folder)
    if ident is None or made_by(folder) is None:
        return
    _forget_check(folder)
    _CHECKED[(os.path.realpath(folder), *ident)] = frozenset(_foreign(folder))


def _checked(folder: Path) -> frozenset[str] | None:
    """The files lewisrag did not write that the folder now at `folder` held when a check passed it, or
    None when no check in this process passed this folder (another at that path is another folder)."""
    ident = _identity(folder)
    return None if ident is None else _CHECKED.get((os.path.realpath(folder), *ident))


def _forget_check(folder: Path) -> None:
    """Forget the checks of whatever folder was at `folder`: it is being replaced or removed, and a
    folder made there later (which may get the same inode) was not checked."""
    where = os.path.realpath(folder)
    for key in [k for k in _CHECKED if k[0] == where]:
        del _CHECKED[key]


@contextlib.contextmanager
def exclusive(folder: str | os.PathLike, flag: str = "--out") -> Iterator[None]:
    """Hold `folder` (created if needed) for this process: a second lewisrag process that would
    write there is refused (exit 2) instead of interleaving its files with this one's. The lock is
    the kernel's (flock on the folder itself, no lock file), so a killed run leaves none behind."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock to take
        fcntl = None
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise InputError(folder, "is a file where a folder is written; move it away", field=flag)
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise InputError(folder, "another lewisrag process is writing here; wait for it to end or choose "
                                 "another", field=flag) from None
        yield
    except BaseException:
        if created and folder.is_dir() and not any(folder.iterdir()):  # refused before anything was written
            folder.rmdir()
        raise
    finally:
        os.close(fd)
