"""A `train rag --resume` takes the checkpoint's state as training saved it or refuses it in one line:
AdamW keeps the live device's implementation (a GPU run resumed on the CPU stepped with the fused CPU
kernel, which `optim.adamw` avoids), a parameter's AdamW state without a moment, with a moment of another
shape, or gone was a traceback at the first step or moments reset in silence, a checkpoint without its
log.jsonl began the resumed log empty, and a damaged live_index.ctx_fingerprint reached the saved model."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import one_thread
from lewisrag.data.io import InputError
from test_checkpoint_state_checks import _step, _tiny_training, checkpoint  # noqa: F401  (module fixture)
from test_rag_train import make_config, rag_inputs  # noqa: F401  (session fixture)


class Killed(Exception):
    pass


def _edited(source: Path, to: Path, edit_json=None, edit_tensors=None) -> Path:
    shutil.copytree(source, to)
    if edit_json:
        state = json.loads((to / "state.json").read_text())
        edit_json(state)
        (to / "state.json").write_text(json.dumps(state))
    if edit_tensors:
        tensors = load_file(str(to / "state.safetensors"))
        edit_tensors(tensors)
        save_file(tensors, str(to / "state.safetensors"))
    return to


def _groups(state: dict) -> list[dict]:
    return state["torch_state"]["optimizer"]["param_groups"]


def _entries(state: dict) -> list:
    return state["torch_state"]["optimizer"]["state"]["__items__"]  # [[parameter number, its state], ...]


def _as_gpu_wrote_it(state: dict) -> None:
    for group in _groups(state):  # what `optim.adamw` on a GPU saves
        group.update(fused=True, foreach=None)


def _trained_on(model, opt, sched, steps: int = 3) -> list[torch.Tensor]:
    torch.manual_seed(5)
    for _ in range(steps):
        _step(model, opt, sched)
    return [p.detach().clone() for p in model.parameters()]


def test_a_resume_on_another_device_keeps_the_live_optimizers_implementation(checkpoint, tmp_path):
    """A checkpoint a GPU wrote (fused AdamW), resumed on the CPU: foreach AdamW, bit for bit the
    steps a CPU checkpoint resumes to (load_state_dict took the saved fused=True: the fused CPU kernel)."""
    from lewisrag.training.checkpoint import load_checkpoint

    gpu = _edited(checkpoint, tmp_path / "gpu", _as_gpu_wrote_it)
    model, opt, sched = _tiny_training()
    load_checkpoint(gpu, model, opt, sched)
    assert [(g["fused"], g["foreach"]) for g in opt.param_groups] == [(None, True)] * 2
    again = _tiny_training()
    load_checkpoint(checkpoint, *again)
    assert all(torch.equal(a, b) for a, b in zip(_trained_on(model, opt, sched), _trained_on(*again)))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_gpu_run_resumed_on_the_cpu_and_back_keeps_each_devices_adamw(tmp_path):
    """adamw() on a GPU is fused, on the CPU foreach; each keeps its own from the other's checkpoint, and
    the fused one's step counts move to the GPU, where its kernel reads them."""
    from lewisrag.training.checkpoint import load_checkpoint, save_checkpoint

    model = _tiny_training()[0].cuda()
    opt, sched = _tiny_training_on(model)
    _step_on(model, opt, sched, "cuda")
    save_checkpoint(tmp_path / "gpu", model, opt, sched, {"step": 1}, None)
    cpu_model, cpu_opt, cpu_sched = _tiny_training()
    load_checkpoint(tmp_path / "gpu", cpu_model, cpu_opt, cpu_sched)
    assert [(g["fused"], g["foreach"]) for g in cpu_opt.param_groups] == [(None, True)] * 2
    _step_on(cpu_model, cpu_opt, cpu_sched, "cpu")
    save_checkpoint(tmp_path / "cpu", cpu_model, cpu_opt, cpu_sched, {"step": 2}, None)
    gpu_model = _tiny_training()[0].cuda()
    gpu_opt, gpu_sched = _tiny_training_on(gpu_model)
    load_checkpoint(tmp_path / "cpu", gpu_model, gpu_opt, gpu_sched)
    assert [(g["fused"], g["foreach"]) for g in gpu_opt.param_groups] == [(True, None)] * 2
    assert all(s["step"].device.type == "cuda" for s in gpu_opt.state.values())
    _step_on(gpu_model, gpu_opt, gpu_sched, "cuda")


