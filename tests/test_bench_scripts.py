"""The GPU benchmark runs end to end at toy sizes on the CPU, so that a GPU session spends its minutes
measuring, not debugging: every part runs, nothing errs, and lewisrag's decoding gives transformers' ids."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # hf_layouts
# torch.compile (the `compiled` part) needs a C compiler; without one that part reports its one-line error
COMPILED_ERRORS = {} if any(shutil.which(cc) for cc in ("cc", "gcc", "clang")) else {
    "compiled": "InputError: --compile: needs a C compiler on PATH (cc, gcc or clang): torch.compile builds its kernels with it"}


def _bench_gpu_check(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "bench.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # one mfu batch: compiling the step again at a second batch size would take as long as the first compile
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_gpu.py"), "--preset", "check", "--device", "cpu",
                        "--reps", "1", "--mfu-scales", "1", "--json", str(out), *args], capture_output=True, text=True,
                       env=env, timeout=600)
    return r, json.loads(out.read_text()) if out.exists() else {}


def test_bench_gpu_check_preset_runs_every_part(tmp_path):
    """Every part but the compiled ones (compiling took 48 of the run's 84 s on one core): those are the
    slow test's below; test_compile_gives_the_same_steps compiles lewisrag's step in the default suite."""
    uncompiled = ",".join(p for p in _script("bench_gpu").PARTS if p != "compiled")
    r, results = _bench_gpu_check(tmp_path, "--parts", uncompiled, "--mfu-modes", "eager")
    assert r.returncode == 0, r.stderr[-3000:]
    assert results["errors"] == {} and results["skipped"] == []
    parts = results["parts"]
    assert set(parts) == {"corpus", "matmul", "train_token", "answer", "same_weights", "profile", "closed_book", "mfu",
                          "train_token_faiss", "train_sequence", "search", "search_scale"}
    assert [row["mode"] for row in parts["mfu"]] == ["eager"] and parts["mfu"][0]["step_s"] > 0
    cb = parts["closed_book"]
    assert cb["steps"] == 4 and cb["device"] == "cpu" and cb["median_step_s"] > 0 and cb["answer_questions_per_s"] > 0
    assert parts["train_token"]["steps"] == 6 and parts["train_token"]["search"] == "faiss"  # no GPU here
    assert all(row[-1] == "identical ids" for row in parts["same_weights"] if "beam search" in row[1])
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



@pytest.mark.slow
def test_bench_gpu_check_preset_compiles_the_step(tmp_path):
    """The compiled parts: the RAG-Token step with lewisrag's models compiled (`train rag --compile`),
    and the mfu part's compiled mode."""
    r, results = _bench_gpu_check(tmp_path, "--parts", "compiled,mfu", "--mfu-modes", "eager,compiled")
    assert r.returncode == (1 if COMPILED_ERRORS else 0), r.stderr[-3000:]  # 1: a part (here compiled) failed
    assert results["errors"] == COMPILED_ERRORS and results["skipped"] == []
    if COMPILED_ERRORS:
        return
    (compiled,) = results["parts"]["compiled"]
    assert "--compile" in compiled[1] and compiled[2] > 0 and compiled[3] > 0
    assert compiled[-1].startswith("first step (compiling)")
    assert [(row["mode"], row["step_s"] > 0) for row in results["parts"]["mfu"]] == [("eager", True), ("compiled", True)]


DRY_RUN = "--preset check --device cpu --reps 1 --encode 512 --passages 3000 --steps-token 6 --budget 1e9"
MFU_MODES = ["eager", "eager:flash", "bf16weights"]  # gpu_session.sh's in train.json
MFU_COMPILED = ["compiled", "compiled:cudagraphs"]  # and in same_weights.json, after the same-weights comparison


def test_gpu_session_script_dry_run(tmp_path):
    """The one prepared call for a lent GPU runs here at toy sizes and writes each part's numbers. The mfu
    part's compiled modes (90 of the run's 220 s on one core) are left to the slow test below: compiling
    the step is covered by test_compile_gives_the_same_steps (and bench_gpu's compiled parts by the slow
    test_bench_gpu_check_preset_compiles_the_step)."""
    _gpu_session_dry_run(tmp_path, [])


@pytest.mark.slow
def test_gpu_session_script_dry_run_as_the_gpu_runs_it(tmp_path):
    """The same with every mfu mode of the GPU session, the compiled ones included."""
    _gpu_session_dry_run(tmp_path, MFU_COMPILED)


def _gpu_session_dry_run(tmp_path, compiled: list[str]):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OUT": str(tmp_path), "PYTHON": sys.executable, "BENCH_ARGS": DRY_RUN,
           "SMOKE_ARGS": "--device cpu", "SESSION_S": "100000", "MFU_COMPILED": ",".join(compiled)}
    r = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_session.sh")], capture_output=True, text=True, env=env,
                       timeout=900, cwd=ROOT)
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
    assert train["errors"] == {} and train["skipped"] == []
    # the profile last: the profiler can leave CUPTI active and later steps slower
    assert list(train["parts"]) == ["matmul", "corpus", "train_token", "mfu", "closed_book", "profile"]
    assert train["parts"]["train_token"]["steps"] == 6
    mfu = train["parts"]["mfu"]  # lewisrag's step alone at four times the batch: eager, flash, bf16 weights
    assert [r["mode"] for r in mfu] == MFU_MODES
    timed_rows = {r["mode"]: r for r in mfu if "error" not in r}  # a backend the CPU lacks: its row holds the error
    assert {"eager", "bf16weights"} <= set(timed_rows)
    assert all(r["batch"] == 16 and r["step_s"] > 0 and r["flops_per_step"] > 0 for r in timed_rows.values())
    prof = train["parts"]["profile"]  # on the CPU: host operators only, no device share
    assert prof["step_s"] > 0 and prof["device_busy_share"] is None and prof["top_host_ms_per_step"]
    assert prof["host_outside_operators_ms_per_step"] > 0
    assert not any(name.startswith("ProfilerStep") for name, _, _ in prof["top_host_ms_per_step"])
    # then the same-weights peaks, each contender alone, and after them the compiled mfu modes, as time allows
    same = json.loads((tmp_path / "same_weights.json").read_text())
    assert same["errors"] == {} and same["skipped"] == [] and len(same["parts"]["same_weights"]) == 4
    assert list(same["parts"]) == (["matmul", "corpus", "same_weights", "mfu"] if compiled else ["corpus", "same_weights"])
    if compiled:  # the compiled rows (a missing compiler: their error); CUDA graphs: none on the CPU, compiled all the same
        assert [r["mode"] for r in same["parts"]["mfu"]] == compiled
        assert all(r["batch"] == 16 and ("error" in r) == bool(COMPILED_ERRORS) for r in same["parts"]["mfu"])


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
    # compared after a first step's backward pass and optimizer step, and the training steps' gradients
    assert all(row["max_abs_diff_after_step"] < 1e-3 for row in rows[4:])
    assert [("max_rel_diff_grads" in row) for row in rows[4:]] == [True, True, False, False]
    assert all(row["max_rel_diff_grads"] < 1e-3 for row in rows[4:6])


