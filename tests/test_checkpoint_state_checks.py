"""A training checkpoint's optimizer and scheduler state, damaged in state.json, is one line naming the
field before anything is restored: torch's `load_state_dict` took it as it was, and the resumed run
crashed at its first step (a TypeError of the scheduler, a ValueError inside AdamW), exit 3."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from lewisrag.data.io import InputError
from test_rag_train import make_config, rag_inputs  # noqa: F401  (session fixture)


def _tiny_training():
    """A model, lewisrag's AdamW over two groups and a LambdaLR, as train rag builds them."""
    from lewisrag.training.optim import adamw

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
    opt = adamw([{"params": list(model[0].parameters()), "lr": 1e-2}, {"params": list(model[1].parameters()), "lr": 1e-3}],
                lr=1e-2, weight_decay=0.01)
    return model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 / (1 + s))


def _step(model, opt, sched) -> None:
    opt.zero_grad()
    model(torch.randn(5, 4)).pow(2).mean().backward()
    opt.step()
    sched.step()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A checkpoint after 2 steps of `_tiny_training`, 6 examples into the data."""
    from lewisrag.training.checkpoint import save_checkpoint

    model, opt, sched = _tiny_training()
    for _ in range(2):
        _step(model, opt, sched)
    path = tmp_path_factory.mktemp("ckpt") / "ckpt"
    save_checkpoint(path, model, opt, sched, {"step": 2, "position": {"epoch": 0, "index": 6}}, None)
    return path


def _damaged(checkpoint: Path, to: Path, edit) -> Path:
    shutil.copytree(checkpoint, to)
    state = json.loads((to / "state.json").read_text())
    edit(state)
    (to / "state.json").write_text(json.dumps(state))
    return to


def _sched(s: dict) -> dict:
    return s["torch_state"]["scheduler"]


def _group(i: int):
    return lambda s: s["torch_state"]["optimizer"]["param_groups"][i]


def _moments(s: dict) -> list:
    return s["torch_state"]["optimizer"]["state"]["__items__"]


DAMAGE = [  # (edit of state.json, the field named)
    (lambda s: _sched(s).update(last_epoch="x"), "torch_state.scheduler.last_epoch"),  # a TypeError in sched.step()
    (lambda s: _sched(s).update(last_epoch=10**6), "torch_state.scheduler.last_epoch"),  # past the training step
    (lambda s: _sched(s).pop("last_epoch"), "torch_state.scheduler.last_epoch"),  # the schedule began again
    (lambda s: _sched(s).update(_step_count=2.5), "torch_state.scheduler._step_count"),
    (lambda s: _sched(s).update(base_lrs=[0.01]), "torch_state.scheduler.base_lrs"),  # one rate for two groups
    (lambda s: _sched(s).update(_last_lr=[0.01, "x"]), "torch_state.scheduler._last_lr[1]"),
    (lambda s: _group(0)(s).update(lr="x"), "torch_state.optimizer.param_groups[0].lr"),  # a ValueError inside AdamW
    (lambda s: _group(1)(s).update(betas={"__tuple__": [5]}), "torch_state.optimizer.param_groups[1].betas"),
    (lambda s: _group(1)(s).update(betas={"__tuple__": [0.9, 1.5]}), "torch_state.optimizer.param_groups[1].betas"),
    (lambda s: _group(0)(s).update(eps=-1e-8), "torch_state.optimizer.param_groups[0].eps"),
    (lambda s: _group(1)(s).update(weight_decay=None), "torch_state.optimizer.param_groups[1].weight_decay"),
    (lambda s: _group(0)(s).update(foreach="yes"), "torch_state.optimizer.param_groups[0].foreach"),
    (lambda s: _group(1)(s).update(params=[0, 1]), "torch_state.optimizer.param_groups"),  # group 0's moments
    (lambda s: _group(1)(s).update(params=[2, "x"]), "torch_state.optimizer.param_groups[1].params"),
    (lambda s: _moments(s)[0].__setitem__(0, 9), "torch_state.optimizer.state.9"),
    # another parameter's moment: a shape AdamW's first step could not add
    (lambda s: _moments(s)[0][1].update(exp_avg={"__tensor__": "optimizer/state/1/exp_avg"}),
     "torch_state.optimizer.state.0.exp_avg"),
]


@pytest.mark.parametrize("edit,field", DAMAGE)
def test_damaged_optimizer_or_scheduler_state_is_one_line_naming_the_field(checkpoint, tmp_path, edit, field):
    from lewisrag.training.checkpoint import load_checkpoint

    bad = _damaged(checkpoint, tmp_path / "bad", edit)
    model, opt, sched = _tiny_training()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(InputError, match=f"field '{re.escape(field)}': (expected .*; |missing: )the checkpoint is damaged$") as e:
        load_checkpoint(bad, model, opt, sched)
    assert e.value.source == str(bad / "state.json") and "\n" not in str(e.value)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # nothing restored


def test_an_intact_state_loads_and_trains_on(checkpoint):
    """The control: the checks pass what training saved, and training goes on from it."""
    from lewisrag.training.checkpoint import load_checkpoint

    model, opt, sched = _tiny_training()
    assert load_checkpoint(checkpoint, model, opt, sched, examples=6)["step"] == 2
    assert sched.last_epoch == 2
    _step(model, opt, sched)


def test_a_data_position_past_the_data_is_refused(checkpoint, tmp_path):
    """position.index 10**9 of 6 examples began a new epoch in silence (`rag_data.next_batch`)."""
    from lewisrag.training.checkpoint import load_checkpoint

    bad = _damaged(checkpoint, tmp_path / "bad", lambda s: s["position"].update(index=10**9))
    with pytest.raises(InputError, match=re.escape("field 'position.index': expected a whole number from 0 to 6, the "
                                                   "training examples, got 1000000000; the checkpoint is damaged")):
        load_checkpoint(bad, *_tiny_training(), examples=6)


@pytest.fixture(scope="module")
def half_run(rag_inputs, tmp_path_factory):  # noqa: F811
    """A two-step train rag run stopped after its step-1 checkpoint (`--save-every 1`)."""
    from lewisrag.training.rag import train_rag

    cfg = make_config(rag_inputs, steps=2, eval_every=0, save_every=1)
    run = tmp_path_factory.mktemp("half") / "run"

    def stop(step, steps, record):
        if step == 2:  # before step 2's checkpoint: the run resumes from step 1's
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_rag(cfg, run, on_progress=stop)
    assert json.loads((run / "checkpoint" / "state.json").read_text())["step"] == 1
    return cfg, run


# the reviewer's three, and a data position past the data (train rag passes its number of examples)
@pytest.mark.parametrize("edit,field", [DAMAGE[0], DAMAGE[6], DAMAGE[7],
                                        (lambda s: s["position"].update(index=10**9), "position.index")])
def test_train_rag_resume_from_a_damaged_state_is_one_line(half_run, tmp_path, edit, field):
    from lewisrag.training.rag import train_rag

    cfg, saved = half_run
    run = tmp_path / "run"
    shutil.copytree(saved, run)
    state = run / "checkpoint" / "state.json"
    _damaged(saved / "checkpoint", tmp_path / "edited", edit)
    shutil.copyfile(tmp_path / "edited" / "state.json", state)
    with pytest.raises(InputError, match=f"field '{re.escape(field)}'") as e:
        train_rag(cfg, run, resume=True)
    assert e.value.source == str(state)
    assert not (run / "final").exists()
