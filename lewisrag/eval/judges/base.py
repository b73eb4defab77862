"""The judge protocol's parts: a verdict, the one hashing rule, and the on-disk verdict cache.

A judge has a `name`, a `fingerprint` (`digest` over its class, model, parameters and prompt
version, stamped on every score it makes) and `judge(pairs: list[(premise, hypothesis)]) ->
list[Verdict]`. A judge that cannot decide returns `Verdict(None, reason)`.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CACHE_DIR = Path("~/.cache/lewisrag/judge")


@dataclass(frozen=True)
class Verdict:
    supported: bool | None  # None: the judge could not decide (malformed reply, timeout, unknown pair)
    reason: str = ""  # why; shown per statement in results.json


def digest(*parts) -> str:
    """sha256 hex of JSON-encoded parts; the one hashing rule for fingerprints and cache keys.

    >>> digest("a", 1) == digest("a", 1) != digest("a", 2)
    True
    """
    blob = json.dumps(parts, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class DiskCache:
    """A sqlite table key -> JSON value in `directory`/`name`.sqlite; safe to share between threads.

    The judge's verdicts are judge.sqlite; other users (the stitched system's LLM answers) name their own."""

    def __init__(self, directory: str | os.PathLike, name: str = "judge"):
        self.path = Path(directory).expanduser() / f"{name}.sqlite"
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, check_same_thread=False)
            self._conn.execute("CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        return self._conn

    def get(self, key: str):
        with self._lock:
            row = self._db().execute("SELECT value FROM cache WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def put(self, key: str, value) -> None:
        with self._lock:
            db = self._db()
            db.execute("INSERT OR REPLACE INTO cache VALUES (?, ?)", (key, json.dumps(value, ensure_ascii=False)))
            db.commit()
