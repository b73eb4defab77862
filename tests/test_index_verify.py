"""`index verify` on damage a hash cannot name or a read would crash on: Arrow data damaged (bad
UTF-8, offsets out of bounds), a damaged .npy header, a NaN in a sampled row, a manifest whose
hashes disagree with each other or whose build fields were edited, an IVF index's row numbers;
and the result lines of a sound index built before sample hashes."""

from __future__ import annotations

import json
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
from lewisrag.index.dense import DenseBuildConfig, DenseIndex, build_dense_index, spot_check_rows
from lewisrag.index.verify import verify_index
from test_index import dpr_ckpt  # noqa: F401  (a module fixture: the tiny DPR checkpoint)

PASSAGES = [Passage(f"p{i}", f"T{i}", f"passage number {i} of the verify corpus") for i in range(200)]
SAMPLED = set(store.sample_rows(len(PASSAGES)))


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
