"""What the gate reads: its thresholds (a TOML file over packaged defaults) and the two runs.

Every problem with either is an `InputError` naming the file, the line and the field, so `lewisrag gate`
exits 2 on bad input and never mistakes a broken file for a regression. A score is a finite number
in its metric's range (`METRIC_RANGES`) or null, and null ("not measurable") needs its reason under
the record's `nan_reasons`, as `lewisrag.eval.evaluator` writes it; an absent metric is one the record's system
does not produce (a retrieval-only system has no faithfulness). NaN and ±Infinity are not JSON:
Python's json module reads them anyway, so they are rejected wherever they occur, as are booleans
and strings where a score belongs. Errors inside a record name the line it opens on and its
place in `records` (`results.json:43: field 'records[0].metrics.faithfulness'`).
"""

from __future__ import annotations

import codecs
import os
import re
import sys
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from lewisrag.data.io import InputError, given_once
from lewisrag.eval.citations import STATUSES
from lewisrag.eval.results import (JUDGE_FREE, LOWER_IS_BETTER, METRIC_RANGES, QuestionRecord, check_score, read_results,
                                   results_path)

# ---------------------------------------------------------------------------------------------
# thresholds


@dataclass(frozen=True)
class Cut:
    # a question fails at this cut when its score is < below (1.0: not fully faithful); for a lower-is-better
    # metric (`LOWER_IS_BETTER`) the cut is mirrored: it fails when its score is > 1 - below (1.0: above 0)
    below: float
    max_regressions: int  # questions allowed to newly fail the cut; -1 leaves it to McNemar alone


@dataclass(frozen=True)
class Ceiling:
    metric: str  # a judged metric, e.g. "faithfulness"
    below: float | None  # a question counts against the ceiling when its score is < below (higher-is-better metrics)
    max_share: float  # the share of such questions must be proven <= this by a one-sided upper bound
    method: str  # "wilson" or "exact" (Clopper–Pearson, more conservative)
    # lower-is-better metrics (claims.hallucination, ...) take `above` instead of `below`: a question
    # counts against the ceiling when its score is > above (0.0: any hallucinated claim)
    above: float | None = None

    @property
    def cut(self) -> float:
        return self.below if self.above is None else self.above


@dataclass(frozen=True)
class GateConfig:
    """The gate's thresholds; the defaults live in one place, the packaged `gate.toml` beside this module."""

    alpha: float  # level of the one-sided paired tests (McNemar)
    confidence: float  # level of bootstrap intervals and one-sided upper bounds; sign-flip tests at (1 - it) / 2
    n_resamples: int  # paired bootstrap resamples, and sign-flip draws when not every sign assignment is enumerated
    seed: int  # bootstrap and sign-flip seed, so the same runs always get the same verdict
    correction: str  # "none", or "holm": Holm over the run's McNemar tests, Bonferroni over its tests of the mean
    require_all_baseline: bool  # a baseline question missing from the candidate fails the gate
    zero_statuses: tuple[str, ...]  # tier 1: citation statuses that must not occur in the candidate
    allow_baseline_violations: bool  # tier 1: count only violations the baseline did not have (fixed bad samples)
    max_new_unmeasurable: int  # tier 1: how many more questions without a score per metric than the baseline; -1 only warns
    recall_hit_at: float  # tier 2: a question is a retrieval hit when recall@k >= this
    recall_max_mean_drop: float  # tier 2: largest tolerated drop of mean recall@k
    judged_metrics: tuple[str, ...]  # tier 3: metrics compared in pairs, each in its direction (`better_direction`)
    judged_max_mean_drop: float  # tier 3: largest tolerated drop of a judged metric's mean (rise, if lower is better)
    cuts: tuple[Cut, ...]  # tier 3: per-question pass/fail cuts compared in pairs
    ceilings: tuple[Ceiling, ...]  # tier 3: absolute thresholds that must be proven
    # tier 3: the metrics a --config file names itself in tier3.metrics (not the packaged list): one
    # that no paired question scores in both runs fails, since the gate would check nothing it was asked to
    named_metrics: tuple[str, ...] = ()

    @property
    def gated_metrics(self) -> tuple[str, ...]:
        """The per-question metrics the gate reads besides recall@k: judged ones, then ceilings'."""
        return tuple(dict.fromkeys([*self.judged_metrics, *(c.metric for c in self.ceilings)]))


