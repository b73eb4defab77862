"""An audit of `lewisrag eval answers`' records and of what `lewisrag gate` compares: each test is a
case that paired the wrong answers, compared runs scored by different or unknown scorers, lost
scores on a round trip, or misled the user, before its fix."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from conftest import run_cli, write_jsonl
from test_gate import _check, _failed, _write, fixtures
from lewisrag.data.io import InputError, derived_id
from lewisrag.eval import gate
from lewisrag.eval.evaluator import embedder_info, evaluate_answers
from lewisrag.eval.judges import LexicalJudge
from lewisrag.eval.records import read_answers
from lewisrag.eval.results import read_results, write_results

Q_EN = "What does login return on a wrong password?"
Q_ZH = "登录时密码输错了，接口返回什么？"
CONTEXTS = ["Login with a wrong password returns 422.", "Signup errors are listed in red."]
RIGHT = {"user_input": Q_EN, "response": "Login with a wrong password returns 422 [1].", "retrieved_contexts": CONTEXTS,
         "reference": "Login returns 422."}
WRONG = {"user_input": Q_EN, "response": "Login locks the account for 30 minutes [1].", "retrieved_contexts": CONTEXTS,
         "reference": "Login returns HTTP 422."}
ZH = {"user_input": Q_ZH, "response": "登录失败时接口返回 422 [1]。", "retrieved_contexts": ["登录失败时接口返回 422。"]}


def _evaluate(path: Path, out: Path) -> Path:
    write_results(out, evaluate_answers(read_answers(path), LexicalJudge()))
    return out


# --- 1. ids derived from a question asked twice ---------------------------------------------------


def test_a_reordered_file_pairs_each_answer_with_itself_in_the_gate(tmp_path):
    """The same question twice without ids got `q…` and `q…-2` in file order: the same records
    reordered swapped them, and the gate compared the right answer with the wrong one (a regression
    that was no change at all). The ids now follow what each record is judged against."""
    base = _evaluate(write_jsonl(tmp_path / "a.jsonl", [RIGHT, ZH, WRONG]), tmp_path / "a.json")
    cand = _evaluate(write_jsonl(tmp_path / "b.jsonl", [WRONG, RIGHT, ZH]), tmp_path / "b.json")
    by_id = {r.id: r.response for r in read_answers(tmp_path / "a.jsonl")}
    assert by_id == {r.id: r.response for r in read_answers(tmp_path / "b.jsonl")}
    report = gate.gate(base, cand)
    assert report.passed, [(c.name, c.evidence) for c in report.checks if c.verdict == "fail"]


def test_a_question_asked_once_keeps_its_question_id(tmp_path):
    ids = [r.id for r in read_answers(write_jsonl(tmp_path / "a.jsonl", [RIGHT, ZH]))]
    assert ids == [derived_id(Q_EN, {}), derived_id(Q_ZH, {})]


def test_a_repeat_gets_the_same_id_in_ragas_older_names(tmp_path):
    older = [{"question": r["user_input"], "answer": r["response"], "contexts": r["retrieved_contexts"],
              "ground_truths": [r["reference"], "HTTP 422"]} for r in (WRONG, RIGHT)]
    current = [r.id for r in read_answers(write_jsonl(tmp_path / "a.jsonl", [RIGHT, WRONG]))]
    assert [r.id for r in read_answers(write_jsonl(tmp_path / "b.jsonl", older))] == current[::-1]


def test_two_records_alike_without_ids_are_refused_naming_both_lines(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [RIGHT, ZH, {**RIGHT, "response": "It returns 422 [1]."}])
    with pytest.raises(InputError) as e:
        read_answers(path)
    assert (e.value.line, e.value.field) == (3, "id") and "line 1 asks the same question" in e.value.message
    r = run_cli("eval", "answers", "--answers", str(path), "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith(f"error: {path}:3: field 'id': missing")
    assert "Traceback" not in r.stderr and not (tmp_path / "run").exists()
    systems = [{**RIGHT, "system": "a"}, {**RIGHT, "system": "b"}]  # one question, two systems: one id, no error
    assert len({r.id for r in read_answers(write_jsonl(tmp_path / "s.jsonl", systems))}) == 1


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_a_derived_id_that_another_record_gives_is_refused_in_either_order(tmp_path, order):
    """Given after the derived one it was a duplicate; given before, the derived one became `-2`."""
    rows = [ZH, {**RIGHT, "id": derived_id(Q_ZH, {})}]
    path = write_jsonl(tmp_path / "a.jsonl", [rows[i] for i in order])
    with pytest.raises(InputError, match="id"):
        read_answers(path)


# --- 2. what scored a compared metric: unknown or another embedder --------------------------------


@pytest.fixture()
def runs() -> dict:
    return copy.deepcopy(fixtures.build())


def _relevancy(run: dict, embedder: dict | None) -> dict:
    """The run with answer_relevancy on every answerable question, scored by `embedder`."""
    for rec in run["records"]:
        answerable = rec["category"] != "not_in_kb"
        rec["metrics"]["answer_relevancy"] = 0.9 if answerable else None
        if not answerable:
            rec["nan_reasons"]["answer_relevancy"] = "not_in_kb: judged on refusal only"
    if embedder is not None:
        run["embedder"] = embedder
    return run


MINILM = {"name": "minilm", "fingerprint": "e1" * 32}
BGE = {"name": "bge", "fingerprint": "b9" * 32}
RELEVANCY = '[tier3]\nmetrics = ["faithfulness", "answer_relevancy"]\n'


def test_a_judge_without_a_fingerprint_is_refused_unless_allowed(tmp_path, runs):
    """Two runs whose judge block names no fingerprint compared their judged scores as one judge's."""
    for name in ("baseline", "clean"):
        runs[name]["judge"] = {"name": "gpt-judge"}
    b, c = _write(tmp_path, "b", runs["baseline"]), _write(tmp_path, "c", runs["clean"])
    with pytest.raises(InputError) as e:
        gate.gate(b, c)
    assert e.value.field == "judge.fingerprint" and e.value.source == str(b)
    assert "not recorded in the baseline or the candidate" in str(e.value) and "--allow-judge-change" in str(e.value)
    report = gate.gate(b, c, allow_judge_change=True)
    assert _check(report, "judge").verdict == "warn" and report.passed
    r = run_cli("gate", "--baseline", str(b), "--candidate", str(c))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_runs_without_a_splitter_are_refused_when_judged_scores_are_compared(tmp_path, runs):
    """Neither run saying how its answers were split into statements read as "split alike"."""
    for name in ("baseline", "clean"):
        del runs[name]["splitter"]
    with pytest.raises(InputError, match="splitter not recorded in the baseline or the candidate") as e:
        gate.gate(_write(tmp_path, "b", runs["baseline"]), _write(tmp_path, "c", runs["clean"]))
    assert e.value.field == "splitter"


