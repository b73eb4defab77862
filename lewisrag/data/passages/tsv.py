"""DPR's passages file (`psgs_w100.tsv`) parsed into Arrow strings a block at a time
(`dpr_tsv_batches`, `read_dpr_tsv`): the header, each line's three fields and no line break inside a
field checked, and the file's first bad line named, whatever its fault (`_first_bad_line`)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from lewisrag.data.io import InputError, existing_file, first_line
from lewisrag.data.passages.schema import _first

DPR_TSV_HEADER = ("id", "text", "title")  # psgs_w100.tsv's first line, tab-separated
# bytes parsed at a time: ~3,000 passages of psgs_w100 a record batch. pyarrow's background reader
# reads up to 32 blocks ahead of the parser, so this bounds a streaming pass's memory: `write_tsv_shards`
# over 2 M passages peaked at 0.8 GB with 16 MB blocks and 0.25 GB with 2 MB ones, in the same time
# (`read_dpr_tsv` alike either way). A line must fit in a block: psgs_w100's are some 600 bytes (a
# longer one pyarrow refuses is named, `_long_line`).
TSV_BLOCK = 1 << 21
DPR_TSV_SCHEMA = pa.schema([(c, pa.string()) for c in DPR_TSV_HEADER])  # every value a string, in the file's order


def read_dpr_tsv(path: str | os.PathLike, limit: int | None = None) -> pa.Table:
    """DPR's passages file (`psgs_w100.tsv`) as an Arrow table of strings: the header line
    `id<TAB>text<TAB>title`, then one passage a line, fields quoted as Python's `csv` writes them
    (`"..."`, a quote inside doubled: DPR reads the file with `csv.reader(delimiter="\\t")`). Every
    value stays a string ("NA" and "null" are text, not missing). `limit`: the first N passages
    (`--max-passages`), parsing stopped at the block that holds the Nth, so a cut of the 13 GB file
    reads only its head; no line past the Nth is refused.

    The whole table is held in memory: about the text's size (21 M passages, some 13 GB), not
    memory-mapped as wiki_dpr's Parquet shards are read; `write_tsv_shards` converts the file into
    such shards, streaming. Checked here (`dpr_tsv_batches`): the header, each line's three fields and
    no line break inside a field (so that row N is line N + 1 in errors), the file's first bad line
    named, whatever its fault; the `PassageTable` made of it checks ids and texts (empty, repeated,
    not UTF-8) as for every table.

    >>> import tempfile; f = Path(tempfile.mkdtemp()) / "psgs.tsv"
    >>> _ = f.write_text('id\\ttext\\ttitle\\n1\\t"He said ""yes"" twice"\\tAaron\\n2\\tNA\\tnull\\n')
    >>> read_dpr_tsv(f).to_pylist()
    [{'id': '1', 'text': 'He said "yes" twice', 'title': 'Aaron'}, {'id': '2', 'text': 'NA', 'title': 'null'}]
    """
    p = existing_file(path)
    return pa.Table.from_batches([batch for batch, _ in dpr_tsv_batches(p, limit)], schema=DPR_TSV_SCHEMA)


def dpr_tsv_batches(path: Path, limit: int | None = None) -> Iterator[tuple[pa.RecordBatch, int]]:
    """DPR's passages file, parsed a block (TSV_BLOCK bytes) at a time: (record batch, bytes of the
    file read so far). The one parser of `read_dpr_tsv` and `write_tsv_shards`, so that both read the
    same rows and refuse the same lines with the same words: the header (line 1), a line without
    three fields, a line break inside a field, a blank line and the header again (files joined with
    theirs), the first of them in the file named by its line: in each batch as it comes
    (`_refuse_line_breaks`), and in the rows of a block refused for a line without three fields
    before that line (`_first_bad_line`); a quote never closed on its line and a line longer than a
    block, which pyarrow refuses naming no line, by their line (`_unclosed_quote`, `_long_line`).
    `limit`: the first N passages only, the last batch cut at the Nth and nothing parsed past its
    block; a line after the Nth is never refused, wherever the block it shares with the Nth ends.
    Memory: pyarrow's read-ahead, up to 32 blocks, whatever the file's size."""
    with open(path, "rb") as f:
        first = f.readline()
    header = first.decode("utf-8-sig", errors="backslashreplace").rstrip("\r\n")
    # quoted as a data row may be: csv.QUOTE_ALL (pandas' to_csv(quoting=...)) quotes the header too
    if tuple(_unquoted(v.encode()).decode() for v in header.split("\t")) != DPR_TSV_HEADER:
        raise InputError(path, f"expected DPR's passages header 'id<TAB>text<TAB>title' (psgs_w100.tsv's), got {header[:80]!r}",
                         line=1)
    if not first.endswith((b"\n", b"\r")) or (limit is not None and limit <= 0):
        return  # no rows to read: the header alone (pyarrow: "Could not skip"), or a limit of none
    bad: list = []

    def refuse(row) -> str:  # pyarrow numbers rows from the file's first line when it parses on one thread
        if limit is not None and row.number - 2 >= limit:  # past the Nth passage, in the block that holds it
            return "skip"
        bad.append(row)
        return "error"  # the block is refused whole: `_first_bad_line` reads it again, up to this row

    names = list(DPR_TSV_HEADER)
    read = pacsv.ReadOptions(skip_rows=1, column_names=names, use_threads=False, block_size=TSV_BLOCK)
    parse = pacsv.ParseOptions(delimiter="\t", quote_char='"', double_quote=True, escape_char=False,
                               newlines_in_values=True, ignore_empty_lines=False, invalid_row_handler=refuse)
    # check_utf8 off: a row that is not UTF-8 is named by PassageTable's check, as a Parquet file's is
    convert = pacsv.ConvertOptions(column_types={c: pa.string() for c in names}, strings_can_be_null=False,
                                   quoted_strings_can_be_null=False, check_utf8=False)
    rows = 0
    # opened here for its position (the progress); read, not mapped, whose pages would stay resident (RowGroups.open)
    with pa.OSFile(str(path)) as source:
        try:
            reader = pacsv.open_csv(source, read_options=read, parse_options=parse, convert_options=convert)
            for batch in reader:
                if limit is not None:
                    batch = batch.slice(0, limit - rows)
                _refuse_line_breaks(batch, rows, path)
                yield batch, source.tell()
                rows += batch.num_rows
                if rows == limit:
                    return
        except pa.ArrowInvalid as e:
            if bad:
                _first_bad_line(path, rows, bad[0].number - 2)
                # a quote never closed (the rest of the file one field): said as of a file over a block
                _unclosed_quote(path, bad[0].number - 2, bad[0].number - 1)
                raise InputError(path, f"expected 3 tab-separated fields (id, text, title), got {bad[0].actual_columns}",
                                 line=bad[0].number) from None
            _unclosed_quote(path, rows)  # "straddling object straddles two block boundaries", of a quote never closed
            _long_line(path, rows)  # or of a line longer than a block
            raise InputError(path, f"cannot read as DPR's passages TSV: {first_line(e)}") from None


LINE_BREAK = "a line break inside a quoted field (DPR's file holds one passage a line)"
BLANK_LINE = "a blank line (DPR's file holds one passage a line)"
HEADER_AGAIN = ("the header line 'id<TAB>text<TAB>title' again, as a passage (files joined with their headers?): "
                "keep the first line's only")
UNCLOSED_QUOTE = "a quote opened here is never closed on this line (DPR's file holds one passage a line)"
_HEADER_IDS = ("id", "\ufeffid")  # a repeated header's first field, with the byte-order mark its file began with


def _refuse_line_breaks(batch: pa.RecordBatch, start: int, path: Path) -> None:
    """An InputError naming the first row of `batch` (rows from `start`, after the header) with a line
    break inside a quoted field (DPR's file holds one passage a line, and past such a row the lines
    errors name would no longer be the file's), that is a blank line, or that is the header again
    (`cat a.tsv b.tsv`: DPR skips such a row, which would be indexed here as a passage)."""
    found = []  # (row, field, message) of each field's first line break, the first blank line, the first header
    for name in DPR_TSV_HEADER:
        column = batch.column(name)  # bytes compared: a value that is not UTF-8 is named later, by PassageTable
        broken = pc.or_(pc.match_substring(column, "\n"), pc.match_substring(column, "\r"))
        if pc.any(broken).as_py():
            found.append((_first(broken), name, LINE_BREAK))
    blank = pc.and_(pc.and_(pc.equal(batch.column("id"), ""), pc.equal(batch.column("text"), "")),
                    pc.equal(batch.column("title"), ""))
    if pc.any(blank).as_py():  # it parses as a row of three empty fields: said so, not "field 'id': empty"
        found.append((_first(blank), "", BLANK_LINE))
    header = pc.and_(pc.and_(pc.is_in(batch.column("id"), value_set=pa.array(_HEADER_IDS, pa.string())),
                             pc.equal(batch.column("text"), "text")), pc.equal(batch.column("title"), "title"))
    if pc.any(header).as_py():
        found.append((_first(header), "", HEADER_AGAIN))
    if found:
        row, name, message = min(found)  # of a row's broken fields the first: "id" < "text" < "title"
        raise InputError(path, message, line=start + row + 2, field=name or None)


# a field as pyarrow reads it: quoted (a quote inside doubled, line breaks kept; what follows the closing
# quote is kept too), or up to the next tab or line end
_TSV_FIELD = re.compile(rb'"[^"]*(?:""[^"]*)*"[^\t\r\n]*|[^\t\r\n]*')
_LINE_END = re.compile(rb"\r\n?|\n")


def _first_bad_line(path: Path, start: int, bad: int) -> None:
    """pyarrow refused the block from row `start` (after the header; every row before it was one line
    of the file, line `start` + 2 its first) at row `bad`, without three fields: an InputError for a
    line break in a field, a blank line or the header again in the rows between, as `_refuse_line_breaks` names them,
    which that row's line number (counted in rows) would be past. Read again from the file's bytes,
    a field at a time, on this error path only."""
    if bad <= start:
        return
    with open(path, "rb") as f:
        f.seek(_line_offset(f, start + 1))  # past the header and the rows before the block
        text = f.read(4 * TSV_BLOCK)  # the block's rows, up to the bad one, lie within it
    at = 0
    for row in range(start, bad):
        fields = []
        while True:
            m = _TSV_FIELD.match(text, at)
            fields.append(m.group())
            at = m.end()
            if text[at:at + 1] != b"\t":
                break
            at += 1
        end = _LINE_END.match(text, at)
        if end is None:  # the end of what was read: not reached in a block of rows as pyarrow parsed them
            return
        for name, value in zip(DPR_TSV_HEADER, fields):
            if value.startswith(b'"') and _LINE_END.search(value):
                raise InputError(path, LINE_BREAK, line=row + 2, field=name)
        if fields == [b""] or (len(fields) == 3 and all(v in (b"", b'""') for v in fields)):  # ("", "", "") to pyarrow
            raise InputError(path, BLANK_LINE, line=row + 2)
        values = [_unquoted(v) for v in fields]
        if len(values) == 3 and values[0] in (b"id", b"\xef\xbb\xbfid") and values[1:] == [b"text", b"title"]:
            raise InputError(path, HEADER_AGAIN, line=row + 2)
        at = end.end()


def _unquoted(value: bytes) -> bytes:
    """A field of `_TSV_FIELD` as pyarrow reads it: a quoted one without its quotes, a doubled quote
    inside one quote, what follows the closing quote kept."""
    m = _QUOTED.fullmatch(value)
    return value if m is None else m[1].replace(b'""', b'"') + m[2]


_QUOTED = re.compile(rb'"((?:[^"]|"")*)"(.*)', re.S)
# a quoted field closed on its own line (a quote inside doubled)
_QUOTED_ON_LINE = re.compile(rb'"(?:[^"\r\n]|"")*"(?!")')  # not the first of a doubled quote, as in _CLOSED_LATER
_UNQUOTED = re.compile(rb"[^\t\r\n]*")
# a quoted field closed on this line or a later one (a doubled quote is one quote inside, not the close)
_CLOSED_LATER = re.compile(rb'"[^"]*(?:""[^"]*)*"(?!")')


def _unclosed_quote(path: Path, start: int, stop: int | None = None) -> None:
    """pyarrow refused the file from row `start` (after the header; every row before it was one line
    of the file) naming no row ("straddling object straddles two block boundaries": a quote opened and
    never closed, past which the rest of the file, over a block, would be one field): an InputError
    naming the first line from there with a field whose opening quote is not closed on that line, and
    the field. With `stop`, pyarrow refused rows [start, stop) for their field count, and of those
    lines one whose quote no later line closes either is named so (the rest of a smaller file read
    as that field: the same words, whatever the file's size). Read again from the file's bytes, a
    line at a time, on these error paths only."""
    with open(path, "rb") as f:
        f.seek(_line_offset(f, start + 1))  # past the header and the rows pyarrow read
        text = f.read(4 * TSV_BLOCK)  # the bad line lies within the blocks pyarrow had read ahead
    at, row = 0, start
    while at < len(text) and (stop is None or row < stop):
        field = 0
        while True:
            if text[at:at + 1] == b'"':
                m = _QUOTED_ON_LINE.match(text, at)
                if m is None and stop is not None and _CLOSED_LATER.match(text, at):  # the count's fault, not the quote's
                    return
                if m is None:
                    raise InputError(path, UNCLOSED_QUOTE, line=row + 2,
                                     field=DPR_TSV_HEADER[field] if field < len(DPR_TSV_HEADER) else None)
                at = m.end()
            at = _UNQUOTED.match(text, at).end()  # to the tab or the line's end
            if text[at:at + 1] != b"\t":
                break
            at, field = at + 1, field + 1
        end = _LINE_END.match(text, at)
        if end is None:  # the end of what was read
            return
        at, row = end.end(), row + 1


LONG_LINE = ("a line of {length:,} bytes, over the {block:,} the reader parses at a time (DPR's lines are some 600): "
             "give such long texts in a .jsonl or Parquet file")


def _long_line(path: Path, start: int) -> None:
    """pyarrow refused the file from row `start` (after the header) naming no row ("straddling object
    straddles two block boundaries") and no quote is left open (`_unclosed_quote`): a line longer than
    a block (TSV_BLOCK), which it cannot always parse, lies in the blocks it read ahead. An InputError
    naming the first such line from there, its length and its longest field. Lines are measured
    streaming, however long; on this error path only."""
    with open(path, "rb") as f:
        origin = _line_offset(f, start + 1)  # past the header and the rows pyarrow read
        f.seek(origin)
        for row, (begin, end) in enumerate(_line_spans(f), start):
            if end - begin > TSV_BLOCK:
                raise InputError(path, LONG_LINE.format(length=end - begin, block=TSV_BLOCK), line=row + 2,
                                 field=_longest_field(path, begin, end))
            if end - origin > 4 * TSV_BLOCK:  # past the blocks pyarrow had read ahead
                return


def _line_spans(f) -> Iterator[tuple[int, int]]:
    """(start, end) byte offsets of each line of the binary file `f` from where it stands, line ends
    (\\n, \\r\\n, or \\r) left out, read a block at a time."""
    at = begin = f.tell()
    while True:
        chunk = _read_whole_ends(f, TSV_BLOCK)
        if not chunk:
            if at > begin:  # the last line, without a line end
                yield begin, at
            return
        for m in _LINE_END.finditer(chunk):
            yield begin, at + m.start()
            begin = at + m.end()
        at += len(chunk)


def _read_whole_ends(f, size: int) -> bytes:
    """`size` bytes of the binary file `f`, and more while they end in \r: a \r\n is never split between two reads."""
    chunk = f.read(size)
    while chunk.endswith(b"\r"):
        more = f.read(1)
        chunk += more
        if not more:
            break
    return chunk


_TAB_OR_QUOTE = re.compile(rb'[\t"]')


def _longest_field(path: Path, begin: int, end: int) -> str | None:
    """The name of the field that holds the most of the line at bytes [begin, end) of `path`, the
    first of those as long (None past the third): a tab inside quotes ends no field, and each quote
    toggles quoting, so a doubled one leaves it as it was."""
    field, field_at, longest, quoted = 0, begin, (0, 0), False
    with open(path, "rb") as f:
        f.seek(begin)
        for at in range(begin, end, TSV_BLOCK):
            for m in _TAB_OR_QUOTE.finditer(f.read(min(TSV_BLOCK, end - at))):
                if m[0] == b'"':
                    quoted = not quoted
                elif not quoted:
                    longest = max(longest, (at + m.start() - field_at, -field))
                    field, field_at = field + 1, at + m.end()
    longest = max(longest, (end - field_at, -field))
    return DPR_TSV_HEADER[-longest[1]] if -longest[1] < len(DPR_TSV_HEADER) else None


def _line_offset(f, lines: int) -> int:
    """The byte offset in the binary file `f` just past its first `lines` line ends (\\n, \\r\\n, or \\r,
    as pyarrow reads them), counted a large chunk at a time."""
    seen, offset = 0, 0
    while seen < lines:
        chunk = _read_whole_ends(f, 1 << 24)
        if not chunk:
            break
        n = chunk.count(b"\n") + chunk.count(b"\r") - chunk.count(b"\r\n")
        if seen + n >= lines:
            for m in _LINE_END.finditer(chunk):
                seen += 1
                if seen == lines:
                    return offset + m.end()
        seen += n
        offset += len(chunk)
    return offset
