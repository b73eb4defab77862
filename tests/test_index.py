"""Indexes: BM25 and dense build/search, manifests, resumable encoding, encoder mismatch."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from conftest import run_cli
from lewisrag.data.io import InputError
from lewisrag.data.records import Passage, read_passages, read_qa
from lewisrag.index import open_retriever, retrieval_recall
from lewisrag.index.bm25 import BM25Index, build_bm25_index, tokenize
from lewisrag.index.dense import DenseBuildConfig, DenseIndex, build_dense_index, build_faiss
from lewisrag.index.store import IndexMismatchError
from lewisrag.training.dpr import DPRTrainConfig, train_dpr

TINY = dict(vocab_size=300, hidden_size=32, layers=1, heads=2, batch_size=8)


@pytest.fixture(scope="module")
def dpr_ckpt(tiny_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("dpr") / "ckpt"
    train_dpr(DPRTrainConfig(steps=5, **TINY), read_qa(tiny_corpus["qa"]), read_passages(tiny_corpus["passages"]), out)
    return out


def test_tokenize_english_and_chinese():
    assert tokenize("Who is the leader of Valdoria?") == ["leader", "valdoria"]
    assert tokenize("登录失败 422") == ["登", "登录", "录", "录失", "失", "失败", "败", "422"]  # characters and pairs
    assert tokenize("瓦尔，多") == ["瓦", "瓦尔", "尔", "多"]  # no pair across punctuation
    assert tokenize("返回422错误") == ["返", "返回", "回", "422", "错", "错误", "误"]  # a number ends at CJK


def test_a_bm25_index_of_tokenizer_1_over_chinese_is_refused(tmp_path, monkeypatch):
    """Indexes built before tokenizer /3 split Chinese otherwise than a question is split now (/1:
    characters only, and "422用户" one word), so one over CJK text is refused on load, naming the
    manifest's field; a build records /3 (test_cjk_tokens has the other cases)."""
    from lewisrag.index import bm25

    ps = [Passage("a", "注册", "用户名已被占用时返回 422"), Passage("b", "登录", "密码错误时提示邮箱或密码无效")]
    monkeypatch.setattr(bm25, "tokenize", lambda text: [t for t in tokenize(text) if len(t) == 1 or t.isascii()])
    monkeypatch.setattr(bm25, "TOKENIZER", "lewisrag.index.bm25.tokenize/1")
    build_bm25_index(ps, tmp_path / "old")
    monkeypatch.undo()
    with pytest.raises(InputError, match="without the character pairs.*build the index again") as e:
        BM25Index.load(tmp_path / "old")
    assert e.value.field == "bm25.tokenizer"
    assert build_bm25_index(ps, tmp_path / "new")["bm25"]["tokenizer"] == "lewisrag.index.bm25.tokenize/4"
    _, rows = BM25Index.load(tmp_path / "new").search(["密码错误怎么提示", "用户名被占用"], 2)
    assert rows[:, 0].tolist() == [1, 0]


def test_bm25_finds_names(tiny_corpus, tmp_path):
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    manifest = build_bm25_index(passages, tmp_path / "bm25")
    assert manifest["n_passages"] == len(passages) and (tmp_path / "bm25" / "manifest.json").exists()
    assert retrieval_recall(open_retriever(tmp_path / "bm25"), qa, ks=(1, 5))["recall@5"] == 1.0


def test_a_damaged_bm25_index_is_bad_input_when_searched_and_verified(tiny_corpus, tmp_path):
    """Damage a load cannot see without reading the files whole: a document id past the end ended in
    bm25s' IndexError (a traceback), NaN scores ranked at random, printed as NaN, and passed `index verify`."""
    import shutil

    from lewisrag.index.verify import verify_index

    build_bm25_index(read_passages(tiny_corpus["passages"]), tmp_path / "good")
    for name, damage, found in (("ids", lambda a: a.__setitem__(slice(None), 10**6), "cannot search the BM25 index"),
                                ("nan", lambda a: a.__setitem__(slice(None), np.nan), "not finite numbers")):
        shutil.copytree(tmp_path / "good", tmp_path / name)
        file = tmp_path / name / "bm25" / ("indices.csc.index.npy" if name == "ids" else "data.csc.index.npy")
        array = np.load(file)
        damage(array)
        np.save(file, array)
        with pytest.raises(InputError, match=found) as e:
            BM25Index.load(tmp_path / name).search(["who leads the country"], 3)
        assert e.value.source == str(tmp_path / name / "bm25")
    with pytest.raises(InputError, match=r"score entry 0 \(0-based\) is not a finite number"):
        verify_index(tmp_path / "nan")
    assert BM25Index.load(tmp_path / "good").search(["who leads the country"], 3)[0].shape == (1, 3)


