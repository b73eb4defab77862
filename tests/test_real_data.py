"""Real data in: QA files in the hub's schemas (nq_open, trivia_qa, web_questions, a
field mapping), passages in wiki_dpr's schema as Arrow tables, and `index build --reuse-embeddings`.

Every fixture is built here in the hub's exact schemas (no network): Parquet through pyarrow, the
wiki_dpr folder through `datasets.save_to_disk`, its embeddings made by a tiny DPR checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import run_main, write_jsonl
from lewisrag.data import passages as passage_tables
from lewisrag.data.io import InputError, derived_id
from lewisrag.data.passages import PassageTable, open_passages
from lewisrag.data.records import Passage, read_passages, read_qa
from lewisrag.eval.records import parse_answer, read_answers
from lewisrag.index.dense import DenseBuildConfig, DenseIndex, build_dense_index
from lewisrag.index.encoders import DPRCheckpoint, encode_texts
from lewisrag.index.store import content_hash
from lewisrag.training.dpr import DPRTrainConfig, train_dpr

TINY = dict(vocab_size=300, hidden_size=32, layers=1, heads=2, batch_size=8, steps=2)


def write_parquet(path: Path, rows: list[dict], schema: pa.Schema | None = None) -> Path:
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def one_line_exit_2(code: int, err: str, *needles: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and "Traceback" not in err and lines and lines[-1].startswith("error: "), err
    for needle in needles:
        assert needle in lines[-1], (needle, lines[-1])
    return lines[-1]


# ---------------------------------------------------------------------------------------------
# QA files in the hub's schemas

NQ_OPEN = pa.schema([("question", pa.string()), ("answer", pa.list_(pa.string()))])

TRIVIA_ANSWER = pa.struct([("aliases", pa.list_(pa.string())), ("normalized_aliases", pa.list_(pa.string())),
                           ("matched_wiki_entity_name", pa.string()), ("normalized_matched_wiki_entity_name", pa.string()),
                           ("normalized_value", pa.string()), ("type", pa.string()), ("value", pa.string())])
TRIVIA_QA = pa.schema([  # trivia_qa unfiltered.nocontext (rc.nocontext alike): the contexts' lists are there, empty
    ("question", pa.string()), ("question_id", pa.string()), ("question_source", pa.string()),
    ("entity_pages", pa.struct([("doc_source", pa.list_(pa.string())), ("filename", pa.list_(pa.string())),
                                ("title", pa.list_(pa.string())), ("wiki_context", pa.list_(pa.string()))])),
    ("search_results", pa.struct([("description", pa.list_(pa.string())), ("filename", pa.list_(pa.string())),
                                  ("rank", pa.list_(pa.int32())), ("title", pa.list_(pa.string())), ("url", pa.list_(pa.string())),
                                  ("search_context", pa.list_(pa.string()))])),
    ("answer", TRIVIA_ANSWER),
])


def trivia_row(qid: str, question: str, value: str, aliases: list[str]) -> dict:
    empty_pages = {"doc_source": [], "filename": [], "title": [], "wiki_context": []}
    empty_search = {"description": [], "filename": [], "rank": [], "title": [], "url": [], "search_context": []}
    return {"question": question, "question_id": qid, "question_source": "http://www.triviaquiz.example/",
            "entity_pages": empty_pages, "search_results": empty_search,
            "answer": {"aliases": aliases, "normalized_aliases": [a.lower() for a in aliases], "matched_wiki_entity_name": "",
                       "normalized_matched_wiki_entity_name": "", "normalized_value": value.lower(), "type": "WikipediaEntity",
                       "value": value}}


def test_nq_open_parquet_gets_stable_derived_ids(tmp_path):
    rows = [{"question": "who leads valdoria", "answer": ["Ana Kel", "Kel"]},
            {"question": "capital of veldoria", "answer": ["Mirentus"]},
            {"question": "who leads valdoria", "answer": ["Ana Kel"]}]  # the same question twice
    path = write_parquet(tmp_path / "nq_open-validation.parquet", rows, NQ_OPEN)
    examples = read_qa(path)
    assert [ex.answers for ex in examples] == [["Ana Kel", "Kel"], ["Mirentus"], ["Ana Kel"]]
    first = derived_id("who leads valdoria", {})
    assert [ex.id for ex in examples] == [first, derived_id("capital of veldoria", {}), f"{first}-2"]
    assert [ex.id for ex in read_qa(path)] == [ex.id for ex in examples]  # stable across runs
    assert [ex.id for ex in read_qa(write_jsonl(tmp_path / "nq.jsonl", rows))] == [ex.id for ex in examples]  # and formats


def test_trivia_qa_nested_answer(tmp_path):
    rows = [trivia_row("tc_1", "Which city is the capital of Veldoria?", "Mirentus", ["Mirentus", "Mirentus City", "mirentus"]),
            trivia_row("tc_2", "Who leads Valdoria?", "Ana Kel", [])]
    examples = read_qa(write_parquet(tmp_path / "trivia.parquet", rows, TRIVIA_QA))
    assert [(ex.id, ex.answers) for ex in examples] == [("tc_1", ["Mirentus", "Mirentus City", "mirentus"]),
                                                        ("tc_2", ["Ana Kel"])]
    dup = write_parquet(tmp_path / "dup.parquet", [rows[0], rows[1], {**rows[1], "question": "Again?"}], TRIVIA_QA)
    with pytest.raises(InputError) as e:
        read_qa(dup)  # rows of one id are copies of one question (rc's web and wikipedia rows), or an error
    assert (e.value.line, e.value.field) == (3, "question") and "where line 2 of the same id 'tc_2'" in str(e.value)


def test_web_questions_jsonl_and_parquet_agree(tmp_path):
    rows = [{"url": "http://www.freebase.com/view/en/valdoria", "question": "who leads valdoria?", "answers": ["Ana Kel"]},
            {"url": "http://www.freebase.com/view/en/veldoria", "question": "what is veldoria's capital?", "answers": ["Mirentus"]}]
    jl = read_qa(write_jsonl(tmp_path / "wq.jsonl", rows))
    assert jl == read_qa(write_parquet(tmp_path / "wq.parquet", rows))
    assert jl[0].id == derived_id("who leads valdoria?", {}) and jl[1].answers == ["Mirentus"]


def test_a_field_mapping_with_dotted_paths(tmp_path):
    rows = [{"qid": 7, "query": "who leads valdoria?", "gold": {"aliases": ["Ana Kel", "A. Kel"]}, "pids": ["c0-0"]},
            {"qid": 8, "query": "capital of veldoria?", "gold": {"aliases": ["Mirentus"]}, "pids": []}]
    path = write_jsonl(tmp_path / "custom.jsonl", rows)
    fields = {"question": "query", "answers": "gold.aliases", "id": "qid", "gold_passage_ids": "pids"}
    examples = read_qa(path, fields)
    assert [(ex.id, ex.question, ex.answers, ex.gold_passage_ids) for ex in examples] == [
        ("7", "who leads valdoria?", ["Ana Kel", "A. Kel"], ["c0-0"]), ("8", "capital of veldoria?", ["Mirentus"], [])]
    one = read_qa(write_jsonl(tmp_path / "one.jsonl", [{"q": "who?", "a": "Ana Kel"}]), {"question": "q", "answers": "a"})
    assert one[0].answers == ["Ana Kel"] and one[0].id == derived_id("who?", {})  # a mapped answer may be one string
    with pytest.raises(InputError, match="unknown name 'golds'"):
        read_qa(path, {"question": "query", "golds": "gold"})
    with pytest.raises(InputError) as e:
        read_qa(path, {"question": "query", "answers": "gold"})  # an object where a list is needed
    assert (e.value.line, e.value.field) == (1, "gold") and "read as mapped" in str(e.value)


@pytest.mark.parametrize("rows, line, field, needle", [
    ([{"question": "a?", "answer": ["x"]}, {"question": "b?", "answer": "y"}], 2, "answer", "expected a list of strings (read as nq_open, told by line 1)"),
    ([{"question": "a?", "answer": ["x"]}, {"question": "b?", "answers": ["y"]}], 2, "answer", "missing"),
    ([{"question": "a?", "answer": ["x"]}, {"question": "", "answer": ["y"]}], 2, "question", "empty"),
    ([{"question": "a?", "answer": {"value": "x", "aliases": []}}, {"question": "b?", "answer": {"value": "y", "aliases": "y"}}],
     2, "answer.aliases", "read as trivia_qa"),
    ([{"question": "a?", "answer": {"value": "x", "aliases": []}}, {"question": "b?", "answer": ["y"]}], 2, "answer", "expected an object"),
    ([{"question": "a?", "answers": ["x"], "id": "1"}, {"question": "b?", "answers": ["y"], "id": "1"}], 2, "id", "duplicate id '1'"),
    ([{"query": "a?", "golds": ["x"]}], 1, None, "cannot tell the QA format"),
])
def test_a_record_that_does_not_fit_is_an_error(tmp_path, rows, line, field, needle):
    path = write_jsonl(tmp_path / "qa.jsonl", rows)
    with pytest.raises(InputError) as e:
        read_qa(path)
    assert (e.value.line, e.value.field) == (line, field) and needle in str(e.value)
    assert str(e.value).startswith(f"{path}:{line}:")


def test_answer_records_without_ids_get_the_questions_derived_id(tmp_path):
    rec = {"user_input": "Who leads Valdoria?", "response": "Ana Kel [1].", "retrieved_contexts": ["Ana Kel leads Valdoria."]}
    assert parse_answer(rec, "answers.jsonl", 1, {}).id == derived_id("Who leads Valdoria?", {})
    qid = derived_id("Who leads Valdoria?", {})
    rows = [{**rec, "system": "a"}, {**rec, "system": "b"}]
    ids = [(r.system, r.id) for r in read_answers(write_jsonl(tmp_path / "answers.jsonl", rows))]
    assert ids == [("a", qid), ("b", qid)]  # systems pair up on the id
    # a question asked again is told apart by what it is judged against, not by its place in the file
    rows = [{**rec, "system": "a", "reference": "Ana Kel"}, {**rec, "system": "a", "reference": "Ana Kel (2018)"}]
    ids = [r.id for r in read_answers(write_jsonl(tmp_path / "answers.jsonl", rows))]
    assert len(set(ids)) == 2 and all(i.startswith(f"{qid}-") for i in ids)
    assert ids[::-1] == [r.id for r in read_answers(write_jsonl(tmp_path / "answers.jsonl", rows[::-1]))]
    with pytest.raises(InputError, match="line 1 asks the same question"):  # alike in all of it: ids needed
        read_answers(write_jsonl(tmp_path / "answers.jsonl", [{**rec, "system": "a"}] * 2))
    assert qid == read_qa(write_jsonl(tmp_path / "qa.jsonl", [{"question": "Who leads Valdoria?", "answers": ["Ana Kel"]}]))[0].id


# ---------------------------------------------------------------------------------------------
# passages in wiki_dpr's schema


@pytest.fixture(scope="module")
def encoders(tiny_corpus, tmp_path_factory) -> dict:
    """Two tiny DPR checkpoints of one shape: `right` made the stored embeddings, `wrong` did not."""
    root = tmp_path_factory.mktemp("real_dpr")
    qa, passages = read_qa(tiny_corpus["qa"]), read_passages(tiny_corpus["passages"])
    train_dpr(DPRTrainConfig(seed=0, **TINY), qa, passages, root / "right")
    train_dpr(DPRTrainConfig(seed=1, **TINY), qa, passages, root / "wrong")
    return {"right": root / "right", "wrong": root / "wrong"}


@pytest.fixture(scope="module")
def wiki_dpr(tiny_corpus, encoders, tmp_path_factory) -> dict:
    """The tiny corpus as a wiki_dpr-schema `save_to_disk` folder whose embeddings the `right` encoder made."""
    import datasets

    root = tmp_path_factory.mktemp("wiki_dpr")
    passages = read_passages(tiny_corpus["passages"])
    ckpt = DPRCheckpoint.load(encoders["right"])
    vectors = encode_texts(ckpt.ctx_encoder, ckpt.tokenizer, [(p.title, p.text) for p in passages],
                           max_length=int(ckpt.meta["max_length"]))
    features = datasets.Features({"id": datasets.Value("string"), "text": datasets.Value("string"),
                                  "title": datasets.Value("string"), "embeddings": datasets.List(datasets.Value("float32"))})
    ds = datasets.Dataset.from_dict({"id": [p.id for p in passages], "text": [p.text for p in passages],
                                     "title": [p.title for p in passages], "embeddings": vectors.tolist()}, features=features)
    ds.save_to_disk(str(root / "psgs_w100"), num_shards=2)  # two Arrow files, as a large dataset has
    return {"folder": root / "psgs_w100", "jsonl": tiny_corpus["passages"], "vectors": vectors}


def test_a_saved_dataset_reads_as_a_sequence_of_passages(wiki_dpr, monkeypatch):
    import lewisrag.data.records as records

    listed = read_passages(wiki_dpr["jsonl"])
    monkeypatch.setattr(records, "iter_records", lambda *a: pytest.fail("a table must not be read record by record"))
    monkeypatch.setattr(passage_tables.table, "BATCH_ROWS", 7)
    monkeypatch.setattr(passage_tables.table, "SCAN_ROWS", 5)
    spans = []
    real_rows = PassageTable._rows
    monkeypatch.setattr(PassageTable, "_rows", lambda self, a, b: spans.append(b - a) or real_rows(self, a, b))

    table = open_passages(wiki_dpr["folder"])
    assert isinstance(table, PassageTable) and isinstance(table, Sequence) and spans == []  # checked without Python rows
    assert len(table) == len(listed) == 60
    assert table[0] == listed[0] and table[-1] == listed[-1] and table[np.int64(31)] == listed[31]
    assert table[10:13] == listed[10:13] and table[::20] == listed[::20]
    assert list(table) == listed and table == listed and listed == table
    assert listed[42] in table and table.index(listed[42]) == 42
    with pytest.raises(IndexError):
        table[60]
    assert content_hash(table) == content_hash(listed)
    assert spans and max(spans) <= 7, spans  # never the whole table at once
    np.testing.assert_array_equal(table.embeddings(3, 9), wiki_dpr["vectors"][3:9])
    assert table.embedding_dim() == wiki_dpr["vectors"].shape[1]


def test_head_is_a_table_of_the_first_rows(wiki_dpr, tmp_path, monkeypatch):
    """`reproduce --max-passages N` indexes table.head(N): a slice was N Python objects at once."""
    listed = read_passages(wiki_dpr["jsonl"])
    parquet = write_parquet(tmp_path / "p.parquet", [p.to_dict() for p in listed])
    monkeypatch.setattr(passage_tables.table, "BATCH_ROWS", 7)
    for table in (open_passages(wiki_dpr["folder"]), open_passages(parquet)):
        head = table.head(25)
        assert isinstance(head, PassageTable) and len(head) == 25 and head == listed[:25] and len(table) == 60
        assert content_hash(head) == content_hash(listed[:25]) and sum(b.num_rows for b in head.arrow_batches()) == 25
        with pytest.raises(IndexError):
            head[25]
        if table.has_embeddings:
            np.testing.assert_array_equal(head.embeddings(), wiki_dpr["vectors"][:25])
        assert table.head(1000) == listed and len(table.head(0)) == 0


def hub_shards(wiki_dpr, root: Path, n: int = 3) -> Path:
    """The wiki_dpr folder as the hub itself holds it, `data/psgs_w100/nq/train-0000K-of-0000N.parquet`
    (what `hf download facebook/wiki_dpr --repo-type dataset --include 'data/psgs_w100/nq/*'` fetches):
    the same features, written by datasets' own Parquet writer, one contiguous shard a file."""
    import datasets

    ds = datasets.load_from_disk(str(wiki_dpr["folder"]))
    folder = root / "wiki_dpr" / "data" / "psgs_w100" / "nq"
    folder.mkdir(parents=True)
    for k in range(n):
        ds.shard(n, k, contiguous=True).to_parquet(str(folder / f"train-{k:05d}-of-{n:05d}.parquet"))
    return folder


