"""RUN/report.md and the PNG plots of `lewisrag reproduce`: tables shaped like the paper's, each with
one sentence computed from its numbers, and pictures of training, K, the hot swap and one answer's
per-token document posteriors.

Written in the run's language (config.json's "lang", English when absent): every heading, label and
sentence template comes from the catalogue of `lewisrag.eval.reports.i18n`.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt

from lewisrag.data.io import InputError, atomic_path, expect, is_count, is_finite_number, iter_records, read_json, write_text
from lewisrag.eval.reports.claims import (LEVEL, RESAMPLES, SEED, claim_scores, claims_markdown, paired_difference,
                                          paired_pvalue)
from lewisrag.eval.reports.i18n import ENGLISH, Messages, cjk_font, messages, plot_messages
from lewisrag.eval.reports.markdown import code
from lewisrag.experiments.presets import PRESETS

SYSTEMS = ("rag_token", "rag_sequence", "closed_book", "stitched")  # the report's rows, in this order
NAMES = {s: ENGLISH.system(s) for s in SYSTEMS}  # their English names
PLOTS = ("training_curves.png", "em_vs_k.png", "swap_matrix.png", "token_posteriors.png")
JEOPARDY_PLOT = "jeopardy_posteriors.png"  # the paper's Figure 2 on one test clue


TRAINED = ("rag_token", "rag_sequence", "rag_token_frozen", "closed_book")  # the training curves' runs


def write_report(run: Path, results: dict, inputs: dict | None = None, text: str | None = None) -> None:
    """report.md and the plots (each written atomically), in the run's language. `inputs`: the files
    the plots read (`plot_inputs`), read here when not given, before any plot is written; `text`:
    report.md as `render_report` wrote it (`reproduce._finish` renders it before writing anything),
    rendered here first when not given: a report that cannot be written leaves no new plot behind."""
    text = render_report(results) if text is None else text
    write_plots(run, results, plot_inputs(run, results) if inputs is None else inputs)
    write_text(run / "report.md", text)


def plot_inputs(run: Path, results: dict) -> dict:
    """What the plots read from the run, read and checked: each training run's log.jsonl, evidence.json
    and (a Jeopardy run) jeopardy/evidence.json. A damaged one is an InputError before any output is
    written (`reproduce._finish` reads them before results.json): not a new results.json beside the
    last run's report.md."""
    inputs: dict = {name: _log(run / name / "log.jsonl") for name in TRAINED}
    for path in (run / "evidence.json", *((run / "jeopardy" / "evidence.json",) if results.get("jeopardy") else ())):
        inputs[path.relative_to(run).as_posix()] = _evidence(path) if path.exists() else None
    return inputs


def report_files(results: dict) -> tuple[str, ...]:
    """The files `write_report` writes into the run for these `results`: report.md and the plots drawn
    (`reproduce._finish` lists them in the run's marker before writing them)."""
    absent = {"em_vs_k.png": not results.get("ablations"), "swap_matrix.png": not results.get("knowledge_update")}
    return ("report.md", *(p for p in PLOTS if not absent.get(p)), *((JEOPARDY_PLOT,) if results.get("jeopardy") else ()))


def report_lang(results: dict) -> str:
    """The language the run's reports are written in: config.json's "lang", else English."""
    return (results.get("config") or {}).get("lang") or "en"


def _f(x, t: Messages) -> str:
    return t("na") if x is None else f"{x:.3f}"


def _pct(x, t: Messages) -> str:
    return t("na") if x is None else f"{x:.0%}"


def _leaders(scores: dict[str, float], t: Messages) -> list[str]:
    """The systems whose score, as the tables print it, is the highest: every one of them when tied
    (a first-found maximum named one of two equal systems the best)."""
    top = _f(max(scores.values()), t)
    return [s for s, v in scores.items() if _f(v, t) == top]


def _records(results: dict):
    """results.json's per-question records that name their question and hold their metrics."""
    return (r for r in results.get("records") or []
            if isinstance(r, dict) and isinstance(r.get("metrics"), dict) and isinstance(r.get("id"), str))


def _scores(results: dict, metric: str, kind: str | None) -> dict[str, dict[str, float]]:
    """{system: {question id: its `metric`}} from results.json's per-question records of `kind`
    ("short", "long"; None: the compare stage's eval questions), finite numbers only: what the paired
    tests behind "the highest" read."""
    out: dict[str, dict[str, float]] = {}
    for r in _records(results):
        if r.get("kind") == kind and is_finite_number(v := r["metrics"].get(metric)):
            out.setdefault(str(r.get("system")), {})[r["id"]] = float(v)
    return out


def _claim_scores(results: dict) -> dict[str, dict[str, dict[str, float]]]:
    """{system: {claims.<metric>: {question id: value}}} from the compare stage's eval records."""
    return claim_scores((r for r in _records(results) if r.get("kind") is None), lambda r: str(r.get("system")))


