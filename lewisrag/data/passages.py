"""Passages in an Arrow table: a `datasets` save_to_disk folder, a Parquet file, a folder of Parquet
shards, DPR's passages TSV (`psgs_w100.tsv`) or `hf:NAME[:CONFIG]:SPLIT`.

wiki_dpr's schema is the model: `id` and `text` strings, an optional `title`, and an optional
`embeddings` column (one list of floats per passage, the DPR context encoder's vectors). A
`PassageTable` is a `Sequence[Passage]` over the table itself: a save_to_disk folder and a hub
dataset stay memory-mapped, a Parquet file (or a folder of shards: the hub's own files of
wiki_dpr, `data/psgs_w100/nq/train-*.parquet`, read where they were downloaded) is
decoded a row group at a time as rows are read (`RowGroups`: a few groups in memory, not the
files), a TSV is parsed into Arrow strings once (`read_dpr_tsv`: memory about the text's size) or
converted, streaming, into such a folder of shards (`write_tsv_shards`, `lewisrag shard`: the same
rows and refusals, memory of a few blocks), and rows become `Passage`s only when read,
one batch at a time. The checks the JSON
readers make per record are made here per column, on Arrow batches (pyarrow.compute), with the
same messages: `file:row: field 'name': message`, rows counted from 1.
"""

from __future__ import annotations

import copy
import operator
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from lewisrag.data.io import (InputError, arrow_text_problem, existing_file, expect, first_line, is_string_type, load_hf,
                              one_line, read_json, string_binary_types)
from lewisrag.data.records import Passage, read_passages

COLUMNS = ("id", "title", "text", "embeddings")  # the columns read; others are ignored
TEXT_COLUMNS = ("id", "title", "text")  # binary ones are read as UTF-8 text, as JSONL's bytes are
PASSAGE_SCHEMA = pa.schema([("id", pa.string()), ("title", pa.string()), ("text", pa.string())])  # as indexes store them
BATCH_ROWS = 8192  # rows turned into Passages at a time when iterating
SCAN_ROWS = 1 << 18  # rows checked per pyarrow.compute call while validating
# vectors checked at a time: 100 MB of wiki_dpr's; SCAN_ROWS of them were 0.8 GB, and with the check's
# copies `index cut`'s peak private memory was 2.4 GB against 1.9 (1 M rows, `scripts/bench_cut.py`'s corpus)
VECTOR_SCAN_ROWS = 1 << 15


def is_table_source(path: str | os.PathLike) -> bool:
    """Whether `path` names an Arrow source: `hf:...`, a `.parquet` or `.tsv` file or a folder."""
    spec = str(path)
    return spec.startswith("hf:") or Path(spec).suffix.lower() in (".parquet", ".tsv") or Path(spec).is_dir()


def open_passages(path: str | os.PathLike, limit: int | None = None) -> Sequence[Passage]:
    """Passages as a user gives them: the checked `PassageTable` of a save_to_disk folder, a
    `.parquet` file, a folder of `.parquet` shards, DPR's `.tsv` (`read_dpr_tsv`) or an `hf:` spec;
    the list `records.read_passages` reads from `.jsonl`/`.json`. `limit`: the first N passages only,
    and of a table only those are checked (`reproduce --max-passages` of wiki_dpr's 21 M)."""
    if not is_table_source(path):
        passages = read_passages(path) if limit is None else read_passages(path)[:max(int(limit), 0)]
        if not passages:  # as a table's: a limit of 0 leaves none
            raise InputError(path, "no passages")
        return passages
    return open_table(path, limit)


def passages_at(passages: Sequence[Passage], rows) -> list[Passage]:
    """The passages at `rows` of a list or of a `PassageTable`, a table's read in one `take` (each
    row group decoded once), not one row at a time."""
    if isinstance(passages, PassageTable):
        return passages.take(rows)
    return [passages[r] for r in rows]


def open_table(path: str | os.PathLike, limit: int | None = None) -> PassageTable:
    """The checked `PassageTable` of a save_to_disk folder, a `.parquet` file, a folder of `.parquet`
    shards (read in the order of their names), DPR's `.tsv` or an `hf:` spec; of its first `limit` rows only."""
    spec = str(path)
    if spec.startswith("hf:"):
        table = _dataset_table(load_hf(spec))
    elif Path(spec).suffix.lower() == ".tsv" and not Path(spec).is_dir():
        return PassageTable(read_dpr_tsv(spec, limit), spec, limit=limit, lines_before=1)  # errors name the file's lines
    elif Path(spec).is_dir():
        p = Path(spec)
        # every entry named *.parquet, in any case: a broken link (a hub snapshot's blob not downloaded)
        # or a folder is refused by RowGroups.open, naming it, not left out of the corpus
        try:
            shards = sorted(f for f in p.iterdir() if f.suffix.lower() == ".parquet")
        except OSError as e:  # a folder this user cannot list
            raise InputError(p, f"cannot list the folder: {e.strerror}") from None
        saved = (p / "state.json").is_file() or (p / "dataset_dict.json").is_file()
        if shards and not saved:
            check_numbered_shards(shards)
            table = RowGroups.open([(str(f), f) for f in shards])
        else:
            table, files = _saved_dataset(p)
            return PassageTable(table, spec, limit=limit, files=files)  # errors name the Arrow file and its row
    else:
        table = RowGroups.open([(spec, existing_file(spec))])
    return PassageTable(table, spec, limit=limit)


DPR_TSV_HEADER = ("id", "text", "title")  # psgs_w100.tsv's first line, tab-separated
# bytes parsed at a time: ~3,000 passages of psgs_w100 a record batch. pyarrow's background reader
# reads up to 32 blocks ahead of the parser, so this bounds a streaming pass's memory: `write_tsv_shards`
# over 2 M passages peaked at 0.8 GB with 16 MB blocks and 0.25 GB with 2 MB ones, in the same time
# (`read_dpr_tsv` alike either way). A line must fit in a block: psgs_w100's are some 600 bytes.
TSV_BLOCK = 1 << 21
DPR_TSV_SCHEMA = pa.schema([(c, pa.string()) for c in DPR_TSV_HEADER])  # every value a string, in the file's order


def read_dpr_tsv(path: str | os.PathLike, limit: int | None = None) -> pa.Table:
    """DPR's passages file (`psgs_w100.tsv`) as an Arrow table of strings: the header line
    `id<TAB>text<TAB>title`, then one passage a line, fields quoted as Python's `csv` writes them
    (`"..."`, a quote inside doubled: DPR reads the file with `csv.reader(delimiter="\\t")`). Every
    value stays a string ("NA" and "null" are text, not missing). `limit`: parsing stops after the
    first N passages (`--max-passages`), so a cut of the 13 GB file reads only its head.

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
    batches, rows = [], 0
    for batch, _ in dpr_tsv_batches(p):
        batches.append(batch)
        rows += batch.num_rows
        if limit is not None and rows >= limit:
            break
    return pa.Table.from_batches(batches, schema=DPR_TSV_SCHEMA)


def dpr_tsv_batches(path: Path) -> Iterator[tuple[pa.RecordBatch, int]]:
    """DPR's passages file, parsed a block (TSV_BLOCK bytes) at a time: (record batch, bytes of the
    file read so far). The one parser of `read_dpr_tsv` and `write_tsv_shards`, so that both read the
    same rows and refuse the same lines with the same words: the header (line 1), a line without
    three fields, a line break inside a field and a blank line, the first of them in the file named
    by its line: in each batch as it comes (`_refuse_line_breaks`), and in the rows of a block refused
    for a line without three fields before that line (`_first_bad_line`). Memory: pyarrow's
    read-ahead, up to 32 blocks, whatever the file's size."""
    with open(path, "rb") as f:
        first = f.readline()
    header = first.decode("utf-8-sig", errors="backslashreplace").rstrip("\r\n")
    if tuple(header.split("\t")) != DPR_TSV_HEADER:
        raise InputError(path, f"expected DPR's passages header 'id<TAB>text<TAB>title' (psgs_w100.tsv's), got {header[:80]!r}",
                         line=1)
    bad: list = []

    def refuse(row) -> str:  # pyarrow numbers rows from the file's first line when it parses on one thread
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
                _refuse_line_breaks(batch, rows, path)
                yield batch, source.tell()
                rows += batch.num_rows
        except pa.ArrowInvalid as e:
            if bad:
                _first_bad_line(path, rows, bad[0].number - 2)
                raise InputError(path, f"expected 3 tab-separated fields (id, text, title), got {bad[0].actual_columns}",
                                 line=bad[0].number) from None
            raise InputError(path, f"cannot read as DPR's passages TSV: {first_line(e)}") from None


