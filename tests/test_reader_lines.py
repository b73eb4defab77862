"""Readers name the line of a fault that a whole file's read met, and refuse what they would misread:

- DPR's `.qa.csv`: an unbalanced quote ran the lines after it into one question, read in silence
  (4 lines, 2 questions, one of them three lines long);
- a `.json` file not UTF-8, or holding an integer longer than int() reads, was named without a line;
- a gzip-compressed file under a JSON, JSONL, TSV or CSV name read as "not valid UTF-8 (byte 1)";
- a results.json score out of range by an integer of hundreds of digits printed every digit.
"""

from __future__ import annotations

import gzip
import json

import pytest

from lewisrag.data.io import InputError, iter_records, read_json
from lewisrag.data.passages.tsv import read_dpr_tsv
from lewisrag.data.qa_formats import qa_records
from lewisrag.eval.results import read_results
from tests.conftest import run_main


def refusal(read, path) -> InputError:
    with pytest.raises(InputError) as e:
        list(read(path))
    assert "\n" not in str(e.value), e.value
    return e.value


def test_an_unbalanced_quote_in_a_dpr_qa_file_is_named_not_read_as_one_question(tmp_path):
    path = tmp_path / "curatedtrec-test.qa.csv"
    path.write_text("\"Who said hi\t['a']\nwhere is x\t['b']\nwhat is y\" ok\t['c']\nlast q\t['d']\n", encoding="utf-8")
    e = refusal(qa_records, path)
    assert (e.line, e.field) == (1, "question")
    assert str(e) == (f"{path}:1: field 'question': a quoted field runs over lines 1-3 (an unbalanced \"?); "
                      "DPR's QA files hold one question a line")


def test_an_unbalanced_quote_in_the_answers_or_on_the_last_line(tmp_path):
    path = tmp_path / "nq-test.qa.csv"
    path.write_text("q0\t['z']\nq1\t\"['a',\n'b']\"\nq2\t['c']\n", encoding="utf-8")
    e = refusal(qa_records, path)
    assert (e.line, e.field) == (2, "answers") and "runs over lines 2-3" in e.message
    path.write_text("q0\t['z']\n\"q1\t['a']\n", encoding="utf-8")
    e = refusal(qa_records, path)
    assert (e.line, e.field) == (2, "question") and "runs to the end of the file (an unbalanced \"?)" in e.message


def test_dpr_qa_quoting_within_a_line_reads_as_before(tmp_path):
    path = tmp_path / "nq-test.qa.csv"
    path.write_bytes("\ufeff\"Who said \"\"hi\"\", then?\"\t\"['a', 'b']\"\r\n\nq, \"2\"\t['c']\n\"a\rb\"\t['d']".encode())
    assert list(qa_records(path)) == [(1, {"question": 'Who said "hi", then?', "answers": ["a", "b"]}),
                                      (3, {"question": 'q, "2"', "answers": ["c"]}),
                                      (4, {"question": "a\rb", "answers": ["d"]})]


@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"])
def test_a_json_file_not_utf8_is_named_by_its_line(tmp_path, bom):
    """The byte counted within its line, as the JSONL reader counts it (it was the file's offset, less
    a byte-order mark's 3 bytes)."""
    path = tmp_path / "badutf.json"
    path.write_bytes(bom + b'[\n {"question": "ok", "answers": ["a"]},\n {"question": "caf\x82", "answers": ["b"]}\n]\n')
    e = refusal(iter_records, path)
    assert str(e) == f"{path}:3: not valid UTF-8 (byte 18)"
    assert (e.line, e.field) == (3, None)
    with pytest.raises(InputError, match=r"badutf\.json:3: not valid UTF-8 \(byte 18\)$"):
        read_json(path)


def test_a_json_files_integer_too_long_to_read_is_named_by_its_line(tmp_path):
    """Digits in a string or in a fraction are passed over: the integer int() refused is the one named."""
    path = tmp_path / "hugeint.json"
    path.write_text('[\n {"question": "' + "1" * 5000 + '", "answers": ["a"], "x": 0.' + "2" * 5000 + '},\n'
                    ' {"question": "q",\n  "n": -' + "9" * 5000 + "}\n]\n", encoding="utf-8")
    e = refusal(iter_records, path)
    assert str(e) == f"{path}:4: malformed JSON: an integer longer than 4300 digits"
    with pytest.raises(InputError, match=r"hugeint\.json:4: malformed JSON: an integer longer"):
        read_json(path)


def test_a_jsonl_lines_integer_too_long_is_named_by_its_column(tmp_path):
    path = tmp_path / "hugeint.jsonl"
    path.write_text('{"a": 1}\n{"a": "x", "n": ' + "9" * 5000 + "}\n", encoding="utf-8")
    e = refusal(iter_records, path)
    assert str(e) == f"{path}:2: malformed JSON: an integer longer than 4300 digits at column 17"


@pytest.mark.parametrize("name, read", [
    ("gz.jsonl", iter_records), ("gz.json", iter_records), ("gz.json", read_json), ("nq-test.qa.csv", qa_records),
    ("psgs.tsv", read_dpr_tsv), ("gz.parquet", iter_records),
])
def test_a_gzip_file_under_a_text_name_is_named_gzip(tmp_path, name, read):
    path = tmp_path / name
    path.write_bytes(gzip.compress(b'{"question": "q", "answers": ["a"]}\n'))
    e = refusal(read, path)
    plain = path.with_name(f"{path.stem}.plain{path.suffix}")
    assert str(e) == f"{path}: gzip-compressed: decompress it first (gunzip -c {path} > {plain})"


def test_a_gz_file_is_named_gzip_not_an_unknown_format(tmp_path, monkeypatch, capsys):
    path = tmp_path / "good.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"user_input": "q", "response": "a", "retrieved_contexts": ["c"]}\n'))
    code, out, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", path, "--out", tmp_path / "run")
    assert code == 2 and err.strip() == f"error: {path}: gzip-compressed: decompress it first (gunzip {path})", err
    assert not (tmp_path / "run").exists()


def test_an_out_of_range_huge_integer_score_is_shown_by_its_length(tmp_path):
    path = tmp_path / "results.json"
    path.write_text('{"records": [\n {"id": "q1", "metrics": {"claims.precision": ' + "9" * 401 + "}}\n]}\n",
                    encoding="utf-8")
    e = refusal(read_results, path)
    assert str(e) == (f"{path}:2: field 'records[0].metrics.claims.precision': an integer of 401 digits is outside "
                      "claims.precision's range [0, 1]")
    path.write_text(json.dumps({"records": [{"id": "q1", "metrics": {"claims.precision": 2}}]}), encoding="utf-8")
    assert refusal(read_results, path).message == "2 is outside claims.precision's range [0, 1]"