def test_retrieval_recall_tells_plain_recall_from_dprs_top_k_accuracy():
    """A question with two gold passages that gets one of them is a top-k hit and half a recall."""
    from lewisrag.data.records import QAExample
    from lewisrag.index import Hit

    ranked = {"one": ["a", "x", "y"], "two": ["b", "x", "c"], "none": ["x", "y", "z"]}

    class Stub:
        def search(self, questions, k):
            return [[Hit(pid, "", "", 1.0, i) for i, pid in enumerate(ranked[q][:k])] for q in questions]

    qa = [QAExample("q1", "one", ["A"], ["a"]), QAExample("q2", "two", ["B"], ["b", "c"]),
          QAExample("q3", "none", ["C"], ["c"]), QAExample("q4", "two", ["D"], [])]
    r = retrieval_recall(Stub(), qa, ks=(1, 3))
    assert r["n"] == 3 and r["skipped"] == 1
    assert r["hit@1"] == pytest.approx(2 / 3) and r["recall@1"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert r["hit@3"] == pytest.approx(2 / 3) and r["recall@3"] == pytest.approx(2 / 3)
    assert r["per_question"]["q2"] == {"1": 0.5, "3": 1.0} and r["first_gold"] == {"q1": 0, "q2": 0, "q3": None}


def test_bm25_chinese():
    index = BM25Index.in_memory([Passage("a", "注册", "用户名已被占用时返回 422"), Passage("b", "登录", "密码错误时提示邮箱或密码无效")])
    _, rows = index.search(["密码错误怎么提示"], 1)
    assert rows[0, 0] == 1


@pytest.mark.parametrize("factory", ["Flat", "HNSW32", "IVF4,PQ4x4", "IVF4,PQ8x4fs"])
def test_faiss_factories_search_by_inner_product(factory):
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(8, 16))
    x = (centers[rng.integers(0, 8, 400)] + 0.1 * rng.normal(size=(400, 16))).astype(np.float32)
    index = build_faiss(x, factory)
    _, rows = index.search(x[:20], 5)
    exact = np.argsort(-(x[:20] @ x.T), axis=1)[:, :5]
    overlap = np.mean([len(set(a) & set(b)) / 5 for a, b in zip(rows, exact)])
    assert overlap >= (0.99 if factory == "Flat" else 0.3)


def test_opq_ivf_trains_block_by_block_as_faiss_trains_it_whole():
    """train_faiss: OPQ on a spread subsample, then IVF-PQ on the sample narrowed block by block;
    FAISS's IndexPreTransform.train on the whole sample does the same steps at full width."""
    import faiss

    from lewisrag.index.dense import _no_polysemous_training, train_faiss, training_rows, training_sample_size

    rng = np.random.default_rng(0)
    centers = rng.normal(size=(32, 32))
    x = (centers[rng.integers(0, 32, 6000)] + 0.3 * rng.normal(size=(6000, 32))).astype(np.float32)
    reads = []

    def read(part):
        reads.append(len(part))
        return x[part]

    blockwise, whole = (faiss.index_factory(32, "OPQ16_32,IVF16,PQ16", faiss.METRIC_INNER_PRODUCT) for _ in range(2))
    for index in (blockwise, whole):
        faiss.downcast_VectorTransform(faiss.downcast_index(index).chain.at(0)).niter = 4  # FAISS's 50 is slow here
        _no_polysemous_training(index)  # as build_faiss does: polysemous training takes most of the time
    rows = training_rows(blockwise, len(x), 4000)
    train_faiss(blockwise, read, rows, block=1000)
    assert blockwise.is_trained and reads == [4000, 1000, 1000, 1000, 1000]  # OPQ's sample (at most 65,536), then blocks
    whole.train(x[rows])
    for index in (blockwise, whole):
        index.add(x)
        faiss.ParameterSpace().set_index_parameter(index, "nprobe", 16)
    # under TRANSFORM_SAMPLE rows OPQ sees the same vectors either way, so the two indexes are the same
    found = blockwise.search(x[:50], 5)[1]
    assert np.array_equal(found, whole.search(x[:50], 5)[1])
    exact = np.argsort(-(x[:50] @ x.T), axis=1)[:, :5]
    assert np.mean([len(set(a) & set(b)) / 5 for a, b in zip(found, exact)]) >= 0.6
    # an IVF index trains on 64 vectors a list when its lists outnumber the configured sample
    assert training_sample_size(faiss.index_factory(8, "IVF4000,Flat"), 10**6, 100_000) == 256_000


def _clustered_unequal_norms(n=12000, dim=32, topics=40, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(topics, dim))
    x = centers[rng.integers(0, topics, n)] + 0.5 * rng.normal(size=(n, dim))
    return (x * rng.uniform(0.5, 2.0, size=(n, 1))).astype(np.float32)  # unequal norms: MIPS, not cosine


@pytest.mark.parametrize("factory", ["IVF128,Flat", "IVF128_HNSW32,Flat"])
def test_many_lists_train_by_two_level_spherical_kmeans(monkeypatch, factory):
    """An IVF with TWO_LEVEL_LISTS lists or more takes unit-length centroids from two-level k-means:
    its lists stay balanced and it finds the inner-product top 5 as FAISS's one-level k-means does."""
    import faiss

    from lewisrag.index.dense import faiss_build  # train_faiss looks both patched names up there

    x = _clustered_unequal_norms()
    q = x[:200] + 0.05
    exact = np.argsort(-(q @ x.T), axis=1)[:, :5]
    called, two_level = [], faiss_build.two_level_centroids
    monkeypatch.setattr(faiss_build, "two_level_centroids", lambda *a, **kw: called.append(1) or two_level(*a, **kw))

    def recall_and_balance(index, nprobe):
        ivf = faiss.extract_index_ivf(index)
        sizes = np.array([ivf.invlists.list_size(i) for i in range(ivf.nlist)])
        ivf.nprobe = nprobe
        found = index.search(q, 5)[1]
        return np.mean([len(set(a) & set(b)) / 5 for a, b in zip(found, exact)]), (sizes**2).sum() * len(sizes) / sizes.sum() ** 2

    monkeypatch.setattr(faiss_build, "TWO_LEVEL_LISTS", 64)
    index = faiss_build.build_faiss(x, factory)
    ivf = faiss.extract_index_ivf(index)
    quantizer = faiss.downcast_index(ivf.quantizer)
    centroids = quantizer.reconstruct_n(0, ivf.nlist)
    assert called == [1] and quantizer.ntotal == 128 and np.allclose(np.linalg.norm(centroids, axis=1), 1, atol=1e-4)
    if isinstance(quantizer, faiss.IndexHNSW):
        assert quantizer.hnsw.efSearch >= 64  # the adding found each vector's nearest list
    monkeypatch.setattr(faiss_build, "TWO_LEVEL_LISTS", 10**9)
    one_level = faiss_build.build_faiss(x, factory)
    assert called == [1]
    for nprobe in (4, 8):
        recall, imbalance = recall_and_balance(index, nprobe)
        recall_one, imbalance_one = recall_and_balance(one_level, nprobe)
        assert recall >= recall_one - 0.02 and recall >= (0.95 if nprobe == 4 else 0.99)
        assert imbalance <= max(1.5, imbalance_one)


