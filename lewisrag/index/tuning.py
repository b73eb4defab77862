"""Search parameters of a FAISS index tuned against exact search, and exact re-ranking of candidates.

An approximate index (IVF, HNSW, product quantization) trades recall for speed through one search
parameter: `nprobe` (inverted lists visited) or `efSearch` (HNSW's candidate list). `tune_search`
finds the smallest value whose recall@k on the tuning queries reaches a target, where recall@k is
what FAISS's papers report as "recall@k vs exact": the share of the exact top-k that the index
returns in its own top-k (`recall_at_k`), with `exact_top_k` as the ground truth. An index whose
codes are too coarse to reach the target at any setting is reported as such (`Tuning.reached`),
set to the setting tried whose recall was the best. The chosen value is the first whose recall on
the tuning queries crossed the target, so it crosses it there by construction: `split_held_out`
sets questions apart before tuning, and `measure` gives the recall at the chosen setting on them.

`rerank` scores a compressed index's candidates exactly against the stored passage vectors (the
float16 or float32 `embeddings.npy` a dense index keeps memory-mapped), so that a few dozen bytes of
PQ code per passage can serve a top-k as good as a Flat index's when the candidates hold it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import faiss
import numpy as np

from lewisrag.data.io import InputError
from lewisrag.data.threads import torch_threads

NO_ROW = -1  # FAISS's row for "no result" (fewer candidates than k)
NO_SCORE = float(-np.finfo(np.float32).max)  # ... and its inner-product score for one
EXACT_BLOCK_SCORES = 1 << 24  # query x vector scores per block of exact_top_k: 64 MB of float32
RERANK_BLOCK_QUERIES = 16  # queries re-ranked together: one product of their distinct candidates with all 16
MIN_SPLIT_QUESTIONS = 5  # the fewest questions either side of a held-out split may hold (`split_held_out`)
MAX_EF_SEARCH = 4096  # the largest HNSW efSearch tried: beyond it a graph search costs as much as a scan
QUANTIZER_EF_MIN = 64  # an HNSW coarse quantizer's efSearch: at least this, and twice nprobe


def exact_top_k(vectors: np.ndarray, queries: np.ndarray, k: int,
                block_scores: int = EXACT_BLOCK_SCORES) -> tuple[np.ndarray, np.ndarray]:
    """The exact top-k rows of `vectors` (N, D) by inner product with each query: (scores, rows).

    Shaped like FAISS's search: scores (B, k) float32 best first, rows (B, k) int64, padded with
    rows -1 when N < k. `vectors` may be a float16 memory map: it is read in blocks of rows, each
    converted to float32, so memory stays at about `block_scores` floats whatever N is.
    (`faiss.knn` gives the same top-k but needs all N vectors as float32 in RAM at once.)

    >>> x = np.array([[1, 0], [0, 1], [2, 2], [-1, 0]], dtype=np.float16)
    >>> exact_top_k(x, np.array([[1.0, 0.5]]), 2, block_scores=2)
    (array([[3., 1.]], dtype=float32), array([[2, 0]]))
    """
    q = _as_queries(queries, vectors.shape[1])
    block = max(1, block_scores // max(len(q), 1))
    best_s = np.empty((len(q), 0), np.float32)
    best_r = np.empty((len(q), 0), np.int64)
    for start in range(0, len(vectors), block):
        scores = q @ np.asarray(vectors[start : start + block], dtype=np.float32).T
        top = _top_columns(scores, k)
        best_s = np.concatenate([best_s, np.take_along_axis(scores, top, 1)], 1)
        best_r = np.concatenate([best_r, top + start], 1)
        keep = _top_columns(best_s, k)
        best_s, best_r = np.take_along_axis(best_s, keep, 1), np.take_along_axis(best_r, keep, 1)
    order = np.argsort(-best_s, axis=1, kind="stable")
    return _pad(np.take_along_axis(best_s, order, 1), np.take_along_axis(best_r, order, 1), k)


TIE_RTOL = 2e-6  # scores this close (relative, ~16 float32 ulps) are one: sums in another order differ by ulps


def recall_at_k(found_rows: np.ndarray, exact_rows: np.ndarray, k: int, exact_scores: np.ndarray | None = None) -> float:
    """Share of each query's exact top-k rows among the first k found, averaged over the queries.

    Rows -1 (no result) match nothing; a query whose exact list is shorter than k (a corpus
    smaller than k) is scored against the rows it has. With `exact_scores` (best first, beside
    `exact_rows`, which may then list more than k rows), rows tied with the k-th exact score are
    interchangeable: any of them fills the tied places of the top k, ties counted within float32
    rounding (`TIE_RTOL`). Without it, an exact search that broke a tie otherwise than `exact_top_k`
    measured below 1 against it.

    >>> recall_at_k(np.array([[1, 2, 3], [4, 5, -1]]), np.array([[3, 2, 9], [4, 6, 7]]), 3)
    0.5
    >>> ties = np.array([[5.0, 4.0, 3.0, 3.0]])  # rows 1, 2 above; 3 and 4 tied for the last place
    >>> [recall_at_k(np.array([found]), np.array([[1, 2, 3, 4]]), 3, ties) for found in ([1, 2, 4], [1, 3, 4])]
    [1.0, 0.6666666666666666]
    """
    found, exact = np.asarray(found_rows)[:, :k], np.asarray(exact_rows)
    if len(found) != len(exact):
        raise ValueError(f"found rows for {len(found)} queries, exact rows for {len(exact)}")
    valid = exact[:, :k] >= 0
    hit = (exact[:, :k, None] == found[:, None, :]).any(axis=2) & valid  # each exact row counts once
    hits = hit.sum(1)
    if exact_scores is not None and exact.shape[1] >= k:
        scores = np.asarray(exact_scores, dtype=np.float32)
        last = scores[:, k - 1 : k]  # the k-th exact score
        listed = exact >= 0
        # tied within float32 rounding: another summation order (FAISS's BLAS against ours) moves a
        # score by an ulp or two, enough to swap two rows whose exact scores are equal
        tol = TIE_RTOL * np.maximum(np.abs(last), np.abs(np.where(listed, scores, 0)).max(1, keepdims=True))
        tied = listed & (np.abs(scores - last) <= tol)
        above = listed & (scores > last) & ~tied
        seen = (exact[:, :, None] == found[:, None, :]).any(axis=2)  # (B, listed rows): found?
        places = valid.sum(1) - above[:, :k].sum(1)  # the top k's places for tied rows
        tie_aware = (seen & above).sum(1) + np.minimum((seen & tied).sum(1), places)
        hits = np.where(valid.all(1), tie_aware, hits)  # a list shorter than k has no ties to break
    return float(np.mean(hits / np.maximum(valid.sum(1), 1)))


def with_found_rows(exact_scores: np.ndarray, exact_rows: np.ndarray, found_rows: np.ndarray, queries: np.ndarray,
                    vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores, rows): `exact_scores` and `exact_rows` (`exact_top_k`'s) with each query's first k
    found rows that they do not list appended, each with its exact score against `vectors` (those the
    exact top-k was computed from; a float16 memory map is read at those rows alone), so that
    `recall_at_k` counts a found row tied with the k-th exact score however many rows tie, where the
    exact listing stops a few rows past k (40 copies of one passage measured an exhaustive IVF search
    at 0.97). Found rows -1 and repeats are appended as -1 (no row), which matches nothing.

    >>> x = np.array([[1, 0], [1, 0], [1, 0], [0, 1]], dtype=np.float16)  # rows 0-2 tie for every place
    >>> s, r = with_found_rows(np.array([[1.0, 1.0]]), np.array([[0, 1]]), np.array([[2, 2]]), np.array([[1.0, 0.0]]), x, 2)
    >>> r
    array([[ 0,  1,  2, -1]])
    >>> recall_at_k(np.array([[2, 0]]), r, 2, s)
    1.0
    """
    exact, found = np.asarray(exact_rows, dtype=np.int64), np.asarray(found_rows, dtype=np.int64)[:, :k]
    q = _as_queries(queries, vectors.shape[1])
    if not len(exact) == len(found) == len(q):
        raise ValueError(f"exact rows for {len(exact)} queries, found rows for {len(found)}, {len(q)} queries")
    listed = (found[:, :, None] == exact[:, None, :]).any(axis=2)
    repeat = np.tril(found[:, :, None] == found[:, None, :], -1).any(axis=2)  # the same row found earlier
    new = (found >= 0) & ~listed & ~repeat
    scores = np.full(found.shape, NO_SCORE, np.float32)
    which, col = np.nonzero(new)
    if len(which):
        rows = found[which, col]
        order = np.argsort(rows, kind="stable")  # read in file order
        stored = np.empty((len(rows), q.shape[1]), np.float32)
        stored[order] = np.asarray(vectors[rows[order]], dtype=np.float32)
        scores[which, col] = np.einsum("nd,nd->n", stored, q[which])
    return (np.concatenate([np.asarray(exact_scores, dtype=np.float32), scores], 1),
            np.concatenate([exact, np.where(new, found, NO_ROW)], 1))


