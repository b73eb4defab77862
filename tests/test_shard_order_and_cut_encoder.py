"""Numbered Parquet shards read in the order of their numbers, padded or not; `index cut --encoder
RUN/best` (a trained RAG model) with the context encoder of its index as --context-encoder; and
docs/scale.md's `bench_scale.py --fit` reading only files its commands wrote."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import run_main
from hf_layouts import dpr_pair
from lewisrag.data.passages import open_passages
from lewisrag.data.records import read_passages, read_qa
from lewisrag.index.encoders import DPRCheckpoint, encode_texts, load_rag_question_encoder
from test_rag_train import rag_inputs, trained_rag  # noqa: F401  (session fixtures)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["train-{k}-of-{n}", "train-{k}-of-{n}-6a9f3c2e1b7d4e5f{k:02d}", "train-{k:05d}-of-{n:05d}"])
def test_numbered_shards_are_read_in_the_order_of_their_numbers(tmp_path, name):
    """11 one-row shards: unpadded numbers put shard 10 after shard 1 in the names' order, which every
    --passages reader and `reproduce --max-passages N` (the first N rows) read; the numbers' order is
    the corpus's. push_to_hub's hashed names alike; padded names keep the order they had."""
    n = 11
    for k in range(n):
        pq.write_table(pa.table({"id": [f"p{k}"], "title": ["t"], "text": [f"text {k}"]}),
                       tmp_path / f"{name.format(k=k, n=n)}.parquet")
    assert [p.id for p in open_passages(tmp_path)] == [f"p{k}" for k in range(n)]
    assert [p.id for p in open_passages(tmp_path, limit=3)] == ["p0", "p1", "p2"]
    assert [p.id for p in open_passages(tmp_path, limit=11)][-2:] == ["p9", "p10"]


def test_unnumbered_files_keep_the_order_of_their_names():
    from lewisrag.data.passages.parquet import shard_order

    files = [Path(f) for f in ("b.parquet", "a10.parquet", "a2.parquet", "c-2-of-3.parquet", "c-10-of-30.parquet")]
    assert [f.name for f in shard_order(files)] == ["a10.parquet", "a2.parquet", "b.parquet", "c-2-of-3.parquet",
                                                    "c-10-of-30.parquet"]


@pytest.fixture(scope="module")
def rag_cut(rag_inputs, trained_rag, tmp_path_factory) -> dict:  # noqa: F811
    """The world's passages with stored vectors made by the DPR checkpoint that built the index the
    RAG run trained against, in one Parquet shard."""
    root = tmp_path_factory.mktemp("rag_cut")
    passages = read_passages(rag_inputs["world"] / "passages_a.jsonl")
    dpr = DPRCheckpoint.load(rag_inputs["dpr"])
    vectors = encode_texts(dpr.ctx_encoder, dpr.tokenizer, [(p.title, p.text) for p in passages],
                           max_length=int(dpr.meta["max_length"]))
    (root / "nq").mkdir()
    pq.write_table(pa.table({"id": [p.id for p in passages], "text": [p.text for p in passages],
                             "title": [p.title for p in passages], "embeddings": [v.tolist() for v in vectors]}),
                   root / "nq" / "train-00000-of-00001.parquet")
    return {"root": root, "shards": root / "nq", "passages": passages, "vectors": vectors, "dpr": rag_inputs["dpr"],
            "model": trained_rag / "best", "qa": rag_inputs["world"] / "dev.jsonl"}


def test_a_rag_model_cuts_with_the_context_encoder_of_its_index(rag_cut, tmp_path, monkeypatch, capsys):
    """`--encoder RUN/best` holds no context encoder of its index: it needs --context-encoder, which it
    accepts (the DPR checkpoint that built that index), and the cut keeps what its question encoder
    retrieves from the stored vectors. A context encoder of another fingerprint is refused."""
    passages, model = rag_cut["passages"], rag_cut["model"]
    flags = ["index", "cut", "--passages", rag_cut["shards"], "--encoder", model, "--questions", rag_cut["qa"],
             "--top", 3, "--max-passages", len(passages) - 1, "--no-gold", "--device", "cpu", "--json"]
    code, _, err = run_main(monkeypatch, capsys, *flags, "--out", tmp_path / "a")
    assert code == 2 and err.count("\n") == 1 and "--context-encoder: needed with the RAG model" in err, err
    code, stdout, err = run_main(monkeypatch, capsys, *flags, "--context-encoder", rag_cut["dpr"], "--out", tmp_path / "b")
    assert code == 0, err
    record = json.loads(stdout)
    assert record["encoder"] == str(model) and record["context_encoder"] == str(rag_cut["dpr"])
    q_ckpt = load_rag_question_encoder(model)
    q = encode_texts(q_ckpt.question_encoder, q_ckpt.tokenizer, [ex.question for ex in read_qa(rag_cut["qa"])],
                     max_length=int(q_ckpt.meta["q_max_length"]))
    top = np.argsort(-(q @ rag_cut["vectors"].T), axis=1, kind="stable")[:, :record["full_depth"]]
    assert record["full_depth"] >= 1
    assert {passages[r].id for r in top.ravel().tolist()} <= {p.id for p in open_passages(tmp_path / "b")}
    # another context encoder than its index's: refused by fingerprint, before the passages are read
    other = dpr_pair(tmp_path, [f"{p.title} {p.text}" for p in passages])["context"]
    monkeypatch.setattr("lewisrag.data.passages.open_passages", lambda *a: pytest.fail("the passages were read"))
    code, _, err = run_main(monkeypatch, capsys, *flags, "--context-encoder", other, "--out", tmp_path / "c")
    assert code == 2 and err.count("\n") == 1, err
    assert f"--context-encoder: {other} is not the context encoder the RAG model {model} was trained against" in err
    # a DPR checkpoint holds its own: --context-encoder with it is refused in words that name where it goes
    code, _, err = run_main(monkeypatch, capsys, *[rag_cut["dpr"] if f == model else f for f in flags],
                            "--context-encoder", rag_cut["dpr"], "--out", tmp_path / "d")
    assert code == 2 and "goes with a transformers DPRQuestionEncoder folder or a RAG model" in err, err
    assert not any((tmp_path / d).exists() for d in "acd")


def test_the_cut_help_names_the_rag_model_and_its_context_encoder(monkeypatch, capsys):
    code, stdout, _ = run_main(monkeypatch, capsys, "index", "cut", "--help")
    flat = " ".join(stdout.replace("│", " ").split())
    assert code == 0 and "trained RAG model (RUN/best)" in flat
    assert "With a DPRQuestionEncoder folder or a RAG model (needed with both)" in flat


def fit_inputs_unwritten(text: str) -> list[str]:
    """The files a `bench_scale.py --fit` line of `text`'s code blocks reads that no earlier line of its
    block writes (`> FILE`; a pattern matches a written name, `$n` and all)."""
    unwritten = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M):
        written = []
        for line in block.splitlines():
            code = line.split(" #")[0]
            if "bench_scale.py --fit" in code:
                files = shlex.split(code.split("--fit", 1)[1])
                unwritten += [f for f in files if not any(fnmatch.fnmatchcase(w, f) for w in written)]
            written += re.findall(r">\s*(\S+\.jsonl)", code)
    return unwritten


def test_the_scale_pages_fits_read_what_its_commands_wrote():
    assert fit_inputs_unwritten((ROOT / "docs" / "scale.md").read_text()) == []
    assert fit_inputs_unwritten("```\nx --json > 1m.jsonl\nbench_scale.py --fit 1m-row.jsonl 1m.jsonl\n```\n") == [
        "1m-row.jsonl"]
