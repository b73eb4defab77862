"""report.md for an evaluation run: per-layer tables, score distributions, and the questions to read.

Pure functions from the results.json object to Markdown text; the command writes the file. Text
from the run (ids, system names, statements, judge names) is escaped on the way in, so an id like
`<script>` or `*q1*` shows as written and never becomes markup in the file or in a renderer.
Headings, labels and sentences come from `reports.i18n` in the report's language (`lang`).
"""

from __future__ import annotations

import html
import re

from lewisrag.eval.diagnose import CAUSES, LAYERS
from lewisrag.eval.reports.claims import claim_columns, claim_scores, claims_markdown
from lewisrag.eval.reports.distributions import CONFIDENCE, distribution_markdown, distribution_table, situations_markdown
from lewisrag.eval.reports.i18n import ENGLISH, Messages, messages

LAYER_METRICS = (  # (layer, metric keys shown for it)
    ("retrieval", ("recall_at_k", "context_recall")),
    ("generation_not_used", ("answer_completeness",)),
    ("generation_distorted", ("faithfulness",)),
    ("generation_off_topic", ("on_topic_rate", "answer_relevancy")),
    ("citation", ("citation_recall", "citation_precision")),
)


class Markdown(str):
    """Text that is already Markdown (a cell with **bold**): `fmt` leaves it as it is."""


# Markdown punctuation that can open markup inside a line (an underscore unless a letter or digit stands on
# both sides of it: snake_case stays readable and cannot turn into emphasis, while the runs of __init__ can,
# since an underscore is a word character); `&`, `<`, `>` become HTML entities.
_MARKUP = re.compile(r"[\\`*\[\]|~]|(?<![^\W_])_|_(?![^\W_])")
_EOL = re.compile(r"\r\n|\r|\n")  # CommonMark's line endings: each would end a table row


def escape(text) -> str:
    r"""Text from a run, made inert in Markdown and in HTML, on one line.

    >>> print(escape("<script>alert(1)</script> *q1* | _x_ snake_case"))
    &lt;script&gt;alert(1)&lt;/script&gt; \*q1\* \| \_x\_ snake_case
    >>> print(escape("Call obj.__init__ or a__b here"))
    Call obj.\_\_init\_\_ or a\_\_b here

    Every CommonMark line ending (\n, \r, \r\n) becomes one space: a bare \r would end a table row too.

    >>> escape("a\rb\r\nc\nd")
    'a b c d'
    """
    return _EOL.sub(" ", html.escape(_MARKUP.sub(lambda m: "\\" + m.group(0), str(text)), quote=False))


def code(text) -> str:
    """An inline code span that `text` cannot close early: its fence outruns every backtick run in it.

    >>> print(code("a`b"), code("plain"), code("a\\rb\\r\\nc"))
    ``a`b`` `plain` `a b c`
    """
    text = _EOL.sub(" ", str(text))
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def fmt(v, t: Messages = ENGLISH) -> str:
    """A table cell: numbers with 3 decimals, "–" for null, yes/no in `t`'s language, text escaped.

    >>> fmt(1 / 3), fmt(None), fmt({"1": 0.0, "5": 1.0}), fmt("<b>q1</b>"), fmt(True, messages("zh"))
    ('0.333', '–', '@1 0.000, @5 1.000', '&lt;b&gt;q1&lt;/b&gt;', '是')
    """
    if isinstance(v, Markdown):
        return v
    if v is None:
        return "–"
    if isinstance(v, bool):
        return t("yes") if v else t("no")
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, dict):
        return ", ".join(f"@{escape(k)} {fmt(x, t)}" for k, x in v.items())
    return escape(v)


def table(columns: list[str], rows: list[list], t: Messages = ENGLISH) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join(fmt(c, t) for c in r) + " |" for r in rows]


def _layer(t: Messages, layer: str) -> str:
    """A layer's column or row name: its key in English (as the report always wrote it), its label in Chinese."""
    return layer if t.lang == "en" else t.word("layer", layer)


