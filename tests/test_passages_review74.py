"""Passages read from DPR's TSV and from Parquet shards, review 74: a line longer than the reader's
block named (not pyarrow's "straddling object"), a quote never closed whose field ends in a doubled
quote named as such, a header quoted as csv.QUOTE_ALL writes it read, a folder of more shards than the
process may open files read, and `lewisrag shard` telling how to gunzip a .tsv.gz."""

from __future__ import annotations

import csv
import gzip
import os
import resource

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import run_main
from lewisrag.data import passages as P
from lewisrag.data.io import InputError
from lewisrag.data.passages import open_table, read_dpr_tsv, write_tsv_shards
from test_passages_tsv_faults import read_both

HEADER = b"id\ttext\ttitle\n"


def good(first: int, count: int) -> bytes:
    return b"".join(b"%d\tpassage %d of a few words\tT%d\n" % (i, i, i) for i in range(first, first + count))


refusals = read_both  # the error of each reader: `open_table` (in memory) and `write_tsv_shards` (streaming)


# --- a line longer than a block ------------------------------------------------------------------


@pytest.mark.parametrize("before", [0, 1, 5, 40, 41])
@pytest.mark.parametrize("field", ["text", "title"])
def test_a_line_longer_than_a_block_is_named(tmp_path, monkeypatch, before, field):
    """Wherever the line falls among the blocks (first, or after some of them), and whichever field makes it long."""
    monkeypatch.setattr(P.tsv, "TSV_BLOCK", 512)
    long = b"w " * 800  # 1,600 bytes: over three blocks, which pyarrow never parses
    line = b"%d\t%s\t%s\n" % (before + 1, *((long, b"T") if field == "text" else (b"short", long)))
    path = tmp_path / "psgs.tsv"
    path.write_bytes(HEADER + good(1, before) + line + good(before + 2, 80))
    said = f"{path}:{before + 2}: field '{field}': a line of {len(line) - 1:,} bytes, over the 512 the reader parses at a time"
    assert all(e.startswith(said) and "straddling" not in e for e in refusals(path, tmp_path)), refusals(path, tmp_path)


def test_a_line_longer_than_the_real_block_is_named(tmp_path):
    """The reader's own block (2 MB), the line starting just before the first block's end."""
    head = good(1, 60_000)
    cut = head[: head.rfind(b"\n", 0, P.tsv.TSV_BLOCK - 1000) + 1]
    n = cut.count(b"\n")
    line = b'%d\t"%s"\tLong\r\n' % (n + 1, b"w " * ((1 << 20) + 60_000))
    path = tmp_path / "psgs.tsv"
    path.write_bytes(HEADER + cut + line + good(n + 2, 10))
    said = f"{path}:{n + 2}: field 'text': a line of {len(line) - 2:,} bytes, over the 2,097,152 the reader parses at a time"
    assert all(e.startswith(said) for e in refusals(path, tmp_path)), refusals(path, tmp_path)


# --- a quote never closed, its field ending in a doubled quote -----------------------------------


@pytest.mark.parametrize("after", [2, 3000])  # a small file (pyarrow counts fields) and one over a block (it "straddles")
def test_a_quote_never_closed_ending_in_a_doubled_quote_is_named(tmp_path, monkeypatch, after):
    monkeypatch.setattr(P.tsv, "TSV_BLOCK", 512)
    path = tmp_path / "psgs.tsv"
    path.write_bytes(HEADER + good(1, 3) + b'4\t"He said ""yes""\tT\n' + good(5, after))
    said = f"{path}:5: field 'text': a quote opened here is never closed on this line"
    assert all(e.startswith(said) for e in refusals(path, tmp_path)), refusals(path, tmp_path)


def test_a_field_ending_in_a_doubled_quote_and_closed_still_reads(tmp_path):
    path = tmp_path / "psgs.tsv"
    path.write_bytes(HEADER + b'1\t"He said ""yes"""\tT\n2\t"a ""b"" c"\t"T ""2"""\n')
    assert read_dpr_tsv(path).to_pylist() == [{"id": "1", "text": 'He said "yes"', "title": "T"},
                                              {"id": "2", "text": 'a "b" c', "title": 'T "2"'}]


# --- a header quoted as csv.QUOTE_ALL writes it ---------------------------------------------------


