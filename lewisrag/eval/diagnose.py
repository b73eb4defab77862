"""Which layer failed: per question, a verdict for each layer and the primary cause.

Five layers, listed (`LAYERS`) as the reference chapter's table lists them (docs/architecture.md):
retrieval, generation not used, generation distorted, generation off-topic, citation. A layer fails when its metric falls below its
threshold and is "n/a" when its metric could not be computed (NaN). Retrieval is judged on every context
the generator was given (`gold_recall`), not at recall@k's cut-offs: a gold passage the answer read at
rank 12 was retrieved. A record given no context at all failed retrieval, whatever its reference.

The primary cause is the first failing layer along the causal chain (`CAUSE_ORDER`):

    retrieval → generation_off_topic → generation_distorted → generation_not_used → citation

and failures after it are marked as consequences, because a broken earlier layer drags later
metrics down (an answer built on missing documents is usually also incomplete). Within generation,
an answer to another question cannot be expected to state the right facts, and an answer that
invents facts has put them in place of the context's: both leave the reference uncovered. So "not
used" is blamed only when the answer is on topic and faithful, yet incomplete. Where the off-topic
layer could not be measured (no on-topic labels, no answer relevancy: `lewisrag eval answers` without
an LLM judge and an embedder), a faithful, incomplete answer may be either: the cause is then
`NOT_USED_OR_OFF_TOPIC`, blaming both layers (`CAUSES`), not "not used" by default. Where the judge
decided none of the answer's statements (timeouts, labels that do not cover them, a failed
decomposition: the metric names in `undecided`), its `generation_distorted` is "n/a" too, yet it
may have invented what it says: an incomplete answer is then `NOT_USED_OR_DISTORTED`, or
`NOT_USED_DISTORTED_OR_OFF_TOPIC` when relevance was not measured either. An "n/a" with nothing to
judge (an answer of no statements, a refusal) blames nothing.

Questions of category `not_in_kb` have no right content: the only right answer is a refusal. They
get no layer verdicts; `refused` says whether the answer refused, and a non-refusal is blamed on
`generation_distorted` (the answer asserts what no document says). They never enter a mean.
An answer with no words (empty, citation markers or punctuation only: `refusals.has_no_words`) asserts
nothing and refuses nothing: its `generation_distorted` and `generation_off_topic` are "n/a" as a
refusal's are, and the blame falls on the answer not given, `generation_not_used`, for a not_in_kb
question too (the refusal it owed is the content it left out).
A refusal of any other question states nothing, so its faithfulness (0 where "not found" was judged a
statement the contexts do not support) measures nothing, and it answers no other question (its
answer relevancy is 0 by construction: every question generated back from a refusal is
noncommittal): its `generation_distorted` and `generation_off_topic` are "n/a" with nothing to judge,
and the blame falls where the chapter's table puts an answer that says "I don't know": on retrieval
when the needed passage never arrived, else on the context not used (it was blamed on
generation_distorted, then, with answer relevancy measured, on generation_off_topic).
Whether an answer refuses is `lewisrag.eval.refusals.is_refusal`.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass

LAYERS = ("retrieval", "generation_not_used", "generation_distorted", "generation_off_topic", "citation")
CAUSE_ORDER = ("retrieval", "generation_off_topic", "generation_distorted", "generation_not_used", "citation")
NOT_USED_OR_OFF_TOPIC = "generation_not_used_or_off_topic"
NOT_USED_OR_DISTORTED = "generation_not_used_or_distorted"
NOT_USED_DISTORTED_OR_OFF_TOPIC = "generation_not_used_distorted_or_off_topic"
# every primary cause -> the layers it blames, in CAUSE_ORDER
CAUSES = {**{layer: (layer,) for layer in CAUSE_ORDER},
          NOT_USED_OR_OFF_TOPIC: ("generation_off_topic", "generation_not_used"),
          NOT_USED_OR_DISTORTED: ("generation_distorted", "generation_not_used"),
          NOT_USED_DISTORTED_OR_OFF_TOPIC: ("generation_off_topic", "generation_distorted", "generation_not_used")}
# the layers before "not used" that, "n/a" because unmeasured, may be what left the reference uncovered
_UNKNOWN_BEFORE_NOT_USED = ("generation_off_topic", "generation_distorted")


@dataclass(frozen=True)
class Thresholds:
    """A layer passes when its metric is at least its threshold. Defaults are strict on purpose:
    for one question, one unsupported fact is already a failure worth seeing; calibrate them to
    the judge's noise (see `lewisrag calibrate`) before gating on them."""

    recall_at_k: float = 1.0  # retrieval, when gold ids are given: every gold passage in the top k
    context_recall: float = 1.0  # retrieval otherwise: every reference statement found in the contexts
    answer_completeness: float = 1.0  # not used: every reference statement covered by the answer
    faithfulness: float = 1.0  # distorted: every answer statement supported by the contexts
    on_topic_rate: float = 0.5  # off-topic: at least half of the statements address the question
    answer_relevancy: float = 0.5  # off-topic, when no on-topic labels exist: mean cosine
    citation: float = 1.0  # citation: citation recall and precision (ALCE) both at least this


