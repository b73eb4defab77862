"""results.json as code: what every evaluation run writes, and what `lewisrag gate` reads back.

    Results          one run: who wrote it (`Producer`: kind, lewisrag version, format), its config,
                     the judge and statement splitter that scored it (and the embedder, where one
                     scored answer relevancy), one `QuestionRecord` per question and system, the
                     aggregates, and the sections its kind adds
    QuestionRecord   one question answered by one system: its metrics (a score, or null with its
                     reason under nan_reasons) and the detail the reports show
    write_results    the file, written atomically, NaN written as null
    read_results     the file, validated: an `InputError` names the file, the record and the field
                     (scores: the claim diagnostics here, the rest where the gate reads them)
    write_run_dir    a run folder: config.json, results.json, report.md, report.html and the plots

Kinds: "eval" (`lewisrag eval answers`), "bughunt" (`eval bughunt`), "compare" and "reproduce".
`FORMAT` is the layout's version, written under "lewisrag"; bump it when a field changes meaning.
A file without it was written before the field existed and reads as format 1; a newer format is
refused rather than misread.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lewisrag import __version__
from lewisrag.data.io import InputError, read_json_list_lines, shown_value, write_json, write_text
from lewisrag.data.outputs import check_out_dir, rewritten_dir
from lewisrag.data.records import CATEGORIES
from lewisrag.eval import claims
from lewisrag.eval.citations import STATUSES
from lewisrag.eval.records import json_token, non_finite

FORMAT = 1
KINDS = ("eval", "bughunt", "compare", "reproduce")

# RAGChecker's claim-level diagnostics (`lewisrag.eval.claims`) under their names with this prefix,
# so they never collide with the layered metrics of the same name (faithfulness, f1).
CLAIMS_PREFIX = "claims."
CLAIM_METRICS = tuple(CLAIMS_PREFIX + m for m in claims.METRICS)
# In the aggregates only (no per-question score): the contradicted claims summed over the answers
# whose judge gave three-way labels (`claims.total_contradictions`); absent when none did.
CONTRADICTIONS = CLAIMS_PREFIX + "contradictions"

# The range of every per-question metric a results.json can hold, in one place: shares in [0, 1],
# and answer relevancy, a mean cosine, in [-1, 1]. The gate reads only these; `read_results` checks
# the claim diagnostics' on every read.
METRIC_RANGES = {name: (0.0, 1.0) for name in (
    "faithfulness", "context_recall", "answer_completeness", "on_topic_rate", "citation_recall",
    "citation_precision", "exact_match", "f1", "rougeL", "bleu1", "recall_at_k", *CLAIM_METRICS)}
METRIC_RANGES["answer_relevancy"] = (-1.0, 1.0)  # a mean of cosines, as ragas leaves it
# Which way is better, next to the ranges: higher for every metric but RAGChecker's wrong-claim shares
# (its "↓" metrics), where a rise is the regression. The gate reads this for every check (a falling mean
# or a question under a cut is a regression only for a higher-is-better metric; see `better_direction`).
# claims.self_knowledge (right claims in no passage) is neither by nature; it keeps higher, as before.
LOWER_IS_BETTER = frozenset(CLAIMS_PREFIX + m for m in (
    "hallucination", "noise_sensitivity_in_relevant", "noise_sensitivity_in_irrelevant"))
assert LOWER_IS_BETTER <= METRIC_RANGES.keys()


def better_direction(metric: str) -> int:
    """+1 when a higher score of `metric` is better, -1 when a lower one is (`LOWER_IS_BETTER`).

    >>> better_direction("faithfulness"), better_direction("claims.hallucination")
    (1, -1)
    """
    return -1 if metric in LOWER_IS_BETTER else 1


# scored from the answer string and the retrieved ids alone: no judge, so they compare across judges
JUDGE_FREE = frozenset({"exact_match", "f1", "rougeL", "bleu1", "recall_at_k"})

_TOP = ("lewisrag", "config", "judge", "splitter", "embedder", "records", "aggregates")  # the keys every kind shares


@dataclass
class Producer:
    kind: str  # one of KINDS
    version: str  # lewisrag's version
    format: int = FORMAT

    @classmethod
    def here(cls, kind: str) -> Producer:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        return cls(kind, __version__)  # also where lewisrag runs from a checkout, uninstalled


@dataclass
class QuestionRecord:
    id: str
    system: str | None  # which system answered (None: the file holds one system)
    category: str | None  # single_doc, multi_doc, not_in_kb, distractor, conflict
    metrics: dict  # metric -> score or None; recall_at_k -> {k: score or None}
    nan_reasons: dict | None = None  # metric -> why its score is None (None: the writer keeps no reasons)
    refused: bool | None = None  # whether the answer refused (required for not_in_kb)
    detail: dict = field(default_factory=dict)  # what reports show: statements, citation checks, diagnosis, texts

    @classmethod
    def of(cls, rec: dict) -> QuestionRecord:
        """A record the evaluator built as a dict, split into its fields (no checks: for writers)."""
        rest = {k: v for k, v in rec.items() if k not in ("id", "system", "category", "refused", "metrics", "nan_reasons")}
        return cls(rec["id"], rec.get("system"), rec.get("category"), rec["metrics"], rec.get("nan_reasons"),
                   rec.get("refused"), rest)

    def to_json(self) -> dict:
        out = {"id": self.id, "system": self.system, "category": self.category}
        if self.refused is not None:
            out["refused"] = self.refused
        out["metrics"] = self.metrics
        if self.nan_reasons is not None:
            out["nan_reasons"] = self.nan_reasons
        return {**out, **self.detail}

    @classmethod
    def from_json(cls, rec, src: Path, i: int, line: int | None = None) -> QuestionRecord:
        """A record read back, its structure checked (scores are checked by `check_score`); errors
        name `line` (the line the record opens on in `src`), else its 1-based position."""
        where, line = f"records[{i}]", line or i + 1
        if not isinstance(rec, dict):
            raise InputError(src, "expected an object", line=line, field=where)
        reject_non_finite(rec, src, where, line)
        rid = rec.get("id")
        if isinstance(rid, bool) or not isinstance(rid, (str, int)) or not str(rid).strip():
            raise InputError(src, "missing or not a non-empty string", line=line, field=f"{where}.id")
        for name in ("system", "category"):
            if rec.get(name) is not None and not isinstance(rec[name], str):
                raise InputError(src, "expected a string or null", line=line, field=f"{where}.{name}")
        if rec.get("category") is not None and rec["category"] not in CATEGORIES:  # a misspelt not_in_kb skips its check
            raise InputError(src, f"unknown category '{rec['category']}' (one of {', '.join(CATEGORIES)})", line=line,
                             field=f"{where}.category")
        refused = rec.get("refused")
        if rec.get("category") == "not_in_kb" and not isinstance(refused, bool):
            raise InputError(src, "a not_in_kb record must say whether the answer refused", line=line,
                             field=f"{where}.refused")
        if refused is not None and not isinstance(refused, bool):
            raise InputError(src, "expected true or false", line=line, field=f"{where}.refused")
        m, reasons = rec.get("metrics"), rec.get("nan_reasons")
        if not isinstance(m, dict):
            raise InputError(src, "missing or not an object", line=line, field=f"{where}.metrics")
        if reasons is not None and not isinstance(reasons, dict):
            raise InputError(src, "expected an object {metric: reason}", line=line, field=f"{where}.nan_reasons")
        for name, reason in (reasons or {}).items():  # a list or a number there was a traceback in the gate (exit 3)
            if not isinstance(reason, str):
                raise InputError(src, f"expected a string (why the score is null), got {type(reason).__name__}",
                                 line=line, field=f"{where}.nan_reasons.{name}")
        recall = m.get("recall_at_k")  # absent or null: the question has no gold passage ids to match
        if recall is not None and not isinstance(recall, dict):
            raise InputError(src, "expected an object {k: score}", line=line, field=f"{where}.metrics.recall_at_k")
        for k in recall or {}:  # the gate pairs recall@k by k: another spelling would read as a lost score
            if not (k.isascii() and k.isdigit() and not k.startswith("0")):
                raise InputError(src, f"expected a cut-off k >= 1 as the key, got '{k}'", line=line,
                                 field=f"{where}.metrics.recall_at_k.{k}")
        for name in m:  # a misspelt metric would go unread, and the gate would skip it instead of failing
            if name not in METRIC_RANGES and not name.startswith(CLAIMS_PREFIX):
                known = ", ".join(n for n in METRIC_RANGES if not n.startswith(CLAIMS_PREFIX))
                raise InputError(src, f"unknown metric (one of {known}, or a claims. diagnostic)", line=line,
                                 field=f"{where}.metrics.{name}")
        _check_claim_scores(m, reasons, src, line, where)
        checks = rec.get("citation_checks")
        if checks is not None and not (isinstance(checks, list) and all(
                isinstance(c, dict) and isinstance(c.get("status"), str) for c in checks)):
            raise InputError(src, "expected a list of objects with a string 'status'", line=line,
                             field=f"{where}.citation_checks")
        for j, c in enumerate(checks or []):  # a misspelt status would read as no violation at all
            if c["status"] not in STATUSES:
                raise InputError(src, f"unknown status '{c['status']}' (one of {', '.join(STATUSES)})", line=line,
                                 field=f"{where}.citation_checks[{j}].status")
        # what the gate pairs a record's labels by (`gate.checks._LABELS`): a number there was a traceback (exit 3),
        # an object of statements compared by its keys, and a string's gold ids by its characters
        gold = rec.get("gold_passage_ids")
        if gold is not None and not (isinstance(gold, list) and all(
                isinstance(g, (str, int)) and not isinstance(g, bool) for g in gold)):
            raise InputError(src, "expected a list of passage ids (strings or integers)", line=line,
                             field=f"{where}.gold_passage_ids")
        # false: the contexts were plain strings, their ids positions that name no passage (report.html marks no
        # gold among them); absent in files written before it was recorded, read as before (ids of passages)
        if rec.get("has_context_ids") is not None and not isinstance(rec["has_context_ids"], bool):
            raise InputError(src, "expected true or false", line=line, field=f"{where}.has_context_ids")
        refs = rec.get("reference_statements")
        if refs is not None and not (isinstance(refs, list) and all(
                isinstance(s, str) or (isinstance(s, dict) and isinstance(s.get("text"), str)) for s in refs)):
            raise InputError(src, "expected a list of statements (strings, or objects with a string 'text')", line=line,
                             field=f"{where}.reference_statements")
        # absent in files written before they were recorded: the gate then pairs reference_statements as given
        if rec.get("reference") is not None and not isinstance(rec["reference"], str):
            raise InputError(src, "expected a string (the reference answer) or null", line=line,
                             field=f"{where}.reference")
        split = rec.get("reference_statements_split")
        if split is not None and not isinstance(split, bool):
            raise InputError(src, "expected true or false", line=line, field=f"{where}.reference_statements_split")
        detail = {k: v for k, v in rec.items() if k not in ("id", "system", "category", "refused", "metrics", "nan_reasons")}
        return cls(str(rid), rec.get("system"), rec.get("category"), m, reasons, refused, detail)


def _check_claim_scores(m: dict, reasons: dict | None, src: Path, line: int, where: str) -> None:
    """The claim diagnostics are checked on every read (the other metrics only where the gate reads them)."""
    for name, value in m.items():
        if not name.startswith(CLAIMS_PREFIX):
            continue
        if name not in METRIC_RANGES:
            raise InputError(src, f"unknown claim diagnostic (one of {', '.join(CLAIM_METRICS)})", line=line,
                             field=f"{where}.metrics.{name}")
        check_score(value, name, reasons, src, line, f"{where}.metrics.{name}")


@dataclass
class Results:
    producer: Producer
    config: dict | None  # how the run was made (None: kept in the run folder's config.json only)
    records: list[QuestionRecord]
    judge: dict | None = None  # name, fingerprint (and model, params): scores from different judges do not compare
    splitter: dict | None = None  # name, version of the statement splitter
    aggregates: dict | None = None  # a distribution per metric, citation status counts, not_in_kb refusals, causes
    sections: dict = field(default_factory=dict)  # what the kind adds: qa, retrieval, layers, position, stages, ...
    lines: tuple[int, ...] = field(default=(), compare=False, repr=False)  # read from a file: the line each record opens on
    # name and fingerprint of the sentence embedder behind answer_relevancy (None: none was used, or a
    # caller's embedder that nothing identifies): scores from different embedders do not compare
    embedder: dict | None = None

    def to_json(self) -> dict:
        """The results.json object; NaN becomes null (JSON has no NaN)."""
        out: dict = {"lewisrag": {"kind": self.producer.kind, "version": self.producer.version,
                                  "format": self.producer.format}}
        if self.config is not None:
            out["config"] = self.config
        if self.judge is not None:
            out["judge"] = self.judge
        if self.splitter is not None:
            out["splitter"] = self.splitter
        if self.embedder is not None:
            out["embedder"] = self.embedder
        out.update(self.sections)
        out["records"] = [r.to_json() for r in self.records]
        if self.aggregates is not None:
            out["aggregates"] = self.aggregates
        return jsonable(out)

    @classmethod
    def from_json(cls, data, src: Path, lines: list[int] | None = None) -> Results:
        """Results read back and checked; `lines`: the line each record opens on in `src`."""
        if not isinstance(data, dict):
            raise InputError(src, f"expected a JSON object, got {type(data).__name__}")
        if not isinstance(data.get("records"), list):
            raise InputError(src, "missing or not a list", field="records")
        reject_non_finite({k: v for k, v in data.items() if k != "records"}, src, "", None)
        producer = _producer(data.get("lewisrag"), src)
        for name in ("judge", "splitter", "embedder", "aggregates"):
            if data.get(name) is not None and not isinstance(data[name], dict):
                raise InputError(src, "expected an object", field=name)
        records = [QuestionRecord.from_json(rec, src, i, lines[i] if lines else None) for i, rec in enumerate(data["records"])]
        sections = {k: v for k, v in data.items() if k not in _TOP}
        return cls(producer, data.get("config"), records, data.get("judge"), data.get("splitter"),
                   data.get("aggregates"), sections, tuple(lines or ()), data.get("embedder"))


def _producer(block, src: Path) -> Producer:
    if block is None:  # hand-written or third-party files: read as the current format of an unknown writer
        return Producer("eval", "unknown")
    if not isinstance(block, dict):
        raise InputError(src, "expected an object {kind, version, format}", field="lewisrag")
    fmt = block.get("format", 1)
    if isinstance(fmt, bool) or not isinstance(fmt, int) or fmt < 1:
        raise InputError(src, f"expected a positive integer, got {fmt!r}", field="lewisrag.format")
    if fmt > FORMAT:
        raise InputError(src, f"format {fmt} is newer than this lewisrag reads ({FORMAT}): upgrade lewisrag",
                         field="lewisrag.format")
    return Producer(str(block.get("kind", "eval")), str(block.get("version", "unknown")), fmt)


def check_score(value, metric: str, reasons: dict | None, src: Path, line: int, where: str) -> float | None:
    """A score is a number in its metric's range, or null with the reason it could not be measured."""
    if value is None:
        reason = (reasons or {}).get(metric)
        if not isinstance(reason, str) or not reason.strip():
            raise InputError(src, f"null without a reason: a score that cannot be measured is null with its reason "
                             f"under nan_reasons.{metric}", line=line, field=where)
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(src, f"expected a number or null, got {type(value).__name__}", line=line, field=where)
    low, high = METRIC_RANGES[metric]
    if not low <= value <= high:
        raise InputError(src, f"{shown_value(value)} is outside {metric}'s range [{low:g}, {high:g}]", line=line, field=where)
    return float(value)


