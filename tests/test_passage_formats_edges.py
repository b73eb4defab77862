"""Passage sources at their edges: Parquet text columns of Arrow's view types (string_view,
binary_view), a save_to_disk Arrow file cut at a record-batch boundary, a DPR TSV quote never closed
in a file smaller than a block, and a file of a format passages are not read from."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import run_main
from lewisrag.data.io import InputError
from lewisrag.data.passages import PassageTable, open_passages, open_table, write_tsv_shards
from lewisrag.data.passages import tsv as tsv_module
from lewisrag.data.passages.tsv import UNCLOSED_QUOTE
from lewisrag.data.records import Passage, read_passages


def one_line(monkeypatch, capsys, docs, tmp_path) -> str:
    """The one error line `lewisrag chunk --docs DOCS` prints, exiting 2, nothing written."""
    out = tmp_path / "out" / "chunks.jsonl"
    capsys.readouterr()  # what building the fixture printed (datasets' progress bars)
    code, _, err = run_main(monkeypatch, capsys, "chunk", "--docs", docs, "--out", out)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    assert not out.exists()
    return lines[0]


# ---------------------------------------------------------------------------------------------
# string_view and binary_view columns


def view_table(kind: str, ids=("d1", "d2"), texts=("one two", "three")) -> pa.Table:
    t = pa.string_view() if kind == "string_view" else pa.binary_view()
    encode = (lambda v: v) if kind == "string_view" else (lambda v: v if isinstance(v, bytes) else v.encode())
    return pa.table({"id": pa.array([encode(i) for i in ids], t), "title": pa.array([encode("A"), encode("B")], t),
                     "text": pa.array([encode(x) for x in texts], t)})


@pytest.mark.parametrize("kind", ["string_view", "binary_view"])
def test_view_columns_read_as_text(kind, tmp_path, monkeypatch, capsys):
    path = tmp_path / "sv.parquet"
    pq.write_table(view_table(kind), path)
    assert list(open_passages(path)) == [Passage("d1", "A", "one two"), Passage("d2", "B", "three")]
    table = PassageTable(view_table(kind), "in memory")  # an Arrow table (a hub dataset's) read the same way
    assert table.take([1, 0]) == [Passage("d2", "B", "three"), Passage("d1", "A", "one two")]
    assert table.rows_of(["d2"]) == {"d2": 1} and next(table.arrow_batches()).num_rows == 2
    code, _, err = run_main(monkeypatch, capsys, "chunk", "--docs", path, "--out", tmp_path / "c.jsonl")
    assert code == 0 and (tmp_path / "c.jsonl").read_text().count("\n") == 2, err


@pytest.mark.parametrize("kind, texts, said", [("string_view", ("one", "  "), "field 'text': empty"),
                                               ("binary_view", ("one", "  "), "field 'text': empty"),
                                               ("binary_view", ("one", b"caf\xe9"), "field 'text': not valid UTF-8 (byte 3)")])
def test_view_columns_checked_as_strings_are(kind, texts, said, tmp_path, monkeypatch, capsys):
    path = tmp_path / "bad.parquet"
    pq.write_table(view_table(kind, texts=texts), path)
    assert one_line(monkeypatch, capsys, path, tmp_path) == f"error: {path}:2: {said}"
    pq.write_table(view_table(kind, ids=("d1", "d1")), path)
    with pytest.raises(InputError, match=r":2: field 'id': duplicate id 'd1' \(first on line 1\)"):
        open_passages(path)


# ---------------------------------------------------------------------------------------------
# a save_to_disk Arrow file cut at a record-batch boundary


@pytest.fixture
def saved(tmp_path):
    """A save_to_disk folder of 2,500 passages, its one Arrow file written by datasets in several batches."""
    import datasets

    n = 2500
    folder = tmp_path / "psgs"
    datasets.Dataset.from_dict({"id": [str(i) for i in range(n)], "title": ["T"] * n,
                                "text": [f"passage {i}" for i in range(n)]}).save_to_disk(str(folder))
    return folder


def batch_ends(path) -> list[int]:
    """The byte offset at which each record batch of an Arrow stream file ends."""
    ends = []
    with pa.memory_map(str(path)) as source:
        reader = pa.ipc.open_stream(source)
        while True:
            try:
                reader.read_next_batch()
            except StopIteration:
                return ends
            ends.append(source.tell())


def test_save_to_disk_output_ends_its_streams(saved, tmp_path):
    import datasets

    assert len(open_passages(saved)) == 2500
    datasets.load_from_disk(str(saved)).save_to_disk(str(tmp_path / "three"), num_shards=3)
    assert len(open_passages(tmp_path / "three")) == 2500


def test_an_arrow_file_cut_at_a_batch_boundary_is_refused(saved, tmp_path, monkeypatch, capsys):
    arrow = saved / "data-00000-of-00001.arrow"
    ends = batch_ends(arrow)
    assert len(ends) >= 2  # else no cut at a boundary leaves some rows
    arrow.write_bytes(arrow.read_bytes()[:ends[0]])  # the first batch's rows alone, a whole stream but its end
    assert one_line(monkeypatch, capsys, saved, tmp_path) == (
        f"error: {arrow}: truncated: no Arrow end-of-stream marker (a copy or download that stopped short?)")


# ---------------------------------------------------------------------------------------------
# a DPR TSV quote never closed


def unclosed(rows_after: int) -> bytes:
    """A passages TSV whose line 3 opens a quote in its text that no later line closes."""
    lines = [b"id\ttext\ttitle", b"1\tfoo\tT", b'2\t"bar\tU'] + [b"%d\tpassage %d\tT" % (i, i) for i in range(3, rows_after + 3)]
    return b"\n".join(lines) + b"\n"


@pytest.mark.parametrize("rows_after", [0, 5, 4000])
def test_an_unclosed_quote_is_named_whatever_the_file_size(rows_after, tmp_path, monkeypatch):
    monkeypatch.setattr(tsv_module, "TSV_BLOCK", 1 << 14)  # 4,000 lines after it span several blocks
    path = tmp_path / "psgs.tsv"
    path.write_bytes(unclosed(rows_after))
    for read in (lambda: open_table(path), lambda: write_tsv_shards(path, tmp_path / "shards")):
        with pytest.raises(InputError) as e:
            read()
        assert str(e.value) == f"{path}:3: field 'text': {UNCLOSED_QUOTE}"


def test_a_short_line_without_a_quote_still_counts_its_fields(tmp_path):
    path = tmp_path / "psgs.tsv"
    path.write_bytes(b'id\ttext\ttitle\n1\t"ok"\tT\n2\tbar\n3\t"baz\tU\n')  # a quote unclosed after the short line
    with pytest.raises(InputError) as e:
        open_table(path)
    assert str(e.value) == f"{path}:3: expected 3 tab-separated fields (id, text, title), got 2"


# ---------------------------------------------------------------------------------------------
# formats passages are not read from


@pytest.mark.parametrize("suffix", [".csv", ".arrow"])
def test_an_unknown_format_lists_what_passages_are_read_from(suffix, tmp_path, monkeypatch, capsys):
    path = tmp_path / f"psgs{suffix}"
    path.write_text("id,text\n1,foo\n")
    assert one_line(monkeypatch, capsys, path, tmp_path) == (
        f"error: {path}: unknown format '{suffix}': use .jsonl, .json, .parquet, .tsv (DPR's passages file), a folder "
        "of .parquet shards, a datasets save_to_disk folder or hf:NAME[:CONFIG]:SPLIT")
    with pytest.raises(InputError, match=r"unknown format '\.\w+': use \.jsonl, \.json, \.parquet or hf:"):
        read_passages(path)  # the record reader lists the formats records are read from
    with pytest.raises(InputError, match="file not found"):  # a missing file is named as missing first
        open_passages(tmp_path / "none.csv")