def _lead(leaders: list[str], systems: list[str], scores: dict[str, dict[str, float]], t: Messages,
          binary: bool = False) -> str:
    """What paired tests on the per-question `scores` say of the `leaders`' lead over the other `systems`:
    '' when each leader is above each of them at p < LEVEL; else a clause naming those it does not set
    apart (the largest p of the pairs), one naming those above a leader at p < LEVEL on the questions
    both have a score for (a mean over each system's own questions can lead where the shared ones do
    not), and one naming those it could not pair (no per-question scores in results.json): the tables
    print point estimates, and a lead within noise is no lead."""
    level, flipped, untested, tests = [], [], [], {"level": set(), "flipped": set()}
    for other in (s for s in systems if s not in leaders):
        pairs = [(paired_pvalue(scores.get(s), scores.get(other), binary), s) for s in leaders]
        if any(r is None for r, _ in pairs):
            untested.append(other)
            continue
        below = [r for r, s in pairs if r["p"] < LEVEL and paired_difference(scores[s], scores[other]) < 0]
        named = below or [r for r, _ in pairs]  # the pairs the clause speaks of
        if below or max(r["p"] for r in named) >= LEVEL:
            group, key = (flipped, "flipped") if below else (level, "level")
            group.append(t("rep.lead.p", name=t.system(other), p=max(r["p"] for r in named)))
            tests[key] |= {r["test"] for r in named}

    def test(key: str) -> str:
        return t.join(t("rep.test.mcnemar" if x == "mcnemar" else "rep.test.sign_flip", resamples=RESAMPLES, seed=SEED)
                      for x in sorted(tests[key]))

    return ((t("rep.lead.level", others=t.names(level), test=test("level"), level=LEVEL) if level else "")
            + (t("rep.lead.reversed", others=t.names(flipped), test=test("flipped"), level=LEVEL) if flipped else "")
            + (t("rep.lead.untested", others=t.names(map(t.system, untested))) if untested else ""))


def render_report(results: dict) -> str:
    t = messages(report_lang(results))
    c = results["config"]
    lines = [t("rep.title", preset=c["preset"]["name"], seed=c["seed"]), ""]
    if c["preset"].get("notes"):
        lines += [f"_{_notes(c['preset'], t)}_", ""]
    env = results.get("environment") or {}
    if env.get("cpu"):  # where the digits come from: kernels differ between CPUs, thread counts and devices
        cpu = f"{env['cpu']} ({env['cpu_id']})" if env.get("cpu_id") else env["cpu"]
        lines += [t("rep.environment", cpu=cpu, threads=env.get("threads", "?"),
                    device=env.get("gpu") or env.get("device", "cpu"), torch=env.get("torch", "?"),
                    linear="oneDNN" if env.get("cpu_linear") == "onednn" else "BLAS"), ""]
    for section in (_run, _retrieval, _table1, _unscored, _long_form, _swap, _table6, _table2, _compare, _skipped):
        lines += section(results, t)
    absent = {"em_vs_k.png": not results.get("ablations"), "swap_matrix.png": not results.get("knowledge_update")}
    plots = tuple(p for p in PLOTS if not absent.get(p)) + (("position.png",) if results.get("position") else ())
    plots += (JEOPARDY_PLOT,) if results.get("jeopardy") else ()
    note = [t("rep.plots.no_cjk"), ""] if t.lang != "en" and cjk_font() is None else []
    lines += [t("rep.plots.h"), ""] + note + [f"![{p}]({p})" for p in plots] + [""]
    return "\n".join(lines)


def _notes(preset: dict, t: Messages) -> str:
    """The preset's notes; a shipped preset's in the report's language (a changed one as written)."""
    shipped = PRESETS.get(preset["name"])
    return t.text(preset["notes"]) if shipped is not None and shipped.notes == preset["notes"] else preset["notes"]


