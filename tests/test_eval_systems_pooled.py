"""`lewisrag eval answers` on a file of several systems reports each apart, and recall@k that cannot be
measured (contexts as plain strings, without ids) is counted, not dropped.

A perfect system A and a broken system B pooled read as one system at 0.5 on every layer; the claims
table beside it was already split. `aggregates.by_system` now holds every aggregate the pooled ones
have, per system, records without a system included ("(no system)"), and the terminal and report.md
show each system apart, saying the file held several. The pooled aggregates stay as they were (the
gate reads them).
"""

from __future__ import annotations

import json

import pytest

from conftest import run_main, write_jsonl
from lewisrag.eval.evaluator import NO_SYSTEM, aggregate


def _answer(qid: str, system: str | None, good: bool) -> dict:
    country, capital = {"q1": ("France", "Paris"), "q2": ("Spain", "Madrid")}[qid]
    rec = {"id": qid, "user_input": f"Capital of {country}?", "reference": capital, "gold_passage_ids": ["1"],
           "response": f"{capital} is the capital of {country} [1]." if good else "Lyon is the capital of Germany.",
           "retrieved_contexts": [{"id": "1", "text": f"{capital} is the capital of {country}."} if good
                                  else {"id": "2", "text": "Berlin."}]}
    return rec if system is None else {**rec, "system": system}


PERFECT = [_answer(q, "A", True) for q in ("q1", "q2")]
BROKEN = [_answer(q, "B", False) for q in ("q1", "q2")]
UNNAMED = [_answer(q, None, False) for q in ("q1", "q2")]
STRINGS = [{"id": "a", "user_input": "Q1?", "response": "Paris is in France [1].", "retrieved_contexts": ["Paris is in France."],
            "gold_passage_ids": ["1"]},
           {"id": "b", "user_input": "Q2?", "response": "Paris is in France [1].", "retrieved_contexts": ["Paris is in France."],
            "gold_passage_ids": ["7"]}]


def _run(monkeypatch, capsys, tmp_path, name: str, rows: list[dict], *args) -> tuple[dict, str, str, str]:
    """(results.json, report.md, stdout, stderr) of `eval answers` on `rows`."""
    src, out = write_jsonl(tmp_path / f"{name}.jsonl", rows), tmp_path / name
    code, stdout, stderr = run_main(monkeypatch, capsys, "eval", "answers", "--answers", src, "--out", out, *args)
    assert code == 0, stderr
    return (json.loads((out / "results.json").read_text(encoding="utf-8")), (out / "report.md").read_text(encoding="utf-8"),
            stdout, stderr)


def test_by_system_holds_every_aggregate_of_each_system_as_if_run_alone(monkeypatch, capsys, tmp_path):
    both = _run(monkeypatch, capsys, tmp_path, "both", PERFECT + BROKEN)[0]["aggregates"]
    alone = {s: _run(monkeypatch, capsys, tmp_path, s, rows)[0]["aggregates"] for s, rows in (("A", PERFECT), ("B", BROKEN))}
    assert both["by_system"] == alone  # recall@k, citation statuses, causes, not_in_kb, claims: all of them
    assert both["by_system"]["A"]["faithfulness"]["mean"] == 1.0 and both["by_system"]["B"]["faithfulness"]["mean"] == 0.0
    assert both["by_system"]["B"]["primary_cause_counts"] == {"retrieval": 2}
    assert both["by_system"]["A"]["recall_at_k@5"]["mean"] == 1.0
    # the pooled aggregates, which the gate reads, are as they were
    assert both["faithfulness"]["n"] == 4 and both["faithfulness"]["mean"] == 0.5
    assert both["primary_cause_counts"] == {"none": 2, "retrieval": 2}
    assert "by_system" not in alone["A"]


def test_records_without_a_system_are_a_group_of_their_own(monkeypatch, capsys, tmp_path):
    agg = _run(monkeypatch, capsys, tmp_path, "mixed", PERFECT + UNNAMED)[0]["aggregates"]
    assert list(agg["by_system"]) == [NO_SYSTEM, "A"]
    assert agg["by_system"][NO_SYSTEM]["faithfulness"]["mean"] == 0.0 and agg["by_system"]["A"]["faithfulness"]["mean"] == 1.0


def test_the_terminal_shows_each_system_apart_and_says_the_file_held_several(monkeypatch, capsys, tmp_path):
    stdout = _run(monkeypatch, capsys, tmp_path, "both", PERFECT + BROKEN)[2]
    assert "2 systems in one answers file" in stdout
    a, b = stdout.index("layered metrics (question level): A"), stdout.index("layered metrics (question level): B")
    faithfulness = [line.split("│")[1:5] for line in stdout.splitlines() if "│ faithfulness " in line]
    assert [[c.strip() for c in row] for row in faithfulness[:2]] == [["faithfulness", "2", "0", "1.000"],
                                                                      ["faithfulness", "2", "0", "0.000"]]
    assert a < b < stdout.index("questions: A") < stdout.index("sentences: B")
    assert "not_in_kb: 0/0 refused; by system: A 0/0, B 0/0" in stdout


