"""`lewisrag shard`: DPR's passages TSV (psgs_w100.tsv) converted, streaming, into numbered Parquet
shards that `open_table` reads lazily, as it reads wiki_dpr's. The shards hold the rows `read_dpr_tsv`
reads, row for row, and every refusal of the in-memory reader comes out of the stream in the same
words, naming the same line of the file, with nothing left behind.

Blocks are made tiny here (`TSV_BLOCK`), so that the bad lines lie blocks after the first."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import run_main
from lewisrag.data import passages as P
from lewisrag.data.io import InputError
from lewisrag.data.outputs import mark
from lewisrag.data.passages import RowGroups, check_numbered_shards, open_passages, open_table, read_dpr_tsv, write_tsv_shards
from test_dpr_formats import HEADER, psgs_line

BLOCK = 512  # bytes a block: some 8 of the rows below
GOOD = 200  # good rows before a bad line: it lies some 25 blocks in


@pytest.fixture(autouse=True)
def tiny_blocks(monkeypatch):
    monkeypatch.setattr(P.tsv, "TSV_BLOCK", BLOCK)
    monkeypatch.setattr(P.shards, "ROW_GROUP_ROWS", 16)


def rows(n: int, start: int = 1) -> list[tuple[str, str, str]]:
    """`n` passages as DPR's file has them, with what its quoting makes hard: doubled quotes, a tab inside
    quotes, values a CSV reader might take for missing, an id with a leading zero, an empty title."""
    odd = ['Aaron ( or ; "Ahärôn") is a prophet', "NA", "a tab\tinside quotes", '"quoted at both ends"', "null"]
    return [(f"{i:03d}" if i % 7 == 0 else str(i), f"passage {i}: {odd[i % len(odd)]} and some words",
             "" if i % 11 == 0 else ("N/A" if i % 13 == 0 else f"Title {i}")) for i in range(start, start + n)]


def write_tsv(path: Path, body: str) -> Path:
    path.write_text(HEADER + body, encoding="utf-8")
    return path


def shard_files(out: Path) -> list[Path]:
    return sorted(out.glob("*.parquet"))


def read_shards(out: Path) -> pa.Table:
    return pa.concat_tables([pq.read_table(f) for f in shard_files(out)])


# --- the rows ----------------------------------------------------------------------------------


def test_shards_read_back_row_for_row_as_the_tsv(tmp_path):
    tsv = write_tsv(tmp_path / "psgs_w100.tsv", "".join(psgs_line(*r) for r in rows(60)))
    record = write_tsv_shards(tsv, tmp_path / "out", rows_per_shard=25)
    files = shard_files(tmp_path / "out")
    assert [f.name for f in files] == record["files"] == [f"passages-0000{k}-of-00003.parquet" for k in range(3)]
    assert record == {"source": str(tsv), "passages": 60, "shards": 3, "rows_per_shard": 25, "files": record["files"]}
    check_numbered_shards(files)  # named as the hub numbers its shards: a folder missing one is refused
    assert read_shards(tmp_path / "out").equals(read_dpr_tsv(tsv))  # schema, order and every value
    table = open_table(tmp_path / "out")
    assert isinstance(table._groups, RowGroups)  # read lazily, a row group at a time
    assert list(table) == list(open_passages(tsv)) and [p.id for p in table][:8] == ["1", "2", "3", "4", "5", "6", "007", "8"]
    assert [p.title for p in table][10] == "" and table[0].text == "passage 1: NA and some words" and table[1].text == "passage 2: a tab\tinside quotes and some words"
    assert [len(pq.read_table(f)) for f in files] == [25, 25, 10]


@pytest.mark.parametrize("per_shard, sizes", [(1, [1] * 12), (4, [4, 4, 4]), (5, [5, 5, 2]), (12, [12]), (100, [12])])
def test_shard_boundaries(tmp_path, per_shard, sizes):
    tsv = write_tsv(tmp_path / "psgs.tsv", "".join(psgs_line(*r) for r in rows(12)))
    write_tsv_shards(tsv, tmp_path / "out", rows_per_shard=per_shard)
    files = shard_files(tmp_path / "out")
    n = len(sizes)
    assert [f.name for f in files] == [f"passages-{k:05d}-of-{n:05d}.parquet" for k in range(n)]
    assert [len(pq.read_table(f)) for f in files] == sizes
    assert read_shards(tmp_path / "out").equals(read_dpr_tsv(tsv))
    assert list(open_passages(tmp_path / "out")) == list(open_passages(tsv))


def test_row_groups_are_bounded_and_shards_are_whole(tmp_path):
    """Blocks of ~8 rows gathered into row groups of at least ROW_GROUP_ROWS (16), a shard's last group fewer."""
    tsv = write_tsv(tmp_path / "psgs.tsv", "".join(psgs_line(*r) for r in rows(150)))
    write_tsv_shards(tsv, tmp_path / "out", rows_per_shard=70)
    groups = [[f.metadata.row_group(i).num_rows for i in range(f.metadata.num_row_groups)]
              for f in map(pq.ParquetFile, shard_files(tmp_path / "out"))]
    assert [sum(g) for g in groups] == [70, 70, 10]
    assert all(16 <= n < 32 for g in groups for n in g[:-1]), groups


