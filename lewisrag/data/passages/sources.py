"""What a passages path names and how it is opened: a table source (`is_table_source`: `hf:`,
`.parquet`, `.tsv`, a folder) as a checked `PassageTable` (`open_table`), anything else as the list
the JSON readers give (`open_passages`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from lewisrag.data.io import InputError, existing_file, load_hf
from lewisrag.data.passages.parquet import RowGroups, check_numbered_shards, shard_order
from lewisrag.data.passages.saved import _dataset_table, _saved_dataset
from lewisrag.data.passages.table import PassageTable
from lewisrag.data.passages.tsv import read_dpr_tsv
from lewisrag.data.records import Passage, read_passages

# what open_passages reads, as its unknown-format error lists them (the record readers' lists only their own)
PASSAGE_FORMATS = (".jsonl, .json, .parquet, .tsv (DPR's passages file), a folder of .parquet shards, a datasets "
                   "save_to_disk folder or hf:NAME[:CONFIG]:SPLIT")


def is_table_source(path: str | os.PathLike) -> bool:
    """Whether `path` names an Arrow source: `hf:...`, a `.parquet` or `.tsv` file or a folder."""
    spec = str(path)
    return spec.startswith("hf:") or Path(spec).suffix.lower() in (".parquet", ".tsv") or Path(spec).is_dir()


def open_passages(path: str | os.PathLike, limit: int | None = None) -> Sequence[Passage]:
    """Passages as a user gives them: the checked `PassageTable` of a save_to_disk folder, a
    `.parquet` file, a folder of `.parquet` shards, DPR's `.tsv` (`read_dpr_tsv`) or an `hf:` spec;
    the list `records.read_passages` reads from `.jsonl`/`.json`. `limit`: the first N passages only,
    and of a table only those are checked (`reproduce --max-passages` of wiki_dpr's 21 M)."""
    if not is_table_source(path):
        suffix = existing_file(path).suffix.lower()
        if suffix not in (".jsonl", ".json"):
            raise InputError(path, f"unknown format '{suffix}': use {PASSAGE_FORMATS}")
        passages = read_passages(path) if limit is None else read_passages(path)[:max(int(limit), 0)]
        if not passages:  # as a table's: a limit of 0 leaves none
            raise InputError(path, "no passages")
        return passages
    return open_table(path, limit)


def passages_at(passages: Sequence[Passage], rows) -> list[Passage]:
    """The passages at `rows` of a list or of a `PassageTable`, a table's read in one `take` (each
    row group decoded once), not one row at a time."""
    if isinstance(passages, PassageTable):
        return passages.take(rows)
    return [passages[r] for r in rows]


def open_table(path: str | os.PathLike, limit: int | None = None) -> PassageTable:
    """The checked `PassageTable` of a save_to_disk folder, a `.parquet` file, a folder of `.parquet`
    shards (read in the order of their numbers, `shard_order`), DPR's `.tsv` or an `hf:` spec; of its first
    `limit` rows only."""
    spec = str(path)
    if spec.startswith("hf:"):
        table = _dataset_table(load_hf(spec))
    elif Path(spec).suffix.lower() == ".tsv" and not Path(spec).is_dir():
        return PassageTable(read_dpr_tsv(spec, limit), spec, limit=limit, lines_before=1)  # errors name the file's lines
    elif Path(spec).is_dir():
        p = Path(spec)
        # every entry named *.parquet, in any case: a broken link (a hub snapshot's blob not downloaded)
        # or a folder is refused by RowGroups.open, naming it, not left out of the corpus
        try:
            shards = shard_order(f for f in p.iterdir() if f.suffix.lower() == ".parquet")
        except OSError as e:  # a folder this user cannot list
            raise InputError(p, f"cannot list the folder: {e.strerror}") from None
        saved = (p / "state.json").is_file() or (p / "dataset_dict.json").is_file()
        if shards and not saved:
            check_numbered_shards(shards)
            table = RowGroups.open([(str(f), f) for f in shards])
        else:
            table, files = _saved_dataset(p)
            return PassageTable(table, spec, limit=limit, files=files)  # errors name the Arrow file and its row
    else:
        table = RowGroups.open([(spec, existing_file(spec))])
    return PassageTable(table, spec, limit=limit)
