"""An audit of loading and searching indexes and of `index tune`, from the user's side: each test is
a mistake, a damaged file or an edge case that once loaded in silence, ended in a traceback, or was
refused for a field the command never reads."""

from __future__ import annotations

import json
import shutil

import faiss
import numpy as np
import pytest

from conftest import run_main, write_jsonl
from lewisrag.data.io import InputError
from lewisrag.data.records import Passage, read_passages, read_qa, read_questions
from lewisrag.index import open_retriever
from lewisrag.index.bm25 import BM25Index, build_bm25_index
from lewisrag.index.dense import DenseBuildConfig, DenseIndex, build_dense_index, build_faiss
from test_index import dpr_ckpt  # noqa: F401  (a module fixture: the tiny DPR checkpoint)


@pytest.fixture(scope="module")
def flat(tiny_corpus, dpr_ckpt, tmp_path_factory):  # noqa: F811
    """A Flat index over the tiny corpus (60 passages)."""
    out = tmp_path_factory.mktemp("load") / "flat"
    build_dense_index(read_passages(tiny_corpus["passages"]), dpr_ckpt, out, DenseBuildConfig())
    return out


def _variant(flat, tmp_path, name, factory=None, vector_dtype=None, manifest=None):
    """A copy of `flat` whose index.faiss is built as `factory` from its own vectors, whose
    embeddings.npy is stored as `vector_dtype`, and whose manifest `manifest` updates; a field not
    changed in the manifest keeps the Flat float32 index's value."""
    copy = tmp_path / name
    shutil.copytree(flat, copy)
    vectors = np.load(copy / "embeddings.npy")
    if factory is not None:
        faiss.write_index(build_faiss(vectors, factory), str(copy / "index.faiss"))
    if vector_dtype is not None:
        np.save(copy / "embeddings.npy", vectors.astype(vector_dtype))
    if manifest is not None:
        edited = json.loads((copy / "manifest.json").read_text())
        for key, value in manifest.items():
            if key == "build":
                edited["build"].update(value)
            else:
                edited[key] = value
        (copy / "manifest.json").write_text(json.dumps(edited))
    return copy


def _one_line(code, err, *needles):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and "Traceback" not in err and len(lines) == 1 and lines[0].startswith("error: "), err
    assert all(n in lines[0] for n in needles), (needles, lines[0])


# --- what every load checks of the files against the manifest ---------------------------------------------


@pytest.mark.parametrize("factory", ["HNSW8", "IVF4,Flat"])
def test_a_load_refuses_a_faiss_file_of_another_kind_than_the_manifest_says(flat, tmp_path, factory, monkeypatch, capsys):
    """A Flat manifest over an HNSW or IVF index.faiss of the same size and width loaded, searched
    approximately, and was tuned, exported and reported as Flat; only `index verify` said so."""
    index = _variant(flat, tmp_path, "other_kind", factory=factory)
    with pytest.raises(InputError, match=f"says 'Flat' .*, but index.faiss holds {'IndexHNSWFlat' if 'HNSW' in factory else 'IndexIVFFlat'}") as e:
        DenseIndex.load(index)
    assert e.value.source == str(index / "manifest.json") and e.value.field == "faiss_factory"
    with pytest.raises(InputError, match="field 'faiss_factory'"):
        open_retriever(index)
    code, _, err = run_main(monkeypatch, capsys, "index", "search", "--index", index, "-q", "leader")
    _one_line(code, err, "manifest.json: field 'faiss_factory'", "build the index again")
    # the same file under a manifest that says what it is loads and searches
    fixed = DenseIndex.load(_variant(flat, tmp_path, "said_so", factory=factory, manifest={"faiss_factory": factory}))
    assert fixed.search(np.ones((1, fixed.dim), np.float32), 3)[1].shape == (1, 3)


def test_a_manifest_factory_of_more_lists_than_passages_is_refused_before_faiss_builds_it(flat, tmp_path):
    """Checking the factory string by building an empty index of it must not set aside 10**9 lists
    (48 GB) for a manifest damaged into that: no build trains more lists than it has passages."""
    index = _variant(flat, tmp_path, "huge", manifest={"faiss_factory": "IVF1000000000,Flat"})
    with pytest.raises(InputError, match="1000000000 inverted lists for 60 passages") as e:
        DenseIndex.load(index)
    assert e.value.field == "faiss_factory"


