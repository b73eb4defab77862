"""The gate's family-wise correction (`correction = "holm"` in gate.toml): Holm over the run's McNemar
p-values, Bonferroni over its tests of the mean (a sign-flip p-value at (1 - interval confidence) / 2,
beside the bootstrap interval at that confidence); checked by hand, on an unchanged system gated many
times, and on the config and the command."""

from __future__ import annotations

import copy
import dataclasses
import json
import random

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import run_cli
from lewisrag.cli import app
from lewisrag.data.io import InputError
from lewisrag.eval import gate, stats
from lewisrag.eval.gate import Run, load_config, run_gate
from test_gate import RUNS, _check, _failed, _gate, _write, fixtures

HOLM = 'correction = "holm"\n'
THREE = ["faithfulness", "context_recall", "answer_completeness"]


# --- the statistics, by hand -----------------------------------------------------------------------


def test_holm_by_hand():
    """0.01, 0.03, 0.04 at alpha 0.05: 0.01 < 0.05/3 is rejected; 0.03 > 0.05/2 stops there, so 0.04
    (< 0.05 on its own) is kept too. Adjusted: 3 x 0.01, 2 x 0.03, and 0.04 raised to 0.06."""
    adjusted = stats.holm([0.01, 0.03, 0.04])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06])
    assert [p < 0.05 for p in adjusted] == [True, False, False]
    assert stats.holm([0.04, 0.01, 0.03]) == pytest.approx([0.06, 0.03, 0.06])  # the order given is kept
    assert stats.holm([0.3, 0.9]) == pytest.approx([0.6, 0.9]) and stats.holm([0.6, 0.9]) == [1.0, 1.0]  # capped at 1
    assert stats.holm([]) == []
    assert stats.bonferroni_confidence(0.95, 4) == pytest.approx(0.9875)


@pytest.mark.parametrize("bad", [float("nan"), -0.1, 1.5, True, "0.01"])
def test_holm_refuses_what_is_not_a_p_value(bad):
    with pytest.raises(ValueError, match="holm"):
        stats.holm([0.01, bad])


def test_holm_holds_the_familywise_error_where_separate_tests_do_not():
    """20 tests of true null hypotheses (uniform p-values), 4000 times: at least one p < 0.05 about
    64% of the time (1 - 0.95**20); after Holm, at most 5%."""
    p = np.random.default_rng(0).random((4000, 20))
    uncorrected = np.mean((p < 0.05).any(axis=1))
    holm = np.mean([min(stats.holm(list(row))) < 0.05 for row in p])
    assert uncorrected == pytest.approx(1 - 0.95**20, abs=0.03)
    assert holm <= 0.05 + 0.01 and holm == pytest.approx(0.05, abs=0.015)  # independent tests: close to the bound


# --- the gate, by hand -----------------------------------------------------------------------------


def _runs(regressions: dict[str, int]) -> tuple[dict, dict]:
    """100 questions; per metric, `b` questions fall from 1.0 to 0.9 (below the cut 1.0) and `b` others
    rise from 0.6 to 0.7 (below it in both runs), so McNemar sees b regressions and no recovery,
    p = 0.5**b, while the mean does not move."""
    base, cand = [], []
    for i in range(100):
        rec = fixtures._record(f"q{i:03d}", 1.0, {})
        del rec["metrics"]["recall_at_k"]
        b, c = copy.deepcopy(rec), copy.deepcopy(rec)
        for metric, n in regressions.items():
            if i < n:
                c["metrics"][metric] = 0.9
            elif 50 <= i < 50 + n:
                b["metrics"][metric], c["metrics"][metric] = 0.6, 0.7
        base.append(b)
        cand.append(c)
    return fixtures._run(base), fixtures._run(cand)


def _gate_pair(tmp_path, regressions: dict[str, int], config: str) -> gate.GateReport:
    base, cand = _runs(regressions)
    tmp_path.mkdir(parents=True)
    cfg = tmp_path / "gate.toml"
    cfg.write_text(config + f"[tier3]\nmetrics = {json.dumps(list(regressions))}\n"
                   "cuts = [{ below = 1.0, max_regressions = -1 }]\n", encoding="utf-8")
    return gate.gate(_write(tmp_path, "base", base), _write(tmp_path, "cand", cand), cfg)


