"""Writes the crafted run pairs that tests/test_gate.py gates (rerun after changing this file).

    python tests/data/gate_runs/make_fixtures.py

baseline           100 answerable questions, every one with faithfulness 0.95 (the chapter's
                   situation B), plus 5 not_in_kb questions that refuse.
clean              the baseline with 10 questions improved to 1.0: passes.
hidden_regression  situation A: 95 questions at 1.0 and 5 at 0.0. The mean is still 0.95, but 5
                   questions newly fall below 0.5: fails.
judge_changed      the clean run judged by another judge: refused (exit 2).
unmeasurable       the clean run with faithfulness null (judge undecided) on every answerable
                   question: nothing is left to compare, so tier 1's count of null scores fails it.
bad/               unreadable runs: malformed JSON, a record without metrics, and `infinity`: 20
                   questions dropped to 0.6, which fails the paired mean, plus one faithfulness
                   written as the bare token Infinity, which made the mean infinite and passed it
                   (now refused, exit 2).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).parent
JUDGE = {"name": "labels", "fingerprint": "a3" * 32, "source": "labels.jsonl"}
OTHER_JUDGE = {"name": "lexical", "fingerprint": "5c" * 32}
SPLITTER = {"name": "sentences", "version": "1"}
REGRESSED = [f"q{i:03d}" for i in (7, 23, 41, 66, 88)]
DROPPED = [f"q{i:03d}" for i in range(1, 100, 5)]  # the 20 questions of bad/infinity
UNDECIDED = "judge undecided on all 1 statements in the answer: timeout"


def _record(qid: str, faithfulness: float | None, recall: dict) -> dict:
    return {
        "id": qid, "system": "stitched", "category": "single_doc", "refused": False,
        "metrics": {"faithfulness": faithfulness, "context_recall": 1.0, "answer_completeness": 1.0,
                    "citation_recall": 1.0, "citation_precision": 1.0, "recall_at_k": recall},
        "nan_reasons": {},
        "statements": [],
        "citation_checks": [{"sentence": f"Answer to {qid} [1].", "status": "PASS", "detail": ""}],
    }


def _refusal(qid: str) -> dict:
    return {
        "id": qid, "system": "stitched", "category": "not_in_kb", "refused": True,
        "metrics": dict.fromkeys(["faithfulness", "context_recall", "answer_completeness", "citation_recall",
                                  "citation_precision"]),
        "nan_reasons": dict.fromkeys(["faithfulness", "context_recall", "answer_completeness", "citation_recall",
                                      "citation_precision"], "not_in_kb: asserted apart (must refuse)"),
        "statements": [], "citation_checks": [],
    }


def _run(records: list[dict], judge: dict = JUDGE) -> dict:
    return {"lewisrag": {"version": "0.1.0", "kind": "eval"}, "config": {"fixture": True}, "judge": judge,
            "splitter": SPLITTER, "records": records, "aggregates": {}}


def build() -> dict[str, dict]:
    rng = random.Random(0)
    recalls = [{"1": float(rng.random() < 0.7), "5": float(rng.random() < 0.9)} for _ in range(100)]
    ids = [f"q{i:03d}" for i in range(1, 101)]
    refusals = [_refusal(f"n{i:03d}") for i in range(1, 6)]
    baseline = [_record(q, 0.95, r) for q, r in zip(ids, recalls)]
    clean = [_record(q, 1.0 if i < 10 else 0.95, r) for i, (q, r) in enumerate(zip(ids, recalls))]
    hidden = [_record(q, 0.0 if q in REGRESSED else 1.0, r) for q, r in zip(ids, recalls)]
    unmeasurable = [_record(q, None, r) | {"nan_reasons": {"faithfulness": UNDECIDED}} for q, r in zip(ids, recalls)]
    masked = [_record(q, 0.6 if q in DROPPED else 0.95, r) for q, r in zip(ids, recalls)]
    masked[-1]["metrics"]["faithfulness"] = float("inf")  # json.dumps writes the bare token Infinity
    return {
        "baseline": _run(baseline + refusals),
        "clean": _run(clean + refusals),
        "hidden_regression": _run(hidden + refusals),
        "judge_changed": _run(clean + refusals, OTHER_JUDGE),
        "unmeasurable": _run(unmeasurable + refusals),
        "bad/infinity": _run(masked + refusals),
        "bad/missing_metrics": _run([{k: v for k, v in baseline[0].items() if k != "metrics"}]),
    }


def main() -> None:
    for name, run in build().items():
        path = HERE / name / "results.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(run, indent=1) + "\n", encoding="utf-8")
    (HERE / "bad" / "malformed.json").write_text('{"records": [{"id": "q001", "metrics": {', encoding="utf-8")


if __name__ == "__main__":
    main()
