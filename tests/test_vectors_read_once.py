"""The stored vectors are decoded once by the commands that read all of them.

`index cut` searches every stored vector and `index build --reuse-embeddings` copies every one;
each checked the column in a pass of its own first, which at wiki_dpr's 21 M rows decodes 80 GB
of Parquet a second time (about 3 minutes on 2 cores). Both now check each block as they decode it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import run_main
from lewisrag.data.io import InputError
from lewisrag.data.passages import PassageTable, open_passages
from test_index_cut import corpus  # noqa: F401  (fixture: a tiny DPR checkpoint and its vectors in hub shards)
from test_real_data import encoders, wiki_dpr  # noqa: F401  (fixtures: a wiki_dpr save_to_disk folder, its encoder)
from test_shards_bad_input import SECOND, _shards


@pytest.fixture
def vector_rows(monkeypatch) -> list:
    """The number of rows of the embeddings column each read decodes, in order."""
    rows = []
    real = PassageTable._slice

    def counted(self, start, stop, columns=None):
        if columns is not None and list(columns) == ["embeddings"]:
            rows.append(stop - start)
        return real(self, start, stop, columns)

    monkeypatch.setattr(PassageTable, "_slice", counted)
    return rows


def test_index_cut_decodes_each_vector_once(corpus, vector_rows, tmp_path, monkeypatch, capsys):  # noqa: F811
    from lewisrag.index import cut

    monkeypatch.setattr(cut, "SEARCH_ROWS", 16)
    n = len(corpus["passages"])
    code, out, err = run_main(monkeypatch, capsys, "index", "cut", "--passages", corpus["shards"], "--encoder", corpus["dpr"],
                              "--questions", corpus["qa"], "--out", tmp_path / "cut", "--max-passages", 20, "--top", 2, "--no-gold",
                              "--device", "cpu", "--json")
    assert code == 0, err
    assert json.loads(out)["passages"] == 20
    # the search's n rows, the width from row 1, and the 8 spot-checked rows one at a time (the cut's
    # own rows are taken by row group, not sliced)
    assert sum(vector_rows) == n + 1 + 8, vector_rows


def test_index_build_reuse_embeddings_decodes_each_vector_once(wiki_dpr, encoders, vector_rows, tmp_path,  # noqa: F811
                                                               monkeypatch, capsys):
    n = len(open_passages(wiki_dpr["folder"]))
    vector_rows.clear()
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", wiki_dpr["folder"], "--encoder",
                            encoders["right"], "--out", tmp_path / "idx", "--reuse-embeddings", "--shard-size", 16)
    assert code == 0, err
    assert sum(vector_rows) == n + 1 + 8, vector_rows


def test_rows_read_in_order_are_not_checked_again(corpus, vector_rows):  # noqa: F811
    """The pass `embedding_dim` makes (for callers that refuse a damaged column before they begin)
    starts where reads in row order stopped, and rows read at random are checked but not counted."""
    table = open_passages(corpus["shards"])
    table.embeddings_at([50])
    table.embeddings(0, 25)
    vector_rows.clear()
    assert table.embedding_dim() == corpus["vectors"].shape[1]
    assert sum(vector_rows) == len(table) - 25
    vector_rows.clear()
    assert table.embedding_dim() == corpus["vectors"].shape[1]
    np.testing.assert_array_equal(table.embeddings(), corpus["vectors"])
    assert not vector_rows[:-1] and vector_rows[-1] == len(table)  # checked: decoded without the check


def test_a_bad_vector_is_named_by_whichever_read_meets_it(corpus, tmp_path):  # noqa: F811
    vectors = corpus["vectors"].copy()
    vectors[40, 0] = np.nan
    table = open_passages(_shards(tmp_path / "nq", corpus["passages"], vectors.tolist()))
    assert table.vector_dim() == vectors.shape[1]  # the width alone: no pass
    np.testing.assert_array_equal(table.embeddings(0, 40), vectors[:40])
    message = rf"^{tmp_path / 'nq' / SECOND}:11: field 'embeddings': not a finite number as float32"
    with pytest.raises(InputError, match=message):
        table.embeddings_at([40])
    with pytest.raises(InputError, match=message):
        table.embeddings(32, 48)
    with pytest.raises(InputError, match=message):
        table.embedding_dim()
