"""The project's record types and their validating readers (each format is stated on its reader)."""

from __future__ import annotations

import ast
import csv
import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lewisrag.data.io import (InputError, existing_file, get_path, iter_records, optional_str, record_id, require_str,
                              require_str_list)

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
    # "list" of strings; "trivia_qa": {"value", "aliases"}; "mapped": a list or one string; "label": one
    # string (FEVER); "kilt": [{"answer", "provenance", ...}]; "ms_marco": wellFormedAnswers, else answers
    answers: str = "list"
    names: tuple[str, ...] = QA_FIELDS  # the QA_FIELDS the format holds; the others stay empty
    kind: str | None = None  # every example's kind where the format fixes it (MS MARCO's answers are written ones)
    fold: bool = False  # rows sharing an id are one example (FEVER v1.0 has a row per evidence sentence)
    gold: str = "list"  # "list": gold ids at gold_passage_ids; "dpr": positive_ctxs[].passage_id (`_dpr_gold_ids`)

    def path(self, name: str) -> str:
        return self.paths.get(name, name)


_HUB = ("id", "question", "answers")  # what lewisrag reads of the hub's FEVER, KILT and MS MARCO files
NO_ANSWER = "No Answer Present."  # MS MARCO's answer to a question its passages do not answer

# the formats read_qa tells apart by the first record's fields (see detect_qa_schema)
QA_SCHEMAS = {
    "lewisrag": QASchema("lewisrag"),  # {"id"?, "question", "answers", ...}; web_questions' {"question", "answers", "url"} too
    "nq_open": QASchema("nq_open", {"answers": "answer"}),  # {"question", "answer": [str]}
    "trivia_qa": QASchema("trivia_qa", {"id": "question_id", "answers": "answer"}, answers="trivia_qa"),  # rc.nocontext
    # fever v1.0 (v2.0 alike): {"id": int, "label", "claim", "evidence_annotation_id", "evidence_id",
    # "evidence_wiki_url", "evidence_sentence_id"}, a row per evidence sentence
    "fever": QASchema("fever", {"question": "claim", "answers": "label"}, answers="label", names=_HUB, fold=True),
    # facebook/kilt_tasks: {"id": str, "input", "meta", "output": [{"answer", "meta", "provenance": [...]}]}
    "kilt": QASchema("kilt", {"question": "input", "answers": "output"}, answers="kilt", names=_HUB),
    # microsoft/ms_marco v2.1: {"query", "query_id": int, "query_type", "answers", "wellFormedAnswers", "passages"}
    "ms_marco": QASchema("ms_marco", {"question": "query", "id": "query_id"}, answers="ms_marco", names=_HUB, kind="long"),
    # DPR's retriever training files (biencoder-nq-train.json, ...): {"dataset", "question", "answers",
    # "positive_ctxs": [{"title", "text", "score", "title_score", "passage_id"}], "negative_ctxs", "hard_negative_ctxs"}
    "dpr": QASchema("dpr", names=_HUB, gold="dpr"),
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

    `question` with `positive_ctxs` → DPR's retriever training JSON (biencoder-nq-train.json), which
    has `answers` too; `answers` → lewisrag's own format (web_questions' too); `answer` holding a list → nq_open;
    `answer` holding an object → trivia_qa. Records without `question`: `claim`, `label` and
    `evidence_wiki_url` → fever (v1.0); `input` and an `output` list → KILT; `query` and
    `wellFormedAnswers` → ms_marco (v2.1). Anything else needs a field mapping.

    >>> [detect_qa_schema(r, "f", 1).name for r in ({"question": "q", "answers": []}, {"question": "q", "answer": ["a"]},
    ...                                           {"question": "q", "answer": {"value": "a", "aliases": []}},
    ...                                           {"question": "q", "answers": ["a"], "positive_ctxs": []})]
    ['lewisrag', 'nq_open', 'trivia_qa', 'dpr']
    >>> [detect_qa_schema(r, "f", 1).name for r in ({"id": 7, "claim": "c", "label": "REFUTES", "evidence_wiki_url": ""},
    ...     {"id": "k", "input": "q", "output": []}, {"query": "q", "query_id": 7, "answers": [], "wellFormedAnswers": []})]
    ['fever', 'kilt', 'ms_marco']
    """
    if fields is not None:
        check_qa_fields(fields)
        return QASchema("mapped", dict(fields), answers="mapped")
    answer = rec.get("answer")
    if "question" not in rec and (hub := _hub_schema(rec)) is not None:  # a file with `question` reads as it always did
        return hub
    if "question" in rec and "positive_ctxs" in rec:  # before `answers`, which DPR's records hold too
        return QA_SCHEMAS["dpr"]
    if "answers" in rec:
        return QA_SCHEMAS["lewisrag"]
    if isinstance(answer, dict):
        return QA_SCHEMAS["trivia_qa"]
    if isinstance(answer, list) or hasattr(answer, "tolist"):
        return QA_SCHEMAS["nq_open"]
    held = "" if "answer" not in rec else f" ('answer' is {'null' if answer is None else 'a ' + type(answer).__name__})"
    raise InputError(source, f"cannot tell the QA format from the fields {sorted(rec)}{held}: expected 'answers' (lewisrag, "
                     "web_questions), 'answer' as a list (nq_open) or as an object (trivia_qa), 'claim' with 'label' and "
                     "'evidence_wiki_url' (fever), 'input' with an 'output' list (KILT) or 'query' with 'wellFormedAnswers' "
                     "(ms_marco); or map the fields (--qa-fields question=...,answers=...)", line=line)


def _hub_schema(rec: dict) -> QASchema | None:
    """FEVER v1.0's, KILT's or MS MARCO v2.1's schema if `rec` has its telling fields, else None."""
    if {"claim", "label", "evidence_wiki_url"} <= rec.keys():
        return QA_SCHEMAS["fever"]
    output = rec.get("output")
    if "input" in rec and isinstance(output, list) and all(isinstance(o, dict) for o in output):
        return QA_SCHEMAS["kilt"]
    if {"query", "wellFormedAnswers"} <= rec.keys():
        return QA_SCHEMAS["ms_marco"]
    return None


