"""`lewisrag eval retrieval`: recall@k of an index against gold passage ids."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from lewisrag.commands import _ui


def retrieval(
    index: list[Path] = typer.Option(..., "--index", help="Index directory; repeat to compare several (e.g. dense and BM25)."),
    data: Path = typer.Option(..., "--data", help="QA examples with gold_passage_ids."),
    encoder: str = typer.Option(None, "--encoder", help="DPR checkpoint for dense indexes (default: the one that built each index)."),
    k: list[int] = typer.Option([1, 5, 20], "-k", help="Cut-offs; repeat the flag for several."),
    swap: bool = typer.Option(False, "--swap", help="Allow a question encoder trained against another context encoder."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
) -> None:
    """Print recall@k (a gold passage among the top k) for each index."""
    from lewisrag.data.records import read_qa
    from lewisrag.index import open_retriever, retrieval_recall
    from lewisrag.data.io import InputError
    from lewisrag.index.store import read_manifest

    if any(x < 1 for x in k):
        raise InputError("-k", "cut-offs must be at least 1")
    examples = read_qa(data)
    results = {}
    with _ui.progress() as p:
        for path in index:
            kind = read_manifest(path)["kind"]
            retriever = open_retriever(path, encoder if kind == "dense" else None, swap=swap)
            task = p.add_task(f"{path.name} ({kind})", total=len(examples), info="")
            results[str(path)] = {"kind": kind, **retrieval_recall(retriever, examples, sorted(k), on_batch=lambda n, t=task: p.advance(t, n))}
    if as_json:
        _ui.out.print_json(json.dumps(results))
        return
    cols = [f"recall@{c}" for c in sorted(k)]
    rows = [[name, r["kind"], r["n"], *[r[c] for c in cols]] for name, r in results.items()]
    _ui.out.print(_ui.table(f"retrieval on {data}", ["index", "kind", "questions", *cols], rows))
