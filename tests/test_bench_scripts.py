"""The GPU benchmark runs end to end at toy sizes on the CPU, so that a GPU session spends its minutes
measuring, not debugging: every part runs, nothing errs, and lewisrag's decoding gives transformers' ids."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# torch.compile (the `compiled` part) needs a C compiler; without one that part reports its one-line error
COMPILED_ERRORS = {} if any(shutil.which(cc) for cc in ("cc", "gcc", "clang")) else {
    "compiled": "InputError: --compile: needs a C compiler on PATH (cc, gcc or clang): torch.compile builds its kernels with it"}


def test_bench_gpu_check_preset_runs_every_part(tmp_path):
    out = tmp_path / "bench.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_gpu.py"), "--preset", "check", "--device", "cpu",
                        "--reps", "1", "--json", str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["errors"] == COMPILED_ERRORS and results["skipped"] == []
    parts = results["parts"]
    assert {"corpus", "train_token", "answer", "same_weights", "profile", "closed_book", "train_token_faiss",
            "train_sequence", "search", "search_scale"} <= set(parts)
    cb = parts["closed_book"]
    assert cb["steps"] == 4 and cb["device"] == "cpu" and cb["median_step_s"] > 0 and cb["answer_questions_per_s"] > 0
    assert parts["train_token"]["steps"] == 6 and parts["train_token"]["search"] == "faiss"  # no GPU here
    assert all(row[-1] == "identical ids" for row in parts["same_weights"] if "beam search" in row[1])
    if not COMPILED_ERRORS:
        (compiled,) = parts["compiled"]  # the RAG-Token step with lewisrag's models compiled (train rag --compile)
        assert "--compile" in compiled[1] and compiled[2] > 0 and compiled[3] > 0
        assert compiled[-1].startswith("first step (compiling)")
    split = parts["train_token"]["mean_step_split_s"]
    assert all(v >= 0 for v in split.values()) and split["forward"] > 0
    # the device search path in both of its precisions, here on the CPU: the same top-K as FAISS
    placed = [row for row in parts["search"] if row[1].startswith("DenseIndex.search_on")]
    assert [("'float32'" in row[1], "'float16'" in row[1]) for row in placed] == [(True, False), (False, True)]
    assert all(row[-1].endswith("True") and row[3] > 0 for row in placed)
    # the same path at --scale-passages random vectors: both precisions timed, float16's top-K = float32's
    scale = parts["search_scale"]
    assert [row[1].split(": ")[0] for row in scale] == ["DenseIndex.search_on('cpu', 'float32')",
                                                       "DenseIndex.search_on('cpu', 'float16')"]
    assert all(row[3] > 0 for row in scale) and "float32 product's: True" in scale[1][-1]
    assert "of the" in scale[1][-1]  # set against the train_token step measured in the same run
    split = parts["train_token"]["mean_step_split_s"]
    assert set(split) == {"search", "question_encoder", "retrieve_other", "forward", "backward_optimizer_rest"}
    assert split["question_encoder"] > 0


def test_gpu_session_script_dry_run(tmp_path):
    """The one prepared call for a lent GPU runs here at toy sizes and writes each part's numbers."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OUT": str(tmp_path), "PYTHON": sys.executable,
           "BENCH_ARGS": "--preset check --device cpu --reps 1 --encode 512 --passages 3000 --steps-token 6 --budget 1e9", "SMOKE_ARGS": "--device cpu"}
    r = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_session.sh")], capture_output=True, text=True, env=env,
                       timeout=600, cwd=ROOT)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "Model name" in (tmp_path / "machine.txt").read_text()
    smoke = json.loads((tmp_path / "smoke.json").read_text())  # every stage of base and tiny, on the device asked
    # tiny also pretrains its generator and FEVER's verifier (--tasks qa,jeopardy,fever)
    pretrained = {"base": {}, "tiny": {"generator": "cpu", "fever/generator": "cpu"}}
    for preset in ("base", "tiny"):
        s = smoke[preset]
        assert s["exit_code"] == 0, s
        assert s["trained_on"] == {"rag_token": "cpu", "closed_book": "cpu", "preset": "cpu", **pretrained[preset]}, s
        assert {"index_a", "rag_token", "rag_sequence", "closed_book", "evaluate", "knowledge_update"} <= set(s["timings"])
    assert {"dpr", "stitched", "compare", "ablations", "fever_verifier", "jeopardy_rag_token"} <= set(smoke["tiny"]["timings"])
    cut = smoke["cut"]  # index cut over the hub's shard layout, on the device and the CPU (here both the CPU)
    assert cut["exit_code"] == 0 and cut["same_passages"] and cut["cpu"]["cut"]["passages"] == 40, cut
    train = json.loads((tmp_path / "train.json").read_text())
    assert train["errors"] == {} and train["skipped"] == []  # the mfu part reports a missing compiler in its rows
    assert set(train["parts"]) == {"matmul", "corpus", "train_token", "profile", "closed_book", "mfu"}
    assert train["parts"]["train_token"]["steps"] == 6
    mfu = train["parts"]["mfu"]  # lewisrag's step alone at four times the batch: eager, compiled, CUDA graphs, flash, bf16 weights
    assert sorted(r["mode"] for r in mfu) == sorted(["eager", "compiled", "compiled:cudagraphs", "eager:flash", "bf16weights"])
    timed_rows = {r["mode"]: r for r in mfu if "error" not in r}  # a backend the CPU lacks: its row holds the error
    compiled = set() if COMPILED_ERRORS else {"compiled", "compiled:cudagraphs"}  # CUDA graphs: none on the CPU
    assert {"eager", "bf16weights"} | compiled <= set(timed_rows)
    assert all(r["batch"] == 16 and r["step_s"] > 0 and r["flops_per_step"] > 0 for r in timed_rows.values())
    prof = train["parts"]["profile"]  # on the CPU: host operators only, no device share
    assert prof["step_s"] > 0 and prof["device_busy_share"] is None and prof["top_host_ms_per_step"]


