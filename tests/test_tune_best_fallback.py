"""`index tune` on an index whose codes cannot reach the target: it recorded the largest setting tried
("the largest setting tried"), though with compressed codes a larger nprobe can measure a lower recall
(IVF4,PQ4x4: 0.6 at nprobe 1 and 2, 0.4 at 4, and nprobe 4 recorded). It now records the setting
with the best measured recall (ties: the smallest, the cheapest) and says so."""

from __future__ import annotations

import json

import numpy as np

import lewisrag.index.tuning as tuning
from conftest import run_main
from lewisrag.index.dense import build_faiss
from lewisrag.index.tuning import best_tried, tune_search
from test_audit_index_load import _questions_only, _variant, flat  # noqa: F401
from test_index import dpr_ckpt  # noqa: F401  (a module fixture: the tiny DPR checkpoint)


def _recall_by_nprobe(monkeypatch, index, by_nprobe: dict[int, float]) -> None:
    """Searches that find k rows for every query, measured at the recall `by_nprobe` gives the index's nprobe."""
    monkeypatch.setattr(tuning, "recall_at_k", lambda rows, exact, k, scores=None: by_nprobe[index.nprobe])


def test_a_target_no_setting_reaches_records_the_best_measured_setting(monkeypatch):
    x = np.random.default_rng(0).standard_normal((400, 8)).astype(np.float32)
    index = build_faiss(x, "IVF4,Flat")
    _recall_by_nprobe(monkeypatch, index, {1: 0.6, 2: 0.6, 3: 0.5, 4: 0.4})
    t = tune_search(index, x[:10], np.zeros((10, 5), np.int64), 5, 0.95)
    assert not t.reached and t.trials == {1: 0.6, 2: 0.6, 4: 0.4}
    assert t.params == {"nprobe": 1} and t.recall == 0.6  # the best, and of the tied ones the cheapest; not 4
    assert index.nprobe == 1  # the index is left at the recorded setting


def test_the_largest_setting_is_kept_when_it_measures_best(monkeypatch):
    x = np.random.default_rng(0).standard_normal((400, 8)).astype(np.float32)
    index = build_faiss(x, "IVF4,Flat")
    _recall_by_nprobe(monkeypatch, index, {1: 0.2, 2: 0.3, 4: 0.5})
    t = tune_search(index, x[:10], np.zeros((10, 5), np.int64), 5, 0.95)
    assert not t.reached and t.params == {"nprobe": 4} and t.recall == 0.5


def test_best_tried_prefers_settings_that_find_k_passages():
    assert best_tried({1: 0.6, 2: 0.6, 4: 0.4}) == 1
    assert best_tried({1: 0.7, 2: 0.6, 4: 0.6}, short={1}) == 2  # padded rows: nothing could use nprobe 1
    assert best_tried({1: 0.7, 2: 0.6}, short={1, 2}) == 1  # none finds k everywhere: the best still


def test_index_tune_says_which_setting_it_recorded_when_the_target_is_missed(flat, tiny_corpus, tmp_path, monkeypatch,  # noqa: F811
                                                                             capsys):
    index = _variant(flat, tmp_path, "pq", factory="IVF4,PQ4x4", manifest={"faiss_factory": "IVF4,PQ4x4"})
    questions = _questions_only(tiny_corpus, tmp_path)
    code, out, err = run_main(monkeypatch, capsys, "index", "tune", "--index", index, "--questions", questions,
                              "--target-recall", "1", "--json")
    assert code == 0, err
    record = json.loads(out)
    trials = {int(v): r for v, r in record["trials"].items()}
    chosen = record["search_params"]["nprobe"]
    # the trials and the recall beside them are the tuning questions' (24 of the 30: --held-out 0.2 sets 6 apart)
    assert not record["reached"] and chosen == best_tried(trials) and record["tuned_recall_at_k"] == trials[chosen]
    assert (record["tuning_questions"], record["held_out_questions"]) == (24, 6)
    manifest = json.loads((index / "manifest.json").read_text())
    assert manifest["search_params"] == {"nprobe": chosen}
    (line,) = err.strip().splitlines()
    assert line.startswith(f"warning: recall@5 {trials[chosen]} at nprobe {chosen}, recorded as the setting tried with "
                           "the best recall (ties: the smallest)"), err
    assert "largest setting" not in err
