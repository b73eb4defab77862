"""Edges of the answer formats: the ragas export read back to the same scores with several reference
answers, report.html on contexts without ids, one id naming two questions, the stitched system's
unread gold ids, JSON Lines saved as .json, and integer gold ids.

In-process, with the lexical judge (deterministic, offline, no model).
"""

from __future__ import annotations

import json

import pytest

from lewisrag.data.io import InputError, iter_records
from lewisrag.data.records import Passage
from lewisrag.eval.evaluator import evaluate_answers
from lewisrag.eval.judges import LexicalJudge
from lewisrag.eval.records import parse_answer, ragas_rows, read_answers
from lewisrag.eval.reports.html import page_data_from_results
from lewisrag.eval.results import read_results
from lewisrag.rag_model.stitched import StitchedAnswer

from conftest import write_jsonl

GROUND_TRUTHS = {"id": "b", "question": "What does Ruus do?", "contexts": ["Ruus is a painter."], "answer": "Painter.",
                 "ground_truths": ["an artist who paints", "painter"]}


def _scored(path) -> tuple[list, list[dict]]:
    records = read_answers(path)
    return records, evaluate_answers(records, LexicalJudge()).to_json()["records"]


def test_ragas_export_keeps_the_other_reference_answers(tmp_path):
    """The export wrote `reference` alone: "Painter." matched ground_truths[1] (EM 1.0) and read back 0.0."""
    records, scored = _scored(write_jsonl(tmp_path / "a.jsonl", [GROUND_TRUTHS]))
    rows = list(ragas_rows(records, scored))
    assert rows[0]["reference"] == "an artist who paints" and rows[0]["other_references"] == ["painter"]
    again = _scored(write_jsonl(tmp_path / "ragas.jsonl", rows))[1]
    qa = ("exact_match", "f1", "rougeL")
    assert scored[0]["metrics"]["exact_match"] == 1.0
    assert {m: again[0]["metrics"][m] for m in qa} == {m: scored[0]["metrics"][m] for m in qa}
    plain = {k: v for k, v in GROUND_TRUTHS.items() if k != "ground_truths"} | {"ground_truth": "painter"}
    records, scored = _scored(write_jsonl(tmp_path / "one.jsonl", [plain]))
    assert "other_references" not in next(ragas_rows(records, scored))  # no extra answers: no column


@pytest.mark.parametrize(("change", "field", "message"), [
    ({"other_references": ["painter"]}, "other_references", "also given as 'ground_truths'; keep one"),
    ({"ground_truths": None, "other_references": ["painter"]}, "other_references",
     "answers beside a reference, but the record gives none: give 'reference'"),
    ({"ground_truths": None, "ground_truth": "an artist", "other_references": ["painter", " "]}, "other_references[1]", "empty"),
    ({"ground_truths": None, "ground_truth": "an artist", "other_references": "painter"}, "other_references",
     "expected a list of strings"),
])
def test_bad_other_references_are_one_line_naming_the_field(change, field, message):
    with pytest.raises(InputError) as e:
        parse_answer({**GROUND_TRUTHS, **change}, "a.jsonl", 3, {})
    assert str(e.value) == f"a.jsonl:3: field '{field}': {message}"


PLAIN = [  # plain-string contexts: their ids are the positions "1", "2"
    {"id": "x", "user_input": "Who leads Valdoria?", "retrieved_contexts": ["Ruus is a painter.", "Tamm was born in 1970."],
     "response": "Tamm [2].", "reference": "Tamm", "reference_context_ids": ["2"]},
    {"id": "y", "user_input": "What does Ruus do?", "retrieved_contexts": ["Ruus is a painter."], "response": "Painter [1].",
     "reference": "painter", "reference_context_ids": ["d1"]},
    {"id": "z", "user_input": "Where is Tamm?", "retrieved_contexts": [{"id": "7", "text": "Tamm is in Valdoria."}],
     "response": "Valdoria [7].", "reference": "Valdoria", "gold_passage_ids": ["2"]},
]


def test_report_html_marks_no_gold_among_contexts_without_ids(tmp_path):
    """Positions "1".."n" were read as passage ids: "Tamm was born in 1970." was tagged gold, "d1" listed as
    "gold, not retrieved", and record z's unread gold "2" shown with record x's second context as its text."""
    results = evaluate_answers(read_answers(write_jsonl(tmp_path / "a.jsonl", PLAIN)), LexicalJudge()).to_json()
    assert [r["has_context_ids"] for r in results["records"]] == [False, False, True]
    assert "recall_at_k" in results["records"][0]["nan_reasons"]  # the scores say it too
    x, y, z = (q["answers"][0] for q in page_data_from_results(results)["questions"])
    assert not any(c["gold"] for c in x["contexts"]) and x["missing_gold"] == y["missing_gold"] == []
    assert z["missing_gold"] == [{"id": "2", "title": "", "text": None}]
    for r in results["records"]:  # a results.json written before the field: read as before (ids of passages)
        del r["has_context_ids"]
    x = page_data_from_results(results)["questions"][0]["answers"][0]
    assert [c["gold"] for c in x["contexts"]] == [False, True]


