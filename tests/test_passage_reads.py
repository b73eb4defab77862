"""Reading passages from tables in bulk (`PassageTable.take`, DPR training's steps and negatives), numbered
shards named with a hash, `lewisrag chunk` streaming, and errors in a save_to_disk folder naming its file."""

from __future__ import annotations

import json
import warnings

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import run_main
from lewisrag.data import chunking
from lewisrag.data import io as data_io
from lewisrag.data import passages as P
from lewisrag.data.io import InputError
from lewisrag.data.records import Passage, QAExample

GROUPS, GROUP_ROWS = 8, 16  # a Parquet file of 8 row groups


def _corpus(n: int = GROUPS * GROUP_ROWS) -> tuple[list[str], list[str], list[str]]:
    ids = [f"p{i}" for i in range(n)]
    titles = [f"Entity {i}" for i in range(n)]
    texts = [f"entity{i} lives in city{i % 7} and works at firm{i % 5}" for i in range(n)]
    return ids, titles, texts


@pytest.fixture
def parquet(tmp_path):
    ids, titles, texts = _corpus()
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"id": ids, "title": titles, "text": texts}), path, row_group_size=GROUP_ROWS)
    return path


@pytest.fixture
def decodes(monkeypatch):
    """The row groups decoded (`RowGroups._read`), one entry per decode."""
    seen: list[int] = []
    real = P.RowGroups._read

    def spy(self, i, columns):
        seen.append(i)
        return real(self, i, columns)

    monkeypatch.setattr(P.RowGroups, "_read", spy)
    return seen


# a batch's rows: unsorted, across every group, back and forth, with repeats and a negative row
ROWS = [5, 120, 17, 99, 33, 64, 2, 127, 80, 48, 5, 113, 20, 70, -1, 40, 90, 1]