def _relevancy_runs(tmp_path, runs, base_embedder, cand_embedder):
    """(baseline, candidate, gate.toml gating answer_relevancy) with the given embedder blocks."""
    cfg = tmp_path / "gate.toml"
    cfg.write_text(RELEVANCY, encoding="utf-8")
    return (_write(tmp_path, "b", _relevancy(runs["baseline"], base_embedder)),
            _write(tmp_path, "c", _relevancy(runs["clean"], cand_embedder)), cfg)


def test_answer_relevancy_from_another_embedder_is_refused(tmp_path, runs):
    b, c, cfg = _relevancy_runs(tmp_path, runs, MINILM, BGE)
    with pytest.raises(InputError, match="answer_relevancy's embedder") as e:
        gate.gate(b, c, cfg)
    assert e.value.field == "embedder.fingerprint" and e.value.source == str(c)
    report = gate.gate(b, c, cfg, allow_judge_change=True)
    assert _check(report, "judge").verdict == "warn" and not _failed(report)
    assert gate.gate(b, c).passed  # answer_relevancy not gated: its embedder does not matter
    same = _write(tmp_path, "same", _relevancy(copy.deepcopy(fixtures.build()["clean"]), dict(MINILM)))
    assert gate.gate(b, same, cfg).passed


def test_answer_relevancy_without_a_recorded_embedder_is_refused(tmp_path, runs):
    """Runs from before the embedder was recorded (or by hand) gated answer relevancy as comparable."""
    b, c, cfg = _relevancy_runs(tmp_path, runs, None, None)
    with pytest.raises(InputError, match="embedder not recorded in the baseline or the candidate") as e:
        gate.gate(b, c, cfg)
    assert e.value.field == "embedder.fingerprint"
    assert gate.gate(b, c, cfg, allow_judge_change=True).passed


