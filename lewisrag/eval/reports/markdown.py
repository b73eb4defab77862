"""report.md for an evaluation run: per-layer tables, score distributions, and the questions to read.

Pure functions from the results.json object to Markdown text; the command writes the file. Text
from the run (ids, system names, statements, judge names) is escaped on the way in, so an id like
`<script>` or `*q1*` shows as written and never becomes markup in the file or in a renderer.
"""

from __future__ import annotations

import html
import re

from lewisrag.eval.diagnose import LAYERS
from lewisrag.eval.reports.claims import claim_columns, claims_markdown
from lewisrag.eval.reports.distributions import distribution_markdown, situations_markdown

LAYER_METRICS = (  # (layer, metric keys shown for it)
    ("retrieval", ("recall_at_k", "context_recall")),
    ("generation_not_used", ("answer_completeness",)),
    ("generation_distorted", ("faithfulness",)),
    ("generation_off_topic", ("on_topic_rate", "answer_relevancy")),
    ("citation", ("citation_recall", "citation_precision")),
)


class Markdown(str):
    """Text that is already Markdown (a cell with **bold**): `fmt` leaves it as it is."""


# Markdown punctuation that can open markup inside a line (an underscore only at a word edge:
# snake_case stays readable and cannot turn into emphasis); `&`, `<`, `>` become HTML entities.
_MARKUP = re.compile(r"[\\`*\[\]|~]|(?<!\w)_|_(?!\w)")


def escape(text) -> str:
    r"""Text from a run, made inert in Markdown and in HTML, on one line.

    >>> print(escape("<script>alert(1)</script> *q1* | _x_ snake_case"))
    &lt;script&gt;alert(1)&lt;/script&gt; \*q1\* \| \_x\_ snake_case
    """
    return html.escape(_MARKUP.sub(lambda m: "\\" + m.group(0), str(text)), quote=False).replace("\n", " ")


def code(text) -> str:
    """An inline code span that `text` cannot close early: its fence outruns every backtick run in it.

    >>> print(code("a`b"), code("plain"))
    ``a`b`` `plain`
    """
    text = str(text).replace("\n", " ")
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def fmt(v) -> str:
    """A table cell: numbers with 3 decimals, "–" for null, text escaped.

    >>> fmt(1 / 3), fmt(None), fmt({"1": 0.0, "5": 1.0}), fmt("<b>q1</b>")
    ('0.333', '–', '@1 0.000, @5 1.000', '&lt;b&gt;q1&lt;/b&gt;')
    """
    if isinstance(v, Markdown):
        return v
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, dict):
        return ", ".join(f"@{escape(k)} {fmt(x)}" for k, x in v.items())
    return escape(v)


def table(columns: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join(fmt(c) for c in r) + " |" for r in rows]


def render_results(results: dict) -> str:
    """The run's report: header, distributions, claim-level diagnostics, layers, primary causes, citations, refusals."""
    judge, agg, recs = results["judge"], results["aggregates"], results["records"]
    out = ["# lewisrag evaluation", "",
           f"- judge: {code(judge['name'])} fingerprint {code(judge['fingerprint'][:16])}"
           + (f", model {code(judge['model'])}" if "model" in judge else ""),
           f"- splitter: {code(results['splitter']['name'])} version {code(results['splitter']['version'])}",
           f"- records: {len(recs)} ({agg['not_in_kb']['n']} not_in_kb, asserted apart)", "",
           distribution_markdown(agg, title="Score distributions (question level)").rstrip("\n"), "",
           "null = could not be computed (see each record's nan_reasons)."]
    claims = claims_markdown(claim_columns(agg), escape)
    out += ["", *claims] if claims else []
    out += ["", "## Layers per question", "", "Primary cause in **bold**; later failing layers are its consequences.", ""]
    rows = []
    for r in recs:
        if r.get("category") == "not_in_kb":
            continue
        m, d = r["metrics"], r["diagnosis"]
        cells = [r["id"], r.get("system")]
        for layer, keys in LAYER_METRICS:
            shown = " / ".join(fmt(m.get(k)) for k in keys if k in m and (m.get(k) is not None or len(keys) == 1))
            verdict = d["layers"][layer]
            cells.append(Markdown(f"**{verdict}** {shown}" if d["primary"] == layer else f"{verdict} {shown}"))
        rows.append(cells)
    out += table(["id", "system", *LAYERS], rows)
    counts = agg.get("primary_cause_counts", {})
    out += ["", "## Primary causes", ""] + table(["layer", "questions"], [[k, counts.get(k, 0)] for k in (*LAYERS, "none") if counts.get(k)])
    out += ["", "## Citation rule checks", "",
            "BAD_ID, MISSING_CITATION and QUOTE_NOT_FOUND are hard gates (must be 0); the rest only approximate support.", ""]
    out += table(["status", "sentences"], [[k, v] for k, v in agg["citation_status_counts"].items()])
    nik = agg["not_in_kb"]
    out += ["", "## not_in_kb questions (must refuse)", "", f"{nik['refused']} of {nik['n']} refused."]
    if nik["not_refused_ids"]:
        out.append("Did not refuse: " + ", ".join(code(i) for i in nik["not_refused_ids"]))
    out += ["", "## Unsupported statements", ""]
    bad = [[r["id"], s["text"], s["reason"]] for r in recs for s in r["statements"] if s["supported"] is False]
    out += table(["id", "statement", "judge's reason"], bad) if bad else ["None."]
    out += ["", situations_markdown().rstrip("\n")]
    return "\n".join(out) + "\n"


def render_bughunt(result: dict) -> str:
    """The BugHunt walk-through as Markdown: preset answers, granularity, rule checker table."""
    out = ["# BugHunt sample", "", f"Question: {escape(result['question'])}", "",
           f"Judge: {code(result['judge']['name'])} (fingerprint {code(result['judge']['fingerprint'][:16])})", ""]
    out += bughunt_answer_table(result) + ["", "## Faithfulness moves with granularity", ""]
    out += table(["answer", "split", "statements", "supported", "faithfulness"], granularity_rows(result))
    t = result["rule_checker"]["table"]
    out += ["", "## Rule checker vs human citation labels", ""]
    out += table(list(t), [list(t.values())])
    out += ["", "| answer | sentence | status | human | outcome |", "|---|---|---|---|---|"]
    out += ["| " + " | ".join(fmt(r[k]) for k in ("answer", "sentence", "status", "citation_ok", "outcome")) + " |"
            for r in result["rule_checker"]["rows"]]
    return "\n".join(out) + "\n"


BUGHUNT_COLUMNS = ["answer", "faithful", "context recall", "complete", "on-topic", "citation R", "citation P",
                   "primary cause", "consequences"]


def bughunt_answer_table(result: dict) -> list[str]:
    return table(BUGHUNT_COLUMNS, bughunt_answer_rows(result))


def bughunt_answer_rows(result: dict) -> list[list]:
    rows = []
    for a in result["records"]:
        m = a["metrics"]
        rows.append([a["name"], m["faithfulness"], m["context_recall"], m["answer_completeness"], m["on_topic_rate"],
                     m["citation_recall"], m["citation_precision"], a["diagnosis"]["primary"] or "none",
                     ", ".join(a["diagnosis"]["consequences"]) or "–"])
    return rows


def granularity_rows(result: dict) -> list[list]:
    return [[a["name"], level, g["statements"], g["supported"], g["faithfulness"]]
            for a in result["records"] for level, g in a["granularity"].items() if len(a["granularity"]) > 1]