def read_qa(path: str | os.PathLike, fields: Mapping[str, str] | None = None) -> list[QAExample]:
    """Read QA examples in lewisrag's format, `{"id"?, "question", "answers", "gold_passage_ids"?,
    "category"?, "kind"?, "reference_statements"?, "group"?}`, or in the Hugging Face hub's formats,
    told apart by the first record's fields (`detect_qa_schema`); every record must then fit that format:

    - nq_open, web_questions; trivia_qa (rc.nocontext): answers are `answer.value`, then `answer.aliases`.
    - fever (v1.0): the claim is the question and its label (SUPPORTS, REFUTES, NOT ENOUGH INFO) the one
      answer; the rows of one claim (one per evidence sentence, sharing its id) are one example, and must
      agree on claim and label. The evidence (Wikipedia page titles and sentence numbers) is not read.
    - KILT (facebook/kilt_tasks): the question is `input`, the answers those of `output`'s entries
      (entries with only provenance have none); a record without any (a test split's) is an error.
    - ms_marco (v2.1): the question is `query`, the id `query_id`, the answers the `wellFormedAnswers`
      where there are any, else the `answers`; kind "long" (written answers). A question whose only
      answer is "No Answer Present." is kept without answers, as a not_in_kb question is: training
      leaves it out and the evaluations leave it unscored, each saying how many. Its `passages` are
      not read (RAG retrieves from its own index).
    - DPR's retriever training JSON (biencoder-nq-train.json, ...): `question` and `answers` as given,
      the gold passage ids those of `positive_ctxs[].passage_id` (psgs_w100's, wiki_dpr's ids); a
      file whose contexts carry no `passage_id` (older releases) gives none (`_dpr_gold_ids`). The
      contexts' texts and the negatives are not read.
    - DPR's QA files, `.csv` or `.tsv` (nq-test.qa.csv, ...: `_dpr_qa_records`). CuratedTrec's
      (`curatedtrec-*`, `biencoder-curatedtrec-*`) hold regular expressions, not answers, and are
      refused (`read_questions` reads their questions).

    Answers are read without repeats where a format can repeat them (trivia_qa, KILT, MS MARCO).
    `fields` maps lewisrag's names (QA_FIELDS) to the file's own keys or dotted paths, e.g.
    `{"question": "query", "answers": "golds", "id": "qid"}`; a mapped `answers` may be one string.
    A record without an id gets `io.derived_id` of its question.
    """
    return [ex for _, ex, _ in _read_qa(path, fields)]


