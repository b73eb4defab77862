"""lewisrag's RAG against transformers' RAG, side by side on the same weights and batch.

    OMP_NUM_THREADS=1 python scripts/bench_rag.py            # the quick run (default): ~2 minutes on one core
    python scripts/bench_rag.py --full                        # longer inputs, more repetitions
    OMP_NUM_THREADS=1 python scripts/bench_rag.py --size tiny # RAG-Token beam search on a tiny model, ~20 s

`--compile` adds the RAG-Token training step with lewisrag's models compiled as `train rag
--compile` compiles them, in fp32 and under bf16 autocast, beside transformers' and lewisrag's eager
step (the compiling first call is timed apart).

Config (issue 3): d_model 256, 3+3 layers, vocab 8k, 5 docs, batch 8, 4 beams. Prints the CPU (model,
vector flags) first, then one table of times, ratios (transformers ÷ lewisrag, higher is better for
lewisrag), model FLOPs utilisation against this machine's measured matmul peak, and peak memory of
each measured call (run in a forked child, so one measurement cannot inherit another's high-water
mark).

`--size tiny` times only RAG-Token beam search, on a model so small (d_model 48, 1+1 layers, vocab
1000, 40-token documents, 4 docs, batch 8, 4 beams) that per-step overhead, not matmuls, sets the
speed.

Each row's note says whether the two compute the same (`agreement`, within SAME_RTOL): the training
step's loss and question-encoder gradient norm (its first step on 2 questions, in eval mode and
float64), the loss head's NLL and its gradient (float32), and decoding's ids ("identical ids" or
"IDS DIFFER").

The "+ lm_head bwd" rows follow the loss head with the two products that consume its gradient g
(grad wrt the decoder's last hidden states, g @ W, and wrt the lm_head weight, gᵀ @ h), and give
the share of subnormal floats in g: CPUs without flush-to-zero (Intel's among them) multiply those
an order of magnitude slower. They run on the model's logits and on those of a confident generator
(one token at +30 over a tail in [-60, -10]), which is what a trained one looks like.
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import os
import platform
import tempfile
import time
from dataclasses import dataclass

import torch

from lewisrag.rag_model import RagModel
from lewisrag.rag_model import marginalize as M
from lewisrag.rag_model.testing import tiny_batch, tiny_hf_rag
from lewisrag.data.io import InputError
from lewisrag.training.devices import check_compiler, compile_models

B, K, BEAMS, D, LAYERS, VOCAB, FFN = 8, 5, 4, 256, 3, 8192, 1024
# the relative difference under which transformers' and lewisrag's outputs are the SAME: sums taken in
# another order differ by about 1e-12 in float64 (the training step's check) and up to 4e-7 in float32
# (the loss head's); a formula that differs (where the doc prior enters, a BOS offset, a pad mask) by
# orders of magnitude more
SAME_RTOL = 1e-5


@dataclass(frozen=True)
class TinySize:
    """`--size tiny`: RAG-Token beam search where each step's matmuls are small next to its bookkeeping."""

    batch: int = 8  # B questions
    n_docs: int = 4  # K retrieved documents per question
    beams: int = 4  # W
    d_model: int = 48  # D
    layers: int = 1  # encoder layers, and as many decoder layers
    heads: int = 4  # attention heads (head size 12)
    ffn: int = 192  # feed-forward width
    vocab: int = 1000  # V
    length: int = 40  # L, tokens per document
    max_length: int = 20  # decoded length, start token included, as in the default run
    reps: int = 15  # timed calls per contender (--full: 40); each row keeps the fastest


def timed(fn, reps: int, warm: bool = True) -> float:
    """Fastest of `reps` calls: on a shared machine the minimum is the least noisy estimate."""
    if warm:
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def timed_pair(fa, fb, reps: int, warm: bool = True) -> tuple[float, float]:
    """Alternate the two contenders so that load from other processes hits both alike."""
    ta, tb = [], []
    for _ in range(reps):
        ta.append(timed(fa, 1, warm))
        tb.append(timed(fb, 1, warm))
        warm = False
    return min(ta), min(tb)


def timed_triple(fa, fb, fc, reps: int) -> tuple[float, float, float]:
    """`timed_pair` for three contenders (each called once before)."""
    ta, tb, tc = [], [], []
    for _ in range(reps):
        ta.append(timed(fa, 1, False))
        tb.append(timed(fb, 1, False))
        tc.append(timed(fc, 1, False))
    return min(ta), min(tb), min(tc)