def test_a_quote_all_header_reads_as_the_plain_one(tmp_path):
    """pandas' to_csv(sep="\\t", quoting=csv.QUOTE_ALL) and csv.writer alike quote the header too."""
    rows = [("id", "text", "title"), ("1", 'He said "hi"', "A"), ("2", "NA", "")]
    files = {}
    for name, quoting in (("plain", csv.QUOTE_MINIMAL), ("all", csv.QUOTE_ALL)):
        files[name] = tmp_path / f"{name}.tsv"
        with open(files[name], "w", newline="", encoding="utf-8") as f:
            csv.writer(f, delimiter="\t", quoting=quoting, lineterminator="\n").writerows(rows)
    assert files["all"].read_bytes().startswith(b'"id"\t"text"\t"title"\n')
    assert read_dpr_tsv(files["all"]).equals(read_dpr_tsv(files["plain"]))
    assert read_dpr_tsv(files["all"]).to_pylist()[0] == {"id": "1", "text": 'He said "hi"', "title": "A"}
    write_tsv_shards(files["all"], tmp_path / "shards")
    assert list(open_table(tmp_path / "shards")) == list(open_table(files["plain"]))


def test_a_header_quoted_but_not_dprs_is_still_refused(tmp_path):
    path = tmp_path / "psgs.tsv"
    path.write_bytes(b'"id"\t"title"\t"text"\n1\ta\tT\n')
    with pytest.raises(InputError, match=r":1: expected DPR's passages header"):
        read_dpr_tsv(path)


# --- a folder of more shards than open files ------------------------------------------------------


def test_more_shards_than_the_process_may_open_files(tmp_path):
    """Each shard's footer is read at open and its file closed; a few are open at a time as rows are
    read, in the same order, and a bad row is named in its shard as before."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("counts open files in /proc/self/fd")
    n = 150
    for folder, last in (("ok", str(n)), ("dup", "1")):  # one passage a shard; in "dup", the last has the first's id
        (tmp_path / folder).mkdir()
        for k in range(n):
            pid = last if k == n - 1 else str(k + 1)
            pq.write_table(pa.table({"id": [pid], "text": [f"passage {k + 1} of a few words"], "title": [f"T{k + 1}"]}),
                           tmp_path / folder / f"passages-{k:05d}-of-{n:05d}.parquet")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 40, hard))  # fewer than the shards
    try:
        table = open_table(tmp_path / "ok")
        assert [p.id for p in table] == [str(i) for i in range(1, n + 1)]
        assert table[n - 1].text == f"passage {n} of a few words" and table[3].title == "T4"
        assert 0 < len(table._groups._handles) <= P.RowGroups.OPEN
        with pytest.raises(InputError) as e:
            open_table(tmp_path / "dup")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert str(e.value).startswith(f"{tmp_path / 'dup' / f'passages-{n - 1:05d}-of-{n:05d}.parquet'}:1: field 'id': "
                                   "duplicate id '1'"), e.value


# --- the commands ---------------------------------------------------------------------------------


def test_shard_tells_how_to_gunzip_a_tsv_gz(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "psgs_w100.tsv.gz").write_bytes(gzip.compress(HEADER + good(1, 3)))
    code, stdout, err = run_main(monkeypatch, capsys, "shard", "--passages", "psgs_w100.tsv.gz", "--out", "out")
    assert code == 2 and not stdout
    assert err.strip() == "error: psgs_w100.tsv.gz: gzip-compressed: decompress it first (gunzip psgs_w100.tsv.gz)", err
    assert not (tmp_path / "out").exists()
    (tmp_path / "psgs.jsonl.gz").write_bytes(gzip.compress(b"{}\n"))  # not a .tsv even once decompressed: said so
    code, _, err = run_main(monkeypatch, capsys, "shard", "--passages", "psgs.jsonl.gz", "--out", "out")
    assert code == 2 and "expected DPR's passages file, a .tsv" in err, err


def test_chunk_help_names_the_tsv_it_reads(tmp_path, monkeypatch, capsys):
    import typer

    from lewisrag.cli import app

    docs = {p.name: p.help for p in typer.main.get_command(app).commands["chunk"].params}["docs"]
    assert ".tsv" in docs, docs
    tsv = tmp_path / "docs.tsv"
    tsv.write_bytes(HEADER + good(1, 2))
    code, _, err = run_main(monkeypatch, capsys, "chunk", "--docs", tsv, "--out", tmp_path / "p.jsonl", "--json")
    assert code == 0 and len((tmp_path / "p.jsonl").read_text().splitlines()) == 2, err
