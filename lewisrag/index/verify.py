"""Check a whole index folder against its manifest: `lewisrag index verify`.

Every load checks what it can afford at any size (`store.load_passages`' sample hash, and
`DenseIndex.load`'s shapes and sampled vectors): enough to refuse another index's files, not one
damaged row among 21M. `verify_index` reads everything once, which takes minutes at Wikipedia
scale, for an index copied between machines or kept on a disk that may have failed:

- every passage against the manifest's content hash, and with the block hashes of indexes built
  since they were recorded, the first block of `store.BLOCK_ROWS` rows that differs (an Arrow
  store's rows validated as `PassageTable` reads them: damaged offsets or UTF-8 are a row named);
- every stored vector finite (a build refuses NaN and infinity; a file damaged since scores them);
- the vectors of a FAISS index that keeps them by row (Flat, HNSW) equal to the stored ones, which
  RAG scores documents with; of another (IVF lists, PQ codes) the size and width, and of an IVF
  index that each row is in one inverted list (its codes are not checked);
- 8 passages spread over the index encoded afresh by its context encoder, where that is found,
  against their stored vectors: vectors copied in from another index of the same size would pass
  every check above.

The first damage found is an InputError naming the file and the rows; nothing is repaired.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import faiss
import numpy as np

from lewisrag.data.io import InputError
from lewisrag.index import store

SCAN_ROWS = 1 << 16  # stored vectors read at a time


def verify_index(path: str | os.PathLike, on_progress: Callable[[str, int, int], None] | None = None,
                 encoder: str | os.PathLike | None = None) -> dict:
    """Read the index at `path` whole and compare it with its manifest; `on_progress(stage, done,
    total)` for the stages "passages" and "vectors". A dense index's context encoder
    (`encoder`, else the one its manifest records, where it is found) encodes a few passages afresh
    to show the stored vectors are theirs. Returns what was checked: {"index", "kind",
    "n_passages", "checks": [{"check", "result"}]}; raises InputError at the first damage."""
    from lewisrag.index.bm25 import BM25Index
    from lewisrag.index.dense import DenseIndex

    path = Path(path)
    manifest = store.read_manifest(path)
    if encoder is not None and manifest["kind"] == "bm25":  # not ignored in silence
        raise InputError("--encoder", f"applies to dense indexes; {path} is BM25")
    index = BM25Index.load(path) if manifest["kind"] == "bm25" else DenseIndex.load(path)
    n, sampled = manifest["n_passages"], min(manifest["n_passages"], store.SAMPLE_ROWS)
    old = "; no passage sampled (built before sample hashes were recorded)"  # a load then reads none
    if "sample_hash" in manifest:
        loads = f"manifest, file sizes and {sampled} sampled rows as every load checks them"
    elif manifest["kind"] == "dense":  # the sampled rows' vectors still
        loads = f"manifest, file sizes and {sampled} sampled rows' vectors as every load checks them{old}"
    else:
        loads = f"manifest and file sizes as every load checks them{old}"
    checks = [{"check": "loads", "result": f"{n} passages; {loads}"}]
    if manifest["kind"] == "dense":  # seconds: before the passes over every row
        checks.append(_check_encoding(index, encoder))
    checks.append(_check_passages(path, index.passages, manifest, on_progress))
    if manifest["kind"] == "dense":
        checks += _check_vectors(index, on_progress)

    return {"index": str(path), "kind": manifest["kind"], "n_passages": n, "checks": checks}


def _check_passages(path: Path, passages, manifest: dict, on_progress) -> dict:
    source = getattr(passages, "source", path / store.OLD_PASSAGES)
    n = len(passages)
    tick = (lambda done: on_progress("passages", done, n)) if on_progress else None
    recorded = manifest.get("block_hashes")
    size = recorded["rows"] if recorded is not None else None
    # an Arrow store's rows are validated as they are read (`PassageTable`): damage is a row named, not a crash
    whole, blocks = store.content_hashes(passages, tick, size)
    bad = None if recorded is None else \
        next((i for i, (got, want) in enumerate(zip(blocks, recorded["sha256"])) if got != want), None)
    if recorded is not None and (whole == manifest["content_hash"]) != (bad is None):
        # the passages match one of the manifest's two hashes of them and not the other: the manifest changed, not they
        field, other = ("block_hashes.sha256", "content_hash") if bad is not None else ("content_hash", "block_hashes")
        raise InputError(path / store.MANIFEST, f"disagrees with the passages, which match its {other}: the manifest "
                         "is damaged or was edited; build the index again or copy it anew", field=field)
    if bad is not None:
        first, last = bad * size, min(n, (bad + 1) * size) - 1
        raise InputError(source, f"rows {first}-{last} (0-based) differ from the passages the index was built over "
                         "(their block hash); the store is damaged: build the index again or copy it anew")
    if whole != manifest["content_hash"]:
        raise InputError(source, f"differs from the passages the index was built over (content hash {whole}, the "
                         f"manifest's {manifest['content_hash']}); the store is damaged: build the index again or copy "
                         "it anew")
    if recorded is None:
        how = " (built before block hashes were recorded: a difference could not be placed)"
    elif len(blocks) > 1:
        how = f", and each of {len(blocks)} blocks of {size} rows"
    else:
        how = ", and its one block hash"
    return {"check": "passages", "result": f"every row matches the content hash {whole}{how}"}


def _check_vectors(index, on_progress) -> list[dict]:
    """Every stored vector finite and, where the FAISS index keeps its vectors by row (Flat, HNSW),
    equal to FAISS's own, in one pass over embeddings.npy (32 GB of float16 at 21M); of another
    FAISS index the size and width (`DenseIndex.load`) and an IVF index's row numbers."""
    from lewisrag.index.dense import EMBEDDINGS, FAISS_FILE

    flat = faiss.downcast_index(index.faiss_index)
    by_row = isinstance(flat, faiss.IndexFlat | faiss.IndexHNSWFlat)  # whose vectors read back by row, as added
    vectors = index.scan_vectors()
    n = len(vectors)
    for start in range(0, n, SCAN_ROWS):
        stop = min(n, start + SCAN_ROWS)
        block = np.asarray(vectors[start:stop], dtype=np.float32)
        finite = np.isfinite(block).all(axis=1)
        if not finite.all():
            row = start + int(np.argmin(finite))
            raise InputError(index.path / EMBEDDINGS, f"row {row} (0-based; passage {index.passages[row].id!r}) holds "
                             "NaN or infinity: the index is damaged; build it again")
        if by_row:  # added from the stored vectors as float32 (`dense.build_faiss`), so equal to the bit
            differs = (flat.reconstruct_n(start, stop - start) != block).any(axis=1)
            if differs.any():
                row = start + int(np.argmax(differs))
                raise InputError(index.path / FAISS_FILE, f"row {row} (0-based) differs from {EMBEDDINGS}'s vector: one "
                                 "of the two files is damaged; build the index again")
        if on_progress:
            on_progress("vectors", stop, n)
    factory = index.manifest.get("faiss_factory")
    if by_row:
        held = f"the '{factory}' index's {n} vectors equal the stored ones"
    else:
        lists = ", each row in one inverted list" if _check_lists(index) else ""
        held = (f"{flat.ntotal} vectors of {flat.d} as the manifest says{lists}; '{factory}' holds them as codes or in "
                "inverted lists, not by row, so they are not compared with the stored ones")
    return [{"check": "vectors", "result": f"all {n} stored vectors ({vectors.dtype}) finite"},
            {"check": "faiss", "result": held}]


