"""Arrow strings that break their promise of UTF-8: the first such string of a table, by row and field
(`arrow_text_problem`), Arrow's string types with the binary type of each one's layout, and a file's
column names each once (`refuse_repeated_columns`)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable

from lewisrag.data.io.errors import InputError, one_line


def refuse_repeated_columns(source: str | os.PathLike, names: Iterable[str]) -> None:
    """An InputError naming the first column name that `names` (a file's schema's, in order) holds more
    than once: Parquet and Arrow allow it, and pyarrow then finds no column by that name (KeyError).

    >>> refuse_repeated_columns("p.parquet", ["id", "text", "id"])
    Traceback (most recent call last):
    lewisrag.data.io.InputError: p.parquet: field 'id': column 'id' appears 2 times
    """
    counts = Counter(names)
    name = next((n for n in counts if counts[n] > 1), None)
    if name is not None:
        raise InputError(source, f"column {name!r} appears {counts[name]} times", field=name)


def arrow_text_problem(table, columns: Iterable[str] | None = None) -> tuple[int, str, str] | None:
    """`(row, field, message)` of the first string in an Arrow table (or in its `columns`) that
    Python cannot read, or None: row from 0, field a path as `_unencodable` writes it ('question',
    'answer.value', 'answers[1]'), message "not valid UTF-8 (byte N)" as the JSONL reader says it.

    Arrow's string types promise UTF-8, but a writer can break the promise (a Parquet column of
    latin-1 bytes marked as strings, an Arrow file written from raw buffers), and pyarrow then fails
    where Python strings are made, naming no row. One full validation per column finds whether there
    is such a string (fast, in C++); only then are its rows looked at one block at a time.
    A column whose data is damaged in another way (offsets out of range) is named the same way.
    """
    import pyarrow as pa  # loads on first use: the CLI imports this module at start-up

    found = None
    for name in table.column_names if columns is None else columns:
        column = table.column(name)
        if not _holds_strings(column.type):
            continue
        try:
            column.validate(full=True)
            continue
        except pa.ArrowException:
            pass
        problem = _first_invalid_row(column, name)
        if problem is not None and (found is None or problem[0] < found[0]):
            found = problem
    return found


_BLOCK = 4096  # rows validated at a time while looking for the bad one


def _first_invalid_row(column, name: str) -> tuple[int, str, str] | None:
    import pyarrow as pa

    def invalid(start: int, length: int) -> str | None:
        try:
            column.slice(start, length).validate(full=True)
        except pa.ArrowException as e:
            return one_line(e)
        return None

    flat = is_string_type(column.type)
    if not flat:  # a slice of a list or struct validates all of its child array: its rows are read instead, bytes for strings
        for block in range(0, len(column), _BLOCK):
            try:
                values = column.slice(block, _BLOCK).cast(_as_bytes(column.type)).to_pylist()
            except Exception:  # damaged beyond reading: named below, by its first invalid slice
                break
            for row, value in enumerate(values, start=block):
                found = _walk_strings(value, column.type, name)
                if found is not None:
                    return (row, *found)
    for block in range(0, len(column), _BLOCK):
        if invalid(block, _BLOCK) is None:
            continue
        for row in range(block, min(block + _BLOCK, len(column))):
            why = invalid(row, 1)
            if why is not None:
                return (row, *_bad_string(column.slice(row, 1), name, why))
        return block, name, f"invalid Arrow data: {invalid(block, _BLOCK)}"
    return 0, name, f"invalid Arrow data: {invalid(0, len(column))}"


def _bad_string(one_row, name: str, why: str) -> tuple[str, str]:
    """(field, message) for the one row of a column that failed validation: the path of its first
    string that is not UTF-8, or the column itself with Arrow's words when it is damaged otherwise."""
    try:
        value = one_row.cast(_as_bytes(one_row.type)).to_pylist()[0]  # the same data, strings as bytes
        found = _walk_strings(value, one_row.type, name)
    except Exception:  # damaged beyond reading: Arrow's own words below
        found = None
    if found is not None:
        return found
    return name, f"invalid Arrow data: {why}"


def _holds_strings(t) -> bool:
    import pyarrow as pa

    if is_string_type(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_list_view(t) \
            or pa.types.is_large_list_view(t):
        return _holds_strings(t.value_type)
    if pa.types.is_struct(t):
        return any(_holds_strings(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _holds_strings(t.key_type) or _holds_strings(t.item_type)
    if pa.types.is_dictionary(t):
        return _holds_strings(t.value_type)
    return False


def is_string_type(t) -> bool:
    """Whether an Arrow type is one of the string types (string, large_string, string_view)."""
    return any(t == text for text, _ in string_binary_types())


def string_binary_types() -> list:
    """Arrow's string types, each with the binary type of the same layout: (string, binary), ..."""
    import pyarrow as pa

    return [(pa.string(), pa.binary()), (pa.large_string(), pa.large_binary()), (pa.string_view(), pa.binary_view())]


def _as_bytes(t):
    """`t` with every string type made the binary type of the same layout (a zero-copy cast)."""
    import pyarrow as pa

    for text, raw in string_binary_types():
        if t == text:
            return raw
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_as_bytes(t.value_type)))
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_as_bytes(t.value_type)))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(_as_bytes(t.value_type)), t.list_size)
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(_as_bytes(t.field(i).type)) for i in range(t.num_fields)])
    if pa.types.is_dictionary(t):
        return _as_bytes(t.value_type)
    return t


def _walk_strings(value, t, path: str) -> tuple[str, str] | None:
    """(path, message) of the first bytes in `value` (a row read with `_as_bytes`) that were a string
    of type `t` and are not UTF-8; None if there is none."""
    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_dictionary(t):
        t = t.value_type
    if is_string_type(t):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError as e:
            return path, f"not valid UTF-8 (byte {e.start})"
        return None
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            f = t.field(i)
            found = _walk_strings(value.get(f.name), f.type, f"{path}.{f.name}")
            if found is not None:
                return found
    elif hasattr(t, "value_type") and isinstance(value, list):  # the list types
        for i, item in enumerate(value):
            found = _walk_strings(item, t.value_type, f"{path}[{i}]")
            if found is not None:
                return found
    return None
