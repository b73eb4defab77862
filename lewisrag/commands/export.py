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
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even if it holds something lewisrag did not export "
                                   "(another lewisrag output, files added to an export); never a folder lewisrag did not make."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a summary line."),
) -> None:
    """Write transformers' RAG layout: weights, RagConfig (index_name "custom"), both tokenizers, the passages
    as a `datasets` folder with their embeddings, and the FAISS index over them."""
    from lewisrag.experiments.ask import unpaired_note
    from lewisrag.experiments.export import export_rag

    summary = export_rag(model, index, out, swap=swap, overwrite=overwrite)
    if as_json:
        _ui.print_json(summary.to_dict())
    else:
        _ui.out.print(f"exported RAG-{summary.variant} (K={summary.n_docs}) with {summary.n_passages} passages "
                      f"({summary.dim}-d) to {summary.out}", soft_wrap=True)  # a path a script reads: never wrapped
    # notes, as ask's and swap's are: on stderr, one unwrapped line each, with --json too (stdout keeps the results);
    # a model naming no context encoder was exported with any index of its width, as `ask` searches one
    unpaired = None if swap else unpaired_note(model, summary.paired_fingerprint)
    if unpaired:
        typer.echo(f"note: {unpaired}", err=True)
    typer.echo(decoding_note(summary.variant, summary.generate_kwargs, summary.beam_kwargs), err=True)


def decoding_note(variant: str, generate_kwargs: dict, beam_kwargs: dict) -> str:
    """How transformers' generate() on the export relates to `lewisrag ask`'s answers (experiments.export).

    >>> print(decoding_note("sequence", {"num_beams": 1, "max_length": 32, "forced_bos_token_id": 0}, {"early_stopping": True}))
    note: transformers' RagSequenceForGeneration reloads without the generator's generation settings: pass generate(num_beams=1, max_length=32, forced_bos_token_id=0) for lewisrag ask's settings (greedy), or the same with num_beams=N, early_stopping=True for lewisrag ask --num-beams N's; for lewisrag ask --n-docs K's, set model.config.n_docs = K: generate(n_docs=K) ranks its answers by a pass over config.n_docs passages; even so its answers differ from ask's: transformers 5 searches each passage without an attention mask, attending to the padding of passages padded to max_combined_length, which ask masks (docs/real-data.md shows the mask to pass), and it answers the question as the question encoder's tokenizer decodes it (lowercased by an uncased one, a Chinese question's characters spaced apart)
    """
    beams = ", ".join(["num_beams=N", *(f"{k}={v!r}" for k, v in beam_kwargs.items())])
    # transformers' retriever rebuilds the generator input from the question ids decoded: a generator trained on cased
    # questions can answer the lowercased one otherwise (experiments.export)
    decoded = "the question as the question encoder's tokenizer decodes it (lowercased by an uncased one, a Chinese question's characters spaced apart)"
    if variant == "token":  # its generation_config.json holds generate_kwargs
        return (f"note: generate() gives lewisrag ask's answer (greedy, max_length={generate_kwargs['max_length']}) to "
                f"{decoded}, which can differ from ask's answer to the question as typed; pass generate({beams}) "
                f"for lewisrag ask --num-beams N's")
    settings = ", ".join(f"{k}={v!r}" for k, v in generate_kwargs.items())
    # transformers' RagSequenceForGeneration.generate searches n_docs passages but scores what it found with a forward
    # that retrieves config.n_docs (modeling_rag): generate(n_docs=K) alone answered otherwise than `ask --n-docs K`
    return (f"note: transformers' RagSequenceForGeneration reloads without the generator's generation settings: "
            f"pass generate({settings}) for lewisrag ask's settings (greedy), or the same with {beams} "
            f"for lewisrag ask --num-beams N's; for lewisrag ask --n-docs K's, set model.config.n_docs = K: "
            f"generate(n_docs=K) ranks its answers by a pass over config.n_docs passages; even so its answers differ "
            f"from ask's: transformers 5 searches each passage without an attention mask, attending to the padding of "
            f"passages padded to max_combined_length, which ask masks (docs/real-data.md shows the mask to pass), and "
            f"it answers {decoded}")