def test_the_hubs_parquet_shards_read_as_one_table(wiki_dpr, encoders, tiny_corpus, tmp_path, monkeypatch, capsys):
    """A folder of Parquet shards is the passages in the order of the files' names, a few row groups
    decoded at a time; `index build --reuse-embeddings` reads it as it reads the save_to_disk folder."""
    folder = hub_shards(wiki_dpr, tmp_path)
    (folder / "README.md").write_text("not a shard")  # other files beside the shards are not passages
    monkeypatch.setattr(passage_tables.table, "BATCH_ROWS", 7)
    table = open_passages(folder)
    assert isinstance(table, PassageTable) and len(table._groups.files) == 3
    listed = read_passages(wiki_dpr["jsonl"])
    assert table == listed and table[19:22] == listed[19:22]  # across the first two shards
    np.testing.assert_array_equal(table.embeddings(), wiki_dpr["vectors"])
    assert content_hash(table) == content_hash(listed)
    assert all(len(g._cache) <= passage_tables.RowGroups.CACHED for g in [table._groups, *table._views.values()])
    code, stdout, err = run_main(monkeypatch, capsys, "index", "build", "--passages", folder, "--encoder",
                                 encoders["right"], "--out", tmp_path / "idx", "--reuse-embeddings", "--json")
    assert code == 0, err
    assert json.loads(stdout)["content_hash"] == content_hash(listed)
    np.testing.assert_array_equal(np.load(tmp_path / "idx" / "embeddings.npy"), wiki_dpr["vectors"])


