"""`lewisrag eval answers` and `lewisrag eval bughunt` end to end, and the answer-record reader."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from lewisrag.cli import app
from lewisrag.data.io import InputError
from lewisrag.eval.records import read_answers
from lewisrag.eval.bughunt import answer_records, human_labels, load_bughunt

from conftest import run_cli, write_jsonl

ANSWERS = [
    {"id": "q1", "user_input": "登录时密码输错了，接口返回什么？", "response": "登录失败时接口返回 422 [1]。前端弹出 toast，3 秒后消失 [1]。",
     "retrieved_contexts": [{"id": "1", "title": "REQ-AUTH-03", "text": "登录失败时接口返回 422，前端在登录表单上方用红色列表逐条显示。"}],
     "reference_statements": ["接口返回 422", "前端在登录表单上方用红色列表逐条显示"], "gold_passage_ids": ["1"],
     "category": "single_doc", "system": "a"},
    {"id": "q2", "user_input": "What does login return on a wrong password?", "response": "It returns 422 [1]. Errors are listed in red [2].",
     "retrieved_contexts": ["Login with a wrong password returns 422.", "Signup errors are listed in red."],
     "reference": "Login returns 422.", "system": "a"},
    {"id": "q3", "user_input": "账号会被锁定吗？", "response": "知识库里没有相关信息。", "retrieved_contexts": [], "category": "not_in_kb",
     "system": "a"},
]


def test_eval_answers_writes_the_run(tmp_path):
    src = write_jsonl(tmp_path / "answers.jsonl", ANSWERS)
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["eval", "answers", "--answers", str(src), "--judge", "lexical", "--out", str(out), "--recall-at", "1", "--recall-at", "3"])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == [".lewisrag", "config.json", "distributions.png", "qa_distributions.png", "report.html",
                                                     "report.md", "results.json"]
    res = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert res["lewisrag"]["kind"] == "eval" and res["judge"]["name"] == "lexical" and len(res["judge"]["fingerprint"]) == 64
    assert res["splitter"] == {"name": "sentences", "version": "15"} and res["config"]["ks"] == [1, 3]
    q1, q2, q3 = res["records"]
    assert q1["metrics"]["faithfulness"] == 0.5 and q1["metrics"]["recall_at_k"] == {"1": 1.0, "3": 1.0}
    assert q1["statements"][1]["supported"] is False and "toast" in q1["statements"][1]["reason"]
    assert q2["metrics"]["answer_relevancy"] is None and "embedder" in q2["nan_reasons"]["answer_relevancy"]
    assert q3["refused"] is True and res["aggregates"]["not_in_kb"] == {"n": 1, "refused": 1, "not_refused_ids": []}
    assert res["aggregates"]["faithfulness"]["n"] == 2
    config = json.loads((out / "config.json").read_text())
    assert config["judge_fingerprint"] == res["judge"]["fingerprint"]
    assert "generation_distorted" in (out / "report.md").read_text(encoding="utf-8")


def test_eval_answers_bad_input_exit_2_and_no_output(tmp_path):
    rows = [ANSWERS[0], {**ANSWERS[1], "retrieved_contexts": [{"id": "1", "title": "t"}]}]
    src = write_jsonl(tmp_path / "bad.jsonl", rows)
    out = tmp_path / "run"
    r = run_cli("eval", "answers", "--answers", str(src), "--judge", "lexical", "--out", str(out))
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1] == f"error: {src}:2: field 'retrieved_contexts[0].text': missing"
    assert "Traceback" not in r.stderr and not out.exists()


def test_eval_answers_with_labels_judge_matches_bughunt(tmp_path):
    sample = load_bughunt()
    labels = write_jsonl(tmp_path / "labels.jsonl", human_labels(sample))
    src = write_jsonl(tmp_path / "answers.jsonl", answer_records(sample))
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["eval", "answers", "--answers", str(src), "--judge", f"labels:{labels}", "--out", str(out)])
    assert r.exit_code == 0, r.output
    recs = {x["id"]: x for x in json.loads((out / "results.json").read_text(encoding="utf-8"))["records"]}
    mis, hal = recs["misplaced_citations"]["metrics"], recs["hallucinated"]["metrics"]
    assert (mis["faithfulness"], mis["citation_recall"]) == (1.0, 0.0)
    assert round(hal["faithfulness"], 3) == 0.333 and recs["not_retrieved"]["diagnosis"]["primary"] == "retrieval"


def test_eval_bughunt_json_shows_the_chapter(tmp_path):
    r = CliRunner().invoke(app, ["eval", "bughunt", "--json", "--out", str(tmp_path / "bh")])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    by = {a["name"]: a for a in res["records"]}
    assert by["misplaced_citations"]["metrics"]["faithfulness"] == 1.0
    assert by["misplaced_citations"]["metrics"]["citation_recall"] == 0.0
    g = by["hallucinated"]["granularity"]
    assert [round(100 * g[k]["faithfulness"], 1) for k in ("sentences", "atomic", "whole")] == [33.3, 16.7, 0.0]
    assert res["rule_checker"]["table"] == {"caught": 7, "passed": 12, "false_block": 1, "missed": 1, "unverifiable": 1}
    assert {a["name"]: a["diagnosis"]["primary"] for a in res["records"]} == {
        "correct": None, "not_retrieved": "retrieval", "retrieved_not_used": "generation_not_used",
        "hallucinated": "generation_distorted", "off_topic": "generation_off_topic", "misplaced_citations": "citation"}
    assert (tmp_path / "bh" / "results.json").exists() and "| hallucinated | atomic | 6 | 1 | 0.167 |" in (tmp_path / "bh" / "report.md").read_text()
    tables = CliRunner().invoke(app, ["eval", "bughunt"])
    assert tables.exit_code == 0 and "false_block" in tables.stdout


def test_read_answers_validation(tmp_path):
    ragas = write_jsonl(tmp_path / "ragas.jsonl", [{"id": 7, "user_input": "q", "response": "r", "retrieved_contexts": ["a", "b"],
                                                     "reference_contexts": ["x"], "rubrics": None}])
    rec = read_answers(ragas)[0]
    assert rec.id == "7" and [c.id for c in rec.contexts] == ["1", "2"] and not rec.has_context_ids
    cases = [
        ({"id": "a", "user_input": "q", "response": "r"}, "field 'retrieved_contexts': missing"),
        ({"id": "a", "user_input": "q", "response": "r", "retrieved_contexts": ["x", {"id": "1", "text": "t"}]},
         "field 'retrieved_contexts[1]': expected all strings"),
        ({"id": "a", "user_input": "q", "response": "r", "retrieved_contexts": [], "category": "easy"}, "field 'category': unknown"),
        ({"id": "a", "user_input": "", "response": "r", "retrieved_contexts": []}, "field 'user_input': empty"),
        ({"id": "a", "user_input": "q", "response": "r", "retrieved_contexts": [], "gold_passage_ids": "1"},
         "field 'gold_passage_ids': expected a list"),
        # used to be accepted: an undecided verdict left the denominator in silence
        ({"id": "a", "user_input": "q", "response": "r", "retrieved_contexts": [], "reference_statements": ["x", " "]},
         "field 'reference_statements[1]': empty statement"),
        # used to be accepted: docs kept the last, and [1] was checked against the wrong passage
        ({"id": "a", "user_input": "q", "response": "r [1]", "retrieved_contexts": [{"id": "01", "text": "a"}, {"id": "1", "text": "b"}]},
         "field 'retrieved_contexts[1].id': context ids '01' and '1' would both be cited as [1]"),
        ({"id": "a", "user_input": "q", "response": "r", "retrieved_contexts": [{"id": "x", "text": "a"}, {"id": "x", "text": "b"}]},
         "field 'retrieved_contexts[1].id': duplicate context id 'x'"),
    ]
    for i, (row, message) in enumerate(cases):
        path = write_jsonl(tmp_path / f"bad{i}.jsonl", [row])
        with pytest.raises(InputError, match=r"bad%d.jsonl:1: " % i + message.replace("[", r"\[").replace("]", r"\]")):
            read_answers(path)
    dup = write_jsonl(tmp_path / "dup.jsonl", [{**ANSWERS[1], "system": "a"}, {**ANSWERS[1], "system": "b"}, {**ANSWERS[1], "system": "a"}])
    with pytest.raises(InputError, match="dup.jsonl:3: field 'id': duplicate id 'q2'"):
        read_answers(dup)


@pytest.mark.parametrize(("row", "field", "token"), [
    ({**ANSWERS[1], "rubrics": {"score": float("inf")}}, "rubrics.score", "Infinity"),  # ignored field: still refused
    ({**ANSWERS[1], "reference": float("nan")}, "reference", "NaN"),
    ({**ANSWERS[1], "id": float("-inf")}, "id", "-Infinity"),
    ({**ANSWERS[1], "retrieved_contexts": ["a", float("nan")]}, "retrieved_contexts[1]", "NaN"),
])
def test_eval_answers_refuses_nan_and_infinity_naming_file_line_and_field(tmp_path, row, field, token):
    src = write_jsonl(tmp_path / "answers.jsonl", [ANSWERS[0], row])  # json.dumps writes the bare tokens
    r = run_cli("eval", "answers", "--answers", str(src), "--judge", "lexical", "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith(f"error: {src}:2: field '{field}': {token} is not a value")


def test_nan_in_an_ignored_field_is_a_missing_value(tmp_path):
    rec = {**ANSWERS[1], "rubrics": {"score": float("nan")}}  # pandas writes NaN for a missing cell
    assert read_answers(write_jsonl(tmp_path / "a.jsonl", [rec]))[0].id == "q2"


def test_report_md_escapes_ids_and_system_names(tmp_path):
    rows = [{**ANSWERS[1], "id": "<script>alert(1)</script>", "system": "*sys*|x"},
            {**ANSWERS[2], "id": "n`1<b>", "response": "Login returns 422 [1].", "system": "*sys*|x"}]
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["eval", "answers", "--answers", str(write_jsonl(tmp_path / "a.jsonl", rows)), "--judge", "lexical",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "| &lt;script&gt;alert(1)&lt;/script&gt; | \\*sys\\*\\|x |" in md  # the row, its columns intact
    assert "Did not refuse: ``n`1<b>``" in md  # a code span (literal text) the id's backtick cannot close
    assert not re.search(r"<[a-zA-Z/!?]", md.replace("``n`1<b>``", ""))  # no other tag anywhere


@pytest.mark.parametrize(("context", "message"), [
    ({"id": "1", "title": "t"}, "field 'retrieved_contexts[0].text': missing"),
    ({"id": "1", "text": 5}, "field 'retrieved_contexts[0].text': expected a string, got int"),
    ({"id": "1", "text": "t", "title": 0}, "field 'retrieved_contexts[0].title': expected a string, got int"),
])
def test_a_bad_context_object_is_named_by_its_path(tmp_path, context, message):
    # a bare 'text' named no context; a falsy title of the wrong type was silently read as no title
    path = write_jsonl(tmp_path / "a.jsonl", [ANSWERS[1], {**ANSWERS[1], "id": "x", "retrieved_contexts": [context]}])
    with pytest.raises(InputError) as e:
        read_answers(path)
    assert str(e.value) == f"{path}:2: {message}"


@pytest.mark.parametrize(("args", "message"), [
    (["--claim-extractor", "bogus"], "error: --claim-extractor: unknown claim extractor 'bogus'"),
    (["--claim-extractor", "llm"], "error: --claim-extractor: claim extraction by llm needs an llm judge"),
])
def test_a_bad_claim_extractor_is_one_line_before_any_judging(tmp_path, args, message):
    src = write_jsonl(tmp_path / "answers.jsonl", ANSWERS)
    r = run_cli("eval", "answers", "--answers", str(src), "--judge", "lexical", "--out", str(tmp_path / "run"), *args)
    assert r.returncode == 2 and r.stderr.startswith(message), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "judging" not in r.stderr  # no progress bar before it
    assert not (tmp_path / "run").exists()


def test_a_rerun_into_the_same_run_folder_leaves_nothing_stale(tmp_path):
    # a rerun moves its files in; what the earlier run wrote and this one does not (its export) must
    # not sit beside the new results, while a file the user put there stays
    src = write_jsonl(tmp_path / "answers.jsonl", ANSWERS)
    out = tmp_path / "run"
    run = ["eval", "answers", "--answers", str(src), "--judge", "lexical", "--out", str(out)]
    assert CliRunner().invoke(app, [*run, "--export", "ragas"]).exit_code == 0
    assert (out / "ragas.jsonl").is_file()
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    first = json.loads((out / ".lewisrag").read_text(encoding="utf-8"))
    assert first["kind"] == "evaluation" and "ragas.jsonl" in first["files"] and "notes.txt" not in first["files"]
    r = CliRunner().invoke(app, run)
    assert r.exit_code == 0, r.output
    assert not (out / "ragas.jsonl").exists() and (out / "notes.txt").read_text(encoding="utf-8") == "mine"
    assert (out / "results.json").is_file() and "ragas.jsonl" not in json.loads((out / ".lewisrag").read_text())["files"]
