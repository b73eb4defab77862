"""`PassageTable`: a `Sequence[Passage]` over an Arrow table or Parquet row groups, checked when
made, its rows made into Passages a batch at a time, its optional `embeddings` column checked as it
is decoded. One class: its reading, checking and vector methods share the batch bookkeeping."""

from __future__ import annotations

import copy
import operator
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lewisrag.data.io import InputError, is_string_type
from lewisrag.data.passages.parquet import RowGroups
from lewisrag.data.passages.schema import (COLUMNS, TEXT_COLUMNS, _first, _first_repeat, _id_hashes, _is_list,
                                           _repeated_hashes, _stored, as_text, row_problems, text_schema)
from lewisrag.data.records import Passage

BATCH_ROWS = 8192  # rows turned into Passages at a time when iterating
SCAN_ROWS = 1 << 18  # rows checked per pyarrow.compute call while validating
# vectors checked at a time: 100 MB of wiki_dpr's; SCAN_ROWS of them were 0.8 GB, and with the check's
# copies `index cut`'s peak private memory was 2.4 GB against 1.9 (1 M rows, `scripts/bench_cut.py`'s corpus)
VECTOR_SCAN_ROWS = 1 << 15


class PassageTable(Sequence[Passage]):
    """Passages in an Arrow table, read batch by batch; `source` names them in errors.

    The table is checked when made (see `_validate`); `embeddings()`, `vector_dim()` and
    `embedding_dim()` read the optional `embeddings` column, checked as it is decoded.
    """

    def __init__(self, table: pa.Table, source: str | os.PathLike, checked: bool = False, limit: int | None = None,
                 lines_before: int = 0, files: Sequence[Path] | None = None):
        """`checked`: the table was validated when it was written (an index's passage store), so
        opening it costs no pass over the rows. `limit`: the table's first N rows, the only ones
        checked (as `head`, which checks nothing). `lines_before`: the file's lines before its first
        row (a TSV's header), so that errors name the line a user would open. `files`: the Arrow
        files the table's rows lie in, in order (a save_to_disk folder's), so that errors name the
        file that holds a row and its row there, as they name a Parquet shard's (of one file, the
        folder and the row)."""
        self.source = str(source)
        self._lines_before = lines_before
        self._files = list(files or [])
        self._file_starts: np.ndarray | None = None  # row where each of `files` starts (`_in_file`), read when needed
        names = [c for c in COLUMNS if c in table.schema.names]
        self.schema = text_schema(table.schema)
        if isinstance(table, RowGroups):  # a Parquet file: row groups decoded as they are read
            self._groups = table.select(names)
            sizes = self._groups.sizes
        else:  # an Arrow table: its record batches, in memory or memory-mapped
            self._groups = [b for b in as_text(table.select(names)).to_batches() if b.num_rows]
            sizes = [b.num_rows for b in self._groups]
        self._n_groups = len(sizes)
        self._starts = np.cumsum([0] + sizes)  # row where each batch starts
        self._n = int(self._starts[-1]) if limit is None else min(int(self._starts[-1]), max(int(limit), 0))
        self._dim: int | None = None  # the stored vectors' length (`vector_dim`)
        self._checked = 0  # stored vectors of rows [0, _checked) have been checked (`embeddings`)
        self._names = names  # the columns read
        self._text = [c for c in TEXT_COLUMNS if c in names]  # what a Passage is made of
        self._views: dict[tuple, RowGroups] = {}  # Parquet row groups by the columns read (`_view`)
        if not checked:
            self._validate()

    # --- the Sequence ------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(self._n)
            if step == 1:
                return self._rows(start, max(start, stop))
            return self.take(range(start, stop, step))
        i = operator.index(key)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"passage row {key} out of range for {self._n} passages")
        return self._rows(i, i + 1)[0]

    def __iter__(self) -> Iterator[Passage]:
        for batch in self.batches():
            yield from batch

    def __eq__(self, other) -> bool:
        """Equal to any sequence of the same passages in the same order (a list read from JSONL too)."""
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None

    def __repr__(self) -> str:
        return f"PassageTable({self.source!r}, {self._n} passages{', with embeddings' if self.has_embeddings else ''})"

    def batches(self, size: int | None = None) -> Iterator[list[Passage]]:
        """The passages in row order, `size` (default BATCH_ROWS) at a time."""
        size = size or BATCH_ROWS
        for start in range(0, self._n, size):
            yield self._rows(start, min(self._n, start + size))

    def head(self, n: int) -> PassageTable:
        """The first `n` passages (all, if fewer) as a table over the same Arrow data: no copy and
        no Python object per row, where a slice (`table[:n]`) is a list of Passages."""
        out = copy.copy(self)
        out._n = min(max(int(n), 0), self._n)
        return out

    def take(self, rows) -> list[Passage]:
        """The passages at `rows` (any order, repeats and negative rows allowed, as indexing takes
        them), read in one pass: each batch (of Parquet, each row group) that holds some is decoded
        once, where reading them one by one would decode a row group for almost every row of a
        random batch (`train dpr`'s steps over a cut corpus). Each row is checked as `_rows` checks it."""
        unique, inverse = self._unique_rows(rows)
        read: list[Passage] = []
        for batch, local, where in self._gather(unique, self._text):
            for row, offset in zip(where.tolist(), local.tolist()):
                self._check_whole(batch.slice(offset, 1), row)
            read += self._passages(batch.take(pa.array(local)))
        return [read[k] for k in inverse.tolist()]

    def ids_at(self, rows) -> list[str]:
        """The ids of the passages at `rows` (as `take` takes them): `[p.id for p in take(rows)]`, with
        the id column alone read and checked, where a caller that only compares ids (`training.negatives`,
        for a gold passage its search did not return) decoded every row's title and text too (of wiki_dpr's Parquet, most of what a row group holds)."""
        unique, inverse = self._unique_rows(rows)
        read: list[str] = []
        for batch, local, where in self._gather(unique, ["id"]):
            for row, offset in zip(where.tolist(), local.tolist()):
                self._check_whole(batch.slice(offset, 1), row)
            read += _id_strings(batch.column(0).take(pa.array(local))).to_pylist()
        return [read[k] for k in inverse.tolist()]

    def _unique_rows(self, rows) -> tuple[np.ndarray, np.ndarray]:
        """`rows` (negative ones from the end) as (the distinct rows ascending, each row's place among
        them), or an IndexError naming the first outside the table."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        at = np.where(rows < 0, rows + self._n, rows)
        outside = (at < 0) | (at >= self._n)
        if outside.any():
            raise IndexError(f"passage row {int(rows[outside][0])} out of range for {self._n} passages")
        unique, inverse = np.unique(at, return_inverse=True)
        return unique, inverse.reshape(-1)

    def arrow_batches(self, size: int | None = None) -> Iterator[pa.RecordBatch]:
        """The passages as Arrow record batches of `PASSAGE_SCHEMA` (ids as strings, missing titles
        as ""), `size` rows at a time: what an index stores, without a Python object per row."""
        size = size or BATCH_ROWS
        for start in range(0, self._n, size):
            yield _stored(self._slice(start, min(self._n, start + size), self._text))

    def arrow_take(self, rows, embeddings: bool = False) -> pa.RecordBatch:
        """The passages at `rows` (ascending) as one record batch of `PASSAGE_SCHEMA`, and with
        `embeddings` their stored vectors as lists of float32 after it: a part of the table as a
        new table holds it (`index cut`), without a Python object per row. Each batch is decoded once."""
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) and (rows[0] < 0 or rows[-1] >= self._n or (np.diff(rows) < 0).any()):
            raise IndexError(f"rows must ascend within 0..{self._n - 1}")
        columns = self._text + (["embeddings"] if embeddings else [])
        parts = [batch.take(pa.array(local)) for batch, local, _ in self._gather(rows, columns)]
        table = pa.Table.from_batches(parts, schema=self._batch(0, columns).schema)
        out = _stored(table)
        if embeddings:
            self.embedding_dim()  # the column checked (no pass when a search has read it all): lists of floats, one length
            vectors = table.column("embeddings").combine_chunks().cast(pa.list_(pa.float32()))
            out = out.append_column(pa.field("embeddings", pa.list_(pa.float32())), vectors)
        return out

    # --- the embeddings column --------------------------------------------------------------

    @property
    def has_embeddings(self) -> bool:
        return "embeddings" in self.schema.names

    def vector_dim(self) -> int:
        """The length of the stored vectors, read from the column's type and its first row alone.

        No pass over the column: a reader that goes through every vector in row order anyway
        (`embeddings`: `index cut`'s search, `index build --reuse-embeddings`' copy) checks each
        block as it decodes it, where a pass of its own would decode wiki_dpr's 80 GB twice (about
        3 minutes on 2 cores). `embedding_dim` is the pass, for callers that must refuse a damaged
        column before they begin anything."""
        if self._dim is not None:
            return self._dim
        if not self.has_embeddings:
            raise InputError(self.source, "missing: there is no embeddings column", field="embeddings")
        t = self.schema.field("embeddings").type
        if not (_is_list(t) and pa.types.is_floating(t.value_type)):
            raise self._error(f"expected lists of floats, got a column of {t}", 0, "embeddings")
        first = self._slice(0, 1, ["embeddings"]).column("embeddings")
        if first.null_count:
            raise self._error("missing", 0, "embeddings")
        dim = pc.list_value_length(first)[0].as_py()
        if not dim:
            raise self._error("an empty vector", 0, "embeddings")
        self._dim = int(dim)
        return self._dim

    def embedding_dim(self) -> int:
        """`vector_dim`, after a pass that checks every stored vector not yet read (a list of finite
        floats in every row, all of one length): an InputError naming the first bad row otherwise."""
        dim = self.vector_dim()
        for start in range(self._checked, self._n, VECTOR_SCAN_ROWS):
            self.embeddings(start, min(self._n, start + VECTOR_SCAN_ROWS))
        return dim

    def embeddings(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """The stored vectors of rows [start, stop) as float32 (n, D), checked as they are decoded
        unless an earlier read in row order checked them (an InputError names the first bad row)."""
        dim = self.vector_dim()
        stop = self._n if stop is None else min(stop, self._n)
        if stop <= start:
            return np.zeros((0, dim), np.float32)
        part = self._slice(start, stop, ["embeddings"]).column("embeddings")
        if stop <= self._checked:
            values = pc.list_flatten(part)
            return np.asarray(values.to_numpy(), dtype=np.float32).reshape(stop - start, dim)
        vectors = self._checked_vectors(part, start, dim)
        if start <= self._checked:  # rows read in order: checked up to here
            self._checked = stop
        return vectors

    def embeddings_at(self, rows) -> np.ndarray:
        """The stored vectors of `rows` as float32 (len(rows), D)."""
        dim = self.vector_dim()
        return np.stack([self.embeddings(int(r), int(r) + 1)[0] for r in rows]) if len(rows) else np.zeros((0, dim), np.float32)

    def _checked_vectors(self, part: pa.ChunkedArray, start: int, dim: int) -> np.ndarray:
        """The vectors of `part` (rows from `start`) as float32 (n, D), or an InputError naming the
        first row that is null, empty, of another length than `dim`, or holds a null or a value that
        is not finite as float32 (NaN would rank first in every search)."""
        if part.null_count:
            raise self._error("missing", start + _first(pc.is_null(part)), "embeddings")
        lengths = pc.list_value_length(part)
        empty = pc.equal(lengths, 0)
        if pc.any(empty).as_py():  # before the lengths are compared: an empty vector is named as one
            raise self._error("an empty vector", start + _first(empty), "embeddings")
        uneven = pc.not_equal(lengths, dim)
        if pc.any(uneven).as_py():
            row = start + _first(uneven)
            raise self._error(f"{lengths[row - start].as_py()} values where the first row has {dim}", row, "embeddings")
        values = pc.list_flatten(part)
        if values.null_count:
            raise self._error("a null among the values", start + _first(_rows_with_values(part, pc.is_null)), "embeddings")
        if values.type != pa.float32():
            values = pc.cast(values, pa.float32())  # as they are read: float64 past ±3.4e38 is inf
        vectors = np.asarray(values.to_numpy(), dtype=np.float32).reshape(len(part), dim)
        for lo in range(0, len(vectors), VECTOR_SCAN_ROWS):  # a mask of 32,768 rows at a time, not of the block
            if not np.isfinite(vectors[lo:lo + VECTOR_SCAN_ROWS]).all():
                row = start + _first(_rows_with_values(part, _not_finite))
                raise self._error("not a finite number as float32 (NaN, infinity or beyond ±3.4e38)", row, "embeddings")
        return vectors

    # --- reading and checking rows ------------------------------------------------------------

    def _slice(self, start: int, stop: int, columns: Sequence[str] | None = None) -> pa.Table:
        """Rows [start, stop) as a zero-copy table over the batches that hold them; `columns`: only
        these (of Parquet, only these are decoded)."""
        first = int(np.searchsorted(self._starts, start, side="right")) - 1
        last = int(np.searchsorted(self._starts, stop, side="left"))
        parts = []
        for b in range(first, last):
            lo, hi = max(start, self._starts[b]), min(stop, self._starts[b + 1])
            if hi > lo:
                parts.append(self._batch(b, columns).slice(lo - self._starts[b], hi - lo))
        return pa.Table.from_batches(parts, schema=self._batch(first, columns).schema)

    def _batch(self, b: int, columns: Sequence[str] | None = None) -> pa.RecordBatch:
        if isinstance(self._groups, RowGroups):
            return self._view(columns).batch(b)
        if columns is None or columns == self._names:  # an index's store: its columns are the text ones
            return self._groups[b]
        return self._groups[b].select(list(columns))

    def _view(self, columns: Sequence[str] | None) -> RowGroups:
        """The Parquet row groups of `columns` alone, each set of columns with its own few decoded
        groups: a passage's text never decodes its vector, and wiki_dpr's 768 floats are some 3 KB a
        row against 0.6 KB of text (100,000 such rows, 2 cores: checked at open in 0.3 s instead of
        0.75, read as passages in 0.4 s instead of 0.8, written to an index's store in 0.13 s
        instead of 0.78)."""
        if columns is None:
            return self._groups
        key = tuple(columns)
        if key not in self._views:
            self._views[key] = self._groups.select(key)
        return self._views[key]

    def _column(self, b: int, name: str) -> pa.Array:
        if isinstance(self._groups, RowGroups):
            return self._groups.column(b, name)
        return self._groups[b].column(self._groups[b].schema.get_field_index(name))

    def _gather(self, rows: np.ndarray, columns: Sequence[str]) -> Iterator[tuple[pa.RecordBatch, np.ndarray, np.ndarray]]:
        """For the ascending `rows`, per batch that holds some of them: (the batch of `columns`, those
        rows' offsets in it, the rows). Each batch is decoded once."""
        groups = np.searchsorted(self._starts, rows, side="right") - 1
        bounds = np.flatnonzero(np.diff(groups)) + 1  # where the next batch's rows begin
        for at, g in zip(np.split(rows, bounds), np.split(groups, bounds)):
            if len(at):
                yield self._batch(int(g[0]), columns), at - self._starts[g[0]], at

    def _rows(self, start: int, stop: int) -> list[Passage]:
        """Rows [start, stop) as Passages."""
        if stop <= start:
            return []
        part = self._slice(start, stop, self._text)
        self._check_whole(part, start)
        return self._passages(part)

    def _passages(self, part: pa.Table | pa.RecordBatch) -> list[Passage]:
        """Checked rows of the text columns as Passages: the one place Python objects are made from the table."""
        ids = _id_strings(part.column("id"))
        titles = part.column("title").to_pylist() if "title" in part.column_names else [None] * part.num_rows
        return [Passage(i, t or "", x) for i, t, x in zip(ids.to_pylist(), titles, part.column("text").to_pylist())]

    def _check_whole(self, part: pa.Table | pa.RecordBatch, start: int) -> None:
        """Refuse damaged Arrow data (offsets past the end, cut UTF-8) before it becomes Python
        strings: so read, it raises UnicodeDecodeError or reads out of bounds and crashes the process.
        A memory-mapped file (an index's store, a save_to_disk folder) can be damaged after it was
        written; the check costs about 6 µs a row read (10 µs without it)."""
        try:
            part.validate(full=True)
        except pa.ArrowInvalid:
            for row in range(part.num_rows):  # name the first damaged row and column
                for name in part.column_names:
                    try:
                        part.column(name).slice(row, 1).validate(full=True)
                    except pa.ArrowInvalid as e:
                        raise InputError(self.source, f"row {start + row} (0-based) is damaged ({e}): the file changed "
                                         "after it was written, or is not whole", field=name) from None
            raise InputError(self.source, f"rows {start}-{start + part.num_rows - 1} (0-based) are damaged: the file "
                             "changed after it was written, or is not whole") from None

    def _at(self, row: int) -> tuple[str, int]:
        """(file, 1-based line) of the 0-based `row`: in a folder of Parquet shards, the shard that
        holds it and its row there, as a user would open the file to look."""
        if isinstance(self._groups, RowGroups):
            name, local = self._groups.locate(row)
            return name, local + 1
        if len(self._files) > 1 and self._in_files():  # of one file, the folder and its row say it
            k = int(np.searchsorted(self._file_starts, row, side="right")) - 1
            return str(self._files[k]), row - int(self._file_starts[k]) + 1
        return self.source, row + 1 + self._lines_before

    def _in_files(self) -> bool:
        """Whether the rows of `files` (each Arrow stream's batches counted, memory-mapped: no data read)
        are the table's, in order; the files' first rows are then in `_file_starts`. An error only
        asks, so opening a folder reads no more than it did."""
        if self._file_starts is None:
            try:
                counts = []
                for f in self._files:
                    with pa.memory_map(str(f)) as source:
                        counts.append(sum(b.num_rows for b in pa.ipc.open_stream(source)))
                starts = np.cumsum([0] + counts)
            except (OSError, pa.ArrowException):  # damaged after datasets loaded it: rows named in the folder
                starts = np.zeros(1, np.int64)
            self._file_starts = starts if int(starts[-1]) == int(self._starts[-1]) else np.zeros(1, np.int64)
        return len(self._file_starts) > 1

    def _error(self, message: str, row: int, field: str) -> InputError:
        where, line = self._at(row)
        return InputError(where, message, line=line, field=field)

    def ids_present(self, ids) -> set[str]:
        """Which of `ids` are passage ids here: one scan of the id column (seconds at 21M rows), not
        a Python set of every id."""
        return set(self.rows_of(ids))

    def rows_of(self, ids) -> dict[str, int]:
        """The row of each of `ids` that is a passage id here (the others left out): one scan of the
        id column, none when `ids` is empty."""
        wanted = sorted(set(map(str, ids)))
        out: dict[str, int] = {}
        if not wanted:
            return out
        value_set = pa.array(wanted, pa.string())
        for start, column in self._scan("id"):
            column = column.combine_chunks()
            column = column if is_string_type(column.type) else pc.cast(column, pa.string())
            at = pc.indices_nonzero(pc.is_in(column, value_set=value_set)).to_numpy()
            out.update(zip(column.take(pa.array(at)).to_pylist(), (start + at).tolist()))
        return out

    def _scan(self, column: str, rows: int = SCAN_ROWS) -> Iterator[tuple[int, pa.ChunkedArray]]:
        for start in range(0, self._n, rows):
            yield start, self._slice(start, min(self._n, start + rows), [column]).column(column)

    def _validate(self) -> None:
        """What the JSON passage reader checks per record, checked per column: the first bad row
        (in row order; id before title before text within a row) is the error."""
        if self._n == 0:
            raise InputError(self.source, "no passages")
        for name in ("id", "text"):
            if name not in self.schema.names:
                raise self._error("missing (no such column)", 0, name)
        for name, integers in (("id", True), ("title", False), ("text", False)):
            t = self.schema.field(name).type if name in self.schema.names else pa.string()
            if pa.types.is_null(t):  # a column with no values
                if name == "title":
                    continue  # no titles
                raise self._error("missing", 0, name)
            if not (is_string_type(t) or (integers and pa.types.is_integer(t))):
                raise self._error(f"expected strings, got a column of {t}", 0, name)
        dup = self._first_duplicate()
        problems = []  # (row, field order, field, message)
        for start in range(0, dup[0] + 1 if dup else self._n, SCAN_ROWS):
            problems = row_problems(self._slice(start, min(self._n, start + SCAN_ROWS), self._text), start)
            if problems:
                break
        if dup:
            row, first, value = dup
            where, line = self._at(first)
            problems.append((row, 0, "id", f"duplicate id {value!r} (first on line {line}"
                             f"{'' if where == self._at(row)[0] else ' of ' + where})"))
        if problems:
            row, _, name, message = min(problems)
            raise self._error(message, row, name)

    def _first_duplicate(self) -> tuple[int, int, str] | None:
        """(row, row of its first use, id) of the first row whose id an earlier row has, or None.

        8 bytes a row: each id's 64-bit hash (an integer id is its own), sorted to find the hashes
        met twice; then a second read of the ids takes the rows with those hashes, compared exactly
        (two ids can share a hash). pyarrow's distinct count held the whole column and a hash table,
        about 80 bytes a passage: 1.7 GB at wiki_dpr's 21 M, against 170 MB so."""
        hashes = np.empty(self._n, np.int64)
        for start, chunk in self._id_chunks():
            hashes[start:start + len(chunk)] = _id_hashes(chunk)
        repeated = _repeated_hashes(hashes)
        del hashes
        return _first_repeat(self._id_chunks(), repeated) if len(repeated) else None

    def _id_chunks(self) -> Iterator[tuple[int, pa.Array]]:
        """(first row, the id column of one batch) over rows [0, len), a batch decoded at a time."""
        groups = int(np.searchsorted(self._starts, self._n, side="left"))  # those holding rows before self._n
        for b in range(groups):
            start = int(self._starts[b])
            yield start, self._column(b, "id").slice(0, self._n - start)


def _id_strings(ids: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """An id column as strings: integer ids as the JSON readers take them."""
    return ids if is_string_type(ids.type) else pc.cast(ids, pa.string())


def _rows_with_values(lists: pa.ChunkedArray, which) -> pa.ChunkedArray:
    """Per row of a list column, whether one of its values is picked by `which` (values -> bool array)."""
    return pa.chunked_array([_row_has(c, which) for c in lists.chunks], pa.bool_())


def _row_has(chunk: pa.Array, which) -> pa.Array:
    flat = pc.list_flatten(chunk)
    parents = pc.list_parent_indices(chunk).to_numpy()
    out = np.zeros(len(chunk), bool)
    out[parents[which(flat).to_numpy(zero_copy_only=False)]] = True
    return pa.array(out)


def _not_finite(values: pa.Array) -> pa.Array:
    """Whether each value is NaN or infinite as float32, the type vectors are read as."""
    return pc.invert(pc.is_finite(pc.cast(values, pa.float32())))
