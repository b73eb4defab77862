"""`index verify` inside a Refine(...) index (a sound one over OPQ or PCA refused, or a traceback;
damage to its refine index or its base's codebook verified clean), on BM25 document ids outside the
passages (verified clean, though `index search` refuses them and says verify names the damage), and
`index tune`'s word for a held-out question that finds fewer than K passages (said to be a recall
below the target when it was above it)."""

from __future__ import annotations

import json
from pathlib import Path

import faiss
import numpy as np
import pytest

from conftest import run_main
from lewisrag.data.io import InputError, write_json
from lewisrag.data.records import Passage
from lewisrag.index import store, tuning
from lewisrag.index.bm25 import build_bm25_index
from lewisrag.index.dense import build_faiss
from lewisrag.index.verify import verify_index
from test_audit_index_load import _questions_only, _variant, flat  # noqa: F401
from test_index import dpr_ckpt  # noqa: F401  (a module fixture: the tiny DPR checkpoint)

N, D = 2000, 32


def _index_folder(folder: Path, x: np.ndarray, factory: str) -> Path:
    """A dense index folder over vectors `x` built as `factory` (no encoder), with the hashes a build records."""
    passages = [Passage(f"p{i}", "", f"text {i}") for i in range(len(x))]
    folder.mkdir()
    np.save(folder / "embeddings.npy", x)
    faiss.write_index(_opq_in_a_moment(x, factory) if factory.startswith("OPQ") else build_faiss(x, factory),
                      str(folder / "index.faiss"))
    store.write_passages(folder, passages)
    manifest = {"format": store.FORMAT_VERSION, "kind": "dense", "metric": "inner_product", "faiss_factory": factory,
                "dim": x.shape[1], "n_passages": len(x), "content_hash": store.content_hash(passages),
                "sample_hash": store.sample_hash(passages),
                "block_hashes": store.block_hashes(store.content_hashes(passages)[1]),
                "encoder": {"ctx_fingerprint": "test"}, "search_params": {"nprobe": 8}}
    write_json(folder / "manifest.json", manifest)
    return folder


def _opq_in_a_moment(x: np.ndarray, factory: str):
    """`factory` (OPQ...,Refine(...)) built as `build_faiss` does, but its OPQ rotation trained for one
    iteration, not 25 (seconds on 2 cores): a rotation all the same, which verify must apply."""
    index = faiss.index_factory(x.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    opq = faiss.downcast_VectorTransform(faiss.downcast_index(faiss.downcast_index(index).base_index).chain.at(0))
    opq.niter = opq.niter_pq = opq.niter_pq_0 = 1
    index.train(x)
    index.add(x)
    return index


def _vectors(n: int = N, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, D)).astype(np.float32)


def _damage(folder: Path, fn) -> Path:
    """index.faiss read, changed by `fn(the IndexRefine)` and written back."""
    index = faiss.read_index(str(folder / "index.faiss"))
    fn(faiss.downcast_index(index))
    faiss.write_index(index, str(folder / "index.faiss"))
    return folder


# --- 1. a Refine(...) index: its base index and its refine index ------------------------------------


@pytest.mark.parametrize("factory", ["OPQ4_32,IVF8,PQ4x4,Refine(Flat)", "PCA16,IVF8,Flat,Refine(Flat)"])
def test_a_sound_refine_index_over_a_pre_transform_verifies(tmp_path, factory):
    """verify read the transforms of the outer IndexRefine (none), not those of the IndexPreTransform
    inside it: OPQ's sound rows were compared with centroids in OPQ's output space and called
    damaged, and PCA's raised an AssertionError in FAISS's search (a traceback, exit 3)."""
    result = verify_index(_index_folder(tmp_path / "i", _vectors(), factory))["checks"][-1]["result"]
    assert "its base index (IndexPreTransform)" in result and "after its transforms" in result, result
    assert f"its refine index's (IndexFlatIP) {N} vectors equal the stored ones" in result, result


def test_a_refine_flat_index_says_what_it_checked_of_both_parts(tmp_path):
    """The result said "IndexRefineFlat is none of them" and compared nothing of either part."""
    result = verify_index(_index_folder(tmp_path / "i", _vectors(), "IVF8,Flat,Refine(Flat)"))["checks"][-1]["result"]
    assert "none of them" not in result and "; each equal to its stored vector" in result, result
    assert f"its refine index's (IndexFlatIP) {N} vectors equal the stored ones" in result, result


def test_negated_refine_vectors_are_damage(tmp_path):
    """Every refine vector negated verified clean, while recall@5 fell to 0: the refine index ranks
    every search's answers, and its vectors were never compared with the stored ones."""
    def negate(refine):
        flat = faiss.downcast_index(refine.refine_index)
        codes = faiss.vector_to_array(flat.codes).view(np.float32).copy()
        codes[D : 2 * D] *= -1  # row 1's vector
        faiss.copy_array_to_vector(codes.view(np.uint8), flat.codes)

    folder = _damage(_index_folder(tmp_path / "i", _vectors(), "IVF8,PQ8x4,Refine(Flat)"), negate)
    with pytest.raises(InputError, match=r"index.faiss: row 1 \(0-based\) of its refine index differs from "
                                         r"embeddings.npy's vector"):
        verify_index(folder)