def test_take_decodes_each_row_group_once_and_reads_what_rows_read(parquet, decodes):
    """`take` decoded a row group for almost every row of a random batch (two are kept decoded):
    `train dpr` over a cut corpus read each step's passages so, twice each."""
    table = P.open_table(parquet)
    one_by_one = [table[r] for r in ROWS]
    decodes.clear()
    taken = table.take(ROWS)
    assert taken == one_by_one  # the same passages, in the order asked, repeats included
    assert len(decodes) <= GROUPS == len({r % (GROUPS * GROUP_ROWS) // GROUP_ROWS for r in ROWS})
    assert len(decodes) == len(set(decodes))  # each group once
    assert P.passages_at(table, ROWS) == one_by_one == P.passages_at(list(table), ROWS)
    with pytest.raises(IndexError):
        table.take([0, GROUPS * GROUP_ROWS])


def test_take_over_arrow_batches_and_integer_ids():
    """A memory-mapped or in-memory table (a save_to_disk folder, an index's store) reads the same way."""
    batches = [pa.record_batch({"id": pa.array([3 * k + i for i in range(3)], pa.int64()), "text": [f"t{k}{i}" for i in range(3)]})
               for k in range(4)]
    table = P.PassageTable(pa.Table.from_batches(batches), "mem")
    rows = [11, 0, 4, 4, 7, 2]
    assert table.take(rows) == [table[r] for r in rows]
    assert table.take(rows)[0] == Passage("11", "", "t32")
    assert table.take([]) == []


def _tiny_dpr(**kw):
    from lewisrag.training.dpr import DPRTrainConfig

    return DPRTrainConfig(vocab_size=300, hidden_size=16, layers=1, heads=2, device="cpu", batch_size=8, seed=3, **kw)


def _examples(n: int):
    return [QAExample(f"q{i}", f"where does entity{i} live and work?", ["x"], [f"p{i}"],
                      hard_negative_ids=[f"p{(i * 7 + 3) % n}", f"p{(i * 13 + 5) % n}"]) for i in range(0, n, 3)]


@pytest.mark.parametrize("source", ["given", "bm25"])
def test_dpr_steps_read_no_row_group(parquet, decodes, tmp_path, source):
    """Each step read its 2B passages one at a time, twice each, from the table (a row group decoded
    for almost each): the steps now read none, the gold passages and hard negatives read once before."""
    from lewisrag.training.dpr import train_dpr

    examples, counts = _examples(GROUPS * GROUP_ROWS), []
    for steps in (1, 5):
        decodes.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            train_dpr(_tiny_dpr(steps=steps, hard_negatives_from=source), examples, P.open_table(parquet),
                      tmp_path / f"{source}{steps}")
        counts.append(len(decodes))
    assert counts[0] == counts[1]  # four more steps, no more decoding


def test_dpr_trains_on_a_table_as_on_a_list(parquet, tmp_path):
    """The same passages in the same order: losses and weights equal digit for digit."""
    from lewisrag.index.encoders import DPRCheckpoint, state_fingerprint
    from lewisrag.training.dpr import train_dpr

    examples, out = _examples(GROUPS * GROUP_ROWS), []
    for name, passages in (("table", P.open_table(parquet)), ("list", [Passage(*p) for p in zip(*_corpus())])):
        losses = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            train_dpr(_tiny_dpr(steps=3, hard_negatives_from="bm25", self_negatives_at=0.5), examples, passages,
                      tmp_path / name, on_step=lambda _, loss: losses.append(loss))
        ckpt = DPRCheckpoint.load(tmp_path / name)
        out.append((losses, state_fingerprint(ckpt.question_encoder), state_fingerprint(ckpt.ctx_encoder)))
    assert out[0] == out[1]


def test_mined_negatives_read_the_ranked_ids_once(parquet, decodes):
    """The first non-gold of each question's BM25 hits was read row by row: a row group decoded per
    question. Now one read of all the hits' ids (and BM25's own pass over the texts)."""
    from lewisrag.training.negatives import mine_hard_negatives

    table = P.open_table(parquet)
    n = GROUPS * GROUP_ROWS
    examples = [QAExample(f"q{i}", f"entity{i} city{i % 7}", ["x"], [f"p{i}"]) for i in ((k * 37) % n for k in range(40))]
    expected = mine_hard_negatives(examples, list(table))
    decodes.clear()
    assert mine_hard_negatives(examples, table) == expected
    assert len(decodes) <= 2 * GROUPS  # BM25's index of the texts, then the hits' ids: each group at most once each


# --- numbered shards named with a hash ------------------------------------------------------------


def _shard(path):
    pq.write_table(pa.table({"id": [path.name], "text": ["some text"]}), path)


def test_a_missing_hash_named_shard_is_named(tmp_path):
    """push_to_hub names shards `train-00000-of-00003-<hash>.parquet`: a folder missing one read the
    others without a word."""
    for name in ("train-00000-of-00003-6a9f3c2e1b7d4e5f.parquet", "train-00002-of-00003-0b1c2d3e4f5a6b7c.parquet"):
        _shard(tmp_path / name)
    with pytest.raises(InputError) as e:
        P.open_table(tmp_path)
    assert str(e.value) == (f"{tmp_path}/train-00001-of-00003-*.parquet: missing: the folder holds 2 of the 3 shards its "
                            "files are numbered for (an unfinished download?)")
    _shard(tmp_path / "train-00001-of-00003-1111aaaa2222bbbb.parquet")
    assert len(P.open_table(tmp_path)) == 3
    _shard(tmp_path / "train-00001-of-00003-3333cccc4444dddd.parquet")  # two uploads' files of shard 1
    with pytest.raises(InputError, match="numbered as the same shard as train-00001-of-00003-1111aaaa2222bbbb.parquet"):
        P.open_table(tmp_path)


# --- lewisrag chunk -------------------------------------------------------------------------------


def _docs(tmp_path, n: int = 6):
    docs = [{"id": f"d{i}", "title": f"T{i}", "text": " ".join(f"w{i}x{k}" for k in range(2 + i))} for i in range(n)]
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path, docs


def test_chunk_streams_its_passages_to_the_file(tmp_path, monkeypatch, capsys):
    """`lewisrag chunk` held every passage in a list before writing (1.1 GB for 3 M small ones): the
    writer now gets them as they are cut. The file and the counts are what they were."""
    path, docs = _docs(tmp_path)
    cut, at_first = [0], []
    real_text, real_write = chunking.chunk_text, data_io.write_jsonl

    def chunk_text(text, words=100):
        cut[0] += 1
        return real_text(text, words)

    def write_jsonl(out, records):
        def watched():
            for rec in records:
                at_first.append(cut[0])
                yield rec
        return real_write(out, watched())

    monkeypatch.setattr(chunking, "chunk_text", chunk_text)
    monkeypatch.setattr(data_io, "write_jsonl", write_jsonl)
    code, out, err = run_main(monkeypatch, capsys, "chunk", "--docs", path, "--out", tmp_path / "p.jsonl", "--words", "3",
                              "--json")
    assert code == 0, err
    assert at_first[0] == 1  # the first passage written after one document was cut, not all of them
    expected = [p.to_dict() for p in chunking.chunk_documents([Passage(d["id"], d["title"], d["text"]) for d in docs], 3)]
    assert (tmp_path / "p.jsonl").read_bytes() == "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in expected).encode()
    assert json.loads(out) == {"out": str(tmp_path / "p.jsonl"), "words": 3, "documents": len(docs),
                               "passages": len(expected), "longest_chars": max(len(r["text"]) for r in expected)}


def test_chunk_failing_midway_writes_nothing(tmp_path, monkeypatch, capsys):
    path, _ = _docs(tmp_path)
    real_text, calls = chunking.chunk_text, [0]

    def chunk_text(text, words=100):
        calls[0] += 1
        if calls[0] == 4:
            raise InputError(path, "damaged", line=4, field="text")
        return real_text(text, words)

    monkeypatch.setattr(chunking, "chunk_text", chunk_text)
    code, _, err = run_main(monkeypatch, capsys, "chunk", "--docs", path, "--out", tmp_path / "sub" / "p.jsonl")
    assert code == 2 and "docs.jsonl:4: field 'text': damaged" in err
    assert not (tmp_path / "sub").exists()


# --- a save_to_disk folder's errors name its Arrow file ---------------------------------------------


def test_an_error_in_a_saved_dataset_names_its_arrow_file_and_row(tmp_path):
    """Errors named the folder and a row across all its files (`saved:2501`): a user opens a file."""
    datasets = pytest.importorskip("datasets")
    ids = [str(i) for i in range(30)]
    ids[25] = ""
    datasets.Dataset.from_dict({"id": ids, "text": ["t"] * 30}).save_to_disk(str(tmp_path / "saved"), num_shards=3)
    with pytest.raises(InputError) as e:
        P.open_table(tmp_path / "saved")
    assert str(e.value) == f"{tmp_path}/saved/data-00002-of-00003.arrow:6: field 'id': empty"
    ids[25], ids[12] = "25", "3"
    datasets.Dataset.from_dict({"id": ids, "text": ["t"] * 30}).save_to_disk(str(tmp_path / "dup"), num_shards=3)
    with pytest.raises(InputError) as e:
        P.open_table(tmp_path / "dup")
    assert str(e.value) == (f"{tmp_path}/dup/data-00001-of-00003.arrow:3: field 'id': duplicate id '3' (first on line 4 "
                            f"of {tmp_path}/dup/data-00000-of-00003.arrow)")
