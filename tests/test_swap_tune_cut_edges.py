"""Edges of `index tune`, `swap` and `index cut`, each once measured or recorded wrongly:

- `index tune` listed the exact top k + 8 rows and counted a found row tied with the k-th exact score
  only if the listing held it: 40 copies of one passage measured an exhaustive IVF search at 0.97
  against exact search, and the warning blamed the index's codes.
- `swap` kept each cell's predictions as a list over the scored questions alone, with nothing saying
  which questions they were: a set that left long-form ones out could not be matched to its file.
- `index cut` counted long-form questions in its answer recall, which the base preset's retrieval
  stage (whose measure cut.json records, the docs say) leaves out: a long answer is no string to find.
- `swap` read a train_config.json holding a list as "field 'task': expected a task name, got None".
"""

from __future__ import annotations

import json
import shutil

import faiss
import numpy as np
import pytest

from conftest import run_main, write_jsonl
from lewisrag.data.io import InputError
from lewisrag.index import open_retriever
from lewisrag.index.dense import build_faiss
from lewisrag.index.tuning import exact_top_k, measure, recall_at_k, tune_search, with_found_rows
from test_audit_index_load import _questions_only, _variant, flat  # noqa: F401  (a Flat index over the tiny corpus)
from test_audit_swap_ask import _echo_answers  # noqa: F401
from test_index import dpr_ckpt  # noqa: F401  (a module fixture: the tiny DPR checkpoint)
from test_index_cut import corpus  # noqa: F401  (the tiny corpus in wiki_dpr's schema)
from test_rag_train import rag_inputs, trained_rag  # noqa: F401  (session fixtures)

K = 5
COPIES = 40  # tied rows, well past the k + 8 that the exact listing holds


# --- index tune: rows tied with the k-th exact score, more than the listing holds --------------------------