def answer_sources(path: str | os.PathLike, fields: Mapping[str, str] | None = None) -> list[tuple[int, list[str]]]:
    """For each example of `read_qa(path, fields)`, in its order: the line it was read from (a FEVER
    claim's first row) and the field each of its answers came from ('answers[1]', 'label',
    'output[2].answer'), so that a check of the answers names where the file holds a bad one."""
    return [(line, where) for line, _, where in _read_qa(path, fields)]


def _read_qa(path, fields: Mapping[str, str] | None) -> list[tuple[int, QAExample, list[str]]]:
    if is_curatedtrec(path):
        raise InputError(path, "CuratedTrec's DPR files hold regular expressions, not answers: lewisrag has no regex "
                         "matching, and exact match of a pattern as text is not the paper's measure (index tune and "
                         "eval retrieval read its questions)")
    seen: dict[str, int] = {}
    out = []
    for line, rec, schema, first in _qa_rows(path, lambda rec, line: detect_qa_schema(rec, path, line, fields)):
        try:
            ex, where = _qa_example(rec, schema, path, line, seen)
        except InputError as e:
            if schema.name == "lewisrag":
                raise
            told = "as mapped" if schema.name == "mapped" else f"as {schema.name}, told by line {first}"
            raise InputError(e.source, f"{e.message} (read {told})", line=e.line, field=e.field) from None
        out.append((line, ex, where))
    if not out:
        raise InputError(path, "no examples")
    return out


def read_questions(path: str | os.PathLike, fields: Mapping[str, str] | None = None) -> list[QAExample]:
    """The questions of a QA file with their ids and gold passage ids, for the commands that only
    search with them (`index tune`, `eval retrieval`): a file of questions without answers (held-out
    queries, a retrieval benchmark's, the test splits of KILT and MS MARCO, FEVER's unlabelled ones)
    serves, and one with answers gives the ids and questions `read_qa` gives. The answers are not
    read, so the examples hold none.

    Field names are `fields`' (`--qa-fields`), else those of the format the first record shows
    (`detect_qa_schema`: trivia_qa keeps its ids in `question_id`, FEVER its questions in `claim`),
    else lewisrag's. The hub's FEVER, KILT and MS MARCO files hold no gold passage ids; DPR's
    retriever training JSON holds them in `positive_ctxs[].passage_id`."""

    def schema_of(rec: dict, line: int) -> QASchema:
        try:
            return detect_qa_schema(rec, path, line, fields)
        except InputError:
            if fields is not None:  # a mapping of unknown names
                raise
            return QA_SCHEMAS["lewisrag"]  # no answers to tell a format by

    seen: dict[str, int] = {}
    out = []
    for line, rec, schema, _ in _qa_rows(path, schema_of):
        names = {name: schema.path(name) for name in ("id", "question", "gold_passage_ids") if name in schema.names}
        flat = {key: get_path(rec, key) for key in names.values()}  # errors name the file's fields
        question = require_str(flat, names["question"], path, line)
        qid = record_id(flat, path, line, seen, field=names["id"], derive_from=question)
        if schema.gold == "dpr":
            gold = _dpr_gold_ids(rec, path, line)
        else:
            gold = require_str_list(flat, names["gold_passage_ids"], path, line, required=False) if "gold_passage_ids" in names else None
        out.append(QAExample(qid, question, [], gold or []))
    if not out:
        raise InputError(path, "no questions")
    return out


def _qa_rows(path, schema_of: Callable[[dict, int], QASchema]) -> Iterator[tuple[int, dict, QASchema, int]]:
    """`(line, record, schema, first)` for each record of `path` that makes an example, `schema` told by
    `schema_of` from the first record (on line `first`). Of a folding format's rows that share an id
    (FEVER v1.0's, one per evidence sentence), the first makes the example; each later one must say
    what it said (question and answers), or it is an error naming both lines."""
    schema, first, firsts = None, 0, {}
    for line, rec in _records(path):
        if schema is None:
            schema, first = schema_of(rec, line), line
        if schema.fold and _repeats(rec, schema, path, line, firsts):
            continue
        yield line, rec, schema, first


def _repeats(rec: dict, schema: QASchema, path, line: int, firsts: dict) -> bool:
    """Whether `rec` repeats the id of an earlier row in `firsts` (id: (line, question, answers)),
    having checked that it agrees with that row; a new id is added to `firsts`."""
    key = get_path(rec, schema.path("id"))
    if isinstance(key, bool) or not isinstance(key, str | int):  # no usable id: record_id names the problem
        return False
    names = (schema.path("question"), schema.path("answers"))
    said = tuple(get_path(rec, name) for name in names)
    if str(key) not in firsts:
        firsts[str(key)] = (line, *said)
        return False
    at, *before = firsts[str(key)]
    for name, was, now in zip(names, before, said):
        if now != was:
            raise InputError(path, f"{now!r}, where line {at} of the same id {key!r} has {was!r}: the rows of one "
                             f"{schema.name} claim must agree", line=line, field=name)
    return True


