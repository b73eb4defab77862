"""`index verify` on damage a hash cannot name or a read would crash on: Arrow data damaged (bad
UTF-8, offsets out of bounds), a damaged .npy header, a NaN in a sampled row, a manifest whose
hashes disagree with each other or whose build fields were edited, an IVF index's row numbers,
its codes (PQ bytes, a float's last bit, two rows' numbers exchanged); and the result lines of a
sound index built before sample hashes, and of IVF indexes as `index build` writes them."""

from __future__ import annotations

import json
import re
import shutil

import faiss
import numpy as np
import pyarrow as pa
import pytest

from conftest import run_cli
from lewisrag.data.io import InputError
from lewisrag.data.passages import PASSAGE_SCHEMA
from lewisrag.data.records import Passage
from lewisrag.index import store
from lewisrag.index.bm25 import build_bm25_index
from lewisrag.index import verify
from lewisrag.index.dense import DenseBuildConfig, DenseIndex, build_dense_index, build_faiss, spot_check_rows
from lewisrag.index.verify import verify_index
from test_index import dpr_ckpt  # noqa: F401  (a module fixture: the tiny DPR checkpoint)

PASSAGES = [Passage(f"p{i}", f"T{i}", f"passage number {i} of the verify corpus") for i in range(200)]
SAMPLED = set(store.sample_rows(len(PASSAGES)))
PQ_PASSAGES = [Passage(f"p{i}", f"T{i}", f"passage number {i} of the verify corpus") for i in range(300)]  # PQ8: 256 centroids


@pytest.fixture(scope="module")
def dense(dpr_ckpt, tmp_path_factory):
    out = tmp_path_factory.mktemp("verify") / "dense"
    build_dense_index(PASSAGES, dpr_ckpt, out, DenseBuildConfig(shard_size=64))
    return out


def _copy(src, tmp_path, name="idx"):
    shutil.copytree(src, tmp_path / name)
    return tmp_path / name


def _bad_utf8(index, row: int) -> None:
    """Row `row`'s text holds a byte that is no UTF-8."""
    data = bytearray((index / "passages.arrow").read_bytes())
    at = data.index(f"number {row} of".encode())
    data[at] = 0xFF
    (index / "passages.arrow").write_bytes(bytes(data))


def _one_line_error(r, *parts):
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and all(p in r.stderr for p in parts), r.stderr


def test_damaged_arrow_rows_are_named_not_a_crash(dense, tmp_path):
    """UTF-8 damage read as Python strings raised UnicodeDecodeError (in a load's sampled rows, the
    encoding check's spot rows or the full hash), and an offset out of bounds read past the
    mapping (a segfault): each is now the row and column of passages.arrow."""
    spot = next(r for r in spot_check_rows(len(PASSAGES)) if r not in SAMPLED)  # read only by the encoding check
    hashed = next(r for r in range(40, 190) if r not in SAMPLED and r not in spot_check_rows(len(PASSAGES)))
    for row in (0, spot, hashed):  # 0: sampled by every load
        index = _copy(dense, tmp_path, f"utf8_{row}")
        _bad_utf8(index, row)
        with pytest.raises(InputError, match=f"field 'text': row {row} \\(0-based\\) is damaged .*UTF8") as e:
            verify_index(index)
        assert str(index / "passages.arrow") in str(e.value)
    with pytest.raises(InputError, match="field 'text': row 0 "):  # every load, not only verify
        DenseIndex.load(tmp_path / "utf8_0")

    # offsets written out of bounds for a row no load reads
    row = next(r for r in range(40, 190) if r not in SAMPLED and r + 1 not in SAMPLED and r not in spot_check_rows(200))
    texts = [p.text.encode() for p in PASSAGES]
    offsets = np.concatenate([[0], np.cumsum([len(t) for t in texts])]).astype(np.int32)
    offsets[row + 1] = 1 << 30
    text = pa.StringArray.from_buffers(len(texts), pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"".join(texts)))
    batch = pa.RecordBatch.from_arrays([pa.array([p.id for p in PASSAGES]), pa.array([p.title for p in PASSAGES]), text],
                                       schema=PASSAGE_SCHEMA)
    index = _copy(dense, tmp_path, "offsets")
    with pa.OSFile(str(index / "passages.arrow"), "wb") as sink, pa.ipc.new_file(sink, PASSAGE_SCHEMA) as writer:
        writer.write_batch(batch)
    assert len(DenseIndex.load(index).passages) == 200  # the sampled rows are whole
    _one_line_error(run_cli("index", "verify", "--index", str(index)), f"{index / 'passages.arrow'}: field 'text': row {row} "
                    "(0-based) is damaged")


