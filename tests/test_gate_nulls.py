"""The gate on scores missing from one run, and on configs that would switch a check off unseen.

A question null in the baseline (an answer with no statements has no faithfulness) and scored 0.0 in
the candidate (a fabricated answer) counted nowhere: every paired check left the pair out, and tier 1
only saw the candidate with fewer nulls. At a cut the baseline null now reads as passing, so the
candidate failing the cut is a regression; a candidate null after a failing baseline is named, not
counted as a recovery. An empty `tier1.zero_statuses` is refused, an empty `tier3.cuts` or
`tier3.metrics` shown; a config that is not UTF-8 is named by its line."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_main
from lewisrag.eval import gate
from test_gate import _check, _failed, fixtures

N = 20
HALL = "claims.hallucination"


def _run(path: Path, scores: list, metric: str = "faithfulness") -> Path:
    """results.json with `metric` given per question (None: null, with its reason)."""
    records = []
    for i, score in enumerate(scores):
        value = {"1": score} if metric == "recall_at_k" else score
        records.append({"id": f"q{i}", "system": None, "category": "single_doc", "metrics": {metric: value},
                        "nan_reasons": {metric: "no statements"} if score is None else {}})
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.json").write_text(json.dumps({"judge": fixtures.JUDGE, "splitter": fixtures.SPLITTER,
                                                   "records": records}), encoding="utf-8")
    return path


def _gate(tmp_path: Path, base: list, cand: list, config: str = "", metric: str = "faithfulness") -> gate.GateReport:
    cfg = tmp_path / "gate.toml"
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg.write_text(config, encoding="utf-8")
    return gate.gate(_run(tmp_path / "base", base, metric), _run(tmp_path / "cand", cand, metric), cfg)


def _g1() -> tuple[list, list]:
    """The reviewer's g1: faithfulness null on q0-q2 in the baseline, 0.0 there in the candidate."""
    return [None] * 3 + [1.0] * (N - 3), [0.0] * 3 + [1.0] * (N - 3)


# ---------------------------------------------------------------------------------------------
# a baseline null, then a candidate failing the cut


def test_a_baseline_null_then_a_score_below_the_cut_is_a_regression(tmp_path):
    report = _gate(tmp_path, *_g1())
    assert not report.passed and _failed(report) == {"faithfulness < 0.5"}
    cut = _check(report, "faithfulness < 0.5")
    assert cut.evidence.startswith("more than 0 regressions | share below 0.5: 0.0% -> 15.0% "
                                   "(of the 17 scored in the baseline, the 20 in the candidate; ")
    assert "regressed 3 (3 without a score in the baseline), recovered 0" in cut.evidence
    assert cut.details["regressed"] == cut.details["regressed_unscored_in_baseline"] == ["q0", "q1", "q2"]
    assert (cut.details["mcnemar"]["b"], cut.details["mcnemar"]["c"]) == (3, 0)
    assert (cut.details["baseline_scored"], cut.details["candidate_scored"]) == (17, 20)
    assert (cut.details["baseline_failing"], cut.details["candidate_failing"]) == (0, 3)
    # the cut at 1.0 (McNemar alone, p = 0.125) sees them too, and passes
    strict = _check(report, "faithfulness < 1")
    assert strict.verdict == "pass" and strict.details["mcnemar"]["b"] == 3
    mean = _check(report, "faithfulness: paired mean")
    assert mean.verdict == "pass" and "3 scored in one run only are not in the mean" in mean.evidence
    # tier 1 saw fewer nulls: nothing to fail there
    assert _check(report, "unmeasurable faithfulness").verdict == "pass"


def test_a_baseline_null_then_a_passing_score_is_no_regression(tmp_path):
    report = _gate(tmp_path, [None] * 3 + [1.0] * (N - 3), [0.9] * 3 + [1.0] * (N - 3))
    assert report.passed
    cut = _check(report, "faithfulness < 0.5")
    assert cut.details["regressed"] == [] and "0.0% -> 0.0%" in cut.evidence
    assert _check(report, "faithfulness < 1").details["regressed"] == ["q0", "q1", "q2"]  # 0.9 is below 1.0


def test_the_allowed_regressions_count_questions_null_in_the_baseline(tmp_path):
    base, cand = _g1()
    ok = _gate(tmp_path / "three", base, cand, "[tier3]\ncuts = [{ below = 0.5, max_regressions = 3 }]\n")
    assert ok.passed and _check(ok, "faithfulness < 0.5").details["mcnemar"]["b"] == 3
    two = _gate(tmp_path / "two", base, cand, "[tier3]\ncuts = [{ below = 0.5, max_regressions = 2 }]\n")
    assert _failed(two) == {"faithfulness < 0.5"}


def test_a_lower_is_better_metric_null_in_the_baseline_then_above_the_cut_regresses(tmp_path):
    report = _gate(tmp_path, [None] * 2 + [0.0] * (N - 2), [1.0] * 2 + [0.0] * (N - 2),
                   f'[tier3]\nmetrics = ["{HALL}"]\n', metric=HALL)
    assert _failed(report) == {f"{HALL} > 0.5"}  # > 0 leaves it to McNemar: 2 of 2 discordant, p = 0.25
    cut = _check(report, f"{HALL} > 0.5")
    assert cut.details["regressed_unscored_in_baseline"] == ["q0", "q1"] and "share above 0.5: 0.0% -> 10.0%" in cut.evidence


