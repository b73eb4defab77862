"""Read answers to evaluate: ragas SingleTurnSample field names, so ragas data loads as is.

    {"id"?, "user_input", "response", "retrieved_contexts": [{"id", "title", "text"}] | [str],
     "retrieved_context_ids"?, "reference"?, "reference_statements"?,
     "gold_passage_ids"? | "reference_context_ids"?, "category"?, "system"?, "response_claims"?,
     "reference_claims"?}

ragas' older column names are read too (`OLDER_RAGAS_NAMES`): "question", "answer", "contexts",
and "ground_truth" (a string) or "ground_truths" (a list: the first is the reference, split into
its statements, as ragas' answer metrics took it; exact match, F1 and ROUGE-L take the best over all
of them, `AnswerRecord.other_references`, as SQuAD scores an answer against every gold one). Beside
ragas' current "reference", those other answers are "other_references" (a list of non-empty strings), the
column `ragas_rows` writes them to. So are ragas' id columns: "retrieved_context_ids" (strings or integers, one
per context of a list of strings: the contexts' ids, as objects give them) and
"reference_context_ids" (the gold passage ids; "gold_passage_ids" takes the same strings or integers). A
record gives each field under one name; errors name the one it used.

`response_claims` and `reference_claims` (lists of non-empty strings) are the claims RAGChecker's
diagnostics (`lewisrag.eval.claims`) check, used as given; a record without them gets the run's
statement splitter's. An empty list is kept: no claims.

Citations in a response are numbers and name contexts: `[x]` is the context whose `id` is the
number x when the contexts are objects with numeric ids, and the x-th context (1-based, prompt
order) when they are plain strings or objects none of whose ids is a number ("REQ-AUTH-03"). Unknown fields
(ragas' `reference_contexts`, `rubrics`, ...) are ignored. A record without an `id` gets
`data.io.derived_id` of its question (`user_input` or `question`), the id the QA reader gives that
question, read in Unicode NFC ('é' as one code point or as e and a combining accent is one question).
A question that some system answers on several records without ids gets, on each of its records
without one, that id, "-" and 8 hex digits of what the record is judged against (reference, reference
statements and claims, gold passage ids, category; its texts in NFC too): ids that followed the
records' order paired another record's answer in `lewisrag gate` once a file was reordered. Two records of one
system that agree on all of it cannot be told apart and are refused, naming both lines. So is an id that
two systems give to two questions (compared in NFC, runs of whitespace as one space): the reports and the
gate pair the systems' answers by id, and one system's answer would be shown under the other's question. Every
problem is an `InputError` naming file, line and field; all records are read and checked before
anything is evaluated.

JSON has no NaN or Infinity, but Python's json module reads the bare tokens as floats, so they are
rejected here: ±Infinity anywhere in a record, NaN in every field this reader uses. NaN in an
ignored field passes, because Parquet and pandas write it for a missing value.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import unicodedata
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from lewisrag.data.io import InputError, decoded, iter_records, optional_str, record_id, require_str, require_str_list
from lewisrag.data.records import CATEGORIES, Passage

# ragas' current column -> its name before ragas 0.2; "ground_truths" (a list) is older still
OLDER_RAGAS_NAMES = {"user_input": "question", "response": "answer", "retrieved_contexts": "contexts",
                     "reference": "ground_truth"}
FIELDS = ("id", "user_input", "response", "retrieved_contexts", "retrieved_context_ids", "reference",
          "reference_statements", "gold_passage_ids", "reference_context_ids", "category", "system", "response_claims",
          "reference_claims", *OLDER_RAGAS_NAMES.values(), "ground_truths", "other_references")  # what parse_answer reads; the rest is ignored
REQUIRED = ("user_input", "response", "retrieved_contexts", "question", "answer", "contexts")  # null is "missing"
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
    other_references: tuple[str, ...] = ()  # "ground_truths"[1:] or "other_references": answers as good, for EM, F1 and ROUGE-L only
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
    reference", not an exact match of 0 against nothing). `_other_references`: the rest of a
    "ground_truths" list."""
    name = _name(rec, "reference", source, line)
    if rec.get("ground_truths") is None:
        reference = optional_str(rec, name, source, line)
    elif rec.get(name) is not None:
        raise InputError(source, f"also given as '{name}'; keep one", line=line, field="ground_truths")
    else:
        truths = require_str_list(rec, "ground_truths", source, line)
        reference = truths[0] if truths else None
        later = next((i for i, t in enumerate(truths) if t.strip()), 0)
        if later:  # the first is the reference: a blank one dropped the answers after it, in silence
            raise InputError(source, f"blank, while ground_truths[{later}] is not: the first is the reference answer; "
                             "put it first or remove the blank", line=line, field="ground_truths[0]")
    return reference if reference is not None and reference.strip() else None


