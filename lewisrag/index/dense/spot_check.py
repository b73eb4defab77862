"""Stored vectors (wiki_dpr's `embeddings` column, an index's `embeddings.npy`) set against fresh
encodings of a few rows: a build reuses them, and `index verify` passes them, only if they match."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lewisrag.data.io import InputError
from lewisrag.data.passages import PassageTable
from lewisrag.data.records import Passage
from lewisrag.index.encoders import DPRCheckpoint, encode_texts

SPOT_CHECK_ROWS = 8  # stored vectors compared with fresh encodings before they are reused
MIN_COSINE = 0.99  # ... each must point the same way as its fresh encoding
MAX_NORM_RATIO = 1.05  # ... and be as long, within 5% (inner products keep their scale)


def spot_check_rows(n: int, k: int = SPOT_CHECK_ROWS) -> list[int]:
    """`k` rows spread evenly over `n`, the first and the last among them (fewer if n < k).

    >>> spot_check_rows(100), spot_check_rows(3)
    ([0, 14, 28, 42, 57, 71, 85, 99], [0, 1, 2])
    """
    return sorted({int(r) for r in np.linspace(0, n - 1, min(k, n)).round()})


def check_stored_embeddings(passages: PassageTable, ckpt: DPRCheckpoint, max_length: int,
                            mixed_precision: str = "no") -> dict:
    """Refuse stored vectors this encoder did not make: encode `spot_check_rows` afresh and require
    each stored vector to have cosine ≥ MIN_COSINE with its fresh one and about its length.
    Returns what was checked, for the manifest."""
    dim = passages.vector_dim()  # the copy checks every vector as it reads it
    if dim != ckpt.dim:
        raise InputError(passages.source, f"the embeddings were not made by this encoder: they have {dim} values, "
                         f"the encoder makes {ckpt.dim}", field="embeddings")
    rows = spot_check_rows(len(passages))
    cosine, ratio, bad = compare_encodings(passages.take(rows), passages.embeddings_at(rows), ckpt, max_length, mixed_precision)
    if bad is not None:
        raise InputError(passages.source, f"the embeddings were not made by this encoder: this row's stored vector "
                         f"has cosine {cosine[bad]:.3f} and {ratio[bad]:.2f}x the length of a fresh encoding "
                         f"(cosine ≥ {MIN_COSINE} needed)", line=rows[bad] + 1, field="embeddings")
    return {"rows": [r + 1 for r in rows], "min_cosine": round(float(cosine.min()), 4)}


def compare_encodings(passages: Sequence[Passage], stored: np.ndarray, ckpt: DPRCheckpoint, max_length: int,
                      mixed_precision: str = "no") -> tuple[np.ndarray, np.ndarray, int | None]:
    """Encode `passages` afresh and set each against its `stored` vector (N, D): (cosine, stored length
    / fresh length, the first position failing MIN_COSINE or MAX_NORM_RATIO, else None)."""
    fresh = encode_texts(ckpt.ctx_encoder, ckpt.tokenizer, [(p.title, p.text) for p in passages],
                         batch_size=len(passages), max_length=max_length, mixed_precision=mixed_precision)
    stored = np.asarray(stored, dtype=np.float32)
    norm_f, norm_s = np.linalg.norm(fresh, axis=1), np.linalg.norm(stored, axis=1)
    cosine = (fresh * stored).sum(1) / np.maximum(norm_f * norm_s, 1e-12)
    ratio = norm_s / np.maximum(norm_f, 1e-12)
    bad = (cosine < MIN_COSINE) | (ratio > MAX_NORM_RATIO) | (ratio < 1 / MAX_NORM_RATIO) | ~np.isfinite(cosine)
    return cosine, ratio, int(np.argmax(bad)) if bad.any() else None
