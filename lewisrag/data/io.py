"""Reading and writing records: JSON Lines, JSON, Parquet and Hugging Face datasets.

Every reader yields `(line, record)` pairs so that a bad record can be reported by file, line and
field. Problems raise `InputError`, which the CLI turns into one line on stderr and exit code 2.
Writers are atomic: they write a temporary file beside the target and rename it, so an
interrupted or failed run never leaves a half-written output.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import json
import logging
import math
import os
import re
import shlex
import socket
import sys
import tempfile
import unicodedata
from collections.abc import Callable, Container, Iterable, Iterator
from pathlib import Path
from typing import Any


class LewisragWarning(UserWarning):
    """Something the user should know but that does not stop the command; the CLI prints it as one
    line, `warning: message` (`warnings` shows each message once)."""


class InputError(Exception):
    """Bad input, reported as `file:line: field 'name': message` (exit code 2 in the CLI)."""

    def __init__(self, source: str | os.PathLike, message: str, line: int | None = None, field: str | None = None):
        self.source, self.line, self.field, self.message = str(source), line, field, message
        where = self.source if line is None else f"{self.source}:{line}"
        what = f"field '{field}': {message}" if field else message
        super().__init__(f"{where}: {what}")


def iter_records(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield `(line, record)` from `.jsonl`, `.json`, `.parquet` or `hf:NAME[:CONFIG]:SPLIT`.

    `line` is the 1-based line of a JSONL file, the line on which a JSON list's object opens, or
    the 1-based row of a Parquet file or dataset split.
    """
    spec = str(path)
    if spec.startswith("hf:"):
        yield from _iter_hf(spec)
        return
    p = existing_file(spec)
    suffix = p.suffix.lower()
    if suffix == ".jsonl":
        yield from _iter_jsonl(p)
    elif suffix == ".json":
        yield from _iter_json(p)
    elif suffix == ".parquet":
        yield from _iter_parquet(p)
    else:
        raise InputError(spec, f"unknown format '{suffix}': use .jsonl, .json, .parquet or hf:NAME[:CONFIG]:SPLIT")


def existing_file(path: str | os.PathLike) -> Path:
    """`path` as a Path if it is a file; an InputError if it is missing, a folder, or gzip-compressed
    (every reader of a file opens it through here: JSON, JSONL, DPR's .qa.csv and passages TSV,
    Parquet; none reads gzip, and read as text such a file was "not valid UTF-8 (byte 1)")."""
    p = Path(path)
    if p.is_dir():
        raise InputError(p, "is a folder; a file is needed")
    if not p.exists():
        raise InputError(p, "file not found")
    _not_gzip(p)
    return p


GZIP_MAGIC = b"\x1f\x8b"  # no UTF-8 text opens so: 0x8b continues a character, and 0x1f is one whole


def _not_gzip(p: Path) -> None:
    """An InputError if the file opens with gzip's magic bytes, with the command that decompresses it
    (`gunzip` itself only for a name ending in .gz: it leaves any other name alone).

    >>> import gzip, tempfile; f = Path(tempfile.mkdtemp()) / "qa.jsonl"
    >>> _ = f.write_bytes(gzip.compress(b"{}"))
    >>> _not_gzip(f)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    lewisrag.data.io.InputError: ...qa.jsonl: gzip-compressed: decompress it first (gunzip -c ...qa.jsonl > ...qa.plain.jsonl)
    """
    try:
        with open(p, "rb") as f:
            head = f.read(len(GZIP_MAGIC))
    except OSError:  # unreadable: the reader's own open says so
        return
    if head == GZIP_MAGIC:
        if p.suffix.lower() == ".gz":
            how = f"gunzip {shlex.quote(str(p))}"
        else:
            how = f"gunzip -c {shlex.quote(str(p))} > {shlex.quote(str(p.with_name(f'{p.stem}.plain{p.suffix}')))}"
        raise InputError(p, f"gzip-compressed: decompress it first ({how})")


