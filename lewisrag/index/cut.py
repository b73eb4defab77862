"""A passage corpus cut to what a small reproduction can afford, keeping what its questions retrieve.

`reproduce --preset base --max-passages N` indexes the first N passages. Of wiki_dpr's 21 M, the
first million hold few of NQ's gold passages, so exact match falls for want of the passages, not of
the method. `cut_passages` keeps instead, for every question of the given QA files, the `top`
passages a DPR question encoder retrieves from the whole corpus by the corpus's stored vectors
(wiki_dpr's `embeddings` column, the DPR context encoder's), then fills up to `max_passages` with a
seeded random sample of the rest as distractors, in the corpus's order. For these questions and
this encoder, a search of the cut returns what a search of the whole corpus does at every depth up
to `top` (`full_depth` when `max_passages` cannot hold every question's `top`). Training moves the
question encoder, and then it searches the cut, as the paper's searched all of Wikipedia.

The search is exact: matrix products of the question vectors with blocks of the stored vectors
(`SEARCH_ROWS` at a time, float32, on a GPU when given one), the best `top` of each question merged
block by block, as `DenseIndex` searches a Flat index on a GPU. At 21 M passages that is 2 × 768 ×
21 M multiply-adds per question: about a minute for 80,000 questions on an H200, hours on a few CPU
cores (decoding the 80 GB of vectors from Parquet takes minutes either way).

The output folder holds `passages.parquet` (id, title, text and the stored embeddings, a folder
`--passages` and `index build --reuse-embeddings` read) and `cut.json`: the sources, the counts
kept, and the answer recall of the whole corpus's top-k at k = 1, 5, 20, 100 up to `top`: the share
of questions with an answer string in the text of a passage retrieved (DPR's measure of a retriever
on NQ; here after the normalization exact match uses, as whole words).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from lewisrag.data.io import InputError, given_once, write_json
from lewisrag.data.passages import PassageTable
from lewisrag.data.records import QAExample
from lewisrag.index.encoders import DPRCheckpoint, encode_texts
from lewisrag.scoring.qa import is_regex_answered, normalize_answer, regex_search

KIND = "passage cut"  # the marker kind of its output folders (lewisrag.data.outputs)
PASSAGES_FILE = "passages.parquet"
CUT_FILE = "cut.json"
SEARCH_ROWS = 65_536  # stored vectors per matrix product: 192 MB of float32 at 768-d
QUESTION_ROWS = 4096  # questions per product: with SEARCH_ROWS, 1 GB of scores at most
RECALL_DEPTHS = (1, 5, 20, 100)
WRITE_ROWS = 8192  # rows per Parquet row group written


@dataclass(frozen=True)
class CutConfig:
    top: int = 100  # passages kept per question: its best by the question encoder over the whole corpus
    max_passages: int = 1_000_000  # passages in the cut, the retrieved ones and a random fill
    seed: int = 0  # which random passages fill the cut
    device: str = "cpu"  # where questions are encoded and the products run ("cpu" or "cuda[:N]")
    batch_size: int = 64  # questions per encoder forward pass


Progress = Callable[[str, int, int], None]


def cut_passages(passages: PassageTable, questions: Sequence[QAExample], ckpt: DPRCheckpoint, out: Path, cfg: CutConfig,
                 on_progress: Progress | None = None) -> dict:
    """Write the cut of `passages` for `questions` into the folder `out` (which must exist and be
    empty: the caller stages it) and return what `cut.json` records."""
    import torch

    n = len(passages)
    check_config(cfg, questions)
    check_passages(passages, ckpt, cfg)
    encoded = [0]

    def tick(k: int) -> None:
        encoded[0] += k
        on_progress("questions", encoded[0], len(questions))

    q = encode_texts(ckpt.question_encoder.to(cfg.device), ckpt.tokenizer, [ex.question for ex in questions],
                     batch_size=cfg.batch_size, max_length=int(ckpt.meta.get("q_max_length", 64)),
                     on_batch=tick if on_progress else None)
    top = min(cfg.top, n)
    rows = top_rows(torch.from_numpy(q).to(cfg.device), passages, top, on_progress)  # (Q, top), best first
    kept, full_depth = _retrieved(rows, cfg.max_passages)
    filled = _fill(kept, n, cfg.max_passages, cfg.seed)
    chosen = np.sort(np.concatenate([kept, filled]))
    hits = _answer_hits(passages, questions, rows, on_progress)
    _write(passages, chosen, out / PASSAGES_FILE, on_progress)
    answerable = [i for i, ex in enumerate(questions) if ex.answers]
    recall = {str(k): round(float(hits[answerable, :k].any(axis=1).mean()), 4) if answerable else None
              for k in RECALL_DEPTHS if k <= top}
    return {"source": passages.source, "source_passages": n, "questions": len(questions), "top": top,
            "max_passages": cfg.max_passages, "seed": cfg.seed, "passages": int(len(chosen)),
            "retrieved": int(len(kept)), "random": int(len(filled)), "full_depth": full_depth,
            "answer_recall": recall, "answerable_questions": len(answerable)}


def check_config(cfg: CutConfig, questions: Sequence[QAExample] | None = None) -> None:
    """What can be refused before the corpus is read (minutes at 21 M): the settings, and the
    questions once they are read."""
    if cfg.top < 1:
        raise InputError("--top", f"must be at least 1, got {cfg.top}")
    if cfg.max_passages < 1:
        raise InputError("--max-passages", f"must be at least 1, got {cfg.max_passages}")
    if questions is not None and not questions:
        raise InputError("--questions", "no questions: the cut keeps what questions retrieve")


def check_questions_files(files: Sequence[str | os.PathLike]) -> None:
    """Refuse a QA file given twice (by another spelling of its path too): its questions would count
    twice in cut.json's questions and weigh twice in its answer recall, the passages kept the same."""
    given_once("--questions", files, key=lambda f: str(f) if str(f).startswith("hf:") else str(Path(f).resolve()))