def ids_present(passages, ids) -> set[str]:
    """Which of `ids` are ids of `passages`: a PassageTable scans its id column, a list is walked."""
    return passages.ids_present(ids) if hasattr(passages, "ids_present") else set(ids) & {p.id for p in passages}


def check_gold_ids(examples: Sequence[QAExample], passages, path: str | os.PathLike, where: str,
                   fields: Mapping[str, str] | None = None, used: Callable[[QAExample], bool] = lambda ex: True) -> None:
    """Refuse a gold passage id that `passages` (a list of Passages or a PassageTable) do not hold: it
    would count as a miss at every k, so questions written for another corpus (or a mistyped id) are
    bad input, named by file, line and field. `examples` are `read_qa(path, fields)`'s, in its order
    (one per record: FEVER's rows, which fold, hold no gold ids); only those `used` are checked; `where`
    names the passages ("the index X")."""
    gold = {g for ex in examples if used(ex) for g in ex.gold_passage_ids}
    present = ids_present(passages, gold)
    if gold <= present:
        return
    for (line, rec), ex in zip(_records(path), examples):
        missing = [g for g in ex.gold_passage_ids if g not in present] if used(ex) else []
        if missing:
            field = (fields or {}).get("gold_passage_ids", "gold_passage_ids")
            if fields is None and isinstance(rec.get("positive_ctxs"), list):  # DPR's JSON: the context that holds it
                j = next(j for j, c in enumerate(rec["positive_ctxs"]) if str(c.get("passage_id")) == missing[0])
                field = f"positive_ctxs[{j}].passage_id"
            raise InputError(path, f"gold passage id {missing[0]!r} is not in {where}", line=line, field=field)


def _qa_example(rec: dict, schema: QASchema, path, line: int, seen: dict[str, int]) -> tuple[QAExample, list[str]]:
    """One record's example and the field each of its answers was read from."""
    flat = {schema.path(name): get_path(rec, schema.path(name)) for name in schema.names}  # errors name the file's fields
    question = require_str(flat, schema.path("question"), path, line)
    qid = record_id(flat, path, line, seen, field=schema.path("id"), derive_from=question)
    pairs = _answers(rec, flat, schema, path, line)
    for answer, where in pairs:  # an empty answer would be trained on and matched by every empty output
        if not answer.strip():
            raise InputError(path, "empty answer", line=line, field=where)
    answers = [answer for answer, _ in pairs]
    category = optional_str(flat, schema.path("category"), path, line)
    # MS MARCO's "No Answer Present." leaves none: the question is kept, and counted where it is left out
    if not answers and category != "not_in_kb" and schema.answers != "ms_marco":
        raise InputError(path, "empty list (only not_in_kb questions may have no answer)", line=line,
                         field=schema.path("answers"))
    if category is not None and category not in CATEGORIES:
        raise InputError(path, f"unknown category '{category}' (one of {', '.join(CATEGORIES)})", line=line,
                         field=schema.path("category"))
    kind = schema.kind or optional_str(flat, schema.path("kind"), path, line) or "short"
    if kind not in QUESTION_KINDS:
        raise InputError(path, f"unknown kind '{kind}' (short or long)", line=line, field=schema.path("kind"))
    if schema.gold == "dpr":
        gold = _dpr_gold_ids(rec, path, line)
    else:
        gold = require_str_list(flat, schema.path("gold_passage_ids"), path, line, required=False) or []
    return QAExample(
        id=qid,
        question=question,
        answers=answers,
        gold_passage_ids=gold,
        category=category,
        reference_statements=require_str_list(flat, schema.path("reference_statements"), path, line, required=False) or [],
        kind=kind,
        group=optional_str(flat, schema.path("group"), path, line),
    ), [where for _, where in pairs]


