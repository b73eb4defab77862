"""Float32 linear layers on the CPU through torch's BLAS against oneDNN (`lewisrag.data.cpu_linear`).

    .venv/bin/python scripts/bench_cpu_linear.py [--threads 2] [--repeats 3] [--json]

Both in one process on the same weights and batches, alternating call by call (each repetition times
one BLAS call and one oneDNN call, the order swapped every other repetition, so that load from other
processes hits both alike): the GEMM alone (forward, at the
demo models' shapes and at 2048^3), then whole steps, since a faster product is worth only what it
saves of a step: a DPR training step at the small preset's size (BERT d128, 2 layers, 64 passages of
128 tokens, forward + backward + AdamW), a BART training step at the stitched reader's size (d128,
2+2 layers, 8 inputs of 245 tokens), that BART's encoder on 40 inputs of 192 tokens without gradient
(8 questions x 5 documents: what RAG decoding spends most of its products on), and greedy decoding
through transformers' `generate` (16 inputs, 24 tokens: per-token overhead weighs more there).
Each row prints seconds per call for both kinds, their ratio (BLAS / oneDNN: above 1, oneDNN is
faster), and for the steps the largest difference between the two kinds' losses or logits, which
must stay at float rounding. That difference is taken on the second call, after a first call whose
backward pass and optimizer step ran under each kind (the first call's loss is computed before any
backward, so it would match even with a broken oneDNN backward), and for the training steps the first
step's gradients are compared too (largest difference relative to the largest gradient).
`auto` is what `lewisrag reproduce` would choose on this CPU.
"""

from __future__ import annotations

import argparse
import json
import time

import torch


KINDS = ("blas", "onednn")


def _timed_alternating(fns: dict, repeats: int, warmup: int = 2) -> dict[str, float]:
    """Best seconds of one call of each of `fns` ({kind: fn}), the kinds alternating call by call: each
    repetition calls every kind once (the order reversed every other repetition), after `warmup` calls
    of each, likewise alternating. Each fn runs under its own kind's `cpu_linear` block."""
    from lewisrag.data.cpu_linear import cpu_linear

    kinds = list(fns)
    for _ in range(warmup):
        for kind in kinds:
            with cpu_linear(kind):
                fns[kind]()
    best = {kind: float("inf") for kind in kinds}
    for rep in range(repeats):
        for kind in (kinds if rep % 2 == 0 else kinds[::-1]):
            with cpu_linear(kind):
                start = time.perf_counter()
                fns[kind]()
                best[kind] = min(best[kind], time.perf_counter() - start)
    return best


def gemm_rows(repeats: int) -> list[dict]:
    rows = []
    for m, k, n in [(1960, 128, 512), (1960, 512, 128), (12288, 128, 512), (2048, 2048, 2048)]:
        x, w = torch.randn(m, k), torch.randn(n, k)
        calls = 20 if m * k * n < 2**30 else 3

        def run() -> None:
            with torch.no_grad():
                for _ in range(calls):
                    torch.nn.functional.linear(x, w)

        seconds = {kind: s / calls for kind, s in _timed_alternating({kind: run for kind in KINDS}, repeats).items()}
        rows.append({"measure": f"GEMM {m}x{k} @ {k}x{n}, forward", "blas_s": seconds["blas"], "onednn_s": seconds["onednn"],
                     "gflops_blas": 2 * m * k * n / seconds["blas"] / 1e9,
                     "gflops_onednn": 2 * m * k * n / seconds["onednn"] / 1e9})
    return rows


def _compare(name: str, make, step, repeats: int, grads=None) -> dict:
    """`make()` -> state; `step(state)` -> a tensor (loss or logits); `grads(state)` -> the gradients a
    training step left (None for rows without a backward pass). Each kind gets its own state from the
    same seed, and the same random numbers (dropout) on its first two calls. Compared: the second
    call's output, which for a training step is computed with the weights the first step's backward
    pass and optimizer moved (a wrong oneDNN backward shows there; the first call's loss, computed
    before any backward, cannot show it), and the first step's gradients. Then both are timed,
    alternating call by call."""
    from lewisrag.data.cpu_linear import cpu_linear

    states, outputs, first_grads = {}, {}, {}
    for kind in KINDS:
        torch.manual_seed(0)
        states[kind] = make()
        with cpu_linear(kind):
            torch.manual_seed(1)
            step(states[kind])
            if grads is not None:
                first_grads[kind] = [g.detach().clone() for g in grads(states[kind])]
            torch.manual_seed(2)
            outputs[kind] = step(states[kind]).detach().float()
    seconds = _timed_alternating({kind: (lambda kind=kind: step(states[kind])) for kind in KINDS}, repeats)
    row = {"measure": name, "blas_s": seconds["blas"], "onednn_s": seconds["onednn"],
           "max_abs_diff_after_step": _finite_diff(outputs["blas"], outputs["onednn"])}
    if grads is not None:
        row["max_rel_diff_grads"] = _grad_diff(first_grads["blas"], first_grads["onednn"])
    return row


def _grad_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """The largest |a - b| over every gradient, relative to the largest |a|; inf where the two kinds
    left gradients on different parameters or of different shapes.

    >>> _grad_diff([torch.tensor([2.0, -4.0])], [torch.tensor([2.0, -3.0])])
    0.25
    """
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return float("inf")
    scale = max((float(x.abs().max()) for x in a if x.numel()), default=0.0)
    diff = max((float((x.float() - y.float()).abs().max()) for x, y in zip(a, b) if x.numel()), default=0.0)
    return diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))


