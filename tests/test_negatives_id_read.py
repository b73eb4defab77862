"""Mined hard negatives over a Parquet table (`negatives._first_negative`) pick what they pick over a list of
the passages; a gold passage that is no hit is found by the id column alone (`PassageTable.ids_at`), not by
decoding every row's title and text (most of a wiki_dpr row group)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lewisrag.data import passages as P
from lewisrag.data.records import QAExample
from lewisrag.training import negatives

GROUPS, GROUP_ROWS = 8, 16
N = GROUPS * GROUP_ROWS


@pytest.fixture
def decoded(monkeypatch):
    """The columns each Parquet row-group read decoded (`RowGroups._read`), one entry per read."""
    seen: list[tuple[str, ...]] = []
    real = P.RowGroups._read

    def spy(self, i, columns):
        seen.append(tuple(columns))
        return real(self, i, columns)

    monkeypatch.setattr(P.RowGroups, "_read", spy)
    return seen


def _parquet(tmp_path, ids) -> P.PassageTable:
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"id": ids, "title": [f"Entity {i}" for i in range(N)],
                             "text": [f"entity{i} lives in city{i % 7}" for i in range(N)]}), path, row_group_size=GROUP_ROWS)
    return P.open_table(path)


@pytest.mark.parametrize("integer_ids", [False, True])
def test_first_negative_finds_gold_by_ids_alone_and_picks_what_a_list_picks(tmp_path, decoded, monkeypatch,
                                                                             integer_ids):
    table = _parquet(tmp_path, list(range(100, 100 + N)) if integer_ids else [f"p{i}" for i in range(N)])
    pid = [p.id for p in table]
    examples = [QAExample("1", "q?", ["a"], [pid[5]]), QAExample("2", "q?", ["a"], [pid[120], pid[17]]),
                QAExample("3", "q?", ["a"], [pid[64]]), QAExample("4", "q?", ["a"], ["elsewhere"])]
    ranked = [[5, 99, 33], [120, 17, 127, 2], [64], [80, 5]]  # across groups, a repeat, one ranked only gold
    monkeypatch.setattr(negatives, "READ_ROWS", 3)  # the hits read a few rows at a time too
    expected = negatives._first_negative(examples, ranked, list(table))
    assert expected == [99, 127, None, 80]
    decoded.clear()
    assert negatives._first_negative(examples, ranked, table) == expected
    assert ("id",) in decoded  # "elsewhere", no hit, looked up in the id column
    assert len(decoded) - decoded.count(("id",)) <= 2 * GROUPS  # the hits' texts: about a decode per group


def test_ids_at_is_the_ids_of_take():
    """In the order asked, repeats and negative rows included; an Arrow table's integer ids as strings."""
    batches = [pa.record_batch({"id": pa.array([3 * k + i for i in range(3)], pa.int64()),
                                "text": [f"t{k}{i}" for i in range(3)]}) for k in range(4)]
    table = P.PassageTable(pa.Table.from_batches(batches), "mem")
    rows = [11, 0, 4, 4, 7, 2, -1]
    assert table.ids_at(rows) == [p.id for p in table.take(rows)] == ["11", "0", "4", "4", "7", "2", "11"]
    assert table.ids_at([]) == []
    with pytest.raises(IndexError, match="passage row 12 out of range"):
        table.ids_at([0, 12])
    assert table.head(5).ids_at([4]) == ["4"]
    with pytest.raises(IndexError):
        table.head(5).ids_at([5])
