"""`lewisrag reproduce`: the main job."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.text import Text

from lewisrag.commands import _ui
from lewisrag.data.io import InputError
from lewisrag.eval.reports.i18n import LANG_HELP


def reproduce(
    ctx: typer.Context,
    out: Path = typer.Option(..., "--out", help="Run folder: config.json, results.json, report.md, plots and every stage's outputs."),
    preset: str = typer.Option("small", "--preset", help="tiny (smoke test, under 2 minutes), small (the demo, with the "
                               "shipped generator) or base (the paper's recipe on your own local checkpoints and data: "
                               "--question-encoder ... --passages; with only --hub-dir it checks the hub's are here)."),
    seed: int = typer.Option(0, "--seed", min=0, max=2**32 - 1, help="Seed of the world and of every training run."),
    tasks: str = typer.Option("qa", "--tasks", help="Comma-separated: qa (always; the default) and the paper's Table 2 "
                              "tasks on the world, jeopardy (question generation, Q-BLEU-1) and fever (claim "
                              "verification, label accuracy), each trained with both RAG variants and closed book."),
    resume: bool = typer.Option(False, "--resume", help="Skip the stages that a previous run into --out finished."),
    hub_dir: Path = typer.Option(None, "--hub-dir", envvar="LEWISRAG_HUB_DIR", help="base preset: a folder holding "
                                 "DIR/<repo> for each checkpoint and data set (else the Hugging Face cache is searched)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even if it holds files that are not a "
                                   "reproduction run (replaced once every stage is done), and the files added to its stage "
                                   "folders since lewisrag wrote them (a rerun refuses them by name first); never a folder "
                                   "lewisrag did not make."),
    threads: int = typer.Option(None, "--threads", min=0, help="torch CPU threads (default: the preset's; 0: the CPUs "
                                "idle at the start). Float results depend on it; config.json records it."),
    cpu_linear: str = typer.Option("auto", "--cpu-linear", envvar="LEWISRAG_CPU_LINEAR", help="Which library multiplies "
                                   "float32 linear layers on the CPU: auto (oneDNN on AMD CPUs with full-width AVX-512, "
                                   "Zen 5 and later, where torch's MKL runs at half speed; else torch's BLAS), blas or onednn. "
                                   "Float results depend on it; results.json's environment records it."),
    device: str = typer.Option("auto", "--device", help="Where DPR, pretraining, FEVER's verifier, the RAG, closed-book and "
                               "stitched runs train, indexes are encoded and every system answers: auto (a GPU when one "
                               "is visible), cpu or cuda; config.json records it."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary (retrieval, test QA, knowledge update, file paths) "
                                 "as one JSON object instead of tables."),
    question_encoder: Path = typer.Option(None, "--question-encoder", help="base: transformers DPRQuestionEncoder folder "
                                          "(e.g. facebook/dpr-question_encoder-single-nq-base), paired with --context-encoder."),
    context_encoder: Path = typer.Option(None, "--context-encoder", help="base: the DPRContextEncoder folder of its pair; "
                                         "it encodes --passages (and --passages-b)."),
    generator: Path = typer.Option(None, "--generator", help="base: transformers BART folder (e.g. facebook/bart-large)."),
    train: str = typer.Option(None, "--train", help="base: training QA file (nq_open, trivia_qa, web_questions, KILT, "
                              "ms_marco, DPR's or lewisrag's schema; .jsonl, .json, .parquet, DPR's .qa.csv or hf:; not "
                              "FEVER's claims: `train rag --task fever`)."),
    dev: str = typer.Option(None, "--dev", help="base: dev QA file (exact match during RAG training: it needs short answers)."),
    test: str = typer.Option(None, "--test", help="base: test QA file (EM/F1 of every system)."),
    passages: str = typer.Option(None, "--passages", help="base: passages of index A (wiki_dpr-schema save_to_disk folder, "
                                 ".parquet, a folder of .parquet shards, .jsonl, DPR's .tsv or hf:)."),
    passages_b: str = typer.Option(None, "--passages-b", help="base: passages of index B (the knowledge-update test)."),
    questions_a: str = typer.Option(None, "--questions-a", help="base: questions about --passages (with --passages-b and "
                                    "--questions-b: the knowledge-update swap matrix)."),
    questions_b: str = typer.Option(None, "--questions-b", help="base: questions about --passages-b."),
    steps: int = typer.Option(None, "--steps", min=1, help="base: RAG and closed-book training steps (default: the preset's)."),
    max_passages: int = typer.Option(None, "--max-passages", min=1, help="base: index (and read and check) only the first N passages of each set."),
    max_train: int = typer.Option(None, "--max-train", min=1, help="base: train on the first N training questions."),
    lang: str = typer.Option("en", "--lang", help="Language of the built-in world and of the reports: en or zh (a "
                             "Chinese world, reports in Chinese; --preset small reads the shipped generator-small-zh, built by "
                             "`lewisrag pretrain --preset small --lang zh`)."),
    report_lang: str = typer.Option(None, "--report-lang", help=LANG_HELP + " Default: --lang. Recorded in config.json "
                                    "when not en; --resume with another --report-lang redoes the compare stage (every "
                                    "system answers its questions again) and the report. The summary tables printed here follow it too; --json "
                                    "prints the same JSON in either language."),
) -> None:
    """Reproduce Lewis et al. 2020 at small scale: world -> DPR -> indexes A and B -> generator -> RAG-Token,
    RAG-Sequence, closed-book BART -> test QA -> ablations (frozen retriever, BM25, K) -> index hot swap ->
    prompt-stitching comparison -> report. --preset base runs on your local DPR pair, BART, QA files and passages
    (index, RAG-Token, RAG-Sequence, closed-book, test QA, swap matrix with --passages-b), skipping the world's stages."""
    # the flags are checked before torch and transformers load (presets and their configs need neither):
    # a typo is refused in a moment, not after ten seconds of imports
    from lewisrag.experiments.presets import get_preset, parse_tasks
    from lewisrag.eval.reports.i18n import check_lang

    check_lang(lang)
    report_lang = report_lang or lang
    check_lang(report_lang, "--report-lang")
    chosen = get_preset(preset).in_language(lang)
    asked = parse_tasks(tasks)
    if asked != ("qa",) and chosen.hub:
        raise InputError("--tasks", "jeopardy and fever run on the built-in world; --preset base reproduces QA only")
    asset_values = (question_encoder, context_encoder, generator, train, dev, test, passages, passages_b, questions_a,
                    questions_b, steps, max_passages, max_train)
    check_only = bool(chosen.hub) and bool(hub_dir) and all(v is None for v in asset_values)
    if check_only:  # nothing runs: a flag that sets how it would run is never ignored in silence
        source = ctx.get_parameter_source("hub_dir")
        named = "--hub-dir" if source is not None and source.name == "COMMANDLINE" else "$LEWISRAG_HUB_DIR"
        why = f"does not apply: --preset base with {named} alone only checks the assets (nothing runs, nothing is written)"
        _ui.refuse_given(ctx, ("resume", "overwrite", "seed", "threads", "device", "report_lang"), why)
        source = ctx.get_parameter_source("cpu_linear")  # the flag only: $LEWISRAG_CPU_LINEAR may stay set for other runs
        if source is not None and source.name == "COMMANDLINE" and cpu_linear != "auto":
            raise InputError("--cpu-linear", why)
    from dataclasses import replace

    from lewisrag.data.threads import check_device

    chosen = replace(chosen, device=check_device(device))
    from lewisrag.data.cpu_linear import resolve_kind

    source = ctx.get_parameter_source("cpu_linear")
    env_given = source is not None and source.name == "ENVIRONMENT"
    linear = resolve_kind(cpu_linear, "$LEWISRAG_CPU_LINEAR" if env_given else "--cpu-linear")  # one line, before anything runs
    if threads is not None:
        if threads > (os.cpu_count() or 1):  # 10,000 threads on two CPUs: 20,004 OS threads, and a run that never ended
            raise InputError("--threads", f"must be at most the {os.cpu_count()} CPUs here (0: the idle ones), got {threads}")
        chosen = replace(chosen, threads=threads)
    source = ctx.get_parameter_source("hub_dir")  # the flag only: $LEWISRAG_HUB_DIR may stay set for other runs
    hub_flag = source is not None and source.name == "COMMANDLINE"
    if hub_flag and not chosen.hub:  # never ignored in silence
        raise InputError("--hub-dir", f"finds --preset base's checkpoints and data; --preset {preset} runs on the built-in world")
    assets = read = None
    if chosen.hub:
        from lewisrag.experiments.base import BaseAssets

        paths = {"question_encoder": question_encoder, "context_encoder": context_encoder, "generator": generator,
                 "train": train, "dev": dev, "test": test, "passages": passages, "passages_b": passages_b,
                 "questions_a": questions_a, "questions_b": questions_b}
        assets = BaseAssets(**{k: None if v is None else str(v) for k, v in paths.items()}, steps=steps,
                            max_passages=max_passages, max_train=max_train)
        if assets.given() and hub_flag:
            raise InputError("--hub-dir", "checks where --preset base's hub assets are when no asset flag is given; "
                             "with --train, --passages and the others every asset comes from those flags")
        if check_only:  # checked before any progress display opens: a missing asset is one line
            from lewisrag.experiments.reproduce import check_asset_files
            from lewisrag.experiments.reproduce import reproduce as run

            found = run(chosen, out, hub_dir=hub_dir)["validated"]
            for asset, where in found.items():
                check_asset_files(asset, Path(where))
            _validated(preset, found, as_json)
            return
        from lewisrag.experiments.base import prepare

        # a missing flag or bad file: one line, before the progress display opens; what it read is handed on,
        # not read and checked again (a scan of every stored vector: minutes at 21M passages)
        read = prepare(assets, chosen.hub)
    else:
        given = [f for f, v in (("--question-encoder", question_encoder), ("--context-encoder", context_encoder),
                                ("--generator", generator), ("--train", train), ("--dev", dev), ("--test", test),
                                ("--passages", passages), ("--passages-b", passages_b), ("--questions-a", questions_a),
                                ("--questions-b", questions_b), ("--steps", steps), ("--max-passages", max_passages),
                                ("--max-train", max_train)) if v is not None]
        if given:
            raise InputError(given[0], f"only --preset base takes {', '.join(given)}")

    from lewisrag.data.outputs import made_by
    from lewisrag.experiments.reproduce import KIND
    from lewisrag.experiments.reproduce import reproduce as run

    if resume and overwrite:  # as `train rag`: one continues the run in --out, the other replaces it
        raise InputError("--overwrite", "does not apply with --resume, which continues the run in --out")
    note = None
    if made_by(out) == KIND and not resume and not overwrite:  # a slip costs the whole run's time
        note = f"note: {out} holds a reproduction; every stage runs again (--resume keeps the finished ones)"

    def on_stage(name: str, event: str, result: dict) -> None:
        nonlocal note
        if note and event == "started":  # once the inputs are checked: a bad one stays the one line on stderr
            typer.echo(note, err=True)
            note = None
        if event == "skipped":
            _ui.console.print(f"{name}: done before, skipped (--resume)", style="dim")
        elif event == "done":
            _ui.console.print(Text.assemble((name, "green"), f" done in {result['seconds']:.1f}s"))

    with _ui.progress() as p:
        results = run(chosen, out, seed=seed, resume=resume, on_stage=on_stage, on_progress=_ui.Bars(p), hub_dir=hub_dir,
                      overwrite=overwrite, assets=assets, read=read, tasks=asked, lang=report_lang, cpu_linear=linear)
    _print_notes(results)
    if as_json:
        _ui.print_json(summary(results, out))
        return
    _render(results, out, report_lang)


