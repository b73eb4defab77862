"""Strict JSON: a text json reads only in part, or in silence (a key given twice, a lone surrogate, an
integer too long for int()), refused naming its line, column or field; the line on which each item of
a list opens; `read_json` and `read_json_list_lines`, the JSON files' readers."""

from __future__ import annotations

import codecs
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lewisrag.data.io.errors import InputError
from lewisrag.data.io.files import existing_file


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
        found = _unencodable(obj)
        if found is not None:
            field, in_key = found
            raise _BadJSON(f"a lone surrogate escape (\\ud800-\\udfff){' in a key' if in_key else ''}: not a character",
                           field=field)
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


def _unencodable(obj: Any) -> tuple[str, bool] | None:
    """The path of the first string UTF-8 cannot encode, '(top level)' for obj itself, and whether it
    is a key: its path is then its object's (the key itself cannot be written in a message either)."""
    stack = [(obj, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, dict):
            for k, v in value.items():
                if not _encodable(k):
                    return path or "(top level)", True
                stack.append((v, f"{path}.{k}" if path else str(k)))
        elif isinstance(value, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(value))
        elif isinstance(value, str) and not _encodable(value):
            return path or "(top level)", False
    return None


def _encodable(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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


def read_json(path: str | os.PathLike) -> Any:
    return _text_and_json(existing_file(path))[1]


def read_json_list_lines(path: str | os.PathLike, key: str) -> tuple[Any, list[int] | None]:
    """The file's JSON, and the line on which each item of its top object's list `key` opens
    (None when there is no such list), for errors that name a record by its line."""
    text, data = _text_and_json(existing_file(path))
    listed = isinstance(data, dict) and isinstance(data.get(key), list)
    return data, list(json_item_lines(text, key)) if listed else None


def _text_and_json(p: Path, records: bool = False) -> tuple[str, Any]:
    """A JSON file's text and what it holds; a bad file is an InputError naming it. A file of `records`
    whose JSON ends after its first line, itself one object, is JSON Lines saved as .json (datasets'
    `to_json` and pandas' `to_json(lines=True)` write it so): the error says to rename it."""
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
        hint = _LINES_HINT if records and e.msg == "Extra data" and _one_object(text.split("\n", 1)[0]) else ""
        raise InputError(p, f"{e.what}{e.msg}{hint}", line=line, field=field) from None


_LINES_HINT = ": the file is JSON Lines (one object per line), a .jsonl file's layout: rename it to .jsonl"


def _one_object(line: str) -> bool:
    try:
        return isinstance(_PLAIN.decode(line), dict)
    except ValueError:  # json.JSONDecodeError, or an integer too long for int()
        return False


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