_SETTINGS = {  # toml key -> (GateConfig field, type)
    "alpha": ("alpha", float), "confidence": ("confidence", float), "n_resamples": ("n_resamples", int),
    "seed": ("seed", int), "correction": ("correction", str), "require_all_baseline": ("require_all_baseline", bool),
    "tier1.zero_statuses": ("zero_statuses", list),
    "tier1.allow_baseline_violations": ("allow_baseline_violations", bool),
    "tier1.max_new_unmeasurable": ("max_new_unmeasurable", int), "tier2.hit_at": ("recall_hit_at", float),
    "tier2.max_mean_drop": ("recall_max_mean_drop", float), "tier3.metrics": ("judged_metrics", list),
    "tier3.max_mean_drop": ("judged_max_mean_drop", float), "tier3.cuts": ("cuts", list),
    "tier3.ceilings": ("ceilings", list),
}


def load_config(path: str | os.PathLike | None = None) -> GateConfig:
    """The packaged defaults, overridden key by key by the TOML file at `path` if given.

    A bad setting of the file is an `InputError` naming the line it is set on."""
    try:
        return _load_config(path)
    except InputError as e:
        if path is None or e.line is not None or e.field is None:
            raise
        line = toml_line(Path(path).read_text(encoding="utf-8-sig"), e.field)
        if line is None:  # a setting the file does not make ("missing setting" cannot be one of its lines)
            raise
        raise InputError(e.source, e.message, line, e.field) from None


