"""The check every reader of a file makes before it opens one: there, a file, not gzip-compressed."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from lewisrag.data.io.errors import InputError


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
