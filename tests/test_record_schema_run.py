"""The counts report.md's Run section quotes from the base preset's stage records (questions read in
RUN/stages/data.json, passages indexed in index_a.json / index_b.json) are checked when `--resume`
reads the records back, as every other field the report takes: a damaged one is refused by file and
field before anything is written, not shown as "n/a"."""

from __future__ import annotations

from pathlib import Path

import pytest

from lewisrag.data.io import InputError
from lewisrag.experiments.record_schema import check_stage_record

DATA = {"seconds": 1.0, "dir": "data", "n_train": 8, "n_dev": 4, "n_test": 4, "gold_not_indexed": {"train": 0, "dev": 0}}
INDEX = {"seconds": 1.0, "dir": "index_a", "n_passages": 100, "content_hash": "ab", "embeddings": "encoded"}


def test_the_records_a_run_writes_pass():
    check_stage_record(Path("stages/data.json"), "data", DATA)
    check_stage_record(Path("stages/data.json"), "data", {"seconds": 1.0, "dir": "data"})  # the counts are optional
    check_stage_record(Path("stages/index_a.json"), "index_a", INDEX)
    check_stage_record(Path("stages/index_b.json"), "index_b", INDEX | {"dir": "index_b"})


@pytest.mark.parametrize("name,record,field", [
    ("data", DATA | {"n_train": "8"}, "n_train"),
    ("data", DATA | {"n_test": -1}, "n_test"),
    ("data", DATA | {"n_questions_b": 2.5}, "n_questions_b"),
    ("index_a", INDEX | {"n_passages": None}, "n_passages"),
    ("index_b", INDEX | {"n_passages": True}, "n_passages"),
])
def test_a_damaged_count_is_refused_by_file_and_field(name, record, field):
    with pytest.raises(InputError) as e:
        check_stage_record(Path(f"stages/{name}.json"), name, record)
    assert e.value.field == field
    assert "expected a whole number from 0 to 2**53" in e.value.message and "damaged" in e.value.message
