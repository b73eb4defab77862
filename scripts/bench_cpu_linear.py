"""Float32 linear layers on the CPU through torch's BLAS against oneDNN (`lewisrag.data.cpu_linear`).

    .venv/bin/python scripts/bench_cpu_linear.py [--threads 2] [--repeats 3] [--json]

Both in one process, alternating, on the same weights and batches: the GEMM alone (forward, at the
demo models' shapes and at 2048^3), then whole steps, since a faster product is worth only what it
saves of a step: a DPR training step at the small preset's size (BERT d128, 2 layers, 64 passages of
128 tokens, forward + backward + AdamW), a BART training step at the stitched reader's size (d128,
2+2 layers, 8 inputs of 245 tokens), that BART's encoder on 40 inputs of 192 tokens without gradient
(8 questions x 5 documents: what RAG decoding spends most of its products on), and greedy decoding
through transformers' `generate` (16 inputs, 24 tokens: per-token overhead weighs more there).
Each row prints seconds per call for both kinds, their ratio (BLAS / oneDNN: above 1, oneDNN is
faster), and for the steps the largest difference between the two kinds' losses or logits, which
must stay at float rounding. `auto` is what `lewisrag reproduce` would choose on this CPU.
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def _timed(fn, repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def gemm_rows(repeats: int) -> list[dict]:
    from lewisrag.data.cpu_linear import cpu_linear

    rows = []
    for m, k, n in [(1960, 128, 512), (1960, 512, 128), (12288, 128, 512), (2048, 2048, 2048)]:
        x, w = torch.randn(m, k), torch.randn(n, k)
        calls = 20 if m * k * n < 2**30 else 3

        def run() -> None:
            with torch.no_grad():
                for _ in range(calls):
                    torch.nn.functional.linear(x, w)

        seconds = {}
        for kind in ("blas", "onednn"):
            with cpu_linear(kind):
                seconds[kind] = _timed(run, repeats) / calls
        rows.append({"measure": f"GEMM {m}x{k} @ {k}x{n}, forward", "blas_s": seconds["blas"], "onednn_s": seconds["onednn"],
                     "gflops_blas": 2 * m * k * n / seconds["blas"] / 1e9,
                     "gflops_onednn": 2 * m * k * n / seconds["onednn"] / 1e9})
    return rows


def _compare(name: str, make, step, repeats: int) -> dict:
    """`make()` -> state; `step(state)` -> a tensor (loss or logits). The same initial state for both kinds."""
    from lewisrag.data.cpu_linear import cpu_linear

    seconds, outputs = {}, {}
    for kind in ("blas", "onednn"):
        torch.manual_seed(0)
        state = make()
        with cpu_linear(kind):
            torch.manual_seed(1)
            outputs[kind] = step(state).detach().float()
            seconds[kind] = _timed(lambda: step(state), repeats)
    return {"measure": name, "blas_s": seconds["blas"], "onednn_s": seconds["onednn"],
            "max_abs_diff_first_call": _finite_diff(outputs["blas"], outputs["onednn"])}


def _finite_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest |a - b| where both are finite (decoding masks scores to -inf); inf where they disagree on which."""
    if not torch.equal(torch.isfinite(a), torch.isfinite(b)):
        return float("inf")
    finite = torch.isfinite(a)
    return float((a[finite] - b[finite]).abs().max()) if finite.any() else 0.0


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
        scores = vec[:32] @ vec.T  # in-batch negatives, as DPR trains
        loss = torch.nn.functional.cross_entropy(scores, torch.arange(32))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return _compare("DPR training step (d128, 2 layers, 64 x 128 tokens), fwd + bwd + AdamW", make, step, repeats)


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

    return _compare("BART training step (d128, 2+2 layers, 8 x 245 tokens), fwd + bwd + AdamW", make, step, repeats)


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
                 else f"  max |diff| {row['max_abs_diff_first_call']:.2e}")
        print(f"{row['measure']:<90} blas {row['blas_s'] * 1e3:8.2f} ms  onednn {row['onednn_s'] * 1e3:8.2f} ms  "
              f"x{row['ratio']:.2f}{extra}")


if __name__ == "__main__":
    main()
