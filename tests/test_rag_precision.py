"""`lewisrag train rag` precision, memory and speed options: fp16 with a gradient scaler (steps whose
gradients overflow are skipped and logged, the scale is resumed from the checkpoint), gradient
checkpointing (same loss and gradients as without, activations really recomputed) and `--compile`
(the same steps, compiled).

fp16 is refused off a GPU, so the fp16 tests lift that refusal (`rag._check_precision`) and run the
real loop on the CPU: torch's CPU autocast does run BART and BERT in float16 (checked below), and
the scaler is `torch.amp.GradScaler("cpu")`, built by the same line as on a GPU.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
import torch

from conftest import run_main
from lewisrag.data.io import InputError
from lewisrag.training import devices, rag, rag_run
from test_rag_train import log_lines, make_config, rag_inputs, weights  # noqa: F401  (session fixture)

DEFAULT_SCALE = 65536.0  # torch.amp.GradScaler's initial scale
MICRO_STEP, LOAD_COMPONENTS = rag._micro_step, rag.load_components  # as train_rag calls them, unwrapped


class Interrupted(Exception):
    pass


class Spy:
    """Wraps `rag._micro_step` (grad_accum 1: one call per step): keeps the model, its weights before
    each step and its (scaled) gradients after each backward; `inject_at` puts an inf into a
    gradient in that call."""

    def __init__(self, monkeypatch, inject_at: int | None = None):
        self.calls, self.inject_at, self.model = 0, inject_at, None
        self.before: list[dict[str, torch.Tensor]] = []
        self.grads: list[dict[str, torch.Tensor]] = []
        self.autocast: list[tuple[bool, torch.dtype]] = []
        monkeypatch.setattr(rag, "_micro_step", self._wrap(MICRO_STEP))  # a later Spy replaces this one

    def _wrap(self, micro_step):
        def wrapped(cfg, acc, parts, model, *rest):
            self.calls += 1
            if self.model is None:
                self.model = model
                model.generator.register_forward_pre_hook(
                    lambda *_: self.autocast.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"))))
            self.before.append({k: v.detach().clone() for k, v in model.state_dict().items()})
            result = micro_step(cfg, acc, parts, model, *rest)
            if self.calls == self.inject_at:
                with torch.no_grad():
                    next(p for p in model.generator.parameters() if p.grad is not None).grad.view(-1)[0] = float("inf")
            self.grads.append({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})
            return result

        return wrapped

    def after(self, step: int) -> dict[str, torch.Tensor]:
        """The weights after optimizer step `step` (1-based)."""
        if step < len(self.before):
            return self.before[step]
        return {k: v.detach() for k, v in self.model.state_dict().items()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def norm(tensors) -> float:
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t.float()) for t in tensors])))


def records(out) -> list[dict]:
    return [json.loads(line) for line in log_lines(out)]


@pytest.fixture
def fp16_on_cpu(monkeypatch):
    monkeypatch.setattr(rag, "_check_precision", lambda cfg: None)


def test_fp16_stays_refused_on_the_cpu(rag_inputs, tmp_path):
    with pytest.raises(InputError, match="--mixed-precision.*fp16 needs a GPU"):
        rag.train_rag(make_config(rag_inputs, mixed_precision="fp16", cpu=True), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_fp16_scaler_skips_overflowing_steps_and_updates_the_others(rag_inputs, tmp_path, monkeypatch, fp16_on_cpu):
    """Every step either updates the weights with unscaled gradients, the scale kept, or (inf or NaN
    in a gradient) leaves every weight as it was, is logged as skipped, and halves the scale. Step 5
    gets an injected inf; the first steps of this model also overflow at the initial scale by themselves."""
    clip_norms = []
    clip = torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda *a, **k: clip_norms.append(float(clip(*a, **k))))
    spy = Spy(monkeypatch, inject_at=5)
    steps = 6
    rag.train_rag(make_config(rag_inputs, steps=steps, eval_every=0, save_every=steps, mixed_precision="fp16"),
                  tmp_path / "run")
    assert set(spy.autocast) == {(True, torch.float16)}  # the forward passes really ran in fp16
    log = records(tmp_path / "run")
    assert [r["step"] for r in log] == list(range(1, steps + 1))
    assert log[0]["loss_scale"] == DEFAULT_SCALE and log[4]["skipped_inf"] is True
    assert not all(r["skipped_inf"] for r in log)
    for step, r in enumerate(log, start=1):
        unchanged = same(spy.before[step - 1], spy.after(step))
        assert unchanged == r["skipped_inf"], f"step {step}: skipped_inf {r['skipped_inf']} but weights unchanged {unchanged}"
        next_scale = log[step]["loss_scale"] if step < steps else None
        if next_scale is not None:
            assert next_scale == r["loss_scale"] / (2 if r["skipped_inf"] else 1), f"step {step}"
        if not r["skipped_inf"]:  # the clip saw the gradients divided by the scale again
            scaled = norm(spy.grads[step - 1].values())
            assert scaled / clip_norms[step - 1] == pytest.approx(r["loss_scale"], rel=1e-4), f"step {step}"
    saved = json.loads((tmp_path / "run" / "checkpoint" / "state.json").read_text())["torch_state"]["scaler"]
    assert saved["scale"] == log[-1]["loss_scale"] / (2 if log[-1]["skipped_inf"] else 1)


def test_fp16_resume_restores_the_loss_scale(rag_inputs, tmp_path, monkeypatch, fp16_on_cpu):
    """Killed after step 3 (checkpoint at step 2, whose step overflows), the run resumes to the log and
    weights of an uninterrupted one, which needs the saved scale; an older checkpoint without the
    scaler's state resumes with a fresh scaler."""
    cfg = make_config(rag_inputs, steps=4, eval_every=0, save_every=2, mixed_precision="fp16")
    Spy(monkeypatch, inject_at=2)
    rag.train_rag(cfg, tmp_path / "straight")

    def stop_at_3(step, steps, record):
        if step == 3:
            raise Interrupted

    Spy(monkeypatch, inject_at=2)
    with pytest.raises(Interrupted):
        rag.train_rag(cfg, tmp_path / "killed", on_progress=stop_at_3)
    assert not (tmp_path / "killed" / "final").exists() and len(log_lines(tmp_path / "killed")) == 3
    state_json = tmp_path / "killed" / "checkpoint" / "state.json"
    saved = json.loads(state_json.read_text())
    assert saved["step"] == 2 and saved["torch_state"]["scaler"]["scale"] < DEFAULT_SCALE
    shutil.copytree(tmp_path / "killed", tmp_path / "old")
    del saved["torch_state"]["scaler"]
    (tmp_path / "old" / "checkpoint" / "state.json").write_text(json.dumps(saved))

    Spy(monkeypatch)  # steps 3 and 4: nothing injected
    rag.train_rag(cfg, tmp_path / "killed", resume=True)
    assert log_lines(tmp_path / "killed") == log_lines(tmp_path / "straight")
    assert records(tmp_path / "killed")[2]["loss_scale"] < DEFAULT_SCALE
    a, b = weights(tmp_path / "killed" / "final"), weights(tmp_path / "straight" / "final")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    Spy(monkeypatch)
    rag.train_rag(cfg, tmp_path / "old", resume=True)
    assert records(tmp_path / "old")[2]["loss_scale"] == DEFAULT_SCALE