def test_a_search_that_reaches_a_damaged_row_is_one_line(tmp_path):
    """Past what a load samples: the passage a search returns is read through the same check."""
    build_bm25_index(PASSAGES, tmp_path / "b")
    row = next(r for r in range(40, 190) if r not in SAMPLED)
    _bad_utf8(tmp_path / "b", row)
    r = run_cli("index", "search", "--index", str(tmp_path / "b"), "--query", f"number {row}", "--n-docs", "1")
    _one_line_error(r, f"{tmp_path / 'b' / 'passages.arrow'}: field 'text': row {row} (0-based) is damaged")


def test_a_damaged_npy_header_and_a_nan_in_a_sampled_row_are_named(dense, tmp_path):
    index = _copy(dense, tmp_path)
    raw = (index / "embeddings.npy").read_bytes()
    (index / "embeddings.npy").write_bytes(raw.replace(b"), }", b"(, }", 1))  # numpy's header tokenizer: TokenError
    with pytest.raises(InputError, match="embeddings.npy: cannot read the stored vectors"):
        verify_index(index)
    (index / "embeddings.npy").write_bytes(raw)
    vectors = np.load(index / "embeddings.npy", mmap_mode="r+")
    vectors[-1, 0] = np.nan  # the last row, which every load samples
    vectors.flush()
    del vectors
    with pytest.raises(InputError, match="embeddings.npy: holds non-finite vectors \\(NaN or inf; row 199, 0-based\\)"):
        verify_index(index)


def test_manifest_hashes_that_disagree_blame_the_manifest_not_a_sound_store(tmp_path):
    build_bm25_index(PASSAGES, tmp_path / "b")
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    for field, edit in (("block_hashes.sha256", {"block_hashes": {"rows": store.BLOCK_ROWS, "sha256": ["0123"]}}),
                        ("content_hash", {"content_hash": "0123"})):
        (tmp_path / "b" / "manifest.json").write_text(json.dumps({**manifest, **edit}))
        with pytest.raises(InputError, match=f"manifest.json: field '{field}': disagrees with the passages"):
            verify_index(tmp_path / "b")


def test_manifest_build_fields_are_checked(dense, tmp_path):
    """Read back by verify's fresh encodings (and the end-to-end re-encoding): an edited value was a
    traceback (int('x')) or tokenized at a length of -1."""
    manifest = json.loads((dense / "manifest.json").read_text())
    for field, value in (("max_length", "x"), ("max_length", -1), ("max_length", 1.5), ("mixed_precision", "fp8")):
        edited = {**manifest, "build": {**manifest["build"], field: value}}
        with pytest.raises(InputError, match=f"field 'build.{field}': expected"):
            store.check_manifest(edited, dense / "manifest.json")
    index = _copy(dense, tmp_path)
    (index / "manifest.json").write_text(json.dumps({**manifest, "build": {**manifest["build"], "max_length": "x"}}))
    _one_line_error(run_cli("index", "verify", "--index", str(index)), "field 'build.max_length'")


def test_an_index_without_sample_hash_is_not_said_to_have_sampled_rows(tmp_path):
    build_bm25_index(PASSAGES, tmp_path / "b")
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert "64 sampled rows as every load" in verify_index(tmp_path / "b")["checks"][0]["result"]
    del manifest["sample_hash"]  # as indexes built before it load: no passage read
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(manifest))
    loads = verify_index(tmp_path / "b")["checks"][0]["result"]
    assert "sampled rows" not in loads and "no passage sampled" in loads