def test_max_passages_keeps_the_first_n_and_stops_reading(tmp_path):
    """The `limit` of open_table: the first N rows; a bad line blocks past them is never met."""
    body = "".join(psgs_line(*r) for r in rows(GOOD)) + "201\tbroken\n"
    tsv = write_tsv(tmp_path / "psgs.tsv", body)
    record = write_tsv_shards(tsv, tmp_path / "out", rows_per_shard=5, limit=13)
    assert record["passages"] == 13 and [len(pq.read_table(f)) for f in shard_files(tmp_path / "out")] == [5, 5, 3]
    assert read_shards(tmp_path / "out").equals(read_dpr_tsv(tsv, 13).slice(0, 13))
    assert list(open_passages(tmp_path / "out")) == list(open_passages(tsv, limit=13))
    with pytest.raises(InputError, match=r"psgs.tsv:202: expected 3 tab-separated fields"):
        write_tsv_shards(tsv, tmp_path / "all")


def test_memory_is_a_few_blocks_not_the_file(tmp_path, monkeypatch):
    """The stream holds no more than a row group and pyarrow's read-ahead: never all the rows at once."""
    reports, most = [], [0]
    real = P.shards._Shards.add

    def add(self, part):
        real(self, part)
        most[0] = max(most[0], sum(b.num_rows for b in self._pending))

    monkeypatch.setattr(P.shards._Shards, "add", add)
    tsv = write_tsv(tmp_path / "psgs.tsv", "".join(psgs_line(*r) for r in rows(400)))
    write_tsv_shards(tsv, tmp_path / "out", on_progress=lambda *a: reports.append(a))
    assert 0 < most[0] < 32 and len(shard_files(tmp_path / "out")) == 1
    assert len(reports) > 20 and reports[-1] == ("read", tsv.stat().st_size, tsv.stat().st_size)


# --- refusals: the in-memory reader's, word for word -------------------------------------------

LEAD = "".join(psgs_line(*r) for r in rows(GOOD))  # lines 2..201: the bad line below is line 202
NEXT = str(GOOD + 1)


