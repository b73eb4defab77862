"""`lewisrag compare`: one scorecard for RAG-Token, RAG-Sequence and prompt-stitching RAG."""

from __future__ import annotations

from pathlib import Path

import typer

from lewisrag.commands import _ui


def compare(
    ctx: typer.Context,
    run: Path = typer.Option(..., "--run", help="A `lewisrag reproduce` run folder with trained rag_token, rag_sequence and stitched systems."),
    questions: Path = typer.Option(None, "--questions", help="Questions for the layered evaluation (default: RUN/world/eval.jsonl)."),
    old_data: Path = typer.Option(None, "--data", hidden=True, help="Deprecated: --questions."),
    qa_fields: str = typer.Option(None, "--qa-fields", help=_ui.QA_FIELDS_HELP + " Applies to --questions."),
    systems: str = typer.Option("rag_token,rag_sequence,stitched", "--systems", help="Comma-separated systems to score."),
    out: Path = typer.Option(None, "--out", help="Folder for results.json, report.md, report.html, position.png (default: RUN/compare)."),
    position_questions: int = typer.Option(100, "--position-questions",
                                           help="Test questions in the position probe (gold passage moved to each input position); 0 skips it."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even if it holds files that are not a "
                                   "comparison lewisrag wrote (replaced once every file is written)."),
    as_json: bool = typer.Option(False, "--json", help="Print the scorecard as one JSON object instead of a table."),
) -> None:
    """Answer the same questions with every system and print one scorecard: QA, retrieval, layers, citations, cost."""
    from lewisrag.experiments.compare import compare_run, scorecard_rows

    data = _ui.renamed(ctx, "questions", "old_data", "--questions", "--data")
    fields = _ui.qa_fields(qa_fields)
    names = [s.strip() for s in systems.split(",") if s.strip()]
    out = out or run / "compare"
    with _ui.progress() as p:
        card = compare_run(run, out, names, data, position_questions, on_progress=_ui.Bars(p), overwrite=overwrite,
                           qa_fields=fields)
    header, rows = scorecard_rows(card)
    if as_json:
        _ui.print_json({"out": str(out), "systems": header, "scorecard": {r[0]: dict(zip(header, r[1:])) for r in rows}})
        return
    _ui.out.print(_ui.table("original versus prompt-stitching RAG", ["metric", *header],
                            [[r[0], *("–" if v is None else v for v in r[1:])] for r in rows]))
    _ui.out.print(f"written to {out}/results.json, report.md, report.html")