LINE_BREAK = "a line break inside a quoted field (DPR's file holds one passage a line)"
BLANK_LINE = "a blank line (DPR's file holds one passage a line)"


def _refuse_line_breaks(batch: pa.RecordBatch, start: int, path: Path) -> None:
    """An InputError naming the first row of `batch` (rows from `start`, after the header) with a line
    break inside a quoted field (DPR's file holds one passage a line, and past such a row the lines
    errors name would no longer be the file's) or that is a blank line."""
    found = []  # (row, field) of each field's first line break, and of the first blank line
    for name in DPR_TSV_HEADER:
        column = batch.column(name)  # bytes compared: a value that is not UTF-8 is named later, by PassageTable
        broken = pc.or_(pc.match_substring(column, "\n"), pc.match_substring(column, "\r"))
        if pc.any(broken).as_py():
            found.append((_first(broken), name))
    blank = pc.and_(pc.and_(pc.equal(batch.column("id"), ""), pc.equal(batch.column("text"), "")),
                    pc.equal(batch.column("title"), ""))
    if pc.any(blank).as_py():  # it parses as a row of three empty fields: said so, not "field 'id': empty"
        found.append((_first(blank), ""))
    if found:
        row, name = min(found)  # of a row's broken fields the first: "id" < "text" < "title"
        raise InputError(path, LINE_BREAK if name else BLANK_LINE, line=start + row + 2, field=name or None)


# a field as pyarrow reads it: quoted (a quote inside doubled, line breaks kept; what follows the closing
# quote is kept too), or up to the next tab or line end
_TSV_FIELD = re.compile(rb'"[^"]*(?:""[^"]*)*"[^\t\r\n]*|[^\t\r\n]*')
_LINE_END = re.compile(rb"\r\n?|\n")


