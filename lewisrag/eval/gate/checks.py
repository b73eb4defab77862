"""The regression gate: compare a candidate evaluation run with a baseline, question by question.

Checks come in three tiers, ordered by how deterministic and how cheap they are:

1. rules (every commit): the citation statuses BAD_ID, MISSING_CITATION, QUOTE_NOT_FOUND must not
   occur in the candidate at all, and no gated metric may be unmeasurable (null) on more questions
   than in the baseline: a score that is not there cannot regress, so it must be counted;
2. retrieval (deterministic, labelled): recall@k must not fall below the baseline, compared in
   pairs (McNemar on per-question hits, a paired sign-flip test on the mean, sized by a bootstrap interval);
3. judged metrics (noisy): question-level distributions, paired tests against the baseline, the
   questions that got worse listed by id, absolute ceilings that pass only when a one-sided upper
   bound proves them, and `not_in_kb` questions that pass only by refusing.

Every check knows which way its metric is better (`better_direction`, from `LOWER_IS_BETTER` in
lewisrag.eval.results): for RAGChecker's wrong-claim shares (claims.hallucination, the two noise
sensitivities) a rising mean is the regression, a question fails a cut by rising above it (the cut
mirrored: `below = 1.0` is "above 0", any wrong claim), and a ceiling counts the questions above it.

A question without a score in one run (null or absent) has no difference for a mean to pair, so the
means compare the questions scored in both. A cut (tier 2's hits, tier 3's cuts) sees more: a baseline
without a score is read as passing it, so a candidate score failing the cut is a question newly failing
it (McNemar's b, counted against `max_regressions`, listed); a candidate without a score is neither a
regression nor a recovery (tier 1 counts the lost score, by `max_new_unmeasurable`), and one whose
baseline failed the cut is named. Each share is over the questions its run scores.

Runs are `results.json` files (or run directories holding one). Questions pair by (id, system), and a
paired question must keep its text. Runs of several systems are gated system by system (`_systems`):
each paired check, ceiling and unmeasurable count is one system's, named with it ("faithfulness < 1
[rag_token]"), since pooled, one system's regression is paid for by another's gain. Scores judged by
different judges or statement splitters (or, for the claims.* diagnostics, claim extractors; for
answer_relevancy, embedders) are not comparable, nor are judged scores whose judge fingerprint,
splitter or embedder a run does not record, so such runs are refused unless the caller allows it.
Scores within `SCORE_TOLERANCE` of each other are the same score. Thresholds live in a TOML file (the
packaged defaults: `gate.toml` beside this module).

The paired checks of tiers 2 and 3 are decided last, together: with `correction = "holm"` their
McNemar p-values are adjusted as one family and their tests of the mean held to a Bonferroni level
as another (`correction`), and each check shows its raw p-value beside the adjusted one.

A mean is "significantly worse" when the one-sided paired sign-flip permutation test
(`stats.sign_flip_test`: exact over the questions that changed when 2**their number fits in its
draws, else Monte Carlo from `seed`; `sign_flip_draws`: `n_resamples`, raised to 20 / level so that a
Monte Carlo p can reach the level) gives p <= (1 - interval confidence) / 2, the level at which the
paired bootstrap interval, still shown for the size of the change, used to decide. With k changed
questions the exact p is never below 0.5**k: where that is above the level, the evidence says that
no change on so few questions can be significant (the allowed drop still applies). The
percentile bootstrap decided wrongly where few questions differ, all one way: one question's drop of
0.01 gave a point interval and p = 0, three of six a p of 0.032 where the exact test says 0.125.
"""

from __future__ import annotations

import math
import os
import unicodedata
from dataclasses import dataclass, field, replace

from lewisrag.data.io import InputError
from lewisrag.eval import stats
from lewisrag.eval.evaluator import NO_SYSTEM
from lewisrag.eval.gate.correction import Correction, family
from lewisrag.eval.gate.inputs import GateConfig, Run, load_config, load_run
from lewisrag.eval.results import CLAIMS_PREFIX, METRIC_RANGES, better_direction

# The sign-flip test of a mean draws at least this many times 1 / its level (`sign_flip_draws`), at most
# MAX_SIGN_FLIP_DRAWS: n_resamples, which sizes the bootstrap, may be as few as 100.
DRAWS_PER_LEVEL = 20
MAX_SIGN_FLIP_DRAWS = 1_000_000
WORST_SHOWN = 5  # question ids quoted in a verdict's one-line evidence; --json carries them all
# Scores closer than this are the same score: another summation order or BLAS writes 0.49999999999999994
# for 0.5, and one ulp on every question made a "significant" drop and new regressions below a cut.
SCORE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class GateCheck:
    tier: str  # "pairing", "1 rules", "2 retrieval" or "3 judged"
    name: str  # what was checked, e.g. "faithfulness < 0.5"
    verdict: str  # "pass", "fail", "skip" (nothing to check) or "warn" (allowed but noteworthy)
    evidence: str  # one line of numbers a reviewer can act on
    details: dict = field(default_factory=dict)  # the same numbers in full, for --json


@dataclass(frozen=True)
class GateReport:
    baseline: str  # path of the baseline results.json
    candidate: str  # path of the candidate results.json
    judges: dict  # {"baseline": {...}, "candidate": {...}} name and fingerprint of each run's judge
    checks: list[GateCheck]  # in tier order
    correction: dict = field(default_factory=dict)  # `Correction.to_json()`: the levels the paired tests were decided at

    @property
    def passed(self) -> bool:
        return all(c.verdict != "fail" for c in self.checks)

    def to_json(self) -> dict:
        return {
            "passed": self.passed, "baseline": self.baseline, "candidate": self.candidate, "judges": self.judges,
            "correction": self.correction,
            "checks": [{"tier": c.tier, "name": c.name, "verdict": c.verdict, "evidence": c.evidence,
                        "details": c.details} for c in self.checks],
        }


# ---------------------------------------------------------------------------------------------
# the gate


def gate(baseline: str | os.PathLike, candidate: str | os.PathLike, config: str | os.PathLike | None = None,
         allow_judge_change: bool = False) -> GateReport:
    """Load both runs and the thresholds (all input is validated before any check runs), then gate."""
    cfg = load_config(config)
    base = load_run(baseline, cfg.gated_metrics)
    cand = load_run(candidate, cfg.gated_metrics)
    return run_gate(base, cand, cfg, allow_judge_change)


