"""The benchmark scripts' logic at their smallest sizes: bench_gpu's exit status for a failed mfu mode, its
steps and units, the same-weights checks of bench_gpu and bench_rag, bench_eval's timing loops, and
bench_scale's training-process memory (opened as DenseIndex.load opens an index) and `--fit` flags."""

from __future__ import annotations

import copy
import doctest
import importlib.util
import json
import sys
from pathlib import Path

import faiss
import numpy as np
import pytest
import torch

from conftest import one_thread

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str):
    """scripts/NAME.py as a module, once per session (dataclasses look their module up in sys.modules)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def check_corpus(tmp_path_factory) -> dict:
    """bench_gpu's corpus at the check preset's shapes and its smallest size: 16 passages encoded on the CPU."""
    gpu = _script("bench_gpu")
    p = dict(gpu.PRESETS["check"], encode=16, passages=32, questions=8)
    with one_thread():
        return gpu.build_corpus(p, tmp_path_factory.mktemp("bench_gpu"), "cpu", lambda msg: None)


# --- bench_gpu -----------------------------------------------------------------------------------


def test_an_mfu_mode_that_crashes_fails_the_call(check_corpus, tmp_path, monkeypatch, capsys):
    """A mode whose attention backend the device lacks printed its error and exited 0 with errors {}, where a
    mode skipped for time exits 1: it is the JSON's errors["mfu"] and exit 1 now, the eager row still kept."""
    gpu = _script("bench_gpu")
    out = tmp_path / "g.json"
    monkeypatch.setattr(gpu, "build_corpus", lambda *a: check_corpus)
    monkeypatch.setattr(sys, "argv", ["bench_gpu.py", "--preset", "check", "--device", "cpu", "--parts", "mfu", "--reps", "1",
                                      "--mfu-modes", "eager,eager:cudnn", "--mfu-scales", "1", "--json", str(out)])
    with one_thread(), pytest.raises(SystemExit) as stop:
        gpu.main()
    results = json.loads(out.read_text())
    assert stop.value.code == 1
    assert results["errors"]["mfu"].startswith("B=4 eager:cudnn: RuntimeError: ")  # no viable attention backend
    assert [("step_s" in row, row["mode"]) for row in results["parts"]["mfu"]] == [(True, "eager"), (False, "eager:cudnn")]
    assert "ERROR in mfu: B=4 eager:cudnn" in capsys.readouterr().out


def test_mfu_failures_are_what_the_exit_status_reports():
    gpu = _script("bench_gpu")
    oom, late = "out of memory", "skipped for time: past --budget's end"
    assert gpu.mfu_failures([{"batch": 4, "mode": "eager", "step_s": 0.1}, {"batch": 4, "mode": "compiled", "error": oom}]) is None
    assert gpu.mfu_failures([{"batch": 4, "mode": "eager", "error": late}]) is None  # a skip: exit 1, not an error
    assert gpu.mfu_failures([{"batch": 4, "mode": "eager", "error": oom}, {"batch": 4, "mode": "compiled", "error": late},
                             {"batch": 8, "mode": "eager", "error": "not run: no mode fit at 4 questions"}]) == \
        "B=4: no mode measured; B=8: no mode measured"
    assert gpu.mfu_failures([{"mode": "compiled", "error": "InputError: --compile: needs a C compiler"},
                             {"batch": 4, "mode": "eager", "step_s": 0.1}]) == "compiled: InputError: --compile: needs a C compiler"


def test_fewer_than_three_training_steps_are_refused(monkeypatch, capsys):
    """With 1 or 2 steps the median step held loading the models and the index (2.9 s against 0.9 s)."""
    gpu = _script("bench_gpu")
    for flag, value in (("--steps-token", "2"), ("--steps-sequence", "1")):
        monkeypatch.setattr(sys, "argv", ["bench_gpu.py", "--preset", "check", "--device", "cpu", "--parts", "matmul", flag, value])
        with pytest.raises(SystemExit) as stop:
            gpu.main()
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert stop.value.code == 2 and f"{flag}: must be at least 3" in err, err


