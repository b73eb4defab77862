"""An audit of `lewisrag gate` as CI uses it: each test is a case that passed a regression, failed
identical runs, or crashed (a traceback exits 1, which reads as "a check failed") before its fix."""

import copy
import math
from pathlib import Path

import pytest

from conftest import run_cli
from test_gate import RUNS, _check, _failed, _write, fixtures
from lewisrag.data.io import InputError
from lewisrag.eval import gate

def _config(tmp_path: Path, toml: str) -> Path:
    path = tmp_path / "gate.toml"
    path.write_text(toml, encoding="utf-8")
    return path


@pytest.fixture()
def runs() -> dict:
    return copy.deepcopy(fixtures.build())


# --- crashes (traceback, exit 1) on input the gate accepts ----------------------------------------


@pytest.mark.parametrize("confidence", ["0.5", "0.3"])
def test_a_confidence_at_or_below_one_half_exits_2_naming_it(tmp_path, confidence):
    """A one-sided upper bound needs confidence > 0.5: the config accepted (0, 1) and the first
    upper bound raised ValueError, a traceback with exit 1 (read by CI as a failed check)."""
    path = _config(tmp_path, f"confidence = {confidence}\n")
    res = run_cli("gate", "--baseline", str(RUNS / "baseline"), "--candidate", str(RUNS / "clean"), "--config", str(path))
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith(f"error: {path}:1: field 'confidence': "), res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_recall_null_on_every_paired_question_is_no_crash(tmp_path, runs):
    """recall@1 null (with its reason) in both runs on every question: the paired check divided by
    zero (ZeroDivisionError, exit 1)."""
    run = runs["clean"]
    for rec in run["records"]:
        if rec["metrics"].get("recall_at_k"):
            rec["metrics"]["recall_at_k"]["1"] = None
            rec["nan_reasons"]["recall_at_k"] = "gold passages outside the index"
    path = _write(tmp_path, "run", run)
    report = gate.gate(path, path)
    assert report.passed
    assert _check(report, "recall@1").verdict == "skip" and _check(report, "recall@5").verdict == "pass"
    res = run_cli("gate", "--baseline", str(path), "--candidate", str(path))
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr


def test_recall_skipped_for_contexts_without_ids_says_so(tmp_path, runs):
    """Every question had gold ids, but its contexts were plain strings: the skip said "no gold passage ids"."""
    run = runs["clean"]
    for rec in run["records"]:
        rec["metrics"].pop("recall_at_k", None)
        rec["nan_reasons"]["recall_at_k"] = "retrieved_contexts are plain strings: no ids to match gold_passage_ids"
    path = _write(tmp_path, "run", run)
    check = _check(gate.gate(path, path), "recall@k")
    assert check.verdict == "skip" and "plain strings" in check.evidence and "no gold passage ids" not in check.evidence


# --- false failures: identical results that differ in float noise ----------------------------------


def _nudged(run: dict) -> dict:
    """Every score one ulp lower: what another summation order or BLAS writes for the same answers."""
    for rec in run["records"]:
        m = rec["metrics"]
        for name, v in m.items():
            if isinstance(v, float) and v > 0:
                m[name] = math.nextafter(v, 0.0)
        for k, v in (m.get("recall_at_k") or {}).items():
            if v:
                m["recall_at_k"][k] = math.nextafter(v, 0.0)
    return run


def test_float_noise_in_the_last_digit_is_no_regression(tmp_path, runs):
    """The same scores one ulp lower failed the paired mean (every difference negative: 'significant'),
    faithfulness < 1 (1.0 -> 0.9999999999999999 on ten questions) and both recall@k checks."""
    report = gate.gate(RUNS / "clean", _write(tmp_path, "noisy", _nudged(runs["clean"])))
    assert report.passed, [(c.name, c.evidence) for c in report.checks if c.verdict == "fail"]
    assert _check(report, "faithfulness: paired mean").details["worse"] == []


def test_float_noise_at_a_cut_is_no_regression(tmp_path, runs):
    """0.5 -> 0.49999999999999994 newly fell below the cut at 0.5 (max_regressions = 0): FAIL."""
    base = runs["baseline"]
    cand = copy.deepcopy(base)
    for b, c in zip(base["records"], cand["records"]):
        if b["category"] != "not_in_kb":
            b["metrics"]["faithfulness"], c["metrics"]["faithfulness"] = 0.5, math.nextafter(0.5, 0.0)
    report = gate.gate(_write(tmp_path, "b", base), _write(tmp_path, "c", cand))
    assert report.passed, [(c.name, c.evidence) for c in report.checks if c.verdict == "fail"]
    real = copy.deepcopy(cand)  # a real drop below the cut still fails
    real["records"][0]["metrics"]["faithfulness"] = 0.4
    assert "faithfulness < 0.5" in _failed(gate.gate(_write(tmp_path, "b", base), _write(tmp_path, "r", real)))