def test_report_md_shows_each_system_apart(monkeypatch, capsys, tmp_path):
    md = _run(monkeypatch, capsys, tmp_path, "both", PERFECT + BROKEN)[1]
    assert "- systems: 2 in this file, each reported apart below" in md
    a, b = md.index("### `A`"), md.index("### `B`")
    assert md.index("| faithfulness | 2 | 0 | 1.000 |") > a and md.index("| faithfulness | 2 | 0 | 0.000 |") > b
    assert "| faithfulness | 4 |" not in md  # the pooled row mixes a perfect system with a broken one
    assert "| layer | questions: A | questions: B |\n|---|---|---|\n| retrieval | 0 | 2 |\n| none | 2 | 0 |" in md
    assert "| PASS | 2 | 0 |" in md and "| MISSING_CITATION | 0 | 2 |" in md
    assert "| id | system | statement |" in md  # the ids repeat across systems


def test_report_md_in_chinese_says_so_in_chinese(monkeypatch, capsys, tmp_path):
    md = _run(monkeypatch, capsys, tmp_path, "both", PERFECT + BROKEN, "--lang", "zh")[1]
    assert "- 系统：这个文件里有 2 个" in md and "| 层 | 题目数：A | 题目数：B |" in md
    assert "systems:" not in md and "questions:" not in md


def test_one_system_keeps_its_report(monkeypatch, capsys, tmp_path):
    res, md, stdout, _ = _run(monkeypatch, capsys, tmp_path, "A", PERFECT)
    assert "by_system" not in res["aggregates"]
    assert "systems" not in md and "###" not in md and "| layer | questions |" in md
    assert "layered metrics (question level)" in stdout and "(question level):" not in stdout and "systems in one" not in stdout


@pytest.mark.parametrize("args, ks", [(("--recall-at", "1"), ["1"]), ((), ["1", "5", "10"])])
def test_recall_at_k_on_plain_string_contexts_is_counted_and_said(monkeypatch, capsys, tmp_path, args, ks):
    res, md, stdout, stderr = _run(monkeypatch, capsys, tmp_path, "strings", STRINGS, *args)
    agg = res["aggregates"]
    assert [k for k in agg if k.startswith("recall_at_k@")] == [f"recall_at_k@{k}" for k in ks]
    assert all(agg[f"recall_at_k@{k}"]["n"] == 0 and agg[f"recall_at_k@{k}"]["nan"] == 2 for k in ks)
    assert "| recall_at_k@1 | 0 | 2 | - |" in md
    assert any([c.strip() for c in line.split("│")[1:4]] == ["recall_at_k@1", "0", "2"] for line in stdout.splitlines()), stdout
    notes = [line for line in stderr.splitlines() if "recall@k" in line]
    assert len(notes) == 1 and "2 of the 2 records" in notes[0] and "plain strings" in notes[0] and "strings.jsonl" in notes[0]


def test_some_plain_string_contexts_are_noted_too(monkeypatch, capsys, tmp_path):
    rows = [STRINGS[0], {**STRINGS[1], "retrieved_contexts": [{"id": "1", "text": "Paris is in France."}], "gold_passage_ids": ["1"]}]
    res, _, _, stderr = _run(monkeypatch, capsys, tmp_path, "some", rows, "--recall-at", "1")
    assert res["aggregates"]["recall_at_k@1"]["n"] == 1 and res["aggregates"]["recall_at_k@1"]["nan"] == 1
    assert "recall@k not measured on 1 of the 2 records" in stderr


def test_measured_recall_gives_no_note(monkeypatch, capsys, tmp_path):
    assert "recall@k" not in _run(monkeypatch, capsys, tmp_path, "A", PERFECT, "--recall-at", "1")[3]


def _record(system, faithfulness, gold=("1",), recall=None):
    return {"system": system, "category": None, "metrics": {"faithfulness": faithfulness, "recall_at_k": recall},
            "gold_passage_ids": list(gold), "citation_checks": [], "refused": False, "id": "q", "diagnosis": {"primary": None}}


def test_aggregate_takes_the_cut_offs_asked_for_where_gold_ids_are_given():
    records = [_record("A", 1.0, recall={"1": 1.0}), _record("B", 0.0, gold=())]
    agg = aggregate(records, ks=(1, 3))
    assert agg["recall_at_k@3"] == {**agg["recall_at_k@3"], "n": 0, "nan": 2}  # unmeasured at 3, pooled
    assert "recall_at_k@3" in agg["by_system"]["A"] and "recall_at_k@1" not in agg["by_system"]["B"]  # B has no gold ids
    assert "recall_at_k@3" not in aggregate(records)  # without ks: the cut-offs the scores hold, as before
