"""Bad Arrow and Parquet input is one line on stderr, exit code 2, naming the file (and the row, field
or row group), with nothing written: text that is not UTF-8 (a string column holding other bytes, a
binary column of latin-1), a damaged Parquet file (page header, compressed page, footer), and a
`datasets` save_to_disk folder whose dataset_dict.json, state.json or dataset_info.json is damaged.

Every fixture is a few rows, built here with pyarrow and `datasets` as the hub's files are laid out
(tests/test_real_data.py); the CLI runs in-process.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import run_main, write_jsonl
from hf_layouts import dpr_pair
from lewisrag.data.io import InputError
from lewisrag.data.records import read_qa

ROWS = [{"id": f"p{i}", "title": f"Title {i}", "text": f"passage text number {i}"} for i in range(5)]
LATIN1 = "caf\xe9 au lait".encode("latin-1")  # byte 3 is not UTF-8


def raw_strings(values: list[bytes], large: bool = False) -> pa.Array:
    """A string array over these bytes as they are: Arrow promises UTF-8 and does not check it here."""
    binary = pa.array(values, pa.large_binary() if large else pa.binary())
    return pa.Array.from_buffers(pa.large_string() if large else pa.string(), len(values), binary.buffers())


def column_of(kind: str, values: list[bytes]) -> pa.Array:
    return {"string": lambda: raw_strings(values), "large_string": lambda: raw_strings(values, large=True),
            "binary": lambda: pa.array(values, pa.binary()), "large_binary": lambda: pa.array(values, pa.large_binary())}[kind]()


def passages_table(kind: str = "string", field: str = "text", bad_row: int = 4, embeddings: bool = False) -> pa.Table:
    """ROWS with row `bad_row` (from 1) of `field` in latin-1, the column of type `kind`."""
    columns = {name: [r[name].encode() for r in ROWS] for name in ("id", "title", "text")}
    columns[field][bad_row - 1] = LATIN1
    table = pa.table({name: column_of(kind, values) if name == field else pa.array([v.decode() for v in values])
                      for name, values in columns.items()})
    if embeddings:
        table = table.append_column("embeddings", pa.array([[0.1 * i] * 32 for i in range(len(ROWS))], pa.list_(pa.float32())))
    return table


def one_line_error(code: int, err: str, *needles: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and "Traceback" not in err and len(lines) == 1 and lines[0].startswith("error: "), err
    assert all(c.isprintable() for c in lines[0]), repr(lines[0])  # control bytes escaped
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def chunk(monkeypatch, capsys, docs, tmp_path: Path) -> tuple[int, str]:
    out = tmp_path / "out" / "chunks.jsonl"
    capsys.readouterr()  # what building the fixture printed (datasets' progress bars)
    code, _, err = run_main(monkeypatch, capsys, "chunk", "--docs", docs, "--out", out)
    assert not out.exists() and not out.parent.exists()  # nothing written, not even the folder
    return code, err


# ---------------------------------------------------------------------------------------------
# text that is not UTF-8


@pytest.mark.parametrize("kind", ["string", "large_string", "binary", "large_binary"])
@pytest.mark.parametrize("field", ["text", "title", "id"])
def test_parquet_passages_not_utf8_name_the_row_and_field(kind, field, tmp_path, monkeypatch, capsys):
    path = tmp_path / "docs.parquet"
    pq.write_table(passages_table(kind, field), path)
    code, err = chunk(monkeypatch, capsys, path, tmp_path)
    one_line_error(code, err, f"{path}:4: field '{field}': not valid UTF-8 (byte 3)")


def test_binary_columns_of_utf8_read_as_text(tmp_path, monkeypatch, capsys):
    """A Parquet writer that marks no column as UTF-8 (binary) still wrote text: read as JSONL's bytes are."""
    path = tmp_path / "docs.parquet"
    pq.write_table(pa.table({name: pa.array([r[name].encode() for r in ROWS], pa.binary()) for name in ("id", "title", "text")}),
                   path)
    code, _, err = run_main(monkeypatch, capsys, "chunk", "--docs", path, "--out", tmp_path / "chunks.jsonl")
    assert code == 0, err
    chunks = [json.loads(line) for line in (tmp_path / "chunks.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [c["text"] for c in chunks] == [r["text"] for r in ROWS] and chunks[0]["title"] == "Title 0"


def test_the_first_bad_row_wins_as_in_jsonl(tmp_path, monkeypatch, capsys):
    """An empty text on row 2 comes before the latin-1 text on row 4; on one row, bad bytes come first."""
    table = passages_table().set_column(2, "text", raw_strings([b"x", b" ", b"y", LATIN1, b"z"]))
    pq.write_table(table, tmp_path / "a.parquet")
    code, err = chunk(monkeypatch, capsys, tmp_path / "a.parquet", tmp_path)
    one_line_error(code, err, "a.parquet:2: field 'text': empty")
    table = passages_table(field="title", bad_row=2).set_column(2, "text", pa.array(["x", "", "y", "z", "w"]))
    pq.write_table(table, tmp_path / "b.parquet")
    code, err = chunk(monkeypatch, capsys, tmp_path / "b.parquet", tmp_path)
    one_line_error(code, err, "b.parquet:2: field 'title': not valid UTF-8 (byte 3)")


@pytest.mark.parametrize("kind", ["string", "binary"])
def test_a_saved_dataset_not_utf8(kind, tmp_path, monkeypatch, capsys):
    import datasets

    folder = tmp_path / "psgs"
    datasets.Dataset(passages_table(kind)).save_to_disk(str(folder))
    code, err = chunk(monkeypatch, capsys, folder, tmp_path)
    one_line_error(code, err, f"{folder}:4: field 'text': not valid UTF-8 (byte 3)")


def test_index_build_bm25_and_dense(tmp_path, monkeypatch, capsys):
    path = tmp_path / "docs.parquet"
    pq.write_table(passages_table(embeddings=True), path)
    pair = dpr_pair(tmp_path / "dpr", [r["text"] for r in ROWS])
    for encoder, extra in (("bm25", []), (pair["context"], []), (pair["context"], ["--reuse-embeddings"])):
        out = tmp_path / "index"
        code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", path, "--encoder", encoder, "--out", out,
                                *extra)
        one_line_error(code, err, f"{path}:4: field 'text': not valid UTF-8 (byte 3)")
        assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["docs.parquet", "dpr"]


def questions_table(kind: str = "string") -> pa.Table:
    return pa.table({"question": column_of(kind, [b"Who leads Valdoria?", b"Who leads " + LATIN1 + b"?"]),
                     "answers": [["Ana"], ["Bo"]]})


@pytest.mark.parametrize("kind", ["string", "binary", "large_binary"])
def test_train_dpr_questions_and_passages(kind, tmp_path, monkeypatch, capsys):
    good_qa = write_jsonl(tmp_path / "qa.jsonl", [{"question": "Who leads Valdoria?", "answers": ["Ana"]}])
    good_docs = write_jsonl(tmp_path / "docs.jsonl", ROWS)
    bad_qa, bad_docs = tmp_path / "qa.parquet", tmp_path / "docs.parquet"
    pq.write_table(questions_table(kind), bad_qa)
    pq.write_table(passages_table(kind), bad_docs)
    for train, passages, needle in ((bad_qa, good_docs, f"{bad_qa}:2: field 'question': not valid UTF-8 (byte 13)"),
                                    (good_qa, bad_docs, f"{bad_docs}:4: field 'text': not valid UTF-8 (byte 3)")):
        out = tmp_path / "dpr"
        code, _, err = run_main(monkeypatch, capsys, "train", "dpr", "--train", train, "--passages", passages, "--out", out,
                                "--steps", "1")
        one_line_error(code, err, needle)
        assert not out.exists()


def test_swap_questions(tmp_path, monkeypatch, capsys):
    """`swap` reads its question sets before any model: a string column, and a list of answers (nq_open)."""
    (tmp_path / "model").mkdir()
    (tmp_path / "index").mkdir()
    pq.write_table(questions_table(), tmp_path / "q.parquet")
    answers = pa.ListArray.from_arrays(pa.array([0, 1, 3], pa.int32()), raw_strings([b"Ana", b"Bo", LATIN1]))
    pq.write_table(pa.table({"question": ["Who leads Valdoria?", "Who leads Kalo?"], "answer": answers}), tmp_path / "nq.parquet")
    for questions, needle in (("q.parquet", "q.parquet:2: field 'question': not valid UTF-8 (byte 13)"),
                              ("nq.parquet", "nq.parquet:2: field 'answer[1]': not valid UTF-8 (byte 3)")):
        code, _, err = run_main(monkeypatch, capsys, "swap", "--model", tmp_path / "model", "--index", tmp_path / "index",
                                "--questions", tmp_path / questions, "--out", tmp_path / "swap.json")
        one_line_error(code, err, needle)
        assert not (tmp_path / "swap.json").exists()


def test_qa_readers_name_nested_fields_and_hf_rows(tmp_path, monkeypatch):
    """What `train rag --train` and `compare --questions` read: trivia_qa's answer object, and an hf: spec."""
    import datasets

    value = raw_strings([b"Ana", LATIN1])
    answer = pa.StructArray.from_arrays([pa.array([["Ana"], ["x"]]), value], names=["aliases", "value"])
    pq.write_table(pa.table({"question": ["Q1?", "Q2?"], "question_id": ["a", "b"], "answer": answer}), tmp_path / "tq.parquet")
    with pytest.raises(InputError) as e:
        read_qa(tmp_path / "tq.parquet")
    assert str(e.value) == f"{tmp_path / 'tq.parquet'}:2: field 'answer.value': not valid UTF-8 (byte 3)"
    (tmp_path / "hub").mkdir()
    pq.write_table(questions_table(), tmp_path / "hub" / "train.parquet")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")  # a local folder as a hub dataset
    spec = f"hf:{tmp_path / 'hub'}:train"
    with pytest.raises(InputError) as e:
        read_qa(spec)
    assert str(e.value) == f"{spec}:2: field 'question': not valid UTF-8 (byte 13)"


# ---------------------------------------------------------------------------------------------
# damaged Parquet files


def parquet_bytes() -> bytes:
    """200 passages in 4 row groups of 50, snappy, no dictionary: each page is its compressed text."""
    rows = [{"id": f"p{i}", "title": "Title", "text": f"the text of passage {i} " * 20} for i in range(200)]
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf, row_group_size=50, compression="snappy", use_dictionary=False)
    return buf.getvalue()


