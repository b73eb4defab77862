"""Where commands write: the rules that keep a user's files safe, and atomic folder replacement.

A command never destroys what the user did not make:

- its `--out` folder must be missing, empty, or one that the same kind of command made before (it
  holds the marker file `.lewisrag` naming that kind: an index build never replaces a world or a
  training run); a folder lewisrag did not make that holds anything is refused (exit 2, naming
  a file of it), `--overwrite` or not; another kind of lewisrag output is refused unless
  `--overwrite`, and then the old folder is replaced only once the new one is complete, and only
  when it holds no file lewisrag did not write there (`_foreign`), whatever the flags;
- an output replaced whole by a rerun (an index, a checkpoint) lists in its marker what lewisrag
  wrote there, inside its subfolders too; a file the user added since is refused by name (exit 2),
  not lost, unless `--overwrite`; an output rewritten by a rerun (a world, an evaluation) is
  written whole beside the old one and swapped in, the user's files moved over as hard links
  (`rewritten_dir`); and no `--out` that holds the command's own inputs, the working directory, `/` or a
  folder right under it, a home folder (by $HOME or the user database), a mount point or a git
  repository is ever replaced (`_check_replaceable`), nor one inside an input folder unless lewisrag
  wrote it there as this kind of output (`compare --out RUN/compare`, not `--out RUN/world`), nor one
  inside another lewisrag output that is not this kind's (`reproduce --out RUN/world --overwrite`, RUN
  a reproduction: the world is part of that run, `_check_not_part_of_an_output`);
- an `--out` that is a symbolic link is refused (the rename that moves an output in would replace the
  link, not fill its target); a `.NAME.old` or a finished index at `NAME.partial` that lewisrag did
  not leave there is refused, never cleared;
- an existing file where a folder is expected is an error, and is never renamed or removed;
- a folder being replaced that holds a mount point, or anything on another device, is refused by name
  (`_check_one_device`), and a removal never crosses into another file system (`_remove_tree`);
- what the checks passed is looked at again where it would be lost (`replace_dir`, `rewritten_dir`,
  `discard_output`): a file the user put there while the command ran is carried over or refused; a
  check that passes a marked folder remembers, in the process, the files lewisrag did not write that
  it found there (`_remember_check`: those `--overwrite` approved, or none), and `replace_dir`
  replacing that folder with a new output of its kind refuses by name any other found at the swap;
- a file output (`chunk --out passages.jsonl`) replaces an existing file only with `--overwrite`, and
  never one that an output lewisrag marked wrote (`wrote`: an index's manifest.json, a reproduction's
  config.json), whose marker lists it (`record_files`, `note_written`).

Folders are replaced by two renames (old aside, new in, old removed), so a kill at any moment leaves
the old folder or the new one (the old at `.NAME.old`, which the next `check_out_dir` puts back).
The marker lets `--resume` and plain reruns work on lewisrag's own folders without a flag.

Staging folders and temporary files carry their writer's process id and host in their names
(`.NAME.tmp.PID-HOST.xxxx`, `.NAME.PID-HOST.xxxx.tmp`). A process killed where no cleanup runs
(SIGKILL, a power cut) leaves them behind; the next command that writes there removes those whose
process is gone (`sweep_leftovers`), and never one that a live process may still be writing.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from lewisrag.data.io import InputError, _umask, make_parents, owner_tag, remove_if_empty, write_json

MARKER = ".lewisrag"


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


def _read_marker(path: str | os.PathLike) -> dict | None:
    """The marker of the folder at `path` as it reads now, or None: none there, or a damaged one (which
    proves nothing). Read once by each caller, so that its kind, files and tree come from one version."""
    try:
        marker = json.loads((Path(path) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def _kind(marker: dict | None) -> str | None:
    kind = (marker or {}).get("kind")
    return kind if isinstance(kind, str) else None


def _listed(marker: dict | None) -> list[str] | None:
    """The marker's plain top-level names ("files"), or None when it lists none. A name that is a path
    (a marker edited to name one outside the folder) makes nothing there look like lewisrag's."""
    files = (marker or {}).get("files")
    if not isinstance(files, list):
        return None
    return [f for f in files if isinstance(f, str) and f not in ("", ".", "..", MARKER) and "/" not in f and "\\" not in f]