def test_three_mcnemar_tests_adjusted_by_hand(tmp_path):
    """p = 0.5**7, 0.5**5, 0.5**5: each below 0.05 on its own; Holm multiplies the smallest by 3
    (0.0234, rejected), the next by 2 (0.0625, kept), and keeps the last at 0.0625."""
    regressions = dict(zip(THREE, [7, 5, 5]))
    plain = _gate_pair(tmp_path / "none", regressions, "")
    assert _failed(plain) == {f"{m} < 1" for m in THREE}
    assert plain.correction["method"] == "none"

    report = _gate_pair(tmp_path / "holm", regressions, HOLM)
    assert _failed(report) == {"faithfulness < 1"}
    raw = [_check(report, f"{m} < 1").details["correction"] for m in THREE]
    assert [r["pvalue"] for r in raw] == pytest.approx([0.5**7, 0.5**5, 0.5**5])
    assert [r["adjusted_pvalue"] for r in raw] == pytest.approx([3 * 0.5**7, 2 * 0.5**5, 2 * 0.5**5])
    assert "McNemar Holm-adjusted p <= 0.05" in _check(report, "faithfulness < 1").evidence
    assert "McNemar p=0.0312, Holm-adjusted 0.0625 over 3 tests" in _check(report, "context_recall < 1").evidence
    # the three paired means are the run's bootstrap intervals: each at 1 - 0.05/3, all holding together at 95%
    assert report.correction == {"method": "holm", "alpha": 0.05, "tests": 3, "intervals": 3,
                                 "interval_confidence": pytest.approx(1 - 0.05 / 3)}
    mean = _check(report, "faithfulness: paired mean")
    assert mean.verdict == "pass" and "98.33% (Bonferroni over 3) CI" in mean.evidence
    a, b = _runs(regressions)
    expect = stats.paired_bootstrap([r["metrics"]["faithfulness"] for r in a["records"]],
                                    [r["metrics"]["faithfulness"] for r in b["records"]], 10000, 0, 1 - 0.05 / 3)
    assert (mean.details["low"], mean.details["high"]) == pytest.approx((expect["low"], expect["high"]))


def test_a_mean_test_is_held_to_a_bonferroni_level(tmp_path):
    """23 of 100 questions drop by 0.1 and 10 rise by 0.1 (a mean drop of 0.013, allowed): the one-sided
    sign-flip p (about 0.015) is under 0.025, a failure; with three means gated it is held to
    0.05 / 2 / 3 = 0.0083 and passes, and the interval shown is the wider one at 1 - 0.05/3."""
    base, cand = _runs({m: 0 for m in THREE})
    for i, (b, c) in enumerate(zip(base["records"], cand["records"])):
        b["metrics"]["faithfulness"] = 0.8
        c["metrics"]["faithfulness"] = 0.7 if i < 23 else 0.9 if i >= 90 else 0.8
    def run(name, config):
        cfg = tmp_path / f"{name}.toml"
        cfg.write_text(config + f"[tier3]\nmetrics = {json.dumps(THREE)}\ncuts = [{{ below = 0.5, max_regressions = 0 }}]\n"
                       "max_mean_drop = 0.05\n", encoding="utf-8")
        return _check(gate.gate(_write(tmp_path, "b", base), _write(tmp_path, "c", cand), cfg), "faithfulness: paired mean")
    plain, holm = run("none", ""), run("holm", HOLM)
    assert plain.verdict == "fail" and plain.details["sign_flip"]["level"] == pytest.approx(0.025)
    assert 0.0083 < plain.details["sign_flip"]["pvalue"] <= 0.025 and "significantly lower" in plain.evidence
    assert holm.verdict == "pass" and holm.details["sign_flip"]["level"] == pytest.approx(0.025 / 3)
    assert holm.details["sign_flip"]["pvalue"] == plain.details["sign_flip"]["pvalue"]  # the level moved, not p
    assert holm.details["low"] < plain.details["low"] and "not significant at 0.00833" in holm.evidence
    assert holm.details["correction"] == {"interval_confidence": pytest.approx(1 - 0.05 / 3), "intervals": 3}


def test_a_regression_caught_by_counting_is_still_caught(tmp_path):
    """Holm costs power: the five questions collapsing in hidden_regression (p = 0.031) no longer fail
    McNemar next to the run's eleven other tests (recall@1 and @5; five metrics at two cuts, four of
    them unchanged, p = 1), but the cut at 0.5 allows no regression at all."""
    hidden = fixtures.build()["hidden_regression"]
    report = _gate(tmp_path / "zero", hidden, HOLM)
    cut = _check(report, "faithfulness < 0.5")
    assert _failed(report) == {"faithfulness < 0.5"} and cut.evidence.startswith("more than 0 regressions |")
    assert cut.details["correction"]["adjusted_pvalue"] == pytest.approx(12 * 0.5**5)
    tolerant = _gate(tmp_path / "ten", hidden, HOLM + "[tier3]\ncuts = [{below = 0.5, max_regressions = 10}]\n")
    assert not _failed(tolerant)


# --- an unchanged system, gated many times ---------------------------------------------------------

METRICS = ("faithfulness", "answer_completeness", "context_recall", "citation_recall", "citation_precision",
           "exact_match", "f1", "rougeL")  # the tiny baseline's tier 3: 16 McNemar tests and 8 intervals a run


