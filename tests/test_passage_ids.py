"""The passage-id check of tables (`PassageTable._first_duplicate`): hashes first, ids compared only
where two hashes meet, and memory that does not grow with the ids' size.

pyarrow's distinct count held the whole id column and its hash table: about 80 bytes a passage,
1.7 GB while wiki_dpr's 21 M passages were opened. The check now holds one 8-byte hash a row.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lewisrag.data import passages as passages_module
from lewisrag.data.io import InputError
from lewisrag.data.passages import open_passages


def _parquet(path, ids, row_group_size=3):
    pq.write_table(pa.table({"id": ids, "text": [f"text {i}" for i in range(len(ids))]}), path, row_group_size=row_group_size)
    return path


@pytest.mark.parametrize("collide", [False, True], ids=["hashes", "every-hash-colliding"])
@pytest.mark.parametrize("ids, expected", [
    (["a", "b", "c", "d", "e", "f", "g"], None),
    (["a", "b", "c", "d", "b", "a", "c"], ":5: field 'id': duplicate id 'b' (first on line 2)"),
    ([10, 20, 30, 40, 50, 20, 10], ":6: field 'id': duplicate id '20' (first on line 2)"),
    ([2**63 + 5, 5, 7], None),  # uint64 ids past int64's range hash alike with 5 only as a collision
    (["a", None, "b", None, "c"], ":2: field 'id': missing"),  # nulls are not duplicates of each other
], ids=["distinct", "strings", "integers", "uint64", "nulls"])
def test_duplicates_are_found_by_exact_comparison(ids, expected, collide, tmp_path, monkeypatch):
    """With every hash equal (`collide`), every row is a candidate: the exact comparison alone decides,
    and it names the same row and first use as the hashes do."""
    if collide:
        for module in (passages_module.schema, passages_module.table):  # each reads its own name
            monkeypatch.setattr(module, "_id_hashes", lambda chunk: np.zeros(len(chunk), np.int64))
    table = pa.table({"id": pa.array(ids, pa.uint64() if ids[0] == 2**63 + 5 else None),
                      "text": [f"text {i}" for i in range(len(ids))]})
    path = tmp_path / "p.parquet"
    pq.write_table(table, path, row_group_size=3)  # ids read a row group at a time
    if expected is None:
        assert len(open_passages(path)) == len(ids)
    else:
        with pytest.raises(InputError) as e:
            open_passages(path)
        assert str(e.value) == f"{path}{expected}"


def test_a_duplicate_past_the_limit_is_not_read(tmp_path):
    path = _parquet(tmp_path / "p.parquet", ["a", "b", "c", "d", "a"])
    assert len(open_passages(path, limit=4)) == 4
    with pytest.raises(InputError, match="duplicate id 'a'"):
        open_passages(path)


def test_the_check_holds_no_copy_of_the_ids(tmp_path):
    """Arrow memory at its peak while a table is opened grows by under 4 bytes a row from 200,000
    to 800,000 rows of 15-character ids (the old check: about 100)."""
    peaks = {}
    for n in (200_000, 800_000):
        path = tmp_path / f"p{n}.parquet"
        pq.write_table(pa.table({"id": [f"passage-{i:07d}" for i in range(n)], "text": pa.array(["x"] * n)}), path,
                       row_group_size=16_384)
        # the text checks read SCAN_ROWS rows at a time: a window smaller than either table
        code = ("import pyarrow as pa; from lewisrag.data import passages; passages.table.SCAN_ROWS = 16_384; "
                f"passages.open_passages({str(path)!r}); print(pa.default_memory_pool().max_memory())")
        peaks[n] = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert (peaks[800_000] - peaks[200_000]) / 600_000 < 4, peaks