def run_gate(base: Run, cand: Run, cfg: GateConfig, allow_judge_change: bool = False) -> GateReport:
    checks = [_judge_check(base, cand, cfg, allow_judge_change), _pairing_check(base, cand, cfg),
              _question_text_check(base, cand), _labels_check(base, cand)]
    systems = _systems(base, cand)
    checks += _tier1(base, cand, cfg, systems)
    # checks, and _Paired ones still to decide
    paired = _tier2(base, cand, cfg, systems) + _tier3(base, cand, cfg, systems)
    correction, decided = _decide(paired, cfg)
    judges = {"baseline": base.judge, "candidate": cand.judge}
    return GateReport(base.path, cand.path, judges, [c for c in checks + decided if c is not None], correction.to_json())


@dataclass(frozen=True, eq=False)  # hashed by identity: a key of the run's adjusted p-values
class _Paired:
    """A paired check of tier 2 or 3, waiting for the levels of the run's family of tests (`correction`)."""

    tier: str
    name: str  # with its system when the runs hold several (`_named`)
    rows: list  # (key, baseline score, candidate score), settled, scored in both runs: the mean's questions
    cut: float | None  # per-question pass/fail at this cut, compared by McNemar; None: the mean only
    max_regressions: int  # questions allowed to newly fall below the cut; -1: McNemar alone
    # the mean by a sign-flip test (its level waits for the run's family), with this largest tolerated
    # worsening (a drop, or for a lower-is-better metric a rise); None: not checked
    max_mean_drop: float | None
    mcnemar: dict | None = None  # the one-sided McNemar test at `cut`, done at once (the mean test waits for its level)
    direction: int = 1  # +1: higher is better; -1: lower is better, and `cut` is the score a question must not exceed
    # every question with a score in at least one run, in the runs' order (`_scored`): the cut's questions.
    # A baseline null read as passing, a candidate score failing the cut after it is a regression; a
    # candidate null is neither a regression nor a recovery (tier 1 counts it) and is named when the baseline failed
    scored: list | None = None
    system: str | None = None  # the system whose questions these are (`_systems`); None: the runs hold one

    @property
    def at_cut(self) -> list:
        """The rows the cut's McNemar test pairs: every question the candidate scores."""
        return [r for r in (self.rows if self.scored is None else self.scored) if r[2] is not None]


def _paired(tier: str, name: str, rows: list, cut: float | None, max_regressions: int = -1,
            max_mean_drop: float | None = None, direction: int = 1, scored: list | None = None,
            system: str | None = None) -> _Paired:
    p = _Paired(tier, _named(name, system), rows, cut, max_regressions, max_mean_drop, None, direction, scored, system)
    if cut is not None:
        p = replace(p, mcnemar=stats.mcnemar(*_passing(p.at_cut, cut, direction), alternative="greater"))
    return p


def _passing(rows: list, cut: float, direction: int = 1) -> tuple[list[bool], list[bool]]:
    """Per question, whether the baseline and the candidate pass `cut`: at or above it, or for a
    lower-is-better metric (`direction` -1) at or under it. A baseline without a score passes: it is
    not known to have failed, so the candidate failing the cut now is a question newly failing it."""
    return ([x is None or not _fails(x, cut, direction) for _, x, _ in rows],
            [not _fails(y, cut, direction) for _, _, y in rows])


def _decide(items: list[GateCheck | _Paired], cfg: GateConfig) -> tuple[Correction, list[GateCheck]]:
    """The paired checks' verdicts at the levels of `cfg.correction`, other checks as they are, in order."""
    pending = [p for p in items if isinstance(p, _Paired)]
    tests = [p for p in pending if p.mcnemar is not None]
    intervals = sum(p.max_mean_drop is not None for p in pending)
    correction, adjusted = family(cfg, [p.mcnemar["pvalue"] for p in tests], intervals)
    adjusted = dict(zip(tests, adjusted))
    out = []
    for p in items:
        if not isinstance(p, _Paired):
            out.append(p)
        elif p.cut is None:
            out.append(_mean_check(p, cfg, correction))
        else:
            out.append(_paired_check(p, cfg, adjusted[p], correction))
    return correction, out


def _systems(base: Run, cand: Run) -> list[tuple[str | None, Run, Run]]:
    """The runs cut into one (system, baseline, candidate) part per system when their records hold more
    than one (the records naming none are the system NO_SYSTEM, as `eval answers` groups them), else
    [(None, base, cand)]: a single system's checks keep the names they always had.

    Pooled, one system's regression is paid for by another's gain: rag_token's faithfulness falling
    from 1.0 to 0.8 on 40 questions while rag_sequence's rose as much left the mean, the cuts and the
    sign-flip test where they were, and the gate passed a drop that rag_token gated alone fails at
    p = 0.0001. So each paired check, ceiling and unmeasurable count is a system's own, and a
    correction counts every one of them in its family."""
    names = sorted({_system(s) for run in (base, cand) for _, s in run.records})
    if len(names) < 2:
        return [(None, base, cand)]
    return [(name, *(replace(run, records={k: r for k, r in run.records.items() if _system(k[1]) == name})
                     for run in (base, cand))) for name in names]


def _system(system: str | None) -> str:
    return NO_SYSTEM if system is None else system


def _named(name: str, system: str | None) -> str:
    """A check's name, with the system whose questions it checks when the runs hold several."""
    return name if system is None else f"{name} [{system}]"


def _carries(records, metric: str) -> bool:
    """Whether one of `records` has `metric`, scored or null: absent from all, it is a metric their system
    does not produce (a retriever has no faithfulness), and that system gets no check of it."""
    return any(metric in r["metrics"] for r in records)


# ---------------------------------------------------------------------------------------------
# comparability