def _load_config(path: str | os.PathLike | None) -> GateConfig:
    values = _read_toml(resources.files("lewisrag.eval.gate").joinpath("gate.toml"), "gate.toml (packaged)")
    given = _read_toml(Path(path), str(path)) if path is not None else {}
    values |= given
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
    if not fields["zero_statuses"]:  # no status at all would switch tier 1's hard gate off as silently as a typo
        raise InputError(src, "empty: it would switch the citation rules off; to tolerate the violations the baseline "
                         "already has on a question, set tier1.allow_baseline_violations = true",
                         field="tier1.zero_statuses")
    for i, status in enumerate(fields["zero_statuses"]):  # a misspelt status would switch its check off silently
        if status not in STATUSES:
            raise InputError(src, f"unknown citation status {status!r} (one of {', '.join(STATUSES)})",
                             field=f"tier1.zero_statuses[{i}]")
    fields["zero_statuses"] = tuple(fields["zero_statuses"])
    given_once(src, fields["zero_statuses"], field="tier1.zero_statuses")  # counted, and failed, twice
    fields["judged_metrics"] = tuple(str(m) for m in fields["judged_metrics"])
    given_once(src, fields["judged_metrics"], field="tier3.metrics")  # a repeat was checked, and failed, twice
    fields["named_metrics"] = fields["judged_metrics"] if "tier3.metrics" in given else ()
    fields["cuts"] = tuple(_table(Cut, t, src, f"tier3.cuts[{i}]") for i, t in enumerate(fields["cuts"]))
    fields["ceilings"] = tuple(_ceiling(t, src, f"tier3.ceilings[{i}]") for i, t in enumerate(fields["ceilings"]))
    cfg = GateConfig(**fields)
    if not 0 < cfg.alpha < 1:
        raise InputError(src, f"must be in (0, 1), got {cfg.alpha}", field="alpha")
    if not 0.5 < cfg.confidence < 1:  # a one-sided upper bound at 50% or less bounds nothing (it raised ValueError)
        raise InputError(src, f"must be in (0.5, 1): it is the level of one-sided upper bounds too, got {cfg.confidence}",
                         field="confidence")
    if not _MIN_RESAMPLES <= cfg.n_resamples <= _MAX_RESAMPLES:  # each resample costs a pass over the questions
        raise InputError(src, f"expected a count from {_MIN_RESAMPLES} to {_MAX_RESAMPLES:,} (default 10,000)",
                         field="n_resamples")
    if cfg.seed < 0:
        raise InputError(src, "expected an integer >= 0 (numpy takes no negative seeds)", field="seed")
    if cfg.correction not in CORRECTIONS:  # a misspelt "Holm" would otherwise run uncorrected, or correct nothing
        raise InputError(src, f"unknown correction {cfg.correction!r} (one of {', '.join(map(repr, CORRECTIONS))})",
                         field="correction")
    for i, ceiling in enumerate(cfg.ceilings):
        if ceiling.method not in ("wilson", "exact"):
            raise InputError(src, "expected 'wilson' or 'exact'", field=f"tier3.ceilings[{i}].method")
    if cfg.max_new_unmeasurable < -1:
        raise InputError(src, "expected a count >= 0, or -1 to only warn", field="tier1.max_new_unmeasurable")
    # every comparison with NaN is false, so a NaN threshold would pass any candidate: each is a finite
    # number in its range, and a cut at the bottom of its range (no score is below it) is refused for the
    # same reason. A cut and tier 2's hit_at are in [0, 1] (every metric they cut reaches 0 and 1); a
    # ceiling is in its own metric's range (`METRIC_RANGES`): answer_relevancy's is [-1, 1]
    _number(cfg.recall_hit_at, src, "tier2.hit_at", low_open=True)
    _number(cfg.recall_max_mean_drop, src, "tier2.max_mean_drop")
    _number(cfg.judged_max_mean_drop, src, "tier3.max_mean_drop")
    for i, cut in enumerate(cfg.cuts):
        _number(cut.below, src, f"tier3.cuts[{i}].below", low_open=True)
        if isinstance(cut.max_regressions, bool) or not isinstance(cut.max_regressions, int) or cut.max_regressions < -1:
            raise InputError(src, "expected a count >= 0, or -1 to leave it to McNemar",
                             field=f"tier3.cuts[{i}].max_regressions")
    for i, ceiling in enumerate(cfg.ceilings):
        if not isinstance(ceiling.metric, str):
            raise InputError(src, f"expected a metric name, got {type(ceiling.metric).__name__}",
                             field=f"tier3.ceilings[{i}].metric")
        span = METRIC_RANGES.get(ceiling.metric, (0.0, 1.0))  # an unknown metric is refused below
        if ceiling.above is None:
            _number(ceiling.below, src, f"tier3.ceilings[{i}].below", low_open=True, span=span)
        else:  # nothing is above the top of the range: a ceiling there would count no question and pass anything
            _number(ceiling.above, src, f"tier3.ceilings[{i}].above", high_open=True, span=span)
        _number(ceiling.max_share, src, f"tier3.ceilings[{i}].max_share", low_open=True)
    # one cut twice ran its checks twice under one name, with limits that may contradict
    given_once(src, [f"the cut below = {c.below:g}" for c in cfg.cuts], field="tier3.cuts")
    # so did one ceiling twice; a metric's cut given two max_share was held to the stricter under two names
    given_once(src, [f"the ceiling of {c.metric} {'below' if c.above is None else 'above'} {c.cut:g}"
                     for c in cfg.ceilings], field="tier3.ceilings")
    for where, metric in [("tier3.metrics", m) for m in cfg.judged_metrics] + [
            (f"tier3.ceilings[{i}].metric", c.metric) for i, c in enumerate(cfg.ceilings)]:
        if metric not in METRIC_RANGES or metric == "recall_at_k":  # recall@k is tier 2's, per k
            names = ", ".join(n for n in METRIC_RANGES if n != "recall_at_k")
            raise InputError(src, f"unknown metric '{metric}' (one of {names})", field=where)
    for i, ceiling in enumerate(cfg.ceilings):  # the side a ceiling counts must be the metric's worse side
        where = f"tier3.ceilings[{i}]"
        if ceiling.metric in LOWER_IS_BETTER and ceiling.above is None:
            raise InputError(src, f"{ceiling.metric} is lower-is-better: set `above` (a question counts when its score "
                             "is above it), not `below`", field=f"{where}.below")
        if ceiling.metric not in LOWER_IS_BETTER and ceiling.above is not None:
            raise InputError(src, f"{ceiling.metric} is higher-is-better: set `below` (a question counts when its score "
                             "is below it), not `above`", field=f"{where}.above")
    return cfg


CORRECTIONS = ("none", "holm")  # family-wise corrections of the gate's significance tests (docs/statistics.md)
_MAX_RESAMPLES = 1_000_000  # about 100 times the default's time; 2**63 ran until killed
# a percentile interval's tails need draws to be read from: 1 resample printed numpy's RuntimeWarnings and
# called a one-draw "interval" significant; 2 or 10 decide "significantly lower" by a few draws. The
# sign-flip test that decides a mean draws at least 20 / its level whatever this is (checks.sign_flip_draws):
# its p is never below 1 / (draws + 1), and 100 draws could not reach 0.025 / 3 under Holm
_MIN_RESAMPLES = 100