def test_a_bad_shard_is_named_with_its_own_row(wiki_dpr, tmp_path):
    """Errors in a folder of shards name the shard and the row in it, as a user would open it to look."""
    folder = hub_shards(wiki_dpr, tmp_path)
    shards = sorted(folder.glob("*.parquet"))
    second = pq.read_table(shards[1])
    rows = second.to_pylist()
    rows[2]["text"] = "  "
    pq.write_table(pa.Table.from_pylist(rows, schema=second.schema), shards[1])
    with pytest.raises(InputError, match=rf"^{shards[1]}:3: field 'text': empty$"):
        open_passages(folder)
    rows[2]["text"], rows[4]["id"] = "fine", read_passages(wiki_dpr["jsonl"])[3].id
    pq.write_table(pa.Table.from_pylist(rows, schema=second.schema), shards[1])
    with pytest.raises(InputError) as e:
        open_passages(folder)
    assert str(e.value) == f"{shards[1]}:5: field 'id': duplicate id '{rows[4]['id']}' (first on line 4 of {shards[0]})"
    rows[4]["id"] = "fine"
    pq.write_table(pa.Table.from_pylist(rows, schema=second.schema).drop_columns(["embeddings"]), shards[1])
    with pytest.raises(InputError, match=rf"^{shards[1]}: its passage columns \(id: string, title: string, text: string\) "
                       r"differ from those of .*train-00000-of-00003\.parquet \(id: string, title: string, text: string, "
                       r"embeddings: list<.*>\): the shards of one folder must be one table$"):
        open_passages(folder)
    shards[1].write_bytes(b"PAR1 not parquet")
    with pytest.raises(InputError, match=rf"^{shards[1]}: cannot read Parquet: "):
        open_passages(folder)
    shards[2].unlink()
    with pytest.raises(InputError, match=rf"^{shards[2]}: missing: the folder holds 2 of the 3 shards"):
        open_passages(folder)  # a download that stopped short
    shards[1].unlink()
    only = shards[0].rename(folder / "train-00000-of-00001.parquet")
    rows = pq.read_table(only).to_pylist()
    pq.write_table(pa.Table.from_pylist(rows[:5]), only)
    assert len(open_passages(folder)) == 5  # one shard is a folder of shards too
    pq.write_table(pa.Table.from_pylist([dict(r, title=i) for i, r in enumerate(rows)]), only)
    with pytest.raises(InputError, match=rf"^{only}:1: field 'title': expected strings, got a column of int64$"):
        open_passages(folder)
    only.unlink()
    with pytest.raises(InputError, match="is a folder, but neither a dataset written by datasets' save_to_disk "
                       r"\(no state.json\) nor a folder of .parquet shards"):
        open_passages(folder)