def test_float_noise_does_not_count_against_a_ceiling(tmp_path, runs):
    """A perfect score written as 0.9999999999999999 counted as 'below 1.0' against a ceiling."""
    cfg = _config(tmp_path, '[tier3]\nceilings = [{metric = "faithfulness", below = 1.0, max_share = 0.05}]\n')
    run = runs["clean"]
    for rec in run["records"]:
        if rec["category"] != "not_in_kb":
            rec["metrics"]["faithfulness"] = math.nextafter(1.0, 0.0)
    path = _write(tmp_path, "run", run)
    check = next(c for c in gate.gate(path, path, cfg).checks if c.name.startswith("share faithfulness"))
    assert check.verdict == "pass" and check.details["k"] == 0, check.evidence


# --- regressions that passed ------------------------------------------------------------------------


def test_a_not_in_kb_question_relabelled_in_the_candidate_must_still_refuse(tmp_path, runs):
    """The baseline files n001 as not_in_kb; the candidate's data calls it single_doc and answers
    it. It left the refusal check (only the candidate's not_in_kb records were read) and tier 3
    (the baseline's category excludes it): the gate passed."""
    run = runs["clean"]
    rec = next(r for r in run["records"] if r["id"] == "n001")
    rec.update(category="single_doc", refused=False)
    report = gate.gate(RUNS / "baseline", _write(tmp_path, "cand", run))
    check = _check(report, "not_in_kb refuses")
    assert check.verdict == "fail" and not report.passed and "n001@stitched" in check.evidence
    assert "n001@stitched" in check.details["relabelled"]
    rec["refused"] = True  # relabelled, still refusing: the refusal holds, and the labels check names the change
    report = gate.gate(RUNS / "baseline", _write(tmp_path, "cand2", run))
    assert {c.name for c in report.checks if c.verdict == "fail"} == {"labels"}
    assert _check(report, "labels").details["changed"] == [
        {"question": "n001@stitched", "category": {"baseline": "not_in_kb", "candidate": "single_doc"}}]
    assert _check(report, "not_in_kb refuses").verdict == "pass"


def test_a_metric_the_config_names_that_no_paired_question_scores_fails(tmp_path, runs):
    """`tier3.metrics = ["answer_relevancy"]` on runs without an embedder (null everywhere, with its
    reason): tier 3 said 'skip', tier 1 saw no change, and the gate passed having checked nothing
    the config asked for. Named explicitly, it fails; the packaged list still skips what a run
    does not produce."""
    for run in (runs["baseline"], runs["clean"]):
        for rec in run["records"]:
            rec["metrics"]["answer_relevancy"] = None
            rec["nan_reasons"]["answer_relevancy"] = "needs an embedder (--embedder)"
            if rec["category"] != "not_in_kb":
                del rec["metrics"]["context_recall"]  # a metric this system does not produce
    b, c = _write(tmp_path, "b", runs["baseline"]), _write(tmp_path, "c", runs["clean"])
    cfg = _config(tmp_path, '[tier3]\nmetrics = ["faithfulness", "answer_relevancy"]\n')
    report = gate.gate(b, c, cfg)
    check = _check(report, "answer_relevancy")
    assert check.verdict == "fail" and not report.passed and "tier3.metrics" in check.evidence
    assert _failed(report) == {"answer_relevancy"}
    res = run_cli("gate", "--baseline", str(b), "--candidate", str(c), "--config", str(cfg))
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    default = gate.gate(b, c)  # context_recall comes from the packaged list: absent from both, a skip
    assert default.passed and _check(default, "context_recall").verdict == "skip"


def _with_claims(run: dict, extractor: str | None) -> dict:
    if extractor is not None:
        run["config"]["claim_extractor"] = extractor
    for rec in run["records"]:
        if rec["category"] == "not_in_kb":
            rec["metrics"]["claims.precision"] = None
            rec["nan_reasons"]["claims.precision"] = "not_in_kb: judged on refusal only"
        else:
            rec["metrics"]["claims.precision"] = 0.5
    return run


