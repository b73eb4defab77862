"""The passage columns: which are read and as what types (`text_schema`, `as_text`: binary and
dictionary-encoded text read as strings), the store's schema (`PASSAGE_SCHEMA`, `_stored`), and the
per-column checks every table and `lewisrag shard` make: `row_problems`, and repeated ids found by
their 64-bit hashes (`_id_hashes`, `_repeated_hashes`), then compared exactly (`_first_repeat`)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lewisrag.data.io import arrow_text_problem, is_string_type, string_binary_types

COLUMNS = ("id", "title", "text", "embeddings")  # the columns read; others are ignored
TEXT_COLUMNS = ("id", "title", "text")  # binary ones are read as UTF-8 text, as JSONL's bytes are
PASSAGE_SCHEMA = pa.schema([("id", pa.string()), ("title", pa.string()), ("text", pa.string())])  # as indexes store them


def text_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with its binary, view and dictionary-encoded passage columns (TEXT_COLUMNS) as the
    strings `as_text` reads them as."""
    for i, f in enumerate(schema):
        if f.name in TEXT_COLUMNS and _text_type(f.type) is not None:
            schema = schema.set(i, f.with_type(_text_type(f.type)))
    return schema


def as_text(table):
    """A table or record batch with its binary passage columns read as strings: the same buffers,
    not checked here (`PassageTable._validate` names a row that is not UTF-8); dictionary-encoded
    ones (a pandas Categorical written to Parquet) decoded to plain strings; string_view and
    binary_view ones (pyarrow writes them to Parquet and reads them back so) copied into large
    strings, once here, since pyarrow.compute has no kernel for views in most of the checks and
    reads that follow (`utf8_trim_whitespace`, `take`)."""
    for i, name in enumerate(table.column_names):
        target = _text_type(table.column(i).type) if name in TEXT_COLUMNS else None
        if target is not None:
            cast = pc.cast(table.column(i), options=pc.CastOptions(target_type=target, allow_invalid_utf8=True))
            table = table.set_column(i, pa.field(name, target, table.schema.field(i).nullable), cast)
    return table


def _text_type(t: pa.DataType) -> pa.DataType | None:
    """The string type a passage column of type `t` is read as: of binary type `t`, the string type
    of its layout; of a view type, large_string (64-bit offsets: no cast overflows); of a
    dictionary of strings or binaries, that of its values. None for a type read as it is."""
    if t in _VIEWS:
        return pa.large_string()
    if pa.types.is_dictionary(t):
        values = t.value_type
        return values if is_string_type(values) else _text_type(values)
    return next((text for text, raw in string_binary_types() if t == raw), None)


_VIEWS = (pa.string_view(), pa.binary_view())


def row_problems(part: pa.Table, start: int) -> list[tuple[int, int, str, str]]:
    """What the JSON passage reader checks per record, checked per column of `part` (rows from
    `start`): per column, its first row that is not UTF-8, missing or empty (a title may be anything),
    as (row, field order, field, message), the least of them the row to name. A UTF-8 problem orders
    before what the row holds (-3 for id ... -1 for text), as JSONL's bad line does. The first
    problem of a table is the least of its first part that has any, however the rows are cut into
    parts: `PassageTable._validate` cuts them SCAN_ROWS at a time, `write_tsv_shards` a TSV block."""
    problems = []
    for order, name in ((0, "id"), (1, "title"), (2, "text")):
        if name not in part.column_names:
            continue
        col = part.column(name)
        valid = len(col)  # rows before the first that is not UTF-8 (pyarrow.compute reads no further)
        if is_string_type(col.type):
            bad = arrow_text_problem(part, [name])
            if bad is not None:
                valid = bad[0]
                problems.append((start + bad[0], order - 3, name, bad[2]))
        if name == "title":
            continue  # any title, or none
        if col.null_count:
            problems.append((start + _first(pc.is_null(col)), order, name, "missing"))
        if is_string_type(col.type) and valid:
            checked = col.slice(0, valid)
            blank = pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(checked)), 0)
            if pc.any(blank).as_py():
                problems.append((start + _first(blank), order, name, "empty"))
    return problems


def _repeated_hashes(hashes: np.ndarray) -> np.ndarray:
    """The values met more than once in `hashes` (`_id_hashes` of every row), sorted; sorts `hashes` in place."""
    hashes.sort()
    return np.unique(hashes[1:][hashes[1:] == hashes[:-1]])


def _first_repeat(chunks: Iterator[tuple[int, pa.Array]], repeated: np.ndarray) -> tuple[int, int, str] | None:
    """(row, row of its first use, id) of the first row whose id an earlier row has, or None: `chunks`
    ((first row, ids) in row order) read a second time for the rows whose hash is in `repeated`
    (few), compared exactly, since two ids can share a hash."""
    seen: dict = {}
    for start, chunk in chunks:
        at = np.flatnonzero(np.isin(_id_hashes(chunk), repeated) & pc.is_valid(chunk).to_numpy(zero_copy_only=False))
        for row, value in zip((start + at).tolist(), _id_values(chunk.take(pa.array(at, pa.int64())))):
            if value in seen:
                return row, seen[value], str(value)
            seen[value] = row
    return None


def _id_hashes(ids: pa.Array) -> np.ndarray:
    """A 64-bit hash per id, as int64: an integer id itself, a string's the hash of its bytes (this
    process's: the hashes are compared within one call only). Nulls hash alike; callers skip them."""
    if pa.types.is_integer(ids.type):
        return pc.fill_null(ids, 0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    values = pc.cast(ids, pa.large_binary()).to_pylist()  # bytes: an id that is not UTF-8 hashes too
    return np.fromiter((hash(v) for v in values), np.int64, count=len(values))


def _id_values(ids: pa.Array) -> list:
    """Ids as Python values to compare and name: strings as text (bytes that are not UTF-8 escaped:
    `_validate` names such an id itself), integers as they are."""
    if is_string_type(ids.type):
        return [v.decode("utf-8", "backslashreplace") for v in pc.cast(ids, pa.large_binary()).to_pylist()]
    return ids.to_pylist()


def _stored(part: pa.Table) -> pa.RecordBatch:
    """Passage rows as one record batch of `PASSAGE_SCHEMA` (ids as strings, missing titles as "")."""
    # a table without titles gets a chunked column of nulls, like the table's own columns (combine_chunks below)
    no_titles = pa.chunked_array([pa.nulls(part.num_rows, pa.string())])
    titles = part.column("title") if "title" in part.column_names else no_titles
    # cast first: integer ids, large strings, and a title column of nulls only all become strings
    columns = [pc.cast(part.column("id"), pa.string()), pc.fill_null(pc.cast(titles, pa.string()), ""),
               pc.cast(part.column("text"), pa.string())]
    return pa.RecordBatch.from_arrays([c.combine_chunks() for c in columns], schema=PASSAGE_SCHEMA)


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _first(mask) -> int:
    """The first position where a boolean array is true (the caller knows there is one)."""
    return int(pc.index(mask, True).as_py())