def _checkpointing(module) -> bool:
    # transformers renamed is_gradient_checkpointing; the old name warns where the new one exists
    if hasattr(module, "is_activation_checkpointing"):
        return module.is_activation_checkpointing
    return module.is_gradient_checkpointing


def _one_step(rag_inputs, out, monkeypatch, **overrides):
    """(spy, loss, calls of a linear layer in BART's first encoder layer and in BERT's first layer) in one step;
    the layers' own hooks run once either way (transformers checkpoints their `forward`), those inside twice."""
    spy = Spy(monkeypatch)
    calls = {"bart": 0, "bert": 0}

    def load(cfg, processes=1, **kwargs):  # hooks on the layers of the model train_rag trains
        parts = LOAD_COMPONENTS(cfg, processes, **kwargs)
        model = parts.model
        layers = {"bart": model.generator.model.encoder.layers[0],
                  "bert": model.question_encoder.question_encoder.bert_model.encoder.layer[0]}
        for name, layer in layers.items():
            linear = next(m for m in layer.modules() if isinstance(m, torch.nn.Linear))
            linear.register_forward_hook(lambda *_, name=name: calls.__setitem__(name, calls[name] + 1))
        return parts

    monkeypatch.setattr(rag, "load_components", load)
    rag.train_rag(make_config(rag_inputs, steps=1, eval_every=0, save_every=1, **overrides), out)
    (record,) = records(out)
    return spy, record["loss"], calls