def _script(name: str):
    import importlib.util

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _toy_training(torch):
    """(make, step) of a two-layer training step whose products oneDNN takes (2^21 multiply-adds and more)."""

    def make():
        model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Tanh(), torch.nn.Linear(256, 256))
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2), torch.randn(64, 256)

    def step(state):
        model, opt, x = state
        loss = model(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return make, step


def test_bench_cpu_linear_catches_a_wrong_onednn_backward(monkeypatch):
    """A oneDNN backward that zeroes the input gradient and scales the weight gradient by -1000 leaves
    the first call's loss (computed before any backward) identical to BLAS's: the comparison is taken
    after a step, and on the step's gradients, where it shows."""
    import torch

    from lewisrag.data import cpu_linear

    bench = _script("bench_cpu_linear")
    make, step = _toy_training(torch)
    from lewisrag.data.threads import torch_threads

    with torch_threads(1):
        right = bench._compare("toy step", make, step, 1, grads=bench._grads)
        assert right["max_abs_diff_after_step"] < 1e-5 and right["max_rel_diff_grads"] < 1e-5, right
        backward = cpu_linear._OneDNNLinear.backward

        def wrong(ctx, grad):
            gx, gw, gb = backward(ctx, grad)
            return None if gx is None else gx * 0, None if gw is None else -1000 * gw, gb

        monkeypatch.setattr(cpu_linear._OneDNNLinear, "backward", staticmethod(wrong))
        broken = bench._compare("toy step", make, step, 1, grads=bench._grads)
    assert broken["max_abs_diff_after_step"] > 1e-2 and broken["max_rel_diff_grads"] > 1.0, broken


def test_bench_cpu_linear_alternates_the_kinds_call_by_call():
    """Each repetition times one call of each kind, each under its own kind, the order swapped every other one."""
    from lewisrag.data.cpu_linear import current_kind

    bench = _script("bench_cpu_linear")
    calls = []
    fns = {kind: (lambda kind=kind: calls.append((kind, current_kind()))) for kind in ("blas", "onednn")}
    best = bench._timed_alternating(fns, repeats=3, warmup=1)
    assert set(best) == {"blas", "onednn"} and all(v >= 0 for v in best.values())
    assert all(kind == current for kind, current in calls)
    assert [kind for kind, _ in calls] == ["blas", "onednn", "blas", "onednn", "onednn", "blas", "blas", "onednn"]


def test_bench_gpu_flops_count_cross_attention_keys_and_values_over_the_source(tmp_path):
    """bench_gpu's training FLOPs agree with bench_rag's count on bench_rag's config (the question
    encoder left out: bench_rag gives it attention, bench_gpu its weights only), and the weights
    counted from a saved BART put the cross-attention's key and value projections apart."""
    import doctest
    from types import SimpleNamespace

    from hf_layouts import bart

    gpu, rag = _script("bench_gpu"), _script("bench_rag")
    d, ffn, layers = rag.D, rag.FFN, rag.LAYERS
    n_enc = layers * (4 * d * d + 2 * d * ffn)  # bench_rag counts the products' weights, no biases
    n_cross_kv = layers * 2 * d * d
    n_dec = layers * (6 * d * d + 2 * d * ffn) + n_cross_kv
    cfg = SimpleNamespace(d_model=d, encoder_layers=layers, vocab_size=rag.VOCAB)
    for length, target in ((300, 24), (64, 8), (128, 128)):
        ours = gpu.step_flops([(rag.B * rag.K, length, target)], [0], cfg, 0, n_enc, n_dec, n_cross_kv)
        assert ours == rag.train_flops(length, target, 0), (length, target)
    # the paper's shapes (bart-large, B=16, K=5, L=300, T=24): what counting them over the target left out
    large = SimpleNamespace(d_model=1024, encoder_layers=12, vocab_size=50265)
    xkv = 12 * 2 * (1024 * 1024 + 1024)
    missed = gpu.step_flops([(80, 300, 24)], [0], large, 0, 0, xkv, xkv) - gpu.step_flops([(80, 300, 24)], [0], large, 0, 0, xkv, 0)
    assert missed == 3 * 2 * xkv * 80 * (300 - 24) and round(missed / 1e12, 2) == 3.34
    enc, dec, cross_kv = gpu.bart_weights(bart(tmp_path, ["a b c d e f"] * 4, d_model=16, layers=2))
    assert cross_kv == 2 * 2 * (16 * 16 + 16) and 0 < cross_kv < dec and enc > 0  # 2 layers, k_proj and v_proj, biases
    assert doctest.testmod(gpu).failed == 0


def test_bench_gpu_same_weights_measures_each_contender_alone(monkeypatch):
    """Every peak and timing of `same_weights` sees one trained copy at most: the other contender's
    (weights, gradients, AdamW's moments) is freed first, and decoding runs with neither."""
    import weakref

    import torch

    gpu = _script("bench_gpu")
    alive = weakref.WeakSet()

    class TrainedCopy:
        pass

    def fake_hf_step(model, *a, **kw):
        copy = TrainedCopy()
        alive.add(copy)

        def step():
            return copy

        return step

    class Model:
        def eval(self):
            return self

        def generate(self, **kw):
            return torch.tensor([[2, 5, 2]])

    seen = []
    monkeypatch.setattr(gpu, "hf_step", fake_hf_step)
    monkeypatch.setattr(gpu, "peak_gb", lambda fn: (fn(), seen.append(len(alive)))[1] or 0.0)
    monkeypatch.setattr(gpu, "same_weights_batch", lambda c, p, device: ([torch.zeros(1, 1)] * 4, None, None))
    monkeypatch.setattr(gpu, "same_weights_pair", lambda variant, c, device: (Model(), Model()))
    monkeypatch.setattr(gpu, "first_step_agreement", lambda *a: "loss and question-encoder gradient norm SAME")
    rows = gpu.same_weights({}, {"batch": 1, "context": 4, "target": 3}, Path("."), "cpu", 1, lambda msg: None)
    assert len(rows) == 4
    assert [row[-1] for row in rows] == ["loss and question-encoder gradient norm SAME", "identical ids"] * 2
    # per variant: transformers' step, lewisrag's step, then both decodings
    assert seen == [1, 1, 0, 0] * 2


def test_bench_gpu_exits_1_when_a_part_fails_and_2_on_bad_flags(tmp_path, monkeypatch, capsys):
    """A failed part is reported and written, and the exit status says so; unknown --parts and flag values
    that cannot work (found after minutes of measuring, before) are refused up front (exit 2)."""
    gpu = _script("bench_gpu")
    out = tmp_path / "bench.json"

    def broken(*args, **kwargs):
        raise RuntimeError("a part that breaks")

    monkeypatch.setattr(gpu, "search_scale", broken)
    monkeypatch.setattr(sys, "argv", ["bench_gpu.py", "--preset", "check", "--device", "cpu", "--parts", "search_scale",
                                      "--json", str(out)])
    with pytest.raises(SystemExit) as stop:
        gpu.main()
    assert stop.value.code == 1 and "ERROR in search_scale: RuntimeError: a part that breaks" in capsys.readouterr().out
    assert json.loads(out.read_text())["errors"] == {"search_scale": "RuntimeError: a part that breaks"}
    for flags, says in ((["--parts", "train_token,bogus"], "unknown 'bogus'"), (["--mfu-scales", "abc"], "--mfu-scales"),
                        (["--mfu-scales", "2,1"], "must be ascending"), (["--scale-passages", "-5"], "--scale-passages"),
                        (["--reps", "0"], "--reps"), (["--json", str(tmp_path / "no" / "x.json")], "its folder does not exist"),
                        (["--json", str(tmp_path)], "a folder"), (["--device", "cuda:9"], "no CUDA device")):
        monkeypatch.setattr(sys, "argv", ["bench_gpu.py", "--preset", "check", "--device", "cpu", *flags])
        if flags[0] == "--device" and gpu.torch.cuda.is_available():
            continue
        with pytest.raises(SystemExit) as stop:
            gpu.main()
        err = capsys.readouterr().err
        assert stop.value.code == 2 and says in err.strip().splitlines()[-1], (flags, err)
    gpu = _script("bench_gpu")
    errors = []
    assert gpu.parse_parts("answer", errors.append, errors.append) == {"answer", "train_token"}
    assert errors == ["answer answers with train_token's trained model: train_token added to --parts"]


def test_bench_gpu_records_the_parts_a_missing_corpus_takes_along(tmp_path, monkeypatch, capsys):
    """With --budget 0, or a corpus that failed, the parts that need the corpus were in neither `skipped` nor
    `errors`: the JSON said skipped ['corpus'] and no parts, as if same_weights and mfu had not been asked for."""
    gpu = _script("bench_gpu")
    out = tmp_path / "bench.json"
    argv = ["bench_gpu.py", "--preset", "check", "--device", "cpu", "--json", str(out)]
    monkeypatch.setattr(sys, "argv", [*argv, "--parts", "search_scale,mfu,search,same_weights", "--budget", "0"])
    with pytest.raises(SystemExit) as stop:
        gpu.main()
    results = json.loads(out.read_text())
    assert stop.value.code == 1 and results["parts"] == {} and results["errors"] == {}
    assert results["skipped"] == ["corpus", "same_weights", "mfu", "search", "search_scale"]  # corpus's in the order they run
    assert "skipped: mfu (past --budget)" in capsys.readouterr().out

    def broken(*args):
        raise OSError("No space left on device")

    monkeypatch.setattr(gpu, "build_corpus", broken)
    monkeypatch.setattr(sys, "argv", [*argv, "--parts", "profile,same_weights"])
    with pytest.raises(SystemExit) as stop:
        gpu.main()
    results = json.loads(out.read_text())
    failed = "OSError: No space left on device"
    assert stop.value.code == 1 and results["parts"] == {} and results["skipped"] == []
    assert results["errors"] == {"corpus": failed, "same_weights": f"not run: the corpus failed: {failed}",
                                 "profile": f"not run: the corpus failed: {failed}"}
    assert f"ERROR in profile: not run: the corpus failed: {failed}" in capsys.readouterr().out


def test_bench_cut_rate_counts_what_its_docstring_says(tmp_path, monkeypatch):
    """The docstring said 2 x 768 multiply-adds a question and passage, twice what the rate counts: 2 x 768
    FLOPs, 768 multiply-adds (the command's run faked: 1M passages, 1,000 questions, 2 s)."""
    import types

    cut = _script("bench_cut")
    assert "(2 x 768 FLOPs, 768 multiply-adds, per question and passage" in " ".join(cut.__doc__.split())
    record = {"questions": 1000, "max_passages": 100_000, "retrieved": 1, "random": 1, "full_depth": 1}
    child = types.SimpleNamespace(returncode=0, communicate=lambda: (json.dumps(record), None))
    monkeypatch.setattr(cut.subprocess, "Popen", lambda *args, **kwargs: child)
    monkeypatch.setattr(cut, "_watch", lambda child: {"VmRSS": 1, "RssAnon": 1, "RssFile": 0})
    monkeypatch.setattr(cut, "time", types.SimpleNamespace(perf_counter=iter([10.0, 12.0]).__next__))
    row = cut.run_cut(tmp_path, tmp_path, tmp_path / "q.jsonl", {"question": "q", "context": "c"}, 1_000_000, 100)
    assert row["search_gflops_over_wall"] == 2 * 768 * 1_000_000 * 1000 / 2 / 1e9  # 768 GFLOP/s


def _fake_python(tmp_path: Path) -> Path:
    """A $PYTHON for gpu_session.sh: gpu_smoke.py and bench_gpu.py exit with $SMOKE_RC and $BENCH_RC
    after noting their call (and the profiler's and allocator's settings) in $CALLS, the smoke run after
    $SMOKE_SLEEP seconds; the CUDA check answers $CUDA_RC (1: no device), the import check $IMPORT_RC
    (1: no faiss); the machine's description is a line."""
    fake = tmp_path / "python"
    fake.write_text("""#!/usr/bin/env bash
case "${1:-} ${2:-}" in
  scripts/gpu_smoke.py*) echo "smoke $*" >> "$CALLS"; sleep "${SMOKE_SLEEP:-0}"; exit "${SMOKE_RC:-0}" ;;
  scripts/bench_gpu.py*) echo "bench $* TEARDOWN_CUPTI=${TEARDOWN_CUPTI:-} ALLOC=${PYTORCH_CUDA_ALLOC_CONF:-}" >> "$CALLS"
                         exit "${BENCH_RC:-0}" ;;
  *cuda.is_available*) exit "${CUDA_RC:-1}" ;;
  *lewisrag.cli*) [ "${IMPORT_RC:-0}" = 0 ] || echo "ModuleNotFoundError: No module named 'faiss'" >&2; exit "${IMPORT_RC:-0}" ;;
  *) echo "versions of a fake interpreter" ;;
esac
""")
    fake.chmod(0o755)
    return fake


def test_gpu_session_fails_without_a_gpu_or_when_a_part_fails(tmp_path):
    """No CUDA device and no CPU dry run asked for: exit 2 before anything runs (both scripts would
    say so in a line and exit 0); a run whose bench or smoke fails: exit 1."""
    calls = tmp_path / "calls.txt"
    base = {**os.environ, "PYTHON": str(_fake_python(tmp_path)), "CALLS": str(calls)}
    for key in ("BENCH_ARGS", "SMOKE_ARGS"):
        base.pop(key, None)
    script = ["bash", str(ROOT / "scripts" / "gpu_session.sh")]

    def session(name, **extra):
        return subprocess.run(script, capture_output=True, text=True, env={**base, "OUT": str(tmp_path / name), **extra},
                              timeout=120, cwd=ROOT)

    for name, extra in (("gpu", {}), ("bench on the cpu only", {"BENCH_ARGS": "--device cpu"})):
        r = session(name, **extra)
        assert r.returncode == 2 and "no CUDA device" in r.stderr, (name, r.stdout + r.stderr)
        assert not calls.exists() and "fake interpreter" in (tmp_path / name / "machine.txt").read_text()
    dry = {"BENCH_ARGS": "--preset check --device cpu", "SMOKE_ARGS": "--device=cpu"}
    for rcs, want in (({"CUDA_RC": "0"}, 0), ({"BENCH_RC": "1", **dry}, 1), ({"SMOKE_RC": "1", **dry}, 1)):
        r = session("run", **rcs)
        assert r.returncode == want, (rcs, r.stdout + r.stderr)
    assert calls.read_text().count("bench scripts/bench_gpu.py") == 6 and calls.read_text().count("smoke ") == 3


def _fake_nvidia_smi(tmp_path: Path, mib: int) -> str:
    """A PATH whose nvidia-smi says the GPU has `mib` MiB."""
    folder = tmp_path / f"smi-{mib}"
    folder.mkdir()
    smi = folder / "nvidia-smi"
    smi.write_text(f"""#!/usr/bin/env bash
case "$*" in
  *noheader*) echo {mib} ;;
  *) echo "name, memory.total [MiB]"; echo "NVIDIA H100 80GB HBM3, {mib} MiB" ;;
esac
""")
    smi.chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


def test_gpu_session_orders_bounds_and_sizes_its_steps(tmp_path):
    """gpu_session.sh: the same-weights comparison before the compiled mfu modes (in its own step), the
    profile last in the train step, CUPTI torn down and the allocator's segments expandable for both
    bench steps; the mfu batch halved on a GPU under 100 GiB (an H100: 64 questions took an estimated
    75 GiB); a step that hangs stopped by its timeout, the steps after it not run for want of time
    (exit 1); a Python that cannot import faiss refused before the smoke run (exit 2)."""
    calls = tmp_path / "calls.txt"
    base = {**os.environ, "PYTHON": str(_fake_python(tmp_path)), "CALLS": str(calls), "CUDA_RC": "0"}
    for key in ("BENCH_ARGS", "SMOKE_ARGS", "SESSION_S", "MFU_COMPILED", "TEARDOWN_CUPTI", "PYTORCH_CUDA_ALLOC_CONF"):
        base.pop(key, None)

    def session(name, **extra):
        calls.unlink(missing_ok=True)
        r = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_session.sh")], capture_output=True, text=True,
                           env={**base, "OUT": str(tmp_path / name), **extra}, timeout=120, cwd=ROOT)
        return r, calls.read_text().splitlines() if calls.exists() else []

    for mib, scales in ((81559, "2"), (143771, "4")):  # an H100 80GB, an H200
        r, lines = session(f"gpu-{mib}", PATH=_fake_nvidia_smi(tmp_path, mib))
        assert r.returncode == 0, r.stdout + r.stderr
        smoke, train, same = lines
        assert smoke.startswith("smoke ") and train.startswith("bench ") and same.startswith("bench ")
        assert "--parts matmul,train_token,closed_book,mfu,profile " in train and "compiled" not in train
        assert "--mfu-modes eager,eager:flash,bf16weights " in train
        assert "--parts matmul,same_weights,mfu --mfu-modes compiled,compiled:cudagraphs " in same
        assert all(f"--mfu-scales {scales} " in line for line in (train, same))
        assert all(line.endswith("TEARDOWN_CUPTI=1 ALLOC=expandable_segments:True") for line in (train, same))
    r, lines = session("no compiled modes", MFU_COMPILED="")
    assert r.returncode == 0 and "--parts same_weights --json" in lines[-1] and "mfu" not in lines[-1], lines
    r, lines = session("hung smoke", SMOKE_SLEEP="60", SESSION_S="12")
    assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith("smoke "), (lines, r.stdout + r.stderr)
    assert "smoke: stopped after its" in (tmp_path / "hung smoke" / "smoke.log").read_text()
    assert "not run" in (tmp_path / "hung smoke" / "train.log").read_text(), r.stdout
    assert "not run" in (tmp_path / "hung smoke" / "same_weights.log").read_text(), r.stdout
    r, lines = session("no faiss", IMPORT_RC="1")
    assert r.returncode == 2 and lines == [] and "No module named 'faiss'" in r.stderr and ".whl" in r.stderr, r.stderr


