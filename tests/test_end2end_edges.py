"""Edges of the end-to-end retriever (training.end2end): a checkpoint's non-finite index vectors, a
context encoder whose passage vectors diverge, an index cut longer than the trained encoder reads,
and --retriever-lr-scale 0 are one-line errors that write nothing."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from conftest import one_thread
from lewisrag.data.io import InputError
from test_rag_train import make_config, rag_inputs  # noqa: F401  (session fixture)

E2E = dict(train_context_encoder=True)


def test_non_finite_checkpoint_vectors_are_refused(tmp_path):
    """Half NaN resumed to other losses, exit 0; all NaN blamed the intact --index."""
    from lewisrag.training import checkpoint as C

    vectors = np.ones((4, 3), dtype=np.float32)
    vectors[2, 1] = np.nan
    np.save(tmp_path / C.LIVE_VECTORS, vectors)
    with pytest.raises(InputError, match=r"index_vectors\.npy: 1 of 4 vectors are not finite .*row 2.*damaged") as e:
        C.load_vectors(tmp_path, (4, 3))
    assert "\n" not in str(e.value)


def test_diverged_passage_vectors_are_not_saved(rag_inputs, tmp_path):  # noqa: F811
    """Finite weights that encode to NaN: final/index was all NaN, exit 0."""
    from lewisrag.training.rag import train_rag

    cfg = make_config(rag_inputs, freeze_retriever=True, lr=1e20, warmup=0, steps=1, eval_every=0, **E2E)
    with one_thread(), pytest.raises(InputError, match=r"^--lr: the context encoder's passage vectors hold NaN or inf "
                                                       r"after step 1: training diverged"):
        train_rag(cfg, tmp_path / "out")
    assert not (tmp_path / "out" / "final").exists()


def test_an_index_cut_longer_than_the_encoder_reads_is_refused(rag_inputs, tmp_path):  # noqa: F811
    """--swap of an index built at more tokens than the trained encoder's positions: a RuntimeError at the
    first step, and a half-made --out that refused the corrected rerun."""
    from lewisrag.training.rag import train_rag

    index = tmp_path / "index"
    shutil.copytree(rag_inputs["index"], index)
    manifest = json.loads((index / "manifest.json").read_text())
    manifest["build"]["max_length"] = 4096
    (index / "manifest.json").write_text(json.dumps(manifest))
    cfg = make_config(rag_inputs, index=str(index), swap=True, steps=1, eval_every=0, **E2E)
    with pytest.raises(InputError, match=r"manifest\.json: field 'build\.max_length': .* 4096 tokens, more than the \d+ "
                                         r"positions") as e:
        train_rag(cfg, tmp_path / "out")
    assert "\n" not in str(e.value)
    assert not (tmp_path / "out").exists()


def test_train_context_encoder_with_a_zero_lr_scale_is_refused():
    """Its learning rate is --lr times the scale: 0 trained nothing and re-encoded the start's vectors."""
    from lewisrag.training.configs import RagTrainConfig, check_rag_flags

    with pytest.raises(InputError, match=r"^--retriever-lr-scale: 0 leaves --train-context-encoder nothing to train"):
        check_rag_flags(RagTrainConfig(retriever_lr_scale=0.0, **E2E))
    check_rag_flags(RagTrainConfig(retriever_lr_scale=0.0))  # without it, a fixed question encoder as before