def _count(value: object, t: Messages) -> str:
    """A count from a stage record as the report prints it (another value, from a damaged record, as n/a)."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else t("na")


def _run(results: dict, t: Messages) -> list[str]:
    """A hub preset's run (base: the user's own checkpoints and data, `experiments.base`): which models and
    files it ran on, how many questions and passages, its training schedule; and, when --steps, --max-train
    or --max-passages cut it below the preset's, that its numbers compare with runs of the same cut only."""
    c = results.get("config") or {}
    assets, settings = c.get("assets"), c.get("settings")
    if not (c.get("preset") or {}).get("hub") or not isinstance(assets, dict) or not isinstance(settings, dict):
        return []
    stages = results.get("stages") or {}
    data = stages.get("data") or {}
    out = [t("rep.run.h"), ""]
    for key in ("question_encoder", "context_encoder", "generator"):
        out.append(t("rep.run.model", what=t(f"rep.run.{key}"), path=code(assets.get(key))))
    for key in ("train", "dev", "test", "questions_a", "questions_b"):
        if assets.get(key):
            out.append(t("rep.run.questions", what=t(f"rep.run.{key}"), path=code(assets[key]),
                         n=_count(data.get(f"n_{key}"), t)))
    for snap, key in (("a", "passages"), ("b", "passages_b")):
        if assets.get(key):
            out.append(t("rep.run.passages", snap=snap.upper(), path=code(assets[key]),
                         n=_count((stages.get(f"index_{snap}") or {}).get("n_passages"), t)))
    rag, closed = settings.get("rag") or {}, settings.get("closed_book") or {}
    out.append(t("rep.run.training", steps=_count(rag.get("steps"), t), batch=_count(rag.get("batch_size"), t),
                 k=_count(rag.get("n_docs"), t), cb_steps=_count(closed.get("steps"), t),
                 cb_batch=_count(closed.get("batch_size"), t)))
    cuts = []
    preset_steps = ((c.get("preset") or {}).get("rag") or {}).get("steps")
    if isinstance(assets.get("steps"), int) and isinstance(preset_steps, int) and assets["steps"] < preset_steps:
        cuts.append(t("rep.run.cut_steps", n=assets["steps"], preset=preset_steps))
    # a cap that left exactly that many questions or passages cut the file (one that held fewer was read whole)
    if isinstance(assets.get("max_train"), int) and data.get("n_train") == assets["max_train"]:
        cuts.append(f"--max-train {assets['max_train']}")
    indexed = [(stages.get(f"index_{snap}") or {}).get("n_passages") for snap in ("a", "b")]
    if isinstance(assets.get("max_passages"), int) and assets["max_passages"] in indexed:
        cuts.append(f"--max-passages {assets['max_passages']}")
    return out + ([""] + [t("rep.run.cut", cuts=t.join(cuts))] if cuts else []) + [""]


def _retrieval(results: dict, t: Messages) -> list[str]:
    r = results["retrieval"]
    answers = []  # the base preset: DPR's own measure, an answer string in a top-k passage, where answers allow it
    if r.get("answer_recall"):
        ks = list(r["answer_recall"])
        answers = [t("rep.retrieval.answer_h", n=r["answerable_questions"]), "",
                   f"| {t('rep.retrieval.col')} | " + " | ".join(f"top-{k}" for k in ks) + " |", "|---|" + "---:|" * len(ks),
                   f"| {t('rep.retrieval.dpr_given')} | " + " | ".join(_f(r["answer_recall"][k], t) for k in ks) + " |", ""]
    if "skipped" in r:  # the base preset: every gold passage cut off (--max-passages) is counted, measured or not
        outside = [t("rep.retrieval.gold_none_indexed", n=r["gold_not_indexed"]), ""] if r.get("gold_not_indexed") else []
        return answers + [t("rep.retrieval.h"), "", t("rep.retrieval.not_measured", why=t.text(r["skipped"])), "", *outside]
    if "bm25" not in r:  # the base preset: the given DPR pair only
        ks = [k for k in ("recall_at_1", "recall_at_5", "recall_at_20") if k in r]
        outside = [t("rep.retrieval.gold_not_indexed", n=r["gold_not_indexed"]), ""] if r.get("gold_not_indexed") else []
        return answers + [t("rep.retrieval.h_base", split=t.word("split", r["split"])), "",
                f"| {t('rep.retrieval.col')} | " + " | ".join(k.replace("recall_at_", "recall@") for k in ks) + " |",
                "|---|" + "---:|" * len(ks), f"| {t('rep.retrieval.dpr_given')} | " + " | ".join(_f(r[k], t) for k in ks) + " |",
                "", *outside]
    ks = [k for k in ("recall_at_1", "recall_at_5", "recall_at_20") if k in r]
    return [t("rep.retrieval.h_world"), "",
            f"| {t('rep.retrieval.col')} | " + " | ".join(k.replace("recall_at_", "recall@") for k in ks) + " |",
            "|---|" + "---:|" * len(ks),
            f"| {t('rep.retrieval.dpr_trained')} | " + " | ".join(_f(r[k], t) for k in ks) + " |",
            "| BM25 | " + " | ".join(_f(r["bm25"][k], t) for k in ks) + " |", "",
            t("rep.retrieval.sentence", dense=r["recall_at_5"], bm25=r["bm25"]["recall_at_5"]), ""]


