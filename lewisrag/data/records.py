"""The project's record types and their validating readers (each format is stated on its reader)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from lewisrag.data.io import InputError, get_path, iter_records, optional_str, record_id, require_str, require_str_list

CATEGORIES = ("single_doc", "multi_doc", "not_in_kb", "distractor", "conflict")
QUESTION_KINDS = ("short", "long")  # a QA example's `kind`: a short answer or a long-form one


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str

    def to_dict(self) -> dict:
        return {"id": self.id, "title": self.title, "text": self.text}  # asdict's deep copy is slow for millions


@dataclass(frozen=True)
class QAExample:
    id: str
    question: str
    answers: list[str]
    gold_passage_ids: list[str] = field(default_factory=list)
    category: str | None = None
    reference_statements: list[str] = field(default_factory=list)
    kind: str = "short"  # "short": scored by EM; "long": a few sentences, scored by ROUGE-L/BLEU-1
    group: str | None = None  # examples sharing a group train side by side, in one batch when groups are equal-sized (rag_data.next_batch)

    def to_dict(self) -> dict:
        d = asdict(self)
        for optional in ("category", "group"):
            if d[optional] is None:
                del d[optional]
        return d


def read_passages(path: str | os.PathLike) -> list[Passage]:
    """Read `{"id", "title"?, "text"}` records into a list; ids must be unique and texts non-empty.

    Passages a user gives go through `data.passages.open_passages`, which also opens a `datasets`
    save_to_disk folder, a `.parquet` file or an `hf:` spec as an Arrow-backed `PassageTable`.
    """
    seen: dict[str, int] = {}
    out = []
    for line, rec in iter_records(path):
        pid = record_id(rec, path, line, seen)
        title = optional_str(rec, "title", path, line) or ""  # absent or null: no title, as in Parquet
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
    if keep - set(QUESTION_KINDS):  # else every example is dropped and the error blames the file's answers
        raise InputError("--train-kinds", f"unknown question kind {sorted(keep - set(QUESTION_KINDS))[0]!r}: "
                         f"use {' or '.join(QUESTION_KINDS)}, comma-separated")
    return [ex for ex in examples if ex.kind in keep]


QA_FIELDS = ("id", "question", "answers", "gold_passage_ids", "category", "kind", "reference_statements", "group")


@dataclass(frozen=True)
class QASchema:
    """Where a QA format keeps each of `QA_FIELDS` (a key or dotted path; the same name if unlisted)."""

    name: str
    paths: Mapping[str, str] = field(default_factory=dict)
    answers: str = "list"  # "list" of strings; "trivia_qa": {"value", "aliases"}; "mapped": a list or one string

    def path(self, name: str) -> str:
        return self.paths.get(name, name)


# the formats read_qa tells apart by the first record's fields (see detect_qa_schema)
QA_SCHEMAS = {
    "lewisrag": QASchema("lewisrag"),  # {"id"?, "question", "answers", ...}; web_questions' {"question", "answers", "url"} too
    "nq_open": QASchema("nq_open", {"answers": "answer"}),  # {"question", "answer": [str]}
    "trivia_qa": QASchema("trivia_qa", {"id": "question_id", "answers": "answer"}, answers="trivia_qa"),  # rc.nocontext
}


def check_qa_fields(fields: Mapping[str, str], source: str = "fields") -> None:
    """A field mapping for read_qa: lewisrag names (QA_FIELDS) to record keys or dotted paths."""
    for name, path in fields.items():
        if name not in QA_FIELDS:
            raise InputError(source, f"unknown name '{name}' (one of {', '.join(QA_FIELDS)})")
        if not isinstance(path, str) or not path.strip():
            raise InputError(source, f"'{name}' needs a field name")


def detect_qa_schema(rec: dict, source, line: int, fields: Mapping[str, str] | None = None) -> QASchema:
    """The format of a QA file, told by its first record's fields (or given as `fields`).

    `answers` → lewisrag's own format (web_questions' too); `answer` holding a list → nq_open;
    `answer` holding an object → trivia_qa. Anything else needs a field mapping.

    >>> [detect_qa_schema(r, "f", 1).name for r in ({"question": "q", "answers": []}, {"question": "q", "answer": ["a"]},
    ...                                           {"question": "q", "answer": {"value": "a", "aliases": []}})]
    ['lewisrag', 'nq_open', 'trivia_qa']
    """
    if fields is not None:
        check_qa_fields(fields)
        return QASchema("mapped", dict(fields), answers="mapped")
    answer = rec.get("answer")
    if "answers" in rec:
        return QA_SCHEMAS["lewisrag"]
    if isinstance(answer, dict):
        return QA_SCHEMAS["trivia_qa"]
    if isinstance(answer, list) or hasattr(answer, "tolist"):
        return QA_SCHEMAS["nq_open"]
    held = "" if "answer" not in rec else f" ('answer' is {'null' if answer is None else 'a ' + type(answer).__name__})"
    raise InputError(source, f"cannot tell the QA format from the fields {sorted(rec)}{held}: expected 'answers' (lewisrag, "
                     "web_questions), 'answer' as a list (nq_open) or as an object (trivia_qa); or map the fields "
                     "(--qa-fields question=...,answers=...)", line=line)


def read_qa(path: str | os.PathLike, fields: Mapping[str, str] | None = None) -> list[QAExample]:
    """Read QA examples in lewisrag's format, `{"id"?, "question", "answers", "gold_passage_ids"?,
    "category"?, "kind"?, "reference_statements"?, "group"?}`, or in the Hugging Face hub's formats of
    nq_open, trivia_qa (rc.nocontext) and web_questions, told apart by the first record's fields
    (`detect_qa_schema`); every record must then fit that format. trivia_qa's answers are its
    `answer.value` and then its `answer.aliases`, without repeats.

    `fields` maps lewisrag's names (QA_FIELDS) to the file's own keys or dotted paths, e.g.
    `{"question": "query", "answers": "golds", "id": "qid"}`; a mapped `answers` may be one string.
    A record without an id gets `io.derived_id` of its question.
    """
    seen: dict[str, int] = {}
    out = []
    schema, first = None, 0
    for line, rec in iter_records(path):
        if schema is None:
            schema, first = detect_qa_schema(rec, path, line, fields), line
        try:
            out.append(_qa_example(rec, schema, path, line, seen))
        except InputError as e:
            if schema.name == "lewisrag":
                raise
            told = "as mapped" if schema.name == "mapped" else f"as {schema.name}, told by line {first}"
            raise InputError(e.source, f"{e.message} (read {told})", line=e.line, field=e.field) from None
    if not out:
        raise InputError(path, "no examples")
    return out


def read_questions(path: str | os.PathLike, fields: Mapping[str, str] | None = None) -> list[QAExample]:
    """The questions of a QA file with their ids and gold passage ids, for the commands that only
    search with them (`index tune`, `eval retrieval`): a file of questions without answers (held-out
    queries, a retrieval benchmark's) serves, and one with answers gives the ids and questions
    `read_qa` gives. The answers are not read, so the examples hold none.

    Field names are `fields`' (`--qa-fields`), else those of the format the first record shows
    (`detect_qa_schema`: trivia_qa keeps its ids in `question_id`), else lewisrag's."""
    seen: dict[str, int] = {}
    out, schema = [], None
    for line, rec in iter_records(path):
        if schema is None:
            try:
                schema = detect_qa_schema(rec, path, line, fields)
            except InputError:
                if fields is not None:  # a mapping of unknown names
                    raise
                schema = QA_SCHEMAS["lewisrag"]  # no answers to tell a format by
        names = {name: schema.path(name) for name in ("id", "question", "gold_passage_ids")}
        flat = {key: get_path(rec, key) for key in names.values()}  # errors name the file's fields
        question = require_str(flat, names["question"], path, line)
        qid = record_id(flat, path, line, seen, field=names["id"], derive_from=question)
        gold = require_str_list(flat, names["gold_passage_ids"], path, line, required=False) or []
        out.append(QAExample(qid, question, [], gold))
    if not out:
        raise InputError(path, "no questions")
    return out


def ids_present(passages, ids) -> set[str]:
    """Which of `ids` are ids of `passages`: a PassageTable scans its id column, a list is walked."""
    return passages.ids_present(ids) if hasattr(passages, "ids_present") else set(ids) & {p.id for p in passages}


def check_gold_ids(examples: Sequence[QAExample], passages, path: str | os.PathLike, where: str,
                   fields: Mapping[str, str] | None = None, used: Callable[[QAExample], bool] = lambda ex: True) -> None:
    """Refuse a gold passage id that `passages` (a list of Passages or a PassageTable) do not hold: it
    would count as a miss at every k, so questions written for another corpus (or a mistyped id) are
    bad input, named by file, line and field. `examples` are `read_qa(path, fields)`'s, in its order
    (one per record); only those `used` are checked; `where` names the passages ("the index X")."""
    gold = {g for ex in examples if used(ex) for g in ex.gold_passage_ids}
    present = ids_present(passages, gold)
    if gold <= present:
        return
    lines = (line for line, _ in iter_records(path))
    for line, ex in zip(lines, examples):
        missing = [g for g in ex.gold_passage_ids if g not in present] if used(ex) else []
        if missing:
            raise InputError(path, f"gold passage id {missing[0]!r} is not in {where}", line=line,
                             field=(fields or {}).get("gold_passage_ids", "gold_passage_ids"))


def _qa_example(rec: dict, schema: QASchema, path, line: int, seen: dict[str, int]) -> QAExample:
    flat = {schema.path(name): get_path(rec, schema.path(name)) for name in QA_FIELDS}  # errors name the file's fields
    q_field, a_field = schema.path("question"), schema.path("answers")
    question = require_str(flat, q_field, path, line)
    qid = record_id(flat, path, line, seen, field=schema.path("id"), derive_from=question)
    if schema.answers == "trivia_qa":
        answers = _trivia_answers(flat, a_field, path, line)
    elif schema.answers == "mapped" and isinstance(flat[a_field], str | bytes):  # bytes: a binary Parquet column
        answers = [require_str(flat, a_field, path, line, nonempty=False)]
    else:
        answers = require_str_list(flat, a_field, path, line)
    one = schema.answers == "mapped" and isinstance(flat[a_field], str | bytes)  # a string, not a list: no [i] to name
    for i, answer in enumerate(answers):  # an empty answer would be trained on and matched by every empty output
        if not answer.strip():
            raise InputError(path, "empty answer", line=line, field=a_field if one else f"{a_field}[{i}]")
    category = optional_str(flat, schema.path("category"), path, line)
    if not answers and category != "not_in_kb":
        raise InputError(path, "empty list (only not_in_kb questions may have no answer)", line=line, field=a_field)
    if category is not None and category not in CATEGORIES:
        raise InputError(path, f"unknown category '{category}' (one of {', '.join(CATEGORIES)})", line=line,
                         field=schema.path("category"))
    kind = optional_str(flat, schema.path("kind"), path, line) or "short"
    if kind not in QUESTION_KINDS:
        raise InputError(path, f"unknown kind '{kind}' (short or long)", line=line, field=schema.path("kind"))
    return QAExample(
        id=qid,
        question=question,
        answers=answers,
        gold_passage_ids=require_str_list(flat, schema.path("gold_passage_ids"), path, line, required=False) or [],
        category=category,
        reference_statements=require_str_list(flat, schema.path("reference_statements"), path, line, required=False) or [],
        kind=kind,
        group=optional_str(flat, schema.path("group"), path, line),
    )


def _trivia_answers(flat: dict, a_field: str, path, line: int) -> list[str]:
    """trivia_qa's `answer` object: its value first, then its aliases, each once, empty ones left out."""
    answer = flat[a_field]
    if answer is None:
        raise InputError(path, "missing", line=line, field=a_field)
    if not isinstance(answer, dict):
        raise InputError(path, f"expected an object with value and aliases, got {type(answer).__name__}", line=line, field=a_field)
    parts = {f"{a_field}.value": answer.get("value"), f"{a_field}.aliases": answer.get("aliases")}
    value = require_str(parts, f"{a_field}.value", path, line, nonempty=False)
    aliases = require_str_list(parts, f"{a_field}.aliases", path, line)
    return [a for a in dict.fromkeys([value, *aliases]) if a.strip()]
