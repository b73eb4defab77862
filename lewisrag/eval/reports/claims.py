"""The "claim-level diagnostics" section of the reports: RAGChecker's metrics (`lewisrag.eval.claims`)
per system side by side, each mean with its bootstrap interval, and one sentence per metric group
written from the numbers.

A column is {claims.<metric>: summary}, the summary holding at least "n", "nan", "mean" and
"interval" {"low", "high", "confidence"}: an entry of results.json's aggregates
(`evaluator.claim_aggregates`) or its `claim_summary`; and, where the judge told contradiction from
neutral, `claims.contradictions` (counts, `claims.total_contradictions`), shown as one more row.
Columns are labelled by system ("all" for a run of one); `report.md` of `eval answers`, report.html,
`lewisrag compare` and the reproduce report all render through here, in English or Chinese (`lang`,
the catalogue of `reports.i18n`).
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Mapping

from lewisrag.data.io import is_finite_number
from lewisrag.eval.reports.i18n import Messages, messages
from lewisrag.eval.results import CLAIM_METRICS, CLAIMS_PREFIX, CONTRADICTIONS
from lewisrag.eval.stats import mcnemar, sign_flip_test

Columns = Mapping[str, Mapping[str, Mapping]]  # label -> {claims.<metric>: summary}
Name = Callable[[str], str]  # how a sentence writes a column's label
# label -> {claims.<metric>: {question id: value}}: each column's per-question values, for the paired tests
Scores = Mapping[str, Mapping[str, Mapping[str, float | None]]]

LEVEL = 0.05  # a column is named highest or lowest only where a paired test sets it apart at this level
RESAMPLES, SEED = 10_000, 0  # the sign-flip test's random sign assignments: a fixed seed, the same p every run

def claim_summary(dist: Mapping) -> dict:
    """The part of an aggregate the section shows: n, nan, mean and interval.

    >>> claim_summary({"n": 2, "nan": 1, "mean": 0.5, "median": 0.5, "interval": {"low": 0.0, "high": 1.0}})
    {'n': 2, 'nan': 1, 'mean': 0.5, 'interval': {'low': 0.0, 'high': 1.0}}
    """
    return {k: dist[k] for k in ("n", "nan", "mean", "interval")}


def column_summary(col: Mapping) -> dict:
    """A column with each metric cut to its `claim_summary`; the contradiction counts kept whole."""
    return {m: dict(d) if m == CONTRADICTIONS else claim_summary(d) for m, d in col.items()}


def claim_columns(aggregates: Mapping) -> dict[str, dict]:
    """Columns from results.json's aggregates: one per system when there are several, else one ("all");
    none when the run has no claim diagnostics."""
    by_system = aggregates.get("by_system") or {}
    if any(CLAIM_METRICS[0] in v for v in by_system.values()):
        return {s: _claims_of(v) for s, v in by_system.items()}
    mine = _claims_of(aggregates)
    return {"all": mine} if mine else {}


def _claims_of(aggregates: Mapping) -> dict:
    return {m: aggregates[m] for m in (*CLAIM_METRICS, CONTRADICTIONS) if isinstance(aggregates.get(m), Mapping)}


def claim_scores(records: Iterable[Mapping], label: Callable[[Mapping], str]) -> dict[str, dict[str, dict[str, float]]]:
    """The `scores` of `claims_markdown` from per-question records: {label(record): {claims.<metric>:
    {question id: value}}}, finite values of the records that name their question only: without them
    the sentences rank the columns' means, and name a column highest where no paired test sets it apart.

    >>> claim_scores([{"id": "q1", "system": "a", "metrics": {"claims.f1": 0.5, "claims.recall": None, "faithfulness": 1.0}}],
    ...              lambda r: r["system"])
    {'a': {'claims.f1': {'q1': 0.5}}}
    """
    out: dict[str, dict[str, dict[str, float]]] = {}
    for r in records:
        metrics = r.get("metrics")
        for m, v in metrics.items() if isinstance(metrics, Mapping) and isinstance(r.get("id"), str) else ():
            if m.startswith(CLAIMS_PREFIX) and is_finite_number(v):
                out.setdefault(label(r), {}).setdefault(m, {})[r["id"]] = float(v)
    return out


def _mean(col: Mapping, short: str) -> float | None:
    return (col.get(CLAIMS_PREFIX + short) or {}).get("mean")


def _f(x) -> str:
    return "–" if x is None else f"{x:.3f}"


def cell(summary: Mapping | None) -> str:
    """'0.500 [0.250, 0.750] n=4': the mean, its interval and the questions it averages; and, where
    some had no value (the chapter's NaN: no claims, no reference), how many, counted apart from n
    (', NaN 1'), not hidden.

    >>> cell({"n": 4, "mean": 0.5, "interval": {"low": 0.25, "high": 0.75}}), cell({"n": 0, "mean": None})
    ('0.500 [0.250, 0.750] n=4', '– n=0')
    >>> cell({"n": 1, "nan": 1, "mean": 0.0}), cell({"n": 0, "nan": 2, "mean": None}), cell({"n": 2, "nan": 0, "mean": 1.0})
    ('0.000 n=1, NaN 1', '– n=0, NaN 2', '1.000 n=2')
    """
    if not summary:
        return "–"
    ci = summary.get("interval") or {}
    interval = f" [{_f(ci['low'])}, {_f(ci['high'])}]" if ci.get("low") is not None else ""
    nan = f", NaN {summary['nan']}" if summary.get("nan") else ""
    return f"{_f(summary.get('mean'))}{interval} n={summary.get('n', 0)}{nan}"


def contradiction_cell(counts: Mapping | None, lang: str = "en") -> str:
    """'1 of 4 (0.250) by the reference, 1 by a passage': a column's contradicted answer claims.

    >>> contradiction_cell({"by_reference": 1, "labelled": 4, "by_reference_rate": 0.25, "by_a_context": 1})
    '1 of 4 (0.250) by the reference, 1 by a passage'
    >>> contradiction_cell(None)
    '–'
    """
    if not counts:
        return "–"
    return messages(lang)("cl.contradicted", n=counts["by_reference"], labelled=counts["labelled"],
                          rate=_f(counts["by_reference_rate"]), context=counts["by_a_context"])


def table_rows(columns: Columns, lang: str = "en") -> list[list[str]]:
    """[row label, a cell per column] for every metric, then the contradicted claims where a column has them."""
    t = messages(lang)
    rows = [[t(m), *(cell(col.get(m)) for col in columns.values())] for m in CLAIM_METRICS]
    if any(CONTRADICTIONS in col for col in columns.values()):
        rows.append([t(CONTRADICTIONS), *(contradiction_cell(col.get(CONTRADICTIONS), lang) for col in columns.values())])
    return rows


def _listing(columns: Columns, shorts: tuple[str, ...], name: Name, t: Messages) -> str:
    """'a 0.300 / 0.100, b 0.200 / 0.000': each column's means of `shorts` (no label for a lone column)."""
    label = (lambda c: f"{name(c)} ") if len(columns) > 1 else (lambda c: "")
    return t.join(label(c) + " / ".join(_f(_mean(col, s)) for s in shorts) for c, col in columns.items())


def _ranking(values: Mapping[str, float | None], name: Name, most: str, least: str, t: Messages,
             scores: Mapping[str, Mapping[str, float | None]] | None = None) -> str:
    """'highest for `a`, lowest for `b`' over the columns with a value; '' for fewer than two. Values
    are compared as the sentence prints them, and columns tied there are named together ('highest for
    `a` and `b`'): a first-found maximum named one of two equal columns the highest.

    With `scores` ({label: {question id: value}}), an end is named plainly only where a paired test
    (`paired_pvalue`) sets each of its columns apart from every other column at p < `LEVEL`, its paired
    difference (`paired_difference`) on the end's side; the columns it does not set apart are named
    after it ('highest for `a`, within noise of `b`'), those it sets apart the other way round (a mean
    over each column's own questions, the test over the shared ones: 'reversed against'), those it
    could not pair ('not tested against'), and when no pair differs at all, the sentence says so: the
    table prints intervals, and a lead inside them is no lead."""
    known = {label: _f(v) for label, v in values.items() if v is not None}
    if len(known) < 2:
        return ""
    top, bottom = max(known.values(), key=float), min(known.values(), key=float)
    if top == bottom:  # a column without a value ("–") is no part of the tie
        return t("cl.same_scored" if len(known) < len(values) else "cl.same")
    tops, bottoms = ([label for label, v in known.items() if v == end] for end in (top, bottom))
    ends = {"most": most, "top": t.names(map(name, tops)), "least": least, "bottom": t.names(map(name, bottoms))}
    if scores is None:
        return t("cl.ends", **ends)
    labels = list(known)
    p = {(a, b): paired_pvalue(scores.get(a), scores.get(b)) for i, a in enumerate(labels) for b in labels[i + 1:]}
    if all(r is not None and r["p"] >= LEVEL for r in p.values()):
        return t("cl.no_pair_differs")

    def note(end: list[str], side: int) -> str:
        """The columns the tests do not set apart from `end`, by why; `side` 1 for the top (above every
        other column on their shared questions), -1 for the bottom (below)."""
        pairs = {o: [(e, p.get((e, o)) or p.get((o, e))) for e in end] for o in labels if o not in end}
        untested = [o for o, rs in pairs.items() if any(r is None for _, r in rs)]
        flipped = [o for o, rs in pairs.items() if o not in untested and any(
            r["p"] < LEVEL and side * paired_difference(scores[e], scores[o]) < 0 for e, r in rs)]
        level = [o for o, rs in pairs.items() if o not in untested + flipped and any(r["p"] >= LEVEL for _, r in rs)]
        return "".join(t(key, others=t.names(map(name, group))) for key, group in
                       (("cl.within", level), ("cl.reversed", flipped), ("cl.untested", untested)) if group)

    notes = {"top_note": note(tops, 1), "bottom_note": note(bottoms, -1)}
    return t("cl.ends_noted", **ends, **notes) if any(notes.values()) else t("cl.ends", **ends)


def _extremes(columns: Columns, shorts: tuple[str, ...], name: Name, most: str, least: str, t: Messages,
              scores: Scores | None = None) -> str:
    """' (most for `a`, least for `b`)': `_ends` in parentheses; '' for fewer than two columns."""
    inner = _ends(columns, shorts, name, most, least, t, scores)
    return t("cl.paren", inner=inner) if inner else ""


def _ends(columns: Columns, shorts: tuple[str, ...], name: Name, most: str, least: str, t: Messages,
          scores: Scores | None = None) -> str:
    """`_ranking` of the columns' means of `shorts` (their sum when several: noise sensitivity in
    relevant plus irrelevant passages, per question too)."""
    return _ranking({label: _total(_mean(col, s) for s in shorts) for label, col in columns.items()}, name, most,
                    least, t, None if scores is None else {label: _per_question(scores.get(label) or {}, shorts)
                                                           for label in columns})


def _each_extremes(columns: Columns, shorts: tuple[str, ...], name: Name, t: Messages, scores: Scores | None) -> str:
    """' (claim recall: highest for `a`, ...; context precision: highest for `b`, ...)': each metric of a
    two-metric sentence ranked on its own (ranked on the first alone, the stitched system read "lowest"
    on context precision, where it was the highest)."""
    parts = []
    for short in shorts:
        inner = _ends(columns, (short,), name, t("cl.highest"), t("cl.lowest"), t, scores)
        if inner:
            parts.append((inner, t("cl.of_metric", metric=t(CLAIMS_PREFIX + short), ranking=inner)))
    same = {inner for inner, _ in parts}
    if parts and len(parts) == len(shorts) and len(same) == 1 and same <= {t("cl.same"), t("cl.same_scored")}:
        return t("cl.paren", inner=parts[0][0])  # once, not once per metric
    return t("cl.paren", inner=t.join((part for _, part in parts), "sep.clause")) if parts else ""


def _total(values) -> float | None:
    """The sum of `values`; None when one of them is None."""
    values = list(values)
    return None if any(v is None for v in values) else sum(values)


def _per_question(column: Mapping[str, Mapping[str, float | None]], shorts: tuple[str, ...]) -> dict[str, float]:
    """{question id: the sum of its values of `shorts`} over the questions with a finite value of each."""
    by_metric = [column.get(CLAIMS_PREFIX + s) or {} for s in shorts]
    ids = [q for q in by_metric[0] if all(_finite(m.get(q)) for m in by_metric)]
    return {q: sum(float(m[q]) for m in by_metric) for q in ids}


def _finite(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _paired(a: Mapping[str, float] | None, b: Mapping[str, float] | None) -> tuple[list[float], list[float]]:
    """The values of `a` and of `b` on the questions both have a finite value for, in the same order."""
    ids = [q for q, v in (a or {}).items() if _finite(v) and _finite((b or {}).get(q))]
    return [float(a[q]) for q in ids], [float(b[q]) for q in ids]


def paired_difference(a: Mapping[str, float] | None, b: Mapping[str, float] | None) -> float | None:
    """The mean of `a` minus `b` over the questions both have a finite value for: which way the pairs
    `paired_pvalue` tests lean, which each column's mean over its own questions need not show. None
    when no question pairs up.

    >>> paired_difference({"q1": 0.5, "q2": 1.0, "q3": 1.0}, {"q1": 0.75, "q2": 0.25}), paired_difference({"q1": 1.0}, {})
    (0.25, None)
    """
    x, y = _paired(a, b)
    return sum(x) / len(x) - sum(y) / len(y) if x else None


def paired_pvalue(a: Mapping[str, float] | None, b: Mapping[str, float] | None, binary: bool = False) -> dict | None:
    """The two-sided p-value of a paired test of two columns ({question id: value}) over the questions
    both have a finite value for: McNemar's exact test when `binary` and every value is 0 or 1 (exact
    match), else the sign-flip permutation test (`RESAMPLES` sign assignments drawn from `SEED`, so the
    same numbers give the same p). {"p", "n", "test"}; None when no question pairs up.

    >>> paired_pvalue({"q1": 1.0, "q2": 1.0}, {"q1": 0.0, "q2": 0.0, "q3": 1.0}, binary=True)
    {'p': 0.5, 'n': 2, 'test': 'mcnemar'}
    >>> paired_pvalue({"q1": 0.5}, {"q2": 0.5}) is None
    True
    """
    x, y = _paired(a, b)
    if not x:
        return None
    if binary and set(x) | set(y) <= {0.0, 1.0}:
        return {"p": mcnemar([v == 1.0 for v in x], [v == 1.0 for v in y], method="exact")["pvalue"], "n": len(x),
                "test": "mcnemar"}
    return {"p": sign_flip_test(x, y, "two-sided", RESAMPLES, SEED)["pvalue"], "n": len(x), "test": "sign_flip"}


def _sources(columns: Columns, name: Name, t: Messages) -> str:
    """'; wrong claims come more from the passages than from nowhere for a (0.300 against 0.100), ...':
    the columns grouped by where their wrong claims come from more, a passage (noise sensitivity in
    relevant plus irrelevant ones) or nowhere (hallucination)."""
    groups: dict[str, list[str]] = {}
    for label, col in columns.items():
        rel, irr, hal = (_mean(col, s) for s in ("noise_sensitivity_in_relevant", "noise_sensitivity_in_irrelevant",
                                                  "hallucination"))
        if None in (rel, irr, hal) or _f(rel + irr) == _f(hal) == _f(0.0):
            continue  # no wrong claim from either side: "as much from the passages as from nowhere (0.000 against 0.000)"
        noise = rel + irr
        # compared as printed: 0.1 + 0.2 is above 0.3 in floats, "more from the passages (0.300 against 0.300)"
        shown, hal_shown = float(_f(noise)), float(_f(hal))
        where = (t("cl.src.passages") if shown > hal_shown else t("cl.src.nowhere") if hal_shown > shown
                 else t("cl.src.even"))
        item = (t("cl.src.item_named", who=name(label), noise=_f(noise), hal=_f(hal)) if len(columns) > 1
                else t("cl.src.item", noise=_f(noise), hal=_f(hal)))
        groups.setdefault(where, []).append(item)
    if not groups:
        return ""
    group = "cl.src.group_many" if len(columns) > 1 else "cl.src.group_one"
    return t("cl.src.lead") + t.join((t(group, where=where, items=t.join(items)) for where, items in groups.items()),
                                     "sep.clause")


def _all_zero(columns: Columns, short: str) -> bool:
    """Whether every column's mean of `short` is 0 (a column without one, shown "–", is not)."""
    means = [_mean(col, short) for col in columns.values()]
    return bool(means) and all(m == 0 for m in means)


def _short_answers(columns: Columns, t: Messages) -> str:
    """Why recall is 0 in every column, when it is, naming F1 and context utilization where they are 0
    too (F1 has no value where precision has none: an answer without claims): these metrics need the
    answer to state whole reference claims, which a short answer (a name, a year) never does; a reader
    would otherwise take 0 for a broken metric or a model that answers nothing."""
    if not _all_zero(columns, "recall"):
        return ""
    cu = _all_zero(columns, "context_utilization")
    also = (t("cl.zero.f1", and_cu=t("cl.and_cu") if cu else "") if _all_zero(columns, "f1")
            else t("cl.zero.cu") if cu else "")
    return t("cl.short_answers", what=t("cl.zero.recall") + also)


def _sentence(columns: Columns, name: Name, head: str, shorts: tuple[str, ...], *tails: str, t: Messages) -> str:
    """'head: listing tails.', or 'head: no question has a value.' when no column has one."""
    if all(_mean(col, s) is None for col in columns.values() for s in shorts):
        return t("cl.none", head=head)
    return t("cl.sentence", head=head, listing=_listing(columns, shorts, name, t), tails="".join(dict.fromkeys(tails)))


def claim_sentences(columns: Columns, name: Name, lang: str = "en", scores: Scores | None = None) -> list[str]:
    """One sentence per metric group: what the group measures, each column's means, and which column
    stands out; where several columns hold numbers, the comparisons are computed from them, and with
    `scores` (each column's per-question values) an end is named only where a paired test sets it
    apart (`_ranking`)."""
    if not columns:
        return []
    t = messages(lang)

    def ext(short: str, most: str = "cl.highest", least: str = "cl.lowest") -> str:
        return _extremes(columns, (short,), name, t(most), t(least), t, scores)

    def sentence(head: str, shorts: tuple[str, ...], *tails: str) -> str:
        return _sentence(columns, name, t(head), shorts, *tails, t=t)

    noise = ("noise_sensitivity_in_relevant", "noise_sensitivity_in_irrelevant")
    # the heading's own measure: a wrong claim copied from a retrieved passage, relevant or not
    copied = _ends(columns, noise, name, t("cl.copies_most"), t("cl.the_least"), t, scores)
    return [
        sentence("cl.head.prf", ("precision", "recall", "f1"), ext("precision", "cl.most_precise", "cl.least"),
                 "" if _all_zero(columns, "recall") else ext("recall", "cl.most_complete", "cl.least"))
        + _short_answers(columns, t),
        sentence("cl.head.retrieval", ("claim_recall", "context_precision"),
                 _each_extremes(columns, ("claim_recall", "context_precision"), name, t, scores)),
        sentence("cl.head.utilization", ("context_utilization",), ext("context_utilization", "cl.uses_most", "cl.the_least")),
        sentence("cl.head.noise", noise, t("cl.paren", inner=t("cl.noise_total", ranking=copied)) if copied else ""),
        sentence("cl.head.hallucination", ("hallucination",), ext("hallucination"), _sources(columns, name, t)),
        sentence("cl.head.self_knowledge", ("self_knowledge",), ext("self_knowledge")),
        sentence("cl.head.faithfulness", ("faithfulness",), ext("faithfulness")),
    ]


def _confidence(columns: Columns) -> float:
    for col in columns.values():
        for summary in col.values():
            if (summary.get("interval") or {}).get("confidence"):
                return summary["interval"]["confidence"]
    return 0.95


def _column(label: str, t: Messages, lone: bool) -> str:
    """A column's heading: the system, or for a run without systems (`lone`: its one column) "all" in the
    report's language; a system named "all" beside others keeps its name."""
    return t("cl.column.all") if lone and label == "all" else label


def claims_markdown(columns: Columns, name: Name, title: str | None = None, lang: str = "en",
                    scores: Scores | None = None) -> list[str]:
    """The section as Markdown lines (none without columns); `name` writes a column's label, Markdown-safe;
    `scores`: each column's per-question values, which the sentences' highest and lowest are tested on."""
    if not columns:
        return []
    t = messages(lang)
    pct = f"{_confidence(columns):.0%}"
    lines = [f"## {title or t('cl.title')}", "", t("cl.intro", pct=pct), "",
             f"| {t('col.metric')} | " + " | ".join(name(_column(c, t, len(columns) == 1)) for c in columns) + " |",
             "|---|" + "---:|" * len(columns)]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(columns, lang)]
    tested = [t("cl.tested", level=LEVEL, resamples=RESAMPLES, seed=SEED)] if scores is not None and len(columns) > 1 else []
    return lines + [""] + [f"- {s}" for s in claim_sentences(columns, name, lang, scores)] + tested


def claims_html(columns: Columns, lang: str = "en") -> str:
    """The section as an HTML card (empty without columns); every text escaped."""
    if not columns:
        return ""
    t = messages(lang)
    esc = html.escape
    pct = f"{_confidence(columns):.0%}"
    head = "".join(f'<th scope="col">{esc(_column(label, t, len(columns) == 1))}</th>' for label in columns)
    rows = "".join(f'<tr><th scope="row">{esc(label)}</th>' + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>"
                   for label, *cells in table_rows(columns, lang))
    sentences = "".join(f"<li>{esc(s)}</li>" for s in claim_sentences(columns, str, lang))
    return (f'<section id="claims" class="card claims"><h2>{esc(t("cl.title"))}</h2>'
            f'<p class="hint">{esc(t("cl.intro", pct=pct))}</p>'
            f'<div class="scroll"><table class="grid"><thead><tr><th>{esc(t("col.metric"))}</th>{head}</tr></thead>'
            f'<tbody>{rows}</tbody></table></div><ul class="claim-notes">{sentences}</ul></section>')
