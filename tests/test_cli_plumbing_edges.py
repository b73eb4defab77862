"""The command line's plumbing at its edges: `--json` coloured by rich under FORCE_COLOR (`json.load` failed);
a results.json's escape sequences printed raw by the gate's table; Ctrl-C or SIGTERM exiting 2 where stderr's
reader had gone; a stdout that cannot encode a character crashing the final print (exit 3, the gate's verdict
lost); a count beyond 64 bits a pyarrow traceback; a stdout closed from the start dropping the results with
exit 0; and `lewisrag --help | head -1` exiting 1, a failed gate's code."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_main
from rich.console import Console

from lewisrag import cli
from lewisrag.commands import _ui
from lewisrag.data.io.errors import escaped

ROOT = Path(__file__).resolve().parents[1]
RUNS = Path(__file__).parent / "data" / "gate_runs"


def _lewisrag(args, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "lewisrag", *map(str, args)], cwd=ROOT, **popen)


def _closed_pipe() -> int:
    """The write end of a pipe whose reader has already gone (`| head` done reading)."""
    read, write = os.pipe()
    os.close(read)
    return write


def test_json_is_plain_json_where_rich_would_colour_it():
    env = {**os.environ, "FORCE_COLOR": "1", "TTY_COMPATIBLE": "1"}
    p = _lewisrag(["gate", "--baseline", RUNS / "baseline", "--candidate", RUNS / "clean", "--json"],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert b"\x1b" not in out and json.loads(out)["passed"] is True


def test_json_text_is_riches_uncoloured_text_byte_for_byte(capsys):
    obj = {"out": Path("/a/b"), "x": [1, 2.5, None, True, float("nan")], "name": "Bärn 汉字 \x1b \u202e", "empty": {},
           "nested": {"a": [{"b": []}]}, 5: "an int key"}
    rich_text = io.StringIO()
    Console(file=rich_text, markup=False, emoji=False).print_json(json.dumps(obj, ensure_ascii=False, default=str))
    _ui.print_json(obj)
    assert capsys.readouterr().out == rich_text.getvalue()


def _escaping_runs(tmp_path: Path) -> tuple[Path, Path]:
    """The gate fixtures, their question ids and judge name carrying escape sequences and bidi controls."""
    for name in ("baseline", "hidden_regression"):
        run = json.loads((RUNS / name / "results.json").read_text(encoding="utf-8"))
        for record in run["records"]:
            record["id"] = f"\x1b[2J{record['id']}\u202e\u200e"
        run["judge"]["name"] = "lab\x1b]0;pwned\x07els\u061c"
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(run), encoding="utf-8")
    return tmp_path / "baseline", tmp_path / "hidden_regression"


def test_the_gate_table_and_judge_line_show_results_json_controls_as_escapes(tmp_path, monkeypatch, capsys):
    baseline, candidate = _escaping_runs(tmp_path)
    code, out, _ = run_main(monkeypatch, capsys, "gate", "--baseline", baseline, "--candidate", candidate)
    assert code == 1
    assert not [c for c in "\x1b\x07\u202e\u200e\u061c" if c in out], out
    assert "\\x1b[2Jq" in out and "\\u202e\\u200e" in out  # the failing check's evidence names the questions
    assert "judge: lab\\x1b]0;pwned\\x07els\\u061c " in out


def test_table_cells_escape_the_bidi_controls_as_error_lines_do():
    controls = [chr(c) for c in [*range(0x20), *range(0x7f, 0xa0)] if chr(c) not in "\n\t"]
    bidi = ["\u061c", "\u200e", "\u200f", *map(chr, range(0x202a, 0x202f)), *map(chr, range(0x2066, 0x206a))]
    assert all(_ui.printable(c) != c for c in controls + bidi)  # each escaped, as error lines escape it
    assert [_ui.printable(c) for c in bidi] == [escaped(c) for c in bidi] == [f"\\u{ord(c):04x}" for c in bidi]


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stop_keeps_its_code_where_stderrs_reader_went_away(tmp_path, sig, code):
    """`lewisrag ... 2>&1 | tee log`, tee killed with it: the "interrupted" line's broken pipe made it exit 2."""
    fifo = tmp_path / "docs.jsonl"
    os.mkfifo(fifo)
    closed = _closed_pipe()
    p = _lewisrag(["chunk", "--docs", fifo, "--out", tmp_path / "out.jsonl"], stdout=closed, stderr=closed)
    os.close(closed)
    deadline = time.monotonic() + 120
    while True:  # a writer can open the FIFO once the command has opened it to read: it waits there
        try:
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError:
            assert p.poll() is None and time.monotonic() < deadline, p.returncode
            time.sleep(0.05)
    try:
        p.send_signal(sig)
        assert p.wait(timeout=120) == code
    finally:
        os.close(writer)


def test_a_stdout_that_cannot_encode_a_character_keeps_the_verdict(tmp_path):
    candidate = tmp_path / "cänd"
    candidate.mkdir()
    (candidate / "results.json").write_bytes((RUNS / "hidden_regression" / "results.json").read_bytes())
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    p = _lewisrag(["gate", "--baseline", RUNS / "baseline", "--candidate", candidate],
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 1, err  # a failed gate, not a crash (3)
    assert b"c\\xe4nd" in out and b"FAIL" in out


@pytest.mark.parametrize("flag", ["--max-passages", "--rows-per-shard"])
def test_shard_refuses_a_count_beyond_64_bits(tmp_path, monkeypatch, capsys, flag):
    tsv = tmp_path / "psgs.tsv"
    tsv.write_text("id\ttext\ttitle\n1\thello world\tT1\n", encoding="utf-8")
    code, _, err = run_main(monkeypatch, capsys, "shard", "--passages", tsv, "--out", tmp_path / "shards", flag, 2**63)
    assert code == 2 and err.count("\n") == 1 and flag in err and "Traceback" not in err, err
    assert not (tmp_path / "shards").exists()


def test_a_stdout_closed_from_the_start_is_refused(tmp_path):
    """`lewisrag world ... >&-`: Python has no sys.stdout, and the results were dropped with exit 0."""
    p = _lewisrag(["world", "--out", tmp_path / "w", "--entities", 40, "--json"], stderr=subprocess.PIPE,
                  preexec_fn=lambda: os.close(1))
    _, err = p.communicate(timeout=120)
    assert p.returncode == 2 and err == b"error: standard output is closed; redirect it to a file or /dev/null\n", err
    assert not (tmp_path / "w").exists()


def test_no_stdout_is_neither_writable_nor_silenced(monkeypatch):
    monkeypatch.setattr(sys, "stdout", None)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert cli._writable(None) is False
    cli._silence()  # an AttributeError on None before


@pytest.mark.parametrize("args", [["--help"], [], ["index", "build", "--help"]])
def test_help_into_a_closed_pipe_exits_141(args):
    """typer's help goes through a rich Console of its own, which exits 1 on a broken pipe: a failed gate's code."""
    closed = _closed_pipe()
    p = _lewisrag(args, stdout=closed, stderr=subprocess.PIPE)
    os.close(closed)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 141 and not err, (p.returncode, err)


def test_a_bare_lewisrag_still_prints_its_help_with_code_2():
    p = _lewisrag([], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 2 and b"Usage" in out