def _answers(rec: dict, flat: dict, schema: QASchema, path, line: int) -> list[tuple[str, str]]:
    """`(answer, field it was read from)` for each answer of a record, in the format's order."""
    a_field = schema.path("answers")
    if schema.answers == "trivia_qa":
        return _trivia_answers(flat, a_field, path, line)
    if schema.answers == "kilt":
        return _kilt_answers(flat, a_field, path, line)
    if schema.answers == "ms_marco":
        return _ms_marco_answers(rec, path, line)
    if schema.answers == "label":
        label = require_str(flat, a_field, path, line, nonempty=False)
        if not label.strip():
            raise InputError(path, "empty: no label (fever's unlabelled splits hold none; index tune and eval "
                             "retrieval read their claims)", line=line, field=a_field)
        return [(label, a_field)]
    if schema.answers == "mapped" and isinstance(flat[a_field], str | bytes):  # bytes: a binary Parquet column
        return [(require_str(flat, a_field, path, line, nonempty=False), a_field)]  # one string: no [i] to name
    return [(answer, f"{a_field}[{i}]") for i, answer in enumerate(require_str_list(flat, a_field, path, line))]


def _once(pairs: list[tuple[str, str]], blank: bool = False) -> list[tuple[str, str]]:
    """`pairs` with each answer once (where it was first read); blank ones left out unless `blank`."""
    out: dict[str, str] = {}
    for answer, where in pairs:
        if blank or answer.strip():
            out.setdefault(answer, where)
    return list(out.items())


def _trivia_answers(flat: dict, a_field: str, path, line: int) -> list[tuple[str, str]]:
    """trivia_qa's `answer` object: its value first, then its aliases, each once, empty ones left out."""
    answer = flat[a_field]
    if answer is None:
        raise InputError(path, "missing", line=line, field=a_field)
    if not isinstance(answer, dict):
        raise InputError(path, f"expected an object with value and aliases, got {type(answer).__name__}", line=line, field=a_field)
    parts = {f"{a_field}.value": answer.get("value"), f"{a_field}.aliases": answer.get("aliases")}
    value = require_str(parts, f"{a_field}.value", path, line, nonempty=False)
    aliases = require_str_list(parts, f"{a_field}.aliases", path, line)
    return _once([(value, f"{a_field}.value"), *((a, f"{a_field}.aliases[{i}]") for i, a in enumerate(aliases))])


def _kilt_answers(flat: dict, a_field: str, path, line: int) -> list[tuple[str, str]]:
    """KILT's `output`: the answers of its entries, each once; an entry with only provenance has none."""
    output = flat[a_field]
    if output is None:
        raise InputError(path, "missing", line=line, field=a_field)
    if not isinstance(output, list):
        raise InputError(path, f"expected a list of objects, got {type(output).__name__}", line=line, field=a_field)
    pairs = []
    for j, entry in enumerate(output):
        if not isinstance(entry, dict):
            raise InputError(path, f"expected an object, got {type(entry).__name__}", line=line, field=f"{a_field}[{j}]")
        where = f"{a_field}[{j}].answer"
        answer = optional_str({where: entry.get("answer")}, where, path, line)  # the hub writes "" where there is none
        pairs += [] if answer is None else [(answer, where)]
    pairs = _once(pairs)
    if not pairs:
        held = "an empty list" if not output else "entries with provenance only"
        raise InputError(path, f"no answer ({held}; a KILT test split holds none: index tune and eval retrieval "
                         "read its questions)", line=line, field=a_field)
    return pairs


def _ms_marco_answers(rec: dict, path, line: int) -> list[tuple[str, str]]:
    """MS MARCO's well-formed answers where it has any, else its answers, each once; its "No Answer
    Present." is no answer. Both lists empty (its test split) is an error."""
    well = require_str_list(rec, "wellFormedAnswers", path, line)
    given = require_str_list(rec, "answers", path, line)
    if not well and not given:
        raise InputError(path, "empty list, not even 'No Answer Present.' (MS MARCO's test split holds no answers: "
                         "index tune and eval retrieval read its questions)", line=line, field="answers")
    name, values = ("wellFormedAnswers", well) if well else ("answers", given)
    return _once([(a, f"{name}[{i}]") for i, a in enumerate(values) if a != NO_ANSWER], blank=True)  # a blank one stays, to be refused


# --- DPR's own files ---------------------------------------------------------------------------

DPR_QA_SUFFIXES = (".csv", ".tsv")  # a QA file so named is in DPR's layout (nq-test.qa.csv); passages' .tsv is psgs_w100's