def _print_notes(results: dict) -> None:
    """What the swap noticed about its inputs (two indexes holding the same passages, questions it left
    out), and the test questions no score counts (without an answer: results.json's test_unscored, which the
    tables' numbers leave out): notes on stderr, one unwrapped line each, with --json too, as ask's and swap's;
    stdout keeps the results."""
    for line in ((results.get("stages") or {}).get("knowledge_update") or {}).get("notes") or []:
        typer.echo(f"note: {line}", err=True)
    if isinstance(unscored := results.get("test_unscored"), int) and unscored > 0:
        typer.echo(f"note: the test QA scores leave out {unscored} test question{'s' * (unscored != 1)} without a "
                   "reference answer to score against (results.json: test_unscored; report.md says so under Table 1)",
                   err=True)


def summary(results: dict, out: Path) -> dict:
    """What the tables show, for --json: retrieval recall, test QA per system, the knowledge-update matrix, the files,
    and with --tasks the Jeopardy and FEVER scores (`_TASK_KEYS`)."""
    tasks = {task: {s: {k: v.get(k) for k in keys} for s, v in results[task].items() if s in SYSTEMS}
             for task, keys in _TASK_KEYS.items() if results.get(task)}
    return {"out": str(out), "results": str(Path(out) / "results.json"), "report": str(Path(out) / "report.md"),
            "retrieval": results["retrieval"], "qa": results.get("qa", {}), "knowledge_update": results.get("knowledge_update", {}),
            **tasks}


