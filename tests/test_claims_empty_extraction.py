"""Two ways undecided verdicts passed as measured ones.

An LLM claim extractor that answered `{"claims": []}` for an answer and a reference that say something
was taken at its word: every claim diagnostic of the answer's claims was null as "no response claims",
and context precision read 0.0 (no reference claims, so every passage irrelevant), exit 0. An empty
extraction of a text that asserts something is a failed extraction now, as the atomic splitter's empty
decomposition is; a refusal, or a reference that asserts nothing, keeps its empty claim list.

`eval answers` said nothing of the judge's undecided verdicts on reference statements (nor on
citations and claims): context recall read 1.000 from one of two reference statements, and a metric
whose every verdict was undecided vanished from the terminal table. Each kind of verdict is noted on
stderr now, rows with nulls stay in the table, and each reference statement's verdicts carry reasons.
"""

from __future__ import annotations

import json

from conftest import run_main, write_jsonl

from lewisrag.commands.evaluate import _check_decided, _note_undecided
from lewisrag.eval.evaluator import EvalConfig, evaluate_answers, undecided_metrics
from lewisrag.eval.judges import FunctionJudge
from lewisrag.eval.records import read_answers
from lewisrag.eval.reports.i18n import messages

CONTEXTS = ["Login failure returns 422.", "Errors are shown in red above the form."]
RECORD = {"id": "q1", "user_input": "What does login return?", "response": "It returns 422 [1-2]. Errors are shown in red [2].",
          "retrieved_contexts": CONTEXTS, "reference": "It returns 422."}
FAILED = "claim extraction failed: the judge returned no statements for "


class Extractor(FunctionJudge):
    """A judge whose claim extraction gives `claims[text]`, no claims for any other text."""

    def __init__(self, claims: dict[str, list[str]], fn=lambda premise, hypothesis: hypothesis.rstrip(".") in premise):
        super().__init__(fn)
        self.claims = claims

    def extract_claims(self, text: str, question: str) -> list[str]:
        return self.claims.get(text, [])


def _evaluate(tmp_path, rows, judge) -> dict:
    records = read_answers(write_jsonl(tmp_path / "answers.jsonl", rows))
    return evaluate_answers(records, judge, EvalConfig(claim_extractor="llm")).to_json()


def test_no_claims_from_texts_that_say_something_is_a_failed_extraction(tmp_path):
    data = _evaluate(tmp_path, [RECORD], Extractor({}))
    (rec,) = data["records"]
    assert rec["claims"]["failed"] == {"response": FAILED + "2 sentences", "reference": FAILED + "1 sentences"}
    m, why = rec["metrics"], rec["nan_reasons"]
    assert m["claims.context_precision"] is None  # it read 0.0: every passage irrelevant to no reference claims
    assert why["claims.context_precision"] == FAILED + "1 sentences"
    assert all(v is None for k, v in m.items() if k.startswith("claims."))
    assert why["claims.precision"] == why["claims.faithfulness"] == FAILED + "2 sentences"  # not "no response claims"
    assert {k for k in m if k.startswith("claims.")} <= undecided_metrics(why)
    assert data["aggregates"]["claims.context_precision"]["n"] == 0  # the mean read 0.0


def test_only_the_side_extracted_into_nothing_fails(tmp_path):
    said = {"It returns 422. Errors are shown in red.": ["It returns 422.", "Errors are shown in red."]}
    (rec,) = _evaluate(tmp_path, [RECORD], Extractor(said))["records"]
    assert rec["claims"]["failed"] == {"reference": FAILED + "1 sentences"}
    assert rec["metrics"]["claims.faithfulness"] == 0.5 and rec["metrics"]["claims.context_precision"] is None


def test_a_refusal_and_a_reference_that_asserts_nothing_keep_their_empty_claims(tmp_path):
    rows = [{**RECORD, "response": "I don't know."},
            {**RECORD, "id": "q2", "reference": "The documents do not say."}]
    said = {"It returns 422. Errors are shown in red.": ["It returns 422.", "Errors are shown in red."]}
    refused, unsaid = _evaluate(tmp_path, rows, Extractor(said | {"It returns 422.": ["It returns 422."]}))["records"]
    assert refused["claims"]["response"] == [] and "failed" not in refused["claims"]
    assert refused["metrics"]["claims.recall"] == 0.0  # the refusal's miss, as completeness counts it
    assert unsaid["claims"]["reference"] == [] and "failed" not in unsaid["claims"]
    assert unsaid["metrics"]["claims.context_precision"] == 0.0  # no reference claim: the formula's 0, as documented


