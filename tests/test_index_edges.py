"""`index verify` on damage to what a FAISS index was trained to hold, which no row's own check
showed: a NaN in its trained parameters (SQ ranges, coarse centroids, PQ codebook, OPQ matrix) or
in a code, a coarse centroid damaged to another finite value, an SQ range pushed far out; and
polysemous training turned off under a pre-transform as well. Index folders are written from given
vectors, as `build_dense_index` writes them, without an encoder (the encoding check says so and
passes): small vectors, each test in a second or two."""

from __future__ import annotations

import json

import faiss
import numpy as np
import pytest

from lewisrag.data.io import InputError
from lewisrag.data.records import Passage
from lewisrag.index import store
from lewisrag.index.dense import (DEFAULT_SEARCH_PARAMS, EMBEDDINGS, FAISS_FILE, _new_index, _no_polysemous_training,
                                  _write_faiss_atomic, build_faiss)
from lewisrag.index.verify import verify_index

N, D = 600, 32


def _vectors(seed: int = 0) -> np.ndarray:
    """Rows around 12 topics, as passages' vectors gather: lists and codes of differing content."""
    rng = np.random.default_rng(seed)
    means = rng.standard_normal((12, D))
    return (means[rng.integers(0, 12, N)] + 0.5 * rng.standard_normal((N, D))).astype(np.float32)


def _index(out, factory: str, vectors: np.ndarray | None = None, dtype: str = "float32"):
    """An index folder over `vectors` with FAISS index `factory`, laid out as `build_dense_index`
    writes it; its manifest's encoder is not found, so verify re-encodes no passage."""
    vectors = _vectors() if vectors is None else vectors
    out.mkdir(parents=True)
    n, d = vectors.shape
    np.save(out / EMBEDDINGS, vectors.astype(dtype))
    _write_faiss_atomic(build_faiss(np.load(out / EMBEDDINGS, mmap_mode="r"), factory), out / FAISS_FILE)
    passages = [Passage(f"p{i}", f"T{i}", f"passage {i}") for i in range(n)]
    store.write_passages(out, passages)
    whole, blocks = store.content_hashes(passages)
    manifest = {"format": 2, "kind": "dense", "metric": "inner_product", "faiss_factory": factory, "dim": d,
                "n_passages": n, "content_hash": whole, "block_hashes": store.block_hashes(blocks),
                "sample_hash": store.sample_hash(passages),
                "encoder": {"path": str(out / "not-here"), "ctx_fingerprint": "0" * 16, "format": "lewisrag"},
                "search_params": DEFAULT_SEARCH_PARAMS,
                "build": {"shard_size": 64, "max_length": 32, "mixed_precision": "no", "vector_dtype": dtype}}
    (out / store.MANIFEST).write_text(json.dumps(manifest))
    return out


def _damage(index, edit) -> None:
    """index.faiss read, `edit(outer)` applied in memory, written back."""
    faiss_index = faiss.read_index(str(index / FAISS_FILE))
    edit(faiss.downcast_index(faiss_index))
    faiss.write_index(faiss_index, str(index / FAISS_FILE))


def _inner(outer):
    """The index under any pre-transforms, and an HNSW index's storage."""
    inner = faiss.downcast_index(outer.index) if isinstance(outer, faiss.IndexPreTransform) else outer
    return faiss.downcast_index(inner.storage) if isinstance(inner, faiss.IndexHNSW) else inner


def _set(vector, at: int, value: float) -> None:
    """One float of a FAISS std::vector<float> (a trained parameter) set to `value`."""
    values = faiss.vector_to_array(vector)
    values[at] = value
    faiss.copy_array_to_vector(values, vector)


def _centroids(ivf) -> np.ndarray:
    """An IVF index's coarse centroids: a writable (nlist, d) view of its Flat quantizer's storage."""
    quantizer = faiss.downcast_index(ivf.quantizer)
    return faiss.rev_swig_ptr(quantizer.get_xb(), quantizer.ntotal * quantizer.d).reshape(quantizer.ntotal, quantizer.d)


