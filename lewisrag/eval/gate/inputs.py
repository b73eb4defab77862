"""What the gate reads: its thresholds (a TOML file over packaged defaults) and the two runs.

Every problem with either is an `InputError` naming the file and the field, so `lewisrag gate`
exits 2 on bad input and never mistakes a broken file for a regression. A score is a finite number
in its metric's range (`METRIC_RANGES`) or null, and null ("not measurable") needs its reason under
the record's `nan_reasons`, as `lewisrag.eval.evaluator` writes it; an absent metric is one the record's system
does not produce (a retrieval-only system has no faithfulness). NaN and ±Infinity are not JSON:
Python's json module reads them anyway, so they are rejected wherever they occur, as are booleans
and strings where a score belongs. Errors inside a record carry its 1-based position in `records`
as the line.
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from lewisrag.data.io import InputError, read_json
from lewisrag.eval.records import json_token, non_finite

# The range of every metric the gate can read, in one place: all are shares or similarities clipped
# to [0, 1]. A metric not listed here cannot be gated (a typo in tier3.metrics is an error).
METRIC_RANGES = {name: (0.0, 1.0) for name in (
    "faithfulness", "context_recall", "answer_completeness", "answer_relevancy", "on_topic_rate", "citation_recall",
    "citation_precision", "exact_match", "f1", "rougeL", "bleu1", "recall_at_k")}

# ---------------------------------------------------------------------------------------------
# thresholds


@dataclass(frozen=True)
class Cut:
    below: float  # a question fails at this cut when its score is < below (1.0: not fully faithful)
    max_regressions: int  # questions allowed to newly fall below the cut; -1 leaves it to McNemar alone


@dataclass(frozen=True)
class Ceiling:
    metric: str  # a judged metric, e.g. "faithfulness"
    below: float  # a question counts against the ceiling when its score is < below
    max_share: float  # the share of such questions must be proven <= this by a one-sided upper bound
    method: str  # "wilson" or "exact" (Clopper–Pearson, more conservative)


@dataclass(frozen=True)
class GateConfig:
    """The gate's thresholds; the defaults live in one place, the packaged `gate.toml` beside this module."""

    alpha: float  # level of the one-sided paired tests (McNemar)
    confidence: float  # level of bootstrap intervals and one-sided upper bounds
    n_resamples: int  # paired bootstrap resamples
    seed: int  # bootstrap seed, so the same runs always get the same verdict
    require_all_baseline: bool  # a baseline question missing from the candidate fails the gate
    zero_statuses: tuple[str, ...]  # tier 1: citation statuses that must not occur in the candidate
    allow_baseline_violations: bool  # tier 1: count only violations the baseline did not have (fixed bad samples)
    max_new_unmeasurable: int  # tier 1: how many more questions without a score per metric than the baseline; -1 only warns
    recall_hit_at: float  # tier 2: a question is a retrieval hit when recall@k >= this
    recall_max_mean_drop: float  # tier 2: largest tolerated drop of mean recall@k
    judged_metrics: tuple[str, ...]  # tier 3: metrics compared in pairs
    judged_max_mean_drop: float  # tier 3: largest tolerated drop of a judged metric's mean
    cuts: tuple[Cut, ...]  # tier 3: per-question pass/fail cuts compared in pairs
    ceilings: tuple[Ceiling, ...]  # tier 3: absolute thresholds that must be proven

    @property
    def gated_metrics(self) -> tuple[str, ...]:
        """The per-question metrics the gate reads besides recall@k: judged ones, then ceilings'."""
        return tuple(dict.fromkeys([*self.judged_metrics, *(c.metric for c in self.ceilings)]))


_SETTINGS = {  # toml key -> (GateConfig field, type)
    "alpha": ("alpha", float), "confidence": ("confidence", float), "n_resamples": ("n_resamples", int),
    "seed": ("seed", int), "require_all_baseline": ("require_all_baseline", bool),
    "tier1.zero_statuses": ("zero_statuses", list),
    "tier1.allow_baseline_violations": ("allow_baseline_violations", bool),
    "tier1.max_new_unmeasurable": ("max_new_unmeasurable", int), "tier2.hit_at": ("recall_hit_at", float),
    "tier2.max_mean_drop": ("recall_max_mean_drop", float), "tier3.metrics": ("judged_metrics", list),
    "tier3.max_mean_drop": ("judged_max_mean_drop", float), "tier3.cuts": ("cuts", list),
    "tier3.ceilings": ("ceilings", list),
}