def text_chunk_offset(data: bytes, group: int = 2) -> int:
    return pq.ParquetFile(io.BytesIO(data)).metadata.row_group(group).column(2).data_page_offset


def damaged(data: bytes, at: int, value: int) -> bytes:
    out = bytearray(data)
    out[at] = value
    return bytes(out)


def corrupt_snappy(data: bytes) -> bytes:
    """The file with one byte of row group 3's compressed text zeroed where snappy refuses it (the
    first such byte after the page header)."""
    start = text_chunk_offset(data)
    for at in range(start, start + 64):
        try:
            pq.ParquetFile(io.BytesIO(damaged(data, at, 0))).read_row_group(2)
        except OSError as e:
            if "snappy" in str(e).lower():
                return damaged(data, at, 0)
        except Exception:
            pass
    raise AssertionError("no byte of the page makes snappy fail")


def flipped_checksummed(data: bytes) -> bytes:
    """The same rows rewritten uncompressed with page checksums, then one bit of row group 3's text
    flipped: a page that still decodes (to a wrong text) and only its CRC tells."""
    buf = io.BytesIO()
    pq.write_table(pq.read_table(io.BytesIO(data)), buf, row_group_size=50, compression="none", use_dictionary=False,
                   write_page_checksum=True)
    out = buf.getvalue()
    chunk = pq.ParquetFile(io.BytesIO(out)).metadata.row_group(2).column(2)
    at = chunk.data_page_offset + chunk.total_compressed_size - 5  # inside the last value's bytes
    bad = damaged(out, at, out[at] ^ 0x01)
    assert pq.ParquetFile(io.BytesIO(bad)).read_row_group(2).num_rows == 50  # unchecked, it reads
    return bad