def _table1(results: dict, t: Messages) -> list[str]:
    """Table 1: EM, F1 and ROUGE-L per system; a system without an exact match (null: the schema lets a
    stage record one) keeps its row, printed n/a, and is neither ranked nor the closed book's gap."""
    qa = results.get("qa", {})
    shown = [s for s in SYSTEMS if isinstance(qa.get(s), dict)]
    rows = [s for s in shown if qa[s].get("exact_match") is not None]
    if not rows:
        return []
    out = [t("rep.t1.h"), "", f"| {t('col.system')} | EM | F1 | ROUGE-L |", "|---|---:|---:|---:|"]
    out += [f"| {t.system(s)} | {_f(qa[s].get('exact_match'), t)} | {_f(qa[s].get('f1'), t)} | "
            f"{_f(qa[s].get('rougeL'), t)} |" for s in shown]
    leaders = _leaders({s: qa[s]["exact_match"] for s in rows}, t)
    best = leaders[0]
    if len(rows) == 1:  # nothing to compare it with: not "every system scores the same"
        sentence = t("rep.t1.one", name=t.system(best), em=_pct(qa[best]["exact_match"], t))
    elif len(leaders) == len(rows):  # the systems without one (n/a) are named: they tie with nothing
        unscored = [s for s in shown if s not in rows]
        sentence = (t("rep.t1.same_scored", em=_pct(qa[best]["exact_match"], t), others=t.names(map(t.system, unscored)))
                    if unscored else t("rep.t1.same", em=_pct(qa[best]["exact_match"], t)))
    else:
        sentence = t("rep.t1.best" if len(leaders) == 1 else "rep.t1.best_tied", name=t.names(map(t.system, leaders)),
                     em=_pct(qa[best]["exact_match"], t))
        # a closed book tied for the lead has no gap to itself ("+0 points against the closed-book BART")
        if "closed_book" not in leaders and (qa.get("closed_book") or {}).get("exact_match") is not None:
            gap = qa[best]["exact_match"] - qa["closed_book"]["exact_match"]
            sentence += t("rep.t1.gap", gap=gap * 100)
        sentence += _lead(leaders, rows, _scores(results, "exact_match", "short"), t, binary=True)
    return out + ["", sentence + t("end"), ""]


def _unscored(results: dict, t: Messages) -> list[str]:
    """Under Table 1, the test questions without an answer (results.json's `test_unscored`), which the evaluate
    stage leaves out of every score, out of all the split's: unsaid, Table 1 read as over every test question,
    as many as the base preset's Run section counts."""
    n = results.get("test_unscored")
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        return []
    qa = results.get("qa") or {}
    trained = next((qa[s] for s in SYSTEMS[:3] if isinstance(qa.get(s), dict)), {})  # the evaluate stage's systems
    counts = [trained.get("n", 0), (trained.get("long") or {}).get("n", 0)]
    total = n + sum(counts) if all(isinstance(c, int) and not isinstance(c, bool) for c in counts) else None
    return [t("rep.t1.unscored", n=n, total=_count(total, t)), ""]


def _long_form(results: dict, t: Messages) -> list[str]:
    """The long-form table; its sentence ranks the systems with a ROUGE-L (null, which the schema allows,
    is not measured, not 0)."""
    qa = results.get("qa", {})
    rows = [s for s in SYSTEMS if s in qa and (qa[s].get("long") or {}).get("n")]
    if not rows:
        return []
    out = [t("rep.long.h"), "", f"| {t('col.system')} | ROUGE-L | BLEU-1 |", "|---|---:|---:|"]
    out += [f"| {t.system(s)} | {_f(qa[s]['long']['rougeL'], t)} | {_f(qa[s]['long']['bleu1'], t)} |" for s in rows]
    scored = {s: qa[s]["long"]["rougeL"] for s in rows if qa[s]["long"].get("rougeL") is not None}
    leaders = _leaders(scored, t) if scored else []
    unscored = [s for s in rows if s not in scored]  # n/a: named beside a tie, which they are no part of
    key = ("rep.long.none" if not scored else "rep.long.one" if len(scored) == 1 else
           ("rep.long.same_scored" if unscored else "rep.long.same") if len(leaders) == len(scored)
           else "rep.long.sentence" if len(leaders) == 1 else "rep.long.sentence_tied")
    sentence = t(key, n=qa[rows[0]]["long"]["n"], name=t.names(map(t.system, leaders)) if leaders else "",
                 score=_f(scored[leaders[0]], t) if leaders else "",
                 others=t.names(map(t.system, unscored)) if unscored else "")
    if len(leaders) < len(scored):
        sentence += _lead(leaders, list(scored), _scores(results, "rougeL", "long"), t)
    kinds = ((results.get("config") or {}).get("preset") or {}).get("rag", {}).get("train_kinds", "")
    if kinds and "long" not in kinds.split(","):
        sentence += t("rep.long.kinds", kinds=t("kind.join").join(t.word("kind", k) for k in kinds.split(",")))
    return out + ["", sentence + t("end"), ""]