def load_config(path: str | os.PathLike | None = None) -> GateConfig:
    """The packaged defaults, overridden key by key by the TOML file at `path` if given."""
    values = _read_toml(resources.files("lewisrag.eval.gate").joinpath("gate.toml"), "gate.toml (packaged)")
    if path is not None:
        values |= _read_toml(Path(path), str(path))
    src = str(path) if path is not None else "gate.toml (packaged)"
    fields = {}
    for key, (name, kind) in _SETTINGS.items():
        if key not in values:
            raise InputError(src, "missing setting", field=key)
        value = values[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise InputError(src, f"expected {kind.__name__}, got {type(value).__name__}", field=key)
        fields[name] = value
    fields["zero_statuses"] = tuple(str(s) for s in fields["zero_statuses"])
    fields["judged_metrics"] = tuple(str(m) for m in fields["judged_metrics"])
    fields["cuts"] = tuple(_table(Cut, t, src, f"tier3.cuts[{i}]") for i, t in enumerate(fields["cuts"]))
    fields["ceilings"] = tuple(_table(Ceiling, {"method": "wilson"} | t, src, f"tier3.ceilings[{i}]")
                               for i, t in enumerate(fields["ceilings"]))
    cfg = GateConfig(**fields)
    if not 0 < cfg.alpha < 1 or not 0 < cfg.confidence < 1:
        raise InputError(src, "alpha and confidence must be in (0, 1)", field="alpha")
    if any(c.method not in ("wilson", "exact") for c in cfg.ceilings):
        raise InputError(src, "method must be 'wilson' or 'exact'", field="tier3.ceilings")
    if cfg.max_new_unmeasurable < -1:
        raise InputError(src, "expected a count >= 0, or -1 to only warn", field="tier1.max_new_unmeasurable")
    for where, metric in [("tier3.metrics", m) for m in cfg.judged_metrics] + [
            (f"tier3.ceilings[{i}].metric", c.metric) for i, c in enumerate(cfg.ceilings)]:
        if metric not in METRIC_RANGES or metric == "recall_at_k":  # recall@k is tier 2's, per k
            names = ", ".join(n for n in METRIC_RANGES if n != "recall_at_k")
            raise InputError(src, f"unknown metric '{metric}' (one of {names})", field=where)
    return cfg


def _read_toml(path, src: str) -> dict:
    """A TOML file flattened to {"tier2.hit_at": value}; unknown keys are errors, not silent typos."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(src, "file not found") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InputError(src, f"malformed TOML: {e}") from None
    flat = {}
    for key, value in data.items():
        for sub, v in (value.items() if isinstance(value, dict) else [(None, value)]):
            name = key if sub is None else f"{key}.{sub}"
            if name not in _SETTINGS:
                raise InputError(src, "unknown setting", field=name)
            flat[name] = v
    return flat


def _table(cls, table, src: str, where: str):
    names = set(cls.__dataclass_fields__)
    if not isinstance(table, dict) or set(table) != names:
        raise InputError(src, f"expected a table with keys {sorted(names)}", field=where)
    return cls(**table)


# ---------------------------------------------------------------------------------------------
# runs


@dataclass(frozen=True)
class Run:
    path: str  # the results.json read
    judge: dict  # the run's "judge" block ({} when the run has no judged metrics)
    splitter: dict | None  # the run's "splitter" block
    records: dict  # (id, system) -> record, validated


def load_run(path: str | os.PathLike, metrics: tuple[str, ...] = ()) -> Run:
    """Read a run directory or results.json and validate the fields the gate reads (and `metrics`).

    `metrics` are names in `METRIC_RANGES`; recall@k is always read.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
        if not p.exists():
            raise InputError(path, "no results.json in this run directory")
    data = read_json(p)
    if not isinstance(data, dict):
        raise InputError(p, f"expected a JSON object, got {type(data).__name__}")
    if not isinstance(data.get("records"), list):
        raise InputError(p, "missing or not a list", field="records")
    _reject_non_finite({k: v for k, v in data.items() if k != "records"}, p, "", None)
    judge = data.get("judge") or {}
    if not isinstance(judge, dict):
        raise InputError(p, "expected an object", field="judge")
    records, first = {}, {}
    for i, rec in enumerate(data["records"]):
        key = _check_record(rec, p, i, metrics)
        if key in records:
            raise InputError(p, f"duplicate (id, system) {key} (first at records[{first[key]}])", line=i + 1,
                             field=f"records[{i}].id")
        records[key], first[key] = rec, i
    return Run(str(p), judge, data.get("splitter"), records)


def _check_record(rec, src: Path, i: int, metrics: tuple[str, ...]) -> tuple[str, str | None]:
    where, line = f"records[{i}]", i + 1
    if not isinstance(rec, dict):
        raise InputError(src, "expected an object", line=line, field=where)
    _reject_non_finite(rec, src, where, line)
    rid = rec.get("id")
    if isinstance(rid, bool) or not isinstance(rid, (str, int)) or not str(rid).strip():
        raise InputError(src, "missing or not a non-empty string", line=line, field=f"{where}.id")
    rec["id"] = str(rid)
    for name in ("system", "category"):
        if rec.get(name) is not None and not isinstance(rec[name], str):
            raise InputError(src, "expected a string or null", line=line, field=f"{where}.{name}")
    refused = rec.get("refused")
    if rec.get("category") == "not_in_kb" and not isinstance(refused, bool):
        raise InputError(src, "a not_in_kb record must say whether the answer refused", line=line,
                         field=f"{where}.refused")
    if refused is not None and not isinstance(refused, bool):
        raise InputError(src, "expected true or false", line=line, field=f"{where}.refused")
    m, reasons = rec.get("metrics"), rec.get("nan_reasons") or {}
    if not isinstance(m, dict):
        raise InputError(src, "missing or not an object", line=line, field=f"{where}.metrics")
    if not isinstance(reasons, dict):
        raise InputError(src, "expected an object {metric: reason}", line=line, field=f"{where}.nan_reasons")
    for name in metrics:  # absent: this record has no such metric (a retrieval-only system); counted in tier 1
        if name in m:
            m[name] = _score(m[name], name, reasons, src, line, f"{where}.metrics.{name}")
    recall = m.get("recall_at_k")  # absent or null: the question has no gold passage ids to match
    if recall is not None:
        if not isinstance(recall, dict):
            raise InputError(src, "expected an object {k: score}", line=line, field=f"{where}.metrics.recall_at_k")
        for k, score in recall.items():
            recall[k] = _score(score, "recall_at_k", reasons, src, line, f"{where}.metrics.recall_at_k.{k}")
    checks = rec.get("citation_checks")
    if checks is not None and not (isinstance(checks, list) and all(
            isinstance(c, dict) and isinstance(c.get("status"), str) for c in checks)):
        raise InputError(src, "expected a list of objects with a string 'status'", line=line,
                         field=f"{where}.citation_checks")
    return rec["id"], rec.get("system")


def _score(value, metric: str, reasons: dict, src: Path, line: int, where: str) -> float | None:
    """A score is a number in its metric's range, or null with the reason it could not be measured."""
    if value is None:
        reason = reasons.get(metric)
        if not isinstance(reason, str) or not reason.strip():
            raise InputError(src, f"null without a reason: a score that cannot be measured is null with its reason "
                             f"under nan_reasons.{metric}", line=line, field=where)
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(src, f"expected a number or null, got {type(value).__name__}", line=line, field=where)
    low, high = METRIC_RANGES[metric]
    if not low <= value <= high:
        raise InputError(src, f"{value!r} is outside {metric}'s range [{low:g}, {high:g}]", line=line, field=where)
    return float(value)


def _reject_non_finite(obj: dict, src: Path, where: str, line: int | None) -> None:
    for field, x in non_finite(obj, where):
        what = "is not JSON" if math.isnan(x) else "is not JSON (or a number too large for a float)"
        raise InputError(src, f"{json_token(x)} {what}; a score that cannot be measured is null with its reason "
                         "under nan_reasons", line=line, field=field)