def _judge_check(base: Run, cand: Run, cfg: GateConfig, allow: bool) -> GateCheck | None:
    """None when the runs were scored alike; else a refusal naming what differs, or what a judged
    metric both runs score depends on and one of them does not record (the judge's fingerprint, the
    splitter; answer_relevancy's embedder), or, when allowed, a warning saying the same."""
    compared = base.judged & cand.judged  # judged metrics both runs score: what scored them must be known and alike
    # the claims.* diagnostics are scored on claims the splitter's statements or the LLM extracted: other texts
    claims = any(m.startswith(CLAIMS_PREFIX) for m in cfg.gated_metrics)
    problems = [p for p in (
        _scorer("judge.name", "judge", base.judge.get("name"), cand.judge.get("name"), needed=False),
        _scorer("judge.fingerprint", "judge fingerprint", base.judge.get("fingerprint"), cand.judge.get("fingerprint"),
                needed=bool(compared)),
        _scorer("splitter", "splitter", base.splitter, cand.splitter, needed=bool(compared)),
        _scorer("config.claim_extractor", "claim extractor", base.claim_extractor, cand.claim_extractor,
                needed=False) if claims else None,
        _scorer("embedder.fingerprint", "answer_relevancy's embedder", (base.embedder or {}).get("fingerprint"),
                (cand.embedder or {}).get("fingerprint"), needed=True) if "answer_relevancy" in compared else None,
    ) if p is not None]
    if not problems:
        return None
    diffs = "; ".join(what for _, what, _ in problems)
    if not allow:  # the error names the field at fault (the fingerprint when the judge changed) in the run lacking it
        field, _, lacking = next((p for p in problems if p[0] == "judge.fingerprint"), problems[0])
        # both runs by path, and the one to re-run: in CI the candidate is a fresh run and the baseline the old
        # one ("re-run the baseline the same way" named only the fresh run, in a folder the script then deleted)
        remedy = ("re-run the candidate the way the baseline was" if lacking == "candidate" else
                  "re-run the baseline the way the candidate was, or make the candidate the new baseline")
        raise InputError(base.path if lacking == "baseline" else cand.path, f"runs are not comparable: {diffs} "
                         f"(baseline {base.path}, candidate {cand.path}). Judged scores move with the judge, the "
                         "statement splitter, the claim extractor (claims.*) and the embedder (answer_relevancy), so "
                         f"each must be recorded and the same; {remedy}, or pass --allow-judge-change to compare "
                         "anyway", field=field)
    return GateCheck("pairing", "judge", "warn", "compared across a judge change (allowed): " + diffs)


def _scorer(field: str, label: str, base, cand, needed: bool) -> tuple[str, str, str | None] | None:
    """(field, what, the run lacking it or None) when the two runs' `field` keeps them apart: the
    values differ, or, `needed` (a metric both runs score depends on it), one run does not record it."""
    lacking = [run for run, value in (("baseline", base), ("candidate", cand)) if value in (None, "", {})]
    if needed and lacking:
        return field, f"{label} not recorded in the {' or the '.join(lacking)}", lacking[0]
    if base != cand:
        if field.endswith("fingerprint"):  # compared in full, shown short
            base, cand = _short(base), _short(cand)
        return field, f"{label} {base!r} -> {cand!r}", None
    return None


def _pairing_check(base: Run, cand: Run, cfg: GateConfig) -> GateCheck:
    missing = [k for k in base.records if k not in cand.records]
    new = [k for k in cand.records if k not in base.records]
    paired = len(base.records) - len(missing)
    evidence = f"{paired} paired by (id, system); {len(missing)} missing from candidate; {len(new)} new"
    if missing:
        evidence += ": missing " + _ids(missing)
    # require_all_baseline = false tolerates missing questions, not a system that pairs with none: gated system
    # by system, its every paired check would skip, and the gate pass having compared nothing of it
    unpaired = _unpaired_systems(base, cand)
    verdict = "fail" if unpaired or (missing and cfg.require_all_baseline) else "pass"
    if not paired:
        evidence = "no question paired: nothing was compared; " + evidence
    elif unpaired:
        of = "" if unpaired == [_system(None)] else " of " + ", ".join(unpaired)
        evidence = f"no answerable question{of} paired: no score{of} was compared; " + evidence
    return GateCheck("pairing", "questions", verdict, evidence, {
        "paired": paired, "missing": [_key(k) for k in missing], "new": [_key(k) for k in new],
        "unpaired_systems": unpaired})


def _unpaired_systems(base: Run, cand: Run) -> list[str]:
    """The baseline's systems (`_system`) none of whose answerable questions pairs with an answerable one of
    the candidate (`_answerable`), or, for a system whose every question is not_in_kb, none of whose
    questions pairs at all. With require_all_baseline = false a candidate without system b passed, b unchecked:
    the guard against a candidate that pairs with none was over all systems, while the checks are per system."""
    answerable = {_system(key[1]) for key, _, _ in _answerable(base, cand)}
    out = []
    for name in sorted({_system(s) for _, s in base.records}):
        keys = [k for k in base.records if _system(k[1]) == name]
        if any(not _not_in_kb(base.records[k]) for k in keys):
            if name not in answerable:
                out.append(name)
        elif not any(k in cand.records for k in keys):
            out.append(name)
    return out


def _question_text_check(base: Run, cand: Run) -> GateCheck | None:
    """A paired question must be the same question: an id kept while the data set rewrote its text
    compared the scores of two questions, and passed. Compared where both records carry the text
    (`question`), after Unicode NFC and whitespace folding; no check is shown when none changed."""
    changed = [key for key, b in base.records.items() if key in cand.records
               and _text(b.get("question")) is not None and _text(cand.records[key].get("question")) is not None
               and _text(b.get("question")) != _text(cand.records[key].get("question"))]
    if not changed:
        return None
    return GateCheck("pairing", "question text", "fail",
                     f"{len(changed)} paired questions have another text in the candidate (scores of different "
                     f"questions do not compare; re-run the baseline on the candidate's questions): {_ids(changed)}",
                     {"changed": [{"question": _key(k), "baseline": base.records[k]["question"],
                                   "candidate": cand.records[k]["question"]} for k in changed]})


def _labels_check(base: Run, cand: Run) -> GateCheck | None:
    """A paired question must be judged against the same labels: its category, its gold passage ids (as
    a set), its reference answer and its reference statements (their texts, folded as `_text`). A data
    set that relabelled a question and kept its id compared recall against other gold passages, and a
    worse retriever passed; one that made an answerable question not_in_kb was named by no check, only
    by its every score lost (tier 1 now leaves a question not_in_kb in either run out).
    Compared where both records carry labels of that kind (a label added where there was none leaves
    the baseline's score unmeasured: no mean compares it, and a cut reads the baseline as passing, so a
    candidate failing it is a regression); no check is shown when none changed (`_changed_labels`)."""
    changed = []
    for key, b in base.records.items():
        c = cand.records.get(key)
        if c is None:
            continue
        fields = _changed_labels(b, c)
        if fields:
            changed.append((key, fields))
    if not changed:
        return None
    named = sorted({f for _, fields in changed for f in fields})
    return GateCheck("pairing", "labels", "fail",
                     f"{len(changed)} paired questions are judged against other {' and '.join(named)} in the candidate "
                     f"(scores against other labels do not compare; re-run the baseline on the candidate's data): "
                     f"{_ids([k for k, _ in changed])}",
                     {"changed": [{"question": _key(k), **{f: {"baseline": _LABELS[f](base.records[k]),
                                                               "candidate": _LABELS[f](cand.records[k])} for f in fields}}
                                  for k, fields in changed]})