def _swap(results: dict, t: Messages) -> list[str]:
    ku = results.get("knowledge_update")
    if not ku:
        return []
    a, b = swap_columns(results, t, "rep.swap.col_a", "rep.swap.col_b")
    out = [t("rep.swap.h"), "", f"| {t('col.model')} | {t('rep.swap.col_index')} | {a} | {b} |", "|---|---|---:|---:|"]
    sentences = []
    for system, by_index in ku.items():
        for index, cells in by_index.items():
            out.append(f"| {t.system(system)} | {t.word('index', index)} | {_pct(cells.get('questions_a'), t)} | "
                       f"{_pct(cells.get('questions_b'), t)} |")
        cells = {(i, q): by_index[i][q] for i in ("index_a", "index_b") for q in ("questions_a", "questions_b")}
        matched_cells = [cells["index_a", "questions_a"], cells["index_b", "questions_b"]]
        crossed_cells = [cells["index_a", "questions_b"], cells["index_b", "questions_a"]]
        matched, crossed = sum(matched_cells) / 2, sum(crossed_cells) / 2
        verdict = swap_verdict(matched_cells, crossed_cells)
        sentence = t("rep.swap.system", name=t.system(system), verdict=t(verdict), matched=_pct(matched, t),
                     crossed=_pct(crossed, t))
        if verdict == "rep.swap.partly" and swap_verdict([matched], [crossed]) == "rep.swap.follows":
            # the means meet the targets, a cell does not: name it, or "in part" beside 92% and 0% reads wrong
            missed = [t("rep.swap.cell", index=t.word("index", i), q=t(f"rep.swap.col_{q[-1]}"), v=_pct(v, t))
                      for (i, q), v in cells.items()
                      if (i[-1] == q[-1] and _percent(v) < 90) or (i[-1] != q[-1] and _percent(v) > 5)]
            sentence += t("rep.swap.cells", cells=t.join(missed))
        sentences.append(sentence)
    out += ["", t("rep.swap.sentence", paper=t("rep.paper_swap"), systems=t.join(sentences, "sep.clause")), ""]
    # what the swap itself noticed (the same passages in both indexes, questions left out, ...), as it wrote it
    notes = ((results.get("stages") or {}).get("knowledge_update") or {}).get("notes") or []
    return out + ([t("rep.swap.notes"), ""] + [f"- {n}" for n in notes] + [""] if notes else [])


def swap_columns(results: dict, t: Messages, *keys: str) -> list[str]:
    """The swap table's question-set columns (message ids `keys`, questions A's then B's), each with the
    number of questions its cells score (`stages.knowledge_update.n_questions`, as `lewisrag swap` heads
    its columns): an EM of 100% on 3 questions reads otherwise than on 300. A run recorded without the
    counts gets the bare names."""
    counts = ((results.get("stages") or {}).get("knowledge_update") or {}).get("n_questions") or {}
    return [t("rep.swap.col_n", col=t(key), n=counts[q]) if isinstance(counts.get(q), int) else t(key)
            for key, q in zip(keys, ("questions_a", "questions_b"))]


def _percent(x: float) -> int:
    """`x` as the printed percent, as `_pct` rounds it."""
    return int(f"{x:.0%}"[:-1])


def swap_verdict(matched: Sequence[float], crossed: Sequence[float]) -> str:
    """The message id of what the hot swap shows from its matched cells (index A on questions A, B on B)
    and mismatched ones, decided on the percentages as the report prints them: the index is followed
    when every matched cell meets the README's target (at least 90%) and every mismatched one its own
    (at most 5%), per cell as the README states them (a mean of 99% and 85% met them), followed in part
    when the matched mean is merely higher, and not followed when it is level or lower (0.902 against
    0.900 prints 90% against 90%).

    >>> swap_verdict([0.97, 0.98], [0.0, 0.01]), swap_verdict([0.99, 0.85], [0.0, 0.0]), swap_verdict([0.69], [0.08])
    ('rep.swap.follows', 'rep.swap.partly', 'rep.swap.partly')
    >>> swap_verdict([0.901], [0.9]), swap_verdict([0.1], [0.6])
    ('rep.swap.same', 'rep.swap.ignores')
    """
    m, c = (_percent(sum(cells) / len(cells)) for cells in (matched, crossed))  # the means, as the sentence prints them
    if m == c:
        return "rep.swap.same"
    if m < c:
        return "rep.swap.ignores"
    follows = min(map(_percent, matched)) >= 90 and max(map(_percent, crossed)) <= 5
    return "rep.swap.follows" if follows else "rep.swap.partly"