def _listed_tree(marker: dict | None) -> set[str] | None:
    """The marker's "tree" (`record_files`), or None when it keeps none (written before markers did)."""
    tree = (marker or {}).get("tree")
    return {t for t in tree if isinstance(t, str)} if isinstance(tree, list) else None


def made_by(path: str | os.PathLike) -> str | None:
    """The kind of output lewisrag wrote into the folder at `path` ("index", "run", ...), or None."""
    return _kind(_read_marker(path))


def written_files(path: str | os.PathLike) -> list[str] | None:
    """The names lewisrag wrote into the folder at `path`, as its marker lists them (`record_files`);
    None when it lists none (written before markers did)."""
    return _listed(_read_marker(path))


# What an output of these kinds wrote outside the folders in it that are outputs of their own, for a
# folder whose marker lists nothing (written before it did, `wrote`): a reproduction's config, results,
# reports, plots and stage records (RUN/dpr, RUN/world, ... hold markers of their own)
UNLISTED = {"reproduction": ("config.json", "results.json", "timings.json", "report.md", "report.html", "predictions.json",
                             "evidence.json", "knowledge_update.json", "*.png", "stages/*.json", "data/*.jsonl",
                             "jeopardy/*.json", "fever/*.json")}


def _plain(rel: str) -> bool:
    """Whether `rel` is a relative "/"-separated path below a folder (no `..`, `.` or empty part)."""
    return bool(rel) and "\\" not in rel and not rel.startswith("/") and all(
        part not in ("", ".", "..") for part in rel.split("/")) and rel != MARKER


def _matches(rel: str, pattern: str) -> bool:
    """Whether `rel` is matched by `pattern` part by part (a `*` never crosses a "/")."""
    parts, wanted = rel.split("/"), pattern.split("/")
    return len(parts) == len(wanted) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(parts, wanted))


def wrote(path: str | os.PathLike, rel: str) -> bool:
    """Whether the output lewisrag marked at `path` wrote its file at `rel` (relative, "/"-separated):
    a top-level name its marker lists, a path below them that its "tree" holds (for a marker that keeps
    no tree, anything in a listed folder: what lewisrag wrote there is not known), or, for a marker that
    lists nothing, a path its kind is known to write (`UNLISTED`). Not a file the user put there since,
    in one of its folders too (`lewisrag chunk --out RUN/dpr/tokenizer/mine.jsonl`)."""
    marker = _read_marker(path)
    listed = _listed(marker)
    if listed is None:
        return any(_matches(rel, p) for p in UNLISTED.get(_kind(marker) or "", ()))
    if "/" not in rel:
        return rel in listed
    tree = _listed_tree(marker)
    return rel in tree if tree is not None else rel.split("/")[0] in listed


def note_written(path: str | os.PathLike, paths: Iterable[str]) -> None:
    """Add `paths` (relative, "/"-separated; those that are files now) to what the marker of the marked
    folder at `path` lists as lewisrag's: a top-level name under "files", one in a folder under "tree".
    For an output whose folders hold outputs of their own (a reproduction's RUN/dpr, RUN/rag_token,
    which list theirs) and files it writes one by one as it goes (RUN/config.json, RUN/stages/<name>.json),
    where `record_files` would list the whole tree, the user's files in it too. What the marker listed
    stays while it is there; a marker that listed nothing first lists what its kind is known to have
    written (`UNLISTED`), so that a run begun before markers listed its files loses no protection. A
    folder without a marker (or with a damaged one) is left as it is: it is no output to list for."""
    path = Path(path)
    marker = _read_marker(path)
    kind = _kind(marker)
    if kind is None:
        return
    listed = _listed(marker)
    if listed is None:
        known = {p.relative_to(path).as_posix() for pattern in UNLISTED.get(kind, ())
                 for p in path.glob(pattern)}
    else:
        known = set(listed) | (_listed_tree(marker) or set())
    entries = sorted(e for e in known | set(paths) if _plain(e) and ((path / e).is_file() or (path / e).is_symlink()))
    write_json(path / MARKER, {**marker, "files": [e for e in entries if "/" not in e],
                               "tree": [e for e in entries if "/" in e]})