def test_gpu_session_compiled_only_runs_step_3s_compiled_modes_alone(tmp_path, monkeypatch):
    """The docs' call of their own for the compiled mfu modes (`bench_gpu.py --parts matmul,mfu --mfu-modes
    compiled,compiled:cudagraphs`) measured B=16 and 32 over the 1M-passage corpus, without --budget or --json,
    and could not import lewisrag from the repository root: COMPILED_ONLY=1 runs them as step 3 does (its
    corpus, repetitions and mfu batch, halved under 100 GiB), within the session, into compiled.json; every
    flag of that call is bench_gpu's."""
    calls = tmp_path / "calls.txt"
    base = {**os.environ, "PYTHON": str(_fake_python(tmp_path)), "CALLS": str(calls), "CUDA_RC": "0",
            "COMPILED_ONLY": "1", "PATH": _fake_nvidia_smi(tmp_path, 81559)}
    for key in ("BENCH_ARGS", "SMOKE_ARGS", "SESSION_S", "MFU_COMPILED", "TEARDOWN_CUPTI", "PYTORCH_CUDA_ALLOC_CONF"):
        base.pop(key, None)
    out = tmp_path / "out"
    r = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_session.sh")], capture_output=True, text=True,
                       env={**base, "OUT": str(out)}, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    (call,) = calls.read_text().splitlines()  # no smoke run, no train step
    assert call.startswith("bench scripts/bench_gpu.py --budget ") and call.endswith(
        f"--passages 20000 --encode 2048 --reps 3 --parts matmul,mfu --mfu-modes compiled,compiled:cudagraphs "
        f"--mfu-scales 2 --json {out}/compiled.json TEARDOWN_CUPTI=1 ALLOC=expandable_segments:True"), call
    flags = call.split()[2:-2]
    assert 400 < float(flags[1]) <= 520, flags  # the session's 560 s less the start and the report

    class Stop(BaseException):  # past the part's `except Exception`: argparse took every flag, the first part starts
        pass

    gpu = _script("bench_gpu")
    monkeypatch.setattr(gpu, "matmul_rate", lambda device: (_ for _ in ()).throw(Stop()))
    monkeypatch.setattr(sys, "argv", ["bench_gpu.py", *flags, "--preset", "check", "--device", "cpu"])
    with pytest.raises(Stop):
        gpu.main()
    r = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_session.sh")], capture_output=True, text=True,
                       env={**base, "OUT": str(tmp_path / "none"), "MFU_COMPILED": ""}, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "nothing to measure" in r.stderr and len(calls.read_text().splitlines()) == 1, r.stderr


