"""The `lewisrag` command. It only registers subcommands; each lives in `lewisrag.commands`.

Bad input anywhere surfaces as `InputError`, printed here as one line on stderr with exit code 2,
never as a traceback.
"""

from __future__ import annotations

import sys

import typer

from lewisrag.data.io import InputError

app = typer.Typer(
    name="lewisrag",
    help="Train the original RAG, swap its index, compare it with prompt-stitching RAG, and evaluate RAG answers layer by layer.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
index_app = typer.Typer(help="Build and search passage indexes (BM25 or dense FAISS).", no_args_is_help=True)
train_app = typer.Typer(help="Train the retriever (DPR) or the RAG model.", no_args_is_help=True)
eval_app = typer.Typer(help="Evaluate retrieval, answers, or the BugHunt sample.", no_args_is_help=True)
app.add_typer(index_app, name="index")
app.add_typer(train_app, name="train")
app.add_typer(eval_app, name="eval")

# --- data -------------------------------------------------------------------------------------
from lewisrag.commands import data as _data  # noqa: E402

app.command("chunk")(_data.chunk)
app.command("world")(_data.world)

# --- index ------------------------------------------------------------------------------------
# (index commands: being written)

# --- train ------------------------------------------------------------------------------------
# (train commands: being written)

# --- eval -------------------------------------------------------------------------------------
# (eval commands: being written)

# --- experiments ------------------------------------------------------------------------------
# (experiments: being written)


def main() -> None:
    try:
        app(prog_name="lewisrag")
    except InputError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