class _AskingJudge(LexicalJudge):
    """The lexical judge, writing the answer itself back as the one generated question."""

    def generate_questions(self, response: str, n: int):
        return [response], [False]


def test_eval_answers_records_its_embedder_by_content_not_path(tmp_path):
    model = tmp_path / "one" / "minilm"
    model.mkdir(parents=True)
    for name, content in (("config.json", b"{}"), ("model.safetensors", b"\x01" * 64), ("vocab.txt", b"a\nb\n"),
                          ("README.md", b"notes")):
        (model / name).write_bytes(content)
    info = embedder_info(model)
    copied = tmp_path / "two" / "minilm"
    copied.mkdir(parents=True)
    for p in model.iterdir():
        (copied / p.name).write_bytes(p.read_bytes())
    (copied / "README.md").write_bytes(b"other notes")  # not read by the loader
    assert embedder_info(copied) == info and info["name"] == "minilm"
    (copied / "model.safetensors").write_bytes(b"\x02" * 64)
    assert embedder_info(copied)["fingerprint"] != info["fingerprint"]

    records = read_answers(write_jsonl(tmp_path / "a.jsonl", [RIGHT, ZH]))
    write_results(tmp_path / "results.json", evaluate_answers(records, _AskingJudge(), embed=_embed, embedder=info))
    assert read_results(tmp_path / "results.json").embedder == info
    assert "embedder" not in evaluate_answers(records, LexicalJudge(), embedder=info).to_json()  # nothing embedded


def _embed(text: str) -> list[float]:
    return [1.0, 0.0]


def test_answer_relevancy_is_scored_given_an_embedder_and_a_judge_that_writes_questions(tmp_path):
    """The judge reached the metric behind the evaluator's memo, which has no generate_questions:
    every answer relevancy was null, "needs an embedder and a judge that writes questions", with both."""
    records = read_answers(write_jsonl(tmp_path / "a.jsonl", [RIGHT, ZH]))
    res = evaluate_answers(records, _AskingJudge(), embed=_embed).to_json()
    assert [r["metrics"]["answer_relevancy"] for r in res["records"]] == [1.0, 1.0]
    assert res["aggregates"]["answer_relevancy"]["n"] == 2


# --- round trips and ragas' columns ---------------------------------------------------------------

ROWS = [
    {"id": "a1", "user_input": Q_EN, "response": "It returns 422 [7]. Errors are red [3].", "system": "s",
     "retrieved_contexts": [{"id": "3", "title": "SIGNUP", "text": CONTEXTS[1]}, {"id": "7", "title": "LOGIN", "text": CONTEXTS[0]}],
     "reference": "Login returns 422.", "reference_statements": ["Login returns 422"], "gold_passage_ids": ["7"],
     "category": "single_doc", "response_claims": ["Login returns 422."]},
    {"id": 2, "user_input": "账号会被锁定吗？", "response": "知识库里没有相关信息。", "retrieved_contexts": [],
     "category": "not_in_kb", "system": "s"},
    {"id": "a3", "user_input": Q_ZH, "response": "接口返回 422 [1]。", "retrieved_contexts": ["登录失败时接口返回 422。"],
     "reference": "422", "system": "s"},
]


