"""`lewisrag eval answers` and `lewisrag eval bughunt`: layered evaluation of RAG answers."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.text import Text

from lewisrag.commands import _llm_options as _llm
from lewisrag.commands import _ui
from lewisrag.eval.reports.i18n import LANG_HELP

JUDGE_HELP = ("Judge of 'is this statement supported': lexical (token-support baseline), nli:PATH (a local "
              "transformers NLI classifier), llm:MODEL (OpenAI-compatible endpoint; key from LEWISRAG_LLM_API_KEY) "
              "or labels:FILE (human labels JSONL). With llm:MODEL a request that fails after its retries is a null "
              "score with its reason; an endpoint that refuses every request (HTTP 401/403, 404, a redirect) ends the "
              "run at its first refusal, and one that answers no request at all ends it too: one line naming the "
              "endpoint, exit 2, nothing written.")


KIND = "evaluation"  # the marker kind of evaluation run folders (lewisrag.data.outputs)
EXPORTS = {"ragas": "ragas.jsonl"}  # --export format -> the file it writes into the run folder
EXPORT_HELP = ("Also write the answers in another tool's format: ragas writes ragas.jsonl, one row per answer like ragas' "
               "results table: id, system, the inputs as user_input, retrieved_contexts, response, reference, and "
               "ragas' metric columns faithfulness, answer_relevancy and context_recall, each filled by the lewisrag "
               "metric of the same name (null where it has no score; ragas splits statements as --splitter atomic does, "
               "and scores 0 where no question was generated back, lewisrag null). "
               "ragas' context_precision has no lewisrag equivalent and is left out. Where records have them, the "
               "contexts' ids (retrieved_context_ids, which citations name), the gold ids (reference_context_ids), "
               "the other acceptable answers (other_references: an older ragas file's ground_truths after the first), "
               "reference_statements, category and claims get columns too, so that --answers reads the file back to "
               "the same scores.")
CLAIMS_HELP = ("RAGChecker's claim-level diagnostics (claims.precision, claims.hallucination, ...): the record's "
               "response_claims/reference_claims, else the --splitter's statements, checked against the reference and "
               "each retrieved passage. Costs one judge check per claim and passage more (in the same batch, cached).")
TABLES_HELP = "The tables printed here follow it too; --json prints the same JSON in either language."
OVERWRITE_HELP = "Replace --out even if it holds files that are not an evaluation lewisrag wrote (replaced once every file is written); never a folder lewisrag did not make."
# the notes on the judge's undecided verdicts beside the answers' statements (`_other_verdicts`' kinds): message keys
UNDECIDED_NOTES = {"references": "cli.note.undecided_references", "citations": "cli.note.undecided_citations",
                   "claims": "cli.note.undecided_claims", "relevancy": "cli.note.undecided_relevancy"}


def answers(
    ctx: typer.Context,
    answers_file: Path = typer.Option(None, "--answers", help="Answer records (.jsonl/.json/.parquet or hf:NAME[:CONFIG]:SPLIT), ragas "
                                     "field names, current (user_input, response, retrieved_contexts, reference) or older "
                                     "(question, answer, contexts, ground_truth or ground_truths); id optional. Required."),
    old_file: Path = typer.Argument(None, hidden=True, metavar="FILE", help="Deprecated: --answers FILE."),
    judge: str = typer.Option("lexical", "--judge", help=JUDGE_HELP),
    out: Path = typer.Option(..., "--out", help="Run directory: results.json, report.md, report.html (the interactive page), "
                             "config.json and PNG plots are written there."),
    cache_dir: Path = _llm.cache_dir(),
    concurrency: int = _llm.concurrency(),
    llm_base_url: str = _llm.base_url(),
    llm_temperature: float = _llm.temperature(),
    llm_json_mode: bool = _llm.json_mode(),
    timeout: float = _llm.timeout(),
    max_retries: int = _llm.max_retries(),
    splitter: str = typer.Option("sentences", "--splitter", help="sentences (deterministic) or atomic (the llm judge decomposes each answer)."),
    recall_at: list[int] = typer.Option([1, 5, 10], "--recall-at", help="recall@k cut-offs when gold_passage_ids are given; repeat the flag."),
    old_k: list[int] = typer.Option(None, "-k", hidden=True, help="Deprecated: --recall-at."),
    embedder: Path = typer.Option(None, "--embedder", help="Local sentence-embedding model dir for answer relevancy (needs an llm judge)."),
    export: str = typer.Option(None, "--export", help=EXPORT_HELP),
    claims: bool = typer.Option(True, "--claims/--no-claims", help=CLAIMS_HELP),
    claim_extractor: str = typer.Option("splitter", "--claim-extractor", help="Claims of records without response_claims/reference_claims: splitter (the --splitter's statements, the reference's sentences) or llm (the llm judge extracts RAGChecker-style triplet claims, cached)."),
    as_json: bool = typer.Option(False, "--json", help="Print the aggregates as JSON instead of tables."),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    lang: str = typer.Option("en", "--lang", help=LANG_HELP + " " + TABLES_HELP),
) -> None:
    """Score answers layer by layer (retrieval, generation, citation) and diagnose each question."""
    from lewisrag.data.io import InputError, given_once
    from lewisrag.data.outputs import check_out_dir
    from lewisrag.eval import judges, metrics
    from lewisrag.eval.records import ragas_rows, read_answers
    from lewisrag.eval.diagnose import Thresholds
    from lewisrag.eval.reports.html import page_data_from_results, render_report_html
    from lewisrag.eval.reports.markdown import render_results
    from lewisrag.eval.evaluator import EMBEDDER_MAX_LENGTH, EvalConfig, embedder_info, evaluate_answers
    from lewisrag.eval.reports.i18n import check_lang, cjk_font, messages

    check_lang(lang)
    t = messages(lang)
    file = _ui.renamed(ctx, "answers_file", "old_file", "--answers FILE", "the positional FILE")
    if file is None:
        raise _ui.UsageError("Missing option '--answers'.", ctx=ctx)
    k = _ui.renamed(ctx, "recall_at", "old_k", "--recall-at", "-k")
    if splitter not in ("sentences", "atomic"):
        raise InputError("--splitter", f"unknown splitter '{splitter}': use sentences or atomic")
    if claim_extractor not in ("splitter", "llm"):  # here, not first inside the judging progress bar
        raise InputError("--claim-extractor", f"unknown claim extractor '{claim_extractor}': use splitter or llm")
    if any(x < 1 for x in k):
        raise InputError("--recall-at", "cut-offs must be at least 1")
    given_once("--recall-at", k)  # as eval retrieval: a repeat folded into one column in silence
    if export is not None and export not in EXPORTS:
        raise InputError("--export", f"unknown format '{export}': use {', '.join(EXPORTS)}")
    _llm.check(ctx, judge, llm_temperature, llm_json_mode, also=("embedder",), timeout=timeout, max_retries=max_retries)
    if not claims:
        _ui.refuse_given(ctx, ("claim_extractor",), "extracts claims, which --no-claims turns off")
    check_out_dir(out, KIND, overwrite=overwrite,  # before anything is judged
                  inputs={"--answers": file, "--embedder": embedder, "--cache-dir": cache_dir,
                          "--judge": judges.spec_path(judge)}, writes=[EXPORTS[export]] if export else [])
    records = read_answers(file)  # every record is checked before anything is judged or written
    if not any(r.gold_passage_ids for r in records):  # never ignored in silence
        _ui.refuse_given(ctx, ("recall_at", "old_k"), f"measures recall@k of gold_passage_ids, which no record of {file} has")
    the_judge = judges.from_spec(judge, cache_dir=cache_dir, concurrency=concurrency, base_url=llm_base_url,
                                 temperature=llm_temperature, json_mode=llm_json_mode, timeout=timeout,
                                 max_retries=max_retries)
    if splitter == "atomic" and not hasattr(the_judge, "decompose"):
        raise InputError("--splitter", "the atomic splitter needs an llm judge")
    if claims and claim_extractor == "llm" and not hasattr(the_judge, "extract_claims"):
        raise InputError("--claim-extractor", f"claim extraction by llm needs an llm judge (--judge llm:MODEL), not '{judge}'")
    embed = metrics.load_embedder(str(embedder), EMBEDDER_MAX_LENGTH) if embedder else None
    embedder_id = embedder_info(embedder) if embedder else None  # what the gate compares answer relevancy by
    cfg = EvalConfig(splitter=splitter, ks=tuple(sorted(set(k))), thresholds=Thresholds(), claims=claims, claim_extractor=claim_extractor)
    config = {"command": "eval answers", "file": str(file), "judge": judge, "splitter": splitter, "ks": list(cfg.ks),
              "concurrency": concurrency, "embedder": str(embedder) if embedder else None,
              "thresholds": cfg.thresholds.__dict__, "claims": claims, "claim_extractor": claim_extractor,
              "judge_fingerprint": the_judge.fingerprint}
    config |= _llm.recorded(judge, llm_temperature, llm_json_mode, timeout, max_retries)
    if lang != "en":
        config["lang"] = lang
    with _ui.progress() as p:
        task = p.add_task("judging", total=len(records), info=judge)
        results = evaluate_answers(records, the_judge, cfg, embed=embed, embedder=embedder_id, config=config,
                                   progress=lambda n: p.advance(task, n))
        _check_endpoint(the_judge)  # inside: the bar goes with the error
        data = results.to_json()
        undecided = _check_decided(data, judge, f"the answers of {file}")  # before anything is written
    _note_undecided(data, judge, undecided, t("cli.note.the_answers"), t)
    _note_unmatched_gold(records, file, t)
    plots_in_english = lang != "en" and cjk_font() is None  # plot_messages' fallback: the report says so
    report = render_results(data, lang, plots_in_english=plots_in_english)
    page = render_report_html(page_data_from_results(data, lang=lang))
    exported = {EXPORTS[export]: list(ragas_rows(records, data["records"]))} if export else {}
    extra = _write_run(out, overwrite, config, results, report, page, exported, lang)
    _show_answers(data, the_judge, as_json, lang)
    _ui.console.print(t("cli.eval.wrote", files=t.join([f"{out}/results.json", "report.md", "report.html", "config.json",
                                                         *extra], "sep.enum")), soft_wrap=True)


def _note_unmatched_gold(records, file: Path, t) -> None:
    """Records with gold_passage_ids whose retrieved_contexts are plain strings have no ids to match:
    their recall@k is NaN, counted in the aggregates' rows, and said here (in `t`'s language) rather than
    only in each record's nan_reasons (recall@k vanished from the tables when no record could be measured)."""
    gold = [r for r in records if r.gold_passage_ids and r.category != "not_in_kb"]
    plain = sum(not r.has_context_ids for r in gold)
    if plain:
        typer.echo(t("cli.note.unmatched_gold", plain=plain, n=len(gold), file=file), err=True)


