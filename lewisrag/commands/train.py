"""`lewisrag train dpr` (and, with the RAG model, `lewisrag train rag`)."""

from __future__ import annotations

from pathlib import Path

import typer

from lewisrag.commands import _ui


def dpr(
    train: Path = typer.Option(..., "--train", help="QA examples with gold_passage_ids."),
    passages: Path = typer.Option(..., "--passages", help="The passages the gold ids refer to."),
    out: Path = typer.Option(..., "--out", help="Checkpoint directory (question_encoder/, ctx_encoder/, tokenizer/)."),
    init: str = typer.Option(None, "--init", help="Local BERT-like checkpoint to start both encoders from (default: a small model from scratch)."),
    steps: int = typer.Option(600, "--steps", help="Optimizer steps."),
    batch_size: int = typer.Option(32, "--batch-size", help="Questions per step (each brings its gold passage and one BM25 hard negative)."),
    lr: float = typer.Option(1e-3, "--lr", help="Peak learning rate."),
    hidden_size: int = typer.Option(128, "--hidden-size", help="Width of a model trained from scratch."),
    layers: int = typer.Option(2, "--layers", help="Depth of a model trained from scratch."),
    vocab_size: int = typer.Option(2000, "--vocab-size", help="WordPiece vocabulary of a model trained from scratch."),
    no_hard_negatives: bool = typer.Option(False, "--no-hard-negatives", help="In-batch negatives only."),
    separate: bool = typer.Option(False, "--separate-encoders", help="Train question and passage encoders apart from the start (default: one shared network while training, saved as two)."),
    seed: int = typer.Option(0, "--seed", help="Random seed."),
) -> None:
    """Train a DPR bi-encoder with in-batch and BM25 hard negatives."""
    from lewisrag.data.records import read_passages, read_qa
    from lewisrag.training.dpr import DPRTrainConfig, train_dpr

    cfg = DPRTrainConfig(init=init, steps=steps, batch_size=batch_size, lr=lr, hidden_size=hidden_size,
                         layers=layers, vocab_size=vocab_size, hard_negatives=not no_hard_negatives,
                         shared=not separate, seed=seed)
    examples, docs = read_qa(train), read_passages(passages)
    with _ui.progress() as p:
        task = p.add_task("training DPR", total=steps, info="")
        meta = train_dpr(cfg, examples, docs, out, lambda s, loss: p.update(task, completed=s, info=f"loss {loss:.3f}"))
    _ui.console.print(_ui.table(f"DPR checkpoint written to {out}", ["field", "value"],
                                [["train questions", meta["n_train"]], ["final loss", meta["final_loss"]],
                                 ["dim", meta["dim"]], ["context fingerprint", meta["ctx_fingerprint"]]]))