def test_export_ragas_reads_back_to_the_same_scores(tmp_path):
    """ragas.jsonl lost the contexts' ids (the citations [7] and [3] became BAD_ID), the gold ids,
    the reference statements and the not_in_kb category: read back, every score moved in silence."""
    src = write_jsonl(tmp_path / "a.jsonl", ROWS)
    r = run_cli("eval", "answers", "--answers", str(src), "--out", str(tmp_path / "one"), "--export", "ragas")
    assert r.returncode == 0, r.stderr
    exported = tmp_path / "one" / "ragas.jsonl"
    rows = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()]
    assert rows[0]["retrieved_context_ids"] == ["3", "7"] and rows[0]["reference_context_ids"] == ["7"]
    assert rows[2]["retrieved_context_ids"] is None and rows[1]["category"] == "not_in_kb"
    assert all(isinstance(c, str) for row in rows for c in row["retrieved_contexts"])  # ragas' list of strings
    r = run_cli("eval", "answers", "--answers", str(exported), "--out", str(tmp_path / "two"))
    assert r.returncode == 0, r.stderr
    first, again = (json.loads((tmp_path / d / "results.json").read_text(encoding="utf-8")) for d in ("one", "two"))
    for a, b in zip(first["records"], again["records"], strict=True):
        for key in ("id", "system", "category", "refused", "metrics", "nan_reasons", "citation_checks", "statements",
                    "gold_passage_ids", "reference_statements", "claims"):
            assert a.get(key) == b.get(key), (a["id"], key)
    assert first["records"][0]["metrics"]["citation_recall"] == 1.0


def test_ragas_context_id_columns_are_read(tmp_path):
    row = {"user_input": Q_EN, "response": "It returns 422 [7].", "retrieved_contexts": CONTEXTS[::-1],
           "retrieved_context_ids": [3, "7"], "reference_context_ids": [7]}
    rec = read_answers(write_jsonl(tmp_path / "a.jsonl", [row]))[0]
    assert [c.id for c in rec.contexts] == ["3", "7"] and rec.docs["7"] == CONTEXTS[0]
    assert rec.gold_passage_ids == ("7",) and rec.has_context_ids


@pytest.mark.parametrize(("change", "field", "message"), [
    ({"retrieved_context_ids": ["1"]}, "retrieved_context_ids", "1 ids for 2 contexts in 'retrieved_contexts'"),
    ({"retrieved_context_ids": ["1", "01"]}, "retrieved_context_ids[1]", "context ids '1' and '01' would both be cited as [1]"),
    ({"retrieved_context_ids": ["1", 2.0]}, "retrieved_context_ids[1]", "expected a string or an integer, got float"),
    ({"retrieved_context_ids": ["a\nb", "a\nb"]}, "retrieved_context_ids[1]", "duplicate context id 'a\\nb'"),  # one line
    ({"retrieved_context_ids": "1,2"}, "retrieved_context_ids", "expected a list of ids, got str"),
    ({"retrieved_contexts": [{"id": "1", "text": "t"}], "retrieved_context_ids": ["1"]}, "retrieved_context_ids",
     "the contexts of 'retrieved_contexts' are objects with ids of their own; keep one"),
    ({"reference_context_ids": ["1"], "gold_passage_ids": ["1"]}, "reference_context_ids",
     "also given as 'gold_passage_ids'; keep one"),
    ({"retrieved_contexts": [{"id": 1.0, "text": "t"}]}, "retrieved_contexts[0].id", "expected a string or an integer, got float"),
])
def test_bad_context_ids_are_one_line_naming_the_field(tmp_path, change, field, message):
    path = write_jsonl(tmp_path / "a.jsonl", [ZH, {**RIGHT, **change}])
    with pytest.raises(InputError) as e:
        read_answers(path)
    assert str(e.value) == f"{path}:2: field '{field}': {message}"