def _check_endpoint(judge) -> None:
    """An llm judge's endpoint that refused for good or answered nothing ends the command here, before
    anything is written or printed: one line naming the endpoint and what to fix (`LLMJudge.run_error`)."""
    if (error := getattr(judge, "run_error", lambda: None)()) is not None:
        raise error


def _write_run(out: Path, overwrite: bool, config: dict, results, report: str, page: str,
               jsonl: dict[str, list[dict]] | None = None, lang: str = "en") -> list[str]:
    """The run folder (`lewisrag.eval.results.write_run_dir`) with the score histograms (labelled in
    `lang`) and the `jsonl` files (name -> rows); returns the names of those extra files."""
    from lewisrag.data.io import write_jsonl
    from lewisrag.eval.reports.html import plot_run
    from lewisrag.eval.results import write_run_dir

    def more(d: Path) -> list[str]:
        written = plot_run(results.aggregates, d, lang)
        for name, rows in (jsonl or {}).items():
            write_jsonl(d / name, rows)
            written.append(name)
        return written

    return write_run_dir(out, KIND, results, report_md=report, report_html=page, config=config, more=more,
                         overwrite=overwrite)


def _show_answers(results: dict, judge, as_json: bool, lang: str = "en") -> None:
    """The aggregates as tables labelled in `lang` (the report's words), or as JSON (the same in every language)."""
    from lewisrag.eval.evaluator import CLAIM_CONFIDENCE
    from lewisrag.eval.reports.claims import claim_columns, table_rows
    from lewisrag.eval.reports.distributions import metric_label
    from lewisrag.eval.reports.i18n import messages
    from lewisrag.eval.reports.markdown import count_columns

    agg = results["aggregates"]
    if as_json:
        _ui.print_json(agg)
        return
    from lewisrag.eval.evaluator import undecided_metrics

    t = messages(lang)
    # several systems: each apart, as the pooled means would mix them; their names from the answers file, escaped
    systems = {_ui.printable(name): mine for name, mine in (agg.get("by_system") or {}).items()}
    # a metric measured on no record keeps its row where the judge left it undecided: context recall whose every
    # verdict was undecided vanished from the table, as recall@k on plain-string contexts once did
    # (`_note_unmatched_gold`); one with nothing to measure (no reference, no --embedder) has no row
    undecided = set().union(*(undecided_metrics(r["nan_reasons"]) for r in results["records"]))
    keys = [m for m in ("faithfulness", "context_recall", "answer_completeness", "answer_relevancy", "on_topic_rate",
                        "citation_recall", "citation_precision", "exact_match", "f1", "rougeL") if agg[m]["n"] or m in undecided]
    keys += [k for k in agg if k.startswith("recall_at_k@")]
    columns = [t("col.metric"), "n", t("cli.col.null"), t("cli.col.mean"), t("cli.col.share_below_1"), t("cli.col.share_below_0.5")]
    if systems:
        _ui.out.print(t("cli.eval.systems", n=len(systems), names=t.join(systems, "sep.enum")))
    for name, mine in (systems or {None: agg}).items():
        rows = [[metric_label(m, t), d["n"], d["nan"], d["mean"], d["share_below_1"], d["share_below_0.5"]]
                for m in keys if (d := mine.get(m))]  # a system without gold ids has no recall@k
        _ui.out.print(_ui.table(t("cli.eval.metrics_of", system=name) if systems else t("cli.eval.metrics"), columns, rows))
    columns = claim_columns(agg)
    if columns:
        _ui.out.print(_ui.table(t("cli.eval.claims", pct=f"{CLAIM_CONFIDENCE:.0%}"),
                                [t("col.metric"), *(t("cl.column.all") if c == "all" and len(columns) == 1 else c for c in columns)],
                                table_rows(columns, lang)))
    columns, rows = count_columns(agg, "primary_cause_counts", list(agg["primary_cause_counts"]), t("col.questions"), t)
    _ui.out.print(_ui.table(t("bh.col.primary"), [t("col.layer"), *columns], [[_layer(k, t), *c] for k, *c in rows]))
    columns, rows = count_columns(agg, "citation_status_counts", list(agg["citation_status_counts"]), t("col.sentences"), t)
    _ui.out.print(_ui.table(t("cli.eval.citations"), [t("col.status"), *columns], rows))
    nik = agg["not_in_kb"]
    if systems:
        each = t.join(f"{name} {mine['not_in_kb']['refused']}/{mine['not_in_kb']['n']}" for name, mine in systems.items())
        _ui.out.print(t("cli.eval.nik_systems", refused=nik["refused"], n=nik["n"], systems=each))
    else:
        _ui.out.print(t("cli.eval.nik", refused=nik["refused"], n=nik["n"]))
    usage = getattr(judge, "usage", None)
    if usage:
        _ui.out.print(t("cli.eval.usage", **{k: usage[k] for k in ("calls", "cache_hits", "retries", "failures", "prompt_tokens",
                                                                      "completion_tokens")}, cost=f"{judge.cost:.4f}"))