def _fake_mfu(monkeypatch, step_for):
    """bench_gpu with mfu_steps' model, batch and FLOP count faked: `step_for(kind, compiled)` gives each
    mode's step; a C compiler taken as present. Returns the module and the calls of same_weights_pair."""
    gpu = _script("bench_gpu")
    pairs = []

    def fake_step(model, batch, q_ids, docs, compiled=False, compile_mode=None, bf16_weights=False):
        return step_for(("compiled:cudagraphs" if compile_mode else "compiled") if compiled else
                        "bf16weights" if bf16_weights else "eager", model)

    def fake_pair(variant, c, device):
        pairs.append(variant)
        return None, object()

    monkeypatch.setattr(gpu, "check_compiler", lambda: None)
    monkeypatch.setattr(gpu, "hf_step", fake_step)
    monkeypatch.setattr(gpu, "same_weights_pair", fake_pair)
    monkeypatch.setattr(gpu, "same_weights_flops", lambda c, p: 1e12)
    monkeypatch.setattr(gpu, "same_weights_batch", lambda c, p, device: ([None] * 4, None, None))
    return gpu, pairs


MFU_ALL = ("eager", "eager:flash", "bf16weights", "compiled", "compiled:cudagraphs")
MFU_P = {"batch": 16, "context": 4, "target": 3, "mfu_compile_s": 100}