def test_a_limit_opens_and_checks_the_first_rows_only(wiki_dpr, tmp_path):
    """`reproduce --max-passages N` checks only the N rows it indexes: at 21 M passages the rest is
    minutes of decoding for nothing. Bad rows past N do not stop it; before N they do."""
    rows = [p.to_dict() for p in read_passages(wiki_dpr["jsonl"])]
    rows[40]["text"], rows[50]["id"] = " ", rows[3]["id"]  # an empty text and a repeated id, both past row 30
    path = write_parquet(tmp_path / "p.parquet", rows)
    with pytest.raises(InputError, match=r"p\.parquet:41: field 'text': empty"):
        open_passages(path)
    table = open_passages(path, limit=30)
    assert len(table) == 30 and table == read_passages(wiki_dpr["jsonl"])[:30] and table.head(100) == table
    with pytest.raises(InputError, match=r"p\.parquet:41: field 'text': empty"):
        open_passages(path, limit=45)
    listed = write_jsonl(tmp_path / "p.jsonl", [r for i, r in enumerate(rows) if i not in (40, 50)])
    assert len(open_passages(listed, limit=30)) == 30  # a JSONL file is read whole, then cut


def _mapped_mb() -> float:
    """This process's resident pages of mapped files (RssFile), in MB."""
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("RssFile:")).split()[1]) / 1024


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads Linux's /proc/self/status")
def test_reading_parquet_passages_keeps_only_a_few_row_groups_resident(tmp_path):
    """A pass over Parquet vectors must not leave the file resident: memory-mapped, every page read
    stayed in the process's RSS, so `index cut` over wiki_dpr's 80 GB would show as using all of it
    (and be killed by schedulers that watch RSS). 40 MB of vectors in 20 row groups, read in order."""
    passages, vectors = _big_vectors(tmp_path)
    before = _mapped_mb()
    for start in range(0, len(vectors), 1000):
        assert np.array_equal(passages.embeddings(start, start + 1000), vectors[start:start + 1000])
    assert _mapped_mb() - before < 10  # memory-mapped: 40


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads Linux's /proc/self/status")
def test_copying_stored_vectors_keeps_the_written_file_out_of_memory(tmp_path):
    """`index build --reuse-embeddings` wrote the vectors through one memory map, so every page
    written stayed resident: wiki_dpr's 21 M vectors would end as 32 GB of the build's RSS."""
    from lewisrag.index.dense import _copy_stored

    passages, vectors = _big_vectors(tmp_path)
    before, seen = _mapped_mb(), []
    _copy_stored(passages, tmp_path / "embeddings.npy", 1000, "float32", lambda *_: seen.append(_mapped_mb()))
    assert len(seen) == 13 and max(seen) - before < 10  # through a memory map: 40 by the end
    assert np.array_equal(np.load(tmp_path / "embeddings.npy"), vectors)
    _copy_stored(passages, tmp_path / "half.npy", 4096, "float16", None)
    assert np.array_equal(np.load(tmp_path / "half.npy"), vectors.astype(np.float16))


