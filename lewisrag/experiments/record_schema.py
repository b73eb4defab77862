"""What results.json and the report take from each stage record of `lewisrag reproduce`, as one schema.

`stages.read_stage_record` checks a record's frame (an object, its `seconds`, `out` an object, its
evaluator records); `check_stage_record` checks, field by field, what `stages.merge_stage_outputs` puts
into results.json and what report.md and its plots read from there: every key a stage adds under
"out" (and no other: a damaged record must not add or replace a section; under "qa", which merges by
system, only the systems the stage scores, `STAGE_QA`), and the few summary fields
the report quotes (the swap's notes, the comparison's findings, the Run section's counts). A record read back by `--resume` is
refused here, naming its file and the field, before any stage runs and before results.json or the
report is written; it was damaged after its stage wrote it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lewisrag.data.io import InputError, expect, is_count, is_finite_number
from lewisrag.experiments.stages import DAMAGED


@dataclass(frozen=True)
class Leaf:
    what: str
    test: Callable[[object], bool]


@dataclass(frozen=True)
class Each:
    """An object whose every value is `spec` (systems, K values)."""
    spec: object
    nonempty: bool = False


@dataclass(frozen=True)
class ListOf:
    spec: object
    nonempty: bool = False


# numbers a float holds, counts a float holds exactly: NaN, Infinity and 10**400 read from JSON, then
# became null in results.json or overflowed in the report's plots after results.json was rewritten
NUMBER = Leaf("a finite number", is_finite_number)
NUMBER_OR_NULL = Leaf("a finite number or null", lambda v: v is None or is_finite_number(v))
MAX_COUNT = 2 ** 53
COUNT = Leaf("a whole number from 0 to 2**53", lambda v: is_count(v) and v <= MAX_COUNT)
TEXT = Leaf("a string", lambda v: isinstance(v, str))
OBJECT = Leaf("an object", lambda v: isinstance(v, dict))
OBJECT_OR_NULL = Leaf("an object or null", lambda v: v is None or isinstance(v, dict))
OBJECT_OR_LIST = Leaf("an object or a list", lambda v: isinstance(v, dict | list))

# an object spec is a dict: field -> spec; a field ending in "?" may be absent; other fields are let be
QA_SYSTEM = {"exact_match": NUMBER_OR_NULL, "f1?": NUMBER_OR_NULL, "rougeL?": NUMBER_OR_NULL, "n?": COUNT,
             "long?": {"rougeL": NUMBER_OR_NULL, "bleu1": NUMBER_OR_NULL, "n": COUNT}}
BY_K = Each(NUMBER, nonempty=True)
ABLATIONS = {"ks": ListOf(COUNT, nonempty=True), "trained_k": COUNT, "n?": COUNT,
             "n_docs": {"rag_token": BY_K, "rag_sequence": BY_K},
             "frozen_retriever": {"exact_match": NUMBER, "by_k": BY_K},
             "bm25_retriever": {"exact_match": NUMBER, "by_k": BY_K}}
SWAP_CELLS = {"questions_a": NUMBER, "questions_b": NUMBER}
CLAIM = {"mean?": NUMBER_OR_NULL, "n?": COUNT, "interval?": {"low?": NUMBER_OR_NULL, "high?": NUMBER_OR_NULL,
                                                            "confidence?": NUMBER_OR_NULL}}
LAYER = {**{f"{c}?": NUMBER_OR_NULL for c in ("faithfulness", "context_recall", "answer_completeness",
                                             "citation_recall", "citation_precision")},
         "claims?": Each(CLAIM)}
RECALL = {"recall_at_5": NUMBER, "*": NUMBER}  # "*": every other field
BASE_RETRIEVAL = {"split": TEXT, "skipped?": TEXT, "n?": COUNT, "gold_not_indexed?": COUNT,
                  **{f"recall_at_{k}?": NUMBER for k in (1, 5, 20)},
                  "answer_recall?": Each(NUMBER_OR_NULL), "answerable_questions?": COUNT}
DIFF = {k: NUMBER for k in ("mean_diff", "low", "high")} | {"n": COUNT}
FEVER_CELLS = {"labels_a": NUMBER, "labels_b": NUMBER}
REASONS = Each(TEXT)  # metric -> why it is null (the evaluator records' nan_reasons)
FEVER_SYSTEM = {"acc3?": NUMBER_OR_NULL, "acc2?": NUMBER_OR_NULL, "nan_reasons?": REASONS}
JEOPARDY_SYSTEM = {"q_bleu1?": NUMBER_OR_NULL, "bleu1?": NUMBER_OR_NULL}
SYSTEMS = ("rag_token", "rag_sequence", "closed_book")

# what each key under a record's "out" holds (results.json's section of that name)
OUT = {
    "qa": Each(QA_SYSTEM),
    "test_unscored": COUNT,
    "ablations": ABLATIONS,
    "knowledge_update": Each({"index_a": SWAP_CELLS, "index_b": SWAP_CELLS}, nonempty=True),
    "layers": Each(LAYER),
    "position": OBJECT_OR_LIST,
    "judge": OBJECT_OR_NULL,
    "splitter": OBJECT_OR_NULL,
    "retrieval": BASE_RETRIEVAL,
    "jeopardy": {**{f"{s}?": JEOPARDY_SYSTEM for s in SYSTEMS},
                 "differences": {"rag_token_minus_rag_sequence": DIFF, "rag_sequence_minus_closed_book": DIFF}},
    "fever": {**{f"{s}?": FEVER_SYSTEM for s in SYSTEMS}, "majority_rate": NUMBER,
              # null when no test claim has a gold article (all NOT ENOUGH INFO): `tasks.evidence_overlap`
              "retrieval": {"top1_overlap": NUMBER_OR_NULL, "top10_overlap": NUMBER_OR_NULL, "nan_reasons?": REASONS},
              "swap": {"n": COUNT, **{f"{s}?": {"index_a": FEVER_CELLS, "index_b": FEVER_CELLS}
                                      for s in ("rag_token", "rag_sequence")}}},
}

# stage -> (the "out" keys it must add, those it may add); a stage not named here adds none
STAGE_OUT = {
    "evaluate": (("qa", "test_unscored"), ()),
    "ablations": (("ablations",), ()),
    "knowledge_update": (("knowledge_update",), ()),
    "compare": (("qa", "layers"), ("position", "judge", "splitter")),
    "retrieval": (("retrieval",), ()),  # the base preset's; the small run's has no "out" (`_check_retrieval`)
    "jeopardy_evaluate": (("jeopardy",), ()),
    "fever_evaluate": (("fever",), ()),
}

# stage -> the systems it scores under "out.qa", which `merge_stage_outputs` merges by system: a damaged record
# naming another system replaced that system's row (compare's out.qa.rag_token, Table 1's RAG-Token numbers)
STAGE_QA = {"evaluate": SYSTEMS, "compare": ("stitched",)}

# the summary fields the report quotes from a stage's record (results.json's "stages"): the swap's notes,
# the comparison's findings, and the counts of the base preset's Run section (questions read, passages indexed)
QUESTION_SETS = ("train", "dev", "test", "questions_a", "questions_b")
SUMMARY = {"knowledge_update": {"notes?": ListOf(TEXT)}, "compare": {"findings?": ListOf(TEXT)},
           "data": {f"n_{name}?": COUNT for name in QUESTION_SETS},
           **{f"index_{snap}": {"n_passages?": COUNT} for snap in ("a", "b")}}


def check(value: object, spec: object, path: Path, field: str) -> None:
    """`value` (at `field`, dotted) is what `spec` says, else an InputError naming `path` and the field."""
    if isinstance(spec, Leaf):
        expect(spec.test(value), path, field, spec.what, value, DAMAGED)
    elif isinstance(spec, Each):
        expect(isinstance(value, dict) and (value or not spec.nonempty), path, field,
               "a non-empty object" if spec.nonempty else "an object", value, DAMAGED)
        for key, v in value.items():
            check(v, spec.spec, path, f"{field}.{key}")
    elif isinstance(spec, ListOf):
        expect(isinstance(value, list) and (value or not spec.nonempty), path, field,
               "a non-empty list" if spec.nonempty else "a list", value, DAMAGED)
        for i, v in enumerate(value):
            check(v, spec.spec, path, f"{field}[{i}]")
    else:
        expect(isinstance(value, dict), path, field, "an object", value, DAMAGED)
        rest = spec.get("*")
        for key, sub in spec.items():
            name, optional = key.rstrip("?"), key.endswith("?")
            if key == "*":
                continue
            if name not in value:
                if not optional:
                    raise InputError(path, "missing" + DAMAGED, field=f"{field}.{name}" if field else name)
                continue
            check(value[name], sub, path, f"{field}.{name}" if field else name)
        if rest is not None:
            named = {k.rstrip("?") for k in spec}
            for key, v in value.items():
                if key not in named:
                    check(v, rest, path, f"{field}.{key}" if field else key)


def check_stage_record(path: Path, name: str, record: dict) -> None:
    """The record of stage `name` (at `path`, read back by `--resume`; `stages.read_stage_record` has
    checked its frame) holds what results.json and the report take from it: an InputError naming
    the file and the field otherwise."""
    out = record.get("out", {})
    required, optional = STAGE_OUT.get(name, ((), ()))
    if name == "retrieval" and "out" not in record:  # the small run's: its numbers at the top level
        required = ()
        _check_retrieval(path, record)
    for key in out:
        if key not in required + optional:
            raise InputError(path, f"a section this stage does not write{DAMAGED}", field=f"out.{key}")
    for key in required:
        if key not in out:
            raise InputError(path, "missing" + DAMAGED, field=f"out.{key}")
    for system in out.get("qa", {}):  # an object (`stages.read_stage_record`)
        if system not in STAGE_QA.get(name, ()):
            raise InputError(path, f"a system this stage does not score{DAMAGED}", field=f"out.qa.{system}")
    for key, value in out.items():
        check(value, OUT[key], path, f"out.{key}")
    if "ablations" in out:
        _check_ablations(path, out["ablations"])
    if "layers" in out:
        _check_intervals(path, out["layers"])
    if name in SUMMARY:
        check(record, SUMMARY[name], path, "")


def _check_retrieval(path: Path, record: dict) -> None:
    """The small run's retrieval record: DPR's and BM25's recall@k side by side (the table has a
    column for each recall@k of DPR's, filled from BM25's too)."""
    check(record, {"split": TEXT, "dense": RECALL, "bm25": RECALL}, path, "")
    for key in record["dense"]:
        if key.startswith("recall_at_") and key != "recall_at_k" and key not in record["bm25"]:
            raise InputError(path, f"missing, though dense has it{DAMAGED}", field=f"bm25.{key}")


def _check_ablations(path: Path, ab: dict) -> None:
    """Every K of `ks` in every row (the plot draws each row at each K; the table's sentence reads the trained K's)."""
    rows = {"n_docs.rag_token": ab["n_docs"]["rag_token"], "n_docs.rag_sequence": ab["n_docs"]["rag_sequence"],
            "frozen_retriever.by_k": ab["frozen_retriever"]["by_k"], "bm25_retriever.by_k": ab["bm25_retriever"]["by_k"]}
    for field, row in rows.items():
        for k in ab["ks"]:
            if str(k) not in row:
                raise InputError(path, f"missing, though ks holds {k}{DAMAGED}", field=f"out.ablations.{field}.{k}")


def _check_intervals(path: Path, layers: dict) -> None:
    """Each claim metric's interval has both ends or neither, each a number or each null: the table prints
    "[low, high]" from the two (an interval with a low and no high was a KeyError in `claims.cell`)."""
    for system, layer in layers.items():
        for metric, claim in (layer.get("claims") or {}).items():
            interval = claim.get("interval")
            if not interval:
                continue
            for end, other in (("low", "high"), ("high", "low")):
                field = f"out.layers.{system}.claims.{metric}.interval.{other}"
                if end in interval and other not in interval:
                    raise InputError(path, f"missing, though {end} is there{DAMAGED}", field=field)
                if interval.get(end) is not None and interval.get(other) is None:
                    raise InputError(path, f"null, though {end} is a number{DAMAGED}", field=field)
