"""Edges of the data readers: a lewisrag QA record that carries DPR's context lists beside its own id
lists, DPR's QA layout (a surrogate escape in an answer, bare CR line ends), `--max-passages` over a
passages TSV whose bad line lies past the Nth in the same block, and an `hf:` spec whose split carries
datasets' slice."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lewisrag.data.io import InputError, load_hf
from lewisrag.data.passages import open_table, write_tsv_shards
from lewisrag.data.records import Passage, check_gold_ids, missing_passage_id, read_qa


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# a missing id of a lewisrag record that carries DPR's lists too


def test_a_lewisrag_records_missing_gold_id_is_named_by_its_field_beside_positive_ctxs(tmp_path):
    """The file's first record made it lewisrag's format: a later record's `positive_ctxs` is not read
    (its ids are not the gold ids), so the missing id is named at `gold_passage_ids`, not searched for
    among the contexts (where it is not: StopIteration, a traceback)."""
    path = write_jsonl(tmp_path / "mixed.jsonl", [
        {"question": "q1", "answers": ["a"], "gold_passage_ids": ["p1"]},
        {"question": "q2", "answers": ["b"], "gold_passage_ids": ["p9"],
         "positive_ctxs": [{"passage_id": "p1", "title": "t", "text": "x"}]}])
    with pytest.raises(InputError) as e:
        check_gold_ids(read_qa(path), [Passage("p1", "t", "x"), Passage("p2", "t", "y")], path, "the index bm")
    assert str(e.value) == f"{path}:2: field 'gold_passage_ids': gold passage id 'p9' is not in the index bm"


def test_a_lewisrag_records_missing_hard_negative_is_named_by_its_entry_beside_hard_negative_ctxs(tmp_path):
    path = write_jsonl(tmp_path / "mixed.jsonl", [
        {"question": "q1", "answers": ["a"], "gold_passage_ids": ["p1"]},
        {"question": "q2", "answers": ["b"], "gold_passage_ids": ["p1"], "hard_negative_ids": ["p2", "p9"],
         "hard_negative_ctxs": [{"passage_id": "p2", "title": "t", "text": "x"}]}])
    error = missing_passage_id(read_qa(path), "hard_negative_ids", {"p1", "p2"}, path, "--passages p")
    assert str(error) == f"{path}:2: field 'hard_negative_ids[1]': hard negative id 'p9' is not in --passages p"


def test_a_dpr_records_missing_gold_id_is_still_named_at_its_context(tmp_path):
    path = write_jsonl(tmp_path / "biencoder.json.jsonl", [
        {"question": "q1", "answers": ["a"], "positive_ctxs": [{"passage_id": "p1", "title": "t", "text": "x"},
                                                              {"psg_id": "p9", "title": "t", "text": "y"}]}])
    error = missing_passage_id(read_qa(path), "gold_passage_ids", {"p1"}, path, "the index bm")
    assert (error.line, error.field) == (1, "positive_ctxs[1].psg_id")


# ---------------------------------------------------------------------------------------------
# DPR's QA layout


@pytest.mark.parametrize("answers, field", [("['alp\\ud800']", "answers[0]"), ("['a', 'x\\udfff']", "answers[1]"),
                                            ("['\\ud83d\\ude00']", "answers[0]")])
def test_a_surrogate_escape_in_a_qa_csv_answer_is_refused_naming_its_entry(tmp_path, answers, field):
    """literal_eval makes a str UTF-8 cannot encode of it (a pair too: Python keeps two halves), which
    would fail only when `index targets` or a results file is written, with a traceback."""
    path = tmp_path / "curatedtrec-train.qa.csv"
    path.write_text(f"curatedtrec alpha\t{answers}\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_qa(path)
    assert (e.value.line, e.value.field) == (1, field)
    assert "surrogate" in e.value.message


def test_a_qa_csv_character_outside_the_bmp_as_written_or_escaped_reads(tmp_path):
    path = tmp_path / "q.qa.csv"
    path.write_text("who smiled 😀\t['😀', '\\U0001F600']\n", encoding="utf-8")
    assert read_qa(path)[0].answers == ["😀", "😀"]


@pytest.mark.parametrize("end", [b"\r", b"\r\n", b"\n"])
def test_qa_csv_lines_may_end_in_a_bare_cr(tmp_path, end):
    """As DPR reads the file (text mode: universal newlines) and the passages TSV is read."""
    path = tmp_path / "q.qa.csv"
    path.write_bytes(end.join([b"who\t['a']", b"what\t['b']", b""]))
    assert [(q.question, q.answers) for q in read_qa(path)] == [("who", ["a"]), ("what", ["b"])]


def test_a_qa_csv_cr_inside_a_closed_quote_stays_in_its_value_between_cr_line_ends(tmp_path):
    """As a \\r inside a quoted field of a \\n file always has (tests/test_reader_lines.py)."""
    path = tmp_path / "q.qa.csv"
    path.write_bytes(b"\xef\xbb\xbf\"a\"\"b\rc\"\t['a']\rx\t['d']\r")
    assert [(q.question, q.answers) for q in read_qa(path)] == [('a"b\rc', ["a"]), ("x", ["d"])]


@pytest.mark.parametrize("text, said", [(b"x\t['b']\r\"who\t['a']\rwhat\t['c']\r", "runs over lines 2-3"),
                                        (b"x\t['b']\r\"who\t['a']\r", "runs to the end of the file")])
def test_a_qa_csv_quote_left_open_over_cr_line_ends_is_named_by_its_lines(tmp_path, text, said):
    """As over \\n line ends: the bare \\r's after a quote never closed end lines too."""
    path = tmp_path / "q.qa.csv"
    path.write_bytes(text)
    with pytest.raises(InputError) as e:
        read_qa(path)
    assert (e.value.line, e.value.field) == (2, "question") and said in e.value.message


