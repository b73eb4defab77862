"""Read answers to evaluate: ragas SingleTurnSample field names, so ragas data loads as is.

    {"id"?, "user_input", "response", "retrieved_contexts": [{"id", "title", "text"}] | [str],
     "reference"?, "reference_statements"?, "gold_passage_ids"?, "category"?, "system"?,
     "response_claims"?, "reference_claims"?}

ragas' older column names are read too (`OLDER_RAGAS_NAMES`): "question", "answer", "contexts",
and "ground_truth" (a string) or "ground_truths" (a list, of which the first is the reference, as
ragas itself took it). A record gives each field under one name; errors name the one it used.

`response_claims` and `reference_claims` (lists of non-empty strings) are the claims RAGChecker's
diagnostics (`lewisrag.eval.claims`) check, used as given; a record without them gets the run's
statement splitter's. An empty list is kept: no claims.

Citations in a response are numbers and name contexts: `[x]` is the context whose `id` is the
number x when the contexts are objects with numeric ids, and the x-th context (1-based, prompt
order) when they are plain strings or objects none of whose ids is a number ("REQ-AUTH-03"). Unknown fields
(ragas' `reference_contexts`, `rubrics`, ...) are ignored. A record without an `id` gets
`data.io.derived_id` of its question (`user_input` or `question`), the id the QA reader gives that question. Every problem
is an `InputError` naming file, line and field; all records are read and checked before anything
is evaluated.

JSON has no NaN or Infinity, but Python's json module reads the bare tokens as floats, so they are
rejected here: ±Infinity anywhere in a record, NaN in every field this reader uses. NaN in an
ignored field passes, because Parquet and pandas write it for a missing value.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from lewisrag.data.io import InputError, iter_records, optional_str, record_id, require_str, require_str_list
from lewisrag.data.records import CATEGORIES, Passage

# ragas' current column -> its name before ragas 0.2; "ground_truths" (a list) is older still
OLDER_RAGAS_NAMES = {"user_input": "question", "response": "answer", "retrieved_contexts": "contexts",
                     "reference": "ground_truth"}
FIELDS = ("id", "user_input", "response", "retrieved_contexts", "reference", "reference_statements",
          "gold_passage_ids", "category", "system", "response_claims", "reference_claims", *OLDER_RAGAS_NAMES.values(),
          "ground_truths")  # what parse_answer reads; the rest is ignored
# ragas' metric column -> the lewisrag metric that fills it in `--export ragas`. The definitions
# match; ragas' faithfulness splits the answer into statements with its LLM (--splitter atomic
# here); answer_relevancy is, in both, the mean cosine, 0 when every generated question is
# noncommittal (ragas gives 0 where nothing was generated, lewisrag NaN). ragas' context_precision
# (rank-weighted precision of the contexts useful for the reference) has no lewisrag equivalent,
# nor have its other metrics: they are left out.
RAGAS_METRICS = {"faithfulness": "faithfulness", "answer_relevancy": "answer_relevancy",
                 "context_recall": "context_recall"}


@dataclass(frozen=True)
class AnswerRecord:
    id: str
    question: str  # ragas "user_input" (older: "question")
    response: str  # the answer, with its [n] citations (older ragas: "answer")
    contexts: tuple[Passage, ...]  # retrieved, in rank order; ids are the citation labels (older ragas: "contexts")
    reference: str | None = None  # a reference answer (older ragas: "ground_truth", or "ground_truths"[0])
    reference_statements: tuple[str, ...] = ()  # the reference split into statements by a human
    gold_passage_ids: tuple[str, ...] = ()  # ids that must be retrieved (recall@k)
    category: str | None = None  # one of data.records.CATEGORIES
    system: str | None = None  # which RAG system produced the answer
    has_context_ids: bool = False  # contexts came as objects with ids (so recall@k can be computed)
    response_claims: tuple[str, ...] | None = None  # claims of the response for the diagnostics (None: split it)
    reference_claims: tuple[str, ...] | None = None  # claims of the reference for the diagnostics (None: split it)

    @property
    def docs(self) -> dict[str, str]:
        """Citation label -> context text. A citation is a number (`eval.statements`): a context
        whose id is a number is cited by it (read as a number: "01" is [1]); when no context's id is
        a number ("REQ-AUTH-03"), [n] names the n-th context, as the prompt numbered them."""
        return dict(zip(citation_labels([p.id for p in self.contexts]), (p.text for p in self.contexts)))


def citation_labels(context_ids: Sequence[str]) -> list[str]:
    """The label each context is cited by, in order (`AnswerRecord.docs` says the rule): its id read
    as a number when some context's id is a number, else its 1-based position."""
    if not any(_numeric(i) for i in context_ids):
        return [str(n) for n in range(1, len(context_ids) + 1)]
    return [i.lstrip("0") or "0" if _numeric(i) else i for i in context_ids]  # not int(): 4,300 digits and more


