"""Search-parameter tuning against exact search, exact re-ranking, and scripts/bench_scale.py end to end."""

from __future__ import annotations

import doctest
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import faiss
import numpy as np
import pytest

from conftest import one_thread
from lewisrag.index.dense import build_faiss
from lewisrag.index.tuning import (
    NO_ROW,
    NO_SCORE,
    QUANTIZER_EF_MIN,
    apply_params,
    exact_top_k,
    knob_params,
    recall_at_k,
    rerank,
    search,
    tune_search,
)

ROOT = Path(__file__).resolve().parents[1]
K = 5


def clustered(n: int, d: int = 32, clusters: int = 40, queries: int = 200, seed: int = 0):
    """Clustered vectors with a decaying spectrum, and held-out queries from the same clusters."""
    rng = np.random.default_rng(seed)
    scale = np.arange(1, d + 1) ** -0.5
    centers = rng.standard_normal((clusters, d)) * scale

    def draw(m: int) -> np.ndarray:
        return (centers[rng.integers(0, clusters, m)] + 0.5 * rng.standard_normal((m, d)) * scale).astype(np.float32)

    return draw(n), draw(queries)


@pytest.fixture(scope="module")
def data():
    x, q = clustered(4000)
    return x, q, exact_top_k(x, q, K)[1]


