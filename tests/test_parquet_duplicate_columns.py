"""A Parquet file with a column name twice (Parquet and Arrow allow it; pyarrow then finds no column by
that name): passages and questions refused naming the column, one line and exit code 2, not KeyError."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lewisrag.data.io import InputError
from lewisrag.data.passages import open_table
from lewisrag.data.records import read_qa

from conftest import run_main


def twice(path, names, columns):
    pq.write_table(pa.Table.from_arrays([pa.array(c) for c in columns], names=names), path)
    return path


@pytest.mark.parametrize("names", [["id", "text", "id"], ["id", "text", "text"], ["id", "text", "meta", "meta"]])
def test_passages_with_a_column_twice_are_refused(names, tmp_path):
    path = twice(tmp_path / "psgs.parquet", names, [["1", "2"], ["a", "b"], ["x", "y"], ["u", "v"]][:len(names)])
    repeated = next(n for n in names if names.count(n) > 1)
    with pytest.raises(InputError) as e:
        open_table(path)
    assert str(e.value) == f"{path}: field '{repeated}': column '{repeated}' appears 2 times"


def test_a_shard_with_a_column_twice_is_named(tmp_path):
    folder = tmp_path / "shards"
    folder.mkdir()
    twice(folder / "train-00000-of-00002.parquet", ["id", "text"], [["1"], ["a"]])
    bad = twice(folder / "train-00001-of-00002.parquet", ["id", "text", "id"], [["2"], ["b"], ["3"]])
    with pytest.raises(InputError, match=f"^{bad}: field 'id': column 'id' appears 2 times$"):
        open_table(folder)


def test_questions_with_a_column_twice_are_refused(tmp_path):
    path = twice(tmp_path / "qa.parquet", ["question", "answers", "question"], [["Who?"], [["Ana"]], ["Why?"]])
    with pytest.raises(InputError) as e:
        read_qa(path)
    assert str(e.value) == f"{path}: field 'question': column 'question' appears 2 times"


def test_the_cli_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    passages = twice(tmp_path / "psgs.parquet", ["id", "text", "id"], [["1"], ["a"], ["2"]])
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", passages, "--encoder", "bm25",
                            "--out", tmp_path / "idx")
    assert (code, err) == (2, f"error: {passages}: field 'id': column 'id' appears 2 times\n")
    assert not (tmp_path / "idx").exists()
    (tmp_path / "model").mkdir()
    (tmp_path / "index").mkdir()
    questions = twice(tmp_path / "q.parquet", ["question", "answers", "answers"], [["Who?"], [["Ana"]], [["Bo"]]])
    code, _, err = run_main(monkeypatch, capsys, "swap", "--model", tmp_path / "model", "--index", tmp_path / "index",
                            "--questions", questions, "--out", tmp_path / "swap.json")
    assert (code, err) == (2, f"error: {questions}: field 'answers': column 'answers' appears 2 times\n")
    assert not (tmp_path / "swap.json").exists()
