"""RUN/report.md and the PNG plots of `lewisrag reproduce`: tables shaped like the paper's, each with
one sentence computed from its numbers, and pictures of training, K, the hot swap and one answer's
per-token document posteriors.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt

from lewisrag.data.io import atomic_path, write_text
from lewisrag.eval.reports.claims import claims_markdown

NAMES = {"rag_token": "RAG-Token", "rag_sequence": "RAG-Sequence", "closed_book": "BART (closed book)",
         "stitched": "prompt-stitching RAG"}
PAPER_SWAP = "paper (§4.5): 2016 index on 2016 leaders 70%, 2018 index on 2018 leaders 68%; mismatched 12% and 4%"
PLOTS = ("training_curves.png", "em_vs_k.png", "swap_matrix.png", "token_posteriors.png")
JEOPARDY_PLOT = "jeopardy_posteriors.png"  # the paper's Figure 2 on one test clue
PAPER_TABLE2 = ("paper (Table 2, test): Jeopardy Q-BLEU-1 BART 15.1, RAG-Token 17.3, RAG-Sequence 14.7; "
                "FEVER 3-way accuracy BART 64.0, RAG 72.5, 2-way BART 81.1, RAG 89.5")


def write_report(run: Path, results: dict) -> None:
    """report.md and the plots (each written atomically)."""
    write_plots(run, results)
    write_text(run / "report.md", render_report(results))


def _f(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def render_report(results: dict) -> str:
    c = results["config"]
    lines = [f"# lewisrag reproduce — preset `{c['preset']['name']}`, seed {c['seed']}", ""]
    if c["preset"].get("notes"):
        lines += [f"_{c['preset']['notes']}_", ""]
    for section in (_retrieval, _table1, _long_form, _swap, _table6, _table2, _compare, _skipped):
        lines += section(results)
    absent = {"em_vs_k.png": not results.get("ablations"), "swap_matrix.png": not results.get("knowledge_update")}
    plots = tuple(p for p in PLOTS if not absent.get(p)) + (("position.png",) if results.get("position") else ())
    plots += (JEOPARDY_PLOT,) if results.get("jeopardy") else ()
    lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    return "\n".join(lines)


def _retrieval(results: dict) -> list[str]:
    r = results["retrieval"]
    if "skipped" in r:
        return ["## Retrieval", "", f"Not measured: {r['skipped']}.", ""]
    if "bm25" not in r:  # the base preset: the given DPR pair only
        ks = [k for k in ("recall_at_1", "recall_at_5", "recall_at_20") if k in r]
        return [f"## Retrieval ({r['split']} questions with gold passage ids, index A)", "",
                "| retriever | " + " | ".join(k.replace("recall_at_", "recall@") for k in ks) + " |",
                "|---|" + "---:|" * len(ks), "| DPR (given pair) | " + " | ".join(_f(r[k]) for k in ks) + " |", ""]
    ks = [k for k in ("recall_at_1", "recall_at_5", "recall_at_20") if k in r]
    return ["## Retrieval (test split over snapshot A; test entities never appear in training questions)", "",
            "| retriever | " + " | ".join(k.replace("recall_at_", "recall@") for k in ks) + " |",
            "|---|" + "---:|" * len(ks),
            "| DPR (trained here) | " + " | ".join(_f(r[k]) for k in ks) + " |",
            "| BM25 | " + " | ".join(_f(r["bm25"][k]) for k in ks) + " |", "",
            f"The dense retriever finds a gold passage in its top 5 for {r['recall_at_5']:.1%} of test questions; "
            f"BM25 does for {r['bm25']['recall_at_5']:.1%}.", ""]


def _table1(results: dict) -> list[str]:
    qa = results.get("qa", {})
    rows = [s for s in NAMES if s in qa and qa[s].get("exact_match") is not None]
    if not rows:
        return []
    out = ["## Open-domain QA (Table 1 style, test split, short answers)", "", "| system | EM | F1 | ROUGE-L |",
           "|---|---:|---:|---:|"]
    out += [f"| {NAMES[s]} | {_f(qa[s]['exact_match'])} | {_f(qa[s].get('f1'))} | {_f(qa[s].get('rougeL'))} |" for s in rows]
    best = max(rows, key=lambda s: qa[s]["exact_match"])
    if all(qa[s]["exact_match"] == qa[best]["exact_match"] for s in rows):
        sentence = f"Every system scores the same exact match ({_pct(qa[best]['exact_match'])}): no system stands out"
    else:
        sentence = f"{NAMES[best]} has the highest exact match ({_pct(qa[best]['exact_match'])})"
        if "closed_book" in qa and best != "closed_book":
            gap = qa[best]["exact_match"] - qa["closed_book"]["exact_match"]
            sentence += f", {gap * 100:+.0f} points against the closed-book BART that reads no documents"
    return out + ["", sentence + ".", ""]


def _long_form(results: dict) -> list[str]:
    qa = results.get("qa", {})
    rows = [s for s in NAMES if s in qa and (qa[s].get("long") or {}).get("n")]
    if not rows:
        return []
    out = ["## Long-form answers (the paper's MS MARCO columns)", "", "| system | ROUGE-L | BLEU-1 |", "|---|---:|---:|"]
    out += [f"| {NAMES[s]} | {_f(qa[s]['long']['rougeL'])} | {_f(qa[s]['long']['bleu1'])} |" for s in rows]
    best = max(rows, key=lambda s: qa[s]["long"]["rougeL"] or 0.0)
    sentence = (f"On {qa[rows[0]]['long']['n']} long-form questions {NAMES[best]} scores the highest ROUGE-L "
                f"({_f(qa[best]['long']['rougeL'])})")
    kinds = ((results.get("config") or {}).get("preset") or {}).get("rag", {}).get("train_kinds", "")
    if kinds and "long" not in kinds.split(","):
        sentence += (f". The models were fine-tuned on {kinds.replace(',', ' and ')}-answer questions only, so they "
                     "answer a long-form question with a phrase: these columns show what a model trained for one "
                     "task scores on another (the paper fine-tunes one model per dataset)")
    return out + ["", sentence + ".", ""]


def _swap(results: dict) -> list[str]:
    ku = results.get("knowledge_update")
    if not ku:
        return []
    out = ["## Knowledge update: swapping the index (§4.5)", "", "| model | index | questions about A | questions about B |",
           "|---|---|---:|---:|"]
    sentences = []
    for system, by_index in ku.items():
        for index, cells in by_index.items():
            out.append(f"| {NAMES.get(system, system)} | {index} | {_pct(cells.get('questions_a'))} | {_pct(cells.get('questions_b'))} |")
        matched = (by_index["index_a"]["questions_a"] + by_index["index_b"]["questions_b"]) / 2
        crossed = (by_index["index_a"]["questions_b"] + by_index["index_b"]["questions_a"]) / 2
        verdict = "follows the index" if matched > crossed else "does not follow the index"
        sentences.append(f"{NAMES.get(system, system)} {verdict}: {_pct(matched)} on matched index and questions "
                         f"against {_pct(crossed)} on mismatched ones")
    return out + ["", f"Beside the {PAPER_SWAP}: " + "; ".join(sentences) + ".", ""]


def _table6(results: dict) -> list[str]:
    ab = results.get("ablations")
    if not ab:
        return []
    ks = [str(k) for k in ab["ks"]]
    rows = [("RAG-Token (DPR, trained)", ab["n_docs"]["rag_token"]), ("RAG-Sequence (DPR, trained)", ab["n_docs"]["rag_sequence"]),
            ("RAG-Token, frozen retriever", ab["frozen_retriever"]["by_k"]), ("RAG-Token, BM25 retriever", ab["bm25_retriever"]["by_k"])]
    out = ["## Ablations (Table 6 style: test EM by test-time K; trained with "
           f"K={ab['trained_k']})", "", "| model | " + " | ".join(f"K={k}" for k in ks) + " |", "|---|" + "---:|" * len(ks)]
    out += [f"| {name} | " + " | ".join(_f(row.get(k)) for k in ks) + " |" for name, row in rows]
    at = str(ab["trained_k"]) if str(ab["trained_k"]) in ks else ks[-1]
    trained = ab["n_docs"]["rag_token"][at]
    frozen, sparse = ab["frozen_retriever"]["exact_match"], ab["bm25_retriever"]["exact_match"]
    cmp = lambda x: "above" if x > trained else "below" if x < trained else "level with"  # noqa: E731
    by_k = ab["n_docs"]["rag_token"]
    best_k = max(ks, key=lambda k: by_k[k])
    low, high = min(by_k.values()), max(by_k.values())
    trend = (f"RAG-Token does best at K={best_k}" if high - low >= 0.02
             else f"RAG-Token's EM hardly changes with K ({_f(low)}-{_f(high)}): the first retrieved passage decides")
    return out + ["", f"At K={at} the frozen retriever is {cmp(frozen)} the jointly trained one ({_pct(frozen)} vs "
                  f"{_pct(trained)}) and BM25 is {cmp(sparse)} it ({_pct(sparse)}); {trend}.", ""]


def _table2(results: dict) -> list[str]:
    """Jeopardy and FEVER (Table 2 style), with the paper's figures beside them."""
    jp, fv = results.get("jeopardy"), results.get("fever")
    if not jp and not fv:
        return []
    rows = [s for s in ("rag_token", "rag_sequence", "closed_book") if (jp and s in jp) or (fv and s in fv)]
    out = ["## Jeopardy question generation and FEVER (Table 2 style, test split)", "",
           "| system | Jeopardy Q-BLEU-1 | Jeopardy BLEU-1 | FEVER 3-way acc | FEVER 2-way acc |", "|---|---:|---:|---:|---:|"]
    for s in rows:
        j, f = (jp or {}).get(s, {}), (fv or {}).get(s, {})
        out.append(f"| {NAMES[s]} | {_f(j.get('q_bleu1'))} | {_f(j.get('bleu1'))} | {_f(f.get('acc3'))} | {_f(f.get('acc2'))} |")
    sentences = []
    if jp:
        d, e = jp["differences"]["rag_token_minus_rag_sequence"], jp["differences"]["rag_sequence_minus_closed_book"]
        sentences.append(f"Jeopardy: RAG-Token − RAG-Sequence Q-BLEU-1 {d['mean_diff']:+.3f} (95% paired bootstrap "
                         f"{d['low']:+.3f} to {d['high']:+.3f}), RAG-Sequence − closed book {e['mean_diff']:+.3f} "
                         f"({e['low']:+.3f} to {e['high']:+.3f}), over {d['n']} test entities")
    if fv:
        r = fv["retrieval"]
        sentences.append(f"FEVER: the majority label is {_pct(fv['majority_rate'])} of the test claims; RAG-Token's first "
                         f"retrieved passage is gold evidence for {_pct(r['top1_overlap'])} of the SUPPORTS/REFUTES claims "
                         f"and its top 10 hold one for {_pct(r['top10_overlap'])} (paper: 71% and 90%)")
        sw = fv.get("swap") or {}
        for s in ("rag_token", "rag_sequence"):
            if s in sw:
                c = sw[s]
                sentences.append(f"on the {sw['n']} claims whose label snapshot B changes, {NAMES[s]} matches B's labels "
                                 f"{_pct(c['index_b']['labels_b'])} of the time on index B and A's old labels "
                                 f"{_pct(c['index_a']['labels_a'])} on index A")
    return out + ["", "; ".join(sentences) + f". Beside the {PAPER_TABLE2}.", ""]