def test_a_claim_extractor_change_is_refused_when_claims_are_gated(tmp_path, runs):
    """`eval answers --claim-extractor llm` against a `splitter` baseline (same judge, same splitter):
    the claims are other texts, yet claims.* gated in tier 3 were compared as if comparable."""
    b = _write(tmp_path, "b", _with_claims(runs["baseline"], None))  # no setting: the splitter's claims
    c = _write(tmp_path, "c", _with_claims(runs["clean"], "llm"))
    cfg = _config(tmp_path, '[tier3]\nmetrics = ["faithfulness", "claims.precision"]\n')
    with pytest.raises(InputError, match="claim extractor 'splitter' -> 'llm'") as e:
        gate.gate(b, c, cfg)
    assert e.value.field == "config.claim_extractor" and "--allow-judge-change" in str(e.value)
    report = gate.gate(b, c, cfg, allow_judge_change=True)
    assert _check(report, "judge").verdict == "warn" and report.passed
    assert gate.gate(b, c).passed  # claims not gated: the extractor does not matter
    same = _write(tmp_path, "same", _with_claims(runs["clean"], "splitter"))
    assert gate.gate(b, same, cfg).passed


@pytest.mark.parametrize(("toml", "field"), [
    ('[tier1]\nzero_statuses = ["BAD_ID", "MISSING_CITATION", "BAD_ID"]\n', "tier1.zero_statuses"),
    ("[tier3]\ncuts = [{ below = 0.5, max_regressions = 0 }, { below = 0.5, max_regressions = 3 }]\n", "tier3.cuts"),
])
def test_a_check_given_twice_in_the_config_is_refused(tmp_path, toml, field):
    """Two cuts at 0.5 (or a status twice) ran the check twice under one name, with limits that may
    contradict (0 and 3 regressions allowed); a --json reader keyed by name kept either verdict."""
    path = _config(tmp_path, toml)
    res = run_cli("gate", "--baseline", str(RUNS / "baseline"), "--candidate", str(RUNS / "clean"), "--config", str(path))
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stdout + res.stderr
    assert res.stderr.startswith(f"error: {path}:2: field '{field}': ") and "given twice" in res.stderr, res.stderr


def test_a_candidate_that_pairs_with_no_question_fails_even_when_missing_ones_are_tolerated(tmp_path, runs):
    """`require_all_baseline = false` and every id renamed (another id scheme): 0 paired, every
    paired check skipped or counted 0 -> 0, and the gate passed having compared nothing."""
    run = runs["hidden_regression"]
    for rec in run["records"]:
        rec["id"] = "x-" + rec["id"]
    cfg = _config(tmp_path, "require_all_baseline = false\n")
    report = gate.gate(RUNS / "baseline", _write(tmp_path, "cand", run), cfg)
    check = _check(report, "questions")
    assert check.verdict == "fail" and not report.passed and check.details["paired"] == 0
    assert "nothing was compared" in check.evidence
    some = copy.deepcopy(runs["clean"])  # missing questions alone are still tolerated, as configured
    del some["records"][:3]
    assert gate.gate(RUNS / "baseline", _write(tmp_path, "some", some), cfg).passed


def test_a_handful_of_bootstrap_resamples_is_refused(tmp_path):
    """n_resamples = 1 printed numpy RuntimeWarnings into the gate's output and read a one-draw
    interval as 'significantly lower'; a percentile interval needs draws in its tails."""
    path = _config(tmp_path, "n_resamples = 1\n")
    res = run_cli("gate", "--baseline", str(RUNS / "baseline"), "--candidate", str(RUNS / "clean"), "--config", str(path))
    assert res.returncode == 2 and "Warning" not in res.stderr, res.stdout + res.stderr
    assert res.stderr.startswith(f"error: {path}:1: field 'n_resamples': expected a count from 100"), res.stderr


@pytest.mark.parametrize(("toml", "line"), [
    ("# thresholds\n[tier3]\nmax_mean_drop = \n", 3),  # a value left out
    ("alpha = 0.05\nalpha = 0.1\n", 2),  # a key set twice
    ("# 门禁\n[tier3]\n指标 = 1\n", 3),  # a key TOML cannot read bare
])
def test_a_toml_syntax_error_names_its_line_where_ci_reads_it(tmp_path, toml, line):
    """A syntax error's position was inside the message only ("file: malformed TOML: ... (at line 3,
    column 1)"), not as file:line like every other error a CI log matcher picks up."""
    path = _config(tmp_path, toml)
    res = run_cli("gate", "--baseline", str(RUNS / "baseline"), "--candidate", str(RUNS / "clean"), "--config", str(path))
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith(f"error: {path}:{line}: malformed TOML: "), res.stderr


