"""Edges of the real-checkpoint path: a converted DPR pair reads at the folders' token limits, the base
preset refuses a model folder whose config.json disagrees with its weights before any stage, a
partial index build that starts over says what it discards, and an export records its inputs by
absolute path. Folders in the hub's layouts (tests/hf_layouts.py).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForSeq2SeqLM

from conftest import one_thread
from hf_layouts import bart, dpr_pair
from lewisrag.data.io import InputError, LewisragWarning
from lewisrag.data.pretrained import load_generator
from lewisrag.data.records import Passage, read_passages
from lewisrag.experiments.base import BaseAssets, _check_config_fits, _check_model_folders
from lewisrag.experiments.export import export_rag
from lewisrag.index.dense import DenseBuildConfig, DenseIndex, build_dense_index
from lewisrag.index.encoders import load_context_encoder, load_question_encoder
from lewisrag.training.dpr import DPRTrainConfig, train_dpr
from test_rag_train import rag_inputs, trained_rag  # noqa: F401  (session fixtures)


@pytest.fixture(scope="module")
def texts(tiny_corpus) -> list[str]:
    return [f"{p.title} {p.text}" for p in read_passages(tiny_corpus["passages"])]


@pytest.fixture(scope="module")
def folders(texts, tmp_path_factory) -> dict:
    """A DPR pair and a BART as `reproduce --preset base` takes them (hidden 32 / d_model 16, one layer)."""
    root = tmp_path_factory.mktemp("real_folders")
    with one_thread():
        return {**dpr_pair(root, texts), "bart": bart(root, texts)}


def _edit_json(file: Path, **values) -> None:
    file.write_text(json.dumps({**json.loads(file.read_text()), **values}))


def _edit_weights(folder: Path, edit) -> None:
    state = load_file(folder / "model.safetensors")
    save_file(edit(state), folder / "model.safetensors", metadata={"format": "pt"})


# 1. a transformers DPR pair converted with --steps 0 keeps the folders' token limits

def test_a_converted_pair_reads_at_the_folders_limits_and_builds_their_index(tiny_corpus, texts, tmp_path):
    """`train dpr --init-question Q --init-context C --steps 0` recorded 128 passage and 32 question
    tokens where the folders read 512: the same fingerprint as the folders, other vectors for every
    passage past 128 tokens. Each side's limit is its folder's (positions, or the tokenizer's
    model_max_length if smaller), and a checkpoint trained on keeps what it records."""
    with one_thread():
        pair = dpr_pair(tmp_path, texts, layers=2)  # 512 positions, tokenizers of model_max_length 512
        _edit_json(pair["context"] / "tokenizer_config.json", model_max_length=300)  # the passage side's tokenizer cuts first
        meta = train_dpr(DPRTrainConfig(init_question=str(pair["question"]), init_context=str(pair["context"]), steps=0),
                         [], [], tmp_path / "ckpt")
        assert (meta["max_length"], meta["q_max_length"]) == (300, 512)
        assert (meta["config"]["p_max_length"], meta["config"]["q_max_length"]) == (300, 512)
        folder_q, ckpt_q = load_question_encoder(pair["question"]), load_question_encoder(tmp_path / "ckpt")
        assert ckpt_q.meta["q_max_length"] == folder_q.meta["q_max_length"] == 512
        assert load_context_encoder(tmp_path / "ckpt").meta["max_length"] == load_context_encoder(pair["context"]).meta["max_length"]

        long = [Passage(p.id, p.title, " ".join([p.text] * 30)) for p in read_passages(tiny_corpus["passages"])[:6]]
        assert len(folder_q.tokenizer(long[0].text)["input_ids"]) > 300  # cut at 128 and at 300 they differ
        built = {name: build_dense_index(long, source, tmp_path / name)
                 for name, source in (("by_folder", pair["context"]), ("by_ckpt", tmp_path / "ckpt"))}
        assert built["by_ckpt"]["build"] == built["by_folder"]["build"]
        assert built["by_ckpt"]["encoder"]["ctx_fingerprint"] == built["by_folder"]["encoder"]["ctx_fingerprint"]
        np.testing.assert_array_equal(np.asarray(DenseIndex.load(tmp_path / "by_folder").embeddings),
                                      np.asarray(DenseIndex.load(tmp_path / "by_ckpt").embeddings))

        again = train_dpr(DPRTrainConfig(init=str(tmp_path / "ckpt"), steps=0), [], [], tmp_path / "again")
    assert (again["max_length"], again["q_max_length"]) == (300, 512)


# 2. a model folder whose config.json disagrees with its weights is refused before any stage

def _assets(folders: dict, **swap: Path) -> BaseAssets:
    given = {"question_encoder": folders["question"], "context_encoder": folders["context"], "generator": folders["bart"], **swap}
    return BaseAssets(**{k: str(v) for k, v in given.items()})


@pytest.mark.parametrize(("key", "config", "tensor", "says"), [
    ("bart", lambda v: {"d_model": 32}, "model.shared.weight",
     lambda v: f"({v}, 16) in the weights, ({v}, 32) in the BartForConditionalGeneration config.json describes (and "),
    ("bart", lambda v: {"encoder_layers": 2, "decoder_layers": 2}, "model.encoder.layers.1.self_attn.k_proj.weight",
     lambda v: "missing from the weights, where the BartForConditionalGeneration config.json describes has (16, 16) (and 41 more"),
    ("question", lambda v: {"num_hidden_layers": 2}, "question_encoder.bert_model.encoder.layer.1.attention.self.query.weight",
     lambda v: "missing from the weights, where the DPRQuestionEncoder config.json describes has (32, 32)"),
    ("question", lambda v: {"vocab_size": v + 100}, "question_encoder.bert_model.embeddings.word_embeddings.weight",
     lambda v: f"({v}, 32) in the weights, ({v + 100}, 32) in the DPRQuestionEncoder config.json describes:"),
    ("context", lambda v: {"max_position_embeddings": 64}, "ctx_encoder.bert_model.embeddings.position_embeddings.weight",
     lambda v: "(128, 32) in the weights, (64, 32) in the DPRContextEncoder config.json describes:"),
], ids=["generator-d_model", "generator-layers", "question-layers", "question-vocab", "context-positions"])
def test_a_config_that_does_not_fit_its_weights_is_refused_before_any_stage(folders, tmp_path, key, config, tensor, says):
    """Each passed the pre-stage check and failed only when its stage loaded it, after index_a was
    built (hours at scale), and the run's recorded asset fingerprints then held --resume to it."""
    folder = shutil.copytree(folders[key], tmp_path / key)
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    _edit_json(folder / "config.json", **config(vocab))
    flag = {"question": "question_encoder", "context": "context_encoder", "bart": "generator"}[key]
    with pytest.raises(InputError) as e:
        _check_model_folders(_assets(folders, **{flag: folder}))
    message = str(e.value)
    assert message.startswith(f"{folder / 'model.safetensors'}: field '{tensor}': --{flag.replace('_', '-')}: "), message
    assert says(vocab) in message and message.endswith("its config.json does not match its weights"), message
    assert "\n" not in message


