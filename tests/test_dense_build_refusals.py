"""What a dense index build must refuse, or start over for, rather than write: vectors holding NaN
or infinity (stored, and reported as success, in float32), and a partial build resumed after its
encoder's tokenizer changed (the plan fingerprinted the weights alone, so the resumed shards were
encoded by another tokenizer than the rest). Indexes built before the tokenizer was recorded still load.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from conftest import run_main
from hf_layouts import dpr_pair
from lewisrag.data.io import InputError
from lewisrag.data.records import read_passages
from lewisrag.index import store
from lewisrag.index.dense import DenseBuildConfig, DenseIndex, build_dense_index
from lewisrag.index.search import open_retriever


@pytest.fixture(scope="module")
def pair(tiny_corpus, tmp_path_factory):
    texts = [p.title + " " + p.text for p in read_passages(tiny_corpus["passages"])]
    return dpr_pair(tmp_path_factory.mktemp("hub"), texts)


@pytest.fixture
def nan_encoder(pair, tmp_path):
    """The pair's context encoder with NaN in some rows of its word embeddings: the passages using
    those words encode to NaN vectors, the others do not."""
    from transformers import DPRContextEncoder

    folder = shutil.copytree(pair["context"], tmp_path / "nan_ctx")
    model = DPRContextEncoder.from_pretrained(pair["context"], dtype=torch.float32)
    with torch.no_grad():
        model.ctx_encoder.bert_model.embeddings.word_embeddings.weight[60:].fill_(float("nan"))
    model.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_nan_vectors_are_refused_naming_the_encoder_and_row(nan_encoder, tiny_corpus, tmp_path, dtype):
    passages = read_passages(tiny_corpus["passages"])
    with pytest.raises(InputError, match=r"encodes passage row \d+ \(id '[^']+'\) as a vector holding NaN") as error:
        build_dense_index(passages, nan_encoder, tmp_path / "idx", DenseBuildConfig(device="cpu", vector_dtype=dtype))
    assert str(nan_encoder) in str(error.value)
    assert not (tmp_path / "idx").exists() and not store.partial_dir(tmp_path / "idx").exists()


def test_nan_vectors_are_one_line_from_the_cli(nan_encoder, tiny_corpus, tmp_path, monkeypatch, capsys):
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", tiny_corpus["passages"], "--encoder",
                            nan_encoder, "--out", tmp_path / "idx", "--device", "cpu")
    lines = [ln for ln in err.splitlines() if ln.strip() and "━" not in ln]  # progress bars aside
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {nan_encoder}: encodes passage row"), err
    assert not (tmp_path / "idx").exists()


def test_infinite_vectors_are_refused_whatever_the_dtype(pair, tiny_corpus, tmp_path, monkeypatch):
    from lewisrag.index.dense import build

    encode = build.encode_texts

    def overflowing(*args, **kw):  # an fp16 forward pass that overflowed in the third passage
        vecs = encode(*args, **kw)
        if len(vecs) > 2:
            vecs[2, 0] = np.inf
        return vecs

    monkeypatch.setattr(build, "encode_texts", overflowing)
    passages = read_passages(tiny_corpus["passages"])
    with pytest.raises(InputError, match=rf"{pair['context']}: encodes passage row 3 \(id '{passages[2].id}'\) as a vector "
                                         "holding infinity"):
        build_dense_index(passages, pair["context"], tmp_path / "idx", DenseBuildConfig(device="cpu"))


def test_a_changed_tokenizer_restarts_a_resumed_build(pair, tmp_path):
    """A build killed after its first shards, its encoder's tokenizer then made cased (weights
    untouched): the resumed build must equal a fresh one, not keep the shards the old one encoded."""
    encoder = shutil.copytree(pair["context"], tmp_path / "ctx")
    rows = [{"id": f"p{i}", "title": f"Country {i}", "text": f"The Capital Of Valdoria Is Marn {i}"} for i in range(20)]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    passages = read_passages(tmp_path / "p.jsonl")
    cfg = DenseBuildConfig(shard_size=4, device="cpu")

    def die(stage, done, total):
        if stage == "encode" and done >= 12:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_dense_index(passages, encoder, tmp_path / "resumed", cfg, die)
    assert list((store.partial_dir(tmp_path / "resumed") / "shards").iterdir())  # shards to resume from
    config = encoder / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "do_lower_case": False}))
    resumed = build_dense_index(passages, encoder, tmp_path / "resumed", cfg)
    fresh = build_dense_index(passages, encoder, tmp_path / "fresh", cfg)
    assert np.array_equal(np.load(tmp_path / "resumed" / "embeddings.npy"), np.load(tmp_path / "fresh" / "embeddings.npy"))
    assert resumed["encoder"]["tokenizer_fingerprint"] == fresh["encoder"]["tokenizer_fingerprint"]


def test_an_index_whose_manifest_predates_the_tokenizer_fields_still_searches(pair, tiny_corpus, tmp_path):
    out = tmp_path / "idx"
    manifest = build_dense_index(read_passages(tiny_corpus["passages"]), pair["context"], out, DenseBuildConfig(device="cpu"))
    assert {"tokenizer_fingerprint", "passage_encoding"} <= manifest["encoder"].keys()
    path = out / store.MANIFEST
    old = json.loads(path.read_text())
    for field in ("tokenizer_fingerprint", "passage_encoding"):
        del old["encoder"][field]
    path.write_text(json.dumps(old))
    assert DenseIndex.load(out).ctx_fingerprint == manifest["encoder"]["ctx_fingerprint"]
    retriever = open_retriever(out, pair["question"], context_encoder=pair["context"])
    assert len(retriever.search(["Who is the leader?"], 3)[0]) == 3