def test_two_level_centroids_gives_a_small_group_no_list_and_counts_exactly():
    from lewisrag.index.dense import two_level_centroids

    rng = np.random.default_rng(1)
    big = rng.normal(size=(3000, 8)) + 4 * np.eye(8)[0]
    tiny = rng.normal(size=(3, 8)) - 40 * np.eye(8)[1]  # a group far away with too few rows for a list
    centroids = two_level_centroids(np.concatenate([big, tiny]).astype(np.float32), nlist=49)
    assert centroids.shape == (49, 8) and centroids.dtype == np.float32
    assert np.allclose(np.linalg.norm(centroids, axis=1), 1, atol=1e-4)
    # as many lists as rows: every row its own direction
    x = rng.normal(size=(20, 8)).astype(np.float32)
    assert two_level_centroids(x, nlist=20).shape == (20, 8)


def test_build_reads_a_mapped_vector_file_without_keeping_its_pages_mapped(tmp_path, monkeypatch):
    from lewisrag.index.dense import faiss_build

    monkeypatch.setattr(faiss_build, "ADD_ROWS", 500)  # several blocks, each read through a mapping of its own
    x = np.random.default_rng(0).normal(size=(2300, 16)).astype(np.float16)
    np.save(tmp_path / "v.npy", x)
    mapped = np.load(tmp_path / "v.npy", mmap_mode="r")
    read = faiss_build.row_reader(mapped)
    rows = np.array([0, 1, 499, 500, 1700, 2299])
    assert np.array_equal(read(rows), x[rows].astype(np.float32)) and read(rows[:0]).shape == (0, 16)
    index = build_faiss(mapped, "IVF8,PQ8", train_sample=1000)
    assert index.ntotal == 2300
    assert _mapped_rss_kb(tmp_path / "v.npy") == 0  # the caller's mapping was never read; the others are closed
    whole = build_faiss(x.astype(np.float32), "IVF8,PQ8", train_sample=1000)  # the same sample, the same index
    assert np.array_equal(index.search(x[:20].astype(np.float32), 5)[1], whole.search(x[:20].astype(np.float32), 5)[1])


def test_dense_build_search_and_vectors(tiny_corpus, dpr_ckpt, tmp_path):
    passages = read_passages(tiny_corpus["passages"])
    manifest = build_dense_index(passages, dpr_ckpt, tmp_path / "idx", DenseBuildConfig(shard_size=16))
    for field in ("encoder", "dim", "metric", "faiss_factory", "n_passages", "content_hash"):
        assert field in manifest
    assert not (tmp_path / "idx.partial").exists()
    index = DenseIndex.load(tmp_path / "idx")
    q = np.asarray(index.embeddings[:3])
    scores, rows = index.search(q, 4)
    assert rows[:, 0].tolist() == [0, 1, 2] or np.allclose(scores[:, 0], (q * q).sum(1), rtol=1e-4)
    vecs = index.vectors(rows)  # (B, K, D)
    assert vecs.shape == (3, 4, index.dim)
    np.testing.assert_allclose(np.einsum("bd,bkd->bk", q, vecs), scores, rtol=1e-4, atol=1e-4)


def test_killed_build_resumes_to_the_same_index(tiny_corpus, dpr_ckpt, tmp_path):
    passages = read_passages(tiny_corpus["passages"])
    cfg = DenseBuildConfig(shard_size=16)
    build_dense_index(passages, dpr_ckpt, tmp_path / "full", cfg)

    calls = []

    def die_after_two_shards(stage, done, total):
        calls.append(done)
        if stage == "encode" and done >= 48:  # shard 3 encoded, not yet saved
            raise KeyboardInterrupt  # stands in for a kill between shards

    with pytest.raises(KeyboardInterrupt):
        build_dense_index(passages, dpr_ckpt, tmp_path / "resumed", cfg, die_after_two_shards)
    assert not (tmp_path / "resumed").exists()
    assert len(list((tmp_path / "resumed.partial" / "shards").glob("*.done"))) == 2
    # a SIGKILLed writer's temporary files (a dead process of this host) used to move into the index
    import subprocess
    import sys

    from lewisrag.data.io import owner_tag

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    tag = f"{dead}-{owner_tag().split('-')[1]}"
    planted = [tmp_path / "resumed.partial" / f".embeddings.npy.{tag}.abcd1234.tmp",
               tmp_path / "resumed.partial" / "shards" / f".00002.npy.{tag}.abcd1234.tmp"]
    for f in planted:
        f.write_bytes(b"half")
    build_dense_index(passages, dpr_ckpt, tmp_path / "resumed", cfg)
    assert not [f for f in (tmp_path / "resumed").rglob("*.tmp")]
    a, b = DenseIndex.load(tmp_path / "full"), DenseIndex.load(tmp_path / "resumed")
    np.testing.assert_array_equal(np.asarray(a.embeddings), np.asarray(b.embeddings))
    assert json.loads((tmp_path / "full" / "manifest.json").read_text())["content_hash"] == b.manifest["content_hash"]