def pq_index(x: np.ndarray, factory: str):
    """A trained and filled PQ index, without the polysemous training index_factory turns on (a
    Hamming filter these searches do not use, which takes most of the training time)."""
    index = faiss.index_factory(x.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    try:
        faiss.downcast_index(faiss.extract_index_ivf(index)).do_polysemous_training = False
    except RuntimeError:  # not IVF: a plain IndexPQ
        faiss.downcast_index(index).do_polysemous_training = False
    index.train(x)
    index.add(x)
    return index


def recall_with(index, params: dict, q, exact, **rerank_args) -> float:
    apply_params(index, params)
    return recall_at_k(search(index, q, K, **rerank_args)[1], exact, K)


def test_exact_top_k_is_the_full_sort_in_any_block_size():
    x, q = clustered(1000, queries=30)
    full = np.argsort(-(q @ x.T), axis=1, kind="stable")[:, :K]
    for block in (7, 1000, 1 << 24):  # rows per block: a few, exactly N, all at once
        scores, rows = exact_top_k(x, q, K, block_scores=block * len(q))
        assert np.array_equal(rows, full)
        assert np.allclose(scores, np.take_along_axis(q @ x.T, full, 1), rtol=1e-5)
        assert np.all(np.diff(scores, axis=1) <= 0)


def test_exact_top_k_pads_like_faiss_when_the_corpus_is_smaller_than_k():
    x, q = clustered(3, queries=2)
    scores, rows = exact_top_k(x, q, K)
    flat_scores, flat_rows = build_faiss(x, "Flat").search(q, K)
    assert np.array_equal(rows, flat_rows) and rows[0, 3] == NO_ROW
    assert np.array_equal(scores[:, 3:], flat_scores[:, 3:]) and scores[0, 4] == NO_SCORE


def test_recall_at_k_counts_overlap_of_the_first_k():
    exact = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    assert recall_at_k(exact, exact, 4) == 1.0
    assert recall_at_k(np.array([[4, 3, 9, 9], [8, -1, -1, -1]]), exact, 4) == pytest.approx((2 / 4 + 1 / 4) / 2)
    assert recall_at_k(np.array([[1, 1, 1, 1], [5, 5, 5, 5]]), exact, 4) == 0.25  # a repeated row counts once
    assert recall_at_k(np.array([[9, 1, 2, 3], [5, 6, 9, 9]]), exact, 1) == 0.5  # only the first k found count
    assert recall_at_k(np.array([[2, -1]]), np.array([[2, -1]]), 2) == 1.0  # exact list shorter than k


def test_rows_tied_within_float32_rounding_are_interchangeable():
    """A Flat index measured 0.989 against exact search on one CPU: its BLAS summed in another order,
    so two rows with equal exact scores (31.987944 and 31.987942 here) swapped at the k-th place."""
    exact = np.array([[8, 16, 38, 24]])
    scores = np.array([[31.988132, 31.987944, 31.987942, 31.98775]], dtype=np.float32)
    assert recall_at_k(np.array([[8, 38, 16]]), exact, 2, scores) == 1.0  # 16 and 38: one score in float32
    assert recall_at_k(np.array([[8, 24, 16]]), exact, 3, scores) == pytest.approx(2 / 3)  # 24 is really lower
    assert recall_at_k(np.array([[16, 38, 8]]), exact, 1, scores) == 0.0  # 8 is above the rest, not tied


def test_ivf_tuning_picks_the_smallest_nprobe_reaching_the_target(data):
    x, q, exact = data
    index = build_faiss(x, "IVF64,Flat")
    t = tune_search(index, q, exact, K, 0.9)
    nprobe = t.params["nprobe"]
    assert t.knob == "nprobe" and t.reached and t.recall >= 0.9 and t.qps > 0
    assert 1 < nprobe < 64
    assert recall_with(index, {"nprobe": nprobe}, q, exact) == t.recall >= 0.9  # measured again: the same
    assert recall_with(index, {"nprobe": nprobe - 1}, q, exact) < 0.9  # one lower misses
    assert t.trials[nprobe - 1] < 0.9 <= t.trials[nprobe]


def test_hnsw_tuning_picks_the_smallest_ef_search_reaching_the_target(data):
    x, q, exact = data
    index = build_faiss(x, "HNSW16")  # a sparse graph: efSearch matters (recall 0.89 at efSearch 5)
    t = tune_search(index, q, exact, K, 0.95)
    ef = t.params["efSearch"]
    assert t.knob == "efSearch" and t.reached and ef > K  # efSearch below K searches as K does
    assert recall_with(index, {"efSearch": ef}, q, exact) >= 0.95
    assert recall_with(index, {"efSearch": ef - 1}, q, exact) < 0.95


def test_ivf_with_an_hnsw_quantizer_tunes_nprobe_and_keeps_enough_centroid_candidates(data):
    x, q, exact = data
    index = build_faiss(x, "IVF64_HNSW32,Flat")
    t = tune_search(index, q, exact, K, 0.9)
    nprobe = t.params["nprobe"]
    assert t.reached and t.params["quantizer_efSearch"] == max(QUANTIZER_EF_MIN, 2 * nprobe)
    quantizer = faiss.downcast_index(faiss.extract_index_ivf(index).quantizer)
    assert quantizer.hnsw.efSearch == t.params["quantizer_efSearch"]  # the index is left set to the choice
    assert recall_with(index, {"nprobe": nprobe - 1, "quantizer_efSearch": max(QUANTIZER_EF_MIN, 2 * nprobe - 2)},
                       q, exact) < 0.9


def test_an_hnsw_quantizer_keeps_twice_nprobe_candidates():
    index = faiss.index_factory(8, "IVF256_HNSW32,Flat")
    assert knob_params(index, "nprobe", 100) == {"nprobe": 100, "quantizer_efSearch": 200}
    assert knob_params(index, "nprobe", 3) == {"nprobe": 3, "quantizer_efSearch": QUANTIZER_EF_MIN}
    assert knob_params(faiss.index_factory(8, "IVF256,Flat"), "nprobe", 100) == {"nprobe": 100}


def test_flat_has_nothing_to_tune(data):
    x, q, exact = data
    t = tune_search(build_faiss(x, "Flat"), q, exact, K, 0.99)
    assert (t.knob, t.params, t.recall, t.reached, t.trials) == (None, {}, 1.0, True, {})


def test_rows_tied_with_the_kth_score_are_interchangeable():
    """Eight copies of one vector tie for every place of the top 5: an exact search may return any five
    (a Flat index measured 0.989 against itself on one CPU); with the exact scores any tied row counts."""
    rng = np.random.default_rng(0)
    x = np.concatenate([np.tile(rng.normal(size=(1, 8)), (8, 1)), rng.normal(size=(30, 8)) * 0.01]).astype(np.float32)
    q = x[:3] * 2
    scores, exact = exact_top_k(x, q, K + 8)
    others = [[r for r in range(8) if r not in row[:K]] for row in exact]  # the three tied rows left out
    found = np.array([o + list(row[:K - len(o)]) for o, row in zip(others, exact)])
    assert recall_at_k(found, exact, K) == pytest.approx(0.4)  # two of the five listed first
    assert recall_at_k(found, exact, K, scores) == 1.0
    assert tune_search(build_faiss(x, "Flat"), q, exact, K, 1.0, exact_scores=scores).recall == 1.0


def test_an_index_that_cannot_reach_the_target_says_so(data):
    x, q, exact = data
    index = pq_index(x, "IVF16,PQ2")  # 2 bytes a vector: coarse whatever the search
    t = tune_search(index, q, exact, K, 0.95)
    assert not t.reached and t.recall < 0.95
    assert 16 in t.trials and max(t.trials.values()) < 0.95  # up to the largest setting, every one tried missed
    # the setting recorded is the best measured (ties: the smallest), not the largest: here nprobe 16's codes
    # measured below a smaller nprobe's (tests/test_tune_best_fallback.py)
    best = max(t.trials.values())
    assert t.params == {"nprobe": min(v for v, r in t.trials.items() if r == best)} and t.recall == best
    pq_only = tune_search(pq_index(x, "PQ2"), q, exact, K, 0.95)
    assert (pq_only.knob, pq_only.reached) == (None, False) and pq_only.recall < 0.95


def test_reranking_lets_a_compressed_index_reach_a_target_it_misses_alone(data, tmp_path):
    x, q, _ = data
    np.save(tmp_path / "x.npy", x.astype(np.float16))
    vectors = np.load(tmp_path / "x.npy", mmap_mode="r")
    exact = exact_top_k(vectors, q, K)[1]  # the ground truth is the stored float16 vectors
    index = pq_index(x, "IVF16,PQ4")
    alone = tune_search(index, q, exact, K, 0.95)
    reranked = tune_search(index, q, exact, K, 0.95, rerank_vectors=vectors, rerank_depth=100)
    assert not alone.reached and reranked.reached and reranked.recall >= 0.95
    assert reranked.params["nprobe"] < 16


def test_rerank_recovers_exact_order_from_a_shuffled_superset(data, tmp_path):
    x, q, _ = data
    np.save(tmp_path / "x.npy", x.astype(np.float16))
    vectors = np.load(tmp_path / "x.npy", mmap_mode="r")
    exact_s, exact_r = exact_top_k(vectors, q, K)
    superset = exact_top_k(vectors, q, 40)[1]
    rng = np.random.default_rng(1)
    shuffled = rng.permuted(np.concatenate([superset, superset[:, :3], np.full((len(q), 4), NO_ROW)], 1), axis=1)
    scores, rows = rerank(q, shuffled, vectors, K)
    assert rows.dtype == np.int64 and scores.dtype == np.float32 and rows.shape == scores.shape == (len(q), K)
    assert np.array_equal(rows, exact_r)
    assert np.allclose(scores, exact_s, rtol=1e-5)


def test_rerank_leaves_out_missing_rows_and_pads_short_lists(tmp_path):
    x = np.array([[1, 0], [0, 1], [2, 2], [-3, 0]], dtype=np.float16)
    q = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=np.float32)
    cand = np.array([[3, -1, 0, 0], [-1, -1, -1, -1], [1, 2, -1, 3]])
    scores, rows = rerank(q, cand, x, 3)
    assert rows.tolist() == [[0, 3, -1], [-1, -1, -1], [2, 1, 3]]
    assert scores.tolist() == [[1.0, -3.0, NO_SCORE], [NO_SCORE] * 3, [4.0, 1.0, -3.0]]
    assert rerank(q, cand[:, :1], x, 2)[1].tolist() == [[3, -1], [-1, -1], [1, -1]]


