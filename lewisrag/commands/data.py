"""`lewisrag chunk` (documents into 100-word passages), `lewisrag shard` (DPR's passages TSV into Parquet
shards) and `lewisrag world` (the built-in world)."""

from __future__ import annotations

from pathlib import Path

import typer

from lewisrag.commands import _ui
from lewisrag.data.io import InputError, existing_file
from lewisrag.data.world import DEFAULT_ENTITIES, MAX_ENTITIES, MIN_ENTITIES

# The most a count may be: pyarrow holds row counts as 64-bit integers (one above was an OverflowError, exit 3)
INT64_MAX = 2**63 - 1


def chunk(
    docs: str = typer.Option(..., "--docs", help="Documents to split: .jsonl, .json, .parquet, DPR's .tsv (id<TAB>text<TAB>title), a folder of .parquet shards, a datasets save_to_disk folder or hf:NAME[:CONFIG]:SPLIT with id, title, text."),
    out: Path = typer.Option(..., "--out", help="Where to write the passages (.jsonl)."),
    words: int = typer.Option(100, "--words", min=1, help="Most words per passage (a CJK character counts as one word)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out if the file exists."),
    as_json: bool = typer.Option(False, "--json", help="Print the counts as one JSON object instead of a table."),
) -> None:
    """Split documents into disjoint passages of at most --words words that keep the document title."""
    from lewisrag.data.chunking import iter_chunks
    from lewisrag.data.io import write_jsonl
    from lewisrag.data.outputs import check_out_file
    from lewisrag.data.passages import open_passages

    if out.suffix.lower() != ".jsonl":
        raise InputError(out, "the output must be a .jsonl file", field="--out")
    check_out_file(out, overwrite=overwrite, inputs=[("--docs", docs)])
    with _ui.status(f"reading {docs}"):
        documents = open_passages(docs)  # documents are in the passage format; every record is checked before anything is written
    longest = 0

    def records():  # written as they are cut, not held: the longest text noted as they pass
        nonlocal longest
        for p in iter_chunks(documents, words):
            longest = max(longest, len(p.text))
            yield p.to_dict()

    with _ui.status(f"chunking {len(documents)} documents"):
        passages = write_jsonl(out, records())  # all or nothing: an error on the way leaves no file
    if as_json:
        _ui.print_json({"out": str(out), "words": words, "documents": len(documents), "passages": passages, "longest_chars": longest})
        return
    rows = [[len(documents), passages, longest, out]]
    _ui.out.print(_ui.table(f"passages of at most {words} words", ["documents", "passages", "longest (chars)", "written to"], rows))


def shard(
    passages: Path = typer.Option(..., "--passages", help="DPR's passages file (psgs_w100.tsv: id<TAB>text<TAB>title)."),
    out: Path = typer.Option(..., "--out", help="Folder to write the numbered Parquet shards into (passages-00000-of-000NN"
                             ".parquet; written beside, then renamed in), which --passages reads as it reads wiki_dpr's."),
    # passages.SHARD_ROWS, written out: importing passages here would load pyarrow for every command's start
    rows_per_shard: int = typer.Option(1_000_000, "--rows-per-shard", min=1, max=INT64_MAX, help="Passages per shard (a million of "
                                       "psgs_w100's make a few hundred MB)."),
    max_passages: int = typer.Option(None, "--max-passages", min=1, max=INT64_MAX, help="The first N passages only, as --passages "
                                     "with reproduce --max-passages reads them; default: all."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even if it holds another kind of lewisrag "
                                   "output (replaced once the shards are complete); never a folder lewisrag did not make."),
    as_json: bool = typer.Option(False, "--json", help="Print the counts and shard names as one JSON object instead of a table."),
) -> None:
    """Convert DPR's passages TSV into numbered Parquet shards, streaming: memory of a few blocks, not of the file.

    The rows and every refusal are those of the .tsv read as --passages (same parser, same checks,
    the file's line named), so the folder reads as the file would, row for row, but a row group at
    a time: psgs_w100's 21M passages need some 15 GB of memory as a .tsv, and about 0.3 GB to convert."""
    from lewisrag.data.outputs import check_out_dir, output_dir
    from lewisrag.data.passages import KIND_SHARDS, write_tsv_shards

    if passages.suffix.lower() != ".tsv":
        if passages.name.lower().endswith(".tsv.gz"):
            existing_file(passages)  # gzip-compressed (psgs_w100.tsv.gz, as DPR's download gives it): how to gunzip it
        raise InputError(passages, "expected DPR's passages file, a .tsv (psgs_w100.tsv); other passages are read as "
                         "they are", field="--passages")
    existing_file(passages)  # missing, or a folder: said before any folder is made
    check_out_dir(out, KIND_SHARDS, overwrite=overwrite, replaces=True, inputs={"--passages": passages}, alone=True)
    with output_dir(out, KIND_SHARDS, overwrite=overwrite) as tmp, _ui.progress() as p:
        bars = _ui.Bars(p, {"read": f"converting {passages}"})
        record = write_tsv_shards(passages, tmp, rows_per_shard, max_passages,
                                  lambda stage, done, total: bars(stage, -(-done >> 20), max(-(-total >> 20), 1), "MB read"))  # MB rounded up: a file read whole shows whole
    if as_json:
        _ui.print_json({"out": str(out), **record})
        return
    rows = [[record["passages"], record["shards"], record["rows_per_shard"], out]]
    _ui.out.print(_ui.table(f"Parquet shards of {passages}", ["passages", "shards", "rows per shard", "written to"], rows))


def world(
    out: Path = typer.Option(..., "--out", help="Directory to write the world's files into (created if missing)."),
    seed: int = typer.Option(0, "--seed", min=0, max=2**32 - 1, help="Random seed: the same seed writes byte-identical files."),
    entities: int = typer.Option(DEFAULT_ENTITIES, "--entities", min=MIN_ENTITIES, max=MAX_ENTITIES, help="Number of countries and organisations in the corpus (two passages each, three for the "
                                  "few with an outdated archive passage)."),
    lang: str = typer.Option("en", "--lang", help="Language of the world: en (English) or zh (Chinese names, passages and "
                             "questions; no Jeopardy or FEVER files)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even if it holds files that are not a world "
                                   "lewisrag wrote (replaced once the new world is complete); never a folder lewisrag did not make."),
    as_json: bool = typer.Option(False, "--json", help="Print the records per file as one JSON object instead of a table."),
) -> None:
    """Write the built-in world: two corpus snapshots, train/dev/test questions, the knowledge-update
    questions, the evaluation set and, in English, the Jeopardy and FEVER files."""
    from lewisrag.eval.reports.i18n import check_lang
    from lewisrag.data.outputs import check_out_dir
    from lewisrag.data.world import build_world, write_world

    check_lang(lang)  # as every --lang is checked
    check_out_dir(out, "world", overwrite=overwrite, alone=True)
    with _ui.status(f"building the world (seed {seed}, {entities} entities, {lang})"):
        counts = write_world(build_world(seed, entities, lang), out, overwrite=overwrite)
    if as_json:
        _ui.print_json({"out": str(out), "seed": seed, "entities": entities, "lang": lang, "files": dict(counts)})
        return
    rows = [[name, n] for name, n in counts.items()]
    _ui.out.print(_ui.table(f"world (seed {seed}) written to {out}", ["file", "records"], rows))
