"""An audit of `eval retrieval`, `eval bughunt`, `calibrate`, the evaluate modules and the QA scores'
input checks, from the user's side: each test is an input that used to give a traceback, a silent
skip, a wrong number or a misleading message."""

from __future__ import annotations

import contextlib
import json
import math
import os

import pytest

from conftest import run_main, write_jsonl
from lewisrag.scoring import qa


@pytest.fixture(scope="module")
def small_bm25(tmp_path_factory):
    from lewisrag.data.records import read_passages
    from lewisrag.index.bm25 import build_bm25_index

    root = tmp_path_factory.mktemp("audit_retrieval")
    texts = ["Ana Bel leads Valdoria.", "Lenz is the capital of Mora.", "The river Tess runs north.", "登录失败返回 422。"]
    passages = write_jsonl(root / "passages.jsonl", [{"id": f"p{i}", "title": f"T{i}", "text": t} for i, t in enumerate(texts)])
    build_bm25_index(read_passages(passages), root / "bm25")
    return root


# --- eval retrieval ---------------------------------------------------------------------------


def test_retrieval_names_the_mapped_gold_field_when_no_question_has_it(small_bm25, monkeypatch, capsys):
    """--qa-fields gold_passage_ids=golds on a file without `golds`: the error named 'gold_passage_ids',
    the field the user had just said the file does not use."""
    q = write_jsonl(small_bm25 / "q_mapped.jsonl", [{"id": "q1", "question": "Who leads Valdoria?", "gold_passage_ids": ["p0"]}])
    code, out, err = run_main(monkeypatch, capsys, "eval", "retrieval", "--index", small_bm25 / "bm25", "--questions", q,
                              "--recall-at", 1, "--qa-fields", "gold_passage_ids=golds")
    assert code == 2 and "field 'golds'" in err and "no question has gold passage ids" in err, err
    assert len(err.strip().splitlines()) == 1


def test_retrieval_progress_counts_only_the_questions_it_searches(small_bm25, monkeypatch, capsys):
    """Questions without gold ids are not searched: the bar's total counted them, and stopped at 1/2."""
    from lewisrag.commands import _ui

    made = []
    real = _ui.progress

    @contextlib.contextmanager
    def recording():
        with real() as p:
            made.append(p)
            yield p

    monkeypatch.setattr(_ui, "progress", recording)
    q = write_jsonl(small_bm25 / "q_half.jsonl", [{"id": "q1", "question": "Who leads Valdoria?", "gold_passage_ids": []},
                                                 {"id": "q2", "question": "capital of Mora?", "gold_passage_ids": ["p1"]}])
    code, out, err = run_main(monkeypatch, capsys, "eval", "retrieval", "--index", small_bm25 / "bm25", "--questions", q,
                              "--recall-at", 1)
    assert code == 0, err
    assert "1 of 2 questions have no gold_passage_ids: not scored" in out
    (p,) = made
    assert [(t.completed, t.total) for t in p.tasks] == [(1, 1)]


# --- eval bughunt -----------------------------------------------------------------------------


def test_bughunt_refuses_a_judge_that_decides_none_of_the_statements(tmp_path, monkeypatch, capsys):
    """labels:FILE of other pairs left every judged score null and the hallucinated and misplaced
    answers with no failing layer ("none"), exit 0, written to --out."""
    labels = write_jsonl(tmp_path / "other.jsonl", [{"id": "a", "premise": "the cat sat", "hypothesis": "the cat sat",
                                                     "supported": True}])
    code, out, err = run_main(monkeypatch, capsys, "eval", "bughunt", "--judge", f"labels:{labels}", "--out", tmp_path / "run")
    assert code == 2 and "decided none of the 17 statements" in err and "no label" in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()
    code, out, err = run_main(monkeypatch, capsys, "eval", "bughunt", "--judge", "lexical", "--json")  # one that decides: runs
    assert code == 0 and json.loads(out)["judge"]["name"] == "lexical", err


# --- calibrate --------------------------------------------------------------------------------


def test_calibrate_refuses_show_with_json(tmp_path, monkeypatch, capsys):
    """--json prints every disagreement: --show 5 was dropped in silence."""
    labels = write_jsonl(tmp_path / "l.jsonl", [{"id": "a", "premise": "x y", "hypothesis": "x", "supported": True}])
    code, out, err = run_main(monkeypatch, capsys, "calibrate", "--judge", "lexical", "--labels", labels, "--json", "--show", 5)
    assert code == 2 and err.strip().startswith("error: --show") and not out, err
    code, out, err = run_main(monkeypatch, capsys, "calibrate", "--judge", "lexical", "--labels", labels, "--show", 5)
    assert code == 0, err