def _skipped(results: dict) -> list[str]:
    skipped = results.get("skipped") or {}
    if not skipped:
        return []
    return ["## Stages not run", ""] + [f"- `{name}`: {why}" for name, why in skipped.items()] + [""]


def _compare(results: dict) -> list[str]:
    layers = results.get("layers") or {}
    if not layers:
        return []
    cols = ("faithfulness", "context_recall", "answer_completeness", "citation_recall", "citation_precision")
    out = ["## Answer layers (retrieval, generation, citation; details in report.html)", "",
           "| system | " + " | ".join(c.replace("_", " ") for c in cols) + " |", "|---|" + "---:|" * len(cols)]
    out += [f"| {NAMES.get(s, s)} | " + " | ".join(_f(v.get(c)) for c in cols) + " |" for s, v in layers.items()]
    scored = {s: v["faithfulness"] for s, v in layers.items() if v.get("faithfulness") is not None}
    if len(set(scored.values())) == 1:
        out += ["", f"Every system has the same faithfulness ({_f(next(iter(scored.values())))})."]
    elif scored:
        best = max(scored, key=scored.get)
        out += ["", f"{NAMES.get(best, best)} has the most faithful answers ({_f(scored[best])} of their statements "
                "supported by the passages they read)."]
    completeness = [v.get("answer_completeness") for v in layers.values() if v.get("answer_completeness") is not None]
    if completeness and not any(completeness):
        out += ["", "Answer completeness is 0 for every system: it asks whether the answer alone states each reference "
                "statement, and a short answer (a name, a year) states none of those whole sentences under the lexical "
                "judge; so the failure layers in report.html lean on \"generation: not used\" for correct short answers too."]
    findings = ((results.get("stages") or {}).get("compare") or {}).get("findings") or []
    if findings:
        out += ["", "What the scorecard shows:", ""] + findings
    columns = {s: v["claims"] for s, v in layers.items() if v.get("claims")}
    claims = claims_markdown(columns, lambda s: NAMES.get(s, s), "Claim-level diagnostics (RAGChecker, eval questions)")
    return out + ([""] + claims if claims else []) + [""]