def record_files(path: str | os.PathLike, names: Iterable[str] | None = None) -> None:
    """List `names` (default: every name now there) in the marker of the marked folder at `path`
    as what lewisrag wrote there, and under "tree" the files inside those of them that are folders."""
    path = Path(path)
    marker = json.loads((path / MARKER).read_text(encoding="utf-8"))
    files = sorted(set(os.listdir(path) if names is None else names) - {MARKER})
    write_json(path / MARKER, {**marker, "files": files, "tree": _tree(path, files)})


def _tree(path: Path, names: Iterable[str]) -> list[str]:
    """The files (and links) below the folders among `names`, as paths relative to `path`."""
    return sorted(p.relative_to(path).as_posix() for n in names if (path / n).is_dir() and not (path / n).is_symlink()
                  for p in (path / n).rglob("*") if p.is_symlink() or not p.is_dir())


def added_files(path: str | os.PathLike) -> list[str]:
    """What the user added to a folder lewisrag wrote: names its marker does not list, and files inside
    its listed folders that its "tree" does not (none known for markers written before they kept one)."""
    path = Path(path)
    marker = _read_marker(path)
    listed = _listed(marker)
    if listed is None:  # a folder marked before markers listed files: nothing in it is known to be the user's
        return []
    added = sorted(set(os.listdir(path)) - {MARKER} - set(listed))
    tree = _listed_tree(marker)
    if tree is not None:
        added += sorted(set(_tree(path, [n for n in listed if (path / n).exists()])) - tree)
    return added


def is_ours(path: str | os.PathLike, kind: str) -> bool:
    """Whether lewisrag wrote an output of this `kind` into the folder at `path`."""
    return made_by(path) == kind