def test_bench_gpu_mfu_goes_on_to_the_next_mode_after_running_out_of_memory(monkeypatch):
    """An eager step that runs out of GPU memory at 64 questions (about 75 GiB: past an H100's) is its
    row's error, and the modes that need less (compiled, CUDA graphs) still run at that batch and the
    next; the larger batches are left out only when no mode fit (before: one row, eager's error)."""
    import torch

    def step_for(kind, model):
        def step():
            if not kind.startswith("compiled") or fit_none:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return step

    fit_none = False
    gpu, pairs = _fake_mfu(monkeypatch, step_for)
    rows = gpu.mfu_steps({}, MFU_P, "cpu", 1, None, lambda msg: None, keep=lambda rows: None, modes=MFU_ALL, scales=(4, 8))
    assert [(r["batch"], r["mode"], r.get("error")) for r in rows] == [
        (b, m, "out of memory" if not m.startswith("compiled") else None) for b in (64, 128) for m in MFU_ALL]
    assert all(r["step_s"] >= 0 for r in rows if "error" not in r)
    fit_none = True  # every mode out of memory at 64: 128 is not tried, and its rows say why
    rows = gpu.mfu_steps({}, MFU_P, "cpu", 1, None, lambda msg: None, keep=lambda rows: None, modes=MFU_ALL, scales=(4, 8))
    assert [(r["batch"], r["error"]) for r in rows] == [(64, "out of memory")] * 5 + [
        (128, "not run: no mode fit at 64 questions")] * 5
    assert pairs == ["token"] * 3


