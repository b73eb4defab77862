"""Removing what a command replaces or a killed one left: a folder's tree without crossing into
another file system (`_remove_tree`, `_check_one_device`), the `.NAME.old` a kill between a replace's
two renames left (`_clear_old`, `_restore_old`, `existing`), and killed writers' staging folders and
temporary files (`sweep_leftovers`)."""

from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path

from lewisrag.data.io import InputError, owner_tag
from lewisrag.data.outputs.markers import made_by
from lewisrag.data.outputs.paths import _mount_points


def _clear_old(old: Path) -> None:
    """Remove a `.NAME.old` that an earlier replace left behind (killed between its renames), if
    lewisrag made it. One it did not make (a user's own, or the user's folder an --overwrite was
    replacing when it was killed) stays, and the replace is refused."""
    if why := _in_the_way(old):
        raise InputError(old, why)
    _discard(old)


def _in_the_way(old: Path) -> str | None:
    """Why `.NAME.old` may not be removed, or None."""
    if old.is_symlink() or not old.exists():
        return None
    if not old.is_dir():
        return "is a file in the way of replacing the folder beside it; move it away"
    if made_by(old) is None and any(old.iterdir()):
        return "is in the way of replacing the folder beside it and was not made by lewisrag; move it away"
    return None


def _discard(path: Path) -> None:
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink():  # rmtree refuses links: a replaced `--out` link would linger as `.NAME.old`
        path.unlink()
    else:
        _remove_tree(path)


def _remove_tree(path: Path) -> None:
    """`shutil.rmtree(path, ignore_errors=True)` that never crosses into another file system: a folder
    inside `path` that is a mount point, or lies on another device, is left (with the folders above it),
    its files untouched. Links are removed, never followed."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISDIR(st.st_mode):
        with contextlib.suppress(OSError):
            os.unlink(path)
        return
    _remove_below(str(path), st.st_dev, _mount_points())


def _remove_below(folder: str, dev: int, mounts: set[str]) -> bool:
    """Remove `folder` and what it holds on device `dev`; whether it is gone."""
    whole = True
    try:
        with os.scandir(folder) as it:
            entries = list(it)
    except OSError:
        return False
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if st.st_dev != dev or entry.path in mounts or (stat.S_ISDIR(st.st_mode) and os.path.ismount(entry.path)):
            whole = False  # another file system: not ours to empty
        elif stat.S_ISDIR(st.st_mode):
            whole = _remove_below(entry.path, dev, mounts) and whole
        else:
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                pass
            except OSError:
                whole = False
    if whole:
        try:
            os.rmdir(folder)
        except OSError:
            return False
    return whole


# `.NAME.tmp.PID-HOST.xxxx` (staged_dir) and `.NAME.PID-HOST.xxxx.tmp` (io.atomic_path); xxxx is tempfile's
_LEFTOVER = re.compile(r"\..+\.(?:tmp\.(?P<dpid>\d+)-(?P<dhost>[0-9a-f]{6})\.[a-z0-9_]+"
                       r"|(?P<fpid>\d+)-(?P<fhost>[0-9a-f]{6})\.[a-z0-9_]+\.tmp)")


def sweep_leftovers(folder: str | os.PathLike, name: str | None = None) -> list[Path]:
    """Remove the staging folders and temporary files (of the output `name` only, if given) that
    lewisrag processes killed without cleanup left in `folder`; returns what was removed.

    Only entries whose writer ran on this host (the host hash in the name) and no longer runs
    (no process with that id) are removed: another run's work in progress is never touched. A
    process id reused since only keeps a leftover a while longer. Not on Windows, where there is
    no cheap test for a live process id.
    """
    folder = Path(folder)
    if os.name != "posix" or not folder.is_dir():
        return []
    removed = []
    with os.scandir(folder) as entries:
        for entry in entries:
            m = _LEFTOVER.fullmatch(entry.name)
            if m is None or (name is not None and not entry.name.startswith(f".{name}.")):
                continue
            pid, host = int(m["dpid"] or m["fpid"]), m["dhost"] or m["fhost"]
            if host != _host_hash() or _alive(pid):
                continue
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                _remove_tree(path)
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            removed.append(path)
    return removed


def _host_hash() -> str:
    return owner_tag().rsplit("-", 1)[1]


def _alive(pid: int) -> bool:
    if pid <= 0:
        return True  # not a process id that names one process: keep
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: another user's live process
        return True
    return True


def _old(target: Path) -> Path:
    return target.with_name(f".{target.name}.old")


def _restore_old(out: Path) -> None:
    """Put back the folder a kill between `replace_dir`'s two renames left at `.NAME.old` (marked, `out`
    missing), as a RAG run does its checkpoints' (`training.rag_run._settle_replaced`): left there, the next
    run found no output to carry the user's files from, and its replace removed them with `.NAME.old`."""
    old = _old(out)
    if out.exists() or out.is_symlink() or old.is_symlink() or not old.is_dir() or made_by(old) is None:
        return
    os.replace(old, out)


def _check_one_device(folder: Path, flag: str | None = "--out", what: str = "replacing the folder") -> None:
    """Refuse to replace `folder` when anything inside it is a mount point or lies on another device
    than `folder` (`os.path.ismount`, the device of each entry, and the kernel's mount table, which
    also names a bind mount of the same file system): the old folder's removal would delete the files
    on that file system, and the hard links that carry the user's files over cannot reach them (they
    were copied, and the originals deleted). Nothing is refused or walked when `folder` is missing."""
    try:
        st = os.lstat(folder)
    except OSError:
        return
    if not stat.S_ISDIR(st.st_mode):
        return
    real = os.path.realpath(folder)
    mounts = {m for m in _mount_points() if m != real and m.startswith(real.rstrip("/") + "/")}
    for root, dirs, files in os.walk(folder):  # links are not followed
        for name in sorted(dirs) + sorted(files):
            path = os.path.join(root, name)
            try:
                entry = os.lstat(path)
            except OSError:
                continue
            on_it = os.path.join(real, os.path.relpath(path, folder))
            if entry.st_dev != st.st_dev or on_it in mounts or (stat.S_ISDIR(entry.st_mode) and os.path.ismount(path)):
                raise InputError(path, f"is a mount point inside {folder}, whose files {what} would delete; unmount "
                                 "it or move it away", field=flag)


def existing(path: str | os.PathLike) -> Path | None:
    """`path` if it exists, else the previous version a kill mid-replace left behind, else None."""
    target = Path(path)
    if target.exists():
        return target
    return _old(target) if _old(target).exists() else None