def test_mismatched_encoder_refused_unless_swap(tiny_corpus, dpr_ckpt, tmp_path):
    passages = read_passages(tiny_corpus["passages"])
    build_dense_index(passages, dpr_ckpt, tmp_path / "idx")
    other = tmp_path / "other"
    train_dpr(DPRTrainConfig(steps=1, seed=1, **TINY), read_qa(tiny_corpus["qa"]), passages, other)
    with pytest.raises(IndexMismatchError, match="--swap"):
        open_retriever(tmp_path / "idx", other)
    assert open_retriever(tmp_path / "idx", other, swap=True).search(["Who leads?"], 2)[0]
    r = run_cli("index", "search", "--index", str(tmp_path / "idx"), "-q", "who", "--encoder", str(other))
    assert r.returncode == 2 and "ctx_fingerprint" in r.stderr and "Traceback" not in r.stderr


def test_search_cli_json(tiny_corpus, tmp_path):
    build_bm25_index(read_passages(tiny_corpus["passages"]), tmp_path / "bm25")
    r = run_cli("index", "search", "--index", str(tmp_path / "bm25"), "-q", "capital founded 1805", "--n-docs", "3", "--json")
    assert r.returncode == 0, r.stderr
    hits = json.loads(r.stdout)
    assert len(hits) == 3 and set(hits[0]) == {"id", "title", "text", "score"}
    assert "1805" in hits[0]["text"]


def test_search_shows_a_small_index_whole_by_default_and_refuses_a_given_n_docs_past_it(tiny_corpus, tmp_path):
    """The default --n-docs 5 was refused on an index of fewer passages ('must be between 1 and the index's 3
    passages, got 5'), which the user had not asked for; `index targets` lowers its own with a note."""
    build_bm25_index(read_passages(tiny_corpus["passages"])[:3], tmp_path / "bm25")
    r = run_cli("index", "search", "--index", str(tmp_path / "bm25"), "-q", "capital founded", "--json")
    assert r.returncode == 0 and len(json.loads(r.stdout)) == 3, r.stderr
    assert "holds 3 passages: all 3 are shown, not 5" in r.stderr
    r = run_cli("index", "search", "--index", str(tmp_path / "bm25"), "-q", "capital founded", "--n-docs", "5")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr


def test_index_dir_without_manifest_is_an_error(tmp_path):
    (tmp_path / "idx").mkdir()
    r = run_cli("index", "search", "--index", str(tmp_path / "idx"), "-q", "x")
    assert r.returncode == 2 and "no manifest.json" in r.stderr
    shutil.rmtree(tmp_path / "idx")


def test_bf16_build_stays_close_to_fp32_and_records_its_precision(tiny_corpus, dpr_ckpt, tmp_path):
    passages = read_passages(tiny_corpus["passages"])
    build_dense_index(passages, dpr_ckpt, tmp_path / "fp32", DenseBuildConfig(device="cpu"))
    manifest = build_dense_index(passages, dpr_ckpt, tmp_path / "bf16", DenseBuildConfig(device="cpu", mixed_precision="bf16"))
    assert manifest["build"]["mixed_precision"] == "bf16"
    a = np.asarray(DenseIndex.load(tmp_path / "fp32").embeddings)
    b = np.asarray(DenseIndex.load(tmp_path / "bf16").embeddings)
    assert not np.array_equal(a, b)  # autocast did run
    cosine = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert cosine.min() > 0.99


@pytest.mark.parametrize("flags, message", [(["--mixed-precision", "fp16", "--device", "cpu"], "fp16 needs a GPU"),
                                            (["--mixed-precision", "int8"], "must be no, bf16 or fp16"),
                                            (["--device", "tpu"], "must be auto, cpu or cuda")])
def test_index_build_refuses_bad_device_flags(tiny_corpus, dpr_ckpt, tmp_path, flags, message):
    r = run_cli("index", "build", "--passages", str(tiny_corpus["passages"]), "--encoder", str(dpr_ckpt),
                "--out", str(tmp_path / "idx"), *flags)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "idx").exists() and not (tmp_path / "idx.partial").exists()


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_matrix_product_search_ranks_as_faiss_flat(tmp_path, monkeypatch, dtype):
    """float32 on the device, or float16 (half the memory) with its candidates re-scored in float32."""
    import torch

    from lewisrag.index.dense import index as dense_index

    rng = np.random.default_rng(3)
    # topics, so that many passages score close to each question's top 7: float16's rounding must not reorder them
    x = (rng.normal(size=(50, 24))[rng.integers(0, 50, 5000)] + 0.2 * rng.normal(size=(5000, 24))).astype(np.float32)
    passages = [Passage(str(i), "", f"passage {i}") for i in range(len(x))]
    index = DenseIndex(tmp_path, {"dim": 24, "faiss_factory": "Flat"}, build_faiss(x, "Flat"), x, passages)
    q = np.vstack([x[:3], rng.normal(size=(13, 24)).astype(np.float32)])
    want_s, want_r = index.search(q, 7)
    monkeypatch.setattr(dense_index, "SEARCH_ROWS", 1024)  # several blocks, merged: the last one partial
    index.search_on("cpu", dtype)
    assert index.device_vectors.dtype == getattr(torch, dtype)
    got_s, got_r = index.search(q, 7)
    np.testing.assert_array_equal(got_r, want_r)
    np.testing.assert_allclose(got_s, want_s, rtol=1e-5, atol=1e-4)
    assert got_r.dtype == np.int64 and got_s.dtype == np.float32
    if dtype == "float16":  # the product alone reorders close scores; the re-scoring puts them back
        half = (torch.from_numpy(q).half() @ index.device_vectors.T).float().topk(7, dim=1).indices.numpy()
        assert not np.array_equal(half, want_r)
    index.replace_vectors(x[::-1].copy(), {})  # new vectors stay where and as the search was placed
    assert index.device_vectors.dtype == getattr(torch, dtype)
    np.testing.assert_array_equal(index.search(q, 7)[1], len(x) - 1 - want_r)
    with pytest.raises(ValueError, match="dtype"):
        index.search_on("cpu", "bfloat16")