@pytest.mark.parametrize("body, needle", [
    (LEAD + f'{NEXT}\t"b"\n', ":202: expected 3 tab-separated fields (id, text, title), got 2"),
    (LEAD + f'{NEXT}\t"b"\tT\textra\n', ":202: expected 3 tab-separated fields (id, text, title), got 4"),
    (LEAD + '\t"b"\tT\n', ":202: field 'id': empty"),
    (LEAD + '   \t"b"\tT\n', ":202: field 'id': empty"),
    (LEAD + f'{NEXT}\t""\tT\n', ":202: field 'text': empty"),
    (LEAD + f'{NEXT}\t"   "\tT\n', ":202: field 'text': empty"),
    (LEAD + "\n", ":202: a blank line (DPR's file holds one passage a line)"),
    (LEAD + '5\t"b"\tT\n', ":202: field 'id': duplicate id '5' (first on line 6)"),
    (LEAD + f'{NEXT}\t"two\nlines"\tT\n', ":202: field 'text': a line break inside a quoted field"),
    (LEAD + f'{NEXT}\tb\t"two\r\nlines"\n', ":202: field 'title': a line break inside a quoted field"),
    ("", ": no passages"),
    # several problems: the one the in-memory reader names
    ('1\t""\tT\n' + LEAD[LEAD.index("\n") + 1:] + f'{NEXT}\t"b"\n', ":202: expected 3 tab-separated fields"),  # a bad line first
    ('1\t""\tT\n' + LEAD[LEAD.index("\n") + 1:] + "2\tx\tT\n", ":2: field 'text': empty"),  # the empty text before the repeat
    (LEAD + '5\t"b"\tT\n' + f'{GOOD + 2}\t""\tT\n', ":202: field 'id': duplicate id '5'"),  # the repeat before the empty text
    (LEAD + '5\t""\tT\n', ":202: field 'id': duplicate id '5' (first on line 6)"),  # one row both: as open_table orders them
    (LEAD + f'{NEXT}\t""\tT\n' + '5\t"b"\tT\n', ":202: field 'text': empty"),
])
def test_every_refusal_of_the_in_memory_reader_with_its_line(tmp_path, body, needle):
    tsv = write_tsv(tmp_path / "psgs.tsv", body)
    with pytest.raises(InputError) as memory:
        list(open_passages(tsv))
    out = tmp_path / "out"
    with pytest.raises(InputError) as stream:
        write_tsv_shards(tsv, out, rows_per_shard=7)
    assert str(stream.value) == str(memory.value), (stream.value, memory.value)
    assert str(stream.value).startswith(str(tsv)) and needle in str(stream.value) and "\n" not in str(stream.value)
    assert list(out.iterdir()) == []  # the shards written before the bad line are gone


@pytest.mark.parametrize("body, needle", [
    ("id\ttitle\ttext\n1\tx\ty\n", ":1: expected DPR's passages header 'id<TAB>text<TAB>title' (psgs_w100.tsv's), got 'id\\ttitle\\ttext'"),
    ("1\tx\ty\n", ":1: expected DPR's passages header"),
])
def test_a_wrong_header_is_refused_alike(tmp_path, body, needle):
    tsv = tmp_path / "psgs.tsv"
    tsv.write_text(body, encoding="utf-8")
    with pytest.raises(InputError) as memory:
        open_passages(tsv)
    with pytest.raises(InputError) as stream:
        write_tsv_shards(tsv, tmp_path / "out")
    assert str(stream.value) == str(memory.value) and needle in str(stream.value)


@pytest.mark.parametrize("bad, needle", [(b'\t"caf\xe9"\tT\n', ":202: field 'text': not valid UTF-8 (byte 3)"),
                                         (b'\t"b"\tT\xff\n', ":202: field 'title': not valid UTF-8")])
def test_not_utf8_is_named_alike(tmp_path, bad, needle):
    tsv = tmp_path / "psgs.tsv"
    tsv.write_bytes((HEADER + LEAD + NEXT).encode() + bad)
    with pytest.raises(InputError) as memory:
        list(open_passages(tsv))
    with pytest.raises(InputError) as stream:
        write_tsv_shards(tsv, tmp_path / "out")
    assert str(stream.value) == str(memory.value) and needle in str(stream.value)


