"""An audit of building indexes (`lewisrag index build`), from the user's side: each test is a
factory string or a damaged partial build that once built an index no load reads, ended in a
traceback, cost a whole encoding pass before a refusal, or resumed into wrong vectors in silence.
(Loading and `index tune` have their own audit: test_audit_index_load.py.)"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from conftest import run_main
from lewisrag.data.io import InputError
from lewisrag.data.records import read_passages
from lewisrag.index.dense import DenseBuildConfig, DenseIndex, build_dense_index
from lewisrag.index.verify import verify_index
from test_index import dpr_ckpt  # noqa: F401  (a module fixture: the tiny DPR checkpoint)


def _one_line(code, err, *needles):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and "Traceback" not in err and len(lines) == 1 and lines[0].startswith("error: "), err
    assert all(n in lines[0] for n in needles), (needles, lines[0])


@pytest.mark.parametrize("factory", ["HNSW4,PQ4x4", "HNSW4_PQ4x4"])
def test_a_factory_faiss_makes_l2_is_refused_before_encoding(tiny_corpus, dpr_ckpt, tmp_path, factory,  # noqa: F811
                                                             monkeypatch, capsys):
    """FAISS builds HNSW over PQ codes with the L2 metric whatever it is asked: the build encoded
    every passage and wrote an index that every load then refused ("another metric than the inner
    product"), telling the user to build it again, which did the same."""
    calls = []
    with pytest.raises(InputError, match="with the L2 metric only"):
        build_dense_index(read_passages(tiny_corpus["passages"]), dpr_ckpt, tmp_path / "i",
                          DenseBuildConfig(factory=factory, device="cpu"), lambda *a: calls.append(a))
    assert calls == [] and not (tmp_path / "i").exists() and not (tmp_path / "i.partial").exists()
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", tiny_corpus["passages"], "--encoder",
                            dpr_ckpt, "--device", "cpu", "--faiss", factory, "--out", tmp_path / "j")
    _one_line(code, err, "--faiss", factory, "L2")


def test_a_refine_flat_index_builds_into_one_that_loads_and_verifies(tiny_corpus, dpr_ckpt, tmp_path):  # noqa: F811
    """'IVF4,Flat,Refine(Flat)' is an IndexRefine when made, an IndexRefineFlat when read back: every
    load refused the finished build as a FAISS file of another kind than its manifest says."""
    out = tmp_path / "refine"
    build_dense_index(read_passages(tiny_corpus["passages"]), dpr_ckpt, out,
                      DenseBuildConfig(factory="IVF4,Flat,Refine(Flat)", device="cpu"))
    index = DenseIndex.load(out)
    vectors = np.asarray(index.embeddings, np.float32)
    _, rows = index.search(vectors[:2], 3)  # nprobe 16 of 4 lists, re-ranked exactly: the exact top 3
    assert rows.tolist() == np.argsort(-(vectors[:2] @ vectors.T), axis=1, kind="stable")[:, :3].tolist()
    assert verify_index(out)["kind"] == "dense"


def test_more_inverted_lists_than_passages_are_refused_before_faiss_sets_them_aside(tiny_corpus, dpr_ckpt,  # noqa: F811
                                                                                   tmp_path, monkeypatch):
    """The factory string was handed to FAISS first: 500,000,000 lists set aside 24 GB, and where
    memory ran out a MemoryError traceback (exit 3) came before the one-line refusal."""
    from lewisrag.index.dense import faiss_build  # check_factory looks _new_index up there

    monkeypatch.setattr(faiss_build, "_new_index", lambda *a: pytest.fail("FAISS was asked to make the index"))
    with pytest.raises(InputError, match="needs at least 500000000 passages to train .*there are 60"):
        build_dense_index(read_passages(tiny_corpus["passages"]), dpr_ckpt, tmp_path / "i",
                          DenseBuildConfig(factory="IVF500000000,Flat", device="cpu"))


@pytest.mark.parametrize("factory, needle", [("OPQ4,Flat", "256 OPQ centroids per code"),
                                             ("PCA16,IVF2,Flat", "16 PCA output dimensions")])
def test_a_pre_transform_too_large_to_train_is_refused_before_encoding(tiny_corpus, dpr_ckpt, tmp_path,  # noqa: F811
                                                                       factory, needle):
    """An OPQ matrix trains a product quantizer of 256 centroids a code, a PCA one needs as many
    vectors as it keeps dimensions: too few passages for either was found by FAISS's training,
    after every passage was encoded."""
    passages = read_passages(tiny_corpus["passages"])
    passages = passages[:12] if "PCA" in factory else passages
    calls = []
    with pytest.raises(InputError, match=f"needs at least .*{needle}"):
        build_dense_index(passages, dpr_ckpt, tmp_path / "i", DenseBuildConfig(factory=factory, device="cpu"),
                          lambda *a: calls.append(a))
    assert calls == []


@pytest.mark.parametrize("damage", ["removed", "truncated", "emptied", "other shape"])
def test_a_resume_whose_vector_file_was_damaged_encodes_again(tiny_corpus, dpr_ckpt, tmp_path, damage):  # noqa: F811
    """IDX.partial/embeddings.npy removed since the kill (shards still marked done) resumed into a
    new, sparse file: the finished index held zero vectors for every shard done before, in silence;
    a truncated file was a numpy ValueError or EOFError traceback on every rerun."""
    passages = read_passages(tiny_corpus["passages"])
    cfg = DenseBuildConfig(shard_size=16, device="cpu")
    build_dense_index(passages, dpr_ckpt, tmp_path / "whole", cfg)

    def stop(stage, done, total):
        if stage == "encode" and done >= 40:
            raise KeyboardInterrupt

    out, partial = tmp_path / "resumed", tmp_path / "resumed.partial"
    with pytest.raises(KeyboardInterrupt):
        build_dense_index(passages, dpr_ckpt, out, cfg, stop)
    assert len(list((partial / "shards").iterdir())) == 2
    vectors = partial / "embeddings.npy"
    if damage == "removed":
        vectors.unlink()
    elif damage == "truncated":
        vectors.write_bytes(vectors.read_bytes()[: vectors.stat().st_size // 2])
    elif damage == "emptied":
        vectors.write_bytes(b"")
    else:
        np.save(vectors, np.ones((60, 16), np.float32))
    build_dense_index(passages, dpr_ckpt, out, cfg)
    got, want = np.load(out / "embeddings.npy"), np.load(tmp_path / "whole" / "embeddings.npy")
    assert got.shape == want.shape and np.array_equal(got, want)
    assert not partial.exists()
    shutil.rmtree(out)