def test_same_weights_rows_say_whether_the_training_steps_compute_the_same(check_corpus, tmp_path):
    """The train-step rows had an empty note beside the decoding rows' "identical ids": now the first step's
    loss and question-encoder gradient norm, fp32 and eval mode, SAME or DIFFER within bench_rag's tolerance."""
    gpu = _script("bench_gpu")
    with one_thread():
        rows = gpu.same_weights(check_corpus, gpu.PRESETS["check"], tmp_path, "cpu", 1, lambda msg: None)
    steps = [row for row in rows if "train step" in row[1]]
    assert len(steps) == 2 and all(row[-1].startswith("loss and question-encoder gradient norm SAME (") for row in steps)
    assert all(row[-1] == "identical ids" for row in rows if "beam search" in row[1])


def test_the_corpus_row_names_its_precision_and_memory_is_in_gib(check_corpus, capsys):
    """The CPU encodes in fp32 (mixed_precision "no"), which the row called bf16; peaks divide by 2**30."""
    gpu = _script("bench_gpu")
    assert check_corpus["rows"][0][1] == "encode 16 passages (fp32, batch 256)"
    results = {"device": "cpu", "torch": torch.__version__, "preset": "check", "datasheet_peak_flops": 1e15,
               "datasheet_peak_assumed": True, "skipped": [], "errors": {},
               "parts": {"closed_book": {"batch": 8, "median_step_s": 0.1, "questions_per_s_train": 80, "answer_questions_per_s": 9,
                                         "peak_gb": 1.5},
                         "same_weights": [("same weights", "step", 0.2, 0.1, 2.0, 1.0, "")]}}
    gpu.report(results, None)
    out = capsys.readouterr().out
    assert "peak 1.5 GiB" in out and "peak GiB a" in out and " GB" not in out


# --- bench_rag -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_pairs(tmp_path_factory) -> dict:
    """transformers' RAG and lewisrag's RagModel loaded from its folder, per variant, at toy sizes."""
    from lewisrag.rag_model import RagModel
    from lewisrag.rag_model.testing import tiny_hf_rag

    pairs = {}
    for variant in ("token", "sequence"):
        hf = tiny_hf_rag(variant, seed=0, vocab=64, d_model=16, layers=1, heads=2, ffn=32, n_docs=5, init_std=0.05,
                         max_positions=64, eos_bias=2.0)
        folder = tmp_path_factory.mktemp(f"rag_{variant}")
        hf.save_pretrained(folder)
        pairs[variant] = (hf, RagModel.from_hf_pretrained(folder))
    return pairs


def _batch(k: int = 5, vocab: int = 64):  # K: bench_rag's loss heads take its K
    from lewisrag.rag_model.testing import tiny_batch

    g = torch.Generator().manual_seed(1)
    return tiny_batch(2, k, 12, 5, vocab, seed=3), torch.randint(3, vocab, (2, 6), generator=g), torch.randn(2, k, 16, generator=g) * 0.1


def test_bench_rag_steps_and_loss_heads_say_same_and_differ(tiny_pairs):
    """bench_rag's train-step and loss-head rows compared times with no check that both sides computed the
    same: the step's loss and question-encoder gradient, and the loss head's NLL and gradient, now are."""
    rag = _script("bench_rag")
    batch, q_ids, docs = _batch()
    ids, mask, scores, labels = batch
    for variant, (hf, ours) in tiny_pairs.items():
        assert rag.first_step_agreement(hf, ours, batch, q_ids, docs).startswith("loss and question-encoder gradient norm SAME")
        logits = ours(ids, mask, scores, labels=labels).logits.detach()  # (B*K, T, V)
        assert rag.nll_agreement(variant, hf, logits, scores, labels, False).startswith("NLL SAME")
        assert rag.nll_agreement(variant, hf, logits, scores, labels, True).startswith("NLL and its gradient SAME")
        assert not hf.training and not ours.training  # as they came: eval
    hf, ours = tiny_pairs["token"]
    other = copy.deepcopy(ours)  # another generator's output bias: another loss
    with torch.no_grad():
        other.generator.final_logits_bias += torch.randn(other.generator.final_logits_bias.shape)
    assert " DIFFER (" in rag.first_step_agreement(hf, other, batch, q_ids, docs)

    assert doctest.testmod(rag).failed == 0


# --- bench_eval ----------------------------------------------------------------------------------


def test_bench_eval_times_one_pass_at_least():
    """`--seconds 1e-9` ended in ZeroDivisionError: a loop that timed no pass."""
    ev = _script("bench_eval")
    assert ev.checker_throughput(0.0) > 0
    assert 0 < ev.microseconds_per_pair(ev.lcs_rouge_l, [("a b c", ["a c"])], 0.0) < float("inf")


# --- bench_scale ---------------------------------------------------------------------------------


