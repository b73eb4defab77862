"""RAGChecker's claim-level diagnostics inside `eval answers`: where the claims come from, one judge
batch, results.json (per question, aggregates with intervals, validated on read), the reports and
their sentences, bad claim fields."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from conftest import run_cli, write_jsonl
from lewisrag.cli import app
from lewisrag.data.io import InputError
from lewisrag.eval import claims
from lewisrag.eval.evaluator import NO_REFERENCE_REASON, EvalConfig, evaluate_answers
from lewisrag.eval.judges import FunctionJudge
from lewisrag.eval.records import parse_answer
from lewisrag.eval.reports.claims import claim_sentences
from lewisrag.eval.results import CLAIM_METRICS, read_results
from lewisrag.eval.statements import split_sentences

CONTEXTS = ["Login with a wrong password returns 422.", "Signup errors are listed in red."]
RECORD = {"id": "q1", "user_input": "What does login return on a wrong password?",
          "response": "It returns 422 [1]. Errors are listed in red [2].", "retrieved_contexts": CONTEXTS,
          "reference": "Login returns 422. The account locks for 15 minutes."}


def contains(premise: str, hypothesis: str) -> bool:
    return hypothesis.lower().rstrip(".") in premise.lower()


class CountingJudge:
    """A judge that keeps every batch it was asked."""

    name, fingerprint = "counting", "c" * 64

    def __init__(self, fn=contains):
        self.inner, self.batches = FunctionJudge(fn), []

    def judge(self, pairs):
        self.batches.append(list(pairs))
        return self.inner.judge(pairs)


class Decomposer(CountingJudge):
    """A judge with an atomic splitter: every comma ends a claim."""

    def decompose(self, text: str) -> list[str]:
        return [part.strip(" .") for part in text.replace(".", ",").split(",") if part.strip(" .")]


def _evaluate(rows: list[dict], judge=None, **cfg) -> dict:
    records = [parse_answer(r, "answers.jsonl", i, {}) for i, r in enumerate(rows, start=1)]
    return evaluate_answers(records, judge or CountingJudge(), EvalConfig(**cfg)).to_json()


def _claim_metrics(rec: dict) -> dict:
    return {m: rec["metrics"][m] for m in CLAIM_METRICS}


def test_given_claims_are_used_as_is():
    given = {"response_claims": ["login returns 422", "errors are red"], "reference_claims": ["returns 422", "locks 15 minutes"]}
    judge = CountingJudge()
    (rec,) = _evaluate([{**RECORD, **given}], judge)["records"]
    assert rec["claims"]["response"] == given["response_claims"] and rec["claims"]["reference"] == given["reference_claims"]
    assert rec["claims"]["source"] == {"response": "response_claims", "reference": "reference_claims"}
    direct = claims.claim_diagnostics(given["response_claims"], given["reference_claims"], "It returns 422. Errors are listed in red.",
                                      RECORD["reference"], CONTEXTS, FunctionJudge(contains))
    assert _claim_metrics(rec) == {f"claims.{m}": direct[m] for m in claims.METRICS}
    assert rec["metrics"]["claims.precision"] == 0.5 and rec["metrics"]["claims.recall"] == 0.5  # the claims' own numbers
    asked = {pair for batch in judge.batches for pair in batch}
    assert {(ctx, c) for c in given["response_claims"] + given["reference_claims"] for ctx in CONTEXTS} <= asked


def test_without_claims_the_splitter_makes_them():
    statements = ["反面", "reference one.", "reference two."]
    (plain, stated) = _evaluate([RECORD, {**RECORD, "id": "q2", "reference_statements": statements}])["records"]
    assert plain["claims"]["response"] == ["It returns 422.", "Errors are listed in red."]  # sentences, citations removed
    assert plain["claims"]["reference"] == [s.text for s in split_sentences(RECORD["reference"])]
    assert plain["claims"]["source"] == {"response": "sentences", "reference": "sentences"}
    assert stated["claims"]["reference"] == statements and stated["claims"]["source"]["reference"] == "reference_statements"
    (atomic,) = _evaluate([RECORD], Decomposer(), splitter="atomic")["records"]
    assert atomic["claims"]["response"] == ["It returns 422", "Errors are listed in red"]
    assert atomic["claims"]["source"]["response"] == "atomic"


def test_claim_checks_go_in_the_one_batch_of_first_level_pairs():
    judge = CountingJudge()
    rows = [RECORD, {**RECORD, "id": "q2", "response": "It returns 500 [1]."}]
    out = _evaluate(rows, judge)
    assert len(judge.batches) == 1  # no citation follow-ups here, and the claims add no call of their own
    for rec in out["records"]:
        pairs = [(ctx, c) for c in rec["claims"]["response"] + rec["claims"]["reference"] for ctx in CONTEXTS]
        pairs += [(RECORD["reference"], c) for c in rec["claims"]["response"]]  # is each claim right?
        assert set(pairs) <= set(judge.batches[0])


def test_without_a_reference_only_faithfulness_is_computed():
    row = {k: v for k, v in RECORD.items() if k != "reference"}
    judge = CountingJudge()
    (rec,) = _evaluate([row], judge)["records"]
    m, why = _claim_metrics(rec), rec["nan_reasons"]
    assert m["claims.faithfulness"] == 0.5  # "Errors are listed in red" is in a passage, "It returns 422" in none
    assert all(m[k] is None and why[k] == NO_REFERENCE_REASON for k in CLAIM_METRICS if k != "claims.faithfulness")
    assert rec["claims"]["reference"] == [] and rec["claims"]["source"]["reference"] is None
    assert {(ctx, c) for c in rec["claims"]["response"] for ctx in CONTEXTS} <= set(judge.batches[0])


def test_not_in_kb_and_switched_off():
    nik = {**RECORD, "id": "q3", "category": "not_in_kb", "response": "I don't know."}
    (rec,) = _evaluate([nik])["records"]
    assert all(rec["metrics"][m] is None and "not_in_kb" in rec["nan_reasons"][m] for m in CLAIM_METRICS)
    off = _evaluate([RECORD], claims=False)
    assert not any(k.startswith("claims.") for k in off["records"][0]["metrics"]) and "claims" not in off["records"][0]
    assert not any(k.startswith("claims.") for k in off["aggregates"]) and off["config"]["claims"] is False


@pytest.fixture
def run(tmp_path):
    rows = [RECORD, {**RECORD, "id": "q2", "response": "It returns 500 [1]. Errors are listed in red [2]."},
            {k: v for k, v in {**RECORD, "id": "q3"}.items() if k != "reference"}]
    src = write_jsonl(tmp_path / "answers.jsonl", rows)
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["eval", "answers", "--answers", str(src), "--judge", "lexical", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "claim-level diagnostics" in r.output
    return out


def test_results_json_has_per_question_diagnostics_and_aggregates_with_intervals(run):
    res = json.loads((run / "results.json").read_text(encoding="utf-8"))
    for rec in res["records"]:
        for m in CLAIM_METRICS:
            v = rec["metrics"][m]
            assert (v is None and rec["nan_reasons"][m]) or 0.0 <= v <= 1.0, (rec["id"], m)
    scores = [rec["metrics"]["claims.hallucination"] for rec in res["records"]]
    agg = res["aggregates"]["claims.hallucination"]
    assert agg["n"] == 2 and agg["nan"] == 1 and math.isclose(agg["mean"], sum(s for s in scores if s is not None) / 2)
    for m in CLAIM_METRICS:
        a = res["aggregates"][m]
        if a["n"]:
            assert a["interval"]["low"] <= a["mean"] <= a["interval"]["high"] and a["interval"]["confidence"] == 0.95
    assert read_results(run).records[0].metrics["claims.precision"] == res["records"][0]["metrics"]["claims.precision"]


@pytest.mark.parametrize(("value", "reason", "match"), [
    (1.5, None, r"records\[0\]\.metrics\.claims\.precision'?: 1\.5 is outside"),
    (None, "", r"records\[0\]\.metrics\.claims\.precision'?: null without a reason"),
    ("high", None, r"records\[0\]\.metrics\.claims\.precision'?: expected a number"),
])
def test_read_results_validates_the_diagnostics(run, tmp_path, value, reason, match):
    res = json.loads((run / "results.json").read_text(encoding="utf-8"))
    res["records"][0]["metrics"]["claims.precision"] = value
    if reason is not None:
        res["records"][0]["nan_reasons"]["claims.precision"] = reason
    (tmp_path / "bad.json").write_text(json.dumps(res), encoding="utf-8")
    with pytest.raises(InputError, match=match):
        read_results(tmp_path / "bad.json")


def test_read_results_refuses_an_unknown_diagnostic(run, tmp_path):
    res = json.loads((run / "results.json").read_text(encoding="utf-8"))
    res["records"][1]["metrics"]["claims.accuracy"] = 0.5
    (tmp_path / "bad.json").write_text(json.dumps(res), encoding="utf-8")
    # one line of JSON: every record opens on line 1, and the field names which record
    with pytest.raises(InputError, match=r":1: field 'records\[1\]\.metrics\.claims\.accuracy': unknown claim diagnostic"):
        read_results(tmp_path / "bad.json")


def test_reports_show_the_section(run):
    md = (run / "report.md").read_text(encoding="utf-8")
    section = md[md.index("## Claim-level diagnostics"):md.index("## Layers per question")]
    assert "| noise sensitivity (relevant) |" in section and "| hallucination |" in section and "[" in section
    assert "- Hallucination (a wrong claim in no passage)" in section and "- Self-knowledge (a right claim in no passage" in section
    distributions = md[:md.index("## Claim-level diagnostics")]
    assert "claims." not in distributions  # not repeated in the distributions table
    page = (run / "report.html").read_text(encoding="utf-8")
    assert '<section id="claims" class="card claims">' in page and "context utilization" in page


@pytest.mark.parametrize(("row", "field", "message"), [
    ({**RECORD, "response_claims": "It returns 422."}, "response_claims", "expected a list of strings"),
    ({**RECORD, "response_claims": ["ok", "  "]}, "response_claims[1]", "empty claim"),
    ({**RECORD, "reference_claims": ["ok", 3]}, "reference_claims", "expected a list of strings"),
])
def test_a_bad_claims_field_is_one_line_naming_file_line_and_field(tmp_path, row, field, message):
    src = write_jsonl(tmp_path / "answers.jsonl", [RECORD, {**row, "id": "q2"}])
    r = run_cli("eval", "answers", "--answers", str(src), "--judge", "lexical", "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1] == f"error: {src}:2: field '{field}': {message}"
    assert not (tmp_path / "run").exists()


def _column(noise_rel: float, noise_irr: float, hallucination: float, **more: float) -> dict:
    values = {"noise_sensitivity_in_relevant": noise_rel, "noise_sensitivity_in_irrelevant": noise_irr,
              "hallucination": hallucination, **more}
    return {f"claims.{m}": {"n": 4, "nan": 0, "mean": v, "interval": {"low": v, "high": v, "confidence": 0.95}}
            for m, v in values.items()}


def test_sentences_are_computed_from_the_numbers():
    columns = {"a": _column(0.25, 0.05, 0.1, self_knowledge=0.0), "b": _column(0.0, 0.05, 0.4, self_knowledge=0.2)}
    (hal,) = [s for s in claim_sentences(columns, lambda n: f"`{n}`") if s.startswith("Hallucination")]
    assert ("wrong claims come more from the passages than from nowhere for `a` (0.300 against 0.100); "
            "more from nowhere than from the passages for `b` (0.050 against 0.400)") in hal
    assert "(highest for `b`, lowest for `a`)" in hal
    (own,) = [s for s in claim_sentences(columns, str) if s.startswith("Self-knowledge")]
    assert "a 0.000, b 0.200 (highest for b, lowest for a)" in own
    same = claim_sentences({"a": columns["a"], "b": columns["a"]}, str)
    assert "a 0.000, b 0.000 (the same for every one)." in next(s for s in same if s.startswith("Self-knowledge"))
    (unmeasured,) = [s for s in claim_sentences(columns, str) if s.startswith("Faithfulness")]
    assert unmeasured.endswith(": no question has a value.")
    swapped = claim_sentences({"a": columns["b"], "b": columns["a"]}, str)
    assert "more from nowhere than from the passages for a" in next(s for s in swapped if s.startswith("Hallucination"))
    (alone,) = [s for s in claim_sentences({"all": columns["a"]}, str) if s.startswith("Hallucination")]
    assert alone == ("Hallucination (a wrong claim in no passage): 0.100; wrong claims come more from the passages than "
                     "from nowhere (0.300 against 0.100).")


def test_recall_zero_everywhere_is_explained_not_left_to_look_like_a_broken_metric():
    """Short answers (a name, a year) state no whole reference claim: recall 0 in every column, as in
    the demo's report; the sentence says why, and says nothing when some column's recall is above 0."""
    short = _column(0.1, 0.2, 0.1, precision=0.6, recall=0.0, f1=0.0, context_utilization=0.0)
    vaguer = {**short, **_column(0.1, 0.2, 0.1, precision=0.5)}
    (prf,) = [s for s in claim_sentences({"a": short, "b": vaguer}, str) if s.startswith("Precision")]
    assert prf.endswith(". Recall, and with it F1 and context utilization, is 0 in every column: these ask whether the "
                        "answer itself states each reference claim, which a short answer (a name, a year) never does; "
                        "on short-answer questions read precision and the passage-side metrics instead."), prf
    assert "(most precise: a, least: b). Recall" in prf  # no "(the same for every one)" of recall beside the reason
    used = {**short, **_column(0.1, 0.2, 0.1, context_utilization=0.5)}
    (prf,) = [s for s in claim_sentences({"all": used}, str) if s.startswith("Precision")]
    assert "is 0 in every column" in prf and "F1 and context" not in prf
    (zh,) = [s for s in claim_sentences({"all": short}, str, "zh") if s.startswith("精确率")]
    assert "召回率（以及随之的 F1 和上下文利用率）在每一列都是 0" in zh
    answered = {"a": short, "b": {**short, **_column(0.1, 0.2, 0.1, recall=0.25)}}
    assert not any("in every column" in s for s in claim_sentences(answered, str))
    assert not any("in every column" in s for s in claim_sentences({"all": _column(0.1, 0.2, 0.1)}, str))  # no recall: no sentence