def check_passages(passages: Sequence, ckpt: DPRCheckpoint, cfg: CutConfig, source: str | None = None) -> None:
    """Passages the cut can search with `ckpt`'s question encoder: a table with stored vectors of
    its width (the first row's; every row's length and values are checked as the search reads
    them, not in a pass of their own), more of them than it keeps.
    `source` names them in errors (default: the table's own source; a JSONL list has none)."""
    source = source or getattr(passages, "source", "--passages")
    if not getattr(passages, "has_embeddings", False):
        raise InputError(source, "missing: the cut searches the passages by their stored vectors (wiki_dpr's "
                         "embeddings column); build an index over them and search it instead", field="embeddings")
    if passages.vector_dim() != ckpt.dim:
        raise InputError(source, f"the stored vectors have {passages.vector_dim()} values, the question "
                         f"encoder makes {ckpt.dim}: they cannot be searched with it", field="embeddings")
    if cfg.max_passages >= len(passages):
        raise InputError("--max-passages", f"{cfg.max_passages} keeps every one of the {len(passages)} passages: nothing "
                         "to cut; use the passages as they are")


def top_rows(q, passages: PassageTable, k: int, on_progress: Progress | None = None) -> np.ndarray:
    """The rows of the `k` best passages of each question vector in `q` (a float32 tensor (Q, D), on
    the device the products run on) by inner product with the stored vectors, best first: (Q, k) int64.
    Blocks merge with a stable sort, so that of equal scores in two blocks the earlier row ranks first."""
    import torch

    n = len(passages)
    best_s = torch.full((len(q), 0), float("-inf"), device=q.device)
    best_r = torch.zeros((len(q), 0), dtype=torch.int64, device=q.device)
    with torch.no_grad():
        for start in range(0, n, SEARCH_ROWS):
            # a read-only view of Arrow's buffer when the block lies in one batch: torch takes writable arrays
            block = torch.from_numpy(np.require(passages.embeddings(start, min(n, start + SEARCH_ROWS)), requirements="W"))
            block = block.to(q.device)
            parts_s, parts_r = [], []
            for lo in range(0, len(q), QUESTION_ROWS):
                s, r = (q[lo:lo + QUESTION_ROWS] @ block.T).topk(min(k, len(block)), dim=1)
                parts_s.append(s)
                parts_r.append(r + start)
            # the earlier rows first, so that a stable sort keeps them ahead of equal scores
            s, r = torch.cat([best_s, torch.cat(parts_s)], 1), torch.cat([best_r, torch.cat(parts_r)], 1)
            order = torch.sort(s, dim=1, descending=True, stable=True).indices[:, :k]
            best_s, best_r = s.gather(1, order), r.gather(1, order)
            if on_progress:
                on_progress("search", min(n, start + SEARCH_ROWS), n)
    return best_r.cpu().numpy()


