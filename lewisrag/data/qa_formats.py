"""The QA formats `records.read_qa` tells apart by a file's first record: lewisrag's own, the hub's
(nq_open, trivia_qa, web_questions, fever, KILT, ms_marco) and DPR's own files (its `.qa.csv` QA
files and its biencoder retriever JSON); where each keeps a question's id, question, answers and gold
passage ids (`QASchema`), and how each format's answers are read (`answers_of`).

Split from `records` so that the record types and their readers stay short: every format a user
may bring lives here, and a new one is a schema in `QA_SCHEMAS`, a test in `detect_qa_schema` and,
where its answers are shaped otherwise, a branch of `answers_of`.
"""

from __future__ import annotations

import ast
import codecs
import csv
import os
import re
import unicodedata
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from lewisrag.data.io import InputError, existing_file, iter_records, optional_str, require_str, require_str_list

QA_FIELDS = ("id", "question", "answers", "gold_passage_ids", "category", "kind", "reference_statements", "group",
             "hard_negative_ids", "answer_match")
ANSWER_MATCHES = ("text", "regex")  # a QA example's `answer_match`: answer strings, or regular expressions (CuratedTrec's)
# DrQA's and DPR's flags for an answer pattern, as scoring.qa.REGEX_FLAGS (which imports no other layer: kept twice)
PATTERN_FLAGS = re.IGNORECASE | re.UNICODE | re.MULTILINE


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
    # rows sharing an id are one example, which errors call so: FEVER v1.0's "claim" (a row per evidence
    # sentence), trivia_qa's "question" (its rc configs repeat a question per evidence source); "": no folding
    fold: str = ""
    gold: str = "list"  # "list": gold (and hard negative) ids at gold_passage_ids (hard_negative_ids); "dpr": positive_ctxs[].passage_id (`dpr_gold_ids`, `dpr_hard_negative_ids`)

    def path(self, name: str) -> str:
        return self.paths.get(name, name)


_HUB = ("id", "question", "answers")  # what lewisrag reads of the hub's FEVER, KILT and MS MARCO files
NO_ANSWER = "No Answer Present."  # MS MARCO's answer to a question its passages do not answer
TRIVIA_NO_ANSWER = "<unk>"  # trivia_qa's answer value, with no aliases, in its test split (which holds no answers)

# the formats read_qa tells apart by the first record's fields (see detect_qa_schema)
QA_SCHEMAS = {
    "lewisrag": QASchema("lewisrag"),  # {"id"?, "question", "answers", ...}; web_questions' {"question", "answers", "url"} too
    "nq_open": QASchema("nq_open", {"answers": "answer"}),  # {"question", "answer": [str]}
    # trivia_qa unfiltered.nocontext (the paper's TriviaQA) and rc.nocontext, which repeat a question once per
    # evidence source (web and wikipedia rows of one question_id): {"question", "question_id", "answer": {"value",
    # "aliases", ...}, "entity_pages", "search_results", ...}
    "trivia_qa": QASchema("trivia_qa", {"id": "question_id", "answers": "answer"}, answers="trivia_qa", fold="question"),
    # fever v1.0 (v2.0 alike): {"id": int, "label", "claim", "evidence_annotation_id", "evidence_id",
    # "evidence_wiki_url", "evidence_sentence_id"}, a row per evidence sentence
    "fever": QASchema("fever", {"question": "claim", "answers": "label"}, answers="label", names=_HUB, fold="claim"),
    # facebook/kilt_tasks: {"id": str, "input", "meta", "output": [{"answer", "meta", "provenance": [...]}]}
    "kilt": QASchema("kilt", {"question": "input", "answers": "output"}, answers="kilt", names=_HUB),
    # microsoft/ms_marco v2.1: {"query", "query_id": int, "query_type", "answers", "wellFormedAnswers", "passages"}
    "ms_marco": QASchema("ms_marco", {"question": "query", "id": "query_id"}, answers="ms_marco", names=_HUB, kind="long"),
    # DPR's retriever training files (biencoder-nq-train.json, ...): {"dataset", "question", "answers",
    # "positive_ctxs": [{"title", "text", "score", "title_score", "passage_id"}], "negative_ctxs", "hard_negative_ctxs"};
    # its TriviaQA files (biencoder-trivia-*.json) name a context's passage `psg_id` (CTX_ID_KEYS)
    "dpr": QASchema("dpr", names=_HUB, gold="dpr"),
}