def _check_lists(index) -> bool:
    """Every row in exactly one inverted list of an IVF index (False: not one): a row number damaged
    past the passages fails every search that reaches it, and one damaged into another row's hides
    that row from every search."""
    from lewisrag.index.dense import FAISS_FILE, _ivf_or_none

    ivf = _ivf_or_none(index.faiss_index)
    if ivf is None:
        return False
    n, lists, total = ivf.ntotal, ivf.invlists, 0
    seen = np.zeros(n, bool)
    for k in range(ivf.nlist):
        size = lists.list_size(k)
        if not size:
            continue
        ptr = lists.get_ids(k)
        ids = faiss.rev_swig_ptr(ptr, size).copy()
        lists.release_ids(k, ptr)
        outside = (ids < 0) | (ids >= n)
        if outside.any():
            raise InputError(index.path / FAISS_FILE, f"inverted list {k} holds row {int(ids[np.argmax(outside)])}, past the "
                             f"index's {n} rows: the file is damaged; build the index again")
        seen[ids] = True
        total += size
    if not seen.all():  # a row damaged into another's, say
        raise InputError(index.path / FAISS_FILE, f"row {int(np.argmin(seen))} (0-based) is in no inverted list: no "
                         "search finds it; the file is damaged: build the index again")
    if total != n:
        raise InputError(index.path / FAISS_FILE, f"its inverted lists hold {total} rows, the index {n}: a row is listed "
                         "twice; the file is damaged: build the index again")
    return True


def _check_encoding(index, encoder: str | os.PathLike | None) -> dict:
    """The stored vectors of `dense.spot_check_rows` against fresh encodings by the index's context
    encoder: what no hash can show (vectors and FAISS index copied in from another index of the
    same size and width would pass every check above)."""
    from lewisrag.index.dense import EMBEDDINGS, MIN_COSINE, compare_encodings, spot_check_rows
    from lewisrag.index.encoders import load_context_encoder

    recorded = index.manifest["encoder"].get("path")
    if encoder is None and not (recorded and Path(recorded).exists()):
        return {"check": "encoding", "result": f"not checked: the encoder that built the index ({recorded}) is not found "
                "here; pass --encoder to check that the stored vectors encode their passages"}
    where = encoder if encoder is not None else recorded
    if encoder is not None and not Path(encoder).exists():
        raise InputError(encoder, "not found", field="--encoder")
    ckpt = load_context_encoder(where)
    if ckpt.ctx_fingerprint != index.ctx_fingerprint:
        raise InputError(where, f"is not the context encoder that built {index.path} (weights' fingerprint "
                         f"{ckpt.ctx_fingerprint[:12]}, the index's {index.ctx_fingerprint[:12]}): changed since, or another; "
                         "give the one that built it", field="--encoder" if encoder is not None else "encoder.path")
    build = index.manifest.get("build", {})
    rows = spot_check_rows(len(index.passages))
    passages = [index.passages[r] for r in rows]
    cosine, ratio, bad = compare_encodings(passages, index.vectors(np.array(rows)), ckpt,
                                           int(build.get("max_length") or ckpt.meta.get("max_length", 256)),
                                           build.get("mixed_precision", "no"))
    if bad is not None:
        raise InputError(index.path / EMBEDDINGS, f"row {rows[bad]} (0-based; passage {passages[bad].id!r}) is not its "
                         f"passage's vector: cosine {cosine[bad]:.3f} and {ratio[bad]:.2f}x the length of a fresh "
                         f"encoding by {where} (cosine >= {MIN_COSINE} needed); the index is damaged: build it again")
    return {"check": "encoding", "result": f"{len(rows)} passages spread over the index encoded afresh by {where}: "
            f"cosine >= {float(cosine.min()):.4f} with their stored vectors"}