def test_results_json_reads_has_context_ids_when_given(tmp_path):
    results = evaluate_answers(read_answers(write_jsonl(tmp_path / "a.jsonl", PLAIN[:1])), LexicalJudge()).to_json()
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results), encoding="utf-8")
    assert read_results(path).records[0].detail["has_context_ids"] is False
    del results["records"][0]["has_context_ids"]  # older files: accepted
    path.write_text(json.dumps(results), encoding="utf-8")
    assert "has_context_ids" not in read_results(path).records[0].detail
    results["records"][0]["has_context_ids"] = "no"
    path.write_text(json.dumps(results), encoding="utf-8")
    with pytest.raises(InputError, match=r"field 'records\[0\]\.has_context_ids': expected true or false"):
        read_results(path)


def test_one_id_naming_two_questions_in_two_systems_is_refused(tmp_path):
    rows = [{"id": "1", "system": "A", "user_input": "Who leads Valdoria?", "retrieved_contexts": ["Tamm leads Valdoria."],
             "response": "Tamm [1].", "reference": "Tamm"},
            {"id": "1", "system": "B", "user_input": "What does Ruus do?", "retrieved_contexts": ["Ruus is a painter."],
             "response": "Painter [1].", "reference": "painter"}]
    path = write_jsonl(tmp_path / "a.jsonl", rows)
    with pytest.raises(InputError) as e:
        read_answers(path)
    assert str(e.value) == (f"{path}:2: field 'id': '1' is line 1's id (system 'A') for another question: "
                            "'Who leads Valdoria?' there, 'What does Ruus do?' here; one id names one question in every system")
    # one question saved composed, then decomposed and spaced otherwise: one question
    composed = {**rows[0], "user_input": "Who leads Valdori\u00e1?"}
    decomposed = {**rows[1], "user_input": " Who  leads\tValdoria\u0301? "}
    assert [r.system for r in read_answers(write_jsonl(tmp_path / "b.jsonl", [composed, decomposed]))] == ["A", "B"]


def test_stitched_unread_gold_id_is_no_position_number():
    """Gold "2", never read, was kept as "2": the id of the second context, a hit at recall@2."""
    a = StitchedAnswer("q", "Who?", "Tamm [1].", [Passage("p1", "", "Tamm leads."), Passage("p5", "", "Ruus paints.")], "")
    rec = a.to_record(["2", "p5"])
    assert rec["gold_passage_ids"] == ["not read: 2", "2"]
    scored = evaluate_answers([parse_answer(rec, "stitched", 1, {})], LexicalJudge()).to_json()["records"][0]
    assert scored["metrics"]["recall_at_k"]["1"] == 0.0


def test_json_lines_saved_as_json_says_rename_it(tmp_path):
    path = tmp_path / "hf_out.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in PLAIN[:2]), encoding="utf-8")
    with pytest.raises(InputError) as e:
        list(iter_records(path))
    assert str(e.value) == (f"{path}:2: malformed JSON: Extra data: the file is JSON Lines (one object per line), "
                            "a .jsonl file's layout: rename it to .jsonl")
    path.write_text('[{"a": 1}]\n[{"a": 2}]\n', encoding="utf-8")  # no object on the first line: no such hint
    with pytest.raises(InputError) as e:
        list(iter_records(path))
    assert str(e.value) == f"{path}:2: malformed JSON: Extra data"


@pytest.mark.parametrize(("gold", "field", "message"), [
    ([5, ""], "gold_passage_ids[1]", "expected a string or an integer, got ''"),
    (["5", True], "gold_passage_ids[1]", "expected a string or an integer, got True"),
    ("5", "gold_passage_ids", "expected a list of ids, got str"),
])
def test_gold_passage_ids_take_integers_as_context_ids_do(gold, field, message):
    row = {"user_input": "Who?", "retrieved_contexts": [{"id": 5, "title": "", "text": "Tamm leads."}],
           "response": "Tamm [5].", "reference": "Tamm", "gold_passage_ids": [5]}
    rec = parse_answer(row, "a.jsonl", 1, {})
    assert rec.gold_passage_ids == ("5",)
    assert evaluate_answers([rec], LexicalJudge()).to_json()["records"][0]["metrics"]["recall_at_k"]["1"] == 1.0
    with pytest.raises(InputError) as e:
        parse_answer({**row, "gold_passage_ids": gold}, "a.jsonl", 1, {})
    assert str(e.value) == f"a.jsonl:1: field '{field}': {message}"