def rerank(queries: np.ndarray, candidate_rows: np.ndarray, vectors: np.ndarray,
           k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each query's top-k among its candidate rows, by exact inner product with `vectors`.

    `candidate_rows` (B, C) is e.g. a compressed index's top 4k; `vectors` (N, D) the stored
    passage vectors, float32 or a float16 memory map (scores are computed in float32). Rows -1
    and repeated rows are left out. Returns (scores, rows) shaped like FAISS's search, best first,
    padded with rows -1 and score NO_SCORE when a query has fewer than k distinct candidates.

    FAISS's IndexRefineFlat re-ranks the same way, but from its own float32 copy of every vector
    held in RAM (3 KB a passage at 768-d); this reads only the candidates' rows from the vectors
    the index already keeps on disk.

    >>> x = np.array([[1, 0], [0, 1], [2, 2]], dtype=np.float16)
    >>> rerank(np.array([[1.0, 0.0]]), np.array([[1, -1, 2, 2]]), x, 3)
    (array([[ 2.0000000e+00,  0.0000000e+00, -3.4028235e+38]], dtype=float32), array([[ 2,  1, -1]]))
    """
    q = _as_queries(queries, vectors.shape[1])
    cand = np.asarray(candidate_rows, dtype=np.int64)
    if cand.ndim != 2 or len(cand) != len(q):
        raise ValueError(f"candidate_rows: expected ({len(q)}, C), got {tuple(cand.shape)}")
    step = RERANK_BLOCK_QUERIES
    with torch_threads(1):  # see the note above _rerank_block
        parts = [_rerank_block(q[i : i + step], cand[i : i + step], vectors, k) for i in range(0, len(q), step)]
    if not parts:
        return np.empty((0, k), np.float32), np.empty((0, k), np.int64)
    return np.concatenate([s for s, _ in parts]), np.concatenate([r for _, r in parts])


# Re-ranking runs torch on the calling thread alone (`torch_threads(1)`): it follows a FAISS search,
# whose OpenMP threads (FAISS's own runtime, not torch's) keep spinning for a while after it
# returns, and torch's worker threads then fight them for the cores. Measured at 1M passages, 2
# cores, 16 queries x 100 candidates after an IVF-PQ search: 2,445 queries/s with torch's 2
# threads, 5,300 with one (the products are small: 1,600 x 768 x 16).


def _rerank_block(q: np.ndarray, cand: np.ndarray, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """`rerank` for a block of at most RERANK_BLOCK_QUERIES queries.

    The block's distinct candidate rows are read once (in file order) and multiplied with all its
    queries in one float32 matrix product, of which each query keeps its own candidates' column:
    up to 16 times the products needed, but one matrix product instead of a gather of a float32 row
    per (query, candidate) pair, and torch converts float16 rows several times faster than numpy
    (1M passages, 2 cores, 16 queries x 100 candidates after an IVF-PQ search: 5,300 queries/s
    against 2,900-3,600 for that gather)."""
    import torch  # loads on first use: FAISS-only callers never re-rank

    rows = np.sort(cand, axis=1)  # repeats side by side, and the reads below in file order
    valid = rows >= 0
    valid[:, 1:] &= rows[:, 1:] != rows[:, :-1]
    unique, where = np.unique(rows[valid], return_inverse=True)
    stored = torch.from_numpy(np.ascontiguousarray(vectors[unique])).float()  # one read per distinct candidate
    products = (stored @ torch.from_numpy(q).T).numpy()  # (distinct candidates, queries)
    scores = np.full(rows.shape, -np.inf, np.float32)
    scores[valid] = products[where, np.nonzero(valid)[0]]
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    top_s, top_r = np.take_along_axis(scores, order, 1), np.take_along_axis(rows, order, 1)
    missing = np.isneginf(top_s)
    top_s[missing], top_r[missing] = NO_SCORE, NO_ROW
    return _pad(top_s, top_r, k)


def search(index, queries: np.ndarray, k: int, rerank_vectors: np.ndarray | None = None,
           rerank_depth: int | None = None, check_rows=None) -> tuple[np.ndarray, np.ndarray]:
    """`index`'s top-k, or with `rerank_vectors` its top `rerank_depth` re-ranked exactly to k.

    `check_rows(rows)` (a dense index's `_known_rows`) sees the rows FAISS found before anything
    reads them: a row number damaged past the passages is refused in one line, where the re-ranking
    would read its stored vector and end in an IndexError."""
    q = np.ascontiguousarray(queries, dtype=np.float32)
    checked = check_rows or (lambda rows: rows)
    if rerank_vectors is None:
        scores, rows = index.search(q, k)
        return scores, checked(rows)
    _, candidates = index.search(q, max(rerank_depth or 4 * k, k))
    return rerank(q, checked(candidates), rerank_vectors, k)


def throughput(index, queries: np.ndarray, k: int, batch_size: int, rerank_vectors: np.ndarray | None = None,
               rerank_depth: int | None = None, check_rows=None) -> float:
    """Queries per second through `search` in batches of `batch_size`, after one warm-up batch."""
    search(index, queries[:batch_size], k, rerank_vectors, rerank_depth, check_rows)
    start = time.perf_counter()
    for i in range(0, len(queries), batch_size):
        search(index, queries[i : i + batch_size], k, rerank_vectors, rerank_depth, check_rows)
    return len(queries) / max(time.perf_counter() - start, 1e-9)


@dataclass(frozen=True)
class Tuning:
    """What `tune_search` chose. `params` go to `faiss.ParameterSpace().set_index_parameter` (or a
    dense index's `set_search_params`); `reached` False means no setting tried, up to the largest,
    reached `target`: the index's codes, not its search, limit it, and `params` is then the setting
    whose measured recall was the best (ties: the smallest, the cheapest), not the largest tried,
    whose recall may be lower (an IVF-PQ index measured 0.6 at nprobe 1 and 0.4 at nprobe 4)."""

    params: dict[str, int]
    recall: float
    qps: float
    reached: bool
    target: float
    knob: str | None  # the parameter searched: "nprobe", "efSearch"; None when there is none (Flat, PQ)
    trials: dict[int, float] = field(default_factory=dict)  # knob value -> recall@k measured


def search_knob(index, results: int = 1) -> tuple[str, int, int] | None:
    """The parameter that trades recall for speed in `index`, with the range worth trying for a
    search returning `results` rows: (name, smallest, largest); None for an index without one.

    >>> search_knob(faiss.index_factory(8, "IVF32,Flat"))
    ('nprobe', 1, 32)
    >>> search_knob(faiss.index_factory(8, "HNSW16"), results=20)
    ('efSearch', 20, 4096)
    >>> search_knob(faiss.index_factory(8, "Flat")) is None
    True
    """
    try:
        ivf = faiss.extract_index_ivf(index)  # also through an OPQ/PCA pre-transform
    except RuntimeError:
        ivf = None
    if ivf is not None:
        return "nprobe", 1, int(ivf.nlist)
    inner = faiss.downcast_index(index)
    if isinstance(inner, faiss.IndexRefine):  # ParameterSpace sets efSearch on the base index through it
        inner = faiss.downcast_index(inner.base_index)
    if isinstance(inner, faiss.IndexPreTransform):
        inner = faiss.downcast_index(inner.index)
    if isinstance(inner, faiss.IndexHNSW):
        # HNSW keeps max(efSearch, results) candidates: a smaller efSearch searches the same way
        return "efSearch", results, max(MAX_EF_SEARCH, results)
    return None


def apply_params(index, params: dict[str, int]) -> None:
    """Set search parameters by name, as FAISS's ParameterSpace names them."""
    space = faiss.ParameterSpace()
    for name, value in params.items():
        space.set_index_parameter(index, name, value)


def knob_params(index, knob: str, value: int) -> dict[str, int]:
    """The parameters that set `knob` to `value`; an IVF index with an HNSW coarse quantizer also
    gets `quantizer_efSearch`: HNSW must keep more candidate centroids than the nprobe lists it
    returns or it misses some of the nearest ones (twice as many, QUANTIZER_EF_MIN at least)."""
    params = {knob: value}
    if knob == "nprobe" and isinstance(faiss.downcast_index(faiss.extract_index_ivf(index).quantizer), faiss.IndexHNSW):
        params["quantizer_efSearch"] = max(QUANTIZER_EF_MIN, 2 * value)
    return params


def tune_search(index, queries: np.ndarray, exact_rows: np.ndarray, k: int, target_recall: float, *,
                rerank_vectors: np.ndarray | None = None, rerank_depth: int | None = None,
                batch_size: int = 64, exact_scores: np.ndarray | None = None, exact_vectors: np.ndarray | None = None,
                check_rows=None) -> Tuning:
    """The smallest search parameter at which `index` reaches `target_recall` (recall@k vs `exact_rows`).

    Doubles the parameter (nprobe for IVF, efSearch for HNSW) from its smallest value until the
    target is reached or the largest sensible value (nprobe = nlist, efSearch = MAX_EF_SEARCH) is
    passed, then bisects between the last value that missed and the first that reached it, so the
    value one below the chosen one was measured to miss (`trials` holds every measurement). Recall
    is measured after re-ranking the top `rerank_depth` when `rerank_vectors` are given, and with
    `exact_scores` (`exact_top_k`'s, which may then list more than k rows) ties count as found: those
    the listing holds, and with `exact_vectors` (the vectors the exact top-k was computed from) any
    found row, scored against them (`with_found_rows`), however many rows tie.
    A value at which some query finds fewer than k passages does not reach the target, whatever its
    recall: training and answering refuse such a search (`rag_model.model.check_found`), so a low
    target met with padded rows would record a setting nothing can use.

    When no value reaches the target, the value with the best measured recall is chosen (ties: the
    smallest; of the values at which every query finds k passages, when there are any), and
    `reached` is False: with compressed codes a larger value can measure a lower recall.

    The index is left set to the chosen parameters; `qps` is measured with them in batches of
    `batch_size`. Flat (and any index without a search parameter) is measured as it is; a Refine(...)
    index at the k_factor it has (the manifest's `refine_k_factor`, which `dense.DenseIndex` applies). Every
    search's rows go through `check_rows` (`search`).
    """
    exact_rows = np.asarray(exact_rows)
    if len(exact_rows) != len(queries):
        raise ValueError(f"exact_rows for {len(exact_rows)} queries, {len(queries)} queries given")
    if not 0 < target_recall <= 1:
        raise ValueError(f"target_recall must be in (0, 1], got {target_recall}")
    if rerank_vectors is not None and isinstance(faiss.downcast_index(index), faiss.IndexFlat):
        # recorded, every later search would re-rank an exact top-k into itself: not ignored in silence
        raise InputError("--rerank-depth", "applies to compressed indexes (IVF, HNSW, PQ, SQ): a Flat index's search is "
                         "exact already")
    results = max(rerank_depth or 4 * k, k) if rerank_vectors is not None else k
    knob = search_knob(index, results)
    trials: dict[int, float] = {}
    short: set[int | None] = set()  # values at which some query found fewer than k passages

    def reaches(value: int | None) -> bool:
        if value is not None:
            apply_params(index, knob_params(index, knob[0], value))
        _, rows = search(index, queries, k, rerank_vectors, rerank_depth, check_rows)
        trials[value] = recall_at_k(rows, *_exact_listing(exact_rows, exact_scores, rows, queries, exact_vectors, k))
        if (np.asarray(rows)[:, :k] < 0).any():
            short.add(value)
        return trials[value] >= target_recall and value not in short

    if knob is None:
        name, params, reached = None, {}, reaches(None)
        best = trials.pop(None)
    else:
        name, low, high = knob
        chosen, reached = _smallest_reaching(reaches, low, high)
        if not reached:
            chosen = best_tried(trials, short)
        best, params = trials[chosen], knob_params(index, name, chosen)
        apply_params(index, params)
    qps = throughput(index, queries, k, batch_size, rerank_vectors, rerank_depth, check_rows)
    return Tuning(params, best, qps, reached, target_recall, name, dict(sorted(trials.items())))


def split_held_out(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(tuning rows, held-out rows) of `n` questions: `fraction` of them (rounded half up) held out,
    drawn by a permutation seeded with `seed`, each part in the questions' own order. The same n,
    fraction and seed give the same split. `fraction` 0 holds out nothing (every question tunes);
    otherwise each part must hold MIN_SPLIT_QUESTIONS questions at least, or the split is refused in
    one line naming --held-out: a recall measured on two or three questions says nothing.

    >>> [r.tolist() for r in split_held_out(10, 0.5, seed=0)]
    [[0, 1, 5, 8, 9], [2, 3, 4, 6, 7]]
    >>> [r.tolist() for r in split_held_out(3, 0.0, seed=0)]
    [[0, 1, 2], []]
    """
    if not 0 <= fraction < 1:  # NaN too
        raise InputError("--held-out", f"must be at least 0 and below 1, got {fraction}")
    held = int(n * fraction + 0.5) if fraction else 0
    if fraction and min(held, n - held) < MIN_SPLIT_QUESTIONS:
        raise InputError("--held-out", f"{fraction} of {n} questions holds out {held} and tunes on {n - held}, where each "
                         f"side needs {MIN_SPLIT_QUESTIONS} at least: give more questions (--questions, --max-questions), "
                         "another fraction, or --held-out 0 to record the recall on the tuning questions alone")
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[held:]), np.sort(order[:held])


def measure(index, queries: np.ndarray, exact_rows: np.ndarray, k: int, *, rerank_vectors: np.ndarray | None = None,
            rerank_depth: int | None = None, exact_scores: np.ndarray | None = None,
            exact_vectors: np.ndarray | None = None, check_rows=None) -> tuple[float, bool]:
    """(recall@k, every query found k passages) of `index` as it is set, searched as `tune_search`
    measures each setting (re-ranked with `rerank_vectors`; ties counted with `exact_scores` and
    `exact_vectors`): the recall of the chosen setting on questions it was not chosen on."""
    exact_rows = np.asarray(exact_rows)
    if len(exact_rows) != len(queries):
        raise ValueError(f"exact_rows for {len(exact_rows)} queries, {len(queries)} queries given")
    _, rows = search(index, queries, k, rerank_vectors, rerank_depth, check_rows)
    recall = recall_at_k(rows, *_exact_listing(exact_rows, exact_scores, rows, queries, exact_vectors, k))
    return recall, bool((np.asarray(rows)[:, :k] >= 0).all())


def best_tried(trials: dict[int, float], short: set | frozenset = frozenset()) -> int:
    """The value whose measured recall is the best, ties to the smallest (the cheapest search), among
    the values not in `short` (where some query found fewer than k passages) if there are any.

    >>> best_tried({1: 0.6, 2: 0.6, 4: 0.4})
    1
    >>> best_tried({1: 0.7, 2: 0.6, 4: 0.4}, short={1})
    2
    """
    usable = {v: r for v, r in trials.items() if v not in short} or trials
    return min(usable, key=lambda v: (-usable[v], v))


def _exact_listing(exact_rows, exact_scores, found_rows, queries, exact_vectors, k) -> tuple:
    """`recall_at_k`'s (exact_rows, k, exact_scores) for `found_rows`: with `exact_vectors`, the listing
    completed with the found rows it lacks (`with_found_rows`)."""
    if exact_scores is None or exact_vectors is None or np.shape(exact_rows)[1] < k:  # (no ties below k rows)
        return exact_rows, k, exact_scores
    scores, rows = with_found_rows(exact_scores, exact_rows, found_rows, queries, exact_vectors, k)
    return rows, k, scores


def _smallest_reaching(reaches, low: int, high: int) -> tuple[int, bool]:
    """(value, reached): the smallest value in [low, high] where reaches(value), found by doubling
    then bisection (recall grows with the value, up to noise); (high, False) if none."""
    missed, value = low - 1, low
    while not reaches(value):
        if value >= high:
            return high, False
        missed, value = value, min(2 * value, high)
    while value - missed > 1:
        mid = (missed + value) // 2
        if reaches(mid):
            value = mid
        else:
            missed = mid
    return value, True


def _top_columns(scores: np.ndarray, k: int) -> np.ndarray:
    """Column indices of each row's k largest scores, in no particular order."""
    if scores.shape[1] <= k:
        return np.broadcast_to(np.arange(scores.shape[1]), scores.shape).copy()
    return np.argpartition(-scores, k - 1, axis=1)[:, :k]


def _pad(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Pad (B, c) results to (B, k) with FAISS's "no result" (row -1, score NO_SCORE)."""
    short = k - scores.shape[1]
    if short > 0:
        scores = np.concatenate([scores, np.full((len(scores), short), NO_SCORE, np.float32)], 1)
        rows = np.concatenate([rows, np.full((len(rows), short), NO_ROW, np.int64)], 1)
    return scores.astype(np.float32, copy=False), rows.astype(np.int64, copy=False)


def _as_queries(queries: np.ndarray, dim: int) -> np.ndarray:
    q = np.ascontiguousarray(queries, dtype=np.float32)
    if q.ndim != 2 or q.shape[1] != dim:
        raise ValueError(f"queries: expected (B, {dim}), got {tuple(q.shape)}")
    return q
