"""Parquet passages: a file, or a folder of shards checked to be one whole numbered set
(`check_numbered_shards`) and read in the order of their numbers (`shard_order`), a row group at a
time with the last few kept decoded (`RowGroups`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lewisrag.data.io import InputError, one_line
from lewisrag.data.io.arrow_text import refuse_repeated_columns
from lewisrag.data.passages.schema import COLUMNS, _is_list, as_text, text_schema

# the hub's (and datasets') train-00003-of-00005, and push_to_hub's with each shard's fingerprint after it
# (train-00003-of-00005-6a9f3c2e1b7d4e5f)
SHARD_NAME = re.compile(r"(?P<stem>.*)-(?P<k>\d+)-of-(?P<n>\d+)(?P<hash>-[0-9a-fA-F]{8,})?$")


def shard_order(files: Iterable[Path]) -> list[Path]:
    """The shards `files` in the order their rows are read: numbered ones (`SHARD_NAME`) by their set's
    name, then their number as a whole number, others by name. The hub pads the numbers to one width,
    where this is the names' order; a writer that does not (`train-2-of-11`, `train-10-of-11`) would
    otherwise have its shard 10 read third and the corpus's rows out of order.

    >>> [f.name for f in shard_order(Path(f"train-{k}-of-11.parquet") for k in (10, 2, 0, 1))]
    ['train-0-of-11.parquet', 'train-1-of-11.parquet', 'train-2-of-11.parquet', 'train-10-of-11.parquet']
    """
    def key(f: Path) -> tuple[str, int, str]:
        m = SHARD_NAME.match(f.stem)
        return (f.name, -1, "") if m is None else (m["stem"], int(m["k"]), f.name)

    return sorted(files, key=key)


def check_numbered_shards(shards: Sequence[Path]) -> None:
    """Refuse a folder of numbered shards (`NAME-K-of-N.parquet`, as the hub and `datasets` name them)
    with one missing: the folder is read as whatever shards it holds, so a download that stopped
    short would train on part of the corpus without a word. Shards of two sets (`train-...` and
    `test-...`: the hub's layout of a dataset's splits side by side) are refused too, as they would
    be read as one corpus. Shards named otherwise are not checked.

    >>> check_numbered_shards([Path("nq/train-00000-of-00003.parquet"), Path("nq/train-00002-of-00003.parquet")])
    Traceback (most recent call last):
    lewisrag.data.io.InputError: nq/train-00001-of-00003.parquet: missing: the folder holds 2 of the 3 shards its files are numbered for (an unfinished download?)

    Names that end in a hash (`push_to_hub`'s, one per shard) name the missing shard's with `*` for its hash:

    >>> check_numbered_shards([Path("nq/train-00000-of-00003-6a9f3c2e1b7d4e5f.parquet"),
    ...                        Path("nq/train-00002-of-00003-0b1c2d3e4f5a6b7c.parquet")])
    Traceback (most recent call last):
    lewisrag.data.io.InputError: nq/train-00001-of-00003-*.parquet: missing: the folder holds 2 of the 3 shards its files are numbered for (an unfinished download?)
    """
    numbered: dict[tuple[str, int, int], Path] = {}
    for f in shards:
        m = SHARD_NAME.match(f.stem)
        if m is not None:
            key = (m["stem"], int(m["n"]), int(m["k"]))
            if key in numbered:  # two uploads' files side by side (their hashes differ): each passage read twice
                raise InputError(f, f"numbered as the same shard as {numbered[key].name}: give a folder of one set's "
                                 "shards, each once")
            numbered[key] = f
    stems = sorted({stem for stem, _, _ in numbered})
    if len(stems) > 1:
        raise InputError(shards[0].parent, f"holds the numbered shards of {len(stems)} sets ({', '.join(stems)}), which "
                         "would be read as one corpus: give a folder of one set's shards")
    for stem, n in sorted({(stem, n) for stem, n, _ in numbered}):
        have = {k: f for (s, m, k), f in numbered.items() if (s, m) == (stem, n)}
        missing = next((k for k in range(n) if k not in have), None)
        if missing is not None:
            like = next(iter(have.values()))
            m = SHARD_NAME.match(like.stem)
            hashed = "-*" if m["hash"] else ""  # its hash cannot be known: the shell's pattern for it
            name = like.with_name(f"{stem}-{missing:0{len(m['k'])}d}-of-{m['n']}{hashed}{like.suffix}")
            raise InputError(name, f"missing: the folder holds {len(have)} of the {n} shards its files are numbered "
                             "for (an unfinished download?)")


class _Shard(NamedTuple):
    """A Parquet file of `RowGroups`, as read when it was opened: what errors call it, where it is, its
    footer and columns. Its file is not kept open (`RowGroups._file`)."""

    name: str
    path: Path
    meta: pq.FileMetaData
    schema: pa.Schema


class RowGroups:
    """Parquet files read one row group at a time, the last few kept decoded.

    Parquet cannot be memory-mapped as Arrow: its pages are compressed and encoded. Decoding
    the whole file (`pq.read_table`) would hold all of it in RAM — 21 M wiki_dpr passages with
    their vectors are some 80 GB — so a `PassageTable` over Parquet asks for row groups as it
    reads rows: memory stays at a few row groups, and reading the rows in order (encoding,
    copying vectors, writing an index's passage store) decodes each group once. A folder of
    shards is one sequence of row groups, the files' in the order `files` gives them
    (`shard_order`'s), and every shard must have the first's columns.

    Binary passage columns read as strings (`as_text`); a group that cannot be decoded (a damaged
    page, compressed block or page header) is an InputError naming its file and rows. Pages
    that carry a CRC (written with `write_page_checksum=True`) are checked against it as they are
    read (`_file` opens the files so), so damage that still decompresses is caught there too.
    """

    CACHED = 2  # decoded row groups kept
    # shard files kept open, the last read: a folder of more shards than the process may open files
    # (`ulimit -n`, often 1,024) is read, and its rows are read in order, each shard opened once
    OPEN = 8

    def __init__(self, files: Sequence[_Shard], columns: Sequence[str] | None = None,
                 handles: dict[int, pq.ParquetFile] | None = None):
        """`files`: the shards in reading order. `handles`: the open files by shard (`_file`), shared
        by every `select` of the same files, so that they hold OPEN open between them."""
        self.files = list(files)
        self._handles = {} if handles is None else handles
        first = self.files[0].schema
        self.columns = list(columns) if columns is not None else list(first.names)
        self.schema = text_schema(pa.schema([_canonical(first.field(c)) for c in self.columns]))
        self.sizes, self._where, rows = [], [], [0]  # per group: its size, (file, group in it); rows before each file
        for k, shard in enumerate(self.files):
            meta = shard.meta
            self.sizes += [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
            self._where += [(k, i) for i in range(meta.num_row_groups)]
            rows.append(rows[-1] + meta.num_rows)
        self._file_rows = np.asarray(rows)
        self._cache: dict[int, pa.RecordBatch] = {}

    @classmethod
    def open(cls, paths: Sequence[tuple[str, Path]]) -> RowGroups:
        """The row groups of the files `paths` ((the name errors give it, its path) each): each file's
        footer read and the file closed, to be opened again as its rows are read (`_file`). Shards
        whose passage columns differ from the first's are refused, naming the shard, as is a file
        with a column name twice.

        Read, not memory-mapped: a mapped file's pages stay in the process's resident set once
        read, so a pass over wiki_dpr's shards would show all 80 GB as resident, which schedulers
        that watch RSS kill (`index cut` over 2 M synthetic rows, `scripts/bench_cut.py`: 9.3 GB
        resident mapped, 7 GB of it the files' pages; 2.7 GB read). Decoding copies every page
        either way; reading a cached file was about 10% slower."""
        files = []
        for name, path in paths:
            try:
                with pq.ParquetFile(path, memory_map=False) as f:
                    files.append(_Shard(name, Path(path), f.metadata, f.schema_arrow))
            except Exception as e:  # pyarrow raises several unrelated types for a bad file
                raise InputError(name, f"cannot read Parquet: {one_line(e)}") from None
            refuse_repeated_columns(name, files[-1].schema.names)
        first = _passage_columns(files[0].schema)
        for shard in files[1:]:
            if _passage_columns(shard.schema) != first:
                raise InputError(shard.name, f"its passage columns ({_describe(_passage_columns(shard.schema))}) differ "
                                 f"from those of {files[0].name} ({_describe(first)}): the shards of one folder must be "
                                 "one table")
        return cls(files)

    def select(self, names: Sequence[str]) -> RowGroups:
        return RowGroups(self.files, names, self._handles)

    def locate(self, row: int) -> tuple[str, int]:
        """(file name, 0-based row in that file) of the 0-based `row` across the files."""
        k = int(np.searchsorted(self._file_rows, row, side="right")) - 1
        return self.files[k].name, row - int(self._file_rows[k])

    def batch(self, i: int) -> pa.RecordBatch:
        if i not in self._cache:
            if len(self._cache) >= self.CACHED:
                self._cache.pop(next(iter(self._cache)))  # the oldest
            table = as_text(self._read(i, self.columns))
            self._cache[i] = table.combine_chunks().to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], self.schema)
        return self._cache[i]

    def column(self, i: int, name: str) -> pa.Array:
        """One column of row group `i`, decoded alone (the duplicate-id check reads ids only)."""
        if i in self._cache:
            return self._cache[i].column(name)
        return as_text(self._read(i, [name])).column(name).combine_chunks()

    def _read(self, i: int, columns: list[str]) -> pa.Table:
        k, group = self._where[i]
        name, _, meta, _ = self.files[k]
        try:
            table = self._file(k).read_row_group(group, columns=columns)
            canonical = pa.schema([_canonical(field) for field in table.schema])
            return table if table.schema == canonical else table.cast(canonical)  # one schema for every shard's batches
        except MemoryError:
            raise
        except Exception as e:  # a damaged page: OSError ("Corrupt snappy compressed data."), ArrowInvalid, ...
            start = sum(meta.row_group(g).num_rows for g in range(group))
            raise InputError(name, f"cannot read Parquet: row group {group + 1} of {meta.num_row_groups} (rows "
                             f"{start + 1}-{start + meta.row_group(group).num_rows}): {one_line(e)}") from None

    def _file(self, k: int) -> pq.ParquetFile:
        """Shard `k`'s file, open, with page CRCs checked: opened again from its footer as read at
        `open` (no footer read twice), the least recently read of OPEN open files closed first."""
        f = self._handles.pop(k, None)
        if f is None:
            if len(self._handles) >= self.OPEN:
                self._handles.pop(next(iter(self._handles))).close()
            shard = self.files[k]
            f = pq.ParquetFile(shard.path, memory_map=False, page_checksum_verification=True, metadata=shard.meta)
        self._handles[k] = f  # the most recent last
        return f


def _passage_columns(schema: pa.Schema) -> list[tuple[str, pa.DataType]]:
    """The passage columns (COLUMNS) of a Parquet file's `schema` and their types as read (`_canonical`),
    binary read as text."""
    schema = text_schema(pa.schema([_canonical(field) for field in schema]))
    return [(c, schema.field(c).type) for c in COLUMNS if c in schema.names]


def _canonical(field: pa.Field) -> pa.Field:
    """`field` as every shard's batches carry it: nullable, and a list's values nullable and named
    "element", as Parquet's nested-type rules name them and pyarrow reads most files (a cast for
    the others). Writers differ in both (older pyarrow named them "item"; some writers mark columns
    required), and shards of one table written by two of them are one table."""
    t = field.type
    values = pa.field("element", t.value_type) if _is_list(t) else None
    if pa.types.is_list(t):
        t = pa.list_(values)
    elif pa.types.is_large_list(t):
        t = pa.large_list(values)
    elif pa.types.is_fixed_size_list(t):
        t = pa.list_(values, t.list_size)
    return pa.field(field.name, t, nullable=True)


def _describe(columns: list[tuple[str, pa.DataType]]) -> str:
    return ", ".join(f"{name}: {t}" for name, t in columns) or "none"
