"""The FAISS index over stored vectors: the factory string checked before encoding, quantizers
trained on a sample read in blocks (two-level centroids for many IVF lists), vectors added in blocks."""

from __future__ import annotations

import contextlib
import math
import mmap
import re
from collections.abc import Callable

import faiss
import numpy as np

from lewisrag.data.io import InputError
from lewisrag.index.tuning import QUANTIZER_EF_MIN

ADD_ROWS = 1 << 16  # vectors handed to FAISS at a time while building
TRANSFORM_SAMPLE = 1 << 16  # vectors that train a pre-transform (OPQ, PCA): OPQMatrix subsamples to 65,536 anyway
TRAIN_PER_LIST = 64  # training vectors per inverted list at least (FAISS's k-means warns below 39, uses at most 256)
TWO_LEVEL_LISTS = 10_000  # IVF indexes with at least this many lists train their centroids in two levels (docs/scale.md)
# the most links a vector an HNSW graph may keep (HNSW<M>): 2M ints a vector at level 0, 4 KB at 512,
# 8 times FAISS's largest suggestion (64); HNSW100000000 passed and failed only once every passage was
# encoded, allocating 800 MB a vector (std::bad_alloc)
MAX_HNSW_LINKS = 512
# The pre-transforms a build takes: each keeps the inner products DPR ranks passages by (a rotation, zero
# padding, a PCA made a projection by `_uncentred`), or approximates them by keeping the main directions
# (PCA, OPQ, RR to fewer dimensions). Refused: L2norm (NormalizationTransform: cosine, not the inner
# product), ITQ (centres and normalizes each vector), PCAW (whitens); CenteringTransform, ITQMatrix and
# a bare LinearTransform, which index_factory does not make, fall under the same refusal.
KEEPS_INNER_PRODUCTS = (faiss.PCAMatrix, faiss.OPQMatrix, faiss.RandomRotationMatrix, faiss.HadamardRotation,
                        faiss.RemapDimensionsTransform)


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
        except (RuntimeError, MemoryError) as e:  # check_factory catches the known causes; this names any other
            raise InputError("--faiss", f"FAISS could not train '{factory}' on {len(rows)} vectors: "
                             f"{_faiss_reason(e)}") from None
    try:
        for start in range(0, n, ADD_ROWS):
            index.add(read(np.arange(start, min(start + ADD_ROWS, n))))
    except (RuntimeError, MemoryError) as e:  # e.g. an NSG graph over fewer than 100 vectors; std::bad_alloc
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
                if isinstance(transform, faiss.PCAMatrix):
                    _uncentred(transform)
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