def test_a_paired_id_whose_question_text_changed_fails(tmp_path, runs):
    """The data set rewrote q003's question and kept its id: the gate compared the scores of two
    different questions and passed. Whitespace and Unicode normalisation are no change."""
    base, cand = runs["baseline"], runs["clean"]
    for b, c in zip(base["records"], cand["records"]):
        b["question"] = f"加斯洛{b['id']}国的首都是哪里？"
        c["question"] = f"  加斯洛{c['id']}国的首都是哪里？\n"  # the same question, other whitespace
    cand["records"][0]["question"] = "Cafe\u0301 " + cand["records"][0]["question"]  # NFD of the same text
    base["records"][0]["question"] = "Caf\u00e9 " + base["records"][0]["question"]
    b = _write(tmp_path, "b", base)
    assert gate.gate(b, _write(tmp_path, "same", cand)).passed
    cand["records"][2]["question"] = "加斯洛q003国使用什么货币？"
    report = gate.gate(b, _write(tmp_path, "changed", cand))
    check = _check(report, "question text")
    assert check.verdict == "fail" and not report.passed and "q003@stitched" in check.evidence
    assert check.details["changed"][0]["candidate"] == "加斯洛q003国使用什么货币？"


def test_a_paired_question_judged_against_other_labels_fails(tmp_path, runs):
    """The data set moved q002's gold passage and rewrote q003's reference, keeping their ids: the gate
    compared recall against another gold passage (a worse retriever passed) and completeness against
    another reference. The same labels in another order, or labels added where there were none, are no change."""
    base = runs["baseline"]
    for rec in base["records"]:
        rec["gold_passage_ids"] = [f"{rec['id']}-a", f"{rec['id']}-b"]
        rec["reference_statements"] = [{"text": f"The answer to {rec['id']}.", "in_contexts": True, "in_answer": True}]
    base["records"][0]["gold_passage_ids"] = []  # unlabelled in the baseline
    cand = copy.deepcopy(base)
    cand["records"][0]["gold_passage_ids"] = ["q001-a"]  # a label added: the baseline measured nothing to compare
    cand["records"][1]["gold_passage_ids"].reverse()
    cand["records"][1]["reference_statements"][0]["text"] = "  The answer to q002.\n"  # whitespace only
    b = _write(tmp_path, "b", base)
    assert gate.gate(b, _write(tmp_path, "same", cand)).passed
    cand["records"][1]["gold_passage_ids"] = ["elsewhere"]
    cand["records"][2]["reference_statements"][0]["text"] = "Another reference."
    report = gate.gate(b, _write(tmp_path, "relabelled", cand))
    check = _check(report, "labels")
    assert check.verdict == "fail" and not report.passed, check.evidence
    assert "2 paired questions are judged against other gold_passage_ids and reference_statements" in check.evidence
    assert "q002@stitched" in check.evidence and "q003@stitched" in check.evidence
    changed = {c["question"]: c for c in check.details["changed"]}
    assert changed["q002@stitched"]["gold_passage_ids"] == {"baseline": ["q002-a", "q002-b"], "candidate": ["elsewhere"]}
    assert changed["q003@stitched"]["reference_statements"]["candidate"] == ["Another reference."]


def test_a_mean_drop_equal_to_the_allowed_drop_passes(tmp_path, runs):
    """One of 15 questions from 0.4 to 0.1 drops the mean by 0.3 / 15 = 0.02, the allowed drop; numpy's
    mean is -0.020000000000000004 and "dropped more than 0.02" failed it."""
    base = runs["baseline"]
    base["records"] = base["records"][:15]
    for rec in base["records"]:
        rec["metrics"]["faithfulness"] = 0.4
    cand = copy.deepcopy(base)
    cand["records"][0]["metrics"]["faithfulness"] = 0.1
    report = gate.gate(_write(tmp_path, "b", base), _write(tmp_path, "c", cand))
    mean = _check(report, "faithfulness: paired mean")
    assert mean.verdict == "pass" and mean.details["mean_diff"] == pytest.approx(-0.02), mean.evidence
    cand["records"][1]["metrics"]["faithfulness"] = 0.39  # and a hair more is a drop beyond it
    assert "faithfulness: paired mean" in _failed(gate.gate(_write(tmp_path, "b", base), _write(tmp_path, "c2", cand)))
