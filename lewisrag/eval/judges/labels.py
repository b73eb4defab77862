"""Human labels: reading them (`read_labels`) and judging by them (`LabelJudge`)."""

from __future__ import annotations

import os
import unicodedata
from dataclasses import dataclass

from lewisrag.data.io import InputError, iter_records, record_id, require_str
from lewisrag.eval.judges.base import Verdict, digest


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


def read_labels(path: str | os.PathLike) -> list[Label]:
    """All labels of a file, validated before any judge runs (a bad line is an InputError)."""
    seen: dict[str, int] = {}
    labels = []
    for line, rec in iter_records(path):
        rid = record_id(rec, path, line, seen)
        premise = require_str(rec, "premise", path, line)
        hypothesis = require_str(rec, "hypothesis", path, line)
        if not isinstance(rec.get("supported"), bool):
            raise InputError(path, "expected true or false", line=line, field="supported")
        labels.append(Label(rid, premise, hypothesis, rec["supported"], line))
    if not labels:
        raise InputError(path, "no labels in file")
    return labels


class LabelJudge:
    """Look up human verdicts by (premise, hypothesis), compared after NFKC and whitespace folding."""

    name = "labels"

    def __init__(self, labels: dict[tuple[str, str], bool], source: str = "labels"):
        self.labels = {_label_key(p, h): v for (p, h), v in labels.items()}
        self.source = source  # shown in reports; not part of the fingerprint (the content is)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> LabelJudge:
        """Read a human-labels file (`read_labels`); conflicting labels for one pair are an error."""
        labels: dict[tuple[str, str], bool] = {}
        first: dict[tuple[str, str], Label] = {}
        for lab in read_labels(path):
            key = _label_key(lab.premise, lab.hypothesis)
            if key in labels and labels[key] != lab.supported:
                raise InputError(path, f"contradicts the label on line {first[key].line}", line=lab.line, field="supported")
            labels[key] = lab.supported
            first.setdefault(key, lab)
        return cls(labels, str(path))

    @property
    def fingerprint(self) -> str:
        content = sorted([p, h, v] for (p, h), v in self.labels.items())
        return digest("LabelJudge", digest(content), {}, "")

    def judge(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        out = []
        for p, h in pairs:
            v = self.labels.get(_label_key(p, h))
            out.append(Verdict(None, "no label") if v is None else Verdict(v, "human label"))
        return out
