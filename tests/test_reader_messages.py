"""What the record readers say about a bad file: one printable line whatever the file holds, a
mapped field that no record holds, ids derived whatever the records' order, a bad key named as a
key, JSON's own names for what a line holds, and the formats each reader really reads."""

from __future__ import annotations

import json

import pytest

from conftest import run_main, write_jsonl
from lewisrag.data.io import InputError, derived_id, iter_records
from lewisrag.data.records import read_passages, read_qa, read_questions

Q = "Who leads Valdoria?"
GOOD = {"id": "1", "question": Q, "answers": ["Ana Kel"]}
RAW = "foo\nbar\x1b[31mRED"  # a line break and a terminal's escape code (red)


# --- a file's value cannot break the one-line error, nor reach the terminal -------------------------


@pytest.mark.parametrize("field", ["category", "kind"])
def test_a_value_with_control_characters_is_shown_escaped(tmp_path, field):
    path = write_jsonl(tmp_path / "qa.jsonl", [{**GOOD, field: RAW}])
    with pytest.raises(InputError) as e:
        read_qa(path)
    text = str(e.value)
    assert text.isprintable() and "\n" not in text and "\x1b" not in text
    assert f"field '{field}': unknown {field} 'foo\\nbar\\x1b[31mRED'" in text


def test_any_input_error_is_one_printable_line():
    """Messages that quote a value raw (or a library's text) are escaped once, where the error is made."""
    e = InputError(f"a{RAW}.jsonl", f"cannot read: {RAW}", line=3, field="x\ty")
    assert str(e) == "afoo\\nbar\\x1b[31mRED.jsonl:3: field 'x\\ty': cannot read: foo\\nbar\\x1b[31mRED"
    assert e.message == f"cannot read: {RAW}" and e.field == "x\ty"  # the parts stay as given


def test_the_cli_prints_a_file_name_with_control_characters_on_one_line(tmp_path, monkeypatch, capsys):
    missing = tmp_path / f"p{RAW}.jsonl"
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", missing, "--encoder", "bm25",
                            "--out", tmp_path / "idx")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "\x1b" not in err, err
    assert "pfoo\\nbar\\x1b[31mRED.jsonl" in err


# --- a mapped field that no record holds -------------------------------------------------------------


@pytest.mark.parametrize("name, key, held", [("id", "qId", "id"), ("gold_passage_ids", "golds_ids", "gold_passage_ids"),
                                             ("category", "cat", "category")])
def test_a_mapped_field_that_no_record_holds_is_refused(tmp_path, name, key, held):
    """The mapped name, misspelt or of another file, was read as absent from every record: derived
    ids, no gold ids, no categories, in silence."""
    rows = [{**GOOD, "id": "1", "gold_passage_ids": ["p1"], "category": "single_doc"}, {**GOOD, "id": "2"}]
    path = write_jsonl(tmp_path / "qa.jsonl", rows)
    with pytest.raises(InputError) as e:
        read_qa(path, {"question": "question", name: key})
    assert str(e.value) == f"{path}: --qa-fields: field '{name}': '{key}' is in no record (or is null in every one)"
    if name == "id":  # read_questions' gold ids: eval retrieval's own error (test_audit_eval_retrieval)
        with pytest.raises(InputError, match=f"field '{name}': '{key}' is in no record"):
            read_questions(path, {name: key})
    # held by one record of the file: read as before
    assert len(read_qa(path, {"question": "question", name: held})) == 2


def test_read_questions_checks_only_the_mapped_fields_it_reads(tmp_path):
    """A file of questions without answers serves `eval retrieval` with the QA files' mapping."""
    path = write_jsonl(tmp_path / "q.jsonl", [{"query": Q}])
    assert [q.question for q in read_questions(path, {"question": "query", "answers": "golds", "category": "c"})] == [Q]


# --- ids derived whatever the records' order ----------------------------------------------------------


@pytest.mark.parametrize("explicit_first", [False, True])
def test_a_derived_id_that_another_record_gives_reads_in_either_order(tmp_path, explicit_first):
    """Derived line by line, the derived id clashed with a later record's own ("duplicate id ... (first
    on line 1)", though line 1 gave none); the other order read. Now the given id stays its record's and
    the derived one avoids it, in both orders."""
    given = {**GOOD, "id": derived_id(Q, {}), "question": "Another question?"}
    derived = {"question": Q, "answers": ["Ana Kel"]}
    path = write_jsonl(tmp_path / "qa.jsonl", [given, derived] if explicit_first else [derived, given])
    ids = {ex.question: ex.id for ex in read_qa(path)}
    assert ids == {"Another question?": derived_id(Q, {}), Q: derived_id(Q, {}) + "-2"}
    assert {ex.question: ex.id for ex in read_questions(path)} == ids


