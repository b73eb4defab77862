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

Besides what they retrieve, the cut keeps every question's gold passages (`gold_passage_ids`; in
DPR's biencoder JSON `positive_ctxs[].passage_id`), so that `train dpr --passages CUT --train FILE`
finds each question's positive (it refuses a gold id its passages lack) and retrieval recall can be
measured on the cut; and, when asked (`hard_negatives` per question), each question's first given
hard negatives that are not its gold (DPR's BM25 negatives, `hard_negative_ctxs[].passage_id`):
58,880 NQ training questions × DPR's up to ~30 each come to the order of a million passages, more
than a small cut affords, so none by default. A gold id the whole corpus lacks is refused, as
`train dpr` and `eval retrieval` refuse it (a file written for another corpus, or a mistyped id); a
given hard negative it lacks is counted and the question's next one taken, as `train dpr` keeps the
ones there.

When `max_passages` cannot hold everything, the kept set is filled in the order of `PRIORITY`:
the gold passages, then the hard negatives, both whole (a cut that cannot hold them is refused
before the search: they are the few passages a question names, and dropping some would leave
`train dpr` refusing the cut); then the retrieved ones rank by rank, so that the deepest ranks are
dropped first (`full_depth`, counting passages kept for an earlier reason too); then the random fill.
Each passage is counted once in cut.json, under the first reason it was kept for.

The output folder holds `passages.parquet` (id, title, text and the stored embeddings, a folder
`--passages` and `index build --reuse-embeddings` read) and `cut.json`: the sources, the counts
kept for each reason, the gold passages the questions name and how many the cut holds, and the
answer recall of the whole corpus's top-k at k = 1, 5, 20, 100 up to `top`: the share
of questions with an answer string in the text of a passage retrieved (DPR's measure of a retriever
on NQ; here after the normalization exact match uses, as whole words), over the short-answer
questions with an answer (`answerable_questions`), as the base preset's retrieval stage counts
them: a long-form answer (MS MARCO's) is no string to find, and `long_form_questions` counts those
left out (they still retrieve passages for the cut).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from lewisrag.data.io import InputError, given_once, write_json
from lewisrag.data.passages import PassageTable
from lewisrag.data.records import QAExample, missing_passage_id
from lewisrag.index.encoders import DPRCheckpoint, encode_texts
from lewisrag.scoring.qa import has_answer, normalize_passage
from lewisrag.scoring.retrieval import answer_recall

KIND = "passage cut"  # the marker kind of its output folders (lewisrag.data.outputs)
PASSAGES_FILE = "passages.parquet"
CUT_FILE = "cut.json"
SEARCH_ROWS = 65_536  # stored vectors per matrix product: 192 MB of float32 at 768-d
QUESTION_ROWS = 4096  # questions per product: with SEARCH_ROWS, 1 GB of scores at most
RECALL_DEPTHS = (1, 5, 20, 100)
WRITE_ROWS = 8192  # rows per Parquet row group written
# why a passage is kept, first to last: what fills the cut first when --max-passages cannot hold it all
PRIORITY = ("gold", "hard_negatives", "retrieved", "random")


@dataclass(frozen=True)
class CutConfig:
    top: int = 100  # passages kept per question: its best by the question encoder over the whole corpus
    max_passages: int = 1_000_000  # passages in the cut, the retrieved ones and a random fill
    seed: int = 0  # which random passages fill the cut
    device: str = "cpu"  # where questions are encoded and the products run ("cpu" or "cuda[:N]")
    batch_size: int = 64  # questions per encoder forward pass
    gold: bool = True  # keep every question's gold passages, whole, before anything else
    hard_negatives: int = 0  # given hard negatives kept per question (its first ones that are not gold), after the gold


Progress = Callable[[str, int, int], None]


def cut_passages(passages: PassageTable, questions: Sequence[QAExample], ckpt: DPRCheckpoint, out: Path, cfg: CutConfig,
                 on_progress: Progress | None = None, rows_of: dict[str, int] | None = None) -> dict:
    """Write the cut of `passages` for `questions` into the folder `out` (which must exist and be
    empty: the caller stages it) and return what `cut.json` records. `rows_of`: the rows of the ids
    `wanted_ids` names (`passage_rows`), when the caller has looked them up to check them first."""
    import torch

    n = len(passages)
    check_config(cfg, questions)
    check_passages(passages, ckpt, cfg)
    if rows_of is None:
        rows_of = passage_rows(passages, wanted_ids(questions, cfg))
    first = kept_first(questions, rows_of, cfg)  # refused here, before the search, if it cannot fit
    encoded = [0]

    def tick(k: int) -> None:
        encoded[0] += k
        on_progress("questions", encoded[0], len(questions))

    q = encode_texts(ckpt.question_encoder.to(cfg.device), ckpt.tokenizer, [ex.question for ex in questions],
                     batch_size=cfg.batch_size, max_length=int(ckpt.meta.get("q_max_length", 64)),
                     on_batch=tick if on_progress else None)
    top = min(cfg.top, n)
    rows = top_rows(torch.from_numpy(q).to(cfg.device), passages, top, on_progress)  # (Q, top), best first
    named = np.concatenate([first.gold, first.hard_negatives])
    kept, full_depth = _retrieved(rows, cfg.max_passages - len(named), named)
    filled = _fill(np.concatenate([named, kept]), n, cfg.max_passages, cfg.seed)
    chosen = np.sort(np.concatenate([named, kept, filled]))
    # short answers only, as the base preset's retrieval stage counts them: a long answer is no string to find
    answerable = [i for i, ex in enumerate(questions) if ex.answers and ex.kind == "short"]
    hits = _answer_hits(passages, [questions[i] for i in answerable], rows[answerable], on_progress)
    _write(passages, chosen, out / PASSAGES_FILE, on_progress)
    recall = {k: v if v is None else round(v, 4)
              for k, v in answer_recall(hits.tolist(), [k for k in RECALL_DEPTHS if k <= top]).items()}
    gold_ids = {g for ex in questions for g in ex.gold_passage_ids}
    if cfg.gold:
        gold_in_cut = len(gold_ids)
    else:  # those retrieved or drawn (a gold id the corpus lacks is named, not held)
        gold_in_cut = int(np.isin(list(passage_rows(passages, gold_ids, rows_of).values()), chosen).sum())
    priority = [p for p in PRIORITY if (p != "gold" or cfg.gold) and (p != "hard_negatives" or cfg.hard_negatives)]
    return {"source": passages.source, "source_passages": n, "questions": len(questions), "top": top,
            "max_passages": cfg.max_passages, "seed": cfg.seed, "keep_gold": cfg.gold,
            "hard_negatives_per_question": cfg.hard_negatives, "priority": priority, "passages": int(len(chosen)),
            "gold": int(len(first.gold)), "hard_negatives": int(len(first.hard_negatives)),
            "retrieved": int(len(kept)), "random": int(len(filled)), "full_depth": full_depth,
            "gold_passages": len(gold_ids), "gold_in_cut": gold_in_cut,
            "hard_negatives_missing": first.hard_negatives_missing,
            "answer_recall": recall, "answerable_questions": len(answerable),
            "long_form_questions": sum(ex.kind != "short" for ex in questions)}


@dataclass(frozen=True)
class KeptFirst:
    """The rows kept whole before the retrieved ones, by `PRIORITY`, each once, ascending."""
    gold: np.ndarray  # every question's gold passages (none without `CutConfig.gold`)
    hard_negatives: np.ndarray  # each question's first `CutConfig.hard_negatives` given ones, not already gold
    hard_negatives_missing: int  # distinct given hard negative ids (not the question's gold) the corpus lacks


def wanted_ids(questions: Sequence[QAExample], cfg: CutConfig) -> set[str]:
    """The passage ids the cut keeps by name, whose rows `passage_rows` finds: the questions' gold
    ids (with `cfg.gold`) and their given hard negatives (with `cfg.hard_negatives`)."""
    ids = {g for ex in questions for g in ex.gold_passage_ids} if cfg.gold else set()
    if cfg.hard_negatives:
        ids |= {pid for ex in questions for pid in ex.hard_negative_ids}
    return ids


def passage_rows(passages: PassageTable, ids, known: dict[str, int] | None = None) -> dict[str, int]:
    """The row of each of `ids` that is a passage id of `passages` (the others are left out): one scan
    of the id column, none when every id is in `known` (rows found before) or there are none."""
    ids = set(map(str, ids))
    known = known or {}
    out = {pid: known[pid] for pid in ids if pid in known}
    return out | passages.rows_of(ids - set(out))


def kept_first(questions: Sequence[QAExample], rows_of: dict[str, int], cfg: CutConfig) -> KeptFirst:
    """The gold passages and the given hard negatives the cut keeps whole (`PRIORITY`), from `rows_of`
    (`passage_rows` of `wanted_ids`). A gold id not there is refused (the caller names its file and
    line first, `check_named_ids`); so is a cut that cannot hold them all, before the search."""
    gold: set[int] = set()
    if cfg.gold:
        for ex in questions:
            for g in ex.gold_passage_ids:
                if g not in rows_of:
                    raise InputError("--questions", f"gold passage id {g!r} of question {ex.id!r} is not in the passages: "
                                     "the cut keeps every question's gold passages (--no-gold keeps none)")
                gold.add(rows_of[g])
    negatives: set[int] = set()
    missing: set[str] = set()
    if cfg.hard_negatives:
        for ex in questions:
            candidates = [pid for pid in ex.hard_negative_ids if pid not in ex.gold_passage_ids]
            missing.update(pid for pid in candidates if pid not in rows_of)
            negatives.update(rows_of[pid] for pid in [c for c in candidates if c in rows_of][:cfg.hard_negatives])
    negatives -= gold
    if len(gold) + len(negatives) > cfg.max_passages:
        asked = bool(cfg.hard_negatives)
        named = [f"{len(gold)} gold passages"] * cfg.gold + [f"{len(negatives)} given hard negatives"] * asked
        ways = ["raise it"] + ["lower --hard-negatives"] * asked + ["give --no-gold"] * cfg.gold
        raise InputError("--max-passages", f"{cfg.max_passages} cannot hold the questions' {' and '.join(named)}, which "
                         f"the cut keeps whole before the retrieved ones: {', '.join(ways[:-1])} or {ways[-1]}")
    return KeptFirst(np.array(sorted(gold), np.int64), np.array(sorted(negatives), np.int64), len(missing))


def check_named_ids(files: Sequence[tuple[str | os.PathLike, Sequence[QAExample]]], present: Container[str],
                    cfg: CutConfig, where: str, fields: Mapping[str, str] | None = None) -> None:
    """Refuse, naming file, line and field, what the cut cannot keep by name: with `cfg.gold`, a gold
    id the whole corpus lacks (as `train dpr` and `eval retrieval` refuse it: a file written for
    another corpus, or a mistyped id); with `cfg.hard_negatives`, a file whose given hard negatives
    (but gold ones) the corpus holds none of (as `train dpr --hard-negatives-from given` refuses it),
    and questions that give none at all. `files`: each --questions file with the examples read from
    it (`read_qa`'s, in its order; a first part of them too); `present`: the ids the corpus holds."""
    for path, examples in files if cfg.gold else ():
        error = missing_passage_id(examples, "gold_passage_ids", present, path, where, fields)
        if error is not None:
            raise InputError(error.source, f"{error.message}: the cut keeps every question's gold passages, and the whole "
                             "corpus lacks this one (--no-gold keeps none)", line=error.line, field=error.field)
    if not cfg.hard_negatives:
        return
    if not any(set(ex.hard_negative_ids) - set(ex.gold_passage_ids) for _, examples in files for ex in examples):
        raise InputError("--hard-negatives", f"{cfg.hard_negatives}, but no question of --questions gives a hard negative "
                         "that is not its gold (DPR's hard_negative_ctxs[].passage_id, lewisrag's hard_negative_ids)")
    for path, examples in files:
        given = [pid for ex in examples for pid in ex.hard_negative_ids if pid not in ex.gold_passage_ids]
        if given and not any(pid in present for pid in given):
            error = missing_passage_id(examples, "hard_negative_ids", present, path, where, fields)
            raise InputError(error.source, f"{error.message}, nor is any other of the file's given hard negatives: a "
                             "file written for another corpus", line=error.line, field=error.field)


def check_config(cfg: CutConfig, questions: Sequence[QAExample] | None = None) -> None:
    """What can be refused before the corpus is read (minutes at 21 M): the settings, and the
    questions once they are read."""
    if cfg.top < 1:
        raise InputError("--top", f"must be at least 1, got {cfg.top}")
    if cfg.max_passages < 1:
        raise InputError("--max-passages", f"must be at least 1, got {cfg.max_passages}")
    if cfg.hard_negatives < 0:
        raise InputError("--hard-negatives", f"must be at least 0, got {cfg.hard_negatives}")
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


def _retrieved(rows: np.ndarray, room: int, named: np.ndarray) -> tuple[np.ndarray, int]:
    """The distinct rows of `rows` (Q, top) not among `named` (kept before them, `PRIORITY`), rank by
    rank (every question's first, then every second...), cut to `room`; and the depth to which every
    question's passages were all kept, by either."""
    by_rank = rows.T.ravel()  # rank-major: the cut drops deep ranks first
    distinct, first = np.unique(by_rank, return_index=True)
    ordered = distinct[np.argsort(first, kind="stable")]
    ordered = ordered[~np.isin(ordered, named)]
    if len(ordered) <= room:
        return ordered, rows.shape[1]
    kept = ordered[:max(room, 0)]
    inside = np.isin(rows, kept) | np.isin(rows, named)
    full_depth = int(np.argmin(inside.all(axis=0))) if not inside.all() else rows.shape[1]
    return kept, full_depth


def _fill(kept: np.ndarray, n: int, max_passages: int, seed: int) -> np.ndarray:
    """A seeded random sample of the rows not in `kept` (every reason's before it), up to `max_passages` in all."""
    want = max_passages - len(kept)
    if want <= 0:
        return np.zeros(0, np.int64)
    free = np.ones(n, bool)
    free[kept] = False
    return np.random.default_rng(seed).choice(np.flatnonzero(free), size=want, replace=False).astype(np.int64)


def _answer_hits(passages: PassageTable, questions: Sequence[QAExample], rows: np.ndarray,
                 on_progress: Progress | None) -> np.ndarray:
    """(Q, top) bool: whether the passage at each rank holds one of its question's answers
    (`scoring.qa.has_answer`: as whole words, both normalized by `normalize_passage`; a
    regular expression, CuratedTrec's, anywhere in the raw text).

    The retrieved passages are read in the corpus's order, WRITE_ROWS at a time, and each is
    checked against the questions that retrieved it: 80,000 questions' top 100 are up to 8 M
    passages, some 6 GB of text if held at once."""
    top = rows.shape[1]
    flat = rows.ravel()
    order = np.argsort(flat, kind="stable")  # (question, rank) pairs by the row they retrieved
    by_row = flat[order]
    hits = np.zeros(flat.shape, bool)
    wanted = np.unique(flat)
    for start in range(0, len(wanted), WRITE_ROWS):
        part = wanted[start:start + WRITE_ROWS]
        raw = passages.arrow_take(part).column("text").to_pylist()
        texts = [normalize_passage(t) for t in raw]  # once a passage, whichever questions retrieved it
        lo, hi = np.searchsorted(by_row, part[0], side="left"), np.searchsorted(by_row, part[-1], side="right")
        for pair, text in zip(order[lo:hi].tolist(), np.searchsorted(part, by_row[lo:hi]).tolist()):
            hits[pair] = has_answer(raw[text], questions[pair // top], texts[text])
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