# --- plots --------------------------------------------------------------------------------------


def _save(fig, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)


def _log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_plots(run: Path, results: dict) -> None:
    matplotlib.use("Agg")

    fig, (ax_loss, ax_em) = plt.subplots(1, 2, figsize=(10, 4))
    for name in ("rag_token", "rag_sequence", "rag_token_frozen", "closed_book"):
        log = _log(run / name / "log.jsonl")
        ax_loss.plot([r["step"] for r in log], [r.get("answer_nll", r["loss"]) for r in log], label=name)
        dev = [r for r in log if r.get("dev_em") is not None]
        if dev:
            ax_em.plot([r["step"] for r in dev], [r["dev_em"] for r in dev], marker="o", label=name)
    ax_loss.set(title="training loss (NLL per answer)", xlabel="step", ylabel="NLL")
    ax_em.set(title="dev exact match", xlabel="step", ylabel="EM", ylim=(0, 1))
    ax_loss.legend(), ax_em.legend()
    _save(fig, run / "training_curves.png")

    ab = results.get("ablations")  # absent from a base run (no BM25 index, no frozen run)
    if ab:
        fig, ax = plt.subplots(figsize=(5, 4))
        for name, row in (("RAG-Token", ab["n_docs"]["rag_token"]), ("RAG-Sequence", ab["n_docs"]["rag_sequence"]),
                          ("RAG-Token frozen", ab["frozen_retriever"]["by_k"]), ("RAG-Token BM25", ab["bm25_retriever"]["by_k"])):
            ax.plot(ab["ks"], [row[str(k)] for k in ab["ks"]], marker="o", label=name)
        ax.set(title="test EM vs K retrieved documents", xlabel="K", ylabel="EM", ylim=(0, 1))
        ax.legend()
        _save(fig, run / "em_vs_k.png")
    if results.get("knowledge_update"):  # a base run without snapshot B has none
        _swap_plot(run, results["knowledge_update"])
    _posterior_plot(run)
    if results.get("jeopardy"):
        _posterior_plot(run, run / "jeopardy" / "evidence.json", run / JEOPARDY_PLOT, "RAG-Token p(z | x, y_t), Jeopardy")


