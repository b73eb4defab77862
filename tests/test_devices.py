"""Where training and answering run: the closed-book trainer's device and mixed precision, AdamW's
implementation, and the --device flags of reproduce and swap. A GPU is not needed: the CPU path must
stay the plain loop (the demo's numbers), bf16 must really autocast, and a GPU asked for on a
machine without one is a one-line error."""

from __future__ import annotations

import json
import math

import pytest
import torch

from conftest import one_thread, run_main
from lewisrag.data.io import InputError
from lewisrag.data.pretrained import load_generator
from lewisrag.data.records import read_qa
from lewisrag.experiments.reproduce import check_resumed_config
from lewisrag.training import closed_book as CB
from lewisrag.training.pretrain import SHIPPED_DIR
from lewisrag.training.optim import adamw, learning_rate_factor
from lewisrag.training.rag_data import DataPosition, group_units, next_batch, training_pairs

GENERATOR = SHIPPED_DIR / "generator-small"
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without a GPU")


def _config(tiny_corpus, **kw) -> CB.ClosedBookConfig:
    return CB.ClosedBookConfig(generator=str(GENERATOR), train=str(tiny_corpus["qa"]), steps=3, batch_size=4, lr=1e-3, **kw)


def test_closed_book_on_the_cpu_is_the_plain_loop(tiny_corpus, tmp_path):
    """No scaler, torch's default AdamW, the same order of steps: the weights of a loop written out by hand."""
    cfg = _config(tiny_corpus)
    with one_thread():
        CB.train_closed_book(cfg, tmp_path / "run")
        trained, _ = load_generator(tmp_path / "run" / "final")
        model, tokenizer = load_generator(GENERATOR)
        pairs, _ = training_pairs(read_qa(cfg.train))
        units, pos = group_units([ex for ex, _ in pairs]), DataPosition()
        torch.manual_seed(cfg.seed)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: learning_rate_factor(s, cfg.steps, 0))
        model.train()
        for _ in range(cfg.steps):
            ids, pos = next_batch(pos, cfg.seed, len(pairs), cfg.batch_size, units)
            loss, _ = CB._step_loss(model, tokenizer, [pairs[i] for i in ids], cfg)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
    for (name, a), b in zip(model.state_dict().items(), trained.state_dict().values()):
        assert torch.equal(a, b), name
    assert json.loads((tmp_path / "run" / "config.json").read_text())["device"] == "auto"


def test_closed_book_in_bf16_autocasts_its_forward_passes(tiny_corpus, tmp_path, monkeypatch):
    seen = []

    def load(path, *a, **kw):
        model, tok = load_generator(path, *a, **kw)
        model.lm_head.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
        return model, tok

    monkeypatch.setattr(CB, "load_generator", load)
    with one_thread():
        CB.train_closed_book(_config(tiny_corpus, mixed_precision="bf16", device="cpu"), tmp_path / "run")
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert seen == [torch.bfloat16] * 3
    assert len(log) == 3 and all(math.isfinite(r["loss"]) for r in log)
    assert not any("loss_scale" in r for r in log)  # no gradient scaler without fp16
    saved, _ = load_generator(tmp_path / "run" / "final")
    assert all(p.dtype == torch.float32 for p in saved.parameters())  # autocast, not a bf16 model


@pytest.mark.parametrize("kw, message", [
    ({"mixed_precision": "fp16", "device": "cpu"}, "--mixed-precision: fp16 needs a GPU; use bf16 on the CPU"),
    ({"mixed_precision": "fp8"}, "--mixed-precision: must be one of no, bf16, fp16, got 'fp8'"),
    ({"device": "gpu"}, "--device: must be auto, cpu or cuda[:N], got 'gpu'"),
    pytest.param({"device": "cuda"}, "--device: cuda: no GPU is visible to torch", marks=NO_GPU),
])
def test_closed_book_refuses_what_it_cannot_run_before_reading_anything(tiny_corpus, tmp_path, kw, message):
    with pytest.raises(InputError) as e:
        CB.train_closed_book(_config(tiny_corpus, **kw), tmp_path / "run")
    assert str(e.value) == message
    assert not (tmp_path / "run").exists()


def test_adamw_on_the_cpu_is_torchs_default_loop_bit_for_bit():
    """The multi-tensor AdamW on the CPU (not torch's default there, the for-loop one; not the fused
    kernel, which rounds otherwise): the same weights to the last bit, with groups of their own
    learning rates, a schedule, weight decay, and a parameter that has no gradient in some steps.
    The README's exact-match digits rest on this."""
    torch.manual_seed(0)
    shapes = [(64, 32), (32,), (7, 5, 3), (1,)]
    ours = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    loop = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    opts = []
    for params, make in ((ours, adamw), (loop, lambda g, **kw: torch.optim.AdamW(g, **kw))):
        opt = make([{"params": params[:2], "lr": 3e-3}, {"params": params[2:], "lr": 1e-3}], lr=1e-3, weight_decay=0.01)
        opts.append((opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: learning_rate_factor(s, 20, 3))))
    assert opts[0][0].defaults["foreach"] and not opts[0][0].defaults["fused"] and not opts[1][0].defaults["foreach"]
    g = torch.Generator().manual_seed(1)
    for step in range(20):
        grads = [torch.randn(s, generator=g) * 10.0 ** -(step % 4) for s in shapes]
        for params in (ours, loop):
            for i, (p, grad) in enumerate(zip(params, grads)):
                p.grad = None if (i == 3 and step % 3 == 0) else grad.clone()
        for opt, sched in opts:
            opt.step()
            sched.step()
    for a, b in zip(ours, loop):
        assert torch.equal(a, b)