def test_a_read_only_float16_store_is_placed_without_torch_warning(tmp_path):
    """A float16 store's block is the read-only memory map itself: torch.from_numpy warned on every search_on."""
    import warnings

    x = np.random.default_rng(0).normal(size=(40, 8)).astype(np.float16)
    stored = np.lib.format.open_memmap(tmp_path / "embeddings.npy", mode="w+", dtype=np.float16, shape=x.shape)
    stored[:] = x
    stored.flush()
    stored = np.load(tmp_path / "embeddings.npy", mmap_mode="r")
    index = DenseIndex(tmp_path, {"dim": 8, "faiss_factory": "Flat"}, build_faiss(x.astype(np.float32), "Flat"), stored, [])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        index.search_on("cpu", "float16")
    np.testing.assert_array_equal(index.device_vectors.numpy(), x)


def test_matrix_product_search_refuses_an_approximate_index(tmp_path):
    x = np.random.default_rng(0).normal(size=(400, 16)).astype(np.float32)
    index = DenseIndex(tmp_path, {"dim": 16, "faiss_factory": "HNSW32"}, build_faiss(x, "HNSW32"), x, [])
    with pytest.raises(InputError, match="only for a Flat index"):
        index.search_on("cpu")


def test_training_searches_with_faiss_off_the_gpu(tmp_path):
    from lewisrag.training.rag import RagTrainConfig
    from lewisrag.training.rag_data import check_config, place_search

    x = np.random.default_rng(0).normal(size=(100, 8)).astype(np.float32)
    index = DenseIndex(tmp_path, {"dim": 8, "faiss_factory": "Flat"}, build_faiss(x, "Flat"), x, [])
    assert place_search(index, "auto", "cpu") == "faiss" and index.device_vectors is None
    assert place_search(index, "cpu", "cpu") == "faiss"
    with pytest.raises(InputError, match="not on a GPU"):
        place_search(index, "gpu", "cpu")
    with pytest.raises(InputError, match="--search-device"):
        check_config(RagTrainConfig(search_device="tpu"), 1)


def test_passage_store_is_arrow_read_by_row_and_old_indexes_still_load(tiny_corpus, tmp_path, monkeypatch):
    import lewisrag.data.passages as passages_module
    from lewisrag.data.io import write_jsonl
    from lewisrag.index import store

    passages = read_passages(tiny_corpus["passages"])
    build_bm25_index(passages, tmp_path / "idx")
    assert (tmp_path / "idx" / "passages.arrow").is_file() and not (tmp_path / "idx" / "passages.jsonl").exists()
    made = []

    def counted(*fields):
        made.append(fields[0])
        return Passage(*fields)

    monkeypatch.setattr(passages_module.table, "Passage", counted)  # read there, by PassageTable
    index = BM25Index.load(tmp_path / "idx")  # memory-mapped: only the rows the sample hash checks are parsed
    assert made == [passages[r].id for r in store.sample_rows(len(passages))] and len(index.passages) == len(passages)
    assert len(store.sample_rows(21_015_324)) == store.SAMPLE_ROWS  # at any size
    made.clear()
    assert [index.passages[r] for r in (7, 0, 7)] == [passages[7], passages[0], passages[7]]
    assert made == [passages[7].id, passages[0].id, passages[7].id]  # reading K rows makes K objects
    monkeypatch.undo()
    assert list(index.passages) == passages
    # an index of format 1 (passages.jsonl) keeps loading
    (tmp_path / "idx" / "passages.arrow").unlink()
    write_jsonl(tmp_path / "idx" / "passages.jsonl", (p.to_dict() for p in passages))
    assert BM25Index.load(tmp_path / "idx").passages == passages
    (tmp_path / "idx" / "passages.jsonl").unlink()
    (tmp_path / "idx" / "passages.arrow").write_bytes(b"not arrow")
    with pytest.raises(InputError, match="cannot read the passage store"):
        store.load_passages(tmp_path / "idx", {"n_passages": len(passages)})


def test_float16_vectors_are_stored_half_size_and_score_as_searched(tiny_corpus, dpr_ckpt, tmp_path):
    passages = read_passages(tiny_corpus["passages"])
    manifest = build_dense_index(passages, dpr_ckpt, tmp_path / "idx", DenseBuildConfig(shard_size=16, vector_dtype="float16"))
    assert manifest["build"]["vector_dtype"] == "float16"
    index = DenseIndex.load(tmp_path / "idx")
    assert index.embeddings.dtype == np.float16
    q = np.asarray(index.embeddings[:4], dtype=np.float32)
    scores, rows = index.search(q, 3)
    vecs = index.vectors(rows)
    assert vecs.dtype == np.float32
    np.testing.assert_allclose(np.einsum("bd,bkd->bk", q, vecs), scores, rtol=1e-4, atol=1e-4)  # FAISS holds the same values
    r = run_cli("index", "build", "--passages", str(tiny_corpus["passages"]), "--encoder", str(dpr_ckpt),
                "--out", str(tmp_path / "bad"), "--vector-dtype", "int8")
    assert r.returncode == 2 and "--vector-dtype" in r.stderr and "Traceback" not in r.stderr