# --- the evaluate modules ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def modules():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    evaluate = pytest.importorskip("evaluate")
    from lewisrag.eval import hf_metrics

    return evaluate.load(hf_metrics.path("lewisrag_qa")), evaluate.load(hf_metrics.path("lewisrag_faithfulness"))


def test_qa_module_over_no_prediction_is_nan_not_zero(modules):
    got = modules[0].compute(predictions=[], references=[])
    assert all(math.isnan(got[m]) for m in ("exact_match", "f1", "rougeL")), got


@pytest.mark.parametrize("statements, says", [
    ([["登录失败返回 422"]], "one list per prediction: 2 predictions, got 1"),  # the second answer was dropped by zip
    ([["登录失败返回 422"], "前端弹出 toast"], r"reference_statements\[1\] must be a list"),  # read as 8 one-character statements
    ([["登录失败返回 422"], None], r"reference_statements\[1\] must be a list"),  # TypeError: 'NoneType' object is not iterable
])
def test_faithfulness_module_checks_reference_statements(modules, statements, says):
    preds, contexts = ["登录失败返回 422 [1]。", "前端弹出 toast [1]。"], [["登录失败返回 422。"], ["前端弹出 toast。"]]
    with pytest.raises(ValueError, match=says):
        modules[1].compute(predictions=preds, contexts=contexts, reference_statements=statements)


def test_faithfulness_module_names_a_missing_context_list(modules):
    with pytest.raises(ValueError, match=r"contexts\[1\] must be a list of strings, got None"):
        modules[1].compute(predictions=["a [1].", "b [1]."], contexts=[["a"], None])


# --- QA scores' input checks ------------------------------------------------------------------


@pytest.mark.parametrize("score", [qa.exact_match, qa.token_f1, qa.rouge_l, qa.bleu_1])
def test_qa_scores_refuse_a_non_string_answer_wherever_it_stands(score):
    """A None after a matching answer scored 1.0; before it, AttributeError 'isascii'."""
    for answers in (["Paris", None], [None, "Paris"], ["Paris", 3]):
        with pytest.raises(ValueError, match="must be a non-empty list of strings"):
            score("Paris", answers)
    with pytest.raises(ValueError, match="prediction must be a string"):
        score(None, ["Paris"])


def test_provenance_em_refuses_retrieved_ids_given_as_one_string():
    """"p1" read as the ids "p" and "1": a gold id "1" was found among them."""
    with pytest.raises(ValueError, match="retrieved_ids must be a list"):
        qa.provenance_em("422", ["422"], "p1", ["1"])
    assert qa.provenance_em("422", ["422"], ["p1"], ["p1"]) == 1.0


def test_retrieval_scores_refuse_ids_given_as_one_string():
    """Gold "d1" was read as the ids "d" and "1": recall 0.0 and hit 0.0 for a passage retrieved first."""
    from lewisrag.scoring.retrieval import first_gold_rank, hit_at_k, recall_at_k

    for score in (recall_at_k, hit_at_k, first_gold_rank):
        with pytest.raises(ValueError, match="gold_ids must be a list of ids"):
            score(["d1"], "d1")
        with pytest.raises(ValueError, match="retrieved_ids must be a list of ids"):
            score("d1", ["d1"])
    assert recall_at_k(["d1"], ["d1"]) == hit_at_k(["d1"], ["d1"]) == 1.0


def test_hit_rate_refuses_lists_of_different_lengths():
    """zip dropped the third question: (1, 2) reported for three questions with gold ids."""
    from lewisrag.scoring.retrieval import hit_rate

    with pytest.raises(ValueError, match="got 2 retrieved lists and 3 gold lists"):
        hit_rate([["a"], ["b"]], [["a"], ["x"], ["c"]])


def test_qa_module_scores_cited_answers_as_eval_answers_does(modules):
    """The modules combine on one `predictions` list, which carries [n] citations for faithfulness: the
    QA module scored "422 [1]" against "422" as a miss (EM 0) where `eval answers` strips the markers."""
    got = modules[0].compute(predictions=["返回 422 [1]。", "Paris [2]"], references=[["返回 422"], ["Paris"]])
    assert got["exact_match"] == 1.0 and got["f1"] == 1.0 and got["rougeL"] == 1.0, got