def test_nothing_retrieved_is_recall_zero_not_unmeasurable(tmp_path):
    """An empty retrieved_contexts with gold ids was null ("plain strings"), left out of the mean
    recall@k: a retriever that found nothing for half the questions kept its mean."""
    rows = [{**RIGHT, "id": "hit", "retrieved_contexts": [{"id": "p1", "text": CONTEXTS[0]}], "gold_passage_ids": ["p1"]},
            {**RIGHT, "id": "none", "retrieved_contexts": [], "gold_passage_ids": ["p1"]}]
    res = evaluate_answers(read_answers(write_jsonl(tmp_path / "a.jsonl", rows)), LexicalJudge(), ).to_json()
    assert [r["metrics"]["recall_at_k"] for r in res["records"]] == [{"1": 1.0, "5": 1.0, "10": 1.0},
                                                                     {"1": 0.0, "5": 0.0, "10": 0.0}]
    assert res["aggregates"]["recall_at_k@1"]["mean"] == 0.5


# --- messages -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("field", "advice"), [("response", '; an answer that is not there is ""'),
                                               ("user_input", ""), ("reference", "; leave the field out or write null")])
def test_nan_says_what_to_write_instead(tmp_path, field, advice):
    """NaN in a required field advised "write null", which then failed as "missing"."""
    path = write_jsonl(tmp_path / "a.jsonl", [{**RIGHT, field: float("nan")}])
    with pytest.raises(InputError) as e:
        read_answers(path)
    assert str(e.value) == f"{path}:1: field '{field}': NaN is not a value (JSON has no NaN or Infinity){advice}"


@pytest.mark.parametrize("indent", [None, 2])
def test_a_json_array_saved_as_jsonl_says_to_name_it_json(tmp_path, indent):
    text = "\ufeff" + json.dumps([RIGHT, ZH], ensure_ascii=False, indent=indent)
    (tmp_path / "a.jsonl").write_text(text, encoding="utf-8")
    r = run_cli("eval", "answers", "--answers", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and not (tmp_path / "run").exists()
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {tmp_path / 'a.jsonl'}:1: ") and last.endswith("rename it to .json")
    (tmp_path / "a.json").write_text(text, encoding="utf-8")  # as .json, with its BOM, it reads
    assert [r.question for r in read_answers(tmp_path / "a.json")] == [Q_EN, Q_ZH]


# --- guards: what already worked and must keep working -------------------------------------------


def test_an_int_id_in_one_file_pairs_with_the_string_in_the_other(tmp_path):
    rows = [{**RIGHT, "id": 7}, {**ZH, "id": "8"}]
    base = _evaluate(write_jsonl(tmp_path / "a.jsonl", rows), tmp_path / "a.json")
    rows = [{**RIGHT, "id": "7"}, {**ZH, "id": 8}]
    cand = _evaluate(write_jsonl(tmp_path / "b.jsonl", rows), tmp_path / "b.json")
    report = gate.gate(base, cand)
    assert report.passed and _check(report, "questions").details["paired"] == 2


def test_current_and_older_ragas_names_mixed_in_one_file_with_a_bom(tmp_path):
    rows = [RIGHT, {"question": Q_ZH, "answer": ZH["response"], "contexts": ZH["retrieved_contexts"], "ground_truth": "422"}]
    text = "\ufeff" + "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    (tmp_path / "a.jsonl").write_text(text, encoding="utf-8")
    first, second = read_answers(tmp_path / "a.jsonl")
    assert (first.question, second.question, second.reference) == (Q_EN, Q_ZH, "422")
    # two such files concatenated: the second mark opens line 2, where it read as "malformed JSON at column 1"
    (tmp_path / "b.jsonl").write_text(text + text, encoding="utf-8")
    with pytest.raises(InputError, match=r"b\.jsonl:3: starts with a byte-order mark \(U\+FEFF\), allowed only at the "
                                         "start of the file: remove it$"):
        read_answers(tmp_path / "b.jsonl")