def _tiny_training_on(model):
    """`_tiny_training`'s optimizer and schedule for `model` where it now is."""
    from lewisrag.training.optim import adamw

    opt = adamw([{"params": list(model[0].parameters()), "lr": 1e-2}, {"params": list(model[1].parameters()), "lr": 1e-3}],
                lr=1e-2, weight_decay=0.01)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 / (1 + s))


def _step_on(model, opt, sched, device: str) -> None:
    opt.zero_grad()
    model(torch.randn(5, 4, device=device)).pow(2).mean().backward()
    opt.step()
    sched.step()


def _drop(key: str):
    return lambda s: _entries(s)[0][1].pop(key)


DAMAGED_STATE = [  # (edit of state.json, of state.safetensors, the field named)
    (_drop("exp_avg_sq"), None, "torch_state.optimizer.state.0.exp_avg_sq"),  # a KeyError inside AdamW's step
    (_drop("step"), None, "torch_state.optimizer.state.0.step"),
    (None, lambda t: t.update({"optimizer/state/0/exp_avg": torch.tensor(0.5)}),  # a RuntimeError: shape [] vs [8, 4]
     "torch_state.optimizer.state.0.exp_avg"),
    (None, lambda t: t.update({"optimizer/state/0/step": torch.ones(8, 4)}), "torch_state.optimizer.state.0.step"),
    (lambda s: _entries(s).pop(0), None, "torch_state.optimizer.state.0"),  # its moments reset in silence
    # amsgrad, as the checkpoint's group has it, keeps a third moment, which this state lacks
    (lambda s: _groups(s)[0].update(amsgrad=True), None, "torch_state.optimizer.state.0.max_exp_avg_sq"),
    (lambda s: s["torch_state"].update(stateless_params=[0]), None, "torch_state.stateless_params"),
]


@pytest.mark.parametrize("edit_json,edit_tensors,field", DAMAGED_STATE)
def test_damaged_adamw_state_is_one_line_naming_the_field(checkpoint, tmp_path, edit_json, edit_tensors, field):
    from lewisrag.training.checkpoint import load_checkpoint

    bad = _edited(checkpoint, tmp_path / "bad", edit_json, edit_tensors)
    model, opt, sched = _tiny_training()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(InputError, match=f"field '{re.escape(field)}': .*the checkpoint is damaged$") as e:
        load_checkpoint(bad, model, opt, sched)
    assert e.value.source == str(bad / "state.json") and "\n" not in str(e.value)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # nothing restored


def test_a_parameter_never_given_a_gradient_resumes_without_state(tmp_path):
    """A parameter without gradient (frozen in effect, or unused) has no AdamW state, rightly: the
    checkpoint lists it, and resumes; one that had state and lost it is refused."""
    from lewisrag.training.checkpoint import load_checkpoint, save_checkpoint
    from lewisrag.training.optim import adamw

    def unused_head():
        torch.manual_seed(0)
        model = torch.nn.ModuleList([torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)])  # [1] never in the loss
        opt = adamw(model.parameters(), lr=1e-2, weight_decay=0.01)
        return model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)

    model, opt, sched = unused_head()
    model[0](torch.randn(3, 4)).sum().backward()
    opt.step()
    sched.step()
    save_checkpoint(tmp_path / "ckpt", model, opt, sched, {"step": 1}, None)
    assert json.loads((tmp_path / "ckpt" / "state.json").read_text())["torch_state"]["stateless_params"] == [2, 3]
    again = unused_head()
    load_checkpoint(tmp_path / "ckpt", *again)
    assert len(again[1].state) == 2
    bad = _edited(tmp_path / "ckpt", tmp_path / "bad", lambda s: _entries(s).pop(1))
    with pytest.raises(InputError, match=re.escape("field 'torch_state.optimizer.state.1'")):
        load_checkpoint(bad, *unused_head())


