"""The console as a user's shell and scripts meet it: COLUMNS=0 (which some shells and CI runners set) left
every table and line out, exit 0; --json into an ASCII or Latin-1 stdout wrote Python's escapes (\\xfc), which
JSON does not read; a system name from an answers file put terminal escapes into titles and headers; a path
printed on stdout was cut at 80 columns in a pipe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import write_jsonl

from lewisrag.commands import _ui

LEWISRAG = [sys.executable, "-m", "lewisrag.cli"]


def _run(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([*LEWISRAG, *args], capture_output=True, text=True, encoding="utf-8", errors="replace",
                          env={**os.environ, **env})


def test_columns_zero_prints_the_tables():
    r = _run("eval", "bughunt", COLUMNS="0")
    assert r.returncode == 0 and len(r.stdout.splitlines()) > 20, r.stdout


def test_json_into_an_ascii_stdout_is_json(monkeypatch, capsys):
    class Ascii:
        encoding = "ascii"

        def __init__(self):
            self.text = ""

        def write(self, text):
            text.encode("ascii")  # what the stream could not write, it would escape Python's way
            self.text += text

        def flush(self):
            pass

    stream = Ascii()
    monkeypatch.setattr(_ui.out, "_file", stream)  # not the `file` property: its undo would pin this test's stdout
    _ui.print_json({"title": "Zürich 北京 \U0001f600"})
    assert json.loads(stream.text) == {"title": "Zürich 北京 \U0001f600"}


def test_a_system_name_is_escaped_in_titles_and_headers(tmp_path):
    rows = [{"id": f"q{i}", "system": name, "user_input": "Who?", "response": "Ana [1].", "retrieved_contexts": ["Ana."]}
            for i, name in enumerate(["evil\x1b[31mRED\x07", "good\u202eevil"])]
    r = _run("eval", "answers", "--answers", str(write_jsonl(tmp_path / "a.jsonl", rows)), "--out", str(tmp_path / "run"),
             COLUMNS="200")
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\u202e" not in r.stdout and "evil\\x1b[31mRED\\x07" in r.stdout


def test_a_written_path_is_one_line_in_a_pipe(tmp_path):
    rows = [{"id": "q0", "user_input": "Who?", "response": "Ana [1].", "retrieved_contexts": ["Ana."]}]
    out = Path(tmp_path) / ("a_rather_long_folder_name_" * 4) / "run"
    r = _run("eval", "answers", "--answers", str(write_jsonl(tmp_path / "a.jsonl", rows)), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert any(f"{out}/results.json" in line for line in r.stderr.splitlines()), r.stderr  # the "wrote ..." line, whole
