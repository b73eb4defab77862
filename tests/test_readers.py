"""Readers: every format, and every kind of bad record named by file, line and field."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli, write_jsonl
from lewisrag.data.io import InputError, write_jsonl as atomic_jsonl
from lewisrag.data.records import read_passages, read_qa

PASSAGES = [{"id": "p1", "title": "Valdoria", "text": "Valdoria is led by Ana Kel."},
            {"id": "p2", "title": "登录", "text": "密码错误时返回 422。"}]


def test_formats_agree(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    jl = write_jsonl(tmp_path / "p.jsonl", PASSAGES)
    js = tmp_path / "p.json"
    js.write_text(json.dumps(PASSAGES, ensure_ascii=False), encoding="utf-8")
    pa_path = tmp_path / "p.parquet"
    pq.write_table(pa.Table.from_pylist(PASSAGES), pa_path)
    assert read_passages(jl) == read_passages(js) == read_passages(pa_path)
    assert read_passages(jl)[1].text == "密码错误时返回 422。"


@pytest.mark.parametrize("wrap", [lambda items: items, lambda items: {"version": 2, "data": items, "note": {"data": 0}}])
def test_a_bad_record_of_a_json_list_is_named_by_its_line(tmp_path, wrap):
    """The error named the record's position in the list (":2"), which is no line of an indented file."""
    from lewisrag.data.io import iter_records

    bad = [PASSAGES[0], {"id": "p2", "title": "登录"}]  # no text
    js = tmp_path / "p.json"
    js.write_text(json.dumps(wrap(bad), ensure_ascii=False, indent=2), encoding="utf-8")
    lines = js.read_text(encoding="utf-8").splitlines()
    with pytest.raises(InputError) as e:
        read_passages(js)
    assert e.value.field == "text" and e.value.line > 2  # the object's "{" opens that line; its id is on the next
    assert lines[e.value.line - 1].strip() == "{" and '"id": "p2"' in lines[e.value.line]
    js.write_text("[" + json.dumps(PASSAGES[0]) + ",\n\n " + json.dumps(PASSAGES[1]) + ", 3]", encoding="utf-8")
    records = iter_records(js)
    assert [next(records)[0], next(records)[0]] == [1, 3]
    with pytest.raises(InputError, match=r"p\.json:3: expected a JSON object, got a number"):
        list(iter_records(js))

def test_a_null_title_is_no_title_as_in_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"id": "a", "title": None, "text": "x"}, {"id": "b", "text": "y"}]
    assert [p.title for p in read_passages(write_jsonl(tmp_path / "p.jsonl", rows))] == ["", ""]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "p.parquet")
    assert read_passages(tmp_path / "p.parquet") == read_passages(tmp_path / "p.jsonl")
    with pytest.raises(InputError, match="expected a string") as e:
        read_passages(write_jsonl(tmp_path / "q.jsonl", [{"id": "a", "title": 3, "text": "x"}]))
    assert (e.value.line, e.value.field) == (1, "title")


def test_hf_spec_parses_and_reports(tmp_path):
    with pytest.raises(InputError, match="expected hf:NAME"):
        read_passages("hf:onlyname")


