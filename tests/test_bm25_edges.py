"""Edges of the BM25 index from the user's side: damaged parameters and score arrays that a load
trusted (a traceback at the search, exit 3, after `index verify` passed them), a corpus with no
word BM25 indexes, and BM25's zero-score padding counted as retrieved by recall."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from conftest import run_main, write_jsonl
from lewisrag.data.io import InputError
from lewisrag.data.records import Passage, read_passages, read_qa
from lewisrag.index import open_retriever, retrieval_recall
from lewisrag.index.bm25 import BM25Index, build_bm25_index


def _one_line(code, err, *needles):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and "Traceback" not in err and len(lines) == 1 and lines[0].startswith("error: "), err
    assert all(n in lines[0] for n in needles), (needles, lines[0])


@pytest.fixture(scope="module")
def built(tiny_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("bm25") / "idx"
    build_bm25_index(read_passages(tiny_corpus["passages"]), out)
    return out


def _copy(built, tmp_path):
    copy = tmp_path / "d"
    shutil.copytree(built, copy)
    return copy


def _edit_params(index, **changes):
    file = index / "bm25" / "params.index.json"
    params = json.loads(file.read_text())
    params.update(changes)
    file.write_text(json.dumps(params))


def _search_and_verify(index, monkeypatch, capsys, *needles):
    """`index search` and `index verify` both refuse the damage in one line, exit 2."""
    code, _, err = run_main(monkeypatch, capsys, "index", "search", "--index", index, "-q", "capital founded",
                            "--n-docs", 3)
    _one_line(code, err, *needles)
    code, _, err = run_main(monkeypatch, capsys, "index", "verify", "--index", index)
    _one_line(code, err, *needles)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("num_docs", 60.0, "indexes 60.0 documents"),  # == 60: passed, then np.zeros(60.0) was a TypeError
    ("num_docs", True, "indexes True documents"),
    ("dtype", "float99", "'float99' is not a numpy float type"),  # np.dtype('float99'): a TypeError
    ("dtype", "int32", "'int32' is not a numpy float type"),  # float scores summed into integers
    ("dtype", None, "None is not a numpy float type"),  # np.dtype(None) is float64: no name a build writes
    ("int_dtype", "float32", "'float32' is not a numpy integer type"),
    ("int_dtype", "int8", "'int8' cannot hold the vocabulary's word ids"),  # an OverflowError at the search
    ("backend", "numba", "'numba' is not the backend"),  # bm25s: ImportError (numba is not installed)
])
def test_damaged_bm25_params_are_refused_at_load(built, tmp_path, monkeypatch, capsys, field, value, message):
    index = _copy(built, tmp_path)
    _edit_params(index, **{field: value})
    params = index / "bm25" / "params.index.json"
    with pytest.raises(InputError, match=message) as e:
        BM25Index.load(index)
    assert e.value.field == field and e.value.source == str(params)
    _search_and_verify(index, monkeypatch, capsys, f"params.index.json: field '{field}'", message)


def test_bm25_params_a_build_leaves_out_take_bm25s_defaults(built, tmp_path):
    """An index whose params.index.json lacks backend, dtype and int_dtype (as bm25s fills them in
    on load) still loads and searches."""
    index = _copy(built, tmp_path)
    file = index / "bm25" / "params.index.json"
    params = json.loads(file.read_text())
    for key in ("backend", "dtype", "int_dtype"):
        params.pop(key, None)
    file.write_text(json.dumps(params))
    scores, rows = BM25Index.load(index).search(["capital founded"], 3)
    assert scores.shape == rows.shape == (1, 3)


@pytest.mark.parametrize(("name", "damage", "message"), [
    ("data", lambda a: a.astype("U3"), "holds a 1-D array of <U3, not a 1-D array of floats"),
    ("data", lambda a: a.astype(np.int32), "holds a 1-D array of int32, not a 1-D array of floats"),
    ("indices", lambda a: a.astype(np.float32), "holds a 1-D array of float32, not a 1-D array of integers"),
    ("indptr", lambda a: a.reshape(1, -1), "holds a 2-D array of"),
    ("indices", lambda a: a[:-1], "indices.csc.index.npy"),  # shorter than data: a ValueError in np.add.at
])
def test_damaged_bm25_score_arrays_are_refused_at_load(built, tmp_path, monkeypatch, capsys, name, damage, message):
    index = _copy(built, tmp_path)
    file = index / "bm25" / f"{name}.csc.index.npy"
    np.save(file, damage(np.load(file)))
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        BM25Index.load(index)
    _search_and_verify(index, monkeypatch, capsys, message)


def test_a_sound_bm25_index_still_loads_searches_and_verifies(built, monkeypatch, capsys):
    code, out, err = run_main(monkeypatch, capsys, "index", "verify", "--index", built)
    assert code == 0, err


def test_passages_of_stop_words_alone_are_refused(tmp_path, monkeypatch, capsys):
    """bm25s failed on the empty vocabulary (max() arg is an empty sequence): a traceback, exit 3."""
    passages = write_jsonl(tmp_path / "stop.jsonl", [{"id": "a", "title": "The", "text": "It is what it is."},
                                                    {"id": "b", "title": "Of", "text": "To be, or was it?"}])
    with pytest.raises(InputError, match="no passage holds a word BM25 indexes") as e:
        BM25Index.in_memory([Passage("a", "The", "It is what it is.")])
    assert e.value.source == "--passages"
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--encoder", "bm25", "--passages", passages,
                            "--out", tmp_path / "idx")
    _one_line(code, err, "--passages: no passage holds a word BM25 indexes (stop words aside)")
    assert not (tmp_path / "idx").exists()


def test_bm25_recall_leaves_out_the_zero_score_padding(tmp_path):
    """BM25 fills its top k with passages sharing no word with the question, in index order, score
    0: a question sharing no word with any passage once had hit@k 1 at a k reaching its gold one."""
    passages = [{"id": f"p{i}", "title": f"Doc{i}", "text": f"Filler text number w{i}."} for i in range(30)]
    questions = [{"id": "q1", "question": "Who painted Guernica?", "answers": ["Picasso"], "gold_passage_ids": ["p3"]},
                 {"id": "q2", "question": "What is w7 about", "answers": ["x"], "gold_passage_ids": ["p7"]}]
    build_bm25_index(read_passages(write_jsonl(tmp_path / "p.jsonl", passages)), tmp_path / "idx")
    retriever = open_retriever(tmp_path / "idx")
    hits = retriever.search(["Who painted Guernica?"], 28)[0]
    assert len(hits) == 28 and all(h.score == 0 for h in hits) and "p3" in [h.id for h in hits]  # the padding
    r = retrieval_recall(retriever, read_qa(write_jsonl(tmp_path / "q.jsonl", questions)), [1, 28])
    assert r["first_gold"] == {"q1": None, "q2": 0}
    assert r["hit@28"] == r["hit@1"] == 0.5 and r["per_question"]["q1"] == {"1": 0.0, "28": 0.0}


@pytest.mark.parametrize("damage", [
    lambda v: {"a": 0},  # cut to one word: every question scored zero, exit 0
    lambda v: {**v, next(iter(v)): -1},  # an id of -1
    lambda v: {w: i + 1 for w, i in v.items()},  # renumbered from 1
    lambda v: {w: 0 for w in v},  # every word one id
])
def test_a_damaged_bm25_vocabulary_is_refused(built, tmp_path, monkeypatch, capsys, damage):
    index = _copy(built, tmp_path)
    file = index / "bm25" / "vocab.index.json"
    file.write_text(json.dumps(damage(json.loads(file.read_text()))))
    with pytest.raises(InputError, match="words are not numbered 0 to"):
        BM25Index.load(index)
    _search_and_verify(index, monkeypatch, capsys, "vocab.index.json", "build the index again")