def _retrieved(rows: np.ndarray, max_passages: int) -> tuple[np.ndarray, int]:
    """The distinct rows of `rows` (Q, top), rank by rank (every question's first, then every second...),
    cut to `max_passages`; and the depth to which every question's passages were all kept."""
    by_rank = rows.T.ravel()  # rank-major: the cut drops deep ranks first
    distinct, first = np.unique(by_rank, return_index=True)
    ordered = distinct[np.argsort(first, kind="stable")]
    if len(ordered) <= max_passages:
        return ordered, rows.shape[1]
    kept = ordered[:max_passages]
    inside = np.isin(rows, kept)
    full_depth = int(np.argmin(inside.all(axis=0))) if not inside.all() else rows.shape[1]
    return kept, full_depth


def _fill(kept: np.ndarray, n: int, max_passages: int, seed: int) -> np.ndarray:
    """A seeded random sample of the rows not in `kept`, up to `max_passages` in all."""
    want = max_passages - len(kept)
    if want <= 0:
        return np.zeros(0, np.int64)
    free = np.ones(n, bool)
    free[kept] = False
    return np.random.default_rng(seed).choice(np.flatnonzero(free), size=want, replace=False).astype(np.int64)


def _answer_hits(passages: PassageTable, questions: Sequence[QAExample], rows: np.ndarray,
                 on_progress: Progress | None) -> np.ndarray:
    """(Q, top) bool: whether the passage at each rank holds one of its question's answers in its
    text, both normalized as exact match normalizes them (`normalize_answer`), as whole words; for a
    question whose answers are regular expressions (CuratedTrec's), a pattern found anywhere in the
    raw text (`regex_search`, DPR's check on that set).

    The retrieved passages are read in the corpus's order, WRITE_ROWS at a time, and each is
    checked against the questions that retrieved it: 80,000 questions' top 100 are up to 8 M
    passages, some 6 GB of text if held at once."""
    top = rows.shape[1]
    flat = rows.ravel()
    order = np.argsort(flat, kind="stable")  # (question, rank) pairs by the row they retrieved
    by_row = flat[order]
    answers = [[f" {a} " for a in map(normalize_answer, ex.answers) if a] for ex in questions]
    regex = [is_regex_answered(ex) for ex in questions]
    hits = np.zeros(flat.shape, bool)
    wanted = np.unique(flat)
    for start in range(0, len(wanted), WRITE_ROWS):
        part = wanted[start:start + WRITE_ROWS]
        raw = passages.arrow_take(part).column("text").to_pylist()
        texts = [f" {normalize_answer(t)} " for t in raw]
        lo, hi = np.searchsorted(by_row, part[0], side="left"), np.searchsorted(by_row, part[-1], side="right")
        for pair, text in zip(order[lo:hi].tolist(), np.searchsorted(part, by_row[lo:hi]).tolist()):
            q = pair // top
            hits[pair] = regex_search(raw[text], questions[q].answers) if regex[q] else any(a in texts[text] for a in answers[q])
        if on_progress:
            on_progress("answers", min(len(wanted), start + WRITE_ROWS), len(wanted))
    return hits.reshape(rows.shape)


def _write(passages: PassageTable, rows: np.ndarray, path: Path, on_progress: Progress | None) -> None:
    """The passages at the ascending `rows`, with their stored vectors, as one Parquet file."""
    writer = None
    try:
        for start in range(0, len(rows), WRITE_ROWS):
            batch = passages.arrow_take(rows[start:start + WRITE_ROWS], embeddings=True)
            writer = writer or pq.ParquetWriter(path, batch.schema)
            writer.write_batch(batch)
            if on_progress:
                on_progress("write", min(len(rows), start + WRITE_ROWS), len(rows))
    finally:
        if writer is not None:
            writer.close()


def write_manifest(out: str | os.PathLike, record: dict) -> None:
    write_json(Path(out) / CUT_FILE, record)