def test_bench_gpu_mfu_frees_each_mode_before_the_next(monkeypatch):
    """A compiled model copy is held in a reference cycle (nn.Module.compile), which setting the step to
    None, torch._dynamo.reset() and emptying the allocator's cache leave alive: each mode's copy, and each
    batch's model, is collected before the next is built (with the collector off, as between two of
    its own runs)."""
    import gc
    import weakref

    alive, seen = weakref.WeakSet(), []

    class Cycle:
        def __init__(self):
            self.me = self
            alive.add(self)

    def step_for(kind, model):
        seen.append((kind, len(alive)))
        copy = Cycle()
        return lambda: copy

    gpu, _ = _fake_mfu(monkeypatch, step_for)
    pair = gpu.same_weights_pair

    def cyclic_pair(variant, c, device):
        seen.append(("pair", len(alive)))
        return pair(variant, c, device)[0], Cycle()

    monkeypatch.setattr(gpu, "same_weights_pair", cyclic_pair)
    gc.collect()
    gc.disable()
    try:
        gpu.mfu_steps({}, MFU_P, "cpu", 1, None, lambda msg: None, keep=lambda rows: None,
                      modes=("compiled", "eager", "compiled:cudagraphs"), scales=(1, 2))
    finally:
        gc.enable()
    # the batch's model alive beside each step's copy; nothing of an earlier mode or batch
    assert seen == [("pair", 0), ("compiled", 1), ("eager", 1), ("compiled:cudagraphs", 1)] * 2


def test_bench_gpu_mfu_skips_a_compiled_mode_that_cannot_finish_in_time(monkeypatch):
    """`--budget`'s end reaches into the mfu part: a compiled mode that would not finish before it
    (the preset's `mfu_compile_s`) and any mode past it are rows saying they were skipped for time, not
    started; a batch with every mode skipped builds no model."""
    import time

    built = []
    gpu, pairs = _fake_mfu(monkeypatch, lambda kind, model: (built.append(kind), lambda: None)[1])
    rows = gpu.mfu_steps({}, MFU_P, "cpu", 1, None, lambda msg: None, keep=lambda rows: None, modes=MFU_ALL,
                         scales=(1,), deadline=time.perf_counter() + 50)
    assert built == ["eager", "eager", "bf16weights"] and [r["mode"] for r in rows] == list(MFU_ALL)
    assert all("error" not in r for r in rows[:3])
    assert all(r["error"].startswith("skipped for time: ") and "about 100 s" in r["error"] for r in rows[3:]), rows
    rows = gpu.mfu_steps({}, MFU_P, "cpu", 1, None, lambda msg: None, keep=lambda rows: None, modes=MFU_ALL,
                         scales=(1,), deadline=time.perf_counter() - 1)
    assert [r["error"] for r in rows] == ["skipped for time: past --budget's end"] * 5 and pairs == ["token"]


