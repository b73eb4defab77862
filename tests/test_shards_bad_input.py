"""Damaged folders of Parquet shards (wiki_dpr's layout) given to `index cut` and `reproduce --preset
base`: every one a one-line error naming the shard, the row in it and the field, exit 2, and no output.

The shards are tiny_corpus's 60 passages in two files of 30, as the hub names them; the row damaged
is the 41st passage, the 11th row of the second shard.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import run_main
from lewisrag.data.io import InputError
from lewisrag.data.passages import open_passages
from lewisrag.data.records import read_passages
from test_index_cut import corpus  # noqa: F401  (fixture: a tiny DPR checkpoint and its vectors)
from test_reproduce_base import assets  # noqa: F401  (fixture: a tiny DPR pair, BART folder and QA files)

SECOND = "train-00001-of-00002.parquet"


def _shards(folder: Path, passages, vectors, value_type=pa.float32()) -> Path:
    """`passages` and `vectors` (a list per row, None for a missing one) as two shards of wiki_dpr's schema."""
    folder.mkdir(parents=True)
    schema = pa.schema([("id", pa.string()), ("text", pa.string()), ("title", pa.string()),
                        ("embeddings", pa.list_(value_type))])
    rows = [{"id": p.id, "text": p.text, "title": p.title, "embeddings": v} for p, v in zip(passages, vectors)]
    for k, part in enumerate((rows[:30], rows[30:])):
        pq.write_table(pa.Table.from_pylist(part, schema=schema), folder / f"train-{k:05d}-of-00002.parquet")
    return folder


def _vectors(n: int = 60, dim: int = 8) -> list:
    return np.random.default_rng(0).standard_normal((n, dim)).tolist()


def test_every_entry_named_parquet_is_a_shard(tiny_corpus, tmp_path, monkeypatch):
    """A shard that is a broken link (a hub snapshot whose blob was not downloaded) or a folder was
    left out of the corpus in silence, and so was one named .PARQUET (a single .PARQUET file is read)."""
    passages = read_passages(tiny_corpus["passages"])
    folder = _shards(tmp_path / "nq", passages, _vectors())
    (folder / "README.md").write_text("not a shard")  # other files are not passages
    missing = folder / SECOND
    kept = missing.rename(tmp_path / "second.parquet")
    missing.symlink_to(tmp_path / "blobs" / "0123abcd")
    with pytest.raises(InputError, match=rf"^{missing}: cannot read Parquet: .*No such file or directory$"):
        open_passages(folder)
    missing.unlink()
    missing.mkdir()
    with pytest.raises(InputError, match=rf"^{missing}: cannot read Parquet: .*is a directory$"):
        open_passages(folder)
    missing.rmdir()
    kept.rename(folder / "train-00001-of-00002.PARQUET")
    assert len(open_passages(folder)) == 60
    real = Path.iterdir
    monkeypatch.setattr(Path, "iterdir", lambda p: (_ for _ in ()).throw(PermissionError(13, "Permission denied"))
                        if p == folder else real(p))  # a folder the user cannot list (root can: no chmod test)
    with pytest.raises(InputError, match=rf"^{folder}: cannot list the folder: Permission denied$"):
        open_passages(folder)


@pytest.mark.parametrize("value, value_type", [(float("nan"), pa.float32()), (float("-inf"), pa.float32()),
                                               (1e39, pa.float64())])  # past float32's range: inf once read
def test_a_stored_vector_that_is_not_finite_is_named(value, value_type, tiny_corpus, tmp_path):
    """A NaN ranks first in every search: the cut kept that passage for every question, in silence."""
    vectors = _vectors()
    vectors[40][3] = value
    folder = _shards(tmp_path / "nq", read_passages(tiny_corpus["passages"]), vectors, value_type)
    table = open_passages(folder)
    with pytest.raises(InputError, match=rf"^{folder / SECOND}:11: field 'embeddings': not a finite number as float32"):
        table.embedding_dim()
    assert open_passages(folder, limit=40).embedding_dim() == 8  # past the rows read: not checked


@pytest.mark.parametrize("row", [0, 40])
def test_an_empty_vector_is_named_at_its_own_row(row, tiny_corpus, tmp_path):
    """An empty first vector was named at row 2 ("8 values where the first row has 0")."""
    vectors = _vectors()
    vectors[row] = []
    folder = _shards(tmp_path / "nq", read_passages(tiny_corpus["passages"]), vectors)
    where = f"{folder / 'train-00000-of-00002.parquet'}:1" if row == 0 else f"{folder / SECOND}:11"
    with pytest.raises(InputError, match=rf"^{where}: field 'embeddings': an empty vector$"):
        open_passages(folder).embedding_dim()


def test_index_cut_refuses_a_nan_vector_before_writing(corpus, tmp_path, monkeypatch, capsys):  # noqa: F811
    vectors = corpus["vectors"].copy()
    vectors[40, 0] = np.nan
    folder = _shards(tmp_path / "nq", corpus["passages"], vectors.tolist())
    out = tmp_path / "cut"
    code, _, err = run_main(monkeypatch, capsys, "index", "cut", "--passages", folder, "--encoder", corpus["dpr"],
                            "--questions", corpus["qa"], "--max-passages", 20, "--top", 2, "--no-gold", "--device", "cpu", "--out", out)
    assert code == 2 and err.count("\n") == 1, err
    assert f"{folder / SECOND}:11: field 'embeddings': not a finite number as float32" in err
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if p.startswith(".cut")]


