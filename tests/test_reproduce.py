"""`lewisrag reproduce`: the tiny preset end to end, resume, determinism; the small preset (slow)."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli
from lewisrag.experiments.presets import PRESETS
from lewisrag.experiments.reproduce import reproduce


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny") / "run"
    events = []
    reproduce(PRESETS["tiny"], out, seed=0, on_stage=lambda name, event, _: events.append((name, event)))
    return out, events


def test_tiny_writes_every_stage_and_the_results(tiny_run):
    out, events = tiny_run
    assert [e for e in events if e[1] == "done"] == [(s, "done") for s in ("world", "dpr", "index_a", "index_b", "bm25_a", "retrieval")]
    results = json.loads((out / "results.json").read_text())
    r = results["retrieval"]
    assert 0.0 <= r["recall_at_k"] <= 1.0 and {"recall_at_1", "recall_at_5", "recall_at_20"} <= set(r)
    assert set(r["bm25"]) >= {"recall_at_1", "recall_at_5", "recall_at_20"}
    assert {rec["system"] for rec in results["records"]} == {"dense", "bm25"}
    assert (out / "report.md").read_text().startswith("# lewisrag reproduce")
    for d in ("index_a", "index_b"):
        assert (out / d / "manifest.json").exists()
    assert not list(out.glob("*.partial"))


def test_resume_skips_finished_stages_and_gives_the_same_results(tiny_run):
    out, _ = tiny_run
    before = (out / "results.json").read_bytes()
    (out / "stages" / "retrieval.json").unlink()  # as if killed during the last stage
    events = []
    reproduce(PRESETS["tiny"], out, seed=0, resume=True, on_stage=lambda name, event, _: events.append((name, event)))
    assert [n for n, e in events if e == "skipped"] == ["world", "dpr", "index_a", "index_b", "bm25_a"]
    assert [n for n, e in events if e == "done"] == ["retrieval"]
    assert (out / "results.json").read_bytes() == before


def test_same_seed_same_results(tiny_run, tmp_path):
    out, _ = tiny_run
    reproduce(PRESETS["tiny"], tmp_path / "again", seed=0)
    assert (tmp_path / "again" / "results.json").read_bytes() == (out / "results.json").read_bytes()


def test_resume_refuses_another_preset(tiny_run):
    out, _ = tiny_run
    r = run_cli("reproduce", "--preset", "tiny", "--seed", "3", "--out", str(out), "--resume")
    assert r.returncode == 2 and "config.json" in r.stderr and "Traceback" not in r.stderr


def test_unknown_preset_is_bad_input(tmp_path):
    r = run_cli("reproduce", "--preset", "huge", "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "unknown preset 'huge'" in r.stderr and not (tmp_path / "x").exists()


@pytest.mark.slow
def test_small_preset_dpr_recall(tmp_path):
    """The acceptance number: the small DPR finds a gold passage in its top 5 for ≥ 95% of test questions."""
    results = reproduce(PRESETS["small"], tmp_path / "small", seed=0)
    assert results["retrieval"]["recall_at_5"] >= 0.95
    assert results["retrieval"]["bm25"]["recall_at_5"] >= 0.9