def test_the_training_process_opens_the_index_as_dense_index_load_does(tmp_path):
    """train_rss_mb/train_anon_mb (the fitted columns) opened a Flat index with IO_FLAG_MMAP, which faiss 1.15
    reads into private memory; DenseIndex.load maps it (IO_FLAG_MMAP_IFC first), as the train_* fields do now."""
    scale = _script("bench_scale")
    n, dim = 50_000, 64
    x = np.random.default_rng(0).standard_normal((n, dim)).astype(np.float32)
    index = faiss.IndexFlatIP(dim)
    index.add(x)
    faiss.write_index(index, str(tmp_path / "flat.faiss"))
    np.save(tmp_path / "vectors.npy", x.astype(np.float16))
    np.save(tmp_path / "serve.npy", x[: scale.SERVE_BATCHES * scale.SERVE_BATCH])
    spec = {"index": str(tmp_path / "flat.faiss"), "vectors": str(tmp_path / "vectors.npy"), "serve_queries": str(tmp_path / "serve.npy"),
            "params": {}, "rerank_depth": None, "codes_mb": n * scale.code_bytes("flat", dim) / 2**20}
    loaded, mmap = (scale.run_worker("serve", {**spec, "open": how}) for how in scale.OPENS)
    assert loaded["opened"] == "DenseIndex.load" and loaded["index_mapped"] and loaded["index_anon_mb"] < 1
    assert mmap["opened"] == "IO_FLAG_MMAP|IO_FLAG_READ_ONLY" and not mmap["index_mapped"]  # its 12 MB copied
    assert mmap["index_anon_mb"] > 0.5 * spec["codes_mb"]


def test_fit_reads_an_earlier_rows_memory_as_dense_index_load_opens_the_index(tmp_path, capsys):
    """A row written before: train_* opened with IO_FLAG_MMAP (Flat's whole index private, 639 MB at 200k),
    *_mmap_ifc as DenseIndex.load opens it (54 MB). The fit extrapolated the first to 60.1 GB at 21M."""
    scale = _script("bench_scale")
    row = {**dict.fromkeys(scale.FIT_FIELDS, 1), "kind": "flat", "search_params": {}, "rerank_depth": None}
    old = {k: v for k, v in row.items() if not k.endswith("_mmap")}
    rows = [{**old, "n": n, "train_rss_mb": 2 * anon, "train_anon_mb": anon, "train_rss_mb_mmap_ifc": 2 * anon,
             "train_anon_mb_mmap_ifc": 54, "train_open_mmap_ifc": "IO_FLAG_MMAP_IFC|IO_FLAG_READ_ONLY"}
            for n, anon in ((100_000, 346), (200_000, 639))]
    (tmp_path / "old.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    fitted = scale.read_fit_rows([tmp_path / "old.jsonl"])
    assert [(r["train_anon_mb"], r["train_anon_mb_mmap"]) for r in fitted] == [(54, 346), (54, 639)]
    assert scale.extrapolate(fitted, 21_000_000)["train_anon_mb"] == pytest.approx(54)


def test_fit_refuses_the_flags_that_measure_and_takes_kinds(tmp_path, capsys):
    """`--fit FILE` ignored --index, --questions, --kinds and --quick in silence."""
    scale = _script("bench_scale")
    row = {**dict.fromkeys(scale.FIT_FIELDS, 1.0), "n": 1000, "search_params": {}, "rerank_depth": None}
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({**row, "kind": kind}) + "\n" for kind in ("flat", "hnsw_sq8")))
    fit = ["--fit", str(tmp_path / "rows.jsonl")]
    for flags, says in ((["--quick"], "--quick"), (["--index", "i", "--questions", "q"], "--index, --questions"),
                        (["--sizes", "5", "--json"], "--sizes, --json")):
        with pytest.raises(SystemExit) as stop:
            scale.parse_args(fit + flags)
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert stop.value.code == 2 and err.endswith(f"--fit measures nothing: {says} would be ignored (--kinds picks the rows it fits)")
    scale.main(fit + ["--kinds", "hnsw_sq8"])
    out = capsys.readouterr().out
    assert out.startswith(f"1 synthetic rows of hnsw_sq8 from {tmp_path / 'rows.jsonl'}")
    assert len([line for line in out.splitlines() if line.startswith("| 1,000 |")]) == 1
    assert [line.split(" | ")[0] for line in out.splitlines() if "only: no fit" in line] == ["| hnsw_sq8"]
