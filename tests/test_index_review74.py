"""Index edges a review found: a FAISS write that fails (a full disk) said in one line, by a build and
by `export`; `index targets` saying how many questions a compressed index's search left short; an
unfinished build named by every reader of its index; an HNSW graph of absurdly many links, a
Refine(...) index's pre-transforms and the training needs of its PQ refused before encoding, and
std::bad_alloc in FAISS said in one line."""

from __future__ import annotations

import json

import faiss
import numpy as np
import pytest

from conftest import run_main, write_jsonl
from lewisrag.data.io import InputError
from lewisrag.data.records import read_passages
from lewisrag.index import store
from lewisrag.index.dense import DenseBuildConfig, build_dense_index, build_faiss, check_factory, faiss_build
from test_index_edges2 import dpr_ckpt  # noqa: F401  (a module fixture: a 5-step DPR)
from test_rag_train import rag_inputs, trained_rag  # noqa: F401  (session fixtures)




WRITE_INDEX = faiss.write_index


def _full_disk(index, path, *flags):
    """faiss.write_index on a disk that fills up: part of the file written, then FAISS's RuntimeError
    (a write into memory, serialize_index's, as FAISS does it)."""
    if not isinstance(path, str):
        return WRITE_INDEX(index, path, *flags)
    with open(path, "wb") as f:
        f.write(b"\0" * 100)
    raise RuntimeError("Error in void faiss::write_index(const Index*, IOWriter*, int) at /project/faiss/impl/"
                       f"index_write.cpp:499: Error: 'ret == (size * 4)' failed: write error in {path}: 100 != 7680 "
                       "(No space left on device)")


# --- a FAISS write that fails -----------------------------------------------------------------------------


def test_a_build_whose_faiss_write_fails_says_so_in_one_line_and_resumes(tiny_corpus, dpr_ckpt, tmp_path, monkeypatch,
                                                                          capsys):
    """FAISS reports a full disk as RuntimeError, not OSError: the build ended in a traceback (exit 3).
    Now one line naming the file, no index, the encoded vectors kept in IDX.partial for the rerun."""
    idx = tmp_path / "idx"
    args = ("index", "build", "--passages", tiny_corpus["passages"], "--encoder", dpr_ckpt, "--out", idx)
    with monkeypatch.context() as m:
        m.setattr(faiss, "write_index", _full_disk)
        code, _, err = run_main(m, capsys, *args)
    partial = store.partial_dir(idx)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: {partial / 'index.faiss'}: FAISS could not write the index: write error in ")
    assert err.rstrip().endswith("(No space left on device)"), err
    assert not idx.exists() and (partial / "embeddings.npy").is_file()
    assert not list(partial.glob("*index.faiss*")), list(partial.iterdir())  # no half-written file left
    code, _, err = run_main(monkeypatch, capsys, *args)
    assert code == 0 and "discarded" not in err, err
    assert (idx / "index.faiss").is_file()


def test_an_export_whose_faiss_write_fails_names_its_file(trained_rag, rag_inputs, tmp_path, monkeypatch):  # noqa: F811
    from lewisrag.experiments.export import export_rag

    out = tmp_path / "exports" / "rag"
    monkeypatch.setattr(faiss, "write_index", _full_disk)
    with pytest.raises(InputError, match=r"FAISS could not write the index: write error in .*No space left on device") as e:
        export_rag(trained_rag, rag_inputs["index"], out)
    assert e.value.source == str(out.resolve() / "passages.faiss") and "\n" not in str(e.value)
    assert not list(tmp_path.iterdir())  # nothing written: the staging folder gone, and the folder made for it


# --- index targets on a compressed index ------------------------------------------------------------------


