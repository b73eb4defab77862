"""DPR's passages TSV: the first bad line of the file is the one named, by its own number, by
`lewisrag shard` and by the in-memory reader alike, whatever its fault and whatever else lies in its
block. A bad field count made the whole block fail, so a quoted line break before it in the same
block was never named, and pyarrow's number for the bad row counted rows, one line short after the
break: `mixed.tsv:30010: expected 3 tab-separated fields`, line 30010 good, the damage on 30000."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_main
from lewisrag.data import passages as P
from lewisrag.data.io import InputError
from lewisrag.data.passages import open_table, read_dpr_tsv, write_tsv_shards

BREAK = "a line break inside a quoted field"
FIELDS = "expected 3 tab-separated fields (id, text, title), got"
BLANK = "a blank line"


def lines_with(n: int, damage: dict[int, str]) -> list[str]:
    """The lines of a TSV of passages 1..n-1, the header first: line k holds passage k - 1; `damage`:
    k -> what line k holds instead (a line break in it makes the later lines of the file one more)."""
    out = ["id\ttext\ttitle"]
    for k in range(2, n + 1):
        out.append(damage.get(len(out) + 1, f"{k - 1}\tpassage {k - 1}\tT{k - 1}"))
    return out


def tsv(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def refusals(path: Path, out: Path) -> list[tuple]:
    """(line, field, message) from each reader: in memory, as a table, and the streaming shard writer."""
    got = []
    for read in (lambda: read_dpr_tsv(path), lambda: open_table(path), lambda: write_tsv_shards(path, out)):
        with pytest.raises(InputError) as e:
            read()
        got.append((e.value.line, e.value.field, e.value.message))
    assert not list(out.glob("*.parquet")) and not list(out.glob(".*"))
    return got


def test_the_reviewers_file_names_the_quoted_break_by_its_line(tmp_path, monkeypatch, capsys):
    lines = lines_with(60_000, {30000: '29999\t"a\nb"\tT'})  # line 30000 opens a field that closes on line 30001
    lines[30009] = "30009\ttwo"  # line 30011 of the file, past the break: two fields
    path = tsv(tmp_path / "mixed.tsv", lines)
    assert path.stat().st_size < P.tsv.TSV_BLOCK  # both in one block
    code, _, err = run_main(monkeypatch, capsys, "shard", "--passages", path, "--out", tmp_path / "mixed_out")
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"{path}:30000: field 'text': {BREAK}" in err
    assert not (tmp_path / "mixed_out").exists()
    assert set(refusals(path, tmp_path / "out")) == {(30000, "text", BREAK + " (DPR's file holds one passage a line)")}


@pytest.mark.parametrize("damage,line,field,says", [
    # a bad field count alone, after a good quoted field: its own line
    ({40: "39\ttwo"}, 40, None, f"{FIELDS} 2"),
    # a bad field count before a quoted break in its block: the count's line (it was the same; still so)
    ({40: "39\ttwo", 60: '59\t"a\nb"\tT'}, 40, None, f"{FIELDS} 2"),
    # a quoted break before a bad field count: the break, not the count a line short
    ({60: '59\t"a\nb"\tT', 80: "78\ta\tb\tc"}, 60, "text", BREAK),
    ({60: '59\tT\t"a\r\nb"', 80: "78\ttwo"}, 60, "title", BREAK),
    # a blank line before a bad field count, and before a quoted break
    ({50: "", 80: "79\ttwo"}, 50, None, BLANK),
    ({50: "", 80: '79\t"a\nb"\tT'}, 50, None, BLANK),
    # a quoted break before a blank line (it was named first whichever came first)
    ({50: '49\t"a\nb"\tT', 80: ""}, 50, "text", BREAK),
    # a bad field count whose row holds a quoted break itself: named by the line it opens on
    ({70: '69\tT\t"a\nb"\tc\td', 90: "88\ttwo"}, 70, None, f"{FIELDS} 5"),
])
@pytest.mark.parametrize("block", [P.tsv.TSV_BLOCK, 512, 96])
def test_the_first_bad_line_is_named_in_one_block_or_across_blocks(tmp_path, monkeypatch, damage, line, field, says, block):
    """At 2 MB the file is one block; at 512 and 96 bytes the faults lie blocks apart, or at a block's edge."""
    monkeypatch.setattr(P.tsv, "TSV_BLOCK", block)
    path = tsv(tmp_path / "p.tsv", lines_with(150, damage))
    for got_line, got_field, message in refusals(path, tmp_path / "out"):
        assert (got_line, got_field) == (line, field) and message.startswith(says), (block, message)


@pytest.mark.parametrize("block", [P.tsv.TSV_BLOCK, 96])
def test_bad_lines_at_the_end_of_the_file(tmp_path, monkeypatch, block):
    """The last block may hold only rows pyarrow leaves out: there is no batch after them to name them with."""
    monkeypatch.setattr(P.tsv, "TSV_BLOCK", block)
    lines = lines_with(40, {}) + ["x\ty"] * 12
    path = tsv(tmp_path / "p.tsv", lines)
    assert set(refusals(path, tmp_path / "out")) == {(41, None, f"{FIELDS} 2")}


def test_a_limit_before_the_damage_reads_as_before(tmp_path):
    path = tsv(tmp_path / "p.tsv", lines_with(100, {}))
    assert read_dpr_tsv(path).num_rows == 99 and len(open_table(path, limit=10)) == 10
    assert write_tsv_shards(path, tmp_path / "out")["passages"] == 99


@pytest.mark.parametrize("block", [P.tsv.TSV_BLOCK, 200])
def test_windows_line_ends_count_as_one(tmp_path, monkeypatch, block):
    """The rows of a refused block are read again from the file's bytes: past "\\r\\n" line ends too."""
    monkeypatch.setattr(P.tsv, "TSV_BLOCK", block)
    lines = lines_with(120, {90: '89\t"x ""y""\r\nz"\tT', 100: "98\ttwo"})
    path = tmp_path / "p.tsv"
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode())
    assert set(refusals(path, tmp_path / "out")) == {(90, "text", BREAK + " (DPR's file holds one passage a line)")}


def test_a_csv_given_for_the_tsv_is_refused_at_its_first_line(tmp_path):
    path = tsv(tmp_path / "p.tsv", ["id\ttext\ttitle"] + [f"{i},passage {i},T" for i in range(1, 200_000)])
    assert set(refusals(path, tmp_path / "out")) == {(2, None, f"{FIELDS} 1")}