@pytest.mark.parametrize("recorded, stored", [("float32", "float16"), ("float16", "float32")])
def test_a_load_refuses_vectors_of_another_type_than_the_manifest_says(flat, tmp_path, recorded, stored):
    """The .npy header's type against build.vector_dtype: a vector file swapped for another build's
    of the same shape loaded, and `export` and the reports said the manifest's type; a process whose
    searches another serves (with_faiss=False) reads the vectors, so it checks them too."""
    index = _variant(flat, tmp_path, "other_type", vector_dtype=stored, manifest={"build": {"vector_dtype": recorded}})
    for with_faiss in (True, False):
        with pytest.raises(InputError, match=f"says the stored vectors are {recorded}, embeddings.npy holds {stored}") as e:
            DenseIndex.load(index, with_faiss=with_faiss)
        assert e.value.source == str(index / "manifest.json") and e.value.field == "build.vector_dtype"
    sound = _variant(flat, tmp_path, "same_type", vector_dtype=stored, manifest={"build": {"vector_dtype": stored}})
    assert DenseIndex.load(sound).embeddings.dtype == np.dtype(stored)


def test_a_faiss_file_that_asks_for_more_memory_than_there_is_is_one_line(flat, monkeypatch):
    """A size field damaged into terabytes made FAISS raise MemoryError (std::bad_alloc), which no
    handler took: a traceback, exit 3."""
    from lewisrag.index.dense import files  # where _read_faiss looks faiss up

    def bad_alloc(*args):
        raise MemoryError("std::bad_alloc")

    monkeypatch.setattr(files.faiss, "read_index", bad_alloc)
    with pytest.raises(InputError, match="index.faiss: cannot read the FAISS index: it asks for more memory"):
        DenseIndex.load(flat)


def _damage_a_row_number(index, row: int) -> None:
    """The first row number of the first non-empty inverted list of `index`'s IVF file set to `row`."""
    ivf_index = faiss.read_index(str(index / "index.faiss"))
    ivf = faiss.extract_index_ivf(ivf_index)
    k = next(k for k in range(ivf.nlist) if ivf.invlists.list_size(k))
    faiss.rev_swig_ptr(ivf.invlists.get_ids(k), 1)[0] = row
    faiss.write_index(ivf_index, str(index / "index.faiss"))


@pytest.mark.parametrize("rerank_depth", [None, 60])
def test_a_search_that_finds_a_row_past_the_passages_is_one_line(flat, tmp_path, rerank_depth, monkeypatch, capsys):
    """An inverted list's row number damaged past the passages (which a load does not read: 168 MB
    at 21M) came back from FAISS and ended in an IndexError where the hit or its vector was read."""
    index = _variant(flat, tmp_path, "damaged_row", factory="IVF4,Flat",
                     manifest={"faiss_factory": "IVF4,Flat", "rerank_depth": rerank_depth})
    _damage_a_row_number(index, 5000)
    dense = DenseIndex.load(index)  # nprobe 16 by default: every list searched
    with pytest.raises(InputError, match="index.faiss: its search found row 5000, past the index's 60 passages"):
        dense.search(np.ones((2, dense.dim), np.float32), 60)
    code, _, err = run_main(monkeypatch, capsys, "index", "search", "--index", index, "-q", "leader", "--n-docs", 60)
    _one_line(code, err, "found row 5000", "index verify")


def test_bm25_files_of_another_size_are_refused_at_load(tiny_corpus, tmp_path, monkeypatch, capsys):
    """BM25 files of a larger index beside these passages loaded, and a search returned rows past
    the passages: an IndexError reading the hit. The count is in the files' parameters: every load
    checks it, as `index verify` did."""
    passages = read_passages(tiny_corpus["passages"])
    build_bm25_index(passages, tmp_path / "all")
    build_bm25_index(passages[:20], tmp_path / "mixed")
    shutil.rmtree(tmp_path / "mixed" / "bm25")
    shutil.copytree(tmp_path / "all" / "bm25", tmp_path / "mixed" / "bm25")
    with pytest.raises(InputError, match="indexes 60 documents, the index 20 passages") as e:
        BM25Index.load(tmp_path / "mixed")
    assert e.value.field == "num_docs" and e.value.source == str(tmp_path / "mixed" / "bm25" / "params.index.json")
    code, _, err = run_main(monkeypatch, capsys, "index", "search", "--index", tmp_path / "mixed", "-q", "capital founded",
                            "--n-docs", 20)
    _one_line(code, err, "params.index.json: field 'num_docs'")


def test_index_search_says_when_it_found_fewer_passages_than_asked(flat, tmp_path, monkeypatch, capsys):
    """An IVF index searched at nprobe 1 finds only its nearest list's passages: `index search
    --n-docs 60` printed a few hits with no word of the rest."""
    index = _variant(flat, tmp_path, "narrow", factory="IVF16,Flat",
                     manifest={"faiss_factory": "IVF16,Flat", "search_params": {"nprobe": 1}})
    code, out, err = run_main(monkeypatch, capsys, "index", "search", "--index", index, "-q", "leader", "--n-docs", 60, "--json")
    hits = json.loads(out)
    assert code == 0 and len(hits) < 60, err
    assert f"note: the search found {len(hits)} of the 60 passages asked for" in err and "at nprobe 1" in err
    code, _, err = run_main(monkeypatch, capsys, "index", "search", "--index", flat, "-q", "leader", "--n-docs", 60, "--json")
    assert code == 0 and "note" not in err


