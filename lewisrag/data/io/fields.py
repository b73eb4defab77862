"""Field checks shared by the record readers and by the readers of the files lewisrag writes itself:
numbers, strings and lists of strings, a value given twice, dotted paths, record ids."""

from __future__ import annotations

import hashlib
import json
import math
import sys
import unicodedata
from collections.abc import Callable, Container, Iterable
from typing import Any

from lewisrag.data.io.errors import InputError


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
    question), then `-2`, `-3`, ... while that id is `taken`: given by a record of the file (the QA
    readers derive ids once every given one is known, so a record's place does not matter), or
    derived for an earlier record of the same text.

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
        raise InputError(source, f"duplicate id {value!r} (first on line {seen[value]})", line=line, field=field)
    seen[value] = line
    return value
