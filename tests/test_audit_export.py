"""An audit of `lewisrag export` and of reading its folder back, from the user's side: each test is a
mistake or edge case that once cost disk and time, lost a user's files, answered otherwise than the
model exported, or ended in a traceback."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import run_main
from lewisrag.data.io import InputError
from test_export import BART_LARGE, QUESTIONS, _noisy
from test_rag_train import rag_inputs, trained_rag  # noqa: F401  (session fixtures)

RECORD = "lewisrag_export.json"  # what `lewisrag export` writes beside transformers' layout
FOREIGN = "f" * 16  # the context-encoder fingerprint of an index no model here was trained with


@pytest.fixture(scope="module")
def exported(trained_rag, rag_inputs, tmp_path_factory):  # noqa: F811
    """The trained RAG-Token model exported with its own index (read, never changed, by the tests)."""
    from lewisrag.experiments.export import export_rag

    out = tmp_path_factory.mktemp("audit_export") / "export"
    export_rag(trained_rag, rag_inputs["index"], out)
    return out


def _copy(folder: Path, tmp_path: Path, edit=None) -> Path:
    """A copy of `folder`, which `edit(copy)` changes when given."""
    copy = tmp_path / f"copy_{len(list(tmp_path.iterdir()))}"
    shutil.copytree(folder, copy)
    if edit is not None:
        edit(copy)
    return copy


def _json(name: str, change):
    """An edit (for `_copy`) of the JSON file `name`: `change(data)` changes it in place or returns a new one."""
    def edit(folder: Path):
        data = json.loads((folder / name).read_text())
        (folder / name).write_text(json.dumps(change(data) or data))
    return edit


def _foreign_index(rag_inputs, tmp_path):  # noqa: F811
    """The fixture's index under another context encoder's fingerprint."""
    return _copy(rag_inputs["index"], tmp_path, _json("manifest.json", lambda m: m["encoder"].update(ctx_fingerprint=FOREIGN)))


def _bytes_written() -> int:
    """What this process has written so far, to files and pipes alike (Linux's /proc/self/io)."""
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["wchar"])


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _rows(passages_dir: Path) -> list[dict]:
    from datasets import load_from_disk

    return load_from_disk(str(passages_dir)).to_list()


def _index_rows(index) -> list[dict]:
    vectors = np.asarray(index.embeddings, dtype=np.float32)
    return [{"id": p.id, "title": p.title, "text": p.text, "embeddings": v.tolist()} for p, v in zip(index.passages, vectors)]


# --- the passages, written once -----------------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/self/io").is_file(), reason="counts written bytes through Linux's /proc/self/io")
def test_export_writes_the_passages_once(exported, trained_rag, rag_inputs, tmp_path):  # noqa: F811
    """The passages went through `Dataset.from_generator`, which wrote them all to a `datasets` cache,
    then `save_to_disk`, which wrote them again: twice the writing and, until the cache was removed,
    twice the disk, for one copy in the folder. (At 5,000 passages of 768-d: 48.8 MB written for a
    32.1 MB folder in 0.8-1.1 s; now 32.1 MB in 0.1-0.2 s.)"""
    from lewisrag.experiments.export import export_rag
    from lewisrag.index.dense import DenseIndex

    # the folder holds the index's passages and stored vectors, row for row
    assert _rows(exported / "passages") == _index_rows(DenseIndex.load(rag_inputs["index"]))
    before = _bytes_written()  # the module fixture's export has imported what an export needs
    export_rag(trained_rag, rag_inputs["index"], tmp_path / "again")
    extra = _bytes_written() - before - _size(tmp_path / "again")
    assert extra < _size(tmp_path / "again" / "passages") / 2, extra  # a config rewritten, a marker: not the passages