def test_a_checkpoint_from_before_the_stateless_record_resumes(checkpoint, tmp_path):
    """Written before "stateless_params" was: its parameters without state are not checked."""
    from lewisrag.training.checkpoint import load_checkpoint

    old = _edited(checkpoint, tmp_path / "old", lambda s: s["torch_state"].pop("stateless_params", None))
    assert load_checkpoint(old, *_tiny_training())["step"] == 2


# --- train rag --resume -------------------------------------------------------------------------------

E2E = dict(steps=3, eval_every=0, save_every=2, train_context_encoder=True, reindex_every=2, freeze_retriever=True)


@pytest.fixture(scope="module")
def killed(rag_inputs, tmp_path_factory):  # noqa: F811
    """An end-to-end run (the frozen-retriever ablation's question encoder: no AdamW state) stopped at
    step 3, its checkpoint step 2's, whose re-index it holds."""
    from lewisrag.training.rag import train_rag

    cfg = make_config(rag_inputs, **E2E)
    run = tmp_path_factory.mktemp("killed") / "run"

    def stop(step, steps, record):
        if step == 3:
            raise Killed

    with one_thread(), pytest.raises(Killed):
        train_rag(cfg, run, on_progress=stop)
    state = json.loads((run / "checkpoint" / "state.json").read_text())
    assert state["step"] == 2 and state["live_index"]["step"] == 2
    return cfg, run


def _copy(killed, to: Path, edit=None) -> Path:
    shutil.copytree(killed[1], to)
    if edit:
        file = to / "checkpoint" / "state.json"
        state = json.loads(file.read_text())
        edit(state)
        file.write_text(json.dumps(state))
    return to


def _refused(cfg, run: Path, named: Path, match: str) -> None:
    from lewisrag.training.rag import train_rag

    log = (run / "log.jsonl").read_bytes()
    with pytest.raises(InputError, match=match) as e:
        train_rag(cfg, run, resume=True)
    assert e.value.source == str(named) and "\n" not in str(e.value)
    assert not (run / "final").exists() and (run / "log.jsonl").read_bytes() == log


@pytest.mark.parametrize("value", [12345, None, ""])
def test_a_damaged_live_index_fingerprint_is_one_line(killed, tmp_path, value):
    """It became the saved model's index fingerprint (null: one the encoder check of any index accepts)."""
    run = _copy(killed, tmp_path / "run", lambda s: s["live_index"].update(ctx_fingerprint=value))
    _refused(killed[0], run, run / "checkpoint" / "state.json",
             r"field 'live_index\.ctx_fingerprint': expected the fingerprint .*the checkpoint is damaged$")


def test_a_checkpoint_without_its_log_is_refused(killed, tmp_path):
    """The resumed log began empty, steps 1 and 2 lost, exit 0."""
    run = _copy(killed, tmp_path / "run")
    (run / "checkpoint" / "log.jsonl").unlink()
    _refused(killed[0], run, run / "checkpoint" / "log.jsonl", "checkpoint file missing at step 2: the checkpoint is damaged")


@pytest.mark.parametrize("edit,field", [(_drop("exp_avg_sq"), "torch_state.optimizer.state.0.exp_avg_sq"),
                                        (lambda s: _entries(s).pop(0), "torch_state.optimizer.state.0")])
def test_train_rag_refuses_damaged_adamw_state(killed, tmp_path, edit, field):
    run = _copy(killed, tmp_path / "run", edit)
    _refused(killed[0], run, run / "checkpoint" / "state.json", f"field '{re.escape(field)}'")


def test_the_intact_checkpoint_resumes_to_the_end(killed, tmp_path):
    """The control: what training saved passes every check (the frozen question encoder, outside the
    optimizer, and the context encoder's third group included)."""
    from lewisrag.training.rag import train_rag

    run = _copy(killed, tmp_path / "run")
    with one_thread():
        train_rag(killed[0], run, resume=True)
    assert [json.loads(line)["step"] for line in (run / "log.jsonl").read_text().splitlines()] == [1, 2, 3]
    assert (run / "final" / "rag.json").is_file()