SYSTEMS = ("rag_token", "rag_sequence", "closed_book")  # the systems of the paper's Table 2
_TASK_KEYS = {"jeopardy": ("q_bleu1", "bleu1"), "fever": ("acc3", "acc2")}


def _validated(preset: str, found: dict[str, str], as_json: bool = False) -> None:
    if as_json:
        _ui.print_json({"preset": preset, "validated": dict(found), "written": False})
        return
    _ui.out.print(_ui.table(f"preset {preset}: every asset is on this machine", ["asset", "found at"],
                            [[k, v] for k, v in found.items()]))
    _ui.out.print("validated only: with --hub-dir alone, reproduce checks that the recipe's checkpoints and data are "
                  "here and writes nothing; to run it, pass the assets as flags (--question-encoder, --passages, ...: "
                  "docs/real-data.md)")


def _render(results: dict, out: Path, lang: str = "en") -> None:
    """The summary as tables labelled in `lang` (the report's words; English: as they always were)."""
    from lewisrag.eval.reports.i18n import messages
    from lewisrag.experiments.report import swap_columns

    t = messages(lang)
    system = (lambda s: s) if lang == "en" else t.system  # English rows name the key, Chinese ones as report.md does
    r = results["retrieval"]
    ks = [k for k in ("recall_at_1", "recall_at_5", "recall_at_20") if k in r]
    if r.get("answer_recall"):  # the base preset's main retrieval measure, as report.md shows it
        _ui.out.print(_ui.table(t("cli.rep.answer_recall", n=r.get("answerable_questions", "?")),
                                [t("rep.retrieval.col"), *(f"top-{k}" for k in r["answer_recall"])],
                                [["DPR", *r["answer_recall"].values()]]))
    if "skipped" in r:
        _ui.out.print(t("cli.rep.not_measured", why=t.text(r["skipped"])))
    else:
        rows = [["DPR", *[r[k] for k in ks]]] + ([["BM25", *[r["bm25"][k] for k in ks]]] if "bm25" in r else [])
        cols = ks if lang == "en" else [k.replace("recall_at_", "recall@") for k in ks]
        _ui.out.print(_ui.table(t("cli.rep.retrieval", split=t.word("split", r["split"])), [t("rep.retrieval.col"), *cols], rows))
    qa = results.get("qa", {})
    _ui.out.print(_ui.table(t("cli.rep.qa"), [t("col.system"), "EM", "F1", "ROUGE-L", t("cli.rep.long_rougeL")],
                            [[system(s), v.get("exact_match"), v.get("f1"), v.get("rougeL"), (v.get("long") or {}).get("rougeL", "")]
                             for s, v in qa.items()]))
    ku = results.get("knowledge_update", {})
    for name, why in (results.get("skipped") or {}).items():
        _ui.out.print(t("cli.rep.not_run", name=name, why=t.text(why)))
    if ku:  # not run: the line above says why, and an empty table would say nothing
        columns = swap_columns(results, t, "plot.questions_a", "plot.questions_b")  # each with its question count
        _ui.out.print(_ui.table(t("cli.rep.swap"), [t("col.model"), t("rep.swap.col_index"), *columns],
                                [[system(m), t.word("index", i), c["questions_a"], c["questions_b"]]
                                 for m, by in ku.items() for i, c in by.items()]))
    tasks = {k: v for k, v in summary(results, out).items() if k in _TASK_KEYS}
    if tasks:  # reproduce --tasks: the paper's Table 2 columns, as report.md shows them
        rows = [s for s in SYSTEMS if any(s in by for by in tasks.values())]
        _ui.out.print(_ui.table(t("cli.rep.t2"), [t("col.system"), "Jeopardy Q-BLEU-1", "Jeopardy BLEU-1", "FEVER 3-way",
                                                   "FEVER 2-way"],
                                [[system(s), *((tasks.get(task) or {}).get(s, {}).get(k, "") for task, keys in _TASK_KEYS.items()
                                               for k in keys)] for s in rows]))
    _ui.out.print(t("cli.rep.files", results=Path(out) / "results.json", report=Path(out) / "report.md"), soft_wrap=True)