def test_failed_extractions_are_noted_as_undecided_claim_checks(tmp_path, capsys):
    data = _evaluate(tmp_path, [RECORD], Extractor({}))
    _note_undecided(data, "llm:m", _check_decided(data, "llm:m", "A"), "the answers", messages("en"))
    notes = capsys.readouterr().err.splitlines()
    assert notes == ["note: --judge llm:m decided 0 of the 2 claim checks of the answers; the 2 undecided are left out of "
                     f"the claim-level diagnostics (the first: {FAILED}2 sentences; each with its reason in results.json)"]


# ---------------------------------------------------------------------------------------------
# undecided verdicts beside the answers' statements

ANSWER = {"id": "q1", "user_input": "What does login return?", "response": "Login returns 422 when the password is wrong [1].",
          "retrieved_contexts": ["Login returns 422 when the password is wrong."],
          "reference": "Login returns 422. The account is then deleted."}
STATEMENT = "Login returns 422 when the password is wrong."


def _labels(tmp_path, *pairs):
    return write_jsonl(tmp_path / "labels.jsonl", [{"id": str(i), "premise": p, "hypothesis": h, "supported": True}
                                                  for i, (p, h) in enumerate(pairs)])


def _eval(monkeypatch, capsys, tmp_path, labels, *args):
    code, out, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", write_jsonl(tmp_path / "a.jsonl", [ANSWER]),
                              "--judge", f"labels:{labels}", "--out", tmp_path / "run", "--no-claims", *args)
    assert code == 0, err
    return out, [line for line in err.splitlines() if line.startswith("note:")], json.loads((tmp_path / "run" / "results.json").read_text())


def test_undecided_reference_statements_are_noted_shown_and_given_reasons(tmp_path, monkeypatch, capsys):
    labels = _labels(tmp_path, (STATEMENT, STATEMENT))  # the answer's statement only
    out, notes, data = _eval(monkeypatch, capsys, tmp_path, labels)
    assert notes == [f"note: --judge labels:{labels} decided 0 of the 4 checks of the reference statements of the answers "
                     "(each against the contexts and against the answer); the 4 undecided are left out of context recall and "
                     "answer completeness (the first: no label; each with its reason in results.json)"]
    rows = {cells[0]: cells[1:3] for line in out.splitlines() if len(cells := [c.strip() for c in line.split("│")[1:-1]]) > 2}
    assert rows["context_recall"] == rows["answer_completeness"] == ["0", "1"]  # the rows vanished
    assert [(r["in_contexts_reason"], r["in_answer_reason"]) for r in data["records"][0]["reference_statements"]] == \
        [("no label", "no label")] * 2


def test_a_reference_statement_left_undecided_beside_a_decided_one_is_noted(tmp_path, monkeypatch, capsys):
    """context_recall read 1.000 from one of two reference statements, the other undecided, and nothing said."""
    # the passage and the answer (without its marker) are the statement's text: one label decides both checks
    labels = _labels(tmp_path, (STATEMENT, STATEMENT), (STATEMENT, "Login returns 422."))
    _, notes, data = _eval(monkeypatch, capsys, tmp_path, labels, "--json")
    assert data["records"][0]["metrics"]["context_recall"] == 1.0
    assert len(notes) == 1 and "decided 2 of the 4 checks of the reference statements" in notes[0], notes
    assert "the 2 undecided are left out of context recall and answer completeness (the first: no label;" in notes[0]


def test_undecided_citation_and_claim_checks_are_noted(tmp_path, capsys):
    """Each kind in its own note, counted apart from the statements; a decided run adds none."""
    judge = FunctionJudge(lambda premise, hypothesis: None if premise in CONTEXTS else hypothesis.rstrip(".") in premise)
    records = read_answers(write_jsonl(tmp_path / "a.jsonl", [{**RECORD, "reference": "It returns 422. It is red."}]))
    data = evaluate_answers(records, judge).to_json()
    _note_undecided(data, "x", _check_decided(data, "x", "A"), "A", messages("en"))
    notes = capsys.readouterr().err.splitlines()
    # the sentence citing [2] alone is asked about that passage; the claims' 8 checks against one passage each
    assert [n.split(";")[0] for n in notes] == ["note: of the 2 cited sentences of A, --judge x decided every check against "
                                                "the cited passages for 1", "note: --judge x decided 4 of the 12 claim checks of A"]
    assert all("(the first: function returned None" in n for n in notes)
    decided = evaluate_answers(records, FunctionJudge(lambda premise, hypothesis: True)).to_json()
    _note_undecided(decided, "x", _check_decided(decided, "x", "A"), "A", messages("en"))
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------------------------------------
# citation checks: those of one citation counted, ids that name no passage (never asked) not

