"""`lewisrag chunk` (documents into 100-word passages) and `lewisrag world` (the built-in world)."""

from __future__ import annotations

from pathlib import Path

import typer

from lewisrag.commands import _ui
from lewisrag.data.io import InputError
from lewisrag.data.world import DEFAULT_ENTITIES, MAX_ENTITIES, MIN_ENTITIES


def chunk(
    docs: str = typer.Option(..., "--docs", help="Documents to split: .jsonl, .json, .parquet, a folder of .parquet shards, a datasets save_to_disk folder or hf:NAME[:CONFIG]:SPLIT with id, title, text."),
    out: Path = typer.Option(..., "--out", help="Where to write the passages (.jsonl)."),
    words: int = typer.Option(100, "--words", min=1, help="Most words per passage (a CJK character counts as one word)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out if the file exists."),
    as_json: bool = typer.Option(False, "--json", help="Print the counts as one JSON object instead of a table."),
) -> None:
    """Split documents into disjoint passages of at most --words words that keep the document title."""
    from lewisrag.data.chunking import chunk_documents
    from lewisrag.data.io import write_jsonl
    from lewisrag.data.outputs import check_out_file
    from lewisrag.data.passages import open_passages

    if out.suffix.lower() != ".jsonl":
        raise InputError(out, "the output must be a .jsonl file", field="--out")
    check_out_file(out, overwrite=overwrite, inputs=[("--docs", docs)])
    with _ui.status(f"reading {docs}"):
        documents = open_passages(docs)  # documents are in the passage format; every record is checked before anything is written
    with _ui.status(f"chunking {len(documents)} documents"):
        passages = chunk_documents(documents, words)
        write_jsonl(out, (p.to_dict() for p in passages))
    longest = max(len(p.text) for p in passages)
    if as_json:
        _ui.print_json({"out": str(out), "words": words, "documents": len(documents), "passages": len(passages), "longest_chars": longest})
        return
    rows = [[len(documents), len(passages), longest, out]]
    _ui.out.print(_ui.table(f"passages of at most {words} words", ["documents", "passages", "longest (chars)", "written to"], rows))


def world(
    out: Path = typer.Option(..., "--out", help="Directory to write the world's files into (created if missing)."),
    seed: int = typer.Option(0, "--seed", min=0, max=2**32 - 1, help="Random seed: the same seed writes byte-identical files."),
    entities: int = typer.Option(DEFAULT_ENTITIES, "--entities", min=MIN_ENTITIES, max=MAX_ENTITIES, help="Number of countries and organisations in the corpus (two passages each)."),
    lang: str = typer.Option("en", "--lang", help="Language of the world: en (English) or zh (Chinese names, passages and "
                             "questions; no Jeopardy or FEVER files)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even if it holds files that are not a world "
                                   "lewisrag wrote (replaced once the new world is complete); never a folder lewisrag did not make."),
    as_json: bool = typer.Option(False, "--json", help="Print the records per file as one JSON object instead of a table."),
) -> None:
    """Write the built-in world: two corpus snapshots, train/dev/test questions, the knowledge-update
    questions and the evaluation set."""
    from lewisrag.data.names import LANGS
    from lewisrag.data.outputs import check_out_dir
    from lewisrag.data.world import build_world, write_world

    if lang not in LANGS:
        raise InputError("--lang", f"unknown language {lang!r} (one of {', '.join(LANGS)})")
    check_out_dir(out, "world", overwrite=overwrite)
    with _ui.status(f"building the world (seed {seed}, {entities} entities, {lang})"):
        counts = write_world(build_world(seed, entities, lang), out, overwrite=overwrite)
    if as_json:
        _ui.print_json({"out": str(out), "seed": seed, "entities": entities, "lang": lang, "files": dict(counts)})
        return
    rows = [[name, n] for name, n in counts.items()]
    _ui.out.print(_ui.table(f"world (seed {seed}) written to {out}", ["file", "records"], rows))