def reject_non_finite(obj: dict, src: Path, where: str, line: int | None) -> None:
    """NaN and ±Infinity are not JSON, though Python's json module reads them: refuse them anywhere."""
    for name, x in non_finite(obj, where):
        what = "is not JSON" if math.isnan(x) else "is not JSON (or a number too large for a float)"
        raise InputError(src, f"{json_token(x)} {what}; a score that cannot be measured is null with its reason "
                         "under nan_reasons", line=line, field=name)


def jsonable(obj):
    """`obj` with NaN and ±Infinity floats replaced by None, at any depth."""
    if isinstance(obj, float):
        return None if not math.isfinite(obj) else obj
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return obj


def results_path(path: str | os.PathLike) -> Path:
    """A run directory's results.json, or the file itself."""
    p = Path(path)
    if p.is_dir():
        if (p / "results.json").is_dir():  # else read as a run directory itself, and named as missing
            raise InputError(p / "results.json", "is a folder; a results.json file is needed")
        if not (p / "results.json").exists():
            raise InputError(path, "no results.json in this run directory")
        return p / "results.json"
    return p


def read_results(path: str | os.PathLike) -> Results:
    """A run directory's (or a file's) results, validated."""
    p = results_path(path)
    data, lines = read_json_list_lines(p, "records")
    return Results.from_json(data, p, lines)


