"""An audit of `swap`, `ask`, `index verify` and `index tune` from the user's side: each test is a
mistake or edge case that once gave a traceback, a silent skip or a misleading result."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import run_main, write_jsonl
from lewisrag.data.io import InputError
from test_rag_train import rag_inputs, trained_rag  # noqa: F401  (session fixtures)


def _edit_manifest(index, tmp_path, edit, name="edited"):
    """A copy of the index at `index` whose manifest.json `edit(manifest)` changed."""
    copy = tmp_path / name
    shutil.copytree(index, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    edit(manifest)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


def _echo_answers(monkeypatch):
    """swap_matrix's answerer replaced by one that answers nothing, instantly: these tests are about
    what is scored and said, not about what a tiny model answers."""
    from lewisrag.experiments import swap

    def answer(model, tokenizers, index, questions, *, on_batch=None, **kw):
        if on_batch:
            on_batch(len(questions))
        return [""] * len(questions)

    monkeypatch.setattr(swap, "answer_questions", answer)


def _tiny_index(rag_inputs, tmp_path, n):  # noqa: F811
    """A dense index over the first `n` passages of snapshot A, by the fixture's DPR."""
    from lewisrag.data.records import read_passages
    from lewisrag.index.dense import build_dense_index

    out = tmp_path / f"index_{n}"
    build_dense_index(read_passages(rag_inputs["world"] / "passages_a.jsonl")[:n], rag_inputs["dpr"], out)
    return out


# --- swap ---------------------------------------------------------------------------------------


