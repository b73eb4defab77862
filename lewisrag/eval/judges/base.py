"""The judge protocol's parts: a verdict, the one hashing rule, and the on-disk verdict cache.

A judge has a `name`, a `fingerprint` (`digest` over its class, model, parameters and prompt
version, stamped on every score it makes) and `judge(pairs: list[(premise, hypothesis)]) ->
list[Verdict]`. A judge that cannot decide returns `Verdict(None, reason)`.

A verdict is binary (`supported`: what every metric reads) and, where the judge can tell, also
three-way (`label`: "entailment", "neutral" or "contradiction", NLI's classes and RAGChecker's
checker labels). The two always agree: supported iff the label is entailment; a judge that cannot
tell the three apart (lexical, two-class NLI models, binary human labels) leaves `label` None.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import threading
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from lewisrag.data.io import InputError

DEFAULT_CACHE_DIR = Path("~/.cache/lewisrag/judge")


LABELS = ("entailment", "neutral", "contradiction")  # the three-way labels, in NLI's usual order


@dataclass(frozen=True)
class Verdict:
    """A judge's answer for one (premise, hypothesis) pair.

    >>> Verdict(False, "the evidence says 500", "contradiction")
    Verdict(supported=False, reason='the evidence says 500', label='contradiction')
    >>> Verdict(True, "stated")  # no three-way label: shown as before labels existed
    Verdict(supported=True, reason='stated')
    >>> Verdict(True, "", "neutral")
    Traceback (most recent call last):
    ...
    ValueError: label 'neutral' disagrees with supported=True (supported iff the label is entailment)
    """

    supported: bool | None  # None: the judge could not decide (malformed reply, timeout, unknown pair)
    reason: str = ""  # why; shown per statement in results.json
    label: str | None = None  # one of LABELS where the judge tells three ways; None where it cannot (or did not decide)

    def __post_init__(self):
        if self.label is None:
            return
        if self.label not in LABELS:
            raise ValueError(f"label must be one of {', '.join(LABELS)} or None, got {self.label!r}")
        if self.supported is not (self.label == "entailment"):
            raise ValueError(f"label {self.label!r} disagrees with supported={self.supported!r} "
                             "(supported iff the label is entailment)")

    def __repr__(self) -> str:  # label only when there is one, so two-way verdicts read as they always did
        more = "" if self.label is None else f", label={self.label!r}"
        return f"Verdict(supported={self.supported!r}, reason={self.reason!r}{more})"


# every spelling parse_label reads as a label: whole words only, so that the prompt's own placeholder
# echoed back ("entailment|neutral|contradiction") or "Entailment: no" is no verdict; a model asked in English
# about Chinese text may answer in Chinese (蕴含 or 支持, 中立 or 中性, 矛盾; not 不支持, nor 蕴含（entailment）)
_LABEL_WORDS = {**dict.fromkeys(("entailment", "entailed", "entails", "entail", "蕴含", "蕴涵", "蘊含", "蘊涵", "支持"),
                                "entailment"),
                **dict.fromkeys(("neutral", "中立", "中性"), "neutral"),
                **dict.fromkeys(("contradiction", "contradicted", "contradicts", "contradict", "contradictory", "矛盾"),
                                "contradiction")}


# what may stand around a label word: whitespace (the ideographic space U+3000 too), full stops, "!", quotes,
# ASCII and as Chinese and Japanese text writes them (。, “” ‘’, 「」『』; NFKC makes ．！＂＇｀ ASCII), and
# Markdown's bold or italic stars (**entailment**)
_EDGE_CHARS = r"""\s.!"'`*。“”‘’「」『』"""
_LABEL_EDGE = re.compile(f"^[{_EDGE_CHARS}]+|[{_EDGE_CHARS}]+$")


