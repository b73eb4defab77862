"""`index tune` on an index whose FAISS file holds a row number damaged past the passages: its searches
go through the same check as every other search of the index (`DenseIndex._known_rows`), so the
damage is one line naming index.faiss and `lewisrag index verify`, with or without --rerank-depth."""

from __future__ import annotations

import json

import pytest

from conftest import run_main
from test_audit_index_load import _damage_a_row_number, _one_line, _questions_only, _variant, flat  # noqa: F401
from test_index import dpr_ckpt  # noqa: F401  (a module fixture: the tiny DPR checkpoint)


@pytest.mark.parametrize("rerank", [["--rerank-depth", "60"], []])
def test_index_tune_on_a_damaged_row_number_is_one_line(flat, tiny_corpus, tmp_path, rerank, monkeypatch, capsys):  # noqa: F811
    """With --rerank-depth, tuning's re-ranking read the stored vector of row 5000 of 60 (IndexError,
    a traceback); without it, the damaged row counted as a miss and a setting was recorded."""
    index = _variant(flat, tmp_path, "damaged", factory="IVF4,Flat", manifest={"faiss_factory": "IVF4,Flat"})
    before = (index / "manifest.json").read_text()
    _damage_a_row_number(index, 5000)
    questions = _questions_only(tiny_corpus, tmp_path)
    code, _, err = run_main(monkeypatch, capsys, "index", "tune", "--index", index, "--questions", questions,
                            "--n-docs", "60", *rerank)  # every passage: the damaged row is found
    _one_line(code, err, "index.faiss", "found row 5000, past the index's 60 passages", "lewisrag index verify")
    assert (index / "manifest.json").read_text() == before  # nothing recorded


def test_index_tune_with_rerank_depth_on_a_sound_index_still_tunes(flat, tiny_corpus, tmp_path, monkeypatch, capsys):  # noqa: F811
    index = _variant(flat, tmp_path, "sound", factory="IVF4,Flat", manifest={"faiss_factory": "IVF4,Flat"})
    questions = _questions_only(tiny_corpus, tmp_path)
    code, out, err = run_main(monkeypatch, capsys, "index", "tune", "--index", index, "--questions", questions,
                              "--n-docs", "5", "--rerank-depth", "20", "--json")
    assert code == 0, err
    assert json.loads(out)["rerank_depth"] == 20