class _BadJSON(Exception):
    def __init__(self, msg: str, line: int | None = None, column: int | None = None, field: str | None = None,
                 what: str = "malformed JSON: ", at: list[tuple[str, int]] | None = None):
        super().__init__(msg)
        self.msg, self.line, self.column, self.field, self.what = msg, line, column, field, what
        self.at = at  # a repeated key's: (path, offset in the text) of each value it lies in, then its own


class _DuplicateKey(Exception):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    """json's object_pairs_hook: an object that names a key twice is refused, not read as its last value."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _DuplicateKey
    return obj


# one decoder, made once: json.loads with a hook makes a new one (and its scanner) for every text
_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates)
_PLAIN = json.JSONDecoder()


def _first_repeated_key(text: str) -> tuple[str, str, list[tuple[str, int]]]:
    """The key, in the order of the text, that an object gives a second time: (the key, its path as
    `_unencodable` writes paths: 'answers', 'contexts[2].id', '[3].question', and (path, offset) of
    each value it lies in, the top one first, then the repeated key's own). The text is valid JSON
    (read on the error path only, after json.loads), walked in its order without recursion: a value
    that repeats no key is passed over whole, by json's scanner; the first that does is walked into,
    key by key. So the key named and the path given are the same key's: json's hook meets the
    innermost object first, which need not be the first repeat in the text, nor the shallowest."""
    skip, scan = (lambda i: _WS.match(text, i).end()), json.decoder.scanstring
    stack: list[tuple[str, set | None, int]] = []  # per open object or list: (its path, keys seen or None, item)
    at: list[tuple[str, int]] = []  # (path, offset) of each open value, the top one first
    i, path = skip(0), ""
    while True:
        at.append((path, i))  # a value opens at i
        c = text[i]
        try:  # a value without a repeat is passed over whole, by json's C scanner (the top one has a repeat)
            end = (_DECODER if c in "{[" else _PLAIN).raw_decode(text, i)[1] if stack else None
        except _DuplicateKey:
            end = None
        if end is None:  # the first repeat lies inside: walked into
            stack.append((path, set() if c == "{" else None, 0))
            i = skip(i + 1)
            if c == "[":
                path = f"{path}[0]"
                continue
        else:
            i = skip(end)
            at.pop()
            while stack and text[i] != ",":  # the value closed its object or list: so may that one
                stack.pop()
                at.pop()
                i = skip(i + 1)
            if not stack:
                raise ValueError("no key is given twice")  # not reached: json's hook found one
            i = skip(i + 1)  # past the comma
            outer, seen, item = stack[-1]
            if seen is None:
                stack[-1] = (outer, None, item + 1)
                path = f"{outer}[{item + 1}]"
                continue
        outer, seen, _ = stack[-1]  # a key at i
        key, end = scan(text, i + 1)
        path = f"{outer}.{key}" if outer else key
        if key in seen:
            return key, path, at + [(path, i)]
        seen.add(key)
        i = skip(skip(end) + 1)  # past the colon


def _loads(text: str) -> Any:
    """json.loads, with every way it can refuse a text as a _BadJSON, and no string that cannot be
    written back: a lone surrogate escape ("\\ud800") parses as a str that UTF-8 cannot encode, which
    would fail only when an output is written. A key repeated in one object is refused too (json
    would keep its last value in silence: {"answers": ["a"], "answers": []} has no answer), naming the
    first such key in the text and its path, once the whole text has been read as JSON (a fault of
    another kind in it is named first)."""
    try:
        try:
            obj = _DECODER.decode(text)
        except _DuplicateKey:  # the text may hold another fault past the repeated key: read without the hook
            _PLAIN.decode(text)
            key, field, at = _first_repeated_key(text)
            raise _BadJSON(f"the key {json.dumps(key, ensure_ascii=False)} is given twice in one object: one value "
                           "would silently replace the other", field=field, what="", at=at) from None
    except json.JSONDecodeError as e:
        # json's message for control characters ends in " at", before the position it would add
        raise _BadJSON(e.msg.removesuffix(" at"), e.lineno, e.colno) from None
    except RecursionError:
        raise _BadJSON("nested too deeply") from None
    except ValueError:  # int() refuses longer digit strings (CPython's guard against quadratic time)
        line, column = _long_integer_at(text)
        raise _BadJSON(f"an integer longer than {sys.get_int_max_str_digits()} digits", line, column) from None
    if "\\u" in text:  # only escapes make lone surrogates; most lines have none to look for
        field = _unencodable(obj)
        if field is not None:
            raise _BadJSON("a lone surrogate escape (\\ud800-\\udfff): not a character", field=field)
    return obj


# a JSON text's strings and numbers, in its order (digits lie in nothing else); a number is read by int()
# when it has no fraction and no exponent
_STRING_OR_NUMBER = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|-?([0-9]+)(\.[0-9]+)?([eE][-+]?[0-9]+)?', re.DOTALL)


def _long_integer_at(text: str) -> tuple[int | None, int | None]:
    """(line, column), 1-based, of the first integer of `text` that int() refuses for its length (json's
    ValueError says neither); (None, None) if there is none (not reached: the caller met one).

    >>> _long_integer_at('{"a": "' + "1" * 5000 + '", "b": 0.' + "1" * 5000 + ',\\n "c": -' + "9" * 4301 + "}")
    (2, 7)
    """
    limit = sys.get_int_max_str_digits()
    for m in _STRING_OR_NUMBER.finditer(text):
        digits = m.group(1)
        if digits is not None and m.group(2) is None and m.group(3) is None and 0 < limit < len(digits):
            return text.count("\n", 0, m.start()) + 1, m.start() - text.rfind("\n", 0, m.start())
    return None, None


def _unencodable(obj: Any) -> str | None:
    """The path of the first string (key or value) UTF-8 cannot encode, '(top level)' for obj itself."""
    stack = [(obj, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, dict):
            for k, v in value.items():
                key = f"{path}.{k}" if path else str(k)
                if not _encodable(k):
                    return path or "(top level)"
                stack.append((v, key))
        elif isinstance(value, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(value))
        elif isinstance(value, str) and not _encodable(value):
            return path or "(top level)"
    return None


def _encodable(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _iter_jsonl(p: Path) -> Iterator[tuple[int, dict]]:
    with open(p, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                # a byte-order mark opens files that some Windows editors save as "UTF-8"
                text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise InputError(p, f"not valid UTF-8 (byte {e.start})", line=lineno) from None
            if not text.strip():
                continue
            if text.startswith("\ufeff"):  # files saved with a mark each, then concatenated: invisible in an editor
                raise InputError(p, "starts with a byte-order mark (U+FEFF), allowed only at the start of the file: "
                                 "remove it", line=lineno)
            try:
                rec = _loads(text)
            except _BadJSON as e:
                where = "" if e.column is None else f" at column {e.column}"
                raise InputError(p, f"{e.what}{e.msg}{where}", line=lineno, field=e.field) from None
            if not isinstance(rec, dict):
                raise InputError(p, f"expected a JSON object, got {type(rec).__name__}", line=lineno)
            yield lineno, rec


def _iter_json(p: Path) -> Iterator[tuple[int, dict]]:
    """The records of a JSON list, or of {"data": [...]}, each with the line its object opens on."""
    text, data = _text_and_json(p)
    key = None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data, key = data["data"], "data"  # {"data": [...]} as SQuAD-like files and some exporters write it
    if not isinstance(data, list):
        raise InputError(p, "expected a JSON list of objects")
    for rec, line in zip(data, json_item_lines(text, key)):
        if not isinstance(rec, dict):
            raise InputError(p, f"expected a JSON object, got {type(rec).__name__}", line=line)
        yield line, rec


_WS = re.compile(r"[ \t\n\r]*")


def json_item_lines(text: str, key: str | None = None) -> Iterator[int]:
    """The line on which each item of the text's list opens (the list at the top, or under `key` of
    the top object), for a text json.loads has read. json reports no positions of what it parsed,
    so the list is walked again with raw_decode, one value at a time."""
    decoder, skip = json.JSONDecoder(), lambda i: _WS.match(text, i).end()
    i = skip(0)
    if key is not None:  # find the list under `key` (`_loads` refused a key given twice, so there is one)
        start, i = None, skip(i + 1)
        while text[i] != "}":
            name, i = json.decoder.scanstring(text, i + 1)
            i = skip(skip(i) + 1)  # past the colon
            if name == key:
                start = i
            i = skip(decoder.raw_decode(text, i)[1])
            i = skip(i + 1) if text[i] == "," else i
        i = start
    i, line, at = skip(i + 1), 1, 0  # past the list's "["
    while text[i] != "]":
        line += text.count("\n", at, i)
        at = i
        yield line
        i = skip(decoder.raw_decode(text, i)[1])
        i = skip(i + 1) if text[i] == "," else i


def _iter_parquet(p: Path) -> Iterator[tuple[int, dict]]:
    """The rows of a Parquet file, a row group at a time; a group that cannot be decoded (damaged
    pages, a bad compressed block) is an error naming the file and the group, and a string that is
    not UTF-8 one naming the row and the field, as the JSONL reader names its line."""
    import pyarrow.parquet as pq  # loads on first use: the CLI imports this module at start-up

    try:
        file = pq.ParquetFile(p, page_checksum_verification=True)  # pages that carry a CRC: checked as read
        groups = file.metadata.num_row_groups
    except Exception as e:  # pyarrow raises several unrelated types for a bad file
        raise InputError(p, f"cannot read Parquet: {one_line(e)}") from None
    row = 0
    for g in range(groups):
        try:
            table = file.read_row_group(g)
        except MemoryError:
            raise
        except Exception as e:  # damaged data pages: OSError, ArrowInvalid, ...
            raise InputError(p, f"cannot read Parquet: row group {g + 1} of {groups} (from row {row + 1}): "
                             f"{one_line(e)}") from None
        yield from _arrow_rows(table, p, row)
        row += table.num_rows


def _iter_hf(spec: str) -> Iterator[tuple[int, dict]]:
    ds = load_hf(spec)
    table = ds.data.table if getattr(ds, "_indices", None) is None else ds.with_format("arrow")[:]  # in the rows' order
    bad = arrow_text_problem(table)
    for i, rec in enumerate(ds if bad is None else ds.select(range(bad[0])), start=1):  # the rows before a bad one
        yield i, dict(rec)
    if bad is not None:
        raise InputError(spec, bad[2], line=bad[0] + 1, field=bad[1])


def _arrow_rows(table, source, offset: int) -> Iterator[tuple[int, dict]]:
    """The rows of an Arrow table as records, numbered from `offset` + 1: those before a bad string
    (see `arrow_text_problem`), then the error naming it, as a JSONL file is read line by line."""
    bad = arrow_text_problem(table)
    good = table if bad is None else table.slice(0, bad[0])
    for i, rec in enumerate(good.to_pylist(), start=offset + 1):
        yield i, rec
    if bad is not None:
        raise InputError(source, bad[2], line=offset + bad[0] + 1, field=bad[1])


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


def one_line(error: BaseException | str) -> str:
    """A library's error text as one printable line: its lines joined with "; ", control characters
    escaped (pyarrow quotes the raw byte it stopped at: "don't know what type: \\x0f").

    >>> one_line("Couldn't deserialize thrift: don't know what type: \\x0f\\nDeserializing page header failed.\\n")
    "Couldn't deserialize thrift: don't know what type: \\\\x0f; Deserializing page header failed."
    """
    text = str(error) or type(error).__name__
    joined = "; ".join(line.strip() for line in text.splitlines() if line.strip())
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in joined)


def first_line(error: BaseException | str) -> str:
    """The first non-blank line of a library's error, as `one_line` prints it; the error's type if it
    has no text. Libraries put the cause first and a traceback or advice after it.

    >>> first_line(ValueError("\\nbad magic number\\nat offset 0")), first_line(KeyError())
    ('bad magic number', 'KeyError')
    """
    lines = [line for line in str(error).splitlines() if line.strip()]
    return one_line(lines[0]) if lines else type(error).__name__


def load_hf(spec: str):
    """The `datasets.Dataset` named by `hf:NAME[:CONFIG]:SPLIT` (memory-mapped Arrow in the datasets cache)."""
    parts = spec[3:].split(":")
    if len(parts) not in (2, 3) or not all(parts):
        raise InputError(spec, "expected hf:NAME[:CONFIG]:SPLIT")
    name, config, split = (parts[0], None, parts[1]) if len(parts) == 2 else parts
    import datasets  # loads on first use (~1 s): the CLI imports this module at start-up

    # without a network the hub client retries for ~20 s and logs every attempt on stderr: the
    # outcome is the one line below, so its warnings are held back for the call
    loggers = [logging.getLogger(n) for n in ("huggingface_hub", "datasets")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        return datasets.load_dataset(name, config, split=split)
    except Exception as e:  # network, missing dataset, bad split: all are the user's input
        why = first_line(e)
        if "reach" in why and not os.environ.get("HF_HUB_OFFLINE"):
            why += "; offline, HF_HUB_OFFLINE=1 reads the datasets cache without retrying"
        raise InputError(spec, f"cannot load dataset: {why}") from None
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


# ---------------------------------------------------------------------------------------------
# field checks shared by the record readers


def is_count(value: object) -> bool:
    """A whole number >= 0 (JSON's true and false are not numbers here).

    >>> is_count(3), is_count(-1), is_count(True), is_count(2.0)
    (True, False, False, False)
    """
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_number(value: object) -> bool:
    """An int or a float, not a boolean."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_finite_number(value: object) -> bool:
    """An int or a float, not a boolean, that a float holds: not NaN or infinite (JSON's NaN and
    Infinity parse, and 1e400 reads as inf), and no int past float's range (10**400 parses as an int,
    then overflows where a mean or a plot makes it a float).

    >>> is_finite_number(0.5), is_finite_number(10**308), is_finite_number(10**400), is_finite_number(float("nan"))
    (True, True, False, False)
    """
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool) and -sys.float_info.max <= value <= sys.float_info.max


