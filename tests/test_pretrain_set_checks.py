"""`lewisrag pretrain --set`: values that crashed or misled later are refused up front or handled: sizes
past any machine's memory, a weight decay that wipes the weights out, lengths shorter than the final
evaluation decodes, and a vocabulary the BPE built smaller than asked."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import run_main
from lewisrag.data.io import InputError
from lewisrag.training import pretrain as P
from lewisrag.training.configs import PretrainConfig, pretrain_preset


@pytest.mark.parametrize("key", ["d_model", "ffn_dim", "encoder_layers", "decoder_layers", "heads", "vocab_size",
                                 "max_source_length", "max_target_length", "qa_batch_size", "denoise_batch_size"])
def test_a_size_past_its_maximum_is_refused_naming_the_key(key):
    """d_model=1073741824 was an allocation of 2.5 TB, a traceback (exit 3)."""
    from lewisrag.commands.pretrain import parse_overrides

    with pytest.raises(InputError, match=f"^--set: {key} must be at most [0-9]+, got 1073741824$"):
        parse_overrides([f"{key}=1073741824"])
    fine = 512 if key == "vocab_size" else 4  # a size a model is built with still is
    assert parse_overrides([f"{key}={fine}"]) == {key: fine}


@pytest.mark.parametrize("sets, message", [
    # decoupled decay multiplies the weights by 1 - lr x weight_decay: training diverged and the error blamed lr
    (["weight_decay=1e40"], "error: --set: weight_decay times lr 0.001 must be below 1 (decoupled decay multiplies the "
                            "weights by 1 - lr x weight_decay), got 1e+40"),
    (["lr=0.5", "weight_decay=2"], "error: --set: weight_decay times lr 0.5 must be below 1"),
])
def test_a_weight_decay_that_wipes_the_weights_out_is_refused_before_training(sets, message, tmp_path, monkeypatch, capsys):
    out = tmp_path / "g"
    flags = [x for kv in sets for x in ("--set", kv)]
    code, _, err = run_main(monkeypatch, capsys, "pretrain", "--preset", "tiny", "--steps", 1, "--device", "cpu", *flags,
                            "--out", out)
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith(message), err
    assert not out.exists()


def test_reading_is_measured_within_the_generators_positions():
    """max_source_length=max_target_length=16 trained, then the final evaluation decoded 24 tokens with 16
    positions: an IndexError once training was done."""
    from lewisrag.data import world
    from lewisrag.training import pretrain_data as D

    w = world.build_world(0, 40)
    tokenizer = D.train_generator_tokenizer([f"{p.title} / {p.text}" for p in w.passages_a], 300)
    torch.manual_seed(0)
    cfg = PretrainConfig(steps=1, d_model=16, heads=2, ffn_dim=32, encoder_layers=1, decoder_layers=1,
                         max_source_length=8, max_target_length=8)
    generator = P.build_generator(cfg, len(tokenizer))
    short = [q for q in w.questions["test"] if q.kind == "short"][:4]
    result = P.evaluate_reading(generator, tokenizer, short, w.passages_a)
    assert result["n"] == 4 and 0 <= result["em"] <= 1


def test_recipe_records_the_vocabulary_built_and_the_one_asked(tmp_path):
    """vocab_size=50000: recipe.json said 50000 for a model of 3262 tokens (the BPE ran out of merges)."""
    recipe = P.pretrain(pretrain_preset("tiny", steps=1, device="cpu", vocab_size=50000), tmp_path / "g")
    built = json.loads((tmp_path / "g" / "config.json").read_text())["vocab_size"]
    generator, tokenizer = P.load_generator(tmp_path / "g")
    assert built == len(tokenizer) == generator.config.vocab_size < 50000
    saved = json.loads((tmp_path / "g" / "recipe.json").read_text())
    assert saved["config"]["vocab_size"] == recipe["config"]["vocab_size"] == built
    assert saved["vocab_size_asked"] == 50000