def _other_references(rec: dict, reference: str | None, source, line: int) -> tuple[str, ...]:
    """The entries of "ground_truths" after the first, blanks left out (`_reference` checked the list),
    or "other_references": ragas' current "reference" holds one answer, and `ragas_rows` writes the
    others there, so that the export reads back to the same exact match, F1 and ROUGE-L."""
    others = require_str_list(rec, "other_references", source, line, required=False)
    if others is None:
        truths = rec.get("ground_truths") or []
        return tuple(t for t in truths[1:] if t.strip())
    if rec.get("ground_truths") is not None:
        raise InputError(source, "also given as 'ground_truths'; keep one", line=line, field="other_references")
    for i, other in enumerate(others):
        if not other.strip():
            raise InputError(source, "empty", line=line, field=f"other_references[{i}]")
    if others and reference is None:  # scored only beside a reference: they would be dropped in silence
        raise InputError(source, "answers beside a reference, but the record gives none: give 'reference'", line=line,
                         field="other_references")
    return tuple(others)


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
    ids = _id_list(rec, "retrieved_context_ids", source, line)  # ragas' ids of string contexts, one each
    if ids is not None and value and not strings:
        raise InputError(source, f"the contexts of '{field}' are objects with ids of their own; keep one", line=line,
                         field="retrieved_context_ids")
    if ids is not None and len(ids) != len(value):
        raise InputError(source, f"{len(ids)} ids for {len(value)} contexts in '{field}'", line=line,
                         field="retrieved_context_ids")
    if ids is None and strings:
        return tuple(Passage(str(i), "", c) for i, c in enumerate(value, start=1)), False
    # objects, strings with their ids, or none at all: nothing retrieved holds no gold id (recall@k 0, not unknown)
    if ids is not None:  # string contexts and their ids, checked as the objects' are
        given = [(cid, f"retrieved_context_ids[{i}]", {"text": c}, f"{field}[{i}]") for i, (cid, c) in enumerate(zip(ids, value))]
    else:
        given = [(c.get("id"), f"{field}[{i}].id", c, f"{field}[{i}]") for i, c in enumerate(value)]
    out, seen = [], {}
    for cid, id_field, c, where in given:
        if isinstance(cid, bool) or not isinstance(cid, (str, int)):
            raise InputError(source, "missing" if cid is None else f"expected a string or an integer, got "
                             f"{type(cid).__name__}", line=line, field=id_field)
        cid = str(cid)
        if not cid.strip():
            raise InputError(source, "empty", line=line, field=id_field)
        label = (cid.lstrip("0") or "0") if _numeric(cid) else cid  # "01" and "1" are both cited as [1]
        if label in seen:
            what = (f"duplicate context id {cid!r}" if seen[label] == cid else  # repr: one line, whatever the id holds
                    f"context ids {seen[label]!r} and {cid!r} would both be cited as [{label}]")
            raise InputError(source, what, line=line, field=id_field)
        seen[label] = cid
        # checked under the context's own path, so an error names retrieved_contexts[i].text, not a bare "text"
        text_field = where if ids is not None else f"{where}.text"
        text = require_str({text_field: c.get("text")}, text_field, source, line, nonempty=False)
        title = "" if c.get("title") is None else c["title"]  # not `or ""`: a title of 0 or false is a wrong type
        if not isinstance(title, str):
            raise InputError(source, f"expected a string, got {type(title).__name__}", line=line, field=f"{where}.title")
        out.append(Passage(cid, title, text))
    return tuple(out), True


def _id_list(rec: dict, field: str, source, line: int) -> list | None:
    """A list of ids (strings, or integers as ragas allows), or None when the record does not give it."""
    value = rec.get(field)
    if value is None:
        return None
    if hasattr(value, "tolist"):  # numpy arrays from Parquet / datasets
        value = value.tolist()
    if not isinstance(value, list):
        raise InputError(source, f"expected a list of ids, got {type(value).__name__}", line=line, field=field)
    return [decoded(v, source, line, f"{field}[{i}]") for i, v in enumerate(value)]