def expect(ok: bool, source, field: str, what: str, value: object, after: str = "") -> None:
    """Unless `ok`: an InputError naming `source` and `field`: "expected WHAT, got VALUE" (+ `after`).
    For the files lewisrag writes itself (manifests, checkpoint state), read back field by field."""
    if not ok:
        raise InputError(source, f"expected {what}, got {shown_value(value)}{after}", field=field)


def shown_value(value: object) -> str:
    """`repr(value)` for an error message, but an integer of more than 40 characters by its length, not
    its digits, and a float that is not finite as JSON spells it.

    >>> shown_value(0.5), shown_value(-10**400), shown_value(float("inf"))
    ('0.5', 'an integer of 401 digits', 'Infinity')
    """
    shown = repr(value)
    if isinstance(value, int) and len(shown) > 40:  # 10**400: its length, not 401 digits
        return f"an integer of {len(shown.lstrip('-'))} digits"
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(value)  # as the file spells it: Infinity, NaN
    return shown


def given_once(flag: str, values: Iterable, key: Callable[[Any], Any] = lambda v: v, field: str | None = None) -> None:
    """An InputError naming `flag` (and `field`, for a config file's key) for the first value given
    twice: a repeat would be scored, checked or counted twice, or fold into one result in silence.

    >>> given_once("--recall-at", [1, 5, 5])
    Traceback (most recent call last):
    lewisrag.data.io.InputError: --recall-at: 5 is given twice
    """
    seen: dict = {}
    for v in values:
        k = key(v)
        if k in seen:
            raise InputError(flag, f"{v} is given twice" + ("" if seen[k] == v else f" (as {seen[k]} too)"), field=field)
        seen[k] = v