def _big_vectors(tmp_path: Path, n: int = 13_000, dim: int = 768) -> tuple[PassageTable, np.ndarray]:
    """40 MB of float32 vectors in a Parquet file of 20 row groups, uncompressed, and the vectors."""
    vectors = np.random.default_rng(0).standard_normal((n, dim), dtype=np.float32)
    table = pa.table({"id": [str(i) for i in range(n)], "text": ["words"] * n, "title": ["t"] * n,
                      "embeddings": pa.ListArray.from_arrays(pa.array(np.arange(0, (n + 1) * dim, dim, dtype=np.int32)),
                                                             pa.array(vectors.ravel()))})
    pq.write_table(table, tmp_path / "p.parquet", row_group_size=n // 20, compression="none")
    return open_passages(tmp_path / "p.parquet"), vectors


@pytest.mark.parametrize("meta", ['{"splits": ["train", "test"]}', '{"splits": 5}', "[1, 2]", '{"splits": []}'])
def test_a_dataset_dict_folder_is_one_line(tmp_path, meta):
    """A DatasetDict is named with its splits; a damaged dataset_dict.json was a traceback."""
    (tmp_path / "dd").mkdir()
    (tmp_path / "dd" / "dataset_dict.json").write_text(meta)
    with pytest.raises(InputError) as e:
        open_passages(tmp_path / "dd")
    if "train" in meta:
        assert "holds a DatasetDict (splits: train, test): give one split's folder" in str(e.value)
    else:
        assert str(e.value).startswith(f"{tmp_path / 'dd' / 'dataset_dict.json'}: field 'splits': expected a non-empty list")


def test_parquet_and_hf_specs_read_as_tables(wiki_dpr, tmp_path, monkeypatch):
    import datasets

    rows = [p.to_dict() for p in read_passages(wiki_dpr["jsonl"])]
    (tmp_path / "hub").mkdir()
    path = write_parquet(tmp_path / "hub" / "train.parquet", rows)
    from_parquet = open_passages(path)
    assert isinstance(from_parquet, PassageTable) and from_parquet == read_passages(wiki_dpr["jsonl"])
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")  # a local folder as a hub dataset
    assert open_passages(f"hf:{tmp_path / 'hub'}:train") == from_parquet


ARROW_CASES = {  # rows, then (row, field, message) as the JSONL reader reports them too
    "missing text": ([{"id": "a", "title": "t", "text": "x"}, {"id": "b", "title": "t", "text": "y"}, {"id": "c", "title": "t"}],
                     (3, "text", "missing")),
    "empty text": ([{"id": "a", "title": "t", "text": "x"}, {"id": "b", "title": "t", "text": "  "}], (2, "text", "empty")),
    "duplicate id": ([{"id": i, "title": "t", "text": "x"} for i in ("a", "b", "c", "b", "a")],
                     (4, "id", "duplicate id 'b' (first on line 2)")),
    "missing id": ([{"id": "a", "title": "t", "text": "x"}, {"title": "t", "text": "y"}], (2, "id", "missing")),
    "duplicate before an empty text": ([{"id": "a", "title": "t", "text": "x"}, {"id": "a", "title": "t", "text": "y"},
                                        {"id": "c", "title": "t", "text": ""}], (2, "id", "duplicate id 'a'")),
}


@pytest.mark.parametrize("case", list(ARROW_CASES))
def test_bad_tables_are_named_like_bad_jsonl(case, tmp_path):
    rows, (line, field, message) = ARROW_CASES[case]
    for path in (write_parquet(tmp_path / "p.parquet", rows), write_jsonl(tmp_path / "p.jsonl", rows)):
        with pytest.raises(InputError) as e:
            open_passages(path)  # an Arrow table, then records.read_passages
        assert (e.value.line, e.value.field) == (line, field) and message in str(e.value), str(e.value)
        assert str(e.value).startswith(f"{path}:{line}: field '{field}'")


def test_column_types_are_checked_once(tmp_path):
    with pytest.raises(InputError, match="field 'title': expected strings, got a column of int64"):
        open_passages(write_parquet(tmp_path / "a.parquet", [{"id": "a", "title": 3, "text": "x"}]))
    with pytest.raises(InputError, match="field 'id': expected strings, got a column of double"):
        open_passages(write_parquet(tmp_path / "b.parquet", [{"id": 1.5, "title": "t", "text": "x"}]))
    ints = open_passages(write_parquet(tmp_path / "c.parquet", [{"id": 1, "text": "x"}, {"id": 2, "text": "y"}]))
    assert list(ints) == [Passage("1", "", "x"), Passage("2", "", "y")]  # integer ids and no titles, as in JSON
    uneven = write_parquet(tmp_path / "d.parquet", [{"id": "a", "text": "x", "embeddings": [0.1, 0.2]},
                                                    {"id": "b", "text": "y", "embeddings": [0.1]}])
    with pytest.raises(InputError, match=r"d.parquet:2: field 'embeddings': 1 values where the first row has 2"):
        open_passages(uneven).embedding_dim()
    (tmp_path / "plain").mkdir()
    with pytest.raises(InputError, match="is a folder"):
        open_passages(tmp_path / "plain")


def test_a_table_without_titles_is_indexed(tmp_path, monkeypatch, capsys):
    """wiki_dpr's `title` is optional: a Parquet file without the column builds an index (its store
    holds "" titles, as from JSONL without titles), not a traceback beside a left-over .partial."""
    rows = [{"id": "a", "text": "Valdoria is a country."}, {"id": "b", "text": "Its leader is Ana Kel."}]
    path = write_parquet(tmp_path / "notitle.parquet", rows)
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", path, "--encoder", "bm25",
                            "--out", tmp_path / "idx")
    assert code == 0, err
    assert not (tmp_path / "idx.partial").exists()
    stored = pa.ipc.open_file(pa.memory_map(str(tmp_path / "idx" / "passages.arrow"))).read_all()
    assert stored.column("title").to_pylist() == ["", ""] and stored.column("id").to_pylist() == ["a", "b"]
    assert content_hash(open_passages(path)) == content_hash(read_passages(write_jsonl(tmp_path / "p.jsonl", rows)))


