"""Check a whole index folder against its manifest: `lewisrag index verify`.

Every load checks what it can afford at any size (`store.load_passages`' sample hash, and
`DenseIndex.load`'s shapes, FAISS structure, vector type and sampled vectors): enough to refuse
another index's files, not one damaged row among 21M. `verify_index` reads everything once, which
takes minutes at Wikipedia scale, for an index copied between machines or kept on a disk that may
have failed:

- every passage against the manifest's content hash, and with the block hashes of indexes built
  since they were recorded, the first block of `store.BLOCK_ROWS` rows that differs (an Arrow
  store's rows validated as `PassageTable` reads them: damaged offsets or UTF-8 are a row named);
- the FAISS index made of what the manifest's factory string makes, and the stored vectors of the
  manifest's vector_dtype, as every load checks them (`dense.check_faiss_factory`, `check_vector_dtype`);
- every stored vector finite (a build refuses NaN and infinity; a file damaged since scores them);
- the FAISS index's trained parameters finite (coarse centroids, PQ codebook, SQ ranges, the
  matrices of OPQ or PCA; `_check_trained`): one NaN among them hides a list from every search or
  fails every search, and no row's check below shows it; and the ranges of SQ codes within the
  values the stored vectors take (`_check_ranges`), which they were trained on: an IVF-SQ index's
  (with an exact coarse quantizer) within those of the vectors' residuals to their lists' centroids;
- the vectors of a FAISS index that keeps them by row (Flat, HNSW) equal to the stored ones, which
  RAG scores documents with; of an IVF index that each row is in one inverted list and, with an
  exact coarse quantizer, that list the one of its nearest centroid as adding chose it
  (`_check_assignment`: a damaged centroid sends searches to the wrong lists); of one that keeps
  codes (PQ, SQ, IVF-Flat, after any OPQ or PCA) that each row's code decodes as close to its
  stored vector as a fresh encoding does (`_check_codes`); of another the size and width; of a
  Refine(...) index, its base index the same way and its refine index too (Flat: equal to the bit;
  SQ, PQ: codes, trained parameters and SQ ranges as above);
- 8 passages spread over the index encoded afresh by its context encoder, where that is found,
  against their stored vectors: vectors copied in from another index of the same size would pass
  every check above;
- a BM25 index's settings (backend, score and word id types) and score arrays (1-D, of floats and
  integers) as every load checks them (`bm25.check_params`, `check_score_arrays`), its document
  count, every score a finite number and its document id one of the
  passages, and 8 passages spread over it each indexed under exactly its own words (`_check_bm25`):
  BM25 files copied in from another index would pass the passages' checks.

The first damage found is an InputError naming the file and the rows; nothing is repaired.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable
from pathlib import Path

import faiss
import numpy as np

from lewisrag.data.io import InputError
from lewisrag.index import store

SCAN_ROWS = 1 << 16  # stored vectors read at a time
MIN_MAX_LENGTH = 8  # the fewest tokens a build encodes a passage in (`dense.check_build_config`)
BM25_SCAN = 1 << 24  # entries of the BM25 score matrix read at a time
CODE_ROWS = 1 << 13  # of those, encoded afresh at a time: 3 float32 copies of 8,192 x 768 are 75 MB
# how much further (in squared distance, as a fraction of the vector's squared norm) a stored code may
# decode from its vector than a fresh encoding does: ten times what rounding can move, under what a
# damaged code byte moves (`_check_codes`)
MARGIN = 1e-4
# how far past the values the stored vectors take (as a fraction of a dimension's span) a scalar
# quantizer's range may reach: their transforms' rounding moves them by under 1e-4 of it, a damaged
# exponent or high mantissa bit by far more (`_check_ranges`)
RANGE_MARGIN = 1e-3


def verify_index(path: str | os.PathLike, on_progress: Callable[[str, int, int], None] | None = None,
                 encoder: str | os.PathLike | None = None) -> dict:
    """Read the index at `path` whole and compare it with its manifest; `on_progress(stage, done,
    total)` for the stages "passages" and "vectors". A dense index's context encoder
    (`encoder`, else the one its manifest records, where it is found) encodes a few passages afresh
    to show the stored vectors are theirs. Returns what was checked: {"index", "kind",
    "n_passages", "checks": [{"check", "result"}]}; raises InputError at the first damage."""
    from lewisrag.index.bm25 import BM25Index
    from lewisrag.index.dense import DenseIndex, check_faiss_factory

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
        factory = check_faiss_factory(index.path, index.manifest, index.faiss_index)  # as the load did: its result line
        checks.append(_check_encoding(index, encoder))
    checks.append(_check_passages(path, index.passages, manifest, on_progress))
    if manifest["kind"] == "dense":
        checks += _check_vectors(index, on_progress)
        checks[-1]["result"] = f"{factory}; {checks[-1]['result']}"  # the "faiss" check: what FAISS holds, and how
    else:  # the BM25 files index the passages just checked (one check with them: what a BM25 index holds of them)
        checks[-1]["result"] += f"; {_check_bm25(index)}"

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
    """Every stored vector finite and, in one pass over embeddings.npy (32 GB of float16 at 21M),
    where the FAISS index keeps its vectors by row (Flat, HNSW) equal to FAISS's own, where it
    keeps codes that `_open_codes` decodes each row's code as close to its vector as a fresh
    encoding, and where an IVF index's coarse quantizer is exact each row in the list of its
    nearest centroid (`_check_assignment`); of another FAISS index the size and width
    (`DenseIndex.load`). A Refine(...) index's base index is checked the same way, and its refine index's
    vectors (Flat, to the bit) or codes (SQ, PQ) too (`_refine_parts`). First the FAISS index's
    trained parameters (`_check_trained`) and an IVF index's row numbers (`_check_lists`), as the
    codes are found through them."""
    from lewisrag.index.dense import EMBEDDINGS, FAISS_FILE, _transforms

    # a Refine(...) index: its base index checked as an index without the refine stage, then the refine index
    flat, refine = _refine_parts(index.faiss_index)
    trained = _check_trained(index)
    by_row = isinstance(flat, faiss.IndexFlat | faiss.IndexHNSWFlat)  # whose vectors read back by row, as added
    lists = None if by_row else _check_lists(index)  # each row's inverted list; None: not an IVF index
    codes, why = (None, "") if by_row else _open_codes(flat)
    assign, unassigned = (None, "") if lists is None else _open_assignment(index.faiss_index, lists)
    transforms = _transforms(flat)  # OPQ, PCA: codes and coarse centroids are in their output space
    ranges = None if by_row else _open_ranges(flat)
    if ranges is not None and ranges.residual and assign is None:  # the centroids adding chose are not known
        ranges = None
    # the refine index holds every vector again (Flat: as added, so equal to the bit; SQfp16, PQ: codes) and
    # ranks the base index's candidates: damaged, it sends every search's answers astray unseen by the base's checks
    refined, refine_why = (None, "") if refine is None else _open_codes(refine)
    refine_ranges = None if refine is None else _open_ranges(refine)
    refine_transforms = [] if refine is None else _transforms(refine)
    vectors = index.scan_vectors()
    n = len(vectors)
    try:
        for start in range(0, n, SCAN_ROWS):
            stop = min(n, start + SCAN_ROWS)
            block = np.asarray(vectors[start:stop], dtype=np.float32)
            finite = np.isfinite(block).all(axis=1)
            if not finite.all():
                row = start + int(np.argmin(finite))
                raise InputError(index.path / EMBEDDINGS, f"row {row} (0-based; passage {index.passages[row].id!r}) "
                                 "holds NaN or infinity: the index is damaged; build it again")
            if by_row:  # added from the stored vectors as float32 (`dense.build_faiss`), so equal to the bit
                differs = (flat.reconstruct_n(start, stop - start) != block).any(axis=1)
                if differs.any():
                    row = start + int(np.argmax(differs))
                    raise InputError(index.path / FAISS_FILE, f"row {row} (0-based) differs from {EMBEDDINGS}'s vector: "
                                     "one of the two files is damaged; build the index again")
            elif codes is not None or assign is not None or ranges is not None:
                for at in range(0, len(block), CODE_ROWS):  # transformed once for every check
                    x = _apply(transforms, block[at : at + CODE_ROWS])  # (b, D')
                    if codes is not None:
                        _check_codes(index, codes, start + at, x)
                    if assign is not None:
                        _check_assignment(index, assign, start + at, x)
                    if ranges is not None:  # an IVF-SQ's ranges are of residuals to the row's list's centroid
                        ranges.see(x - assign.centroids[assign.lists[start + at : start + at + len(x)]]
                                   if ranges.residual else x)
            if refined is not None or refine_ranges is not None:
                for at in range(0, len(block), CODE_ROWS):
                    x = _apply(refine_transforms, block[at : at + CODE_ROWS])
                    if refined is not None:
                        _check_codes(index, refined, start + at, x, REFINE)
                    if refine_ranges is not None:
                        refine_ranges.see(x)
            if on_progress:
                on_progress("vectors", stop, n)
    finally:
        if codes is not None:
            codes.close()
        if refined is not None:
            refined.close()
    if ranges is not None and n:
        _check_ranges(index, ranges)
    if refine_ranges is not None and n:
        _check_ranges(index, refine_ranges, "its refine index's")
    factory = index.manifest.get("faiss_factory")
    if by_row:
        held = (f"its base index's ({type(flat).__name__}) {n} vectors equal the stored ones" if refine is not None
                else f"the '{factory}' index's {n} vectors equal the stored ones")
    else:
        held = f"{flat.ntotal} vectors of {flat.d} as the manifest says"
        if refine is not None:
            held = f"its base index ({type(flat).__name__}): {held}"
        if lists is not None:
            held += ", each row in one inverted list"
        if assign is not None:
            held += " of its nearest centroid"
        elif lists is not None:
            held += f" (whether the list of its nearest centroid is not checked: {unassigned})"
        if codes is None:
            who = "it" if refine is not None else f"'{factory}'"
            held += (f"; {who} holds them as codes or in inverted lists, not by row, so they are not compared with "
                     f"the stored ones ({why})")
        elif codes.exact:
            held += "; each equal to its stored vector"
        else:
            space = " after its transforms" if codes.transforms else ""
            held += (f"; each row's stored code decodes{space} as close to its stored vector as a fresh encoding does "
                     f"(squared distance within {MARGIN:g} of the vector's squared norm)")
    if trained:
        names = trained[0] if len(trained) == 1 else f"{', '.join(trained[:-1])} and {trained[-1]}"
        held += f"; its {names} finite"
    if ranges is not None and n:
        held += f", the SQ ranges within the values the stored vectors{RESIDUALS if ranges.residual else ''} take"
    if refine is not None:
        name = type(refine).__name__
        if refined is None:
            held += f"; its refine index ({name}) not compared with the stored vectors ({refine_why})"
        elif refined.exact:
            held += f"; its refine index's ({name}) {n} vectors equal the stored ones"
        else:
            held += (f"; its refine index's ({name}) codes each decode as close to their stored vector as a fresh "
                     f"encoding does (squared distance within {MARGIN:g} of the vector's squared norm)")
        if refine_ranges is not None and n:
            held += ", its SQ ranges within the values the stored vectors take"
    if graphs := _check_links(index, flat):
        held += f"; {graphs}"
    return [{"check": "vectors", "result": f"all {n} stored vectors ({vectors.dtype}) finite"},
            {"check": "faiss", "result": held}]


def _check_links(index, flat) -> str:
    """The HNSW graphs of `flat` (the index, under its pre-transforms; or an IVF's coarse quantizer): for
    `store.SAMPLE_ROWS` nodes spread over each, the level-0 links name no node twice and not the node
    itself, and a graph of two nodes or more gives each one some. FAISS's read checks only that a link is
    in range: every link set to row 0 loaded and searched, recall@5 0.003. What it checked, or ''."""
    from lewisrag.index.dense import FAISS_FILE

    inner = faiss.downcast_index(flat.index) if isinstance(flat, faiss.IndexPreTransform) else flat
    graphs = [("its", inner)] if isinstance(inner, faiss.IndexHNSW) else []
    with contextlib.suppress(RuntimeError):  # not an IVF index
        quantizer = faiss.downcast_index(faiss.extract_index_ivf(inner).quantizer)
        if isinstance(quantizer, faiss.IndexHNSW):
            graphs.append(("its coarse quantizer's", quantizer))
    for whose, graph in graphs:
        hnsw = graph.hnsw
        # views of FAISS's arrays, not copies (the links of 21M nodes are gigabytes); `graph` owns them
        neighbors = faiss.rev_swig_ptr(hnsw.neighbors.data(), hnsw.neighbors.size())
        offsets = faiss.rev_swig_ptr(hnsw.offsets.data(), hnsw.offsets.size())
        level0 = hnsw.cum_nneighbor_per_level.at(1)  # the slots of a node's level-0 links, after its offset
        for node in store.sample_rows(graph.ntotal):
            start = int(offsets[node])
            links = [int(x) for x in neighbors[start : start + level0] if x >= 0]
            if node in links or len(set(links)) < len(links) or (not links and graph.ntotal > 1):
                raise InputError(index.path / FAISS_FILE, f"{whose} HNSW graph links row {node} (0-based) to itself, to "
                                 "one node twice or to none: the file is damaged; build the index again")
    return "; ".join(f"{whose} HNSW links of {len(store.sample_rows(g.ntotal))} sampled rows whole" for whose, g in graphs)


def _apply(transforms: list, x: np.ndarray) -> np.ndarray:
    """`x` (b, D) float32 through the index's pre-transforms (OPQ, PCA), as adding applied them."""
    for t in transforms:
        x = t.apply(x)
    return np.ascontiguousarray(x, dtype=np.float32)


REFINE = " of its refine index"  # where a refine index's row is named (`_check_codes`)


def _refine_parts(faiss_index) -> tuple:
    """(base, refine): a Refine(...) index's base index, which searches, and refine index, which holds
    every vector again and ranks the base's candidates (IndexRefine, IndexRefineFlat), each checked as
    an index of its own; (the index, None) for another. Both borrow from `faiss_index`."""
    outer = faiss.downcast_index(faiss_index)
    if isinstance(outer, faiss.IndexRefine):
        return faiss.downcast_index(outer.base_index), faiss.downcast_index(outer.refine_index)
    return outer, None


def _check_trained(index) -> list[str]:
    """Every trained parameter of the FAISS index a finite number: its pre-transforms' matrices and
    bias (OPQ, PCA, random rotation, ITQ), an IVF index's coarse centroids, a PQ codebook, SQ ranges
    and additive-quantizer codebooks; kilobytes to tens of megabytes, read in moments. Built from
    the stored vectors, which a build requires finite, none holds NaN or infinity; damaged, they
    spoil what no row's check shows: a NaN in SQ8's ranges fails every search, and one in a coarse
    centroid hides its list from every search (a NaN inner product is never among the nearest),
    while each row's code still decodes as close to its vector as a fresh encoding. Returns the
    names of what was checked, for the result line; the first damage is an InputError."""
    from lewisrag.index.dense import FAISS_FILE

    checked: list[str] = []

    def require(name: str, values: np.ndarray, where: Callable[[int], str]) -> None:
        finite = np.isfinite(values)
        if not finite.all():
            raise InputError(index.path / FAISS_FILE, f"{where(int(np.argmin(finite)))} holds NaN or infinity: the "
                             "file is damaged; build the index again")
        if name not in checked:
            checked.append(name)

    def transform(t, what: str) -> None:
        for attr, label in (("A", "matrix"), ("b", "bias"), ("mean", "mean")):
            if hasattr(t, attr):
                values = faiss.vector_to_array(getattr(t, attr))
                require("pre-transform matrices", values,
                        lambda i, label=label: f"{what}'s {label} (value {i}, 0-based)")
        if hasattr(t, "pca_then_itq"):  # ITQ: a mean, then this linear map
            transform(t.pca_then_itq, what)

    def part(outer, its: str, name: str) -> None:  # `index.faiss_index` owns every part read here
        inner = outer
        if isinstance(outer, faiss.IndexPreTransform):
            for i in range(outer.chain.size()):
                t = faiss.downcast_VectorTransform(outer.chain.at(i))
                transform(t, f"{its} pre-transform {i + 1} ({type(t).__name__})")
            inner = faiss.downcast_index(outer.index)
        if isinstance(inner, faiss.IndexHNSW):
            inner = faiss.downcast_index(inner.storage)
        if isinstance(inner, faiss.IndexIVF):
            quantizer = faiss.downcast_index(inner.quantizer)
            if quantizer.ntotal != inner.nlist:
                raise InputError(index.path / FAISS_FILE, f"{its} coarse quantizer holds {quantizer.ntotal} centroids "
                                 f"for {inner.nlist} inverted lists: the file is damaged; build the index again")
            try:
                centroids = quantizer.reconstruct_n(0, inner.nlist)
            except RuntimeError:  # a quantizer that cannot give its vectors back (none lewisrag builds): left out
                centroids = None
            if centroids is not None:
                d = quantizer.d
                require(f"{name}coarse centroids", centroids.ravel(),
                        lambda i: f"{'the' if its == 'its' else its} coarse centroid of inverted list {i // d}")
        pq = getattr(inner, "pq", None)
        if pq is not None:  # (M, ksub, dsub)
            ksub, dsub = pq.ksub, pq.dsub
            require(f"{name}PQ codebook", faiss.vector_to_array(pq.centroids),
                    lambda i: f"{its} product quantizer's centroid {i // dsub % ksub} of sub-vector {i // (ksub * dsub)}")
        sq = getattr(inner, "sq", None)
        if sq is not None:
            require(f"{name}SQ ranges", faiss.vector_to_array(sq.trained),
                    lambda i: f"{its} scalar quantizer's ranges (value {i}, 0-based)")
        aq = getattr(inner, "aq", None)
        if aq is not None:
            require(f"{name}additive-quantizer codebooks", faiss.vector_to_array(aq.codebooks),
                    lambda i: f"{its} additive quantizer's codebooks (value {i}, 0-based)")

    base, refine = _refine_parts(index.faiss_index)  # a Refine(...) index: both parts' (the refine's: SQ ranges, PQ)
    part(base, "its", "")
    if refine is not None:
        part(refine, "its refine index's", "refine index's ")
    return checked


RESIDUALS = "' residuals to their lists' centroids"  # what an IVF-SQ index's ranges are of (by_residual)


class _Ranges:
    """A scalar quantizer's trained ranges, (D',) each end, beside the least and greatest value each
    dimension of the stored vectors takes (after the index's transforms; with `residual`, an IVF
    index's, less the centroid of the row's list) as the pass sees them."""

    def __init__(self, lo: np.ndarray, hi: np.ndarray, uniform: bool, residual: bool = False):
        self.lo, self.hi, self.uniform = lo, hi, uniform  # uniform: one range for every dimension
        self.residual = residual  # of residuals to the coarse centroids (IVF-SQ by_residual)
        self.seen_lo = np.full(len(lo), np.inf, np.float32)
        self.seen_hi = np.full(len(lo), -np.inf, np.float32)

    def see(self, x: np.ndarray) -> None:
        if len(x):
            np.minimum(self.seen_lo, x.min(axis=0), out=self.seen_lo)
            np.maximum(self.seen_hi, x.max(axis=0), out=self.seen_hi)


def _open_ranges(faiss_index) -> _Ranges | None:
    """The ranges of a scalar quantizer (SQ8, HNSW32,SQ8, PCA64,SQ8, IVF256,SQ8) that took them from
    the least and greatest values of its training vectors (FAISS's RS_minmax, which every SQ factory
    string trains with), or None. An IVF index's are `residual` where it encodes residuals to its
    lists' centroids (by_residual, as the factory makes it): trained on the training vectors' residuals
    to the centroids its coarse quantizer assigned them, which `_check_vectors` checks only where that
    quantizer is exact (an approximate one may have chosen otherwise when adding)."""
    outer = faiss.downcast_index(faiss_index)
    inner = faiss.downcast_index(outer.index) if isinstance(outer, faiss.IndexPreTransform) else outer
    if isinstance(inner, faiss.IndexHNSW):
        inner = faiss.downcast_index(inner.storage)
    if type(inner) not in (faiss.IndexScalarQuantizer, faiss.IndexIVFScalarQuantizer):
        return None
    residual = type(inner) is faiss.IndexIVFScalarQuantizer and bool(inner.by_residual)
    sq, d = inner.sq, inner.d
    if sq.rangestat != faiss.ScalarQuantizer.RS_minmax or sq.rangestat_arg != 0:
        return None
    trained = faiss.vector_to_array(sq.trained)
    per_dim = sq.qtype in (faiss.ScalarQuantizer.QT_8bit, faiss.ScalarQuantizer.QT_4bit, faiss.ScalarQuantizer.QT_6bit)
    uniform = sq.qtype in (faiss.ScalarQuantizer.QT_8bit_uniform, faiss.ScalarQuantizer.QT_4bit_uniform)
    if not (per_dim and len(trained) == 2 * d or uniform and len(trained) == 2):
        return None  # fp16, bf16, direct codes: no range (and a damaged length: the load's size checks)
    lo, diff = (trained[:d], trained[d:]) if per_dim else (np.full(d, trained[0]), np.full(d, trained[1]))
    return _Ranges(lo.astype(np.float64), lo.astype(np.float64) + diff, uniform, residual)


def _check_ranges(index, ranges: _Ranges, its: str = "its") -> None:
    """The scalar quantizer's ranges within the values the stored vectors take. Trained on a sample
    of them, each range runs from the least to the greatest value its dimension takes there
    (`_open_ranges`), so inside what all of them take, up to the rounding of their transforms
    (OPQ, PCA) in batches of another size: RANGE_MARGIN of the span allows it. A range damaged to a
    finite value far outside (an exponent bit: -3.42 to -6.3e19) decodes every code and its fresh
    encoding equally far off, which `_check_codes` cannot tell apart, while every search scores
    every row by it (HNSW16,SQ8: recall@5 0.95 to 0)."""
    from lewisrag.index.dense import FAISS_FILE

    seen_lo, seen_hi = ranges.seen_lo.astype(np.float64), ranges.seen_hi.astype(np.float64)
    if ranges.uniform:
        seen_lo, seen_hi = np.full_like(seen_lo, seen_lo.min()), np.full_like(seen_hi, seen_hi.max())
    slack = RANGE_MARGIN * (seen_hi - seen_lo) + 1e-30
    bad = ~((ranges.lo >= seen_lo - slack) & (ranges.hi <= seen_hi + slack))
    if bad.any():
        i = int(np.argmax(bad))
        which = "range" if ranges.uniform else f"range of dimension {i}"
        raise InputError(index.path / FAISS_FILE, f"{its} scalar quantizer's {which}, {ranges.lo[i]:.6g} to "
                         f"{ranges.hi[i]:.6g}, reaches past the values the stored vectors"
                         f"{RESIDUALS if ranges.residual else ''} take there ({seen_lo[i]:.6g} to "
                         f"{seen_hi[i]:.6g}), from a sample of which it was trained: the file is damaged; build the index "
                         "again")


class _Codes:
    """The codes of a FAISS index, row by row: each row's stored code decoded, and its stored vector
    encoded and decoded afresh the same way (in the same inverted list), both after the index's
    transforms (OPQ, PCA), in whose output space the codes are (`_apply`)."""

    def __init__(self, transforms: list, codes, lo: np.ndarray | None, exact: bool, restore: Callable[[], None]):
        self.transforms = transforms  # applied to a vector before it is encoded
        self.codes = codes  # the FAISS index holding the codes: an IVF index, or codes by row (PQ, SQ; an HNSW's storage)
        self.lo = lo  # an IVF index's direct map: row -> list << 32 | offset; None for codes by row
        self.exact = exact  # raw float32 vectors not transformed (IVF-Flat): equal to the bit, as Flat's
        self.restore = restore  # puts back the direct map the index had before this check

    def close(self) -> None:
        self.restore()

    def stored(self, first: int, count: int) -> np.ndarray:
        """Rows first..first+count-1 decoded from their stored codes: (count, D') float32."""
        if self.lo is None:
            return self.codes.reconstruct_n(first, count)
        return self.codes.reconstruct_batch(np.arange(first, first + count, dtype=np.int64))

    def fresh(self, first: int, x: np.ndarray) -> np.ndarray:
        """`x`, rows first.., transformed, encoded and decoded: in each row's stored inverted list,
        not the one the coarse quantizer picks now, which may differ where two centroids tie or an
        HNSW quantizer searched approximately when adding; a code damaged into another list's
        content still decodes far from its vector there."""
        if self.lo is None:
            return self.codes.sa_decode(self.codes.sa_encode(x))
        lists = np.ascontiguousarray(self.lo[first : first + len(x)] >> 32)
        out = np.empty((len(x), self.codes.sa_code_size()), np.uint8)  # each code led by its list number
        self.codes.encode_vectors(len(x), faiss.swig_ptr(x), faiss.swig_ptr(lists), faiss.swig_ptr(out), True)
        return self.codes.sa_decode(out)


def _open_codes(faiss_index) -> tuple[_Codes | None, str]:
    """Each row's code of `faiss_index` and a fresh encoding to compare it with, or None and why not.

    Only codes whose encoding is each component's nearest value on its own (PQ's sub-vectors, SQ's
    dimensions, raw floats): a fresh encoding is then the build's but where rounding breaks a tie
    differently, which moves the error by rounding only. Codes found by a search (residual and
    additive quantizers, RaBitQ) can legitimately land elsewhere and are left out. An IVF index's
    rows are found through a direct map of 8 bytes a row (168 MB at 21M), made here on the loaded
    copy, never written back, and given back by `close`; its codes stay in the mapped file and are
    decoded a block at a time.
    """
    from lewisrag.index.dense import _faiss_reason

    outer = faiss.downcast_index(faiss_index)
    transforms, inner = [], outer
    if isinstance(outer, faiss.IndexPreTransform):
        transforms = [faiss.downcast_VectorTransform(outer.chain.at(i)) for i in range(outer.chain.size())]
        inner = faiss.downcast_index(outer.index)
    if isinstance(inner, faiss.IndexHNSW):
        inner = faiss.downcast_index(inner.storage)
    ivf_kinds = (faiss.IndexIVFPQ, faiss.IndexIVFPQFastScan, faiss.IndexIVFScalarQuantizer, faiss.IndexIVFFlat)
    by_row_kinds = (faiss.IndexPQ, faiss.IndexPQFastScan, faiss.IndexScalarQuantizer, faiss.IndexFlat, faiss.IndexFlatIP)
    if type(inner) not in ivf_kinds + by_row_kinds:  # exact types: IndexIVFPQR and others add a second code
        return None, (f"this check decodes PQ, SQ and Flat codes, whose fresh encoding is the build's up to rounding; "
                      f"{type(inner).__name__} is none of them")
    exact = not transforms and type(inner) in (faiss.IndexIVFFlat, faiss.IndexFlat, faiss.IndexFlatIP)
    lo, restore = None, _as_it_was
    if type(inner) in ivf_kinds:
        if isinstance(inner, faiss.IndexIVFFastScan) and inner.fine_quantizer is None:
            # FAISS 1.15's read_index leaves it unset, and decoding then dereferences it (a segfault);
            # a built index points it at its own product quantizer
            inner.fine_quantizer = inner.pq
        # put back as it was (NoMap, as every index lewisrag builds has): frees the map made here
        restore = functools.partial(inner.set_direct_map_type, inner.direct_map.type)
        inner.set_direct_map_type(faiss.DirectMap.Array)
        lo = faiss.rev_swig_ptr(inner.direct_map.array.data(), inner.ntotal)  # (N,) a view of the map
    codes = _Codes(transforms, inner, lo, exact, restore)
    try:  # one row through both ways: a type whose decoding FAISS lacks says so here, before the pass
        if inner.ntotal:
            codes.fresh(0, codes.stored(0, 1))
    except RuntimeError as e:
        restore()
        return None, f"FAISS cannot decode its codes: {_faiss_reason(e)}"
    return codes, ""


def _as_it_was() -> None:
    """`_Codes.restore` of an index this check changed nothing in."""


def _check_codes(index, codes: _Codes, first: int, x: np.ndarray, part: str = "") -> None:
    """Rows first.. of `x` (b, D'), their stored vectors after the index's transforms, against
    their stored codes (`part`: REFINE for a Refine(...) index's refine index, named in the error).

    A row is damage when its stored code decodes further from its vector (squared distance) than a
    fresh encoding does by more than MARGIN times the vector's squared norm, or not to a number
    (NaN compares false both ways, so the test is that it is within, not that it is past). The
    encodings compared (`_open_codes`) take each component's nearest value on its own, so a fresh
    code differs from the build's only where float32 rounding (BLAS on a batch of another size, the
    OPQ product) broke a near tie the other way, and its error then differs by that rounding: about
    1e-7 relative per term of a sub-vector's distances, under 1e-5 of the norm². Measured: not one
    of 70,000 rows' codes differed at all (PQ, OPQ+PQ, fast-scan, SQ, PCA+SQ; float32 and float16
    stored). A damaged PQ byte points a sub-vector at another centroid: of 300 random byte damages
    each, all moved the error by more than MARGIN in IVF4,PQ8 (d=64), IVF256,PQ16 (d=128) and
    OPQ64_256,IVF64,PQ64 (d=768; 98% by more than 1e-3), and all but the 0.3% that fell on block
    padding in IVF64,PQ64x4fs. An SQ8 byte moves one dimension, by as little as one quantization
    step: 92% of them moved it by more than MARGIN at d=768 (69% by 1e-3), 97% at d=128. Raw floats
    (IVF-Flat) compare to the bit.

    Speed on 2 cores, float16 stored: 200,000 rows of IVF256,PQ16 at d=128 checked at 440,000 rows/s
    where FAISS adds them at 500,000; OPQ64_256,IVF256,PQ64 at d=768, 116,000 rows/s against
    150,000 (about 3 minutes at 21M, extrapolated). Measured before `_check_assignment` was added,
    which with an exact coarse quantizer costs what adding's search for each row's list did.
    """
    from lewisrag.index.dense import EMBEDDINGS, FAISS_FILE

    stored = codes.stored(first, len(x))
    if codes.exact:
        bad = (stored != x).any(axis=1)
    else:
        err, fresh, norm2 = _norm2(stored - x), _norm2(codes.fresh(first, x) - x), _norm2(x)
        bad = ~(err <= fresh + MARGIN * norm2)  # NaN: a code that decodes to no number is damage too
    if bad.any():
        i = int(np.argmax(bad))
        how = "" if codes.exact else (f": its code decodes {err[i] / max(norm2[i], 1e-30):.3g} of the vector's squared "
                                      f"norm away, a fresh encoding {fresh[i] / max(norm2[i], 1e-30):.3g}")
        raise InputError(index.path / FAISS_FILE, f"row {first + i} (0-based){part} differs from {EMBEDDINGS}'s vector"
                         f"{how}: one of the two files is damaged; build the index again")


def _norm2(a: np.ndarray) -> np.ndarray:
    """Squared norms of the rows of (B, D) float32 `a`, summed in float64: a float32 sum of 768
    terms may round by up to 5e-5 of itself, half of MARGIN."""
    return np.einsum("ij,ij->i", a, a, dtype=np.float64)


class _Assignment:
    """An IVF index's exact coarse quantizer, its centroids and each row's inverted list."""

    def __init__(self, quantizer, centroids: np.ndarray, lists: np.ndarray):
        self.quantizer = quantizer  # IndexFlat by inner product: as adding searched it
        self.centroids = centroids  # (nlist, D') float32
        self.norms = np.sqrt(_norm2(centroids))  # (nlist,)
        self.lists = lists  # (N,) the list each row is filed in (`_check_lists`)


def _open_assignment(faiss_index, lists: np.ndarray) -> tuple[_Assignment | None, str]:
    """The IVF index's coarse quantizer, where adding found each row's list by exact search (a Flat
    quantizer), or None and why not: an HNSW quantizer's search when adding was approximate, and a
    row may sit, as built, in a list whose centroid is not its nearest."""
    from lewisrag.index.dense import _ivf_or_none

    ivf = _ivf_or_none(faiss_index)
    quantizer = faiss.downcast_index(ivf.quantizer)
    if not isinstance(quantizer, faiss.IndexFlat) or quantizer.metric_type != faiss.METRIC_INNER_PRODUCT:
        return None, (f"its coarse quantizer, {type(quantizer).__name__}, is not an exact inner-product search, so "
                      "adding may have filed a row in a list whose centroid is not its nearest")
    return _Assignment(quantizer, quantizer.reconstruct_n(0, quantizer.ntotal), lists), ""


def _check_assignment(index, assign: _Assignment, first: int, x: np.ndarray) -> None:
    """Rows first.. of `x` (b, D'), their stored vectors after the index's transforms, each filed in
    the inverted list of its nearest centroid: the one of the largest inner product, which adding
    chose by the same exact search (`_open_assignment`). A coarse centroid damaged to another finite
    value (a flipped exponent bit) leaves IVF-Flat's vectors as they were, and moves an IVF-PQ or
    IVF-SQ row's decoding (centroid plus residual) by as much as the centroid moved, which
    `_check_codes` sees only where that is large; searches rank the lists by it: rows filed under it
    stop being found, or its list draws searches meant for others (IVF16,Flat: recall@5 0.938 to
    0.663 with 4 of 60 random bit flips in its centroids, each of which passed every other check).

    A row is damage when its list's centroid's inner product with it falls short of the best
    centroid's by more than max(MARGIN, 4·D'·2^-24) times the vector's norm times the larger of the
    two centroids' norms, or is no number. The search here and adding's both compute float32 inner
    products of D' terms, each rounding by at most D'·2^-24 of |x|·|c| (5e-5 at 768; in practice
    about sqrt(D')·2^-24, 2e-6), on vectors read the same way (float16 stored widened to float32)
    and transformed in batches of another size (rounding only, as small): adding's two products,
    this search's and the transform's together stay within that, so a tie, which adding may have
    broken either way, passes either way. One small product a row, the search adding made (nlist ×
    D' multiply-adds), so the pass over the rows goes at about the speed adding went: measured on 2
    cores shared with other work (load 4), 200,000 float16 rows at d=128, IVF256,PQ16 checked at
    48,000-66,000 rows/s with this check and 69,000-70,000 without (adding 80,000-85,000), and
    IVF4096,PQ16 at 19,000 with it and 105,000 without (adding 20,500). An HNSW coarse quantizer,
    which the largest indexes use, is not checked so (`_open_assignment`) and costs nothing here.
    """
    from lewisrag.index.dense import FAISS_FILE

    filed = assign.lists[first : first + len(x)]
    best, nearest = assign.quantizer.search(x, 1)
    best, nearest = best[:, 0].astype(np.float64), nearest[:, 0]
    own = np.einsum("ij,ij->i", x, assign.centroids[filed], dtype=np.float64)
    rounding = max(MARGIN, 4 * x.shape[1] * 2.0**-24)  # of |x|·|c|: see above
    slack = rounding * np.sqrt(_norm2(x)) * np.maximum(assign.norms[filed], assign.norms[nearest])
    bad = ~(best - own <= slack)
    if bad.any():
        i = int(np.argmax(bad))
        raise InputError(index.path / FAISS_FILE, f"row {first + i} (0-based) is filed in inverted list {int(filed[i])}, "
                         f"whose centroid's inner product with its vector is {own[i]:.6g}, list {int(nearest[i])}'s "
                         f"{best[i]:.6g}: adding files a row under its nearest centroid, so the coarse centroids or the "
                         "lists are damaged; build the index again")


def _check_lists(index) -> np.ndarray | None:
    """Every row in exactly one inverted list of an IVF index: a row number damaged past the
    passages fails every search that reaches it, and one damaged into another row's hides that row
    from every search. Returns the list each row is in, (N,) int32 (84 MB at 21M), for
    `_check_assignment`; None for an index that is not IVF."""
    from lewisrag.index.dense import FAISS_FILE, _ivf_or_none

    ivf = _ivf_or_none(index.faiss_index)
    if ivf is None:
        return None
    n, lists, total = ivf.ntotal, ivf.invlists, 0
    where = np.full(n, -1, np.int32)
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
        where[ids] = k
        total += size
    if (where < 0).any():  # a row damaged into another's, say
        raise InputError(index.path / FAISS_FILE, f"row {int(np.argmax(where < 0))} (0-based) is in no inverted list: no "
                         "search finds it; the file is damaged: build the index again")
    if total != n:
        raise InputError(index.path / FAISS_FILE, f"its inverted lists hold {total} rows, the index {n}: a row is listed "
                         "twice; the file is damaged: build the index again")
    return where


def _check_encoding(index, encoder: str | os.PathLike | None) -> dict:
    """The stored vectors of `dense.spot_check_rows` against fresh encodings by the index's context
    encoder: what no hash can show (vectors and FAISS index copied in from another index of the
    same size and width would pass every check above)."""
    from lewisrag.index.dense import EMBEDDINGS, MIN_COSINE, compare_encodings, spot_check_rows
    from lewisrag.index.encoders import load_context_encoder, set_passage_encoding

    recorded = store.encoder_path(index.path, index.manifest)
    if encoder is None and not (recorded and Path(recorded).exists()):
        return {"check": "encoding", "result": f"not checked: the encoder that built the index ({recorded}) is not found "
                "here; pass --encoder to check that the stored vectors encode their passages"}
    where = encoder if encoder is not None else recorded
    if encoder is not None and not Path(encoder).exists():
        raise InputError(encoder, "not found", field="--encoder")
    ckpt = load_context_encoder(where)
    # encoded afresh as the build encoded them: an index built before its manifest recorded the passage
    # encoding was built in lewisrag's "pair", whatever the encoder's folder says now
    set_passage_encoding(ckpt.tokenizer, index.manifest["encoder"].get("passage_encoding", "pair"), where)
    if ckpt.ctx_fingerprint != index.ctx_fingerprint:
        raise InputError(where, f"is not the context encoder that built {index.path} (weights' fingerprint "
                         f"{ckpt.ctx_fingerprint[:12]}, the index's {index.ctx_fingerprint[:12]}): changed since, or another; "
                         "give the one that built it", field="--encoder" if encoder is not None else "encoder.path")
    build = index.manifest.get("build", {})
    length = int(build.get("max_length") or ckpt.meta.get("max_length", 256))
    if length < MIN_MAX_LENGTH:  # a build refuses it (`dense.DenseBuildConfig`); the tokenizer would raise
        raise InputError(index.path / store.MANIFEST, f"says passages were encoded at {length} tokens; a build encodes "
                         f"at least {MIN_MAX_LENGTH}: the manifest is damaged or was edited", field="build.max_length")
    rows = spot_check_rows(len(index.passages))
    passages = [index.passages[r] for r in rows]
    try:
        cosine, ratio, bad = compare_encodings(passages, index.vectors(np.array(rows)), ckpt, length,
                                               build.get("mixed_precision", "no"))
    except Exception as e:  # the tokenizers library raises a bare Exception when a title fills the length
        if "Truncation error" not in str(e):
            raise
        raise InputError(index.path / store.MANIFEST, f"says passages were encoded at {length} tokens, too few for "
                         "the titles of passages it holds (which a build never cuts): the manifest is damaged or was "
                         "edited", field="build.max_length") from None
    if bad is not None:
        raise InputError(index.path / EMBEDDINGS, f"row {rows[bad]} (0-based; passage {passages[bad].id!r}) is not its "
                         f"passage's vector: cosine {cosine[bad]:.3f} and {ratio[bad]:.2f}x the length of a fresh "
                         f"encoding by {where} (cosine >= {MIN_COSINE} needed); the index is damaged: build it again")
    return {"check": "encoding", "result": f"{len(rows)} passages spread over the index encoded afresh by {where}: "
            f"cosine >= {float(cosine.min()):.4f} with their stored vectors"}


def _check_bm25(index) -> str:
    """The BM25 files against the passages, as `_check_encoding` checks a dense index's vectors:
    their document count (as every load checks it), every score entry's document id one of the
    passages (past them a search fails; a negative one reads another row), and 8 passages spread
    over the index each in exactly the score columns of its own words (`bm25.tokenize`, as the build
    tokenized it). BM25 files copied in from another index (the other snapshot's, say) would pass
    every check of the passages."""
    from lewisrag.index.bm25 import TOKENIZER, tokenize
    from lewisrag.index.dense import spot_check_rows

    files, n = index.path / "bm25", len(index.passages)
    scores, vocab = index.retriever.scores, index.retriever.vocab_dict
    docs = scores["num_docs"]  # as many as the passages: the load checked it (`bm25.check_num_docs`)
    built_with = index.manifest.get("bm25", {}).get("tokenizer")
    # a /1 or /2 index loads only without CJK words (bm25.check_tokenizer): not re-split here; a /3 one loads only
    # where its words are today's (`bm25.check_dotted_i`: "İ" the one difference), so it is checked as one of today's
    if built_with not in (TOKENIZER, "lewisrag.index.bm25.tokenize/3"):
        return (f"the BM25 files index {docs} documents, as many as the passages (their words not checked: built with "
                f"tokenizer {built_with}, not {TOKENIZER})")
    indptr, indices = np.asarray(scores["indptr"]), scores["indices"]
    rows = spot_check_rows(n)
    listed: dict[int, set[int]] = {r: set() for r in rows}  # row -> the score columns holding it
    data = scores["data"]
    for at in range(0, len(indices), BM25_SCAN):
        if not np.isfinite(bad := np.asarray(data[at : at + BM25_SCAN])).all():  # searched, they rank at random
            raise InputError(files, f"score entry {at + int(np.flatnonzero(~np.isfinite(bad))[0])} (0-based) is not a "
                             "finite number: the BM25 files are damaged; build the index again")
        block = np.asarray(indices[at : at + BM25_SCAN])
        if (outside := (block < 0) | (block >= n)).any():  # past them, a search fails; negative, it finds another row
            e = int(np.argmax(outside))
            raise InputError(files, f"score entry {at + e} (0-based) names document {int(block[e])}, outside the index's "
                             f"{n} documents: the BM25 files are damaged; build the index again")
        for i in np.flatnonzero(np.isin(block, rows)):
            listed[int(block[i])].add(int(np.searchsorted(indptr, at + i, side="right") - 1))
    for r in rows:
        p = index.passages[r]
        words = set(tokenize(f"{p.title} {p.text}"))
        want = {vocab.get(w, -1) for w in words}
        if want != listed[r]:
            missing = sorted(w for w in words if vocab.get(w, -1) not in listed[r])
            what = (f"its word {missing[0]!r} is not indexed for it" if missing else
                    f"it is indexed under {len(listed[r])} words, its text has {len(words)}")
            raise InputError(files, f"row {r} (0-based; passage {p.id!r}): {what}: the BM25 files were built over other "
                             "passages or are damaged; build the index again")
    return (f"the BM25 files index {docs} documents, as many as the passages, every score entry one of them, and "
            f"{len(rows)} passages spread over them each under exactly its own words")