def _judged_statements(result: dict) -> list[dict]:
    """The answers' statements the judge was asked about (a not_in_kb question's are not judged). An
    answer the atomic splitter could not decompose counts as one undecided statement with its reason:
    a judge that decomposed none of them, and so decided nothing, was let through (exit 0, every
    layer n/a)."""
    from lewisrag.eval.evaluator import DECOMPOSE_FAILED

    out = []
    for rec in result["records"]:
        if rec.get("category") == "not_in_kb":
            continue
        why = (rec.get("nan_reasons") or {}).get("faithfulness") or ""
        if not rec["statements"] and why.startswith(DECOMPOSE_FAILED):
            out.append({"supported": None, "reason": why})
        out += rec["statements"]
    return out


def _other_verdicts(result: dict) -> dict[str, tuple[int, int, str]]:
    """The judge's verdicts on the answers beside their statements (a not_in_kb question's are not judged), by
    kind: {"references" | "citations" | "claims" | "relevancy": (undecided, judged, the first undecided one's
    reason)}.

    Each reference statement is checked twice (against the contexts, against the answer); each sentence that
    cites counts once, undecided where its check against all it cites or a check of one citation (alone, or
    left out) was; each claim is checked once per premise RAGChecker reads, and claims the extractor could
    not make (`claims.failed`) count as one undecided check, as an answer the atomic splitter could not
    decompose counts as one undecided statement (`_judged_statements`); each answer the judge was asked to
    write questions back for counts once (answer relevancy)."""
    from lewisrag.eval.evaluator import QUESTIONS_FAILED
    from lewisrag.eval.metrics import NOT_IN_DOCUMENTS

    tally = {kind: [0, 0, ""] for kind in UNDECIDED_NOTES}

    def add(kind: str, judged: int, reasons: list[str]) -> None:
        """`judged` verdicts, undecided for each of `reasons`."""
        counts = tally[kind]
        counts[0], counts[1] = counts[0] + len(reasons), counts[1] + judged
        counts[2] = counts[2] or next(iter(reasons), "")

    for rec in result["records"]:
        if rec.get("category") == "not_in_kb":
            continue
        refs = rec.get("reference_statements") or []
        add("references", 2 * len(refs), [r.get(f"{side}_reason", "") for r in refs for side in ("in_contexts", "in_answer")
                                          if r[side] is None])
        # each sentence that cites, asked of the judge (one citing an id that names no passage is refused unasked):
        # undecided where its joint check or a check of one citation (alone, or left out) was
        cited = [v for v in rec.get("citation_verdicts") or []
                 if v["citations"] and not str(v.get("reason") or "").startswith(NOT_IN_DOCUMENTS)]
        add("citations", len(cited), [v["reason"] if v["supported"] is None else v.get("undecided_reason", "")
                                      for v in cited if v["supported"] is None or v.get("undecided_citations")])
        relevancy = rec["nan_reasons"].get("answer_relevancy")
        asked = rec["metrics"].get("answer_relevancy") is not None or str(relevancy).startswith(QUESTIONS_FAILED)
        add("relevancy", int(asked), [relevancy] if asked and rec["metrics"].get("answer_relevancy") is None else [])
        claims = rec.get("claims") or {}
        rows = [row for side in (claims.get("checks") or {}).values() for row in side]
        # a check not asked (correctness without a reference) is null as an undecided one is: `undecided` counts those
        decided = sum(v is not None for row in rows for v in (row.get("correct"), row.get("covered"), *row["in_contexts"]))
        why = [row["reason"] for row in rows if "reason" in row] or [""]
        reasons = list((claims.get("failed") or {}).values()) + why[:1] * claims.get("undecided", 0)
        add("claims", decided + len(reasons), reasons)
    return {kind: tuple(counts) for kind, counts in tally.items()}


