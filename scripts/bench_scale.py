"""Dense index at Wikipedia scale: Flat, HNSW32 over SQ8, and OPQ + IVF-PQ with exact re-ranking
(8-bit codes, or the same bytes as 4-bit fast-scan codes).

    .venv/bin/python scripts/bench_scale.py [--sizes 100000,1000000] [--target-recall 0.95] [--json]
    .venv/bin/python scripts/bench_scale.py --quick --json     # 10k and 20k passages: a smoke test
    .venv/bin/python scripts/bench_scale.py --index RUN/index_a --questions RUN/world/test.jsonl
                                     # a built index's own vectors and real questions (real structure, its N)
    .venv/bin/python scripts/bench_scale.py --index INDEX --questions FILE --encoder Q_FOLDER --context-encoder CTX_FOLDER
                                     # the same on an index built from a transformers DPRContextEncoder folder
    .venv/bin/python scripts/bench_scale.py --fit 1m.jsonl 5m.jsonl   # tables and fit from earlier --json runs

The paper retrieves from 21M passages: 64.5 GB of float32 768-d vectors, more than a Flat index
can hold in RAM. For synthetic corpora of each size in --sizes and each index kind this measures

- build_s: train on a sample (train_s), then add the vectors in blocks read from the float16 store
  (add_s), each phase in a fresh subprocess;
- peak_rss_mb: the build's peak RSS, the larger of the two phases' (VmHWM: train_peak_rss_mb,
  add_peak_rss_mb), and what it held beyond the index's own bytes and the interpreter's
  (rss_beyond_index_mb: the training sample and FAISS's buffers, or the index's vector growth);
- bytes_per_passage: the written index file over N; the float16 vectors kept beside any dense index
  (for RAG's q·d scores, and here for re-ranking: 2 x 768 bytes a passage, on disk and memory-mapped)
  are not counted, but reported as rerank_bytes_per_passage;
- recall_at_5 vs exact search, after re-ranking where used, on --queries held-out queries, with the
  search parameter that `lewisrag.index.tuning.tune_search` chose, on --queries other queries, as
  the smallest reaching --target-recall there (tuned_recall_at_5 is the recall it reached on them,
  target_reached whether any setting did). The two sets are apart: recall measured on the queries
  the parameter was tuned on reaches the target by construction (seed 0, HNSW32,SQ8 at 20k tuned on
  100 queries: efSearch 5, 0.966 on them, 0.927 on 2,000 fresh ones), so the reported recall is the
  held-out one;
- qps_b16, qps_b64: queries/s of the held-out queries in batches of 16 and 64 with those parameters
  (re-ranking included);
- train_rss_mb: peak RSS of a fresh process that opens the index as DenseIndex.load does (its own
  `_read_faiss`: IO_FLAG_MMAP_IFC | IO_FLAG_READ_ONLY, then IO_FLAG_MMAP | IO_FLAG_READ_ONLY, then a
  full read), memory-maps the float16 vectors and serves 50 batches of 16 questions with their K=5
  vector lookups, as a RAG training process does; the *_mmap fields the same with IO_FLAG_MMAP |
  IO_FLAG_READ_ONLY alone (else a full read), which faiss 1.15 accepts for Flat and HNSW but reads
  into private memory all the same. train_anon_mb is its private memory at the end (RssAnon): file
  pages (RssFile) are the page cache, shared by every process on the machine that maps the same
  file. Memory is in MB of 2**20 bytes (MiB; /proc's kB over 1024), and the fit's GB are GiB, but for
  the index's `bytes` (10**9);
- train_batch_ms and train_batch_ms_cold: one such batch (search, re-ranking, the K vectors for the
  doc scores) with the float16 vectors in the page cache, and with their pages dropped before every
  batch (posix_fadvise DONTNEED), so that each row read goes to the disk, as at 21M where the
  vector file (32 GB) outgrows a node's RAM. The vectors are mapped as DenseIndex.load maps them
  (`advise_random`: no read-ahead around a row).

Then, from the measured sizes, a fit of build time, bytes and throughput against N and its
extrapolation to 21M and 100M passages: an extrapolation, marked as such, not a measurement.

With --index DIR --questions FILE the same measurements run once on a lewisrag dense index's own
vectors (stored as float16, as `--vector-dtype float16` keeps them) with FILE's questions encoded by
the index's question encoder as the queries (--encoder, --context-encoder and --swap as `lewisrag
index tune` takes them: an index built from a transformers DPRContextEncoder folder, as every
base-preset and wiki_dpr index is, needs the DPRQuestionEncoder folder of its pair as --encoder and
that folder as --context-encoder): trained DPR vectors have the structure the synthetic
mixture imitates, at the index's N; the PQ width follows the vectors' dimension (64 sub-quantizers
up to half of it), so a 128-d index gets the same 72 bytes a passage as a 768-d one.

The synthetic vectors. Uniform random 768-d vectors are the wrong test: their neighbours are all
about equally far, so any compressed index scores near 0 recall, while a few well-separated clusters
make every index score 1. Trained DPR passage vectors sit between: a decaying spectrum (a few
dozen directions carry most of the variance), topics of very different sizes, and inner products
over vectors of unequal norms (MIPS, not cosine). So passages are drawn from a mixture of Gaussians:
- spectrum: the variance along the j-th principal direction is proportional to 1/j (participation
  ratio about 25 of 768 dimensions), in a random rotation so that it does not line up with PQ's
  sub-vectors (OPQ's job is to find that rotation, as on real vectors);
- topics: one component per CLUSTER_SIZE passages on average (the number grows with N, as topics
  grow with a corpus), with log-normal sizes, so IVF lists are unbalanced as on real text; component
  means have the spectrum's covariance, passages spread around theirs with WITHIN_SPREAD times it,
  so the top-5 of a query are topic mates ranked by their own inner structure, not by noise;
- queries: fresh draws from the same mixture, held out (no planted copy of a passage to find).
Measured on 300 held-out queries at 20k and 100k passages: OPQ64 IVF-PQ alone finds 0.85 and 0.83
of the exact top-5 even at full nprobe (re-ranking its top 20 brings that to 1.00), HNSW32,SQ8 finds
0.95 and 0.91 at efSearch 16, 0.99 at 256: neither trivially 1 nor 0, and harder as N grows.
Vectors are generated in blocks from per-block seeds and stored as a float16 .npy memory map in a
temporary folder, so memory stays bounded whatever N is.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np
import psutil

from lewisrag.data.io import InputError, iter_records
from lewisrag.index.dense import _read_faiss, advise_random, row_reader, train_faiss
from lewisrag.index.tuning import apply_params, exact_top_k, recall_at_k, search, throughput, tune_search

DIM = 768
K = 5  # passages per question, as RAG retrieves
SPECTRUM_DECAY = 1.0  # variance of the j-th principal direction ~ j^-SPECTRUM_DECAY
WITHIN_SPREAD = 0.5  # a passage's spread around its topic mean, relative to the topic means' spread
CLUSTER_SIZE = 256  # passages per topic on average
BLOCK_ROWS = 32_768  # vectors generated, read and added per block (100 MB of float32 at 768-d); --quick: 2,048
SERVE_BATCHES, SERVE_BATCH = 50, 16  # the training-process check: 50 batches of 16 questions
COLD_BATCHES = 20  # of them again with the vectors' pages dropped from the page cache first
NLIST_FACTOR = 4.0  # IVF lists a sqrt(N) (--nlist-factor)
PQ_M = 64  # PQ code bytes a passage: 72 with the 8-byte id (budget 100); the largest power of two within it
PQ_CENTROIDS = 256  # of each 8-bit PQ sub-quantizer, OPQ's own included (so for the 4-bit codes too): FAISS's
# k-means trains them on at least as many vectors
CORPUS_STREAM, QUERY_STREAM, SERVE_STREAM, REPORT_STREAM = 0, 1, 2, 3  # random streams: passages, tuning queries,
# serving, the held-out queries the recall is reported on
KINDS = ("flat", "hnsw_sq8", "ivfpq_rerank", "ivfpq4fs_rerank")
RERANKED = {"ivfpq_rerank": 4 * K, "ivfpq4fs_rerank": 20 * K}  # kinds re-ranked, and their default depth
EXTRAPOLATE_TO = (21_000_000, 100_000_000)
# how the training-process check opens the index: as DenseIndex.load does (the train_* fields), and with
# IO_FLAG_MMAP alone (train_*_mmap), which copies Flat and HNSW into private memory under faiss 1.15
OPENS = ("DenseIndex.load", "IO_FLAG_MMAP|IO_FLAG_READ_ONLY")


# ---- synthetic corpus -------------------------------------------------------------------------

class Mixture:
    """The Gaussian mixture of the module docstring for a corpus of `n` passages (seeded)."""

    def __init__(self, n: int, seed: int, dim: int = DIM):
        rng = np.random.default_rng([seed, n])
        scale = np.arange(1, dim + 1) ** (-SPECTRUM_DECAY / 2)
        self.scale = (scale / np.linalg.norm(scale)).astype(np.float32)  # total variance 1
        self.rotation = np.linalg.qr(rng.standard_normal((dim, dim)))[0].astype(np.float32)
        topics = max(16, n // CLUSTER_SIZE)
        sizes = rng.lognormal(0.0, 1.0, topics)
        self.weights = sizes / sizes.sum()
        self.means = (rng.standard_normal((topics, dim), dtype=np.float32) * self.scale) @ self.rotation.T

    def draw(self, m: int, rng: np.random.Generator) -> np.ndarray:
        topic = rng.choice(len(self.means), m, p=self.weights)
        spread = rng.standard_normal((m, len(self.scale)), dtype=np.float32) * (WITHIN_SPREAD * self.scale)
        return self.means[topic] + spread @ self.rotation.T


def write_corpus(path: Path, n: int, seed: int, block: int = BLOCK_ROWS) -> Mixture:
    """`n` passage vectors as a float16 .npy, generated block by block, each block from its own seed."""
    mixture = Mixture(n, seed)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=(n, DIM))
    for b, start in enumerate(range(0, n, block)):
        stop = min(start + block, n)
        out[start:stop] = mixture.draw(stop - start, np.random.default_rng([seed, n, CORPUS_STREAM, b]))
    out.flush()
    del out
    return mixture


def read_rows(path: Path, start: int, stop: int, rows: np.ndarray | None = None) -> np.ndarray:
    """Rows [start, stop) of the .npy at `path` as float32, or only `rows` of them (counted from start).

    The memory map lives for this call only: pages read through a long-lived map stay in the
    process's RSS, which would charge the whole corpus file to the build being measured."""
    mm = np.load(path, mmap_mode="r")
    try:
        block = mm[start:stop]
        return np.array(block if rows is None else block[rows], dtype=np.float32)
    finally:
        del mm