@NO_GPU
def test_answering_on_a_missing_gpu_is_one_line(monkeypatch, capsys, tmp_path):
    with pytest.raises(InputError, match=r"^--device: cuda: no GPU is visible to torch$"):
        load_generator(GENERATOR, device="cuda")
    code, _, err = run_main(monkeypatch, capsys, "swap", "--model", tmp_path / "m", "--index", tmp_path / "i",
                            "--questions", tmp_path / "q.jsonl", "--device", "cuda")
    assert code == 2 and err.strip().splitlines()[-1] == "error: --device: cuda: no GPU is visible to torch"
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", tmp_path / "r", "--device", "cuda")
    assert code == 2 and err.strip().splitlines()[-1] == "error: --device: cuda: no GPU is visible to torch"
    assert not (tmp_path / "r").exists()


def test_a_gpu_index_torch_does_not_see_is_one_line(monkeypatch):
    from lewisrag.data.threads import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device("cuda:0") == "cuda:0" and resolve_device("cuda") == "cuda"
    with pytest.raises(InputError, match=r"^--device: cuda:1: only 1 GPU\(s\) visible to torch$"):
        resolve_device("cuda:1")


def test_reproduce_names_the_gpu_through_cuda_visible_devices(monkeypatch, capsys, tmp_path):
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", tmp_path / "r", "--device", "cuda:1")
    assert code == 2 and "choose it with CUDA_VISIBLE_DEVICES and pass cuda" in err and "Traceback" not in err


def test_a_run_resumes_on_another_device_but_not_with_another_seed(tmp_path):
    saved = {"preset": {"name": "tiny", "device": "cuda"}, "seed": 0, "threads": 1}
    (tmp_path / "config.json").write_text(json.dumps(saved))
    check_resumed_config(tmp_path, {**saved, "preset": {"name": "tiny", "device": "cpu"}}, True, "preset or seed")
    with pytest.raises(InputError, match="was written by another preset or seed"):
        check_resumed_config(tmp_path, {**saved, "seed": 1}, True, "preset or seed")


def test_dpr_trains_in_bf16_on_the_cpu_and_saves_float32(tiny_corpus, tmp_path, monkeypatch):
    from dataclasses import replace

    from lewisrag.data.passages import read_passages
    from lewisrag.index.encoders import DPRCheckpoint
    from lewisrag.training import dpr as D

    seen = []
    real = D.init_encoders

    def init(cfg, texts):
        q, c, tok = real(cfg, texts)
        q.question_encoder.bert_model.encoder.layer[0].intermediate.dense.register_forward_hook(
            lambda m, i, out: seen.append(out.dtype))
        return q, c, tok

    monkeypatch.setattr(D, "init_encoders", init)
    examples, passages = read_qa(tiny_corpus["qa"]), read_passages(tiny_corpus["passages"])
    cfg = D.DPRTrainConfig(vocab_size=300, hidden_size=32, layers=1, heads=2, batch_size=8, steps=4, self_negatives_at=0.5,
                           device="cpu", mixed_precision="bf16")
    with one_thread():
        meta = D.train_dpr(cfg, examples, passages, tmp_path / "dpr")
    assert math.isfinite(meta["final_loss"]) and set(seen) == {torch.bfloat16} and len(seen) > 4  # steps and the mining
    ckpt = DPRCheckpoint.load(tmp_path / "dpr")
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in ckpt.question_encoder.parameters())
    assert meta["config"]["mixed_precision"] == "bf16"
    with pytest.raises(InputError, match=r"^--mixed-precision: fp16 needs a GPU; use bf16 on the CPU$"):
        D.train_dpr(replace(cfg, mixed_precision="fp16"), examples, passages, tmp_path / "dpr16")
    assert not (tmp_path / "dpr16").exists()


def test_train_dpr_flags_fail_before_reading(monkeypatch, capsys, tmp_path):
    args = ("train", "dpr", "--train", tmp_path / "missing.jsonl", "--passages", tmp_path / "p.jsonl", "--out", tmp_path / "d")
    code, _, err = run_main(monkeypatch, capsys, *args, "--mixed-precision", "fp16", "--device", "cpu")
    assert code == 2 and err.strip().splitlines()[-1] == "error: --mixed-precision: fp16 needs a GPU; use bf16 on the CPU"
    code, _, err = run_main(monkeypatch, capsys, *args, "--device", "tpu")
    assert code == 2 and err.strip().splitlines()[-1] == "error: --device: must be auto, cpu or cuda[:N], got 'tpu'"


def test_stitched_and_compare_device_flags_fail_before_reading(monkeypatch, capsys, tmp_path):
    code, _, err = run_main(monkeypatch, capsys, "train", "stitched", "--index", tmp_path / "i", "--generator", tmp_path / "g",
                            "--train", tmp_path / "t.jsonl", "--out", tmp_path / "s", "--mixed-precision", "fp16", "--device", "cpu")
    assert code == 2 and err.strip().splitlines()[-1] == "error: --mixed-precision: fp16 needs a GPU; use bf16 on the CPU"
    assert not (tmp_path / "s").exists()
    code, _, err = run_main(monkeypatch, capsys, "compare", "--run", tmp_path, "--device", "gpu")
    assert code == 2 and err.strip().splitlines()[-1] == "error: --device: must be auto, cpu or cuda[:N], got 'gpu'"