# what a record is judged against, as compared by `_labels_check` (empty: the record has none). Its category
# decides how: a not_in_kb question passes by refusing, unscored, an answerable one by its scores. `reference`
# is absent from runs written before it was recorded: their reference statements are compared as given
_LABELS = {
    "category": lambda r: r.get("category") or None,
    "gold_passage_ids": lambda r: sorted({str(g) for g in r.get("gold_passage_ids") or []}),
    "reference": lambda r: _text(r.get("reference")),
    "reference_statements": lambda r: [_text(s.get("text") if isinstance(s, dict) else s)
                                       for s in r.get("reference_statements") or []],
}


def _changed_labels(b: dict, c: dict) -> list[str]:
    """The kinds of label (`_LABELS`) that both records carry and that differ. Reference statements that
    both runs' splitters made of the record's `reference` (`reference_statements_split`) are left to the
    reference text: another splitter version splits the same text otherwise ("结论：\\n城市0的人口是1000人。"
    is two statements to version 14, one to 15), and --allow-judge-change across it failed on unchanged
    data. Where one run's statements were given, its judged labels are compared with the other's."""
    split = b.get("reference_statements_split") is True and c.get("reference_statements_split") is True
    return [name for name, labels in _LABELS.items() if labels(b) and labels(c) and labels(b) != labels(c)
            and not (split and name == "reference_statements")]


def _text(value) -> str | None:
    return " ".join(unicodedata.normalize("NFC", value).split()) if isinstance(value, str) else None


# ---------------------------------------------------------------------------------------------
# tier 1: rules


def _tier1(base: Run, cand: Run, cfg: GateConfig, systems: list) -> list[GateCheck]:
    return _citation_rules(base, cand, cfg) + _unmeasurable(base, cand, cfg, systems)


def _citation_rules(base: Run, cand: Run, cfg: GateConfig) -> list[GateCheck]:
    with_checks = [r for r in cand.records.values() if r.get("citation_checks") is not None]
    # an answer the baseline checked and the candidate did not: its violations would go uncounted
    lost = [key for key, r in cand.records.items()
            if r.get("citation_checks") is None and base.records.get(key, {}).get("citation_checks") is not None]
    if not with_checks and not lost:
        return [GateCheck("1 rules", "citations", "skip", "the candidate has no citation checks, nor the baseline's "
                          "answers paired with it")]
    out = []
    if lost:
        out.append(GateCheck("1 rules", "citations checked", "fail",
                             f"{len(lost)} answers checked in the baseline have no citation checks in the candidate "
                             f"(must be 0): {_ids(lost)}", {"count": len(lost), "questions": [_key(k) for k in lost]}))
    for status in cfg.zero_statuses:
        hits = {}
        for rec in with_checks:
            key = (rec["id"], rec.get("system"))
            n = _status_count(rec, status)
            if cfg.allow_baseline_violations and key in base.records:
                n -= _status_count(base.records[key], status)  # only violations the baseline did not have
            if n > 0:
                hits[key] = n
        total = sum(hits.values())
        what = "new sentences" if cfg.allow_baseline_violations else "sentences"
        evidence = f"{total} {what} in {len(hits)} answers (must be 0)"
        if hits:
            evidence += ": " + _ids(sorted(hits, key=lambda k: -hits[k]))
        out.append(GateCheck("1 rules", status, "fail" if total else "pass", evidence,
                         {"count": total, "questions": {_key(k): n for k, n in hits.items()}}))
    return out


def _status_count(rec: dict, status: str) -> int:
    return sum(1 for c in rec.get("citation_checks") or [] if c["status"] == status)


def _unmeasurable(base: Run, cand: Run, cfg: GateConfig, systems: list) -> list[GateCheck]:
    """Per gated metric, the paired answerable questions without a score (null or absent) in each run;
    per system where the runs hold several (`_systems`), for each system that has the metric (recall@k:
    whose baseline has it), and over all pairs for a metric that none has.

    Every paired mean leaves a null pair out, and a cut does not read a candidate null as failing, so a
    candidate that stops producing a score (a judge that times out everywhere) would otherwise pass on
    the questions that remain; pooled, one system's lost scores were paid for by another's new ones.
    """
    parts = [(system, _answerable(b, c)) for system, b, c in systems]
    ks = sorted({k for _, pairs in parts for _, b, _ in pairs for k in _recall(b)}, key=_k_order)
    gated = [(f"recall@{k}", "recall_at_k", k) for k in ks] + [(m, m, None) for m in cfg.gated_metrics]
    out = []
    for name, metric, k in gated:
        checks = [_unmeasurable_check(pairs, name, metric, k, cfg, system) for system, pairs in parts
                  if system is None or _counted(pairs, metric, k)]
        out += checks or [_unmeasurable_check(_answerable(base, cand), name, metric, k, cfg, None)]
    return out


def _answerable(base: Run, cand: Run) -> list[tuple]:
    """(key, baseline record, candidate record) of the paired questions answerable in both runs."""
    # a question not_in_kb in either run is scored in neither: relabelled answerable -> not_in_kb it lost every
    # score by design, which the labels check names (and the refusal check holds it to refusing), once
    return [(key, b, cand.records[key]) for key, b in base.records.items()
            if key in cand.records and not _not_in_kb(b) and not _not_in_kb(cand.records[key])]


def _counted(pairs: list, metric: str, k: str | None) -> bool:
    """Whether a system's pairs have the gated metric to count: recall@k where a baseline record has it
    (the ks tier 1 counts), another metric where a record of either run has it (`_carries`)."""
    if k is not None:
        return any(k in _recall(b) for _, b, _ in pairs)
    return _carries([r for _, b, c in pairs for r in (b, c)], metric)