def test_bench_gpu_profile_reports_the_host_time_outside_operators_apart(monkeypatch, tmp_path):
    """The profiler's `ProfilerStep*` row is the main thread's time outside every recorded operator
    (Python, waits: 181 of the H200's 274 ms a step), not an operator's: it is reported apart, not
    first among the host operators."""
    import time
    from types import SimpleNamespace

    import torch

    gpu = _script("bench_gpu")

    def fake_train_rag(cfg, run, on_progress):
        x = torch.randn(64, 64)
        for step in range(cfg.steps):
            (x @ x).sum()
            time.sleep(0.03)  # outside any operator
            on_progress(step + 1, cfg.steps, {})

    monkeypatch.setattr(gpu, "train_config", lambda variant, steps, c, p, device, search="auto": SimpleNamespace(steps=steps))
    monkeypatch.setattr(gpu, "train_rag", fake_train_rag)
    prof = gpu.profile_steps({}, {}, tmp_path, "cpu", lambda msg: None, active=3)
    names = [name for name, _, _ in prof["top_host_ms_per_step"]]
    assert names and not any(name.startswith("ProfilerStep") for name in names), names
    assert "aten::mm" in names or "aten::matmul" in names
    assert prof["host_outside_operators_ms_per_step"] >= 25, prof


def test_bench_gpu_runs_the_profile_last_and_the_same_weights_before_compiling(tmp_path, monkeypatch):
    """bench_gpu's parts in the order they run: the same-weights comparison before the compiled parts,
    the profile after every other (CUPTI left active slows what follows it: the H200's transformers step
    took 0.163 s before the profile, 0.198 s after); mfu gets --budget's end as its deadline and the
    datasheet rate of the device, which the JSON names (on the CPU: 989 TFLOP/s, assumed)."""
    import time

    gpu = _script("bench_gpu")
    ran, mfu_kw = [], {}

    def fake(name, value=None):
        return lambda *a, **kw: (ran.append(name), value)[1]

    def fake_train(variant, steps, c, p, tmp, device, log, keep=False, search="auto", peak_flops=None):
        ran.append(f"train_{variant}" + ("_faiss" if search == "cpu" else ""))
        return {"run": str(tmp / "run"), "median_step_s": 0.1}

    def fake_mfu(*a, **kw):
        ran.append("mfu")
        mfu_kw.update(kw, now=time.perf_counter())
        return []

    for name, value in (("matmul_rate", 1e12), ("build_corpus", {"rows": []}), ("answer", []), ("same_weights", []),
                        ("compiled_step", []), ("closed_book", {}), ("search_rows", []), ("search_scale", []),
                        ("profile_steps", {})):
        monkeypatch.setattr(gpu, name, fake(name, value))
    monkeypatch.setattr(gpu, "train_pipeline", fake_train)
    monkeypatch.setattr(gpu, "mfu_steps", fake_mfu)
    monkeypatch.setattr(gpu, "report", lambda results, rate: None)
    out = tmp_path / "bench.json"
    monkeypatch.setattr(sys, "argv", ["bench_gpu.py", "--preset", "check", "--device", "cpu", "--budget", "1000",
                                      "--json", str(out)])
    gpu.main()
    assert ran == ["matmul_rate", "build_corpus", "train_token", "answer", "same_weights", "compiled_step", "mfu",
                   "closed_book", "train_token_faiss", "train_sequence", "search_rows", "search_scale", "profile_steps"]
    assert 990 < mfu_kw["deadline"] - mfu_kw["now"] <= 1000 and mfu_kw["peak_flops"] == 989e12
    results = json.loads(out.read_text())
    assert (results["device"], results["datasheet_peak_flops"], results["datasheet_peak_assumed"]) == ("cpu", 989e12, True)


def test_bench_gpu_datasheet_peak_by_device_name():
    """MFU's denominator by the name torch.cuda.get_device_name gives, not the H200's for every GPU."""
    gpu = _script("bench_gpu")
    assert {name: gpu.datasheet_peak(name) for name in (
        "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200", "NVIDIA H200 NVL", "NVIDIA L4")} == {
        "NVIDIA H100 80GB HBM3": (989e12, False), "NVIDIA H100 PCIe": (756e12, False), "NVIDIA H100 NVL": (835e12, False),
        "NVIDIA H200": (989e12, False), "NVIDIA H200 NVL": (836e12, False), "NVIDIA L4": (989e12, True)}


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


SCRIPT_REFUSALS = {  # a flag value each script cannot work with, and what its one-line refusal says
    "bench_eval --seconds": (["bench_eval.py", "--seconds", "0"], "--seconds: must be a positive finite number"),
    "bench_cpu_linear --threads": (["bench_cpu_linear.py", "--threads", "0"], "--threads: must be at least 1"),
    "bench_cpu_linear --repeats": (["bench_cpu_linear.py", "--repeats", "0"], "--repeats: must be at least 1"),
    "bench_index --n": (["bench_index.py", "--n", "0"], "--n: must be at least 1"),
    "bench_index --dim": (["bench_index.py", "--dim", "12"], "--dim: must be a multiple of 8"),
    # FAISS's InputError for the IVF-PQ rows' 256 centroids was a traceback after the encoding and the first rows
    "bench_index --n below 256": (["bench_index.py", "--n", "100"], "--n: must be at least 256"),
    "bench_gpu --device": (["bench_gpu.py", "--preset", "check", "--device", "tpu", "--parts", "matmul"],
                           "argument --device: must be cpu or cuda, got 'tpu'"),
    "gpu_smoke --device": (["gpu_smoke.py", "--device", "tpu", "--presets", "tiny", "--out", "s.json"],
                           "argument --device: must be cpu or cuda, got 'tpu'"),
    "gpu_smoke --out": (["gpu_smoke.py", "--device", "cpu", "--presets", "cut", "--out", "no/s.json"],
                        "--out: no/s.json cannot be written: its folder does not exist"),
    "bench_index --encoder": (["bench_index.py", "--encoder", "no_such_checkpoint"], "no_such_checkpoint"),
    "gpu_smoke --presets": (["gpu_smoke.py", "--device", "cpu", "--presets", "cut,bogus", "--out", "s.json"],
                            "--presets: unknown 'bogus'"),
    "gpu_smoke --steps": (["gpu_smoke.py", "--device", "cpu", "--steps", "0", "--out", "s.json"], "--steps: must be at least 1"),
}


