"""`lewisrag shard`: DPR's passages TSV converted, streaming, into numbered Parquet shards
(`write_tsv_shards`), holding the rows and refusing the lines and values `open_table` would."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lewisrag.data.io import InputError, existing_file
from lewisrag.data.passages.schema import _first_repeat, _id_hashes, _repeated_hashes, row_problems
from lewisrag.data.passages.tsv import DPR_TSV_SCHEMA, dpr_tsv_batches

SHARD_ROWS = 1_000_000  # passages a shard by default: psgs_w100's 21 M in 22 shards of a few hundred MB
KIND_SHARDS = "passage shards"  # the marker kind of `lewisrag shard`'s folders (lewisrag.data.outputs)
SHARD_STEM = "passages"  # shards are named passages-00000-of-00022.parquet, as the hub numbers train-*
ROW_GROUP_ROWS = 32_768  # rows a row group written: some 20 MB of psgs_w100's text, decoded (RowGroups keeps 2)


def write_tsv_shards(path: str | os.PathLike, out: str | os.PathLike, rows_per_shard: int = SHARD_ROWS,
                     limit: int | None = None, on_progress: Callable[[str, int, int], None] | None = None) -> dict:
    """DPR's passages file converted, streaming, into numbered Parquet shards in the empty folder `out`
    (`passages-00000-of-000NN.parquet`, `rows_per_shard` passages each, in row groups of
    ROW_GROUP_ROWS): the folder `open_table` then reads lazily, a row group at a time, as it reads
    wiki_dpr's shards. Returns what was written: {"source", "passages", "shards", "rows_per_shard",
    "files"}. `on_progress("read", bytes read, the file's bytes)` after each block.

    `read_dpr_tsv` holds the whole file in memory (some 15 GB for psgs_w100's 21 M passages); this
    holds pyarrow's read-ahead (up to 32 blocks of TSV_BLOCK), the row group being written, and 8 bytes
    a passage for the repeated-id check (170 MB at 21 M). The rows and the refusals are those of
    `open_table(path, limit)`, in the same words and naming the same line of the file: one parser
    (`dpr_tsv_batches`), then the per-row checks of `PassageTable._validate` (`row_problems`, and the
    first repeated id, found as it finds it). As there, a bad line (its fields, a line break inside a
    field, a blank line) anywhere in the file is named before any empty, repeated or non-UTF-8 value,
    so the file is parsed to its end even after such a value (nothing more is written then). `limit`:
    the first N passages, as `open_table(path, limit)` reads them (parsing stops at the block that
    holds the Nth; no line after it is refused).

    On any error the shards written so far are removed (only files this call made); the command
    writes `out` as a staging folder beside its destination, renamed in once this returns. Shards are
    written under temporary names and given their `-of-NNNNN` names at the end, when their number is
    known. Pages carry CRCs, which `RowGroups` checks as it reads, so later damage is named."""
    p = existing_file(path)
    out = Path(out)
    if rows_per_shard < 1:
        raise ValueError(f"rows_per_shard must be at least 1, got {rows_per_shard}")
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):  # the caller's staging folder: never a folder this call would mix shards into
        raise InputError(out, "is not empty: shards are written into a new, empty folder")
    size, shards = p.stat().st_size, _Shards(out, rows_per_shard)
    kept = 0  # rows checked
    hashes: list[np.ndarray] = []  # of the ids checked: rows [0, kept)
    problem = None  # (row, field order, field, message): the first value row_problems refuses
    try:
        for part, at in dpr_tsv_batches(p, limit):
            if problem is None and part.num_rows:
                found = row_problems(pa.Table.from_batches([part]), kept)
                if found:  # nothing more is written; ids up to that row still count: a repeat there is named first
                    problem = min(found)
                    part = part.slice(0, problem[0] - kept + 1)
                hashes.append(_id_hashes(part.column("id")))
                kept += part.num_rows
                if problem is None:
                    shards.add(part)
            if on_progress:
                on_progress("read", min(at, size), size)
        _refuse_values(p, str(path), kept, hashes, problem)
        files = shards.finish()
    except BaseException:
        shards.discard()
        raise
    return {"source": str(path), "passages": kept, "shards": len(files), "rows_per_shard": rows_per_shard,
            "files": [f.name for f in files]}


class _Shards:
    """Passage rows appended in order, written as shards of `rows_per_shard` rows in row groups of
    ROW_GROUP_ROWS (a shard's last group fewer), under temporary names in `out` until `finish`."""

    def __init__(self, out: Path, rows_per_shard: int):
        self.out, self.rows_per_shard = out, rows_per_shard
        self.made: list[Path] = []  # every file written, by its present name: `discard` removes them
        self._writer: pq.ParquetWriter | None = None
        self._in_shard = 0  # rows of the current shard, written or pending
        self._pending: list[pa.RecordBatch] = []  # the row group being gathered

    def add(self, part: pa.RecordBatch) -> None:
        while part.num_rows:
            take = part.slice(0, self.rows_per_shard - self._in_shard)
            self._pending.append(take)
            self._in_shard += take.num_rows
            part = part.slice(take.num_rows)
            if self._in_shard == self.rows_per_shard:
                self._end_shard()
            elif sum(b.num_rows for b in self._pending) >= ROW_GROUP_ROWS:
                self._write_group()

    def finish(self) -> list[Path]:
        """The shards, renamed `passages-K-of-N.parquet` now that N is known."""
        self._end_shard()
        width = max(5, len(str(len(self.made))))
        for k, partial in enumerate(self.made):
            final = self.out / f"{SHARD_STEM}-{k:0{width}d}-of-{len(self.made):0{width}d}.parquet"
            os.replace(partial, final)
            self.made[k] = final
        return list(self.made)

    def discard(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        for f in self.made:
            f.unlink(missing_ok=True)

    def _write_group(self) -> None:
        rows = sum(b.num_rows for b in self._pending)
        if not rows:
            return
        if self._writer is None:
            self.made.append(self.out / f".{SHARD_STEM}-{len(self.made)}.parquet.partial")
            self._writer = pq.ParquetWriter(self.made[-1], DPR_TSV_SCHEMA, write_page_checksum=True)
        self._writer.write_table(pa.Table.from_batches(self._pending, DPR_TSV_SCHEMA), row_group_size=rows)
        self._pending = []

    def _end_shard(self) -> None:
        self._write_group()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._in_shard = 0


def _refuse_values(p: Path, source: str, rows: int, hashes: list[np.ndarray], problem: tuple | None) -> None:
    """After the whole file parsed: the InputError `PassageTable._validate` would raise over the first
    `rows` passages (`source` the name it gives them, lines counted after the header), from the first
    problem `row_problems` found and the first repeated id. A repeated hash (a repeated id, or two ids
    of one hash) reads the ids again from the file to compare them exactly."""
    if rows == 0:
        raise InputError(source, "no passages")
    every = np.concatenate(hashes)
    hashes.clear()  # one copy of them at a time
    repeated = _repeated_hashes(every)
    del every
    dup = _first_repeat(_tsv_ids(p, rows), repeated) if len(repeated) else None
    problems = [problem] if problem is not None else []
    if dup is not None:
        row, first, value = dup
        problems.append((row, 0, "id", f"duplicate id {value!r} (first on line {first + 2})"))
    if problems:
        row, _, name, message = min(problems)
        raise InputError(source, message, line=row + 2, field=name)


def _tsv_ids(p: Path, rows: int) -> Iterator[tuple[int, pa.Array]]:
    """(first row, ids) of the file's first `rows` passages, a block at a time."""
    start = 0
    for batch, _ in dpr_tsv_batches(p, rows):
        yield start, batch.column("id")
        start += batch.num_rows
