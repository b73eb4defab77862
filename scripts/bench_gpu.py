"""lewisrag's RAG training pipeline on a GPU at the paper's model sizes, beside transformers' RAG.

    python scripts/bench_gpu.py                       # needs CUDA; exits 2 without a GPU
    python scripts/bench_gpu.py --preset check --device cpu   # the whole script at toy sizes (CI-fast)
    python scripts/bench_gpu.py --json results.json   # also write every number as JSON

Exit status: 0 when every part asked for ran; 1 when a part failed or was skipped for time (`--budget`:
a part, or an `mfu` mode, that would start past it), or when an `mfu` mode failed otherwise than by
running out of memory or measured nothing at one of its batches (`mfu_failures`: the JSON's
`errors["mfu"]`), after the report and the JSON, which hold every other part's numbers and the error
or the skip; 2 for bad arguments (an unknown `--parts`
name, say) or `--device cuda` on a machine without CUDA: nothing measured.

No model hub is needed: the checkpoints are built here from configs in the exact transformers
layouts (tests/hf_layouts.py, the builder the offline tests use) at the paper's shapes, random
weights: a DPR question/context pair shaped like dpr-*-single-nq-base (BERT-base: hidden 768,
12 layers) and a BART generator shaped like bart-large (d_model 1024, 12+12 layers, vocab 50265).
The parts, each timed on its own:

1. corpus  `--passages` synthetic passages (100 words each, wiki_dpr's schema: id, title, text,
           embeddings) written as parquet. The context encoder embeds `--encode` distinct ones on
           the GPU through `index build`'s own path (bf16 autocast) - that is the encoding
           throughput; the corpus repeats those rows with new ids up to `--passages`, so every
           stored vector is the encoding of its row's text.
2. index   `build_dense_index(..., reuse_embeddings=True)` over the whole corpus: spot check, copy
           of the stored vectors, FAISS Flat, passages written - what a wiki_dpr user runs.
3. train   `train_rag` as `lewisrag train rag` runs it (accelerate, bf16 autocast, AdamW, K=5
           retrieved per question from the index above on every step, question encoder trained):
           RAG-Token with the index searched on the GPU (`--search-device auto`) and with FAISS on
           the CPU, and RAG-Sequence. Reported: median step time after warm-up and its split
           (search, the rest of retrieval, forward, backward + optimizer + the rest), questions/s,
           generator tokens/s (padding counted: it is computed), model FLOPs utilisation (6 FLOPs
           per parameter per token plus attention, the decoder's cross-attention keys and values per
           source token, against the device's datasheet dense bf16 rate (`datasheet_peak`: 989
           TFLOP/s for an H100 or H200 SXM; the rate used and the device's name are in the JSON) and
           against the bf16 matmul rate measured here), peak GPU memory.
   answer  `answer_questions` with the trained RAG-Token model (greedy and 4 beams, fp32), loaded
           and its index placed as `reproduce`'s evaluation does (`load_trained(device=)`,
           `place_search`).
   closed_book  `reproduce`'s closed-book stage at the generator's size: bf16 training steps of
           `train_closed_book` (the question alone in, AdamW fused on a GPU) at the paper's batch of
           128, then greedy answers from the question alone (`answer_closed_book`).
4. same weights  one bf16 training step of transformers' RagTokenForGeneration /
           RagSequenceForGeneration and of lewisrag's RagModel with identical weights and identical
           pre-retrieved contexts (so retrieval is out of both), its loss and question-encoder
           gradient norm checked in float64 and eval mode on the batch's first 2 questions (the
           row's note: SAME or DIFFER, within bench_rag's SAME_RTOL), and fp32 beam-search
           decoding, checked id for id. Ratio = transformers / lewisrag (above 1: lewisrag is faster).
   compiled  the same RAG-Token step with lewisrag's models compiled as `train rag --compile`
           compiles them (torch.compile, inductor), beside transformers' timed again; the first,
           compiling, call timed apart.
   mfu     lewisrag's same-weights RAG-Token step alone, eager and compiled (`--mfu-modes`), at the
           preset's batch and twice it (`--mfu-scales`): MFU against the datasheet and the measured
           matmul (where the 45% target can be met, if anywhere), peak memory.
5. search  one training batch of questions against the corpus's vectors: FAISS Flat on the CPU,
           an exact bf16 matrix product on the GPU, and `DenseIndex.search_on` in float32 and float16.
6. search_scale  `train rag --search-device`'s search at the paper's 21,015,324 passages
           (`--scale-passages`) without building that corpus: random 768-d vectors, float32 on
           the GPU where they fit and float16 (what `place_search` picks beside a bart-large step),
           the float16 top-K checked against the float32 one. `--parts search_scale` runs it alone.
7. profile the RAG-Token step as the CLI runs it, under torch.profiler, without the split's
           synchronisations: step time, the device's kernel time and busy share, kernel launches
           per step, the operators that take the most device and host time, and the main thread's
           time outside every recorded operator. Last of all: torch's profiler can leave CUPTI
           active and every later step slower (pytorch/pytorch#144455; `TEARDOWN_CUPTI=1` tears it
           down, as scripts/gpu_session.sh sets).

Measured results: docs/measurements/ (the JSON of each call) and the README's performance section.
Every part runs under a deadline (`--budget` seconds); a part that would start after it is
reported as skipped, and so is an `mfu` mode that would start after it or, compiled, not finish
before it (a row saying so); a part that fails prints its error and the rest still run (the exit
status is then 1). The parts that need the corpus are skipped with it, or each an error ("not run")
when it failed. `--parts answer` brings `train_token` in: it answers with that part's model.
"""

from __future__ import annotations

import argparse
import copy
import functools
import gc
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # hf_layouts: the transformers folder builder the offline tests use
sys.path.insert(0, str(ROOT / "scripts"))  # bench_rag: the same-weights check of the CPU bench, here too

from bench_rag import first_step_agreement  # noqa: E402
from hf_layouts import bart, dpr_pair  # noqa: E402

from lewisrag.data.passages import open_passages  # noqa: E402
from lewisrag.index.dense import DenseBuildConfig, DenseIndex, build_dense_index  # noqa: E402
from lewisrag.rag_model import RagModel  # noqa: E402
from lewisrag.rag_model.checkpoints import from_hf  # noqa: E402
from lewisrag.training.devices import check_compiler, compile_models  # noqa: E402
from lewisrag.training.optim import adamw  # noqa: E402
from lewisrag.training.rag import RagTrainConfig, train_rag  # noqa: E402

DATASHEET_BF16_DENSE = (  # FLOP/s of dense bf16 by NVIDIA's datasheets, matched in order in torch.cuda.get_device_name
    ("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H200 NVL", 836e12), ("H100", 989e12), ("H200", 989e12))  # then SXM
ASSUMED_PEAK = 989e12  # FLOP/s, H100 and H200 SXM's: MFU's denominator on a device the table does not name
K, BEAMS = 5, 4

PARTS = ("matmul", "train_token", "answer", "same_weights", "compiled", "mfu", "closed_book", "train_token_faiss",
         "train_sequence", "search", "search_scale", "profile")  # the order they run in
CORPUS_PARTS = {"train_token", "profile", "answer", "same_weights", "closed_book", "compiled", "mfu", "train_token_faiss",
                "train_sequence", "search"}  # need `corpus`
PRESETS = {  # the shapes of each part; "paper" is the default on a GPU
    "paper": dict(dpr=dict(hidden=768, layers=12, heads=12, vocab_size=30522, init_std=0.02, dropout=0.1),
                  bart=dict(d_model=1024, layers=12, heads=16, vocab_size=8000, model_vocab=50265, dropout=0.1),
                  passages=1_000_000, scale_passages=21_015_324, encode=65_536, questions=4096, batch=16, steps_token=150, steps_faiss=30, steps_sequence=60,
                  context=300, target=24, closed_batch=128, steps_closed=30,
                  mfu_compile_s=170),  # a compiled mfu mode: the H200's compile took 153 s at 16 questions, then its steps
    "check": dict(dpr=dict(hidden=32, layers=2, heads=2, vocab_size=600, init_std=0.02),
                  bart=dict(d_model=32, layers=2, heads=2, vocab_size=600, model_vocab=700),
                  passages=3000, scale_passages=20_000, encode=512, questions=64, batch=4, steps_token=6, steps_faiss=4, steps_sequence=4,
                  context=64, target=8, closed_batch=8, steps_closed=4, mfu_compile_s=60),
}


