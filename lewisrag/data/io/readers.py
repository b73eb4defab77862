"""The record readers: `(line, record)` pairs from `.jsonl`, `.json`, `.parquet` and
`hf:NAME[:CONFIG]:SPLIT` (`iter_records`), and the hub's datasets (`load_hf`)."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lewisrag.data.io.arrow_text import arrow_text_problem, refuse_repeated_columns
from lewisrag.data.io.errors import InputError, first_line, one_line
from lewisrag.data.io.files import existing_file
from lewisrag.data.io.json_text import _BadJSON, _loads, _text_and_json, json_item_lines


def iter_records(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield `(line, record)` from `.jsonl`, `.json`, `.parquet` or `hf:NAME[:CONFIG]:SPLIT`.

    `line` is the 1-based line of a JSONL file, the line on which a JSON list's object opens, or
    the 1-based row of a Parquet file or dataset split.
    """
    spec = str(path)
    if spec.startswith("hf:"):
        yield from _iter_hf(spec)
        return
    refuse_saved_dataset(Path(spec))
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


def refuse_saved_dataset(p: Path) -> None:
    """An InputError for a folder `datasets`' save_to_disk wrote (a Dataset's state.json and
    dataset_info.json, a DatasetDict's dataset_dict.json), saying how to pass it as a file the
    readers take: `existing_file`'s "is a folder" left that to find out, though --passages reads
    such folders (`passages.sources`)."""
    if not p.is_dir():
        return
    beside = str(p.resolve() if p.name in ("", "..") else p)  # the Parquet file goes beside the folder, under its name
    if (p / "dataset_dict.json").is_file():  # one folder per split
        raise InputError(p, "is a `datasets` save_to_disk folder of splits; a file is needed: write the split as "
                         f"Parquet, datasets.load_from_disk({str(p)!r})['SPLIT'].to_parquet({beside + '.SPLIT.parquet'!r}), "
                         "and pass the .parquet")
    if (p / "state.json").is_file() and (p / "dataset_info.json").is_file():
        raise InputError(p, "is a `datasets` save_to_disk folder; a file is needed: write it as Parquet, "
                         f"datasets.load_from_disk({str(p)!r}).to_parquet({beside + '.parquet'!r}), and pass the .parquet")


def _iter_jsonl(p: Path) -> Iterator[tuple[int, dict]]:
    first = True  # no record read yet: a "[" here opens a JSON array saved as .jsonl
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
            array = first and text.lstrip().startswith("[")
            first = False
            try:
                rec = _loads(text)
            except _BadJSON as e:  # an array over several lines: its "[" line is no JSON
                where = "" if e.column is None else f" at column {e.column}"
                raise InputError(p, f"{e.what}{e.msg}{where}{_ARRAY_HINT if array else ''}", line=lineno,
                                 field=e.field) from None
            if not isinstance(rec, dict):
                raise InputError(p, f"expected a JSON object, got {json_type(rec)}{_ARRAY_HINT if array else ''}",
                                 line=lineno)
            yield lineno, rec


_ARRAY_HINT = ": the file is one JSON array, a .json file's layout (JSON Lines holds one object per line): rename it to .json"


def json_type(value: Any) -> str:
    """What JSON calls a parsed value, for "expected ..., got ..." errors.

    >>> json_type(None), json_type([]), json_type(2.5), json_type(True)
    ('null', 'an array', 'a number', 'true')
    """
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return {dict: "an object", list: "an array", str: "a string"}.get(type(value), "a number")


def _iter_json(p: Path) -> Iterator[tuple[int, dict]]:
    """The records of a JSON list, or of {"data": [...]}, each with the line its object opens on (JSON
    Lines saved as .json is refused with the hint to name it .jsonl)."""
    text, data = _text_and_json(p, records=True)
    key = None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data, key = data["data"], "data"  # {"data": [...]} as SQuAD-like files and some exporters write it
    if not isinstance(data, list):
        raise InputError(p, "expected a JSON list of objects")
    for rec, line in zip(data, json_item_lines(text, key)):
        if not isinstance(rec, dict):
            raise InputError(p, f"expected a JSON object, got {json_type(rec)}", line=line)
        yield line, rec


def _iter_parquet(p: Path) -> Iterator[tuple[int, dict]]:
    """The rows of a Parquet file, a row group at a time; a group that cannot be decoded (damaged
    pages, a bad compressed block) is an error naming the file and the group, a column name given
    twice one naming it, and a string that is not UTF-8 one naming the row and the field, as the
    JSONL reader names its line."""
    import pyarrow.parquet as pq  # loads on first use: the CLI imports this module at start-up

    try:
        file = pq.ParquetFile(p, page_checksum_verification=True)  # pages that carry a CRC: checked as read
        groups = file.metadata.num_row_groups
    except Exception as e:  # pyarrow raises several unrelated types for a bad file
        raise InputError(p, f"cannot read Parquet: {one_line(e)}") from None
    refuse_repeated_columns(p, file.schema_arrow.names)  # a record holds each key once
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


# a colon that parts an hf: spec: not one inside [...], datasets' slice of a split (train[:100], train[10%:])
_SPEC_COLON = re.compile(r":(?![^\[]*\])")


def load_hf(spec: str):
    """The `datasets.Dataset` named by `hf:NAME[:CONFIG]:SPLIT` (memory-mapped Arrow in the datasets cache);
    SPLIT may carry datasets' slice, `train[:100]`, which is passed on as it is.

    >>> _SPEC_COLON.split("nq_open:train[:100]"), _SPEC_COLON.split("fever:v1.0:train[10%:20%]")
    (['nq_open', 'train[:100]'], ['fever', 'v1.0', 'train[10%:20%]'])
    """
    parts = _SPEC_COLON.split(spec[3:])
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
