"""The gate on a not_in_kb question whose generator failed, on a question relabelled answerable ->
not_in_kb, on confidence levels that are not whole percents, on ceilings of answer_relevancy at or
below 0, and on a McNemar p-value equal to alpha.

A not_in_kb question whose generator failed (compare's `generator_error`) was reported as "answered
instead of refusing"; it still fails, listed apart as "no answer: the generator failed". A question
relabelled answerable -> not_in_kb gave six "unmeasurable" failures and no check named the change: the
labels check now compares the category, and tier 1 leaves the question out, as it did the reverse. A
confidence of 0.995 printed "100%". A ceiling `below = 0` for answer_relevancy (range [-1, 1]) was
refused as outside (0, 1]. McNemar rejected at p < alpha; a level-alpha test rejects at p <= alpha.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import write_jsonl
from lewisrag.cli import app
from lewisrag.data.io import InputError
from lewisrag.eval import gate
from lewisrag.eval.gate.correction import Correction
from lewisrag.eval.gate.inputs import load_config
from test_gate import _check, _failed, fixtures

METRICS = ["faithfulness", "context_recall", "answer_completeness", "citation_recall", "citation_precision"]


def _rec(i: int, category: str = "single_doc", score: float | None = 1.0, refused: bool = False,
         gold: bool = True, **extra) -> dict:
    """A record scored `score` on every gated metric (None: null, with a not_in_kb reason)."""
    rec = {"id": f"q{i:03d}", "system": None, "category": category, "refused": refused,
           "metrics": {m: score for m in METRICS}, "nan_reasons": {}}
    if gold:
        rec["metrics"]["recall_at_k"] = {"5": 1.0}
        rec["gold_passage_ids"] = [f"p{i}"]
    if score is None:
        rec["nan_reasons"] = {m: "not_in_kb: judged on refusal only, never averaged" for m in METRICS}
    return rec | extra


def _nik(i: int, refused: bool = True, **extra) -> dict:
    return _rec(i, "not_in_kb", None, refused, gold=False, **extra)


def _write(path: Path, records: list[dict]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.json").write_text(json.dumps({"judge": fixtures.JUDGE, "splitter": fixtures.SPLITTER,
                                                   "records": records}), encoding="utf-8")
    return path


def _gate(tmp_path: Path, base: list[dict], cand: list[dict], config: str = "") -> gate.GateReport:
    cfg = tmp_path / "gate.toml"
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg.write_text(config, encoding="utf-8")
    return gate.gate(_write(tmp_path / "base", base), _write(tmp_path / "cand", cand), cfg)


# ---------------------------------------------------------------------------------------------
# 1. a not_in_kb question whose generator failed


def test_a_failed_generator_on_a_not_in_kb_question_fails_listed_as_no_answer(tmp_path):
    base = [_rec(i) for i in range(20)] + [_nik(20), _nik(21)]
    cand = [_rec(i) for i in range(20)] + [_nik(20, refused=False, generator_error="timeout after 5s (3 attempts)"),
                                           _nik(21, refused=False)]
    report = _gate(tmp_path, base, cand)
    assert _failed(report) == {"not_in_kb refuses"}
    check = _check(report, "not_in_kb refuses")
    assert check.evidence == ("0/2 refused; answered instead of refusing: q021; "
                              "no answer: the generator failed: q020")
    assert check.details["answered"] == ["q021"] and check.details["generator_failed"] == ["q020"]
    assert check.details["failing"] == ["q020", "q021"]


def test_a_failed_generator_alone_is_not_called_an_answer(tmp_path):
    base = [_rec(i) for i in range(20)] + [_nik(20)]
    cand = [_rec(i) for i in range(20)] + [_nik(20, refused=False, generator_error="HTTP 500")]
    check = _check(_gate(tmp_path, base, cand), "not_in_kb refuses")
    assert check.verdict == "fail" and "answered instead of refusing" not in check.evidence
    assert check.evidence.endswith("no answer: the generator failed: q020")


# ---------------------------------------------------------------------------------------------
# 2. a question relabelled between runs


def test_relabelled_answerable_to_not_in_kb_is_named_by_the_labels_check_once(tmp_path):
    base = [_rec(i) for i in range(30)]
    cand = [_rec(i) for i in range(29)] + [_nik(29)]
    report = _gate(tmp_path, base, cand)
    assert _failed(report) == {"labels"}  # not six "unmeasurable ..." failures
    labels = _check(report, "labels")
    assert "against other category in the candidate" in labels.evidence and labels.evidence.endswith("q029")
    assert labels.details["changed"] == [{"question": "q029", "category": {"baseline": "single_doc",
                                                                           "candidate": "not_in_kb"}}]
    for c in report.checks:
        if c.name.startswith("unmeasurable"):
            assert c.verdict == "pass" and c.details["paired"] == 29, c
    assert _check(report, "not_in_kb refuses").verdict == "pass"  # it refused, as a not_in_kb question must


def test_relabelled_not_in_kb_to_answerable_is_named_too(tmp_path):
    base = [_rec(i) for i in range(29)] + [_nik(29)]
    cand = [_rec(i) for i in range(30)]
    report = _gate(tmp_path, base, cand)
    assert _failed(report) == {"labels", "not_in_kb refuses"}
    assert _check(report, "labels").details["changed"][0]["category"] == {"baseline": "not_in_kb",
                                                                           "candidate": "single_doc"}
    assert all(c.verdict == "pass" for c in report.checks if c.name.startswith("unmeasurable"))


def test_a_category_kept_is_no_label_change(tmp_path):
    records = [_rec(i) for i in range(20)] + [_nik(20)]
    report = _gate(tmp_path, records, [dict(r) for r in records])
    assert report.passed and all(c.name != "labels" for c in report.checks)


# ---------------------------------------------------------------------------------------------
# 3. confidence levels that are not whole percents


def test_a_confidence_of_99_5_percent_is_printed_as_such(tmp_path):
    base = [_rec(i) for i in range(30)]
    cand = [_rec(i) for i in range(25)] + [_rec(i, score=0.4) for i in range(25, 30)]
    config = ('confidence = 0.995\n[tier3]\nceilings = [{ metric = "faithfulness", below = 0.5, '
              'max_share = 0.5 }]\n')
    report = _gate(tmp_path, base, cand, config)
    assert "one-sided 99.5% upper" in _check(report, "faithfulness < 0.5").evidence
    assert _check(report, "faithfulness: paired mean").evidence.split("sign-flip")[0].endswith(
        "99.5% CI [-0.220, +0.000] (bootstrap); ")
    assert "99.5% upper bound (wilson)" in _check(report, "share faithfulness < 0.5 <= 50.0%").evidence
    assert all("100%" not in c.evidence for c in report.checks)


def test_whole_percents_print_as_before():
    assert Correction("none", 0.05, 1, 1, 0.95).ci_label(0.95) == "95%"
    assert Correction("none", 0.05, 1, 1, 0.9).ci_label(0.9) == "90%"
    assert Correction("none", 0.05, 1, 1, 0.995).ci_label(0.995) == "99.5%"


def test_calibrate_prints_a_confidence_of_99_5_percent(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    rows = [{"id": "s1", "premise": "A is 1.", "hypothesis": "A is 1.", "supported": True},
            {"id": "s2", "premise": "A is 1.", "hypothesis": "B is 2.", "supported": False}]
    labels = write_jsonl(tmp_path / "labels.jsonl", rows)
    res = CliRunner().invoke(app, ["calibrate", "--judge", f"labels:{labels}", "--labels", str(labels),
                                   "--confidence", "0.995"])
    assert res.exit_code == 0, res.output
    assert "(99.5% Wilson intervals)" in res.stdout and "100%" not in res.stdout


# ---------------------------------------------------------------------------------------------
# 4. a ceiling in its metric's own range


@pytest.mark.parametrize("below", ["0.0", "-0.5", "1.0"])
def test_an_answer_relevancy_ceiling_may_sit_at_or_below_zero(tmp_path, below):
    cfg = tmp_path / "gate.toml"
    cfg.write_text(f'[tier3]\nceilings = [{{ metric = "answer_relevancy", below = {below}, max_share = 0.1 }}]\n',
                   encoding="utf-8")
    assert load_config(cfg).ceilings[0].below == float(below)


@pytest.mark.parametrize(("metric", "below", "message"), [
    ("answer_relevancy", "-1.0", r"-1\.0 is outside \(-1, 1\]"),  # no score is below -1: it would pass anything
    ("answer_relevancy", "1.5", r"1\.5 is outside \(-1, 1\]"),
    ("faithfulness", "0.0", r"0\.0 is outside \(0, 1\]"),  # faithfulness's range is still [0, 1]
    ("faithfulness", "-0.5", r"-0\.5 is outside \(0, 1\]"),
])
def test_a_ceiling_outside_its_metric_range_is_refused(tmp_path, metric, below, message):
    cfg = tmp_path / "gate.toml"
    cfg.write_text(f'[tier3]\nceilings = [{{ metric = "{metric}", below = {below}, max_share = 0.1 }}]\n',
                   encoding="utf-8")
    with pytest.raises(InputError, match=message) as e:
        load_config(cfg)
    assert e.value.field == "tier3.ceilings[0].below"


# ---------------------------------------------------------------------------------------------
# 5. McNemar at p == alpha


def test_mcnemar_rejects_at_p_equal_to_alpha(tmp_path):
    """4 of 30 questions fall below 1.0, none rise: the exact one-sided p is 0.5**4 = 0.0625."""
    base = [_rec(i) for i in range(30)]
    cand = [_rec(i) for i in range(26)] + [_rec(i, score=0.9) for i in range(26, 30)]
    config = 'alpha = 0.0625\ncorrection = "none"\n[tier3]\nmetrics = ["faithfulness"]\nmax_mean_drop = 1.0\n'
    report = _gate(tmp_path, base, cand, config)
    cut = _check(report, "faithfulness < 1")
    assert cut.details["mcnemar"]["pvalue"] == 0.0625
    assert cut.verdict == "fail" and cut.evidence.startswith("McNemar p <= 0.0625 | ")
    # just above alpha: no rejection
    report = _gate(tmp_path / "above", base, cand, config.replace("0.0625", "0.0624"))
    assert _check(report, "faithfulness < 1").verdict == "pass"