def _note_undecided(result: dict, spec: str, counts: tuple[int, int], answers: str, t) -> None:
    """Say on stderr, in `t`'s language, how many of the judged statements of `answers` `spec` left undecided
    (`counts`, `_check_decided`'s), then as many of its other verdicts (`_other_verdicts`): never left out in
    silence, since the scores and the diagnosis are over the decided ones (context recall read 1.000 from
    one of two reference statements, the other undecided, and nothing said so)."""
    undecided, judged = counts
    if undecided:
        first = next(s for s in _judged_statements(result) if s["supported"] is None)
        typer.echo(t("cli.note.undecided", spec=spec, decided=judged - undecided, judged=judged, answers=answers,
                     undecided=undecided, reason=t.text(first["reason"])), err=True)
    for kind, (undecided, judged, reason) in _other_verdicts(result).items():
        if undecided:
            typer.echo(t(UNDECIDED_NOTES[kind], spec=spec, decided=judged - undecided, judged=judged, answers=answers,
                         undecided=undecided, reason=t.text(reason)), err=True)


def _check_decided(result: dict, spec: str, answers: str = "the BugHunt answers") -> tuple[int, int]:
    """A judge that decided none of the answers' statements (labels:FILE of other pairs) leaves the
    layers it measures n/a, so a hallucinated or misplaced answer would read as having no failing
    layer: refused, as `calibrate` refuses a judge that decided none of its labels. Returns how many
    of the judged statements are undecided, and how many were judged."""
    from lewisrag.data.io import InputError

    statements = _judged_statements(result)
    undecided = sum(s["supported"] is None for s in statements)
    if statements and undecided == len(statements):
        raise InputError("--judge", f"{spec} decided none of the {len(statements)} statements of {answers} "
                         f"(the first: {statements[0]['reason']}): their support was not measured, and each layer "
                         "judged from it would read n/a")
    return undecided, len(statements)


