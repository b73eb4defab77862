"""`lewisrag export`: a trained RAG model and its dense index as one folder transformers' RAG classes load."""

from __future__ import annotations

from pathlib import Path

import typer

from lewisrag.commands import _ui


def export(
    model: Path = typer.Option(..., "--model", help="A RAG model directory, or a `train rag` run directory (its best/ model)."),
    index: Path = typer.Option(..., "--index", help="The dense index to export with it (built with the model's context encoder)."),
    out: Path = typer.Option(..., "--out", help="Folder to write: RagRetriever/RagTokenizer/Rag*ForGeneration.from_pretrained(OUT) load it."),
    swap: bool = typer.Option(False, "--swap", help="Accept an index built by another context encoder than the model's."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even if it holds something lewisrag did not export."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a summary line."),
) -> None:
    """Write transformers' RAG layout: weights, RagConfig (index_name "custom"), both tokenizers, the passages
    as a `datasets` folder with their embeddings, and the FAISS index over them."""
    from lewisrag.data.outputs import check_out_dir
    from lewisrag.experiments.export import KIND, export_rag

    check_out_dir(out, KIND, overwrite=overwrite, inputs={"--model": model, "--index": index}, replaces=True)  # before anything is loaded
    summary = export_rag(model, index, out, swap=swap)
    if as_json:
        _ui.print_json(summary.to_dict())
        return
    _ui.out.print(f"exported RAG-{summary.variant} (K={summary.n_docs}) with {summary.n_passages} passages "
                  f"({summary.dim}-d) to {summary.out}")
    if summary.generate_kwargs:
        settings = ", ".join(f"{k}={v!r}" for k, v in summary.generate_kwargs.items())
        _ui.out.print(f"note: transformers' RagSequenceForGeneration reloads without the generator's generation "
                      f"settings; pass generate({settings}) to get lewisrag ask's answers")