# --- question sets without answers ------------------------------------------------------------------------


def _questions_only(tiny_corpus, tmp_path, keep=("question",), rename=None):
    rows = [{(rename or {}).get(k, k): v for k, v in r.items() if k in keep}
            for r in map(json.loads, tiny_corpus["qa"].read_text().splitlines())]
    return write_jsonl(tmp_path / "questions.jsonl", rows)


def test_index_tune_takes_questions_without_answers(flat, tiny_corpus, tmp_path, monkeypatch, capsys):
    """`index tune` measures recall against exact search: it reads questions alone, yet it read
    them with the QA reader, which refused a file without answers ("cannot tell the QA format")."""
    index = _variant(flat, tmp_path, "ivf", factory="IVF4,Flat", manifest={"faiss_factory": "IVF4,Flat"})
    questions = _questions_only(tiny_corpus, tmp_path)
    code, out, err = run_main(monkeypatch, capsys, "index", "tune", "--index", index, "--questions", questions, "--json")
    assert code == 0, err
    assert json.loads(out)["questions"] == 30 and json.loads(out)["knob"] == "nprobe"
    queries = _questions_only(tiny_corpus, tmp_path, rename={"question": "query"})
    code, out, err = run_main(monkeypatch, capsys, "index", "tune", "--index", index, "--questions", queries,
                              "--qa-fields", "question=query", "--json")
    assert code == 0 and json.loads(out)["questions"] == 30, err
    code, _, err = run_main(monkeypatch, capsys, "index", "tune", "--index", index, "--questions", queries)
    _one_line(code, err, "questions.jsonl:1: field 'question': missing")
    code, _, err = run_main(monkeypatch, capsys, "index", "tune", "--index", index, "--questions",
                            write_jsonl(tmp_path / "empty.jsonl", []))
    _one_line(code, err, "empty.jsonl: no questions")


def test_eval_retrieval_takes_questions_with_gold_ids_and_no_answers(flat, tiny_corpus, tmp_path, monkeypatch, capsys):
    """hit@k and recall@k need questions and gold passage ids; a retrieval set without answers was
    refused as a QA file it could not tell the format of. Read so, it scores as the QA file does."""
    gold_only = _questions_only(tiny_corpus, tmp_path, keep=("id", "question", "gold_passage_ids"))
    scores = []
    for questions in (gold_only, tiny_corpus["qa"]):
        code, out, err = run_main(monkeypatch, capsys, "eval", "retrieval", "--index", flat, "--questions", questions, "--json")
        assert code == 0, err
        scores.append(json.loads(out)[str(flat)])
    assert scores[0] == scores[1] and scores[0]["n"] == 30


def test_read_questions_gives_read_qas_ids_in_every_format(tmp_path):
    """The same ids as the QA reader, so that per-question results line up: a hub format's own id
    field (trivia_qa's question_id), ids derived from the question where there are none."""
    files = {
        "trivia": [{"question_id": "tq1", "question": "a?", "answer": {"value": "x", "aliases": []}, "gold_passage_ids": ["p1"]}],
        "nq_open": [{"question": "a?", "answer": ["x"]}, {"question": "a?", "answer": ["y"]}],
        "bare": [{"question": "a?"}, {"question": "a?", "gold_passage_ids": ["p2"]}],
    }
    for name, rows in files.items():
        path = write_jsonl(tmp_path / f"{name}.jsonl", rows)
        got = [(q.id, q.question, q.gold_passage_ids) for q in read_questions(path)]
        if name != "bare":
            assert got == [(q.id, q.question, q.gold_passage_ids) for q in read_qa(path)]
        assert len({qid for qid, _, _ in got}) == len(rows)
    assert [q.id for q in read_questions(tmp_path / "bare.jsonl")] == [q.id for q in read_qa(tmp_path / "nq_open.jsonl")]


def test_a_float16_hnsw_index_as_built_passes_every_load_check(tmp_path, dpr_ckpt):  # noqa: F811
    """An index as `index build --faiss HNSW8 --vector-dtype float16` writes it passes the checks a
    load makes (its factory and its vectors' type as the manifest says) and is searched through the
    memory map, rows read as float32."""
    passages = [Passage(f"p{i}", f"T{i}", f"passage {i} about topic {i % 5}") for i in range(40)]
    build_dense_index(passages, dpr_ckpt, tmp_path / "half", DenseBuildConfig(factory="HNSW8", vector_dtype="float16"))
    index = DenseIndex.load(tmp_path / "half")
    assert isinstance(index.embeddings, np.memmap) and index.embeddings.dtype == np.float16
    _, rows = index.search(np.ones((1, index.dim), np.float32), 5)
    assert index.vectors(rows).dtype == np.float32 and index.vectors(rows).shape == (1, 5, index.dim)
