"""Checkpoints without pickle: damaged or foreign model directories are InputErrors naming the file,
weights come only from safetensors and must fit the model exactly, and training state round-trips
through safetensors + JSON bit for bit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import run_cli
from lewisrag.data.io import InputError
from lewisrag.data.records import read_passages, read_qa
from test_rag_train import rag_inputs, trained_rag  # noqa: F401  (session fixtures)

GENERATOR = Path(__file__).resolve().parent.parent / "lewisrag" / "pretrained" / "generator-small"
PACKAGE = Path(__file__).resolve().parent.parent / "lewisrag"


# --- tiny model directories ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def dpr_dir(tiny_corpus, tmp_path_factory) -> Path:
    """An untrained DPR checkpoint of a tiny BERT, as `lewisrag train dpr` writes it."""
    from lewisrag.training.dpr import DPRTrainConfig, train_dpr

    out = tmp_path_factory.mktemp("safe") / "dpr"
    cfg = DPRTrainConfig(vocab_size=200, hidden_size=16, layers=1, heads=2, batch_size=8, steps=0)
    train_dpr(cfg, read_qa(tiny_corpus["qa"]), read_passages(tiny_corpus["passages"]), out)
    return out


@pytest.fixture(scope="module")
def rag_dir(tmp_path_factory) -> Path:
    """A tiny lewisrag RAG model directory (rag.json, question_encoder/, generator/)."""
    from lewisrag.rag_model import RagModel
    from lewisrag.rag_model.testing import tiny_hf_rag

    root = tmp_path_factory.mktemp("safe_rag")
    tiny_hf_rag("token", seed=0, n_docs=2).save_pretrained(root / "hf")
    RagModel.from_hf_pretrained(root / "hf").save_pretrained(root / "rag")
    return root / "rag"


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def plain_generator(dst: Path) -> Path:
    """The shipped generator as a plain transformers directory: no recipe.json, so no sha256 check
    stands in front of the loader's own checks."""
    d = copy(GENERATOR, dst)
    (d / "recipe.json").unlink()
    return d


def truncate(f: Path) -> None:
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])


def garbage(f: Path) -> None:
    f.write_bytes(bytes(range(256)) * 20)


def pickle_only(f: Path) -> None:
    f.rename(f.with_name("pytorch_model.bin"))


def corrupt_json(f: Path) -> None:
    f.write_text('{"model_type": "bart", ', encoding="utf-8")


def drop_key(f: Path) -> str:
    """Rewrite the safetensors file without one of its tensors; returns the dropped key."""
    tensors = load_file(str(f))
    key = next(k for k in sorted(tensors) if k.endswith(".bias"))  # not a tied embedding: its twin would stand in
    del tensors[key]
    save_file(tensors, str(f))
    return key


def add_key(f: Path) -> None:
    tensors = load_file(str(f))
    tensors["extra.weight"] = torch.zeros(3)
    save_file(tensors, str(f))


def refused(load, *args, named: Path, match: str | None = None) -> InputError:
    with pytest.raises(InputError, match=match) as e:
        load(*args)
    assert e.value.source == str(named), str(e.value)
    return e.value


# --- generator directories (rag_data.load_generator, pretrain.load_generator) ------------------------


@pytest.mark.parametrize("damage,file,match", [
    (truncate, "model.safetensors", "truncated or damaged"),
    (garbage, "model.safetensors", "truncated or damaged"),
    (pickle_only, "model.safetensors", "only safetensors.*found pytorch_model.bin"),
    (corrupt_json, "config.json", "malformed JSON"),
    (corrupt_json, "generation_config.json", "malformed JSON"),
    (corrupt_json, "tokenizer.json", "malformed JSON"),
    (drop_key, "model.safetensors", "lacks weights"),
    (add_key, "model.safetensors", "does not use.*extra.weight"),
])
def test_damaged_generator_is_an_input_error_naming_the_file(damage, file, match, tmp_path):
    from lewisrag.data.pretrained import load_generator

    d = plain_generator(tmp_path / "gen")
    damage(d / file)
    refused(load_generator, d, named=d / file, match=match)


def test_missing_key_is_named(tmp_path):
    from lewisrag.data.pretrained import load_generator

    d = plain_generator(tmp_path / "gen")
    key = drop_key(d / "model.safetensors")
    assert key in str(refused(load_generator, d, named=d / "model.safetensors"))


def test_config_that_does_not_fit_the_weights(tmp_path):
    from lewisrag.data.pretrained import load_generator

    d = plain_generator(tmp_path / "gen")
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, "vocab_size": config["vocab_size"] + 7}))
    refused(load_generator, d, named=d / "model.safetensors", match="wrong shape")
    (d / "config.json").write_text(json.dumps({**config, "model_type": "no-such-model"}))
    refused(load_generator, d, named=d / "config.json", match="no-such-model")  # told by config.json, before loading