def decoded(value, source, line: int, field: str):
    """`value`, or the text of bytes (a Parquet or Arrow column of binary type): UTF-8 as in JSONL, an
    InputError naming the field otherwise."""
    if not isinstance(value, bytes | bytearray | memoryview):
        return value
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(source, f"not valid UTF-8 (byte {e.start})", line=line, field=field) from None


def require_str(rec: dict, field: str, source, line: int, *, nonempty: bool = True) -> str:
    if field not in rec or rec[field] is None:
        raise InputError(source, "missing", line=line, field=field)
    value = decoded(rec[field], source, line, field)
    if not isinstance(value, str):
        raise InputError(source, f"expected a string, got {type(value).__name__}", line=line, field=field)
    if nonempty and not value.strip():
        raise InputError(source, "empty", line=line, field=field)
    return value


def optional_str(rec: dict, field: str, source, line: int) -> str | None:
    if rec.get(field) is None:
        return None
    return require_str(rec, field, source, line, nonempty=False)


def require_str_list(rec: dict, field: str, source, line: int, *, required: bool = True) -> list[str] | None:
    if rec.get(field) is None:
        if required:
            raise InputError(source, "missing", line=line, field=field)
        return None
    value = rec[field]
    if hasattr(value, "tolist"):  # numpy arrays from Parquet / datasets
        value = value.tolist()
    if isinstance(value, list):
        value = [decoded(v, source, line, f"{field}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(source, "expected a list of strings", line=line, field=field)
    return value


def get_path(rec: dict, path: str):
    """The value at `path` in `rec`: a key, or a dotted path into nested objects; None if absent.

    >>> get_path({"answer": {"value": "Paris", "aliases": ["Paris"]}}, "answer.value"), get_path({"a": 1}, "a.b")
    ('Paris', None)
    """
    if path in rec:
        return rec[path]
    value = rec
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def derived_id(text: str, taken: Container[str]) -> str:
    """The id of a record that has none: `q` and the first 12 hex digits of the SHA-1 of its text
    (the question, stripped, in Unicode NFC: 'é' saved as e and a combining accent is the same
    question), then `-2`, `-3`, ... for a text already `taken` earlier in the file.

    The same file gets the same ids on every run, a copy in another format or order gets the same
    ones (repeats aside), and answers from several systems to one question share its id.

    >>> derived_id("Who leads Valdoria?", {}), derived_id("Who leads Valdoria?", {"qf5217d3455be": 1})
    ('qf5217d3455be', 'qf5217d3455be-2')
    """
    base = "q" + hashlib.sha1(unicodedata.normalize("NFC", text.strip()).encode("utf-8")).hexdigest()[:12]
    value, n = base, 1
    while value in taken:
        n += 1
        value = f"{base}-{n}"
    return value


def record_id(rec: dict, source, line: int, seen: dict[str, int], *, field: str = "id",
              derive_from: str | None = None) -> str:
    """The record's id (at `field`, a key or dotted path) as a string; a repeated id is an error
    naming both lines. A missing id is an error too, unless `derive_from` (the record's question)
    is given: then the id is `derived_id(derive_from, seen)`."""
    value = decoded(get_path(rec, field), source, line, field)
    if value is None:
        if derive_from is None:
            raise InputError(source, "missing", line=line, field=field)
        value = derived_id(derive_from, seen)
        seen[value] = line
        return value
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputError(source, f"expected a string, got {type(value).__name__}", line=line, field=field)
    value = str(value)
    if not value.strip():
        raise InputError(source, "empty", line=line, field=field)
    if value in seen:
        raise InputError(source, f"duplicate id '{value}' (first on line {seen[value]})", line=line, field=field)
    seen[value] = line
    return value


# ---------------------------------------------------------------------------------------------
# atomic writers


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds."""
    target = Path(path)
    made = make_parents(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{owner_tag()}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs should get the usual mode
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        remove_if_empty(made)
        raise


def make_parents(path: Path) -> list[Path]:
    """Create `path`'s missing parent folders; returns those it created, deepest first, so that a
    failed write can take them away again (`remove_if_empty`) instead of leaving empty folders."""
    missing, parent = [], path.parent
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    path.parent.mkdir(parents=True, exist_ok=True)
    return missing


def remove_if_empty(folders: Iterable[Path]) -> None:
    """Remove each folder, deepest first, while it is empty (another process may have written there)."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def owner_tag() -> str:
    """`PID-HOST` for temporary names, so that a later run can tell the leftovers of a killed process
    from another live run's (`outputs.sweep_leftovers`). HOST: 6 hex digits of a hash of the host
    name and, on Linux, the process-id namespace: two containers may share a host name and a folder,
    but a process id means something only in its own namespace.

    >>> import re; bool(re.fullmatch(r"[0-9]+-[0-9a-f]{6}", owner_tag()))
    True
    """
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:  # not Linux
        namespace = ""
    host = hashlib.sha1(f"{socket.gethostname()} {namespace}".encode()).hexdigest()[:6]
    return f"{os.getpid()}-{host}"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=False) + "\n")