# --- timing helpers ---------------------------------------------------------------------------------


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn, reps: int) -> float:
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
    """The device's peak allocated memory during `fn` in GiB (2**30 bytes; `_gb` as the JSON's `peak_gb` keys
    have always been named, and the report says GiB), 0.0 without CUDA."""
    if not torch.cuda.is_available():
        return 0.0
    sync()
    torch.cuda.reset_peak_memory_stats()
    fn()
    sync()
    return torch.cuda.max_memory_allocated() / 2**30


def datasheet_peak(name: str) -> tuple[float, bool]:
    """(dense bf16 FLOP/s, assumed) of the device that torch.cuda.get_device_name calls `name`: its
    datasheet's rate, else `ASSUMED_PEAK` with assumed True (an unknown device, or the CPU).

    >>> datasheet_peak("NVIDIA H100 PCIe"), datasheet_peak("NVIDIA H200"), datasheet_peak("NVIDIA A100-SXM4-80GB")
    ((756000000000000.0, False), (989000000000000.0, False), (989000000000000.0, True))
    """
    for key, flops in DATASHEET_BF16_DENSE:
        if key in name:
            return flops, False
    return ASSUMED_PEAK, True


def matmul_rate(device: str) -> float:
    """bf16 FLOP/s of an 8192^3 matrix product here: the ceiling MFU is also quoted against."""
    if device != "cuda":
        return float("nan")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    return 2 * 8192**3 / timed(lambda: a @ b, 10)


# --- 1-2: corpus and index ------------------------------------------------------------------------


def synthetic_texts(n: int, seed: int = 0, words: int = 100, vocab: int = 20_000) -> tuple[list[str], list[str]]:
    """(titles, texts): `n` passages of `words` pseudo-words drawn Zipf-like from a `vocab`-word lexicon."""
    rng = np.random.default_rng(seed)
    syllables = ["ka", "lo", "mi", "ne", "su", "ra", "to", "vi", "de", "po", "an", "el", "or", "un", "ti", "ga"]
    lexicon = ["".join(rng.choice(syllables, rng.integers(2, 5))) for _ in range(vocab)]
    weights = 1.0 / np.arange(1, vocab + 1)
    ids = rng.choice(vocab, size=(n, words + 2), p=weights / weights.sum())
    titles = [f"{lexicon[a].title()} {lexicon[b].title()}" for a, b in ids[:, :2]]
    texts = [" ".join(lexicon[i] for i in row[2:]) for row in ids]
    return titles, texts


def build_corpus(p: dict, tmp: Path, device: str, log) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    titles, texts = synthetic_texts(p["encode"])
    sample = [f"{a} {b}" for a, b in zip(titles[:20_000], texts[:20_000])]
    dirs = dpr_pair(tmp / "ckpt", sample, **p["dpr"])
    gen = bart(tmp / "ckpt", sample, **p["bart"])
    log(f"checkpoints built in {time.perf_counter() - t0:.0f} s")

    # the encoding throughput: index build's own encoder path over the distinct passages
    distinct = tmp / "distinct.parquet"
    pq.write_table(pa.table({"id": [str(i) for i in range(len(texts))], "title": titles, "text": texts}), distinct)
    cfg = DenseBuildConfig(device=device, mixed_precision="bf16" if device == "cuda" else "no", batch_size=256,
                           shard_size=16_384)
    t0 = time.perf_counter()
    build_dense_index(open_passages(distinct), dirs["context"], tmp / "distinct-index", cfg)
    encode_s = time.perf_counter() - t0
    vectors = np.load(tmp / "distinct-index" / "embeddings.npy")
    log(f"encoded {len(texts)} passages in {encode_s:.1f} s")

    # the corpus: those rows repeated with new ids, each row's stored vector its own text's encoding
    n, reps = p["passages"], math.ceil(p["passages"] / len(texts))
    rows = np.tile(np.arange(len(texts)), reps)[:n]
    corpus = tmp / "corpus.parquet"
    emb = pa.FixedSizeListArray.from_arrays(pa.array(vectors[rows].reshape(-1)), vectors.shape[1])
    pq.write_table(pa.table({"id": [f"p{i}" for i in range(n)], "title": [titles[r] for r in rows],
                             "text": [texts[r] for r in rows], "embeddings": emb}), corpus, row_group_size=65_536)
    t0 = time.perf_counter()
    manifest = build_dense_index(open_passages(corpus), dirs["context"], tmp / "index",
                                 DenseBuildConfig(device=device, mixed_precision=cfg.mixed_precision, reuse_embeddings=True,
                                                  shard_size=65_536))
    index_s = time.perf_counter() - t0
    log(f"index over {n} passages in {index_s:.1f} s")

    # questions in nq_open's schema: a title and two of its passage's words; the answer is a third
    rng = np.random.default_rng(1)
    picks = rng.integers(0, len(texts), p["questions"])
    qs, answers = [], []
    for r in picks:
        words = texts[r].split()
        j = int(rng.integers(0, len(words) - 3))
        qs.append(f"in {titles[r]} what follows {words[j]} {words[j + 1]}")
        answers.append([words[j + 2]])
    qa = tmp / "train.parquet"
    pq.write_table(pa.table({"question": qs, "answer": answers}), qa)
    return {"dirs": dirs, "generator": gen, "index": tmp / "index", "qa": qa,
            "rows": [("corpus", f"encode {len(texts)} passages ({'fp32' if cfg.mixed_precision == 'no' else cfg.mixed_precision}, "
                              f"batch {cfg.batch_size})", encode_s, f"{len(texts) / encode_s:,.0f} passages/s"),
                     ("corpus", f"index {n} passages: spot check, copy vectors, FAISS Flat, passages", index_s,
                      f"{manifest['n_passages']} rows, dim {manifest['dim']}")]}


# --- 3: the training pipeline -----------------------------------------------------------------------


class Counter:
    """What each training step does, recorded by wrapping RagModel's and DenseIndex's methods (the
    benchmark's own instrumentation, removed by `close`): the shapes the generator and question
    encoder see, from which FLOPs are counted, and synchronised time in search, in the question
    encoder's forward pass, in the rest of retrieval (question and generator tokenization, passage
    reads, stored vectors, copies) and in the generator's forward pass."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.q_tokens: list[int] = []
        self.seconds: dict[str, list[float]] = {"search": [], "question_encoder": [], "retrieve": [], "forward": []}  # one entry per call
        self._saved = (RagModel.forward, RagModel.encode_questions, RagModel.retrieve, DenseIndex.search)
        forward_, encode_, retrieve_, search_ = self._saved
        counter = self

        def timed_call(key, fn, *a, **kw):
            sync()
            t0 = time.perf_counter()
            out = fn(*a, **kw)
            sync()
            counter.seconds[key].append(time.perf_counter() - t0)
            return out

        def forward(model, context_input_ids, context_attention_mask, doc_scores, *a, labels=None, **kw):
            dec = labels if labels is not None else kw.get("decoder_input_ids")
            counter.calls.append((context_input_ids.shape[0], context_input_ids.shape[1], dec.shape[1]))
            return timed_call("forward", forward_, model, context_input_ids, context_attention_mask, doc_scores, *a,
                              labels=labels, **kw)

        def encode(model, input_ids, attention_mask):
            counter.q_tokens.append(input_ids.numel())
            return timed_call("question_encoder", encode_, model, input_ids, attention_mask)

        RagModel.forward, RagModel.encode_questions = forward, encode
        RagModel.retrieve = lambda *a, **kw: timed_call("retrieve", retrieve_, *a, **kw)
        DenseIndex.search = lambda *a, **kw: timed_call("search", search_, *a, **kw)

    def close(self) -> None:
        RagModel.forward, RagModel.encode_questions, RagModel.retrieve, DenseIndex.search = self._saved


def step_flops(calls: list[tuple], q_tokens: list[int], bart_cfg, q_params: int, n_enc: int, n_dec: int,
               n_cross_kv: int) -> float:
    """Training FLOPs (forward + backward = 3x forward) of the recorded steps: 2 per weight per
    token through the encoder, decoder and output layer, attention's QK and AV products, and the
    question encoder; padding counts, as it is computed. `n_dec` is every decoder weight; of them,
    the cross-attention's key and value projections (`n_cross_kv`) run over the encoder's `src`
    tokens, not the `tgt` target tokens, as `scripts/bench_rag.py`'s `train_flops` counts them
    (`cross_kv`); the rest of the decoder runs over the target.

    >>> cfg = type("Cfg", (), {"d_model": 2, "encoder_layers": 1, "vocab_size": 3})
    >>> step_flops([(1, 10, 1)], [0], cfg, 0, n_enc=0, n_dec=8, n_cross_kv=8) - step_flops([(1, 10, 1)], [0], cfg, 0, 0, 8, 0)
    432.0
    """
    d, layers, vocab = bart_cfg.d_model, bart_cfg.encoder_layers, bart_cfg.vocab_size
    total = 0.0
    for rows, src, tgt in calls:
        fwd = 2 * n_enc * rows * src + 2 * (n_dec - n_cross_kv + vocab * d) * rows * tgt + 2 * n_cross_kv * rows * src
        fwd += layers * rows * (4 * src * src * d + 4 * tgt * tgt * d + 4 * tgt * src * d)
        total += 3 * fwd
    return total + 3 * 2 * q_params * sum(q_tokens)  # q_tokens: each step's B x question length


def weights(folder: Path, part: str) -> int:
    """Parameters in `folder`'s safetensors whose names contain `part`, embeddings and output layer left out."""
    from safetensors import safe_open

    total = 0
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), "pt") as f:
            total += sum(math.prod(f.get_slice(name).get_shape()) for name in f.keys()
                         if part in name and not any(s in name for s in ("embed", "shared", "final_logits_bias", "lm_head")))
    return total