def test_a_config_value_of_the_wrong_type_is_named(tmp_path):
    """transformers' strict configs raise huggingface_hub's StrictDataclassError, a multi-line message:
    one InputError naming config.json and the field, not a traceback."""
    from lewisrag.data.pretrained import load_generator

    d = plain_generator(tmp_path / "gen")
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, "d_model": "wide"}))
    e = refused(load_generator, d, named=d / "config.json", match="d_model")
    assert "\n" not in str(e)


def test_every_loader_refuses_pickled_weights(tmp_path):
    from lewisrag.eval.metrics import load_embedder
    from lewisrag.rag_model.stitched import HFGenerator
    
    from lewisrag.data.pretrained import load_generator

    d = plain_generator(tmp_path / "gen")
    pickle_only(d / "model.safetensors")
    for load in (load_generator, HFGenerator.from_pretrained, load_embedder):
        refused(load, str(d), named=d / "model.safetensors", match="only safetensors")
    with pytest.raises(InputError, match="model.safetensors"):
        load_generator(d, require_recipe=True)


def test_shipped_generator_loads_strictly():
    from lewisrag.training.pretrain import load_shipped_generator

    generator, tokenizer = load_shipped_generator()
    assert generator.config.model_type == "bart" and len(tokenizer) == generator.config.vocab_size


# --- DPR and RAG directories ---------------------------------------------------------------------------


def test_damaged_dpr_checkpoint(dpr_dir, tmp_path):
    from lewisrag.index.encoders import META_FILE, DPRCheckpoint

    assert DPRCheckpoint.load(dpr_dir).dim == 16  # our own checkpoint loads with every key accounted for
    d = copy(dpr_dir, tmp_path / "meta")
    (d / META_FILE).write_text("{not json")
    refused(DPRCheckpoint.load, d, named=d / META_FILE, match="malformed JSON")
    (d / META_FILE).write_text("[]")
    refused(DPRCheckpoint.load, d, named=d / META_FILE, match="ctx_fingerprint")
    d = copy(dpr_dir, tmp_path / "dim")  # a wrong dim failed deep inside an index build, which then kept failing
    meta = json.loads((d / META_FILE).read_text())
    (d / META_FILE).write_text(json.dumps({**meta, "dim": 64}))
    refused(DPRCheckpoint.load, d, named=d / META_FILE, match="says 64-d vectors, but the context encoder gives 16-d")
    d = copy(dpr_dir, tmp_path / "trunc")
    truncate(d / "ctx_encoder" / "model.safetensors")
    refused(DPRCheckpoint.load, d, named=d / "ctx_encoder" / "model.safetensors", match="DPR context encoder")
    d = copy(dpr_dir, tmp_path / "swapped")  # a question encoder where the context encoder belongs
    shutil.rmtree(d / "ctx_encoder")
    shutil.copytree(d / "question_encoder", d / "ctx_encoder")
    refused(DPRCheckpoint.load, d, named=d / "ctx_encoder" / "model.safetensors", match="lacks")
    d = copy(dpr_dir, tmp_path / "notok")
    corrupt_json(d / "tokenizer" / "tokenizer.json")
    refused(DPRCheckpoint.load, d, named=d / "tokenizer" / "tokenizer.json")


def test_damaged_rag_directory(rag_dir, tmp_path):
    from lewisrag.rag_model import RagModel

    assert RagModel.from_pretrained(rag_dir).n_docs == 2
    d = copy(rag_dir, tmp_path / "json")
    (d / "rag.json").write_text("{")
    refused(RagModel.from_pretrained, d, named=d / "rag.json", match="malformed JSON")
    d = copy(rag_dir, tmp_path / "key")
    drop_key(d / "question_encoder" / "model.safetensors")
    refused(RagModel.from_pretrained, d, named=d / "question_encoder" / "model.safetensors", match="question encoder")
    d = copy(rag_dir, tmp_path / "gone")
    shutil.rmtree(d / "generator")
    refused(RagModel.from_pretrained, d, named=d / "generator", match="directory not found")


def test_cli_broken_encoder_is_exit_2_without_output(tiny_corpus, dpr_dir, tmp_path):
    broken = copy(dpr_dir, tmp_path / "broken")
    truncate(broken / "ctx_encoder" / "model.safetensors")
    out = tmp_path / "index"
    r = run_cli("index", "build", "--passages", str(tiny_corpus["passages"]), "--encoder", str(broken), "--out", str(out))
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert "ctx_encoder" in r.stderr and "model.safetensors" in r.stderr
    assert not out.exists() and not list(tmp_path.glob("index*"))


# --- training checkpoints --------------------------------------------------------------------------------


def _tiny_training():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))
    opt = torch.optim.AdamW([{"params": model[0].parameters(), "lr": 1e-2}, {"params": model[2].parameters(), "lr": 1e-3}])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 / (1 + s))
    return model, opt, sched


def _steps(model, opt, sched, n: int) -> list[float]:
    losses = []
    for _ in range(n):
        loss = model(torch.randn(5, 4)).pow(2).mean()  # the batch and the dropout mask draw from torch's RNG
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