def _uncentred(pca) -> None:
    """Make a trained PCA a projection: FAISS's subtracts the training mean first, and an inner-product
    search then ranks by (q - m)·(x - m) = q·x - m·x - ..., whose m·x differs from passage to passage
    (DPR's vectors share a large mean): at full width, PCA32 over 32-d vectors found half the exact top 1.
    Without the mean, PCA (and PCAR's rotation after it) keeps the inner products of what it keeps."""
    faiss.copy_array_to_vector(np.zeros(pca.d_in, np.float32), pca.mean)
    faiss.copy_array_to_vector(np.zeros(pca.d_out, np.float32), pca.b)  # the bias apply() adds: -A·mean


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
    training vector per list, and a product quantizer (a Refine's included) at least one per
    centroid. Refused as well: an HNSW graph of more than MAX_HNSW_LINKS links, a pre-transform that
    changes the inner products (`KEEPS_INNER_PRODUCTS`), one to 0 dimensions or a PCA wider than its
    input, codes of 0 bits, and an index FAISS cannot read back once written.
    """
    for kind, count in re.findall(r"(HNSW|IVF)(\d+)", factory):
        if int(count) < 1:  # FAISS builds them, then aborts the process (HNSW0) or fails every search (IVF0)
            raise InputError("--faiss", f"invalid FAISS factory '{factory}': {kind} needs at least 1 "
                             f"{'link per vector' if kind == 'HNSW' else 'inverted list'}")
        if kind == "HNSW" and int(count) > MAX_HNSW_LINKS:
            raise InputError("--faiss", f"'{factory}' keeps {count} links a vector, more than the {MAX_HNSW_LINKS} "
                             "an HNSW graph is allowed (4 bytes each, twice over at its lowest level); use e.g. HNSW32")
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
    parts = _parts(index)  # they borrow from `index`, which must stay referenced
    for t in (t for part in parts for t in _transforms(part)):  # a Refine's base and refine index have their own
        if isinstance(t, faiss.PCAMatrix) and t.eigen_power != 0:  # PCAW
            raise InputError("--faiss", f"'{factory}' whitens (PCAW): it rescales each direction, which changes the "
                             "inner products DPR ranks passages by; use PCA, PCAR, OPQ or RR")
        if not isinstance(t, KEEPS_INNER_PRODUCTS):
            raise InputError("--faiss", f"'{factory}': its {type(t).__name__} pre-transform changes the inner products "
                             "DPR ranks passages by (L2norm ranks by cosine; ITQ centres and normalizes each vector); "
                             "use PCA, PCAR, OPQ, RR, HR or Pad")
        if t.d_out < 1:  # FAISS searches PCA0 with every score 0.0, and crashes the process on RR0 or OPQ8_0
            raise InputError("--faiss", f"invalid FAISS factory '{factory}': its {type(t).__name__} keeps 0 dimensions")
        if isinstance(t, faiss.PCAMatrix) and t.d_out > t.d_in:  # FAISS's PCA fails to train, after the encoding
            raise InputError("--faiss", f"invalid FAISS factory '{factory}': a PCA keeps at most the {t.d_in} "
                             f"dimensions it is given, not {t.d_out}; use OPQ or Pad to widen vectors")
    for part in parts:
        if getattr(part, "code_size", None) == 0:  # PQ8x0: FAISS cannot read it back; RQ4x0 crashes the process
            raise InputError("--faiss", f"invalid FAISS factory '{factory}': its {type(part).__name__} stores codes of "
                             "0 bits; a quantizer needs at least 1 bit per code (e.g. PQ16x8, not PQ16x0)")
    try:
        written = faiss_structure(faiss.deserialize_index(faiss.serialize_index(index)))
    except RuntimeError as e:  # an additive quantizer (RQ, LSQ) is read back only once trained, with its codebooks
        if not any(getattr(part, "aq", None) is not None and not part.is_trained for part in parts):
            raise InputError("--faiss", f"FAISS cannot read '{factory}' back once written, as every load must: "
                             f"{_faiss_reason(e)}") from None
        written = faiss_structure(index)
    if written != faiss_structure(index):  # as every load compares them (`check_faiss_factory`)
        raise InputError("--faiss", f"FAISS writes '{factory}' as {', '.join(written)}, which a load cannot tell "
                         "from another kind of index; write the factory string as FAISS names that index")
    if index.is_trained:
        return

    n_train = training_sample_size(index, n_passages, train_sample)
    need, what = 1, ""
    for part in parts:  # all train on the one sample (a Refine's refine index too): the largest need decides
        wants = [(256, "OPQ centroids per code") if isinstance(t, faiss.OPQMatrix)  # OPQ trains on codes of 256
                 else (t.d_out, "PCA output dimensions") if isinstance(t, faiss.PCAMatrix) else (1, "")
                 for t in _transforms(part)]
        if isinstance(part, faiss.IndexIVF):
            wants.append((part.nlist, "inverted lists"))
        if getattr(part, "pq", None) is not None:
            wants.append((part.pq.ksub, "centroids per product-quantizer code"))
        for count, why in wants:
            if count > need:
                need, what = count, f"{count} {why}"
    if n_train < need:
        raise InputError("--faiss", f"'{factory}' needs at least {need} passages to train ({what}); "
                         f"there are {n_passages}: use fewer lists or Flat")


def _parts(index) -> list:
    """The FAISS index and every index inside it (under its pre-transforms, an IVF's coarse quantizer,
    an HNSW or NSG graph's storage, a Refine's base and refine index), downcast; they borrow from `index`."""
    idx = faiss.downcast_index(index)
    inner = ([idx.index] if isinstance(idx, faiss.IndexPreTransform)
             else [idx.quantizer] if isinstance(idx, faiss.IndexIVF)
             else [idx.storage] if isinstance(idx, (faiss.IndexHNSW, faiss.IndexNSG))
             else [idx.base_index, idx.refine_index] if isinstance(idx, faiss.IndexRefine) else [])
    return [idx, *(part for sub in inner for part in _parts(sub))]


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