def bart_weights(folder: Path) -> tuple[int, int, int]:
    """(encoder, decoder, the decoder's cross-attention key and value projections) weights of the
    BART generator saved in `folder`, as `step_flops` takes them (the third is part of the second)."""
    cross_kv = weights(folder, "encoder_attn.k_proj.") + weights(folder, "encoder_attn.v_proj.")
    return weights(folder, ".encoder."), weights(folder, ".decoder."), cross_kv


def train_config(variant: str, steps: int, c: dict, p: dict, device: str, search: str = "auto") -> RagTrainConfig:
    """`lewisrag train rag`'s settings for the bench's corpus: bf16, K=5, the preset's batch and lengths."""
    return RagTrainConfig(variant=variant, index=str(c["index"]), encoder=str(c["dirs"]["question"]),
                          context_encoder=str(c["dirs"]["context"]), generator=str(c["generator"]), train=str(c["qa"]),
                          dev=str(c["qa"]), n_docs=K, steps=steps, batch_size=p["batch"], lr=3e-5, warmup=0.05,
                          max_combined_length=p["context"], max_target_length=p["target"], eval_every=0,
                          save_every=steps, mixed_precision="bf16", cpu=device == "cpu", search_device=search)


def train_pipeline(variant: str, steps: int, c: dict, p: dict, tmp: Path, device: str, log, keep: bool = False,
                   search: str = "auto", peak_flops: float = ASSUMED_PEAK) -> dict:
    """`train_rag` for `steps` steps, timed step by step; `keep` leaves the run folder for `answer`;
    `search` is `train rag --search-device` ("auto": the GPU for this Flat index, "cpu": FAISS);
    `peak_flops`: the datasheet rate MFU is counted against."""
    cfg = train_config(variant, steps, c, p, device, search)
    run = tmp / f"run-{variant}-{search}"
    stamps: list[float] = []
    counter = Counter()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    try:
        summary = train_rag(cfg, run, on_progress=lambda step, total, rec: (sync(), stamps.append(time.perf_counter())))
    finally:
        counter.close()
    wall = time.perf_counter() - t0
    deltas = np.diff([t0, *stamps])
    warm = max(1, min(5, len(deltas) - 2))  # the first step's time holds loading the models and the index: always out
    step_s = float(np.median(deltas[warm:]))
    mean_s = float(np.mean(deltas[warm:]))
    model_dir = run / "final"
    from transformers import AutoConfig

    bart_cfg = AutoConfig.from_pretrained(model_dir / "generator")
    (n_enc, n_dec, n_cross_kv), q_params = bart_weights(model_dir / "generator"), weights(model_dir / "question_encoder", "")
    calls = counter.calls[warm:len(deltas)]
    q_tok = counter.q_tokens[warm:len(deltas)]
    flops = step_flops(calls, q_tok, bart_cfg, q_params, n_enc, n_dec, n_cross_kv) / max(1, len(calls))
    rows, src, tgt = np.mean([c_[0] for c_ in calls]), np.mean([c_[1] for c_ in calls]), np.mean([c_[2] for c_ in calls])
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0
    losses = [json.loads(line)["loss"] for line in (run / "log.jsonl").read_text().splitlines()]
    per_step = {k: float(np.mean(v[warm:len(deltas)])) for k, v in counter.seconds.items()}
    split = {"search": per_step["search"], "question_encoder": per_step["question_encoder"],
             "retrieve_other": per_step["retrieve"] - per_step["search"] - per_step["question_encoder"],
             "forward": per_step["forward"], "backward_optimizer_rest": mean_s - per_step["retrieve"] - per_step["forward"]}
    log(f"{variant}: {summary['steps']} steps, median {step_s:.3f} s/step, loss {losses[0]:.2f} -> {losses[-1]:.2f}")
    if not keep:
        shutil.rmtree(run)  # its model and optimizer state: gigabytes at the paper's sizes
    return {"variant": variant, "search": summary["search"], "run": str(run), "steps": summary["steps"], "batch": p["batch"],
            "wall_s": wall, "median_step_s": step_s, "mean_step_split_s": split,
            "mean_step_s": mean_s, "questions_per_s": p["batch"] / step_s,
            "generator_tokens_per_s": rows * (src + tgt) / step_s, "context_len": src, "target_len": tgt,
            "flops_per_step": flops, "mfu_datasheet": flops / mean_s / peak_flops, "peak_gb": peak,
            "params": {"bart_encoder": n_enc, "bart_decoder": n_dec, "bart_decoder_cross_kv": n_cross_kv,
                       "question_encoder": q_params},
            "loss_first": losses[0], "loss_last": losses[-1]}


def profile_steps(c: dict, p: dict, tmp: Path, device: str, log, active: int = 5) -> dict:
    """Where a RAG-Token training step's time goes, without the step split's instrumentation.

    `train_pipeline`'s split synchronises the device around each region it times, which removes the
    overlap of host and device work that an unmeasured step has; here `train_rag` runs as the CLI runs
    it, under torch.profiler for `active` steps after 3 skipped and 2 warm-up ones. Reported: the step
    time so measured (one synchronisation per step, at its end), the device's kernel time per step and
    its share of the step (well below 1: the device waits on the host - kernel launches, the host side
    of retrieval), kernel launches per step, the operators taking the most device and host time, and
    apart from them the main thread's time outside every recorded operator (the profiler's
    `ProfilerStep*` row's self time: Python, and waits such as the one for autograd's backward
    thread; 181 ms of the H200's 274 ms step, which the host table once listed as an operator's).
    """
    from torch.profiler import ProfilerActivity, profile, schedule

    wait, warm = 3, 2
    steps = wait + warm + active
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    stamps: list[float] = []
    run = tmp / "run-profile"
    with profile(activities=activities, schedule=schedule(wait=wait, warmup=warm, active=active)) as prof:
        def on_step(step, total, rec):
            sync()
            stamps.append(time.perf_counter())
            prof.step()

        train_rag(train_config("token", steps, c, p, device), run, on_progress=on_step)
    shutil.rmtree(run, ignore_errors=True)
    wall = stamps[wait + warm + active - 1] - stamps[wait + warm - 1]  # the active steps, end to end
    events = prof.key_averages()

    def device_us(e) -> float:
        return float(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0.0)))

    # The device's busy time is its own events' (kernels, copies, sets): an operator's self device time
    # is its kernels' time again, and the step's range annotated on the device spans the whole step
    # (summing every row read 142% busy on the H200).
    from torch.autograd import DeviceType

    kernel_s = sum(e.self_device_time_total for e in prof.events()
                   if e.device_type != DeviceType.CPU and not getattr(e, "is_user_annotation", False)) / 1e6
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"))

    def top(key, n: int = 20) -> list[tuple]:
        rows = sorted((e for e in events if not e.key.startswith("ProfilerStep")),
                      key=key, reverse=True)[:n]  # the step's own range is not an operator, on the device or the host
        return [(e.key[:80], round(key(e) / 1e3 / active, 3), round(e.count / active, 1)) for e in rows]

    outside_us = sum(float(e.self_cpu_time_total) for e in events if e.key.startswith("ProfilerStep"))
    out = {"active_steps": active, "step_s": wall / active, "device_kernel_s_per_step": kernel_s / active,
           "device_busy_share": kernel_s / wall if device == "cuda" else None, "kernel_launches_per_step": launches / active,
           "top_device_ms_per_step": top(device_us) if device == "cuda" else [],
           "top_host_ms_per_step": top(lambda e: float(e.self_cpu_time_total)),
           "host_outside_operators_ms_per_step": round(outside_us / 1e3 / active, 3)}
    busy = "n/a" if out["device_busy_share"] is None else f"{100 * out['device_busy_share']:.0f}%"
    log(f"profile: {out['step_s']:.3f} s/step uninstrumented, device busy {busy}, "
        f"{out['kernel_launches_per_step']:.0f} kernel launches/step, "
        f"{out['host_outside_operators_ms_per_step']:.0f} ms/step of host time outside operators")
    return out