# lewisrag's fields named by common words, which another dataset may use for a column of its own (the hub
# Jeopardy's `category`, "HISTORY"): a mapping reads them only where it names them. The others
# (gold_passage_ids, reference_statements, ...) are lewisrag's own words, read by their names as before.
MAPPED_ONLY = ("category", "kind", "group")


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
    `wellFormedAnswers` → ms_marco (v2.1). Anything else needs a field mapping, which reads each of
    lewisrag's fields by its own name where it maps none, but `MAPPED_ONLY` (category, kind, group) only
    where it names them.

    >>> [detect_qa_schema(r, "f", 1).name for r in ({"question": "q", "answers": []}, {"question": "q", "answer": ["a"]},
    ...                                           {"question": "q", "answer": {"value": "a", "aliases": []}},
    ...                                           {"question": "q", "answers": ["a"], "positive_ctxs": []})]
    ['lewisrag', 'nq_open', 'trivia_qa', 'dpr']
    >>> [detect_qa_schema(r, "f", 1).name for r in ({"id": 7, "claim": "c", "label": "REFUTES", "evidence_wiki_url": ""},
    ...     {"id": "k", "input": "q", "output": []}, {"query": "q", "query_id": 7, "answers": [], "wellFormedAnswers": []})]
    ['fever', 'kilt', 'ms_marco']
    >>> detect_qa_schema({"question": "q", "golds": ["a"], "category": "HISTORY"}, "f", 1, {"answers": "golds"}).names
    ('id', 'question', 'answers', 'gold_passage_ids', 'reference_statements', 'hard_negative_ids', 'answer_match')
    """
    if fields is not None:
        check_qa_fields(fields)
        # `MAPPED_ONLY` only where the mapping names them: a file's own column of one of their names (the
        # hub's Jeopardy `category`, "HISTORY") is its own, not lewisrag's
        names = tuple(name for name in QA_FIELDS if name not in MAPPED_ONLY or name in fields)
        return QASchema("mapped", dict(fields), answers="mapped", names=names)
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
                     f"(ms_marco){MAP_FIELDS}", line=line)


# the end of detect_qa_schema's error: the advice of the commands with --qa-fields (`fields_unmapped` rewords it)
MAP_FIELDS = "; or map the fields (--qa-fields question=...,answers=...)"
UNMAPPED = "; this command maps no fields (it has no --qa-fields): write the file with lewisrag's 'question' and 'answers'"


@contextmanager
def fields_unmapped() -> Iterator[None]:
    """Around the reading of QA files in a command that has no --qa-fields (`reproduce --preset base`):
    an unknown format's error advises renaming the fields, not a flag the command would refuse as "No
    such option".

    >>> with fields_unmapped():
    ...     detect_qa_schema({"query": "q", "golds": ["a"]}, "f.jsonl", 3)
    Traceback (most recent call last):
    lewisrag.data.io.InputError: f.jsonl:3: cannot tell ...; this command maps no fields (it has no --qa-fields): ...
    """
    try:
        yield
    except InputError as e:
        if not e.message.endswith(MAP_FIELDS):
            raise
        raise InputError(e.source, e.message[: -len(MAP_FIELDS)] + UNMAPPED, e.line, e.field) from None


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


def answers_of(rec: dict, flat: dict, schema: QASchema, path, line: int) -> list[tuple[str, str]]:
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
    """trivia_qa's `answer` object: its value first, then its aliases, each once, empty ones left out.
    The test split's placeholder, value "<unk>" and no aliases, is an error: it would be scored and
    trained on as the answer."""
    answer = flat[a_field]
    if answer is None:
        raise InputError(path, "missing", line=line, field=a_field)
    if not isinstance(answer, dict):
        raise InputError(path, f"expected an object with value and aliases, got {type(answer).__name__}", line=line, field=a_field)
    parts = {f"{a_field}.value": answer.get("value"), f"{a_field}.aliases": answer.get("aliases")}
    value = require_str(parts, f"{a_field}.value", path, line, nonempty=False)
    aliases = require_str_list(parts, f"{a_field}.aliases", path, line)
    if value == TRIVIA_NO_ANSWER and not aliases:
        raise InputError(path, f"{value!r} with no aliases: no answer (trivia_qa's test split holds none: index tune and "
                         "eval retrieval read its questions)", line=line, field=f"{a_field}.value")
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
    """Whether `path` names one of DPR's CuratedTrec files, whose answers are regular expressions (its
    examples read with `answer_match` "regex" unless a record says otherwise).

    >>> [is_curatedtrec(f) for f in ("data/curatedtrec-test.qa.csv", "biencoder-curatedtrec-train.json", "nq-test.qa.csv")]
    [True, True, False]
    """
    name = str(path).lower() if str(path).startswith("hf:") else Path(path).name.lower()
    return name.startswith(("curatedtrec", "biencoder-curatedtrec"))


def check_pattern(pattern: str, path, line: int, where: str) -> None:
    """Refuse an answer pattern that does not compile as scoring will compile it (NFD, `PATTERN_FLAGS`):
    DrQA and DPR score such a pattern 0 in silence.

    >>> check_pattern("(C|c)hurchill", "f", 1, "answers[0]")
    """
    try:
        re.compile(unicodedata.normalize("NFD", pattern), PATTERN_FLAGS)
    except re.error as e:
        raise InputError(path, f"not a regular expression ({e}): {pattern!r}", line=line, field=where) from None


def qa_records(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
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
    makes them); blank lines are skipped, as JSONL's are, and a byte-order mark after the first line's
    start refused, as JSONL's is. A line ends at \\n, \\r\\n or a bare \\r outside a quoted field (old
    Mac files: `_cr_lines`), as the passages TSV's lines do and DPR's universal newlines read them."""

    def lines(f) -> Iterator[str]:
        n = 0
        for chunk in f:  # up to a \n, which a \r\n's \r stays beside
            for raw in _cr_lines(chunk, len(codecs.BOM_UTF8) if n == 0 and chunk.startswith(codecs.BOM_UTF8) else 0):
                n += 1
                if raw.endswith(b"\r"):  # a bare \r ends it: read as \n, so a quote never closed is said to run over it
                    raw = raw[:-1] + b"\n"
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
            # the lines after an unbalanced quote ran into its field: as DPR reads them, one question of several lines
            broken = next((i for i, value in enumerate(row) if "\n" in value), None)
            if broken is not None or reader.line_num > line:
                span = f"over lines {line}-{reader.line_num}" if reader.line_num > line else "to the end of the file"
                raise InputError(p, f"a quoted field runs {span} (an unbalanced \"?); DPR's QA files hold one "
                                 "question a line", line=line, field=("question", "answers", None)[min(broken or 0, 2)])
            if not row:
                continue
            if row[0].startswith("\ufeff"):  # files saved with a mark each, then joined: as the JSONL reader refuses it
                raise InputError(p, "starts with a byte-order mark (U+FEFF), allowed only at the start of the file: "
                                 "remove it", line=line)
            if len(row) != 2:
                raise InputError(p, f"expected 2 tab-separated fields (question, answers: DPR's .qa.csv layout), got "
                                 f"{len(row)}", line=line)
            yield line, {"question": row[0], "answers": _answer_list(row[1], p, line)}