@pytest.mark.parametrize("case", SCRIPT_REFUSALS)
def test_scripts_refuse_bad_flags_in_one_line_before_measuring(tmp_path, case):
    """Tracebacks, exit 1 or numbers printed as inf before: each is refused up front with exit 2 (gpu_smoke's
    unknown preset was found after the presets before it had run)."""
    (script, *args), says = SCRIPT_REFUSALS[case]
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / script), *args], capture_output=True, text=True,
                       cwd=tmp_path, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    assert r.returncode == 2 and says in last and "Traceback" not in r.stderr, (r.returncode, r.stderr[-2000:])
    assert not (tmp_path / "s.json").exists()


def test_bench_gpu_and_gpu_smoke_take_cuda_0_as_the_gpu(tmp_path, monkeypatch, capsys):
    """`--device cuda:0` passed the CUDA check but failed every `== "cuda"`: bench_gpu recorded the device as
    "cpu", MFU against an assumed peak, no matmul rate and no memory; gpu_smoke recorded "cpu" and handed
    `reproduce` a device it refuses. Both now take it as "cuda" (a GPU faked here); another GPU is one line."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "NVIDIA H100 80GB HBM3")

    class Stop(BaseException):  # past the part's `except Exception`: nothing after the first part runs
        pass

    gpu, seen = _script("bench_gpu"), []
    monkeypatch.setattr(gpu, "matmul_rate", lambda device: seen.append(device) or (_ for _ in ()).throw(Stop()))
    out = tmp_path / "bench.json"
    monkeypatch.setattr(sys, "argv", ["bench_gpu.py", "--preset", "check", "--device", "cuda:0", "--parts", "matmul",
                                      "--json", str(out)])
    with pytest.raises(Stop):
        gpu.main()
    results = json.loads(out.read_text())
    assert seen == ["cuda"]
    assert (results["device"], results["datasheet_peak_flops"], results["datasheet_peak_assumed"]) == (
        "NVIDIA H100 80GB HBM3", 989e12, False)

    smoke, runs = _script("gpu_smoke"), []
    monkeypatch.setattr(smoke, "_run", lambda flags, run, device: runs.append((flags, device)) or {"exit_code": 0})
    monkeypatch.setattr(sys, "argv", ["gpu_smoke.py", "--device", "cuda:0", "--presets", "tiny", "--out",
                                      str(tmp_path / "smoke.json")])
    smoke.main()
    (flags, device), = runs
    assert device == "cuda" and flags[flags.index("--device") + 1] == "cuda"  # `reproduce --device` takes no index
    assert json.loads((tmp_path / "smoke.json").read_text())["device"] == "NVIDIA H100 80GB HBM3"
    capsys.readouterr()

    for script, argv in ((gpu, ["bench_gpu.py", "--preset", "check", "--parts", "matmul"]),
                         (smoke, ["gpu_smoke.py", "--presets", "tiny", "--out", str(tmp_path / "smoke.json")])):
        monkeypatch.setattr(sys, "argv", [*argv, "--device", "cuda:1"])
        with pytest.raises(SystemExit) as stop:
            script.main()
        err = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and "choose it with CUDA_VISIBLE_DEVICES and pass cuda" in err.splitlines()[-1], err
    assert len(seen) == 1 and len(runs) == 1  # refused before measuring


def test_bench_gpu_report_says_the_mfu_is_on_the_mean_step(capsys):
    """The training rows print the median step, but MFU is the FLOPs over the mean step: the line says
    so and gives that step (the H200's stored run: median 0.150 s, MFU on the mean 0.216 s)."""
    gpu = _script("bench_gpu")
    stored = json.loads((ROOT / "docs" / "measurements" / "bench_gpu-h200-2026-12-04-train.json").read_text())
    train = stored["parts"]["train_token"]
    results = {**stored, "parts": {"train_token": train}, "datasheet_peak_flops": 989e12, "datasheet_peak_assumed": False}
    gpu.report(results, stored["parts"]["matmul"])
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("train    RAG-token"))
    assert f"{train['median_step_s']:.3f} s/step (median;" in line
    mfu = 100 * train["flops_per_step"] / train["mean_step_s"] / 989e12
    assert f"MFU {mfu:.1f}% of 989 TFLOP/s" in line  # the number itself unchanged
    assert f"of the measured matmul) on the mean step, {train['mean_step_s']:.3f} s," in line, line


def test_bench_gpu_exits_1_when_budget_skipped_a_part(tmp_path):
    """A part, or an mfu mode, skipped for --budget left exit 0: a lent GPU's call looked complete."""
    r, results = _bench_gpu_check(tmp_path, "--parts", "matmul,search_scale", "--budget", "-1")
    assert r.returncode == 1 and results["skipped"] == ["matmul", "search_scale"] and not results["errors"], r.stderr[-2000:]