def test_faiss_build_adds_a_memory_map_without_copying_it(tmp_path, monkeypatch):
    import tracemalloc

    from lewisrag.index.dense import faiss_build

    n, d = 100_000, 32  # 6.4 MB stored as float16, 12.8 MB as the float32 FAISS takes
    x = np.lib.format.open_memmap(tmp_path / "v.npy", mode="w+", dtype=np.float16, shape=(n, d))
    x[:] = np.random.default_rng(0).normal(size=(n, d)).astype(np.float16)
    x.flush()
    vectors = np.load(tmp_path / "v.npy", mmap_mode="r")
    monkeypatch.setattr(faiss_build, "ADD_ROWS", 4096)
    tracemalloc.start()
    index = build_faiss(vectors, "Flat")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert index.ntotal == n
    assert peak < 2_000_000, peak  # numpy never held more than a block converted (4096 x 32 x 4 B = 0.5 MB) at once


def test_index_tune_records_the_smallest_setting_and_searches_use_it(tiny_corpus, dpr_ckpt, tmp_path):
    from lewisrag.index.search import open_retriever
    from lewisrag.index.tuning import exact_top_k

    passages = read_passages(tiny_corpus["passages"])
    build_dense_index(passages, dpr_ckpt, tmp_path / "ivf", DenseBuildConfig(factory="IVF8,Flat", vector_dtype="float16"))
    r = run_cli("index", "tune", "--index", str(tmp_path / "ivf"), "--questions", str(tiny_corpus["qa"]), "--target-recall", "1.0",
                "--n-docs", "3", "--json")
    assert r.returncode == 0, r.stderr
    record = json.loads(r.stdout)
    assert record["reached"] and record["tuned_recall_at_k"] == 1.0 and record["knob"] == "nprobe"  # on the 24 tuning questions
    assert (record["held_out_questions"], record["seed"]) == (6, 0)  # --held-out 0.2 of the 30, the recall measured apart
    chosen = record["search_params"]["nprobe"]
    assert 1 <= chosen <= 8 and all(v < 1.0 for n, v in record["trials"].items() if int(n) < chosen)  # the smallest that reaches it
    retriever = open_retriever(tmp_path / "ivf")  # a fresh load applies the recorded nprobe
    q = retriever.encode([ex.question for ex in read_qa(tiny_corpus["qa"])])
    _, exact = exact_top_k(retriever.index.embeddings, q, 3)
    _, rows = retriever.index.search(q, 3)
    assert np.array_equal(np.sort(rows, 1), np.sort(exact, 1))
    # with re-ranking recorded, searches take that many candidates and rank them from the stored vectors
    r = run_cli("index", "tune", "--index", str(tmp_path / "ivf"), "--questions", str(tiny_corpus["qa"]), "--target-recall", "1.0",
                "--n-docs", "3", "--rerank-depth", "10", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["rerank_depth"] == 10
    index = DenseIndex.load(tmp_path / "ivf")
    scores, rows = index.search(q, 3)
    np.testing.assert_allclose(scores, np.einsum("bd,bkd->bk", q, index.vectors(rows)), rtol=1e-5, atol=1e-5)
    assert np.array_equal(rows, exact)
    for flags, message in [(["--target-recall", "1.5"], "--target-recall"), (["--rerank-depth", "2"], "--rerank-depth")]:
        r = run_cli("index", "tune", "--index", str(tmp_path / "ivf"), "--questions", str(tiny_corpus["qa"]), "--n-docs", "3", *flags)
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
    # a Flat index has nothing to tune: refused in one line, nothing recorded
    build_dense_index(passages, dpr_ckpt, tmp_path / "flat", DenseBuildConfig(factory="Flat"))
    before = (tmp_path / "flat" / "manifest.json").read_text()
    r = run_cli("index", "tune", "--index", str(tmp_path / "flat"), "--questions", str(tiny_corpus["qa"]), "--n-docs", "3", "--json")
    assert r.returncode == 2 and r.stdout == "" and "a Flat index searches exactly" in r.stderr and "Traceback" not in r.stderr
    assert (tmp_path / "flat" / "manifest.json").read_text() == before
    # a given --encoder that does not exist is named as such, not blamed on the index
    r = run_cli("index", "search", "--index", str(tmp_path / "flat"), "--query", "who", "--encoder", str(tmp_path / "nope"))
    assert r.returncode == 2 and r.stderr.strip() == f"error: {tmp_path / 'nope'}: --encoder: not found"


@pytest.mark.parametrize("factory", ["Flat", "HNSW16", "IVF8,Flat", "IVF8,PQ4x4", "IVF8,PQ8x4fs"])
def test_mapped_faiss_indexes_search_as_read_ones(tmp_path, factory):
    import faiss

    from lewisrag.index.dense import _read_faiss

    x = np.random.default_rng(1).normal(size=(600, 16)).astype(np.float32)
    faiss.write_index(build_faiss(x, factory), str(tmp_path / "i.faiss"))
    mapped, whole = _read_faiss(tmp_path / "i.faiss", mmap=True), _read_faiss(tmp_path / "i.faiss", mmap=False)
    for index in (mapped, whole):
        faiss.ParameterSpace().set_index_parameter(index, "nprobe", 8) if "IVF" in factory else None
    assert np.array_equal(mapped.search(x[:20], 5)[1], whole.search(x[:20], 5)[1])


def _mapping_flags(path) -> list[str]:
    """VmFlags of each of this process's mappings of `path` (/proc/self/smaps): "rr" is MADV_RANDOM."""
    flags, current = [], False
    with open("/proc/self/smaps") as f:
        for line in f:
            if line[:1].isalnum() and "-" in line.split()[0] and ":" not in line.split()[0]:
                current = line.rstrip().endswith(str(path))
            elif current and line.startswith("VmFlags:"):
                flags.append(line.split(":", 1)[1].strip())
    return flags


def _mapped_rss_kb(path) -> int:
    """Resident kB of this process's mappings of `path` (/proc/self/smaps)."""
    total, current = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if line[:1].isalnum() and "-" in line.split()[0] and ":" not in line.split()[0]:
                current = line.rstrip().endswith(str(path))
            elif current and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total


@pytest.mark.skipif(not hasattr(__import__("mmap"), "MADV_RANDOM"), reason="no madvise on this platform")
def test_stored_vectors_are_mapped_for_random_rows_and_scanned_through_a_mapping_of_their_own(tiny_corpus, dpr_ckpt, tmp_path):
    """Doc scores and re-ranking read a few rows at random: the mapping is advised MADV_RANDOM (no
    read-ahead window per row, docs/scale.md); whole scans take `scan_vectors`, with default read-ahead."""
    passages = read_passages(tiny_corpus["passages"])
    build_dense_index(passages, dpr_ckpt, tmp_path / "idx", DenseBuildConfig(vector_dtype="float16"))
    index = DenseIndex.load(tmp_path / "idx")
    path = (tmp_path / "idx" / "embeddings.npy").resolve()
    assert [("rr" in f.split()) for f in _mapping_flags(path)] == [True]
    scan = index.scan_vectors()
    assert np.array_equal(scan, index.embeddings) and scan is not index.embeddings
    assert sorted("rr" in f.split() for f in _mapping_flags(path)) == [False, True]
    rows = np.array([[3, 0], [1, 2]])
    np.testing.assert_array_equal(index.vectors(rows), np.asarray(scan, dtype=np.float32)[rows])
    in_ram = DenseIndex.load(tmp_path / "idx", mmap=False)
    assert in_ram.scan_vectors() is in_ram.embeddings


def test_text_that_looks_like_rich_markup_is_printed_as_it_is(tmp_path):
    """Tables and notes read their text as rich markup: "[/x]" in a title or a query was a
    MarkupError traceback (exit 1) and "[bold]" in a passage vanished."""
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"id": "1", "title": "Alpha [/x] beta", "text": "alpha [bold]one[/bold] two"}) + "\n"
                    + json.dumps({"id": "2", "title": "B", "text": "gamma"}) + "\n")
    out = tmp_path / "out[/y]" / "passages.jsonl"  # printed in chunk's table
    r = run_cli("chunk", "--docs", str(docs), "--out", str(out))
    assert r.returncode == 0 and out.is_file(), r.stderr  # the table names the folder (cut to the terminal's width)
    r = run_cli("index", "build", "--passages", str(out), "--encoder", "bm25", "--out", str(tmp_path / "idx"))
    assert r.returncode == 0, r.stderr
    r = run_cli("index", "search", "--index", str(tmp_path / "idx"), "-q", "alpha [/q]", "--n-docs", "2")
    assert r.returncode == 0, r.stderr
    assert "alpha [/q]" in r.stdout and "Alpha [/x] beta" in r.stdout and "[bold]one[/bold]" in r.stdout