def _first_bad_line(path: Path, start: int, bad: int) -> None:
    """pyarrow refused the block from row `start` (after the header; every row before it was one line
    of the file, line `start` + 2 its first) at row `bad`, without three fields: an InputError for a
    line break in a field or a blank line in the rows between, as `_refuse_line_breaks` names them,
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
        at = end.end()


def _line_offset(f, lines: int) -> int:
    """The byte offset in the binary file `f` just past its first `lines` line ends (\\n, \\r\\n, or \\r,
    as pyarrow reads them), counted a large chunk at a time."""
    seen, offset = 0, 0
    while seen < lines:
        chunk = f.read(1 << 24)
        while chunk.endswith(b"\r"):  # a \r\n is not split between two chunks
            more = f.read(1)
            chunk += more
            if not more:
                break
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


SHARD_ROWS = 1_000_000  # passages a shard by default: psgs_w100's 21 M in 22 shards of a few hundred MB
KIND_SHARDS = "passage shards"  # the marker kind of `lewisrag shard`'s folders (lewisrag.data.outputs)
SHARD_STEM = "passages"  # shards are named passages-00000-of-00022.parquet, as the hub numbers train-*
ROW_GROUP_ROWS = 32_768  # rows a row group written: some 20 MB of psgs_w100's text, decoded (RowGroups keeps 2)


def write_tsv_shards(path: str | os.PathLike, out: str | os.PathLike, rows_per_shard: int = SHARD_ROWS,
                     limit: int | None = None, on_progress: Callable[[str, int, int], None] | None = None) -> dict:
    """DPR's passages file converted, streaming, into numbered Parquet shards in the empty folder `out`
    (`passages-00000-of-000NN.parquet`, `rows_per_shard` passages each, in row groups of
    ROW_GROUP_ROWS): the folder `open_table` then reads lazily, a row group at a time, as it reads
    wiki_dpr's shards. Returns what was written: {"source", "passages", "shards", "rows_per_shard",
    "files"}. `on_progress("read", bytes read, the file's bytes)` after each block.

    `read_dpr_tsv` holds the whole file in memory (some 15 GB for psgs_w100's 21 M passages); this
    holds pyarrow's read-ahead (up to 32 blocks of TSV_BLOCK), the row group being written, and 8 bytes
    a passage for the repeated-id check (170 MB at 21 M). The rows and the refusals are those of
    `open_table(path, limit)`, in the same words and naming the same line of the file: one parser
    (`dpr_tsv_batches`), then the per-row checks of `PassageTable._validate` (`row_problems`, and the
    first repeated id, found as it finds it). As there, a bad line (its fields, a line break inside a
    field, a blank line) anywhere in the file is named before any empty, repeated or non-UTF-8 value,
    so the file is parsed to its end even after such a value (nothing more is written then). `limit`:
    the first N passages, as `open_table(path, limit)` reads them (parsing stops at the block that
    holds the Nth).

    On any error the shards written so far are removed (only files this call made); the command
    writes `out` as a staging folder beside its destination, renamed in once this returns. Shards are
    written under temporary names and given their `-of-NNNNN` names at the end, when their number is
    known. Pages carry CRCs, which `RowGroups` checks as it reads, so later damage is named."""
    p = existing_file(path)
    out = Path(out)
    if rows_per_shard < 1:
        raise ValueError(f"rows_per_shard must be at least 1, got {rows_per_shard}")
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):  # the caller's staging folder: never a folder this call would mix shards into
        raise InputError(out, "is not empty: shards are written into a new, empty folder")
    size, shards = p.stat().st_size, _Shards(out, rows_per_shard)
    seen, kept = 0, 0  # rows parsed (whole blocks); the first `limit` of them, checked
    hashes: list[np.ndarray] = []  # of the ids checked: rows [0, kept)
    problem = None  # (row, field order, field, message): the first value row_problems refuses
    try:
        for batch, at in dpr_tsv_batches(p):
            part = batch if limit is None else batch.slice(0, max(int(limit) - seen, 0))
            if problem is None and part.num_rows:
                found = row_problems(pa.Table.from_batches([part]), kept)
                if found:  # nothing more is written; ids up to that row still count: a repeat there is named first
                    problem = min(found)
                    part = part.slice(0, problem[0] - kept + 1)
                hashes.append(_id_hashes(part.column("id")))
                kept += part.num_rows
                if problem is None:
                    shards.add(part)
            seen += batch.num_rows
            if on_progress:
                on_progress("read", min(at, size), size)
            if limit is not None and seen >= limit:
                break
        _refuse_values(p, str(path), kept, hashes, problem)
        files = shards.finish()
    except BaseException:
        shards.discard()
        raise
    return {"source": str(path), "passages": kept, "shards": len(files), "rows_per_shard": rows_per_shard,
            "files": [f.name for f in files]}


class _Shards:
    """Passage rows appended in order, written as shards of `rows_per_shard` rows in row groups of
    ROW_GROUP_ROWS (a shard's last group fewer), under temporary names in `out` until `finish`."""

    def __init__(self, out: Path, rows_per_shard: int):
        self.out, self.rows_per_shard = out, rows_per_shard
        self.made: list[Path] = []  # every file written, by its present name: `discard` removes them
        self._writer: pq.ParquetWriter | None = None
        self._in_shard = 0  # rows of the current shard, written or pending
        self._pending: list[pa.RecordBatch] = []  # the row group being gathered

    def add(self, part: pa.RecordBatch) -> None:
        while part.num_rows:
            take = part.slice(0, self.rows_per_shard - self._in_shard)
            self._pending.append(take)
            self._in_shard += take.num_rows
            part = part.slice(take.num_rows)
            if self._in_shard == self.rows_per_shard:
                self._end_shard()
            elif sum(b.num_rows for b in self._pending) >= ROW_GROUP_ROWS:
                self._write_group()

    def finish(self) -> list[Path]:
        """The shards, renamed `passages-K-of-N.parquet` now that N is known."""
        self._end_shard()
        width = max(5, len(str(len(self.made))))
        for k, partial in enumerate(self.made):
            final = self.out / f"{SHARD_STEM}-{k:0{width}d}-of-{len(self.made):0{width}d}.parquet"
            os.replace(partial, final)
            self.made[k] = final
        return list(self.made)

    def discard(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        for f in self.made:
            f.unlink(missing_ok=True)

    def _write_group(self) -> None:
        rows = sum(b.num_rows for b in self._pending)
        if not rows:
            return
        if self._writer is None:
            self.made.append(self.out / f".{SHARD_STEM}-{len(self.made)}.parquet.partial")
            self._writer = pq.ParquetWriter(self.made[-1], DPR_TSV_SCHEMA, write_page_checksum=True)
        self._writer.write_table(pa.Table.from_batches(self._pending, DPR_TSV_SCHEMA), row_group_size=rows)
        self._pending = []

    def _end_shard(self) -> None:
        self._write_group()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._in_shard = 0


def _refuse_values(p: Path, source: str, rows: int, hashes: list[np.ndarray], problem: tuple | None) -> None:
    """After the whole file parsed: the InputError `PassageTable._validate` would raise over the first
    `rows` passages (`source` the name it gives them, lines counted after the header), from the first
    problem `row_problems` found and the first repeated id. A repeated hash (a repeated id, or two ids
    of one hash) reads the ids again from the file to compare them exactly."""
    if rows == 0:
        raise InputError(source, "no passages")
    every = np.concatenate(hashes)
    hashes.clear()  # one copy of them at a time
    repeated = _repeated_hashes(every)
    del every
    dup = _first_repeat(_tsv_ids(p, rows), repeated) if len(repeated) else None
    problems = [problem] if problem is not None else []
    if dup is not None:
        row, first, value = dup
        problems.append((row, 0, "id", f"duplicate id '{value}' (first on line {first + 2})"))
    if problems:
        row, _, name, message = min(problems)
        raise InputError(source, message, line=row + 2, field=name)


def _tsv_ids(p: Path, rows: int) -> Iterator[tuple[int, pa.Array]]:
    """(first row, ids) of the file's first `rows` passages, a block at a time."""
    start = 0
    for batch, _ in dpr_tsv_batches(p):
        if start >= rows:
            return
        yield start, batch.column("id").slice(0, rows - start)
        start += batch.num_rows


# the hub's (and datasets') train-00003-of-00005, and push_to_hub's with each shard's fingerprint after it
# (train-00003-of-00005-6a9f3c2e1b7d4e5f)
SHARD_NAME = re.compile(r"(?P<stem>.*)-(?P<k>\d+)-of-(?P<n>\d+)(?P<hash>-[0-9a-fA-F]{8,})?$")


def check_numbered_shards(shards: Sequence[Path]) -> None:
    """Refuse a folder of numbered shards (`NAME-K-of-N.parquet`, as the hub and `datasets` name them)
    with one missing: the folder is read as whatever shards it holds, so a download that stopped
    short would train on part of the corpus without a word. Shards of two sets (`train-...` and
    `test-...`: the hub's layout of a dataset's splits side by side) are refused too, as they would
    be read as one corpus. Shards named otherwise are not checked.

    >>> check_numbered_shards([Path("nq/train-00000-of-00003.parquet"), Path("nq/train-00002-of-00003.parquet")])
    Traceback (most recent call last):
    lewisrag.data.io.InputError: nq/train-00001-of-00003.parquet: missing: the folder holds 2 of the 3 shards its files are numbered for (an unfinished download?)

    Names that end in a hash (`push_to_hub`'s, one per shard) name the missing shard's with `*` for its hash:

    >>> check_numbered_shards([Path("nq/train-00000-of-00003-6a9f3c2e1b7d4e5f.parquet"),
    ...                        Path("nq/train-00002-of-00003-0b1c2d3e4f5a6b7c.parquet")])
    Traceback (most recent call last):
    lewisrag.data.io.InputError: nq/train-00001-of-00003-*.parquet: missing: the folder holds 2 of the 3 shards its files are numbered for (an unfinished download?)
    """
    numbered: dict[tuple[str, int, int], Path] = {}
    for f in shards:
        m = SHARD_NAME.match(f.stem)
        if m is not None:
            key = (m["stem"], int(m["n"]), int(m["k"]))
            if key in numbered:  # two uploads' files side by side (their hashes differ): each passage read twice
                raise InputError(f, f"numbered as the same shard as {numbered[key].name}: give a folder of one set's "
                                 "shards, each once")
            numbered[key] = f
    stems = sorted({stem for stem, _, _ in numbered})
    if len(stems) > 1:
        raise InputError(shards[0].parent, f"holds the numbered shards of {len(stems)} sets ({', '.join(stems)}), which "
                         "would be read as one corpus: give a folder of one set's shards")
    for stem, n in sorted({(stem, n) for stem, n, _ in numbered}):
        have = {k: f for (s, m, k), f in numbered.items() if (s, m) == (stem, n)}
        missing = next((k for k in range(n) if k not in have), None)
        if missing is not None:
            like = next(iter(have.values()))
            m = SHARD_NAME.match(like.stem)
            hashed = "-*" if m["hash"] else ""  # its hash cannot be known: the shell's pattern for it
            name = like.with_name(f"{stem}-{missing:0{len(m['k'])}d}-of-{m['n']}{hashed}{like.suffix}")
            raise InputError(name, f"missing: the folder holds {len(have)} of the {n} shards its files are numbered "
                             "for (an unfinished download?)")


class RowGroups:
    """Parquet files read one row group at a time, the last few kept decoded.

    Parquet cannot be memory-mapped as Arrow: its pages are compressed and encoded. Decoding
    the whole file (`pq.read_table`) would hold all of it in RAM — 21 M wiki_dpr passages with
    their vectors are some 80 GB — so a `PassageTable` over Parquet asks for row groups as it
    reads rows: memory stays at a few row groups, and reading the rows in order (encoding,
    copying vectors, writing an index's passage store) decodes each group once. A folder of
    shards is one sequence of row groups, the files' in the order of their names, and every
    shard must have the first's columns.

    Binary passage columns read as strings (`as_text`); a group that cannot be decoded (a damaged
    page, compressed block or page header) is an InputError naming its file and rows. Pages
    that carry a CRC (written with `write_page_checksum=True`) are checked against it as they are
    read (`open` opens the files so), so damage that still decompresses is caught there too.
    """

    CACHED = 2  # decoded row groups kept

    def __init__(self, files: Sequence[tuple[str, pq.ParquetFile]], columns: Sequence[str] | None = None):
        """`files`: (the name errors give it, the file) in reading order."""
        self.files = list(files)
        first = self.files[0][1].schema_arrow
        self.columns = list(columns) if columns is not None else list(first.names)
        self.schema = text_schema(pa.schema([_canonical(first.field(c)) for c in self.columns]))
        self.sizes, self._where, rows = [], [], [0]  # per group: its size, (file, group in it); rows before each file
        for k, (_, f) in enumerate(self.files):
            meta = f.metadata
            self.sizes += [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
            self._where += [(k, i) for i in range(meta.num_row_groups)]
            rows.append(rows[-1] + meta.num_rows)
        self._file_rows = np.asarray(rows)
        self._cache: dict[int, pa.RecordBatch] = {}

    @classmethod
    def open(cls, paths: Sequence[tuple[str, Path]]) -> RowGroups:
        """The row groups of the files `paths` ((the name errors give it, its path) each), opened
        with page CRCs checked. Shards whose passage columns differ from the first's are refused,
        naming the shard.

        Read, not memory-mapped: a mapped file's pages stay in the process's resident set once
        read, so a pass over wiki_dpr's shards would show all 80 GB as resident, which schedulers
        that watch RSS kill (`index cut` over 2 M synthetic rows, `scripts/bench_cut.py`: 9.3 GB
        resident mapped, 7 GB of it the files' pages; 2.7 GB read). Decoding copies every page
        either way; reading a cached file was about 10% slower."""
        files = []
        for name, path in paths:
            try:
                files.append((name, pq.ParquetFile(path, memory_map=False, page_checksum_verification=True)))
            except Exception as e:  # pyarrow raises several unrelated types for a bad file
                raise InputError(name, f"cannot read Parquet: {one_line(e)}") from None
        first = _passage_columns(files[0][1])
        for name, f in files[1:]:
            if _passage_columns(f) != first:
                raise InputError(name, f"its passage columns ({_describe(_passage_columns(f))}) differ from those of "
                                 f"{files[0][0]} ({_describe(first)}): the shards of one folder must be one table")
        return cls(files)

    def select(self, names: Sequence[str]) -> RowGroups:
        return RowGroups(self.files, names)

    def locate(self, row: int) -> tuple[str, int]:
        """(file name, 0-based row in that file) of the 0-based `row` across the files."""
        k = int(np.searchsorted(self._file_rows, row, side="right")) - 1
        return self.files[k][0], row - int(self._file_rows[k])

    def batch(self, i: int) -> pa.RecordBatch:
        if i not in self._cache:
            if len(self._cache) >= self.CACHED:
                self._cache.pop(next(iter(self._cache)))  # the oldest
            table = as_text(self._read(i, self.columns))
            self._cache[i] = table.combine_chunks().to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], self.schema)
        return self._cache[i]

    def column(self, i: int, name: str) -> pa.Array:
        """One column of row group `i`, decoded alone (the duplicate-id check reads ids only)."""
        if i in self._cache:
            return self._cache[i].column(name)
        return as_text(self._read(i, [name])).column(name).combine_chunks()

    def _read(self, i: int, columns: list[str]) -> pa.Table:
        k, group = self._where[i]
        name, f = self.files[k]
        try:
            table = f.read_row_group(group, columns=columns)
            canonical = pa.schema([_canonical(field) for field in table.schema])
            return table if table.schema == canonical else table.cast(canonical)  # one schema for every shard's batches
        except MemoryError:
            raise
        except Exception as e:  # a damaged page: OSError ("Corrupt snappy compressed data."), ArrowInvalid, ...
            start = sum(f.metadata.row_group(g).num_rows for g in range(group))
            raise InputError(name, f"cannot read Parquet: row group {group + 1} of {f.metadata.num_row_groups} (rows "
                             f"{start + 1}-{start + f.metadata.row_group(group).num_rows}): {one_line(e)}") from None


def _passage_columns(f: pq.ParquetFile) -> list[tuple[str, pa.DataType]]:
    """The passage columns (COLUMNS) of a Parquet file and their types as read (`_canonical`),
    binary read as text."""
    schema = text_schema(pa.schema([_canonical(field) for field in f.schema_arrow]))
    return [(c, schema.field(c).type) for c in COLUMNS if c in schema.names]


def _canonical(field: pa.Field) -> pa.Field:
    """`field` as every shard's batches carry it: nullable, and a list's values nullable and named
    "element", as Parquet's nested-type rules name them and pyarrow reads most files (a cast for
    the others). Writers differ in both (older pyarrow named them "item"; some writers mark columns
    required), and shards of one table written by two of them are one table."""
    t = field.type
    values = pa.field("element", t.value_type) if _is_list(t) else None
    if pa.types.is_list(t):
        t = pa.list_(values)
    elif pa.types.is_large_list(t):
        t = pa.large_list(values)
    elif pa.types.is_fixed_size_list(t):
        t = pa.list_(values, t.list_size)
    return pa.field(field.name, t, nullable=True)


def _describe(columns: list[tuple[str, pa.DataType]]) -> str:
    return ", ".join(f"{name}: {t}" for name, t in columns) or "none"


def text_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with its binary and dictionary-encoded passage columns (TEXT_COLUMNS) as strings."""
    for i, f in enumerate(schema):
        if f.name in TEXT_COLUMNS and _text_type(f.type) is not None:
            schema = schema.set(i, f.with_type(_text_type(f.type)))
    return schema


def as_text(table):
    """A table or record batch with its binary passage columns read as strings: the same buffers,
    not checked here (`PassageTable._validate` names a row that is not UTF-8); dictionary-encoded
    ones (a pandas Categorical written to Parquet) decoded to plain strings."""
    for i, name in enumerate(table.column_names):
        target = _text_type(table.column(i).type) if name in TEXT_COLUMNS else None
        if target is not None:
            cast = pc.cast(table.column(i), options=pc.CastOptions(target_type=target, allow_invalid_utf8=True))
            table = table.set_column(i, pa.field(name, target, table.schema.field(i).nullable), cast)
    return table


def _text_type(t: pa.DataType) -> pa.DataType | None:
    """The string type with the layout of binary type `t`, or of the values of a dictionary of strings
    or binaries; None for any other type."""
    if pa.types.is_dictionary(t):
        values = t.value_type
        return values if is_string_type(values) else _text_type(values)
    return next((text for text, raw in string_binary_types() if t == raw), None)


# what datasets' load_from_disk reads from state.json beside `_data_files`: (field, check, expected)
STATE_FIELDS = (
    ("_fingerprint", lambda v: isinstance(v, str), "a string"),
    ("_split", lambda v: v is None or isinstance(v, str), "a split name or null"),
    ("_format_type", lambda v: v is None or isinstance(v, str), "a format name or null"),
    ("_format_kwargs", lambda v: isinstance(v, dict), "an object"),
    ("_format_columns", lambda v: v is None or (isinstance(v, list) and all(isinstance(c, str) for c in v)),
     "a list of column names or null"),
    ("_output_all_columns", lambda v: isinstance(v, bool), "true or false"),
)


def _saved_dataset(p: Path) -> tuple[pa.Table, list[Path]]:
    """The Arrow table of a `datasets` save_to_disk folder, and the Arrow files state.json lists (its
    rows, in order). Its state.json and dataset_info.json are checked first, field by field, so that a
    damaged one is named with the field at fault (datasets itself fails with a KeyError or TypeError
    naming neither); then datasets loads it."""
    if (p / "dataset_dict.json").is_file():
        meta = read_json(p / "dataset_dict.json")
        splits = meta.get("splits") if isinstance(meta, dict) else None
        if not isinstance(splits, list) or not splits:
            raise InputError(p / "dataset_dict.json", "expected a non-empty list of split names (datasets' DatasetDict "
                             "layout)", field="splits")
        for i, split in enumerate(splits):
            expect(isinstance(split, str) and bool(split.strip()), p / "dataset_dict.json", f"splits[{i}]",
                   "a split name (the name of a folder beside it)", split)
        raise InputError(p, f"holds a DatasetDict (splits: {', '.join(splits)}): give one split's folder, e.g. {p / splits[0]}")
    if not (p / "state.json").is_file():
        below = _data_folder_below(p)
        hint = f"; one lies below it, in {below} (a hub download keeps its files under data/): give that folder" if below else ""
        raise InputError(p, "is a folder, but neither a dataset written by datasets' save_to_disk (no state.json) nor a "
                         f"folder of .parquet shards{hint}")
    files, state = _check_state(p, p / "state.json")
    info = _check_info(p / "dataset_info.json")
    import datasets  # loads on first use (~1 s): only save_to_disk folders need it

    try:
        return _dataset_table(datasets.load_from_disk(str(p))), files
    except Exception as e:  # damaged or foreign files: the user's input, named as closely as can be
        _name_what_failed(files, state, info, p)
        raise InputError(p, f"cannot load the saved dataset: {first_line(e)}") from None


def _data_folder_below(folder: Path, depth: int = 4) -> Path | None:
    """The first folder under `folder` (breadth first, at most `depth` levels down, hidden folders
    such as the hub client's .cache/ left out) that holds .parquet shards or a save_to_disk state.json."""
    level = [folder]
    for _ in range(depth):
        nxt = []
        for d in level:
            try:
                entries = sorted(d.iterdir())
            except OSError:
                continue
            if d != folder and any(e.suffix.lower() == ".parquet" or e.name == "state.json" for e in entries):
                return d
            nxt += [e for e in entries if e.is_dir() and not e.name.startswith(".")]
        level = nxt[:1000]  # a bounded look, not a walk of a whole disk
    return None


def _check_state(folder: Path, path: Path) -> tuple[list[Path], dict]:
    """The Arrow files state.json lists, each checked to be a file in `folder`, and state.json, its
    other fields checked."""
    state = read_json(path)
    if not isinstance(state, dict):
        raise InputError(path, f"expected a JSON object (datasets' save_to_disk state), got {type(state).__name__}")
    listed = state.get("_data_files")
    if listed is None:
        raise InputError(path, "missing", field="_data_files")
    expect(isinstance(listed, list) and bool(listed), path, "_data_files", 'a non-empty list of {"filename": ...}', listed)
    files = []
    for i, item in enumerate(listed):
        name = item.get("filename") if isinstance(item, dict) else None
        if not isinstance(item, dict):
            expect(False, path, f"_data_files[{i}]", 'an object {"filename": ...}', item)
        expect(isinstance(name, str) and name not in ("", ".", "..") and Path(name).name == name, path,
               f"_data_files[{i}].filename", "the name of an Arrow file in the folder", name)
        if not (folder / name).is_file():
            raise InputError(path, f"'{name}' is not a file in {folder}", field=f"_data_files[{i}].filename")
        files.append(folder / name)
    for field, ok, what in STATE_FIELDS:
        if field not in state:
            raise InputError(path, "missing", field=field)
        expect(ok(state[field]), path, field, what, state[field])
    return files, state


def _check_info(path: Path) -> dict:
    """dataset_info.json, each field read by datasets on its own so that the one it refuses is named."""
    if not path.is_file():
        raise InputError(path, "file not found (datasets' save_to_disk writes it beside state.json)")
    info = read_json(path)
    if not isinstance(info, dict):
        raise InputError(path, f"expected a JSON object (datasets' DatasetInfo), got {type(info).__name__}")
    features = info.get("features")
    expect(features is None or isinstance(features, dict), path, "features", "an object of column features or null", features)
    import datasets  # loads on first use (~1 s): only save_to_disk folders need it

    try:
        datasets.DatasetInfo.from_dict(info)
    except Exception as whole:
        for field, value in info.items():
            try:
                datasets.DatasetInfo.from_dict({field: value})
            except Exception as e:
                raise InputError(path, f"datasets cannot read it: {first_line(e)}", field=field) from None
        raise InputError(path, f"datasets cannot read it: {first_line(whole)}") from None
    return info


def _name_what_failed(files: list[Path], state: dict, info: dict, folder: Path) -> None:
    """After datasets failed to load a checked folder: an InputError naming the Arrow file that
    cannot be read, dataset_info.json's features when they do not describe the files' columns, or
    the format in state.json that datasets refuses; nothing if none of them is the cause."""
    import datasets  # loads on first use: as in _saved_dataset

    schema = None
    for f in files:
        try:
            with pa.memory_map(str(f)) as source:
                table = pa.ipc.open_stream(source).read_all()
        except Exception as e:  # datasets writes Arrow streams; anything else is damaged or foreign
            raise InputError(f, f"cannot read the Arrow file: {one_line(e)}") from None
        if schema is not None and table.schema != schema:
            raise InputError(f, f"its columns differ from those of {files[0].name}")
        schema = table.schema
    if schema is None:
        return
    if info.get("features") is not None:
        try:
            listed = datasets.Features.from_dict(info["features"])
            stored = datasets.Features.from_arrow_schema(schema)
            same = listed.reorder_fields_as(stored).type == stored.type
            why = "" if same else f"{listed} (here) against {stored} (the Arrow files)"
        except Exception as e:
            why = first_line(e)
        if why:
            raise InputError(folder / "dataset_info.json", f"does not describe the Arrow files' columns: {why}", field="features")
    empty, settings = datasets.Dataset(schema.empty_table()), {}
    for field, key in (("_format_type", "type"), ("_format_columns", "columns"), ("_output_all_columns", "output_all_columns"),
                       ("_format_kwargs", None)):  # one more at a time, as load_from_disk passes them all
        settings = {**settings, **(state[field] if key is None else {key: state[field]})}
        try:
            empty.with_format(**settings)
        except Exception as e:
            raise InputError(folder / "state.json", f"datasets refuses it: {first_line(e)}", field=field) from None


def _dataset_table(ds) -> pa.Table:
    """The Arrow table behind a `datasets.Dataset`, memory-mapped where the dataset is."""
    if getattr(ds, "_indices", None) is None:
        return ds.data.table  # the memory-mapped table itself
    return ds.with_format("arrow")[:]  # rows picked or reordered by an indices mapping


class PassageTable(Sequence[Passage]):
    """Passages in an Arrow table, read batch by batch; `source` names them in errors.

    The table is checked when made (see `_validate`); `embeddings()`, `vector_dim()` and
    `embedding_dim()` read the optional `embeddings` column, checked as it is decoded.
    """

    def __init__(self, table: pa.Table, source: str | os.PathLike, checked: bool = False, limit: int | None = None,
                 lines_before: int = 0, files: Sequence[Path] | None = None):
        """`checked`: the table was validated when it was written (an index's passage store), so
        opening it costs no pass over the rows. `limit`: the table's first N rows, the only ones
        checked (as `head`, which checks nothing). `lines_before`: the file's lines before its first
        row (a TSV's header), so that errors name the line a user would open. `files`: the Arrow
        files the table's rows lie in, in order (a save_to_disk folder's), so that errors name the
        file that holds a row and its row there, as they name a Parquet shard's (of one file, the
        folder and the row)."""
        self.source = str(source)
        self._lines_before = lines_before
        self._files = list(files or [])
        self._file_starts: np.ndarray | None = None  # row where each of `files` starts (`_in_file`), read when needed
        names = [c for c in COLUMNS if c in table.schema.names]
        self.schema = text_schema(table.schema)
        if isinstance(table, RowGroups):  # a Parquet file: row groups decoded as they are read
            self._groups = table.select(names)
            sizes = self._groups.sizes
        else:  # an Arrow table: its record batches, in memory or memory-mapped
            self._groups = [b for b in as_text(table.select(names)).to_batches() if b.num_rows]
            sizes = [b.num_rows for b in self._groups]
        self._n_groups = len(sizes)
        self._starts = np.cumsum([0] + sizes)  # row where each batch starts
        self._n = int(self._starts[-1]) if limit is None else min(int(self._starts[-1]), max(int(limit), 0))
        self._dim: int | None = None  # the stored vectors' length (`vector_dim`)
        self._checked = 0  # stored vectors of rows [0, _checked) have been checked (`embeddings`)
        self._names = names  # the columns read
        self._text = [c for c in TEXT_COLUMNS if c in names]  # what a Passage is made of
        self._views: dict[tuple, RowGroups] = {}  # Parquet row groups by the columns read (`_view`)
        if not checked:
            self._validate()

    # --- the Sequence ------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(self._n)
            if step == 1:
                return self._rows(start, max(start, stop))
            return self.take(range(start, stop, step))
        i = operator.index(key)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"passage row {key} out of range for {self._n} passages")
        return self._rows(i, i + 1)[0]

    def __iter__(self) -> Iterator[Passage]:
        for batch in self.batches():
            yield from batch

    def __eq__(self, other) -> bool:
        """Equal to any sequence of the same passages in the same order (a list read from JSONL too)."""
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None

    def __repr__(self) -> str:
        return f"PassageTable({self.source!r}, {self._n} passages{', with embeddings' if self.has_embeddings else ''})"

    def batches(self, size: int | None = None) -> Iterator[list[Passage]]:
        """The passages in row order, `size` (default BATCH_ROWS) at a time."""
        size = size or BATCH_ROWS
        for start in range(0, self._n, size):
            yield self._rows(start, min(self._n, start + size))

    def head(self, n: int) -> PassageTable:
        """The first `n` passages (all, if fewer) as a table over the same Arrow data: no copy and
        no Python object per row, where a slice (`table[:n]`) is a list of Passages."""
        out = copy.copy(self)
        out._n = min(max(int(n), 0), self._n)
        return out

    def take(self, rows) -> list[Passage]:
        """The passages at `rows` (any order, repeats and negative rows allowed, as indexing takes
        them), read in one pass: each batch (of Parquet, each row group) that holds some is decoded
        once, where reading them one by one would decode a row group for almost every row of a
        random batch (`train dpr`'s steps over a cut corpus). Each row is checked as `_rows` checks it."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if not len(rows):
            return []
        at = np.where(rows < 0, rows + self._n, rows)
        outside = (at < 0) | (at >= self._n)
        if outside.any():
            raise IndexError(f"passage row {int(rows[outside][0])} out of range for {self._n} passages")
        unique, inverse = np.unique(at, return_inverse=True)
        read: list[Passage] = []
        for batch, local, where in self._gather(unique, self._text):
            for row, offset in zip(where.tolist(), local.tolist()):
                self._check_whole(batch.slice(offset, 1), row)
            read += self._passages(batch.take(pa.array(local)))
        return [read[k] for k in inverse.reshape(-1).tolist()]

    def arrow_batches(self, size: int | None = None) -> Iterator[pa.RecordBatch]:
        """The passages as Arrow record batches of `PASSAGE_SCHEMA` (ids as strings, missing titles
        as ""), `size` rows at a time: what an index stores, without a Python object per row."""
        size = size or BATCH_ROWS
        for start in range(0, self._n, size):
            yield _stored(self._slice(start, min(self._n, start + size), self._text))

    def arrow_take(self, rows, embeddings: bool = False) -> pa.RecordBatch:
        """The passages at `rows` (ascending) as one record batch of `PASSAGE_SCHEMA`, and with
        `embeddings` their stored vectors as lists of float32 after it: a part of the table as a
        new table holds it (`index cut`), without a Python object per row. Each batch is decoded once."""
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) and (rows[0] < 0 or rows[-1] >= self._n or (np.diff(rows) < 0).any()):
            raise IndexError(f"rows must ascend within 0..{self._n - 1}")
        columns = self._text + (["embeddings"] if embeddings else [])
        parts = [batch.take(pa.array(local)) for batch, local, _ in self._gather(rows, columns)]
        table = pa.Table.from_batches(parts, schema=self._batch(0, columns).schema)
        out = _stored(table)
        if embeddings:
            self.embedding_dim()  # the column checked (no pass when a search has read it all): lists of floats, one length
            vectors = table.column("embeddings").combine_chunks().cast(pa.list_(pa.float32()))
            out = out.append_column(pa.field("embeddings", pa.list_(pa.float32())), vectors)
        return out

    # --- the embeddings column --------------------------------------------------------------

    @property
    def has_embeddings(self) -> bool:
        return "embeddings" in self.schema.names

    def vector_dim(self) -> int:
        """The length of the stored vectors, read from the column's type and its first row alone.

        No pass over the column: a reader that goes through every vector in row order anyway
        (`embeddings`: `index cut`'s search, `index build --reuse-embeddings`' copy) checks each
        block as it decodes it, where a pass of its own would decode wiki_dpr's 80 GB twice (about
        3 minutes on 2 cores). `embedding_dim` is the pass, for callers that must refuse a damaged
        column before they begin anything."""
        if self._dim is not None:
            return self._dim
        if not self.has_embeddings:
            raise InputError(self.source, "missing: there is no embeddings column", field="embeddings")
        t = self.schema.field("embeddings").type
        if not (_is_list(t) and pa.types.is_floating(t.value_type)):
            raise self._error(f"expected lists of floats, got a column of {t}", 0, "embeddings")
        first = self._slice(0, 1, ["embeddings"]).column("embeddings")
        if first.null_count:
            raise self._error("missing", 0, "embeddings")
        dim = pc.list_value_length(first)[0].as_py()
        if not dim:
            raise self._error("an empty vector", 0, "embeddings")
        self._dim = int(dim)
        return self._dim

    def embedding_dim(self) -> int:
        """`vector_dim`, after a pass that checks every stored vector not yet read (a list of finite
        floats in every row, all of one length): an InputError naming the first bad row otherwise."""
        dim = self.vector_dim()
        for start in range(self._checked, self._n, VECTOR_SCAN_ROWS):
            self.embeddings(start, min(self._n, start + VECTOR_SCAN_ROWS))
        return dim

    def embeddings(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """The stored vectors of rows [start, stop) as float32 (n, D), checked as they are decoded
        unless an earlier read in row order checked them (an InputError names the first bad row)."""
        dim = self.vector_dim()
        stop = self._n if stop is None else min(stop, self._n)
        if stop <= start:
            return np.zeros((0, dim), np.float32)
        part = self._slice(start, stop, ["embeddings"]).column("embeddings")
        if stop <= self._checked:
            values = pc.list_flatten(part)
            return np.asarray(values.to_numpy(), dtype=np.float32).reshape(stop - start, dim)
        vectors = self._checked_vectors(part, start, dim)
        if start <= self._checked:  # rows read in order: checked up to here
            self._checked = stop
        return vectors

    def embeddings_at(self, rows) -> np.ndarray:
        """The stored vectors of `rows` as float32 (len(rows), D)."""
        dim = self.vector_dim()
        return np.stack([self.embeddings(int(r), int(r) + 1)[0] for r in rows]) if len(rows) else np.zeros((0, dim), np.float32)

    def _checked_vectors(self, part: pa.ChunkedArray, start: int, dim: int) -> np.ndarray:
        """The vectors of `part` (rows from `start`) as float32 (n, D), or an InputError naming the
        first row that is null, empty, of another length than `dim`, or holds a null or a value that
        is not finite as float32 (NaN would rank first in every search)."""
        if part.null_count:
            raise self._error("missing", start + _first(pc.is_null(part)), "embeddings")
        lengths = pc.list_value_length(part)
        empty = pc.equal(lengths, 0)
        if pc.any(empty).as_py():  # before the lengths are compared: an empty vector is named as one
            raise self._error("an empty vector", start + _first(empty), "embeddings")
        uneven = pc.not_equal(lengths, dim)
        if pc.any(uneven).as_py():
            row = start + _first(uneven)
            raise self._error(f"{lengths[row - start].as_py()} values where the first row has {dim}", row, "embeddings")
        values = pc.list_flatten(part)
        if values.null_count:
            raise self._error("a null among the values", start + _first(_rows_with_values(part, pc.is_null)), "embeddings")
        if values.type != pa.float32():
            values = pc.cast(values, pa.float32())  # as they are read: float64 past ±3.4e38 is inf
        vectors = np.asarray(values.to_numpy(), dtype=np.float32).reshape(len(part), dim)
        for lo in range(0, len(vectors), VECTOR_SCAN_ROWS):  # a mask of 32,768 rows at a time, not of the block
            if not np.isfinite(vectors[lo:lo + VECTOR_SCAN_ROWS]).all():
                row = start + _first(_rows_with_values(part, _not_finite))
                raise self._error("not a finite number as float32 (NaN, infinity or beyond ±3.4e38)", row, "embeddings")
        return vectors

    # --- reading and checking rows ------------------------------------------------------------

    def _slice(self, start: int, stop: int, columns: Sequence[str] | None = None) -> pa.Table:
        """Rows [start, stop) as a zero-copy table over the batches that hold them; `columns`: only
        these (of Parquet, only these are decoded)."""
        first = int(np.searchsorted(self._starts, start, side="right")) - 1
        last = int(np.searchsorted(self._starts, stop, side="left"))
        parts = []
        for b in range(first, last):
            lo, hi = max(start, self._starts[b]), min(stop, self._starts[b + 1])
            if hi > lo:
                parts.append(self._batch(b, columns).slice(lo - self._starts[b], hi - lo))
        return pa.Table.from_batches(parts, schema=self._batch(first, columns).schema)

    def _batch(self, b: int, columns: Sequence[str] | None = None) -> pa.RecordBatch:
        if isinstance(self._groups, RowGroups):
            return self._view(columns).batch(b)
        if columns is None or columns == self._names:  # an index's store: its columns are the text ones
            return self._groups[b]
        return self._groups[b].select(list(columns))

    def _view(self, columns: Sequence[str] | None) -> RowGroups:
        """The Parquet row groups of `columns` alone, each set of columns with its own few decoded
        groups: a passage's text never decodes its vector, and wiki_dpr's 768 floats are some 3 KB a
        row against 0.6 KB of text (100,000 such rows, 2 cores: checked at open in 0.3 s instead of
        0.75, read as passages in 0.4 s instead of 0.8, written to an index's store in 0.13 s
        instead of 0.78)."""
        if columns is None:
            return self._groups
        key = tuple(columns)
        if key not in self._views:
            self._views[key] = self._groups.select(key)
        return self._views[key]

    def _column(self, b: int, name: str) -> pa.Array:
        if isinstance(self._groups, RowGroups):
            return self._groups.column(b, name)
        return self._groups[b].column(self._groups[b].schema.get_field_index(name))

    def _gather(self, rows: np.ndarray, columns: Sequence[str]) -> Iterator[tuple[pa.RecordBatch, np.ndarray, np.ndarray]]:
        """For the ascending `rows`, per batch that holds some of them: (the batch of `columns`, those
        rows' offsets in it, the rows). Each batch is decoded once."""
        groups = np.searchsorted(self._starts, rows, side="right") - 1
        bounds = np.flatnonzero(np.diff(groups)) + 1  # where the next batch's rows begin
        for at, g in zip(np.split(rows, bounds), np.split(groups, bounds)):
            if len(at):
                yield self._batch(int(g[0]), columns), at - self._starts[g[0]], at

    def _rows(self, start: int, stop: int) -> list[Passage]:
        """Rows [start, stop) as Passages."""
        if stop <= start:
            return []
        part = self._slice(start, stop, self._text)
        self._check_whole(part, start)
        return self._passages(part)

    def _passages(self, part: pa.Table | pa.RecordBatch) -> list[Passage]:
        """Checked rows of the text columns as Passages: the one place Python objects are made from the table."""
        ids = part.column("id")
        if not is_string_type(ids.type):
            ids = pc.cast(ids, pa.string())  # integer ids, as the JSON readers take them
        titles = part.column("title").to_pylist() if "title" in part.column_names else [None] * part.num_rows
        return [Passage(i, t or "", x) for i, t, x in zip(ids.to_pylist(), titles, part.column("text").to_pylist())]

    def _check_whole(self, part: pa.Table | pa.RecordBatch, start: int) -> None:
        """Refuse damaged Arrow data (offsets past the end, cut UTF-8) before it becomes Python
        strings: so read, it raises UnicodeDecodeError or reads out of bounds and crashes the process.
        A memory-mapped file (an index's store, a save_to_disk folder) can be damaged after it was
        written; the check costs about 6 µs a row read (10 µs without it)."""
        try:
            part.validate(full=True)
        except pa.ArrowInvalid:
            for row in range(part.num_rows):  # name the first damaged row and column
                for name in part.column_names:
                    try:
                        part.column(name).slice(row, 1).validate(full=True)
                    except pa.ArrowInvalid as e:
                        raise InputError(self.source, f"row {start + row} (0-based) is damaged ({e}): the file changed "
                                         "after it was written, or is not whole", field=name) from None
            raise InputError(self.source, f"rows {start}-{start + part.num_rows - 1} (0-based) are damaged: the file "
                             "changed after it was written, or is not whole") from None

    def _at(self, row: int) -> tuple[str, int]:
        """(file, 1-based line) of the 0-based `row`: in a folder of Parquet shards, the shard that
        holds it and its row there, as a user would open the file to look."""
        if isinstance(self._groups, RowGroups):
            name, local = self._groups.locate(row)
            return name, local + 1
        if len(self._files) > 1 and self._in_files():  # of one file, the folder and its row say it
            k = int(np.searchsorted(self._file_starts, row, side="right")) - 1
            return str(self._files[k]), row - int(self._file_starts[k]) + 1
        return self.source, row + 1 + self._lines_before

    def _in_files(self) -> bool:
        """Whether the rows of `files` (each Arrow stream's batches counted, memory-mapped: no data read)
        are the table's, in order; the files' first rows are then in `_file_starts`. An error only
        asks, so opening a folder reads no more than it did."""
        if self._file_starts is None:
            try:
                counts = []
                for f in self._files:
                    with pa.memory_map(str(f)) as source:
                        counts.append(sum(b.num_rows for b in pa.ipc.open_stream(source)))
                starts = np.cumsum([0] + counts)
            except (OSError, pa.ArrowException):  # damaged after datasets loaded it: rows named in the folder
                starts = np.zeros(1, np.int64)
            self._file_starts = starts if int(starts[-1]) == int(self._starts[-1]) else np.zeros(1, np.int64)
        return len(self._file_starts) > 1

    def _error(self, message: str, row: int, field: str) -> InputError:
        where, line = self._at(row)
        return InputError(where, message, line=line, field=field)

    def ids_present(self, ids) -> set[str]:
        """Which of `ids` are passage ids here: one scan of the id column (seconds at 21M rows), not
        a Python set of every id."""
        return set(self.rows_of(ids))

    def rows_of(self, ids) -> dict[str, int]:
        """The row of each of `ids` that is a passage id here (the others left out): one scan of the
        id column, none when `ids` is empty."""
        wanted = sorted(set(map(str, ids)))
        out: dict[str, int] = {}
        if not wanted:
            return out
        value_set = pa.array(wanted, pa.string())
        for start, column in self._scan("id"):
            column = column.combine_chunks()
            column = column if is_string_type(column.type) else pc.cast(column, pa.string())
            at = pc.indices_nonzero(pc.is_in(column, value_set=value_set)).to_numpy()
            out.update(zip(column.take(pa.array(at)).to_pylist(), (start + at).tolist()))
        return out

    def _scan(self, column: str, rows: int = SCAN_ROWS) -> Iterator[tuple[int, pa.ChunkedArray]]:
        for start in range(0, self._n, rows):
            yield start, self._slice(start, min(self._n, start + rows), [column]).column(column)

    def _validate(self) -> None:
        """What the JSON passage reader checks per record, checked per column: the first bad row
        (in row order; id before title before text within a row) is the error."""
        if self._n == 0:
            raise InputError(self.source, "no passages")
        for name in ("id", "text"):
            if name not in self.schema.names:
                raise self._error("missing (no such column)", 0, name)
        for name, integers in (("id", True), ("title", False), ("text", False)):
            t = self.schema.field(name).type if name in self.schema.names else pa.string()
            if pa.types.is_null(t):  # a column with no values
                if name == "title":
                    continue  # no titles
                raise self._error("missing", 0, name)
            if not (is_string_type(t) or (integers and pa.types.is_integer(t))):
                raise self._error(f"expected strings, got a column of {t}", 0, name)
        dup = self._first_duplicate()
        problems = []  # (row, field order, field, message)
        for start in range(0, dup[0] + 1 if dup else self._n, SCAN_ROWS):
            problems = row_problems(self._slice(start, min(self._n, start + SCAN_ROWS), self._text), start)
            if problems:
                break
        if dup:
            row, first, value = dup
            where, line = self._at(first)
            problems.append((row, 0, "id", f"duplicate id '{value}' (first on line {line}"
                             f"{'' if where == self._at(row)[0] else ' of ' + where})"))
        if problems:
            row, _, name, message = min(problems)
            raise self._error(message, row, name)

    def _first_duplicate(self) -> tuple[int, int, str] | None:
        """(row, row of its first use, id) of the first row whose id an earlier row has, or None.

        8 bytes a row: each id's 64-bit hash (an integer id is its own), sorted to find the hashes
        met twice; then a second read of the ids takes the rows with those hashes, compared exactly
        (two ids can share a hash). pyarrow's distinct count held the whole column and a hash table,
        about 80 bytes a passage: 1.7 GB at wiki_dpr's 21 M, against 170 MB so."""
        hashes = np.empty(self._n, np.int64)
        for start, chunk in self._id_chunks():
            hashes[start:start + len(chunk)] = _id_hashes(chunk)
        repeated = _repeated_hashes(hashes)
        del hashes
        return _first_repeat(self._id_chunks(), repeated) if len(repeated) else None

    def _id_chunks(self) -> Iterator[tuple[int, pa.Array]]:
        """(first row, the id column of one batch) over rows [0, len), a batch decoded at a time."""
        groups = int(np.searchsorted(self._starts, self._n, side="left"))  # those holding rows before self._n
        for b in range(groups):
            start = int(self._starts[b])
            yield start, self._column(b, "id").slice(0, self._n - start)


def row_problems(part: pa.Table, start: int) -> list[tuple[int, int, str, str]]:
    """What the JSON passage reader checks per record, checked per column of `part` (rows from
    `start`): per column, its first row that is not UTF-8, missing or empty (a title may be anything),
    as (row, field order, field, message), the least of them the row to name. A UTF-8 problem orders
    before what the row holds (-3 for id ... -1 for text), as JSONL's bad line does. The first
    problem of a table is the least of its first part that has any, however the rows are cut into
    parts: `PassageTable._validate` cuts them SCAN_ROWS at a time, `write_tsv_shards` a TSV block."""
    problems = []
    for order, name in ((0, "id"), (1, "title"), (2, "text")):
        if name not in part.column_names:
            continue
        col = part.column(name)
        valid = len(col)  # rows before the first that is not UTF-8 (pyarrow.compute reads no further)
        if is_string_type(col.type):
            bad = arrow_text_problem(part, [name])
            if bad is not None:
                valid = bad[0]
                problems.append((start + bad[0], order - 3, name, bad[2]))
        if name == "title":
            continue  # any title, or none
        if col.null_count:
            problems.append((start + _first(pc.is_null(col)), order, name, "missing"))
        if is_string_type(col.type) and valid:
            checked = col.slice(0, valid)
            blank = pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(checked)), 0)
            if pc.any(blank).as_py():
                problems.append((start + _first(blank), order, name, "empty"))
    return problems