def _gold_ids(rec: dict, source, line: int) -> tuple[str, ...]:
    """The ids that must be retrieved: `gold_passage_ids`, or ragas' `reference_context_ids`, each a
    list of strings or integers, as the contexts' ids are (a gold id 5 matches the context id 5)."""
    gold = _id_list(rec, "gold_passage_ids", source, line)
    ragas = _id_list(rec, "reference_context_ids", source, line)
    if ragas is not None and gold is not None:
        raise InputError(source, "also given as 'gold_passage_ids'; keep one", line=line, field="reference_context_ids")
    field, ids = ("gold_passage_ids", gold) if ragas is None else ("reference_context_ids", ragas)
    for i, gid in enumerate(ids or ()):
        if isinstance(gid, bool) or not isinstance(gid, (str, int)) or not str(gid).strip():
            raise InputError(source, f"expected a string or an integer, got {gid!r}", line=line, field=f"{field}[{i}]")
    return tuple(str(gid) for gid in ids or ())


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
    """NaN or ±Infinity, with what to write instead: null (or nothing) suits an optional field only,
    and a required one written null is "missing" (an answer that is not there is "")."""
    for name, value in rec.items():
        for where, x in non_finite(value, str(name)):
            if math.isinf(x) or name in FIELDS:
                advice = ""
                if where == name and name in ("response", "answer"):
                    advice = '; an answer that is not there is ""'
                elif where == name and name not in REQUIRED:
                    advice = "; leave the field out or write null"
                raise InputError(source, f"{json_token(x)} is not a value (JSON has no NaN or Infinity){advice}",
                                 line=line, field=where)


def parse_answer(rec: dict, source, line: int, seen: dict[str, int]) -> AnswerRecord:
    """Validate one record (see module docstring); raises InputError on the first bad field."""
    _reject_non_finite(rec, source, line)
    question = require_str(rec, _name(rec, "user_input", source, line), source, line)
    # none given: io.derived_id of the question (in NFC: 'é' saved as e + U+0301 gets the id of 'é')
    qid = record_id(rec, source, line, seen, derive_from=question)
    response = require_str(rec, _name(rec, "response", source, line), source, line, nonempty=False)
    contexts, has_ids = _contexts(rec, source, line)
    category = optional_str(rec, "category", source, line)
    if category is not None and category not in CATEGORIES:
        raise InputError(source, f"unknown category {category!r} (one of {', '.join(CATEGORIES)})", line=line, field="category")
    reference = _reference(rec, source, line)
    return AnswerRecord(
        id=qid,
        question=question,
        response=response,
        contexts=contexts,
        reference=reference,
        other_references=_other_references(rec, reference, source, line),
        reference_statements=_claims(rec, "reference_statements", source, line) or (),
        gold_passage_ids=_gold_ids(rec, source, line),
        category=category,
        system=optional_str(rec, "system", source, line),
        has_context_ids=has_ids,
        response_claims=_claims(rec, "response_claims", source, line),
        reference_claims=_claims(rec, "reference_claims", source, line),
    )


def read_answers(path: str | os.PathLike) -> list[AnswerRecord]:
    """Read and validate every answer record; ids must be unique within a system.

    The same question may be answered by several systems, so ids repeat across systems but not
    within one, and name one question in all (`_one_question_per_id`). The ids of records without
    one are settled once the whole file is read, so that they do not depend on the records' order
    (`_settle_derived_ids`).
    """
    given: dict[str | None, dict[str, int]] = {}  # system -> id -> the line that gives it
    out, lines, at = [], [], []
    for line, rec in iter_records(path):  # a JSON array saved as .jsonl gets iter_records' "rename it" hint
        system = rec.get("system") if isinstance(rec.get("system"), str) else None
        # a record without an id gets its question's id here, whatever came before (`seen` left empty)
        out.append(parse_answer(rec, path, line, given.setdefault(system, {}) if rec.get("id") is not None else {}))
        lines.append(line if rec.get("id") is None else None)
        at.append(line)
    if not out:
        raise InputError(path, "no answer records")
    out = _settle_derived_ids(out, lines, given, path)
    _one_question_per_id(out, at, path)
    return out


def _one_question_per_id(records: list[AnswerRecord], lines: list[int], source) -> None:
    """Refuse an id that two systems give to two questions (in NFC, whitespace collapsed), naming
    both lines: report.html groups the systems' answers by id, and the gate pairs them by it, so one
    system's answer would be shown and compared under another system's question."""
    first: dict[str, tuple[str, int, str | None]] = {}  # id -> (its question, the line, the system) first seen
    for rec, line in zip(records, lines):
        question = " ".join(unicodedata.normalize("NFC", rec.question).split())
        known, at, system = first.setdefault(rec.id, (question, line, rec.system))
        if known != question:
            raise InputError(source, f"'{rec.id}' is line {at}'s id (system {_shown(system)}) for another question: "
                             f"{_shown(known)} there, {_shown(question)} here; one id names one question in every "
                             "system", line=line, field="id")


