"""Benchmark the dense index on 100k passages: encoding throughput, then Flat / HNSW32 / IVF-PQ.

    .venv/bin/python scripts/bench_index.py [--n 100000] [--dim 128] [--encoder DPR_CKPT]

Embeddings have realistic structure: clustered vectors (topics) with per-passage noise, the
shape a trained encoder gives — uniform random vectors would make PQ look useless. With
`--encoder`, the passages' vectors come from that checkpoint's context encoder instead (slow).
For each index type: build time, queries/s in batches of 64 (the size RAG training sends),
recall@5 against exact search (overlap of the top-5 sets, and whether the exact nearest passage
is among the top 5), and bytes per passage. The first row shows FAISS's default
small-batch path, which lewisrag avoids (`use_blas_for_small_batches`).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np


PQ_CENTROIDS = 256  # of each PQ sub-quantizer (8 bits a code): FAISS trains them on at least as many vectors


def clustered_vectors(n: int, dim: int, clusters: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    # Topics, then sub-topics inside each, then passages: neighbours at several scales, as in the
    # embeddings of a trained encoder (entities of one kind, then one entity's passages). Trained
    # encoders also use few directions of their space, so the structure lives in a 24-d latent
    # space mapped into `dim` dimensions, plus a little isotropic noise.
    rng = np.random.default_rng(seed)
    latent = 24
    topics = rng.normal(size=(max(clusters // 20, 1), latent))
    subtopics = topics[rng.integers(0, len(topics), clusters)] + 0.5 * rng.normal(size=(clusters, latent))
    z = subtopics[rng.integers(0, clusters, n)] + 0.25 * rng.normal(size=(n, latent))
    zq = z[rng.integers(0, n, 2048)] + 0.1 * rng.normal(size=(2048, latent))
    mix = rng.normal(size=(latent, dim)) / np.sqrt(latent)
    x = z @ mix + 0.02 * rng.normal(size=(n, dim))
    queries = zq @ mix + 0.02 * rng.normal(size=(2048, dim))
    return x.astype(np.float32), queries.astype(np.float32)


def encoding_throughput(encoder: str | None, n: int = 512) -> tuple[str, float]:
    """Passages per second through a DPR context encoder (the small preset's size by default)."""
    import torch
    from transformers import DPRConfig, DPRContextEncoder

    from lewisrag.index.encoders import DPRCheckpoint, encode_texts
    from lewisrag.training.dpr import train_tokenizer

    texts = [(f"Country {i}", f"Country {i} is a republic. Its leader is Ana Kel{i}. The capital is Dor{i}, "
              f"founded in {1800 + i % 200}. Population {i % 97}.{i % 10} million. " * 3) for i in range(n)]
    if encoder:
        ckpt = DPRCheckpoint.load(encoder)
        model, tok, label = ckpt.ctx_encoder, ckpt.tokenizer, f"DPR {encoder}"
    else:
        tok = train_tokenizer([a + " " + b for a, b in texts], 8000)
        torch.manual_seed(0)
        model = DPRContextEncoder(DPRConfig(vocab_size=len(tok), hidden_size=128, num_hidden_layers=2,
                                            num_attention_heads=4, intermediate_size=512)).eval()
        label = "DPR d128 2 layers (small preset size)"
    encode_texts(model, tok, texts[:64], batch_size=64, max_length=128)  # warm-up
    t = time.perf_counter()
    encode_texts(model, tok, texts, batch_size=64, max_length=128)
    return label, n / (time.perf_counter() - t)


def time_search(index, queries: np.ndarray, batch: int = 64) -> tuple[float, np.ndarray]:
    rows = []
    t = time.perf_counter()
    for i in range(0, len(queries), batch):
        rows.append(index.search(queries[i : i + batch], 5)[1])
    return len(queries) / (time.perf_counter() - t), np.concatenate(rows)


def main() -> None:
    import faiss

    from lewisrag.index.dense import build_faiss, use_blas_for_small_batches

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="passages")
    ap.add_argument("--dim", type=int, default=128, help="embedding size (the small DPR's)")
    ap.add_argument("--clusters", type=int, default=2000, help="topics in the synthetic embeddings")
    ap.add_argument("--encoder", default=None, help="DPR checkpoint for the encoding row")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for flag, value in (("--n", args.n), ("--dim", args.dim), ("--clusters", args.clusters)):
        if value < 1:
            ap.error(f"--{flag.lstrip('-')}: must be at least 1, got {value}")
    if args.dim % 8:  # the IVF-PQ rows split each vector into dim / 8 sub-vectors
        ap.error(f"--dim: must be a multiple of 8, got {args.dim}")
    if args.n < PQ_CENTROIDS:  # FAISS's refusal came after the encoding and the first rows, as a traceback
        ap.error(f"--n: must be at least {PQ_CENTROIDS} (the IVF-PQ rows train {PQ_CENTROIDS} centroids per "
                 f"sub-vector on the passages), got {args.n}")

    from lewisrag.data.io import InputError

    try:
        label, pps = encoding_throughput(args.encoder)
    except InputError as e:  # a --encoder that is not a DPR checkpoint: one line, as the lewisrag command says it
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"encoding: {label}: {pps:,.0f} passages/s (threads={faiss.omp_get_max_threads()})\n")

    x, queries = clustered_vectors(args.n, args.dim, args.clusters, args.seed)
    queries = queries[:1024]
    exact = np.argsort(-(queries @ x.T), axis=1)[:, :5]
    nlist = int(4 * np.sqrt(args.n))
    pq_m = args.dim // 8
    rows_out = []
    factories = [("Flat", False), ("Flat", True), ("HNSW32", True), (f"IVF{nlist},PQ{pq_m}", True), (f"IVF{nlist},PQ{2 * pq_m}", True)]
    for factory, blas in factories:
        faiss.cvar.distance_compute_blas_threshold = 128_000  # FAISS's own default in this release
        if blas:
            use_blas_for_small_batches()
        t = time.perf_counter()
        try:
            index = build_faiss(x, factory)
        except InputError as e:  # FAISS refused to train or fill the index: one line, not a traceback
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
        build_s = time.perf_counter() - t
        faiss.ParameterSpace().set_index_parameters(index, "nprobe=16" if "IVF" in factory else
                                                   ("efSearch=128" if "HNSW" in factory else ""))
        qps, rows = time_search(index, queries)
        recall = np.mean([len(set(a) & set(b)) / 5 for a, b in zip(rows, exact)])
        nn_in_5 = np.mean([b[0] in a for a, b in zip(rows, exact)])
        with tempfile.TemporaryDirectory() as d:
            faiss.write_index(index, os.path.join(d, "i"))
            size = os.path.getsize(os.path.join(d, "i"))
        name = factory + ("" if blas else " (FAISS default small-batch path)")
        rows_out.append((name, build_s, qps, recall, nn_in_5, size / args.n))

    print(f"{args.n:,} passages, {args.dim}-d, batches of 64 queries, top-5")
    print("| index | build s | queries/s | recall@5 vs exact (top-5 overlap) | exact top-1 in top 5 | bytes/passage |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, build_s, qps, recall, nn, bpp in rows_out:
        print(f"| {name} | {build_s:.2f} | {qps:,.0f} | {recall:.3f} | {nn:.3f} | {bpp:.0f} |")


if __name__ == "__main__":
    main()
