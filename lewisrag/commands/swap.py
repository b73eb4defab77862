"""`lewisrag swap`: the hot-swap matrix, models × indexes × question sets, scored by exact match."""

from __future__ import annotations

from pathlib import Path

import typer

from lewisrag.commands import _ui


def swap(
    model: list[Path] = typer.Option(..., "--model", help="A trained RAG model (or `train rag` run directory); repeat for several."),
    index: list[Path] = typer.Option(..., "--index", help="A dense index to read from; repeat (e.g. snapshot A and snapshot B)."),
    questions: list[str] = typer.Option(..., "--questions", help="A question set scored by exact match; repeat (e.g. "
                                        "questions_a, questions_b). Its short-answer questions are scored; long-form ones "
                                        "and those without an answer are left out and counted (a note says how many); a file of "
                                        "FEVER claims is refused (its labels are no answers). Its column "
                                        "is named by the file's stem; an hf: spec keeps its dots "
                                        "(hf:trivia_qa:rc.nocontext:validation)."),
    qa_fields: str = typer.Option(None, "--qa-fields", help=_ui.QA_FIELDS_HELP + " Applies to every --questions."),
    swap_encoder: bool = typer.Option(False, "--swap", help="Also accept indexes built by another context encoder than "
                                      "a model's (else such an index is refused before any model loads)."),
    num_beams: int = typer.Option(1, "--num-beams", help="Beams when decoding (1 = greedy)."),
    max_length: int = typer.Option(32, "--max-length", help="Longest answer in tokens, the start token included."),
    batch_size: int = typer.Option(16, "--batch-size", help="Questions decoded at once."),
    device: str = typer.Option("auto", "--device", help="Where the models answer: auto (a GPU when one is visible), cpu "
                               "or cuda[:N]."),
    out: Path = typer.Option(None, "--out", help="Also write the matrix and every prediction to this JSON file."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out if the file exists."),
    as_json: bool = typer.Option(False, "--json", help="Print the exact-match matrix as one JSON object instead of tables."),
) -> None:
    """Answer every question set from every index with every model: the paper's index hot-swap test."""
    from lewisrag.data.io import InputError, write_json
    from lewisrag.data.outputs import check_out_file
    from lewisrag.experiments.swap import swap_matrix

    for flag, value, least in (("--batch-size", batch_size, 1), ("--num-beams", num_beams, 1), ("--max-length", max_length, 2)):
        if value < least:  # as `ask` checks them: else a traceback from the decoder, or answers of no tokens
            raise InputError(flag, f"must be at least {least}, got {value}")
    fields = _ui.qa_fields(qa_fields)
    from lewisrag.data.threads import resolve_device

    resolve_device(device)  # a GPU asked for and not visible: one line before anything loads
    if out is None and overwrite:  # never ignored in silence
        raise InputError("--overwrite", "applies with --out")
    if out is not None:
        # --overwrite replaces an output, never the questions it is scored on or a file of a model or index
        check_out_file(out, overwrite=overwrite, inputs=[*(("--model", m) for m in model), *(("--index", i) for i in index),
                                                         *(("--questions", q) for q in questions)])

    with _ui.progress() as p:
        result = swap_matrix(model, index, questions, swap=swap_encoder, num_beams=num_beams, max_length=max_length,
                             batch_size=batch_size, on_progress=_ui.Bars(p, {"swap": "answering"}), qa_fields=fields,
                             device=device)
    if out is not None:
        write_json(out, result)
    for note in result["notes"]:  # identical indexes or question sets, questions left out: never in silence
        typer.echo(f"note: {note}", err=True)
    if as_json:
        keys = ("models", "indexes", "questions", "n_questions", "left_out", "notes", "em")
        _ui.print_json({key: result[key] for key in keys} | {"out": None if out is None else str(out)})
        return
    header = [f"{q} ({result['n_questions'][q]})" for q in result["questions"]]  # how many each cell scores
    for m in result["models"]:
        rows = [[i, *[result["em"][m][i][q] for q in result["questions"]]] for i in result["indexes"]]
        _ui.out.print(_ui.table(f"exact match of {m}: index × questions", ["index", *header], rows))
    if out is not None:
        _ui.out.print(f"written to {out}", soft_wrap=True)