def _unmeasurable_check(pairs: list, name: str, metric: str, k: str | None, cfg: GateConfig,
                        system: str | None) -> GateCheck:
    null_b = {key for key, b, _ in pairs if _value(b, metric, k) is None}
    null_c = [key for key, _, c in pairs if _value(c, metric, k) is None]
    lost = [key for key in null_c if key not in null_b]  # scored in the baseline, not now
    excess, allowed = len(null_c) - len(null_b), cfg.max_new_unmeasurable
    evidence = (f"no score (null or absent) on {len(null_b)} -> {len(null_c)} of {len(pairs)} paired questions "
                f"(allowed: {'any number' if allowed < 0 else f'+{allowed}'})")
    if lost:
        evidence += f"; {len(lost)} scored in the baseline have none now: {_ids(lost)}"
    verdict = "fail" if 0 <= allowed < excess else "warn" if lost else "pass"
    newly = set(lost)
    reasons = {_key(key): (c.get("nan_reasons") or {}).get(metric) for key, _, c in pairs if key in newly}
    details = {"paired": len(pairs), "baseline": len(null_b), "candidate": len(null_c), "allowed_more": allowed,
               "newly_null": reasons}
    return GateCheck("1 rules", _named(f"unmeasurable {name}", system), verdict, evidence,
                     details if system is None else details | {"system": system})


def _value(rec: dict, metric: str, k: str | None) -> float | None:
    """A question's score; for recall_at_k, the one at `k`."""
    return _recall(rec).get(k) if k is not None else _score(rec, metric)


# ---------------------------------------------------------------------------------------------
# tier 2: retrieval


def _tier2(base: Run, cand: Run, cfg: GateConfig, systems: list) -> list[GateCheck | _Paired]:
    parts = []  # (system, its pairs, the ks both runs have on one of them)
    for system, b_run, c_run in systems:
        pairs = [(k, b_run.records[k], c_run.records[k]) for k in b_run.records if k in c_run.records]
        parts.append((system, pairs, {k for _, b, c in pairs for k in _recall(b).keys() & _recall(c).keys()}))
    if not any(ks for _, _, ks in parts):  # why, as the records say it (contexts without ids), else the usual cause
        why = sorted({(r.get("nan_reasons") or {}).get("recall_at_k") for _, pairs, _ in parts for _, b, c in pairs
                      for r in (b, c)} - {None})
        return [GateCheck("2 retrieval", "recall@k", "skip",
                          f"no paired question has recall@k ({why[0] if why else 'no gold passage ids'})")]
    out = []
    for k in sorted(set().union(*(ks for _, _, ks in parts)), key=_k_order):
        for system, pairs, ks in parts:  # a system without recall@k retrieves nothing to gate (closed-book)
            if k not in ks:
                continue
            scored = _scored([(key, _recall(b).get(k), _recall(c).get(k)) for key, b, c in pairs])
            rows = _both(scored)
            if not rows:  # null in one run or the other on every question: tier 1 counted them (this divided by 0)
                out.append(GateCheck("2 retrieval", _named(f"recall@{k}", system), "skip", f"no paired question has "
                                     f"a recall@{k} score in both runs (tier 1 counts the nulls)"))
                continue
            out.append(_paired("2 retrieval", f"recall@{k}", rows, cut=cfg.recall_hit_at,
                               max_mean_drop=cfg.recall_max_mean_drop, scored=scored, system=system))
    return out


def _recall(rec: dict) -> dict:
    return rec["metrics"].get("recall_at_k") or {}


def _scored(rows: list) -> list:
    """(key, baseline, candidate) rows with a score in at least one run (None in the other), a candidate
    score within `SCORE_TOLERANCE` of the baseline's taken as the baseline's (float noise is no change)."""
    return [(key, x, x if x is not None and y is not None and abs(y - x) <= SCORE_TOLERANCE else y)
            for key, x, y in rows if x is not None or y is not None]


def _both(rows: list) -> list:
    """The rows of `_scored` with a score in both runs: the questions a paired mean compares."""
    return [r for r in rows if r[1] is not None and r[2] is not None]


def _below(score: float, cut: float) -> bool:
    """A score under a cut by more than float noise (0.9999999999999999 is not below 1.0)."""
    return score < cut - SCORE_TOLERANCE


def _fails(score: float, cut: float, direction: int) -> bool:
    """A score on the wrong side of a cut by more than float noise: under it when higher is better
    (`direction` +1), over it when lower is (-1)."""
    return _below(score, cut) if direction > 0 else score > cut + SCORE_TOLERANCE


def _mirrored(metric: str, below: float) -> float:
    """Where a question fails tier3.cuts' `below` for a lower-is-better metric: the same distance from
    the best score, so below = 1.0 (short of perfect) is "above 0" and 0.5 is "above 0.5"."""
    low, high = METRIC_RANGES[metric]
    return low + high - below


def _worse_word(direction: int) -> tuple[str, str]:
    """("lower", "drop") for a higher-is-better metric; ("higher", "rise") for a lower-is-better one."""
    return ("lower", "drop") if direction > 0 else ("higher", "rise")


def _k_order(k: str) -> tuple:
    return (0, int(k)) if k.isdigit() else (1, k)


# ---------------------------------------------------------------------------------------------
# tier 3: judged metrics


def _tier3(base: Run, cand: Run, cfg: GateConfig, systems: list) -> list[GateCheck | _Paired]:
    # an empty list in a --config file is allowed (retrieval alone; the means alone), but never silent
    out = []
    if not cfg.judged_metrics:
        out.append(GateCheck("3 judged", "tier3.metrics", "warn",
                             "tier3.metrics = [] (--config): no judged metric is compared with the baseline"))
    elif not cfg.cuts:
        out.append(GateCheck("3 judged", "tier3.cuts", "warn", "tier3.cuts = [] (--config): no question-level cut is "
                             "checked, only the paired means; a question collapsing while the mean holds passes"))
    for metric in cfg.judged_metrics:
        parts = [(system, b, c, _judged(b, c, metric, cfg, system)) for system, b, c in systems]
        if all(checks is None for *_, checks in parts):  # no system compared it: said once, as for one system
            out.append(_uncompared(base, cand, metric, cfg))
            continue
        for system, b, c, checks in parts:
            if checks is not None:
                out += checks
            elif _carries([r for _, rb, rc in _judged_pairs(b, c) for r in (rb, rc)], metric):
                out.append(GateCheck("3 judged", _named(metric, system), "skip",
                                     "no question has this metric in both runs", {"system": system}))
    for ceiling in cfg.ceilings:  # a system's share, proven for each system that has the metric
        checks = [_ceiling_check(c, ceiling, cfg, system) for system, _, c in systems if system is None
                  or _carries([r for r in c.records.values() if not _not_in_kb(r)], ceiling.metric)]
        if all(check.verdict == "skip" for check in checks):  # no score to prove it with in any system: it fails
            checks = [_ceiling_check(cand, ceiling, cfg)]
        out += checks
    out.append(_refusal_check(base, cand, cfg))
    return out