def _read_toml(path, src: str) -> dict:
    """A TOML file flattened to {"tier2.hit_at": value}; unknown keys are errors, not silent typos."""
    try:
        raw = path.read_bytes().removeprefix(codecs.BOM_UTF8)
    except FileNotFoundError:
        raise InputError(src, "file not found") from None
    except IsADirectoryError:
        raise InputError(src, "is a folder; a file is needed") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:  # named by its line and its byte in that line, as the JSON readers name it
        start = raw.rfind(b"\n", 0, e.start) + 1
        raise InputError(src, f"malformed TOML: not valid UTF-8 (byte {e.start - start})",
                         line=raw.count(b"\n", 0, e.start) + 1) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:  # its position is in the message only ("(at line 3, column 1)")
        at = re.search(r"\(at line (\d+), column \d+\)$", str(e))
        raise InputError(src, f"malformed TOML: {e}", line=int(at[1]) if at else None) from None
    except (ValueError, RecursionError):  # an integer past int()'s digit limit; arrays nested past the stack
        raise InputError(src, f"malformed TOML: an integer longer than {sys.get_int_max_str_digits()} digits, "
                         "or arrays nested too deeply") from None
    flat = {}
    for key, value in data.items():
        for sub, v in (value.items() if isinstance(value, dict) else [(None, value)]):
            name = key if sub is None else f"{key}.{sub}"
            if name not in _SETTINGS:
                raise InputError(src, "unknown setting", field=name)
            flat[name] = v
    return flat


_TABLE_RE = re.compile(r"\[(\[?)\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")  # [tier3], [[tier3.cuts]]
_KEY_RE = re.compile(r"([A-Za-z0-9_\-.\"' ]+?)\s*=")  # tier2.hit_at = / "hit_at" =


def toml_line(text: str, field: str) -> int | None:
    """The 1-based line on which a TOML text sets `field` ("tier2.hit_at", "tier3.cuts[1].below").

    tomllib reports positions for syntax errors only, so a value it read but we refuse is found
    again here: a key under its `[table]`, a dotted key, or the i-th `[[array]]` table. An element
    of an inline array (`cuts = [{...}, {...}]`) is named by the line of its key; None when the
    text does not set the field (a packaged default). Multi-line strings, which no setting takes,
    are not followed."""
    lines, table, seen, depth, inline = {}, "", {}, 0, []
    for n, raw in enumerate(text.splitlines(), 1):
        code = _without_strings_and_comment(raw)
        if depth == 0:  # not inside a multi-line array or inline table
            stripped = raw.strip()
            if (m := _TABLE_RE.match(stripped)) and code.lstrip().startswith("["):
                name = _key_path(m.group(2))
                if m.group(1):  # [[name]]: its i-th table; the array itself opens at the first
                    lines.setdefault(name, n)
                    seen[name] = seen.get(name, -1) + 1
                    name = f"{name}[{seen[name]}]"
                table = name
                lines.setdefault(table, n)
            elif m := _KEY_RE.match(stripped):
                key = _key_path(m.group(1))
                key = f"{table}.{key}" if table else key
                lines.setdefault(key, n)
                if code[m.end():].lstrip().startswith("{"):
                    inline.append(key)
        depth = max(0, depth + code.count("[") + code.count("{") - code.count("]") - code.count("}"))
    while True:  # the field, else the array that holds it: tier3.cuts[1].below -> tier3.cuts
        if field in lines:
            return lines[field]
        field, n = re.subn(r"\[\d+\](\.[^.\[]+)?$", "", field)
        if not n:  # or an inline table's key: tier2 = { hit_at = 2 }
            return next((lines[k] for k in inline if field.startswith(k + ".")), None)


def _key_path(key: str) -> str:
    return ".".join(part.strip().strip("\"'") for part in key.split("."))


def _without_strings_and_comment(line: str) -> str:
    """The line's code with its quoted strings emptied and its comment cut, for bracket counting."""
    return re.sub(r"#.*$", "", re.sub(r"\"(?:[^\"\\]|\\.)*\"|'[^']*'", '""', line))