def test_ivf_row_numbers_are_checked(dpr_ckpt, tmp_path):
    """An IVF index's inverted lists name their rows: one damaged past the passages failed every search
    reaching it, one damaged into another row's hid that row; verify passed both."""
    build_dense_index(PASSAGES, dpr_ckpt, tmp_path / "ivf", DenseBuildConfig(factory="IVF4,Flat", shard_size=64))
    result = {c["check"]: c["result"] for c in verify_index(tmp_path / "ivf")["checks"]}
    assert "each row in one inverted list" in result["faiss"]
    for name, damage, message in (("past", lambda ids, other: 10**9, "inverted list 0 holds row 1000000000, past"),
                                  ("twice", lambda ids, other: other[0], "\\(0-based\\) is in no inverted list")):
        index = _copy(tmp_path / "ivf", tmp_path, name)
        faiss_index = faiss.read_index(str(index / "index.faiss"))
        lists = faiss.extract_index_ivf(faiss_index).invlists
        ids = faiss.rev_swig_ptr(lists.get_ids(0), lists.list_size(0))
        other = faiss.rev_swig_ptr(lists.get_ids(1), lists.list_size(1))
        ids[0] = damage(ids, other)
        faiss.write_index(faiss_index, str(index / "index.faiss"))
        with pytest.raises(InputError, match=message):
            verify_index(index)


def _faiss_result(index) -> str:
    return {c["check"]: c["result"] for c in verify_index(index)["checks"]}["faiss"]


def _code(faiss_index, list_no: int, offset: int) -> np.ndarray:
    """The stored code of entry `offset` of inverted list `list_no`: a writable view of its bytes."""
    ivf = faiss.extract_index_ivf(faiss_index)
    codes = faiss.rev_swig_ptr(ivf.invlists.get_codes(list_no), ivf.invlists.list_size(list_no) * ivf.code_size)
    return codes[offset * ivf.code_size : (offset + 1) * ivf.code_size]


def _row(faiss_index, list_no: int, offset: int) -> int:
    lists = faiss.extract_index_ivf(faiss_index).invlists
    return int(faiss.rev_swig_ptr(lists.get_ids(list_no), lists.list_size(list_no))[offset])


@pytest.mark.parametrize("factory, dtype", [("IVF4,PQ8", "float32"), ("IVF4,PQ8", "float16"), ("IVF4,PQ8x4fs", "float16"),
                                            ("OPQ4_32,IVF4,SQ8", "float32"), ("IVF4,Flat", "float16")])
def test_ivf_codes_as_index_build_writes_them_verify_clean(dpr_ckpt, tmp_path, factory, dtype):
    """Each row's code against its stored vector, on indexes as `index build` writes them and every
    load maps them: no false alarm (fast-scan codes read from a file crashed FAISS's decoding until
    `_open_codes` set their quantizer), and the direct map made for it given back."""
    cfg = DenseBuildConfig(factory=factory, shard_size=64, vector_dtype=dtype)
    build_dense_index(PQ_PASSAGES, dpr_ckpt, tmp_path / "i", cfg)
    held = _faiss_result(tmp_path / "i")
    assert "each row in one inverted list" in held and "not compared" not in held, held
    assert ("each equal to its stored vector" if factory == "IVF4,Flat" else "each row's stored code decodes") in held
    index = DenseIndex.load(tmp_path / "i")
    verify._check_vectors(index, None)
    assert faiss.extract_index_ivf(index.faiss_index).direct_map.type == faiss.DirectMap.NoMap


def test_codes_that_cannot_be_compared_say_why(dpr_ckpt, tmp_path):
    """Residual-quantizer codes come from a beam search, which a near tie can send down another
    path: a fresh encoding is no reference for them, and the result line says so."""
    build_dense_index(PASSAGES, dpr_ckpt, tmp_path / "rq", DenseBuildConfig(factory="IVF4,RQ2x4", shard_size=64))
    held = _faiss_result(tmp_path / "rq")
    assert "not compared with the stored ones (this check decodes PQ, SQ and Flat codes" in held
    assert "IndexIVFResidualQuantizer is none of them" in held