def test_gradient_checkpointing_gives_the_same_step(rag_inputs, tmp_path, monkeypatch):
    """The fixture's models have no dropout, so one step with and without checkpointing computes the
    same loss and gradients; with it, what runs inside BART's and BERT's layers runs twice (forward,
    then recomputed in the backward pass), and a frozen question encoder is left as it is."""
    plain, loss, calls = _one_step(rag_inputs, tmp_path / "plain", monkeypatch)
    assert calls == {"bart": 1, "bert": 1}
    assert not _checkpointing(plain.model.generator) and not _checkpointing(plain.model.question_encoder)
    ckpt, ckpt_loss, ckpt_calls = _one_step(rag_inputs, tmp_path / "ckpt", monkeypatch, gradient_checkpointing=True)
    assert ckpt_calls == {"bart": 2, "bert": 2}
    assert _checkpointing(ckpt.model.generator) and _checkpointing(ckpt.model.question_encoder)
    assert ckpt_loss == pytest.approx(loss, rel=1e-6)
    (g0,), (g1,) = plain.grads, ckpt.grads
    assert g0.keys() == g1.keys() and any(k.startswith("question_encoder.") for k in g0)
    for k in g0:
        torch.testing.assert_close(g1[k], g0[k], rtol=1e-5, atol=1e-6, msg=lambda m, k=k: f"{k}: {m}")
    a, b = weights(tmp_path / "plain" / "final"), weights(tmp_path / "ckpt" / "final")
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6)

    frozen, _, frozen_calls = _one_step(rag_inputs, tmp_path / "frozen", monkeypatch, gradient_checkpointing=True,
                                        freeze_retriever=True)
    assert frozen_calls == {"bart": 2, "bert": 1}
    assert _checkpointing(frozen.model.generator) and not _checkpointing(frozen.model.question_encoder)