def _number(value, src: str, where: str, *, low_open: bool = False, high_open: bool = False,
            span: tuple[float, float] = (0.0, 1.0)) -> None:
    """A threshold is a finite number in `span`, [low, high] ((low, high] with `low_open`, [low, high)
    with `high_open`); TOML reads nan and inf too."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(src, f"expected a number, got {type(value).__name__}", field=where)
    low, high = span  # each comparison below is False for NaN
    if not ((low < value if low_open else low <= value) and (value < high if high_open else value <= high)):
        shown = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise InputError(src, f"{value!r} is outside {shown}", field=where)


def _table(cls, table, src: str, where: str):
    names = set(cls.__dataclass_fields__)
    if not isinstance(table, dict) or set(table) != names:
        raise InputError(src, f"expected a table with keys {sorted(names)}", field=where)
    return cls(**table)


def _ceiling(table, src: str, where: str) -> Ceiling:
    """A ceiling's table: metric, max_share, method (default "wilson"), and one of below / above."""
    if isinstance(table, dict):
        table = {"method": "wilson"} | table
    keys = {"metric", "max_share", "method"}
    if not isinstance(table, dict) or not (set(table) == keys | {"below"} or set(table) == keys | {"above"}):
        raise InputError(src, f"expected a table with keys {sorted(keys | {'below'})} (for a lower-is-better metric, "
                         "'above' instead of 'below')", field=where)
    return Ceiling(table["metric"], table.get("below"), table["max_share"], table["method"], table.get("above"))


# ---------------------------------------------------------------------------------------------
# runs


@dataclass(frozen=True)
class Run:
    path: str  # the results.json read
    judge: dict  # the run's "judge" block ({} when the run has no judged metrics)
    splitter: dict | None  # the run's "splitter" block
    records: dict  # (id, system) -> record, validated
    # where the claims.* diagnostics' claims came from: `eval answers --claim-extractor` (config.claim_extractor);
    # "splitter" when the run does not say (the default, and the only source `compare` and `reproduce` use)
    claim_extractor: str = "splitter"
    judged: frozenset[str] = frozenset()  # the judged metrics of those gated that the run scores on some question
    embedder: dict | None = None  # the run's "embedder" block: what scored answer_relevancy (None: not recorded)


def load_run(path: str | os.PathLike, metrics: tuple[str, ...] = ()) -> Run:
    """Read a run directory or results.json (`lewisrag.eval.results`) and check the scores the gate
    reads: `metrics` (names in `METRIC_RANGES`) and recall@k, which is always read."""
    p = results_path(path)
    results = read_results(p)
    if not results.records:  # every check would skip, and a gate with nothing to compare must not pass
        raise InputError(p, "no records: nothing to gate", field="records")
    records, first = {}, {}
    for i, rec in enumerate(results.records):
        line = results.lines[i] if results.lines else i + 1
        _check_scores(rec, p, i, line, metrics)
        key = (rec.id, rec.system)
        if key in records:
            raise InputError(p, f"duplicate (id, system) {key} (first at records[{first[key]}])", line=line,
                             field=f"records[{i}].id")
        records[key], first[key] = rec.to_json(), i
    judged = [m for m in metrics if m not in JUDGE_FREE and any(rec.metrics.get(m) is not None for rec in results.records)]
    if results.judge is None and judged:  # two runs without one would pass as judged alike
        raise InputError(p, f"missing: the records hold judged scores ({judged[0]}), and the gate compares those only "
                         "between runs of the same judge", field="judge")
    extractor = (results.config if isinstance(results.config, dict) else {}).get("claim_extractor", "splitter")
    if not isinstance(extractor, str):
        raise InputError(p, f"expected 'splitter' or 'llm', got {type(extractor).__name__}", field="config.claim_extractor")
    return Run(str(p), results.judge or {}, results.splitter, records, extractor, frozenset(judged), results.embedder)


def _check_scores(rec: QuestionRecord, src: Path, i: int, line: int, metrics: tuple[str, ...]) -> None:
    where, m = f"records[{i}]", rec.metrics
    for name in metrics:  # absent: this record has no such metric (a retrieval-only system); counted in tier 1
        if name in m:
            m[name] = check_score(m[name], name, rec.nan_reasons, src, line, f"{where}.metrics.{name}")
    for k, score in (m.get("recall_at_k") or {}).items():
        m["recall_at_k"][k] = check_score(score, "recall_at_k", rec.nan_reasons, src, line, f"{where}.metrics.recall_at_k.{k}")