def test_a_baseline_without_any_score_has_no_mean_but_its_cuts_run(tmp_path):
    """No question scored in both runs: the mean has nothing to pair (a skip, shown under its own
    name), and the candidate's fabricated answers still fail the cut at 0.5."""
    report = _gate(tmp_path, [None] * N, [0.0] * 4 + [1.0] * (N - 4))
    assert _check(report, "faithfulness: paired mean").verdict == "skip"
    assert "the cuts compare the 20 scored in the candidate only" in _check(report, "faithfulness: paired mean").evidence
    cut = _check(report, "faithfulness < 0.5")
    assert _failed(report) == {"faithfulness < 0.5"} and cut.details["mcnemar"]["b"] == 4
    assert "share below 0.5: none scored -> 20.0%" in cut.evidence


def test_a_recall_null_in_the_baseline_then_a_miss_is_a_regressed_hit(tmp_path):
    report = _gate(tmp_path, [None] * 3 + [1.0] * (N - 3), [0.0] * 3 + [1.0] * (N - 3), metric="recall_at_k")
    hits = _check(report, "recall@1")
    assert hits.details["mcnemar"]["b"] == 3 and hits.details["regressed_unscored_in_baseline"] == ["q0", "q1", "q2"]
    assert hits.verdict == "pass"  # McNemar alone at the hit (p = 0.125), and the paired mean has no pair to drop


# ---------------------------------------------------------------------------------------------
# a baseline failing the cut, then a candidate null


def test_a_candidate_null_after_a_failing_baseline_is_no_silent_recovery(tmp_path):
    base, cand = [0.0] * 3 + [1.0] * (N - 3), [None] * 3 + [1.0] * (N - 3)
    report = _gate(tmp_path / "strict", base, cand)
    assert _failed(report) == {"unmeasurable faithfulness"}  # tier 1 judges the lost scores, as for any new null
    relaxed = _gate(tmp_path / "relaxed", base, cand, "[tier1]\nmax_new_unmeasurable = -1\n")
    assert relaxed.passed and _check(relaxed, "unmeasurable faithfulness").verdict == "warn"
    cut = _check(relaxed, "faithfulness < 0.5")
    assert cut.details["mcnemar"]["c"] == 0 and cut.details["failing_unscored_in_candidate"] == ["q0", "q1", "q2"]
    assert ("3 below 0.5 in the baseline have no score now, not counted as recovered (tier 1 counts them): "
            "q0, q1, q2") in cut.evidence
    assert "15.0% -> 0.0% (of the 20 scored in the baseline, the 17 in the candidate; " in cut.evidence


def test_runs_scored_alike_keep_the_evidence_they_had(tmp_path):
    report = _gate(tmp_path, [1.0] * N, [1.0] * (N - 1) + [0.0])
    cut = _check(report, "faithfulness < 0.5")
    assert "share below 0.5: 0.0% -> 5.0% (n=20, one-sided 95% upper" in cut.evidence
    assert "regressed 1, recovered 0" in cut.evidence and cut.details["regressed_unscored_in_baseline"] == []


def test_the_cli_fails_the_reviewers_g1(tmp_path, monkeypatch, capsys):
    base, cand = _g1()
    code, out, _ = run_main(monkeypatch, capsys, "gate", "--baseline", _run(tmp_path / "b", base),
                            "--candidate", _run(tmp_path / "c", cand), "--json")
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    assert code == 1 and checks["faithfulness < 0.5"]["verdict"] == "fail"
    assert checks["faithfulness < 0.5"]["details"]["regressed"] == ["q0", "q1", "q2"]


# ---------------------------------------------------------------------------------------------
# a config that would switch a check off, or that is not UTF-8


def test_an_empty_zero_statuses_is_refused_naming_the_escape_hatch(tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "g.toml"
    cfg.write_text("[tier1]\nzero_statuses = []\n", encoding="utf-8")
    run = _run(tmp_path / "run", [1.0] * N)
    code, out, err = run_main(monkeypatch, capsys, "gate", "--baseline", run, "--candidate", run, "--config", cfg)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: {cfg}:2: field 'tier1.zero_statuses': empty: "), err
    assert "tier1.allow_baseline_violations = true" in err


def test_empty_cuts_or_metrics_are_shown_not_silent(tmp_path):
    base, cand = _g1()
    cuts = _gate(tmp_path / "cuts", base, cand, "[tier3]\ncuts = []\n")
    row = _check(cuts, "tier3.cuts")
    assert row.verdict == "warn" and "no question-level cut is checked" in row.evidence
    assert not any(c.name.startswith("faithfulness <") for c in cuts.checks)
    metrics = _gate(tmp_path / "metrics", base, cand, "[tier3]\nmetrics = []\ncuts = []\n")
    assert _check(metrics, "tier3.metrics").verdict == "warn"
    assert not any(c.name == "tier3.cuts" for c in metrics.checks)  # no metric: the cuts' row would say nothing more
    assert not any(c.name.startswith("tier3.") for c in gate.gate(tmp_path / "cuts" / "base", tmp_path / "cuts" / "cand").checks)


def test_a_config_that_is_not_utf8_is_named_by_its_line(tmp_path, monkeypatch, capsys):
    run = _run(tmp_path / "run", [1.0] * N)
    for name, data, line, byte in [("d.toml", b"alpha = 0.05\n\xff\n", 2, 0),  # the reviewer's d.toml
                                   ("bom.toml", b"\xef\xbb\xbfalpha = 0.05\r\n\r\n# caf\xe9\r\n", 3, 5)]:
        cfg = tmp_path / name
        cfg.write_bytes(data)
        code, out, err = run_main(monkeypatch, capsys, "gate", "--baseline", run, "--candidate", run, "--config", cfg)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert err.strip() == f"error: {cfg}:{line}: malformed TOML: not valid UTF-8 (byte {byte})", err
