"""A Refine(...) index's k_factor, `index verify` on IVF-SQ's residual ranges, `index tune` on a Flat
index, and the shared search past the index's passages: each test is something the FAISS index
code got wrong (a refine stage that added no recall, a damaged range that verified clean, an empty
setting recorded, a shared search that failed where the local one answers)."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import faiss
import numpy as np
import pytest

from conftest import run_main
from lewisrag.data.io import InputError, write_json
from lewisrag.data.records import Passage, read_passages
from lewisrag.index import store
from lewisrag.index.dense import DenseBuildConfig, DenseIndex, build_dense_index, build_faiss, write_dense_index
from lewisrag.index.tuning import exact_top_k, recall_at_k
from lewisrag.index.verify import verify_index
from test_index import dpr_ckpt  # noqa: F401  (a module fixture: the tiny DPR checkpoint)

N, D, K = 2000, 32, 5


def _index_folder(folder: Path, x: np.ndarray, factory: str, search_params: dict | None = None) -> Path:
    """A dense index folder over vectors `x` built as `factory` (no encoder: searched by vector)."""
    passages = [Passage(f"p{i}", "", f"text {i}") for i in range(len(x))]
    folder.mkdir()
    np.save(folder / "embeddings.npy", x)
    faiss.write_index(build_faiss(x, factory), str(folder / "index.faiss"))
    store.write_passages(folder, passages)
    manifest = {"format": store.FORMAT_VERSION, "kind": "dense", "metric": "inner_product", "faiss_factory": factory,
                "dim": x.shape[1], "n_passages": len(x), "content_hash": store.content_hash(passages),
                "encoder": {"ctx_fingerprint": "test"}}
    if search_params is not None:
        manifest["search_params"] = search_params
    write_json(folder / "manifest.json", manifest)
    return folder


def _vectors(n: int = N, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, D)).astype(np.float32)


def _recall(index: DenseIndex, queries: np.ndarray) -> float:
    _, exact = exact_top_k(np.asarray(index.embeddings), queries, K)
    _, rows = index.search(queries, K)
    return recall_at_k(rows, exact, K)


# --- Refine(...): its k_factor --------------------------------------------------------------------


def test_a_refine_stage_adds_recall_over_its_base_index(tmp_path):
    """At FAISS's k_factor 1 the refine stage re-ranked only the K candidates the base index had
    found: recall@K was the base index's to the digit. A load now gives it k_factor 4."""
    x = _vectors()
    queries = x[:200] + np.random.default_rng(1).normal(scale=0.3, size=(200, D)).astype(np.float32)
    base = DenseIndex.load(_index_folder(tmp_path / "base", x, "IVF16,PQ4x4", {"nprobe": 16}))
    refine = DenseIndex.load(_index_folder(tmp_path / "refine", x, "IVF16,PQ4x4,Refine(Flat)", {"nprobe": 16}))
    assert faiss.downcast_index(refine.faiss_index).k_factor == 4
    without, with_refine = _recall(base, queries), _recall(refine, queries)
    assert without < 0.9 and with_refine > without + 0.1, (without, with_refine)
    refine.set_search_params({"k_factor_rf": 1})  # as FAISS makes it: nothing gained
    assert _recall(refine, queries) == pytest.approx(without)


def test_a_refine_index_records_its_k_factor_and_every_load_and_tune_keeps_it(tiny_corpus, dpr_ckpt, tmp_path,  # noqa: F811
                                                                              monkeypatch, capsys):
    out = tmp_path / "refine"
    manifest = build_dense_index(read_passages(tiny_corpus["passages"]), dpr_ckpt, out,
                                 DenseBuildConfig(factory="IVF4,PQ4x4,Refine(Flat)", device="cpu"))
    assert manifest["refine_k_factor"] == 4
    index = DenseIndex.load(out)
    assert faiss.downcast_index(index.faiss_index).k_factor == 4
    written = write_dense_index(index, tmp_path / "written")  # written and read back
    assert written["refine_k_factor"] == 4
    assert faiss.downcast_index(DenseIndex.load(tmp_path / "written").faiss_index).k_factor == 4
    # a recorded k_factor is what a load applies, whatever the FAISS file holds
    m = json.loads((out / "manifest.json").read_text())
    write_json(out / "manifest.json", {**m, "refine_k_factor": 8})
    assert faiss.downcast_index(DenseIndex.load(out).faiss_index).k_factor == 8
    # `index tune` measures at it, and keeps it beside the nprobe it records
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": f"q{i}", "question": f"who leads country {i}?", "answers": ["x"]}) + "\n"
                                 for i in range(25)))  # 5 held out (--held-out 0.2), the fewest a split takes
    code, stdout, err = run_main(monkeypatch, capsys, "index", "tune", "--index", out, "--questions", questions,
                                 "--n-docs", "3", "--target-recall", "0.5", "--json")
    assert code == 0, err
    assert "nprobe" in json.loads(stdout)["search_params"]
    assert json.loads((out / "manifest.json").read_text())["refine_k_factor"] == 8
    assert faiss.downcast_index(DenseIndex.load(out).faiss_index).k_factor == 8
    # a damaged one is refused by name, not handed to FAISS
    for bad in (0, "4", 10**12, True):
        write_json(out / "manifest.json", {**m, "refine_k_factor": bad})
        with pytest.raises(InputError, match="field 'refine_k_factor': expected a whole number from 1 to 4096"):
            DenseIndex.load(out)


