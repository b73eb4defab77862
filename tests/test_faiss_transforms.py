"""FAISS pre-transforms keep the inner products DPR ranks by: a PCA trained here is a projection (FAISS's
subtracts the training mean, and an inner-product search then ranked by (q - m)·(x - m)), and a whitening
one (PCAW) is refused."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from lewisrag.data.io import InputError
from lewisrag.index.dense.faiss_build import check_factory, train_faiss


def _vectors(seed: int, n: int, dim: int = 32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, dim)) + 0.35).astype(np.float32)  # a shared mean, as DPR's vectors have


@pytest.mark.parametrize("factory", ["PCA32,Flat", "PCAR32,Flat"])
def test_a_full_width_pca_searches_as_exact_search_does(factory):
    x, q = _vectors(0, 400), _vectors(1, 60)
    index = faiss.index_factory(32, factory, faiss.METRIC_INNER_PRODUCT)
    train_faiss(index, lambda rows: x[rows], np.arange(len(x)))
    index.add(x)
    scores, rows = index.search(q, 5)
    exact = np.argsort(-(q @ x.T), axis=1)[:, :5]
    assert (rows == exact).mean() > 0.99  # centred, the top 1 agreed on about half the questions
    np.testing.assert_allclose(scores, np.take_along_axis(q @ x.T, rows, axis=1), rtol=1e-4, atol=1e-3)


def test_a_whitening_pca_is_refused():
    with pytest.raises(InputError, match="whitens") as e:
        check_factory("PCAW16,Flat", 32, 400)
    assert e.value.source == "--faiss"
    check_factory("PCA16,Flat", 32, 400)
