"""The "claim-level diagnostics" section of the reports: RAGChecker's metrics (`lewisrag.eval.claims`)
per system side by side, each mean with its bootstrap interval, and one sentence per metric group
written from the numbers.

A column is {claims.<metric>: summary}, the summary holding at least "n", "nan", "mean" and
"interval" {"low", "high", "confidence"}: an entry of results.json's aggregates
(`evaluator.claim_aggregates`) or its `claim_summary`. Columns are labelled by system ("all" for a
run of one); `report.md`
of `eval answers`, report.html, `lewisrag compare` and the reproduce report all render through here.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping

from lewisrag.eval.results import CLAIM_METRICS, CLAIMS_PREFIX

Columns = Mapping[str, Mapping[str, Mapping]]  # label -> {claims.<metric>: summary}
Name = Callable[[str], str]  # how a sentence writes a column's label

LABELS = {  # claims.<metric> -> its row label
    "claims.precision": "precision", "claims.recall": "recall", "claims.f1": "F1", "claims.claim_recall": "claim recall",
    "claims.context_precision": "context precision", "claims.context_utilization": "context utilization",
    "claims.noise_sensitivity_in_relevant": "noise sensitivity (relevant)",
    "claims.noise_sensitivity_in_irrelevant": "noise sensitivity (irrelevant)", "claims.hallucination": "hallucination",
    "claims.self_knowledge": "self-knowledge", "claims.faithfulness": "faithfulness",
}
INTRO = ("RAGChecker's diagnostics (Ru et al. 2024) on claims: each claim of the answer is checked against the "
         "reference (right or wrong) and against each retrieved passage on its own; each reference claim against the "
         "answer and the passages. Means over questions, with a {pct} percentile bootstrap interval; a question "
         "whose metric has no denominator (no claims, no reference) is left out, its reason in the record.")


def claim_summary(dist: Mapping) -> dict:
    """The part of an aggregate the section shows: n, nan, mean and interval.

    >>> claim_summary({"n": 2, "nan": 1, "mean": 0.5, "median": 0.5, "interval": {"low": 0.0, "high": 1.0}})
    {'n': 2, 'nan': 1, 'mean': 0.5, 'interval': {'low': 0.0, 'high': 1.0}}
    """
    return {k: dist[k] for k in ("n", "nan", "mean", "interval")}


def claim_columns(aggregates: Mapping) -> dict[str, dict]:
    """Columns from results.json's aggregates: one per system when there are several, else one ("all");
    none when the run has no claim diagnostics."""
    by_system = aggregates.get("by_system") or {}
    if any(CLAIM_METRICS[0] in v for v in by_system.values()):
        return {s: _claims_of(v) for s, v in by_system.items()}
    mine = _claims_of(aggregates)
    return {"all": mine} if mine else {}


def _claims_of(aggregates: Mapping) -> dict:
    return {m: aggregates[m] for m in CLAIM_METRICS if isinstance(aggregates.get(m), Mapping)}


def _mean(col: Mapping, short: str) -> float | None:
    return (col.get(CLAIMS_PREFIX + short) or {}).get("mean")


def _f(x) -> str:
    return "–" if x is None else f"{x:.3f}"


def cell(summary: Mapping | None) -> str:
    """'0.500 [0.250, 0.750] n=4': the mean, its interval and the questions it averages.

    >>> cell({"n": 4, "mean": 0.5, "interval": {"low": 0.25, "high": 0.75}}), cell({"n": 0, "mean": None})
    ('0.500 [0.250, 0.750] n=4', '– n=0')
    """
    if not summary:
        return "–"
    ci = summary.get("interval") or {}
    interval = f" [{_f(ci['low'])}, {_f(ci['high'])}]" if ci.get("low") is not None else ""
    return f"{_f(summary.get('mean'))}{interval} n={summary.get('n', 0)}"


def _listing(columns: Columns, shorts: tuple[str, ...], name: Name) -> str:
    """'a 0.300 / 0.100, b 0.200 / 0.000': each column's means of `shorts` (no label for a lone column)."""
    label = (lambda c: f"{name(c)} ") if len(columns) > 1 else (lambda c: "")
    return ", ".join(label(c) + " / ".join(_f(_mean(col, s)) for s in shorts) for c, col in columns.items())


def _extremes(columns: Columns, short: str, name: Name, most: str, least: str) -> str:
    """' (most for `a`, least for `b`)' over the columns with a value; '' for fewer than two."""
    known = {label: v for label, col in columns.items() if (v := _mean(col, short)) is not None}
    if len(known) < 2:
        return ""
    top, bottom = max(known, key=known.get), min(known, key=known.get)
    if known[top] == known[bottom]:
        return " (the same for every one)"
    return f" ({most} {name(top)}, {least} {name(bottom)})"