def _top_ids(index_dir: Path, ckpt: DPRCheckpoint, questions: list[str], k: int = 5):
    index = DenseIndex.load(index_dir)
    q = encode_texts(ckpt.question_encoder, ckpt.tokenizer, questions, max_length=32)
    scores, rows = index.search(q, k)
    return [[index.passages[r].id for r in row] for row in rows], scores


def test_index_over_a_saved_dataset_equals_the_jsonl_one(wiki_dpr, encoders, tiny_corpus, tmp_path):
    cfg = DenseBuildConfig(shard_size=16)
    a = build_dense_index(read_passages(wiki_dpr["jsonl"]), encoders["right"], tmp_path / "from_jsonl", cfg)
    b = build_dense_index(open_passages(wiki_dpr["folder"]), encoders["right"], tmp_path / "from_folder", cfg)
    assert a["content_hash"] == b["content_hash"] and a["n_passages"] == b["n_passages"] == 60
    stored = [pa.ipc.open_file(pa.memory_map(str(tmp_path / d / "passages.arrow"))).read_all() for d in ("from_jsonl", "from_folder")]
    assert stored[0].equals(stored[1]) and stored[0].schema.names == ["id", "title", "text"]
    ckpt = DPRCheckpoint.load(encoders["right"])
    questions = [ex.question for ex in read_qa(tiny_corpus["qa"])]
    ids_a, scores_a = _top_ids(tmp_path / "from_jsonl", ckpt, questions)
    ids_b, scores_b = _top_ids(tmp_path / "from_folder", ckpt, questions)
    assert ids_a == ids_b
    np.testing.assert_allclose(scores_a, scores_b, rtol=1e-5, atol=1e-5)