# ---------------------------------------------------------------------------------------------
# --max-passages over a passages TSV


def tsv_with_bad_line(path, bad: bytes, at: int = 12000, rows: int = 30000):
    """`rows` passage lines (row r on line r + 1), the row `at` replaced by `bad`: some 2 MB, within a
    block or two of pyarrow's (TSV_BLOCK), so the rows past `at` share its block."""
    lines = [b"%d\tpassage %d of a few words more words and more\tT%d\n" % (i, i, i) for i in range(1, rows + 1)]
    lines[at - 1] = bad
    path.write_bytes(b"id\ttext\ttitle\n" + b"".join(lines))
    return path


BAD_LINES = {"two fields": b"bad\tonly two\n", "four fields": b"a\tb\tc\td\n", "blank": b"\n",
             "line break": b'x\t"two\nlines"\tT\n', "header again": b"id\ttext\ttitle\n",
             "quote left open": b'x\t"open\tT\n'}


@pytest.mark.parametrize("bad", BAD_LINES, ids=list(BAD_LINES))
def test_max_passages_never_refuses_a_line_past_the_nth(tmp_path, bad):
    """docs/real-data.md: `--max-passages N` parses only the first N passages. A bad line after the
    Nth, in the block that holds the Nth, was refused or not by where pyarrow's blocks end."""
    path = tsv_with_bad_line(tmp_path / "few.tsv", BAD_LINES[bad])
    for limit in (100, 11999):
        table = open_table(path, limit)
        assert len(table) == limit and table[limit - 1].id == str(limit)
        done = write_tsv_shards(path, tmp_path / f"shards_{limit}", limit=limit)
        assert done["passages"] == limit
        assert pq.read_table(tmp_path / f"shards_{limit}" / done["files"][0]).column("id")[-1].as_py() == str(limit)


def test_max_passages_still_refuses_a_bad_line_within_the_first_n(tmp_path):
    path = tsv_with_bad_line(tmp_path / "few.tsv", BAD_LINES["two fields"])
    for read in (lambda: open_table(path, 12000), lambda: write_tsv_shards(path, tmp_path / "shards", limit=12000)):
        with pytest.raises(InputError) as e:
            read()
        assert str(e.value) == f"{path}:12001: expected 3 tab-separated fields (id, text, title), got 2"


def test_max_passages_reads_a_repeated_id_past_the_nth_as_no_repeat(tmp_path):
    path = tsv_with_bad_line(tmp_path / "few.tsv", b"5\tthe id of row 5 again\tT\n", at=101, rows=300)
    assert len(open_table(path, 100)) == 100
    assert write_tsv_shards(path, tmp_path / "shards", limit=100)["passages"] == 100
    with pytest.raises(InputError, match="duplicate id '5'"):
        write_tsv_shards(path, tmp_path / "all")


# ---------------------------------------------------------------------------------------------
# hf: specs


def test_an_hf_spec_split_may_carry_a_slice(tmp_path, monkeypatch):
    """datasets' split slicing (`train[:3]`, `train[1:3]`) holds a colon that is not a part of the spec."""
    import datasets

    (tmp_path / "hub").mkdir()
    pq.write_table(pa.table({"question": [f"q{i}?" for i in range(5)], "answers": [[f"a{i}"] for i in range(5)]}),
                   tmp_path / "hub" / "train.parquet")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")  # a local folder as a hub dataset
    assert load_hf(f"hf:{tmp_path / 'hub'}:train[:3]")["question"][:] == ["q0?", "q1?", "q2?"]
    assert [q.question for q in read_qa(f"hf:{tmp_path / 'hub'}:default:train[1:3]")] == ["q1?", "q2?"]
    with pytest.raises(InputError, match="expected hf:NAME"):
        load_hf(f"hf:{tmp_path / 'hub'}:default:train:[:3]")