def answer(run: Path, c: dict, p: dict, device: str, log) -> list[tuple]:
    """Questions/s of `answer_questions` (retrieve K=5 from the corpus, decode) with the trained model, as
    training's dev EM, `eval` and `reproduce` answer: greedy and 4-beam, fp32."""
    import pyarrow.parquet as pq

    from lewisrag.rag_model.answering import answer_questions
    from lewisrag.training.checkpoint import load_trained

    from lewisrag.training.rag_data import place_search

    model, tokenizers = load_trained(run / "final", device=device)
    index = DenseIndex.load(c["index"])
    place_search(index, "auto", device)  # on a GPU, where the vectors fit: as reproduce's evaluation and training's dev EM
    questions = pq.read_table(c["qa"]).column("question").to_pylist()[: 8 * p["batch"]]
    rows = []
    for beams in (1, BEAMS):
        answer_questions(model, tokenizers, index, questions[: p["batch"]], num_beams=beams, max_length=p["target"])  # warm-up
        sync()
        t0 = time.perf_counter()
        answer_questions(model, tokenizers, index, questions, num_beams=beams, max_length=p["target"],
                         batch_size=p["batch"])
        sync()
        took = time.perf_counter() - t0
        rows.append(("answer", f"answer_questions RAG-{model.variant}, {'greedy' if beams == 1 else f'{beams} beams'}, "
                     f"{len(questions)} questions", took, f"{len(questions) / took:.1f} questions/s"))
        log(f"answer with {beams} beam(s): {took:.1f} s")
    shutil.rmtree(run)
    return rows


def closed_book(c: dict, p: dict, tmp: Path, device: str, log) -> dict:
    """`reproduce`'s closed-book stage at the bench's generator size: `train_closed_book` in bf16 for
    `steps_closed` steps of `closed_batch` questions, then greedy answers from the question alone."""
    import pyarrow.parquet as pq

    from lewisrag.data.pretrained import load_generator
    from lewisrag.training.closed_book import ClosedBookConfig, answer_closed_book, train_closed_book

    cfg = ClosedBookConfig(generator=str(c["generator"]), train=str(c["qa"]), steps=p["steps_closed"],
                           batch_size=p["closed_batch"], lr=3e-5, max_target_length=p["target"], device=device,
                           mixed_precision="bf16")
    out, stamps = tmp / "closed-book", []
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    summary = train_closed_book(cfg, out, lambda step, total, rec: (sync(), stamps.append(time.perf_counter())))
    deltas = np.diff([t0, *stamps])
    step_s = float(np.median(deltas[min(3, len(deltas) - 1):]))
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0
    gen, tok = load_generator(out / "final", device=device)
    questions = pq.read_table(c["qa"]).column("question").to_pylist()[: 4 * p["closed_batch"]]
    answer_closed_book(gen, tok, questions[: p["batch"]], max_length=p["target"])  # warm-up
    sync()
    t0 = time.perf_counter()
    answer_closed_book(gen, tok, questions, batch_size=p["closed_batch"], max_length=p["target"])
    sync()
    took = time.perf_counter() - t0
    log(f"closed book: median {step_s:.3f} s/step at batch {p['closed_batch']}, {len(questions) / took:.0f} questions/s")
    shutil.rmtree(out)
    return {"steps": summary["steps"], "batch": p["closed_batch"], "median_step_s": step_s,
            "questions_per_s_train": p["closed_batch"] / step_s, "answer_questions_per_s": len(questions) / took,
            "peak_gb": peak, "final_loss": summary["final_loss"], "device": str(gen.device)}


# --- 4: the same weights in transformers and lewisrag -----------------------------------------------


def hf_step(model, batch, q_ids, docs, compiled: bool = False, compile_mode: str | None = None,
            bf16_weights: bool = False):
    """One bf16 training step of `model` (a copy of it) on the pre-retrieved batch; `compiled`: with
    lewisrag's generator and question encoder compiled as `train rag --compile` compiles them
    (`compile_mode`: torch.compile's mode, e.g. "reduce-overhead"). Both models step with `train
    rag`'s AdamW (`training.optim.adamw`: one fused kernel on a GPU; torch's default, several
    multi-tensor kernels, was the first two sessions' optimizer for both).

    `bf16_weights`: the model's weights in bf16 and no autocast, AdamW stepping float32 master
    copies (the gradients copied up and the weights copied back down, one multi-tensor copy each):
    what a `--mixed-precision bf16` without autocast would run. Autocast casts every float32 weight
    and every layer norm's output on each step, about 1,550 cast kernels and their backward in the
    second H200 session's profile; this mode measures what dropping them is worth before anyone
    writes it into `train rag`."""
    ids, mask, _, labels = batch
    model = copy.deepcopy(model).train()
    if compiled:
        compile_models(model, compile_mode)
    params = [p for p in model.parameters() if p.requires_grad]
    master = [p.detach().float().clone() for p in params] if bf16_weights else params
    if bf16_weights:
        model.to(torch.bfloat16)
    opt = adamw(master, lr=1e-5, weight_decay=0.01)

    def step():
        with torch.autocast(q_ids.device.type, dtype=torch.bfloat16, enabled=not bf16_weights):
            q = model.question_encoder(q_ids)[0]  # (B, D)
            doc_scores = torch.bmm(q.unsqueeze(1).float(), docs.transpose(1, 2)).squeeze(1)  # (B, K)
            out = model(context_input_ids=ids, context_attention_mask=mask, doc_scores=doc_scores, labels=labels,
                        reduce_loss=True, n_docs=K)
        opt.zero_grad(set_to_none=True)
        out.loss.float().backward()
        if bf16_weights:
            used = [i for i, p in enumerate(params) if p.grad is not None]
            for i in used:
                master[i].grad = torch.empty_like(master[i])
            torch._foreach_copy_([master[i].grad for i in used], [params[i].grad for i in used])
            model.zero_grad(set_to_none=True)
        opt.step()
        if bf16_weights:
            with torch.no_grad():
                torch._foreach_copy_(params, master)

    step.model, step.master = model, master  # what it trains, for the tests
    return step


def same_weights_batch(c: dict, p: dict, device: str) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """(contexts, mask, doc scores, labels), question ids and document vectors of one pre-retrieved
    training batch at the preset's sizes, the same on every call."""
    from transformers import AutoConfig

    dev = torch.device(device)
    g = torch.Generator().manual_seed(1)
    b = p["batch"]
    q_cfg = AutoConfig.from_pretrained(c["dirs"]["question"])
    vocab = min(q_cfg.vocab_size, AutoConfig.from_pretrained(c["generator"]).vocab_size)
    q_ids = torch.randint(3, vocab, (b, 16), generator=g).to(dev)
    dim = q_cfg.projection_dim or q_cfg.hidden_size
    docs = (torch.randn(b, K, dim, generator=g) * 0.1).to(dev)
    ids = torch.randint(3, vocab, (b * K, p["context"]), generator=g)
    ids[:, 0] = 0
    mask = torch.ones_like(ids)
    labels = torch.randint(3, vocab, (b, p["target"]), generator=g)
    labels[:, 0] = 2
    scores = torch.randn(b, K, generator=g)
    return [t.to(dev) for t in (ids, mask, scores, labels)], q_ids, docs