def _numeric(context_id: str) -> bool:
    return context_id.isascii() and context_id.isdigit()


def _name(rec: dict, current: str, source, line: int) -> str:
    """The key this record gives ragas' `current` column under: its older name when only that one
    is set (or, neither set, only that one is there), else `current`."""
    older = OLDER_RAGAS_NAMES[current]
    if rec.get(older) is not None and rec.get(current) is not None:
        raise InputError(source, f"also given as '{current}' (its current ragas name); keep one", line=line, field=older)
    if rec.get(older) is not None or (older in rec and current not in rec):
        return older
    return current


def _reference(rec: dict, source, line: int) -> str | None:
    """The reference answer; a blank one is none (its metrics are null with the reason "no
    reference", not an exact match of 0 against nothing)."""
    name = _name(rec, "reference", source, line)
    if rec.get("ground_truths") is None:
        reference = optional_str(rec, name, source, line)
    elif rec.get(name) is not None:
        raise InputError(source, f"also given as '{name}'; keep one", line=line, field="ground_truths")
    else:
        truths = require_str_list(rec, "ground_truths", source, line)
        reference = truths[0] if truths else None
    return reference if reference is not None and reference.strip() else None


def _contexts(rec: dict, source, line: int) -> tuple[tuple[Passage, ...], bool]:
    field = _name(rec, "retrieved_contexts", source, line)
    value = rec.get(field)
    if value is None:
        raise InputError(source, "missing", line=line, field=field)
    if hasattr(value, "tolist"):  # numpy arrays from Parquet / datasets
        value = value.tolist()
    if not isinstance(value, list):
        raise InputError(source, f"expected a list, got {type(value).__name__}", line=line, field=field)
    strings = bool(value) and isinstance(value[0], str)  # the first context sets the kind for all
    for i, c in enumerate(value):
        if not isinstance(c, str if strings else dict):
            raise InputError(source, "expected all strings or all objects {id, title, text}", line=line, field=f"{field}[{i}]")
    if strings or not value:
        return tuple(Passage(str(i), "", c) for i, c in enumerate(value, start=1)), False
    out, seen = [], {}
    for i, c in enumerate(value):
        where = f"{field}[{i}]"
        cid = c.get("id")
        if isinstance(cid, int) and not isinstance(cid, bool):
            cid = str(cid)
        if not isinstance(cid, str) or not cid.strip():
            raise InputError(source, "missing or not a string", line=line, field=f"{where}.id")
        label = (cid.lstrip("0") or "0") if _numeric(cid) else cid  # "01" and "1" are both cited as [1]
        if label in seen:
            what = (f"duplicate context id '{cid}'" if seen[label] == cid else
                    f"context ids '{seen[label]}' and '{cid}' would both be cited as [{label}]")
            raise InputError(source, what, line=line, field=f"{where}.id")
        seen[label] = cid
        # checked under the context's own path, so an error names retrieved_contexts[i].text, not a bare "text"
        text = require_str({f"{where}.text": c.get("text")}, f"{where}.text", source, line, nonempty=False)
        title = "" if c.get("title") is None else c["title"]  # not `or ""`: a title of 0 or false is a wrong type
        if not isinstance(title, str):
            raise InputError(source, f"expected a string, got {type(title).__name__}", line=line, field=f"{where}.title")
        out.append(Passage(cid, title, text))
    return tuple(out), True


def _claims(rec: dict, field: str, source, line: int) -> tuple[str, ...] | None:
    """A list of non-empty strings, or None when the record does not give the field (claims, or
    reference statements: an empty one is a verdict nobody can give, which would leave the
    denominator in silence)."""
    claims = require_str_list(rec, field, source, line, required=False)
    if claims is None:
        return None
    for i, claim in enumerate(claims):
        if not claim.strip():
            raise InputError(source, "empty " + ("statement" if field == "reference_statements" else "claim"), line=line,
                             field=f"{field}[{i}]")
    return tuple(claims)