def _layer(layer: str, t) -> str:
    """A layer's row label: its key in English (as the tables always showed it), the report's name in Chinese."""
    return layer if t.lang == "en" else t.word("layer", layer)


def bughunt(
    ctx: typer.Context,
    out: Path = typer.Option(None, "--out", help="Also write results.json, report.md, report.html (the interactive page), "
                             "config.json and PNG plots to this run directory."),
    judge: str = typer.Option(None, "--judge", help="Another judge instead of the sample's human labels (one that decides none of the "
                             "answers' statements, such as labels:FILE of other pairs, is refused: exit 2). " + JUDGE_HELP),
    cache_dir: Path = _llm.cache_dir(),
    concurrency: int = _llm.concurrency(),
    llm_base_url: str = _llm.base_url(),
    llm_temperature: float = _llm.temperature(),
    llm_json_mode: bool = _llm.json_mode(),
    timeout: float = _llm.timeout(),
    max_retries: int = _llm.max_retries(),
    as_json: bool = typer.Option(False, "--json", help="Print the whole result as JSON instead of tables."),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    lang: str = typer.Option("en", "--lang", help=LANG_HELP + " The tables printed here follow it too; --json prints the "
                             "same JSON in either language (so it takes --lang only with --out)."),
) -> None:
    """The reference chapter's BugHunt sample: six preset answers (one correct, five each failing in one layer) and the rule checker vs human labels."""
    from lewisrag.data.io import InputError
    from lewisrag.data.outputs import check_out_dir
    from lewisrag.eval import judges
    from lewisrag.eval.bughunt import load_bughunt
    from lewisrag.eval.reports.html import page_data_from_results, render_report_html
    from lewisrag.eval.reports.markdown import (bughunt_answer_rows, bughunt_columns, granularity_columns, granularity_rows,
                                                render_bughunt)
    from lewisrag.eval.evaluator import evaluate_bughunt
    from lewisrag.eval.reports.i18n import check_lang, cjk_font, messages

    check_lang(lang)
    _llm.check(ctx, judge, llm_temperature, llm_json_mode, timeout=timeout, max_retries=max_retries)
    if out is None and overwrite:
        raise InputError("--overwrite", "applies with --out")
    if out is None and as_json:  # nothing would be in that language: the JSON is the same in both
        _ui.refuse_given(ctx, ("lang",), "sets the language of the tables and of --out's reports; --json alone prints neither")
    if out is not None:
        check_out_dir(out, KIND, overwrite=overwrite, inputs={"--judge": judges.spec_path(judge),
                                                              "--cache-dir": cache_dir})
    the_judge = judges.from_spec(judge, cache_dir=cache_dir, concurrency=concurrency, base_url=llm_base_url,
                                 temperature=llm_temperature, json_mode=llm_json_mode, timeout=timeout,
                                 max_retries=max_retries) if judge else None
    sample = load_bughunt()
    results = evaluate_bughunt(sample, the_judge)
    _check_endpoint(the_judge)
    result = results.to_json()
    t = messages(lang)
    if the_judge is not None:  # a labels file that misses a statement turned a hallucination into another layer's failure
        _note_undecided(result, judge, _check_decided(result, judge), t("cli.note.the_bughunt_answers"), t)
    if out is not None:
        # the knowledge base gives the page the text of REQ-AUTH-03 where it was not retrieved
        page = render_report_html(page_data_from_results(result, {d.id: d.to_dict() for d in sample.docs}, lang=lang))
        config = {"command": "eval bughunt", "judge": judge or "bughunt human labels",
                  "judge_fingerprint": result["judge"]["fingerprint"]} | _llm.recorded(judge, llm_temperature, llm_json_mode,
                                                                                   timeout, max_retries)
        config |= {"lang": lang} if lang != "en" else {}
        plots_in_english = lang != "en" and cjk_font() is None  # distributions.png's fallback: the report says so
        _write_run(out, overwrite, config, results, render_bughunt(result, lang, plots_in_english), page, lang=lang)
    if as_json:
        _ui.print_json(result)
        return
    _ui.out.print(Text.assemble((result["question"], "bold"), "  " + t("cli.bh.judge", name=result["judge"]["name"])))
    _ui.out.print(_ui.table(t("cli.bh.answers"), bughunt_columns(lang), bughunt_answer_rows(result, lang)))
    _ui.out.print(t("cli.bh.note"))
    _ui.out.print(_ui.table(t("cli.bh.granularity"), granularity_columns(lang), granularity_rows(result, lang)))
    counts = result["rule_checker"]["table"]
    _ui.out.print(_ui.table(t("cli.bh.rules"), [t.word("bh.outcome", k) for k in counts], [list(counts.values())]))
