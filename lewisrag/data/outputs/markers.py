"""The `.lewisrag` marker of an output folder: the kind of output lewisrag wrote there (`made_by`,
`mark`), the files it lists as lewisrag's (`record_files`, `note_writing`, `note_written`, `wrote`), and what is not
(`added_files`, and `_foreign` through the markers of the outputs inside it)."""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Iterable
from pathlib import Path

from lewisrag.data.io import write_json


MARKER = ".lewisrag"


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
# Where an output of these kinds writes outputs of its own, its parts, which its marker does not list (each lists
# its own files): a reproduction's stage folders (RUN/world and `stages.STAGE_FOLDERS`). Only the kinds that write
# such parts are here: a world, an index or a checkpoint writes none (`holds_part`)
PARTS = {"reproduction": ("world", "dpr", "index_*", "bm25_a", "generator", "rag_*", "closed_book", "stitched", "tasks/*",
                          "jeopardy/*", "fever/*")}


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


def holds_part(path: str | os.PathLike, rel: str) -> bool:
    """Whether the folder at `rel` (relative, "/"-separated) below the output lewisrag marked at `path` is
    a part of that output, which it wrote and redoes: a folder its marker lists, or one inside a listed
    folder or holding files of its "tree", or one where its kind writes outputs of its own (`PARTS`: a
    reproduction's RUN/world, RUN/index_a). Below a marker that lists nothing (written before markers
    did), any folder is: what that output wrote is not known. Not another output that the user wrote
    inside it (`index build --out WORLD/bm25`: a world writes no index), nor a folder of the user's."""
    return _part(_read_marker(path), rel, unlisted=True)


def keeps_part(path: str | os.PathLike, rel: str) -> bool:
    """Whether a folder at `rel` below the output lewisrag marked at `path`, missing or empty now, is a
    place where that output keeps a part of its own: one its kind writes (`PARTS`: a reproduction's
    RUN/rag_token) or one its marker lists (a part deleted since). `holds_part` for a folder not
    written yet: below a marker that lists nothing (written before markers did) only `PARTS` say,
    as an unknown output's new folders may be another output's (`compare --out RUN/compare`)."""
    return _part(_read_marker(path), rel, unlisted=False)


def _part(marker: dict | None, rel: str, unlisted: bool) -> bool:
    """`holds_part` and `keeps_part`: whether `rel` is a part of the output `marker` marks; `unlisted`, what
    a marker that lists nothing says of a folder that `PARTS` do not name."""
    kind, listed = _kind(marker), _listed(marker)
    if kind is None:
        return False
    if any(_matches(rel, p) for p in PARTS.get(kind, ())):
        return True
    if listed is None:
        return unlisted
    return rel.split("/")[0] in listed or any(t.startswith(rel + "/") for t in _listed_tree(marker) or ())


def note_written(path: str | os.PathLike, paths: Iterable[str]) -> None:
    """Add `paths` (relative, "/"-separated; those that are files now) to what the marker of the marked
    folder at `path` lists as lewisrag's: a top-level name under "files", one in a folder under "tree".
    For an output whose folders hold outputs of their own (a reproduction's RUN/dpr, RUN/rag_token,
    which list theirs) and files it writes one by one as it goes (RUN/config.json, RUN/stages/<name>.json),
    where `record_files` would list the whole tree, the user's files in it too. What the marker listed
    stays while it is there; a marker that listed nothing first lists what its kind is known to have
    written (`UNLISTED`), so that a run begun before markers listed its files loses no protection. A
    folder without a marker (or with a damaged one) is left as it is: it is no output to list for."""
    _note(Path(path), paths)


def note_writing(path: str | os.PathLike, paths: Iterable[str]) -> None:
    """Add `paths` (relative, "/"-separated) to what the marker of the marked folder at `path` lists as
    lewisrag's before they are written, as `note_written` does once they are: a kill between a write and
    the `note_written` after it left lewisrag's own file unlisted, and the next rerun refused it as the
    user's (`stages.finished_files`). Call it just before the write, which goes through `atomic_path`:
    the name then holds the old file or the new one. Only a name that is not there now, or that the
    marker holds already, is listed: an existing file it does not hold may be the user's, and is listed
    by `note_written` once it is rewritten. A name listed here whose write never came (a kill during it)
    holds no file for `wrote`, `added_files`, `_foreign` or a rerun's removal to claim, and the next
    `note_written` drops it."""
    _note(Path(path), paths, coming=True)


def _note(path: Path, paths: Iterable[str], coming: bool = False) -> None:
    """`note_written` (the `paths` that are files now), or with `coming`, `note_writing`."""
    marker, paths = _read_marker(path), set(paths)
    kind = _kind(marker)
    if kind is None:
        return
    listed = _listed(marker)
    if listed is None:
        known = {p.relative_to(path).as_posix() for pattern in UNLISTED.get(kind, ())
                 for p in path.glob(pattern)}
    else:
        known = set(listed) | (_listed_tree(marker) or set())
    there = known if coming else known | paths  # `note_writing` lists none of `paths` that is there and not known
    entries = {e for e in there if _plain(e) and ((path / e).is_file() or (path / e).is_symlink())}
    if coming:  # those about to be written that are not there (one there that the marker does not hold may be a user's)
        entries |= {e for e in paths if _plain(e) and not (path / e).exists() and not (path / e).is_symlink()}
    entries = sorted(entries)
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


def _foreign(root: Path) -> list[str]:
    """The files and links in the marked output at `root` that lewisrag did not write there, as paths
    relative to it: names its marker does not list, files below that its "tree" does not hold, and in
    its folders that are outputs of their own and parts of it (`holds_part`: a reproduction's RUN/world,
    RUN/dpr) those that their markers do not list. Another output written inside it (`index build --out
    WORLD/bm25`) is not its part: all of its files are listed, as a rerun of `root` keeps them (or
    --overwrite onto another kind destroyed that index with the world). None are known for a marker
    that lists nothing (written before markers did). A `.NAME.old` of a listed NAME (a replace killed
    between its renames) is lewisrag's."""
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
                if made_by(path) is not None and holds_part(root, r):  # an output of its own, a part of this one
                    found.extend(f"{r}/{f}" for f in _foreign(path))
                elif rel or name not in listed or tree is not None:  # without a tree, all of a listed folder is lewisrag's
                    visit(path, r + "/")
            elif not (r in listed if not rel else (r in tree if tree is not None else r.split("/")[0] in listed)):
                found.append(r)

    visit(root, "")
    return found
