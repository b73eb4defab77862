"""`lewisrag compare` (one scorecard for RAG-Token, RAG-Sequence and prompt-stitching RAG) and
`lewisrag train stitched` (the stitched system's generator)."""

from __future__ import annotations

from pathlib import Path

import typer

from lewisrag.commands import _ui


def compare(
    ctx: typer.Context,
    run: Path = typer.Option(..., "--run", help="A `lewisrag reproduce` run folder with trained rag_token, rag_sequence and stitched systems."),
    questions: Path = typer.Option(None, "--questions", help="Questions for the layered evaluation (default: RUN/world/eval.jsonl)."),
    old_data: Path = typer.Option(None, "--data", hidden=True, help="Deprecated: --questions."),
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
    names = [s.strip() for s in systems.split(",") if s.strip()]
    out = out or run / "compare"
    with _ui.progress() as p:
        card = compare_run(run, out, names, data, position_questions, on_progress=_ui.Bars(p), overwrite=overwrite)
    header, rows = scorecard_rows(card)
    if as_json:
        _ui.print_json({"out": str(out), "systems": header, "scorecard": {r[0]: dict(zip(header, r[1:])) for r in rows}})
        return
    _ui.out.print(_ui.table("original versus prompt-stitching RAG", ["metric", *header],
                            [[r[0], *("–" if v is None else v for v in r[1:])] for r in rows]))
    _ui.out.print(f"written to {out}/results.json, report.md, report.html")


def stitched(
    ctx: typer.Context,
    index: Path = typer.Option(..., "--index", help="Dense index the passages are retrieved from."),
    generator: Path = typer.Option(..., "--generator", help="Starting seq2seq checkpoint (a BART directory with its tokenizer)."),
    train: Path = typer.Option(..., "--train", help="Training QA examples (with answers and gold_passage_ids)."),
    out: Path = typer.Option(..., "--out", help="Output folder for the fine-tuned generator."),
    encoder: Path = typer.Option(None, "--encoder", help="DPR checkpoint searching the index (default: the index's own)."),
    n_docs: int = typer.Option(5, "--n-docs", help="Passages retrieved and stitched into each input (K); the gold one is always among them."),
    old_k: int = typer.Option(None, "--k", hidden=True, help="Deprecated: --n-docs."),
    steps: int = typer.Option(200, "--steps", help="Optimizer steps."),
    batch_size: int = typer.Option(8, "--batch-size", help="Examples per step."),
    lr: float = typer.Option(1e-4, "--lr", help="Peak AdamW learning rate (linear warmup, then linear decay)."),
    train_kinds: str = typer.Option("", "--train-kinds", help="Comma-separated question kinds to train on, e.g. short (default: all)."),
    gold_position: str = typer.Option("random", "--gold-position", help="random: the gold passage at a random position; retrieved: at its retrieval rank (last if missed)."),
    question_last: bool = typer.Option(False, "--question-last", help="Stitch the question after the passages."),
    mixed_n_docs: bool = typer.Option(False, "--mixed-n-docs", help="Stitch 1..--n-docs passages per training input (a curriculum)."),
    old_mixed_k: bool = typer.Option(False, "--mixed-k", hidden=True, help="Deprecated: --mixed-n-docs."),
    seed: int = typer.Option(0, "--seed", help="Batch order and gold positions."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even if it holds files that are not a "
                                   "stitched generator lewisrag wrote (replaced once training has finished)."),
    as_json: bool = typer.Option(False, "--json", help="Print the training summary as one JSON object instead of a table."),
) -> None:
    """Fine-tune a generator on stitched inputs whose targets end by citing the gold passage's number."""
    from lewisrag.data.io import InputError
    from lewisrag.training.stitched_train import StitchedTrainConfig, train_stitched

    k = _ui.renamed(ctx, "n_docs", "old_k", "--n-docs", "--k")
    mixed_k = _ui.renamed(ctx, "mixed_n_docs", "old_mixed_k", "--mixed-n-docs", "--mixed-k")
    for flag, value in (("--n-docs", k), ("--steps", steps), ("--batch-size", batch_size)):
        if value < 1:
            raise InputError(flag, f"must be at least 1, got {value}")
    cfg = StitchedTrainConfig(index=str(index), encoder=str(encoder or ""), generator=str(generator), train=str(train),
                              train_kinds=train_kinds, k=k, steps=steps, batch_size=batch_size, lr=lr,
                              gold_position=gold_position, question_last=question_last, mixed_k=mixed_k, seed=seed)
    with _ui.progress() as p:
        bars = _ui.Bars(p)
        summary = train_stitched(cfg, out, lambda s, t, loss: bars("training", s, t, f"loss {loss:.3f}"), overwrite=overwrite)
    if as_json:
        _ui.print_json(summary)
        return
    _ui.out.print(_ui.table("stitched generator", ["steps", "examples", "first loss", "final loss", "out"],
                            [[summary["steps"], summary["n_train"], summary["first_loss"], summary["final_loss"], summary["out"]]]))