def same_weights_pair(variant: str, c: dict, device: str):
    """transformers' RagTokenForGeneration / RagSequenceForGeneration from the bench's folders, and
    lewisrag's RagModel sharing its modules (each timed step trains its own copy)."""
    from transformers import RagSequenceForGeneration, RagTokenForGeneration

    cls = RagTokenForGeneration if variant == "token" else RagSequenceForGeneration
    hf = cls.from_pretrained_question_encoder_generator(str(c["dirs"]["question"]), str(c["generator"]), n_docs=K)
    with torch.no_grad():  # random weights give near-uniform outputs, and ties would decide the beams: a
        # random output bias (as the tests' tiny models have) makes the comparison mean something
        bias = hf.generator.final_logits_bias
        bias.copy_(torch.randn(bias.shape, generator=torch.Generator().manual_seed(2)) * 2)
    # built from the folders in memory: hf decodes RAG-Sequence with bart's generation config, which a
    # saved RAG folder would lose
    hf = hf.to(device)
    return hf, from_hf(RagModel, hf)


def compiled_step(c: dict, p: dict, device: str, reps: int, log) -> list[tuple]:
    """The same-weights RAG-Token step against lewisrag's with `train rag --compile`'s torch.compile
    (the first call compiles: timed apart, and `timed`'s warm-up call is the second)."""
    check_compiler()  # without a C compiler: this part's one-line error, not torch's page of them
    batch, q_ids, docs = same_weights_batch(c, p, device)
    hf, ours = same_weights_pair("token", c, device)
    f_hf = hf_step(hf, batch, q_ids, docs)
    t_hf, peak_hf = timed(f_hf, reps), peak_gb(f_hf)
    del f_hf
    f_compiled = hf_step(ours, batch, q_ids, docs, compiled=True)
    sync()
    t0 = time.perf_counter()
    f_compiled()
    sync()
    compile_s = time.perf_counter() - t0
    row = ("same weights", f"bf16 train step RAG-token (B={p['batch']}, K={K}, L={p['context']}), lewisrag --compile",
           t_hf, timed(f_compiled, reps), peak_hf, peak_gb(f_compiled), f"first step (compiling) {compile_s:.0f} s")
    log(f"compiled step: {row[3]:.3f} s (transformers {t_hf:.3f} s), compiled in {compile_s:.0f} s")
    return [row]


def same_weights_flops(c: dict, p: dict) -> float:
    """Training FLOPs of one same-weights step (`same_weights_batch`'s shapes), counted as
    `train_pipeline` counts them."""
    from transformers import AutoConfig

    b, gen = p["batch"], Path(c["generator"])
    (n_enc, n_dec, n_cross_kv), q_params = bart_weights(gen), weights(Path(c["dirs"]["question"]), "")
    return step_flops([(b * K, p["context"], p["target"])], [b * 16], AutoConfig.from_pretrained(gen), q_params, n_enc, n_dec,
                      n_cross_kv)


def mfu_steps(c: dict, p: dict, device: str, reps: int, rate: float | None, log, keep,
              modes: tuple[str, ...] = ("eager", "compiled"), scales: tuple[int, ...] = (1, 2),
              peak_flops: float = ASSUMED_PEAK, deadline: float | None = None) -> list[dict]:
    """lewisrag's same-weights RAG-Token step alone, eager and compiled (`train rag --compile`), at
    `scales` times the preset's batch (its batch and twice it unless told): the share of the GPU's
    bf16 rate each reaches (MFU against the datasheet's `peak_flops` and against the matmul measured
    here). Where the MFU target can be met, if anywhere. A mode "eager:BACKEND" runs the eager step
    with attention through one `torch.nn.attention.SDPBackend` (flash, efficient, cudnn, math): the H200's profile
    showed cuDNN attention's host side at 0.55 ms a call. A backend that cannot take BART's padding
    mask, or the device, is reported as that row's error, and fails the call (`mfu_failures`).
    "compiled:cudagraphs" compiles with mode="reduce-overhead": CUDA graphs replay the step's kernels
    without launching each from the host, which at this fixed shape is possible (the second
    session's eager step: 0.186 s at B=16, 0.240 s at B=32, so about
    0.13 s a step that does not grow with the batch, against 55% MFU for the work that does, counted
    with the cross-attention's keys and values over the source: 49% before that count was corrected).
    "bf16weights[:BACKEND]" is the eager step with `hf_step`'s `bf16_weights`: no autocast casts.
    `keep(rows)` is called after every row, so that a call cut short keeps the rows it measured.

    A mode that runs out of memory is that row's error, and the next mode still runs (the compiled
    ones need less memory than eager); the larger batches are left out (a row each) only when no mode
    at a batch was measured and one ran out of memory (the call then fails: nothing was measured
    there). Each mode's step, model copy and compiled code are freed before the next mode is built.
    `deadline` (time.perf_counter's clock: `--budget`'s end) skips, with a row saying so, a mode that would start after it and a compiled mode that would not
    finish before it (compiling takes minutes: the preset's `mfu_compile_s`, or the longest compiled
    mode this call has measured if that is longer)."""
    modes, rows = list(modes), []
    try:
        if any(m.startswith("compiled") for m in modes):
            check_compiler()
    except Exception as e:  # no C compiler: the other rows, and the reason
        rows = [{"mode": m, "error": str(e)} for m in modes if m.startswith("compiled")]
        modes = [m for m in modes if not m.startswith("compiled")]
    compile_s = float(p.get("mfu_compile_s", 0.0))
    for i, scale in enumerate(scales):
        q = dict(p, batch=scale * p["batch"])
        flops = same_weights_flops(c, q)
        batch, q_ids, docs = same_weights_batch(c, q, device)
        ours, measured, out_of_memory = None, 0, False
        for mode in modes:
            compiled = mode.startswith("compiled")
            left = math.inf if deadline is None else deadline - time.perf_counter()
            if left < (compile_s if compiled else 0.0):
                why = (f"skipped for time: {max(0.0, left):.0f} s left before --budget's end, compiling and timing "
                       f"takes about {compile_s:.0f} s") if compiled and left > 0 else "skipped for time: past --budget's end"
                rows.append({"batch": q["batch"], "mode": mode, "error": why})
                keep(rows)
                log(f"mfu: B={q['batch']} {mode}: {why}")
                continue
            if ours is None:
                ours = same_weights_pair("token", c, device)[1]
            f, failed, t0 = None, None, time.perf_counter()
            try:
                kind, _, extra = mode.partition(":")
                if kind == "compiled":
                    f = hf_step(ours, batch, q_ids, docs, compiled=True, compile_mode="reduce-overhead" if extra else None)
                else:
                    f = with_attention(hf_step(ours, batch, q_ids, docs, bf16_weights=kind == "bf16weights"), extra)
                s, peak = timed(f, reps), peak_gb(f)
            except Exception as e:  # one mode's failure keeps the rows measured and the next mode's chance
                out_of_memory |= isinstance(e, torch.cuda.OutOfMemoryError)
                failed = "out of memory" if isinstance(e, torch.cuda.OutOfMemoryError) else f"{type(e).__name__}: {e}"
            finally:  # the step's model copy (compiled, a reference cycle) and a failure's frames go before the next mode
                f = None
                if compiled:  # CUDA graphs keep their memory pool until their trees are reset:
                    torch._dynamo.reset()  # the next mode at 64 questions needs that memory
                free_memory(device)
            if compiled:
                compile_s = max(compile_s, time.perf_counter() - t0)
            if failed:
                rows.append({"batch": q["batch"], "mode": mode, "error": failed})
                keep(rows)
                log(f"mfu: B={q['batch']} {mode}: {failed}")
                continue
            measured += 1
            here = flops / s / rate if rate and not math.isnan(rate) else float("nan")
            rows.append({"batch": q["batch"], "context": q["context"], "target": q["target"], "mode": mode, "step_s": s,
                         "flops_per_step": flops, "mfu_datasheet": flops / s / peak_flops, "mfu_matmul": here,
                         "peak_gb": peak})
            keep(rows)
            log(f"mfu: B={q['batch']} {mode}: {s:.3f} s/step, MFU {100 * flops / s / peak_flops:.1f}% of "
                f"{peak_flops / 1e12:.0f} TFLOP/s")
        del ours
        free_memory(device)
        if out_of_memory and not measured:  # a larger batch would not fit either
            rows += [{"batch": larger * p["batch"], "mode": mode, "error": f"not run: no mode fit at {q['batch']} questions"}
                     for larger in scales[i + 1:] for mode in modes]
            keep(rows)
            break
    return rows


