"""`lewisrag index build` for a dense index: settings checked first, passages encoded (or stored
vectors copied) shard by shard into a resumable partial folder, the FAISS index built and moved in."""

from __future__ import annotations

import os
import shutil
import tokenize
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lewisrag.data.io import InputError, atomic_path
from lewisrag.data.outputs import check_out_dir, exclusive
from lewisrag.data.passages import PassageTable
from lewisrag.data.records import Passage
from lewisrag.data.threads import check_device_flag, resolve_device
from lewisrag.index import store
from lewisrag.index.dense.faiss_build import build_faiss, check_factory
from lewisrag.index.dense.files import (DEFAULT_SEARCH_PARAMS, EMBEDDINGS, FAISS_FILE, REFINE_K_FACTOR, _reset_if_stale,
                                        _write_faiss_atomic, is_refine)
from lewisrag.index.dense.spot_check import check_stored_embeddings
from lewisrag.index.encoders import DPRCheckpoint, encode_texts, load_context_encoder

VECTOR_DTYPES = ("float32", "float16")


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
    (`encoders.load_context_encoder`); the manifest records its path, fingerprint, layout, tokenizer
    fingerprint and passage encoding (`encoders.passage_encoding`). A partial build resumes only under
    the same plan: the same passages, weights, tokenizer, passage encoding and settings.

    `on_progress(stage, done, total)` is called after each encoder batch (stage "encode") or, with
    `cfg.reuse_embeddings`, as the stored vectors are copied (stage "copy": not again on a rerun of a
    build killed after its copy, which `_copy_stored` writes whole or not at all), and as the FAISS index
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
    chash, blocks, set_hash = store.build_hashes(passages)
    partial = store.partial_dir(out)
    encoding = {"tokenizer_fingerprint": ckpt.tokenizer_fingerprint, "passage_encoding": ckpt.passage_encoding}
    plan = {"content_hash": chash, "ctx_fingerprint": ckpt.ctx_fingerprint, **encoding, "shard_size": cfg.shard_size,
            "max_length": max_length, "mixed_precision": cfg.mixed_precision, "vector_dtype": cfg.vector_dtype}
    with exclusive(partial):  # a second build into the same folder would share IDX.partial with this one
        _reset_if_stale(partial, {**plan, "embeddings": "reused"} if spot_check else plan)
        try:
            if spot_check:  # a whole copy left by a build of this plan killed after it (in FAISS's training) is kept
                if not _holds_rows(partial / EMBEDDINGS, (len(passages), passages.vector_dim()), cfg.vector_dtype):
                    _copy_stored(passages, partial / EMBEDDINGS, cfg.shard_size, cfg.vector_dtype, on_progress)
            else:
                _encode_into(passages, ckpt, partial, cfg, max_length, on_progress, str(encoder_path))
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
            "passage_set_hash": set_hash,  # the passages in any row order: swap tells one snapshot by it
            "block_hashes": store.block_hashes(blocks),
            "sample_hash": store.sample_hash(passages),
            # tokenizer_fingerprint and passage_encoding: absent in indexes built before they were recorded
            "encoder": {"path": str(Path(encoder_path).resolve()), "ctx_fingerprint": ckpt.ctx_fingerprint,
                        "format": ckpt.meta.get("format", "lewisrag"), **encoding},
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
                 max_length: int, on_progress, encoder: str = "the context encoder") -> None:
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
            check_finite(vecs, chunk, s * shard, encoder)
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


def check_finite(vectors: np.ndarray, passages: Sequence[Passage], first_row: int, encoder: str) -> None:
    """Refuse vectors holding NaN or infinity, whatever the stored dtype: FAISS would index them and
    every search score against them be NaN (a diverged or damaged encoder, or fp16 overflow). The
    error names the encoder and the first such passage by row (1-based, as lines are) and id.

    >>> from lewisrag.data.records import Passage
    >>> check_finite(np.array([[1.0, 2.0], [np.nan, 0.0]], np.float32), [Passage("a", "", "x"), Passage("b", "", "y")], 4, "enc")
    Traceback (most recent call last):
    lewisrag.data.io.InputError: enc: encodes passage row 6 (id 'b') as a vector holding NaN: its weights hold NaN or inf, or the forward pass overflowed (--mixed-precision fp16); no index was written
    """
    bad = ~np.isfinite(vectors)
    if bad.any():
        row, col = (int(x) for x in np.argwhere(bad)[0])
        value = float(vectors[row, col])
        what = "NaN" if np.isnan(value) else "infinity" if value > 0 else "-infinity"
        raise InputError(encoder, f"encodes passage row {first_row + row + 1} (id {passages[row].id!r}) as a vector holding "
                         f"{what}: its weights hold NaN or inf, or the forward pass overflowed "
                         "(--mixed-precision fp16); no index was written")


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
