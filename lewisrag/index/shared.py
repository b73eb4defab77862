"""One search per node for multi-process training: the node's first process searches for all of them.

With N training processes on a machine, each opening the index itself, the memory-mapped parts
are shared through the page cache (the stored vectors, the passage store, and the FAISS file where
the index type can be mapped: Flat, HNSW and IVF with FAISS 1.15, see `dense._read_faiss`; other
types are read whole, one copy per process), and each process searches on its own for its share
of the batch: small batches, and N searches competing for the same cores. `NodeSearch` keeps the
FAISS index in one process per node (its local rank 0, the "server"); every training micro-step,
the node's processes gather their question vectors there over a gloo group (CPU tensors, whatever
backend training uses), the server searches them as one batch, and the top-K come back by
broadcast. The others open the index without FAISS (`DenseIndex.load(..., with_faiss=False)`):
they still read their K passages and stored vectors themselves, memory-mapped.

Why this and not a FAISS GPU index sharded across the node's GPUs: faiss with GPU support is
not on PyPI for current CUDA (faiss-gpu wheels there stop at CUDA 12), so it cannot be a
dependency; and where a GPU has room for the vectors, `DenseIndex.search_on` already searches a
Flat index exactly in each process on its own GPU, hundreds of times faster than FAISS on the CPU
(scripts/bench_gpu.py). A node-level server is what covers the rest: CPU training, and compressed
(HNSW) indexes too large for every process to copy. It is what transformers' research example did
with a Ray or torch.distributed retrieval worker, here in a few collectives.

Every process of a node must call `search` together (the training micro-step does); a search
that only one process makes (the main process's dev evaluation) goes to `local`, the server's
own index.
"""

from __future__ import annotations

import os

import numpy as np
import torch
import torch.distributed as dist


def node_layout(world_size: int, rank: int) -> tuple[int, int]:
    """(processes per node, this process's node): torchrun numbers a node's processes contiguously
    and says how many there are in LOCAL_WORLD_SIZE (all of them when it is unset).

    >>> node_layout(4, 3), node_layout(4, 1)
    ((4, 0), (4, 0))
    """
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    return per_node, rank // per_node


class NodeSearch:
    """`search(queries, k)` answered by the node's server for the node's processes together; the
    rest of the index interface (`vectors`, `passages`, `dim`, `check_encoder`, ...) is `index`'s."""

    def __init__(self, index, group, server: int, ranks: list[int]):
        self.index, self.group, self.server, self.ranks = index, group, server, ranks
        self.is_server = dist.get_rank() == server

    @classmethod
    def for_this_node(cls, index) -> NodeSearch:
        """Build every node's gloo group (each process must make all of them, in the same order) and
        return this node's search. `index` needs its FAISS index only in the server process."""
        world, rank = dist.get_world_size(), dist.get_rank()
        per_node, node = node_layout(world, rank)
        mine = None
        for first in range(0, world, per_node):
            ranks = list(range(first, min(world, first + per_node)))
            group = dist.new_group(ranks, backend="gloo")
            if first == node * per_node:
                mine = (group, ranks)
        return cls(index, mine[0], mine[1][0], mine[1])

    def __getattr__(self, name):  # everything but the search is the local index's
        return getattr(self.index, name)

    @property
    def local(self):
        """The server's own index, for searches made by it alone (dev evaluation on the main process)."""
        if not self.is_server:
            raise RuntimeError("only the node's first process holds the FAISS index")
        return self.index

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k scores (B, K) float32 and rows (B, K) int64 for this process's queries (B, D)."""
        q = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32))
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in self.ranks]
        dist.all_gather(sizes, torch.tensor([len(q)]), group=self.group)
        counts = [int(s) for s in sizes]
        padded = torch.zeros((max(counts), q.shape[1]), dtype=torch.float32)
        padded[: len(q)] = q
        gathered = [torch.empty_like(padded) for _ in self.ranks] if self.is_server else None
        dist.gather(padded, gathered, dst=self.server, group=self.group)
        total, width = sum(counts), k
        if self.is_server:
            batch = torch.cat([g[:c] for g, c in zip(gathered, counts)]).numpy()
            s, r = self.index.search(batch, k)
        if k > len(self.index.embeddings):
            # past the passages the local search's width is its own (FAISS pads k with row -1, a
            # product search keeps the N there are): the server says it, so every process gets what
            # the local search gives. Every process knows N, so only such a search pays for the message.
            told = torch.tensor([s.shape[1] if self.is_server else 0], dtype=torch.int64)
            dist.broadcast(told, src=self.server, group=self.group)
            width = int(told)
        scores = torch.empty((total, width), dtype=torch.float32)
        rows = torch.empty((total, width), dtype=torch.int64)
        if self.is_server:
            scores.copy_(torch.from_numpy(np.asarray(s, dtype=np.float32)))
            rows.copy_(torch.from_numpy(np.asarray(r, dtype=np.int64)))
        dist.broadcast(scores, src=self.server, group=self.group)
        dist.broadcast(rows, src=self.server, group=self.group)
        start = sum(counts[: self.ranks.index(dist.get_rank())])
        return scores[start : start + len(q)].numpy(), rows[start : start + len(q)].numpy()