def test_swap_counts_the_questions_it_leaves_out(rag_inputs, trained_rag, tmp_path, monkeypatch, capsys):  # noqa: F811
    """Long-form questions and not_in_kb ones without an answer cannot be scored by exact match; they
    were dropped in silence (a file of 4 questions scored as 2, the output naming neither number)."""
    from lewisrag.experiments.swap import swap_matrix

    qa = write_jsonl(tmp_path / "mixed.jsonl", [
        {"id": "s1", "question": "Who leads Talfo?", "answers": ["A"]},
        {"id": "s2", "question": "Who leads Vekdalea?", "answers": ["B"]},
        {"id": "l1", "question": "Describe Talfo.", "answers": ["Talfo is a kingdom."], "kind": "long"},
        {"id": "n1", "question": "Who leads Atlantis?", "answers": [], "category": "not_in_kb"}])
    _echo_answers(monkeypatch)
    r = swap_matrix([trained_rag], [rag_inputs["index"]], [qa])
    assert r["n_questions"] == {"mixed": 2} and r["left_out"] == {"mixed": {"long": 1, "no_answer": 1}}
    assert r["notes"] == ["mixed: 2 of 4 questions scored; exact match leaves out 1 long-form and 1 without an answer"]
    code, out, err = run_main(monkeypatch, capsys, "swap", "--model", trained_rag, "--index", rag_inputs["index"],
                              "--questions", qa, "--device", "cpu", "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["n_questions"] == {"mixed": 2} and shown["left_out"] == r["left_out"]
    assert "note: mixed: 2 of 4 questions scored" in err
    code, out, err = run_main(monkeypatch, capsys, "swap", "--model", trained_rag, "--index", rag_inputs["index"],
                              "--questions", qa, "--device", "cpu")
    assert code == 0 and "mixed (2)" in out  # the table's column says how many questions it scores


def test_swap_says_when_indexes_or_question_sets_are_the_same(rag_inputs, trained_rag, tmp_path, monkeypatch):  # noqa: F811
    """A copy of index A given as "index B" (or questions_a copied as questions_b) makes the matched and
    mismatched cells the same experiment: the matrix was printed as if it were a knowledge update."""
    from lewisrag.experiments.swap import swap_matrix

    w = rag_inputs["world"]
    index_copy = tmp_path / "index_copy"
    shutil.copytree(rag_inputs["index"], index_copy)
    qa_copy = tmp_path / "qa_copy.jsonl"
    shutil.copy(w / "questions_a.jsonl", qa_copy)
    _echo_answers(monkeypatch)
    r = swap_matrix([trained_rag], [rag_inputs["index"], index_copy], [w / "questions_a.jsonl", w / "questions_b.jsonl", qa_copy])
    assert len(r["notes"]) == 2
    assert r["notes"][0].startswith("indexes index and index_copy hold the same")
    assert r["notes"][1].startswith("question sets questions_a and qa_copy ask the same")
    distinct = swap_matrix([trained_rag], [rag_inputs["index"]], [w / "questions_a.jsonl", w / "questions_b.jsonl"])
    assert distinct["notes"] == []  # the same questions with other answers: a knowledge update, said nothing of


def test_swap_refuses_one_model_given_as_its_run_and_its_best(rag_inputs, trained_rag, monkeypatch):  # noqa: F811
    """RUN and RUN/best are one model: it was answered and scored twice, as two rows named apart."""
    from lewisrag.experiments.swap import swap_matrix

    _echo_answers(monkeypatch)
    with pytest.raises(InputError, match="is given twice") as e:
        swap_matrix([trained_rag, trained_rag / "best"], [rag_inputs["index"]], [rag_inputs["world"] / "questions_a.jsonl"])
    assert e.value.source == "--model"


def test_swap_names_an_index_smaller_than_the_models_k(rag_inputs, trained_rag, tmp_path):  # noqa: F811
    """The model reads K=2 passages; an index of 1 failed later, in search, telling the user to tune the
    index or pass --n-docs, which swap does not have."""
    from lewisrag.experiments.swap import swap_matrix

    small = _tiny_index(rag_inputs, tmp_path, 1)
    with pytest.raises(InputError, match="holds 1 passages, fewer than the 2") as e:
        swap_matrix([trained_rag], [small], [rag_inputs["world"] / "questions_a.jsonl"])
    assert e.value.source == str(small) and e.value.field == "n_passages" and "--n-docs" not in e.value.message


def test_swap_refuses_a_model_trained_for_another_task(rag_inputs, trained_rag, tmp_path, monkeypatch):  # noqa: F811
    """A FEVER (or Jeopardy) model's free-form answers scored by exact match is not how its task is
    scored; the matrix came out as a number all the same."""
    from lewisrag.experiments.swap import swap_matrix

    fever = tmp_path / "fever_model"
    shutil.copytree(trained_rag / "final", fever)
    config = json.loads((fever / "train_config.json").read_text())
    (fever / "train_config.json").write_text(json.dumps({**config, "task": "fever"}))
    _echo_answers(monkeypatch)
    with pytest.raises(InputError, match="--task fever") as e:
        swap_matrix([fever], [rag_inputs["index"]], [rag_inputs["world"] / "questions_a.jsonl"])
    assert e.value.field == "task"


# --- ask and swap: an exported model ---------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(rag_inputs, trained_rag, tmp_path_factory):  # noqa: F811
    from lewisrag.experiments.export import export_rag

    out = tmp_path_factory.mktemp("audit") / "export"
    export_rag(trained_rag, rag_inputs["index"], out)
    return out


def test_an_exported_model_keeps_its_index_pairing(rag_inputs, exported, tmp_path, monkeypatch, capsys):  # noqa: F811
    """`lewisrag export` writes transformers' RAG layout, which has no place for the context encoder's
    fingerprint; read back, ask and swap searched an index of any encoder of the same width in silence,
    although lewisrag_export.json records it."""
    from lewisrag.experiments.swap import swap_matrix

    foreign = _edit_manifest(rag_inputs["index"], tmp_path, lambda m: m["encoder"].update(ctx_fingerprint="f" * 16),
                             "foreign")
    code, _, err = run_main(monkeypatch, capsys, "ask", "--model", exported, "--index", foreign, "--json", "Who?")
    assert code == 2 and "encoder.ctx_fingerprint" in err and "--swap" in err, err
    with pytest.raises(InputError, match="--swap"):
        swap_matrix([exported], [foreign], [rag_inputs["world"] / "questions_a.jsonl"])
    code, _, err = run_main(monkeypatch, capsys, "ask", "--model", exported, "--index", rag_inputs["index"], "--json", "Who?")
    # its own index, and no note (but the tiny model's answer running to --max-length): its pairing is known
    assert code == 0 and [s for s in err.splitlines() if "before its end token" not in s] == [], err
    # a transformers RAG folder from elsewhere names no context encoder: searched, with a note saying so
    plain = tmp_path / "plain"
    shutil.copytree(exported, plain)
    (plain / "lewisrag_export.json").unlink()
    code, _, err = run_main(monkeypatch, capsys, "ask", "--model", plain, "--index", foreign, "--json", "Who?")
    assert code == 0 and err.startswith(f"note: {plain} names no context encoder"), err
    # and a damaged record is one line naming it
    (plain / "lewisrag_export.json").write_text('{"index_fingerprint": 5}')
    code, _, err = run_main(monkeypatch, capsys, "ask", "--model", plain, "--index", foreign, "--json", "Who?")
    assert code == 2 and "lewisrag_export.json: field 'index_fingerprint'" in err, err


def test_ask_names_an_index_smaller_than_the_models_k(rag_inputs, trained_rag, tmp_path):  # noqa: F811
    """Without --n-docs the model's own K is read; an index smaller than it was refused as
    "--n-docs: must be between 1 and ...", a flag the user never gave."""
    from lewisrag.experiments.ask import ask
    from lewisrag.index.dense import DenseIndex
    from lewisrag.training.checkpoint import load_trained

    small = _tiny_index(rag_inputs, tmp_path, 1)
    model, tokenizers = load_trained(trained_rag)
    with pytest.raises(InputError, match=r"fewer than the 2 the model reads per question \(its n_docs\): pass --n-docs 1") as e:
        ask(model, tokenizers, DenseIndex.load(small), "Who leads Talfo?")
    assert e.value.source == str(small) and e.value.field == "n_passages"
    assert len(ask(model, tokenizers, DenseIndex.load(small), "Who leads Talfo?", n_docs=1).passages) == 1


# --- index verify ---------------------------------------------------------------------------------


def test_verify_refuses_a_damaged_max_length_without_a_traceback(rag_inputs, tmp_path, monkeypatch, capsys):  # noqa: F811
    """build.max_length 4 passed the manifest's check (a whole number > 0) and then raised the
    tokenizers library's bare Exception (a traceback, exit 1)."""
    index = _edit_manifest(rag_inputs["index"], tmp_path, lambda m: m["build"].update(max_length=4))
    code, _, err = run_main(monkeypatch, capsys, "index", "verify", "--index", index)
    assert code == 2 and "field 'build.max_length'" in err and "Traceback" not in err, err
    assert err.count("\n") == 1


def test_verify_compares_the_faiss_index_with_the_manifests_factory(rag_inputs, tmp_path):  # noqa: F811
    """A Flat index.faiss under a manifest that says HNSW8 (or any other factory, or none FAISS
    parses) was reported as "the 'HNSW8' index's vectors equal the stored ones"."""
    from lewisrag.index.verify import verify_index

    for factory, said in (("HNSW8", "says 'HNSW8'"), ("IVF4,Flat", "says 'IVF4,Flat'"), ("garbage", "no FAISS factory")):
        index = _edit_manifest(rag_inputs["index"], tmp_path, lambda m: m.update(faiss_factory=factory), factory)
        with pytest.raises(InputError, match=said) as e:
            verify_index(index)
        assert e.value.field == "faiss_factory" and e.value.source == str(index / "manifest.json")
    checks = {c["check"]: c["result"] for c in verify_index(rag_inputs["index"])["checks"]}
    assert checks["faiss"].startswith("index.faiss is the 'Flat' index the manifest says (IndexFlat, 64-byte codes); ")


def test_verify_compares_the_stored_vectors_type_with_the_manifest(rag_inputs, tmp_path):  # noqa: F811
    from lewisrag.index.verify import verify_index

    index = _edit_manifest(rag_inputs["index"], tmp_path, lambda m: m["build"].update(vector_dtype="float16"))
    with pytest.raises(InputError, match="says the stored vectors are float16, embeddings.npy holds float32") as e:
        verify_index(index)
    assert e.value.field == "build.vector_dtype"


def test_verify_checks_a_bm25_index_against_its_passages(rag_inputs, tmp_path):  # noqa: F811
    """BM25 files from another index (the other snapshot's, or a corpus of another size) beside these
    passages: verify checked only the passages and said "no damage", while searches scored other text."""
    from lewisrag.data.records import read_passages
    from lewisrag.index.bm25 import build_bm25_index
    from lewisrag.index.verify import verify_index

    w = rag_inputs["world"]
    a, b = read_passages(w / "passages_a.jsonl"), read_passages(w / "passages_b.jsonl")
    build_bm25_index(a, tmp_path / "bm25_a")
    build_bm25_index(b, tmp_path / "bm25_b")
    build_bm25_index(a[:10], tmp_path / "bm25_10")
    checks = {c["check"]: c["result"] for c in verify_index(tmp_path / "bm25_a")["checks"]}
    assert f"; the BM25 files index {len(a)} documents, as many as the passages, every score entry one of them, and 8 passages" in checks["passages"]
    for other, said in (("bm25_b", "is not indexed for it"), ("bm25_10", f"indexes 10 documents, the index {len(a)}")):
        mixed = tmp_path / f"a_with_{other}"
        shutil.copytree(tmp_path / "bm25_a", mixed)
        shutil.rmtree(mixed / "bm25")
        shutil.copytree(tmp_path / other / "bm25", mixed / "bm25")
        with pytest.raises(InputError, match=said):
            verify_index(mixed)


# --- index tune -----------------------------------------------------------------------------------


def test_tune_refuses_rerank_depth_on_a_flat_index(rag_inputs, tmp_path, monkeypatch, capsys):  # noqa: F811
    """--rerank-depth on a Flat index was recorded in its manifest, so that every later search re-ranked
    an exact top-k into itself; and --max-questions 0 was named as "--n-docs/--max-questions"."""
    index = tmp_path / "flat"
    shutil.copytree(rag_inputs["index"], index)
    before = (index / "manifest.json").read_text()
    qa = rag_inputs["world"] / "test.jsonl"
    code, _, err = run_main(monkeypatch, capsys, "index", "tune", "--index", index, "--questions", qa, "--rerank-depth", "10")
    assert code == 2 and err.startswith("error: --rerank-depth: applies to compressed indexes"), err
    assert (index / "manifest.json").read_text() == before
    code, _, err = run_main(monkeypatch, capsys, "index", "tune", "--index", index, "--questions", qa, "--max-questions", "0")
    assert code == 2 and err == "error: --max-questions: must be at least 1, got 0\n", err