def render_results(results: dict, lang: str = "en", plots_in_english: bool = False) -> str:
    """The run's report: header, distributions, claim-level diagnostics, layers, primary causes, citations,
    refusals. A run of several systems (`aggregates.by_system`) says so and shows each system apart.
    `plots_in_english`: the run's plots kept English labels (no CJK font: `i18n.cjk_font`), which a report
    in another language says under its distributions."""
    from lewisrag.eval.evaluator import NO_SYSTEM  # here: the evaluator's imports are not the reproduce report's

    t = messages(lang)
    judge, agg, recs = results["judge"], results["aggregates"], results["records"]
    systems = agg.get("by_system") or {}

    def system(r: dict):
        """A record's system as the aggregates group it (`by_system`): the records naming none are NO_SYSTEM."""
        return NO_SYSTEM if systems and r.get("system") is None else r.get("system")

    out = [t("md.title"), "",
           t("md.judge", name=code(judge["name"]), fingerprint=code(judge["fingerprint"][:16]))
           + (t("md.judge_model", model=code(judge["model"])) if "model" in judge else ""),
           t("md.splitter", name=code(results["splitter"]["name"]), version=code(results["splitter"]["version"])),
           t("md.records", n=len(recs), nik=agg["not_in_kb"]["n"])]
    if systems:
        out.append(t("md.systems", n=len(systems), names=t.join(map(code, systems), "sep.enum")))
    out += ["", *_distributions(agg, t), "", t("md.null")]
    out += ["", t("rep.plots.no_cjk")] if plots_in_english and t.lang != "en" else []
    # each system's per-question values: a column is named highest or lowest only where a paired test sets it apart
    scored = (r for r in recs if r.get("category") != "not_in_kb")  # the records the aggregates average
    scores = claim_scores(scored, lambda r: str(system(r))) if systems else None
    claims = claims_markdown(claim_columns(agg), escape, lang=lang, scores=scores)
    out += ["", *claims] if claims else []
    out += ["", t("md.layers.h"), "", t("md.layers.note"), ""]
    rows = []
    for r in recs:
        if r.get("category") == "not_in_kb":
            continue
        m, d = r["metrics"], r["diagnosis"]
        cells = [r["id"], system(r)]
        for layer, keys in LAYER_METRICS:
            shown = " / ".join(fmt(m.get(k), t) for k in keys if k in m and (m.get(k) is not None or len(keys) == 1))
            verdict = t.word("verdict", d["layers"][layer])
            blamed = layer in CAUSES.get(d["primary"], ())
            cells.append(Markdown(f"**{verdict}** {shown}" if blamed else f"{verdict} {shown}"))
        rows.append(cells)
    out += table(["id", t("col.system"), *(_layer(t, layer) for layer in LAYERS)], rows, t)
    counts = agg.get("primary_cause_counts", {})
    causes = [k for k in (*CAUSES, "none") if counts.get(k)] + [k for k in counts if k not in CAUSES and k != "none"]
    columns, rows = count_columns(agg, "primary_cause_counts", causes, t("col.questions"), t, escape)
    out += ["", t("md.causes.h"), ""] + table([t("col.layer"), *columns], [[_layer(t, k), *c] for k, *c in rows], t)
    out += ["", t("md.citations.h"), "", t("md.citations.note"), ""]
    columns, rows = count_columns(agg, "citation_status_counts", list(agg["citation_status_counts"]), t("col.sentences"), t, escape)
    out += table([t("col.status"), *columns], rows, t)
    nik = agg["not_in_kb"]
    out += ["", t("md.nik.h"), "", t("md.nik.count", refused=nik["refused"], n=nik["n"])]
    for name, mine in systems.items():  # ids repeat across systems: each system names its own
        own = mine["not_in_kb"]
        count = t("md.nik.count", refused=own["refused"], n=own["n"])
        out.append(t("md.nik.system_missed", name=code(name), count=count, missed=_missed(own, t))
                   if own["not_refused_ids"] else t("md.nik.system", name=code(name), count=count))
    if not systems and nik["not_refused_ids"]:
        out.append(_missed(nik, t))
    out += ["", t("md.unsupported.h"), ""]
    bad = [[r["id"], *([system(r)] if systems else []), s["text"], t.text(s["reason"])]
           for r in recs for s in r["statements"] if s["supported"] is False]
    columns = ["id", *([t("col.system")] if systems else []), t("col.statement"), t("md.unsupported.reason")]
    out += table(columns, bad, t) if bad else [t("md.none")]
    out += ["", situations_markdown(lang=lang).rstrip("\n")]
    return "\n".join(out) + "\n"


def _missed(nik: dict, t: Messages) -> str:
    return t("md.nik.missed") + t.join((code(i) for i in nik["not_refused_ids"]), "sep.enum")


