"""Dense passage index: a frozen DPR context encoder and FAISS with inner product (MIPS).

The stored passage vectors (`embeddings.npy`) are kept beside the FAISS index and opened
memory-mapped: a RAG model scores retrieved documents as q·d against exactly these vectors, so
the gradient reaches the question encoder and never the index; and N training processes on one
machine share one copy of them in the page cache instead of N copies in RAM.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import re
import shutil
import tokenize
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

from lewisrag.data.io import InputError, atomic_path, read_json, write_json
from lewisrag.data.outputs import check_out_dir, exclusive, sweep_leftovers
from lewisrag.data.passages import PassageTable
from lewisrag.data.records import Passage
from lewisrag.index import store
from lewisrag.data.threads import check_device_flag, resolve_device
from lewisrag.index.encoders import DPRCheckpoint, encode_texts, load_context_encoder
from lewisrag.index.tuning import QUANTIZER_EF_MIN, rerank

EMBEDDINGS = "embeddings.npy"
FAISS_FILE = "index.faiss"
DEFAULT_SEARCH_PARAMS = {"nprobe": 16, "efSearch": 128}
# a Refine(...) index's base search returns this many times k candidates for the refine stage to rank
# exactly (FAISS's IndexRefine.k_factor): at FAISS's 1 the stage ranks only the k it already has, which
# changes no recall@k; 4, as `tuning.search`'s re-ranking depth is 4 k by default. Recorded as the
# manifest's `refine_k_factor` and applied on every load (indexes built before it: this)
REFINE_K_FACTOR = 4
SPOT_CHECK_ROWS = 8  # stored vectors compared with fresh encodings before they are reused
MIN_COSINE = 0.99  # ... each must point the same way as its fresh encoding
MAX_NORM_RATIO = 1.05  # ... and be as long, within 5% (inner products keep their scale)
ADD_ROWS = 1 << 16  # vectors handed to FAISS at a time while building
TRANSFORM_SAMPLE = 1 << 16  # vectors that train a pre-transform (OPQ, PCA): OPQMatrix subsamples to 65,536 anyway
TRAIN_PER_LIST = 64  # training vectors per inverted list at least (FAISS's k-means warns below 39, uses at most 256)
TWO_LEVEL_LISTS = 10_000  # IVF indexes with at least this many lists train their centroids in two levels (docs/scale.md)
VECTOR_DTYPES = ("float32", "float16")
COMPRESSED_ONLY = ("search_params", "rerank_depth", "tuning", "refine_k_factor")  # manifest fields that a Flat index has no use for
SEARCH_ROWS = 1 << 22  # vectors per block of a matrix-product search (a 16-question block of scores is 256 MB)
DEVICE_DTYPES = ("float32", "float16")  # how `search_on` may hold the vectors on its device
HALF_CANDIDATES = 4  # a float16 product search keeps this many times k candidates for float32 re-scoring


@dataclass(frozen=True)
class DenseBuildConfig:
    factory: str = "Flat"  # faiss.index_factory string, inner-product metric ("Flat", "HNSW32", "IVF256,PQ16")
    shard_size: int = 4096  # passages per encoded shard; a killed build resumes at shard granularity
    batch_size: int = 64  # passages per encoder forward pass
    max_length: int | None = None  # tokens per passage (title + text); None = the checkpoint's own
    train_sample: int = 100_000  # vectors that train IVF/PQ quantizers (more for IVF: TRAIN_PER_LIST a list)
    reuse_embeddings: bool = False  # take the passages' stored `embeddings` column (wiki_dpr's) after a spot check
    device: str = "auto"  # where the context encoder runs: "auto" (a GPU when one is visible), "cpu", "cuda[:N]"
    mixed_precision: str = "no"  # "bf16"/"fp16": autocast the encoder's forward passes (GPU speed; vectors shift slightly)
    vector_dtype: str = "float32"  # stored vectors (embeddings.npy): "float16" halves their disk and page cache


def build_dense_index(
    passages: Sequence[Passage],
    encoder_path: str | os.PathLike,
    out: str | os.PathLike,
    cfg: DenseBuildConfig = DenseBuildConfig(),
    on_progress: Callable[[str, int, int], None] | None = None,
    overwrite: bool = False,
) -> dict:
    """Encode `passages` with the context encoder of `encoder_path` and write a FAISS index to `out`.

    `encoder_path` is a `lewisrag train dpr` checkpoint or a transformers DPRContextEncoder folder
    (`encoders.load_context_encoder`); the manifest records its path, fingerprint and layout.

    `on_progress(stage, done, total)` is called after each encoder batch (stage "encode") or, with
    `cfg.reuse_embeddings`, as the stored vectors are copied (stage "copy"), and as the FAISS index
    is trained and filled (stage "faiss"). Returns the manifest.
    `out` must be missing, empty or an index lewisrag built, holding no file the user added since,
    unless `overwrite`; every setting is checked before the first passage is encoded.

    With `cfg.reuse_embeddings`, `passages` is a `PassageTable` with an `embeddings` column; its
    vectors are used instead of encoding once `check_stored_embeddings` has found that a few of
    them are what this encoder makes. The manifest's `build.embeddings` says which was done.
    """
    out = check_out_dir(out, store.KIND, overwrite=overwrite, replaces=True)  # the new index replaces it whole
    check_build_config(cfg)
    if cfg.reuse_embeddings and isinstance(passages, PassageTable) and not passages.has_embeddings:
        raise InputError(passages.source, "missing: --reuse-embeddings reads the passages' stored vectors (wiki_dpr's "
                         "embeddings column); without it the passages are encoded", field="embeddings")
    if cfg.reuse_embeddings and not isinstance(passages, PassageTable):
        raise InputError("--reuse-embeddings", "needs passages with an embeddings column (a datasets save_to_disk "
                         "folder, a .parquet file, a folder of .parquet shards or an hf: spec in wiki_dpr's schema)")
    ckpt = load_context_encoder(encoder_path)
    ckpt.ctx_encoder.to(resolve_device(cfg.device))
    check_factory(cfg.factory, ckpt.dim, len(passages), cfg.train_sample)
    max_length = cfg.max_length or int(ckpt.meta.get("max_length", 256))
    spot_check = check_stored_embeddings(passages, ckpt, max_length, cfg.mixed_precision) if cfg.reuse_embeddings else None
    chash, blocks = store.content_hashes(passages)
    partial = store.partial_dir(out)
    plan = {"content_hash": chash, "ctx_fingerprint": ckpt.ctx_fingerprint, "shard_size": cfg.shard_size, "max_length": max_length,
            "mixed_precision": cfg.mixed_precision, "vector_dtype": cfg.vector_dtype}
    with exclusive(partial):  # a second build into the same folder would share IDX.partial with this one
        _reset_if_stale(partial, {**plan, "embeddings": "reused"} if spot_check else plan)
        try:
            if spot_check:
                _copy_stored(passages, partial / EMBEDDINGS, cfg.shard_size, cfg.vector_dtype, on_progress)
            else:
                _encode_into(passages, ckpt, partial, cfg, max_length, on_progress)
        except InputError:  # bad input found on the way: the fixed input hashes otherwise, so nothing here could resume
            shutil.rmtree(partial, ignore_errors=True)
            raise
        embeddings = np.load(partial / EMBEDDINGS, mmap_mode="r")
        if on_progress:
            on_progress("faiss", 0, 1)
        index = build_faiss(embeddings, cfg.factory, cfg.train_sample)
        _write_faiss_atomic(index, partial / FAISS_FILE)
        refine = {"refine_k_factor": REFINE_K_FACTOR} if is_refine(index) else {}
        store.write_passages(partial, passages)
        manifest = {
            "kind": "dense",
            "metric": "inner_product",
            "faiss_factory": cfg.factory,
            "dim": int(embeddings.shape[1]),
            "n_passages": len(passages),
            "content_hash": chash,
            "block_hashes": store.block_hashes(blocks),
            "sample_hash": store.sample_hash(passages),
            "encoder": {"path": str(Path(encoder_path).resolve()), "ctx_fingerprint": ckpt.ctx_fingerprint,
                        "format": ckpt.meta.get("format", "lewisrag")},
            "search_params": DEFAULT_SEARCH_PARAMS,
            **refine,
            "build": {"shard_size": cfg.shard_size, "max_length": max_length, "mixed_precision": cfg.mixed_precision,
                      "vector_dtype": cfg.vector_dtype,
                      **({"embeddings": {"source": "reused", "column": "embeddings", "spot_check": spot_check}} if spot_check else {})},
        }
        del embeddings  # the memory map, before the folder moves
        if (partial / "shards").is_dir():  # kept until now: a build killed before this point resumes from them
            for f in (partial / "shards").iterdir():
                f.unlink()
            (partial / "shards").rmdir()
        (partial / "plan.json").unlink()
        store.finish(partial, out, manifest)
    if on_progress:
        on_progress("faiss", 1, 1)
    return manifest


def _encode_into(passages: Sequence[Passage], ckpt: DPRCheckpoint, partial: Path, cfg: DenseBuildConfig,
                 max_length: int, on_progress) -> None:
    """Encode every passage into `partial/embeddings.npy`, one shard at a time (`_RowWriter`).

    Memory holds one shard's passages and vectors, whatever the corpus. A shard is marked done
    (`shards/NNNNN.done`) only once its rows are flushed to disk, so a build killed at any point
    resumes at its first unfinished shard and ends with the same bytes as an uninterrupted one
    with the same --batch-size and device (which the plan leaves out, so a resume may change them:
    another batch pads otherwise, which moves the last bits of some vectors, about 1e-6).
    """
    n, shard = len(passages), cfg.shard_size
    marks, path = partial / "shards", partial / EMBEDDINGS
    if not _holds_rows(path, (n, ckpt.dim), cfg.vector_dtype):  # removed or cut short since: its shards are lost
        shutil.rmtree(marks, ignore_errors=True)
        path.unlink(missing_ok=True)
    marks.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        with atomic_path(path) as tmp:  # the full-size file, sparse until written
            np.lib.format.open_memmap(tmp, mode="w+", dtype=cfg.vector_dtype, shape=(n, ckpt.dim)).flush()
    n_shards = (n + shard - 1) // shard
    encoded = sum(min(shard, n - s * shard) for s in range(n_shards) if (marks / f"{s:05d}.done").exists())

    def tick(k: int) -> None:
        nonlocal encoded
        encoded += k
        if on_progress:
            on_progress("encode", encoded, n)

    tick(0)
    with _RowWriter(path) as out:
        for s in range(n_shards):
            done = marks / f"{s:05d}.done"
            if done.exists():
                continue
            chunk = passages[s * shard : (s + 1) * shard]
            vecs = encode_texts(ckpt.ctx_encoder, ckpt.tokenizer, [(p.title, p.text) for p in chunk],
                                batch_size=cfg.batch_size, max_length=max_length, mixed_precision=cfg.mixed_precision,
                                on_batch=tick)
            check_fits(vecs, out.dtype, getattr(passages, "source", "the passages"), s * shard)
            out.write(s * shard, vecs)
            out.sync()
            done.touch()


def _holds_rows(path: Path, shape: tuple[int, int], dtype: str) -> bool:
    """Whether `path` is a whole .npy file of `shape` and `dtype`, as `_encode_into` makes it: a
    partial build's vector file deleted, truncated or replaced since would otherwise resume into an
    index whose finished shards read as zeros, or end in a numpy traceback."""
    try:
        header = np.load(path, mmap_mode="r")
    except (OSError, ValueError, EOFError, tokenize.TokenError):  # missing, truncated or not an .npy file
        return False
    whole = header.offset + header.nbytes == path.stat().st_size
    return whole and header.shape == shape and header.dtype == np.dtype(dtype)


def spot_check_rows(n: int, k: int = SPOT_CHECK_ROWS) -> list[int]:
    """`k` rows spread evenly over `n`, the first and the last among them (fewer if n < k).

    >>> spot_check_rows(100), spot_check_rows(3)
    ([0, 14, 28, 42, 57, 71, 85, 99], [0, 1, 2])
    """
    return sorted({int(r) for r in np.linspace(0, n - 1, min(k, n)).round()})


def check_stored_embeddings(passages: PassageTable, ckpt: DPRCheckpoint, max_length: int,
                            mixed_precision: str = "no") -> dict:
    """Refuse stored vectors this encoder did not make: encode `spot_check_rows` afresh and require
    each stored vector to have cosine ≥ MIN_COSINE with its fresh one and about its length.
    Returns what was checked, for the manifest."""
    dim = passages.vector_dim()  # the copy checks every vector as it reads it
    if dim != ckpt.dim:
        raise InputError(passages.source, f"the embeddings were not made by this encoder: they have {dim} values, "
                         f"the encoder makes {ckpt.dim}", field="embeddings")
    rows = spot_check_rows(len(passages))
    cosine, ratio, bad = compare_encodings(passages.take(rows), passages.embeddings_at(rows), ckpt, max_length, mixed_precision)
    if bad is not None:
        raise InputError(passages.source, f"the embeddings were not made by this encoder: this row's stored vector "
                         f"has cosine {cosine[bad]:.3f} and {ratio[bad]:.2f}x the length of a fresh encoding "
                         f"(cosine ≥ {MIN_COSINE} needed)", line=rows[bad] + 1, field="embeddings")
    return {"rows": [r + 1 for r in rows], "min_cosine": round(float(cosine.min()), 4)}


def compare_encodings(passages: Sequence[Passage], stored: np.ndarray, ckpt: DPRCheckpoint, max_length: int,
                      mixed_precision: str = "no") -> tuple[np.ndarray, np.ndarray, int | None]:
    """Encode `passages` afresh and set each against its `stored` vector (N, D): (cosine, stored length
    / fresh length, the first position failing MIN_COSINE or MAX_NORM_RATIO, else None)."""
    fresh = encode_texts(ckpt.ctx_encoder, ckpt.tokenizer, [(p.title, p.text) for p in passages],
                         batch_size=len(passages), max_length=max_length, mixed_precision=mixed_precision)
    stored = np.asarray(stored, dtype=np.float32)
    norm_f, norm_s = np.linalg.norm(fresh, axis=1), np.linalg.norm(stored, axis=1)
    cosine = (fresh * stored).sum(1) / np.maximum(norm_f * norm_s, 1e-12)
    ratio = norm_s / np.maximum(norm_f, 1e-12)
    bad = (cosine < MIN_COSINE) | (ratio > MAX_NORM_RATIO) | (ratio < 1 / MAX_NORM_RATIO) | ~np.isfinite(cosine)
    return cosine, ratio, int(np.argmax(bad)) if bad.any() else None


def check_fits(vectors: np.ndarray, dtype: np.dtype, source: str, first_row: int) -> None:
    """Refuse vectors with a value float16 cannot hold (|x| > 65504 would be stored as infinity).

    >>> check_fits(np.array([[1.0, -7e4]], np.float32), np.dtype("float16"), "p.parquet", 0)
    Traceback (most recent call last):
    lewisrag.data.io.InputError: p.parquet:1: field 'embeddings': -70000.0 is out of float16's range (±65504): use --vector-dtype float32
    """
    if dtype != np.float16 or not len(vectors):
        return
    big = np.abs(vectors) > np.finfo(np.float16).max
    if big.any():
        row, col = np.argwhere(big)[0]
        raise InputError(source, f"{float(vectors[row, col])} is out of float16's range (±65504): use --vector-dtype "
                         "float32", line=first_row + int(row) + 1, field="embeddings")


def _copy_stored(passages: PassageTable, path: Path, batch_rows: int, dtype: str, on_progress) -> None:
    """Write the stored vectors to `path` (.npy of `dtype`) batch by batch, refusing values `dtype`
    cannot hold (NaN and infinity, and vectors of other lengths, refused by `passages.embeddings`
    as it decodes them: one pass over the column, not a check and then a copy)."""
    n, dim = len(passages), passages.vector_dim()
    with atomic_path(path) as tmp:
        np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=(n, dim)).flush()  # the header; sparse rows
        with _RowWriter(tmp) as out:
            for start in range(0, n, batch_rows):
                block = passages.embeddings(start, start + batch_rows)
                check_fits(block, out.dtype, passages.source, start)
                out.write(start, block)
                if on_progress:
                    on_progress("copy", start + len(block), n)
            out.sync()


class _RowWriter:
    """Rows written into their place in an existing .npy file (`open_memmap`'s, full size) with
    plain file writes, cast to its dtype as numpy casts.

    Not through a memory map: the pages written through one mapping stay in the process's RSS, so
    copying wiki_dpr's 21 M stored vectors would end with all 32 GB (float16) counted as the build's
    memory, as `row_reader` explains for reading. Written so, they are the page cache's alone."""

    def __init__(self, path: Path):
        header = np.load(path, mmap_mode="r")  # for its layout only
        self.dtype, self.dim, self.offset = header.dtype, header.shape[1], header.offset
        del header
        self.file = open(path, "r+b")

    def __enter__(self) -> _RowWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()

    def write(self, start: int, rows: np.ndarray) -> None:
        self.file.seek(self.offset + start * self.dim * self.dtype.itemsize)
        self.file.write(np.ascontiguousarray(rows, dtype=self.dtype).tobytes())

    def sync(self) -> None:
        """On disk, as a memory map's flush puts it: a shard marked done must survive a crash."""
        self.file.flush()
        os.fsync(self.file.fileno())


def is_refine(faiss_index) -> bool:
    """A Refine(...) index: a base index's candidates ranked again by a second one (IndexRefine).

    >>> is_refine(faiss.index_factory(8, "IVF4,PQ2x4,Refine(Flat)")), is_refine(faiss.index_factory(8, "IVF4,PQ2x4"))
    (True, False)
    """
    return isinstance(faiss.downcast_index(faiss_index), faiss.IndexRefine)


def check_refine_k_factor(path: Path, manifest: dict) -> int:
    """The manifest's `refine_k_factor` (REFINE_K_FACTOR where it records none: built before it was),
    refused unless a whole number that FAISS's search can take (k_factor x k candidates are set
    aside a question: 10**12 asked for TiBs)."""
    value = manifest.get("refine_k_factor", REFINE_K_FACTOR)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
        raise InputError(path / store.MANIFEST, f"expected a whole number from 1 to 4096, got {value!r}",
                         field="refine_k_factor")
    return value


def use_blas_for_small_batches(threshold: int = 8) -> None:
    """Let FAISS compute exact inner products with BLAS from `threshold` queries on.

    Recent FAISS releases take BLAS only from 128,000 queries per call (the default of
    `distance_compute_blas_threshold`); below that a hand-written loop runs, so the batches of a few
    dozen questions that RAG training and evaluation send are served several times slower than
    a matrix multiply would serve them (measured in scripts/bench_index.py).
    """
    faiss.cvar.distance_compute_blas_threshold = threshold


def advise_random(vectors: np.ndarray) -> None:
    """Tell the kernel that a memory-mapped `vectors` is read a few rows at a time, at random: the
    re-ranking candidates and the K retrieved rows of the doc scores. Without it each page fault on
    a cold file reads a whole read-ahead window around the row (8 MB on this project's machine),
    and 400 rows of a 2 GB float16 file took 1.1-1.4 s to read instead of 31-43 ms with the advice
    (docs/scale.md). Scans from first row to last go through `DenseIndex.scan_vectors` instead."""
    mm = getattr(vectors, "_mmap", None)
    if isinstance(vectors, np.memmap) and mm is not None and hasattr(mmap, "MADV_RANDOM"):
        mm.madvise(mmap.MADV_RANDOM)


def build_faiss(embeddings: np.ndarray, factory: str, train_sample: int = 100_000, seed: int = 0):
    """A FAISS index over `embeddings` (N, D) with inner product; trains quantizers if needed.

    `embeddings` may be a memory map of any float dtype: quantizers train on a sample read in
    blocks (`train_faiss`), and the vectors are added ADD_ROWS at a time as float32, so no second
    copy of the corpus is made beside the index's own storage. Rows are read through `row_reader`.
    """
    n, d = embeddings.shape
    index = _new_index(factory, d)
    _no_polysemous_training(index)
    read = row_reader(embeddings)
    if not index.is_trained:
        rows = training_rows(index, n, train_sample, seed)
        try:
            train_faiss(index, read, rows)
        except RuntimeError as e:  # check_factory catches the known causes; this names any other
            raise InputError("--faiss", f"FAISS could not train '{factory}' on {len(rows)} vectors: "
                             f"{_faiss_reason(e)}") from None
    try:
        for start in range(0, n, ADD_ROWS):
            index.add(read(np.arange(start, min(start + ADD_ROWS, n))))
    except RuntimeError as e:  # e.g. an NSG graph over fewer than 100 vectors
        raise InputError("--faiss", f"FAISS could not add {n} vectors to '{factory}': {_faiss_reason(e)}") from None
    return index


def row_reader(embeddings: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """A function from increasing row numbers to those rows of `embeddings` as float32.

    For a memory map of a whole file (np.load's) each ADD_ROWS block of the file is read through a
    mapping of its own, closed after: pages read through one long-lived mapping stay in the
    process's RSS (the kernel maps up to 64 KB around each fault), so a build would end with the
    whole vector file in its RSS, and one read of a training sample spread over the file would map
    most of it at once (7.7 GB for a 5M-passage sample through one mapping, measured by
    scripts/bench_scale.py). Clean file pages that the kernel can drop, but counted by whatever
    watches RSS; read so, they stay in the page cache only."""
    if not (isinstance(embeddings, np.memmap) and isinstance(embeddings.base, mmap.mmap) and embeddings.flags.c_contiguous):
        return lambda rows: np.asarray(embeddings[rows], dtype=np.float32)
    n, d = embeddings.shape
    filename, dtype, offset, row_bytes = embeddings.filename, embeddings.dtype, embeddings.offset, embeddings.strides[0]

    def read(rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows), d), np.float32)
        starts = rows // ADD_ROWS * ADD_ROWS
        cuts = [0, *(np.flatnonzero(np.diff(starts)) + 1).tolist(), len(rows)]
        for a, b in zip(cuts, cuts[1:]):
            if a == b:
                continue
            first = int(starts[a])
            mm = np.memmap(filename, dtype=dtype, mode="r", offset=offset + first * row_bytes,
                           shape=(min(ADD_ROWS, n - first), d))
            out[a:b] = mm[rows[a:b] - first]
            del mm
        return out

    return read