def test_passages_in_several_shards_and_from_a_float16_index(rag_inputs, tmp_path, monkeypatch):  # noqa: F811
    """Shards of at most SHARD_BYTES, named as save_to_disk names them, in row order; a float16 index's
    vectors as the float32 numbers lewisrag scores with; passages held as a list (an index of the first
    format) as those of an Arrow store."""
    from lewisrag.data.records import read_passages
    from lewisrag.experiments import export
    from lewisrag.index.dense import DenseBuildConfig, DenseIndex, build_dense_index

    half = tmp_path / "half"
    build_dense_index(read_passages(rag_inputs["world"] / "passages_a.jsonl")[:20], rag_inputs["dpr"], half,
                      DenseBuildConfig(vector_dtype="float16"))
    index = DenseIndex.load(half)
    assert index.embeddings.dtype == np.float16
    monkeypatch.setattr(export, "SHARD_BYTES", 1)  # every batch a shard of its own
    export.write_passages(index, tmp_path / "sharded", batch_rows=8)
    assert sorted(os.listdir(tmp_path / "sharded")) == [f"data-0000{i}-of-00003.arrow" for i in range(3)] + [
        "dataset_info.json", "state.json"]
    assert _rows(tmp_path / "sharded") == _index_rows(index)
    index.passages = list(index.passages)
    export.write_passages(index, tmp_path / "listed")
    assert _rows(tmp_path / "listed") == _index_rows(index)


# --- where it writes ----------------------------------------------------------------------------


def test_export_rag_never_replaces_a_users_folder(trained_rag, rag_inputs, tmp_path):  # noqa: F811
    """`lewisrag export` checked --out, but `export_rag` itself did not: called from Python into a
    folder holding the user's files, it replaced the folder, and they were gone."""
    from lewisrag.experiments.export import export_rag

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(InputError, match="lewisrag did not write"):
        export_rag(trained_rag, rag_inputs["index"], mine)
    assert (mine / "notes.txt").read_text() == "keep me" and os.listdir(mine) == ["notes.txt"]