@pytest.fixture(scope="module")
def spread(dpr_ckpt, tmp_path_factory):
    """An IVF4,PQ8 index over float16 vectors spread as real ones are. The tiny encoder puts every
    passage at nearly one point, where every PQ centroid is nearly the same and no code byte's
    damage shows (nor matters); its build's vectors and FAISS index are replaced as `index build`
    would write them for these, and the manifest's encoder moved away, so that verify does not
    re-encode passages these vectors are not of."""
    out = tmp_path_factory.mktemp("spread") / "ivfpq"
    build_dense_index(PQ_PASSAGES, dpr_ckpt, out, DenseBuildConfig(factory="IVF4,PQ8", shard_size=64, vector_dtype="float16"))
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(8, 32))
    vectors = (centers[rng.integers(0, 8, len(PQ_PASSAGES))] + 0.5 * rng.normal(size=(len(PQ_PASSAGES), 32))).astype(np.float16)
    np.save(out / "embeddings.npy", vectors)
    faiss.write_index(build_faiss(vectors, "IVF4,PQ8"), str(out / "index.faiss"))
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["encoder"]["path"] = str(out / "moved")
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def test_damaged_pq_code_bytes_are_named(spread, tmp_path, monkeypatch):
    """20 random byte damages to an IVF4,PQ8 index.faiss's codes all verified clean: only sizes and row
    numbers were checked. Each row's code now decodes against its stored vector, as far from it as
    a fresh encoding at most; a damaged byte points a sub-vector at another centroid."""
    index = _copy(spread, tmp_path)
    vectors = np.load(index / "embeddings.npy").astype(np.float32)
    faiss_index = faiss.read_index(str(index / "index.faiss"))
    ivf = faiss.extract_index_ivf(faiss_index)
    # the byte and value that decode furthest from the vector: the damage named whatever the data
    list_no, offset, row = 1, 0, _row(faiss_index, 1, 0)
    code = _code(faiss_index, list_no, offset)
    recons = np.empty(32, np.float32)

    def error() -> float:
        ivf.reconstruct_from_offset(list_no, offset, faiss.swig_ptr(recons))
        return float(np.square(recons - vectors[row]).sum())

    clean, worst = error(), (0.0, 0, 0)
    for byte in range(len(code)):
        kept = int(code[byte])
        for value in range(256):
            code[byte] = value
            worst = max(worst, (error(), byte, value))
        code[byte] = kept
    code[worst[1]] = worst[2]
    faiss.write_index(faiss_index, str(index / "index.faiss"))
    _one_line_error(run_cli("index", "verify", "--index", str(index)),
                    f"{index / 'index.faiss'}: row {row} (0-based) differs from embeddings.npy's vector: its code decodes",
                    "one of the two files is damaged")

    # MARGIN decides, both ways: above this damage's added error it passes, below it is named
    added = (worst[0] - clean) / float(np.square(vectors[row]).sum())
    monkeypatch.setattr(verify, "MARGIN", added * 2)
    verify_index(index)
    monkeypatch.setattr(verify, "MARGIN", added / 2)
    with pytest.raises(InputError, match=f"row {row} \\(0-based\\) differs"):
        verify_index(index)
    monkeypatch.undo()

    # random bytes, as the damage was found: each one named
    rng = np.random.default_rng(0)
    for _ in range(10):
        shutil.copyfile(spread / "index.faiss", index / "index.faiss")
        faiss_index = faiss.read_index(str(index / "index.faiss"))
        list_no = int(rng.integers(4))
        offset = int(rng.integers(faiss.extract_index_ivf(faiss_index).invlists.list_size(list_no)))
        code = _code(faiss_index, list_no, offset)
        byte = int(rng.integers(len(code)))
        code[byte] = (int(code[byte]) + int(rng.integers(1, 256))) % 256
        faiss.write_index(faiss_index, str(index / "index.faiss"))
        with pytest.raises(InputError, match=f"row {_row(faiss_index, list_no, offset)} \\(0-based\\) differs"):
            verify_index(index)
    assert "each row's stored code decodes as close to its stored vector as a fresh encoding" in _faiss_result(spread)


