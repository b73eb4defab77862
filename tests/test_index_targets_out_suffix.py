"""`index targets --out` took any name but always wrote JSON Lines: `--out tg.json` read back as
"malformed JSON: Extra data", `--out tg.parquet` as "magic bytes not found". A --out that is not
.jsonl is refused up front, as `chunk` refuses one, before any search."""

from __future__ import annotations

import pytest

import lewisrag.index as index_module
from conftest import run_main
from lewisrag.data.records import read_qa
from test_index_targets import inputs  # noqa: F401  (a fixture: a BM25 index and CuratedTrec questions)


@pytest.mark.parametrize("name", ["tg.json", "tg.parquet", "tg.csv", "tg"])
def test_an_out_that_is_not_jsonl_is_refused_before_any_search(name, inputs, tmp_path, monkeypatch, capsys):  # noqa: F811
    index, ct = inputs

    def no_search(*args, **kwargs):
        raise AssertionError("searched")

    monkeypatch.setattr(index_module, "open_retriever", no_search)
    out = tmp_path / name
    code, stdout, err = run_main(monkeypatch, capsys, "index", "targets", "--index", index, "--questions", ct, "--out", out)
    assert code == 2 and stdout == "", err
    assert err.strip().splitlines() == [f"error: {out}: field '--out': the output must be a .jsonl file"], err
    assert not out.exists()


def test_a_jsonl_out_in_any_case_is_written_and_reads_back(inputs, tmp_path, monkeypatch, capsys):  # noqa: F811
    index, ct = inputs
    out = tmp_path / "TG.JSONL"
    code, _, err = run_main(monkeypatch, capsys, "index", "targets", "--index", index, "--questions", ct, "--out", out)
    assert code == 0, err
    assert read_qa(out)[0].answers == ["Churchill"]
