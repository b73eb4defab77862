"""report.html: one self-contained, offline teaching page for an evaluation run.

The learner picks a question and a system (or, for the BugHunt sample, a preset answer), judges each
statement of the answer against the retrieved passages, watches their own faithfulness move, then
reveals the reference verdicts, the other layers' metrics and the failure chain with its primary cause.

Everything the page needs travels inside the one file: the CSS and JS in lewisrag/eval/reports/assets/
are inlined, and the page data is a JSON block whose `<`, `>`, `&`, U+2028 and U+2029 are written as
\\u escapes, so no passage can close the script element. The JS writes every text with textContent.
The heatmap of document posteriors per generated token (RAG-Token runs) is rendered here, in Python,
with every text escaped, and only shown or hidden by the JS; so is the run's claim-level diagnostics
table (`reports.claims`).

The page is written in the page data's "lang" (English by default, or Chinese: `<html lang="zh-CN">`).
Its own text comes from `reports.i18n`: page.html's `{{t:ID}}` placeholders are filled (escaped, unless
the id ends in `_html`), and what the JS writes travels in the page data as "messages".
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from lewisrag.eval.diagnose import CAUSE_ORDER, CAUSES
from lewisrag.eval.records import citation_labels
from lewisrag.eval.reports.claims import claim_columns, claims_html, column_summary
from lewisrag.eval.reports.distributions import histogram_figure
from lewisrag.eval.reports.i18n import Messages, messages
from lewisrag.eval.reports.markdown import fmt

LAYER_KEYS = {  # layer -> metric keys shown for it, in the causal order of diagnose.CAUSE_ORDER
    "retrieval": ["recall_at_k", "context_recall"],
    "generation_off_topic": ["on_topic_rate", "answer_relevancy"],
    "generation_distorted": ["faithfulness"],
    "generation_not_used": ["answer_completeness"],
    "citation": ["citation_recall", "citation_precision"],
}
LAYERS = {k: (messages("en").word("layer", k), keys) for k, keys in LAYER_KEYS.items()}  # layer -> (English label, keys)
SHOWN_METRICS = tuple(k for keys in LAYER_KEYS.values() for k in keys)  # every metric the page prints (cards and chain)
_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_PLACEHOLDER = re.compile(r"\{\{(TITLE|CSS|JS|DATA|HEATMAPS|CLAIMS|LANG)\}\}|\{\{t:([\w.]+)\}\}")


def embed_json(data) -> str:
    """JSON that is safe inside a <script> element: no `<`, `>` or `&` survives, and U+2028/2029
    (line breaks to older JS parsers) are escaped too. JSON.parse reads it back unchanged.

    >>> embed_json({"t": "</script><b>&"})
    '{"t": "\\\\u003c/script\\\\u003e\\\\u003cb\\\\u003e\\\\u0026"}'
    """
    text = json.dumps(data, ensure_ascii=False, allow_nan=False)
    # These characters only occur inside JSON strings, where a \\u escape means the same character.
    return re.sub("[<>&\u2028\u2029]", lambda m: _ESCAPES[m.group()], text)


def check_token_posteriors(tp: Mapping) -> dict:
    """Validate {tokens: [T], docs: [K], matrix: [[p] * K] * T}: p(doc k | x, y_<t) per generated token.

    Each row is a distribution over the K retrieved documents, so its values lie in [0, 1] and sum to 1.

    >>> check_token_posteriors({"tokens": ["4", "22"], "docs": ["[1]", "[3]"], "matrix": [[0.9, 0.1], [0.5, 0.5]]})["matrix"]
    [[0.9, 0.1], [0.5, 0.5]]
    """
    tokens, docs, matrix = list(tp.get("tokens", [])), list(tp.get("docs", [])), tp.get("matrix")
    if not isinstance(matrix, list) or len(matrix) != len(tokens) or any(not isinstance(r, list) or len(r) != len(docs) for r in matrix):
        shape = (len(matrix), [len(r) if isinstance(r, list) else None for r in matrix][:3]) if isinstance(matrix, list) else type(matrix).__name__
        raise ValueError(f"token_posteriors.matrix must be (T={len(tokens)}, K={len(docs)}) = tokens x docs, got {shape}")
    for t, row in enumerate(matrix):
        if any(not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0 for p in row) or not math.isclose(sum(row), 1.0, abs_tol=1e-3):
            raise ValueError(f"token_posteriors.matrix row {t} (token {tokens[t]!r}) is not a distribution over the docs: {row}")
    return {"tokens": [str(t) for t in tokens], "docs": [str(d) for d in docs], "matrix": [[float(p) for p in r] for r in matrix]}


def heatmap_html(tp: Mapping, key: str, lang: str = "en") -> str:
    """A table: one row per document, one column per generated token, cell opacity = p(doc | token).

    >>> print(heatmap_html({"tokens": ["a<b"], "docs": ["d1"], "matrix": [[1.0]]}, "0/0").count("<td"))
    1
    """
    tp = check_token_posteriors(tp)
    say = messages(lang)
    esc = html.escape
    head = "".join(f'<th scope="col" class="tok">{esc(t)}</th>' for t in tp["tokens"])
    rows = []
    for k, doc in enumerate(tp["docs"]):
        cells = "".join(
            f'<td style="background: rgba(200, 40, 40, {row[k]:.3f}){"; color: #fff" if row[k] > 0.6 else ""}" title="{esc(doc)} · {esc(tok)}: {row[k]:.3f}">{row[k]:.2f}</td>'
            for tok, row in zip(tp["tokens"], tp["matrix"]))
        rows.append(f'<tr><th scope="row">{esc(doc)}</th>{cells}</tr>')
    return (f'<section class="heatmap card" data-key="{esc(key)}" hidden><h2>{esc(say("html.heatmap.h"))}</h2>'
            f'<p class="hint">{say("html.heatmap.hint_html")}</p>'
            f'<div class="scroll"><table class="heat"><thead><tr><th></th>{head}</tr></thead><tbody>{"".join(rows)}'
            '</tbody></table></div></section>')


def _asset(name: str, inlined: bool = True) -> str:
    text = resources.files("lewisrag.eval.reports.assets").joinpath(name).read_text(encoding="utf-8")
    if inlined and re.search(r"</(script|style)", text, re.IGNORECASE):
        raise ValueError(f"report asset {name} must not contain a closing script/style tag")
    return text


def render_report_html(page_data: dict) -> str:
    """The whole page as one HTML string: inline CSS and JS, the page data as escaped JSON, and the
    claim-level diagnostics of `page_data["claims"]` (columns of `reports.claims`) when it has them;
    its own text in `page_data["lang"]` (English when absent)."""
    lang = page_data.get("lang", "en")
    t = messages(lang)
    heatmaps = [heatmap_html(a["token_posteriors"], f"{qi}/{ai}", lang)
                for qi, q in enumerate(page_data["questions"]) for ai, a in enumerate(q["answers"]) if a.get("token_posteriors")]
    parts = {"TITLE": html.escape(page_data.get("title", t("html.default_title"))), "CSS": _asset("report.css"),
             "JS": _asset("report.js"), "DATA": embed_json(page_data), "HEATMAPS": "\n".join(heatmaps),
             "CLAIMS": claims_html(page_data.get("claims") or {}, lang), "LANG": t.html_lang}

    def fill(m: re.Match) -> str:
        if m.group(1):
            return parts[m.group(1)]
        key = m.group(2)
        return t(key) if key.endswith("_html") else html.escape(t(key))

    # One pass, so text inserted for one placeholder is never scanned for another.
    return _PLACEHOLDER.sub(fill, _asset("page.html", inlined=False))


PLOTS = {  # file name -> the aggregates drawn in it (those with at least one score)
    "distributions.png": ("faithfulness", "context_recall", "answer_completeness", "answer_relevancy", "on_topic_rate",
                          "citation_recall", "citation_precision"),
    "qa_distributions.png": ("exact_match", "f1", "rougeL"),
}


def plot_run(aggregates: dict, folder, lang: str = "en") -> list[str]:
    """The question-level score histograms of a run as PNGs in `folder`, labelled in `lang`; returns the names written.

    A plot whose metrics all have no score (say, no reference answers for EM) is not written.
    """
    written = []
    for name, keys in PLOTS.items():
        shown = {k: aggregates[k] for k in keys if (aggregates.get(k) or {}).get("n")}
        if shown:
            histogram_figure(shown, Path(folder) / name, lang)
            written.append(name)
    return written


# ---------------------------------------------------------------------------------------------
# page data from a results.json object


def _answer(rec: dict, known: Mapping[str, Mapping], ref_ids: list[str] | None, t: Messages,
            unnamed: str = "answer") -> dict:
    """One answer of the page; `unnamed` is the name of an answer whose record names no system.

    Its metrics go as numbers (`metrics`) and as report.md prints them (`shown`: `markdown.fmt`), so the
    page shows the same digits as report.md: JS's toFixed would round a half up where Python rounds it to even.

    >>> a = _answer({"question": "q", "response": "", "contexts": [], "metrics": {"faithfulness": 0.0625,
    ...              "recall_at_k": {"1": 0.5}, "context_recall": None}}, {}, None, messages("en"))
    >>> a["shown"], a["system"]
    ({'faithfulness': '0.062', 'recall_at_k': '@1 0.500', 'context_recall': '–'}, 'answer')
    """
    for field in ("question", "response", "contexts"):
        if field not in rec:
            raise ValueError(f"results record {rec.get('id')!r} has no {field!r}: rerun the evaluation with this lewisrag version")
    # contexts without ids (plain strings) hold positions "1".."n", which match no gold id: recall@k says so too
    gold = list(rec.get("gold_passage_ids") or []) if _has_context_ids(rec) else []
    retrieved = {c["id"] for c in rec["contexts"]}
    refs = rec.get("reference_statements") or []
    system = rec.get("name") or rec.get("system") or unnamed
    answer = {
        "system": system,
        "description": rec.get("description"),
        "expected_primary": rec.get("expected_primary"),
        "response": rec["response"],
        "refused": rec.get("refused", False),
        "statements": [{"text": s["text"], "citations": list(s.get("citations") or []), "supported": s.get("supported"),
                        "reason": t.text(s.get("reason", ""))} for s in rec.get("statements", [])],
        "citation_checks": [{**c, "detail": t.text(c["detail"])} if c.get("detail") else c
                            for c in rec.get("citation_checks", [])],
        "citation_verdicts": rec.get("citation_verdicts", []),
        "reference_statements": [{"id": (ref_ids[i] if ref_ids and i < len(ref_ids) else f"R{i + 1}"), **r} for i, r in enumerate(refs)],
        "contexts": [{**c, "rank": i + 1, "gold": c["id"] in gold, "cite": label}
                     for i, (c, label) in enumerate(zip(rec["contexts"], citation_labels([c["id"] for c in rec["contexts"]])))],
        "missing_gold": [{"id": g, "title": known.get(g, {}).get("title", ""), "text": known.get(g, {}).get("text")}
                         for g in gold if g not in retrieved],
        "metrics": rec.get("metrics", {}),
        "shown": {k: fmt(v, t) for k, v in rec.get("metrics", {}).items() if k in SHOWN_METRICS},
        "nan_reasons": {k: t.text(v) for k, v in rec.get("nan_reasons", {}).items()},
        "diagnosis": rec.get("diagnosis", {"layers": {}, "primary": None, "consequences": []}),
    }
    if rec.get("name") and t.word("bh.answer", system) != system:  # a BugHunt preset answer's name, translated
        answer["label"] = t.word("bh.answer", system)
    elif system == "answer" and not (rec.get("name") or rec.get("system")):
        answer["label"] = t("col.answer")  # the run's one system, unnamed: "answer" in the page's language
    for extra in ("granularity", "token_posteriors"):
        if rec.get(extra):
            answer[extra] = check_token_posteriors(rec[extra]) if extra == "token_posteriors" else rec[extra]
    return answer


def _has_context_ids(rec: dict) -> bool:
    """Whether a record's contexts had ids of their own (results.json's `has_context_ids`; a file written
    before it was recorded has none there, and its ids are read as passages' ids, as they were)."""
    return rec.get("has_context_ids") is not False