def test_hnsw_under_a_refine_stage_has_efsearch_to_tune():
    from lewisrag.index.tuning import search_knob

    index = faiss.index_factory(8, "HNSW16,Refine(Flat)", faiss.METRIC_INNER_PRODUCT)
    assert search_knob(index, results=20) == ("efSearch", 20, 4096)


# --- index verify: IVF-SQ's residual ranges -------------------------------------------------------


def _damage_range(folder: Path, value: float, at: int = 3) -> None:
    index = faiss.read_index(str(folder / "index.faiss"))
    ivf = faiss.downcast_index(index)
    trained = faiss.vector_to_array(ivf.sq.trained)
    trained[at] = value
    faiss.copy_array_to_vector(trained, ivf.sq.trained)
    faiss.write_index(index, str(folder / "index.faiss"))


def test_ivf_sq_residual_ranges_are_checked(tmp_path):
    """An IVF-SQ8 index's ranges (of residuals to the coarse centroids) were checked finite only:
    one damaged to a finite value far outside verified clean, while every code decodes by it."""
    clean = _index_folder(tmp_path / "clean", _vectors(600), "IVF8,SQ8")
    result = {c["check"]: c["result"] for c in verify_index(clean)["checks"]}["faiss"]
    assert "residuals to their lists' centroids take" in result
    for name, value in (("far", -6.3e19), ("inf", np.inf), ("nan", np.nan)):
        folder = tmp_path / name
        shutil.copytree(clean, folder)
        _damage_range(folder, value)
        with pytest.raises(InputError, match="index.faiss: .*(range of dimension 3|NaN or infinity)"):
            verify_index(folder)


# --- index tune on a Flat index -------------------------------------------------------------------


def test_index_tune_on_a_flat_index_says_there_is_nothing_to_tune(tmp_path, monkeypatch, capsys):
    """It measured the exact search against itself and recorded an empty setting (exit 0)."""
    folder = _index_folder(tmp_path / "flat", _vectors(50), "Flat")
    before = (folder / "manifest.json").read_text()
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "q", "question": "who?", "answers": ["x"]}) + "\n")
    code, out, err = run_main(monkeypatch, capsys, "index", "tune", "--index", folder, "--questions", questions)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and out == "" and len(lines) == 1, err
    assert lines[0] == (f"error: {folder}: field 'faiss_factory': a Flat index searches exactly: it has no nprobe or "
                        "efSearch to tune, and its recall against exact search is 1; nothing recorded")
    assert (folder / "manifest.json").read_text() == before


# --- the shared search past the index's passages --------------------------------------------------


def test_the_shared_search_past_the_passages_gives_what_the_local_search_gives(tmp_path):
    """The server's result was copied into (B, k) tensors: a search that keeps the N passages there
    are (a product search) ended in a torch shape error where the local search answered."""
    import torch.distributed as dist

    from lewisrag.index.shared import NodeSearch

    x = _vectors(10)
    folder = _index_folder(tmp_path / "small", x, "Flat")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        for product in (False, True):
            index = DenseIndex.load(folder)
            if product:
                index.search_on("cpu")
            shared = NodeSearch.for_this_node(index)
            for k in (4, 10, 12):
                want_s, want_r = index.search(x[:3], k)
                got_s, got_r = shared.search(x[:3], k)
                assert got_r.tolist() == want_r.tolist() and got_s.shape == want_s.shape, (product, k)
                np.testing.assert_allclose(got_s, want_s)
    finally:
        dist.destroy_process_group()


def test_tune_dense_refuses_a_flat_index_as_the_command_does(tmp_path):
    """The library's `tune_dense`, not only `lewisrag index tune`, refuses a Flat index (nothing to tune)."""
    from lewisrag.index.search import tune_dense

    x = np.random.default_rng(0).standard_normal((20, 8)).astype(np.float32)
    folder = _index_folder(tmp_path / "flat", x, "Flat")
    before = (folder / "manifest.json").read_text()
    with pytest.raises(InputError, match="a Flat index searches exactly"):
        tune_dense(folder, ["q"])
    assert (folder / "manifest.json").read_text() == before