def _table6(results: dict, t: Messages) -> list[str]:
    ab = results.get("ablations")
    if not ab:
        return []
    ks = [str(k) for k in ab["ks"]]
    rows = [(t("rep.t6.token"), ab["n_docs"]["rag_token"]), (t("rep.t6.sequence"), ab["n_docs"]["rag_sequence"]),
            (t("rep.t6.frozen"), ab["frozen_retriever"]["by_k"]), (t("rep.t6.bm25"), ab["bm25_retriever"]["by_k"])]
    heading = t("rep.t6.h", k=ab["trained_k"], n=ab["n"]) if is_count(ab.get("n")) else t("rep.t6.h_no_n", k=ab["trained_k"])
    out = [heading, "", f"| {t('col.model')} | " + " | ".join(f"K={k}" for k in ks) + " |",
           "|---|" + "---:|" * len(ks)]
    out += [f"| {name} | " + " | ".join(_f(row.get(k), t) for k in ks) + " |" for name, row in rows]
    at = str(ab["trained_k"]) if str(ab["trained_k"]) in ks else ks[-1]
    trained = ab["n_docs"]["rag_token"][at]
    frozen, sparse = ab["frozen_retriever"]["exact_match"], ab["bm25_retriever"]["exact_match"]
    # compared as the table prints them: 0.925 against 0.920 read "above (92% vs 92%)" in percent
    cmp = lambda x: (t("rep.t6.level") if _f(x, t) == _f(trained, t)  # noqa: E731
                     else t("rep.t6.above") if x > trained else t("rep.t6.below"))
    by_k = ab["n_docs"]["rag_token"]
    low, high = min(by_k.values()), max(by_k.values())
    best = [f"K={k}" for k in ks if _f(by_k[k], t) == _f(high, t)]  # every K tied at the top, as printed
    # the spread as printed (compare.py's rule: round to 3 places, then subtract and round again):
    # 191/200 - 187/200 is 0.0199999... in floats, which read "hardly changes" beside 0.955 and 0.935
    trend = (t("rep.t6.best_k", k=t.names(best)) if round(round(high, 3) - round(low, 3), 3) >= 0.02
             else t("rep.t6.flat", low=_f(low, t), high=_f(high, t)))
    return out + ["", t("rep.t6.sentence", k=at, frozen_cmp=cmp(frozen), frozen=_f(frozen, t), trained=_f(trained, t),
                        bm25_cmp=cmp(sparse), bm25=_f(sparse, t), trend=trend), ""]


def _table2(results: dict, t: Messages) -> list[str]:
    """Jeopardy and FEVER (Table 2 style), with the paper's figures beside them."""
    jp, fv = results.get("jeopardy"), results.get("fever")
    if not jp and not fv:
        return []
    rows = [s for s in ("rag_token", "rag_sequence", "closed_book") if (jp and s in jp) or (fv and s in fv)]
    out = [t("rep.t2.h"), "", t("rep.t2.cols"), "|---|---:|---:|---:|---:|"]
    for s in rows:
        j, f = (jp or {}).get(s, {}), (fv or {}).get(s, {})
        out.append(f"| {t.system(s)} | {_f(j.get('q_bleu1'), t)} | {_f(j.get('bleu1'), t)} | {_f(f.get('acc3'), t)} | "
                   f"{_f(f.get('acc2'), t)} |")
    sentences = []
    if jp:
        d, e = jp["differences"]["rag_token_minus_rag_sequence"], jp["differences"]["rag_sequence_minus_closed_book"]
        sentences.append(t("rep.t2.jeopardy", d=d["mean_diff"], d_low=d["low"], d_high=d["high"], e=e["mean_diff"],
                           e_low=e["low"], e_high=e["high"], n=d["n"]))
    if fv:
        r = fv["retrieval"]
        sentences.append(t("rep.t2.fever", majority=_pct(fv["majority_rate"], t), top1=_pct(r["top1_overlap"], t),
                           top10=_pct(r["top10_overlap"], t)))
        sw = fv.get("swap") or {}
        for s in ("rag_token", "rag_sequence"):
            if s in sw:
                c = sw[s]
                sentences.append(t("rep.t2.swap", n=sw["n"], name=t.system(s), b=_pct(c["index_b"]["labels_b"], t),
                                   a=_pct(c["index_a"]["labels_a"], t)))
    return out + ["", t.join(sentences, "sep.clause") + t("rep.t2.tail", paper=t("rep.paper_table2")), ""]


def _skipped(results: dict, t: Messages) -> list[str]:
    skipped = results.get("skipped") or {}
    if not skipped:
        return []
    return [t("rep.skipped.h"), ""] + [t("rep.skipped.item", name=name, why=t.text(why)) for name, why in skipped.items()] + [""]


def _compare(results: dict, t: Messages) -> list[str]:
    layers = results.get("layers") or {}
    if not layers:
        return []
    cols = ("faithfulness", "context_recall", "answer_completeness", "citation_recall", "citation_precision")
    out = [t("rep.layers.h"), "",
           f"| {t('col.system')} | " + " | ".join(t.metric(c) for c in cols) + " |", "|---|" + "---:|" * len(cols)]
    out += [f"| {t.system(s)} | " + " | ".join(_f(v.get(c), t) for c in cols) + " |" for s, v in layers.items()]
    scored = {s: v["faithfulness"] for s, v in layers.items() if v.get("faithfulness") is not None}
    unscored = [s for s in layers if s not in scored]  # n/a: "every system has the same" would count them in
    leaders = _leaders(scored, t) if scored else []
    if len(scored) == 1:  # nothing to compare it with
        out += ["", t("rep.layers.one", name=t.system(leaders[0]), v=_f(scored[leaders[0]], t))]
    elif scored and len(leaders) == len(scored):
        v = _f(next(iter(scored.values())), t)
        out += ["", t("rep.layers.same_scored", v=v, others=t.names(map(t.system, unscored))) if unscored
                else t("rep.layers.same", v=v)]
    elif scored:
        out += ["", t("rep.layers.best" if len(leaders) == 1 else "rep.layers.best_tied",
                      name=t.names(map(t.system, leaders)), v=_f(scored[leaders[0]], t))
                + _lead(leaders, list(scored), _scores(results, "faithfulness", None), t) + t("end")]
    completeness = [v.get("answer_completeness") for v in layers.values() if v.get("answer_completeness") is not None]
    if completeness and not any(completeness):
        out += ["", t("rep.layers.completeness")]
    findings = ((results.get("stages") or {}).get("compare") or {}).get("findings") or []
    if findings:
        out += ["", t("rep.layers.findings"), ""] + findings + _probe_size(results, t)
    columns = {s: v["claims"] for s, v in layers.items() if v.get("claims")}
    claims = claims_markdown(columns, t.system, t("rep.claims.title"), lang=t.lang, scores=_claim_scores(results))
    return out + ([""] + claims if claims else []) + [""]