def test_an_interrupted_export_leaves_the_earlier_one(exported, trained_rag, rag_inputs, tmp_path, monkeypatch):  # noqa: F811
    """Stopped halfway (Ctrl-C while the FAISS index is written), a re-export leaves the earlier folder as
    it was and nothing of its own beside it."""
    from lewisrag.experiments import export

    out = _copy(exported, tmp_path)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(export.faiss, "write_index", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export.export_rag(trained_rag, rag_inputs["index"], out)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(os.listdir(tmp_path)) == [out.name]


# --- read back: the pairing -----------------------------------------------------------------------


def test_an_export_read_back_knows_its_pairing(exported, trained_rag):  # noqa: F811
    """Only `ask.load_model` read lewisrag_export.json: `RagModel.from_hf_pretrained` and `load_trained`
    (`reproduce`, `compare`, a re-export) gave a model that names no context encoder, so any index of
    its width was searched, or re-exported, without a word."""
    from lewisrag.rag_model import RagModel
    from lewisrag.training.checkpoint import load_trained

    own = load_trained(trained_rag)[0].settings.index_fingerprint
    assert own is not None
    assert RagModel.from_hf_pretrained(exported).settings.index_fingerprint == own
    assert load_trained(exported)[0].settings.index_fingerprint == own


def test_a_swapped_export_keeps_the_models_own_pairing(exported, trained_rag, rag_inputs, tmp_path):  # noqa: F811
    """`export --swap` with an index of another context encoder recorded that index's fingerprint as
    the pairing: read back, the model refused its own index and searched the other without --swap.
    A model that names no context encoder came back paired with the index it was exported with."""
    from lewisrag.experiments.ask import ask
    from lewisrag.training.checkpoint import load_trained
    from lewisrag.experiments.export import export_rag
    from lewisrag.index.dense import DenseIndex

    foreign = _foreign_index(rag_inputs, tmp_path)
    export_rag(trained_rag, foreign, tmp_path / "swapped", swap=True)
    record = json.loads((tmp_path / "swapped" / RECORD).read_text())
    assert record["index_fingerprint"] == FOREIGN
    model, tokenizers = load_trained(tmp_path / "swapped")  # as `lewisrag ask` and `swap` load it
    assert ask(model, tokenizers, DenseIndex.load(rag_inputs["index"]), QUESTIONS[0]).passages
    with pytest.raises(InputError, match="--swap"):
        ask(model, tokenizers, DenseIndex.load(foreign), QUESTIONS[0])
    # a transformers RAG folder from elsewhere names none, and still names none once exported
    plain = _copy(exported, tmp_path)
    (plain / RECORD).unlink()
    export_rag(plain, foreign, tmp_path / "unpaired", swap=True)
    assert load_trained(tmp_path / "unpaired")[0].settings.index_fingerprint is None


# --- read back: the answers ------------------------------------------------------------------------


def test_an_export_read_back_answers_as_the_model_exported(rag_inputs, trained_rag, tmp_path):  # noqa: F811
    """`lewisrag ask --model EXPORT` of a RAG-Sequence model answered otherwise than `ask --model MODEL`:
    transformers' saved RAG-Sequence folder drops its generator's generation settings (bart-large's
    no_repeat_ngram_size and forced_bos_token_id), which lewisrag_export.json records. A RAG-Token
    export came back without its beam-only settings (early_stopping) for `ask --num-beams N`."""
    from lewisrag.experiments.ask import ask
    from lewisrag.experiments.export import export_rag
    from lewisrag.index.dense import DenseIndex
    from lewisrag.training.checkpoint import load_trained

    index = DenseIndex.load(rag_inputs["index"])
    model_dir = _noisy(trained_rag, tmp_path / "sequence", seed=2, variant="sequence", **BART_LARGE)
    export_rag(model_dir, rag_inputs["index"], tmp_path / "hf_sequence")
    model, tokenizers = load_trained(model_dir)
    back, back_tokenizers = load_trained(tmp_path / "hf_sequence")
    for beams in (1, 4):
        with torch.no_grad():
            ours = [ask(model, tokenizers, index, q, num_beams=beams, max_length=12).answer for q in QUESTIONS]
            theirs = [ask(back, back_tokenizers, index, q, num_beams=beams, max_length=12).answer for q in QUESTIONS]
        assert theirs == ours, beams
    token_dir = _noisy(trained_rag, tmp_path / "token", seed=2, **BART_LARGE)
    export_rag(token_dir, rag_inputs["index"], tmp_path / "hf_token")
    assert load_trained(tmp_path / "hf_token")[0].generation_config.early_stopping is True


# --- read back: damaged files ----------------------------------------------------------------------


def _config(change):
    return _json("config.json", change)


def _record(**values):
    return _json(RECORD, lambda d: d.update(values))


DAMAGED = {  # the file, its change, the field named, words of the message
    "n_docs 0": ("config.json", _config(lambda d: d.update(n_docs=0)), "n_docs", "out of range"),
    "max_combined_length 0": ("config.json", _config(lambda d: d.update(max_combined_length=0)), "max_combined_length",
                              "out of range"),
    "label_smoothing 1.5": ("config.json", _config(lambda d: d.update(label_smoothing=1.5)), "label_smoothing", "out of range"),
    "a numeric prefix": ("config.json", _config(lambda d: d["generator"].update(prefix=5)), "generator.prefix",
                         "expected a string, got 5"),
    "a record that is a list": (RECORD, _json(RECORD, lambda d: [d]), "(top level)", "expected a JSON object"),
    "a newer record": (RECORD, _record(format="lewisrag-export/2"), "format", "lewisrag-export/1"),
    "a numeric pairing": (RECORD, _record(paired_fingerprint=5), "paired_fingerprint", "got 5"),
    "settings not an object": (RECORD, _record(generate_kwargs=[1]), "generate_kwargs", "expected an object"),
    "an unknown setting": (RECORD, _record(generate_kwargs={"beams": 2}), "generate_kwargs.beams",
                           "not a generation setting"),
    "a bad setting": (RECORD, _record(beam_kwargs={"early_stopping": "soon"}), "early_stopping", "expected true, false"),
    # the message named lewisrag's own folder name alone, which an export does not have
    "no question tokenizer": ("", lambda d: shutil.rmtree(d / "question_encoder_tokenizer"), "question_tokenizer",
                              "no question_tokenizer or question_encoder_tokenizer directory"),
    # a traceback (TypeError) before
    "architectures not a list": ("config.json", _config(lambda d: d.update(architectures=5)), "architectures",
                                 "expected a list of class names, got 5"),
    "architectures of objects": ("config.json", _config(lambda d: d.update(architectures=[{}])), "architectures",
                                 "expected a list of class names"),
    # named as missing weights in model.safetensors, or an unknown model type's key
    "a BERT question encoder": ("config.json", _config(lambda d: d["question_encoder"].update(model_type="bert")),
                                "question_encoder.model_type", "expected a DPR question encoder's config"),
    "a variant the record does not know": (RECORD, _record(variant="tokens"), "variant", "got 'tokens'"),
    # the generator's tokenizer in the question encoder's place searched other passages without a word, and
    # the question encoder's in the generator's was an IndexError at the first decoded token
    "the generator's tokenizer asks": ("question_encoder_tokenizer", lambda d: (
        shutil.rmtree(d / "question_encoder_tokenizer"),
        shutil.copytree(d / "generator_tokenizer", d / "question_encoder_tokenizer")), "pad_token_id",
        "the tokenizer of another model"),
    # transformers cannot read a generation_config.json with a byte-order mark, and ignored it with its settings
    "a byte-order mark": ("generation_config.json", lambda d: (d / "generation_config.json").write_bytes(
        b"\xef\xbb\xbf" + (d / "generation_config.json").read_bytes()), None, "starts with a UTF-8 byte-order mark"),
}


@pytest.mark.parametrize("case", list(DAMAGED))
def test_a_damaged_export_is_named_in_one_line(case, exported, rag_inputs, tmp_path, monkeypatch, capsys):  # noqa: F811
    """config.json values that transformers loads but RAG cannot use ended in a traceback (n_docs 0, a
    numeric prefix) or answered from zero-token inputs (max_combined_length 0); a damaged
    lewisrag_export.json was read for its pairing alone, or not at all; a missing tokenizer folder was
    named by a name an export does not use."""
    name, edit, field, words = DAMAGED[case]
    damaged = _copy(exported, tmp_path, edit)
    code, _, err = run_main(monkeypatch, capsys, "ask", "--model", damaged, "--index", rag_inputs["index"], "--json", "Who?")
    where = f"{damaged / name if name else damaged}: " + (f"field '{field}': " if field else "")
    assert code == 2 and where in err and words in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_tokenizer_past_the_generators_embeddings_is_refused(exported, trained_rag, tmp_path):  # noqa: F811
    """A tokenizer with more tokens than the generator's embeddings: an IndexError at the first decode (ask,
    swap), and export wrote it into a new folder."""
    from lewisrag.training.checkpoint import load_trained

    model, tokenizers = load_trained(exported)
    n, have = model.generator.config.vocab_size, len(tokenizers.generator)
    more = {f"<unused_{i}>": have + i for i in range(n - have + 1)}  # one token past the embeddings, whatever room they have
    wide = _copy(exported, tmp_path, _json("generator_tokenizer/tokenizer.json", lambda t: t["model"]["vocab"].update(more)))
    with pytest.raises(InputError, match=r"generator_tokenizer: field 'vocab_size': the tokenizer has \d+ tokens, the "
                                         rf"generator's embeddings {n}"):
        load_trained(wide)


def test_a_config_that_decodes_otherwise_than_exported_says_so(exported, tmp_path):
    """K at test time is the user's to change in config.json (the paper varies it), but the change, a
    variant changed, or K and the input length left to RagConfig's defaults, took effect without a word."""
    from lewisrag.data.io import LewisragWarning
    from lewisrag.rag_model import RagModel

    record = json.loads((exported / RECORD).read_text())
    other_k = _copy(exported, tmp_path, _config(lambda d: d.update(n_docs=record["n_docs"] + 1)))
    with pytest.warns(LewisragWarning, match=rf"config.json differs from the export \({RECORD}\): n_docs "
                                             rf"{record['n_docs'] + 1}, exported with {record['n_docs']}$"):
        assert RagModel.from_hf_pretrained(other_k).settings.n_docs == record["n_docs"] + 1
    sequence = _copy(exported, tmp_path, _config(lambda d: d.update(architectures=["RagSequenceForGeneration"])))
    with pytest.warns(LewisragWarning, match="variant 'sequence', exported with 'token'"):
        RagModel.from_hf_pretrained(sequence)
    defaults = _copy(exported, tmp_path, _config(lambda d: {k: v for k, v in d.items() if k not in ("n_docs", "max_combined_length")}))
    with pytest.warns(LewisragWarning, match="no n_docs, so RagConfig's default; no max_combined_length, so RagConfig's default"):
        RagModel.from_hf_pretrained(defaults)
    with pytest.raises(InputError, match=r"^variant: must be one of token, sequence"):
        RagModel.from_hf_pretrained(exported, variant="Token")  # anything but "token" loaded RAG-Sequence
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", LewisragWarning)
        RagModel.from_hf_pretrained(exported)  # the export as written: nothing to say