def _verdict(value, threshold: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return "pass" if value >= threshold else "fail"


def layer_verdicts(metrics: dict, thresholds: Thresholds = Thresholds(), k: int | None = None,
                   contexts: int | None = None, gold_recall: float | None = None) -> dict[str, str]:
    """"pass" / "fail" / "n/a" per layer from one question's metrics (keys as in results.json).

    Retrieval fails when the generator was given no context (`contexts` 0); else it uses `gold_recall`,
    the share of the gold passages among all the contexts it was given, when the caller matched ids;
    else recall@k when gold ids gave one (at `k`, default the largest k present), else context recall.
    Off-topic uses the on-topic rate when labelled, else answer relevancy.

    >>> layer_verdicts({"context_recall": 1.0, "answer_completeness": 1 / 3, "faithfulness": 1.0})
    {'retrieval': 'pass', 'generation_not_used': 'fail', 'generation_distorted': 'pass', 'generation_off_topic': 'n/a', 'citation': 'n/a'}
    """
    t = thresholds
    at_k = metrics.get("recall_at_k") or {}
    if contexts == 0:  # nothing arrived: no reference is needed to see that
        retrieval = "fail"
    elif gold_recall is not None:  # what the generator read, not the cut-offs of the recall@k rows
        retrieval = _verdict(gold_recall, t.recall_at_k)
    elif at_k:
        retrieval = _verdict(at_k.get(str(k)) if k is not None else at_k[max(at_k, key=int)], t.recall_at_k)
    else:
        retrieval = _verdict(metrics.get("context_recall"), t.context_recall)
    off_topic = _verdict(metrics.get("on_topic_rate"), t.on_topic_rate)
    if off_topic == "n/a":
        off_topic = _verdict(metrics.get("answer_relevancy"), t.answer_relevancy)
    cites = [_verdict(metrics.get(m), t.citation) for m in ("citation_recall", "citation_precision")]
    citation = "fail" if "fail" in cites else "pass" if "pass" in cites else "n/a"
    return {
        "retrieval": retrieval,
        "generation_not_used": _verdict(metrics.get("answer_completeness"), t.answer_completeness),
        "generation_distorted": _verdict(metrics.get("faithfulness"), t.faithfulness),
        "generation_off_topic": off_topic,
        "citation": citation,
    }


def primary_cause(layers: dict[str, str],
                  unknown: Collection[str] = ("generation_off_topic",)) -> tuple[str | None, list[str]]:
    """The first failing layer in CAUSE_ORDER, and the later failing layers (its consequences). A failing
    "not used" after a generation layer that is "n/a" and in `unknown` (unmeasured or undecided, not
    "nothing to judge") blames that layer too: NOT_USED_OR_OFF_TOPIC (an answer to another question
    leaves the reference uncovered too, and nothing measured whether it answered this one),
    NOT_USED_OR_DISTORTED (nothing decided whether it invented what it says), or both:
    NOT_USED_DISTORTED_OR_OFF_TOPIC. By default an "n/a" off-topic layer is unknown.

    >>> primary_cause({"retrieval": "fail", "generation_not_used": "fail", "generation_distorted": "pass",
    ...                "generation_off_topic": "n/a", "citation": "fail"})
    ('retrieval', ['generation_not_used', 'citation'])
    >>> primary_cause({"retrieval": "pass", "generation_not_used": "fail", "generation_distorted": "fail"})
    ('generation_distorted', ['generation_not_used'])
    >>> primary_cause({"retrieval": "pass", "generation_not_used": "fail", "generation_distorted": "pass",
    ...                "generation_off_topic": "n/a", "citation": "fail"})
    ('generation_not_used_or_off_topic', ['citation'])
    >>> primary_cause({"retrieval": "pass", "generation_not_used": "fail", "generation_distorted": "n/a",
    ...                "generation_off_topic": "pass"}, unknown={"generation_distorted"})
    ('generation_not_used_or_distorted', [])
    """
    failing = [layer for layer in CAUSE_ORDER if layers.get(layer) == "fail"]
    if not failing:
        return None, []
    if failing[0] == "generation_not_used":
        blamed = tuple(layer for layer in _UNKNOWN_BEFORE_NOT_USED if layer in unknown and layers.get(layer) == "n/a")
        if blamed:
            cause = {("generation_off_topic",): NOT_USED_OR_OFF_TOPIC, ("generation_distorted",): NOT_USED_OR_DISTORTED,
                     _UNKNOWN_BEFORE_NOT_USED: NOT_USED_DISTORTED_OR_OFF_TOPIC}[blamed]
            return cause, failing[1:]
    return failing[0], failing[1:]


def diagnose(metrics: dict, category: str | None = None, refused: bool = False,
             thresholds: Thresholds = Thresholds(), k: int | None = None, undecided: Collection[str] = (),
             contexts: int | None = None, gold_recall: float | None = None, empty: bool = False) -> dict:
    """One question's diagnosis: `{"layers": {...}, "primary": layer | None, "consequences": [...]}`.

    `undecided` names the metrics that are NaN because the judge decided none of their verdicts (not
    because there was nothing to judge): a layer "n/a" for that reason may have failed. `contexts` and
    `gold_recall` are the retrieval layer's (`layer_verdicts`); `empty`: the answer has no words.

    >>> diagnose({"context_recall": 1.0, "faithfulness": 1.0, "citation_recall": 0.0})["primary"]
    'citation'
    >>> diagnose({}, category="not_in_kb", refused=False)["primary"]
    'generation_distorted'
    >>> diagnose({"context_recall": 1.0, "answer_completeness": 0.0, "faithfulness": 0.0}, refused=True)["layers"]["generation_distorted"]
    'n/a'
    >>> diagnose({"context_recall": 1.0, "answer_completeness": 0.0, "answer_relevancy": 0.0}, refused=True)["primary"]
    'generation_not_used'
    >>> diagnose({"context_recall": 1.0, "answer_completeness": 0.0, "faithfulness": None, "on_topic_rate": 1.0},
    ...          undecided={"faithfulness"})["primary"]
    'generation_not_used_or_distorted'
    >>> diagnose({}, category="not_in_kb", empty=True)["primary"], diagnose({"faithfulness": 1.0}, contexts=0)["primary"]
    ('generation_not_used', 'retrieval')
    """
    if category == "not_in_kb":
        layers = dict.fromkeys(LAYERS, "n/a")
        if not refused:  # asserting what no document says distorts; saying nothing leaves the refusal out
            layers["generation_not_used" if empty else "generation_distorted"] = "fail"
        primary, consequences = primary_cause(layers, unknown=())
        return {"layers": layers, "primary": primary, "consequences": consequences, "expected_refusal": True}
    layers = layer_verdicts(metrics, thresholds, k, contexts, gold_recall)
    if refused or empty:  # it asserts nothing and answers no other question: neither layer has anything to judge
        layers["generation_distorted"] = layers["generation_off_topic"] = "n/a"
        unknown: set[str] = set()
    else:
        unknown = {"generation_off_topic"}  # "n/a": relevance not measured
        if "faithfulness" in undecided:
            unknown.add("generation_distorted")
    primary, consequences = primary_cause(layers, unknown)
    return {"layers": layers, "primary": primary, "consequences": consequences}
