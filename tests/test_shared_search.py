"""NodeSearch: two processes (gloo) whose searches the first one serves get exactly what searching
the index themselves gives, with different batch sizes per process, and the second never reads FAISS."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import numpy as np
import pytest
import torch.multiprocessing as mp

from lewisrag.data.records import Passage
from lewisrag.index import store
from lewisrag.index.dense import DenseIndex, build_faiss

N, D = 3000, 16


def _index_folder(folder: Path, x: np.ndarray, passages: list[Passage]) -> Path:
    """A dense index folder over vectors `x` (no encoder needed: the test searches by vector)."""
    import faiss

    from lewisrag.data.io import write_json

    folder.mkdir()
    np.save(folder / "embeddings.npy", x)
    faiss.write_index(build_faiss(x, "Flat"), str(folder / "index.faiss"))
    store.write_passages(folder, passages)
    write_json(folder / "manifest.json", {"format": store.FORMAT_VERSION, "kind": "dense", "metric": "inner_product",
                                          "faiss_factory": "Flat", "dim": x.shape[1], "n_passages": len(x),
                                          "content_hash": store.content_hash(passages),
                                          "encoder": {"ctx_fingerprint": "test"}})
    return folder


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, folder: str, out: str) -> None:
    import os

    import torch.distributed as dist

    from lewisrag.index.shared import NodeSearch

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    index = DenseIndex.load(folder, with_faiss=rank == 0)
    search = NodeSearch.for_this_node(index)
    queries = np.asarray(index.embeddings[[5, 900, 17, 2999, 42][: 3 + 2 * rank]], dtype=np.float32) + 0.01
    results = []
    for k in (1, 4):  # two rounds: the collectives pair up round after round
        scores, rows = search.search(queries, k)
        results.append({"k": k, "rows": rows.tolist(), "scores": scores.tolist(), "ids": [[search.passages[r].id for r in row] for row in rows]})
    Path(out, f"{rank}.json").write_text(json.dumps({"server": search.is_server, "faiss": index.faiss_index is not None,
                                                     "results": results}))
    dist.destroy_process_group()


@pytest.mark.skipif(sys.platform != "linux", reason="gloo over TCP on the loopback")
def test_node_search_serves_both_processes_as_their_own_search_would(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, D)).astype(np.float32)
    folder = _index_folder(tmp_path / "idx", x, [Passage(f"p{i}", "", f"text {i}") for i in range(N)])
    mp.start_processes(_worker, args=(_port(), str(folder), str(tmp_path)), nprocs=2, start_method="spawn")
    reference = DenseIndex.load(folder)
    for rank in (0, 1):
        got = json.loads((tmp_path / f"{rank}.json").read_text())
        assert got["server"] == (rank == 0) and got["faiss"] == (rank == 0)
        queries = np.asarray(reference.embeddings[[5, 900, 17, 2999, 42][: 3 + 2 * rank]], dtype=np.float32) + 0.01
        for r in got["results"]:
            scores, rows = reference.search(queries, r["k"])
            assert r["rows"] == rows.tolist()
            np.testing.assert_allclose(r["scores"], scores, rtol=1e-5, atol=1e-5)
            assert r["ids"] == [[f"p{i}" for i in row] for row in rows.tolist()]