def write_jsonl(path: str | os.PathLike, records: Iterable[dict]) -> int:
    n = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            n += 1
    return n


def read_json(path: str | os.PathLike) -> Any:
    return _text_and_json(existing_file(path))[1]


def read_json_list_lines(path: str | os.PathLike, key: str) -> tuple[Any, list[int] | None]:
    """The file's JSON, and the line on which each item of its top object's list `key` opens
    (None when there is no such list), for errors that name a record by its line."""
    text, data = _text_and_json(existing_file(path))
    listed = isinstance(data, dict) and isinstance(data.get(key), list)
    return data, list(json_item_lines(text, key)) if listed else None


def _text_and_json(p: Path) -> tuple[str, Any]:
    """A JSON file's text and what it holds; a bad file is an InputError naming it."""
    data = p.read_bytes().removeprefix(codecs.BOM_UTF8)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:  # named by its line and its byte in that line, as the JSONL reader names it
        start = data.rfind(b"\n", 0, e.start) + 1
        raise InputError(p, f"not valid UTF-8 (byte {e.start - start})", line=data.count(b"\n", 0, e.start) + 1) from None
    try:
        return text, _loads(text)
    except _BadJSON as e:
        line, field = e.line, e.field
        if e.at is not None:  # a repeated key: the line of its record, or its own
            line, field = _repeat_line(text, e.at)
        elif field is not None and line is None:  # a record of a list (at the top or under "data"): its line
            line, field = _item_line(text, field)
        raise InputError(p, f"{e.what}{e.msg}", line=line, field=field) from None