def _judged_pairs(base: Run, cand: Run) -> list[tuple]:
    """(key, baseline record, candidate record) of the paired questions the baseline files as answerable."""
    return [(key, b, cand.records[key]) for key, b in base.records.items() if key in cand.records and not _not_in_kb(b)]


def _judged(base: Run, cand: Run, metric: str, cfg: GateConfig, system: str | None) -> list | None:
    """A judged metric's paired mean and cuts over one system's questions (all of them: `system` None);
    None when it compares nothing, no question being scored in both runs, nor in the candidate alone for a cut."""
    both = [(key, _score(b, metric), _score(c, metric)) for key, b, c in _judged_pairs(base, cand)]
    scored = _scored(both)  # a score in one run at least: the cuts' questions (nulls are counted in tier 1 too)
    rows = _both(scored)  # in both: the mean's
    new = [key for key, x, _ in scored if x is None]  # scored in the candidate only: a cut can see them fail
    if not rows and not (new and cfg.cuts):
        return None
    direction = better_direction(metric)
    if rows:
        out = [_paired("3 judged", f"{metric}: paired mean", rows, cut=None, max_mean_drop=cfg.judged_max_mean_drop,
                       direction=direction, scored=scored, system=system)]
    else:  # no mean to pair; the cuts still see the candidate's scores
        out = [GateCheck("3 judged", _named(f"{metric}: paired mean", system), "skip",
                         f"no question has this metric in both runs; the cuts compare the {len(new)} scored "
                         "in the candidate only")]
    for cut in cfg.cuts:
        if direction > 0:
            out.append(_paired("3 judged", f"{metric} < {cut.below:g}", rows, cut=cut.below,
                               max_regressions=cut.max_regressions, scored=scored, system=system))
        else:  # lower is better: the cut mirrored, a question failing above it
            above = _mirrored(metric, cut.below)
            out.append(_paired("3 judged", f"{metric} > {above:g}", rows, cut=above,
                               max_regressions=cut.max_regressions, direction=-1, scored=scored, system=system))
    return out


def _uncompared(base: Run, cand: Run, metric: str, cfg: GateConfig) -> GateCheck:
    """A judged metric no paired question has in both runs: a skip, or a failure where a --config file names it
    in its own tier3.metrics (the gate was asked to check it and checked nothing)."""
    both = [(_score(b, metric), _score(c, metric)) for _, b, c in _judged_pairs(base, cand)]
    if metric not in cfg.named_metrics:
        return GateCheck("3 judged", metric, "skip", "no question has this metric in both runs")
    scored_in = [sum(x is not None for x, _ in both), sum(y is not None for _, y in both)]
    return GateCheck("3 judged", metric, "fail", f"no paired question has this metric in both runs "
                     f"(scored: {scored_in[0]} in the baseline, {scored_in[1]} in the candidate, of "
                     f"{len(both)}), and --config names it in tier3.metrics: nothing was checked",
                     {"paired": len(both), "baseline_scored": scored_in[0], "candidate_scored": scored_in[1]})


def _score(rec: dict, metric: str) -> float | None:
    return rec["metrics"].get(metric)


def _not_in_kb(rec: dict) -> bool:
    return rec.get("category") == "not_in_kb"


def sign_flip_draws(level: float, n_resamples: int) -> int:
    """The sign-flip test's Monte Carlo draws at `level`: `n_resamples`, raised to DRAWS_PER_LEVEL / level
    (at most MAX_SIGN_FLIP_DRAWS). Its p-value is never below 1 / (draws + 1), so 100 draws (0.0099) could
    not reach the level of three means under Holm (0.0083) and passed a rise on 40 questions of 141 that
    10,000 draws called significant at p = 0.0001; at 20 / level a p at the level is 20 hits, its Monte
    Carlo error a fifth of it. The questions that changed are enumerated (exact) when 2**k fits in the draws."""
    return max(n_resamples, min(math.ceil(DRAWS_PER_LEVEL / level), MAX_SIGN_FLIP_DRAWS))


def _mean_test(p: _Paired, cfg: GateConfig, correction: Correction) -> tuple[dict, dict, bool, str]:
    """The paired mean of `p`: its bootstrap (the size of the change, at the run's interval confidence),
    the one-sided sign-flip test that decides whether it got significantly worse (at the level the
    interval's upper tail stands for, (1 - interval confidence) / 2; drawn `sign_flip_draws` times where
    it cannot enumerate), whether it did, and the evidence. A test whose smallest possible p-value is
    above its level (k changed questions, exact: 0.5**k) says that no change could have been significant."""
    a, b = [x for _, x, _ in p.rows], [y for _, _, y in p.rows]
    # its interval; the p-value is the one-sided test's below
    boot = stats.paired_bootstrap(a, b, cfg.n_resamples, cfg.seed, correction.interval_confidence, pvalue=False)
    level = (1 - correction.interval_confidence) / 2
    draws = sign_flip_draws(level, cfg.n_resamples)
    test = stats.sign_flip_test(a, b, "less" if p.direction > 0 else "greater", draws, cfg.seed)
    significant = test["pvalue"] <= level
    reachable = test["min_pvalue"] <= level
    worse, _ = _worse_word(p.direction)
    k = test["nonzero"]
    method = test["method"] if test["method"] == "exact" else f"{test['method']}, {draws} draws"
    if significant:
        verdict = f"significantly {worse} (p <= {level:.3g})"
    elif reachable or k == 0:
        verdict = f"not significant at {level:.3g}"
    elif test["method"] == "exact":  # the gate cannot see any change on so few questions: say so
        verdict = (f"not significant at {level:.3g}: {k} changed question{'s' if k > 1 else ''} cannot reach "
                   f"significance at {level:.3g} (smallest p 0.5**{k} = {test['min_pvalue']:.3g})")
    else:
        verdict = (f"not significant at {level:.3g}: {draws} draws cannot reach significance at {level:.3g} "
                   f"(smallest p 1/{draws + 1})")
    evidence = (f"{correction.ci_label(cfg.confidence)} CI [{boot['low']:+.3f}, {boot['high']:+.3f}] (bootstrap); "
                f"sign-flip p={test['pvalue']:.3g} (one-sided, {k} changed, {method}), {verdict}")
    test = test | {"level": level, "significant": significant, "draws": draws, "reachable": reachable}
    return boot, test, significant, evidence