def test_an_unreachable_hub_dataset_is_one_line(monkeypatch, tmp_path):
    """The hub client's retry warnings are held back (they were a dozen lines on stderr without a
    network) and the error says how to read the cache offline; the loggers are restored after."""
    import logging

    import datasets

    from conftest import run_cli

    def unreachable(*a, **kw):
        logging.getLogger("huggingface_hub.utils._http").warning("Retrying in 1s [Retry 1/5].")
        raise ConnectionError("Couldn't reach 'nowhere_ds' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    before = logging.getLogger("huggingface_hub").level
    with pytest.raises(InputError, match="HF_HUB_OFFLINE=1 reads the datasets cache") as e:
        read_passages("hf:nowhere_ds:train")
    assert str(e.value).startswith("hf:nowhere_ds:train: cannot load dataset: Couldn't reach")
    assert logging.getLogger("huggingface_hub").level == before
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the real client, offline: no retries, one line
    r = run_cli("chunk", "--docs", "hf:nowhere_ds:train", "--out", str(tmp_path / "p.jsonl"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "cannot load dataset" in r.stderr and not (tmp_path / "p.jsonl").exists()


@pytest.mark.parametrize(
    "lines, line, field, message",
    [
        (['{"id": "a", "title": "t", "text": "x"}', '{"id": "b", "title": "t", "text": "x"'], 2, None, "malformed JSON"),
        (['{"id": "a", "title": "t"}'], 1, "text", "missing"),
        (['{"id": "a", "title": "t", "text": 3}'], 1, "text", "expected a string"),
        (['{"id": "a", "title": "t", "text": "x"}', '{"id": "a", "title": "t", "text": "y"}'], 2, "id", "duplicate id 'a'"),
        (['{"id": "a", "title": "t", "text": "   "}'], 1, "text", "empty"),
        # json.loads refuses these with ValueError or RecursionError, not JSONDecodeError
        (['{"id": "a", "title": "t", "text": "x"}', '{"id": "b", "title": "t", "text": "x", "n": ' + "9" * 5000 + "}"],
         2, None, "malformed JSON: an integer longer than 4300 digits"),
        (['{"id": "a", "title": "t", "text": "x", "deep": ' + "[" * 100_000 + "]" * 100_000 + "}"], 1, None,
         "malformed JSON: nested too deeply"),
        # parsed, a lone surrogate is a str UTF-8 cannot encode: it failed only when an output was written
        (['{"id": "a", "title": "t", "text": "one \\ud800 two"}'], 1, "text", "a lone surrogate escape"),
        (['{"id": "a", "title": "t", "text": "x", "meta": {"tags": ["ok", "\\uDC00"]}}'], 1, "meta.tags[1]", "a lone surrogate"),
    ],
)
def test_bad_passages(tmp_path, lines, line, field, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_passages(path)
    assert e.value.line == line and e.value.field == field and message in str(e.value)
    assert str(e.value).startswith(f"{path}:{line}:")


def test_escaped_surrogate_pairs_are_characters(tmp_path):
    path = tmp_path / "ok.jsonl"
    path.write_text('{"id": "a", "title": "t", "text": "smile \\ud83d\\ude00"}\n', encoding="utf-8")
    assert read_passages(path)[0].text == "smile \U0001F600"


def test_non_utf8(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"id": "a", "title": "t", "text": "ok"}\n{"id": "b", "title": "t", "text": "\xff\xfe"}\n')
    with pytest.raises(InputError, match="not valid UTF-8") as e:
        read_passages(path)
    assert e.value.line == 2


def test_qa_fields(tmp_path):
    good = {"id": 1, "question": "Who leads Valdoria?", "answers": ["Ana Kel"], "gold_passage_ids": ["p1"], "category": "single_doc"}
    path = write_jsonl(tmp_path / "qa.jsonl", [good, {**good, "id": 2, "category": "weird"}])
    with pytest.raises(InputError) as e:
        read_qa(path)
    assert (e.value.line, e.value.field) == (2, "category")
    path = write_jsonl(tmp_path / "qa2.jsonl", [{**good, "answers": "Ana Kel"}])
    with pytest.raises(InputError) as e:
        read_qa(path)
    assert e.value.field == "answers"
    assert read_qa(write_jsonl(tmp_path / "qa3.jsonl", [good]))[0].id == "1"
    for name, rec, field in (("lewisrag", {**good, "id": 3, "answers": ["Ana Kel", " "]}, "answers[1]"),
                             ("nq_open", {"question": "q?", "answer": [""]}, "answer[0]")):
        with pytest.raises(InputError, match="empty answer") as e:  # trivia_qa drops its empty aliases instead
            read_qa(write_jsonl(tmp_path / f"{name}.jsonl", [good if name == "lewisrag" else rec, rec]))
        assert (e.value.line, e.value.field) == (1 if name == "nq_open" else 2, field)


def test_atomic_writer_leaves_nothing_on_failure(tmp_path):
    def records():
        yield {"a": 1}
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        atomic_jsonl(tmp_path / "out.jsonl", records())
    assert list(tmp_path.iterdir()) == []


def test_cli_bad_input_exit_2(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "title": "t", "text": "x"}\n{"id": "a", "title": "t", "text": "y"}\n', encoding="utf-8")
    out = tmp_path / "idx"
    r = run_cli("index", "build", "--passages", str(path), "--encoder", "bm25", "--out", str(out))
    assert r.returncode == 2
    assert f"{path}:2: field 'id': duplicate id 'a'" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not out.exists() and not (tmp_path / "idx.partial").exists()


def test_parquet_passages_are_read_a_few_row_groups_at_a_time(tmp_path):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lewisrag.data.passages import RowGroups, open_passages

    rows = [{"id": f"p{i}", "title": f"T{i}", "text": f"text {i}", "embeddings": [float(i), 1.0]} for i in range(50)]
    path = tmp_path / "p.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=7)  # 8 groups, the last of 1 row
    table = open_passages(path)
    assert isinstance(table._groups, RowGroups) and len(table._groups.sizes) == 8
    assert [p.id for p in table] == [r["id"] for r in rows]
    assert [p.text for p in table[5:16]] == [f"text {i}" for i in range(5, 16)]  # across three groups
    assert table[49].title == "T49" and table[-1].id == "p49"
    np.testing.assert_array_equal(table.embeddings(6, 9)[:, 0], [6, 7, 8])
    # never the whole file decoded; a passage's text never decodes its vector
    assert all(len(g._cache) <= RowGroups.CACHED for g in [table._groups, *table._views.values()])
    assert all("embeddings" not in b.schema.names for b in table._views[("id", "title", "text")]._cache.values())
    # errors name the row across groups, as for JSONL
    rows[23]["text"] = " "
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=7)
    with pytest.raises(InputError, match=r"p\.parquet:24: field 'text': empty"):
        open_passages(path)
    rows[23]["text"], rows[40]["id"] = "fine", "p3"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=7)
    with pytest.raises(InputError, match=r"p\.parquet:41: field 'id': duplicate id 'p3' \(first on line 4\)"):
        open_passages(path)