def mark(path: str | os.PathLike, kind: str) -> None:
    """Mark the folder at `path` (created if needed) as lewisrag's output of this `kind`."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if not is_ours(path, kind):
        write_json(path / MARKER, {"made_by": "lewisrag", "kind": kind})


def is_free(out: Path, kind: str) -> bool:
    """Whether writing a `kind` output into `out` destroys nothing: missing, empty or ours."""
    return not out.exists() or is_ours(out, kind) or (out.is_dir() and not any(out.iterdir()))


def check_out_dir(out: str | os.PathLike, kind: str, *, overwrite: bool = False, flag: str = "--out",
                  inputs: dict[str, object] | None = None, replaces: bool = False, writes: Iterable[str] = (),
                  alone: bool = False) -> Path:
    """Refuse an output folder that would destroy the user's files or that cannot be written.

    `inputs` ({flag: path}) are the command's input files and folders: one inside an `out` that
    already holds something would be deleted with it (or read half-rewritten), so it is refused,
    `--overwrite` or not; so is an `out` inside an input folder that already holds something lewisrag
    did not write there as this kind (a run's world, the model an export reads). A new or empty folder
    inside an input is allowed: writing it adds to that input and destroys nothing (`swap --out RUN/swap`). `replaces`: the
    command replaces an earlier output of its kind whole (an index, a checkpoint), so a file the
    user put in that folder since is refused, unless `--overwrite`; the folder's marker lists what
    lewisrag wrote there. `writes`: names the command will write into an earlier output of its kind,
    which `rewritten_dir` would otherwise find taken by a user's file only once the work is done.
    `alone`: a command run on its own (not a stage of a larger output) also refuses a folder of its
    own kind that is part of another output (`world --out RUN/world`, RUN a reproduction: RUN's later
    stages were made from that world), --overwrite or not.
    Call it before any expensive work. Returns `out` as a Path. A marked `out` it passes is remembered
    with the files lewisrag did not write that it held then (`_remember_check`): the command may run
    for hours, and a file the user adds to it meanwhile is refused when `replace_dir` swaps the new
    output in, not deleted with the old one, as `--overwrite` approved only those there at the check.
    """
    given, out = out, physical(out)
    if out.is_symlink():  # replaced by a rename, the link would become a folder and its target go stale
        raise InputError(given, f"is a symbolic link; give the folder it points to ({os.path.realpath(out)})", field=flag)
    if out.exists() and not out.is_dir():
        raise InputError(given, "exists and is not a folder (it is left as it is); choose another", field=flag)
    if out.name and (why := _in_the_way(old := _old(out))):  # refused now, not when the finished output moves in
        raise InputError(old, why, field=flag)
    if out.name:
        _restore_old(out)
    sweep_leftovers(out.parent, out.name)
    if made_by(out) is not None:  # inside a folder lewisrag wrote: its killed writers' temporary files
        for folder, _, _ in os.walk(out):
            sweep_leftovers(Path(folder))
    # The refusals that --overwrite cannot lift come first, so that no message suggests a flag
    # that would only lead to another refusal.
    if out.exists() and Path.cwd().resolve().is_relative_to(_resolved(out, flag, given)):
        # a finished output replaces the folder by a rename: the shell would be left in a deleted folder
        raise InputError(given, "holds the working directory, which an output never replaces; choose another "
                         "(a new subfolder)", field=flag)
    check_inputs_outside(out, inputs or {}, flag, given)
    if out.is_dir() and any(out.iterdir()):
        if not is_ours(out, kind):  # --overwrite: the whole folder goes once the new one is complete
            _check_replaceable(out, flag, given)
            _check_not_part_of_an_output(out, kind, flag, given)
            _check_not_inside_inputs(out, kind, inputs or {}, flag, given)
        elif alone:
            _check_not_part_of_an_output(out, kind, flag, given)
        if made_by(out) is None:  # not lewisrag's at all: --overwrite replaces lewisrag's outputs only
            first = sorted(os.listdir(out))[0]
            raise InputError(given, f"holds files lewisrag did not write (such as {first!r}), which no command "
                             "replaces, --overwrite or not; move them away or choose another", field=flag)
        if not is_ours(out, kind) and (users := _foreign(out)):  # --overwrite replaces another kind's own files only
            raise InputError(given, f"holds a lewisrag {made_by(out)} and {_files(users)} lewisrag did not write there "
                             f"(such as {users[0]!r}), which no command replaces, --overwrite or not; move them away "
                             "or choose another", field=flag)
    if not overwrite and not is_free(out, kind):
        other = made_by(out)
        whose = f"holds a lewisrag {other}, not {_a(kind)}" if other else "was not made by lewisrag"
        raise InputError(given, f"folder is not empty and {whose}; choose another or pass --overwrite to replace it",
                         field=flag)
    if writes and not overwrite and is_ours(out, kind) and (taken := sorted(set(added_files(out)) & set(writes))):
        raise InputError(out / taken[0], "was not written by lewisrag and the new output writes a file of that name; "
                         "move it away or pass --overwrite", field=flag)
    if replaces and not overwrite and is_ours(out, kind):
        if added := added_files(out):
            raise InputError(given, f"holds {added[0]!r}, which lewisrag did not write there and a rerun would "
                             "lose; move it away or pass --overwrite", field=flag)
    _check_one_device(out, flag)  # the folder is replaced or rewritten: nothing in it may lie on another file system
    check_writable(out if out.is_dir() else out.parent, flag)
    _remember_check(out)  # the user's files there now: one added later is refused at the swap (`replace_dir`)
    return out


def check_part(folder: str | os.PathLike, kind: str, *, overwrite: bool = False, what: str = "a rerun",
               legacy: Iterable[str] = (), unmarked: bool = False, within: Iterable[str] = ()) -> None:
    """Refuse to let a rerun replace `folder`, a part of a larger output that lewisrag wrote (a
    reproduction's RUN/dpr, RUN/rag_token: `what` names the stage in the message), as it would
    destroy the user's files: a link or a file in its place, a folder lewisrag did not write as `kind`
    (whatever `overwrite`), or a file the user added to it since (`added_files`), unless `overwrite`.
    The rule `check_out_dir(replaces=True)` keeps for a command's `--out`, for the folders a command
    writes inside its own. Call it before anything is removed or redone.

    `legacy`: the names lewisrag writes there, for a folder whose marker lists none (or, with `unmarked`,
    that has no marker): a name outside them is the user's; "SUB/NAME" names what it writes in its
    subfolder SUB, whose other names are then the user's too. `unmarked`: lewisrag once wrote this kind
    without a marker (a closed book), so a folder without one that holds a `legacy` name is taken for
    it, as `discard_output(legacy=...)` takes it; any other folder without a marker is refused here,
    whatever `overwrite` (a RAG run always had its marker: one without it was refused by the stage,
    `discard_output`, only once the stages before it were redone). `within`: the subfolders the rerun
    replaces (a resumed training run's checkpoint/, best/, final/), when not all of `folder`.
    """
    inner = {n for n in legacy if "/" in n}
    folder, legacy, within = physical(folder), {n.split("/")[0] for n in legacy}, set(within)
    if folder.is_symlink():
        raise InputError(folder, f"is a symbolic link where {what} writes a folder; move it away")
    if not folder.exists():
        return
    if not folder.is_dir():
        raise InputError(folder, f"is a file where {what} writes a folder; move it away")
    sweep_leftovers(folder.parent, folder.name)
    for sub, _, _ in os.walk(folder):  # killed writers' temporary files are lewisrag's, not the user's
        sweep_leftovers(Path(sub))
    names = sorted(n for n in os.listdir(folder) if n != MARKER)
    made = made_by(folder)
    if not names:
        _remember_check(folder)  # a marked folder holding nothing: a file put there later is the user's
        return
    if made is None and not (unmarked and set(names) & legacy):  # a folder of this kind from before it had a marker
        raise InputError(folder, f"has no {MARKER} marker, so its files (such as {names[0]!r}) are not known to be "
                         f"lewisrag's, and {what} writes its folder there, which no command replaces, --overwrite or "
                         "not; move them away")
    if made is not None and made != kind:
        raise InputError(folder, f"holds a lewisrag {made} where {what} writes {_a(kind)}, which no command "
                         "replaces, --overwrite or not; move it away")
    _check_one_device(folder, None, what)
    if overwrite:
        _remember_check(folder)  # the user's files approved now; one added later is refused by `replace_dir`
        return
    if legacy and (made is None or written_files(folder) is None):  # no list: only the names lewisrag writes are known
        added = [n for n in names if n not in legacy]
        for sub in sorted({n.split("/")[0] for n in inner}):
            if (folder / sub).is_dir() and not (folder / sub).is_symlink():
                added += [f"{sub}/{n}" for n in sorted(os.listdir(folder / sub)) if f"{sub}/{n}" not in inner]
    else:
        added = added_files(folder)
    olds = {f".{n}.old" for n in (written_files(folder) or []) + sorted(legacy)}  # a replace killed between its renames
    added = [a for a in added if a not in olds and (not within or a.split("/")[0] in within)]
    if added:
        replaced = folder / added[0].split("/")[0] if within else folder
        raise InputError(folder / added[0], f"was not written by lewisrag, and {what} replaces {replaced} "
                         "whole; move it away, or pass --overwrite to replace it")
    _remember_check(folder)


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


def _check_replaceable(out: Path, flag: str, given: str | os.PathLike | None = None) -> None:
    """Refuse, even with --overwrite, to replace a folder whose loss is far more often a slip (`--out ~`,
    `--out $UNSET/`, `--out /data`) than a wish: the root, a folder right under it (/root, /home,
    /tmp), one that holds a home folder (by $HOME or by the user database: a shell expands `~` with
    the one, `sudo` or `env HOME=` may change the other), a mount point, or a git repository."""
    where = out.resolve()
    if where == Path(where.anchor) or where.parent == Path(where.anchor):
        why = "the root folder" if where == Path(where.anchor) else "a folder right under the root"
    elif any(home.is_relative_to(where) for home in _homes()):
        why = "a home folder or one that holds one"
    elif os.path.ismount(where):
        why = "a mount point"
    elif (where / ".git").exists():
        why = "a git repository"
    else:
        return
    raise InputError(out if given is None else given, f"is {why}, which --overwrite never replaces; choose another "
                     "(a new subfolder)", field=flag)


def _homes() -> set[Path]:
    homes = {Path.home()}
    with contextlib.suppress(ImportError, KeyError, OSError):
        import pwd

        homes.add(Path(pwd.getpwuid(os.getuid()).pw_dir))
    return {h.resolve() for h in homes if str(h) not in ("", "/")}


def check_on_its_own(out: str | os.PathLike, kind: str, flag: str = "--out") -> None:
    """`check_out_dir(alone=True)`'s rule for a command whose library function checks its folder
    itself, for callers that include a larger output's stages (`train rag`, `train stitched`: the
    reproduction's RAG and stitched stages train through the same functions and redo their own
    parts): refuse `out` when it is a folder of `kind` inside another lewisrag output, --overwrite
    and --resume or not. Call it from the command, before anything is read."""
    given, out = out, physical(out)
    if is_ours(out, kind):
        _check_not_part_of_an_output(out, kind, flag, given)


def _check_not_part_of_an_output(out: Path, kind: str, flag: str, given: str | os.PathLike | None = None) -> None:
    """Refuse, even with --overwrite, to replace a folder that lies inside a folder lewisrag marked
    (its parent or any folder above): it is a part of that output. Of another kind than the command's
    (`reproduce --out RUN/world --overwrite` replaced a reproduction's world, and the run then held a
    reproduction inside itself): the rule that --overwrite replaces another kind of output holds for
    outputs that stand alone; `_check_not_inside_inputs` catches this only when RUN is an input. Of
    the command's own kind, for a command run on its own (`check_out_dir(alone=True)`,
    `check_on_its_own`): that output's other parts were made from it (`world --out RUN/world` redrew
    the world under RUN's trained models, exit 0); the output that wrote it redoes it."""
    for folder in out.resolve().parents:
        if (other := made_by(folder)) is None:
            continue
        if is_ours(out, kind):
            raise InputError(out if given is None else given, f"is the {kind} of the lewisrag {other} at {folder}, "
                             "whose other parts were made from it; a command on its own never replaces it, --overwrite "
                             f"or not: choose a folder outside it (that {other} redoes its own parts)", field=flag)
        raise InputError(out if given is None else given, f"is part of the lewisrag {other} at {folder} and is not "
                         f"{_a(kind)} lewisrag wrote, which --overwrite never replaces; choose a folder outside "
                         "it", field=flag)


def _check_not_inside_inputs(out: Path, kind: str, inputs: dict[str, object], flag: str,
                             given: str | os.PathLike | None = None) -> None:
    """Refuse to replace a folder inside an input folder: unless it is this command's own earlier
    output, it is part of that input (`compare --run RUN --out RUN/world`, `export --model RUN --out
    RUN/best`), whatever --overwrite says."""
    where = _resolved(out, flag, given)
    for name, path in inputs.items():
        if path is None or str(path).startswith("hf:") or not Path(path).is_dir():
            continue
        held, ident = _resolved(path, name), _identity(path)
        # through a bind mount the same folder has two names: the kernel's identity of it tells
        below = where.is_relative_to(held) or any(_identity(q) == ident for q in where.parents)
        if where != held and _identity(where) != ident and below:  # `out` = input: below
            raise InputError(out if given is None else given, f"is inside {name} {path} and is not {_a(kind)} lewisrag wrote, so replacing it "
                             "would damage that input; choose another", field=flag)


def _a(noun: str) -> str:
    """The noun with its indefinite article: "an export", "a reproduction"."""
    return ("an " if noun[:1] in "aeiou" else "a ") + noun


def check_inputs_outside(out: str | os.PathLike, inputs: dict[str, object], flag: str = "--out",
                         given: str | os.PathLike | None = None) -> None:
    """Refuse an input (`{flag: path}`; None and `hf:` specs are skipped) that is `out` or lies inside it,
    there already or not: a cache folder the command creates (`--cache-dir OUT/cache`) was filled, then
    found in the way of the output, which replaces its folder whole."""
    where = _resolved(out, flag, given)
    ident = _identity(where)
    out = out if given is None else given
    for name, path in inputs.items():
        if path is None or str(path).startswith("hf:"):
            continue
        held = _resolved(path, name)
        # by name, or through a bind mount (`mount --bind A B`, `--out B` with an input in A) by the kernel's identity
        if held.is_relative_to(where) or (ident is not None and any(_identity(q) == ident for q in (held, *held.parents))):
            raise InputError(out, f"holds {name} {path}, which writing here would destroy; choose another",
                             field=flag)


def check_out_file(out: str | os.PathLike, *, overwrite: bool = False, flag: str = "--out",
                   inputs: Iterable[tuple[str, object]] = ()) -> Path:
    """Refuse an output file path that is a folder, an existing file (without `overwrite`), unwritable,
    or one of the command's `inputs` ((flag, path) pairs; None and `hf:` specs skipped) or inside one of
    them: even --overwrite never replaces an input file or a file of an input folder (a model's weights),
    never writes a marker (`.lewisrag`, anywhere), nor replaces an existing file that a folder lewisrag marked as an output wrote (`wrote`: an index's
    manifest.json, a reproduction's config.json or RUN/stages/world.json): it is part of that output.
    A new file may be written there, and one the output did not write (an earlier `swap --out
    RUN/swap.json`, a `chunk --out RUN/dpr/tokenizer/mine.jsonl`) replaced."""
    out = Path(out)
    if out.is_symlink():  # the rename that writes it would replace the link, leaving its target stale
        raise InputError(out, f"is a symbolic link; give the file it points to ({os.path.realpath(out)})", field=flag)
    if out.is_dir():
        raise InputError(out, "is a folder; a file path is needed", field=flag)
    if out.name == MARKER:  # the marker says who made its folder: `swap --out RUN/.lewisrag --overwrite` unmade a run
        raise InputError(out, f"{MARKER} is the name of the marker lewisrag keeps in its outputs; choose another file name",
                         field=flag)
    sweep_leftovers(out.parent, out.name)
    where = _resolved(out, flag)
    for name, path in inputs:
        if path is None or str(path).startswith("hf:") or not Path(path).exists():
            continue
        held = _resolved(path, name)
        # through a bind mount (`mount --bind A B`) a file has two names: the same entry of the same folder, by
        # the kernel's identity of the folder (not the file's: a hard link is another entry, which a rename leaves)
        same = where == held or (where.name == held.name and _identity(where.parent) == _identity(held.parent) is not None)
        ident = _identity(held) if Path(path).is_dir() else None
        if same or where.is_relative_to(held) or (ident is not None and any(_identity(q) == ident for q in where.parents)):
            what = "is" if same else "is inside"
            raise InputError(out, f"{what} {name} {path}, which writing here would damage; choose another", field=flag)
    if out.exists():  # as `_check_not_part_of_an_output` refuses folders: a file of a marked folder is part of it
        for folder in where.parents:  # (`swap --out RUN/index_b/manifest.json --overwrite` destroyed that index)
            if (other := made_by(folder)) is None:
                continue
            # only a file that output wrote (`wrote`: a reproduction's config.json and stage records, an
            # index's manifest.json); an earlier swap's or chunk's, beside them or in their folders, may be replaced
            if wrote(folder, where.relative_to(folder).as_posix()):
                raise InputError(out, f"is part of the lewisrag {other} at {folder}, which wrote it and which --overwrite "
                                 "never replaces; choose another file", field=flag)
    if out.exists() and not overwrite:
        raise InputError(out, "file exists; choose another or pass --overwrite to replace it", field=flag)
    check_writable(out.parent, flag)
    return out


def check_writable(folder: Path, flag: str = "--out") -> None:
    """Create and remove a probe file in `folder` (or its nearest existing parent).

    A probe, not `os.access`: permission bits say nothing to root, and a read-only mount says no to
    everyone.
    """
    probe_in = folder
    while not probe_in.exists():
        if probe_in.parent == probe_in:
            break
        probe_in = probe_in.parent
    if not probe_in.is_dir():
        raise InputError(probe_in, "is not a folder, so nothing can be written below it", field=flag)
    try:
        fd, name = tempfile.mkstemp(prefix=".lewisrag-probe.", dir=probe_in)
        os.close(fd)
        os.unlink(name)
    except OSError as e:
        raise InputError(probe_in, f"cannot write here ({e.strerror or e})", field=flag) from None


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
    missing), as a RAG run does its checkpoints' (`training.rag._settle_replaced`): left there, the next
    run found no output to carry the user's files from, and its replace removed them with `.NAME.old`."""
    old = _old(out)
    if out.exists() or out.is_symlink() or old.is_symlink() or not old.is_dir() or made_by(old) is None:
        return
    os.replace(old, out)


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