def unknown_mfu_mode(modes: list[str]) -> str | None:
    """The first of `modes` that `mfu_steps` does not know, else None (checked before any part runs)."""
    for mode in modes:
        kind, _, extra = mode.partition(":")
        if kind == "compiled" and extra not in ("", "cudagraphs") or kind in ("eager", "bf16weights") and extra not in (
                "", "flash", "efficient", "cudnn", "math") or kind not in ("eager", "compiled", "bf16weights"):
            return mode
    return None


def mfu_failures(rows: list[dict]) -> str | None:
    """What of `mfu_steps`' rows fails the call (exit 1, the JSON's `errors["mfu"]`), else None: a mode
    that failed otherwise than by running out of memory (an attention backend the device lacks, no C
    compiler, a compile error), and a batch at which no mode was measured (each ran out of memory, or
    none ran after a smaller batch's did). Out of memory alone is a finding (the compiled modes need
    less), and a mode skipped for time is reported as a skip.

    >>> mfu_failures([{"batch": 4, "mode": "eager", "step_s": 0.1}, {"batch": 4, "mode": "compiled", "error": "out of memory"},
    ...               {"batch": 4, "mode": "eager:cudnn", "error": "RuntimeError: No viable backend"}])
    'B=4 eager:cudnn: RuntimeError: No viable backend'
    >>> mfu_failures([{"batch": 8, "mode": "eager", "error": "out of memory"}]), mfu_failures([])
    ('B=8: no mode measured', None)
    """
    errors = [r for r in rows if "error" in r]
    failed = [f"{'B=' + str(r['batch']) + ' ' if 'batch' in r else ''}{r['mode']}: {r['error']}" for r in errors
              if r["error"] != "out of memory" and not r["error"].startswith(("skipped for time", "not run"))]
    batches: dict[int, list[dict]] = {}
    for r in rows:
        if "batch" in r:
            batches.setdefault(r["batch"], []).append(r)
    failed += [f"B={batch}: no mode measured" for batch, group in batches.items()
               if not any("step_s" in r for r in group) and not all(r["error"].startswith("skipped for time") for r in group)]
    return "; ".join(failed) or None


def with_attention(step, backend: str):
    """`step` with scaled_dot_product_attention held to one backend ("" leaves torch's choice)."""
    if not backend:
        return step
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = getattr(SDPBackend, {"efficient": "EFFICIENT_ATTENTION", "flash": "FLASH_ATTENTION",
                                  "cudnn": "CUDNN_ATTENTION", "math": "MATH"}[backend])

    def held():
        with sdpa_kernel(chosen):
            return step()
    return held