def _swap_plot(run: Path, ku: dict) -> None:
    systems = list(ku)
    fig, axes = plt.subplots(1, len(systems), figsize=(4.5 * len(systems), 3.8), squeeze=False)
    for ax, system in zip(axes[0], systems):
        grid = [[ku[system][i][q] for q in ("questions_a", "questions_b")] for i in ("index_a", "index_b")]
        ax.imshow(grid, vmin=0, vmax=1, cmap="viridis")
        for (y, x), v in [((y, x), grid[y][x]) for y in range(2) for x in range(2)]:
            ax.text(x, y, f"{v:.0%}", ha="center", va="center", color="white" if v < 0.5 else "black")
        ax.set(title=NAMES.get(system, system), xticks=[0, 1], yticks=[0, 1],
               xticklabels=["questions A", "questions B"], yticklabels=["index A", "index B"])
    _save(fig, run / "swap_matrix.png")


def _posterior_plot(run: Path, path: Path | None = None, png: Path | None = None, title: str = "RAG-Token p(z | x, y_t)") -> None:
    """A heat map of one output's per-token document posterior (`path`, default RUN/evidence.json)."""
    path = path or run / "evidence.json"
    ev = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
    fig, ax = plt.subplots(figsize=(max(6, 0.3 * len(ev["tokens"])) if ev else 6, 3.5))
    if ev and ev["posterior"]:
        post = list(map(list, zip(*ev["posterior"])))  # (K, T')
        ax.imshow(post, vmin=0, vmax=1, aspect="auto", cmap="Blues")
        ax.set(xticks=range(len(ev["tokens"])), yticks=range(len(post)),
               yticklabels=[f"{p['rank']}: {p['title'][:24]}" for p in ev["passages"]], xlabel="generated token")
        ax.set_xticklabels(ev["tokens"], rotation=60)
        ax.set_title(f"{title}: {ev['question'][:50]}", fontsize=9)
    else:
        ax.text(0.5, 0.5, "no generated tokens to show", ha="center")
    _save(fig, png or run / "token_posteriors.png")
