"""ragas files in, ragas' results table out: `lewisrag eval answers` on records without ids, in ragas'
current and older column names, and `--export ragas`.

Runs the CLI in a subprocess with the lexical judge (deterministic, offline, no model).
"""

from __future__ import annotations

import json

import pytest

from lewisrag.data.io import InputError, derived_id
from lewisrag.eval.records import read_answers

from conftest import run_cli, write_jsonl

Q_EN = "What does login return on a wrong password?"
Q_ZH = "登录时密码输错了，接口返回什么？"
CURRENT = [  # ragas >= 0.2 (SingleTurnSample), no ids
    {"user_input": Q_EN, "response": "It returns 422 [1]. Errors are listed in red [2].",
     "retrieved_contexts": ["Login with a wrong password returns 422.", "Signup errors are listed in red."],
     "reference": "Login returns 422."},
    {"user_input": Q_ZH, "response": "登录失败时接口返回 422 [1]。前端弹出 toast。",
     "retrieved_contexts": ["登录失败时接口返回 422，前端在登录表单上方用红色列表逐条显示。"]},
    {"user_input": Q_EN, "response": "422.", "retrieved_contexts": ["Login returns 422."], "reference": "422"},
]
OLDER = [  # the same answers in ragas' older names; the last with ragas < 0.1's list of ground truths
    {"question": Q_EN, "answer": CURRENT[0]["response"], "contexts": CURRENT[0]["retrieved_contexts"],
     "ground_truth": "Login returns 422."},
    {"question": Q_ZH, "answer": CURRENT[1]["response"], "contexts": CURRENT[1]["retrieved_contexts"]},
    {"question": Q_EN, "answer": "422.", "contexts": ["Login returns 422."], "ground_truths": ["422", "HTTP 422"]},
]
RAGAS_COLUMNS = ["id", "system", "user_input", "retrieved_contexts", "response", "reference",
                 "faithfulness", "answer_relevancy", "context_recall"]


def evaluate(tmp_path, name: str, rows: list[dict], *flags: str) -> dict:
    src = write_jsonl(tmp_path / f"{name}.jsonl", rows)
    r = run_cli("eval", "answers", "--answers", str(src), "--judge", "lexical", "--out", str(tmp_path / name), *flags)
    assert r.returncode == 0, r.stderr
    return json.loads((tmp_path / name / "results.json").read_text(encoding="utf-8"))


def test_ragas_files_without_ids_in_both_schemas(tmp_path):
    first = evaluate(tmp_path, "current", CURRENT)
    again = evaluate(tmp_path, "again", CURRENT)
    older = evaluate(tmp_path, "older", OLDER)
    ids = [r["id"] for r in first["records"]]
    en = derived_id(Q_EN, {})
    assert ids[1] == derived_id(Q_ZH, {})  # a question asked once: its question's id
    # asked twice: distinct ids from what each record is judged against (its reference), not from the order
    assert ids[0] != ids[2] and ids[0].startswith(f"{en}-") and ids[2].startswith(f"{en}-")
    assert [r["id"] for r in again["records"]] == ids == [r["id"] for r in older["records"]]  # stable across runs
    for a, b in zip(first["records"], older["records"]):
        assert a["metrics"] == b["metrics"] and a["question"] == b["question"] and a["response"] == b["response"]
    # the reference came through in both schemas (ground_truths: its first entry, as ragas took it)
    assert [r["metrics"]["exact_match"] for r in older["records"]] == [0.0, None, 1.0]
    assert older["records"][1]["nan_reasons"]["exact_match"] == "no reference answer"


