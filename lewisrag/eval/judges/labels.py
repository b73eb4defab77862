"""Human labels: reading them (`read_labels`) and judging by them (`LabelJudge`).

A label line is {"id", "premise", "hypothesis", "supported": true|false} with an optional three-way
"label": "entailment" | "neutral" | "contradiction" (any case; null or absent: binary only). The two
must agree (supported iff entailment): a line that says supported=true and contradiction is an error.
"""

from __future__ import annotations

import os
import unicodedata
from dataclasses import dataclass

from lewisrag.data.io import InputError, iter_records, record_id, require_str
from lewisrag.eval.judges.base import LABELS, Verdict, digest


def _label_key(premise: str, hypothesis: str) -> tuple[str, str]:
    def norm(s: str) -> str:
        return " ".join(unicodedata.normalize("NFKC", s).split())

    return norm(premise), norm(hypothesis)


@dataclass(frozen=True)
class Label:
    id: str  # the label's id, quoted in the disagreement list
    premise: str  # the evidence text
    hypothesis: str  # the statement
    supported: bool  # a human's verdict: the premise alone supports the hypothesis
    line: int | None = None  # where it was read, for error messages
    label: str | None = None  # the three-way label when the file gives one (agrees with supported)


def read_labels(path: str | os.PathLike) -> list[Label]:
    """All labels of a file, validated before any judge runs (a bad line is an InputError): two
    lines that label one (premise, hypothesis) pair differently contradict each other, whether a
    judge looks the labels up or `calibrate` measures a judge against them."""
    seen: dict[str, int] = {}
    labels = []
    first: dict[tuple[str, str], Label] = {}  # the first line of each pair
    three_way: dict[tuple[str, str], Label] = {}  # the first line giving the pair a three-way label
    for line, rec in iter_records(path):
        rid = record_id(rec, path, line, seen)
        premise = require_str(rec, "premise", path, line)
        hypothesis = require_str(rec, "hypothesis", path, line)
        if not isinstance(rec.get("supported"), bool):
            raise InputError(path, "expected true or false", line=line, field="supported")
        lab = Label(rid, premise, hypothesis, rec["supported"], line, _three_way(rec, path, line))
        key = _label_key(premise, hypothesis)
        if key in first and first[key].supported != lab.supported:
            raise InputError(path, f"contradicts the label on line {first[key].line}", line=line, field="supported")
        if lab.label is not None and key in three_way and three_way[key].label != lab.label:
            raise InputError(path, f"contradicts the label on line {three_way[key].line}", line=line, field="label")
        first.setdefault(key, lab)
        if lab.label is not None:
            three_way.setdefault(key, lab)
        labels.append(lab)
    if not labels:
        raise InputError(path, "no labels in file")
    return labels


def _three_way(rec: dict, path, line: int) -> str | None:
    """The line's optional three-way label, checked against its binary `supported`."""
    raw = rec.get("label")
    if raw is None:
        return None
    label = raw.strip().lower() if isinstance(raw, str) else None
    if label not in LABELS:
        raise InputError(path, f"expected one of {', '.join(LABELS)} (or no label), got {raw!r}", line=line, field="label")
    if rec["supported"] is not (label == "entailment"):
        raise InputError(path, f"'{label}' disagrees with supported={str(rec['supported']).lower()} "
                         "(supported is true exactly when the label is entailment)", line=line, field="label")
    return label


class LabelJudge:
    """Look up human verdicts by (premise, hypothesis), compared after NFKC and whitespace folding.

    `three_way` (same keys) holds the three-way labels where the humans gave them."""

    name = "labels"

    def __init__(self, labels: dict[tuple[str, str], bool], source: str = "labels",
                 three_way: dict[tuple[str, str], str] | None = None):
        self.labels = {_label_key(p, h): v for (p, h), v in labels.items()}
        self.three_way = {_label_key(p, h): lab for (p, h), lab in (three_way or {}).items() if lab is not None}
        for key, lab in self.three_way.items():
            if self.labels.get(key) is not (lab == "entailment"):
                raise ValueError(f"three-way label {lab!r} of {key} disagrees with its binary label {self.labels.get(key)!r}")
        self.source = source  # shown in reports; not part of the fingerprint (the content is)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> LabelJudge:
        """Read a human-labels file (`read_labels`, which refuses conflicting labels for one pair)."""
        labels = read_labels(path)
        three_way = {}
        for lab in labels:
            if lab.label is not None:
                three_way.setdefault((lab.premise, lab.hypothesis), lab.label)
        return cls({(lab.premise, lab.hypothesis): lab.supported for lab in labels}, str(path), three_way)

    @property
    def fingerprint(self) -> str:
        # a pair's three-way label joins its entry only where there is one: binary files keep their fingerprint
        content = sorted([p, h, v, *([self.three_way[p, h]] if (p, h) in self.three_way else [])]
                         for (p, h), v in self.labels.items())
        return digest("LabelJudge", digest(content), {}, "")

    def judge(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        out = []
        for p, h in pairs:
            key = _label_key(p, h)
            v = self.labels.get(key)
            out.append(Verdict(None, "no label") if v is None else Verdict(v, "human label", self.three_way.get(key)))
        return out