def _damaged_hub_shards(assets, tmp_path: Path, row: int, vector) -> Path:  # noqa: F811
    """The fixture's hub shards (vectors made by its context encoder) with the vector of `row` replaced."""
    vectors = assets["vectors"].tolist()
    vectors[row] = vector
    return _shards(tmp_path / "nq", open_passages(assets["shards"]), vectors)


@pytest.mark.parametrize("vector, message", [(None, "missing"), ("short", "31 values where the first row has 32"),
                                             ("nan", "not a finite number as float32")])
def test_reproduce_base_refuses_damaged_stored_vectors_before_any_stage(vector, message, assets, tmp_path,  # noqa: F811
                                                                         monkeypatch, capsys):
    """A missing or short vector among the passages indexed was taken for vectors another encoder made,
    and the index encoded afresh in silence; a NaN failed at index_a, the run folder half begun. Past
    --max-passages a damaged vector is not read."""
    from lewisrag.experiments.base import _stored_vectors

    good = assets["vectors"][40].tolist()
    vector = {"short": good[:31], "nan": [float("nan")] + good[1:]}.get(vector, vector)
    folder = _damaged_hub_shards(assets, tmp_path, 40, vector)
    with pytest.raises(InputError, match=rf"^{folder / SECOND}:11: field 'embeddings': {message}"):
        _stored_vectors(open_passages(folder, 50), assets["context"])
    out = tmp_path / "run"
    flags = ["reproduce", "--preset", "base", "--out", out, "--question-encoder", assets["question"], "--context-encoder",
             assets["context"], "--generator", assets["bart"], "--train", assets["train"], "--dev", assets["dev"],
             "--test", assets["test"], "--passages", folder, "--steps", 2, "--max-train", 16]
    code, _, err = run_main(monkeypatch, capsys, *flags, "--max-passages", 50)
    assert code == 2 and len(err.strip().splitlines()) == 1 and f"{folder / SECOND}:11: field 'embeddings': {message}" in err, err
    assert not out.exists()
    assert _stored_vectors(open_passages(folder, 40), assets["context"]) == (True, None)


def test_shards_that_differ_only_in_how_their_writers_name_lists_are_one_table(tiny_corpus, tmp_path):
    """One shard with required columns and its vectors' values named "item" (as older pyarrow wrote
    them) and required, the other as the hub's are read: the same table, not "columns differ"."""
    passages = read_passages(tiny_corpus["passages"])
    vectors = np.asarray(_vectors(), np.float32)
    folder = _shards(tmp_path / "nq", passages, vectors.tolist())
    strict = pa.schema([pa.field("id", pa.string(), nullable=False), ("text", pa.string()), ("title", pa.string()),
                        pa.field("embeddings", pa.list_(pa.field("item", pa.float32(), nullable=False)), nullable=False)])
    pq.write_table(pq.read_table(folder / SECOND).cast(strict), folder / SECOND, use_compliant_nested_type=False)
    assert pq.read_schema(folder / SECOND).field("embeddings").type.value_field.name == "item"
    table = open_passages(folder)
    assert list(table) == passages
    np.testing.assert_array_equal(table.embeddings(), vectors)
    np.testing.assert_array_equal(table.embeddings(20, 40), vectors[20:40])  # a read across the two shards
    assert table.arrow_take([5, 45], embeddings=True).column("embeddings").to_pylist() == vectors[[5, 45]].tolist()
    other = pa.schema([("id", pa.string()), ("text", pa.string()), ("title", pa.string()),
                       ("embeddings", pa.list_(pa.float64()))])
    pq.write_table(pq.read_table(folder / SECOND).cast(other), folder / SECOND)
    with pytest.raises(InputError, match=r"embeddings: list<element: double>\) differ from those of"):
        open_passages(folder)  # values of another type are still another table


def test_a_missing_numbered_shard_is_named(tiny_corpus, tmp_path, monkeypatch, capsys):
    """A download that stopped short left `train-00000-of-00002.parquet` out: the folder was read as the
    shards it held, 30 of the 60 passages, without a word."""
    folder = _shards(tmp_path / "nq", read_passages(tiny_corpus["passages"]), _vectors())
    (folder / "train-00000-of-00002.parquet").unlink()
    with pytest.raises(InputError, match=r"train-00000-of-00002.parquet: missing: the folder holds 1 of the 2 shards"):
        open_passages(folder)
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", folder, "--encoder", "bm25",
                            "--out", tmp_path / "idx")
    assert code == 2 and err.count("\n") == 1 and f"{folder / 'train-00000-of-00002.parquet'}: missing" in err, err
    assert not (tmp_path / "idx").exists()
    (folder / SECOND).rename(folder / "part-b.parquet")  # shards named otherwise are read as they are
    assert len(open_passages(folder)) == 30


def test_reuse_embeddings_over_shards_without_vectors_names_the_folder(corpus, tmp_path, monkeypatch, capsys):  # noqa: F811
    """The message named only the flag, and listed every accepted input but a folder of shards."""
    folder = _shards(tmp_path / "nq", corpus["passages"], _vectors())
    for f in folder.glob("*.parquet"):
        pq.write_table(pq.read_table(f).drop_columns(["embeddings"]), f)
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", folder, "--encoder", corpus["dpr"],
                            "--out", tmp_path / "idx", "--reuse-embeddings")
    assert code == 2 and err.count("\n") == 1, err
    assert f"{folder}: field 'embeddings': missing: --reuse-embeddings reads the passages' stored vectors" in err
    assert not (tmp_path / "idx").exists()