# a field of DPR's QA layout as csv reads it: quoted (a quote inside doubled, line ends kept) to its
# closing quote and on to the tab; a quote never closed, to the line's end; or up to the next tab or line
# end (a quote inside an unquoted field is text)
_QA_FIELD = re.compile(rb'"(?:[^"]|"")*"(?!")[^\t\r\n]*|"[^\r\n]*|[^\t\r\n]*')


def _cr_lines(chunk: bytes, at: int = 0) -> list[bytes]:
    r"""A line of the file up to its \n, cut after each bare \r that ends a line for csv (in an unquoted
    field, which csv would refuse: "new-line character seen in unquoted field"); a \r inside a quoted
    field stays in its value, as it always has, but not one after a quote never closed, which is then
    refused as running over lines, as over \n's. `at`: where its first field starts (past a
    byte-order mark). A quote left open on a line from the one before is not followed: that field is
    refused anyway, from the line it starts on.

    >>> _cr_lines(b"who\t['a']\rwhat\t['b']\r"), _cr_lines(b'"a\rb"\t[\'c\']\r\n')
    ([b"who\t['a']\r", b"what\t['b']\r"], [b'"a\rb"\t[\'c\']\r\n'])
    """
    if b"\r" not in chunk.rstrip(b"\r\n"):  # most lines: none to cut
        return [chunk]
    out, begin = [], 0
    while True:
        at = _QA_FIELD.match(chunk, at).end()
        if chunk[at:at + 1] == b"\t":
            at += 1
        elif chunk[at:at + 1] == b"\r" and chunk[at + 1:at + 2] not in (b"\n", b""):
            at += 1
            out.append(chunk[begin:at])
            begin = at
        else:
            out.append(chunk[begin:])
            return out


def _answer_list(text: str, path: Path, line: int) -> list:
    """DPR's answers field, a Python list literal, as a list (its items checked by the QA readers). An
    escape that makes a surrogate ('\\ud800') is refused, as the JSON readers refuse a lone one: a str
    that UTF-8 cannot encode would fail only when an output is written. (The question is the line's
    own text, decoded as UTF-8, which holds none.)"""
    try:
        with warnings.catch_warnings():  # "\s" in a pattern: Python warns of an invalid escape, on stderr
            warnings.simplefilter("ignore")
            value = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        value = None
    if not isinstance(value, list):
        raise InputError(path, f"expected a Python list literal of strings (DPR's layout: ['Linda Davis']), got "
                         f"{text[:60]!r}", line=line, field="answers")
    for i, item in enumerate(value):
        if isinstance(item, str) and _SURROGATE.search(item):
            raise InputError(path, "a surrogate escape (\\ud800-\\udfff): not a character UTF-8 can write", line=line,
                             field=f"answers[{i}]")
    return value