def test_reuse_embeddings_with_the_right_encoder(wiki_dpr, encoders, tiny_corpus, tmp_path, monkeypatch, capsys):
    out = tmp_path / "reused"
    code, stdout, err = run_main(monkeypatch, capsys, "index", "build", "--passages", wiki_dpr["folder"], "--encoder",
                                 encoders["right"], "--out", out, "--reuse-embeddings", "--json")
    assert code == 0, err
    manifest = json.loads(stdout)
    assert manifest["build"]["embeddings"]["source"] == "reused"
    assert manifest["build"]["embeddings"]["spot_check"]["min_cosine"] >= 0.99
    assert manifest["build"]["embeddings"]["spot_check"]["rows"] == [1, 9, 18, 26, 35, 43, 52, 60]
    assert manifest["encoder"]["ctx_fingerprint"] == DPRCheckpoint.load(encoders["right"]).ctx_fingerprint
    np.testing.assert_array_equal(np.load(out / "embeddings.npy"), wiki_dpr["vectors"])  # copied, not encoded again
    encoded = tmp_path / "encoded"
    build_dense_index(read_passages(wiki_dpr["jsonl"]), encoders["right"], encoded, DenseBuildConfig())
    ckpt = DPRCheckpoint.load(encoders["right"])
    questions = [ex.question for ex in read_qa(tiny_corpus["qa"])]
    assert _top_ids(out, ckpt, questions)[0] == _top_ids(encoded, ckpt, questions)[0]
    # a rebuild into it says it replaces an index; a folder that encodes no passages is one line, before any note
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", wiki_dpr["folder"], "--encoder",
                            encoders["right"], "--out", out, "--reuse-embeddings", "--json")
    assert code == 0 and f"note: {out} holds an index; the new one replaces it" in err, err
    not_dpr = tmp_path / "not_dpr"
    not_dpr.mkdir()
    (not_dpr / "config.json").write_text(json.dumps({"architectures": ["BartForConditionalGeneration"]}))
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", wiki_dpr["folder"], "--encoder", not_dpr,
                            "--out", tmp_path / "x")
    one_line_exit_2(code, err, "not a DPR encoder folder")