def test_derived_ids_of_files_without_a_clash_are_unchanged(tmp_path):
    """Repeats get -2, -3 in the file's order, and a given id earlier in the file is avoided, as before."""
    base = derived_id(Q, {})
    rows = [{"question": Q, "answers": ["a"]}, {**GOOD, "id": base + "-2", "question": "Other?"},
            {"question": Q, "answers": ["b"]}, {"question": "Third?", "answers": ["c"]}]
    ids = [ex.id for ex in read_qa(write_jsonl(tmp_path / "qa.jsonl", rows))]
    assert ids == [base, base + "-2", base + "-3", derived_id("Third?", {})]


def test_a_given_id_twice_is_still_refused(tmp_path):
    path = write_jsonl(tmp_path / "qa.jsonl", [{"question": Q, "answers": ["a"]}, GOOD, {**GOOD, "question": "Again?"}])
    with pytest.raises(InputError, match=r"qa\.jsonl:3: field 'id': duplicate id '1' \(first on line 2\)"):
        read_qa(path)


# --- a lone surrogate in a key is named as a key -----------------------------------------------------


@pytest.mark.parametrize("text, field", [('{"id": "1", "text": "a", "\\ud800": 1}', "(top level)"),
                                         ('{"id": "1", "text": "a", "meta": {"\\ud800": 1}}', "meta"),
                                         ('{"id": "1", "text": "a", "meta": {"k": "\\ud800"}}', "meta.k")])
@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_lone_surrogate_in_a_key_is_named_as_a_key(tmp_path, text, field, suffix):
    path = tmp_path / f"p{suffix}"
    path.write_text(text if suffix == ".jsonl" else f"[\n{text}\n]", encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_passages(path)
    in_key = field != "meta.k"  # the last is a value's
    assert (e.value.line, e.value.field) == ((1 if suffix == ".jsonl" else 2), field)
    assert str(e.value).endswith(f"a lone surrogate escape (\\ud800-\\udfff){' in a key' if in_key else ''}: not a character")


# --- JSON's names; a JSON array saved as .jsonl; the formats each reader reads --------------------------


@pytest.mark.parametrize("line, got", [("null", "null"), ("3", "a number"), ('"x"', "a string"), ("true", "true"),
                                       ("[1]", "an array")])
def test_a_line_that_is_no_object_is_named_as_json_names_it(tmp_path, line, got):
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "1", "text": "a"}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        list(iter_records(path))
    assert str(e.value) == f"{path}:2: expected a JSON object, got {got}"  # not the first line: no hint


@pytest.mark.parametrize("indent", [None, 2])
def test_a_json_array_saved_as_jsonl_says_to_rename_it(tmp_path, indent):
    path = tmp_path / "p.jsonl"
    path.write_text("\n" + json.dumps([{"id": "1", "text": "a"}, {"id": "2", "text": "b"}], indent=indent), encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_passages(path)
    assert str(e.value).startswith(f"{path}:2: ") and str(e.value).endswith(
        ": the file is one JSON array, a .json file's layout (JSON Lines holds one object per line): rename it to .json")
    renamed = path.rename(tmp_path / "p.json")
    assert [p.id for p in read_passages(renamed)] == ["1", "2"]


def test_each_reader_lists_the_formats_it_reads(tmp_path):
    path = tmp_path / "qa.txt"
    path.write_text("Who leads Valdoria?\tAna Kel\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_qa(path)
    assert str(e.value) == (f"{path}: unknown format '.txt': use .jsonl, .json, .parquet, .csv or .tsv (DPR's QA files) "
                            "or hf:NAME[:CONFIG]:SPLIT")
    with pytest.raises(InputError, match=r"unknown format '\.txt': use \.jsonl, \.json, \.parquet, \.csv or \.tsv"):
        read_questions(path)
    with pytest.raises(InputError, match=r"unknown format '\.txt': use \.jsonl, \.json, \.parquet or hf:"):
        read_passages(path)  # passages are no DPR QA file
    with pytest.raises(InputError, match="file not found"):  # a missing file is named as missing first
        read_qa(tmp_path / "none.txt")
