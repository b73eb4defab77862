"""What every index directory shares: the manifest, the passages, and atomic building.

    IDX/manifest.json   kind, encoder fingerprint, dimension, metric, FAISS factory, passage count,
                        content hash (written last: its presence means the index is complete)
    IDX/passages.jsonl  the passages, in row order
    IDX/...             kind-specific files (index.faiss + embeddings.npy, or bm25/)

An index is built in `IDX.partial/` and renamed onto `IDX` when complete, so a failed build never
leaves a half-written index; a killed dense build resumes from the shards in `IDX.partial/`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from lewisrag.data.io import InputError, read_json, write_json, write_jsonl
from lewisrag.data.outputs import is_ours, mark, replace_dir
from lewisrag.data.records import Passage, read_passages

KIND = "index"  # the marker kind of index folders (lewisrag.data.outputs)
MANIFEST = "manifest.json"
PASSAGES = "passages.jsonl"
FORMAT_VERSION = 1


class IndexMismatchError(InputError):
    """A question encoder that does not belong to this index (fingerprint or dimension)."""


def content_hash(passages: Sequence[Passage]) -> str:
    h = hashlib.sha256()
    for p in passages:
        h.update(json.dumps([p.id, p.title, p.text], ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


def partial_dir(out: str | os.PathLike) -> Path:
    out = Path(out)
    return out.with_name(out.name + ".partial")


def reset_partial(partial: Path) -> None:
    """Start `partial` afresh: remove an earlier build's leftovers, never a folder of the user's."""
    if partial.exists():
        if not partial.is_dir() or not (is_ours(partial, KIND) or (partial / "plan.json").exists() or not any(partial.iterdir())):
            raise InputError(partial, "is in the way of the build and was not made by lewisrag; move it away")
        shutil.rmtree(partial)
    mark(partial, KIND)


def finish(partial: Path, out: Path, manifest: dict) -> None:
    """Write the manifest last, then move the finished build onto `out` (replacing an old one).

    The caller checked `out` with `outputs.check_out_dir` before building: only a missing, empty or
    lewisrag-made folder, or one the user asked to overwrite, gets here.
    """
    write_json(partial / MANIFEST, {"format": FORMAT_VERSION, **manifest})
    mark(partial, KIND)
    replace_dir(partial, out)


def write_passages(dirpath: Path, passages: Sequence[Passage]) -> None:
    write_jsonl(dirpath / PASSAGES, (p.to_dict() for p in passages))


def read_manifest(path: str | os.PathLike, kind: str | None = None) -> dict:
    """The manifest of the index at `path`; `kind` ("dense", "bm25") if the caller needs one."""
    p = Path(path)
    if not p.is_dir():
        raise InputError(p, "index directory not found")
    if not (p / MANIFEST).exists():
        hint = " (an unfinished build: run `lewisrag index build` again to resume)" if partial_dir(p).exists() else ""
        raise InputError(p, f"not an index: no {MANIFEST}{hint}")
    manifest = read_json(p / MANIFEST)
    for field in ("kind", "n_passages", "content_hash"):
        if field not in manifest:
            raise InputError(p / MANIFEST, "missing", field=field)
    if kind is not None and manifest["kind"] != kind:
        raise InputError(p, f"a {manifest['kind']} index where a {kind} one is needed", field="kind")
    return manifest


def load_passages(path: Path, manifest: dict) -> list[Passage]:
    passages = read_passages(path / PASSAGES)
    if len(passages) != manifest["n_passages"]:
        raise InputError(path / PASSAGES, f"{len(passages)} passages, manifest says {manifest['n_passages']}")
    return passages