def _shown(text: str | None) -> str:
    """A system or a question as an error quotes it: at most 60 characters, "no system" for None."""
    if text is None:
        return "no system"
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _settle_derived_ids(records: list[AnswerRecord], lines: list[int | None], given: dict[str | None, dict[str, int]],
                        source) -> list[AnswerRecord]:
    """`records` with the final ids of those without one (`lines[i]`: record i's line, None when it
    gives its id). A question no system asks twice keeps its derived id; one that some system asks
    again gets, on every record, the digest of what that record is judged against (module
    docstring), in every system, so that the systems' answers to one item still share an id. Two
    records of a system alike, or a derived id that another record gives, are errors naming both lines."""
    asked = Counter((records[i].system, records[i].id) for i, line in enumerate(lines) if line is not None)
    repeated = {question_id for (_, question_id), n in asked.items() if n > 1}
    first: dict[tuple[str | None, str], int] = {}
    out = list(records)
    for i, line in enumerate(lines):
        if line is None:
            continue
        rec = records[i]
        rid = f"{rec.id}-{_judged_against(rec)}" if rec.id in repeated else rec.id
        if (rec.system, rid) in first:
            raise InputError(source, f"missing, and line {first[rec.system, rid]} asks the same question, judged against "
                             "the same reference, without an id either: give each record an id (ids from the records' "
                             "order would pair other answers once the file is reordered)", line=line, field="id")
        if rid in given.get(rec.system, {}):
            raise InputError(source, f"missing, and the id derived from the question, '{rid}', is line "
                             f"{given[rec.system][rid]}'s own: give this record an id", line=line, field="id")
        first[rec.system, rid] = line
        out[i] = replace(rec, id=rid)
    return out


def _judged_against(rec: AnswerRecord) -> str:
    """8 hex digits of what the record's answer is judged against: the same on every run and in
    every order, and in ragas' older names too (a reference is one, whichever field gave it)."""
    claims = None if rec.reference_claims is None else list(rec.reference_claims)
    item = [rec.reference, list(rec.reference_statements), claims, list(rec.gold_passage_ids), rec.category]
    return hashlib.sha1(json.dumps(_nfc(item), ensure_ascii=False).encode("utf-8")).hexdigest()[:8]


def _nfc(value):
    """`value` with every string in Unicode NFC: one text saved composed or decomposed is one text."""
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    return [_nfc(v) for v in value] if isinstance(value, list) else value


def ragas_rows(records: Sequence[AnswerRecord], scored: Sequence[dict]) -> Iterator[dict]:
    """Each record as a row of ragas' results table: `id` and `system` (to join with results.json),
    the inputs under ragas' current column names, then ragas' metric columns (`RAGAS_METRICS`)
    with lewisrag's scores, null where there is none. `scored` are results.json's records, in
    the order of `records`.

    What a record holds beyond ragas' text columns goes in columns of its own, each there when some
    record has it (ragas reads past columns it does not know): the contexts' ids as ragas'
    `retrieved_context_ids` (the citations [n] name them), the gold ids as its `reference_context_ids`,
    the answers as good as the reference (older ragas' "ground_truths"[1:]) as `other_references`, and
    `reference_statements`, `category`, `response_claims`, `reference_claims`, so that `eval answers`
    reads the file back to the same scores.
    """
    if len(records) != len(scored):
        raise ValueError(f"{len(records)} answer records but {len(scored)} scored records")
    extra = {  # column -> the record's value (None: the record does not give it)
        "retrieved_context_ids": lambda r: [c.id for c in r.contexts] if r.has_context_ids else None,
        "reference_context_ids": lambda r: list(r.gold_passage_ids) or None,
        "other_references": lambda r: list(r.other_references) or None,
        "reference_statements": lambda r: list(r.reference_statements) or None,
        "category": lambda r: r.category,
        "response_claims": lambda r: None if r.response_claims is None else list(r.response_claims),
        "reference_claims": lambda r: None if r.reference_claims is None else list(r.reference_claims),
    }
    given = {column for column, value in extra.items() if any(value(r) is not None for r in records)}
    for rec, res in zip(records, scored):
        if res["id"] != rec.id:
            raise ValueError(f"scored record '{res['id']}' does not match answer record '{rec.id}'")
        row = {"id": rec.id, "system": rec.system, "user_input": rec.question,
               "retrieved_contexts": [c.text for c in rec.contexts], "response": rec.response, "reference": rec.reference}
        row.update({column: value(rec) for column, value in extra.items() if column in given})
        for column, metric in RAGAS_METRICS.items():
            value = res["metrics"].get(metric)
            row[column] = None if value is None or math.isnan(value) else value
        yield row