DAMAGE = {  # how, then what the one line says after the file's name
    "page header": (lambda d: damaged(d, text_chunk_offset(d), 0x0f),
                    ["row group 3 of 4", "don't know what type: \\x0f; Deserializing page header failed"]),
    "snappy block": (corrupt_snappy, ["row group 3 of 4", "Corrupt snappy compressed data"]),
    "footer": (lambda d: d[:-60] + b"\x0f" * 52 + d[-8:], ["cannot read Parquet: ", "\\x0f"]),
    "checksummed page that decodes": (flipped_checksummed, ["row group 3 of 4", "CRC checksum verification failed"]),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_parquet_names_the_file_and_row_group(damage, tmp_path, monkeypatch, capsys):
    how, needles = DAMAGE[damage]
    path = tmp_path / "docs.parquet"
    path.write_bytes(how(parquet_bytes()))
    code, err = chunk(monkeypatch, capsys, path, tmp_path)
    line = one_line_error(code, err, f"error: {path}: cannot read Parquet: ", *needles)
    if damage != "footer":
        assert "(rows 101-150)" in line
    # questions are read by another reader (records.read_qa): the same line, the group's first row
    questions = tmp_path / "q.parquet"
    good = pa.table({"question": [f"Q{i}?" for i in range(200)], "answers": [["a" * 40]] * 200,
                     "text": [f"{i} " * 50 for i in range(200)]})
    buf = io.BytesIO()
    pq.write_table(good, buf, row_group_size=50, compression="snappy", use_dictionary=False)
    questions.write_bytes(how(buf.getvalue()))
    code, _, err = run_main(monkeypatch, capsys, "swap", "--model", tmp_path, "--index", tmp_path, "--questions", questions)
    line = one_line_error(code, err, f"error: {questions}: cannot read Parquet: ", needles[-1])
    if damage != "footer":
        assert "row group 3 of 4 (from row 101)" in line


# ---------------------------------------------------------------------------------------------
# damaged save_to_disk folders


@pytest.fixture
def saved(tmp_path) -> Path:
    import datasets

    folder = tmp_path / "psgs"
    datasets.Dataset.from_list(ROWS).save_to_disk(str(folder))
    return folder


def _edit_json(path: Path, change) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


FOLDERS = {  # how the folder is damaged, then what the line says
    "splits of other types": (lambda f: (f / "dataset_dict.json").write_text('{"splits": [1, null]}'),
                              ["dataset_dict.json: field 'splits[0]': expected a split name", "got 1"]),
    "empty state.json": (lambda f: (f / "state.json").write_text(""), ["state.json:1: malformed JSON"]),
    "state.json without data files": (lambda f: _edit_json(f / "state.json", lambda s: {k: v for k, v in s.items()
                                                                                     if k != "_data_files"}),
                                      ["state.json: field '_data_files': missing"]),
    "a data file not there": (lambda f: _edit_json(f / "state.json", lambda s: {**s, "_data_files": [{"filename": "x.arrow"}]}),
                              ["state.json: field '_data_files[0].filename': 'x.arrow' is not a file"]),
    "a data file outside": (lambda f: _edit_json(f / "state.json", lambda s: {**s, "_data_files": [{"filename": "../x.arrow"}]}),
                            ["state.json: field '_data_files[0].filename': expected the name of an Arrow file in the folder"]),
    "a format datasets refuses": (lambda f: _edit_json(f / "state.json", lambda s: {**s, "_format_type": "nope"}),
                                  ["state.json: field '_format_type': datasets refuses it"]),
    "malformed dataset_info.json": (lambda f: (f / "dataset_info.json").write_text('{"features": '),
                                    ["dataset_info.json:1: malformed JSON"]),
    "features not an object": (lambda f: _edit_json(f / "dataset_info.json", lambda i: {**i, "features": 5}),
                               ["dataset_info.json: field 'features': expected an object of column features or null, got 5"]),
    "unknown feature type": (lambda f: _edit_json(f / "dataset_info.json", lambda i: {"features": {"text": {"_type": "Nope"}}}),
                             ["dataset_info.json: field 'features': datasets cannot read it: Feature type 'Nope' not found"]),
    "features of other columns": (lambda f: _edit_json(f / "dataset_info.json",
                                                       lambda i: {"features": {"text": {"dtype": "int64", "_type": "Value"}}}),
                                  ["dataset_info.json: field 'features': does not describe the Arrow files' columns"]),
    "splits not a list": (lambda f: _edit_json(f / "dataset_info.json", lambda i: {**i, "splits": 5}),
                          ["dataset_info.json: field 'splits': datasets cannot read it"]),
    "a damaged Arrow file": (lambda f: (f / "data-00000-of-00001.arrow").write_bytes(b"\x0f\x00garbage" * 40),
                             ["data-00000-of-00001.arrow: cannot read the Arrow file: "]),
}


@pytest.mark.parametrize("case", list(FOLDERS))
def test_a_damaged_saved_dataset_names_the_file_and_field(case, saved, tmp_path, monkeypatch, capsys):
    damage, needles = FOLDERS[case]
    damage(saved)
    code, err = chunk(monkeypatch, capsys, saved, tmp_path)
    one_line_error(code, err, f"error: {saved}/", *needles)
    shutil.rmtree(saved)