def _finite_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest |a - b| where both are finite (decoding masks scores to -inf); inf where they disagree on which."""
    if not torch.equal(torch.isfinite(a), torch.isfinite(b)):
        return float("inf")
    finite = torch.isfinite(a)
    return float((a[finite] - b[finite]).abs().max()) if finite.any() else 0.0


def _grads(state) -> list[torch.Tensor]:
    """The gradients the last training step left on the model (`state[0]`), in parameter order."""
    return [p.grad if p.grad is not None else torch.zeros(0) for p in state[0].parameters()]


def dpr_step(repeats: int) -> dict:
    from transformers import BertConfig, BertModel

    def make():
        model = BertModel(BertConfig(vocab_size=2000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=512, attention_probs_dropout_prob=0.0), add_pooling_layer=False)
        ids = torch.randint(5, 2000, (64, 128))
        return model, torch.optim.AdamW(model.parameters(), lr=1e-4), ids

    def step(state):
        model, opt, ids = state
        model.train()
        vec = model(input_ids=ids).last_hidden_state[:, 0]  # (64, 128): the [CLS] vectors
        # 32 questions against their 32 passages, in-batch negatives as DPR trains (against all 64 [CLS]
        # vectors, each question would find itself: a loss of 0.0 whatever the weights, comparing nothing)
        scores = vec[:32] @ vec[32:].T
        loss = torch.nn.functional.cross_entropy(scores, torch.arange(32))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return _compare("DPR training step (d128, 2 layers, 64 x 128 tokens), fwd + bwd + AdamW", make, step, repeats,
                    grads=_grads)


def _bart():
    from transformers import BartConfig, BartForConditionalGeneration

    return BartForConditionalGeneration(BartConfig(vocab_size=3308, d_model=128, encoder_layers=2, decoder_layers=2,
                                                   encoder_attention_heads=4, decoder_attention_heads=4,
                                                   encoder_ffn_dim=512, decoder_ffn_dim=512, max_position_embeddings=576,
                                                   dropout=0.0, attention_dropout=0.0, activation_dropout=0.0))


def bart_step(repeats: int) -> dict:
    def make():
        model = _bart()
        return model, torch.optim.AdamW(model.parameters(), lr=1e-4), torch.randint(5, 3308, (8, 245)), torch.randint(5, 3308, (8, 12))

    def step(state):
        model, opt, ids, labels = state
        model.train()
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return _compare("BART training step (d128, 2+2 layers, 8 x 245 tokens), fwd + bwd + AdamW", make, step, repeats,
                    grads=_grads)


def bart_encode(repeats: int) -> dict:
    def make():
        return _bart().eval(), torch.randint(5, 3308, (40, 192))

    def step(state):
        model, ids = state
        with torch.no_grad():
            return model.model.encoder(input_ids=ids).last_hidden_state

    return _compare("BART encoder forward, no gradient (40 inputs of 192 tokens: 8 questions x 5 documents)", make, step,
                    repeats)


def bart_decode(repeats: int) -> dict:
    def make():
        return _bart().eval(), torch.randint(5, 3308, (16, 245))

    def step(state):
        model, ids = state
        with torch.no_grad():
            return model.generate(input_ids=ids, max_new_tokens=24, min_new_tokens=24, num_beams=1, do_sample=False,
                                  output_scores=True, return_dict_in_generate=True).scores[-1]

    return _compare("BART greedy decoding (16 inputs of 245 tokens, 24 new tokens)", make, step, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per row and kind; the best is kept")
    parser.add_argument("--json", action="store_true", help="one JSON object per row")
    args = parser.parse_args()
    for flag, value in (("--threads", args.threads), ("--repeats", args.repeats)):
        if value < 1:  # 0 threads was torch's traceback, 0 repeats printed every timing as inf
            parser.error(f"{flag}: must be at least 1, got {value}")
    torch.set_num_threads(args.threads)

    from lewisrag.data.cpu_linear import auto_kind, cpu_family, cpu_vendor
    from lewisrag.data.threads import cpu_model

    print(f"# {cpu_model()} ({cpu_vendor() or 'vendor unknown'} family {cpu_family()}), torch {torch.__version__}, {args.threads} threads; "
          f"auto chooses {auto_kind()}")
    rows = gemm_rows(args.repeats) + [dpr_step(args.repeats), bart_step(args.repeats), bart_encode(args.repeats),
                                      bart_decode(args.repeats)]
    for row in rows:
        row["ratio"] = row["blas_s"] / row["onednn_s"]
        if args.json:
            print(json.dumps(row))
            continue
        extra = (f"  GFLOP/s {row['gflops_blas']:.0f} / {row['gflops_onednn']:.0f}" if "gflops_blas" in row
                 else f"  max |diff| of the 2nd call {row['max_abs_diff_after_step']:.2e}"
                 + (f", grads {row['max_rel_diff_grads']:.2e} (relative)" if "max_rel_diff_grads" in row else ""))
        print(f"{row['measure']:<90} blas {row['blas_s'] * 1e3:8.2f} ms  onednn {row['onednn_s'] * 1e3:8.2f} ms  "
              f"x{row['ratio']:.2f}{extra}")


if __name__ == "__main__":
    main()
