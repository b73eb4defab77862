"""A JSON object that gives a key twice is bad input, named by file, line and field: json keeps the
last value in silence, so {"answers": ["a"], "answers": []} read as a question with no answer."""

from __future__ import annotations

import json

import pytest

from conftest import run_main
from lewisrag.data.io import InputError, iter_records, read_json
from lewisrag.data.records import read_qa
from lewisrag.eval.records import read_answers


@pytest.mark.parametrize("name,text,line,field", [
    ("dupkey.jsonl", '{"question":"q","answers":["a"],"answers":[]}\n', 1, "answers"),  # the reviewer's file
    ("nested.jsonl", '{"question":"q","answers":["a"]}\n\n{"question":"q","answers":["a"],"meta":{"x":[{"a":1,"a":2}]}}\n',
     3, "meta.x[0].a"),
    ("list.json", '[{"question":"q","answers":["a"]},\n {"question":"q",\n  "question":"r","answers":["a"]}]', 2, "question"),
    ("data.json", '{"data": [{"question":"q","answers":["a"]},\n\n {"answers":["a"],"question":"q","answers":[]}]}', 3, "answers"),
    ("top.json", '{"data": [], "data": [{"question":"q","answers":["a"]}]}', 1, "data"),
    ("zh.jsonl", '{"问题":"甲","问题":"乙","question":"q","answers":["a"]}\n', 1, "问题"),
    ("escaped.jsonl", '{"question":"q","answers":["a"],"answ\\u0065rs":[]}\n', 1, "answers"),  # the same key, spelt otherwise
])
def test_a_key_given_twice_is_named_by_file_line_and_field(tmp_path, name, text, line, field):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as e:
        list(iter_records(path))
    assert (e.value.line, e.value.field) == (line, field)
    assert "given twice in one object" in e.value.message and "malformed" not in e.value.message
    where = f"{path}:{line}" if line is not None else f"{path}"
    assert str(e.value).startswith(f"{where}: field '{field}': the key ")


def test_distinct_keys_and_repeated_values_are_fine(tmp_path):
    path = tmp_path / "ok.jsonl"
    path.write_text('{"question":"q","answers":["a","a"],"meta":{"a":1,"b":{"a":1}},"Answers":[]}\n', encoding="utf-8")
    assert [r for _, r in iter_records(path)][0]["meta"] == {"a": 1, "b": {"a": 1}}
    (tmp_path / "ok.json").write_text(json.dumps({"data": [{"question": "q", "answers": ["a"]}], "version": 1}), encoding="utf-8")
    assert read_json(tmp_path / "ok.json")["version"] == 1


def test_every_reader_and_the_cli_refuse_it_in_one_line(tmp_path, monkeypatch, capsys):
    qa = tmp_path / "qa.jsonl"
    qa.write_text('{"question":"q","answers":["a"],"answers":[]}\n', encoding="utf-8")
    with pytest.raises(InputError, match="answers"):
        read_qa(qa)
    answers = tmp_path / "answers.jsonl"
    answers.write_text('{"user_input":"q","response":"a [1].","response":"b.","retrieved_contexts":["a"]}\n', encoding="utf-8")
    with pytest.raises(InputError, match="response"):
        read_answers(answers)
    code, out, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", answers, "--out", tmp_path / "run")
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"{answers}:1: field 'response': the key \"response\" is given twice" in err
    assert not (tmp_path / "run" / "results.json").exists()


@pytest.mark.parametrize("tail, says", [
    ('"n": ' + "9" * 5000, "an integer longer than"),
    ('"n": ' + "[" * 5000 + "]" * 5000, "nested too deeply"),
])
def test_a_repeated_key_beside_another_fault_is_still_one_line(tmp_path, tail, says):
    """The repeated key's path is found by reading the text again, which met the other fault and
    raised it as a traceback (a 5000-digit integer, an array nested 5000 deep)."""
    f = tmp_path / "q.jsonl"
    f.write_text('{"id": "1", "meta": {"k": 1, "k": 2}, ' + tail + "}\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        list(iter_records(f))
    assert says in e.value.message and e.value.line == 1