ACME = ["Acme was founded in 1985.", "Acme makes anvils."]


def _acme(tmp_path, response: str, judge) -> dict:
    records = read_answers(write_jsonl(tmp_path / "acme.jsonl", [{"id": "a", "user_input": "Acme?", "response": response,
                                                                 "retrieved_contexts": ACME}]))
    return evaluate_answers(records, judge, EvalConfig(claims=False)).to_json()


def test_a_citation_undecided_alone_is_noted_with_its_reason(tmp_path, capsys):
    """Both citations of a supported sentence undecided alone: citation precision null, and nothing said."""
    joined = FunctionJudge(lambda premise, hypothesis: True if "\n" in premise else None)
    data = _acme(tmp_path, "Acme was founded in 1985 and makes anvils [1][2].", joined)
    (verdict,) = data["records"][0]["citation_verdicts"]
    assert verdict["undecided_citations"] == 2 and verdict["undecided_reason"] == "function returned None"
    assert "citation_precision" in undecided_metrics(data["records"][0]["nan_reasons"])  # its table row stays
    _note_undecided(data, "x", _check_decided(data, "x", "A"), "A", messages("en"))
    (note,) = [n for n in capsys.readouterr().err.splitlines() if "cited sentences" in n]
    assert note.startswith("note: of the 1 cited sentences of A, --judge x decided every check against the cited passages "
                           "for 0; the 1 with an undecided check") and "(the first: function returned None;" in note


def test_a_citation_of_no_passage_is_no_check_of_the_judges(tmp_path, capsys):
    data = _acme(tmp_path, "Acme was founded in 1985 [7]. Acme makes anvils [2].", FunctionJudge(lambda p, h: h in p))
    _note_undecided(data, "x", _check_decided(data, "x", "A"), "A", messages("en"))
    assert "cited sentences" not in capsys.readouterr().err  # [7] was refused unasked, [2] decided


def test_a_table_keeps_the_citation_rows_the_judge_left_undecided(tmp_path, monkeypatch, capsys):
    from lewisrag.commands import _ui

    monkeypatch.setattr(_ui.out, "width", 200)
    answers = write_jsonl(tmp_path / "one.jsonl", [{"id": "a", "user_input": "Acme?", "response": "Acme was founded in 1985 [1].",
                                                   "retrieved_contexts": ACME}])
    labels = _labels(tmp_path, ("\n".join(ACME), "Acme was founded in 1985."))  # the joined contexts only
    code, out, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", answers, "--judge", f"labels:{labels}",
                              "--out", tmp_path / "run", "--no-claims")
    assert code == 0, err
    rows = {cells[0]: cells[1:3] for line in out.splitlines() if len(cells := [c.strip() for c in line.split("│")[1:-1]]) > 2}
    assert rows["citation_recall"] == ["0", "1"] and rows["faithfulness"] == ["1", "0"]


def test_questions_the_judge_could_not_write_are_noted(tmp_path, capsys):
    """Answer relevancy left out where question generation failed: its row vanished and nothing was said."""
    from lewisrag.eval.judges.llm import JudgeError

    class Mute(FunctionJudge):
        def generate_questions(self, answer: str, n: int):
            raise JudgeError("HTTP 500 after 3 retries")

    records = read_answers(write_jsonl(tmp_path / "r.jsonl", [RECORD]))
    data = evaluate_answers(records, Mute(lambda p, h: True), EvalConfig(claims=False), embed=lambda text: [1.0, 0.0]).to_json()
    assert "answer_relevancy" in undecided_metrics(data["records"][0]["nan_reasons"])
    _note_undecided(data, "x", _check_decided(data, "x", "A"), "A", messages("en"))
    assert capsys.readouterr().err.splitlines() == [
        "note: --judge x wrote no questions back for 1 of the 1 answers of A it was asked about; their answer relevancy is "
        "left out (the first: question generation failed: HTTP 500 after 3 retries; each with its reason in results.json)"]