@pytest.mark.parametrize("bad, flags, message", [
    (np.nan, [], "not a finite number"),
    # float16 holds at most 65504: the value was stored as infinity
    (7e4, ["--vector-dtype", "float16"], "70000.0 is out of float16's range"),
], ids=["nan", "float16-overflow"])
def test_a_bad_stored_vector_found_while_copying_leaves_no_partial_build(wiki_dpr, encoders, tmp_path, monkeypatch, capsys,
                                                                         bad, flags, message):
    """A bad value in row 31 of the embeddings column: one line naming the row, and no IDX.partial
    left (a fixed file hashes otherwise, so its shards could never be resumed). Both are found while
    the vectors are copied, after the staging folder exists: the copy checks each block it decodes."""
    table = pa.concat_tables([pa.ipc.open_stream(str(f)).read_all() for f in sorted(wiki_dpr["folder"].glob("*.arrow"))])
    vectors = wiki_dpr["vectors"].copy()
    vectors[30, 3] = bad  # not one of the spot-checked rows (1, 9, 18, 26, 35, ...)
    table = table.set_column(table.schema.get_field_index("embeddings"), "embeddings",
                             pa.array(vectors.tolist(), type=pa.list_(pa.float32())))
    path = tmp_path / "psgs.parquet"
    pq.write_table(table, path)
    out = tmp_path / "idx"
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", path, "--encoder", encoders["right"],
                            "--out", out, "--reuse-embeddings", "--shard-size", 16, *flags)
    one_line_exit_2(code, err, f"{path}:31", "field 'embeddings'", message)
    assert not out.exists() and not (tmp_path / "idx.partial").exists()


def test_reuse_embeddings_refuses_another_encoders_vectors(wiki_dpr, encoders, tiny_corpus, tmp_path, monkeypatch, capsys):
    out = tmp_path / "refused"
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", wiki_dpr["folder"], "--encoder",
                            encoders["wrong"], "--out", out, "--reuse-embeddings")
    one_line_exit_2(code, err, f"{wiki_dpr['folder']}:1: field 'embeddings'", "not made by this encoder")
    assert not out.exists() and not (tmp_path / "refused.partial").exists()
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", tiny_corpus["passages"], "--encoder",
                            encoders["right"], "--out", out, "--reuse-embeddings")
    one_line_exit_2(code, err, "--reuse-embeddings", "embeddings column")
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", wiki_dpr["folder"], "--encoder", "bm25",
                            "--out", out, "--reuse-embeddings")
    one_line_exit_2(code, err, "--reuse-embeddings", "dense")


# ---------------------------------------------------------------------------------------------
# --qa-fields on the command line


def test_qa_fields_flag(tiny_corpus, tmp_path, monkeypatch, capsys):
    from lewisrag.index.bm25 import build_bm25_index

    build_bm25_index(read_passages(tiny_corpus["passages"]), tmp_path / "bm25")
    rows = [{"query": ex.question, "golds": ex.answers, "pids": ex.gold_passage_ids} for ex in read_qa(tiny_corpus["qa"])]
    custom = write_jsonl(tmp_path / "custom.jsonl", rows)
    code, stdout, err = run_main(monkeypatch, capsys, "eval", "retrieval", "--index", tmp_path / "bm25", "--questions", custom,
                                 "--qa-fields", "question=query, answers=golds,gold_passage_ids=pids", "--recall-at", 5, "--json")
    assert code == 0, err
    assert json.loads(stdout)[str(tmp_path / "bm25")]["recall@5"] == 1.0
    for spec, needle in (("question", "NAME=FIELD"), ("question=query,question=q", "given twice"), ("quest=query", "unknown name 'quest'")):
        code, _, err = run_main(monkeypatch, capsys, "eval", "retrieval", "--index", tmp_path / "bm25", "--questions", custom,
                                "--qa-fields", spec)
        one_line_exit_2(code, err, "--qa-fields", needle)