def free_memory(device: str) -> None:
    """Drop what was freed from the allocator's cache, so that the next measurement starts from what is alive."""
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def same_weights(c: dict, p: dict, tmp: Path, device: str, reps: int, log) -> list[tuple]:
    """Each variant's bf16 training step and fp32 beam search, transformers' and lewisrag's, on the same
    weights: the step's row notes whether the two compute the same loss and question-encoder gradient
    (`first_step_agreement`), the decoding's whether the same ids. Each contender's step is built,
    timed and its peak memory read alone: its trained copy (weights, gradients, AdamW's moments: 16
    bytes a parameter, about 7.7 GiB at bart-large plus the question encoder) is freed before the other contender's is built, and both are freed before the
    decoding is measured, so that no peak holds the other contender's state. (The first two H200
    sessions read every peak with the other contender's trained copy alive, the
    decoding peaks with both: docs/performance.md.) Both peaks still hold the two models' shared
    weights, as the `mfu` rows hold lewisrag's."""
    batch, q_ids, docs = same_weights_batch(c, p, device)
    b = p["batch"]
    rows = []
    for variant in ("token", "sequence"):
        hf, ours = same_weights_pair(variant, c, device)
        same_step = first_step_agreement(hf, ours, batch, q_ids, docs)  # before the timed copies: nothing else alive
        free_memory(device)
        step_s, peak = {}, {}
        for name, model in (("transformers", hf), ("lewisrag", ours)):
            f = hf_step(model, batch, q_ids, docs)
            step_s[name], peak[name] = timed(f, reps), peak_gb(f)
            del f  # its trained copy, before the other contender's is built
            free_memory(device)
        rows.append(("same weights", f"bf16 train step RAG-{variant} (B={b}, K={K}, L={p['context']})", step_s["transformers"],
                     step_s["lewisrag"], peak["transformers"], peak["lewisrag"], same_step))
        hf.eval(), ours.eval()
        kw = dict(context_input_ids=batch[0], context_attention_mask=batch[1], doc_scores=batch[2], n_docs=K,
                  num_beams=BEAMS, max_length=p["target"])
        if variant == "sequence":
            kw["do_deduplication"] = False
        with torch.no_grad():
            same = torch.equal(hf.generate(**kw), ours.generate(**kw))
            d_hf, d_ours = functools.partial(hf.generate, **kw), functools.partial(ours.generate, **kw)
            rows.append(("same weights", f"fp32 beam search ({BEAMS} beams) RAG-{variant}", timed(d_hf, max(2, reps // 3)),
                         timed(d_ours, max(2, reps // 3)), peak_gb(d_hf), peak_gb(d_ours),
                         "identical ids" if same else "IDS DIFFER"))
        log(f"same weights {variant}: done")
        del hf, ours
        free_memory(device)
    return rows


# --- 5: search ---------------------------------------------------------------------------------------


def search_rows(c: dict, p: dict, device: str, reps: int) -> list[tuple]:
    index = DenseIndex.load(c["index"])
    q = np.asarray(index.embeddings[: p["batch"]], dtype=np.float32)
    cpu_s = timed(lambda: index.search(q, K), reps)
    rows = [("search", f"FAISS Flat (CPU, {torch.get_num_threads()} threads): {p['batch']} queries x {len(index.passages)}",
             cpu_s, float("nan"), 0.0, 0.0, "")]
    if device == "cuda":
        x = torch.from_numpy(np.asarray(index.embeddings)).to("cuda", torch.bfloat16)
        qt = torch.from_numpy(q).to("cuda", torch.bfloat16)
        gpu_s = timed(lambda: torch.topk(qt @ x.T, K, dim=1), reps)
        rows[0] = (*rows[0][:3], gpu_s, 0.0, 0.0, f"vs exact bf16 matmul + top-k on the GPU ({x.numel() * 2 / 2**30:.1f} GiB of vectors)")
        del x
    want = index.search(q, K)[0]
    for dtype in ("float32", "float16"):  # `train rag --search-device`'s own path, as place_search chooses it
        index.search_on(device, dtype)
        s = timed(lambda: index.search(q, K), reps)
        # scores, not rows: the corpus repeats its passages, so tied rows may come in either order
        same = bool(np.allclose(index.search(q, K)[0], want, rtol=1e-5, atol=1e-4))
        rows.append(("search", f"DenseIndex.search_on({device!r}, {dtype!r}): {p['batch']} queries x {len(index.passages)}",
                     float("nan"), s, 0.0, 0.0, f"same top-{K} scores as FAISS: {same}"))
        index.device_vectors = None
        sync()
    return rows


def search_scale(p: dict, device: str, reps: int, step_s: float | None, log) -> list[tuple]:
    """`train rag --search-device`'s path at the paper's corpus size without its corpus: `--scale-passages`
    random vectors (the DPR width) held as float16 in host memory (a warm page cache's stand-in for
    the memory-mapped embeddings.npy; no 32 GB file on the GPU machine's disk), placed on `device`
    as `place_search` would place them (float32 where that fits, float16), and one training batch of
    questions searched: the float16 path's top-K scores checked against the float32 product's, and
    its time set against `step_s` (the bart-large step measured by train_token, when it ran)."""
    n, dim, b = p["scale_passages"], p["dpr"]["hidden"], p["batch"]
    g = torch.Generator(device=device).manual_seed(3)
    host = np.empty((n, dim), dtype=np.float16)
    t0 = time.perf_counter()
    for start in range(0, n, 1 << 20):  # generated where it is fast, in blocks
        rows = min(1 << 20, n - start)
        host[start : start + rows] = torch.randn(rows, dim, device=device, generator=g).half().cpu().numpy()
    log(f"search scale: {n} random {dim}-d vectors in {time.perf_counter() - t0:.0f} s")
    picks = np.random.default_rng(4).integers(0, n, b)
    q = host[picks].astype(np.float32) + np.random.default_rng(5).normal(size=(b, dim)).astype(np.float32)  # near a row
    index = DenseIndex(Path("synthetic"), {"faiss_factory": "Flat", "dim": dim, "n_passages": n}, None, host, [])
    rows, want = [], None
    for dtype, size in (("float32", 4), ("float16", 2)):
        if device == "cuda" and n * dim * size > 0.9 * torch.cuda.mem_get_info()[0]:
            rows.append(("search scale", f"DenseIndex.search_on({device!r}, {dtype!r}): {b} queries x {n}", float("nan"),
                         float("nan"), 0.0, 0.0, "does not fit in the free device memory"))
            continue
        t0 = time.perf_counter()
        index.search_on(device, dtype)
        placed_s = time.perf_counter() - t0
        s = timed(lambda: index.search(q, K), reps)
        scores = index.search(q, K)[0]
        note = f"placed in {placed_s:.0f} s"
        if want is None:
            want = scores
        else:
            note += f"; top-{K} scores = float32 product's: {bool(np.allclose(scores, want, rtol=1e-5, atol=1e-4))}"
        if step_s:
            note += f"; {100 * s / step_s:.1f}% of the {step_s:.3f} s train_token step"
        rows.append(("search scale", f"DenseIndex.search_on({device!r}, {dtype!r}): {b} queries x {n}", float("nan"), s,
                     0.0, peak_gb(lambda: index.search(q, K)), note))
        log(f"search scale {dtype}: {1000 * s:.1f} ms a batch of {b}")
        index.device_vectors = None
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


# --- main ---------------------------------------------------------------------------------------------


def _positive(text: str) -> int:
    """argparse's type for a count: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got '{text}'")
    return value


def _steps(text: str) -> int:
    """argparse's type for a training part's steps: at least 3, since the first step's time (which holds
    loading the models and the index) is left out of the median and the split, and one step is no median."""
    steps = _positive(text)
    if steps < 3:
        raise argparse.ArgumentTypeError(f"must be at least 3 (the first step, loading included, is not timed), got '{text}'")
    return steps


def _scales(text: str) -> tuple[int, ...]:
    """--mfu-scales: ascending multiples of the preset's batch, checked before a part runs (the mfu part
    comes after minutes of corpus building and training on a lent GPU)."""
    scales = tuple(_positive(x) for x in text.split(","))
    if list(scales) != sorted(set(scales)):
        raise argparse.ArgumentTypeError(f"must be ascending, each once, got '{text}'")
    return scales


def device_arg(text: str) -> torch.device:
    """--device (here and in gpu_smoke.py): a name torch.device takes, of the CPU or a GPU ("tpu" was a RuntimeError's traceback)."""
    try:
        device = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"must be cpu or cuda, got '{text}'") from None
    if device.type not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"must be cpu or cuda, got '{text}'")
    return device


def device_name(device: torch.device, error) -> str:
    """`device` as the scripts compare it (here and in gpu_smoke.py): "cpu" or "cuda" (so "cuda:0" is
    measured as the GPU it names, not recorded as the CPU, and `reproduce --device`, which takes no index,
    gets "cuda"); a GPU but the first visible one is `error`'s (argparse's: exit 2), since lewisrag trains
    on the first visible GPU (accelerate's), as `lewisrag reproduce` refuses another.

    >>> device_name(torch.device("cuda:0"), print), device_name(torch.device("cpu"), print)
    ('cuda', 'cpu')
    """
    if device.type == "cuda" and (device.index or 0) > 0:
        error(f"--device: {device}: lewisrag trains on the first visible GPU (accelerate's); "
              "choose it with CUDA_VISIBLE_DEVICES and pass cuda")
    return device.type


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="paper")
    ap.add_argument("--device", type=device_arg, default="cuda", help="cuda (the first visible GPU; cuda:0 the same) or cpu "
                    "(which runs the script: use --preset check)")
    ap.add_argument("--passages", type=_positive, help="corpus size (default: the preset's)")
    ap.add_argument("--steps-token", type=_steps, help="RAG-Token training steps, at least 3 (default: the preset's)")
    ap.add_argument("--steps-sequence", type=_steps, help="RAG-Sequence training steps, at least 3 (default: the preset's)")
    ap.add_argument("--reps", type=_positive, default=6, help="timed repetitions of each same-weights measurement")
    ap.add_argument("--parts", default=",".join(PARTS),
                    help=f"comma-separated, of {', '.join(PARTS)} (corpus runs when one of the others needs it; "
                         "answer brings train_token in)")
    ap.add_argument("--scale-passages", type=_positive, help="search_scale's vectors (default: the preset's; paper: 21,015,324)")
    ap.add_argument("--encode", type=_positive, help="distinct passages encoded (default: the preset's)")
    ap.add_argument("--mfu-modes", default="eager,compiled", help="mfu's modes: eager, compiled (compiling takes minutes), eager:BACKEND "
                    "(attention through flash, efficient, cudnn or math), compiled:cudagraphs (mode reduce-overhead), "
                    "bf16weights[:BACKEND] (eager, bf16 weights with float32 master copies, no autocast)")
    ap.add_argument("--mfu-scales", type=_scales, default="1,2", help="mfu's batches, as multiples of the preset's (ascending)")
    ap.add_argument("--budget", type=float, default=1e9, help="seconds: parts that would start later are skipped, and mfu's "
                    "modes that would start later or, compiled, not finish in time")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    if bad := unknown_mfu_mode(args.mfu_modes.split(",")):
        ap.error(f"--mfu-modes: unknown mode {bad!r} (eager, eager:flash|efficient|cudnn|math, compiled, compiled:cudagraphs, "
                 "bf16weights[:flash|efficient|cudnn|math])")
    args.parts = parse_parts(args.parts, ap.error, lambda msg: print(msg, flush=True))
    if args.json is not None and (args.json.is_dir() or not args.json.parent.is_dir()):
        ap.error(f"--json: {args.json} cannot be written: {'a folder' if args.json.is_dir() else 'its folder does not exist'}")
    if args.device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: nothing to measure (--preset check --device cpu runs the script on the CPU)", file=sys.stderr)
        sys.exit(2)
    args.device = device_name(args.device, ap.error)  # "cpu" or "cuda", as every part compares it
    p = dict(PRESETS[args.preset])
    for key in ("passages", "scale_passages", "encode", "steps_token", "steps_sequence"):
        if getattr(args, key) is not None:
            p[key] = getattr(args, key)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 decoding must stay comparable id for id
    start = time.perf_counter()
    where = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    peak_flops, assumed = datasheet_peak(where)  # MFU's denominator: this device's datasheet dense bf16 rate
    results = {"device": where, "torch": torch.__version__, "preset": args.preset, "settings": {k: v for k, v in p.items()},
               "datasheet_peak_flops": peak_flops, "datasheet_peak_assumed": assumed, "parts": {}, "skipped": [], "errors": {}}

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - start:6.0f} s] {msg}", flush=True)

    def save() -> None:
        if args.json:
            args.json.write_text(json.dumps(results, indent=1, default=str))

    def part(name: str, fn):
        if name not in args.parts and name != "corpus":
            return None
        if time.perf_counter() - start > args.budget:
            results["skipped"].append(name)
            log(f"{name}: skipped (past --budget)")
            return None
        try:
            out = fn()
            results["parts"][name] = out
            return out
        except Exception as e:  # a benchmark part that breaks must not hide the others' numbers
            traceback.print_exc()
            results["errors"][name] = f"{type(e).__name__}: {e}"
            return None
        finally:
            save()

    rate = part("matmul", lambda: matmul_rate(args.device))
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        needs_corpus = [name for name in PARTS if name in args.parts & CORPUS_PARTS]
        corpus = part("corpus", lambda: build_corpus(p, tmp, args.device, log)) if needs_corpus else None
        if corpus is None:  # past --budget or failed: each part it takes along says so (they were in neither list)
            for name in needs_corpus:
                if "corpus" in results["errors"]:
                    results["errors"][name] = f"not run: the corpus failed: {results['errors']['corpus']}"
                else:
                    results["skipped"].append(name)
            save()
        token = None
        if corpus is not None:
            token = part("train_token", lambda: train_pipeline("token", p["steps_token"], corpus, p, tmp, args.device, log,
                                                               keep=True, peak_flops=peak_flops))
            if token is not None:
                part("answer", lambda: answer(Path(token["run"]), corpus, p, args.device, log))
            elif "answer" in args.parts and "train_token" not in results["skipped"]:
                results["errors"]["answer"] = "not run: it answers with train_token's trained model, and train_token failed"
            part("same_weights", lambda: same_weights(corpus, p, tmp, args.device, args.reps, log))  # before compiling
            part("compiled", lambda: compiled_step(corpus, p, args.device, args.reps, log))
            part("mfu", lambda: mfu_steps(corpus, p, args.device, args.reps, rate, log,
                                          keep=lambda rows: (results["parts"].__setitem__("mfu", rows), save()),
                                          modes=tuple(args.mfu_modes.split(",")), scales=args.mfu_scales,
                                          peak_flops=peak_flops, deadline=start + args.budget))
            if "mfu" not in results["errors"] and (failed := mfu_failures(results["parts"].get("mfu") or [])):
                results["errors"]["mfu"] = failed  # its rows stay in parts: what was measured, and each error
                save()
            part("closed_book", lambda: closed_book(corpus, p, tmp, args.device, log))
            part("train_token_faiss", lambda: train_pipeline("token", p["steps_faiss"], corpus, p, tmp, args.device, log,
                                                             search="cpu", peak_flops=peak_flops))
            part("train_sequence", lambda: train_pipeline("sequence", p["steps_sequence"], corpus, p, tmp, args.device, log,
                                                          peak_flops=peak_flops))
            part("search", lambda: search_rows(corpus, p, args.device, args.reps))
        part("search_scale", lambda: search_scale(p, args.device, args.reps, token and token["median_step_s"], log))
        if corpus is not None:  # last: the profiler can leave CUPTI active, and every later step slower (pytorch#144455)
            part("profile", lambda: profile_steps(corpus, p, tmp, args.device, log))
    results["jax_imported"] = "jax" in sys.modules
    report(results, rate)
    save()
    # the JSON and the report above hold what did run; the exit says that something did not (a call cut short by
    # --budget looked complete with exit 0)
    timed_out = [r for r in results["parts"].get("mfu") or [] if str(r.get("error", "")).startswith("skipped for time")]
    if results["errors"] or results["skipped"] or timed_out:
        sys.exit(1)