def _sq_nan(outer):
    _set(_inner(outer).sq.trained, 0, np.nan)


def _centroid_nan(outer):
    _centroids(faiss.extract_index_ivf(outer))[3, 5] = np.nan


def _codebook_nan(outer):
    _set(faiss.downcast_index(faiss.extract_index_ivf(outer)).pq.centroids, 7, np.nan)  # 4 floats a centroid


def _opq_nan(outer):
    _set(faiss.downcast_VectorTransform(outer.chain.at(0)).A, 2, np.nan)


@pytest.mark.parametrize("factory, damage, message", [
    # a NaN in SQ8's ranges: every search returned no row (recall@5 0.95 to 0), verify passed
    ("HNSW16,SQ8", _sq_nan, "its scalar quantizer's ranges \\(value 0, 0-based\\) holds NaN or infinity"),
    # a NaN coarse centroid: its list is never probed, its rows never found; verify passed
    ("IVF8,Flat", _centroid_nan, "the coarse centroid of inverted list 3 holds NaN or infinity"),
    ("IVF8,PQ8", _codebook_nan, "its product quantizer's centroid 1 of sub-vector 0 holds NaN or infinity"),
    ("OPQ8_32,IVF8,PQ8", _opq_nan, "its pre-transform 1 \\(\\w+\\)'s matrix \\(value 2, 0-based\\) holds NaN"),
])
def test_a_nan_in_trained_parameters_is_named(tmp_path, factory, damage, message):
    index = _index(tmp_path / "i", factory)
    verify_index(index)
    _damage(index, damage)
    with pytest.raises(InputError, match=f"index.faiss: {message}.*the file is damaged; build the index again"):
        verify_index(index)


def test_a_code_that_decodes_to_nan_is_named(tmp_path):
    """A code compared with `err > fresh + margin` passed when it decoded to NaN (every comparison
    with NaN is false): an SQfp16 code's half-float damaged to NaN passed verify. It is now damage
    unless it decodes within the margin."""
    index = _index(tmp_path / "i", "SQfp16")

    def nan_code(outer):
        codes = faiss.rev_swig_ptr(outer.codes.data(), outer.ntotal * outer.code_size)
        codes[17 * outer.code_size + 4 : 17 * outer.code_size + 6] = [0x00, 0x7E]  # float16 NaN, little-endian

    _damage(index, nan_code)
    with pytest.raises(InputError, match="index.faiss: row 17 \\(0-based\\) differs from embeddings.npy's vector: "
                       "its code decodes nan of the vector's squared norm away"):
        verify_index(index)


@pytest.mark.parametrize("factory", ["IVF8,Flat", "PCA16,IVF8,Flat"])
def test_a_coarse_centroid_damaged_to_another_finite_value_is_named(tmp_path, factory):
    """IVF-Flat keeps each vector as it was (after any transform), whatever its centroid: a centroid
    turned around (or a flipped exponent bit) passed every check while searches probed the wrong
    lists (IVF16,Flat: recall@5 0.938 to 0.663). Adding files each row under its nearest centroid by
    an exact search, which verify now repeats. (Residual codes, IVF-PQ and IVF-SQ, decode through
    the damaged centroid: `_check_codes` names most such damage first.)"""
    index = _index(tmp_path / "i", factory)
    clean = _faiss_result(index)

    def turn(outer):
        centroids = _centroids(faiss.extract_index_ivf(outer))
        centroids[2] = -centroids[2]

    _damage(index, turn)
    with pytest.raises(InputError, match="index.faiss: row \\d+ \\(0-based\\) is filed in inverted list 2, whose "
                       "centroid's inner product with its vector is .*: adding files a row under its nearest centroid"):
        verify_index(index)
    assert "each row in one inverted list of its nearest centroid" in clean