def test_every_ground_truth_is_an_answer_to_match(tmp_path):
    """EM, F1 and ROUGE-L take the best over ground_truths (the first alone was read: an answer matching
    the second scored 0, in silence); the statements come from the first, the reference."""
    row = {"question": "巴黎的别称是什么？", "answer": "光之城 [1]。", "contexts": ["巴黎被称为光之城。"],
           "ground_truths": ["花都", "光之城", " "]}
    rec = read_answers(write_jsonl(tmp_path / "gt.jsonl", [row]))[0]
    assert (rec.reference, rec.other_references) == ("花都", ("光之城",))
    m = evaluate(tmp_path, "gt", [row])["records"][0]["metrics"]
    assert (m["exact_match"], m["f1"], m["rougeL"]) == (1.0, 1.0, 1.0)
    assert m["context_recall"] == 0.0  # "花都" is not in the context: the reference's statements, as before


def test_export_ragas_columns_and_values(tmp_path):
    res = evaluate(tmp_path, "run", CURRENT, "--export", "ragas")
    rows = [json.loads(line) for line in (tmp_path / "run" / "ragas.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [list(row) for row in rows] == [RAGAS_COLUMNS] * 3
    for row, given, scored in zip(rows, CURRENT, res["records"]):
        assert row["id"] == scored["id"] and row["system"] is None
        assert {k: row[k] for k in ("user_input", "response", "retrieved_contexts")} == {
            k: given[k] for k in ("user_input", "response", "retrieved_contexts")}
        assert row["reference"] == given.get("reference")
        for column in ("faithfulness", "answer_relevancy", "context_recall"):
            assert row[column] == scored["metrics"][column]
    # lexical judge, one answer statement per sentence: the 1st answer's two sentences, the 2nd's "toast" one unsupported
    assert [row["faithfulness"] for row in rows] == [1.0, 0.5, 1.0]
    assert rows[0]["context_recall"] == 1.0 and rows[1]["context_recall"] is None  # no reference: no score
    assert all(row["answer_relevancy"] is None for row in rows)  # needs an embedder and an llm judge


def test_bad_record_is_one_line_exit_2(tmp_path):
    src = write_jsonl(tmp_path / "bad.jsonl", [OLDER[0], {**OLDER[1], "contexts": "登录失败返回 422"}])
    out = tmp_path / "run"
    r = run_cli("eval", "answers", "--answers", str(src), "--judge", "lexical", "--out", str(out), "--export", "ragas")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1] == f"error: {src}:2: field 'contexts': expected a list, got str"
    assert "Traceback" not in r.stderr and not out.exists()


@pytest.mark.parametrize("row, field, message", [
    ({**CURRENT[0], "question": Q_EN}, "question", "also given as 'user_input' (its current ragas name); keep one"),
    ({**OLDER[0], "reference": "Login returns 422."}, "ground_truth", "also given as 'reference' (its current ragas name); keep one"),
    ({**OLDER[2], "ground_truth": "422"}, "ground_truths", "also given as 'ground_truth'; keep one"),
    ({**OLDER[2], "ground_truths": "422"}, "ground_truths", "expected a list of strings"),
    # the first is the reference: a blank one before an answer made the record unscored, in silence
    ({**OLDER[2], "ground_truths": [" ", "422"]}, "ground_truths[0]",
     "blank, while ground_truths[1] is not: the first is the reference answer; put it first or remove the blank"),
    ({**OLDER[0], "answer": None}, "answer", "missing"),
    ({k: v for k, v in OLDER[0].items() if k != "answer"}, "response", "missing"),
    ({**OLDER[0], "question": " "}, "question", "empty"),
])
def test_field_errors_name_the_field_the_record_used(tmp_path, row, field, message):
    src = write_jsonl(tmp_path / "a.jsonl", [CURRENT[1], row])
    with pytest.raises(InputError) as e:
        read_answers(src)
    assert str(e.value) == f"{src}:2: field '{field}': {message}"


def test_unknown_export_format_is_refused_before_anything_runs(tmp_path):
    src = write_jsonl(tmp_path / "a.jsonl", CURRENT)
    r = run_cli("eval", "answers", "--answers", str(src), "--out", str(tmp_path / "run"), "--export", "csv")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == "error: --export: unknown format 'csv': use ragas"
    assert not (tmp_path / "run").exists()