def training_sample_size(index, n: int, train_sample: int) -> int:
    """How many of `n` vectors train `index`: `train_sample`, or TRAIN_PER_LIST per inverted list
    when an IVF index has more lists than that covers, and never more than `n`.

    >>> import faiss
    >>> training_sample_size(faiss.index_factory(8, "IVF4000,Flat"), 10**6, 100_000)
    256000
    >>> training_sample_size(faiss.index_factory(8, "PQ4"), 50_000, 100_000)
    50000
    """
    with contextlib.suppress(RuntimeError):  # not an IVF index
        train_sample = max(train_sample, TRAIN_PER_LIST * faiss.extract_index_ivf(index).nlist)
    return min(n, train_sample)


def training_rows(index, n: int, train_sample: int, seed: int = 0) -> np.ndarray:
    """The rows (increasing) of `n` vectors that train `index`: all of them, or a seeded sample."""
    size = training_sample_size(index, n, train_sample)
    if size >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size, replace=False))


def train_faiss(index, read: Callable[[np.ndarray], np.ndarray], rows: np.ndarray, block: int = ADD_ROWS) -> None:
    """Train `index` on the vectors at `rows`, which `read(rows_part)` returns as float32, `block` at a time.

    FAISS's own `IndexPreTransform.train` takes the whole sample at full width and makes a
    transformed copy of it: for OPQ64_256 over 768-d vectors with IVF8944 at 5M passages (572,416
    vectors) that is 1.7 GB plus 0.6 GB, most of the 3.0 GB that build held beyond its index
    (docs/scale.md). Here the transforms (OPQ, PCA) train on TRANSFORM_SAMPLE of the rows, spread
    over them, as OPQ would subsample anyway; then the rows are read and transformed block by block
    into one array of the narrower width, on which the inner index (IVF, PQ) trains. The same
    steps as FAISS's, with the sample never whole at full width; except that an IVF with
    TWO_LEVEL_LISTS lists or more takes its centroids from `two_level_centroids`, and an HNSW
    coarse quantizer is left searching with efSearch QUANTIZER_EF_MIN or more for the adding.
    """
    outer = faiss.downcast_index(index)  # `index` keeps ownership: it must stay referenced
    transforms = []
    if isinstance(outer, faiss.IndexPreTransform):
        transforms = [faiss.downcast_VectorTransform(outer.chain.at(i)) for i in range(outer.chain.size())]
        head = rows[np.unique(np.linspace(0, len(rows) - 1, min(len(rows), TRANSFORM_SAMPLE)).astype(np.int64))]
        x = read(head)
        for transform in transforms:
            if not transform.is_trained:
                transform.train(x)
            x = transform.apply(x)
        del x
    inner = faiss.downcast_index(outer.index) if transforms else index
    sample = None
    for start in range(0, len(rows), block):
        x = read(rows[start : start + block])
        for transform in transforms:
            x = transform.apply(x)
        if sample is None:
            sample = np.empty((len(rows), x.shape[1]), np.float32)
        sample[start : start + len(x)] = x
    ivf = _ivf_or_none(inner)
    if ivf is not None and ivf.nlist >= TWO_LEVEL_LISTS and ivf.quantizer.ntotal == 0:
        ivf.quantizer.add(two_level_centroids(sample, ivf.nlist))  # IVF's train then skips the coarse k-means
    inner.train(sample)
    if transforms:
        outer.is_trained = True
    quantizer = faiss.downcast_index(ivf.quantizer) if ivf is not None else None
    if isinstance(quantizer, faiss.IndexHNSW):
        # adding asks the quantizer for each vector's list: with HNSW's default efSearch (16) some
        # go to a list that is not their nearest, where a search that probes the nearest misses them
        quantizer.hnsw.efSearch = max(quantizer.hnsw.efSearch, QUANTIZER_EF_MIN)