def test_rerank_of_float16_vectors_scores_in_float32():
    big = np.full((2, 1024), 60.0, dtype=np.float16)  # 60 x 60 x 1024 overflows float16 (max 65504)
    scores, rows = rerank(np.full((1, 1024), 60.0), np.array([[1, 0]]), big, 1)
    assert rows.tolist() == [[0]] and scores[0, 0] == pytest.approx(60 * 60 * 1024)


@pytest.mark.slow  # 3 minutes of one core; bench_scale runs end to end by default in the own-vectors test below
def test_bench_scale_quick_runs_every_index_kind(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_scale.py"), "--quick", "--json"],
                       check=False, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert [(row["n"], row["kind"]) for row in rows] == [(n, kind) for n in (10_000, 20_000)
                                                         for kind in ("flat", "hnsw_sq8", "ivfpq_rerank", "ivfpq4fs_rerank")]
    for row in rows:
        assert {"n", "index", "build_s", "peak_rss_mb", "bytes_per_passage", "qps_b16", "qps_b64", "recall_at_5",
                "train_rss_mb"} <= set(row)
        assert 0 <= row["recall_at_5"] <= 1 and row["build_s"] > 0 and row["qps_b16"] > 0 and row["qps_b64"] > 0
        assert row["peak_rss_mb"] > row["base_rss_mb"] + row["index_mb"] and row["train_rss_mb"] > row["train_anon_mb"] > 0
        assert row["peak_rss_mb"] < 2000  # VmHWM of the build alone, not the parent's RSS carried into it
        # tuned on one set of queries, recall reported on another (on the tuning set the target holds by construction)
        assert row["tuning_queries"] == row["queries"] == 100 and 0 <= row["tuned_recall_at_5"] <= 1
        assert row["tuned_recall_at_5"] >= row["target_recall"] or not row["target_reached"]
        assert row["train_batch_ms"] > 0 and row["train_batch_ms_cold"] > 0
    for n in (10_000, 20_000):
        flat, hnsw, ivfpq, fast_scan = (row for row in rows if row["n"] == n)
        assert flat["recall_at_5"] == 1.0 and flat["bytes_per_passage"] == pytest.approx(768 * 4, rel=0.01)
        assert flat["train_index_mapped"] and not flat["train_index_mapped_mmap"]  # faiss 1.15: only IFC (DenseIndex.load's) maps Flat
        assert hnsw["bytes_per_passage"] < flat["bytes_per_passage"] / 2  # 768 bytes of SQ8 code + the graph
        # 72 bytes of code and id, plus (at 10k to 20k) 80 to 150 more of centroids and OPQ matrix that N amortizes
        assert 72 < ivfpq["bytes_per_passage"] < 250 and ivfpq["code_bytes_per_passage"] == 72
        assert ivfpq["rerank_depth"] == 20 and ivfpq["index"] == f"OPQ64_256,IVF{round(4 * n ** 0.5)},PQ64"
        assert ivfpq["target_reached"] and ivfpq["train_index_mapped"]
        # the same 64 code bytes as 128 4-bit codes, re-ranked deeper
        assert fast_scan["index"] == f"OPQ128_256,IVF{round(4 * n ** 0.5)},PQ128x4fs" and fast_scan["rerank_depth"] == 100
        assert 72 < fast_scan["bytes_per_passage"] < 250 and fast_scan["code_bytes_per_passage"] == 72
        assert fast_scan["target_reached"]
    assert "EXTRAPOLATION" in r.stderr and "| ivfpq_rerank | 21M |" in r.stderr
    # with --json the measured table goes to stderr too, before the extrapolation
    assert "| 10,000 | Flat |" in r.stderr and r.stderr.index("| 20,000 | HNSW32,SQ8 |") < r.stderr.index("EXTRAPOLATION")
    assert "(tuned 1.000)" in r.stderr and "held-out" in r.stderr
    # --fit: the same table and fit again from the --json rows, split across two files as separate runs write them
    lines = r.stdout.strip().splitlines()
    (tmp_path / "a.jsonl").write_text("\n".join(lines[:4]) + "\n")
    (tmp_path / "b.jsonl").write_text("\n".join(lines[4:]) + "\n")
    fit = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_scale.py"), "--fit", str(tmp_path / "b.jsonl"),
                          str(tmp_path / "a.jsonl")], check=False, capture_output=True, text=True, env=env, timeout=60)
    assert fit.returncode == 0, fit.stderr[-3000:]
    assert fit.stdout.split("EXTRAPOLATION", 1)[1] == r.stderr.split("EXTRAPOLATION", 1)[1]
    assert "| 10,000 | Flat |" in fit.stdout and fit.stdout.index("| 10,000 |") < fit.stdout.index("| 20,000 |")