def test_a_refusal_past_the_limit_is_not_met_and_one_inside_is(tmp_path):
    tsv = write_tsv(tmp_path / "psgs.tsv", LEAD + '5\t""\tT\n')
    assert write_tsv_shards(tsv, tmp_path / "a", limit=GOOD)["passages"] == GOOD  # the repeat is row 201
    with pytest.raises(InputError, match=r"psgs.tsv:202: field 'id': duplicate id '5'"):
        write_tsv_shards(tsv, tmp_path / "b", limit=GOOD + 1)
    assert list((tmp_path / "b").iterdir()) == []


def test_ids_that_share_a_hash_are_compared_exactly(tmp_path, monkeypatch):
    """Every id hashed alike: the ids are read again from the file, blocks of it, and compared."""
    import numpy as np

    for module in (P.schema, P.table, P.shards):  # each reads its own name
        monkeypatch.setattr(module, "_id_hashes", lambda chunk: np.zeros(len(chunk), np.int64))
    tsv = write_tsv(tmp_path / "psgs.tsv", LEAD)
    assert write_tsv_shards(tsv, tmp_path / "a")["passages"] == GOOD
    tsv = write_tsv(tmp_path / "dup.tsv", LEAD + '150\t"b"\tT\n')
    with pytest.raises(InputError) as memory:
        open_passages(tsv)
    with pytest.raises(InputError) as stream:
        write_tsv_shards(tsv, tmp_path / "b")
    assert str(stream.value) == str(memory.value) == f"{tsv}:202: field 'id': duplicate id '150' (first on line 151)"


def test_the_folder_written_into_must_be_empty(tmp_path):
    tsv = write_tsv(tmp_path / "psgs.tsv", "".join(psgs_line(*r) for r in rows(5)))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep")
    with pytest.raises(InputError, match="is not empty"):
        write_tsv_shards(tsv, tmp_path / "out")
    assert [f.name for f in (tmp_path / "out").iterdir()] == ["mine.txt"]


# --- the command --------------------------------------------------------------------------------


def test_shard_command_end_to_end(tmp_path, monkeypatch, capsys):
    tsv = write_tsv(tmp_path / "psgs_w100.tsv", "".join(psgs_line(*r) for r in rows(60)))
    out = tmp_path / "shards"
    code, stdout, err = run_main(monkeypatch, capsys, "shard", "--passages", tsv, "--out", out, "--rows-per-shard", 25, "--json")
    assert code == 0, err
    record = json.loads(stdout)
    assert record["passages"] == 60 and record["shards"] == 3 and record["out"] == str(out)
    assert sorted(f.name for f in out.iterdir()) == [".lewisrag", *record["files"]]
    assert [f.name for f in tmp_path.iterdir() if f.name.startswith(".")] == []  # no staging folder left
    assert list(open_passages(out)) == list(open_passages(tsv))
    # every --passages reads the folder: a BM25 index of it holds what one of the file holds
    for source, index in ((out, "idx_shards"), (tsv, "idx_tsv")):
        code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", source, "--encoder", "bm25",
                                "--out", tmp_path / index)
        assert code == 0, err
    hits = [json.loads(run_main(monkeypatch, capsys, "index", "search", "--index", tmp_path / index, "--query",
                                "prophet Ahärôn", "--n-docs", 3, "--json")[1]) for index in ("idx_shards", "idx_tsv")]
    assert hits[0] == hits[1] and len(hits[0]) == 3
    # a rerun replaces its own output; --max-passages keeps the head
    code, stdout, err = run_main(monkeypatch, capsys, "shard", "--passages", tsv, "--out", out, "--max-passages", 10, "--json")
    assert code == 0, err
    assert json.loads(stdout)["files"] == ["passages-00000-of-00001.parquet"] and len(open_passages(out)) == 10
    assert sorted(f.name for f in out.iterdir()) == [".lewisrag", "passages-00000-of-00001.parquet"]


