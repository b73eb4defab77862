"""`reproduce --preset base` checks what its model folders' loaders read before any stage runs: the
safetensors weights (not pickle, not truncated) and the tokenizers (present, and for DPR the size of
the encoder's vocabulary); it copies only what loading the generator reads; and its shortened runs
save checkpoints and measure dev EM about ten times. Folders in the hub's layouts (tests/hf_layouts.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from conftest import one_thread, run_main
from hf_layouts import bart, dpr_pair, other_seq2seq
from lewisrag.data.io import InputError
from lewisrag.data.records import read_passages
from lewisrag.experiments.base import BaseAssets, _check_model_folders, _settings
from lewisrag.experiments.presets import get_preset
from lewisrag.experiments.stages import copy_generator
from lewisrag.index.encoders import load_context_encoder, load_question_encoder


@pytest.fixture(scope="module")
def folders(tiny_corpus, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("base_folders")
    texts = [f"{p.title} {p.text}" for p in read_passages(tiny_corpus["passages"])]
    with one_thread():
        return {**dpr_pair(root, texts), "bart": bart(root, texts)}


def _copy(folder: Path, to: Path) -> Path:
    return shutil.copytree(folder, to / folder.name)


def _pickle_only(folder: Path) -> None:
    from safetensors.torch import load_file

    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()


def _truncate(folder: Path) -> None:
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


def _assets(folders: dict, **swap: Path) -> BaseAssets:
    given = {"question_encoder": folders["question"], "context_encoder": folders["context"], "generator": folders["bart"], **swap}
    return BaseAssets(**{k: str(v) for k, v in given.items()})


def _refused(assets: BaseAssets, *needles: str) -> str:
    with pytest.raises(InputError) as e:
        _check_model_folders(assets)
    for needle in needles:
        assert needle in str(e.value), (needle, str(e.value))
    return str(e.value)


@pytest.mark.parametrize("kind", ["t5", "mbart"])
def test_a_generator_rag_does_not_decode_is_refused_first(folders, tmp_path, kind):
    """RAG decodes with BART's decoder only (rag_model.bart_decoder): a T5 or an mBART trained, then failed at
    the first RAG stage's decode, after the index and retrieval stages (`train stitched` still takes them)."""
    folder = other_seq2seq(kind, tmp_path / kind, folders["bart"])
    message = _refused(_assets(folders, generator=folder), f"--generator: model_type is '{kind}': RAG decodes with BART's")
    assert message.startswith(f"{folder / 'config.json'}: field 'model_type': ")


@pytest.mark.parametrize(("key", "damage", "needles"), [
    ("question", _pickle_only, ("model.safetensors: --question-encoder: DPRQuestionEncoder: file not found",
                                "found pytorch_model.bin: convert it to safetensors first")),
    ("context", _truncate, ("model.safetensors: --context-encoder: DPRContextEncoder: not a readable safetensors file",
                            "truncated or damaged")),
    ("bart", _pickle_only, ("model.safetensors: --generator: generator: file not found", "found pytorch_model.bin")),
    ("bart", _truncate, ("model.safetensors: --generator: generator: not a readable safetensors file",)),
    ("bart", lambda f: (f / "merges.txt").unlink(), ("merges.txt: --generator: generator tokenizer: file not found",)),
    ("bart", lambda f: [(f / n).unlink() for n in ("merges.txt", "vocab.json")],
     ("tokenizer.json: --generator: generator tokenizer: file not found, nor a vocabulary",)),
], ids=["question-pickle", "context-truncated", "generator-pickle", "generator-truncated", "no-merges", "no-vocabulary"])
def test_weights_and_tokenizers_the_loaders_read_are_checked_first(folders, tmp_path, key, damage, needles):
    """Each was refused only when its stage loaded it, after the index and retrieval stages had run
    (hours at full size), and a --resume with the folder mended was then refused (its config differs)."""
    _check_model_folders(_assets(folders))  # as the hub lays them out
    folder = _copy(folders[key], tmp_path)
    damage(folder)
    flag = {"question": "question_encoder", "context": "context_encoder", "bart": "generator"}[key]
    _refused(_assets(folders, **{flag: folder}), *needles)