def _bench_scale():
    spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "scripts" / "bench_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_scale_refuses_bad_flags_and_fit_files_in_one_line(tmp_path, capsys):
    """Numbers that cannot work are argparse's errors, and a --fit file, --index or --questions that is
    not what the script reads is one line naming the file, line and field (exit 2; they were tracebacks)."""
    scale = _bench_scale()
    row = dict.fromkeys(scale.FIT_FIELDS, 1) | {"kind": "flat"}
    files = {"missing.jsonl": None, "not_json.jsonl": "not json\n", "short.jsonl": json.dumps({"n": 10}) + "\n",
             "kind.jsonl": json.dumps({**row, "kind": "bogus"}) + "\n", "n.jsonl": json.dumps(row) + "\n" + json.dumps({**row, "n": 0}),
             "rows.txt": json.dumps(row) + "\n"}
    for name, text in files.items():
        if text is not None:
            (tmp_path / name).write_text(text)
    cases = [(["--sizes", "abc"], "--sizes: must be positive"), (["--sizes", "10,0"], "--sizes: must be positive"),
             (["--target-recall", "5"], "--target-recall: must be in (0, 1]"), (["--queries", "0"], "--queries"),
             (["--rerank-depth", "0"], "--rerank-depth"), (["--nlist-factor", "nan"], "--nlist-factor"),
             (["--fit", str(tmp_path / "missing.jsonl")], "missing.jsonl: file not found"),
             (["--fit", str(tmp_path / "not_json.jsonl")], "not_json.jsonl:1:"),
             (["--fit", str(tmp_path / "short.jsonl")], "short.jsonl:1: field 'kind': missing"),
             (["--fit", str(tmp_path / "kind.jsonl")], "kind.jsonl:1: field 'kind': unknown index kind 'bogus'"),
             (["--fit", str(tmp_path / "n.jsonl")], "n.jsonl:2: field 'n': must be a positive whole number"),
             (["--fit", str(tmp_path / "rows.txt")], "rows.txt: --fit reads"),
             (["--index", str(tmp_path / "no_index"), "--questions", str(tmp_path / "n.jsonl")], "no_index")]
    for flags, says in cases:
        with pytest.raises(SystemExit) as stop:
            scale.main(flags)
        err = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and says in err.splitlines()[-1] and "Traceback" not in err, (flags, err)
        assert len(err.splitlines()) == 1 or "usage:" in err, (flags, err)