def test_a_generator_with_more_layers_in_its_weights_than_its_config_is_refused(texts, tmp_path):
    with one_thread():
        folder = bart(tmp_path, texts, layers=2)
    _edit_json(folder / "config.json", encoder_layers=1)
    with pytest.raises(InputError, match=r"field 'model\.encoder\.layers\.1\..*where the BartForConditionalGeneration "
                                         r"config\.json describes has no such tensor \(and \d+ more tensors\)"):
        _check_config_fits(folder, AutoModelForSeq2SeqLM.from_config, "generator")


def _hub_bart_large(state: dict) -> dict:
    """facebook/bart-large's model.safetensors: the shared embedding once (no embed_tokens, no lm_head), final_logits_bias."""
    return {k: v for k, v in state.items()
            if k not in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight")}


def _bart_model(state: dict) -> dict:
    """A BartModel's weights: no head, no `model.` prefix."""
    return {k.removeprefix("model."): v for k, v in _hub_bart_large(state).items() if k.startswith("model.")}


def _old_dpr(state: dict) -> dict:
    """A DPR folder converted from facebookresearch/DPR by an older transformers: BERT's pooler and the position_ids buffer."""
    prefix = next(iter(state)).split(".bert_model.")[0]
    dim = state[f"{prefix}.bert_model.embeddings.word_embeddings.weight"].shape[1]
    n = state[f"{prefix}.bert_model.embeddings.position_embeddings.weight"].shape[0]
    return {**state, f"{prefix}.bert_model.pooler.dense.weight": torch.zeros(dim, dim),
            f"{prefix}.bert_model.pooler.dense.bias": torch.zeros(dim),
            f"{prefix}.bert_model.embeddings.position_ids": torch.arange(n)[None]}


def _legacy_layer_norm(state: dict) -> dict:
    return {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
            for k, v in state.items()}


@pytest.mark.parametrize(("key", "edit", "architectures"), [
    ("bart", _hub_bart_large, ["BartModel"]),
    ("bart", _bart_model, ["BartModel"]),
    ("context", _old_dpr, None),
    ("question", _old_dpr, None),
    ("question", _legacy_layer_norm, None),
], ids=["bart-large-layout", "bart-model-weights", "context-pooler-position-ids", "question-pooler-position-ids",
        "layer-norm-gamma-beta"])
def test_the_layouts_the_loaders_take_pass_the_check(folders, tmp_path, key, edit, architectures):
    """Tied weights stored once, the keys transformers lets be missing (final_logits_bias) or unused
    (buffers, DPR's BERT pooler), a base model's weights and LayerNorm's old names: each loads, so
    each passes the check made before any stage."""
    folder = shutil.copytree(folders[key], tmp_path / key)
    _edit_weights(folder, edit)
    if architectures:
        _edit_json(folder / "config.json", architectures=architectures)
    flag = {"question": "question_encoder", "context": "context_encoder", "bart": "generator"}[key]
    _check_model_folders(_assets(folders, **{flag: folder}))
    with one_thread():  # what the stages load passes too: the check is no stricter than the loaders
        {"bart": load_generator, "question": load_question_encoder, "context": load_context_encoder}[key](folder)


# 3. a partial build whose plan differs starts over, saying what it discards

def _killed_build(passages, encoder, out: Path, cfg: DenseBuildConfig, shards: int) -> None:
    def kill(stage, done, total):
        if stage == "encode" and done >= shards * cfg.shard_size + 1:
            raise KeyboardInterrupt  # stands in for a kill between shards

    with pytest.raises(KeyboardInterrupt):
        build_dense_index(passages, encoder, out, cfg, kill)
    assert len(list((out.parent / f"{out.name}.partial" / "shards").glob("*.done"))) == shards


def test_a_resumed_build_with_another_plan_warns_of_the_shards_it_discards(tiny_corpus, folders, tmp_path, recwarn):
    """A GPU build in bf16 resumed on the CPU (`reproduce --device cpu --resume`: full precision) or
    with another --shard-size threw every finished shard away in silence. It still starts over (one
    index holds vectors of one precision), and says so on stderr, naming each differing plan field."""
    passages = read_passages(tiny_corpus["passages"])
    with one_thread():
        _killed_build(passages, folders["context"], tmp_path / "idx", DenseBuildConfig(shard_size=16, batch_size=8), 2)
        with pytest.warns(LewisragWarning) as caught:
            build_dense_index(passages, folders["context"], tmp_path / "idx",
                              DenseBuildConfig(shard_size=16, batch_size=8, mixed_precision="bf16"))
        said = [str(w.message) for w in caught if issubclass(w.category, LewisragWarning)]
        assert said == [f"{tmp_path / 'idx.partial'}: the 2 finished shard(s) of an earlier build are discarded and every "
                        "passage is encoded again: its plan differs in mixed_precision (no, now bf16)"]
        assert DenseIndex.load(tmp_path / "idx").manifest["build"]["mixed_precision"] == "bf16"

        _killed_build(passages, folders["context"], tmp_path / "idx2", DenseBuildConfig(shard_size=16, batch_size=8), 1)
        with pytest.warns(LewisragWarning, match=r"the 1 finished shard\(s\) .* its plan differs in shard_size \(16, now 32\)$"):
            build_dense_index(passages, folders["context"], tmp_path / "idx2", DenseBuildConfig(shard_size=32, batch_size=8))

        _killed_build(passages, folders["context"], tmp_path / "idx3", DenseBuildConfig(shard_size=16, batch_size=8), 1)
        recwarn.clear()
        build_dense_index(passages, folders["context"], tmp_path / "idx3", DenseBuildConfig(shard_size=16, batch_size=8))
    assert not [w for w in recwarn if issubclass(w.category, LewisragWarning)]  # the same plan resumes, as before


# 4. lewisrag_export.json names the model and the index by absolute path

def test_the_export_record_names_its_inputs_by_absolute_path(trained_rag, rag_inputs, tmp_path, monkeypatch):  # noqa: F811
    """Given relative --model and --index, lewisrag_export.json recorded them as typed: read from
    another directory, they named nothing (a reproduction's config.json records absolute paths)."""
    monkeypatch.chdir(tmp_path)
    model, index = os.path.relpath(trained_rag, tmp_path), os.path.relpath(rag_inputs["index"], tmp_path)
    with one_thread():
        export_rag(model, index, "exported")
    record = json.loads((tmp_path / "exported" / "lewisrag_export.json").read_text())
    assert record["model"] == str((Path(trained_rag) / "best").resolve())
    assert record["index"] == str(Path(rag_inputs["index"]).resolve())
