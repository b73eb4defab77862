"""A loaded dense index (`DenseIndex`): opened with every file checked against the manifest, searched
by FAISS or by an exact matrix product on a torch device, and written back (`write_dense_index`)."""

from __future__ import annotations

import mmap
import os
import tokenize
from collections.abc import Sequence
from pathlib import Path

import faiss
import numpy as np

from lewisrag.data.io import InputError
from lewisrag.data.records import Passage
from lewisrag.index import store
from lewisrag.index.dense.faiss_build import _faiss_reason, build_faiss
from lewisrag.index.dense.files import (DEFAULT_SEARCH_PARAMS, EMBEDDINGS, FAISS_FILE, _read_faiss, _write_faiss_atomic,
                                        check_faiss_factory, check_refine_k_factor, check_vector_dtype, is_refine)
from lewisrag.index.tuning import rerank

COMPRESSED_ONLY = ("search_params", "rerank_depth", "tuning", "refine_k_factor")  # manifest fields that a Flat index has no use for
SEARCH_ROWS = 1 << 22  # vectors per block of a matrix-product search (a 16-question block of scores is 256 MB)
DEVICE_DTYPES = ("float32", "float16")  # how `search_on` may hold the vectors on its device
HALF_CANDIDATES = 4  # a float16 product search keeps this many times k candidates for float32 re-scoring


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
        built_by = store.encoder_path(self.path, self.manifest)
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
            # writable: a float16 store's block is the memory map itself, which torch warns of on every search_on
            block = np.require(stored[start : start + rows], dtype=dtype, requirements=("C", "W"))
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