def test_bench_cpu_linear_times_both_kinds_on_the_same_numbers():
    """scripts/bench_cpu_linear.py: every row timed for BLAS and oneDNN, whole steps at float rounding."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_cpu_linear.py"), "--threads", "1", "--repeats", "1",
                        "--json"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[0].startswith("# ") and "auto chooses" in lines[0]
    rows = [json.loads(line) for line in lines[1:]]
    assert [row["measure"].split(" ")[0] for row in rows] == ["GEMM"] * 4 + ["DPR", "BART", "BART", "BART"]
    assert all(row["blas_s"] > 0 and row["onednn_s"] > 0 and row["ratio"] > 0 for row in rows)
    assert all(row["max_abs_diff_first_call"] < 1e-3 for row in rows[4:])



def test_bench_gpu_bf16_weights_step_keeps_float32_masters():
    """`--mfu-modes bf16weights`: the model computes in bf16 without autocast while AdamW steps float32
    copies of its weights, the gradients copied up and the weights back down every step."""
    from types import SimpleNamespace

    import torch

    sys.path.insert(0, str(ROOT / "scripts"))
    import bench_gpu

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(20, 4)

        def forward(self, ids):
            return (self.embed(ids).mean(1),)  # (pooled,), as DPR's encoders answer

    class Toy(torch.nn.Module):  # the two calls `hf_step` makes of a RagModel
        def __init__(self):
            super().__init__()
            self.question_encoder, self.head = Encoder(), torch.nn.Linear(4, 20)
            self.unused = torch.nn.Linear(2, 2)  # no gradient: AdamW leaves its master alone

        def forward(self, context_input_ids, context_attention_mask, doc_scores, labels, reduce_loss, n_docs):
            assert not torch.is_autocast_enabled("cpu") and self.head.weight.dtype == torch.bfloat16
            logits = self.head(self.question_encoder.embed(context_input_ids)).float()  # (B*K, L, V)
            nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), context_input_ids.flatten())
            return SimpleNamespace(loss=nll - doc_scores.log_softmax(-1)[:, 0].mean())

    torch.manual_seed(0)
    model = Toy()
    ids = torch.randint(0, 20, (bench_gpu.K, 3))
    step = bench_gpu.hf_step(model, [ids, torch.ones_like(ids), None, None], torch.randint(0, 20, (1, 2)),
                             torch.randn(1, bench_gpu.K, 4), bf16_weights=True)
    first = [m.clone() for m in step.master]
    step(), step()
    trained = list(step.model.parameters())
    assert all(p.dtype == torch.bfloat16 for p in trained) and all(m.dtype == torch.float32 for m in step.master)
    assert all(torch.equal(p, m.to(torch.bfloat16)) for p, m in zip(trained, step.master))
    moved = [not torch.equal(a, b) for a, b in zip(first, step.master)]
    assert moved == [True, True, True, False, False]  # embedding, head weight and bias; the unused layer
