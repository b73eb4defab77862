"""Evaluate answer records layer by layer into `Results` (`lewisrag.eval.results`; `.to_json()` is results.json).

Judge calls are batched: for a chunk of records, every first-level pair (answer statements and
reference statements against the joined contexts, reference statements against the answer, each
cited statement against its cited documents) goes to the judge in one `judge()` call, so an LLM
judge spends one request per answer on faithfulness and can run requests concurrently. Only
ALCE's precision follow-ups for multi-citation statements are asked afterwards. RAGChecker's
claim-level diagnostics (`lewisrag.eval.claims`, on by default) add their checks to the same batch:
each response claim against the reference, each reference claim against the answer, and every claim
against each context on its own. Claims are the record's `response_claims` / `reference_claims`
when given, else the run's statements of the answer and the reference statements the other metrics
use, or, with `EvalConfig.claim_extractor = "llm"`, the LLM judge's RAGChecker-style claims of the
answer and of the reference text (`reference_statements`, when given, stay the reference claims).
A failed extraction leaves the metrics that need those claims null with the reason. They are scored
as `claims.<metric>`; without a reference (no `reference`, reference statements or claims) only
`claims.faithfulness` is computed, the rest are null with a reason.

Each verdict's three-way label (`Verdict.label`; null where the judge gives none) is written beside
it: `statements[].label`, `reference_statements[].in_contexts_label` / `in_answer_label`, and per
claim check under `claims.checks`; `claims.contradictions` counts contradicted claims when any
check has a label (`lewisrag.eval.claims.contradictions`).

`not_in_kb` records are judged on refusal alone: their metrics are null with a reason, and they
enter no mean. A refusal of any other question asserts nothing: its faithfulness, and the claim
diagnostics read over the answer's claims (`RESPONSE_CLAIM_METRICS`), are null whether its statements
were judged unsupported (0, now null with `REFUSAL_REASON`) or none were made (NaN with its own
reason), so neither enters a mean; `refused` records the refusal, and completeness (and
claims.recall) the miss. A sentence that asserts nothing (`refusals.asserts_nothing`: it only declines,
"The documents do not mention the lockout time.", or is a pleasantry, "Hope this helps!") need not cite and
is no statement: faithfulness and the claims made of the answer leave it out, in any answer.
Everything NaN is written as null with its reason under "nan_reasons".
Records of several systems are aggregated per system as well as pooled (`aggregate`'s "by_system").
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lewisrag.chat_client import map_in_threads
from lewisrag.data.io import InputError
from lewisrag.eval import citations, claims, metrics, stats
from lewisrag.eval.bughunt import answer_records, human_labels, rule_checker_rows, rule_checker_table
from lewisrag.eval.diagnose import Thresholds, diagnose
from lewisrag.eval.refusals import asserts_nothing, has_no_words, is_refusal
from lewisrag.eval.judges import LabelJudge, Verdict
from lewisrag.eval.judges.llm import JudgeError
from lewisrag.eval.records import AnswerRecord, parse_answer
from lewisrag.eval.results import CLAIM_METRICS, CLAIMS_PREFIX, CONTRADICTIONS, Producer, QuestionRecord, Results
from lewisrag.eval.statements import (ATOMIC_SPLITTER_NAME, SPLITTER_NAME, SPLITTER_VERSION, Statement, blank_headings,
                                      split_sentences, strip_citations)
from lewisrag.scoring import qa
from lewisrag.scoring.markers import blank_footnote_definitions
from lewisrag.scoring.retrieval import recall_at_k

METRICS = ("faithfulness", "context_recall", "answer_completeness", "answer_relevancy", "on_topic_rate",
           "citation_recall", "citation_precision", "exact_match", "f1", "rougeL")
NOT_IN_KB_REASON = "not_in_kb: judged on refusal only, never averaged"
NO_REFERENCE_REASON = "no reference answer, reference statements or reference claims"
# why a refusal of an answerable question has no faithfulness: "not found" judged unsupported scored 0, and an
# answer decomposed into no statement NaN; the chapter lets neither into a mean (`refused` says it refused)
REFUSAL_REASON = "refusal: asserts nothing, never averaged"
# the claim diagnostics whose denominator is the answer's claims (claims.py), null for a refusal as faithfulness is
RESPONSE_CLAIM_METRICS = ("precision", "f1", "noise_sensitivity_in_relevant", "noise_sensitivity_in_irrelevant",
                          "hallucination", "self_knowledge", "faithfulness")
UNDECIDED = "judge undecided on all "  # how the reason of a metric whose every verdict is undecided begins
# why an answer whose every sentence asserts nothing (`asserts_nothing`, excused from citing: it only declines or
# is a pleasantry) has no citation quality
DECLINES_ONLY_REASON = "every sentence of the answer only declines: none is asked to cite"
CLAIM_CONFIDENCE = 0.95  # level of the bootstrap interval of each claim diagnostic's mean
CLAIM_RESAMPLES = 10_000  # bootstrap resamples (seed 0: the same run gives the same interval)
NO_SYSTEM = "(no system)"  # the aggregates' name for the records that give no system (`aggregate`'s by_system)
EMBEDDER_MAX_LENGTH = 256  # tokens of a question the answer-relevancy embedder reads (`metrics.load_embedder`)
# what `metrics.load_embedder` reads of an embedder folder besides its *.safetensors: what its fingerprint covers
EMBEDDER_FILES = frozenset({"config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                            "added_tokens.json", "vocab.txt", "vocab.json", "merges.txt", "spiece.model",
                            "sentencepiece.bpe.model", "model.safetensors.index.json"})


@dataclass(frozen=True)
class EvalConfig:
    splitter: str = "sentences"  # "sentences" (deterministic) or "atomic" (the judge's decompose, one call per answer)
    ks: tuple[int, ...] = (1, 5, 10)  # recall@k cut-offs, when gold_passage_ids are given
    thresholds: Thresholds = field(default_factory=Thresholds)  # per-layer pass marks for the diagnosis
    relevancy_questions: int = 3  # questions generated back per answer (needs an embedder and an LLM judge)
    chunk: int = 64  # records whose first-level pairs go to the judge in one call
    claims: bool = True  # RAGChecker's claim-level diagnostics (claims.<metric>): one check per claim and context more
    claim_extractor: str = "splitter"  # claims of records without them: "splitter" (the statements) or "llm" (extract_claims)


class _Memo:
    """A judge front that answers repeated pairs from memory and forwards the rest in one batch;
    everything else (name, generate_questions, ...) is the judge's own, so that a metric asking
    `hasattr(judge, ...)` sees the judge (answer relevancy was never scored behind this front).

    Shared by worker threads without a lock: at worst two threads ask the same pair twice."""

    def __init__(self, judge):
        self.inner, self.seen = judge, {}

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def judge(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        todo = list(dict.fromkeys(p for p in pairs if p not in self.seen))
        if todo:
            verdicts = self.inner.judge(todo)
            if len(verdicts) != len(todo):
                raise ValueError(f"judge returned {len(verdicts)} verdicts for {len(todo)} pairs")
            self.seen.update(zip(todo, verdicts))
        return [self.seen[p] for p in pairs]


@dataclass
class _Claims:
    """What `claims.claim_diagnostics` reads for one answer, and where the claims came from."""

    response_claims: list[str]
    reference_claims: list[str]
    response: str  # `answer_text`: no [n] markers, no footnote definitions (the premise of "covered")
    reference: str | None  # the premise of "correct": the reference answer, else its claims joined; None: no reference
    contexts: list[str]
    source: dict  # {"response": ..., "reference": ...}: the record's field or the splitter that made the claims
    failed: dict = field(default_factory=dict)  # {"response" | "reference": why those claims could not be made}


@dataclass
class _Prepared:
    rec: AnswerRecord
    statements: list[Statement]  # the answer's statements (faithfulness), without those that assert nothing
    sentences: list[Statement]  # the answer's sentences with their citations (citation quality)
    references: list[str]  # reference statements (context recall, completeness)
    refused: bool
    nan_reasons: dict[str, str]
    claims: _Claims | None = None  # None: diagnostics switched off, or a not_in_kb question
    left_out: int = 0  # statements made and left out because they assert nothing (`refusals.asserts_nothing`)


DECOMPOSE_FAILED = "decompose failed: "  # the reason of an answer the atomic splitter could not decompose
CLAIM_EXTRACTION_FAILED = "claim extraction failed: "  # the reason of a text the LLM judge made no claims of
CITATIONS_UNDECIDED = "judge undecided on every "  # citation quality with no verdict given: "... citation"
QUESTIONS_FAILED = "question generation failed: "  # answer relevancy without the questions it is computed from


def answer_text(response: str) -> str:
    """What an answer says: without its [n] markers, its footnote definition lines ("[^1]: REQ-AUTH-03 ..."),
    which name sources as the markers point at them, and its Markdown heading lines ("## Answer"), which
    title it. The text exact match, F1, ROUGE-L, completeness, the atomic splitter and claim extraction read
    (the sentence splitter drops those lines too).

    >>> answer_text("## Answer\\nIt returns 422[^1].\\n\\n[^1]: REQ-AUTH-03 login requirements")
    'It returns 422.'
    """
    return strip_citations(blank_headings(blank_footnote_definitions(response)))


def _asserting(statements: list[Statement], question: str) -> list[Statement]:
    """The statements that assert something: one that only declines or is a pleasantry (`asserts_nothing`)
    is no fact for a context to support, so judging it scored a partial refusal ("Login returns 422 [1].
    The documents do not mention the lockout time.") or a "Hope this helps!" half unfaithful."""
    return [s for s in statements if not asserts_nothing(s.text, question)]


def _prepare(rec: AnswerRecord, judge, cfg: EvalConfig) -> _Prepared:
    reasons: dict[str, str] = {}
    sentences = split_sentences(rec.response)
    statements = sentences
    refused = is_refusal(rec.response, rec.question)
    if cfg.splitter == "atomic" and rec.category != "not_in_kb":
        try:  # one decomposition call for the whole answer, citations removed
            statements = [Statement(s, (), ()) for s in judge.decompose(answer_text(rec.response))]
        except JudgeError as e:  # a failed request is a reason, not a crash
            statements, reasons["faithfulness"] = [], f"{DECOMPOSE_FAILED}{e}"
        said = _asserting(sentences, rec.question)
        if not statements and said and not refused and not reasons:
            # an answer that says something decomposed into nothing: a failure of the decomposer, counted
            # as one undecided statement like a failed request, not "no statements in the answer"
            reasons["faithfulness"] = f"{DECOMPOSE_FAILED}the judge returned no statements for {len(said)} sentences"
    judged = _asserting(statements, rec.question)
    refs = list(rec.reference_statements) or ([s.text for s in split_sentences(rec.reference)] if rec.reference else [])
    p = _Prepared(rec, judged, sentences, refs, refused, reasons, left_out=len(statements) - len(judged))
    if cfg.claims and rec.category != "not_in_kb":
        p.claims = _claim_inputs(p, cfg, judge)
    return p


def _claim_inputs(p: _Prepared, cfg: EvalConfig, judge) -> _Claims:
    """The record's claims where it gives them, else the answer's statements and the reference
    statements, or the LLM judge's extracted claims (`cfg.claim_extractor == "llm"`)."""
    rec, failed = p.rec, {}
    llm = cfg.claim_extractor == "llm"

    def extract(side: str, text: str, sentences: list[Statement]) -> list[str]:
        try:  # one extraction call per text, cached like every judge call
            out = judge.extract_claims(text, rec.question or "")
        except JudgeError as e:  # a failed request is a reason, not a crash, and never silently no claims
            failed[side] = f"{CLAIM_EXTRACTION_FAILED}{e}"
            return []
        said = _asserting(sentences, rec.question)
        if not out and said and not (side == "response" and p.refused):
            # a text that says something extracted into no claim: the extractor failed, as an empty decomposition
            # does (DECOMPOSE_FAILED). Taken at its word, context precision read every passage irrelevant (0.0)
            # and the answer's diagnostics "no response claims"; a refusal or a reference that asserts nothing
            # keeps its empty list
            failed[side] = f"{CLAIM_EXTRACTION_FAILED}the judge returned no statements for {len(said)} sentences"
        return out

    if rec.response_claims is not None:
        response_claims, response_source = list(rec.response_claims), "response_claims"
    elif llm:  # left out as the statements are: a claim that only declines or is a pleasantry asserts nothing
        response_claims = [c for c in extract("response", answer_text(rec.response), p.sentences)
                           if not asserts_nothing(c, rec.question or "")]
        response_source = "llm"
    else:
        response_claims, response_source = [s.text for s in p.statements], cfg.splitter
        if "faithfulness" in p.nan_reasons:  # the atomic splitter's error
            failed["response"] = p.nan_reasons["faithfulness"]
    if rec.reference_claims is not None:
        reference_claims, ref_source = list(rec.reference_claims), "reference_claims"
    elif rec.reference_statements:
        reference_claims, ref_source = p.references, "reference_statements"
    elif llm and rec.reference:
        reference_claims, ref_source = extract("reference", rec.reference, split_sentences(rec.reference)), "llm"
    else:
        reference_claims = p.references
        ref_source = SPLITTER_NAME if rec.reference else None  # reference statements are always sentence-split
    reference = rec.reference or ("\n".join(reference_claims) if reference_claims else None)
    return _Claims(response_claims, reference_claims, answer_text(rec.response), reference,
                   [c.text for c in rec.contexts], {"response": response_source, "reference": ref_source}, failed)


def _claim_pairs(c: _Claims) -> list[tuple[str, str]]:
    """The pairs `_claim_scores` will ask, for the chunk's one batch."""
    return claims.claim_pairs(c.response_claims, c.reference_claims, c.response, c.reference, c.contexts)


def _claim_scores(c: _Claims, judge) -> tuple[dict, dict, dict]:
    """({claims.<metric>: score}, {claims.<metric>: why NaN}, the `claims` detail of results.json) of one answer.

    Without a reference nothing can be called right or wrong, so only faithfulness (claims in a
    context) is computed. Claims that could not be made (`c.failed`: a failed decomposition or
    extraction) explain the metrics left without them."""
    verdicts = claims.claim_verdicts(c.response_claims, c.reference_claims, c.response, c.reference, c.contexts, judge)
    labels = claims.labels_from_verdicts(verdicts, c.response_claims, c.reference_claims, c.response, c.reference, c.contexts)
    d = claims.diagnostics_from_labels(labels)
    if c.reference is None:
        d["undecided"] = sum(v is None for row in labels.response_in_chunks for v in row)  # not the correctness nobody asked
        for m in claims.METRICS:
            if m != "faithfulness":
                d[m], d["undefined"][m] = math.nan, NO_REFERENCE_REASON
    reasons = dict(d["undefined"])
    if c.failed.get("response") and not c.response_claims:
        reasons = {m: c.failed["response"] if why == "no response claims" else why for m, why in reasons.items()}
    if c.failed.get("reference") and c.reference is not None:
        for m in claims.REFERENCE_CLAIM_METRICS:  # not computed from an empty list: unknown
            d[m], reasons[m] = math.nan, c.failed["reference"]
    checks = claims.claim_checks(verdicts, c.response_claims, c.reference_claims, c.response, c.reference, c.contexts)
    detail = {"response": c.response_claims, "reference": c.reference_claims, "source": c.source,
              "undecided": d["undecided"], "checks": checks}
    if c.failed:
        detail["failed"] = dict(c.failed)
    contradicted = claims.contradictions(checks)
    if contradicted is not None:
        detail["contradictions"] = contradicted
    return ({CLAIMS_PREFIX + m: d[m] for m in claims.METRICS}, {CLAIMS_PREFIX + m: why for m, why in reasons.items()},
            detail)


def _first_pairs(p: _Prepared) -> list[tuple[str, str]]:
    if p.rec.category == "not_in_kb":
        return []
    premise, docs = metrics.join_contexts([c.text for c in p.rec.contexts]), p.rec.docs
    pairs = [(premise, s.text) for s in p.statements] + [(premise, r) for r in p.references] + [(answer_text(p.rec.response), r) for r in p.references]
    pairs += [("\n".join(docs[c] for c in s.citations), s.text) for s in p.sentences if s.citations and all(c in docs for c in s.citations)]
    return pairs + (_claim_pairs(p.claims) if p.claims else [])


def _scored(name: str, support: metrics.Support, what: str, m: dict, reasons: dict) -> None:
    m[name] = support.score
    if not support.verdicts:
        reasons.setdefault(name, f"no {what}")
    elif math.isnan(support.score):
        reasons[name] = f"{UNDECIDED}{len(support.verdicts)} {what}: {support.verdicts[0].reason}"


def undecided_metrics(reasons: dict) -> set[str]:
    """The metrics NaN because the judge decided none of their verdicts (all undecided, a failed
    decomposition, claim extraction or question generation), not because there was nothing to judge:
    `diagnose`'s `undecided`, and the rows `eval answers` keeps in its table with n 0."""
    failed = (UNDECIDED, CITATIONS_UNDECIDED, DECOMPOSE_FAILED, CLAIM_EXTRACTION_FAILED, QUESTIONS_FAILED)
    return {m for m, why in reasons.items() if isinstance(why, str) and why.startswith(failed)}


def _record(p: _Prepared, judge, cfg: EvalConfig, embed) -> dict:
    rec, reasons = p.rec, dict(p.nan_reasons)
    m: dict = dict.fromkeys(METRICS + (CLAIM_METRICS if cfg.claims else ()))
    docs = rec.docs
    checks = citations.check_answer(rec.response, docs, set(docs))
    # A sentence that asserts nothing need not cite (`_excused`): one that declines or is a pleasantry, or any
    # sentence of a refusal (`is_refusal`: every sentence of it refuses or is a courtesy, so a claim beside a
    # refusal phrase makes the answer no refusal). Any other sentence must,
    # beside a refusal phrase too ("returns 500. 锁定时长文档未提及。" would otherwise pass uncited), and
    # what any sentence cites is checked.
    checks = [(s, c) for s, c in checks if c.status != citations.MISSING_CITATION or not _excused(p, s.text)]
    out = {"id": rec.id, "system": rec.system, "category": rec.category, "refused": p.refused, "metrics": m,
           "nan_reasons": reasons, "statements": [], "citation_checks": [{"sentence": s.text, **asdict(c)} for s, c in checks],
           # what report.html shows beside the scores, so a run folder is readable on its own
           "question": rec.question, "response": rec.response, "contexts": [c.to_dict() for c in rec.contexts],
           # false: plain-string contexts, whose ids "1".."n" are positions, no passage's (no gold to mark)
           "has_context_ids": rec.has_context_ids, "gold_passage_ids": list(rec.gold_passage_ids),
           "reference_statements": [{"text": r, "in_contexts": None, "in_answer": None, "in_contexts_reason": "not judged",
                                     "in_answer_reason": "not judged"} for r in p.references],
           # true: the statements above were split from `reference` by the run's splitter, whose version moves
           # them; the gate then pairs the labels by the reference text the record gave (`gate.checks._LABELS`)
           "reference_statements_split": not rec.reference_statements and rec.reference is not None,
           "citation_verdicts": []}
    if rec.reference is not None:
        out["reference"] = rec.reference
    if rec.category == "not_in_kb":
        reasons.update(dict.fromkeys(m, NOT_IN_KB_REASON))
        out["statements"] = [{"text": s.text, "citations": list(s.citations), "supported": None, "reason": "not judged",
                              "label": None} for s in p.statements]
        out["diagnosis"] = diagnose(m, rec.category, p.refused, cfg.thresholds, **_diagnosis_inputs(rec))
        return out
    premise = metrics.join_contexts([c.text for c in rec.contexts])
    faith = metrics.count_support(premise, [s.text for s in p.statements], judge)
    _scored("faithfulness", faith, "statements in the answer", m, reasons)
    # a refusal's score enters no mean, nor does its NaN once its declining statements were left out (a
    # refusal decomposed into no statement keeps "no statements in the answer")
    if p.refused and (not math.isnan(m["faithfulness"]) or p.left_out):
        m["faithfulness"], reasons["faithfulness"] = math.nan, REFUSAL_REASON
    out["statements"] = [{"text": s.text, "citations": list(s.citations), "supported": v.supported, "reason": v.reason,
                          "label": v.label} for s, v in zip(p.statements, faith.verdicts)]
    in_contexts = metrics.count_support(premise, p.references, judge)
    _scored("context_recall", in_contexts, "reference statements", m, reasons)
    # the premise is the answer without its [n] markers and footnote definitions: pointers, not content
    in_answer = metrics.count_support(answer_text(rec.response), p.references, judge)
    _scored("answer_completeness", in_answer, "reference statements", m, reasons)
    out["reference_statements"] = [{"text": r, "in_contexts": a.supported, "in_answer": b.supported,
                                    "in_contexts_label": a.label, "in_answer_label": b.label,
                                    # why each verdict is what it is: an undecided one (null) said nothing of why
                                    "in_contexts_reason": a.reason, "in_answer_reason": b.reason}
                                   for r, a, b in zip(p.references, in_contexts.verdicts, in_answer.verdicts)]
    _relevancy(rec, judge, cfg, embed, m, reasons)
    reasons["on_topic_rate"] = "needs per-statement on-topic labels (not part of the answer format)"
    # the sentences the rule layer asks to cite: one that asserts nothing (`asserts_nothing`) and cites
    # nothing is excused there, so it is no uncited statement here either (it scored 0 recall)
    cited = [(s.text, list(s.citations)) for s in p.sentences if s.citations or not _excused(p, s.text)]
    if cited:
        # A statement without a citation scores 0 (ALCE's definition, and the reference chapter's), so an
        # answer that cites nothing has citation recall 0, not null: dropping every citation must not
        # lift the mean. Its precision has no citation to count and stays null.
        cq = metrics.citation_quality_detail(cited, docs, judge)
        m["citation_recall"], m["citation_precision"] = cq["recall"], cq["precision"]
        out["citation_verdicts"] = [{"sentence": text, "citations": c, **v} for (text, c), v in zip(cited, cq["statements"])]
        if math.isnan(cq["recall"]):
            reasons["citation_recall"] = f"{CITATIONS_UNDECIDED}statement's citations"
        if math.isnan(cq["precision"]):
            reasons["citation_precision"] = (f"{CITATIONS_UNDECIDED}citation" if any(c for _, c in cited)
                                             else "the answer cites nothing")
    elif p.sentences:
        reasons["citation_recall"] = reasons["citation_precision"] = DECLINES_ONLY_REASON
    else:
        reasons["citation_recall"] = reasons["citation_precision"] = "the answer has no sentences"
    if rec.gold_passage_ids and rec.has_context_ids:
        ids = [c.id for c in rec.contexts]
        m["recall_at_k"] = {str(k): recall_at_k(ids, rec.gold_passage_ids, k) for k in cfg.ks}
    elif rec.gold_passage_ids:
        reasons["recall_at_k"] = "retrieved_contexts are plain strings: no ids to match gold_passage_ids"
    if rec.reference:
        answer = answer_text(rec.response)
        golds = [rec.reference, *rec.other_references]  # the best over them, as SQuAD scores
        m["exact_match"], m["f1"], m["rougeL"] = qa.exact_match(answer, golds), qa.token_f1(answer, golds), qa.rouge_l(answer, golds)
    else:
        for k in ("exact_match", "f1", "rougeL"):
            reasons[k] = "no reference answer"
    if p.claims:
        scores, why, out["claims"] = _claim_scores(p.claims, judge)
        if p.refused:  # as faithfulness: its claims' scores, or their NaN once its declining claims were left out
            for name in (CLAIMS_PREFIX + n for n in RESPONSE_CLAIM_METRICS):
                if not math.isnan(scores[name]) or p.left_out:
                    scores[name], why[name] = math.nan, REFUSAL_REASON
        m.update(scores)
        reasons.update(why)
    out["diagnosis"] = diagnose(m, rec.category, p.refused, cfg.thresholds, undecided=undecided_metrics(reasons),
                                **_diagnosis_inputs(rec))
    return out


def _excused(p: _Prepared, sentence: str) -> bool:
    """Whether a sentence need not cite: any sentence of a refusal (`is_refusal`: each of its sentences refuses
    or is a courtesy, "请联系管理员。" too; a refusal of an answerable question fails on completeness, not on
    a pointer's missing citation), or one that asserts nothing in any answer (`refusals.asserts_nothing`)."""
    return p.refused or asserts_nothing(sentence, p.rec.question)


def _diagnosis_inputs(rec: AnswerRecord) -> dict:
    """What `diagnose` reads of a record beside its metrics: how many contexts the generator was given, the
    share of the gold passages among all of them (None: no gold ids, or contexts without ids to match),
    and whether the answer has no words. The retrieval verdict is on what the generator read, not at
    --recall-at's cut-offs (the metric rows): a gold passage at rank 12, which the answer used, was retrieved."""
    gold = (recall_at_k([c.id for c in rec.contexts], rec.gold_passage_ids)
            if rec.gold_passage_ids and rec.has_context_ids else None)
    return {"contexts": len(rec.contexts), "gold_recall": gold, "empty": has_no_words(rec.response)}


def _relevancy(rec: AnswerRecord, judge, cfg: EvalConfig, embed, m: dict, reasons: dict) -> None:
    if embed is None or not hasattr(judge, "generate_questions"):
        reasons["answer_relevancy"] = "needs an embedder (--embedder) and a judge that writes questions (llm)"
        return
    try:
        # one noncommittal flag per question: only an answer evasive about every one scores 0 (ragas);
        # the judge reads what the answer says (`answer_text`), not its [n] markers and footnote lines,
        # which it would write questions about ("What is source [^1]?") as the other metrics never read
        questions, noncommittal = judge.generate_questions(answer_text(rec.response), cfg.relevancy_questions)
    except JudgeError as e:  # a failed request is a reason, not a crash
        reasons["answer_relevancy"] = f"{QUESTIONS_FAILED}{e}"
        return
    m["answer_relevancy"] = metrics.answer_relevancy(rec.question, questions, embed, noncommittal)
    if math.isnan(m["answer_relevancy"]):
        reasons["answer_relevancy"] = "no questions generated"


def evaluate_answers(records: Sequence[AnswerRecord], judge, cfg: EvalConfig = EvalConfig(), *, embed=None,
                     embedder: dict | None = None, config: dict | None = None,
                     progress: Callable[[int], None] | None = None) -> Results:
    """Score every record and aggregate into `Results` (`lewisrag.eval.results`; `.to_json()` is results.json).

    `embedder` names `embed` in results.json (`embedder_info`): `lewisrag gate` compares answer
    relevancy only between runs whose embedders are known and the same."""
    if cfg.splitter not in ("sentences", "atomic"):
        raise ValueError(f"splitter must be 'sentences' or 'atomic', got {cfg.splitter!r}")
    if cfg.splitter == "atomic" and not hasattr(judge, "decompose"):
        raise ValueError(f"the atomic splitter needs a judge with decompose() (llm), not '{judge.name}'")
    if cfg.claim_extractor not in ("splitter", "llm"):
        raise InputError("--claim-extractor", f"unknown claim extractor '{cfg.claim_extractor}': use splitter or llm")
    if cfg.claims and cfg.claim_extractor == "llm" and not hasattr(judge, "extract_claims"):
        raise InputError("--claim-extractor", f"claim extraction by llm needs an llm judge (--judge llm:MODEL), not '{judge.name}'")
    memo, out = _Memo(judge), []
    # Per-answer requests (decompose, questions, citation follow-ups) run side by side; an LLM
    # judge's own semaphore still bounds what is in flight.
    workers = getattr(judge, "max_workers", 1)
    for start in range(0, len(records), cfg.chunk):
        prepared = map_in_threads(lambda r: _prepare(r, judge, cfg), records[start : start + cfg.chunk], workers)
        memo.judge([pair for p in prepared for pair in _first_pairs(p)])  # the one batched call
        out.extend(map_in_threads(lambda p: _record(p, memo, cfg, embed), prepared, workers))
        if progress is not None:
            progress(len(prepared))
    splitter = {"name": SPLITTER_NAME, "version": SPLITTER_VERSION} if cfg.splitter == "sentences" else {
        "name": ATOMIC_SPLITTER_NAME, "version": getattr(judge, "fingerprint", "")}
    config = config if config is not None else {"splitter": cfg.splitter, "ks": list(cfg.ks), "thresholds": asdict(cfg.thresholds),
                                                "claims": cfg.claims, "claim_extractor": cfg.claim_extractor}
    return Results(Producer.here("eval"), config, [QuestionRecord.of(r) for r in out], judge_info(judge), splitter,
                   aggregate(out, cfg.ks), embedder=embedder if embed is not None else None)


def judge_info(judge) -> dict:
    """Name and fingerprint, plus model, params and the prompt, verdicts, questions and extraction versions when
    the judge has them (each a part of the fingerprint), and the endpoint's usage (calls, retries, failures, cache
    hits) and cost (0 without prices) for an LLM judge."""
    info = {"name": judge.name, "fingerprint": judge.fingerprint}
    for attr in ("model", "params", "prompt_version", "verdicts_version", "questions_version", "extraction_version",
                 "model_id", "threshold", "source", "usage", "cost"):
        if isinstance(getattr(judge, attr, None), (str, int, float, dict)):
            info[attr] = getattr(judge, attr)
    return info


def embedder_info(path: str | Path) -> dict:
    """Name and fingerprint of a local embedder folder: sha256 over the files `metrics.load_embedder`
    reads (weights, config, tokenizer) and how it embeds, so that two runs are told apart by the
    model that scored answer relevancy, not by the path it was read from."""
    h = hashlib.sha256(f"mean pooling, L2-normalized, {EMBEDDER_MAX_LENGTH} tokens\n".encode())
    for p in sorted(Path(path).iterdir()):
        if p.is_file() and (p.name in EMBEDDER_FILES or p.suffix == ".safetensors"):
            content = hashlib.sha256()
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    content.update(block)
            h.update(f"{p.name}\0{content.hexdigest()}\n".encode("utf-8"))
    return {"name": Path(path).resolve().name, "fingerprint": h.hexdigest()}


def aggregate(records: list[dict], ks: Sequence[int] | None = None) -> dict:
    """Score distributions per metric over answerable records; not_in_kb counted apart. The claim
    diagnostics, where the records have them, carry a bootstrap interval of the mean as well.

    `ks` are the run's recall@k cut-offs: each has its row wherever a record has gold passage ids,
    measured or not (contexts without ids: n 0, its NaN counted); None takes the cut-offs the
    records' scores hold. Records of more than one system (those naming none are the group
    NO_SYSTEM) get the same aggregates per system under "by_system": pooled, a perfect system and a
    broken one read as one mediocre system.
    """
    agg = _aggregate(records, ks)
    systems: dict[str, list[dict]] = {}
    for r in records:
        systems.setdefault(NO_SYSTEM if r.get("system") is None else r["system"], []).append(r)
    if len(systems) > 1:
        agg["by_system"] = {s: _aggregate(systems[s], ks) for s in sorted(systems)}
    return agg


def _aggregate(records: list[dict], ks: Sequence[int] | None) -> dict:
    scored = [r for r in records if r.get("category") != "not_in_kb"]
    agg: dict = {m: stats.score_distribution([r["metrics"].get(m) for r in scored]) for m in METRICS}
    agg.update(claim_aggregates(scored))
    asked = {str(k) for k in ks or ()} if any(r.get("gold_passage_ids") for r in scored) else set()
    for k in sorted(asked | {k for r in scored for k in (r["metrics"].get("recall_at_k") or {})}, key=int):
        agg[f"recall_at_k@{k}"] = stats.score_distribution([(r["metrics"].get("recall_at_k") or {}).get(k) for r in scored])
    agg["citation_status_counts"] = citations.status_counts(
        citations.Check(c["status"], c["detail"]) for r in records for c in r["citation_checks"])
    # a not_in_kb question whose generator failed (compare's `generator_error`) never answered: it neither
    # refused nor failed to, so it is left out here as in compare's layer summary (it was a miss here)
    nik = [r for r in records if r.get("category") == "not_in_kb" and not r.get("generator_error")]
    agg["not_in_kb"] = {"n": len(nik), "refused": sum(r["refused"] for r in nik),
                        "not_refused_ids": [r["id"] for r in nik if not r["refused"]]}
    agg["primary_cause_counts"] = dict(Counter(r["diagnosis"]["primary"] or "none" for r in records))
    return agg


def claim_aggregates(records: list[dict]) -> dict:
    """{claims.<metric>: its score distribution plus "interval"} over `records`, for the claim
    diagnostics they hold (none when the run switched them off); and `claims.contradictions`, the
    contradicted claims summed, where the judge gave three-way labels."""
    names = [m for m in CLAIM_METRICS if any(m in r["metrics"] for r in records)]
    out = {}
    for name in names:
        scores = [r["metrics"].get(name) for r in records]
        out[name] = {**stats.score_distribution(scores), "interval": mean_interval(scores)}
    counted = [c for r in records if (c := (r.get("claims") or {}).get("contradictions"))]
    if counted:
        out[CONTRADICTIONS] = claims.total_contradictions(counted)
    return out


def mean_interval(scores: Sequence[float | None], confidence: float = CLAIM_CONFIDENCE) -> dict:
    """The percentile bootstrap interval of the mean of the scores that are not None or NaN (nulls
    when fewer than two: `stats.mean_interval`).

    >>> mean_interval([1.0, 1.0, None])
    {'low': 1.0, 'high': 1.0, 'confidence': 0.95, 'method': 'percentile bootstrap'}
    """
    values = [math.nan if s is None else float(s) for s in scores]
    boot = stats.mean_interval(values, CLAIM_RESAMPLES, seed=0, confidence=confidence)
    low, high = (None, None) if math.isnan(boot["low"]) else (boot["low"], boot["high"])
    return {"low": low, "high": high, "confidence": confidence, "method": "percentile bootstrap"}


# ---------------------------------------------------------------------------------------------
# the BugHunt sample


def bughunt_label_judge(sample):
    """A LabelJudge over the sample's own human labels: the reference chapter's verdicts (docs/architecture.md)."""
    return LabelJudge({(r["premise"], r["hypothesis"]): r["supported"] for r in human_labels(sample)}, "bughunt human labels")


def evaluate_bughunt(sample, judge=None, cfg: EvalConfig = EvalConfig()) -> Results:
    """Every preset answer through the layered metrics and diagnosis, faithfulness at each labelled
    granularity, and the rule checker against the human citation labels.

    The on-topic rate comes from the human `on_topic` labels (the reference chapter computes it that way).
    `judge` defaults to the sample's human labels.
    """
    judge = judge or bughunt_label_judge(sample)
    records = [parse_answer(r, "bughunt", i, {}) for i, r in enumerate(answer_records(sample), start=1)]
    result = evaluate_answers(records, judge, cfg).to_json()
    answers = []
    for preset, rec in zip(sample.answers, result["records"]):
        m = rec["metrics"]
        m["on_topic_rate"] = metrics.on_topic_rate([s.on_topic for s in preset.sentences])
        rec["nan_reasons"].pop("on_topic_rate", None)
        contexts = [c.text for c in records[len(answers)].contexts]
        levels = {"sentences": [s["text"] for s in rec["statements"]]}
        if preset.atomic:
            levels["atomic"] = [t for t, _ in preset.atomic]
        if preset.whole_faithful is not None:
            levels["whole"] = [answer_text(preset.response)]
        granularity = {}
        for level, texts in levels.items():
            s = metrics.count_support(metrics.join_contexts(contexts), texts, judge)
            granularity[level] = {"statements": len(texts), "supported": sum(v.supported is True for v in s.verdicts), "faithfulness": s.score}
        answers.append({"name": preset.name, "description": preset.description, "expected_primary": preset.expected_primary,
                        "response": preset.response, "retrieved_ids": list(preset.retrieved_ids), **rec,
                        "diagnosis": diagnose(m, None, rec["refused"], cfg.thresholds,
                                              undecided=undecided_metrics(rec["nan_reasons"]),
                                              **_diagnosis_inputs(records[len(answers)])),
                        "granularity": granularity})
    sections = {"question": sample.question, "reference_statements": sample.reference_statements,
                "rule_checker": {"table": rule_checker_table(sample), "rows": rule_checker_rows(sample)}}
    # records: the evaluator's, plus each preset's name, description, expected_primary and granularity
    return Results(Producer.here("bughunt"), None, [QuestionRecord.of(a) for a in answers], judge_info(judge),
                   result["splitter"], aggregate(answers, cfg.ks), sections)