def two_level_centroids(x: np.ndarray, nlist: int, seed: int = 0, niter: int = 20) -> np.ndarray:
    """`nlist` unit-length centroids of the rows of `x` for an inner-product IVF, by two-level
    spherical k-means.

    One k-means over all the lists costs (rows × nlist × dim) a pass, growing as nlist² with 64
    sample vectors a list: 352 s of training for 16,000 lists at 1M passages on two cores, so about
    half an hour for 35,777 at 5M (16·sqrt(N), the upper end of FAISS's guideline). In two levels,
    as FAISS's `contrib.clustering.two_level_clustering`: sqrt(nlist) groups first, then each group
    split into lists in proportion to its rows, about sqrt(nlist) times less work (100 s of
    training in all at 5M). Written here rather than calling that function because it runs
    Euclidean k-means, while this index ranks lists by inner product, and because it can ask
    k-means for zero centroids for a small group. Measured at 5M with 32,768 lists
    (docs/scale.md): Euclidean centroids held recall@5 at 0.92 of exact search even at nprobe
    4,096; k-means by inner product within each group (as FAISS trains an inner-product IVF in
    one level) let long centroids draw their neighbours' vectors, lists 52× out of balance and a
    third of the speed; spherical k-means keeps every centroid at unit length, so a vector's largest
    inner product is its nearest direction, and the lists as balanced as one-level k-means's.
    """
    n, d = x.shape
    groups = max(1, min(int(math.isqrt(nlist)), n))
    kmeans = faiss.Kmeans(d, groups, niter=niter, spherical=True, seed=seed, max_points_per_centroid=2000)
    kmeans.train(x)
    _, assign = kmeans.index.search(x, 1)  # nearest unit centroid: the largest inner product
    assign = assign[:, 0]
    sizes = np.bincount(assign, minlength=groups)
    lists = np.diff(np.concatenate([[0], np.cumsum(sizes) * nlist // n]))  # sums to nlist
    order = np.argsort(assign, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    centroids = []
    for g in np.flatnonzero(lists):
        part = x[order[bounds[g] : bounds[g + 1]]]
        k = int(lists[g])
        if len(part) <= k:  # as many lists as vectors (only for tiny samples): each vector its own centroid
            part = np.concatenate([part, part[np.arange(k - len(part)) % len(part)]])
            centroids.append(part / np.linalg.norm(part, axis=1, keepdims=True).clip(min=1e-12))
            continue
        sub = faiss.Kmeans(d, k, niter=niter, spherical=True, seed=seed + 1 + int(g))
        sub.train(np.ascontiguousarray(part))
        centroids.append(sub.centroids)
    return np.ascontiguousarray(np.concatenate(centroids), dtype=np.float32)


def _ivf_or_none(index):
    try:
        return faiss.downcast_index(faiss.extract_index_ivf(index))
    except RuntimeError:  # not an IVF index
        return None


def _no_polysemous_training(index) -> None:
    """index_factory turns on polysemous training for PQ codes: a Hamming-distance filter that these
    searches never use, which took 100 s of 105 s of training at PQ64 on 20k vectors. Turned off on
    the index, on the index under its pre-transforms (OPQ16_64,PQ16 on 6,000 vectors of 64: 58 s of
    training with it, 21 s without) and on its IVF."""
    parts = [faiss.downcast_index(index)]
    if isinstance(parts[0], faiss.IndexPreTransform):
        parts.append(faiss.downcast_index(parts[0].index))
    with contextlib.suppress(RuntimeError):  # not an IVF index
        parts.append(faiss.downcast_index(faiss.extract_index_ivf(index)))
    for part in parts:
        if hasattr(part, "do_polysemous_training"):
            part.do_polysemous_training = False


def check_factory(factory: str, dim: int, n_passages: int, train_sample: int = 100_000) -> None:
    """Refuse a FAISS factory string that cannot be built or trained on this many passages.

    Checked before encoding, so a typo does not cost an encoding pass: IVF needs at least one
    training vector per list, and a product quantizer at least one per centroid.
    """
    for kind, count in re.findall(r"(HNSW|IVF)(\d+)", factory):
        if int(count) < 1:  # FAISS builds them, then aborts the process (HNSW0) or fails every search (IVF0)
            raise InputError("--faiss", f"invalid FAISS factory '{factory}': {kind} needs at least 1 "
                             f"{'link per vector' if kind == 'HNSW' else 'inverted list'}")
        if kind == "IVF" and int(count) > n_passages:  # before FAISS sets aside every list: 10**9 of them take 48 GB
            raise InputError("--faiss", f"'{factory}' needs at least {count} passages to train ({count} inverted "
                             f"lists); there are {n_passages}: use fewer lists or Flat")
    index = _new_index(factory, dim)
    if "IDMap" in factory:  # an IndexIDMap takes only add_with_ids; a row's number is already its passage's
        raise InputError("--faiss", f"invalid FAISS factory '{factory}': lewisrag numbers vectors by passage row; "
                         "leave IDMap out")
    if index.metric_type != faiss.METRIC_INNER_PRODUCT:  # FAISS makes HNSW over PQ codes L2, whatever it is asked
        raise InputError("--faiss", f"FAISS builds '{factory}' with the L2 metric only, not the inner product DPR's "
                         "scores are: every load would refuse it; use e.g. IVF256,PQ16, HNSW32,SQ8 or HNSW32")
    try:  # an untrained ITQ transform cannot be read back: its trained index is, as every load reads it
        written = faiss_structure(faiss.deserialize_index(faiss.serialize_index(index)))
    except RuntimeError:
        written = faiss_structure(index)
    if written != faiss_structure(index):  # as every load compares them (`check_faiss_factory`)
        raise InputError("--faiss", f"FAISS writes '{factory}' as {', '.join(written)}, which a load cannot tell "
                         "from another kind of index; write the factory string as FAISS names that index")
    if index.is_trained:
        return

    n_train = training_sample_size(index, n_passages, train_sample)
    need, what, inner = 1, "", faiss.downcast_index(index)  # `inner` borrows from `index`, which must stay referenced
    for t in _transforms(inner):  # they train first, on the same sample: OPQ on codes of 256 centroids
        wants, why = ((256, "OPQ centroids per code") if isinstance(t, faiss.OPQMatrix)
                      else (t.d_out, "PCA output dimensions") if isinstance(t, faiss.PCAMatrix) else (1, ""))
        if wants > need:
            need, what = wants, f"{wants} {why}"
    if isinstance(inner, faiss.IndexPreTransform):
        inner = faiss.downcast_index(inner.index)
    with contextlib.suppress(RuntimeError):  # not an IVF index
        inner = faiss.extract_index_ivf(inner)
        if inner.nlist > need:
            need, what = inner.nlist, f"{inner.nlist} inverted lists"
    pq = getattr(faiss.downcast_index(inner), "pq", None)
    if pq is not None and pq.ksub > need:
        need, what = pq.ksub, f"{pq.ksub} centroids per product-quantizer code"
    if n_train < need:
        raise InputError("--faiss", f"'{factory}' needs at least {need} passages to train ({what}); "
                         f"there are {n_passages}: use fewer lists or Flat")


def _transforms(index) -> list:
    """The pre-transforms (OPQ, PCA, ...) of an IndexPreTransform, in order; none for another index."""
    if not isinstance(index, faiss.IndexPreTransform):
        return []
    return [faiss.downcast_VectorTransform(index.chain.at(i)) for i in range(index.chain.size())]


def _new_index(factory: str, dim: int):
    try:
        return faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except (RuntimeError, MemoryError) as e:  # MemoryError: std::bad_alloc of a huge HNSW or PQ, say
        raise InputError("--faiss", f"invalid FAISS factory '{factory}': {_faiss_reason(e)}") from None


def _faiss_reason(e: Exception) -> str:
    """The reason in a FAISS error, without its "Error in <function> at <file>:<line>: " prefix."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return (lines[-1] if lines else type(e).__name__).split(": ", 1)[-1]


def check_build_config(cfg: DenseBuildConfig) -> None:
    """Every setting of a build, named by its flag; torch loads only to see a GPU named, or for fp16 on
    auto, so that `index build` checks them before it reads the passages."""
    for name, value in (("--shard-size", cfg.shard_size), ("--batch-size", cfg.batch_size),
                        ("train_sample", cfg.train_sample)):  # the last is a config field, not a flag
        if value < 1:
            raise InputError(name, f"must be at least 1, got {value}")
    if cfg.vector_dtype not in VECTOR_DTYPES:
        raise InputError("--vector-dtype", f"must be float32 or float16, got {cfg.vector_dtype!r}")
    if cfg.mixed_precision not in ("no", "bf16", "fp16"):
        raise InputError("--mixed-precision", f"must be no, bf16 or fp16, got {cfg.mixed_precision!r}")
    check_device_flag(cfg.device)
    if cfg.mixed_precision == "fp16" and resolve_device(cfg.device) == "cpu":
        raise InputError("--mixed-precision", "fp16 needs a GPU; use bf16 on the CPU")
    if cfg.max_length is not None and cfg.max_length < 8:
        raise InputError("max_length", f"must be at least 8 tokens, got {cfg.max_length}")


class DenseIndex:
    """A loaded dense index: FAISS for search, memory-mapped stored vectors for q·d scoring."""

    def __init__(self, path: Path, manifest: dict, faiss_index, embeddings: np.ndarray, passages: Sequence[Passage]):
        self.path, self.manifest, self.faiss_index = path, manifest, faiss_index
        self.embeddings, self.passages = embeddings, passages  # (N, D) memory-mapped, row order
        self.device_vectors = None  # (N, D) float32 or float16 torch tensor once `search_on` has placed them
        use_blas_for_small_batches()
        self.set_search_params(manifest.get("search_params", DEFAULT_SEARCH_PARAMS))
        if faiss_index is not None and is_refine(faiss_index):  # FAISS's k_factor 1 would make the stage add nothing
            faiss.downcast_index(faiss_index).k_factor = check_refine_k_factor(path, manifest)

    @classmethod
    def load(cls, path: str | os.PathLike, mmap: bool = True, with_faiss: bool = True) -> DenseIndex:
        """Open an index; `with_faiss=False` leaves the FAISS index unread (a process whose searches
        another one serves, `index.shared.NodeSearch`): passages and stored vectors only."""
        path = Path(path)
        manifest = store.read_manifest(path, kind="dense")
        for name in (FAISS_FILE, EMBEDDINGS):
            if not (path / name).is_file():
                raise InputError(path / name, "missing: the index is damaged; build it again")
        index = None
        try:
            if with_faiss:
                index = _read_faiss(path / FAISS_FILE, mmap)
        except RuntimeError as e:
            raise InputError(path / FAISS_FILE, f"cannot read the FAISS index: {_faiss_reason(e)}") from None
        except MemoryError:  # a size field damaged into terabytes, say
            raise InputError(path / FAISS_FILE, "cannot read the FAISS index: it asks for more memory than this machine "
                             "gives (std::bad_alloc): the file is damaged, or the index too large to read here") from None
        try:
            embeddings = np.load(path / EMBEDDINGS, mmap_mode="r" if mmap else None)
        except (ValueError, OSError, tokenize.TokenError) as e:  # truncated, not an .npy file, or its header damaged
            raise InputError(path / EMBEDDINGS, f"cannot read the stored vectors: {e}") from None
        advise_random(embeddings)
        if embeddings.dtype not in (np.float16, np.float32):
            raise InputError(path / EMBEDDINGS, f"holds {embeddings.dtype} vectors; lewisrag writes float16 or float32")
        check_vector_dtype(path, manifest, embeddings.dtype)
        if index is not None and index.metric_type != faiss.METRIC_INNER_PRODUCT:  # RAG's scores are inner products
            raise InputError(path / FAISS_FILE, "searches by another metric than the inner product (L2?); build the index "
                             "again with lewisrag")
        expected = (manifest["n_passages"], manifest.get("dim"))
        # the FAISS index's dimension too: FAISS asserts on a query of another width (a traceback, not exit 2)
        if embeddings.ndim != 2 or embeddings.shape != expected or (index is not None and (index.ntotal, index.d) != expected):
            raise InputError(path, f"damaged: {EMBEDDINGS} holds {embeddings.shape}, {FAISS_FILE} "
                             f"{f'{index.ntotal} vectors of {index.d}' if index is not None else 'unread'}, "
                             f"the manifest says {expected}")
        if index is not None:
            check_faiss_factory(path, manifest, index)
            if is_refine(index):
                check_refine_k_factor(path, manifest)
        # a build refuses non-finite vectors; a file damaged since would score NaN and rank at random
        rows = store.sample_rows(len(embeddings))
        finite = np.isfinite(np.asarray(embeddings[rows], dtype=np.float32)).all(axis=1)
        if not finite.all():
            raise InputError(path / EMBEDDINGS, f"holds non-finite vectors (NaN or inf; row {rows[int(np.argmin(finite))]}, "
                             "0-based): the index is damaged; build it again")
        return cls(path, manifest, index, embeddings, store.load_passages(path, manifest))

    @classmethod
    def from_vectors(cls, path: Path, manifest: dict, vectors: np.ndarray, passages: Sequence[Passage]) -> DenseIndex:
        """An index over `vectors` (N, D) held in memory and searched exactly (a Flat FAISS index built
        here): the end-to-end retriever's passages re-encoded. `manifest` describes them; what only a
        compressed index has (search parameters, rerank depth, tuning) is dropped."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.shape != (len(passages), manifest["dim"]):
            raise ValueError(f"vectors: expected (N, D)={(len(passages), manifest['dim'])}, got {tuple(vectors.shape)}")
        kept = {k: v for k, v in manifest.items() if k not in COMPRESSED_ONLY}
        return cls(path, {**kept, "faiss_factory": "Flat"}, build_faiss(vectors, "Flat"), vectors, passages)

    def replace_vectors(self, vectors: np.ndarray, changes: dict) -> None:
        """Hold `vectors` (N, D) for the same passages from now on, in memory and searched exactly
        (Flat); `changes` replace manifest fields (the encoder that made them, and how).

        In place, so that whoever holds this index (the training loop, a model's dev evaluation)
        searches the new vectors; a search placed on a device (`search_on`) stays there.
        """
        new = DenseIndex.from_vectors(self.path, {**self.manifest, **changes}, vectors, self.passages)
        placed = self.device_vectors
        self.manifest, self.faiss_index, self.embeddings, self.device_vectors = new.manifest, new.faiss_index, new.embeddings, None
        if placed is not None:
            self.search_on(str(placed.device), str(placed.dtype).removeprefix("torch."))

    @property
    def dim(self) -> int:
        return int(self.manifest["dim"])

    @property
    def ctx_fingerprint(self) -> str:
        return self.manifest["encoder"]["ctx_fingerprint"]

    def set_search_params(self, params: dict) -> None:
        if self.faiss_index is None:
            return
        space = faiss.ParameterSpace()
        for name, value in params.items():
            try:
                space.set_index_parameter(self.faiss_index, name, value)
            except RuntimeError:  # e.g. nprobe on a Flat index: the parameter does not apply
                pass

    def check_encoder(self, ctx_fingerprint: str | None, dim: int, swap: bool = False,
                      flags: tuple[str, ...] = ("--context-encoder", "--swap")) -> None:
        """Refuse a question encoder trained against another context encoder, unless swapping.

        `ctx_fingerprint` None: the question encoder names no context encoder (a transformers
        DPRQuestionEncoder folder given without --context-encoder), so it matches none. `flags`: those
        of --context-encoder and --swap that the calling command takes, the only ones the error offers."""
        if dim != self.dim:
            raise store.IndexMismatchError(self.path, f"question encoder gives {dim}-d vectors, index holds {self.dim}-d", field="dim")
        if ctx_fingerprint == self.ctx_fingerprint or swap:
            return
        built_by = self.manifest["encoder"].get("path")
        built = f"index was built with context encoder {self.ctx_fingerprint}{f' ({built_by})' if built_by else ''}"
        problem = ("the transformers DPRQuestionEncoder names no context encoder" if ctx_fingerprint is None
                   else f"the question encoder is paired with context encoder {ctx_fingerprint}")
        if "--context-encoder" not in flags:
            fix = "use the question encoder of the pair that built the index"
        elif ctx_fingerprint is None:
            fix = "pass --context-encoder with the DPRContextEncoder folder of its pair (the one that built the index)"
        else:
            fix = "give the question encoder (or --context-encoder) of the pair that built the index"
        if "--swap" in flags:
            fix += ", or --swap to search it anyway"
        raise store.IndexMismatchError(self.path, f"{built}; {problem}: {fix}", field="encoder.ctx_fingerprint")

    @property
    def is_exact(self) -> bool:
        """A Flat index: FAISS compares every stored vector, as a matrix product does."""
        if self.faiss_index is None:
            return self.manifest.get("faiss_factory") == "Flat"
        return isinstance(faiss.downcast_index(self.faiss_index), faiss.IndexFlat)

    def search_on(self, device: str, dtype: str = "float32") -> None:
        """Search by an exact matrix product on a torch `device` from now on, instead of FAISS.

        Only a Flat index is searched so: its top-k is the exact one, which the product computes
        too (rows can swap only where inner products tie to float32 rounding). On a GPU that is
        hundreds of times faster than FAISS on the CPU, where a 16-question batch against a
        million 768-d vectors is a quarter of a second (scripts/bench_gpu.py), longer than the
        bart-large training step it feeds. The vectors take N x D x 4 bytes of device memory, or
        half that with `dtype` "float16" (21M passages: 32 GB instead of 64.5): the product then
        runs in float16, whose scores keep about three significant digits, so each block keeps
        HALF_CANDIDATES x k candidates, and these are ranked by float32 inner products with the
        stored vectors (`tuning.rerank`, a few rows read from the memory map): FAISS's own top-k
        and scores wherever float16 rounding moves no score across the gap between the k-th and
        the (4k)-th.
        """
        import torch  # loads on first use: only this search path needs it

        if dtype not in DEVICE_DTYPES:
            raise ValueError(f"dtype: one of {', '.join(DEVICE_DTYPES)}, got {dtype!r}")
        if not self.is_exact:
            raise InputError(self.path, f"a matrix-product search gives FAISS's results only for a Flat index; this "
                             f"one is {self.manifest.get('faiss_factory')!r}: search it with FAISS (on the CPU)",
                             field="faiss_factory")
        stored, rows = self.scan_vectors(), SEARCH_ROWS
        n = len(stored)
        vectors = torch.empty((n, self.dim), dtype=getattr(torch, dtype), device=device)
        for start in range(0, n, rows):  # from the memory map in blocks: no second copy of all of it in RAM
            block = np.ascontiguousarray(stored[start : start + rows], dtype=dtype)
            vectors[start : start + len(block)] = torch.from_numpy(block).to(device)
        self.device_vectors = vectors

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k rows by inner product: scores (B, K) float32 and rows (B, K) int64."""
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"queries: expected (B, {self.dim}), got {tuple(queries.shape)}")
        q = np.ascontiguousarray(queries, dtype=np.float32)
        if self.device_vectors is not None:
            return self._product_search(q, k)
        if self.faiss_index is None:
            raise RuntimeError(f"{self.path} was opened without its FAISS index: its searches go through index.shared.NodeSearch")
        depth = self.manifest.get("rerank_depth")
        if depth:  # `index tune --rerank-depth`: candidates from the compressed index, ranked exactly
            _, candidates = self.faiss_index.search(q, max(depth, k))
            return rerank(q, self._known_rows(candidates), self.embeddings, k)
        scores, rows = self.faiss_index.search(q, k)
        return scores, self._known_rows(rows)

    def _known_rows(self, rows: np.ndarray) -> np.ndarray:
        """`rows` as FAISS found them, refused where one lies past the passages: an inverted list's
        row number damaged since the build (which only `index verify` reads them all for) would
        otherwise end in an IndexError wherever the row is read."""
        n = len(self.embeddings)
        if (rows >= n).any():
            raise InputError(self.path / FAISS_FILE, f"its search found row {int(rows.max())}, past the index's {n} "
                             "passages: the file is damaged (`lewisrag index verify` names the damage); build the "
                             "index again")
        return rows

    def _product_search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k by matrix products over blocks of SEARCH_ROWS vectors, merged as they come;
        float16 vectors give candidates that float32 products with the stored vectors rank."""
        import torch

        x = self.device_vectors
        half = x.dtype == torch.float16
        depth = HALF_CANDIDATES * k if half else k
        qt = torch.from_numpy(q).to(device=x.device, dtype=x.dtype)
        best_s = torch.full((len(q), 0), float("-inf"), device=x.device)
        best_r = torch.zeros((len(q), 0), dtype=torch.int64, device=x.device)
        with torch.no_grad():
            for start in range(0, len(x), SEARCH_ROWS):
                scores = qt @ x[start : start + SEARCH_ROWS].T  # (B, rows)
                s, r = scores.topk(min(depth, scores.shape[1]), dim=1)
                best_s, order = torch.cat([best_s, s.float()], 1).topk(min(depth, best_s.shape[1] + s.shape[1]), dim=1)
                best_r = torch.cat([best_r, r + start], 1).gather(1, order)
        if half:
            return rerank(q, best_r.cpu().numpy(), self.embeddings, k)
        return best_s.cpu().numpy(), best_r.cpu().numpy()

    def scan_vectors(self) -> np.ndarray:
        """The stored vectors for reading from first row to last (a scan in blocks): a mapping of its
        own with the kernel's default read-ahead, where `embeddings` is mapped for random rows
        (`advise_random`). Both share the page cache."""
        if isinstance(self.embeddings, np.memmap):
            return np.load(self.path / EMBEDDINGS, mmap_mode="r")
        return self.embeddings

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """The stored passage vectors of `rows` (B, K): float32 (B, K, D). A row of -1 (FAISS's "no
        result") is refused: it has no vector, and numpy would read it as the last one."""
        flat = np.asarray(rows).reshape(-1)
        if (flat < 0).any():
            raise ValueError(f"rows: {int((flat < 0).sum())} of them are -1 (no result); they have no stored vector")
        return np.asarray(self.embeddings[flat], dtype=np.float32).reshape(*rows.shape, self.dim)


def write_dense_index(index: DenseIndex, out: str | os.PathLike, encoder: dict | None = None) -> dict:
    """Write `index` (its FAISS index, its vectors as float32, its passages) as an index folder at
    `out`, built beside it and moved in as `build_dense_index` does; `encoder` replaces the
    manifest's. The end-to-end retriever saves its re-encoded index so. Returns the manifest."""
    out = Path(out)
    partial = store.partial_dir(out)
    store.reset_partial(partial)
    np.save(partial / EMBEDDINGS, np.asarray(index.embeddings, dtype=np.float32))
    _write_faiss_atomic(index.faiss_index, partial / FAISS_FILE)
    store.write_passages(partial, index.passages)
    manifest = {k: v for k, v in index.manifest.items() if k != "format"}  # store.finish writes its own
    manifest["build"] = {**manifest.get("build", {}), "vector_dtype": "float32"}  # written as float32 above, whatever the source
    if encoder is not None:
        manifest["encoder"] = encoder
    store.finish(partial, out, manifest)
    return manifest


def _read_faiss(path: Path, mmap: bool):
    """The FAISS index in `path`, memory-mapped when `mmap` and the index type allows it.

    IO_FLAG_MMAP_IFC maps Flat, HNSW and IVF indexes (FAISS 1.15: no private copy, so N processes
    share one in the page cache); IO_FLAG_MMAP, tried next, is accepted by Flat and HNSW but copies
    them into private memory all the same (measured by scripts/bench_scale.py); a type that refuses
    both is read whole.
    """
    tries = [faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY, faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY] if mmap else []
    for flags in tries:
        with contextlib.suppress(RuntimeError):
            return faiss.read_index(str(path), flags)
    return faiss.read_index(str(path))


def check_vector_dtype(path: Path, manifest: dict, dtype: np.dtype) -> None:
    """The stored vectors' type (the .npy header's) against the manifest's `build.vector_dtype`:
    `export` and the reports read what the manifest says, and a file swapped for another index's of
    the same shape would pass every other check a load makes. Indexes built before the field was
    recorded have none and pass."""
    recorded = manifest.get("build", {}).get("vector_dtype")
    if recorded is not None and recorded != np.dtype(dtype).name:
        raise InputError(path / store.MANIFEST, f"says the stored vectors are {recorded}, {EMBEDDINGS} holds "
                         f"{np.dtype(dtype).name}: one of the two is damaged or was replaced; build the index again",
                         field="build.vector_dtype")


def faiss_structure(faiss_index) -> list[str]:
    """What a FAISS index is made of, level by level: each part's type (read_index's names: an OPQ
    matrix reads back as a LinearTransform, a Flat index as IndexFlatIP), transforms' widths, IVF
    lists, HNSW links and code sizes; two indexes of one factory string and width have the same."""
    idx = faiss.downcast_index(faiss_index)
    # a Refine(Flat) the factory makes as IndexRefine reads back as IndexRefineFlat, the same index
    out = ["IndexFlat" if isinstance(idx, faiss.IndexFlat) else "IndexRefine" if isinstance(idx, faiss.IndexRefine)
           else type(idx).__name__]
    if isinstance(idx, faiss.IndexPreTransform):
        for i in range(idx.chain.size()):
            t = faiss.downcast_VectorTransform(idx.chain.at(i))
            name = "LinearTransform" if isinstance(t, faiss.OPQMatrix) else type(t).__name__
            out.append(f"{name}({t.d_in}->{t.d_out})")
        return out + faiss_structure(idx.index)
    if isinstance(idx, faiss.IndexIVF):
        out += [f"{idx.nlist} lists", "quantizer", *faiss_structure(idx.quantizer)]
    if isinstance(idx, faiss.IndexHNSW):
        out += [f"M={idx.hnsw.nb_neighbors(1)}", "storage", *faiss_structure(idx.storage)]
    if getattr(idx, "code_size", None) is not None:
        out.append(f"{idx.code_size}-byte codes")
    return out


def check_faiss_factory(path: Path, manifest: dict, faiss_index) -> str:
    """The FAISS index read from `path` against the manifest's factory string, by their structures
    (`faiss_structure`; the empty index the factory makes takes milliseconds, whatever the corpus):
    `index tune`, `export` and the reports read what the manifest says the index is, and a file
    replaced by another kind's of the same size would pass every other check of its rows. Returns
    what was found, for `index verify`."""
    factory = manifest.get("faiss_factory")
    if factory is None:
        return f"{FAISS_FILE}'s kind not checked: the manifest records no FAISS factory"
    lists = max((int(count) for count in re.findall(r"IVF(\d+)", factory)), default=0)
    if lists > max(manifest["n_passages"], 1):  # FAISS would set aside every list first: 10**9 of them take 48 GB
        raise InputError(path / store.MANIFEST, f"says '{factory}', {lists} inverted lists for {manifest['n_passages']} "
                         "passages, which no build trains: the manifest is damaged or was edited", field="faiss_factory")
    try:
        fresh = faiss.index_factory(int(manifest["dim"]), factory, faiss.METRIC_INNER_PRODUCT)
    except (RuntimeError, MemoryError) as e:
        raise InputError(path / store.MANIFEST, f"'{factory}' is no FAISS factory string FAISS builds "
                         f"({_faiss_reason(e)}): the manifest is damaged or was edited", field="faiss_factory") from None
    want, got = faiss_structure(fresh), faiss_structure(faiss_index)
    if want != got:
        raise InputError(path / store.MANIFEST, f"says '{factory}' ({', '.join(want)}), but {FAISS_FILE} holds "
                         f"{', '.join(got)}: one of the two is damaged or was replaced; build the index again",
                         field="faiss_factory")
    return f"{FAISS_FILE} is the '{factory}' index the manifest says ({', '.join(got)})"


def _reset_if_stale(partial: Path, plan: dict) -> None:
    """Keep a previous build's shards only if they encode the same passages with the same encoder.

    A plan file that cannot be read (a build killed in an older version, a disk that filled up) is
    treated like a different plan: the partial build starts over instead of wedging every rerun.
    """
    plan_file = partial / "plan.json"
    with contextlib.suppress(InputError):
        if plan_file.is_file() and read_json(plan_file) == plan:
            # a killed writer's temporary files would otherwise move into the finished index
            for folder in (partial, partial / "shards"):
                sweep_leftovers(folder)
            return
    store.reset_partial(partial)
    write_json(plan_file, plan)


def _write_faiss_atomic(index, path: Path) -> None:
    with atomic_path(path) as tmp:
        faiss.write_index(index, str(tmp))
