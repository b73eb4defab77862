"""Replacing an output folder whole: built beside it and swapped in by two renames (`staged_dir`,
`replace_dir`), rewritten with the user's files carried over (`rewritten_dir`, `output_dir`), or
removed for a rerun that redoes it (`discard_output`); what the checks passed is looked at again here."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

from lewisrag.data.io import InputError, LewisragWarning, _umask, make_parents, owner_tag, remove_if_empty
from lewisrag.data.outputs.checks import _a, check_out_dir, check_part
from lewisrag.data.outputs.locks import _checked, _forget_check, exclusive
from lewisrag.data.outputs.markers import MARKER, _foreign, added_files, is_ours, made_by, mark, record_files, written_files
from lewisrag.data.outputs.paths import physical
from lewisrag.data.outputs.removal import _check_one_device, _clear_old, _discard, _old, _remove_tree, sweep_leftovers


def discard_output(folder: str | os.PathLike, kind: str, legacy: Iterable[str] = (), *, overwrite: bool = False,
                   unmarked: bool | None = None, what: str = "a rerun") -> None:
    """Remove `folder`, an output lewisrag wrote as `kind` that a rerun redoes from its start, once
    `check_part` (or `check_out_dir(replaces=True)`) found nothing of the user's in it (`legacy`,
    `unmarked`: as `check_part`'s; `unmarked` defaults to whether `legacy` is given, for a kind once
    written without a marker; the two take the same folders for lewisrag's). The run may have gone on
    for hours since that check: `check_part` looks again right before the folder goes, so a file the
    user added to it since is refused by name, not lost, unless `overwrite` (`what` names the stage).
    It is renamed aside first (`.NAME.old`, which the next replace there clears), so a kill never
    leaves it half removed; a folder of another kind or of none is refused, never removed."""
    folder = physical(folder)
    if not folder.exists() and not folder.is_symlink():
        return
    unmarked = bool(legacy) if unmarked is None else unmarked
    names = set(os.listdir(folder)) if folder.is_dir() and not folder.is_symlink() else set()
    unmarked_ours = unmarked and made_by(folder) is None and names & {n.split("/")[0] for n in legacy}
    if folder.is_symlink() or not folder.is_dir() or (names and not is_ours(folder, kind) and not unmarked_ours):
        raise InputError(folder, f"is not {_a(kind)} lewisrag wrote, so it is not removed; move it away")
    check_part(folder, kind, overwrite=overwrite, what=what, legacy=legacy, unmarked=unmarked)
    old = _old(folder)
    _clear_old(old)
    _forget_check(folder)
    os.replace(folder, old)
    _discard(old)


def replace_dir(src: Path, dst: Path, files: Iterable[str] | None = None, *, record: bool = True) -> None:
    """Move the finished folder `src` onto `dst`, atomically replacing an old `dst`. A marked `src`
    gets the list of its files in its marker (`written_files`: `files`, by default every name in it),
    so that a later rerun can tell them from files the user adds; `record=False`: the caller listed them.

    A kill between the renames leaves the old folder at `.NAME.old`, which `existing()` finds and the
    next `check_out_dir` puts back.

    The caller checked `dst` before its work (`check_out_dir`, `check_part`); what may have come since is
    checked again here, right before the old folder goes: a mount point in it, and, for a marked `src`
    (an output, not a checkpoint's folder inside one), a `dst` lewisrag did not mark that holds
    anything, or another kind's output holding files lewisrag did not write there (`_foreign`), are
    refused by name and left as they are. So is an output of `src`'s kind that a check passed in this
    process (`_remember_check`) holding a file lewisrag did not write that was not there at the check
    (put there while the command ran, which `--overwrite` did not approve); the files the check found,
    approved by `--overwrite`, are replaced. A `dst` no check passed (a checkpoint inside a run) is
    replaced as it is.
    """
    src, dst = physical(src), physical(dst)  # `.` and `..` have no name to rename by
    if record and made_by(src) is not None:
        record_files(src, files)
    if dst.exists() and not dst.is_dir():
        raise InputError(dst, "exists and is not a folder (it is left as it is)")
    if dst.is_dir() and not dst.is_symlink():
        _check_one_device(dst, None)
        made, new = made_by(dst), made_by(src)
        if new is not None and made is None and (names := sorted(os.listdir(dst))):
            raise InputError(dst / names[0], "was not written by lewisrag, and the folder holding it is being replaced; "
                             "move it away, then run the command again")
        if new is not None and made not in (None, new) and (users := _foreign(dst)):
            raise InputError(dst / users[0], f"was not written by lewisrag into the {made} at {dst}, which is being "
                             "replaced; move it away, then run the command again")
        approved = _checked(dst)
        if new is not None and made == new and approved is not None and (
                late := [u for u in _foreign(dst) if u not in approved]):
            raise InputError(dst / late[0], f"was not written by lewisrag and was put into the {made} at {dst} after "
                             "the command checked it, and the new one replaces that folder whole; move it away, then "
                             "run the command again")
    _swap(src, dst)


def _swap(src: Path, dst: Path) -> None:
    """The two renames of a replace (old aside, new in) and the old folder's removal."""
    old = _old(dst)
    _clear_old(old)
    _forget_check(dst)  # the folder checked goes: its remembered check is for no later one
    if dst.exists():
        os.replace(dst, old)
    os.replace(src, dst)
    _discard(old)  # the folder the caller replaced


@contextlib.contextmanager
def staged_dir(path: str | os.PathLike, kind: str | None = None) -> Iterator[Path]:
    """Yield a temporary folder beside `path`; it replaces `path` only if the block succeeds.

    With a `kind`, the new folder is marked as lewisrag's output of that kind. A failed block, or a swap
    that `replace_dir` refuses (a file the user put into `path` meanwhile), removes the staging folder.
    """
    target = physical(path)  # `.` and `..` have no name to stage beside
    tmp, made = _stage_beside(target)
    try:
        yield tmp
        usual_modes(tmp)
        if kind is not None:
            mark(tmp, kind)
        replace_dir(tmp, target)  # once it has moved `tmp` in, `tmp` names nothing to remove below
    except BaseException:
        _remove_tree(tmp)
        remove_if_empty(made)
        raise


def usual_modes(folder: Path) -> None:
    """Give every file and folder below `folder` the mode the umask gives a new one: some writers make
    theirs private (transformers 5's `save_pretrained` writes model.safetensors 0600 beside a 0644
    config.json, as mkstemp does), and an output is shared as a whole or not at all."""
    mask = _umask()
    for root, dirs, files in os.walk(folder):
        for name, mode in [*((d, 0o777 & ~mask) for d in dirs), *((f, 0o666 & ~mask) for f in files)]:
            path = os.path.join(root, name)
            st = os.lstat(path)
            if not stat.S_ISLNK(st.st_mode) and stat.S_IMODE(st.st_mode) != mode:
                os.chmod(path, mode)


def _stage_beside(target: Path) -> tuple[Path, Path | None]:
    """A new staging folder beside `target`, named after its writer, and the first parent made for it."""
    made = make_parents(target)
    sweep_leftovers(target.parent, target.name)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp.{owner_tag()}.", dir=target.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; outputs should get the usual mode
    return tmp, made


@contextlib.contextmanager
def rewritten_dir(out: str | os.PathLike, kind: str, *, overwrite: bool = False, flag: str = "--out") -> Iterator[Path]:
    """A folder beside `out` to write a whole new `kind` output into; it replaces `out` in one rename
    when the block succeeds, so a kill at any moment leaves the old output or the new, never a mix.

    What the user added to an earlier output of this kind (`added_files`: names its marker does not
    list, and files inside its folders that its "tree" does not) moves over as hard links (copies
    where links fail): in the old folder and the new alike until the rename. A path the new output
    writes that the user holds there is refused, its file kept, unless `overwrite`. `out` is held
    (`exclusive`) from the first file written to the rename: a second run into it is refused, not
    raced. `out` was checked with `check_out_dir`; what is there at the swap is looked at again, as
    the user may have put files there since: in a folder lewisrag did not mark (missing or empty at
    the check) they all move over, and a path the new output writes is refused, `overwrite` or not;
    in another kind's output that `--overwrite` replaces, a file lewisrag did not write there is
    refused (`_foreign`); a mount point inside `out` is refused (`_check_one_device`).
    A lewisrag output among the user's files (`index build --out WORLD/bm25`) moves over as it is, and a
    warning says so: the new output does not make it again, and it may have been made from the old one.
    """
    out = physical(out)
    tmp, made = _stage_beside(out)
    try:
        with exclusive(out, flag):
            yield tmp
            usual_modes(tmp)  # before the user's files are linked in: their modes are theirs
            mark(tmp, kind)
            names = [n for n in os.listdir(tmp) if n != MARKER]
            record_files(tmp, names)  # before the user's files join it: the marker lists what lewisrag wrote
            _check_one_device(out, flag)  # a mount put there since the check: not copied over, then emptied
            ours = is_ours(out, kind)
            # a user's folder merges with a new one of its name
            users = [f for a in _carried(out, kind, names, flag) for f in _files_below(out, a)]
            clash = [p for p in users if _taken(tmp, out, p)]
            if clash and not (overwrite and ours):
                raise InputError(out / clash[0], "was not written by lewisrag and the new output writes a file "
                                 "of that name; move it away" + (" or pass --overwrite" if ours else ""), field=flag)
            for path in (p for p in users if p not in clash):
                (tmp / path).parent.mkdir(parents=True, exist_ok=True)
                if not (tmp / path).is_dir():  # an empty folder of the user's that the new output also has
                    _link_tree(out / path, tmp / path)
            with signals_deferred():  # the two renames together: a Ctrl-C between them would leave `out` missing
                _swap(tmp, out)
    except BaseException:
        _remove_tree(tmp)
        remove_if_empty(made)
        raise
    outputs = {p.rpartition("/")[0] for p in users if p not in clash and p.endswith("/" + MARKER)}
    for rel in sorted(r for r in outputs if not any(r.startswith(o + "/") for o in outputs)):  # not one inside another
        if (other := made_by(out / rel)) is not None:
            warnings.warn(LewisragWarning(f"{out / rel}: a lewisrag {other} inside the {kind}, kept as it was: the new "
                                          f"{kind} does not make it again; if it was made from the old one, make it again"),
                          stacklevel=3)


def _carried(out: Path, kind: str, names: list[str], flag: str) -> list[str]:
    """The names in `out`, as the swap finds it, that are the user's and move over to the new `kind` output
    (`names`: what it wrote at its top)."""
    made = made_by(out)
    if made == kind:
        # a marker that lists nothing is from before markers listed files: the new output's names were its own
        return added_files(out) if written_files(out) is not None else sorted(set(os.listdir(out)) - {MARKER} - set(names))
    if made is None:  # missing or empty when checked (it holds no marker): whatever is there now, the user put there
        return sorted(os.listdir(out))
    if users := _foreign(out):  # another kind's output, which --overwrite replaces with what lewisrag wrote there only
        raise InputError(out / users[0], f"was not written by lewisrag into the {made} at {out}, which this output "
                         "replaces; move it away, then run the command again", field=flag)
    return []


def _files_below(root: Path, rel: str) -> list[str]:
    """`rel` (relative to `root`) as the files, links and empty folders it is or holds."""
    top = root / rel
    if top.is_symlink() or not top.is_dir():
        return [rel]
    below = sorted(p.relative_to(root).as_posix() for p in top.rglob("*")
                   if p.is_symlink() or not p.is_dir() or not any(p.iterdir()))
    return below or [rel]


def _taken(new: Path, old: Path, rel: str) -> bool:
    """Whether the new output (folder `new`) holds something at `rel` that the user's `old / rel` would
    replace, or a file where a folder above it must go. Two folders of one name merge."""
    target = new / rel
    if target.is_dir() and not target.is_symlink():
        return not ((old / rel).is_dir() and not (old / rel).is_symlink())
    if target.exists() or target.is_symlink():
        return True
    parts = rel.split("/")[:-1]
    return any((new / "/".join(parts[:i + 1])).is_symlink() or (new / "/".join(parts[:i + 1])).is_file()
               for i in range(len(parts)))


def _link_tree(src: Path, dst: Path) -> None:
    """`dst` as hard links to `src`'s files (a folder: all of its tree; a link: the link itself)."""
    def link(a, b):
        try:
            os.link(a, b, follow_symlinks=False)
        except OSError:
            shutil.copy2(a, b, follow_symlinks=False)

    if src.is_symlink():
        os.symlink(os.readlink(src), dst)
    elif src.is_dir():
        shutil.copytree(src, dst, symlinks=True, copy_function=link)
    else:
        link(src, dst)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM back until the block ends: for a few renames that must happen all
    together (the CLI turns either signal into an exception, which could land between two of them).

    The Python-level handlers are swapped for one that notes the signal, and the first noted one is
    handed to the old handler afterwards. (Blocking the signals with pthread_sigmask would not do:
    the kernel hands a process's signal to any thread that does not block it, torch's among them.)
    Only the main thread can set handlers; elsewhere the block runs as it is.
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    wanted = [signal.SIGINT] + ([signal.SIGTERM] if hasattr(signal, "SIGTERM") else [])
    before = {s: signal.signal(s, lambda signum, frame: noted.append(signum)) for s in wanted}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        if noted:
            handler = before[noted[0]]
            if callable(handler):
                handler(noted[0], None)  # Python's SIGINT handler raises KeyboardInterrupt; the CLI's SIGTERM one too
            elif handler == signal.SIG_DFL:
                signal.raise_signal(noted[0])  # the default action: the process ends as it would have


@contextlib.contextmanager
def output_dir(out: str | os.PathLike, kind: str, *, overwrite: bool = False, flag: str = "--out") -> Iterator[Path]:
    """The folder a command writes its `kind` of outputs into, checked (`check_out_dir`): a staging
    folder that replaces `out` whole when the block succeeds, keeping what the user added to an
    earlier output of the same kind (`rewritten_dir`). A rerun rewritten file by file in place
    could be killed half old, half new (a world's passages of one seed beside questions of another)."""
    out = check_out_dir(out, kind, overwrite=overwrite, flag=flag)
    with rewritten_dir(out, kind, overwrite=overwrite, flag=flag) as tmp:
        yield tmp
