"""Index edges a review found: FAISS factories that rank by something other than the inner product,
keep no dimension, store 0-bit codes or cannot be read back, refused before encoding; BM25 reading
a dotted capital I as i (tokenizer /4), and older indexes that split it refused only where they
did; `eval retrieval` saying how many questions' searches came back short; and a killed
--reuse-embeddings build keeping its finished copy of the stored vectors."""

from __future__ import annotations

import json

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import run_main
from test_cjk_tokens import tokenize_old
from lewisrag.data.io import InputError
from lewisrag.data.passages import open_passages
from lewisrag.data.records import Passage, QAExample, read_passages, read_qa
from lewisrag.index import bm25
from lewisrag.index.bm25 import BM25Index, build_bm25_index, tokenize
from lewisrag.index.dense import DenseBuildConfig, build_faiss, check_factory
from lewisrag.index.search import Hit, retrieval_recall
from lewisrag.training.dpr import DPRTrainConfig, train_dpr


@pytest.fixture(scope="module")
def dpr_ckpt(tiny_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("dpr") / "ckpt"
    train_dpr(DPRTrainConfig(steps=5, vocab_size=300, hidden_size=32, layers=1, heads=2, batch_size=8),
              read_qa(tiny_corpus["qa"]), read_passages(tiny_corpus["passages"]), out)
    return out


# --- FAISS factories ---------------------------------------------------------------------------------


@pytest.mark.parametrize("factory, pre_transform", [
    ("L2norm,Flat", "NormalizationTransform"), ("L2norm,IVF8,Flat", "NormalizationTransform"),
    ("ITQ,Flat", "ITQTransform"), ("ITQ16,Flat", "ITQTransform"),
])
def test_a_pre_transform_that_changes_inner_products_is_refused(factory, pre_transform):
    """L2norm ranks by cosine (recall@5 0.47 of exact search on vectors of uneven length), ITQ centres
    and normalizes (0.10): refused as PCAW is, naming --faiss."""
    with pytest.raises(InputError, match=f"its {pre_transform} pre-transform changes the inner products") as e:
        check_factory(factory, 32, 400)
    assert e.value.source == "--faiss"


@pytest.mark.parametrize("factory", ["HR,Flat", "Pad64,Flat", "RR32,Flat", "RR64,Flat", "OPQ8_64,Flat"])
def test_rotations_and_padding_are_kept_and_search_exactly(factory):
    rng = np.random.default_rng(0)
    x = ((rng.standard_normal((400, 32)) + 1) * rng.uniform(0.5, 2, (400, 1))).astype(np.float32)
    q = rng.standard_normal((20, 32)).astype(np.float32) + 1
    check_factory(factory, 32, len(x))
    scores, rows = build_faiss(x, factory).search(q, 5)
    np.testing.assert_array_equal(rows, np.argsort(-(q @ x.T), axis=1)[:, :5])
    np.testing.assert_allclose(scores, np.take_along_axis(q @ x.T, rows, axis=1), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("factory, message", [
    ("PCA0,Flat", "its PCAMatrix keeps 0 dimensions"),  # every score 0.0
    ("RR0,Flat", "its RandomRotationMatrix keeps 0 dimensions"),  # a segmentation fault in training
    ("OPQ8_0,Flat", "its OPQMatrix keeps 0 dimensions"),  # a floating-point exception in training
    ("PCAR64,Flat", "a PCA keeps at most the 32 dimensions it is given, not 64"),  # failed only after encoding
    ("PQ8x0", "its IndexPQ stores codes of 0 bits"),  # built, exit 0, and never read back
    ("IVF8,PQ8x0", "its IndexIVFPQ stores codes of 0 bits"),
    ("IVF8,PQ8x4,Refine(PQ8x0)", "its IndexPQ stores codes of 0 bits"),
    ("RQ4x0", "its IndexResidualQuantizer stores codes of 0 bits"),  # a segmentation fault in training
])
def test_a_factory_that_cannot_work_is_refused_before_encoding(factory, message):
    with pytest.raises(InputError, match=message) as e:
        check_factory(factory, 32, 4000)
    assert e.value.source == "--faiss" and "\n" not in str(e.value)


def test_a_factory_faiss_cannot_read_back_is_refused_but_an_untrained_additive_quantizer_is_not(monkeypatch):
    """The check's round trip once passed any failure in silence (it was meant for an untrained ITQ,
    now refused for its inner products); only an untrained RQ or LSQ, whose empty codebooks FAISS
    will not read, is let through, and it builds and reads back once trained."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1000, 32)).astype(np.float32)
    for factory in ("RQ4x4", "IVF8,RQ4x4", "LSQ4x4"):
        check_factory(factory, 32, len(x))
    faiss.deserialize_index(faiss.serialize_index(build_faiss(x, "RQ4x4")))

    def unreadable(data):
        raise RuntimeError("Error in read_index at index_read.cpp:1: Error: 'x' failed: a damaged header")

    monkeypatch.setattr(faiss, "deserialize_index", unreadable)
    with pytest.raises(InputError, match="FAISS cannot read 'IVF8,Flat' back once written.*: a damaged header") as e:
        check_factory("IVF8,Flat", 32, 400)
    assert e.value.source == "--faiss"


# --- BM25's dotted capital I ----------------------------------------------------------------------------


TURKISH = [Passage("t0", "İzmir", "İzmir is a port on the Aegean coast."),
           Passage("t1", "Ankara", "Ankara is the capital of the country.")]
NO_DOT = [Passage("e0", "Valdoria", "Valdoria is a country. Its leader is Kel Ana."),
          Passage("e1", "里格诺", "约有580万人生活在里格诺。")]


def _tokenize_3(text: str) -> list[str]:
    """Tokenizer /3 as it was: the dotted capital I lowercased to i and a combining dot, which ends a word."""
    return tokenize_old(text, bm25._TOKEN)


def _build_3(monkeypatch, passages, out) -> None:
    with monkeypatch.context() as m:
        m.setattr(bm25, "tokenize", _tokenize_3)
        m.setattr(bm25, "TOKENIZER", "lewisrag.index.bm25.tokenize/3")
        build_bm25_index(passages, out)


def test_a_dotted_capital_i_is_read_as_i():
    """Python lowercases İ to i and a combining dot, no word character: "İzmir" was i and zmir."""
    assert tokenize("İzmir") == tokenize("Izmir") == tokenize("I\u0307zmir") == ["izmir"]
    assert tokenize("İ 城市") == ["i", "城", "城市", "市"]  # Chinese untouched


def test_bm25_finds_izmir_spelled_either_way(tmp_path):
    manifest = build_bm25_index(TURKISH, tmp_path / "idx")
    assert manifest["bm25"]["tokenizer"] == "lewisrag.index.bm25.tokenize/4"
    scores, rows = BM25Index.load(tmp_path / "idx").search(["Where is Izmir?", "Where is İzmir?"], 1)
    assert rows[:, 0].tolist() == [0, 0] and (scores[:, 0] > 0).all()


def test_an_older_index_that_split_a_dotted_i_is_refused_and_one_without_loads(tmp_path, monkeypatch):
    """Its vocabulary shows nothing (the dot is in no word), so the passages are read: one with İ is
    refused, naming the passage and how to rebuild; an English and a Chinese index of /3 without
    one search as a fresh index does."""
    _build_3(monkeypatch, TURKISH, tmp_path / "old")
    with pytest.raises(InputError, match=r"passage 't0' has a word with a dotted capital I.*--overwrite") as e:
        BM25Index.load(tmp_path / "old")
    assert e.value.field == "bm25.tokenizer" and e.value.source == str(tmp_path / "old" / "manifest.json")
    _build_3(monkeypatch, NO_DOT, tmp_path / "old_ok")
    build_bm25_index(NO_DOT, tmp_path / "new")
    questions = ["Who leads Valdoria?", "里格诺有多少人"]
    old, new = BM25Index.load(tmp_path / "old_ok").search(questions, 2), BM25Index.load(tmp_path / "new").search(questions, 2)
    assert (old[1] == new[1]).all() and (old[0] == new[0]).all()


def test_verify_checks_the_words_of_an_index_of_tokenizer_3_that_loads(tmp_path, monkeypatch):
    """A /3 index loads only where its words are /4's, so `index verify` checks them as a fresh index's
    (it said "their words not checked" of every /3 index once /4 came)."""
    from lewisrag.index.verify import verify_index

    _build_3(monkeypatch, NO_DOT, tmp_path / "old_ok")
    checks = " ".join(c["result"] for c in verify_index(tmp_path / "old_ok")["checks"])
    assert "not checked" not in checks


def test_the_built_in_worlds_bm25_words_are_unchanged():
    """No passage of the English or Chinese world holds a dotted capital I: /4 splits them as /3 did,
    so the demo's BM25 index, hard negatives and ablation stay as they were."""
    from lewisrag.data.world import build_world

    for lang in ("en", "zh"):
        world = build_world(0, lang=lang)
        for p in (*world.passages_a, *world.passages_b):
            assert tokenize(f"{p.title} {p.text}") == _tokenize_3(f"{p.title} {p.text}"), p


# --- eval retrieval's short searches --------------------------------------------------------------------


def test_retrieval_recall_counts_searches_that_came_back_short():
    class Stub:
        def search(self, questions, k):
            return [[Hit(f"p{i}", "", "", 1.0, i) for i in range(2 if q == "short" else k)] for q in questions]

    qa = [QAExample("a", "short", [], ["p0"]), QAExample("b", "long", [], ["p3"])]
    r = retrieval_recall(Stub(), qa, ks=(1, 5))
    assert r["fewer_hits"] == 1 and r["hit@5"] == 1.0


def test_eval_retrieval_notes_short_searches_of_a_compressed_index(tiny_corpus, dpr_ckpt, tmp_path, monkeypatch, capsys):
    """An IVF index probing 1 of 8 lists finds fewer than 20 of 60 passages: hit@20 was printed with
    no word of it, where `index search` says so."""
    from lewisrag.index.dense import build_dense_index

    build_dense_index(read_passages(tiny_corpus["passages"]), dpr_ckpt, tmp_path / "ivf", DenseBuildConfig(factory="IVF8,Flat"))
    manifest = json.loads((tmp_path / "ivf" / "manifest.json").read_text())
    manifest["search_params"] = {"nprobe": 1}  # as `index tune` records a setting
    (tmp_path / "ivf" / "manifest.json").write_text(json.dumps(manifest))
    code, out, err = run_main(monkeypatch, capsys, "eval", "retrieval", "--index", tmp_path / "ivf", "--questions",
                              tiny_corpus["qa"], "--recall-at", 1, "--recall-at", 20, "--json")
    assert code == 0, err
    short = json.loads(out)[str(tmp_path / "ivf")]["fewer_hits"]
    assert short > 0, out
    assert f"note: {short} of 30 questions found fewer than 20 passages in {tmp_path / 'ivf'}" in err
    assert "at nprobe 1 reaches no more" in err


def test_eval_retrieval_notes_bm25_questions_with_fewer_scored_passages(tiny_corpus, tmp_path, monkeypatch, capsys):
    build_bm25_index(read_passages(tiny_corpus["passages"]), tmp_path / "bm25")
    code, out, err = run_main(monkeypatch, capsys, "eval", "retrieval", "--index", tmp_path / "bm25", "--questions",
                              tiny_corpus["qa"], "--recall-at", 40, "--json")  # 30 passages name a leader, 1 the country
    assert code == 0, err
    assert json.loads(out)[str(tmp_path / "bm25")]["fewer_hits"] == 30
    assert "note: 30 of 30 questions have fewer than 40 passages holding a word of them" in err
    code, out, err = run_main(monkeypatch, capsys, "eval", "retrieval", "--index", tmp_path / "bm25", "--questions",
                              tiny_corpus["qa"], "--recall-at", 5, "--json")
    assert json.loads(out)[str(tmp_path / "bm25")]["fewer_hits"] == 0 and "note" not in err


# --- a killed --reuse-embeddings build ------------------------------------------------------------------


def test_a_killed_reuse_build_keeps_its_finished_copy(tiny_corpus, dpr_ckpt, tmp_path, monkeypatch):
    """Killed while FAISS trained, a rerun under the same plan copied every stored vector again."""
    import lewisrag.index.dense.build as B

    ps = read_passages(tiny_corpus["passages"])
    B.build_dense_index(ps, dpr_ckpt, tmp_path / "flat")
    vectors = np.load(tmp_path / "flat" / "embeddings.npy")
    pq.write_table(pa.table({"id": [p.id for p in ps], "title": [p.title for p in ps], "text": [p.text for p in ps],
                             "embeddings": pa.array(list(vectors), type=pa.list_(pa.float32()))}), tmp_path / "e.parquet")
    cfg = DenseBuildConfig(shard_size=16, reuse_embeddings=True)
    copies = []
    real_copy, real_faiss = B._copy_stored, B.build_faiss

    def copy(passages, *rest):
        copies.append(len(passages))
        real_copy(passages, *rest)

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(B, "_copy_stored", copy)

    monkeypatch.setattr(B, "build_faiss", killed)
    with pytest.raises(KeyboardInterrupt):
        B.build_dense_index(open_passages(tmp_path / "e.parquet"), dpr_ckpt, tmp_path / "idx", cfg)
    monkeypatch.setattr(B, "build_faiss", real_faiss)
    manifest = B.build_dense_index(open_passages(tmp_path / "e.parquet"), dpr_ckpt, tmp_path / "idx", cfg)
    assert copies == [len(ps)]  # once, by the killed build
    assert manifest["build"]["embeddings"]["source"] == "reused"
    np.testing.assert_array_equal(np.load(tmp_path / "idx" / "embeddings.npy"), vectors)