# ---- index kinds ------------------------------------------------------------------------------

def nlist_for(n: int, factor: float = NLIST_FACTOR) -> int:
    """`factor`·sqrt(N) inverted lists (FAISS's guideline: 4 to 16·sqrt(N)): with 4, ~250 passages a
    list at 1M; with 16 (`--nlist-factor 16`), ~63, whose centroids lewisrag trains by two-level
    k-means (`dense.two_level_centroids`) from dense.TWO_LEVEL_LISTS (10,000) lists on."""
    return max(1, round(factor * math.sqrt(n)))


def pq_m(dim: int) -> int:
    """PQ sub-quantizers: PQ_M, or half the dimension for vectors narrower than 2·PQ_M."""
    return min(PQ_M, dim // 2)


def factory_for(kind: str, n: int, ivf_quantizer: str, dim: int = DIM, nlist_factor: float = NLIST_FACTOR) -> str:
    if kind == "flat":
        return "Flat"
    if kind == "hnsw_sq8":
        return "HNSW32,SQ8"  # IndexHNSWSQ; built with METRIC_INNER_PRODUCT it searches by inner product
    quantizer = "_HNSW32" if ivf_quantizer == "hnsw" else ""
    # OPQ rotates (and reduces to 4 dims per sub-quantizer, FAISS's usual OPQ{M}_{4M}) so that PQ's
    # 64 sub-vectors share the variance the spectrum piles into a few directions
    m = pq_m(dim)
    if kind == "ivfpq4fs_rerank":
        # the same code bytes as 4-bit fast-scan codes: twice the sub-quantizers, 16 centroids each,
        # whose distance tables fit in SIMD registers (FAISS's IndexIVFPQFastScan), so a scanned
        # code costs a fraction of an 8-bit code's table look-ups; coarser distances, so more
        # candidates re-ranked
        m = min(2 * m, dim)
        return f"OPQ{m}_{min(2 * m, dim)},IVF{nlist_for(n, nlist_factor)}{quantizer},PQ{m}x4fs"
    return f"OPQ{m}_{min(4 * m, dim // m * m)},IVF{nlist_for(n, nlist_factor)}{quantizer},PQ{m}"


def code_bytes(kind: str, dim: int = DIM) -> int:
    """Bytes a passage adds to the index: Flat's float32 vector; SQ8's byte a dimension and HNSW32's
    64 level-0 links of 4 bytes (upper levels add ~1/32 of that); pq_m code bytes (8-bit codes, or
    twice as many 4-bit ones) and an 8-byte id."""
    return {"flat": 4 * dim, "hnsw_sq8": dim + 2 * 32 * 4, "ivfpq_rerank": pq_m(dim) + 8,
            "ivfpq4fs_rerank": pq_m(dim) + 8}[kind]


def too_few_to_train(n: int, kinds: list[str], nlist_factor: float = NLIST_FACTOR) -> str | None:
    """Why an IVF-PQ kind among `kinds` cannot be trained on `n` vectors (its sample is all of them
    below 65,536), or None: k-means needs a vector per centroid, PQ_CENTROIDS per sub-quantizer and
    one per IVF list. The training worker's FAISS error was a traceback that took the rows measured
    before it along.

    >>> too_few_to_train(200, ["flat", "ivfpq_rerank"])
    '200 vectors are fewer than the 256 centroids an IVF-PQ kind trains on them (256 a PQ sub-quantizer, 57 IVF lists)'
    >>> too_few_to_train(1000, ["ivfpq4fs_rerank"], nlist_factor=50)
    '1,000 vectors are fewer than the 1,581 centroids an IVF-PQ kind trains on them (256 a PQ sub-quantizer, 1,581 IVF lists)'
    >>> too_few_to_train(256, ["ivfpq_rerank"]), too_few_to_train(200, ["flat", "hnsw_sq8"])
    (None, None)
    """
    nlist = nlist_for(n, nlist_factor)
    if n >= max(PQ_CENTROIDS, nlist) or not any(kind in RERANKED for kind in kinds):
        return None
    return (f"{n:,} vectors are fewer than the {max(PQ_CENTROIDS, nlist):,} centroids an IVF-PQ kind trains on them "
            f"({PQ_CENTROIDS} a PQ sub-quantizer, {nlist:,} IVF lists)")


def train_size(kind: str, n: int, nlist_factor: float = NLIST_FACTOR) -> int:
    """Vectors to train on: 64 per inverted list for IVF (FAISS warns below 39), 65,536 for SQ8's
    ranges (PQ and OPQ subsample to 65,536 themselves)."""
    if kind == "flat":
        return 0
    return min(n, max(65_536, 64 * nlist_for(n, nlist_factor)) if kind in RERANKED else 65_536)


def configure(index, opq_iters: int) -> None:
    """Training settings the factory string cannot say."""
    with_pretransform = faiss.downcast_index(index)
    if isinstance(with_pretransform, faiss.IndexPreTransform):
        opq = faiss.downcast_VectorTransform(with_pretransform.chain.at(0))
        if isinstance(opq, faiss.OPQMatrix):
            opq.niter = opq_iters
    try:
        ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
    except RuntimeError:
        return
    if isinstance(ivf, faiss.IndexIVFPQ):
        # index_factory turns on polysemous training for IVF-PQ: it re-orders PQ centroids for a
        # Hamming-distance filter (the `ht` parameter) this search never uses, and took 95% of the
        # training time at PQ64 (~100 s of ~105 s on 20k vectors, faiss 1.15)
        ivf.do_polysemous_training = False


# ---- workers: one fresh process per build, measurement and training-process check -------------

def rss_status() -> dict[str, float]:
    """This process's RssAnon, RssFile and VmHWM (peak RSS) in MB, from /proc/self/status."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("RssAnon", "RssFile", "VmHWM"):
                fields[name] = int(value.split()[0]) / 1024
    return fields


def peak_rss_mb() -> float:
    """This process's peak RSS. Not ru_maxrss: Linux carries it over fork and exec, so a fresh
    subprocess of a parent holding 300 MB reports at least 300 MB (VmHWM starts anew at exec)."""
    return rss_status()["VmHWM"]


def worker_train(spec: dict) -> dict:
    """Train the index on a sample drawn from the vectors and write it, still empty."""
    path, n = Path(spec["vectors"]), spec["n"]
    start = time.perf_counter()
    index = faiss.index_factory(spec["dim"], spec["factory"], faiss.METRIC_INNER_PRODUCT)
    configure(index, spec["opq_iters"])
    if not index.is_trained:  # as `lewisrag index build` trains: the sample read block by block, narrowed by OPQ first
        rows = np.sort(np.random.default_rng(spec["seed"]).choice(n, spec["train_sample"], replace=False))
        # row_reader reads each file block through a mapping of its own: the sample, spread over the
        # whole file, read through one long-lived mapping would leave its pages in this build's RSS
        train_faiss(index, row_reader(np.load(path, mmap_mode="r")), rows, spec["block_rows"])
    train_s = time.perf_counter() - start if spec["train_sample"] else 0.0
    faiss.write_index(index, spec["out"])
    return {"train_s": train_s, "train_peak_rss_mb": peak_rss_mb()}


def worker_add(spec: dict) -> dict:
    """Read the trained index, add every vector in blocks from the float16 store, write it.

    A process of its own, apart from training: what malloc keeps of training's buffers would
    otherwise count as memory the adding needs, and training grows with the sample, adding with N."""
    path, n = Path(spec["vectors"]), spec["n"]
    base = psutil.Process().memory_info().rss / 2**20
    start = time.perf_counter()
    index = faiss.read_index(spec["trained"])
    for s in range(0, n, spec["block_rows"]):
        index.add(read_rows(path, s, s + spec["block_rows"]))
    add_s = time.perf_counter() - start
    faiss.write_index(index, spec["out"])
    index_mb = os.path.getsize(spec["out"]) / 2**20
    return {"add_s": add_s, "add_peak_rss_mb": peak_rss_mb(), "base_rss_mb": base, "index_mb": index_mb,
            "bytes_per_passage": os.path.getsize(spec["out"]) / n}


def build(spec: dict) -> dict:
    """Train, then add, each in a fresh process; the build's time and peak RSS are the two phases'."""
    trained = run_worker("train", {**spec, "out": spec["out"] + ".trained"})
    added = run_worker("add", {**spec, "trained": spec["out"] + ".trained"})
    os.remove(spec["out"] + ".trained")
    peak = max(trained["train_peak_rss_mb"], added["add_peak_rss_mb"])
    return {"build_s": trained["train_s"] + added["add_s"], **trained, **added, "peak_rss_mb": peak,
            "rss_beyond_index_mb": peak - added["base_rss_mb"] - added["index_mb"],
            "add_beyond_index_mb": added["add_peak_rss_mb"] - added["base_rss_mb"] - added["index_mb"],
            "train_sample_mb": spec["train_sample"] * spec["dim"] * 4 / 2**20}


def worker_measure(spec: dict) -> dict:
    """Tune the search parameter on the tuning queries, then measure recall and throughput with it on
    the held-out ones: recall on the queries it was tuned on would meet the target by construction."""
    index = faiss.read_index(spec["index"])
    vectors = np.load(spec["vectors"], mmap_mode="r")
    queries, exact = np.load(spec["queries"]), np.load(spec["exact"])
    held_out, held_out_exact = np.load(spec["report_queries"]), np.load(spec["report_exact"])
    rerank = {"rerank_vectors": vectors, "rerank_depth": spec["rerank_depth"]} if spec["rerank_depth"] else {}
    tuned = tune_search(index, queries, exact, K, spec["target_recall"], **rerank)  # leaves the index set to its choice
    _, rows = search(index, held_out, K, **rerank)
    return {"recall_at_5": recall_at_k(rows, held_out_exact, K), "tuned_recall_at_5": tuned.recall,
            "target_reached": tuned.reached, "search_params": tuned.params,
            "tuning_trials": {str(v): round(r, 4) for v, r in tuned.trials.items()},
            "qps_b16": throughput(index, held_out, K, 16, **rerank), "qps_b64": throughput(index, held_out, K, 64, **rerank),
            "threads": faiss.omp_get_max_threads()}


def worker_serve(spec: dict) -> dict:
    """A training process's view: open the index, map the vectors, serve 50 batches of 16."""
    before = rss_status()
    if spec["open"] == "DenseIndex.load":
        index, opened = _read_faiss(Path(spec["index"]), mmap=True), spec["open"]
    else:
        try:
            index, opened = faiss.read_index(spec["index"], faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY), spec["open"]
        except RuntimeError:  # this index type cannot be memory-mapped: read it whole
            index, opened = faiss.read_index(spec["index"]), "full read"
    index_anon_mb = rss_status()["RssAnon"] - before["RssAnon"]
    vectors = np.load(spec["vectors"], mmap_mode="r")
    advise_random(vectors)  # as DenseIndex.load maps them
    queries = np.load(spec["serve_queries"])
    apply_params(index, spec["params"])
    start = time.perf_counter()
    for b in range(SERVE_BATCHES):
        q = queries[b * SERVE_BATCH : (b + 1) * SERVE_BATCH]
        serve_batch(index, vectors, q, spec["rerank_depth"])
    serve_s = time.perf_counter() - start
    after = rss_status()
    del vectors  # unmapped: the kernel drops only pages no process maps
    cold_ms = cold_batch_ms(spec["vectors"], index, queries, spec["rerank_depth"])
    index_mb = os.path.getsize(spec["index"]) / 2**20
    fixed_mb = index_mb - spec["codes_mb"]  # centroids, OPQ matrix, SQ ranges: read into RAM in any case
    return {"rss_mb": peak_rss_mb(), "anon_mb": after["RssAnon"], "file_mb": after["RssFile"], "opened": opened,
            "index_anon_mb": index_anon_mb, "index_mapped": index_anon_mb < fixed_mb + 0.5 * spec["codes_mb"],
            "batch_ms": 1000 * serve_s / SERVE_BATCHES, "batch_ms_cold": cold_ms}


def cold_batch_ms(path: str, index, queries: np.ndarray, rerank_depth: int | None) -> float:
    """A serving batch's time when none of the float16 vectors is in the page cache: before each
    batch the file's cached pages are dropped (posix_fadvise DONTNEED, which spares pages a process
    maps, hence a fresh mapping per batch), so re-ranking and doc-score rows are read from the disk."""
    total = 0.0
    for b in range(COLD_BATCHES):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        start = time.perf_counter()
        vectors = np.load(path, mmap_mode="r")
        advise_random(vectors)
        serve_batch(index, vectors, queries[b * SERVE_BATCH : (b + 1) * SERVE_BATCH], rerank_depth)
        total += time.perf_counter() - start
        del vectors
    return 1000 * total / COLD_BATCHES


def serve_batch(index, vectors: np.ndarray, q: np.ndarray, rerank_depth: int | None) -> None:
    """What a RAG training process does per batch: search (and re-rank), then read the K retrieved
    rows for the doc scores, as DenseIndex.vectors does."""
    _, rows = search(index, q, K, vectors if rerank_depth else None, rerank_depth)
    docs = np.asarray(vectors[np.clip(rows.reshape(-1), 0, None)], dtype=np.float32)
    assert docs.shape == (len(q) * K, vectors.shape[1])


WORKERS = {"train": worker_train, "add": worker_add, "measure": worker_measure, "serve": worker_serve}


def run_worker(role: str, spec: dict) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", role, "--spec", json.dumps(spec)]
    r = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{role} worker failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# ---- one corpus size ----------------------------------------------------------------------------

def bench_size(n: int, args, workdir: Path):
    """Generate the corpus of `n` passages, then build and measure each index kind on it."""
    vectors = workdir / f"vectors_{n}.npy"
    t = time.perf_counter()
    mixture = write_corpus(vectors, n, args.seed, args.block_rows)
    queries = mixture.draw(args.queries, np.random.default_rng([args.seed, n, QUERY_STREAM]))
    report_queries = mixture.draw(args.queries, np.random.default_rng([args.seed, n, REPORT_STREAM]))
    serve_queries = mixture.draw(SERVE_BATCHES * SERVE_BATCH, np.random.default_rng([args.seed, n, SERVE_STREAM]))
    yield from bench_corpus(vectors, queries, report_queries, serve_queries, args, workdir,
                            {"source": "synthetic", "gen_s": time.perf_counter() - t})


def bench_index(args, workdir: Path):
    """A built lewisrag dense index's vectors, with `args.questions` encoded by its question encoder."""
    from lewisrag.data.records import read_qa
    from lewisrag.index import open_retriever

    retriever = open_retriever(args.index, args.encoder, swap=args.swap, context_encoder=args.context_encoder)
    if not hasattr(retriever, "encode"):
        raise InputError(args.index, "a BM25 index has no vectors; give a dense index", field="--index")
    if reason := too_few_to_train(len(retriever.index.embeddings), args.kinds, args.nlist_factor):
        raise InputError(args.index, f"{reason}: leave {' and '.join(k for k in args.kinds if k in RERANKED)} out",
                         field="--kinds")
    # the first --queries questions tune, the next --queries are the held-out ones (fewer than twice
    # --queries: the questions split in halves)
    questions = [ex.question for ex in read_qa(args.questions)][: 2 * args.queries]
    if len(questions) < 2:
        raise InputError(args.questions, "at least 2 questions needed (one to tune on, one held out)")
    half = args.queries if len(questions) == 2 * args.queries else (len(questions) + 1) // 2
    t = time.perf_counter()
    encoded = np.ascontiguousarray(retriever.encode(questions), dtype=np.float32)
    queries, report_queries = encoded[:half], encoded[half:]
    stored = retriever.index.scan_vectors()  # copied from first row to last
    n = len(stored)
    vectors = workdir / f"vectors_{n}.npy"
    out = np.lib.format.open_memmap(vectors, mode="w+", dtype=np.float16, shape=stored.shape)
    for s in range(0, n, args.block_rows):
        out[s : s + args.block_rows] = stored[s : s + args.block_rows]
    out.flush()
    del out, retriever
    serve_queries = np.resize(queries, (SERVE_BATCHES * SERVE_BATCH, queries.shape[1]))  # the questions again, cycled
    source = {"source": f"index {args.index}", "questions": str(args.questions), "gen_s": time.perf_counter() - t}
    yield from bench_corpus(vectors, queries, report_queries, serve_queries, args, workdir, source)


def bench_corpus(vectors: Path, queries: np.ndarray, report_queries: np.ndarray, serve_queries: np.ndarray, args,
                 workdir: Path, about: dict):
    """Build and measure each index kind of `args.kinds` on the float16 vectors at `vectors`: the search
    parameter tuned on `queries`, recall and throughput measured on `report_queries`."""
    n, dim = np.load(vectors, mmap_mode="r").shape
    np.save(workdir / "queries.npy", queries)
    np.save(workdir / "report_queries.npy", report_queries)
    np.save(workdir / "serve_queries.npy", serve_queries)
    np.save(workdir / "exact.npy", exact_top_k(np.load(vectors, mmap_mode="r"), queries, K)[1])
    np.save(workdir / "report_exact.npy", exact_top_k(np.load(vectors, mmap_mode="r"), report_queries, K)[1])
    for kind in args.kinds:
        factory = factory_for(kind, n, args.ivf_quantizer, dim, args.nlist_factor)
        depth = (args.rerank_depth or RERANKED[kind]) if kind in RERANKED else None
        index_path = str(workdir / f"{kind}_{n}.faiss")
        built = build({"vectors": str(vectors), "n": n, "dim": dim, "factory": factory, "out": index_path,
                       "train_sample": train_size(kind, n, args.nlist_factor), "seed": args.seed, "opq_iters": args.opq_iters,
                       "block_rows": args.block_rows})
        measured = run_worker("measure", {"index": index_path, "vectors": str(vectors), "rerank_depth": depth,
                                          "queries": str(workdir / "queries.npy"), "exact": str(workdir / "exact.npy"),
                                          "report_queries": str(workdir / "report_queries.npy"),
                                          "report_exact": str(workdir / "report_exact.npy"),
                                          "target_recall": args.target_recall})
        loaded, mmap = (run_worker("serve", {"index": index_path, "vectors": str(vectors), "open": how,
                                             "serve_queries": str(workdir / "serve_queries.npy"),
                                             "params": measured["search_params"], "rerank_depth": depth,
                                             "codes_mb": n * code_bytes(kind, dim) / 2**20})
                        for how in OPENS)
        yield {"n": n, "dim": dim, "index": factory, "kind": kind, **about, **built, **measured,
               "code_bytes_per_passage": code_bytes(kind, dim), "target_recall": args.target_recall, "rerank_depth": depth,
               "rerank_bytes_per_passage": 2 * dim, "train_sample": train_size(kind, n, args.nlist_factor), "nlist_factor": args.nlist_factor,
               "queries": len(report_queries), "tuning_queries": len(queries),
               "train_rss_mb": loaded["rss_mb"], "train_anon_mb": loaded["anon_mb"],
               "train_file_mb": loaded["file_mb"], "train_open": loaded["opened"],
               "train_index_mapped": loaded["index_mapped"], "train_index_anon_mb": loaded["index_anon_mb"],
               "train_batch_ms": loaded["batch_ms"], "train_batch_ms_cold": loaded["batch_ms_cold"],
               "train_index_anon_mb_mmap": mmap["index_anon_mb"],
               "train_rss_mb_mmap": mmap["rss_mb"], "train_anon_mb_mmap": mmap["anon_mb"],
               "train_open_mmap": mmap["opened"], "train_index_mapped_mmap": mmap["index_mapped"]}
        os.remove(index_path)
    os.remove(vectors)


# ---- output -------------------------------------------------------------------------------------

def print_table(rows: list[dict], out) -> None:
    print("| N | index | build s | peak RSS MB (beyond index) | bytes/passage | search params | recall@5 held-out (tuning) "
          "| qps b16 | qps b64 | train RSS MB (private) | same, IO_FLAG_MMAP alone | batch ms (vectors cold) |", file=out)
    print("|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|", file=out)
    for r in rows:
        params = ", ".join(f"{k}={v}" for k, v in r["search_params"].items()) or "-"
        if r["rerank_depth"]:
            params += f"; re-rank top {r['rerank_depth']}"
        recall = recall_cell(r)
        print(f"| {r['n']:,} | {r['index']} | {r['build_s']:.1f} | {r['peak_rss_mb']:,.0f} ({r['rss_beyond_index_mb']:,.0f}) "
              f"| {r['bytes_per_passage']:.0f} | {params} | {recall} | {r['qps_b16']:,.0f} | {r['qps_b64']:,.0f} "
              f"| {r['train_rss_mb']:,.0f} ({r['train_anon_mb']:,.0f}) | {r['train_rss_mb_mmap']:,.0f} "
              f"({r['train_anon_mb_mmap']:,.0f}) | {r.get('train_batch_ms', math.nan):.1f} ({r.get('train_batch_ms_cold', math.nan):.1f}) |", file=out)


def recall_cell(r: dict) -> str:
    """The table's recall@5: the held-out queries' and, in brackets, the tuning queries'; a row of a run
    before the two were apart (its recall measured on the queries it was tuned on) says so.

    >>> recall_cell({"recall_at_5": 0.923, "tuned_recall_at_5": 0.956, "target_reached": True, "target_recall": 0.95})
    '0.923 (tuned 0.956)'
    >>> recall_cell({"recall_at_5": 0.934, "tuned_recall_at_5": 0.93, "target_reached": False, "target_recall": 0.95})
    '0.934 (tuned 0.930, target 0.95 MISSED)'
    >>> recall_cell({"recall_at_5": 0.952, "target_reached": True, "target_recall": 0.95})
    '0.952 (on its tuning queries)'
    """
    if "tuned_recall_at_5" not in r:
        return f"{r['recall_at_5']:.3f} (on its tuning queries" + ("" if r["target_reached"] else f", target {r['target_recall']} MISSED") + ")"
    missed = "" if r["target_reached"] else f", target {r['target_recall']} MISSED"
    return f"{r['recall_at_5']:.3f} (tuned {r['tuned_recall_at_5']:.3f}{missed})"


def power_fit(ns: list[int], ys: list[float]) -> tuple[float, float]:
    """(a, b) of y = a·N^b by least squares in log-log space; (mean, 0) if N never varies.

    >>> a, b = power_fit([10, 100, 1000], [20, 200, 2000]); round(a, 6), round(b, 6)
    (2.0, 1.0)
    """
    if len(set(ns)) < 2:
        return float(np.mean(ys)), 0.0
    b, log_a = np.polyfit(np.log(ns), np.log(ys), 1)
    return float(np.exp(log_a)), float(b)


def linear_fit(ns: list[int], ys: list[float]) -> tuple[float, float]:
    """(fixed, per_item) of y = fixed + per_item·N by least squares; (mean, 0) if N never varies.

    >>> linear_fit([0, 0], [3.0, 5.0]), [round(v, 6) for v in linear_fit([1, 3], [10.0, 14.0])]
    ((4.0, 0.0), [8.0, 2.0])
    """
    if len(set(ns)) < 2:
        return float(np.mean(ys)), 0.0
    per, fixed = np.polyfit(np.asarray(ns, float), np.asarray(ys, float), 1)
    return float(fixed), float(per)


POWER_LAW = ("add_s", "qps_b16", "qps_b64")  # grow (or shrink) as a·N^b
LINEAR = ("bytes", "add_peak_rss_mb", "train_rss_mb", "train_anon_mb")  # fixed + per-passage·N


def extrapolate(group: list[dict], n: int) -> dict[str, float]:
    """The quantities of one index kind at `n` passages, from fits through `group`'s measured sizes.

    Adding time and throughput as power laws in N; bytes and memory as a fixed part plus a part
    per passage, which is how an index and the processes holding it grow. Training depends on the
    training sample, not on N, and the sample's size at `n` is known (`train_size`: capped for
    SQ8, growing as sqrt(N) for IVF, so a curve in N through it would mislead): training time is
    a power law and training RSS a straight line in the sample size. The build's time is the sum
    of the phases, its peak RSS the larger.

    >>> rows = [{"n": n, "kind": "hnsw_sq8", "train_sample": min(n, 65_536), "train_s": min(n, 65_536) / 1e3,
    ...          "add_s": n / 1e4, "qps_b16": 1e8 / n, "qps_b64": 2e8 / n, "bytes_per_passage": 72 + 1e6 / n,
    ...          "train_peak_rss_mb": 100 + min(n, 65_536) / 1e3, "add_peak_rss_mb": 100 + n / 1e3,
    ...          "train_rss_mb": 50.0, "train_anon_mb": 40.0} for n in (10_000, 100_000)]
    >>> {k: round(v, 1) for k, v in extrapolate(rows, 1_000_000).items()}  # doctest: +NORMALIZE_WHITESPACE
    {'add_s': 100.0, 'qps_b16': 100.0, 'qps_b64': 200.0, 'bytes': 73000000.0, 'add_peak_rss_mb': 1100.0,
     'train_rss_mb': 50.0, 'train_anon_mb': 40.0, 'train_s': 65.5, 'train_peak_rss_mb': 165.5, 'peak_rss_mb': 1100.0,
     'build_s': 165.5}
    """
    ns = [r["n"] for r in group]
    out = {}
    for name in POWER_LAW:
        a, b = power_fit(ns, [max(r[name], 1e-9) for r in group])
        out[name] = a * n**b
    for name in LINEAR:
        ys = [r["bytes_per_passage"] * r["n"] for r in group] if name == "bytes" else [r[name] for r in group]
        fixed, per = linear_fit(ns, ys)
        if per < 0:  # memory does not shrink as N grows: a falling line through two points is noise
            fixed, per = float(np.mean(ys)), 0.0
        out[name] = fixed + per * n
    samples, sample_at_n = [r["train_sample"] for r in group], train_size(group[0]["kind"], n, group[0].get("nlist_factor", NLIST_FACTOR))
    if sample_at_n:
        a, b = power_fit(samples, [max(r["train_s"], 1e-9) for r in group])
        out["train_s"] = a * sample_at_n**b
    else:  # nothing to train (Flat)
        out["train_s"] = 0.0
    fixed, per_row = linear_fit(samples, [r["train_peak_rss_mb"] for r in group])
    out["train_peak_rss_mb"] = fixed + per_row * sample_at_n
    out["peak_rss_mb"] = max(out["train_peak_rss_mb"], out["add_peak_rss_mb"])
    out["build_s"] = out["train_s"] + out["add_s"]
    return out


def human(name: str, value: float) -> str:
    """A quantity in the unit a reader wants: hours for long builds, GB for large memory.

    >>> human("build_s", 7200), human("peak_rss_mb", 2048), human("bytes", 1.5e9), human("qps_b16", 12.345)
    ('2.0 h', '2.0 GB', '1.5 GB', '12.3')
    """
    if name.endswith("_s"):
        return f"{value / 3600:,.1f} h" if value >= 3600 else f"{value / 60:,.1f} min" if value >= 60 else f"{value:,.1f} s"
    if name.endswith("_mb"):
        return f"{value / 1024:,.1f} GB" if value >= 1024 else f"{value:,.0f} MB"
    if name == "bytes":
        return f"{value / 1e9:,.1f} GB"
    return f"{value:,.3g}" if value < 100 else f"{value:,.0f}"


def print_extrapolation(rows: list[dict], out) -> None:
    by_kind: dict[str, list[dict]] = {}
    for r in rows:  # a kind with another number of lists is another index to fit
        factor = r.get("nlist_factor", NLIST_FACTOR)
        label = r["kind"] if factor == NLIST_FACTOR else f"{r['kind']}, {factor:g}·sqrt(N) lists"
        by_kind.setdefault(label, []).append(r)
    print("\nEXTRAPOLATION, not a measurement: fits through the measured sizes, evaluated at "
          + " and ".join(f"{n:,}" for n in EXTRAPOLATE_TO) + " passages.", file=out)
    print("Adding time and qps as power laws a·N^b, index bytes and RSS as fixed + per-passage·N; training time and "
          "RSS against the training sample's size (known at N: capped for SQ8, growing as sqrt(N) for IVF), as a power "
          "law and a line. The build's peak RSS is the larger phase's. Through two sizes a fit passes through both points "
          "and nothing checks its form; with three or more, a second row fits the two largest alone: where the two "
          "rows differ, the measured points do not lie on the fitted curve, and the last stretch is the nearer "
          "guide. Recall is not extrapolated (the tuned parameters above grow with N to hold "
          "it). RSS counts file pages a process touched, shared with every process mapping the same file; "
          "train_anon_mb is what each training process that opens the index as DenseIndex.load does adds of its own.",
          file=out)
    names = ("build_s", "train_s", "add_s", "bytes", "peak_rss_mb", "train_peak_rss_mb", "add_peak_rss_mb", "qps_b16",
             "qps_b64", "train_rss_mb", "train_anon_mb")
    print("| index kind | at N | measured N | " + " | ".join(names) + " |", file=out)
    print("|---|---:|---|" + "---:|" * len(names), file=out)
    for kind, group in by_kind.items():
        sizes = sorted({r["n"] for r in group})
        if len(sizes) < 2:
            print(f"| {kind} | - | {sizes[0]:,} only: no fit |" + " |" * len(names), file=out)
            continue
        fits = [(group, sizes)]
        if len(sizes) > 2:  # the curve's form checked: the same fits through the last stretch alone
            fits.append(([r for r in group if r["n"] in sizes[-2:]], sizes[-2:]))
        for n in EXTRAPOLATE_TO:
            for part, measured in fits:
                at = extrapolate(part, n)
                print(f"| {kind} | {n / 1e6:g}M | {', '.join(f'{s:,}' for s in measured)} | "
                      + " | ".join(human(name, at[name]) for name in names) + " |", file=out)


# what the table and the fit read of each --json row (--fit checks every row has them); the index's
# bytes are not a field: `extrapolate` computes them from bytes_per_passage and n
FIT_FIELDS = ("n", "kind", "index", "build_s", "train_s", "train_sample", "add_s", "bytes_per_passage", "peak_rss_mb",
              "rss_beyond_index_mb", "train_peak_rss_mb", "add_peak_rss_mb", "search_params", "rerank_depth", "recall_at_5",
              "target_reached", "target_recall", "qps_b16", "qps_b64", "train_rss_mb", "train_anon_mb",
              "train_rss_mb_mmap", "train_anon_mb_mmap")


def as_loaded(row: dict) -> dict:
    """`row` with its training-process memory as DenseIndex.load opens the index. Rows written before
    the check opened it so measured train_* with IO_FLAG_MMAP alone and *_mmap_ifc with
    IO_FLAG_MMAP_IFC alone; DenseIndex.load tries IFC first, then IO_FLAG_MMAP, so its numbers are the
    IFC ones where IFC opened the index (every kind under faiss 1.15), else the IO_FLAG_MMAP ones. A row of
    this script's own is returned as it is.

    >>> old = {"train_rss_mb": 977, "train_anon_mb": 639, "train_rss_mb_mmap_ifc": 977, "train_anon_mb_mmap_ifc": 54}
    >>> loaded = as_loaded(old); loaded["train_anon_mb"], loaded["train_anon_mb_mmap"]
    (54, 639)
    """
    if "train_rss_mb_mmap_ifc" not in row or "train_rss_mb_mmap" in row:
        return row
    row = dict(row)
    for key in ("train_rss_mb", "train_anon_mb"):
        if key in row and f"{key}_mmap_ifc" in row:  # else the field's check names what is missing
            row[f"{key}_mmap"] = row[key]
            if row.get("train_open_mmap_ifc") != "full read":
                row[key] = row[f"{key}_mmap_ifc"]
    return row


def read_fit_rows(paths: list[Path]) -> list[dict]:
    """The synthetic rows of earlier --json outputs, each checked for what the table and the fit read:
    a bad file, line or field is an InputError naming it."""
    rows = []
    for path in paths:
        if path.suffix.lower() != ".jsonl":
            raise InputError(path, "--fit reads the --json outputs of this script, JSON lines (.jsonl)")
        for line, row in iter_records(path):
            if row.get("source", "synthetic") != "synthetic":
                continue
            row = as_loaded(row)
            missing = next((f for f in FIT_FIELDS if f not in row), None)
            if missing:
                raise InputError(path, "missing: not a row of this script's --json output", line, missing)
            if row["kind"] not in KINDS:
                raise InputError(path, f"unknown index kind {row['kind']!r} (one of {', '.join(KINDS)})", line, "kind")
            if not isinstance(row["n"], int) or isinstance(row["n"], bool) or row["n"] < 1:
                raise InputError(path, f"must be a positive whole number, got {row['n']!r}", line, "n")
            rows.append(row)
    return rows


MEASURING = ("sizes", "target_recall", "queries", "rerank_depth", "opq_iters", "ivf_quantizer", "nlist_factor", "block_rows",
             "seed", "workdir", "quick", "json", "index", "questions", "encoder", "context_encoder", "swap")  # --fit refuses them


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000", help="corpus sizes, comma-separated")
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"index kinds among {', '.join(KINDS)}")
    ap.add_argument("--target-recall", type=float, default=0.95, help="recall@5 vs exact that tuning must reach")
    ap.add_argument("--queries", type=int, default=500,
                    help="queries the search parameter is tuned on, and as many others the recall is measured on")
    ap.add_argument("--rerank-depth", type=int, default=None,
                    help=f"IVF-PQ candidates re-ranked exactly (default {RERANKED['ivfpq_rerank']}, "
                         f"{RERANKED['ivfpq4fs_rerank']} for the 4-bit fast-scan codes)")
    ap.add_argument("--opq-iters", type=int, default=50, help="OPQ training iterations (FAISS's default: 50)")
    ap.add_argument("--ivf-quantizer", choices=("flat", "hnsw"), default="flat",
                    help="IVF coarse quantizer: flat, or HNSW32 (for nlist in the tens of thousands)")
    ap.add_argument("--nlist-factor", type=float, default=NLIST_FACTOR,
                    help=f"IVF lists: this many times sqrt(N) (default {NLIST_FACTOR:g}; FAISS's guideline 4 to 16)")
    ap.add_argument("--block-rows", type=int, default=BLOCK_ROWS, help="vectors generated, read and added at a time")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=None, help="where the temporary folder goes (the float16 vectors: 1.5 GB at 1M)")
    ap.add_argument("--quick", action="store_true",
                    help="10k and 20k passages, 100 queries (and 100 held out), 4 OPQ iterations, blocks of 2,048: a smoke test")
    ap.add_argument("--json", action="store_true", help="one JSON object per line per (size, index kind)")
    ap.add_argument("--fit", type=Path, nargs="+", metavar="JSONL",
                    help="measure nothing: print the table and the fit of the synthetic rows in these --json outputs "
                         "(sizes measured in separate runs, fitted together); --kinds picks the rows, and the flags "
                         "that measure are refused")
    ap.add_argument("--index", type=Path, help="a lewisrag dense index: bench its own vectors instead of synthetic ones")
    ap.add_argument("--questions", type=Path, help="with --index: QA examples whose questions are the queries")
    ap.add_argument("--encoder", help="with --index: DPR checkpoint, DPRQuestionEncoder folder or trained RAG model "
                                      "(RUN/best: its question encoder) that encodes the questions (default: the index's; "
                                      "needed for an index built from a transformers DPRContextEncoder folder)")
    ap.add_argument("--context-encoder", help="with a DPRQuestionEncoder folder as --encoder: the DPRContextEncoder "
                                              "folder of its pair; it must be the one that built the index")
    ap.add_argument("--swap", action="store_true", help="with --index: allow a question encoder trained against another "
                                                        "context encoder (or an unpaired DPRQuestionEncoder folder)")
    ap.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    ignored = [f"--{dest.replace('_', '-')}" for dest in MEASURING if getattr(args, dest) != ap.get_default(dest)]
    if args.fit and ignored:
        ap.error(f"--fit measures nothing: {', '.join(ignored)} would be ignored (--kinds picks the rows it fits)")
    if args.quick:
        # blocks smaller than the corpora, so that the adding phase's memory is the index's, as at scale
        args.sizes, args.queries, args.opq_iters, args.block_rows = "10000,20000", 100, 4, 2048
    try:
        args.sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        args.sizes = [0]
    for ok, flag, rule in ((min(args.sizes) >= 1, "--sizes", "positive whole numbers, comma-separated"),
                           (0 < args.target_recall <= 1, "--target-recall", "in (0, 1]"),
                           (args.queries >= 1, "--queries", "at least 1"),
                           (args.rerank_depth is None or args.rerank_depth >= 1, "--rerank-depth", "at least 1"),
                           (args.opq_iters >= 1, "--opq-iters", "at least 1"),
                           (args.nlist_factor > 0 and math.isfinite(args.nlist_factor), "--nlist-factor", "a positive number"),
                           (args.block_rows >= 1, "--block-rows", "at least 1")):
        if not ok:
            ap.error(f"{flag}: must be {rule}")
    if (args.index is None) != (args.questions is None):
        ap.error("--index and --questions go together")
    for flag, given in (("--encoder", args.encoder), ("--context-encoder", args.context_encoder), ("--swap", args.swap)):
        if given and args.index is None:  # never ignored in silence
            ap.error(f"{flag} goes with --index")
    if args.workdir is not None and not Path(args.workdir).is_dir():  # tempfile's FileNotFoundError was a traceback
        ap.error(f"--workdir: {args.workdir}: folder not found")
    args.kinds = [k for k in args.kinds.split(",") if k]
    if not args.kinds:  # measured nothing and exited 0
        ap.error(f"--kinds: name at least one index kind of {', '.join(KINDS)}")
    unknown = set(args.kinds) - set(KINDS)
    if unknown:
        ap.error(f"unknown index kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
    if args.index is None and not args.fit:  # --index: its N, checked once the index is open
        for n in args.sizes:
            if reason := too_few_to_train(n, args.kinds, args.nlist_factor):
                ap.error(f"--sizes: {reason}; give more passages or leave the IVF-PQ kinds out of --kinds")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    try:
        run(args)
    except InputError as e:  # a bad --fit row, --index or --questions: one line, as the lewisrag command says it
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


def run(args) -> None:
    # FAISS takes BLAS for exact inner products only from 128,000 queries per call; batches of 16 or
    # 64 would run a slower loop (lewisrag.index.dense.use_blas_for_small_batches sets the same)
    faiss.cvar.distance_compute_blas_threshold = 8
    if args.worker:
        print(json.dumps(WORKERS[args.worker](json.loads(args.spec))))
        return
    if args.fit:
        rows = sorted((r for r in read_fit_rows(args.fit) if r["kind"] in args.kinds),
                      key=lambda r: (r["n"], KINDS.index(r["kind"])))
        kinds = "" if set(args.kinds) == set(KINDS) else f" of {', '.join(args.kinds)}"
        print(f"{len(rows)} synthetic rows{kinds} from {', '.join(map(str, args.fit))}")
        print_table(rows, sys.stdout)
        print_extrapolation(rows, sys.stdout)
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_scale_", dir=args.workdir) as d:
        runs = [bench_index(args, Path(d))] if args.index else [bench_size(n, args, Path(d)) for n in args.sizes]
        for run in runs:
            for row in run:
                rows.append(row)
                if args.json:
                    print(json.dumps(row), flush=True)
    report = sys.stderr if args.json else sys.stdout  # --json: stdout is the rows, the tables go to stderr
    what = f"the vectors of {args.index}, questions of {args.questions}" if args.index else \
        f"{DIM}-d synthetic passages (see the docstring)"
    print(f"{what}, top-{K}, target recall@{K} {args.target_recall}, search parameter tuned on "
          f"{rows[0]['tuning_queries'] if rows else 0} queries, recall measured on {rows[0]['queries'] if rows else 0} "
          f"held-out ones, {faiss.omp_get_max_threads()} threads", file=report)
    print_table(rows, report)
    if not args.index:  # one index is one size: nothing to fit
        print_extrapolation(rows, report)


if __name__ == "__main__":
    main()
