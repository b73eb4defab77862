"""A key given twice in one JSON object is named by the first repeat in the text, with that same
key's path: json's hook meets the innermost object first, and the path used to be looked for
breadth-first, so the key of one repeat came out with the path of another ('text' for "src"). A JSON
file names the line of the repeat (of its record, for a record of its list); another fault of the
text is named as that fault."""

from __future__ import annotations

import pytest

from conftest import run_main
from lewisrag.data.io import InputError, iter_records, read_json


def refusal(path, text: str) -> InputError:
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as e:
        list(iter_records(path)) if path.suffix == ".jsonl" else read_json(path)
    assert "Traceback" not in str(e.value) and len(str(e.value).splitlines()) == 1
    return e.value


@pytest.mark.parametrize("text,key,field", [
    # the reviewer's line: the inner repeat comes first in the text (json met it first too, but named 'text')
    ('{"id":"d2","meta":{"src":"a","src":"b"},"title":"T","text":"one","text":"two"}', "src", "meta.src"),
    # an outer repeat before an inner one: json meets the inner object first, the text has the outer first
    ('{"a":1,"a":2,"m":{"x":1,"x":2}}', "a", "a"),
    ('{"m":{"x":1,"x":2},"a":1,"a":2}', "x", "m.x"),
    ('{"l":[{"k":1},{"k":2,"deep":{"z":0,"z":1}}],"l":[]}', "z", "l[1].deep.z"),
    ('{"l":[[],{}, [ {"q": {"r": [1, {"s": 1, "s": 2}]}, "q": 3} ]]}', "s", "l[2][0].q.r[1].s"),
    ('{ "a" : { } , "b" : [ ] , "a" : 1 }', "a", "a"),
])
def test_the_key_named_and_its_path_are_the_same_repeat(tmp_path, text, key, field):
    e = refusal(tmp_path / "docs.jsonl", '{"id":"d1","text":"x"}\n' + text + "\n")
    assert (e.line, e.field) == (2, field)
    assert e.message.startswith(f'the key "{key}" is given twice in one object')


def test_chunk_names_the_reviewers_line(tmp_path, monkeypatch, capsys):
    docs = tmp_path / "dupdocs.jsonl"
    docs.write_text('{"id":"d1","title":"T","text":"x"}\n'
                    '{"id":"d2","meta":{"src":"a","src":"b"},"title":"T","text":"one","text":"two"}\n', encoding="utf-8")
    code, _, err = run_main(monkeypatch, capsys, "chunk", "--docs", docs, "--out", tmp_path / "dd.jsonl")
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"{docs}:2: field 'meta.src': the key \"src\" is given twice in one object" in err
    assert not (tmp_path / "dd.jsonl").exists()


@pytest.mark.parametrize("text,line,field", [
    # the reviewer's: the repeat inside the first record comes before the second "data"
    ('{"data":[{"text":"one","text":"two"}], "data": []}', 1, "text"),
    ('{"data": [{"text": "a"},\n  {"title": "t",\n   "text": "b", "text": "c"}]}', 2, "text"),  # its record's line
    ('[{"text": "a"},\n {"text": "b",\n  "meta": {"k": 1,\n    "k": 2}}]', 2, "meta.k"),
    ('{"version": 1,\n "data": [],\n "version": 2}', 3, "version"),  # outside any record: the repeat's own line
    ('{"data": [],\n\n "data": [{"text": "a"}]}', 3, "data"),
    ('{\n  "settings": {\n    "lr": 1,\n    "lr": 2\n  }\n}\n', 4, "settings.lr"),  # a config file's
])
def test_a_json_file_names_the_line(tmp_path, text, line, field):
    e = refusal(tmp_path / "docs.json", text)
    assert (e.line, e.field) == (line, field)
    assert str(e).startswith(f"{tmp_path / 'docs.json'}:{line}: field '{field}': the key ")


@pytest.mark.parametrize("text,says", [
    ('{"id":"1","meta":{"k":1,"k":2},"text": }', "malformed JSON: Expecting value at column 40"),
    ('{"id":"1","meta":{"k":1,"k":2},"text":"x"} trailing', "malformed JSON: Extra data at column 44"),
])
def test_malformed_json_past_a_repeated_key_is_named_malformed(tmp_path, text, says):
    """It was named "an integer longer than 4300 digits": the re-read's JSONDecodeError is a ValueError."""
    e = refusal(tmp_path / "q.jsonl", text + "\n")
    assert (e.line, e.field, e.message) == (1, None, says)