def page_data_from_results(results: dict, passages: Mapping[str, Mapping] | None = None, title: str | None = None,
                           lang: str = "en") -> dict:
    """The page data for `render_report_html` from a results.json object of `eval answers` or `eval bughunt`.

    `passages` (id -> {"title", "text"}) supplies the texts of gold passages that no answer retrieved;
    passages some answer did retrieve are found in the records themselves, but for contexts that had no
    ids (`has_context_ids` false: plain strings, numbered by position), which are no passage's and
    leave their record's gold ids unmarked. Records of the same
    question id (several systems) become one question with several answers; the BugHunt sample's
    preset answers are the answers of its one question. A record may carry `token_posteriors`
    ({tokens, docs, matrix}) for the heatmap. The aggregates' claim diagnostics become `claims`. The page is
    written in `lang`: its labels, and "messages" for the JS, from `reports.i18n`. Records that name no
    system among records that do are the system `evaluator.NO_SYSTEM`, as report.md and the aggregates name
    them; in a run of one unnamed system they are "answer", labelled in `lang`. A primary cause outside
    `diagnose.CAUSES` (compare's `generator_failed`) has its own cause, labelled as its layer word, blaming no layer.
    """
    t = messages(lang)
    records = results.get("records") or []
    known = {c["id"]: c for r in records if _has_context_ids(r) for c in r.get("contexts", [])} | dict(passages or {})
    bughunt = results.get("lewisrag", {}).get("kind") == "bughunt"
    questions: dict[str, dict] = {}
    if bughunt:
        ref_ids = list(results.get("reference_statements", {}))
        questions["bughunt"] = {"id": "bughunt", "question": results["question"],
                                "category": records[0].get("category") if records else None,
                                "answers": [_answer(r, known, ref_ids, t) for r in records]}
    else:
        from lewisrag.eval.evaluator import NO_SYSTEM  # here: the evaluator's imports are not the page's

        unnamed = NO_SYSTEM if len({r.get("system") for r in records}) > 1 else "answer"  # evaluator.aggregate's groups
        for r in records:
            q = questions.setdefault(r["id"], {"id": r["id"], "question": r.get("question", r["id"]), "category": r.get("category"), "answers": []})
            q["answers"].append(_answer(r, known, None, t, unnamed))
    primaries = (p for r in records for p in ((r.get("diagnosis") or {}).get("primary"), r.get("expected_primary")))
    other_causes = list(dict.fromkeys(p for p in primaries if p and p not in CAUSES))
    judge = results.get("judge", {})
    return {
        "title": title or t("html.title_bughunt" if bughunt else "html.title_eval"),
        "lang": lang,
        "kind": "bughunt" if bughunt else "eval",
        "system_label": t("html.preset_label" if bughunt else "html.system_label"),
        "judge": {"name": judge.get("name", "?"), "fingerprint": str(judge.get("fingerprint", ""))[:16]},
        "splitter": results.get("splitter", {}),
        "layers": [{"key": k, "label": t.word("layer", k), "metrics": LAYER_KEYS[k]} for k in CAUSE_ORDER],
        "causes": [{"key": k, "label": t.word("layer", k), "layers": list(v)} for k, v in CAUSES.items()]
        + [{"key": k, "label": t.word("layer", k), "layers": []} for k in other_causes],
        "questions": list(questions.values()),
        "claims": {label: column_summary(col) for label, col in claim_columns(results.get("aggregates") or {}).items()},
        "messages": t.js(),
    }