def test_a_damaged_sqfp16_refine_code_is_damage(tmp_path):
    """A coded refine index (SQfp16) was not looked at either: a damaged code verified clean."""
    def damage(refine):
        sq = faiss.downcast_index(refine.refine_index)
        codes = faiss.vector_to_array(sq.codes)
        codes[sq.code_size * 7 + 1] ^= 0x40  # row 7's first half float: its exponent
        faiss.copy_array_to_vector(codes, sq.codes)

    folder = _damage(_index_folder(tmp_path / "i", _vectors(), "IVF8,PQ8x4,Refine(SQfp16)"), damage)
    with pytest.raises(InputError, match=r"row 7 \(0-based\) of its refine index differs"):
        verify_index(folder)


def test_a_nan_in_the_base_index_codebook_is_damage(tmp_path):
    """A NaN PQ codebook under the refine stage verified clean (recall@5 0): the trained-parameter
    check looked at the IndexRefine, which has no `pq`, not at its base index."""
    def nan(refine):
        pq = faiss.downcast_index(refine.base_index).pq
        centroids = faiss.vector_to_array(pq.centroids)
        centroids[:] = np.nan
        faiss.copy_array_to_vector(centroids, pq.centroids)

    folder = _damage(_index_folder(tmp_path / "i", _vectors(), "IVF8,PQ8x4,Refine(Flat)"), nan)
    with pytest.raises(InputError, match="its product quantizer's centroid 0 of sub-vector 0 holds NaN"):
        verify_index(folder)


# --- 2. BM25 document ids ---------------------------------------------------------------------------


@pytest.mark.parametrize("doc", [100_000, -3])
def test_a_bm25_document_id_outside_the_passages_is_damage(tmp_path, monkeypatch, capsys, doc):
    """A score entry's document id past the passages verified clean, though every search reaching it
    fails with "`lewisrag index verify` names the damage"; a negative one searched another row."""
    passages = [Passage(f"p{i}", f"T{i}", f"passage number {i} of the verify corpus") for i in range(50)]
    build_bm25_index(passages, tmp_path / "b")
    path = tmp_path / "b" / "bm25" / "indices.csc.index.npy"
    indices = np.load(path)
    indices[10] = doc
    np.save(path, indices)
    code, _, err = run_main(monkeypatch, capsys, "index", "verify", "--index", tmp_path / "b")
    assert code == 2 and err.strip().count("\n") == 0, err
    assert f"score entry 10 (0-based) names document {doc}, outside the index's 50 documents" in err, err


# --- 3. index tune: a held-out question that finds fewer than K passages ------------------------------


def test_a_short_held_out_search_is_said_as_such_not_as_a_recall_below_the_target(flat, tiny_corpus, tmp_path,  # noqa: F811
                                                                                  monkeypatch, capsys):
    """A held-out question that found fewer than K passages made `held_out_reached` false, and the
    warning and summary said "recall@5 0.6 ... below the target 0.5": the recall was above it."""
    ivf = _variant(flat, tmp_path, "ivf", factory="IVF4,Flat", manifest={"faiss_factory": "IVF4,Flat"})
    monkeypatch.setattr(tuning, "measure", lambda *a, **kw: (0.6, False))  # every held-out search comes back short
    code, out, err = run_main(monkeypatch, capsys, "index", "tune", "--index", ivf, "--questions",
                              _questions_only(tiny_corpus, tmp_path), "--target-recall", "0.5")
    assert code == 0, err
    record = json.loads((ivf / "manifest.json").read_text())["tuning"]
    assert record["reached"] is True and record["held_out_recall_at_k"] == 0.6
    assert record["held_out_reached"] is False and record["held_out_found_k"] is False
    nprobe = json.loads((ivf / "manifest.json").read_text())["search_params"]["nprobe"]
    (line,) = [ln for ln in err.splitlines() if ln.startswith("warning")]
    assert line.startswith(f"warning: some held-out question finds fewer than 5 passages at nprobe {nprobe}; "
                           "training and answering refuse such a search"), line
    assert "below the target" not in line, line
    summary = " ".join(out.split("┘")[-1].split())
    assert summary.endswith(f"0.6 on the 6 held-out ones (seed 0), but some held-out question finds fewer than 5 "
                            f"passages at nprobe {nprobe}; training and answering refuse such a search"), out
    monkeypatch.undo()  # the real measure: every held-out question of the tiny corpus finds 5 passages
    code, out, err = run_main(monkeypatch, capsys, "index", "tune", "--index", ivf, "--questions",
                              _questions_only(tiny_corpus, tmp_path), "--json")
    assert code == 0 and json.loads(out)["held_out_found_k"] is True, err
