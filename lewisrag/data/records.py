"""The project's record types and their validating readers (each format is stated on its reader)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from lewisrag.data.io import (InputError, LewisragWarning, derived_id, existing_file, get_path, iter_records,
                              optional_str, record_id, require_str, require_str_list)
from lewisrag.data.io.readers import refuse_saved_dataset
from lewisrag.data.qa_formats import (ANSWER_MATCHES, DPR_QA_SUFFIXES, QA_FIELDS, QA_SCHEMAS, QASchema, answers_of,
                                      check_pattern, ctx_id_key, detect_qa_schema, dpr_gold_ids, dpr_hard_negative_ids,
                                      is_curatedtrec, qa_records)

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
    hard_negative_ids: list[str] = field(default_factory=list)  # passages given as its hard negatives (DPR's hard_negative_ctxs), for `train dpr`
    # "regex": the answers are regular expressions (CuratedTrec's), scored by scoring.qa.regex_match and
    # never trained on as targets; "text": answer strings
    answer_match: str = "text"

    def to_dict(self) -> dict:
        d = asdict(self)
        for optional in ("category", "group"):
            if d[optional] is None:
                del d[optional]
        for later, default in (("hard_negative_ids", []), ("answer_match", "text")):
            if d[later] == default:  # files written before the field existed stay byte for byte
                del d[later]
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


def read_qa(path: str | os.PathLike, fields: Mapping[str, str] | None = None) -> list[QAExample]:
    """Read QA examples in lewisrag's format, `{"id"?, "question", "answers", "gold_passage_ids"?,
    "category"?, "kind"?, "reference_statements"?, "group"?, "hard_negative_ids"?, "answer_match"?}`
    ("answer_match": "regex" where the answers are regular expressions), or in the Hugging Face hub's formats,
    told apart by the first record's fields (`detect_qa_schema`); every record must then fit that format:

    - nq_open, web_questions; trivia_qa (unfiltered.nocontext, the paper's; rc.nocontext too): answers are
      `answer.value`, then `answer.aliases`. rc's rows repeat a question once per evidence source (web and
      wikipedia rows share its `question_id`): rows of one id that say the same (question, value and
      aliases) are one example, counted in a warning; rows of one id that disagree are an error naming
      the later line and the field. The test split's placeholder answer ("<unk>", no aliases) is an error.
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
      the gold passage ids those of `positive_ctxs[].passage_id` (psgs_w100's, wiki_dpr's ids; `psg_id` in
      DPR's TriviaQA files); a file whose contexts carry neither (older releases) gives none (`dpr_gold_ids`);
      the hard negative ids those of `hard_negative_ctxs[]` alike (`dpr_hard_negative_ids`). The
      contexts' texts and the random `negative_ctxs` are not read.
    - DPR's QA files, `.csv` or `.tsv` (nq-test.qa.csv, ...: `qa_formats._dpr_qa_records`). CuratedTrec's
      (`curatedtrec-*`, `biencoder-curatedtrec-*`) hold regular expressions: their examples read with
      `answer_match` "regex" (scored by `scoring.qa.regex_match`; `refuse_regex_targets` keeps them
      out of training). Every pattern must compile (`qa_formats.check_pattern`), and a
      regex-answered example must be a short-answer one.

    Answers are read without repeats where a format can repeat them (trivia_qa, KILT, MS MARCO).
    `fields` maps lewisrag's names (`qa_formats.QA_FIELDS`) to the file's own keys or dotted paths, e.g.
    `{"question": "query", "answers": "golds", "id": "qid"}`; a mapped `answers` may be one string. A
    mapping reads lewisrag's fields by their own names where it maps none, but category, kind and group
    (`qa_formats.MAPPED_ONLY`, common words) only where it names them: a file's own column of such a name
    (the hub Jeopardy's `category`, "HISTORY") is not read as lewisrag's.
    A mapped field that no record of the file holds is an error (a misspelt name read nothing).
    A record without an id gets `io.derived_id` of its question, once the whole file is read: it
    avoids every id the file gives (`_settle_ids`).
    """
    return [ex for _, ex, _ in _read_qa(path, fields)]


def answer_sources(path: str | os.PathLike, fields: Mapping[str, str] | None = None) -> list[tuple[int, list[str]]]:
    """For each example of `read_qa(path, fields)`, in its order: the line it was read from (a FEVER
    claim's first row) and the field each of its answers came from ('answers[1]', 'label',
    'output[2].answer'), so that a check of the answers names where the file holds a bad one."""
    return [(line, where) for line, _, where in _read_qa(path, fields)]


def refuse_regex_targets(examples: Sequence[QAExample], path: str | os.PathLike,
                         fields: Mapping[str, str] | None = None) -> None:
    """Refuse training on regex-answered examples (CuratedTrec's), naming the first one's line:
    a generator trains on an answer string, and a pattern is none. The RAG paper made one per question
    first (the most frequent match of its patterns among the top retrieved passages, else one spelled
    out of the pattern): `lewisrag index targets` makes that file, which then trains. Dev and test sets
    take the patterns. `examples` are `read_qa(path, fields)`'s, in its order (a first part of them too)."""
    regex = [ex for ex in examples if ex.answer_match == "regex" and ex.answers]
    if regex:
        line = next((line for (line, _), ex in zip(answer_sources(path, fields), examples) if ex is regex[0]), None)
        raise InputError(path, f"{len(regex)} training questions are answered by regular expressions (CuratedTrec's), "
                         "and training targets must be answer strings: make them with `lewisrag index targets` (the RAG "
                         "paper's rule: the patterns' most frequent match among each question's top retrieved passages) "
                         "and train on that file; regex-answered questions serve as --dev or --test",
                         line=line, field="answers")


def _read_qa(path, fields: Mapping[str, str] | None) -> list[tuple[int, QAExample, list[str]]]:
    seen: dict[str, int] = {}
    out, held = [], set()
    regex = is_curatedtrec(path)  # DPR's CuratedTrec files say so by their names alone
    for line, rec, schema, first in _qa_rows(path, lambda rec, line: detect_qa_schema(rec, path, line, fields)):
        _hold(rec, fields, held)
        try:
            ex, where = _qa_example(rec, schema, path, line, seen, regex)
        except InputError as e:
            if schema.name == "lewisrag":
                raise
            told = "as mapped" if schema.name == "mapped" else f"as {schema.name}, told by line {first}"
            raise InputError(e.source, f"{e.message} (read {told})", line=e.line, field=e.field) from None
        out.append((line, ex, where))
    if not out:
        raise InputError(path, "no examples")
    _refuse_unheld(path, fields, held, QA_FIELDS)  # a mapped schema reads them all
    settled = _settle_ids([ex for _, ex, _ in out], seen)
    return [(line, ex, where) for (line, _, where), ex in zip(out, settled)]


def read_questions(path: str | os.PathLike, fields: Mapping[str, str] | None = None) -> list[QAExample]:
    """The questions of a QA file with their ids and gold passage ids, for the commands that only
    search with them (`index tune`, `eval retrieval`): a file of questions without answers (held-out
    queries, a retrieval benchmark's, the test splits of KILT and MS MARCO, FEVER's unlabelled ones)
    serves, and one with answers gives the ids and questions `read_qa` gives. The answers are not
    read, so the examples hold none.

    Field names are `fields`' (`--qa-fields`), else those of the format the first record shows
    (`detect_qa_schema`: trivia_qa keeps its ids in `question_id`, FEVER its questions in `claim`),
    else lewisrag's (a mapped id that no record holds is an error, as in `read_qa`). The hub's FEVER,
    KILT and MS MARCO files hold no gold passage ids; DPR's retriever training JSON holds them in
    `positive_ctxs[].passage_id`."""
    seen: dict[str, int] = {}
    out, held = [], set()
    for line, rec, schema, _ in _qa_rows(path, _question_schema(path, fields)):
        _hold(rec, fields, held)
        names = {name: schema.path(name) for name in ("id", "question", "gold_passage_ids") if name in schema.names}
        flat = {key: get_path(rec, key) for key in names.values()}  # errors name the file's fields
        question = require_str(flat, names["question"], path, line)
        qid = _given_id(flat, names["id"], path, line, seen)
        if schema.gold == "dpr":
            gold = dpr_gold_ids(rec, path, line)
        else:
            gold = require_str_list(flat, names["gold_passage_ids"], path, line, required=False) if "gold_passage_ids" in names else None
        out.append(QAExample(qid, question, [], gold or []))
    if not out:
        raise InputError(path, "no questions")
    # gold ids that no record holds are `eval retrieval`'s own error (naming the file's field), and
    # `index tune` uses none; the answers are not read
    _refuse_unheld(path, fields, held, ("id", "question"))
    return _settle_ids(out, seen)


def _given_id(flat: dict, name: str, path, line: int, seen: dict[str, int]) -> str | None:
    """The record's id at `name`, checked and added to `seen`; None if it gives none (`_settle_ids`
    derives it once the file's given ids are all in `seen`)."""
    return None if flat.get(name) is None else record_id(flat, path, line, seen, field=name)


def _settle_ids(examples: list[QAExample], given: dict[str, int]) -> list[QAExample]:
    """`examples` with an id for each that gives none: `derived_id` of its question, avoiding every id
    the file gives, before or after it, and those derived before it. Derived line by line, a file was
    read or refused by its order: a derived id that a later record gave was refused as that record's
    duplicate, one that an earlier record gave became `-2`. A file without such a clash gets the ids
    it always got."""
    taken = set(given)
    out = []
    for ex in examples:
        if ex.id is None:
            ex = replace(ex, id=derived_id(ex.question, taken))
            taken.add(ex.id)
        out.append(ex)
    return out


def _hold(rec: dict, fields: Mapping[str, str] | None, held: set[str]) -> None:
    """Add to `held` the names of `fields` whose paths hold a value in `rec`."""
    if fields is not None and len(held) < len(fields):
        held.update(name for name, key in fields.items() if get_path(rec, key) is not None)


def _refuse_unheld(path, fields: Mapping[str, str] | None, held: set[str], read: Sequence[str]) -> None:
    """Refuse a field of `fields` (--qa-fields) that the reader reads (`read`) and no record held
    (`held`): a misspelt name was read as absent from every record, giving derived ids, no gold ids,
    no categories, in silence."""
    for name, key in (fields or {}).items():
        if name in read and name not in held:
            raise InputError(path, f"--qa-fields: field {name!r}: {key!r} is in no record (or is null in every one)")


def _question_schema(path, fields: Mapping[str, str] | None) -> Callable[[dict, int], QASchema]:
    """`read_questions`' way to tell a file's schema: `read_qa`'s, else lewisrag's (a file of questions
    without answers has nothing to tell a format by)."""

    def schema_of(rec: dict, line: int) -> QASchema:
        try:
            return detect_qa_schema(rec, path, line, fields)
        except InputError:
            if fields is not None:  # a mapping of unknown names
                raise
            return QA_SCHEMAS["lewisrag"]

    return schema_of


def _qa_rows(path, schema_of: Callable[[dict, int], QASchema]) -> Iterator[tuple[int, dict, QASchema, int]]:
    """`(line, record, schema, first)` for each record of `path` that makes an example, `schema` told by
    `schema_of` from the first record (on line `first`). Of a folding format's rows that share an id
    (FEVER v1.0's, one per evidence sentence; trivia_qa rc's, one per evidence source), the first makes
    the example; each later one must say what it said (question and answers), or it is an error
    naming both lines. trivia_qa's repeats are counted in a warning: its unfiltered configs repeat none."""
    _refuse_unknown_format(path)
    schema, first, firsts, merged = None, 0, {}, 0
    for line, rec in qa_records(path):
        if schema is None:
            schema, first = schema_of(rec, line), line
        if schema.fold and _repeats(rec, schema, path, line, firsts):
            merged += 1
            continue
        yield line, rec, schema, first
    if merged and schema.name == "trivia_qa":  # FEVER's rows repeat by design, one per evidence sentence
        warnings.warn(LewisragWarning(
            f"{path}: rows repeating an earlier row's question_id, question and answers, {merged} in all, are read as "
            "that row's question (trivia_qa's rc configs hold a question once per evidence source, web and wikipedia; "
            "the paper's TriviaQA is unfiltered.nocontext, a row per question)"))


def _refuse_unknown_format(path) -> None:
    """A QA file's name must end in a format the QA readers read: `io.iter_records`' own error would
    leave out DPR's QA files, .csv and .tsv (`qa_records`)."""
    spec = str(path)
    if not spec.startswith("hf:"):
        refuse_saved_dataset(Path(spec))  # told how to pass it, not only that it is a folder
        suffix = existing_file(spec).suffix.lower()  # a missing file is named as missing first
        if suffix not in (".jsonl", ".json", ".parquet", *DPR_QA_SUFFIXES):
            raise InputError(spec, f"unknown format {suffix!r}: use .jsonl, .json, .parquet, .csv or .tsv (DPR's QA "
                             "files) or hf:NAME[:CONFIG]:SPLIT")


def _repeats(rec: dict, schema: QASchema, path, line: int, firsts: dict) -> bool:
    """Whether `rec` repeats the id of an earlier row in `firsts` (id: (line, question, answers)),
    having checked that it agrees with that row; a new id is added to `firsts`. trivia_qa's answers
    are compared by what is read of them, the value and the aliases (the hub's `normalized_*` fields
    are not read)."""
    key = get_path(rec, schema.path("id"))
    if isinstance(key, bool) or not isinstance(key, str | int):  # no usable id: record_id names the problem
        return False
    answers = schema.path("answers")
    names = (schema.path("question"),
             *((f"{answers}.value", f"{answers}.aliases") if schema.answers == "trivia_qa" else (answers,)))
    said = tuple(get_path(rec, name) for name in names)
    if str(key) not in firsts:
        firsts[str(key)] = (line, *said)
        return False
    at, *before = firsts[str(key)]
    for name, was, now in zip(names, before, said):
        if now != was:
            raise InputError(path, f"{now!r}, where line {at} of the same id {key!r} has {was!r}: the rows of one "
                             f"{schema.name} {schema.fold} must agree", line=line, field=name)
    return True


def ids_present(passages, ids) -> set[str]:
    """Which of `ids` are ids of `passages`: a PassageTable scans its id column, a list is walked."""
    return passages.ids_present(ids) if hasattr(passages, "ids_present") else set(ids) & {p.id for p in passages}


# The QA fields whose ids name passages: the noun their errors use, the list of DPR's JSON contexts
# whose `passage_id`s they are read from (`qa_formats.dpr_gold_ids`, `dpr_hard_negative_ids`), and
# whether an error names the list's entry (`hard_negative_ids[1]`: a question's several negatives); a
# gold id's error names the bare field, as it always has.
PASSAGE_ID_FIELDS = {"gold_passage_ids": ("gold passage id", "positive_ctxs", False),
                     "hard_negative_ids": ("hard negative id", "hard_negative_ctxs", True)}


def check_gold_ids(examples: Sequence[QAExample], passages, path: str | os.PathLike, where: str,
                   fields: Mapping[str, str] | None = None, used: Callable[[QAExample], bool] = lambda ex: True) -> None:
    """Refuse a gold passage id that `passages` (a list of Passages or a PassageTable) do not hold: it
    would count as a miss at every k, so questions written for another corpus (or a mistyped id) are
    bad input, named by file, line and field. `examples` are `read_qa(path, fields)`'s, in its order
    (one per record: FEVER's rows, which fold, hold no gold ids); only those `used` are checked; `where`
    names the passages ("the index X")."""
    ids = {g for ex in examples if used(ex) for g in ex.gold_passage_ids}
    error = missing_passage_id(examples, "gold_passage_ids", ids_present(passages, ids), path, where, fields, used)
    if error is not None:
        raise error


def missing_passage_id(examples: Sequence[QAExample], name: str, present: set[str], path: str | os.PathLike, where: str,
                       fields: Mapping[str, str] | None = None,
                       used: Callable[[QAExample], bool] = lambda ex: True) -> InputError | None:
    """The error naming the first id of the `used` examples' `name` list (a key of `PASSAGE_ID_FIELDS`)
    that is not in `present` (the ids `passages` hold, `ids_present`), by file, line and field; None
    when every one is there. One place for the gold ids (`check_gold_ids`) and DPR's given hard
    negatives (`training.negatives`), so a missing id of either is named the same way: in DPR's JSON
    at the context that holds it (`positive_ctxs[0].passage_id`, `hard_negative_ctxs[1].passage_id`),
    elsewhere by the field as `fields` maps it (with its entry where `PASSAGE_ID_FIELDS` says so).
    `examples` are `read_qa(path, fields)`'s, in its order.

    >>> ex = [QAExample("1", "q?", ["a"], ["p1"], hard_negative_ids=["p2"])]  # all there: the file is not read
    >>> missing_passage_id(ex, "hard_negative_ids", {"p1", "p2"}, "qa.jsonl", "--passages p") is None
    True
    """
    noun, contexts, entry = PASSAGE_ID_FIELDS[name]
    if all(pid in present for ex in examples if used(ex) for pid in getattr(ex, name)):
        return None
    # the rows that make examples, folded as read_qa and read_questions fold them (trivia_qa rc's repeats)
    for (line, rec, schema, _), ex in zip(_qa_rows(path, _question_schema(path, fields)), examples):
        missing = [pid for pid in getattr(ex, name) if pid not in present] if used(ex) else []
        if not missing:
            continue
        field = (fields or {}).get(name, name)
        # DPR's JSON, as the file's first record told (a lewisrag record may carry a `positive_ctxs` of its
        # own, whose ids were not read): the context that holds it
        if schema.gold == "dpr":
            field = next((f"{contexts}[{j}].{ctx_id_key(c)}" for j, c in enumerate(rec[contexts])
                          if str(c.get(ctx_id_key(c))) == missing[0]), field)
        elif entry and isinstance(rec.get(field), list) and missing[0] in rec[field]:
            field = f"{field}[{rec[field].index(missing[0])}]"
        return InputError(path, f"{noun} {missing[0]!r} is not in {where}", line=line, field=field)
    return None


def _qa_example(rec: dict, schema: QASchema, path, line: int, seen: dict[str, int],
                regex: bool = False) -> tuple[QAExample, list[str]]:
    """One record's example and the field each of its answers was read from; `regex`: its answers are
    patterns unless the record's `answer_match` says otherwise."""
    flat = {schema.path(name): get_path(rec, schema.path(name)) for name in schema.names}  # errors name the file's fields
    question = require_str(flat, schema.path("question"), path, line)
    qid = _given_id(flat, schema.path("id"), path, line, seen)  # None until `_settle_ids`
    pairs = answers_of(rec, flat, schema, path, line)
    # an empty answer would be trained on and matched by every empty output (one that normalizes to
    # nothing, "€" or "The The", is compared as written: scoring.qa.exact_match)
    for answer, where in pairs:
        if not answer.strip():
            raise InputError(path, "empty answer", line=line, field=where)
    answers = [answer for answer, _ in pairs]

    def optional(read: Callable, name: str):
        """`read` of lewisrag's field `name` where the format holds it, else None: a mapping holds only
        those it names, so the file's own column of that name (the hub Jeopardy's `category`) is not read."""
        return read(flat, schema.path(name), path, line) if name in schema.names else None

    category = optional(optional_str, "category")
    # MS MARCO's "No Answer Present." leaves none: the question is kept, and counted where it is left out
    if not answers and category != "not_in_kb" and schema.answers != "ms_marco":
        raise InputError(path, "empty list (only not_in_kb questions may have no answer)", line=line,
                         field=schema.path("answers"))
    if category is not None and category not in CATEGORIES:
        raise InputError(path, f"unknown category {category!r} (one of {', '.join(CATEGORIES)})", line=line,
                         field=schema.path("category"))
    given = optional(optional_str, "kind")  # "" is no kind: refused below, as an empty category is, not read as short
    kind = schema.kind or ("short" if given is None else given)
    if kind not in QUESTION_KINDS:
        raise InputError(path, f"unknown kind {kind!r} (short or long)", line=line, field=schema.path("kind"))
    match = _answer_match(flat, schema, path, line, regex, kind, pairs)
    if schema.gold == "dpr":
        gold, negatives = dpr_gold_ids(rec, path, line), dpr_hard_negative_ids(rec, path, line)
    else:
        gold = optional(_str_list, "gold_passage_ids") or []
        negatives = optional(_str_list, "hard_negative_ids") or []
    return QAExample(
        id=qid,
        question=question,
        answers=answers,
        gold_passage_ids=gold,
        category=category,
        reference_statements=optional(_statements, "reference_statements") or [],
        kind=kind,
        group=optional(_group, "group"),
        hard_negative_ids=list(dict.fromkeys(negatives)),  # a repeated id would only be drawn more often
        answer_match=match,
    ), [where for _, where in pairs]


def _str_list(rec: dict, field: str, source, line: int) -> list[str] | None:
    """An optional list of strings (`require_str_list`, None where absent)."""
    return require_str_list(rec, field, source, line, required=False)


def _statements(rec: dict, field: str, source, line: int) -> list[str] | None:
    """Optional reference statements (`_str_list`), none of them blank: the evaluator refuses a blank one
    (`eval.records._claims`, a verdict nobody can give), which `compare` met only once every question
    had been answered, naming no line of this file."""
    statements = _str_list(rec, field, source, line)
    for i, statement in enumerate(statements or ()):
        if not statement.strip():
            raise InputError(source, "empty statement", line=line, field=f"{field}[{i}]")
    return statements


def _group(rec: dict, field: str, source, line: int) -> str | None:
    """An optional group, not blank (None where absent): every example of an empty group became one unit
    that trains side by side (`training.rag_data.group_units`), a file's ungrouped examples never shuffled."""
    return None if rec.get(field) is None else require_str(rec, field, source, line)


def _answer_match(flat: dict, schema: QASchema, path, line: int, regex: bool, kind: str,
                  pairs: list[tuple[str, str]]) -> str:
    """A record's `answer_match`: its own field where the format has one, else "regex" for DPR's
    CuratedTrec files (`regex`), else "text"; a regex answer is checked to compile, as scoring will."""
    name = schema.path("answer_match")
    given = optional_str(flat, name, path, line) if "answer_match" in schema.names else None
    if given is not None and given not in ANSWER_MATCHES:
        raise InputError(path, f"unknown answer_match {given!r} (text or regex)", line=line, field=name)
    match = given or ("regex" if regex else "text")
    if match == "regex":
        if kind != "short":  # ROUGE-L and BLEU-1, a long answer's scores, have no meaning against a pattern
            raise InputError(path, "a long-form answer cannot be a regular expression", line=line, field=schema.path("kind"))
        for pattern, where in pairs:
            check_pattern(pattern, path, line, where)
    return match