def _repeated_hashes(hashes: np.ndarray) -> np.ndarray:
    """The values met more than once in `hashes` (`_id_hashes` of every row), sorted; sorts `hashes` in place."""
    hashes.sort()
    return np.unique(hashes[1:][hashes[1:] == hashes[:-1]])


def _first_repeat(chunks: Iterator[tuple[int, pa.Array]], repeated: np.ndarray) -> tuple[int, int, str] | None:
    """(row, row of its first use, id) of the first row whose id an earlier row has, or None: `chunks`
    ((first row, ids) in row order) read a second time for the rows whose hash is in `repeated`
    (few), compared exactly, since two ids can share a hash."""
    seen: dict = {}
    for start, chunk in chunks:
        at = np.flatnonzero(np.isin(_id_hashes(chunk), repeated) & pc.is_valid(chunk).to_numpy(zero_copy_only=False))
        for row, value in zip((start + at).tolist(), _id_values(chunk.take(pa.array(at, pa.int64())))):
            if value in seen:
                return row, seen[value], str(value)
            seen[value] = row
    return None


def _id_hashes(ids: pa.Array) -> np.ndarray:
    """A 64-bit hash per id, as int64: an integer id itself, a string's the hash of its bytes (this
    process's: the hashes are compared within one call only). Nulls hash alike; callers skip them."""
    if pa.types.is_integer(ids.type):
        return pc.fill_null(ids, 0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    values = pc.cast(ids, pa.large_binary()).to_pylist()  # bytes: an id that is not UTF-8 hashes too
    return np.fromiter((hash(v) for v in values), np.int64, count=len(values))


def _id_values(ids: pa.Array) -> list:
    """Ids as Python values to compare and name: strings as text (bytes that are not UTF-8 escaped:
    `_validate` names such an id itself), integers as they are."""
    if is_string_type(ids.type):
        return [v.decode("utf-8", "backslashreplace") for v in pc.cast(ids, pa.large_binary()).to_pylist()]
    return ids.to_pylist()


def _stored(part: pa.Table) -> pa.RecordBatch:
    """Passage rows as one record batch of `PASSAGE_SCHEMA` (ids as strings, missing titles as "")."""
    # a table without titles gets a chunked column of nulls, like the table's own columns (combine_chunks below)
    no_titles = pa.chunked_array([pa.nulls(part.num_rows, pa.string())])
    titles = part.column("title") if "title" in part.column_names else no_titles
    # cast first: integer ids, large strings, and a title column of nulls only all become strings
    columns = [pc.cast(part.column("id"), pa.string()), pc.fill_null(pc.cast(titles, pa.string()), ""),
               pc.cast(part.column("text"), pa.string())]
    return pa.RecordBatch.from_arrays([c.combine_chunks() for c in columns], schema=PASSAGE_SCHEMA)


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _first(mask) -> int:
    """The first position where a boolean array is true (the caller knows there is one)."""
    return int(pc.index(mask, True).as_py())


def _rows_with_values(lists: pa.ChunkedArray, which) -> pa.ChunkedArray:
    """Per row of a list column, whether one of its values is picked by `which` (values -> bool array)."""
    return pa.chunked_array([_row_has(c, which) for c in lists.chunks], pa.bool_())


def _row_has(chunk: pa.Array, which) -> pa.Array:
    flat = pc.list_flatten(chunk)
    parents = pc.list_parent_indices(chunk).to_numpy()
    out = np.zeros(len(chunk), bool)
    out[parents[which(flat).to_numpy(zero_copy_only=False)]] = True
    return pa.array(out)


def _not_finite(values: pa.Array) -> pa.Array:
    """Whether each value is NaN or infinite as float32, the type vectors are read as."""
    return pc.invert(pc.is_finite(pc.cast(values, pa.float32())))