def _distributions(agg: dict, t: Messages) -> list[str]:
    """The score distributions: the run's table, or one table per system when it held several."""
    if "by_system" not in agg:
        return distribution_markdown(agg, title=t("dist.title_eval"), lang=t.lang).rstrip("\n").split("\n")
    out = [f"## {t('dist.title_eval')}", "", t("dist.intro", pct=f"{CONFIDENCE:.0%}")]
    for name, mine in agg["by_system"].items():
        out += ["", f"### {code(name)}", "", *distribution_table(mine, lang=t.lang)]
    return out


def count_columns(agg: dict, field: str, keys: list[str], what: str, t: Messages, name=str) -> tuple[list[str], list[list]]:
    """The counts of `agg[field]` (primary causes, citation statuses) for `keys`: one column `what`, or
    one per system when the run held several (`agg["by_system"]`, each system's name written by `name`).
    Returns (the column names, the rows [key, count, ...]).

    >>> count_columns({"c": {"x": 2}, "by_system": {"a": {"c": {"x": 2}}, "b": {"c": {}}}}, "c", ["x"], "n", ENGLISH)
    (['n: a', 'n: b'], [['x', 2, 0]])
    """
    systems = agg.get("by_system")
    if not systems:
        return [what], [[k, agg[field].get(k, 0)] for k in keys]
    return ([t("col.of_system", what=what, system=name(s)) for s in systems],
            [[k, *(mine[field].get(k, 0) for mine in systems.values())] for k in keys])


def render_bughunt(result: dict, lang: str = "en", plots_in_english: bool = False) -> str:
    """The BugHunt walk-through as Markdown: preset answers, granularity, rule checker table.
    `plots_in_english`: as `render_results`'s (distributions.png kept English labels), said at the end."""
    t = messages(lang)
    out = [t("bh.title"), "", t("bh.question", question=escape(result["question"])), "",
           t("bh.judge", name=code(result["judge"]["name"]), fingerprint=code(result["judge"]["fingerprint"][:16])), ""]
    out += bughunt_answer_table(result, lang) + ["", t("bh.granularity.h"), ""]
    out += table(granularity_columns(lang), granularity_rows(result, lang), t)
    counts = result["rule_checker"]["table"]
    out += ["", t("bh.rules.h"), ""]
    out += table([t.word("bh.outcome", k) for k in counts], [list(counts.values())], t)
    out += ["", "| " + " | ".join(t(k) for k in ("col.answer", "bh.col.sentence", "col.status", "bh.col.human", "bh.col.outcome"))
            + " |", "|---|---|---|---|---|"]
    out += ["| " + " | ".join(fmt(v, t) for v in (t.word("bh.answer", r["answer"]), r["sentence"], r["status"], r["citation_ok"],
                                                  t.word("bh.outcome", r["outcome"]))) + " |"
            for r in result["rule_checker"]["rows"]]
    out += ["", t("rep.plots.no_cjk")] if plots_in_english and t.lang != "en" else []
    return "\n".join(out) + "\n"


BUGHUNT_COLUMN_IDS = ("col.answer", "bh.col.faithful", "bh.col.context_recall", "bh.col.complete", "bh.col.on_topic",
                      "bh.col.citation_r", "bh.col.citation_p", "bh.col.primary", "bh.col.consequences")


def bughunt_columns(lang: str = "en") -> list[str]:
    return [messages(lang)(c) for c in BUGHUNT_COLUMN_IDS]


def granularity_columns(lang: str = "en") -> list[str]:
    t = messages(lang)
    return [t(c) for c in ("col.answer", "bh.col.split", "bh.col.statements", "bh.col.supported", "page.col.faithfulness")]


def bughunt_answer_table(result: dict, lang: str = "en") -> list[str]:
    return table(bughunt_columns(lang), bughunt_answer_rows(result, lang), messages(lang))


def bughunt_answer_rows(result: dict, lang: str = "en") -> list[list]:
    t = messages(lang)
    rows = []
    for a in result["records"]:
        m, d = a["metrics"], a["diagnosis"]
        rows.append([t.word("bh.answer", a["name"]), m["faithfulness"], m["context_recall"], m["answer_completeness"],
                     m["on_topic_rate"], m["citation_recall"], m["citation_precision"], _layer(t, d["primary"] or "none"),
                     t.join((_layer(t, c) for c in d["consequences"]), "sep.enum") or "–"])
    return rows


def granularity_rows(result: dict, lang: str = "en") -> list[list]:
    t = messages(lang)
    return [[t.word("bh.answer", a["name"]), t.word("level", level), g["statements"], g["supported"], g["faithfulness"]]
            for a in result["records"] for level, g in a["granularity"].items() if len(a["granularity"]) > 1]