def test_bench_scale_reads_rows_of_its_float16_store(tmp_path):
    bench = _bench_scale()
    x = np.random.default_rng(0).standard_normal((30, 4)).astype(np.float16)
    np.save(tmp_path / "x.npy", x)
    rows = np.array([0, 3, 7, 8, 14, 29])
    assert np.array_equal(bench.read_rows(tmp_path / "x.npy", 0, 30, rows), x[rows].astype(np.float32))
    assert np.array_equal(bench.read_rows(tmp_path / "x.npy", 28, 35), x[28:].astype(np.float32))


def test_bench_scale_fit_checks_its_form_with_a_third_size_and_keeps_list_counts_apart():
    """Three sizes: a second row per kind fits the two largest alone, so a bend shows; rows with
    another --nlist-factor are another index, fitted on their own; memory never falls with N."""
    import io

    bench = _bench_scale()

    def row(n, qps, factor=4.0, anon=200.0):
        sample = bench.train_size("ivfpq_rerank", n, factor)
        return {"n": n, "kind": "ivfpq_rerank", "nlist_factor": factor, "train_sample": sample, "train_s": sample / 1e4,
                "add_s": n / 1e5, "qps_b16": qps, "qps_b64": qps, "bytes_per_passage": 74.0,
                "train_peak_rss_mb": 500 + sample / 1e3, "add_peak_rss_mb": 300 + n / 1e4, "train_rss_mb": 100 + n / 1e3,
                "train_anon_mb": anon}

    # qps halves from 1M to 2M, then falls 4x from 2M to 4M: no single power law
    rows = [row(1_000_000, 8000, anon=210.0), row(2_000_000, 4000), row(4_000_000, 1000, anon=190.0),
            row(1_000_000, 7000, 16.0), row(4_000_000, 2000, 16.0)]
    out = io.StringIO()
    bench.print_extrapolation(rows, out)
    table = [line.split(" | ") for line in out.getvalue().splitlines() if line.startswith("| ivfpq_rerank")]
    at_21m = {(cells[0], cells[2]): cells for cells in table if cells[1] == "21M"}
    qps = bench.human  # the table's own formatting
    all_three = at_21m[("| ivfpq_rerank", "1,000,000, 2,000,000, 4,000,000")]
    last_two = at_21m[("| ivfpq_rerank", "2,000,000, 4,000,000")]
    column = ["build_s", "train_s", "add_s", "bytes", "peak_rss_mb", "train_peak_rss_mb", "add_peak_rss_mb",
              "qps_b16"].index("qps_b16") + 3
    # through 2M and 4M: 1000 * (21/4) ** -2; through all three the slope is shallower
    assert last_two[column] == qps("qps_b16", 1000 * (21 / 4) ** -2)
    assert float(all_three[column].replace(",", "")) > 2 * float(last_two[column].replace(",", ""))
    many = at_21m[("| ivfpq_rerank, 16·sqrt(N) lists", "1,000,000, 4,000,000")]
    slope = np.log(2000 / 7000) / np.log(4)  # its own two sizes, not the 4·sqrt(N) rows
    assert many[column] == qps("qps_b16", 2000 * (21 / 4) ** slope)
    assert all(not cells[-1].startswith("-") for cells in table)  # private memory: 210 -> 190 is held, not extrapolated down


