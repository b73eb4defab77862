"""The project's record types and their validating readers (each format is stated on its reader)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from lewisrag.data.io import InputError, iter_records, optional_str, record_id, require_str, require_str_list

CATEGORIES = ("single_doc", "multi_doc", "not_in_kb", "distractor", "conflict")


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class QAExample:
    id: str
    question: str
    answers: list[str]
    gold_passage_ids: list[str] = field(default_factory=list)
    category: str | None = None
    reference_statements: list[str] = field(default_factory=list)
    kind: str = "short"  # "short": scored by EM; "long": a few sentences, scored by ROUGE-L/BLEU-1

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["category"] is None:
            del d["category"]
        return d


def read_passages(path: str | os.PathLike) -> list[Passage]:
    """Read `{"id", "title", "text"}` records; ids must be unique and texts non-empty."""
    seen: dict[str, int] = {}
    out = []
    for line, rec in iter_records(path):
        pid = record_id(rec, path, line, seen)
        title = require_str(rec, "title", path, line, nonempty=False) if "title" in rec else ""
        out.append(Passage(pid, title, require_str(rec, "text", path, line)))
    if not out:
        raise InputError(path, "no passages")
    return out


def of_kinds(examples: Sequence[QAExample], kinds: str) -> list[QAExample]:
    """The examples whose `kind` is in the comma-separated `kinds` ("" keeps them all).

    >>> ex = [QAExample("1", "q?", ["a"]), QAExample("2", "Describe X.", ["X is..."], kind="long")]
    >>> [e.id for e in of_kinds(ex, "short")], len(of_kinds(ex, ""))
    (['1'], 2)
    """
    if not kinds:
        return list(examples)
    keep = set(kinds.split(","))
    return [ex for ex in examples if ex.kind in keep]


def read_qa(path: str | os.PathLike) -> list[QAExample]:
    """Read QA examples: `{"id", "question", "answers", "gold_passage_ids"?, "category"?, ...}`."""
    seen: dict[str, int] = {}
    out = []
    for line, rec in iter_records(path):
        qid = record_id(rec, path, line, seen)
        question = require_str(rec, "question", path, line)
        answers = require_str_list(rec, "answers", path, line)
        if not answers and rec.get("category") != "not_in_kb":
            raise InputError(path, "empty list (only not_in_kb questions may have no answer)", line=line, field="answers")
        category = optional_str(rec, "category", path, line)
        if category is not None and category not in CATEGORIES:
            raise InputError(path, f"unknown category '{category}' (one of {', '.join(CATEGORIES)})", line=line, field="category")
        kind = optional_str(rec, "kind", path, line) or "short"
        if kind not in ("short", "long"):
            raise InputError(path, f"unknown kind '{kind}' (short or long)", line=line, field="kind")
        out.append(
            QAExample(
                id=qid,
                question=question,
                answers=answers,
                gold_passage_ids=require_str_list(rec, "gold_passage_ids", path, line, required=False) or [],
                category=category,
                reference_statements=require_str_list(rec, "reference_statements", path, line, required=False) or [],
                kind=kind,
            )
        )
    if not out:
        raise InputError(path, "no examples")
    return out


def read_documents(path: str | os.PathLike) -> list[Passage]:
    """Read documents to chunk: the passage format, where `text` may be of any length."""
    return read_passages(path)