def test_a_row_is_compared_in_the_list_it_is_filed_in(spread, tmp_path, monkeypatch):
    """Not the list the coarse quantizer picks now: an HNSW quantizer searching approximately while
    adding, or two centroids tying, files a row in another list legitimately. Two rows exchanged
    between lists with codes encoded for their new lists pass the codes' check (this Flat
    quantizer's adding never files them so, which `_check_assignment` names: left out here, as it
    is for an HNSW quantizer; ties: test_index_edges.py); their row numbers alone exchanged (each
    code left in place) is damage that, every row still listed once, `_check_lists` missed."""
    vectors = np.load(spread / "embeddings.npy").astype(np.float32)
    for name in ("refiled", "renumbered"):
        index = _copy(spread, tmp_path, name)
        faiss_index = faiss.read_index(str(index / "index.faiss"))
        ivf = faiss.extract_index_ivf(faiss_index)
        a, b = _row(faiss_index, 0, 0), _row(faiss_index, 1, 0)
        for list_no, row in ((0, b), (1, a)):
            code = np.empty(ivf.code_size, np.uint8)
            if name == "refiled":
                ivf.encode_vectors(1, faiss.swig_ptr(vectors[row : row + 1]), faiss.swig_ptr(np.array([list_no], np.int64)),
                                   faiss.swig_ptr(code), False)
            else:
                code[:] = _code(faiss_index, list_no, 0)
            ivf.invlists.update_entry(list_no, 0, row, faiss.swig_ptr(code))
        faiss.write_index(faiss_index, str(index / "index.faiss"))
        if name == "refiled":
            with pytest.raises(InputError, match="is filed in inverted list [01], whose centroid's inner product"):
                verify_index(index)
            monkeypatch.setattr(verify, "_open_assignment", lambda faiss_index, lists: (None, "as for an HNSW quantizer"))
            assert "each row's stored code decodes" in _faiss_result(index)
            monkeypatch.undo()
        else:
            with pytest.raises(InputError, match=f"index.faiss: row {min(a, b)} \\(0-based\\) differs from embeddings.npy"):
                verify_index(index)


def test_an_ivf_flat_vector_is_compared_to_the_bit(dpr_ckpt, tmp_path):
    """IVF-Flat keeps each vector's float32 bytes, added from the stored ones: as Flat's, equal to
    the bit, so that even a last bit changed is named."""
    build_dense_index(PASSAGES, dpr_ckpt, tmp_path / "flat", DenseBuildConfig(factory="IVF4,Flat", shard_size=64))
    faiss_index = faiss.read_index(str(tmp_path / "flat" / "index.faiss"))
    floats = _code(faiss_index, 1, 0).view(np.float32)
    floats[3] = np.nextafter(floats[3], np.float32(np.inf))
    faiss.write_index(faiss_index, str(tmp_path / "flat" / "index.faiss"))
    with pytest.raises(InputError, match=f"index.faiss: row {_row(faiss_index, 1, 0)} \\(0-based\\) differs from "
                       "embeddings.npy's vector: one of the two files is damaged"):
        verify_index(tmp_path / "flat")


@pytest.mark.parametrize("factory", ["HNSW8", "IVF4_HNSW8,Flat"])
def test_damaged_hnsw_links_are_named(dpr_ckpt, tmp_path, factory):  # noqa: F811
    """Every link of an HNSW graph pointed at row 0 loaded, searched (recall@5 0.003) and verified clean:
    FAISS's read checks only that a link is in range. A sound graph verifies, saying what was checked."""
    index = tmp_path / "hnsw"
    build_dense_index(PASSAGES, dpr_ckpt, index, DenseBuildConfig(factory=factory, shard_size=64))
    assert re.search(r"HNSW links of (64|4) sampled rows whole", _faiss_result(index))  # 4: the quantizer's 4 centroids
    faiss_index = faiss.read_index(str(index / "index.faiss"))
    inner = faiss.downcast_index(faiss_index)
    graph = inner if isinstance(inner, faiss.IndexHNSW) else faiss.downcast_index(faiss.extract_index_ivf(inner).quantizer)
    links = faiss.vector_to_array(graph.hnsw.neighbors)
    links[links >= 0] = 0
    faiss.copy_array_to_vector(links, graph.hnsw.neighbors)
    faiss.write_index(faiss_index, str(index / "index.faiss"))
    with pytest.raises(InputError, match=r"HNSW graph links row 0 \(0-based\) to itself, to one node twice or to none"):
        verify_index(index)