def test_bench_scale_docstring_examples():
    assert doctest.testmod(_bench_scale(), optionflags=doctest.ELLIPSIS).failed == 0


def test_bench_scale_runs_on_a_built_indexs_own_vectors(tmp_path):
    """--index/--questions: a trained DPR's vectors (here a tiny one's, 16-d) and real questions as queries."""
    from lewisrag.data.records import read_passages, read_qa
    from lewisrag.data.world import build_world, write_world
    from lewisrag.index.dense import build_dense_index
    from lewisrag.training.dpr import DPRTrainConfig, train_dpr

    with one_thread():
        write_world(build_world(entities=400), tmp_path / "world")
        passages = read_passages(tmp_path / "world" / "passages_a.jsonl")
        train_dpr(DPRTrainConfig(vocab_size=300, hidden_size=16, layers=1, heads=2, batch_size=8, steps=1),
                  read_qa(tmp_path / "world" / "train.jsonl"), passages, tmp_path / "dpr")
        build_dense_index(passages, tmp_path / "dpr", tmp_path / "index")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_scale.py"), "--index", str(tmp_path / "index"),
                        "--questions", str(tmp_path / "world" / "test.jsonl"), "--queries", "100", "--opq-iters", "4",
                        "--json"], check=False, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    n = len(passages)
    kinds = ("flat", "hnsw_sq8", "ivfpq_rerank", "ivfpq4fs_rerank")
    assert [(row["n"], row["dim"], row["kind"]) for row in rows] == [(n, 16, k) for k in kinds]
    flat, _, ivfpq, fast_scan = rows
    assert flat["recall_at_5"] == 1.0 and flat["source"] == f"index {tmp_path / 'index'}"
    assert flat["tuning_queries"] == flat["queries"] == 100  # the first 100 questions tune, the next 100 measure
    assert ivfpq["index"] == f"OPQ8_16,IVF{round(4 * n ** 0.5)},PQ8" and ivfpq["code_bytes_per_passage"] == 16
    assert fast_scan["index"] == f"OPQ16_16,IVF{round(4 * n ** 0.5)},PQ16x4fs" and fast_scan["code_bytes_per_passage"] == 16
    assert all(0 <= row["recall_at_5"] <= 1 and row["qps_b16"] > 0 for row in rows)
    assert "EXTRAPOLATION" not in r.stderr  # one index is one size
    bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_scale.py"), "--index", str(tmp_path / "index")],
                         check=False, capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 2 and "--index and --questions go together" in bad.stderr


def test_tuning_never_chooses_a_setting_that_finds_fewer_than_k_passages():
    """At nprobe 1 an index of 64 lists over 300 vectors finds about 5 passages a query: asked for
    10, a query got padded rows, which count as misses, so a low target was met there and recorded;
    `train rag` and `ask` then refused the index's own setting (`check_found`)."""
    x, q = clustered(300, queries=50, seed=1)
    k = 10
    exact = exact_top_k(x, q, k)[1]
    index = build_faiss(x, "IVF64,Flat")
    apply_params(index, {"nprobe": 1})
    assert (index.search(q, k)[1] < 0).any()  # the setting the old rule chose at this target
    t = tune_search(index, q, exact, k, 0.3)
    assert t.reached and t.params["nprobe"] > 1 and t.trials[1] >= 0.3  # recall alone would have taken 1
    assert not (index.search(q, k)[1] < 0).any()  # the index is left at a setting that finds k for every query
    apply_params(index, {"nprobe": t.params["nprobe"] - 1})
    assert (index.search(q, k)[1] < 0).any()  # and one lower does not