def is_curatedtrec(path: str | os.PathLike) -> bool:
    """Whether `path` names one of DPR's CuratedTrec files, whose answers are regular expressions.

    >>> [is_curatedtrec(f) for f in ("data/curatedtrec-test.qa.csv", "biencoder-curatedtrec-train.json", "nq-test.qa.csv")]
    [True, True, False]
    """
    name = str(path).lower() if str(path).startswith("hf:") else Path(path).name.lower()
    return name.startswith(("curatedtrec", "biencoder-curatedtrec"))


def _records(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """`(line, record)` of a QA file: DPR's layout for `.csv` and `.tsv`, `io.iter_records` otherwise."""
    spec = str(path)
    if not spec.startswith("hf:") and Path(spec).suffix.lower() in DPR_QA_SUFFIXES:
        return _dpr_qa_records(existing_file(spec))
    return iter_records(path)


def _dpr_qa_records(p: Path) -> Iterator[tuple[int, dict]]:
    """DPR's QA files (nq-test.qa.csv, trivia-test.qa.csv, webquestions-test.qa.csv, ...): no header,
    each line `question<TAB>answers`, the answers a Python list literal (`['Linda Davis']`). Read as
    DPR reads them, `csv.reader(delimiter="\\t")` (a field may be quoted, `""` inside), the list by
    `ast.literal_eval` (DPR calls eval: no code of a file runs here). Each row is
    `{"question", "answers"}` on the line it starts on, lewisrag's format without ids (`io.derived_id`
    makes them); blank lines are skipped, as JSONL's are."""

    def lines(f) -> Iterator[str]:
        for n, raw in enumerate(f, start=1):
            try:
                yield raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise InputError(p, f"not valid UTF-8 (byte {e.start})", line=n) from None

    with open(p, "rb") as f:
        reader, start = csv.reader(lines(f), delimiter="\t"), 1
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as e:
                raise InputError(p, f"cannot read as DPR's QA layout: {e}", line=start) from None
            line, start = start, reader.line_num + 1
            if not row:
                continue
            if len(row) != 2:
                raise InputError(p, f"expected 2 tab-separated fields (question, answers: DPR's .qa.csv layout), got "
                                 f"{len(row)}", line=line)
            yield line, {"question": row[0], "answers": _answer_list(row[1], p, line)}


def _answer_list(text: str, path: Path, line: int) -> list:
    """DPR's answers field, a Python list literal, as a list (its items checked by the QA readers)."""
    try:
        with warnings.catch_warnings():  # "\s" in a pattern: Python warns of an invalid escape, on stderr
            warnings.simplefilter("ignore")
            value = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        value = None
    if not isinstance(value, list):
        raise InputError(path, f"expected a Python list literal of strings (DPR's layout: ['Linda Davis']), got "
                         f"{text[:60]!r}", line=line, field="answers")
    return value


def _dpr_gold_ids(rec: dict, path, line: int) -> list[str]:
    """The `passage_id`s of a DPR retriever training record's `positive_ctxs` (psgs_w100's ids, which
    wiki_dpr keeps), in order, each once. None when no positive context carries one (DPR's older
    releases): no gold ids then, none guessed from titles or texts. A record where some carry one and
    some do not is an error naming the first without."""
    ctxs = rec.get("positive_ctxs")
    if not isinstance(ctxs, list):
        got = "null" if ctxs is None else type(ctxs).__name__
        raise InputError(path, f"expected a list of contexts, got {got}", line=line, field="positive_ctxs")
    ids: list[str | None] = []
    for j, ctx in enumerate(ctxs):
        where = f"positive_ctxs[{j}]"
        if not isinstance(ctx, dict):
            raise InputError(path, f"expected an object, got {type(ctx).__name__}", line=line, field=where)
        value = ctx.get("passage_id")
        if value is not None and (isinstance(value, bool) or not isinstance(value, str | int)):
            raise InputError(path, f"expected a string, got {type(value).__name__}", line=line, field=f"{where}.passage_id")
        if value is not None and not str(value).strip():
            raise InputError(path, "empty", line=line, field=f"{where}.passage_id")
        ids.append(None if value is None else str(value))
    if None in ids and any(i is not None for i in ids):
        j, k = ids.index(None), next(k for k, i in enumerate(ids) if i is not None)
        raise InputError(path, f"missing, where positive_ctxs[{k}] has one: a record's positive contexts carry "
                         "passage ids all or none", line=line, field=f"positive_ctxs[{j}].passage_id")
    return list(dict.fromkeys(i for i in ids if i is not None))