def _sources(columns: Columns, name: Name) -> str:
    """'; wrong claims come more from the passages than from nowhere for a (0.300 against 0.100), ...':
    the columns grouped by where their wrong claims come from more, a passage (noise sensitivity in
    relevant plus irrelevant ones) or nowhere (hallucination)."""
    groups: dict[str, list[str]] = {}
    for label, col in columns.items():
        rel, irr, hal = (_mean(col, s) for s in ("noise_sensitivity_in_relevant", "noise_sensitivity_in_irrelevant",
                                                  "hallucination"))
        if None in (rel, irr, hal):
            continue
        noise = rel + irr
        where = ("more from the passages than from nowhere" if noise > hal else "more from nowhere than from the passages"
                 if hal > noise else "as much from the passages as from nowhere")
        who = f"{name(label)} " if len(columns) > 1 else ""
        groups.setdefault(where, []).append(f"{who}({_f(noise)} against {_f(hal)})")
    if not groups:
        return ""
    many = len(columns) > 1
    return "; wrong claims come " + "; ".join(f"{where} {'for ' if many else ''}{', '.join(items)}"
                                              for where, items in groups.items())


def _sentence(columns: Columns, name: Name, head: str, shorts: tuple[str, ...], *tails: str) -> str:
    """'head: listing tails.', or 'head: no question has a value.' when no column has one."""
    if all(_mean(col, s) is None for col in columns.values() for s in shorts):
        return f"{head}: no question has a value."
    return f"{head}: {_listing(columns, shorts, name)}{''.join(dict.fromkeys(tails))}."


def claim_sentences(columns: Columns, name: Name) -> list[str]:
    """One sentence per metric group: what the group measures, each column's means, and which column
    stands out; where several columns hold numbers, the comparisons are computed from them."""
    if not columns:
        return []

    def ext(short: str, most: str = "highest for", least: str = "lowest for") -> str:
        return _extremes(columns, short, name, most, least)

    def sentence(head: str, shorts: tuple[str, ...], *tails: str) -> str:
        return _sentence(columns, name, head, shorts, *tails)

    return [
        sentence("Precision / recall / F1 (right claims among the answer's; reference claims the answer states)",
                 ("precision", "recall", "f1"), ext("precision", "most precise:", "least:"),
                 ext("recall", "most complete:", "least:")),
        sentence("Claim recall / context precision (reference claims some passage holds; passages holding a reference "
                 "claim)", ("claim_recall", "context_precision"), ext("claim_recall")),
        sentence("Context utilization (of what the passages hold, how much the answer uses)", ("context_utilization",),
                 ext("context_utilization", "uses the most:", "the least:")),
        sentence("Noise sensitivity in relevant / irrelevant passages (a wrong claim copied from a retrieved passage)",
                 ("noise_sensitivity_in_relevant", "noise_sensitivity_in_irrelevant"),
                 ext("noise_sensitivity_in_relevant", "copies the most:", "the least:")),
        sentence("Hallucination (a wrong claim in no passage)", ("hallucination",), ext("hallucination"),
                 _sources(columns, name)),
        sentence("Self-knowledge (a right claim in no passage: from the model's own parameters)", ("self_knowledge",),
                 ext("self_knowledge")),
        sentence("Faithfulness (a claim some passage holds; with hallucination and self-knowledge it makes 1)",
                 ("faithfulness",), ext("faithfulness")),
    ]


def _confidence(columns: Columns) -> float:
    for col in columns.values():
        for summary in col.values():
            if (summary.get("interval") or {}).get("confidence"):
                return summary["interval"]["confidence"]
    return 0.95


def claims_markdown(columns: Columns, name: Name, title: str = "Claim-level diagnostics") -> list[str]:
    """The section as Markdown lines (none without columns); `name` writes a column's label, Markdown-safe."""
    if not columns:
        return []
    pct = f"{_confidence(columns):.0%}"
    lines = [f"## {title}", "", INTRO.format(pct=pct), "",
             "| metric | " + " | ".join(map(name, columns)) + " |", "|---|" + "---:|" * len(columns)]
    lines += ["| " + LABELS[m] + " | " + " | ".join(cell(col.get(m)) for col in columns.values()) + " |" for m in CLAIM_METRICS]
    return lines + [""] + [f"- {s}" for s in claim_sentences(columns, name)]


def claims_html(columns: Columns) -> str:
    """The section as an HTML card (empty without columns); every text escaped."""
    if not columns:
        return ""
    esc = html.escape
    pct = f"{_confidence(columns):.0%}"
    head = "".join(f'<th scope="col">{esc(label)}</th>' for label in columns)
    rows = "".join(f'<tr><th scope="row">{esc(LABELS[m])}</th>'
                   + "".join(f"<td>{esc(cell(col.get(m)))}</td>" for col in columns.values()) + "</tr>"
                   for m in CLAIM_METRICS)
    sentences = "".join(f"<li>{esc(s)}</li>" for s in claim_sentences(columns, str))
    return (f'<section id="claims" class="card claims"><h2>Claim-level diagnostics</h2>'
            f'<p class="hint">{esc(INTRO.format(pct=pct))}</p>'
            f'<div class="scroll"><table class="grid"><thead><tr><th>metric</th>{head}</tr></thead><tbody>{rows}</tbody>'
            f'</table></div><ul class="claim-notes">{sentences}</ul></section>')
