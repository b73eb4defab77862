"""What the commands print, from data they did not write: a passage's escape sequences reached the terminal
raw (clearing the screen, retitling the window); a table too wide for a pipe's 80 columns cut its headers
and values to "…" (three columns read "recal…"); a refusal that --overwrite lifts named one of the user's
files and hid the others it would delete; `shard`'s progress on a file under 1 MB ended at 0 of 1 MB."""

from __future__ import annotations

import json

from conftest import run_main
from rich.console import Console

from lewisrag.commands import _ui
from test_tsv_shards import psgs_line, rows, write_tsv


def _rendered(table, width=80) -> str:
    console = Console(width=width, force_terminal=False, color_system=None, record=True)
    console.print(table)
    return console.export_text()


def test_table_cells_from_data_show_control_characters_as_escapes():
    text = _rendered(_ui.table("t", ["id", "text"], [["a\x1b[2J", "Evil \x1b]0;pwned\x07 red\x9b"]]))
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text
    assert "\\x1b[2J" in text and "\\x07" in text and "\\x9b" in text
    assert _ui.printable("line one\nline\ttwo") == "line one\nline\ttwo"  # line breaks and tabs are text


def test_a_narrow_table_wraps_its_cells_never_cuts_them():
    columns = ["index", "recall@1", "recall@5", "recall@20"]
    text = _rendered(_ui.table("retrieval", columns, [["runs/some/long/path/index_a", 0.5, 0.6, 0.7]]), width=36)
    assert "…" not in text
    header, body = [[""] * 4 for _ in range(2)]  # each column's cells, its wrapped lines joined
    for line in text.splitlines():
        for sep, parts in (("┃", header), ("│", body)):
            if line.startswith(sep):
                for i, cell in enumerate(line.strip(sep).split(sep)):
                    parts[i] += cell.strip()
    assert header == columns and body == ["runs/some/long/path/index_a", "0.500", "0.600", "0.700"], text


def test_a_refusal_that_overwrite_lifts_counts_every_file_it_would_lose(tmp_path, monkeypatch, capsys):
    tsv = write_tsv(tmp_path / "psgs.tsv", "".join(psgs_line(*r) for r in rows(5)))
    shards = tmp_path / "shards"
    assert run_main(monkeypatch, capsys, "shard", "--passages", tsv, "--out", shards)[0] == 0
    (shards / "a.txt").write_text("mine")
    code, _, err = run_main(monkeypatch, capsys, "shard", "--passages", tsv, "--out", shards)
    assert code == 2 and "holds 'a.txt', which lewisrag did not write there and a rerun would lose; move it away" in err, err
    (shards / "b.txt").write_text("mine too")
    (shards / "notes").mkdir()
    code, _, err = run_main(monkeypatch, capsys, "shard", "--passages", tsv, "--out", shards)
    assert code == 2 and "holds 'a.txt' and 2 more, which lewisrag did not write there and a rerun would lose; move " \
                         "them away or pass --overwrite" in err, err


def test_shard_progress_on_a_small_file_ends_whole(tmp_path, monkeypatch, capsys):
    tsv = write_tsv(tmp_path / "psgs.tsv", "".join(psgs_line(*r) for r in rows(5)))
    seen = []

    class Bars:
        def __init__(self, progress, labels=None):
            pass

        def __call__(self, stage, done, total, unit=""):
            seen.append((done, total))
    monkeypatch.setattr(_ui, "Bars", Bars)
    code, out, err = run_main(monkeypatch, capsys, "shard", "--passages", tsv, "--out", tmp_path / "s", "--json")
    assert code == 0, err
    assert json.loads(out) and seen and seen[-1] == (1, 1), seen


def _closed_pipe_run(args, closed: str) -> tuple[int, bytes]:
    """Run `lewisrag ARGS` with its stdout or stderr a pipe whose reader has already gone (`| head` done
    reading); returns (exit code, what reached the other stream)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    read, write = os.pipe()
    os.close(read)
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, closed: write}
    p = subprocess.Popen([sys.executable, "-m", "lewisrag", *map(str, args)], **streams,
                         cwd=Path(__file__).resolve().parents[1])
    os.close(write)
    out, err = p.communicate(timeout=120)
    return p.returncode, err if closed == "stdout" else out


def test_a_closed_stdout_exits_141_not_a_failed_gates_1():
    """rich exited 1 on a closed pipe, the code of a failed gate: `lewisrag gate ... | head -1` under pipefail
    failed a passing gate."""
    from pathlib import Path

    runs = Path(__file__).parent / "data" / "gate_runs"
    code, err = _closed_pipe_run(["gate", "--baseline", runs / "baseline", "--candidate", runs / "clean"], "stdout")
    assert code == 141 and not err, (code, err)


def test_a_closed_stderr_keeps_the_bad_input_code():
    code, out = _closed_pipe_run(["index", "search", "--index", "/nonexistent/index", "-q", "x"], "stderr")
    assert code == 2 and not out, (code, out)