def test_a_load_refuses_another_indexs_passage_store_and_damaged_vectors(tiny_corpus, dpr_ckpt, tmp_path):
    """The damage a load checks in O(1): a passage store swapped for one of the same length (the rows
    sampled at build, `store.sample_hash`), and stored vectors no longer finite (rows sampled)."""
    import dataclasses

    from lewisrag.index import store

    passages = read_passages(tiny_corpus["passages"])
    build_bm25_index(passages, tmp_path / "a")
    edited = [dataclasses.replace(p, text=p.text + " again") if i == len(passages) - 1 else p for i, p in enumerate(passages)]
    for name, other in (("edited", edited), ("reordered", passages[1:] + passages[:1])):
        build_bm25_index(other, tmp_path / name)
        shutil.copyfile(tmp_path / name / "passages.arrow", tmp_path / "a" / "passages.arrow")
        with pytest.raises(InputError, match="does not hold the passages this index was built over") as e:
            BM25Index.load(tmp_path / "a")
        assert str(tmp_path / "a" / "passages.arrow") in str(e.value)
    # an index built before the field existed loads unchecked
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    del manifest["sample_hash"]
    (tmp_path / "a" / "manifest.json").write_text(json.dumps(manifest))
    assert len(BM25Index.load(tmp_path / "a").passages) == len(passages)

    build_dense_index(passages, dpr_ckpt, tmp_path / "d", DenseBuildConfig(shard_size=16))
    assert len(DenseIndex.load(tmp_path / "d").passages) == len(passages)
    vectors = np.load(tmp_path / "d" / "embeddings.npy", mmap_mode="r+")
    vectors[store.sample_rows(len(vectors))[-1], 3] = np.nan  # the last row: always sampled
    vectors.flush()
    del vectors
    r = run_cli("index", "search", "--index", str(tmp_path / "d"), "--query", "who?")
    assert r.returncode == 2 and "non-finite vectors" in r.stderr and "Traceback" not in r.stderr
    with pytest.raises(InputError, match="non-finite vectors"):
        DenseIndex.load(tmp_path / "d")


