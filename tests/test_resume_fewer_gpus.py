"""A resume on another device (`train rag --resume`): a checkpoint saved where more GPUs were visible
restores the RNG states of the GPUs this process sees, not an IndexError; and the top `--seed`
seeds every process of a multi-process run. Without a GPU: torch.cuda's generator table is
simulated with CPU generators (CPU generator states stand for the saved CUDA ones)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from lewisrag.training import checkpoint as C
from lewisrag.training.devices import _seed_everything


def _states(*seeds: int) -> list[torch.Tensor]:
    return [torch.Generator().manual_seed(s).get_state() for s in seeds]


@pytest.fixture(autouse=True)
def _global_rngs_kept():
    """These tests set the global RNGs; the tests after them find them as they were."""
    kept = random.getstate(), np.random.get_state(), torch.get_rng_state()
    yield
    random.setstate(kept[0]), np.random.set_state(kept[1]), torch.set_rng_state(kept[2])


@pytest.fixture
def visible_gpus(monkeypatch):
    """`visible_gpus(n)`: torch.cuda as a process that sees n initialized GPUs; returns their generators."""
    def see(n: int) -> tuple[torch.Generator, ...]:
        generators = tuple(torch.Generator().manual_seed(100 + i) for i in range(n))
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        # initialized (the model is on the GPU already): set_rng_state sets the state at once
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda.random, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "default_generators", generators)
        return generators
    return see


def _parts():
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    return model, optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 1.0)


def test_restore_rng_on_fewer_gpus(visible_gpus):
    """8 GPUs' states, one GPU visible now (CUDA_VISIBLE_DEVICES=0): GPU 0's state, and the CPU RNGs."""
    as_json, tensors = C.capture_rng()
    saved = _states(*range(8))
    tensors = {**tensors, "cuda": saved}
    expected = (random.random(), np.random.random_sample(), torch.rand(1))
    (gpu0,) = visible_gpus(1)
    C.restore_rng(as_json, tensors)
    assert torch.equal(gpu0.get_state(), saved[0])
    assert (random.random(), np.random.random_sample()) == expected[:2] and torch.equal(torch.rand(1), expected[2])


def test_restore_rng_on_more_gpus(visible_gpus):
    """One GPU's state, two visible: GPU 0 restored, GPU 1 keeps its seeding."""
    as_json, tensors = C.capture_rng()
    saved = _states(7)
    gpu0, gpu1 = visible_gpus(2)
    before = gpu1.get_state()
    C.restore_rng(as_json, {**tensors, "cuda": saved})
    assert torch.equal(gpu0.get_state(), saved[0]) and torch.equal(gpu1.get_state(), before)


def test_restore_rng_without_cuda(visible_gpus):
    """A GPU run resumed on the CPU: the CUDA states are not used, the CPU ones are restored."""
    as_json, tensors = C.capture_rng()
    expected = torch.rand(3)
    visible_gpus(0)
    C.restore_rng(as_json, {**tensors, "cuda": _states(1, 2)})
    assert torch.equal(torch.rand(3), expected)


def test_checkpoint_of_two_gpus_loads_on_one(tmp_path, visible_gpus):
    """save_checkpoint where 2 GPUs were visible, load_checkpoint where 1 is: GPU 0's state restored."""
    model, optimizer, scheduler = _parts()
    as_json, tensors = C.capture_rng()
    saved = _states(3, 4)
    C.save_checkpoint(tmp_path / "ckpt", model, optimizer, scheduler, {"step": 0}, None,
                      rngs=[(as_json, {**tensors, "cuda": saved})])
    (gpu0,) = visible_gpus(1)
    model, optimizer, scheduler = _parts()
    state = C.load_checkpoint(tmp_path / "ckpt", model, optimizer, scheduler)
    assert state["step"] == 0 and torch.equal(gpu0.get_state(), saved[0])


def test_top_seed_seeds_every_process():
    """--seed 2**32 - 1 (accepted) with 2 processes: rank 1 seeds numpy with 0, not a ValueError."""
    _seed_everything(2**32 - 1, 1)
    draws = np.random.random_sample(3)
    np.random.seed(0)
    assert np.array_equal(draws, np.random.random_sample(3))


@pytest.mark.parametrize("seed", [0, 42, 2**32 - 1])
def test_rank_0_seeds_as_before(seed):
    """One process (rank 0) seeds python, numpy and torch with `seed` itself, as it always has."""
    _seed_everything(seed)
    draws = (random.random(), np.random.random_sample(), torch.rand(2))
    random.seed(seed), np.random.seed(seed), torch.manual_seed(seed)
    assert (random.random(), np.random.random_sample()) == draws[:2] and torch.equal(torch.rand(2), draws[2])