def test_rows_filed_either_way_between_tied_centroids_pass(tmp_path):
    """Two centroids alike: adding files a row under either, and verify allows what rounding can
    move; a row's list is then not the one the quantizer picks now, and is not damage."""
    index = _index(tmp_path / "i", "IVF4,Flat")
    vectors = np.load(index / EMBEDDINGS)
    faiss_index = faiss.read_index(str(index / FAISS_FILE))
    ivf = faiss.extract_index_ivf(faiss_index)
    centroids = _centroids(ivf)
    centroids[1] = centroids[0]  # list 1's centroid now ties with list 0's
    ivf.reset()
    _, nearest = ivf.quantizer.search(vectors, 1)  # FAISS breaks the tie towards list 0
    lists = nearest[:, 0].copy()
    assert (lists != 1).all() and (lists == 0).sum() > 1
    lists[np.flatnonzero(lists == 0)[::2]] = 1  # every other one the other way
    ivf.add_core(N, faiss.swig_ptr(vectors), None, faiss.swig_ptr(lists))
    assert ivf.invlists.list_size(1) > 0
    faiss.write_index(faiss_index, str(index / FAISS_FILE))
    assert "each row in one inverted list of its nearest centroid" in _faiss_result(index)


def test_an_hnsw_quantizer_s_lists_are_not_held_to_the_nearest_centroid(tmp_path):
    """An HNSW coarse quantizer searched approximately when adding: a row may be filed, as built,
    under a centroid that is not its nearest. The result line says the assignment is not checked."""
    index = _index(tmp_path / "i", "IVF8_HNSW8,PQ8")
    assert ("whether the list of its nearest centroid is not checked: its coarse quantizer, IndexHNSWFlat, is not an "
            "exact inner-product search") in _faiss_result(index)


def test_an_sq_range_damaged_far_outside_the_vectors_is_named(tmp_path):
    """An exponent bit flipped in HNSW16,SQ8's ranges (-3.42 to -6.3e19): every code and its fresh
    encoding decode equally far off, so the code check passed, while every search scored every row
    by it (recall@5 0.95 to 0). A range trained on the vectors' least and greatest values lies
    within the values they take; this one does not."""
    index = _index(tmp_path / "i", "HNSW16,SQ8", dtype="float16")
    clean = _faiss_result(index)
    _damage(index, lambda outer: _set(_inner(outer).sq.trained, 12, -6.3e19))  # dimension 12's least value
    with pytest.raises(InputError, match="index.faiss: its scalar quantizer's range of dimension 12, -6.3e\\+19 to "
                       ".*reaches past the values the stored vectors take there"):
        verify_index(index)
    assert "the SQ ranges within the values the stored vectors take" in clean


def _faiss_result(index) -> str:
    return {c["check"]: c["result"] for c in verify_index(index)["checks"]}["faiss"]


@pytest.mark.parametrize("factory", ["OPQ8_32,PQ8", "PCA16,PQ4", "PQ8", "IVF8,PQ8", "OPQ8_32,IVF8,PQ8"])
def test_polysemous_training_is_off_under_a_pre_transform_too(factory):
    """index_factory turns polysemous training on for PQ; it was turned off on the outer index and
    the IVF only, so PQ under OPQ or PCA kept it (58 s of training against 21 s for OPQ16_64,PQ16 on
    6,000 vectors), contrary to docs/scale.md."""
    index = _new_index(factory, D)
    _no_polysemous_training(index)
    outer = faiss.downcast_index(index)
    inner = faiss.downcast_index(outer.index) if isinstance(outer, faiss.IndexPreTransform) else outer
    with_pq = [inner] if hasattr(inner, "do_polysemous_training") else [faiss.downcast_index(faiss.extract_index_ivf(index))]
    assert all(part.do_polysemous_training is False for part in with_pq)