def test_index_verify_reads_every_row_and_names_the_damage(dpr_ckpt, tiny_corpus, tmp_path, monkeypatch):
    """`index verify`: what a load's 64 sampled rows miss (a passage edited, a vector turned NaN or
    changed off those rows) is found and placed by its block of rows; a sound index passes."""
    import dataclasses

    from lewisrag.index import store
    from lewisrag.index.verify import verify_index

    monkeypatch.setattr(store, "BLOCK_ROWS", 16)  # 200 passages: 13 blocks
    passages = [Passage(f"p{i}", f"T{i}", f"passage number {i} of the verify corpus") for i in range(200)]
    row = next(r for r in range(40, 200) if r not in store.sample_rows(200))  # a row no load reads
    edited = [dataclasses.replace(p, text=p.text + "!") if i == row else p for i, p in enumerate(passages)]
    build_bm25_index(passages, tmp_path / "b")
    build_bm25_index(edited, tmp_path / "e")
    report = verify_index(tmp_path / "b")
    assert [c["check"] for c in report["checks"]] == ["loads", "passages"] and "13 blocks" in report["checks"][1]["result"]
    shutil.copyfile(tmp_path / "e" / "passages.arrow", tmp_path / "b" / "passages.arrow")
    assert len(BM25Index.load(tmp_path / "b").passages) == 200  # the sampled rows are all the same
    first = row // 16 * 16
    with pytest.raises(InputError, match=f"rows {first}-{first + 15} \\(0-based\\) differ") as e:
        verify_index(tmp_path / "b")
    assert str(tmp_path / "b" / "passages.arrow") in str(e.value)
    # an index built before block hashes: the whole-store hash still differs
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    del manifest["block_hashes"]
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="differs from the passages the index was built over \\(content hash"):
        verify_index(tmp_path / "b")
    manifest["block_hashes"] = {"rows": 16, "sha256": ["0"] * 12}  # a hand-edited manifest: one line
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="field 'block_hashes.sha256': expected one hash per 16"):
        verify_index(tmp_path / "b")

    build_dense_index(passages, dpr_ckpt, tmp_path / "d", DenseBuildConfig(shard_size=64))
    r = run_cli("index", "verify", "--index", str(tmp_path / "d"), "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)["checks"]
    assert [c["check"] for c in report] == ["loads", "encoding", "passages", "vectors", "faiss"]
    checks = {c["check"]: c["result"] for c in report}
    assert f"8 passages spread over the index encoded afresh by {dpr_ckpt}" in checks["encoding"]
    assert "each of 13 blocks of 16 rows" in checks["passages"]  # the size recorded, whatever this process's
    assert "all 200 stored vectors" in checks["vectors"] and "200 vectors equal the stored ones" in checks["faiss"]
    vectors = np.load(tmp_path / "d" / "embeddings.npy", mmap_mode="r+")
    vectors[row, 5] += 0.25  # finite, off the sampled rows: scored with, but not what FAISS ranks by
    vectors.flush()
    with pytest.raises(InputError, match=f"index.faiss: row {row} \\(0-based\\) differs from embeddings.npy"):
        verify_index(tmp_path / "d")
    vectors[row, 5] = np.nan
    vectors.flush()
    del vectors
    assert len(DenseIndex.load(tmp_path / "d").passages) == 200  # a load samples other rows
    r = run_cli("index", "verify", "--index", str(tmp_path / "d"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"embeddings.npy: row {row} (0-based; passage 'p{row}') holds NaN" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1

    # another encoder's vectors of the same width, FAISS index and all (here the negated ones: the tests'
    # tiny encoders map every passage to nearly one direction): every hash and shape holds, only fresh
    # encodings tell
    import faiss

    build_dense_index(passages, dpr_ckpt, tmp_path / "s", DenseBuildConfig(shard_size=64))
    other = -np.load(tmp_path / "s" / "embeddings.npy")
    np.save(tmp_path / "s" / "embeddings.npy", other)
    faiss.write_index(build_faiss(other, "Flat"), str(tmp_path / "s" / "index.faiss"))
    assert len(DenseIndex.load(tmp_path / "s").passages) == 200
    with pytest.raises(InputError, match="row 0 \\(0-based; passage 'p0'\\) is not its passage's vector: cosine -1.000"):
        verify_index(tmp_path / "s")
    with pytest.raises(InputError, match="^--encoder: applies to dense indexes"):
        verify_index(tmp_path / "e", encoder=dpr_ckpt)
    moved = tmp_path / "moved"  # the encoder no longer where the manifest says: said, not skipped in silence
    build_dense_index(passages, dpr_ckpt, tmp_path / "r2", DenseBuildConfig(shard_size=64))
    shutil.copytree(dpr_ckpt, moved)
    manifest = json.loads((tmp_path / "r2" / "manifest.json").read_text())
    manifest["encoder"]["path"] = str(tmp_path / "gone")
    (tmp_path / "r2" / "manifest.json").write_text(json.dumps(manifest))
    result = {c["check"]: c["result"] for c in verify_index(tmp_path / "r2")["checks"]}
    assert result["encoding"].startswith("not checked: the encoder that built the index") and "--encoder" in result["encoding"]
    result = {c["check"]: c["result"] for c in verify_index(tmp_path / "r2", encoder=moved)["checks"]}
    assert result["encoding"].startswith("8 passages spread over the index encoded afresh")
    other_dpr = tmp_path / "other_dpr"  # trained on: other weights, another fingerprint
    train_dpr(DPRTrainConfig(steps=1, seed=1, **TINY), read_qa(tiny_corpus["qa"]), read_passages(tiny_corpus["passages"]),
              other_dpr)
    with pytest.raises(InputError, match="field '--encoder': is not the context encoder that built"):
        verify_index(tmp_path / "r2", encoder=other_dpr)
