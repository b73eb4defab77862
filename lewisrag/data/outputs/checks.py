"""The checks a command runs before any expensive work: an output folder (`check_out_dir`), a part
of a larger output that a rerun replaces (`check_part`), an output file (`check_out_file`), and the
command's inputs, which no output may hold or lie inside (`check_inputs_outside`)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from lewisrag.data.io import InputError
from lewisrag.data.outputs.locks import _remember_check
from lewisrag.data.outputs.markers import (MARKER, _foreign, added_files, holds_part, is_free, is_ours, keeps_part, made_by,
                                           written_files, wrote)
from lewisrag.data.outputs.paths import _identity, _resolved, physical
from lewisrag.data.outputs.removal import _check_one_device, _in_the_way, _old, _restore_old, sweep_leftovers


def check_out_dir(out: str | os.PathLike, kind: str, *, overwrite: bool = False, flag: str = "--out",
                  inputs: dict[str, object] | None = None, replaces: bool = False, writes: Iterable[str] = (),
                  alone: bool = False, nested: bool = True, resume: bool = False) -> Path:
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
    stages were made from that world), --overwrite or not. A part is one that output wrote and redoes
    (`holds_part`: its marker lists it, or its kind writes outputs of its own there); another output
    written inside one (`index build --out WORLD/bm25`: a world writes no index) stands alone, rerun
    and replaced by its own rules, and a rerun of the output around it keeps it as the user's files
    (`rewritten_dir`, which warns that it was not made again).
    `nested=False`: `out` may not lie inside another lewisrag output at all, missing, empty or of
    this kind (`_check_not_inside_an_output`: `reproduce --out RUN/dpr/sub` left RUN/dpr holding a
    folder that RUN's next fresh run refused). By default a new folder there is allowed, as a command
    may add its output to another on purpose (`compare --out RUN/compare`, `swap --out RUN/swap`).
    `resume`: the command continues its output there and refuses --overwrite beside --resume
    (`reproduce --resume`): a refusal's advice says to drop --resume too (`_overwrite_advice`).
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
    elif alone:  # missing or empty: the place of another output's part all the same
        _check_not_a_parts_place(out, kind, flag, given)
    if not nested:  # after the refusals above, which name a part of another output more precisely
        _check_not_inside_an_output(out, kind, flag, given)
    if not overwrite and not is_free(out, kind):
        other = made_by(out)
        whose = f"holds a lewisrag {other}, not {_a(kind)}" if other else "was not made by lewisrag"
        raise InputError(given, f"folder is not empty and {whose}; choose another or {_overwrite_advice(resume)} to "
                         "replace it", field=flag)
    if writes and not overwrite and is_ours(out, kind) and (taken := sorted(set(added_files(out)) & set(writes))):
        raise InputError(out / taken[0], "was not written by lewisrag and the new output writes a file of that name; "
                         f"move it away or {_overwrite_advice(resume)}", field=flag)
    if replaces and not overwrite and is_ours(out, kind):
        if added := added_files(out):
            # counted: --overwrite loses every one of them, not only the one named
            what, it = (f"{added[0]!r} and {len(added) - 1} more", "them") if len(added) > 1 else (repr(added[0]), "it")
            raise InputError(given, f"holds {what}, which lewisrag did not write there and a rerun would lose; move {it} "
                             f"away or {_overwrite_advice(resume)}", field=flag)
    _check_one_device(out, flag)  # the folder is replaced or rewritten: nothing in it may lie on another file system
    check_writable(out if out.is_dir() else out.parent, flag)
    _remember_check(out)  # the user's files there now: one added later is refused at the swap (`replace_dir`)
    return out


def check_part(folder: str | os.PathLike, kind: str, *, overwrite: bool = False, what: str = "a rerun",
               legacy: Iterable[str] = (), unmarked: bool = False, within: Iterable[str] = (),
               resume: bool = False) -> None:
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
    `resume`: the larger output is resumed (`reproduce --resume`), which refuses --overwrite beside it:
    the advice says to drop --resume too (`_overwrite_advice`).
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
                         f"whole; move it away, or {_overwrite_advice(resume)} to replace it")
    _remember_check(folder)


def _overwrite_advice(resume: bool) -> str:
    """How --overwrite lifts a refusal: passed, or, for a command that continues its output (`resume`) and
    refuses --overwrite beside --resume (`reproduce --resume`), passed to a run begun afresh: advice the
    command would refuse in turn sent the user from one refusal to another."""
    return "drop --resume and pass --overwrite" if resume else "pass --overwrite"


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
    parts): refuse `out` when it is a folder of `kind` that is a part of another lewisrag output
    (`holds_part`), --overwrite and --resume or not. Call it from the command, before anything is read."""
    given, out = out, physical(out)
    if is_ours(out, kind):
        _check_not_part_of_an_output(out, kind, flag, given)
    elif not out.exists() or (out.is_dir() and not any(out.iterdir())):
        _check_not_a_parts_place(out, kind, flag, given)


