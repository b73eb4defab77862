"""Adversarial inputs on the real-data path: hub-schema questions and passages from local files, and
chunking. Each test is a defect an earlier version had (see its docstring)."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lewisrag.data.chunking import chunk_documents, chunk_text, count_units
from lewisrag.data.io import InputError
from lewisrag.data.passages import open_passages
from lewisrag.data.records import Passage, read_qa


def test_a_combining_mark_stays_with_its_cjk_character():
    """Decomposed kana (か + U+3099, as text saved on macOS holds it) and a kanji with an ideographic
    variation selector were cut in two: the mark counted as a word of its own, so a passage could
    start with a mark of no base character and the character lost its voicing or its glyph."""
    assert chunk_text("か\u3099き\u3099く", words=1) == ["か\u3099", "き\u3099", "く"]
    assert chunk_text("葛\U000e0100城", words=1) == ["葛\U000e0100", "城"]
    assert chunk_text("中\u0301文", words=1) == ["中\u0301", "文"]
    assert count_units("か\u3099き\u3099") == 2
    docs = chunk_documents([Passage("d", "", "ハ\u309aン\u3099")], words=1)
    assert [p.text for p in docs] == ["ハ\u309a", "ン\u3099"]


def test_dictionary_encoded_text_columns_read_as_strings(tmp_path):
    """A pandas Categorical title (wiki_dpr's titles repeat: a natural way to save memory) is written to
    Parquet as a dictionary of strings; the column was refused as 'expected strings, got a column of
    dictionary<...>' though JSONL of the same data read. Its rows are checked as any string column's."""
    path = tmp_path / "cat.parquet"
    pd.DataFrame({"id": ["1", "2"], "title": pd.Categorical(["T", "T"]), "text": ["a", "b"]}).to_parquet(path)
    assert pa.types.is_dictionary(pq.read_schema(path).field("title").type)
    assert list(open_passages(path)) == [Passage("1", "T", "a"), Passage("2", "T", "b")]
    dup = tmp_path / "dup.parquet"
    pd.DataFrame({"id": pd.Categorical(["1", "2", "1"]), "text": ["a", "b", "c"]}).to_parquet(dup)
    with pytest.raises(InputError, match=r"dup.parquet:3: field 'id': duplicate id '1' \(first on line 1\)$"):
        open_passages(dup)
    latin = tmp_path / "latin.parquet"
    pq.write_table(pa.table({"id": ["1", "2"], "text": pa.array([b"ok", b"caf\xe9"]).dictionary_encode()}), latin)
    with pytest.raises(InputError, match=r"latin.parquet:2: field 'text': not valid UTF-8 \(byte 3\)$"):
        open_passages(latin)
    shards = tmp_path / "shards"  # one shard so encoded, the other plain: one table
    shards.mkdir()
    pq.write_table(pa.table({"id": ["1"], "text": pa.array(["a"]).dictionary_encode()}), shards / "train-00000-of-00002.parquet")
    pq.write_table(pa.table({"id": ["2"], "text": ["b"]}), shards / "train-00001-of-00002.parquet")
    assert [p.text for p in open_passages(shards)] == ["a", "b"]


def test_a_folder_of_two_splits_shards_is_refused(tmp_path):
    """The hub keeps a dataset's splits side by side (`data/train-00000-of-00001.parquet`,
    `data/test-00000-of-00001.parquet`); such a folder was read as one corpus, both splits together."""
    folder = tmp_path / "data"
    folder.mkdir()
    pq.write_table(pa.table({"id": ["1"], "text": ["a"]}), folder / "train-00000-of-00001.parquet")
    pq.write_table(pa.table({"id": ["2"], "text": ["b"]}), folder / "test-00000-of-00001.parquet")
    with pytest.raises(InputError, match=rf"^{folder}: holds the numbered shards of 2 sets \(test, train\)"):
        open_passages(folder)


def test_a_hub_downloads_root_names_the_folder_of_shards_below_it(tmp_path):
    """`--passages assets/wiki_dpr` (the download's root, not data/psgs_w100/nq) was refused as a
    folder that is neither a saved dataset nor a folder of shards, with no word of where they are."""
    nq = tmp_path / "wiki_dpr" / "data" / "psgs_w100" / "nq"
    nq.mkdir(parents=True)
    (tmp_path / "wiki_dpr" / ".cache" / "huggingface").mkdir(parents=True)
    pq.write_table(pa.table({"id": ["1"], "text": ["a"]}), nq / "train-00000-of-00001.parquet")
    with pytest.raises(InputError, match=rf"nor a folder of .parquet shards; one lies below it, in {nq} .*give that folder$"):
        open_passages(tmp_path / "wiki_dpr")
    assert len(open_passages(nq)) == 1


def test_a_limit_reads_a_jsonl_file_as_it_reads_a_table(tmp_path):
    """`open_passages(path, limit)` on a JSONL file sliced the list: a limit of -1 dropped the last
    passage in silence and 0 gave an empty corpus, where a table's limit is clamped at 0 and an
    empty corpus is 'no passages'."""
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "1", "text": "a"}\n{"id": "2", "text": "b"}\n', encoding="utf-8")
    table = tmp_path / "p.parquet"
    pq.write_table(pa.table({"id": ["1", "2"], "text": ["a", "b"]}), table)
    for source in (path, table):
        for limit in (0, -1):
            with pytest.raises(InputError, match="no passages"):
                open_passages(source, limit=limit)
        assert [p.id for p in open_passages(source, limit=1)] == ["1"]
        assert [p.id for p in open_passages(source, limit=10)] == ["1", "2"]


def test_an_unreadable_first_answer_says_what_it_holds(tmp_path):
    """nq_open with a null (or a string) `answer` on its first row was refused as a file whose format
    cannot be told, without a word of what `answer` held there."""
    path = tmp_path / "nq.parquet"
    pq.write_table(pa.table({"question": ["who a", "who b"], "answer": pa.array([None, ["x"]], pa.list_(pa.string()))}), path)
    with pytest.raises(InputError, match=r"nq.parquet:1: cannot tell the QA format .* \('answer' is null\)"):
        read_qa(path)
    one = tmp_path / "nq.jsonl"
    one.write_text('{"question": "who a", "answer": "x"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"nq.jsonl:1: cannot tell the QA format .* \('answer' is a str\)"):
        read_qa(one)


def test_a_mapped_answer_string_is_named_without_an_index(tmp_path):
    """A mapped `answers` given as one empty string was named 'a[0]', as if the field were a list."""
    path = tmp_path / "m.jsonl"
    path.write_text('{"q": "who?", "a": " "}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"m.jsonl:1: field 'a': empty answer \(read as mapped\)$"):
        read_qa(path, {"question": "q", "answers": "a"})
