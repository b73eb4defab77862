"""`lewisrag compare` (one scorecard for RAG-Token, RAG-Sequence and prompt-stitching RAG) and
`lewisrag train stitched` (the stitched system's generator)."""

from __future__ import annotations

from pathlib import Path

import typer

from lewisrag.commands import _ui


def compare(
    run: Path = typer.Option(..., "--run", help="A `lewisrag reproduce` run folder with trained rag_token, rag_sequence and stitched systems."),
    data: Path = typer.Option(None, "--data", help="Questions for the layered evaluation (default: RUN/world/eval.jsonl)."),
    systems: str = typer.Option("rag_token,rag_sequence,stitched", "--systems", help="Comma-separated systems to score."),
    out: Path = typer.Option(None, "--out", help="Folder for results.json, report.md, report.html, position.png (default: RUN/compare)."),
    position_questions: int = typer.Option(100, "--position-questions",
                                           help="Test questions in the position probe (gold passage moved to each input position); 0 skips it."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even if it holds files that are not a "
                                   "comparison lewisrag wrote (replaced once every file is written)."),
) -> None:
    """Answer the same questions with every system and print one scorecard: QA, retrieval, layers, citations, cost."""
    from lewisrag.experiments.compare import compare_run, scorecard_rows

    names = [s.strip() for s in systems.split(",") if s.strip()]
    out = out or run / "compare"
    with _ui.progress() as p:
        card = compare_run(run, out, names, data, position_questions, on_progress=_ui.Bars(p), overwrite=overwrite)
    header, rows = scorecard_rows(card)
    _ui.out.print(_ui.table("original versus prompt-stitching RAG", ["metric", *header],
                            [[r[0], *("–" if v is None else v for v in r[1:])] for r in rows]))
    _ui.out.print(f"written to {out}/results.json, report.md, report.html")


def stitched(
    index: Path = typer.Option(..., "--index", help="Dense index the passages are retrieved from."),
    generator: Path = typer.Option(..., "--generator", help="Starting seq2seq checkpoint (a BART directory with its tokenizer)."),
    train: Path = typer.Option(..., "--train", help="Training QA examples (with answers and gold_passage_ids)."),
    out: Path = typer.Option(..., "--out", help="Output folder for the fine-tuned generator."),
    encoder: Path = typer.Option(None, "--encoder", help="DPR checkpoint searching the index (default: the index's own)."),
    k: int = typer.Option(5, "--k", help="Passages stitched into each input; the gold one is always among them."),
    steps: int = typer.Option(200, "--steps", help="Optimizer steps."),
    batch_size: int = typer.Option(8, "--batch-size", help="Examples per step."),
    lr: float = typer.Option(1e-4, "--lr", help="Peak AdamW learning rate (linear warmup, then linear decay)."),
    train_kinds: str = typer.Option("", "--train-kinds", help="Comma-separated question kinds to train on, e.g. short (default: all)."),
    gold_position: str = typer.Option("random", "--gold-position", help="random: the gold passage at a random position; retrieved: at its retrieval rank (last if missed)."),
    question_last: bool = typer.Option(False, "--question-last", help="Stitch the question after the passages."),
    mixed_k: bool = typer.Option(False, "--mixed-k", help="Stitch 1..k passages per training input (a curriculum)."),
    seed: int = typer.Option(0, "--seed", help="Batch order and gold positions."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even if it holds files that are not a "
                                   "stitched generator lewisrag wrote (replaced once training has finished)."),
) -> None:
    """Fine-tune a generator on stitched inputs whose targets end by citing the gold passage's number."""
    from lewisrag.training.stitched_train import StitchedTrainConfig, train_stitched

    cfg = StitchedTrainConfig(index=str(index), encoder=str(encoder or ""), generator=str(generator), train=str(train),
                              train_kinds=train_kinds, k=k, steps=steps, batch_size=batch_size, lr=lr,
                              gold_position=gold_position, question_last=question_last, mixed_k=mixed_k, seed=seed)
    with _ui.progress() as p:
        bars = _ui.Bars(p)
        summary = train_stitched(cfg, out, lambda s, t, loss: bars("training", s, t, f"loss {loss:.3f}"), overwrite=overwrite)
    _ui.out.print(_ui.table("stitched generator", ["steps", "examples", "first loss", "final loss", "out"],
                            [[summary["steps"], summary["n_train"], summary["first_loss"], summary["final_loss"], summary["out"]]]))