def _files(found: list) -> str:
    return "1 file" if len(found) == 1 else f"{len(found)} files"


def _foreign(root: Path) -> list[str]:
    """The files and links in the marked output at `root` that lewisrag did not write there, as paths
    relative to it: names its marker does not list, files below that its "tree" does not hold, and in
    its folders that are outputs of their own (a reproduction's RUN/world, RUN/dpr) those that their
    markers do not list. None are known for a marker that lists nothing (written before markers did).
    A `.NAME.old` of a listed NAME (a replace killed between its renames) is lewisrag's."""
    marker = _read_marker(root)
    listed = _listed(marker)
    if listed is None:
        return []
    tree = _listed_tree(marker)
    skip = {MARKER, *(f".{n}.old" for n in listed)}
    found: list[str] = []

    def visit(folder: Path, rel: str) -> None:
        try:
            entries = sorted(os.listdir(folder))
        except OSError:
            return
        for name in entries:
            path, r = folder / name, f"{rel}{name}"
            if not rel and name in skip:
                continue
            if path.is_dir() and not path.is_symlink():
                if made_by(path) is not None:  # an output of its own
                    found.extend(f"{r}/{f}" for f in _foreign(path))
                elif rel or name not in listed or tree is not None:  # without a tree, all of a listed folder is lewisrag's
                    visit(path, r + "/")
            elif not (r in listed if not rel else (r in tree if tree is not None else r.split("/")[0] in listed)):
                found.append(r)

    visit(root, "")
    return found


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


def _mount_points() -> set[str]:
    """The mount points this process sees (`/proc/self/mountinfo`; none where it is missing)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return set()
    unescape = re.compile(r"\\([0-7]{3})")  # a space is \040, a backslash \134
    return {unescape.sub(lambda m: chr(int(m[1], 8)), f[4]) for f in (ln.split(" ") for ln in lines) if len(f) > 4}


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


@contextlib.contextmanager
def staged_dir(path: str | os.PathLike, kind: str | None = None) -> Iterator[Path]:
    """Yield a temporary folder beside `path`; it replaces `path` only if the block succeeds.

    With a `kind`, the new folder is marked as lewisrag's output of that kind.
    """
    target = physical(path)  # `.` and `..` have no name to stage beside
    tmp, made = _stage_beside(target)
    try:
        yield tmp
        usual_modes(tmp)
        if kind is not None:
            mark(tmp, kind)
    except BaseException:
        _remove_tree(tmp)
        remove_if_empty(made)
        raise
    replace_dir(tmp, target)


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