def _judged_twice(rng: random.Random, n: int = 60) -> tuple[Run, Run]:
    """The same answers judged twice by a noisy judge: each run's score is the answer's quality, or
    another level in 10% of cases, independently. Nothing changed, so any failure is a false one."""
    levels = [0.0, 0.25, 0.5, 0.75, 1.0]
    runs = ({}, {})
    for i in range(n):
        quality = {m: 1.0 if rng.random() < 0.7 else rng.choice(levels[:-1]) for m in METRICS}
        for records in runs:
            scores = {m: q if rng.random() < 0.9 else rng.choice(levels) for m, q in quality.items()}
            records[(f"q{i:03d}", "rag")] = {"id": f"q{i:03d}", "system": "rag", "category": "single_doc",
                                             "refused": False, "metrics": scores, "nan_reasons": {}}
    return tuple(Run(f"{name}.json", fixtures.JUDGE, fixtures.SPLITTER, records, judged=frozenset(METRICS))
                 for name, records in zip(("baseline", "candidate"), runs))


def test_an_unchanged_system_fails_by_chance_far_less_often_with_holm(tmp_path):
    """60 pairs of runs of one system, each gated with 24 tests: uncorrected, about one run in five
    fails though nothing changed (12% of these 60; 19% over 200 pairs); with Holm and Bonferroni 0 of
    60 (0.5% over 200), within the bound alpha + (1 - confidence)/2 = 7.5%. The sign-flip test of the
    mean holds its level (1.4% of the 1,600 means "significantly lower" at a nominal 2.5% over 200
    pairs); the percentile bootstrap interval that decided before was liberal (3.1%), and the
    uncorrected gate then failed 28% of the 200."""
    cfg = tmp_path / "gate.toml"
    # the cuts and the mean left to the tests alone: a count or an allowed drop is not a test, and noise crosses them
    cfg.write_text(f"n_resamples = 1000\n[tier3]\nmetrics = {json.dumps(list(METRICS))}\nmax_mean_drop = 1.0\n"
                   "cuts = [{ below = 1.0, max_regressions = -1 }, { below = 0.5, max_regressions = -1 }]\n",
                   encoding="utf-8")
    plain = load_config(cfg)
    holm = dataclasses.replace(plain, correction="holm")
    rng = random.Random(11)
    pairs = [_judged_twice(rng) for _ in range(60)]
    failed = {name: sum(not run_gate(b, c, config).passed for b, c in pairs) / len(pairs) for name, config in
              (("none", plain), ("holm", holm))}
    assert failed["none"] >= 0.08, failed
    assert failed["holm"] <= 0.10 and failed["holm"] < failed["none"] / 3, failed
    one = run_gate(*pairs[0], holm)
    assert one.correction["tests"] == 16 and one.correction["intervals"] == 8


# --- config and command ----------------------------------------------------------------------------


def test_the_packaged_default_is_no_correction():
    assert load_config().correction == "none"
    report = gate.gate(RUNS / "baseline", RUNS / "clean")
    assert report.correction["method"] == "none" and "correction" not in _check(report, "recall@5").details


@pytest.mark.parametrize(("toml", "message"), [
    ('alpha = 0.05\ncorrection = "Holm"\n', "unknown correction 'Holm'"),
    ('alpha = 0.05\ncorrection = "bonferroni"\n', "unknown correction"),
    ("alpha = 0.05\ncorrection = 1\n", "expected str"),
])
def test_a_bad_correction_names_file_line_and_field(tmp_path, toml, message):
    path = tmp_path / "gate.toml"
    path.write_text(toml, encoding="utf-8")
    with pytest.raises(InputError, match=message) as e:
        load_config(path)
    assert (e.value.line, e.value.field) == (2, "correction")


def test_the_command_shows_the_levels_and_exits_2_on_a_bad_one(tmp_path):
    cfg = tmp_path / "gate.toml"
    cfg.write_text(HOLM, encoding="utf-8")
    args = ["gate", "--baseline", str(RUNS / "baseline"), "--candidate", str(RUNS / "clean"), "--config", str(cfg)]
    ok = CliRunner().invoke(app, args)
    assert ok.exit_code == 0, ok.output
    assert "multiple comparisons: holm" in ok.output and "Bonferroni over" in ok.output
    report = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert report["correction"]["method"] == "holm"
    assert all("adjusted_pvalue" in c["details"]["correction"] for c in report["checks"] if "mcnemar" in c["details"])
    cfg.write_text('correction = "holms"\n', encoding="utf-8")
    bad = run_cli(*args)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip() == f"error: {cfg}:1: field 'correction': unknown correction 'holms' (one of 'none', 'holm')"