def test_training_checkpoint_resumes_bit_for_bit_without_pickle(tmp_path):
    from lewisrag.training.checkpoint import load_checkpoint, save_checkpoint

    model, opt, sched = _tiny_training()
    _steps(model, opt, sched, 3)
    save_checkpoint(tmp_path / "ckpt", model, opt, sched, {"step": 3}, None)
    straight = _steps(model, opt, sched, 4)

    again, opt2, sched2 = _tiny_training()
    torch.manual_seed(123)  # whatever the RNG holds now, the checkpoint's state must win
    assert load_checkpoint(tmp_path / "ckpt", again, opt2, sched2) == {"step": 3}
    assert _steps(again, opt2, sched2, 4) == straight
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    assert sched2.state_dict() == sched.state_dict()
    assert_no_pickle(tmp_path / "ckpt")


def test_each_process_resumes_its_own_random_state(tmp_path):
    """Several processes: the main one writes the checkpoint with every rank's RNG, and each rank
    resumes its own dropout stream (all used to restore rank 0's: masks shared across ranks)."""
    import random

    from lewisrag.training.checkpoint import capture_rng, load_checkpoint, save_checkpoint
    from lewisrag.training.devices import _seed_everything

    model, opt, sched = _tiny_training()
    rngs, next_draws = [], []
    for rank in range(3):
        _seed_everything(7, rank)
        rngs.append(capture_rng())
        next_draws.append((torch.rand(4), np.random.rand(), random.random()))
    assert not torch.equal(next_draws[0][0], next_draws[1][0])  # the ranks draw different masks
    save_checkpoint(tmp_path / "ckpt", model, opt, sched, {"step": 3}, None, rngs=rngs)
    for rank in (2, 0, 1, 5):  # a rank the checkpoint has no state of gets rank 0's
        again, opt2, sched2 = _tiny_training()
        assert load_checkpoint(tmp_path / "ckpt", again, opt2, sched2, rank=rank) == {"step": 3}
        draws = next_draws[rank if rank < 3 else 0]
        assert torch.equal(torch.rand(4), draws[0]) and np.random.rand() == draws[1] and random.random() == draws[2]
    save_checkpoint(tmp_path / "one", model, opt, sched, {"step": 3}, None)  # one process: its own state, as before
    assert "rng_ranks" not in json.loads((tmp_path / "one" / "state.json").read_text())
    assert_no_pickle(tmp_path / "ckpt")


def test_train_rag_checkpoint_holds_no_pickle(trained_rag):  # noqa: F811
    ckpt = trained_rag / "checkpoint"
    assert sorted(p.name for p in ckpt.iterdir()) == ["log.jsonl", "model.safetensors", "state.json", "state.safetensors"]
    assert_no_pickle(ckpt)
    for model in ("best", "final"):
        assert_no_pickle(trained_rag / model)


def assert_no_pickle(d: Path) -> None:
    files = [p for p in d.rglob("*") if p.is_file()]
    assert not [p for p in files if p.name.endswith((".pt", ".pth", ".bin", ".pkl", ".pickle"))], files
    for p in files:
        assert not p.read_bytes().startswith(b"\x80"), p  # pickle protocol 2+ starts with PROTO
        assert not p.read_bytes().startswith(b"PK"), p  # torch.save's zip container


def test_old_format_and_damaged_training_checkpoints(tmp_path):
    from lewisrag.training.checkpoint import load_checkpoint, save_checkpoint

    model, opt, sched = _tiny_training()
    save_checkpoint(tmp_path / "ckpt", model, opt, sched, {"step": 0}, None)
    old = copy(tmp_path / "ckpt", tmp_path / "old")
    (old / "state.safetensors").unlink()
    (old / "state.pt").write_bytes(b"\x80\x04K\x01.")  # pickle.dumps(1): never loaded
    refused(load_checkpoint, old, model, opt, sched, named=old / "state.pt", match="old-format checkpoint")
    bad = copy(tmp_path / "ckpt", tmp_path / "bad")
    truncate(bad / "state.safetensors")
    refused(load_checkpoint, bad, model, opt, sched, named=bad / "state.safetensors")
    bad = copy(tmp_path / "ckpt", tmp_path / "bad_json")
    state = json.loads((bad / "state.json").read_text())
    (bad / "state.json").write_text(json.dumps({k: v for k, v in state.items() if k != "torch_state"}))
    refused(load_checkpoint, bad, model, opt, sched, named=bad / "state.json", match="torch_state")


def test_no_torch_load_in_the_package():
    offenders = [f"{p}:{i}" for p in PACKAGE.rglob("*.py")
                 for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                 if "torch.load" in line or "pickle.load" in line or "allow_pickle=True" in line]
    assert offenders == []


def test_a_bpe_tokenizer_missing_one_of_its_two_files_names_it(tmp_path):
    """transformers' own error ("`vocab` and `merges` must be both be from memory or both filenames")
    names neither file."""
    from transformers import AutoTokenizer

    from lewisrag.data.pretrained import load_tokenizer

    d = tmp_path / "bart"
    d.mkdir()
    (d / "vocab.json").write_text('{"a": 0}')
    refused(load_tokenizer, AutoTokenizer.from_pretrained, d, "generator tokenizer", named=d / "merges.txt",
            match="vocab.json and merges.txt")
