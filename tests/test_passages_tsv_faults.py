"""DPR's passages TSV: faults pyarrow reports without a line (a quote never closed, over a block before
the file's end; a header line alone without its line end), a header line repeated as a passage (files
joined with `cat`), a repeated id that would print on two lines; and DPR's QA layout's byte-order mark
after the first line."""

from __future__ import annotations

import json

import pytest

from lewisrag.data.io import InputError
from lewisrag.data.passages import open_table, write_tsv_shards
from lewisrag.data.passages.tsv import TSV_BLOCK
from lewisrag.data.records import read_qa, read_passages

HEADER = b"id\ttext\ttitle\n"
BOM = b"\xef\xbb\xbf"


def read_both(path, tmp_path) -> list[str]:
    """The error of each reader of a passages TSV: `open_table` (in memory) and `write_tsv_shards` (streaming)."""
    said = []
    for read in (lambda: open_table(path), lambda: write_tsv_shards(path, tmp_path / "shards")):
        with pytest.raises(InputError) as e:
            read()
        said.append(str(e.value))
    return said


def rows(first: int, size: int) -> bytes:
    """Good passage lines from id `first`, `size` bytes of them at least."""
    out, i, n = [], first, 0
    while n < size:
        out.append(b"%d\tpassage %d of a few words\tT%d\n" % (i, i, i))
        n, i = n + len(out[-1]), i + 1
    return b"".join(out)


AFTER = 2 * TSV_BLOCK + (1 << 16)  # lines after the quote: pyarrow's "straddling object" past two blocks of them


@pytest.mark.parametrize("field, line", [("id", b'"4\tfour\tT4\n'), ("text", b'4\t"four\tT4\n'),
                                         ("title", b'4\tfour\t"T4\n')])
def test_a_quote_never_closed_before_a_block_of_lines_is_named_by_its_line(field, line, tmp_path):
    """pyarrow reads the rest of the file into the quoted field, and past two blocks (TSV_BLOCK) of it
    says only "straddling object straddles two block boundaries (try to increase block size?)": the
    line the quote opens on and its field are named instead."""
    path = tmp_path / "psgs.tsv"
    path.write_bytes(HEADER + b"1\tone\tT1\n2\ttwo\tT2\n3\tthree\tT3\n" + line + rows(5, AFTER))
    expected = f"{path}:5: field '{field}': a quote opened here is never closed on this line"
    for said in read_both(path, tmp_path):
        assert said.startswith(expected), said
        assert len(said.splitlines()) == 1 and "straddl" not in said


def test_a_quote_never_closed_after_a_block_is_named_by_its_line(tmp_path):
    """The quote opens past the first block: the line counted from the file's start."""
    head = rows(1, TSV_BLOCK + 1000)
    n = head.count(b"\n")
    path = tmp_path / "psgs.tsv"
    path.write_bytes(HEADER + head + b'x\t"open\tT\n' + rows(10 ** 6, AFTER))
    for said in read_both(path, tmp_path):
        assert said.startswith(f"{path}:{n + 2}: field 'text': a quote opened here is never closed"), said


@pytest.mark.parametrize("repeat", [HEADER, BOM + HEADER, b'"id"\t"text"\t"title"\n', b"id\ttext\ttitle\r\n"],
                         ids=["plain", "bom", "quoted", "crlf"])
def test_the_header_line_again_is_refused_by_its_line(repeat, tmp_path):
    """`cat a.tsv b.tsv`: DPR's reader skips a row whose id is "id"; indexed here it would be a passage
    ('id', 'title', 'text'). It is refused, naming its line (a byte-order mark before it, b.tsv's, too)."""
    path = tmp_path / "psgs.tsv"
    path.write_bytes(HEADER + b"1\tone\tT1\n2\ttwo\tT2\n" + repeat + b"3\tthree\tT3\n")
    for said in read_both(path, tmp_path):
        assert said.startswith(f"{path}:4: the header line 'id<TAB>text<TAB>title' again"), said


def test_the_header_line_again_before_a_bad_line_of_its_block_is_named_first(tmp_path):
    """pyarrow refuses the block of a line without three fields; the header line before it, in that
    block, is the file's first fault and is named."""
    path = tmp_path / "psgs.tsv"
    path.write_bytes(HEADER + b"1\tone\tT1\n" + HEADER + b"2\ttwo\n")
    for said in read_both(path, tmp_path):
        assert said.startswith(f"{path}:3: the header line 'id<TAB>text<TAB>title' again"), said


def test_a_line_like_the_header_but_not_it_is_a_passage(tmp_path):
    path = tmp_path / "psgs.tsv"
    path.write_bytes(HEADER + b"id\ttext\tTitle\nid2\ttext\ttitle\n")
    assert [(p.id, p.text, p.title) for p in open_table(path)] == [("id", "text", "Title"), ("id2", "text", "title")]


@pytest.mark.parametrize("content", [b"id\ttext\ttitle", b"id\ttext\ttitle\n", BOM + b"id\ttext\ttitle",
                                     b"id\ttext\ttitle\r\n"])
def test_a_header_alone_holds_no_passages_with_or_without_its_line_end(content, tmp_path):
    """Without a final line end pyarrow said "Could not skip initial 1 rows from CSV file, ...";
    with one, "no passages", as every empty table."""
    path = tmp_path / "psgs.tsv"
    path.write_bytes(content)
    assert read_both(path, tmp_path) == [f"{path}: no passages"] * 2


@pytest.mark.parametrize("repeat", ["a\x0bb", "a\u2028b", "it's"])
def test_a_repeated_id_is_quoted_on_one_line(repeat, tmp_path):
    """An id that holds a line separator (a vertical tab, U+2028; a TSV field cannot hold a line
    break) is shown escaped, as repr shows it: the error stays one line."""
    path = tmp_path / "psgs.tsv"
    path.write_bytes(HEADER + f"{repeat}\tone\tT1\n2\ttwo\tT2\n{repeat}\tthree\tT3\n".encode())
    for said in read_both(path, tmp_path):
        assert said == f"{path}:4: field 'id': duplicate id {repeat!r} (first on line 2)"
        assert len(said.splitlines()) == 1


@pytest.mark.parametrize("reader, record", [(read_qa, {"question": "Who?", "answers": ["Ana"]}),
                                            (read_passages, {"text": "Ana leads."})])
def test_a_repeated_id_with_a_line_break_is_one_line_in_jsonl(reader, record, tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps({"id": "a\nb", **record}) + "\n" for _ in range(2)))
    with pytest.raises(InputError) as e:
        reader(path)
    assert str(e.value) == f"{path}:2: field 'id': duplicate id 'a\\nb' (first on line 1)"


def test_dpr_qa_a_byte_order_mark_after_the_first_line_is_refused(tmp_path):
    """Two .qa.csv files saved with a mark each, then joined: the second's mark would stay in its first
    question, invisible. Refused by its line, as the JSONL reader refuses it; the first line's is read."""
    path = tmp_path / "nq-test.qa.csv"
    path.write_bytes(BOM + b"Who leads?\t['Ana']\n" + BOM + b"Who follows?\t['Bo']\n")
    with pytest.raises(InputError) as e:
        read_qa(path)
    assert str(e.value) == (f"{path}:2: starts with a byte-order mark (U+FEFF), allowed only at the start of the "
                            "file: remove it")
    path.write_bytes(BOM + b"Who leads?\t['Ana']\nWho follows?\t['Bo']\n")
    assert [(q.question, q.answers) for q in read_qa(path)] == [("Who leads?", ["Ana"]), ("Who follows?", ["Bo"])]