def _copies(seed: int = 0, d: int = 8):
    """60 random vectors, `COPIES` of them one vector every query ranks first, and 6 queries."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((60, d)).astype(np.float32)
    x[10:10 + COPIES] = 3.0
    return x, (np.abs(rng.standard_normal((6, d))) + 0.1).astype(np.float32)


def test_a_found_row_tied_with_the_kth_score_counts_however_many_rows_tie():
    """An exact search is measured 1 whichever of the tied rows it returns, where the exact listing
    (k + 8 rows) names others: it broke the tie otherwise, which the tie rule says is no miss."""
    x, q = _copies()
    scores, exact = exact_top_k(x, q, K + 8)
    tied = set(range(10, 10 + COPIES))
    assert all(set(row) <= tied for row in exact)  # every listed row is a copy, tied with the k-th
    # the copies the listing does not name: an exact search that broke the tie another way
    found = np.array([sorted(tied - set(row))[:K] for row in exact])
    assert recall_at_k(found, exact, K, scores) == 0.0  # by the listing alone: none named
    completed_scores, completed_rows = with_found_rows(scores, exact, found, q, x, K)
    assert recall_at_k(found, completed_rows, K, completed_scores) == 1.0  # each found row scored: all tied
    repeated = np.repeat(found[:, :1], K, axis=1)  # one unlisted copy found K times counts once
    rep_scores, rep_rows = with_found_rows(scores, exact, repeated, q, x, K)
    assert recall_at_k(repeated, rep_rows, K, rep_scores) == pytest.approx(1 / K)
    flat_index = build_faiss(x, "Flat")
    # FAISS's own tie-break told apart from the listing's: give it the other copies as "the" exact rows
    faiss_rows = flat_index.search(q, K)[1]
    other = np.array([[r for r in sorted(tied) if r not in set(f)][:K + 8] for f in faiss_rows])
    before = tune_search(flat_index, q, other, K, 1.0, exact_scores=scores)
    assert before.recall == 0.0 and not before.reached  # what the listing alone measures
    after = tune_search(flat_index, q, other, K, 1.0, exact_scores=scores, exact_vectors=x)
    assert after.recall == 1.0 and after.reached
    assert measure(flat_index, q, other, K, exact_scores=scores, exact_vectors=x) == (1.0, True)
    # a row really below the k-th score still misses, found or not
    x_low = x.copy()
    x_low[0] = -3.0
    low = np.concatenate([faiss_rows[:, :K - 1], np.zeros((len(q), 1), np.int64)], 1)  # row 0 found in place of a copy
    assert measure(_FixedRows(low), q, other, K, exact_scores=scores, exact_vectors=x_low)[0] == pytest.approx(0.8)


def _last_rows_first(vectors, queries, k, **_):
    """An exact top-k (`exact_top_k`'s) that breaks ties by the larger row first."""
    scores = np.asarray(queries, np.float32) @ np.asarray(vectors, np.float32).T  # (B, N)
    cols = np.broadcast_to(np.arange(scores.shape[1]), scores.shape)
    rows = np.lexsort((-cols, -scores), axis=1)[:, :k]  # by score, then by row, both descending
    return np.take_along_axis(scores, rows, 1), rows


class _FixedRows:
    """A stand-in index whose search returns the same rows whatever the query (scores unused)."""

    def __init__(self, rows):
        self.rows = rows

    def search(self, q, k):
        return np.zeros(self.rows[:, :k].shape, np.float32), self.rows[:, :k]


@pytest.mark.parametrize("factory", ["IVF1,Flat", "IVF4,Flat"])
def test_index_tune_measures_an_exhaustive_search_at_1_with_many_tied_passages(
        flat, tiny_corpus, factory, tmp_path, monkeypatch, capsys):  # noqa: F811
    """40 copies of one passage vector tie for every place of the top 5 of the questions that rank it
    first: `index tune --target-recall 1` measured nprobe = nlist (an exhaustive search) below 1 and
    warned that the index's codes could not reach the target, where the exact listing broke the tie
    otherwise than FAISS (here: the last rows first, which FAISS, keeping the first it meets, never
    returns)."""
    import lewisrag.index.tuning as tuning

    monkeypatch.setattr(tuning, "exact_top_k", _last_rows_first)
    index = _variant(flat, tmp_path, "copies", manifest={"faiss_factory": factory})
    qa = _questions_only(tiny_corpus, tmp_path)
    q = open_retriever(flat).encode([json.loads(line)["question"] for line in qa.read_text().splitlines()])
    vectors = np.load(index / "embeddings.npy")
    vectors[10:10 + COPIES] = q.mean(0) * 50  # ranked first by (nearly) every question
    np.save(index / "embeddings.npy", vectors)
    faiss.write_index(build_faiss(vectors, factory), str(index / "index.faiss"))
    scores, _ = exact_top_k(vectors, q, K + 8)
    assert (np.abs(scores[:, -1] - scores[:, K - 1]) <= 1e-5 * np.abs(scores[:, K - 1])).sum() >= 10  # ties past the listing
    code, out, err = run_main(monkeypatch, capsys, "index", "tune", "--index", index, "--questions", qa,
                              "--held-out", "0", "--target-recall", "1", "--json")
    assert code == 0 and "warning: recall@" not in err, err
    record = json.loads(out)
    assert record["reached"] is True and record["tuned_recall_at_k"] == 1.0, record["trials"]
    assert all(r == 1.0 for v, r in record["trials"].items() if v == factory[3])  # nprobe = nlist, if tried, is exact
    if factory == "IVF1,Flat":  # one list: every setting is exhaustive, on the held-out questions too
        code, out, err = run_main(monkeypatch, capsys, "index", "tune", "--index", index, "--questions", qa,
                                  "--held-out", "0.2", "--target-recall", "1", "--json")
        record = json.loads(out)
        assert code == 0 and record["held_out_recall_at_k"] == 1.0 and record["held_out_reached"] is True, err


# --- swap: which questions the predictions answer ---------------------------------------------------------


def _answer_the_question(monkeypatch):
    """swap_matrix's answerer replaced by one that answers each question with its own text, instantly."""
    from lewisrag.experiments import swap

    def answer(model, tokenizers, index, questions, *, on_batch=None, **kw):
        if on_batch:
            on_batch(len(questions))
        return list(questions)

    monkeypatch.setattr(swap, "answer_questions", answer)


def test_swap_names_the_questions_its_predictions_answer(rag_inputs, trained_rag, tmp_path, monkeypatch, capsys):  # noqa: F811
    """world/test.jsonl scores 26 of its 30 questions (4 are long-form): the predictions, a list of 26
    per cell, said nothing of which 26."""
    from lewisrag.data.records import read_qa
    from lewisrag.experiments.swap import swap_matrix

    test = rag_inputs["world"] / "test.jsonl"
    examples = read_qa(test)
    scored = [ex for ex in examples if ex.kind == "short" and ex.answers]
    assert len(scored) < len(examples)  # some are left out: the lists are shorter than the file
    _answer_the_question(monkeypatch)
    r = swap_matrix([trained_rag], [rag_inputs["index"]], [test, rag_inputs["world"] / "questions_a.jsonl"])
    assert list(r["question_ids"]) == ["test", "questions_a"]
    assert r["question_ids"]["test"] == [ex.id for ex in scored]
    by_id = {ex.id: ex.question for ex in examples}
    cell = r["predictions"][r["models"][0]][r["indexes"][0]]
    assert isinstance(cell["test"], list)  # the lists stay as they were
    assert [by_id[i] for i in r["question_ids"]["test"]] == cell["test"]  # each prediction matched to its question
    assert len(r["question_ids"]["questions_a"]) == len(cell["questions_a"]) == r["n_questions"]["questions_a"]
    out = tmp_path / "swap.json"
    code, _, err = run_main(monkeypatch, capsys, "swap", "--model", trained_rag, "--index", rag_inputs["index"],
                            "--questions", test, "--device", "cpu", "--out", out, "--json")
    assert code == 0, err
    assert json.loads(out.read_text())["question_ids"] == {"test": [ex.id for ex in scored]}


def test_swap_refuses_a_train_config_that_is_not_an_object(rag_inputs, trained_rag, tmp_path, monkeypatch, capsys):  # noqa: F811
    model = tmp_path / "model"
    shutil.copytree(trained_rag / "final", model)
    (model / "train_config.json").write_text("[1]")
    _echo_answers(monkeypatch)
    from lewisrag.experiments.swap import swap_matrix

    with pytest.raises(InputError, match="expected a JSON object, got list") as e:
        swap_matrix([model], [rag_inputs["index"]], [rag_inputs["world"] / "questions_a.jsonl"])
    assert e.value.source == str(model / "train_config.json")
    code, _, err = run_main(monkeypatch, capsys, "swap", "--model", model, "--index", rag_inputs["index"],
                            "--questions", rag_inputs["world"] / "questions_a.jsonl", "--device", "cpu")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "train_config.json" in lines[0] and "got list" in lines[0], err
    assert "got None" not in err


# --- index cut: answer recall over short-answer questions ---------------------------------------------------


def test_cut_answer_recall_leaves_long_form_questions_out(corpus, tmp_path, monkeypatch, capsys):  # noqa: F811
    """The same short questions with long-form ones beside them record the same answer recall over the
    same answerable questions, and say how many long ones were left out."""
    short = [json.loads(line) for line in corpus["qa"].read_text().splitlines()]
    long = [{"id": f"long-{r['id']}", "question": f"Describe {r['question']}", "kind": "long",
             "answers": [f"A long answer naming {r['answers'][0]} among other words."]} for r in short[:5]]
    files = {"short": write_jsonl(tmp_path / "short.jsonl", short),
             "mixed": write_jsonl(tmp_path / "mixed.jsonl", short + long)}
    records = {}
    for name, qa in files.items():
        code, out, err = run_main(monkeypatch, capsys, "index", "cut", "--passages", corpus["shards"], "--encoder",
                                  corpus["dpr"], "--questions", qa, "--out", tmp_path / f"cut_{name}", "--device", "cpu",
                                  "--json", "--top", "4", "--max-passages", "50", "--no-gold")
        assert code == 0, err
        records[name] = json.loads(out)
    assert records["mixed"]["questions"] == len(short) + len(long)
    assert records["mixed"]["answerable_questions"] == records["short"]["answerable_questions"] == len(short)
    assert records["mixed"]["answer_recall"] == records["short"]["answer_recall"]
    assert records["mixed"]["long_form_questions"] == len(long) and records["short"]["long_form_questions"] == 0
    saved = json.loads((tmp_path / "cut_mixed" / "cut.json").read_text())
    assert saved["long_form_questions"] == len(long) and saved["answerable_questions"] == len(short)