def _mean_check(p: _Paired, cfg: GateConfig, correction: Correction) -> GateCheck:
    """The paired mean (a one-sided sign-flip test, a bootstrap interval for its size), with the
    questions that got worse listed by id, worst first."""
    rows, max_mean_drop, d = p.rows, p.max_mean_drop, p.direction
    a, b = [x for _, x, _ in rows], [y for _, _, y in rows]
    boot, test, significant, tested = _mean_test(p, cfg, correction)
    worse = sorted(((y - x, key) for key, x, y in rows if d * (y - x) < 0), key=lambda t: d * t[0])
    # 0.4 -> 0.1 on 1 of 15 is a drop of 0.02, not more
    too_far = d * boot["mean_diff"] < -max_mean_drop - SCORE_TOLERANCE
    _, drop = _worse_word(d)
    evidence = (f"n={boot['n']} mean {sum(a) / len(a):.3f} -> {sum(b) / len(b):.3f} (diff {boot['mean_diff']:+.3f}, "
                f"{tested}; allowed {drop} {max_mean_drop:g}"
                f"{'' if d > 0 else ', lower is better'}); worse on {len(worse)}")
    if worse:
        evidence += ": " + _ids([key for _, key in worse])
    one_run = len(p.scored or rows) - len(rows)
    if one_run:  # no pair to take a difference of: the cuts and tier 1 count them
        evidence += f"; {one_run} scored in one run only are not in the mean (the cuts and tier 1 count them)"
    if too_far:
        evidence = f"mean {'dropped' if d > 0 else 'rose'} more than {max_mean_drop:g} | " + evidence
    # "pvalue": the one-sided sign-flip p that decided (the bootstrap's own is two-sided); in full under "sign_flip"
    details = boot | {"pvalue": test["pvalue"], "pvalue_method": test["method"], "better": "higher" if d > 0 else "lower",
                      "sign_flip": test,
                      "worse": [{"question": _key(key), "diff": diff} for diff, key in worse]}
    if p.system is not None:
        details["system"] = p.system
    if correction.on:
        details["correction"] = _interval_details(correction)
    return GateCheck(p.tier, p.name, "fail" if significant or too_far else "pass", evidence, details)


def _paired_check(p: _Paired, cfg: GateConfig, adjusted: float, correction: Correction) -> GateCheck:
    """Per-question pass/fail at the cut compared in pairs (one-sided McNemar: is the candidate worse?),
    its p-value `adjusted` for the run's family; for retrieval, the mean too."""
    rows, cut, test, d = p.at_cut, p.cut, p.mcnemar, p.direction
    base_ok, cand_ok = _passing(rows, cut, d)
    regressed = [key for (key, _, _), bo, co in zip(rows, base_ok, cand_ok) if bo and not co]
    unscored = {key for key, x, _ in rows if x is None}  # no score in the baseline, read as passing it
    # each run's share over the questions it scores; a candidate null after a failing baseline is no recovery
    base_scores = [x for _, x, _ in (p.rows if p.scored is None else p.scored) if x is not None]
    lost = [key for key, x, y in (p.scored or []) if y is None and _fails(x, cut, d)]
    n, n_b = len(rows), len(base_scores)
    fail_b, fail_c = sum(_fails(x, cut, d) for x in base_scores), n - sum(cand_ok)
    upper = stats.proportion_interval(fail_c, n, cfg.confidence, side="upper")[1]
    reasons = []
    if adjusted <= cfg.alpha:
        reasons.append(f"McNemar {'Holm-adjusted ' if correction.on else ''}p <= {cfg.alpha:g}")
    if 0 <= p.max_regressions < len(regressed):
        reasons.append(f"more than {p.max_regressions} regressions")
    side = "below" if d > 0 else "above"
    over = f"n={n}," if n_b == n and not unscored else f"of the {n_b} scored in the baseline, the {n} in the candidate;"
    evidence = (f"share {side} {cut:g}: {f'{fail_b / n_b:.1%}' if n_b else 'none scored'} -> {fail_c / n:.1%} ({over} "
                f"one-sided {100 * cfg.confidence:.4g}% upper {upper:.1%}); regressed {test['b']}")
    if unscored & set(regressed):
        evidence += f" ({len(unscored & set(regressed))} without a score in the baseline)"
    evidence += f", recovered {test['c']}, McNemar p={test['pvalue']:.3g}"
    if lost:
        evidence += (f"; {len(lost)} {side} {cut:g} in the baseline have no score now, not counted as recovered "
                     f"(tier 1 counts them): {_ids(lost)}")
    details = {"n": n, "better": "higher" if d > 0 else "lower", "baseline_scored": n_b, "candidate_scored": n,
               "baseline_failing": fail_b, "candidate_failing": fail_c,
               "candidate_upper_bound": upper, "mcnemar": test, "regressed": [_key(k) for k in regressed],
               "regressed_unscored_in_baseline": [_key(k) for k in regressed if k in unscored],
               "failing_unscored_in_candidate": [_key(k) for k in lost]}
    if d > 0:  # the names the fields had before lower-is-better metrics were gated, kept for readers of --json
        details |= {"baseline_below": fail_b, "candidate_below": fail_c}
    if p.system is not None:
        details["system"] = p.system
    if correction.on:
        evidence += f", Holm-adjusted {adjusted:.3g} over {correction.tests} tests"
        details["correction"] = {"method": correction.method, "pvalue": test["pvalue"], "adjusted_pvalue": adjusted,
                                 "tests": correction.tests}
    if p.max_mean_drop is not None:  # retrieval: the mean must hold too
        mean, sign_flip, significant, tested = _mean_test(p, cfg, correction)
        evidence += f"; mean diff {mean['mean_diff']:+.3f}, {tested}"
        details["bootstrap"] = mean  # its "pvalue" is the two-sided sign-flip test's; the one-sided one decided
        details["sign_flip"] = sign_flip
        if correction.on:
            details["correction"] |= _interval_details(correction)
        if significant:
            reasons.append(f"mean significantly {_worse_word(d)[0]}")
        if d * mean["mean_diff"] < -p.max_mean_drop - SCORE_TOLERANCE:
            reasons.append(f"mean {'dropped' if d > 0 else 'rose'} more than {p.max_mean_drop:g}")
    if regressed:
        evidence += "; regressed: " + _ids(regressed)
    if reasons:
        evidence = "; ".join(reasons) + " | " + evidence
    return GateCheck(p.tier, p.name, "fail" if reasons else "pass", evidence, details)


