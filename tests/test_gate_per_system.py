"""The gate on runs of several systems (`compare`'s and `reproduce`'s results.json), system by system.

Questions pair by (id, system), but every mean, McNemar test, ceiling and unmeasurable count pooled
the systems, so one system's regression was paid for by another's gain: rag_token's faithfulness
falling from 1.0 to 0.8 on 40 questions while rag_sequence's rose as much passed the gate, which
fails rag_token gated alone at p = 0.0001. Each such check is now one system's, named with it; a run
of one system keeps its names. A `nan_reasons` value that is not a string (a list, a number) stopped
the gate with a traceback (exit 3); it is refused as bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_main
from lewisrag.eval import gate
from test_gate import _check, _failed, fixtures

QS = [f"q{i:02d}" for i in range(40)]


def _rec(qid: str, system: str | None, metrics: dict) -> dict:
    reasons = {m: "no statements" for m, v in metrics.items() if v is None}
    return {"id": qid, "system": system, "category": "single_doc", "refused": False, "metrics": metrics,
            "nan_reasons": reasons, "citation_checks": []}


def _write(path: Path, records: list[dict]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.json").write_text(json.dumps({"judge": fixtures.JUDGE, "splitter": fixtures.SPLITTER,
                                                   "records": records}), encoding="utf-8")
    return path


def _gate(tmp_path: Path, base: list[dict], cand: list[dict], config: str) -> gate.GateReport:
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = tmp_path / "gate.toml"
    cfg.write_text(config, encoding="utf-8")
    return gate.gate(_write(tmp_path / "base", base), _write(tmp_path / "cand", cand), cfg)


def _faithfulness(system: str | None, scores: list) -> list[dict]:
    return [_rec(q, system, {"faithfulness": s}) for q, s in zip(QS, scores)]


FAITHFULNESS = '[tier3]\nmetrics = ["faithfulness"]\n'
DROP = [0.6] * 20 + [1.0] * 20  # 20 of 40 questions at 0.6: a mean of 0.8


def test_one_systems_drop_is_not_paid_for_by_anothers_gain(tmp_path):
    """The reviewer's t4: pooled, the mean, both cuts and the sign-flip test did not move, and the gate passed."""
    base = _faithfulness("rag_token", [1.0] * 40) + _faithfulness("rag_sequence", DROP)
    cand = _faithfulness("rag_token", DROP) + _faithfulness("rag_sequence", [1.0] * 40)
    report = _gate(tmp_path, base, cand, FAITHFULNESS)
    assert not report.passed
    assert _failed(report) == {"faithfulness: paired mean [rag_token]", "faithfulness < 1 [rag_token]"}
    mean = _check(report, "faithfulness: paired mean [rag_token]")
    assert mean.details["system"] == "rag_token" and mean.details["n"] == 40
    assert mean.details["sign_flip"]["pvalue"] <= 0.001 and mean.details["mean_diff"] == pytest.approx(-0.2)
    assert _check(report, "faithfulness < 1 [rag_token]").details["regressed"][0] == "q00@rag_token"
    for name in ("faithfulness: paired mean", "faithfulness < 1", "faithfulness < 0.5"):
        assert _check(report, f"{name} [rag_sequence]").verdict == "pass"
    # the same drop gated alone fails the same two checks, named as a single system's always were
    alone = _gate(tmp_path / "alone", base[:40], cand[:40], FAITHFULNESS)
    assert _failed(alone) == {"faithfulness: paired mean", "faithfulness < 1"}


def test_a_single_systems_checks_keep_their_names_and_records_without_one_are_a_system(tmp_path):
    one = _faithfulness("rag", [1.0] * 40)
    report = _gate(tmp_path, one, one, FAITHFULNESS)
    assert report.passed
    names = {c.name for c in report.checks}
    assert {"unmeasurable faithfulness", "faithfulness: paired mean", "faithfulness < 1"} <= names
    assert not any("[" in c.name for c in report.checks)
    # records naming no system beside a named one are the system "(no system)", as `eval answers` groups them
    mixed = _faithfulness(None, [1.0] * 40) + _faithfulness("rag", [1.0] * 40)
    names = {c.name for c in _gate(tmp_path / "mixed", mixed, mixed, FAITHFULNESS).checks}
    assert {"faithfulness: paired mean [(no system)]", "faithfulness: paired mean [rag]"} <= names


def test_one_systems_lost_scores_are_not_paid_for_by_anothers_new_ones(tmp_path):
    """Pooled, rag_token losing 3 scores while rag_sequence gained 3 counted 3 -> 3 nulls: a pass."""
    scored, nulls = [1.0] * 40, [None] * 3 + [1.0] * 37
    base = _faithfulness("rag_token", scored) + _faithfulness("rag_sequence", nulls)
    cand = _faithfulness("rag_token", nulls) + _faithfulness("rag_sequence", scored)
    report = _gate(tmp_path, base, cand, FAITHFULNESS)
    lost = _check(report, "unmeasurable faithfulness [rag_token]")
    assert lost.verdict == "fail" and lost.details["system"] == "rag_token"
    assert (lost.details["baseline"], lost.details["candidate"]) == (0, 3)
    assert list(lost.details["newly_null"]) == ["q00@rag_token", "q01@rag_token", "q02@rag_token"]
    assert _check(report, "unmeasurable faithfulness [rag_sequence]").verdict == "pass"


def _recall(system: str, hits: list[float]) -> list[dict]:
    return [_rec(q, system, {"recall_at_k": {"5": h}}) for q, h in zip(QS, hits)]