def _rss_mb(field: str) -> float:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_mb(fn) -> float:
    """Peak resident memory growth (MB) of one call of `fn`, measured in a forked child.

    The child returns the parent's freed heap to the OS (malloc_trim) and resets the kernel's
    high-water mark (clear_refs 5), so the number is what `fn` itself needed. It runs on one thread:
    a forked child of a process whose OpenMP pool has run (torch's, with 2 threads or more) hangs in
    its first parallel region, as the pool's threads were not forked with it.
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        torch.set_num_threads(1)
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        base = _rss_mb("VmRSS")
        fn()
        os.write(w, f"{_rss_mb('VmHWM') - base:.1f}".encode())
        os._exit(0)
    os.close(w)
    out = os.read(r, 64).decode()
    os.waitpid(pid, 0)
    return float(out)


def matmul_peak_flops(n: int = 2048, reps: int = 8) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    return 2 * n**3 / timed(lambda: torch.mm(a, b), reps)


def train_flops(length: int, target: int, q_len: int) -> float:
    """Forward+backward FLOPs (3 × forward) of one RAG step: encoder, decoder, LM head, question encoder."""
    enc_tok = 2 * (4 * D * D + 2 * D * FFN) + 4 * length * D
    dec_tok = 2 * (6 * D * D + 2 * D * FFN) + 4 * target * D + 4 * length * D
    cross_kv = 2 * 2 * D * D * length  # cross-attention keys/values per (doc, layer)
    gen = B * K * (LAYERS * (length * enc_tok + cross_kv + target * dec_tok) + target * 2 * D * VOCAB)
    qenc = B * q_len * LAYERS * (2 * (4 * D * D + 2 * D * FFN) + 4 * q_len * D)
    return 3 * (gen + qenc)


def build(variant: str, path: str):
    hf = tiny_hf_rag(variant, seed=0, vocab=VOCAB, d_model=D, layers=LAYERS, heads=4, ffn=FFN, n_docs=K,
                     init_std=0.05, max_positions=512, eos_bias=2.0)
    hf.save_pretrained(path)
    return hf, RagModel.from_hf_pretrained(path)


def agreement(quantities: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> str:
    """SAME when each quantity's (transformers, lewisrag) values differ by at most SAME_RTOL relative (the
    difference's norm over lewisrag's), else DIFFER; the differences follow.

    >>> agreement({"loss": (torch.tensor(2.0), torch.tensor(2.0)), "NLL": (torch.tensor([1.0, 1.0]), torch.tensor([1.0, 2.0]))})
    'loss and NLL DIFFER (relative difference 0.0e+00, 4.5e-01; tolerance 1e-05)'
    """
    diffs = [((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item() for a, b in quantities.values()]
    verdict = "SAME" if all(d <= SAME_RTOL for d in diffs) else "DIFFER"  # NaN: DIFFER
    return (f"{' and '.join(quantities)} {verdict} (relative difference {', '.join(f'{d:.1e}' for d in diffs)}; "
            f"tolerance {SAME_RTOL:g})")


def first_step_agreement(hf, ours, batch, q_ids, docs, questions: int = 2) -> str:
    """`agreement` of transformers' and lewisrag's training step on the same float32 weights, as
    `train_step_fn` computes it, on the batch's first `questions`: the loss and the question encoder's
    gradient norm (a norm: the two may hold its parameters in another order). In eval mode, since the
    timed steps' dropout draws differ, and in float64: with random weights the documents' posterior is
    nearly their prior, and float32 cancellation in the gradient through the doc scores left the two
    1e-3 apart (1e-12 in float64). Each model is cast back to float32 after, exactly; the first
    questions keep float64's memory small (here and in scripts/bench_gpu.py's same-weights rows)."""
    ids, mask, _, labels = batch
    k = docs.shape[1]
    ids, mask = ids[: questions * k], mask[: questions * k]  # (questions*K, L)
    labels, q_ids, docs = labels[:questions], q_ids[:questions], docs[:questions]
    values = []
    for model in (hf, ours):
        training = model.training
        model.eval().double()
        q = model.question_encoder(q_ids)[0]  # (B, D)
        doc_scores = torch.bmm(q.unsqueeze(1), docs.double().transpose(1, 2)).squeeze(1)  # (B, K)
        loss = model(context_input_ids=ids, context_attention_mask=mask, doc_scores=doc_scores, labels=labels,
                     reduce_loss=True, n_docs=k).loss
        params = [p for p in model.question_encoder.parameters() if p.requires_grad]
        grads = [g for g in torch.autograd.grad(loss, params, allow_unused=True) if g is not None]
        values.append((loss.detach(), torch.stack([g.norm() for g in grads]).norm()))
        model.float().train(training)
    (loss_hf, norm_hf), (loss_ours, norm_ours) = values
    return agreement({"loss": (loss_hf, loss_ours), "question-encoder gradient norm": (norm_hf, norm_ours)})


def train_step_fn(model, is_hf: bool, batch, q_ids, docs, bf16: bool = False, compiled: bool = False):
    """One training step of (a copy of) `model`; `bf16`: under bf16 autocast, as `--mixed-precision
    bf16` trains; `compiled`: lewisrag's models compiled as `train rag --compile` compiles them."""
    ids, mask, _, labels = batch
    model = copy.deepcopy(model).train()
    if compiled:
        compile_models(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            q = model.question_encoder(q_ids)[0]  # (B, D)
            doc_scores = torch.bmm(q.unsqueeze(1).float(), docs.transpose(1, 2)).squeeze(1)  # (B, K)
            out = model(context_input_ids=ids, context_attention_mask=mask, doc_scores=doc_scores, labels=labels,
                        reduce_loss=True, n_docs=K)
        opt.zero_grad(set_to_none=True)
        out.loss.float().backward()
        opt.step()

    return step


def nll_fns(variant: str, hf, scores, labels):
    """transformers' and lewisrag's per-example NLL as functions of the logits (B*K, T, V)."""
    ours_nll = M.rag_token_nll if variant == "token" else M.rag_sequence_nll
    return (lambda x: type(hf).get_nll(hf, x, scores, labels, n_docs=K)), (lambda x: ours_nll(x, scores, labels, 1))


def nll_agreement(variant: str, hf, logits, scores, labels, backward: bool) -> str:
    """`agreement` of transformers' and lewisrag's per-example NLL of `logits` (B*K, T, V) and, with
    `backward`, of its gradient with respect to them."""
    values = []
    for fn in nll_fns(variant, hf, scores, labels):
        x = logits.detach().requires_grad_()
        nll = fn(x)  # (B,)
        values.append((nll.detach(), torch.autograd.grad(nll.sum(), x)[0] if backward else None))
    (nll_hf, g_hf), (nll_ours, g_ours) = values
    return agreement({"NLL": (nll_hf, nll_ours), **({"its gradient": (g_hf, g_ours)} if backward else {})})


def loss_head_fns(variant: str, hf, logits, scores, labels, backward: bool):
    """Per-example NLL from the generator's logits (B*K, T, V), with or without its backward pass."""

    def run(fn):
        if backward:
            fn(logits.detach().requires_grad_()).sum().backward()
        else:
            fn(logits.detach())

    return tuple((lambda fn=fn: run(fn)) for fn in nll_fns(variant, hf, scores, labels))


def lm_head_backward_fns(variant: str, hf, logits, hidden, weight, scores, labels):
    """Loss head fwd+bwd, then the lm_head products that take its gradient g; and g's subnormal shares.

    hidden (B*K, T, D) is the decoder's last hidden state and weight (V, D) the lm_head's.
    """
    h = hidden.reshape(-1, D)  # (B*K*T, D)

    def grad(fn):
        x = logits.detach().requires_grad_()
        fn(x).sum().backward()
        return x.grad.view(-1, VOCAB)  # (B*K*T, V)

    def run(fn):
        g = grad(fn)
        return g @ weight, g.t() @ h  # grad wrt hidden (B*K*T, D) and wrt the lm_head weight (V, D)

    def subnormal_share(g):
        return ((g != 0) & (g.abs() < torch.finfo(g.dtype).tiny)).float().mean().item()

    hf_nll, ours_nll = nll_fns(variant, hf, scores, labels)
    return (lambda: run(hf_nll)), (lambda: run(ours_nll)), (subnormal_share(grad(hf_nll)), subnormal_share(grad(ours_nll)))


def confident_logits(target: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """Logits (B*K, T, V) of a confident generator: one token at +30 (the target at 70% of the
    (document, position) pairs, another token elsewhere) over a tail uniform in [-60, -10]."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.rand(*target.shape, VOCAB, generator=g) * -50 - 10  # (B*K, T, V)
    other = torch.randint(0, VOCAB, target.shape, generator=g)  # (B*K, T)
    top = torch.where(torch.rand(target.shape, generator=g) < 0.7, target, other)  # (B*K, T)
    return logits.scatter_(-1, top.unsqueeze(-1), 30.0)


def cpu_description() -> str:
    """The CPU's model name and vector extensions, from /proc/cpuinfo where there is one."""
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                info[key.strip()] = value.strip()
    except OSError:
        pass
    name = info.get("model name") or platform.processor() or platform.machine()
    if info:  # the family/model pair names the generation where a hypervisor hides the model name
        name += f" ({info.get('vendor_id', '?')} family {info.get('cpu family', '?')} model {info.get('model', '?')})"
    wanted = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
              "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")
    flags = set(info.get("flags", "").split())
    have = " ".join(f for f in wanted if f in flags) or "unknown"
    return (f"CPU: {name}, {os.cpu_count()} logical CPUs; flags: {have}; "
            f"torch {torch.__version__} CPU capability {torch.backends.cpu.get_cpu_capability()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="more repetitions, and at --size bench longer inputs (L=256)")
    ap.add_argument("--compile", action="store_true",
                    help="also the RAG-Token train step with `train rag --compile` (fp32 and bf16: two compilations, "
                         "65-77 s each on two cores, 19-27 s with inductor's cache warm)")
    ap.add_argument("--size", choices=("bench", "tiny"), default="bench",
                    help="bench (default): every row at d_model 256; tiny: only RAG-Token beam search, at d_model 48")
    args = ap.parse_args()
    if args.compile and args.size == "tiny":
        ap.error("--compile times the training step, which --size tiny does not run")
    if args.compile:
        try:
            check_compiler()
        except InputError as e:
            ap.error(str(e))
    print(cpu_description(), flush=True)
    if args.size == "tiny":
        return tiny_main(args.full)
    # L: a 100-word passage with its title and the question is ~130-200 BART tokens
    length, target, reps = (256, 24, 5) if args.full else (128, 16, 2)
    compiled = args.compile
    # inductor fixes the thread count into its CPU kernels unless it equals the core count, and a
    # forked child would then hang in their parallel regions (peak_mb): measured only where they agree
    # (with inductor's dynamic_threads instead, a run hung here; not understood, not used)
    compiled_peak = torch.get_num_threads() == os.cpu_count()
    torch.manual_seed(0)
    peak = matmul_peak_flops()
    rows = []  # (what, transformers s, lewisrag s, mem hf MB, mem ours MB, note)
    g = torch.Generator().manual_seed(1)
    q_ids = torch.randint(3, VOCAB, (B, 16), generator=g)
    docs = torch.randn(B, K, D, generator=g) * 0.1
    batch = tiny_batch(B, K, length, target, VOCAB, seed=3)
    ids, mask, scores, labels = batch
    flops = train_flops(length, target, 16)
    with tempfile.TemporaryDirectory() as tmp:
        for variant in ("token", "sequence"):
            hf, ours = build(variant, os.path.join(tmp, variant))
            f_hf, f_ours = train_step_fn(hf, True, batch, q_ids, docs), train_step_fn(ours, False, batch, q_ids, docs)
            t_hf, t_ours = timed_pair(f_hf, f_ours, reps + 1)
            rows.append((f"train step ({variant})", t_hf, t_ours, peak_mb(f_hf), peak_mb(f_ours),
                         f"MFU; {first_step_agreement(hf, ours, batch, q_ids, docs)}"))
            if compiled and variant == "token":  # train rag --compile, in fp32 and in bf16 (first call compiles)
                for bf16 in (False, True):
                    label = "bf16 autocast" if bf16 else "fp32"
                    f_hf = train_step_fn(hf, True, batch, q_ids, docs, bf16=bf16)
                    f_ours = train_step_fn(ours, False, batch, q_ids, docs, bf16=bf16)
                    f_c = train_step_fn(ours, False, batch, q_ids, docs, bf16=bf16, compiled=True)
                    f_hf(), f_ours()
                    t0 = time.perf_counter()
                    f_c()
                    compile_s = time.perf_counter() - t0
                    t_hf, t_ours, t_c = timed_triple(f_hf, f_ours, f_c, reps + 1)
                    peak_hf = peak_mb(f_hf)
                    rows.append((f"train step ({variant}), {label}", t_hf, t_ours, peak_hf, peak_mb(f_ours), ""))
                    rows.append((f"train step ({variant}), {label}, lewisrag --compile", t_hf, t_c, peak_hf,
                                 peak_mb(f_c) if compiled_peak else float("nan"),
                                 f"{t_ours / t_c:.2f}× lewisrag eager; compiled in {compile_s:.0f} s"))
            with torch.no_grad():
                logits = ours(ids, mask, scores, labels=labels).logits
                hidden = ours.generator(input_ids=ids, attention_mask=mask, decoder_input_ids=labels.repeat_interleave(K, 0),
                                        use_cache=False, output_hidden_states=True).decoder_hidden_states[-1]  # (B*K, T, D)
            for backward in (False, True):
                h_hf, h_ours = loss_head_fns(variant, hf, logits, scores, labels, backward)
                rows.append((f"loss head {'fwd+bwd' if backward else 'fwd'} ({variant})", *timed_pair(h_hf, h_ours, 8),
                             peak_mb(h_hf), peak_mb(h_ours), nll_agreement(variant, hf, logits, scores, labels, backward)))
            predicted = M.shift_labels_left(labels, 1).repeat_interleave(K, 0)  # (B*K, T)
            weight = ours.generator.lm_head.weight.detach()  # (V, D)
            for what, lg in (("model logits", logits), ("confident logits", confident_logits(predicted))):
                h_hf, h_ours, (s_hf, s_ours) = lm_head_backward_fns(variant, hf, lg, hidden, weight, scores, labels)
                rows.append((f"loss head + lm_head bwd, {what} ({variant})", *timed_pair(h_hf, h_ours, 8),
                             peak_mb(h_hf), peak_mb(h_ours), f"subnormals in g: hf {s_hf:.2%}, ours {s_ours:.2%}; "
                             f"{nll_agreement(variant, hf, lg, scores, labels, True)}"))
            kw = dict(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, n_docs=K,
                      num_beams=BEAMS, max_length=20)
            if variant == "sequence":
                kw["do_deduplication"] = False
            name = "RAG-Sequence thorough, no dedup" if variant == "sequence" else "RAG-Token beam search"
            rows.append(decode_row(name, hf, ours, kw, reps - 1))
    peak = max(peak, matmul_peak_flops())  # the machine is shared: keep the better of two measurements
    report(rows, f"RAG bench: d_model {D}, {LAYERS}+{LAYERS} layers, vocab {VOCAB}, K={K}, B={B}, beams {BEAMS}, "
                 f"L={length}, T={target}; matmul peak {peak / 1e9:.1f} GFLOP/s, {torch.get_num_threads()} thread(s)",
           peak, flops)


def decode_row(name: str, hf, ours, kw: dict, reps: int) -> tuple:
    """transformers' and lewisrag's generate(**kw), timed alternately; the note says whether the ids agree."""
    same = torch.equal(hf.generate(**kw), ours.generate(**kw))
    d_hf, d_ours = (lambda: hf.generate(**kw)), (lambda: ours.generate(**kw))
    return (name, *timed_pair(d_hf, d_ours, reps, warm=False), peak_mb(d_hf), peak_mb(d_ours),
            "identical ids" if same else "IDS DIFFER")


def tiny_main(full: bool) -> None:
    """RAG-Token beam search at `TinySize`, lewisrag against transformers on the same weights."""
    c = TinySize()
    hf = tiny_hf_rag("token", seed=0, vocab=c.vocab, d_model=c.d_model, layers=c.layers, heads=c.heads, ffn=c.ffn,
                     n_docs=c.n_docs, init_std=0.05, max_positions=512, eos_bias=2.0)
    with tempfile.TemporaryDirectory() as tmp:
        hf.save_pretrained(tmp)
        ours = RagModel.from_hf_pretrained(tmp)
    ids, mask, scores, _ = tiny_batch(c.batch, c.n_docs, c.length, 16, c.vocab, seed=3)
    kw = {"context_input_ids": ids, "context_attention_mask": mask, "doc_scores": scores, "n_docs": c.n_docs,
          "num_beams": c.beams, "max_length": c.max_length}
    rows = [decode_row("RAG-Token beam search", hf, ours, kw, 40 if full else c.reps)]
    report(rows, f"RAG bench, tiny: d_model {c.d_model}, {c.layers}+{c.layers} layers, {c.heads} heads, ffn {c.ffn}, "
                 f"vocab {c.vocab}, K={c.n_docs}, B={c.batch}, beams {c.beams}, L={c.length}, "
                 f"max_length {c.max_length}; {torch.get_num_threads()} thread(s)")


def report(rows, title: str, peak: float = 0.0, flops: float = 0.0) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    for col in ("measure", "transformers s", "lewisrag s", "speed-up", "peak MB hf", "peak MB ours", "mem ratio", "note"):
        t.add_column(col)
    for what, a, b, ma, mb, note in rows:
        ratio = f"{mb / ma:.2f}×" if ma > 0 else "-"
        if note.startswith("MFU"):  # model FLOPs utilisation: estimated step FLOPs / time / measured matmul peak
            note = f"MFU hf {flops / a / peak:.0%}, ours {flops / b / peak:.0%}" + note[len("MFU"):]
        t.add_row(what, f"{a:.3f}", f"{b:.3f}", f"{a / b:.2f}×", f"{ma:.0f}", f"{mb:.0f}", ratio, note)
    Console(width=200).print(t)


if __name__ == "__main__":
    main()