def parse_parts(text: str, error, note) -> set[str]:
    """`--parts` as a set: every name one of PARTS (else `error`, argparse's: exit 2), and `answer`
    with `train_token`, whose trained model it answers with (added, and said through `note`).

    >>> sorted(parse_parts("answer", print, print))
    answer answers with train_token's trained model: train_token added to --parts
    ['answer', 'train_token']
    """
    parts = {name.strip() for name in text.split(",") if name.strip()}
    if not parts:
        error("--parts: name at least one part")
    if unknown := sorted(parts - set(PARTS)):
        error(f"--parts: unknown {', '.join(map(repr, unknown))} (parts: {', '.join(PARTS)})")
    if "answer" in parts and "train_token" not in parts:
        note("answer answers with train_token's trained model: train_token added to --parts")
        parts.add("train_token")
    return parts


def report(results: dict, rate: float | None) -> None:
    parts = results["parts"]
    peak = f"{results['datasheet_peak_flops'] / 1e12:.0f} TFLOP/s" + (" (assumed)" if results["datasheet_peak_assumed"] else "")
    print(f"\nGPU bench: {results['device']}, torch {results['torch']}, preset {results['preset']}, K={K}; "
          f"MFU against the datasheet's {peak} dense bf16")
    if rate:
        print(f"bf16 8192^3 matmul here: {rate / 1e12:.0f} TFLOP/s")
    for row in (parts.get("corpus") or {}).get("rows", []) + (parts.get("answer") or []):
        print(f"{row[0]:8s} {row[1]:70s} {row[2]:8.1f} s  {row[3]}")
    for name in ("train_token", "train_token_faiss", "train_sequence"):
        r = parts.get(name)
        if r:
            split = ", ".join(f"{k} {1000 * v:.0f} ms" for k, v in r["mean_step_split_s"].items())
            mfu_here = r["flops_per_step"] / r["mean_step_s"] / rate if rate and not math.isnan(rate) else float("nan")
            print(f"train    RAG-{r['variant']:8s} search {r['search']:5s} B={r['batch']} K={K}: {r['median_step_s']:.3f} s/step (median; mean {split}), "
                  f"{r['questions_per_s']:.1f} questions/s, {r['generator_tokens_per_s']:,.0f} generator tokens/s "
                  f"(context {r['context_len']:.0f} + target {r['target_len']:.0f}), MFU {100 * r['mfu_datasheet']:.1f}% "
                  f"of {peak} ({100 * mfu_here:.1f}% of the measured matmul) on the mean step, {r['mean_step_s']:.3f} s, "
                  f"peak {r['peak_gb']:.1f} GiB, loss {r['loss_first']:.2f} -> {r['loss_last']:.2f}")
    prof = parts.get("profile")
    if prof:
        busy = "n/a" if prof["device_busy_share"] is None else f"{100 * prof['device_busy_share']:.0f}%"
        print(f"profile  RAG-Token step uninstrumented: {prof['step_s']:.3f} s, device kernels {1000 * prof['device_kernel_s_per_step']:.0f} ms "
              f"(busy {busy}), {prof['kernel_launches_per_step']:.0f} kernel launches")
        for title, key in (("device", "top_device_ms_per_step"), ("host", "top_host_ms_per_step")):
            for name, ms, calls in prof[key][:10]:
                print(f"         {title:6s} {ms:9.2f} ms/step {calls:8.1f} calls  {name}")
        print(f"         host time outside operators {prof['host_outside_operators_ms_per_step']:9.2f} ms/step "
              "(the main thread's outside every recorded operator: Python, waits such as autograd's backward thread)")
    cb = parts.get("closed_book")
    if cb:
        print(f"closed   book bf16 step at batch {cb['batch']}: {cb['median_step_s']:.3f} s ({cb['questions_per_s_train']:.0f} "
              f"questions/s), greedy answers {cb['answer_questions_per_s']:.0f} questions/s, peak {cb['peak_gb']:.1f} GiB")
    for r in parts.get("mfu") or []:
        if "error" in r:
            print(f"mfu      {('B=' + str(r['batch']) + ' ') if 'batch' in r else ''}{r['mode']}: {r['error']}")
        else:
            print(f"mfu      lewisrag RAG-Token bf16 step B={r['batch']} K={K} L={r['context']} {r['mode']:8s}: {r['step_s']:.3f} s, "
                  f"MFU {100 * r['mfu_datasheet']:.1f}% of {peak} ({100 * r['mfu_matmul']:.1f}% of the measured matmul), "
                  f"peak {r['peak_gb']:.1f} GiB")
    rows = (parts.get("same_weights") or []) + (parts.get("compiled") or []) + (parts.get("search") or []) + (parts.get("search_scale") or [])
    if rows:
        print(f"{'part':12s} {'measure':70s} {'transformers/cpu s':>18s} {'lewisrag/gpu s':>14s} {'ratio':>7s} "
              f"{'peak GiB a':>10s} {'peak GiB b':>10s}  note")
        for part_, what, a, b, ma, mb, note in rows:
            ratio = a / b if b and not math.isnan(b) else float("nan")
            print(f"{part_:12s} {what:70s} {a:18.4f} {b:14.4f} {ratio:6.2f}x {ma:10.2f} {mb:10.2f}  {note}")
    for name in results["skipped"]:
        print(f"skipped: {name} (past --budget)")
    for name, err in results["errors"].items():
        print(f"ERROR in {name}: {err}")


if __name__ == "__main__":
    main()
