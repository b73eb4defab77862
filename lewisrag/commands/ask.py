"""`lewisrag ask`: one question to a trained RAG model, with the passages and posteriors behind the answer."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.text import Text

from lewisrag.commands import _ui


def ask(
    ctx: typer.Context,
    question: str = typer.Argument(..., help="The question to answer."),
    model: Path = typer.Option(..., "--model", help="A `train rag` run directory (its best/ model, else its final/), "
                               "a model directory (a run's best/ or final/), or a transformers RAG folder (`lewisrag export`'s, "
                               "a Rag*ForGeneration checkpoint)."),
    index: Path = typer.Option(..., "--index", help="Dense index to retrieve from (built with the model's context encoder)."),
    n_docs: int = typer.Option(None, "--n-docs", help="Passages retrieved and marginalized (K; default: the model's)."),
    old_k: int = typer.Option(None, "-k", hidden=True, help="Deprecated: --n-docs."),
    num_beams: int = typer.Option(1, "--num-beams", help="Beams when decoding (1 = greedy)."),
    max_length: int = typer.Option(32, "--max-length", help="Longest answer in tokens, the start token included."),
    swap: bool = typer.Option(False, "--swap", help="Accept an index built by another context encoder than the model's."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Answer a question and show p(z|x), p(z|x,y) per passage and, for RAG-Token, the passage each token leaned on."""
    from lewisrag.data.io import InputError

    # the flags first: a bad value is refused in a moment, before torch and transformers load
    k = _ui.renamed(ctx, "n_docs", "old_k", "--n-docs", "-k")
    for flag, value, least in (("--n-docs", k, 1), ("--num-beams", num_beams, 1), ("--max-length", max_length, 2)):
        if value is not None and value < least:  # a max length of 1 holds only the start token: an empty answer
            raise InputError(flag, f"must be at least {least}, got {value}")
    from lewisrag.experiments.ask import ask as run
    from lewisrag.experiments.ask import longest_max_length, max_length_note, unknown_words_note, unpaired_note
    from lewisrag.experiments.swap import check_pairs, declared_dim, paired_with
    from lewisrag.index.dense import DenseIndex
    from lewisrag.training.checkpoint import load_trained, resolve_model_dir

    model_dir = resolve_model_dir(model)
    dense = DenseIndex.load(index, mmap=True)
    # a missing index, or one of another width or context encoder, refused before the model loads (seconds to
    # minutes), from what the model's folder records, as swap refuses it
    check_pairs([paired_with(model_dir)], [dense], swap, [declared_dim(model_dir)])
    rag, tokenizers = load_trained(model_dir)  # an exported model's context encoder from its lewisrag_export.json
    answer = run(rag, tokenizers, dense, question, n_docs=k, num_beams=num_beams,
                 max_length=max_length, swap=swap)
    # after the answer: a refused flag is then one line on stderr, never a note above it
    notes = [None if swap else unpaired_note(model, rag.settings.index_fingerprint), unknown_words_note(tokenizers, question),
             max_length_note(answer, max_length, longest_max_length(rag))]
    for note in filter(None, notes):
        typer.echo(f"note: {note}", err=True)
    if as_json:
        _ui.print_json(answer.to_dict())
        return
    # the answer as written (its control characters escaped), not wrapped at the console's width
    _ui.out.print(Text.assemble(("Q:", "bold"), f" {_ui.printable(answer.question)}\n", ("A:", "bold"),
                                f" {_ui.printable(answer.answer)}"), soft_wrap=True)
    posterior = "mean p(z|x,y_t)" if answer.variant == "token" else "p(z|x,y)"
    _ui.out.print(_ui.table(f"retrieved passages (RAG-{answer.variant})", ["rank", "id", "title", "p(z|x)", posterior, "text"],
                            [[p.rank, p.id, p.title, p.prior, p.posterior, _short(p.text)] for p in answer.passages]))
    if answer.tokens:
        _ui.out.print(_ui.table("which passage each token leaned on (argmax p(z|x,y_t,y_<t))",
                                ["token", "rank", "id", "p"],
                                [[repr(t.token), t.doc_rank, t.doc_id, t.probability] for t in answer.tokens]))


def _short(text: str, width: int = 70) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