def _interval_details(correction: Correction) -> dict:
    return {"interval_confidence": correction.interval_confidence, "intervals": correction.intervals}


def _ceiling_check(cand: Run, ceiling, cfg: GateConfig, system: str | None = None) -> GateCheck:
    """An absolute threshold passes only when the one-sided upper bound proves it. A question counts
    against it below `ceiling.below`, or, for a lower-is-better metric, above `ceiling.above`. With
    `system` (the runs hold several: `cand` is that system's part), the share is that system's, and a
    system without a score of the metric is a skip: the ceiling fails unproven where no system has one."""
    answerable = [_score(r, ceiling.metric) for r in cand.records.values() if not _not_in_kb(r)]
    scores = [s for s in answerable if s is not None]
    d = better_direction(ceiling.metric)
    name = _named(f"share {ceiling.metric} {'<' if d > 0 else '>'} {ceiling.cut:g} <= {ceiling.max_share:.1%}", system)
    if not scores:
        if system is not None:
            return GateCheck("3 judged", name, "skip", f"no candidate question of this system has a score "
                             f"({len(answerable)} unmeasurable): nothing to prove", {"system": system})
        return GateCheck("3 judged", name, "fail", "no candidate question has this metric, so nothing is proven")
    k, n = sum(_fails(s, ceiling.cut, d) for s in scores), len(scores)
    upper = stats.proportion_interval(k, n, cfg.confidence, method=ceiling.method, side="upper")[1]
    evidence = (f"{'below' if d > 0 else 'above'} {ceiling.cut:g}: {k}/{n} = {k / n:.1%}; one-sided "
                f"{100 * cfg.confidence:.4g}% upper bound ({ceiling.method}) {upper:.1%}")
    if len(answerable) > n:
        evidence += f"; {len(answerable) - n} unmeasurable not counted"
    need = stats.sample_size_for_upper_bound(k / n, ceiling.max_share, cfg.confidence, ceiling.method)
    if upper > ceiling.max_share:
        evidence += " > threshold: not proven; " + (
            f"at this rate about {need} questions would prove it" if need
            else "the observed rate is not below it" if k / n >= ceiling.max_share
            else "at this rate no feasible number of questions would prove it")
    details = {"k": k, "n": n, "better": "higher" if d > 0 else "lower", "upper_bound": upper,
               "method": ceiling.method, "questions_needed": need}
    return GateCheck("3 judged", name, "pass" if upper <= ceiling.max_share else "fail", evidence,
                     details if system is None else details | {"system": system})


def _refusal_check(base: Run, cand: Run, cfg: GateConfig) -> GateCheck:
    """Questions whose answer is not in the knowledge base pass only by refusing; no score counts. One
    whose generator failed (`generator_error`) did not refuse and fails, listed apart: it gave no answer.

    With `allow_baseline_violations` (a baseline known to be bad, e.g. an untrained smoke-test
    model) only the questions the baseline refused and the candidate no longer refuses fail.
    """
    # a question the baseline files as not_in_kb stays one when the candidate's data calls it otherwise:
    # relabelled, it left this check and tier 3 (which follows the baseline's category) alike, and passed
    relabelled = [k for k, r in cand.records.items() if not _not_in_kb(r) and _not_in_kb(base.records.get(k, {}))]
    recs = [r for r in cand.records.values() if _not_in_kb(r)] + [cand.records[k] for k in relabelled]
    if not recs:
        return GateCheck("3 judged", "not_in_kb refuses", "skip", "no not_in_kb questions in the candidate")
    unrefused = [(r["id"], r.get("system")) for r in recs if r.get("refused") is not True]
    # a question whose generator failed (compare's `generator_error`) did not refuse, so it fails here too, but
    # it never answered either: it is named apart, as the evaluator and compare leave it out of refusal counts
    no_answer = {(r["id"], r.get("system")) for r in recs if r.get("refused") is not True and r.get("generator_error")}
    answered = [k for k in unrefused if k not in no_answer]
    evidence = f"{len(recs) - len(unrefused)}/{len(recs)} refused"
    if relabelled:
        evidence += f"; {len(relabelled)} not_in_kb in the baseline and not in the candidate: {_ids(relabelled)}"
    failing = unrefused
    if cfg.allow_baseline_violations:  # a baseline answer is tolerated; a new question is held to the rule
        failing = [k for k in unrefused if k not in base.records or base.records[k].get("refused") is True]
        evidence += f"; {len(failing)} that the baseline refused or did not have"
    failed_answering = [k for k in failing if k in no_answer]
    if len(failing) > len(failed_answering):
        evidence += "; answered instead of refusing: " + _ids([k for k in failing if k not in no_answer])
    if failed_answering:
        evidence += "; no answer: the generator failed: " + _ids(failed_answering)
    return GateCheck("3 judged", "not_in_kb refuses", "fail" if failing else "pass", evidence,
                     {"n": len(recs), "answered": [_key(k) for k in answered],
                      "generator_failed": [_key(k) for k in unrefused if k in no_answer],
                      "failing": [_key(k) for k in failing], "relabelled": [_key(k) for k in relabelled]})


# ---------------------------------------------------------------------------------------------


def _short(fingerprint) -> str | None:
    return None if fingerprint is None else str(fingerprint)[:12]


def _key(key: tuple[str, str | None]) -> str:
    qid, system = key
    return qid if system is None else f"{qid}@{system}"


def _ids(keys: list) -> str:
    shown = ", ".join(_key(k) for k in keys[:WORST_SHOWN])
    return shown + (f" (+{len(keys) - WORST_SHOWN} more)" if len(keys) > WORST_SHOWN else "")