def write_results(path: str | os.PathLike, results: Results) -> None:
    write_json(path, results.to_json())


def write_run_dir(out: str | os.PathLike, kind: str, results: Results, *, report_md: str, report_html: str,
                  config: dict | None = None, more: Callable[[Path], list[str]] | None = None,
                  overwrite: bool = False) -> list[str]:
    """Write a run folder's files all or none: config.json (when given), report.md, results.json,
    report.html, then the kind's other files (`more(folder)`: plots, timings), returning the names
    `more` wrote. They are written into a folder beside `out` first, which then replaces `out` in one
    rename (`outputs.rewritten_dir`): the files an earlier run of the same `kind` wrote and this one
    does not (an export, a plot) go, so that nothing stale sits beside the new results; files the
    user added there stay (one of a name the new run writes is refused unless `overwrite`); any other
    folder is refused, or with `overwrite` replaced whole. The marker file lists what the run wrote.
    `eval answers`, `eval bughunt` and `compare` write here."""
    out = check_out_dir(out, kind, overwrite=overwrite)

    def write(d: Path) -> list[str]:
        if config is not None:
            write_json(d / "config.json", config)
        write_text(d / "report.md", report_md)
        write_results(d / "results.json", results)
        write_text(d / "report.html", report_html)
        return more(d) if more else []

    with rewritten_dir(out, kind, overwrite=overwrite) as d:  # the earlier run's files go, the user's stay
        return write(d)