def test_shard_command_table_and_default_rows_per_shard(tmp_path, monkeypatch, capsys):
    import typer

    from lewisrag.cli import app

    tsv = write_tsv(tmp_path / "psgs.tsv", "".join(psgs_line(*r) for r in rows(5)))
    code, stdout, err = run_main(monkeypatch, capsys, "shard", "--passages", tsv, "--out", tmp_path / "out")
    assert code == 0 and "Parquet shards" in stdout and "1000000" in stdout, (stdout, err)
    default = {p.name: p.default for p in typer.main.get_command(app).commands["shard"].params}["rows_per_shard"]
    assert default == P.SHARD_ROWS  # written out in the command, so that its module loads without pyarrow


def test_a_bad_tsv_leaves_no_output(tmp_path, monkeypatch, capsys):
    tsv = write_tsv(tmp_path / "psgs.tsv", LEAD + '5\t"b"\tT\n')
    out = tmp_path / "new" / "shards"
    code, stdout, err = run_main(monkeypatch, capsys, "shard", "--passages", tsv, "--out", out, "--rows-per-shard", 7)
    assert code == 2 and not stdout
    assert err.strip() == f"error: {tsv}:202: field 'id': duplicate id '5' (first on line 6)", err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["psgs.tsv"]  # neither the folder nor its staging, nor new/


def test_an_existing_output_is_refused_not_overwritten(tmp_path, monkeypatch, capsys):
    tsv = write_tsv(tmp_path / "psgs.tsv", "".join(psgs_line(*r) for r in rows(5)))
    users = tmp_path / "users"
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    for extra in ((), ("--overwrite",)):  # a folder lewisrag did not make: never, --overwrite or not
        code, _, err = run_main(monkeypatch, capsys, "shard", "--passages", tsv, "--out", users, *extra)
        assert code == 2 and "holds files lewisrag did not write" in err and len(err.strip().splitlines()) == 1, err
    assert [f.name for f in users.iterdir()] == ["notes.txt"] and (users / "notes.txt").read_text() == "mine"
    world = tmp_path / "world"
    mark(world, "world")
    (world / "passages.jsonl").write_text("{}\n")
    code, _, err = run_main(monkeypatch, capsys, "shard", "--passages", tsv, "--out", world)
    assert code == 2 and "holds a lewisrag world, not a passage shards" in err, err
    assert (world / "passages.jsonl").read_text() == "{}\n"
    shards = tmp_path / "shards"
    assert run_main(monkeypatch, capsys, "shard", "--passages", tsv, "--out", shards)[0] == 0
    (shards / "extra.parquet").write_text("a user's file")  # would be read as a shard: a rerun refuses to carry it over
    code, _, err = run_main(monkeypatch, capsys, "shard", "--passages", tsv, "--out", shards)
    assert code == 2 and "'extra.parquet', which lewisrag did not write there" in err, err


@pytest.mark.parametrize("args, needle", [
    (("--passages", "psgs.jsonl"), "psgs.jsonl: field '--passages': expected DPR's passages file, a .tsv"),
    (("--passages", "missing.tsv"), "missing.tsv: file not found"),
    (("--passages", "psgs.tsv", "--rows-per-shard", "0"), "--rows-per-shard"),
    (("--passages", "psgs.tsv", "--max-passages", "0"), "--max-passages"),
])
def test_shard_command_refusals(tmp_path, monkeypatch, capsys, args, needle):
    monkeypatch.chdir(tmp_path)
    write_tsv(tmp_path / "psgs.tsv", "".join(psgs_line(*r) for r in rows(5)))
    (tmp_path / "psgs.jsonl").write_text('{"id": "1", "title": "T", "text": "x"}\n')
    code, stdout, err = run_main(monkeypatch, capsys, "shard", *args, "--out", "out")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1 and not stdout, err
    assert not (tmp_path / "out").exists()
