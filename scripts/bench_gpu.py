"""lewisrag's RAG against transformers' RAG on a GPU: bf16 training steps and decoding, same weights.

    python scripts/bench_gpu.py                 # needs CUDA; prints one table, exits 0 without a GPU

Two sizes: the CPU bench's (d_model 256, 3+3 layers, vocab 8k) and a BART-base-like one (d_model
768, 6+6 layers, vocab 50k, the paper's generator size), both with K=5 documents and 4 beams.
Training steps run under bf16 autocast (fp32 master weights, AdamW), decoding in fp32 so that the
two implementations can be checked for identical ids. Times are CUDA-synchronised medians; the
ratio is transformers ÷ lewisrag (higher is better for lewisrag). FAISS on the GPU is used when the
installed faiss has GPU support (faiss-gpu); faiss-cpu is reported as such.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import tempfile
import time

import torch

from lewisrag.rag_model import RagModel
from lewisrag.rag_model.testing import tiny_batch, tiny_hf_rag

SIZES = {  # name: (d_model, layers, heads, ffn, vocab, batch, context length, target length)
    "bench": (256, 3, 4, 1024, 8192, 8, 128, 16),
    "check": (32, 1, 2, 64, 500, 2, 16, 6),  # --device cpu --sizes check: the script itself runs
    "base-like": (768, 6, 12, 3072, 50265, 16, 256, 24),
}
K, BEAMS = 5, 4


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def cuda_time(fn, reps: int) -> float:
    """Median seconds of `reps` calls after one warm-up, synchronised around each."""
    fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peak_gb(fn) -> float:
    if not torch.cuda.is_available():
        return 0.0
    sync()
    torch.cuda.reset_peak_memory_stats()
    fn()
    sync()
    return torch.cuda.max_memory_allocated() / 2**30


def train_step(model, batch, q_ids, docs):
    ids, mask, _, labels = batch
    model = copy.deepcopy(model).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def step():
        with torch.autocast(q_ids.device.type, dtype=torch.bfloat16):
            q = model.question_encoder(q_ids)[0]  # (B, D)
            doc_scores = torch.bmm(q.unsqueeze(1).float(), docs.transpose(1, 2)).squeeze(1)  # (B, K)
            out = model(context_input_ids=ids, context_attention_mask=mask, doc_scores=doc_scores, labels=labels,
                        reduce_loss=True, n_docs=K)
        opt.zero_grad(set_to_none=True)
        out.loss.float().backward()
        opt.step()

    return step


def bench_size(name: str, reps: int, tmp: str, dev: torch.device) -> list[tuple]:
    d, layers, heads, ffn, vocab, b, length, target = SIZES[name]
    g = torch.Generator().manual_seed(1)
    q_ids = torch.randint(3, vocab, (b, 16), generator=g).to(dev)
    docs = (torch.randn(b, K, d, generator=g) * 0.1).to(dev)
    batch = [t.to(dev) for t in tiny_batch(b, K, length, target, vocab, seed=3)]
    ids, mask, scores, labels = batch
    rows = []
    for variant in ("token", "sequence"):
        hf = tiny_hf_rag(variant, seed=0, vocab=vocab, d_model=d, layers=layers, heads=heads, ffn=ffn, n_docs=K,
                         init_std=0.05, max_positions=1024, eos_bias=2.0)
        path = os.path.join(tmp, f"{name}-{variant}")
        hf.save_pretrained(path)
        ours = RagModel.from_hf_pretrained(path).eval().to(dev)
        hf = hf.to(dev)
        f_hf, f_ours = train_step(hf, batch, q_ids, docs), train_step(ours, batch, q_ids, docs)
        rows.append((name, f"bf16 train step ({variant})", cuda_time(f_hf, reps), cuda_time(f_ours, reps),
                     peak_gb(f_hf), peak_gb(f_ours), ""))
        kw = dict(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, n_docs=K,
                  num_beams=BEAMS, max_length=target + 4)
        if variant == "sequence":
            kw["do_deduplication"] = False
        with torch.no_grad():
            same = torch.equal(hf.generate(**kw), ours.generate(**kw))
            what = "RAG-Sequence thorough, no dedup" if variant == "sequence" else "RAG-Token beam search"
            d_hf, d_ours = (lambda: hf.generate(**kw)), (lambda: ours.generate(**kw))
            rows.append((name, f"{what} (fp32)", cuda_time(d_hf, max(2, reps // 2)), cuda_time(d_ours, max(2, reps // 2)),
                         peak_gb(d_hf), peak_gb(d_ours), "identical ids" if same else "IDS DIFFER"))
        del hf, ours
        torch.cuda.empty_cache()
    return rows


def faiss_row() -> tuple:
    import faiss
    import numpy as np

    if not hasattr(faiss, "StandardGpuResources"):
        return ("-", f"FAISS GPU search: faiss {faiss.__version__} has no GPU support (faiss-cpu)", float("nan"),
                float("nan"), 0.0, 0.0, "not run")
    n, d, q = 1_000_000, 768, 1024
    x = np.random.default_rng(0).standard_normal((n, d), dtype=np.float32)
    cpu = faiss.IndexFlatIP(d)
    cpu.add(x)
    gpu = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, cpu)
    qs = x[:q]
    t_cpu = min(_wall(lambda: cpu.search(qs, 5)) for _ in range(2))
    t_gpu = min(_wall(lambda: gpu.search(qs, 5)) for _ in range(3))
    return ("-", f"FAISS Flat search {q} queries x {n} docs (cpu vs gpu)", t_cpu, t_gpu, 0.0, 0.0, "")


def _wall(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--sizes", default=",".join(SIZES))
    ap.add_argument("--device", default="cuda", help="cpu only checks that the script runs")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        return
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 decoding must stay comparable id for id
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.sizes.split(","):
            rows += bench_size(name, args.reps, tmp, torch.device(args.device))
    rows.append(faiss_row())
    where = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    print(f"GPU bench: {where}, torch {torch.__version__}, K={K}, beams {BEAMS}")
    print(f"{'size':10s} {'measure':58s} {'transformers s':>14s} {'lewisrag s':>11s} {'speed-up':>9s} "
          f"{'peak GB hf':>10s} {'peak GB ours':>12s}  note")
    for size, what, a, b, ma, mb, note in rows:
        print(f"{size:10s} {what:58s} {a:14.4f} {b:11.4f} {a / b:8.2f}x {ma:10.2f} {mb:12.2f}  {note}")


if __name__ == "__main__":
    main()
