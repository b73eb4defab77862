"""What every index directory shares: the manifest, the passages, and atomic building.

    IDX/manifest.json   kind, encoder fingerprint, dimension, metric, FAISS factory, passage count,
                        content hash, passage set hash, block hashes, sample hash (written last: its
                        presence means the index is complete)
    IDX/passages.arrow  the passages in row order: an Arrow IPC file (id, title, text) that every
                        process memory-maps, so the OS keeps one copy in its page cache and
                        reading K passages by row costs O(K), not a parse of the corpus
                        (indexes of format 1 hold passages.jsonl instead, and still load)
    IDX/...             kind-specific files (index.faiss + embeddings.npy, or bm25/)

An index is built in `IDX.partial/` and renamed onto `IDX` when complete, so a failed build never
leaves a half-written index; a killed dense build resumes from the shards in `IDX.partial/`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import pyarrow as pa

from lewisrag.data.io import InputError, atomic_path, expect, is_count, read_json, write_json
from lewisrag.data.outputs import MARKER, is_ours, mark, physical, replace_dir
from lewisrag.data.passages import PASSAGE_SCHEMA, PassageTable
from lewisrag.data.records import Passage, read_passages

KIND = "index"  # the marker kind of index folders (lewisrag.data.outputs)
MANIFEST = "manifest.json"
PASSAGES = "passages.arrow"
OLD_PASSAGES = "passages.jsonl"  # format 1
FORMAT_VERSION = 2
SEARCH_PARAMS = ("nprobe", "efSearch", "quantizer_efSearch")  # the FAISS search parameters lewisrag sets and tunes
MAX_SEARCH_PARAM = 2**31 - 1  # FAISS holds each in a C int
WRITE_ROWS = 8192  # passages per Arrow record batch written
SAMPLE_ROWS = 64  # rows `sample_hash` reads
BLOCK_ROWS = 1 << 16  # passages per block hash (`content_hashes`)


class IndexMismatchError(InputError):
    """A question encoder that does not belong to this index (fingerprint or dimension)."""


def content_hash(passages: Iterable[Passage]) -> str:
    """A fingerprint of every passage in row order (id, title, text): what a dense build resumes
    against and `index verify` compares with the store (`content_hashes`, which also hashes blocks)."""
    return content_hashes(passages)[0]


def content_hashes(passages: Iterable[Passage], on_row: Callable[[int], None] | None = None,
                   rows: int | None = None) -> tuple[str, list[str]]:
    """(`content_hash`, one hash per `rows` rows, default BLOCK_ROWS) in one pass; `on_row(rows
    done)` after every block.

    The block hashes let `index verify` name the rows a damaged store differs in (at 21M passages,
    321 of them in the manifest) where the whole-store hash can only say that it differs."""
    whole, blocks, _ = _hash_rows(passages, on_row, rows, unordered=False)
    return whole, blocks


def build_hashes(passages: Iterable[Passage]) -> tuple[str, list[str], str]:
    """`content_hashes`' two and the passage set hash, in the one pass an index build makes: the
    manifest's `content_hash`, `block_hashes` and `passage_set_hash`.

    The set hash is the sum (mod 2**256) of every row's sha256 of (id, title, text), so the same
    passages in another row order hash alike, and a passage held twice counts twice (a XOR would
    cancel it): `lewisrag swap` tells two indexes of one snapshot by it, where the content hash,
    which a resumed build and `index verify` need in row order, differs with the order.

    >>> from lewisrag.data.records import Passage
    >>> a, b = Passage("1", "T", "x"), Passage("2", "T", "y")
    >>> build_hashes([a, b])[2] == build_hashes([b, a])[2], build_hashes([a, b])[0] == build_hashes([b, a])[0]
    (True, False)
    """
    return _hash_rows(passages, None, None, unordered=True)


def _hash_rows(passages: Iterable[Passage], on_row: Callable[[int], None] | None, rows: int | None,
               unordered: bool) -> tuple[str, list[str], str | None]:
    """The hashes of `content_hashes` and, if `unordered`, the set hash of `build_hashes` (None
    otherwise: `index verify` reads the rows in order only, and a sha256 a row would slow it)."""
    rows = rows or BLOCK_ROWS
    whole, block, blocks, n, total = hashlib.sha256(), hashlib.sha256(), [], 0, 0
    for p in passages:
        line = json.dumps([p.id, p.title, p.text], ensure_ascii=False).encode() + b"\n"
        whole.update(line)
        block.update(line)
        if unordered:
            total = (total + int.from_bytes(hashlib.sha256(line).digest(), "big")) % 2**256
        n += 1
        if n % rows == 0:
            blocks.append(block.hexdigest()[:16])
            block = hashlib.sha256()
            if on_row:
                on_row(n)
    if n % rows:
        blocks.append(block.hexdigest()[:16])
    if on_row:
        on_row(n)
    return whole.hexdigest()[:16], blocks, f"{total:064x}"[:16] if unordered else None


def block_hashes(hashes: list[str]) -> dict:
    """The manifest's `block_hashes` field for `content_hashes`' second value."""
    return {"rows": BLOCK_ROWS, "sha256": hashes}


def sample_rows(n: int, count: int = SAMPLE_ROWS) -> list[int]:
    """`count` row numbers spread evenly over `n` rows, the first and the last among them."""
    if n <= count:
        return list(range(n))
    return [i * (n - 1) // (count - 1) for i in range(count)]


def sample_hash(passages: Sequence[Passage]) -> str:
    """A fingerprint of `SAMPLE_ROWS` passages spread over the store, row numbers included: what
    every load can afford to check (O(1) rows; `content_hash` walks them all, minutes at 21M), and
    enough to tell a passage store of the same length from another corpus or in another order."""
    h = hashlib.sha256()
    for row in sample_rows(len(passages)):
        p = passages[row]
        h.update(json.dumps([row, p.id, p.title, p.text], ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


def check_depth(k: int, passages: int, flag: str = "--n-docs") -> None:
    """Refuse a number of results past the index's passages: FAISS pads them with row -1 and sets
    aside k results a question first (99,999,999,999 asked for hundreds of GiB)."""
    if not 1 <= k <= passages:
        raise InputError(flag, f"must be between 1 and the index's {passages} passages, got {k}")


def partial_dir(out: str | os.PathLike) -> Path:
    out = physical(out)  # "" and "." have no name to put ".partial" after; a link's `..` is the kernel's
    return out.with_name(out.name + ".partial") if out.name else out / ".partial"


def reset_partial(partial: Path) -> None:
    """Start `partial` afresh: remove an earlier build's leftovers, never a folder of the user's."""
    if partial.exists():
        if not partial.is_dir() or not (is_ours(partial, KIND) or (partial / "plan.json").exists() or not any(partial.iterdir())):
            raise InputError(partial, "is in the way of the build and was not made by lewisrag; move it away")
        if (partial / MANIFEST).exists() and not _staging(partial):  # an index the user built at NAME.partial
            raise InputError(partial, "is a finished index in the way of the build, which stages its work in "
                             "OUT.partial; move it away or rename it")
        for entry in partial.iterdir():  # its contents: the folder itself may be held (`outputs.exclusive`)
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    # "staging": a build killed as it finished (its manifest written, not yet moved onto OUT) is told
    # from an index the user built at NAME.partial, whose marker `finish` stripped of it
    write_json(partial / MARKER, {"made_by": "lewisrag", "kind": KIND, "staging": True})


def _staging(folder: Path) -> bool:
    try:
        return json.loads((folder / MARKER).read_text(encoding="utf-8")).get("staging") is True
    except (OSError, ValueError, AttributeError):
        return False


def finish(partial: Path, out: Path, manifest: dict) -> None:
    """Write the manifest last, then move the finished build onto `out` (replacing an old one).

    The caller checked `out` with `outputs.check_out_dir` before building: only a missing, empty or
    lewisrag-made folder, or one the user asked to overwrite, gets here.
    """
    write_json(partial / MANIFEST, {"format": FORMAT_VERSION, **manifest})
    mark(partial, KIND)
    replace_dir(partial, out)
    marker = read_json(out / MARKER)
    write_json(out / MARKER, {k: v for k, v in marker.items() if k != "staging"})  # a finished index now


def write_passages(dirpath: Path, passages: Sequence[Passage]) -> None:
    """`dirpath/passages.arrow`, written batch by batch: a `PassageTable` goes Arrow to Arrow, a
    list of Passages WRITE_ROWS at a time; memory stays bounded by one batch."""
    with atomic_path(dirpath / PASSAGES) as tmp, pa.OSFile(str(tmp), "wb") as sink, \
            pa.ipc.new_file(sink, PASSAGE_SCHEMA) as writer:
        for batch in _record_batches(passages):
            writer.write_batch(batch)


def _record_batches(passages: Sequence[Passage]):
    if isinstance(passages, PassageTable):
        yield from passages.arrow_batches(WRITE_ROWS)
        return
    for start in range(0, len(passages), WRITE_ROWS):
        chunk = passages[start : start + WRITE_ROWS]
        yield pa.RecordBatch.from_arrays([pa.array([p.id for p in chunk], pa.string()),
                                          pa.array([p.title for p in chunk], pa.string()),
                                          pa.array([p.text for p in chunk], pa.string())], schema=PASSAGE_SCHEMA)


def read_manifest(path: str | os.PathLike, kind: str | None = None) -> dict:
    """The manifest of the index at `path`; `kind` ("dense", "bm25") if the caller needs one."""
    p = Path(path)
    # a killed build leaves only IDX.partial (IDX is made when it finishes): said wherever IDX is read
    hint = " (an unfinished build: run `lewisrag index build` again to resume)" if partial_dir(p).exists() else ""
    if not p.is_dir():
        raise InputError(p, f"index directory not found{hint}" if not p.exists() else "is a file; an index is a folder")
    if not (p / MANIFEST).exists():
        raise InputError(p, f"not an index: no {MANIFEST}{hint}")
    manifest = read_json(p / MANIFEST)
    check_manifest(manifest, p / MANIFEST)
    if kind is not None and manifest["kind"] != kind:
        raise InputError(p, f"a {manifest['kind']} index where a {kind} one is needed", field="kind")
    return manifest


def encoder_path(index_path: str | os.PathLike, manifest: dict) -> str | None:
    """The context encoder the manifest names (`encoder.path`), a relative path read from the index's own
    folder: a RAG model's index/ names its "../context_encoder", so the pair is found wherever the model
    folder goes (`training.checkpoint.save_model`). None where it names none.

    >>> encoder_path("/m/index", {"encoder": {"path": "../context_encoder"}}), encoder_path("/i", {"encoder": {"path": "/e"}})
    ('/m/context_encoder', '/e')
    """
    recorded = manifest.get("encoder", {}).get("path")
    return recorded if not recorded or Path(recorded).is_absolute() else os.path.normpath(Path(index_path) / recorded)


def check_manifest(manifest: object, source: Path) -> None:
    """Refuse a manifest whose fields do not have the types lewisrag writes (one line naming the
    field): a hand-edited or damaged manifest must not surface later as a traceback, or as a search
    run with settings FAISS silently ignored.

    >>> check_manifest({"format": 2, "kind": "bm25", "n_passages": 3, "content_hash": "ab"}, Path("m.json"))
    >>> check_manifest({"format": 2, "kind": "bm25", "n_passages": "3", "content_hash": "ab"}, Path("m.json"))
    Traceback (most recent call last):
    lewisrag.data.io.InputError: m.json: field 'n_passages': expected a whole number >= 0, got '3'
    """
    def need(ok: bool, field: str, what: str, value: object) -> None:
        expect(ok, source, field, what, value)

    need(isinstance(manifest, dict), "(top level)", "a JSON object", type(manifest).__name__)
    for field in ("kind", "n_passages", "content_hash"):
        if field not in manifest:
            raise InputError(source, "missing", field=field)
    fmt = manifest.get("format", 1)
    need(is_count(fmt) and fmt >= 1, "format", "a format number", fmt)
    if fmt > FORMAT_VERSION:
        raise InputError(source, f"format {fmt} is newer than this lewisrag reads ({FORMAT_VERSION}); upgrade lewisrag",
                         field="format")
    need(manifest["kind"] in ("dense", "bm25"), "kind", "'dense' or 'bm25'", manifest["kind"])
    need(is_count(manifest["n_passages"]), "n_passages", "a whole number >= 0", manifest["n_passages"])
    need(isinstance(manifest["content_hash"], str), "content_hash", "a string", manifest["content_hash"])
    # indexes built before the field existed have none (`build_hashes`)
    need(isinstance(manifest.get("passage_set_hash", ""), str), "passage_set_hash", "a string", manifest.get("passage_set_hash"))
    need(isinstance(manifest.get("sample_hash", ""), str), "sample_hash", "a string", manifest.get("sample_hash"))
    if "block_hashes" in manifest:  # indexes built before the field existed have none
        blocks = manifest["block_hashes"]
        need(isinstance(blocks, dict), "block_hashes", "an object", blocks)
        rows, hashes = blocks.get("rows"), blocks.get("sha256")
        need(is_count(rows) and rows > 0, "block_hashes.rows", "a whole number > 0", rows)
        need(isinstance(hashes, list) and all(isinstance(h, str) for h in hashes), "block_hashes.sha256",
             "a list of strings", hashes)
        need(len(hashes) == -(-manifest["n_passages"] // rows), "block_hashes.sha256",
             f"one hash per {rows} of n_passages ({manifest['n_passages']})", f"{len(hashes)} hashes")
    if manifest["kind"] == "bm25":
        need(manifest.get("metric", "bm25") == "bm25", "metric", "'bm25'", manifest.get("metric"))
        return
    for field in ("dim", "encoder"):
        if field not in manifest:
            raise InputError(source, "missing", field=field)
    need(is_count(manifest["dim"]) and manifest["dim"] > 0, "dim", "a whole number > 0", manifest["dim"])
    encoder = manifest["encoder"]
    need(isinstance(encoder, dict), "encoder", "an object", encoder)
    need(isinstance(encoder.get("ctx_fingerprint"), str), "encoder.ctx_fingerprint", "a string", encoder.get("ctx_fingerprint"))
    need(isinstance(encoder.get("path"), str | None), "encoder.path", "a string", encoder.get("path"))
    # how lewisrag searches it, whatever was written; export hands it to transformers as such
    need(manifest.get("metric", "inner_product") == "inner_product", "metric", "'inner_product'", manifest.get("metric"))
    need(isinstance(manifest.get("faiss_factory", ""), str), "faiss_factory", "a FAISS factory string", manifest.get("faiss_factory"))
    params = manifest.get("search_params", {})
    need(isinstance(params, dict), "search_params", "an object of FAISS search parameters", params)
    for name, value in params.items():
        # a misspelt name ("nprob") would be set on nothing, and the index searched at FAISS's default
        need(name in SEARCH_PARAMS, f"search_params.{name}", "one of " + ", ".join(SEARCH_PARAMS), name)
        # what FAISS takes: a C int, at least 1 (nprobe 0 fails every search, `cur_nprobe > 0`; efSearch 0
        # returns no passages, -1 ids; a value past 2**31 - 1 wraps round or fails the same way)
        need(is_count(value) and 1 <= value <= MAX_SEARCH_PARAM, f"search_params.{name}",
             f"a whole number from 1 to {MAX_SEARCH_PARAM}", value)
    depth = manifest.get("rerank_depth")
    n = manifest["n_passages"]  # a deeper re-ranking is no re-ranking, and 10**12 candidates a search asked TiBs
    need(depth is None or (is_count(depth) and 0 < depth <= max(n, 1)), "rerank_depth",
         f"null or a whole number from 1 to n_passages ({n})", depth)
    build = manifest.get("build", {})
    need(isinstance(build, dict), "build", "an object", build)
    # what `index verify` and the end-to-end re-encoding encode passages with
    length = build.get("max_length")
    need(length is None or (is_count(length) and length > 0), "build.max_length", "null or a whole number > 0", length)
    need(build.get("mixed_precision", "no") in ("no", "bf16", "fp16"), "build.mixed_precision", "'no', 'bf16' or 'fp16'",
         build.get("mixed_precision"))


def load_passages(path: Path, manifest: dict) -> Sequence[Passage]:
    """The index's passages: its Arrow store memory-mapped (format 2), or passages.jsonl read whole (format 1)."""
    if (path / PASSAGES).is_file():
        try:
            table = pa.ipc.open_file(pa.memory_map(str(path / PASSAGES))).read_all()
        except (pa.ArrowInvalid, OSError) as e:
            raise InputError(path / PASSAGES, f"cannot read the passage store: {e}; build the index again") from None
        if table.schema != PASSAGE_SCHEMA:
            raise InputError(path / PASSAGES, f"unexpected columns {table.schema.names}; build the index again")
        passages = PassageTable(table, path / PASSAGES, checked=True)
    elif (path / OLD_PASSAGES).is_file():
        passages = read_passages(path / OLD_PASSAGES)
    else:
        raise InputError(path / PASSAGES, "missing: the index is damaged; build it again")
    source = passages.source if isinstance(passages, PassageTable) else path / OLD_PASSAGES
    if len(passages) != manifest["n_passages"]:
        raise InputError(source, f"{len(passages)} passages, manifest says {manifest['n_passages']}")
    # indexes built before the field existed have none, and load unchecked
    # (the sampled rows are validated as they are read: damaged Arrow data is a row named, not a crash)
    if "sample_hash" in manifest and sample_hash(passages) != manifest["sample_hash"]:
        raise InputError(source, "does not hold the passages this index was built over (the rows sampled at build "
                         "differ: another index's passage store?); build the index again")
    return passages