def _probe_size(results: dict, t: Messages) -> list[str]:
    """Why the position probe's EM at position 1 need not be Table 1's: it read fewer test questions
    (position.<system>.n below qa.<system>.n, or Table 1's count unknown), or, having read them all, it
    put the gold passage among each question's retrieved ones, where retrieval may have missed it."""
    position, qa = results.get("position"), results.get("qa")
    sizes = {s: c["n"] for s, c in position.items() if isinstance(c, dict) and is_count(c.get("n"))} \
        if isinstance(position, dict) else {}
    if not sizes:
        return []
    table = {s: qa[s].get("n") if isinstance(qa, dict) and isinstance(qa.get(s), dict) else None for s in sizes}
    fewer = {s: n for s, n in sizes.items() if not is_count(table[s]) or n < table[s]}
    if not fewer:  # "the first 34 (Table 1 reads them all)" of a probe that read all 34 is no reason
        return [t("rep.pos.all")]
    if len(set(fewer.values())) == 1:
        return [t("rep.pos.n", n=next(iter(fewer.values())))]
    return [t("rep.pos.n_each", items=t.join(f"`{s}` {n}" for s, n in fewer.items()))]


# --- plots --------------------------------------------------------------------------------------


def _save(fig, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)


def _log(path: Path) -> list[dict]:
    """A training run's log.jsonl, each line checked for what the plots read (`step`, `loss` or
    `answer_nll`, `dev_em` when there): a log damaged since its run wrote it (a `--resume` redraws
    the plots) is one line naming the file, line and field, not a traceback."""
    if not path.exists():
        return []
    log = []
    for line, rec in iter_records(path):
        for field in ("step", "answer_nll" if "answer_nll" in rec else "loss", "dev_em"):
            value = rec.get(field)
            if not (field == "dev_em" and value is None or isinstance(value, int | float) and not isinstance(value, bool)):
                raise InputError(path, f"expected a number, got {value!r}; the run's log is damaged", line=line,
                                 field=field)
        log.append(rec)
    return log


def write_plots(run: Path, results: dict, inputs: dict | None = None) -> None:
    """The plots, labelled in the report's language; drawn with a CJK font behind the default face whenever
    the run's own text they show is CJK (the Chinese world's questions, tokens and titles under an English
    report: `--lang zh --report-lang en`), which the default face draws as boxes."""
    matplotlib.use("Agg")
    inputs = plot_inputs(run, results) if inputs is None else inputs
    with plot_messages(report_lang(results)) as t:
        family = list(matplotlib.rcParams["font.family"])
        font = cjk_font() if _wide_text(inputs) else None
        with matplotlib.rc_context({"font.family": [*family, font]} if font and font not in family else {}):
            _plots(run, results, t, inputs)


def _wide_text(inputs: dict) -> bool:
    """Whether the evidence the posterior plots draw (question, tokens, passage titles) holds a CJK or
    full-width character."""
    texts = (x for ev in (inputs.get(k) for k in ("evidence.json", "jeopardy/evidence.json")) if ev
             for x in (ev["question"], *ev["tokens"], *(p["title"] for p in ev["passages"])))
    return any(unicodedata.east_asian_width(c) in "WF" for text in texts if isinstance(text, str) for c in text)