def test_targets_notes_a_compressed_index_whose_search_came_back_short(tiny_corpus, dpr_ckpt, tmp_path, monkeypatch,
                                                                        capsys):
    """IVF8 probing 1 list finds fewer than 20 of 60 passages: the title said "top 20 passages", with
    no word of it (only BM25's short lists were noted)."""
    build_dense_index(read_passages(tiny_corpus["passages"]), dpr_ckpt, tmp_path / "ivf", DenseBuildConfig(factory="IVF8,Flat"))
    manifest = json.loads((tmp_path / "ivf" / "manifest.json").read_text())
    manifest["search_params"] = {"nprobe": 1}  # as `index tune` records a setting
    (tmp_path / "ivf" / "manifest.json").write_text(json.dumps(manifest))
    qa = [{**r, "answers": [r["answers"][0].replace(" ", r"\s+")], "answer_match": "regex"}
          for r in map(json.loads, tiny_corpus["qa"].read_text().splitlines())]
    questions = write_jsonl(tmp_path / "regex.jsonl", qa)
    args = ("index", "targets", "--index", tmp_path / "ivf", "--questions", questions, "--n-docs", 20)
    code, out, err = run_main(monkeypatch, capsys, *args, "--out", tmp_path / "t.jsonl", "--json")
    assert code == 0, err
    short = json.loads(out)["fewer_hits"]
    assert short > 0, out
    assert f"note: {short} questions found fewer than 20 passages" in err and "at nprobe 1 reaches no more" in err, err
    code, out, err = run_main(monkeypatch, capsys, *args, "--out", tmp_path / "t2.jsonl")
    assert code == 0, err
    assert f"(top 20 passages; {short} questions found fewer)" in " ".join(out.split()), out


# --- an unfinished build ----------------------------------------------------------------------------------


def test_every_reader_names_an_unfinished_build(tiny_corpus, tmp_path, monkeypatch, capsys):
    """A build killed before it finished leaves only IDX.partial: readers said "index directory not
    found", the resume hint only where IDX existed."""
    idx = tmp_path / "idx"
    store.partial_dir(idx).mkdir()
    hint = "index directory not found (an unfinished build: run `lewisrag index build` again to resume)"
    with pytest.raises(InputError, match=hint.replace("(", r"\(").replace(")", r"\)")):
        store.read_manifest(idx)
    for args in (("index", "search", "--query", "x"), ("index", "verify"),
                 ("eval", "retrieval", "--questions", tiny_corpus["qa"])):
        code, _, err = run_main(monkeypatch, capsys, *args, "--index", idx)
        assert code == 2 and err == f"error: {idx}: {hint}\n", (args, err)


# --- FAISS factories --------------------------------------------------------------------------------------


@pytest.mark.parametrize("factory", ["HNSW100000000", "IVF8_HNSW513,Flat", "HNSW1000,SQ8"])
def test_an_hnsw_graph_of_too_many_links_is_refused_before_encoding(factory):
    """HNSW100000000 passed the check and failed with std::bad_alloc once every passage was encoded."""
    with pytest.raises(InputError, match=f"'{factory}' keeps \\d+ links a vector, more than the 512") as e:
        check_factory(factory, 32, 400)
    assert e.value.source == "--faiss"
    check_factory("HNSW512", 32, 400)


def test_faiss_running_out_of_memory_is_one_line_naming_faiss(monkeypatch):
    """FAISS's std::bad_alloc reaches Python as MemoryError, which ended in a traceback."""
    class OutOfMemory(faiss.IndexFlatIP):
        def add(self, x):
            raise MemoryError("std::bad_alloc")

    monkeypatch.setattr(faiss_build, "_new_index", lambda factory, dim: OutOfMemory(dim))
    with pytest.raises(InputError, match="FAISS could not add 10 vectors to 'Flat': std::bad_alloc") as e:
        build_faiss(np.ones((10, 8), np.float32), "Flat")
    assert e.value.source == "--faiss"


@pytest.mark.parametrize("factory, message", [
    ("IVF8,Flat,Refine(PQ4)", "needs at least 256 passages to train (256 centroids per product-quantizer code)"),
    ("IVF8,Flat,Refine(OPQ4,PQ4x4)", "needs at least 256 passages to train (256 OPQ centroids per code)"),
    ("L2norm,IVF8,Flat,Refine(Flat)", "its NormalizationTransform pre-transform changes the inner products"),
    ("IVF8,Flat,Refine(PCAW16,Flat)", "whitens (PCAW)"),
])
def test_a_refine_index_is_held_to_the_checks_before_encoding(factory, message):
    """Only the top index's pre-transforms and quantizer were checked: a Refine's PQ failed to train once
    every passage was encoded, and a base under L2norm ranked its candidates by cosine."""
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        check_factory(factory, 32, 200)
    assert e.value.source == "--faiss"


def test_a_refine_pq_with_enough_passages_passes_and_builds():
    x = np.random.default_rng(0).standard_normal((300, 32)).astype(np.float32)
    for factory, n in (("IVF8,Flat,Refine(PQ4)", 300), ("IVF8,Flat,Refine(PQ4x4)", 200)):
        check_factory(factory, 32, n)
        assert build_faiss(x[:n], factory).ntotal == n