def _check_not_part_of_an_output(out: Path, kind: str, flag: str, given: str | os.PathLike | None = None) -> None:
    """Refuse, even with --overwrite, to replace a folder that is a part of an output lewisrag marked
    (its parent or any folder above), one that output wrote and redoes (`holds_part`); not another
    output the user wrote inside it (`index build --out WORLD/bm25`: its reruns replace it as any
    index standing alone; they were refused, --overwrite or not, as "the index of the world", which
    writes none, though its first write was passed). Of another kind than the command's
    (`reproduce --out RUN/world --overwrite` replaced a reproduction's world, and the run then held a
    reproduction inside itself): the rule that --overwrite replaces another kind of output holds for
    outputs that stand alone; `_check_not_inside_inputs` catches this only when RUN is an input. Of
    the command's own kind, for a command run on its own (`check_out_dir(alone=True)`,
    `check_on_its_own`): that output's other parts were made from it (`world --out RUN/world` redrew
    the world under RUN's trained models, exit 0); the output that wrote it redoes it."""
    where = out.resolve()
    for folder in where.parents:
        if (other := made_by(folder)) is None or not holds_part(folder, where.relative_to(folder).as_posix()):
            continue
        if is_ours(out, kind):
            raise InputError(out if given is None else given, f"is the {kind} of the lewisrag {other} at {folder}, "
                             "whose other parts were made from it; a command on its own never replaces it, --overwrite "
                             f"or not: choose a folder outside it (that {other} redoes its own parts)", field=flag)
        raise InputError(out if given is None else given, f"is part of the lewisrag {other} at {folder} and is not "
                         f"{_a(kind)} lewisrag wrote, which --overwrite never replaces; choose a folder outside "
                         "it", field=flag)


def _check_not_a_parts_place(out: Path, kind: str, flag: str, given: str | os.PathLike | None = None) -> None:
    """Refuse, for a command on its own, a missing or empty folder where an output lewisrag marked keeps
    a part of its own (`keeps_part`: `train rag --out RUN/rag_token` after RUN/rag_token was deleted).
    Written there, the command's output became that part: the reproduction's resume read a model it
    did not train as its own stage, and the command's own rerun was refused as that output's part."""
    where = _resolved(out, flag, given)
    for folder in where.parents:
        if (other := made_by(folder)) is not None and keeps_part(folder, rel := where.relative_to(folder).as_posix()):
            raise InputError(out if given is None else given, f"is where the lewisrag {other} at {folder} keeps its own "
                             f"{rel}, which it makes and redoes; a command on its own never writes there, --overwrite "
                             "or not: choose a folder outside it", field=flag)


def _check_not_inside_an_output(out: Path, kind: str, flag: str, given: str | os.PathLike | None = None) -> None:
    """Refuse `out` below a folder lewisrag marked (its parent or any folder above), whatever `out` holds:
    for a command whose output never lies inside another (`check_out_dir(nested=False)`)."""
    for folder in _resolved(out, flag, given).parents:
        if (other := made_by(folder)) is not None:
            raise InputError(out if given is None else given, f"is inside the lewisrag {other} at {folder}, and {_a(kind)} "
                             "is never written inside another lewisrag output (that output's reruns would refuse it "
                             "there); choose a folder outside it", field=flag)


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


def _files(found: list) -> str:
    return "1 file" if len(found) == 1 else f"{len(found)} files"