def _plots(run: Path, results: dict, t: Messages, inputs: dict) -> None:
    fig, (ax_loss, ax_em) = plt.subplots(1, 2, figsize=(10, 4))
    for name in TRAINED:
        log = inputs[name]
        ax_loss.plot([r["step"] for r in log], [r.get("answer_nll", r["loss"]) for r in log], label=name)
        dev = [r for r in log if r.get("dev_em") is not None]
        if dev:
            ax_em.plot([r["step"] for r in dev], [r["dev_em"] for r in dev], marker="o", label=name)
    ax_loss.set(title=t("plot.loss"), xlabel=t("plot.step"), ylabel="NLL")
    ax_em.set(title=t("plot.dev_em"), xlabel=t("plot.step"), ylabel="EM", ylim=(0, 1))
    ax_loss.legend(), ax_em.legend()
    _save(fig, run / "training_curves.png")

    ab = results.get("ablations")  # absent from a base run (no BM25 index, no frozen run)
    if ab:
        fig, ax = plt.subplots(figsize=(5, 4))
        for name, row in (("RAG-Token", ab["n_docs"]["rag_token"]), ("RAG-Sequence", ab["n_docs"]["rag_sequence"]),
                          (t("plot.frozen"), ab["frozen_retriever"]["by_k"]), (t("plot.bm25"), ab["bm25_retriever"]["by_k"])):
            ax.plot(ab["ks"], [row[str(k)] for k in ab["ks"]], marker="o", label=name)
        ax.set(title=t("plot.em_vs_k"), xlabel="K", ylabel="EM", ylim=(0, 1))
        ax.legend()
        _save(fig, run / "em_vs_k.png")
    if results.get("knowledge_update"):  # a base run without snapshot B has none
        _swap_plot(run, results["knowledge_update"], t)
    _posterior_plot(inputs["evidence.json"], run / "token_posteriors.png", t("plot.posterior"), t)
    if results.get("jeopardy"):
        _posterior_plot(inputs["jeopardy/evidence.json"], run / JEOPARDY_PLOT, t("plot.posterior_jeopardy"), t)


def _swap_plot(run: Path, ku: dict, t: Messages) -> None:
    systems = list(ku)
    fig, axes = plt.subplots(1, len(systems), figsize=(4.5 * len(systems), 3.8), squeeze=False)
    for ax, system in zip(axes[0], systems):
        grid = [[ku[system][i][q] for q in ("questions_a", "questions_b")] for i in ("index_a", "index_b")]
        ax.imshow(grid, vmin=0, vmax=1, cmap="viridis")
        for (y, x), v in [((y, x), grid[y][x]) for y in range(2) for x in range(2)]:
            ax.text(x, y, f"{v:.0%}", ha="center", va="center", color="white" if v < 0.5 else "black")
        ax.set(title=t.system(system), xticks=[0, 1], yticks=[0, 1],
               xticklabels=[t("plot.questions_a"), t("plot.questions_b")], yticklabels=[t("plot.index_a"), t("plot.index_b")])
    _save(fig, run / "swap_matrix.png")


def _evidence(path: Path) -> dict:
    """evidence.json (one answer's tokens, passages and per-token document posterior), checked for
    what the heat map reads: a damaged file is one line naming its field, not a traceback."""
    ev = read_json(path)
    expect(isinstance(ev, dict), path, "(top level)", "a JSON object", type(ev).__name__)
    for field, kind in (("tokens", list), ("passages", list), ("posterior", list), ("question", str)):
        expect(isinstance(ev.get(field), kind), path, field, f"a {kind.__name__}", ev.get(field), DAMAGED)
    k = len(ev["passages"])
    for i, p in enumerate(ev["passages"]):
        expect(isinstance(p, dict) and isinstance(p.get("title"), str) and "rank" in p, path, f"passages[{i}]",
               "an object with rank and title", p, DAMAGED)
    for i, row in enumerate(ev["posterior"]):  # one row per generated token, one probability per passage
        expect(isinstance(row, list) and len(row) == k and all(isinstance(x, int | float) and not isinstance(x, bool)
                                                               for x in row),
               path, f"posterior[{i}]", f"{k} numbers", row, DAMAGED)
    expect(len(ev["posterior"]) == len(ev["tokens"]), path, "posterior",
           f"one row per token ({len(ev['tokens'])})", len(ev["posterior"]), DAMAGED)
    return ev


DAMAGED = "; the file is damaged (the stage that wrote it runs again once its record in RUN/stages/ is deleted)"


def _posterior_plot(ev: dict | None, png: Path, title: str, t: Messages = ENGLISH) -> None:
    """A heat map of one output's per-token document posterior (`ev`: an evidence.json as `_evidence`
    read it; None where there is none)."""
    fig, ax = plt.subplots(figsize=(max(6, 0.3 * len(ev["tokens"])) if ev else 6, 3.5))
    if ev and ev["posterior"]:
        post = list(map(list, zip(*ev["posterior"])))  # (K, T')
        ax.imshow(post, vmin=0, vmax=1, aspect="auto", cmap="Blues")
        ax.set(xticks=range(len(ev["tokens"])), yticks=range(len(post)),
               yticklabels=[f"{p['rank']}: {p['title'][:24]}" for p in ev["passages"]], xlabel=t("plot.generated_token"))
        ax.set_xticklabels(ev["tokens"], rotation=60)
        ax.set_title(f"{title}: {ev['question'][:50]}", fontsize=9)
    else:
        ax.text(0.5, 0.5, t("plot.no_tokens"), ha="center")
    _save(fig, png)