def test_retrieval_is_gated_per_system_and_a_system_without_recall_gets_no_row(tmp_path):
    """dense losing its gold passage on 5 questions while bm25 found it on 5 more left the pooled mean
    where it was: `max_mean_drop = 0` passed it. closed_book retrieves nothing: no recall row of its own."""
    worse = [0.0] * 5 + [1.0] * 35
    closed = [_rec(q, "closed_book", {"exact_match": 0.0}) for q in QS]
    base = _recall("dense", [1.0] * 40) + _recall("bm25", worse) + closed
    cand = _recall("dense", worse) + _recall("bm25", [1.0] * 40) + closed
    report = _gate(tmp_path, base, cand, "[tier3]\nmetrics = []\n")
    assert _failed(report) == {"recall@5 [dense]"}
    dense = _check(report, "recall@5 [dense]")
    assert "mean dropped more than 0" in dense.evidence and dense.details["regressed"][:1] == ["q00@dense"]
    assert _check(report, "recall@5 [bm25]").verdict == "pass"
    names = {c.name for c in report.checks}
    assert not any("closed_book" in n for n in names if "recall" in n)
    assert {"unmeasurable recall@5 [dense]", "unmeasurable recall@5 [bm25]"} <= names


def test_a_ceiling_is_proven_per_system(tmp_path):
    """Pooled, 10 of 200 below 1.0 proved "<= 10%" (upper bound 8.2%); rag_sequence's 10 of 100 do not (16.0%)."""
    qs = [f"q{i:03d}" for i in range(100)]
    token = [_rec(q, "rag_token", {"faithfulness": 1.0}) for q in qs]
    sequence = [_rec(q, "rag_sequence", {"faithfulness": 0.0 if i < 10 else 1.0}) for i, q in enumerate(qs)]
    dense = [_rec(q, "dense", {"recall_at_k": {"5": 1.0}}) for q in qs]  # no faithfulness: no ceiling of its own
    nulls = [_rec(q, "stitched", {"faithfulness": None}) for q in qs]  # has it, never scored: a skip
    runs = token + sequence + dense + nulls
    config = ('[tier1]\nmax_new_unmeasurable = -1\n[tier3]\nmetrics = []\n'
              'ceilings = [{ metric = "faithfulness", below = 1.0, max_share = 0.1 }]\n')
    report = _gate(tmp_path, runs, runs, config)
    name = "share faithfulness < 1 <= 10.0%"
    assert _failed(report) == {f"{name} [rag_sequence]"}
    sequence_share = _check(report, f"{name} [rag_sequence]").details
    assert (sequence_share["k"], sequence_share["n"], sequence_share["system"]) == (10, 100, "rag_sequence")
    assert _check(report, f"{name} [rag_token]").verdict == "pass"
    assert _check(report, f"{name} [stitched]").verdict == "skip"
    assert not any(c.name.startswith(name) and "dense" in c.name for c in report.checks)
    # the same 200 answers as one system: the pooled share proves it (10 of 200, upper bound 8.2%)
    one = [dict(r, system=None, id=f"{r['id']}{r['system']}") for r in token + sequence]
    assert _check(_gate(tmp_path / "one", one, one, config), name).verdict == "pass"


def test_a_metric_no_system_has_is_checked_once_and_one_a_system_lacks_is_its_skip(tmp_path):
    """A --config metric no system scores in both runs still fails, once; a system with the metric but
    no score of it is a skip beside the systems that compare it; a retriever gets no row at all."""
    base = (_faithfulness("rag_token", [1.0] * 40) + _faithfulness("stitched", [None] * 40)
            + _recall("dense", [1.0] * 40))
    report = _gate(tmp_path, base, base, '[tier3]\nmetrics = ["faithfulness", "answer_relevancy"]\n')
    assert _failed(report) == {"answer_relevancy"}
    assert "nothing was checked" in _check(report, "answer_relevancy").evidence
    assert _check(report, "faithfulness [stitched]").verdict == "skip"
    assert _check(report, "faithfulness: paired mean [rag_token]").verdict == "pass"
    assert not any("dense" in c.name for c in report.checks if c.tier == "3 judged")
    # no system has it at all and the packaged list names it: one skip, named as for one system
    packaged = _gate(tmp_path / "packaged", base, base, "")
    assert _check(packaged, "answer_completeness").verdict == "skip"
    assert not any(c.name.startswith("answer_completeness [") for c in packaged.checks)


def test_the_correction_counts_every_systems_tests(tmp_path):
    runs = _faithfulness("rag_token", [1.0] * 40) + _faithfulness("rag_sequence", [1.0] * 40)
    report = _gate(tmp_path, runs, runs, 'correction = "holm"\n' + FAITHFULNESS)
    assert (report.correction["tests"], report.correction["intervals"]) == (4, 2)  # 2 systems x (2 cuts, 1 mean)
    assert "over 4 tests" in _check(report, "faithfulness < 1 [rag_token]").evidence


@pytest.mark.parametrize("reason", [["no gold ids"], 3])
def test_a_reason_that_is_not_a_string_is_bad_input(tmp_path, monkeypatch, capsys, reason):
    """The reviewer's t2: a list crashed tier 2's set of reasons, an int beside a string its sort (exit 3)."""
    base = [_rec(q, None, {"faithfulness": 1.0}) for q in QS]
    cand = [_rec(q, None, {"faithfulness": 1.0}) for q in QS]
    base[0]["nan_reasons"]["recall_at_k"] = "x"
    cand[0]["nan_reasons"]["recall_at_k"] = reason
    code, out, err = run_main(monkeypatch, capsys, "gate", "--baseline", _write(tmp_path / "b", base),
                              "--candidate", _write(tmp_path / "c", cand))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "field 'records[0].nan_reasons.recall_at_k'" in err
    assert f"expected a string (why the score is null), got {type(reason).__name__}" in err