def test_cli_gradient_checkpointing_flag(rag_inputs, tmp_path, monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(rag, "train_rag", lambda cfg, out, **kw: seen.append(cfg) or {"main": False})
    cfg = make_config(rag_inputs)
    flags = ["--index", cfg.index, "--encoder", cfg.encoder, "--generator", cfg.generator, "--train", cfg.train,
             "--dev", cfg.dev, "--out", tmp_path / "out"]
    assert run_main(monkeypatch, capsys, "train", "rag", *flags)[0] == 0
    assert run_main(monkeypatch, capsys, "train", "rag", *flags, "--gradient-checkpointing")[0] == 0
    assert run_main(monkeypatch, capsys, "train", "rag", *flags, "--compile")[0] == 0
    assert [(c.gradient_checkpointing, c.compile) for c in seen] == [(False, False), (True, False), (False, True)]


NO_C_COMPILER = not any(shutil.which(cc) for cc in ("cc", "gcc", "clang"))


@pytest.mark.skipif(NO_C_COMPILER, reason="torch.compile needs a C compiler (cc, gcc or clang) and none is on PATH; "
                                          "the refusal without one is tested below")
def test_compile_gives_the_same_steps(rag_inputs, tmp_path, monkeypatch):
    """`--compile`: the generator and the question encoder train compiled (inductor; the steps'
    different lengths share one graph each): the eager run's losses and first gradients up to float32
    reordering, and saved folders with the same tensor names and shapes. (Not the weights after a step:
    AdamW turns a gradient near zero into a full step whichever its sign, so reordering moves them.)"""
    from torch._inductor.compile_fx import compile_fx

    backends = []  # the module whose graph inductor compiled, once per graph
    module_compile = torch.nn.Module.compile

    def compile_recorded(module, *args, **kwargs):
        def inductor(gm, example_inputs):
            backends.append(type(module).__name__)
            return compile_fx(gm, example_inputs)

        return module_compile(module, *args, backend=inductor, **kwargs)

    cfg = make_config(rag_inputs, steps=2, eval_every=0, save_every=2)
    eager = Spy(monkeypatch)
    rag.train_rag(cfg, tmp_path / "eager")
    monkeypatch.setattr(torch.nn.Module, "compile", compile_recorded)
    compiled = Spy(monkeypatch)
    rag.train_rag(replace(cfg, compile=True), tmp_path / "compiled")
    assert eager.model.generator._compiled_call_impl is None
    # both ran compiled: inductor compiled graphs of each
    assert {"BartForConditionalGeneration", "DPRQuestionEncoder"} <= set(backends), backends
    losses = [r["loss"] for r in records(tmp_path / "compiled")]
    assert len(losses) == 2 and losses == pytest.approx([r["loss"] for r in records(tmp_path / "eager")], rel=1e-5)
    (g0, _), (g1, _) = eager.grads, compiled.grads  # the second step's start from weights AdamW has set apart
    assert g0.keys() == g1.keys() and any(k.startswith("question_encoder.") for k in g0)
    # The question encoder's gradient is K differences prior - posterior of p(z|x), nearly equal
    # numbers for the fixture's random generator: a reordering of float32 sums in either model
    # moves it by a few per cent of itself (1e-6 against 1e-4; its rows and doc scores match to
    # 2e-6), so it is held to a thousandth of the largest gradient, and as a whole to its direction;
    # the generator's, to its own.
    q0, q1 = (torch.cat([g[k].flatten() for k in g if k.startswith("question_encoder.")]) for g in (g0, g1))
    assert torch.nn.functional.cosine_similarity(q0, q1, dim=0) > 0.999  # 0.9999 measured
    scale = max(g.abs().max() for g in g0.values())
    for k in g0:
        tol = {"rtol": 0, "atol": 1e-3 * scale} if k.startswith("question_encoder.") else {"rtol": 1e-4, "atol": 1e-6}
        torch.testing.assert_close(g1[k], g0[k], **tol, msg=lambda m, k=k: f"{k}: {m}")
    a, b = weights(tmp_path / "eager" / "final"), weights(tmp_path / "compiled" / "final")
    assert a.keys() == b.keys() and all(a[k].shape == b[k].shape for k in a)


def test_compile_models_compiles_the_tensor_parts_only():
    """End to end, the context encoder's DPR model is compiled, not PassageEncoder around it, whose
    forward tokenizes strings; nothing runs here, so nothing compiles yet."""
    from types import SimpleNamespace

    from lewisrag.training.end2end import PassageEncoder

    def module():
        return torch.nn.Linear(2, 2)

    model = SimpleNamespace(generator=module(), question_encoder=module(),
                            context_encoder=PassageEncoder(module(), tokenizer=None, max_length=8))
    devices.compile_models(model)
    assert all(m._compiled_call_impl is not None
               for m in (model.generator, model.question_encoder, model.context_encoder.encoder))
    assert model.context_encoder._compiled_call_impl is None


def test_compile_and_the_device_are_not_part_of_what_a_resume_compares(rag_inputs, tmp_path, monkeypatch):
    """`--compile` changes the speed, not the run, and the device where it runs: a killed run resumes
    with or without it, on another device, with its index searched elsewhere (the models are not
    loaded here: the check comes first)."""
    cfg = make_config(rag_inputs, steps=3, eval_every=0, save_every=1)

    def stop_at_2(step, steps, record):  # the checkpoint of step 1 is written
        if step == 2:
            raise Interrupted

    with pytest.raises(Interrupted):
        rag.train_rag(cfg, tmp_path / "run", on_progress=stop_at_2)
    assert rag_run._check_out(tmp_path / "run", replace(cfg, compile=True), resume=True) is not None
    moved = replace(cfg, cpu=not cfg.cpu, search_device="cpu" if cfg.search_device != "cpu" else "auto")
    assert rag_run._check_out(tmp_path / "run", moved, resume=True) is not None
    with pytest.raises(InputError, match="other settings than the run.s: --seed 1 "):
        rag_run._check_out(tmp_path / "run", replace(cfg, compile=True, seed=1), resume=True)


def test_compile_without_a_c_compiler_is_refused_before_loading(rag_inputs, tmp_path, monkeypatch):
    monkeypatch.setattr(devices.shutil, "which", lambda name: None)
    monkeypatch.setattr(rag, "load_components", lambda *a, **kw: pytest.fail("loaded models"))
    with pytest.raises(InputError, match="--compile.*C compiler"):
        rag.train_rag(make_config(rag_inputs, compile=True), tmp_path / "out")
