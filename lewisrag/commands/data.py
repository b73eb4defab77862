"""`lewisrag chunk` and `lewisrag world` (being written)."""

import typer


def chunk(docs: str = typer.Option(..., "--docs")) -> None:
    """Split documents into passages (being written)."""
    raise typer.Exit(1)


def world(out: str = typer.Option(..., "--out")) -> None:
    """Write the built-in world (being written)."""
    raise typer.Exit(1)
