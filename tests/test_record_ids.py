"""Ids `eval answers` derives for records without one do not depend on the Unicode form the text was
saved in: a question (and what it is judged against) in NFD gets the id it gets in NFC."""

from __future__ import annotations

import unicodedata
from pathlib import Path

from conftest import write_jsonl
from lewisrag.data.io import derived_id
from lewisrag.eval import gate
from lewisrag.eval.evaluator import evaluate_answers
from lewisrag.eval.judges import LexicalJudge
from lewisrag.eval.records import read_answers
from lewisrag.eval.results import write_results

Q = "Quel café la société sert-elle à Zürich ?"  # NFC: é, ü one code point each
CONTEXTS = ["La société sert un café noir à Zürich.", "Le thé est servi à Genève."]
RIGHT = {"user_input": Q, "response": "Elle sert un café noir [1].", "retrieved_contexts": CONTEXTS,
         "reference": "Un café noir."}
OTHER = {**RIGHT, "response": "Elle sert du thé [2].", "reference": "Un café noir à Zürich, servi chaud."}


def _nfd(rec: dict) -> dict:
    """The record with every text decomposed (é as e + U+0301), as some tools and file systems save it."""
    def nfd(v):
        return unicodedata.normalize("NFD", v) if isinstance(v, str) else [nfd(x) for x in v] if isinstance(v, list) else v
    return {k: nfd(v) for k, v in rec.items()}


def test_the_fixture_really_is_in_two_forms():
    assert _nfd(RIGHT)["user_input"] != Q and unicodedata.normalize("NFC", _nfd(RIGHT)["user_input"]) == Q


def test_a_decomposed_question_gets_the_id_of_its_composed_form(tmp_path):
    composed = read_answers(write_jsonl(tmp_path / "nfc.jsonl", [RIGHT]))
    decomposed = read_answers(write_jsonl(tmp_path / "nfd.jsonl", [_nfd(RIGHT)]))
    assert [r.id for r in decomposed] == [r.id for r in composed]
    # NFC text is its own NFC: its id is the one derived before, which recorded baselines carry
    assert composed[0].id == derived_id(Q, {})
    assert decomposed[0].question == _nfd(RIGHT)["user_input"]  # the text itself is kept as given


def test_a_repeated_question_digests_the_same_in_either_form(tmp_path):
    """Asked twice, each record's id adds a digest of what it is judged against: its reference in NFD
    is the same reference."""
    composed = [r.id for r in read_answers(write_jsonl(tmp_path / "nfc.jsonl", [RIGHT, OTHER]))]
    decomposed = [r.id for r in read_answers(write_jsonl(tmp_path / "nfd.jsonl", [_nfd(RIGHT), _nfd(OTHER)]))]
    assert decomposed == composed and len(set(composed)) == 2
    assert all(i.startswith(derived_id(Q, {}) + "-") for i in composed)


def test_one_question_in_both_forms_in_one_file_is_one_question(tmp_path):
    """The same system answering it once in each form asked it twice: the two records are told apart
    by what they are judged against, as any repeat is."""
    ids = [r.id for r in read_answers(write_jsonl(tmp_path / "mixed.jsonl", [RIGHT, _nfd(OTHER)]))]
    assert ids == [r.id for r in read_answers(write_jsonl(tmp_path / "nfc.jsonl", [RIGHT, OTHER]))]


def test_the_gate_pairs_a_run_saved_in_nfd_with_its_nfc_baseline(tmp_path):
    """The case reported: the candidate's answers file was saved decomposed, every id changed, and
    the gate failed on questions missing from the candidate though nothing had changed."""
    def run(rows: list[dict], name: str) -> Path:
        out = tmp_path / f"{name}.json"
        write_results(out, evaluate_answers(read_answers(write_jsonl(tmp_path / f"{name}.jsonl", rows)), LexicalJudge()))
        return out

    base = run([RIGHT, OTHER], "base")
    cand = run([_nfd(RIGHT), _nfd(OTHER)], "cand")
    report = gate.gate(base, cand)
    questions = next(c for c in report.checks if c.name == "questions")
    assert questions.details["missing"] == [] and questions.details["paired"] == 2
    assert report.passed, [(c.name, c.evidence) for c in report.checks if c.verdict == "fail"]


def test_the_qa_reader_and_eval_answers_give_a_decomposed_question_one_id(tmp_path):
    """The QA reader derives ids as `eval answers` does, so a question file saved in NFD pairs with
    answers saved in NFC (and the other way round)."""
    from lewisrag.data.records import read_qa
    qa = read_qa(write_jsonl(tmp_path / "qa.jsonl", [{"question": unicodedata.normalize("NFD", Q), "answers": ["un café"]}]))
    answers = read_answers(write_jsonl(tmp_path / "nfc.jsonl", [RIGHT]))
    assert [e.id for e in qa] == [r.id for r in answers] == [derived_id(Q, {})]
    assert derived_id(unicodedata.normalize("NFD", Q), {}) == derived_id(Q, {})
