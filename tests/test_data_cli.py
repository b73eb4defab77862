"""`lewisrag chunk` and `lewisrag world` from the command line: outputs, determinism, and bad input
as one line on stderr with exit code 2, no traceback and no output left behind.

Most cases call `lewisrag.cli.main` in-process (it maps InputError to exit 2 exactly as the console
script does); one case per command runs the installed console script to check the real thing.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_main
from lewisrag.data.world import QUESTION_FILES, TASK_FILES

LEWISRAG = Path(sys.executable).with_name("lewisrag")


run = run_main


def write_docs(path, lines):
    path.write_bytes(b"\n".join(line if isinstance(line, bytes) else line.encode() for line in lines) + b"\n")
    return path


GOOD = json.dumps({"id": "d1", "title": "Retrieval", "text": " ".join(f"w{i}" for i in range(150))})
GOOD_ZH = json.dumps({"id": "d2", "title": "检索", "text": "检索增强生成" * 30}, ensure_ascii=False)


def test_chunk_writes_titled_passages(tmp_path, monkeypatch, capsys):
    docs = write_docs(tmp_path / "docs.jsonl", [GOOD, GOOD_ZH])
    code, out, err = run(monkeypatch, capsys, "chunk", "--docs", docs, "--out", tmp_path / "passages.jsonl")
    assert code == 0 and "passages" in out, err  # result tables go to stdout, as in every command
    rows = [json.loads(line) for line in (tmp_path / "passages.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == ["d1-0", "d1-1", "d2-0", "d2-1"]
    assert [r["title"] for r in rows] == ["Retrieval", "Retrieval", "检索", "检索"]
    assert [len(r["text"]) for r in rows[2:]] == [100, 80]


@pytest.mark.parametrize(
    "lines, where, what",
    [
        ([GOOD, '{"id": "d2", "title": "t", "text": "x"'], ":2:", "malformed JSON"),
        ([GOOD, '{"id": "d2", "title": "t"}'], ":2: field 'text'", "missing"),
        ([GOOD, '{"id": "d2", "title": "t", "text": 5}'], ":2: field 'text'", "expected a string"),
        ([GOOD, GOOD_ZH, b'{"id": "d3", "title": "t", "text": "\xff\xfe"}'], ":3:", "not valid UTF-8"),
        ([GOOD, GOOD_ZH, GOOD], ":3: field 'id'", "duplicate id 'd1'"),
        ([GOOD, '{"id": "d2", "title": "t", "text": "  "}'], ":2: field 'text'", "empty"),
    ],
    ids=["malformed-json", "missing-field", "wrong-type", "non-utf8", "duplicate-id", "empty-text"],
)
def test_chunk_bad_input_exits_2_and_writes_nothing(tmp_path, monkeypatch, capsys, lines, where, what):
    docs = write_docs(tmp_path / "docs.jsonl", lines)
    out = tmp_path / "out" / "passages.jsonl"
    code, _, err = run(monkeypatch, capsys, "chunk", "--docs", docs, "--out", out)
    assert code == 2
    assert err.startswith(f"error: {docs}{where}") and what in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists() and not (out.parent.exists() and any(out.parent.iterdir()))


def test_chunk_refuses_a_non_jsonl_output(tmp_path, monkeypatch, capsys):
    docs = write_docs(tmp_path / "docs.jsonl", [GOOD])
    code, _, err = run(monkeypatch, capsys, "chunk", "--docs", docs, "--out", tmp_path / "p.parquet")
    assert code == 2 and "field '--out'" in err and not (tmp_path / "p.parquet").exists()


def test_chunk_console_script_reports_bad_input(tmp_path):
    docs = write_docs(tmp_path / "docs.jsonl", [GOOD, "not json"])
    result = subprocess.run([LEWISRAG, "chunk", "--docs", docs, "--out", tmp_path / "p.jsonl"], capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.startswith(f"error: {docs}:2: malformed JSON")
    assert "Traceback" not in result.stderr and not (tmp_path / "p.jsonl").exists()


def test_world_twice_gives_identical_files_whatever_the_hash_seed(tmp_path, monkeypatch, capsys):
    for name in ("a", "b"):
        code, out, err = run(monkeypatch, capsys, "world", "--out", tmp_path / name, "--seed", 7, "--entities", 60)
        assert code == 0 and "passages_a.jsonl" in out, err
    env = {**os.environ, "PYTHONHASHSEED": "12345"}  # string hashing must play no part
    subprocess.run([LEWISRAG, "world", "--out", tmp_path / "c", "--seed", "7", "--entities", "60"], check=True, env=env, capture_output=True)
    files = sorted(p.name for p in (tmp_path / "a").iterdir() if p.name != ".lewisrag")
    assert len(files) == 2 + len(QUESTION_FILES) + len(TASK_FILES) + 1 and "world.json" in files  # passages, questions, tasks
    for name in files:
        data = (tmp_path / "a" / name).read_bytes()
        assert data == (tmp_path / "b" / name).read_bytes() == (tmp_path / "c" / name).read_bytes(), name
    meta = json.loads((tmp_path / "a" / "world.json").read_text())
    assert meta["seed"] == 7 and meta["entities"]["total"] == 60


def test_world_refuses_a_file_as_output_directory(tmp_path, monkeypatch, capsys):
    (tmp_path / "taken").write_text("x")
    code, _, err = run(monkeypatch, capsys, "world", "--out", tmp_path / "taken", "--entities", 60)
    assert code == 2 and "not a folder" in err and (tmp_path / "taken").read_text() == "x" and "Traceback" not in err