def parse_label(value) -> str | None:
    """A three-way label from a judge's or a human's spelling, or None if it is none of them: one whole
    label word, English or Chinese, whatever its case, its width (NFKC: "ｅｎｔａｉｌｍｅｎｔ") and the
    whitespace, quotes, "." and "!" or bold stars around it (ASCII or CJK: "entailment。", "“entailment”",
    "「neutral」", "**矛盾**"). Anything else (several labels, more words) is None, never a guess.

    >>> [parse_label(x) for x in ("Entailment", " contradiction.", "NEUTRAL", "entailed", "maybe", 1)]
    ['entailment', 'contradiction', 'neutral', 'entailment', None, None]
    >>> [parse_label(x) for x in ("entailment。", "“entailment”", "「neutral」", "\u3000contradiction！")]
    ['entailment', 'entailment', 'neutral', 'contradiction']
    >>> [parse_label(x) for x in ("蕴含", "支持。", "中性", "**矛盾**", "ｅｎｔａｉｌｍｅｎｔ", "**Neutral**")]
    ['entailment', 'entailment', 'neutral', 'contradiction', 'entailment', 'neutral']
    >>> [parse_label(x) for x in ("entailment|neutral|contradiction", "Entailment: no", "entailments", "not entailed")]
    [None, None, None, None]
    >>> [parse_label(x) for x in ("不支持", "蕴含或中立", "entailment（蕴含）")]
    [None, None, None]
    """
    if not isinstance(value, str):
        return None
    return _LABEL_WORDS.get(_LABEL_EDGE.sub("", unicodedata.normalize("NFKC", value)).lower())


def digest(*parts) -> str:
    """sha256 hex of JSON-encoded parts; the one hashing rule for fingerprints and cache keys.

    >>> digest("a", 1) == digest("a", 1) != digest("a", 2)
    True
    """
    blob = json.dumps(parts, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


BUSY_TIMEOUT_S = 60.0  # seconds a statement waits for another process's write to the same cache before it gives up


class DiskCache:
    """A sqlite table key -> JSON value in `directory`/`name`.sqlite; safe to share between threads,
    and between processes (two commands given one --cache-dir).

    The judge's verdicts are judge.sqlite; other users (the stitched system's LLM answers) name their own.
    The file is in WAL mode, so readers never wait for a writer, and a statement waits up to
    BUSY_TIMEOUT_S for another process's write ("database is locked" came at once); sqlite keeps its
    `name`.sqlite-wal and -shm files beside it while the cache is open (each entry is one committed
    transaction: a process killed mid-write loses that entry, never the file). A cache still locked
    after the wait is an InputError saying so (another process holds it), not one calling the file
    damaged. A file there that is not such a table (or cannot be written) is an InputError naming it,
    not a traceback; a value that is not JSON reads as a miss, asked again and overwritten."""

    def __init__(self, directory: str | os.PathLike, name: str = "judge"):
        self.path = Path(directory).expanduser() / f"{name}.sqlite"
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise InputError(self.path.parent, f"cannot be the cache folder ({e.strerror or e})",
                                 field="--cache-dir") from None
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
            try:  # persistent in the file; a read-only cache, or one on a file system without shared memory, keeps its mode
                conn.execute("PRAGMA journal_mode=WAL")
            except sqlite3.OperationalError as e:
                if _busy(e):
                    raise
            conn.execute("CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self._conn = conn
        return self._conn

    def _run(self, sql: str, args: tuple, commit: bool = False):
        try:
            with self._lock:
                db = self._db()
                row = db.execute(sql, args).fetchone()
                if commit:
                    db.commit()
                return row
        except sqlite3.Error as e:
            if _busy(e):  # contention, not damage: the file is fine, and deleting it would lose every entry
                raise InputError(self.path, f"still locked by another process after {BUSY_TIMEOUT_S:g} s ({e}); let "
                                 "it finish, or give this command a --cache-dir of its own", field="--cache-dir") from None
            # not a database, another table layout, read-only: the user's file
            raise InputError(self.path, f"not a usable lewisrag cache ({e}); delete it or choose another --cache-dir",
                             field="--cache-dir") from None

    def get(self, key: str):
        row = self._run("SELECT value FROM cache WHERE key = ?", (key,))
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except (TypeError, json.JSONDecodeError):
            return None

    def put(self, key: str, value) -> None:
        self._run("INSERT OR REPLACE INTO cache VALUES (?, ?)", (key, json.dumps(value, ensure_ascii=False)), commit=True)


def _busy(e: sqlite3.Error) -> bool:
    """Whether sqlite gave up waiting for another connection's lock (SQLITE_BUSY, SQLITE_LOCKED), not
    finding the file damaged."""
    return getattr(e, "sqlite_errorname", "").startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))
