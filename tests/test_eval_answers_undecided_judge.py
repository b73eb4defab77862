"""`eval answers --judge labels:FILE` whose pairs cover none of the answers' statements left every verdict
undecided: the layers came out n/a, the faithfulness rows vanished and every question was diagnosed
"none", exit 0 (an answer "1990 [1]" against a passage "founded in 1985" read as fine). Refused now,
as `eval bughunt` and `calibrate` refuse it, before anything is written; a judge that decided some
of them says on stderr how many it left undecided."""

from __future__ import annotations

import json

from conftest import run_main, write_jsonl

PASSAGE = "Acme was founded in 1985. It makes anvils."
ANSWERS = [{"id": "q1", "user_input": "When was Acme founded?", "response": "Acme was founded in 1990 [1]. It makes anvils [1].",
            "reference": "1985", "retrieved_contexts": [{"id": "1", "text": PASSAGE}]}]


def _answers(tmp_path):
    return write_jsonl(tmp_path / "answers.jsonl", ANSWERS)


def test_a_judge_that_decides_none_of_the_statements_is_refused(tmp_path, monkeypatch, capsys):
    labels = write_jsonl(tmp_path / "other.jsonl", [{"id": "a", "premise": "the cat sat", "hypothesis": "the cat sat",
                                                     "supported": True}])
    answers = _answers(tmp_path)
    code, out, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", answers, "--judge", f"labels:{labels}",
                              "--out", tmp_path / "run")
    assert code == 2 and out == "", (out, err)
    assert err.strip().splitlines() == [err.strip()] and err.startswith(
        f"error: --judge: labels:{labels} decided none of the 2 statements of the answers of {answers} (the first: "), err
    assert "no label" in err
    assert not (tmp_path / "run").exists()  # nothing written
    code, out, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", answers, "--judge", f"labels:{labels}",
                              "--out", tmp_path / "run", "--json")
    assert code == 2 and out == "" and "decided none of the 2 statements" in err and not (tmp_path / "run").exists()


def test_a_judge_that_decides_some_statements_says_how_many_it_left_undecided(tmp_path, monkeypatch, capsys):
    labels = write_jsonl(tmp_path / "some.jsonl", [{"id": "a", "premise": PASSAGE, "hypothesis": "Acme was founded in 1990.",
                                                    "supported": False}])
    code, out, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", _answers(tmp_path), "--judge",
                              f"labels:{labels}", "--out", tmp_path / "run", "--json")
    assert code == 0, err
    json.loads(out)  # stdout holds the results alone
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert notes[0] == (f"note: --judge labels:{labels} decided 1 of the 2 statements of the answers; the 1 undecided are "
                        "left out of faithfulness (the first: no label; each with its reason in results.json)"), err
    # the labels leave the reference statements, a citation and claim checks undecided too: each kind its own note
    assert [n.split(";")[0].split(" decided ")[1] for n in notes[1:]] == [
        "0 of the 2 checks of the reference statements of the answers (each against the contexts and against the answer)",
        "every check against the cited passages for 1",  # of the 2 cited sentences
        "1 of the 6 claim checks of the answers"], err
    assert "note: of the 2 cited sentences of the answers, --judge" in notes[2]
    record = json.loads((tmp_path / "run" / "results.json").read_text())["records"][0]
    assert record["metrics"]["faithfulness"] == 0.0  # the one decided statement: the wrong year


def test_a_judge_that_decides_every_statement_adds_no_note(tmp_path, monkeypatch, capsys):
    code, _, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", _answers(tmp_path), "--out", tmp_path / "run",
                            "--json")
    assert code == 0 and "note:" not in err, err


def test_not_in_kb_questions_statements_are_not_counted(tmp_path, monkeypatch, capsys):
    """A not_in_kb question's statements are never judged: a run of such questions alone is not refused."""
    answers = write_jsonl(tmp_path / "nik.jsonl", [{**ANSWERS[0], "category": "not_in_kb"}])
    labels = write_jsonl(tmp_path / "other.jsonl", [{"id": "a", "premise": "x", "hypothesis": "y", "supported": True}])
    code, _, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", answers, "--judge", f"labels:{labels}",
                            "--out", tmp_path / "run", "--json")
    assert code == 0 and "note:" not in err, err


def test_answers_the_atomic_splitter_could_not_decompose_count_as_undecided():
    """A judge whose decomposition failed on every answer left no statement to count: the check passed
    and `eval answers --splitter atomic` wrote a run of n/a layers, exit 0."""
    import pytest

    from lewisrag.commands.evaluate import _check_decided
    from lewisrag.data.io import InputError

    failed = {"category": "answerable", "statements": [], "nan_reasons": {"faithfulness": "decompose failed: not JSON"}}
    decided = {"category": "answerable", "statements": [{"supported": True, "reason": "stated"}], "nan_reasons": {}}
    with pytest.raises(InputError, match=r"decided none of the 2 statements of A \(the first: decompose failed: not JSON\)"):
        _check_decided({"records": [failed, failed]}, "llm:x", "A")
    assert _check_decided({"records": [failed, decided]}, "llm:x", "A") == (1, 2)  # a note says so
    assert _check_decided({"records": [{**failed, "category": "not_in_kb"}, decided]}, "llm:x", "A") == (0, 1)


def test_an_answer_decomposed_into_nothing_is_a_decomposer_failure(tmp_path):
    """A decomposer that returned no statements for an answer that says something made faithfulness
    vanish in silence, its reason "no statements in the answer"; a refusal decomposed into nothing is
    what it says."""
    import pytest

    from lewisrag.commands.evaluate import _check_decided
    from lewisrag.data.io import InputError
    from lewisrag.eval.evaluator import EvalConfig, evaluate_answers
    from lewisrag.eval.judges import FunctionJudge
    from lewisrag.eval.records import read_answers

    class EmptyDecomposer(FunctionJudge):
        def decompose(self, text: str) -> list[str]:
            return []

    judge = EmptyDecomposer(lambda premise, hypothesis: hypothesis in premise)
    refusal = {**ANSWERS[0], "id": "q2", "response": "I don't know."}
    records = read_answers(write_jsonl(tmp_path / "a.jsonl", [ANSWERS[0], refusal]))
    data = evaluate_answers(records, judge, EvalConfig(splitter="atomic")).to_json()
    said, refused = data["records"]
    assert said["nan_reasons"]["faithfulness"] == "decompose failed: the judge returned no statements for 2 sentences"
    assert refused["nan_reasons"]["faithfulness"] == "no statements in the answer"
    with pytest.raises(InputError, match="decided none of the 1 statements of A"):
        _check_decided(data, "llm:x", "A")


def test_eval_bughunt_says_how_many_statements_its_judge_left_undecided(tmp_path, monkeypatch, capsys):
    """A labels file missing two of BugHunt's lines turned the hallucinated answer into a 'not used' one
    (faithfulness 1.000 over its one decided statement), exit 0 and nothing said."""
    from importlib import resources

    shipped = resources.files("lewisrag.eval.bughunt").joinpath("labels.jsonl").read_text(encoding="utf-8")
    lines = [line for line in shipped.splitlines()
             if "hallucinated-s2-faithful" not in line and "hallucinated-s3-faithful" not in line]
    part = tmp_path / "part.jsonl"
    part.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, _, err = run_main(monkeypatch, capsys, "eval", "bughunt", "--judge", f"labels:{part}", "--json")
    assert code == 0, err
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "statements of the BugHunt answers; the 2 undecided are left out of faithfulness" in notes[0]