def test_a_damaged_folder_stops_the_run_before_anything_is_written(folders, tiny_corpus, tmp_path, monkeypatch, capsys):
    folder = _copy(folders["question"], tmp_path)
    _pickle_only(folder)
    out = tmp_path / "run"
    qa, passages = tiny_corpus["qa"], tiny_corpus["passages"]
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "base", "--out", out, "--question-encoder", folder,
                            "--context-encoder", folders["context"], "--generator", folders["bart"], "--train", qa,
                            "--dev", qa, "--test", qa, "--passages", passages, "--steps", 2, "--max-passages", 8)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "--question-encoder: DPRQuestionEncoder: file not found" in err and not out.exists()


@pytest.mark.parametrize("side", ["question", "context"])
def test_a_dpr_folder_without_its_vocabulary_is_refused(folders, tmp_path, side):
    """Without vocab.txt and tokenizer.json transformers 5 builds a 5-token BertTokenizer that reads
    every word as [UNK]; training ran on it to the end, exit 0."""
    folder = _copy(folders[side], tmp_path)
    for name in ("vocab.txt", "tokenizer.json"):
        (folder / name).unlink(missing_ok=True)
    load = load_question_encoder if side == "question" else load_context_encoder
    with pytest.raises(InputError, match="vocab.txt: .*'s tokenizer: file not found"):
        load(folder)
    _refused(_assets(folders, **{f"{side}_encoder": folder}), f"vocab.txt: --{side}-encoder: ")


def test_a_dpr_tokenizer_that_does_not_fit_the_encoder_is_refused(folders, tmp_path):
    """A vocabulary under half the embedding's rows is not the encoder's (a stub, another model's); one
    with more tokens than rows gives ids the embedding cannot look up."""
    vocab = (folders["context"] / "vocab.txt").read_text().splitlines()
    for name, lines in (("small", vocab[: len(vocab) // 3]), ("large", vocab + [f"extra{i}" for i in range(5)])):
        folder = _copy(folders["context"], tmp_path / name)
        (folder / "vocab.txt").write_text("".join(f"{line}\n" for line in lines))
        message = f"{len(lines)} tokens, where the encoder's config.json has vocab_size {len(vocab)}"
        with pytest.raises(InputError, match=message):
            load_context_encoder(folder)
        _refused(_assets(folders, context_encoder=folder), "vocab.txt: --context-encoder: ", message)


def test_only_what_loading_the_generator_reads_is_copied(folders, tmp_path):
    """A hub download holds every framework's weights, a README and .cache/: gigabytes per run for bart-large."""
    src = _copy(folders["bart"], tmp_path)
    kept = {f.name for f in src.iterdir()}
    for junk in ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack", "rust_model.ot", "README.md", ".gitattributes"):
        (src / junk).write_bytes(b"x")
    (src / ".cache" / "huggingface").mkdir(parents=True)
    copy_generator(src, tmp_path / "generator")
    assert {f.name for f in (tmp_path / "generator").iterdir()} == kept | {".lewisrag"}

    from transformers import BartForConditionalGeneration

    sharded = tmp_path / "sharded"
    BartForConditionalGeneration.from_pretrained(src).save_pretrained(sharded, max_shard_size="20KB")
    for name in kept - {"model.safetensors", "config.json", "generation_config.json"}:
        shutil.copy(src / name, sharded / name)
    (sharded / "pytorch_model.bin").write_bytes(b"x")
    shards = {f.name for f in sharded.glob("model-*.safetensors")}
    assert len(shards) > 1
    copy_generator(sharded, tmp_path / "generator2")
    copied = {f.name for f in (tmp_path / "generator2").iterdir()}
    assert copied == {f.name for f in sharded.iterdir()} - {"pytorch_model.bin"} | {".lewisrag"}
    assert shards | {"model.safetensors.index.json"} <= copied


def test_a_shortened_run_saves_and_evaluates_about_ten_times():
    """With --steps 2000 (docs/real-data.md) the preset's 2000-step intervals saved only at the last
    step: a killed run could not resume, and dev EM was measured once. The full run keeps the preset's."""
    for steps, every in ((2000, 200), (45, 4), (5, 1), (None, 2000)):
        s = _settings(get_preset("base"), BaseAssets(steps=steps), n_train=1000, n_passages=1000)["rag"]
        assert (s["save_every"], s["eval_every"]) == (every, every), steps