# what literal_eval makes of '\ud800', and of a pair '\ud83d\ude00' too (unlike json, Python leaves it two halves)
_SURROGATE = re.compile(r"[\ud800-\udfff]")


# the keys a DPR context names its passage by: `passage_id` in the NQ files, `psg_id` in the TriviaQA ones
# (biencoder-trivia-train.json); read by the first alone, the TriviaQA files gave no gold ids, and said nothing
CTX_ID_KEYS = ("passage_id", "psg_id")


def ctx_id_key(ctx: dict) -> str:
    """The key of `CTX_ID_KEYS` a DPR context carries its passage id under (`passage_id` when it has none).

    >>> ctx_id_key({"title": "t", "psg_id": "7"}), ctx_id_key({"passage_id": "7"}), ctx_id_key({"title": "t"})
    ('psg_id', 'passage_id', 'passage_id')
    """
    return next((key for key in CTX_ID_KEYS if ctx.get(key) is not None), CTX_ID_KEYS[0])


def dpr_gold_ids(rec: dict, path, line: int) -> list[str]:
    """The passage ids (`CTX_ID_KEYS`) of a DPR retriever training record's `positive_ctxs` (psgs_w100's
    ids, which wiki_dpr keeps), in order, each once; an empty list when no positive context carries one
    (DPR's older releases): no gold ids then, none guessed from titles or texts. A record where some
    carry one and some do not is an error naming the first without."""
    ctxs = rec.get("positive_ctxs")
    if not isinstance(ctxs, list):
        got = "null" if ctxs is None else type(ctxs).__name__
        raise InputError(path, f"expected a list of contexts, got {got}", line=line, field="positive_ctxs")
    return _ctx_ids(ctxs, "positive_ctxs", "positive", path, line)


def dpr_hard_negative_ids(rec: dict, path, line: int) -> list[str]:
    """The passage ids (`CTX_ID_KEYS`) of a DPR retriever training record's `hard_negative_ctxs` (DPR's BM25
    negatives), in order, each once, under `dpr_gold_ids`' rule: all or none carry one. A record
    without the key (or with null) has none.

    The `negative_ctxs` are not read: they are random passages, which in-batch negatives already give
    `train dpr` (the other questions' positives), and DPR's own training takes none of them
    (`other_negatives: 0`) but where a question has no hard negative (`hard_neg_fallback`).

    >>> dpr_hard_negative_ids({"hard_negative_ctxs": [{"passage_id": "7"}, {"passage_id": 9}, {"passage_id": "7"}]}, "f", 1)
    ['7', '9']
    """
    ctxs = rec.get("hard_negative_ctxs")
    if ctxs is None:
        return []
    if not isinstance(ctxs, list):
        raise InputError(path, f"expected a list of contexts, got {type(ctxs).__name__}", line=line,
                         field="hard_negative_ctxs")
    return _ctx_ids(ctxs, "hard_negative_ctxs", "hard negative", path, line)


def _ctx_ids(ctxs: list, key: str, kind: str, path, line: int) -> list[str]:
    """The passage ids (`ctx_id_key`) of the contexts `ctxs` (the record's `key`), each once; all or none
    must carry one."""
    ids: list[str | None] = []
    for j, ctx in enumerate(ctxs):
        where = f"{key}[{j}]"
        if not isinstance(ctx, dict):
            raise InputError(path, f"expected an object, got {type(ctx).__name__}", line=line, field=where)
        name = ctx_id_key(ctx)
        value = ctx.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, str | int)):
            raise InputError(path, f"expected a string, got {type(value).__name__}", line=line, field=f"{where}.{name}")
        if value is not None and not str(value).strip():
            raise InputError(path, "empty", line=line, field=f"{where}.{name}")
        ids.append(None if value is None else str(value))
    if None in ids and any(i is not None for i in ids):
        j, k = ids.index(None), next(k for k, i in enumerate(ids) if i is not None)
        raise InputError(path, f"missing, where {key}[{k}] has one: a record's {kind} contexts carry "
                         "passage ids all or none", line=line, field=f"{key}[{j}].{ctx_id_key(ctxs[k])}")
    return list(dict.fromkeys(i for i in ids if i is not None))