def _repeat_line(text: str, at: list[tuple[str, int]]) -> tuple[int, str]:
    """For a key repeated in a JSON file (`_first_repeated_key`'s `at`): inside a record of its list (at
    the top or under "data"), the line that record opens on and the key's path inside it, as other
    faults of a record are named; elsewhere the line of the repeated key and its whole path."""
    path, offset = at[-1]
    for depth, record in ((1, r"\[\d+\]"), (2, r"data\[\d+\]")):
        if len(at) > depth + 1 and re.fullmatch(record, at[depth][0]):
            name, offset = at[depth]
            path = path[len(name):].removeprefix(".")
            break
    return text.count("\n", 0, offset) + 1, path


def _item_line(text: str, path: str) -> tuple[int | None, str]:
    """For a path into a JSON file's list of records ('[3].answers', 'data[0].id'), the line its record
    opens on and the path inside that record; any other path as it is, with no line. The text is
    valid JSON but for what the path names, so the list's items can be walked as for record lines."""
    m = re.fullmatch(r"(data)?\[(\d+)\](?:\.(.+)|(\[.+))?", path)
    if m is None:
        return None, path
    key, index, rest = m.group(1), int(m.group(2)), m.group(3) or m.group(4) or "(top level)"
    try:
        for i, line in enumerate(json_item_lines(text, key)):
            if i == index:
                return line, rest
    except (ValueError, IndexError):  # not the layout the path says (a key repeated on the way): no line
        pass
    return None, path


def cpuinfo(field: str) -> str:
    """The first CPU's `field` in /proc/cpuinfo ("model name", "vendor_id", "flags"), else ""."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name.strip().lower() == field:
                    return value.strip()
    except OSError:
        pass
    return ""