def non_finite(value, path: str) -> Iterator[tuple[str, float]]:
    """(field, value) for every NaN or ±Infinity float in `value`, in document order.

    >>> list(non_finite({"a": [1.0, float("nan")], "b": {"c": float("-inf")}}, "x"))
    [('x.a[1]', nan), ('x.b.c', -inf)]
    """
    if hasattr(value, "tolist") and not isinstance(value, float):  # numpy arrays and scalars (Parquet)
        value = value.tolist()
    if isinstance(value, float):
        if not math.isfinite(value):
            yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from non_finite(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from non_finite(v, f"{path}[{i}]")


def json_token(x: float) -> str:
    """How Python's json module writes a non-finite float (not JSON): NaN, Infinity or -Infinity."""
    return "NaN" if math.isnan(x) else "Infinity" if x > 0 else "-Infinity"


def _reject_non_finite(rec: dict, source, line: int) -> None:
    for name, value in rec.items():
        for where, x in non_finite(value, str(name)):
            if math.isinf(x) or name in FIELDS:
                raise InputError(source, f"{json_token(x)} is not a value (JSON has no NaN or Infinity; leave the field "
                                 "out or write null)", line=line, field=where)


def parse_answer(rec: dict, source, line: int, seen: dict[str, int]) -> AnswerRecord:
    """Validate one record (see module docstring); raises InputError on the first bad field."""
    _reject_non_finite(rec, source, line)
    question = require_str(rec, _name(rec, "user_input", source, line), source, line)
    qid = record_id(rec, source, line, seen, derive_from=question)  # none given: io.derived_id of the question
    response = require_str(rec, _name(rec, "response", source, line), source, line, nonempty=False)
    contexts, has_ids = _contexts(rec, source, line)
    category = optional_str(rec, "category", source, line)
    if category is not None and category not in CATEGORIES:
        raise InputError(source, f"unknown category '{category}' (one of {', '.join(CATEGORIES)})", line=line, field="category")
    return AnswerRecord(
        id=qid,
        question=question,
        response=response,
        contexts=contexts,
        reference=_reference(rec, source, line),
        reference_statements=_claims(rec, "reference_statements", source, line) or (),
        gold_passage_ids=tuple(require_str_list(rec, "gold_passage_ids", source, line, required=False) or ()),
        category=category,
        system=optional_str(rec, "system", source, line),
        has_context_ids=has_ids,
        response_claims=_claims(rec, "response_claims", source, line),
        reference_claims=_claims(rec, "reference_claims", source, line),
    )


def read_answers(path: str | os.PathLike) -> list[AnswerRecord]:
    """Read and validate every answer record; ids must be unique within a system.

    The same question may be answered by several systems, so ids repeat across systems but not
    within one.
    """
    seen: dict[str | None, dict[str, int]] = {}
    out = []
    for line, rec in iter_records(path):
        system = rec.get("system") if isinstance(rec.get("system"), str) else None
        out.append(parse_answer(rec, path, line, seen.setdefault(system, {})))
    if not out:
        raise InputError(path, "no answer records")
    return out


def ragas_rows(records: Sequence[AnswerRecord], scored: Sequence[dict]) -> Iterator[dict]:
    """Each record as a row of ragas' results table: `id` and `system` (to join with results.json),
    the inputs under ragas' current column names, then ragas' metric columns (`RAGAS_METRICS`)
    with lewisrag's scores, null where there is none. `scored` are results.json's records, in
    the order of `records`.
    """
    if len(records) != len(scored):
        raise ValueError(f"{len(records)} answer records but {len(scored)} scored records")
    for rec, res in zip(records, scored):
        if res["id"] != rec.id:
            raise ValueError(f"scored record '{res['id']}' does not match answer record '{rec.id}'")
        row = {"id": rec.id, "system": rec.system, "user_input": rec.question,
               "retrieved_contexts": [c.text for c in rec.contexts], "response": rec.response, "reference": rec.reference}
        for column, metric in RAGAS_METRICS.items():
            value = res["metrics"].get(metric)
            row[column] = None if value is None or math.isnan(value) else value
        yield row
