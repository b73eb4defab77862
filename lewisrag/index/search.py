"""Searching an index with question strings, and recall@k against gold passage ids.

`open_retriever` returns a BM25 or a dense retriever; both answer `search(questions, k)` with
ranked `Hit`s. A dense index is searched with a question encoder from a DPR checkpoint (by default
the one that built it) or a transformers DPRQuestionEncoder folder with `context_encoder` naming its
pair; an encoder trained against another context encoder is refused unless `swap=True`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from lewisrag.data.io import InputError, write_json
from lewisrag.data.records import QAExample
from lewisrag.index import store, tuning
from lewisrag.index.bm25 import BM25Index
from lewisrag.index.dense import DenseIndex
from lewisrag.index.encoders import encode_texts, load_question_encoder
from lewisrag.scoring.retrieval import first_gold_rank, recall_at_k


@dataclass(frozen=True)
class Hit:
    id: str
    title: str
    text: str
    score: float
    row: int

    def to_dict(self) -> dict:
        return asdict(self)


class BM25Retriever:
    def __init__(self, index):
        self.index = index

    def search(self, questions: Sequence[str], k: int) -> list[list[Hit]]:
        scores, rows = self.index.search(questions, k)
        return _hits(self.index.passages, scores, rows)


class DenseRetriever:
    def __init__(self, index, checkpoint, batch_size: int = 64):
        self.index, self.checkpoint, self.batch_size = index, checkpoint, batch_size

    def encode(self, questions: Sequence[str]):
        return encode_texts(self.checkpoint.question_encoder, self.checkpoint.tokenizer, list(questions),
                            batch_size=self.batch_size, max_length=int(self.checkpoint.meta.get("q_max_length", 64)))

    def search(self, questions: Sequence[str], k: int) -> list[list[Hit]]:
        scores, rows = self.index.search(self.encode(questions), k)
        return _hits(self.index.passages, scores, rows)


class FusedRetriever:
    """Reciprocal rank fusion (Cormack et al. 2009) of several retrievers over the same passages.

    A passage's fused score is sum over retrievers of 1 / (rrf_k + rank), rank counted from 1;
    scores of different retrievers (BM25, inner products) need no calibration against each other.
    A BM25 hit scoring 0 shares no word with the question (BM25 pads its top k with such passages in
    the index's order) and earns no fused score, as in `retrieval_recall`.
    """

    def __init__(self, retrievers: Sequence, rrf_k: int = 60, depth: int = 50):
        self.retrievers, self.rrf_k, self.depth = list(retrievers), rrf_k, depth

    def search(self, questions: Sequence[str], k: int) -> list[list[Hit]]:
        runs = [r.search(questions, max(k, self.depth)) for r in self.retrievers]
        out = []
        for per_question in zip(*runs):
            score: dict[str, float] = {}
            first: dict[str, Hit] = {}
            for retriever, hits in zip(self.retrievers, per_question):
                if isinstance(retriever, BM25Retriever):
                    hits = [h for h in hits if h.score > 0]
                for rank, h in enumerate(hits, start=1):
                    score[h.id] = score.get(h.id, 0.0) + 1.0 / (self.rrf_k + rank)
                    first.setdefault(h.id, h)
            ranked = sorted(score, key=lambda pid: (-score[pid], pid))[:k]
            out.append([Hit(pid, first[pid].title, first[pid].text, score[pid], first[pid].row) for pid in ranked])
        return out


def open_retriever(index_path: str | os.PathLike, encoder: str | os.PathLike | None = None, swap: bool = False,
                   context_encoder: str | os.PathLike | None = None, flags: tuple[str, ...] = ("--context-encoder", "--swap")):
    """Open `index_path` for search; `encoder` is a DPR checkpoint dir or a transformers
    DPRQuestionEncoder folder, `context_encoder` the DPRContextEncoder folder of the latter's pair
    (`encoders.load_question_encoder`; dense indexes only). `flags`: the calling command's, which a
    mismatch error may suggest (`DenseIndex.check_encoder`)."""
    manifest = store.read_manifest(index_path)
    if manifest["kind"] == "bm25":
        return BM25Retriever(BM25Index.load(index_path))

    recorded = manifest.get("encoder", {})
    if not encoder and recorded.get("format") == "transformers":
        raise InputError(index_path, f"the index was built by the transformers DPRContextEncoder folder {store.encoder_path(index_path, manifest)}, "
                         "which encodes passages, not questions: pass --encoder with the DPRQuestionEncoder folder of its "
                         "pair and --context-encoder with that folder", field="encoder.path")
    if encoder and not Path(encoder).exists():  # the one given: name it, not the index
        raise InputError(encoder, "--encoder: not found")
    encoder = encoder or store.encoder_path(index_path, manifest)
    if not encoder or not Path(encoder).exists():
        raise InputError(index_path, f"the index's encoder {encoder!r} is not found; pass --encoder", field="encoder.path")
    index = DenseIndex.load(index_path)
    checkpoint = load_question_encoder(encoder, context_encoder)
    index.check_encoder(checkpoint.ctx_fingerprint, checkpoint.dim, swap=swap, flags=flags)
    return DenseRetriever(index, checkpoint)


def retrieval_recall(
    retriever,
    examples: Sequence[QAExample],
    ks: Sequence[int] = (1, 5, 20),
    batch_size: int = 64,
    on_batch: Callable[[int], None] | None = None,
) -> dict:
    """Retrieval scores of an index on questions with gold passage ids (`lewisrag.scoring.retrieval`).

    `hit@k`: the share of questions with at least one gold passage among the top k hits (not DPR's
    top-k accuracy, which counts an answer string: `scoring.retrieval.answer_recall`). `recall@k`: the mean share of each question's gold passages among its top k
    (plain recall; equal to hit@k when every question has one gold passage). Questions without
    `gold_passage_ids` are left out and counted under `skipped`. `per_question` maps each scored
    question id to its recall at each k ({"1": ..., "5": ...}), and `first_gold` to the 0-based rank
    of its first gold hit (None: not in the top max(ks)), for paired comparisons question by question.
    A BM25 hit scoring 0 is no retrieved passage (as for `targets.make_targets`' `scored_only`): BM25
    fills its top k with passages sharing no word with the question, in the index's order, and a
    gold passage among them once counted as found. `fewer_hits` counts the questions whose search came
    back with fewer than max(ks) passages (a compressed dense index whose nprobe or efSearch reaches
    no more; for BM25, fewer passages share a word with the question), as `targets.make_targets`
    counts them: their hit@k and recall@k count the passages found, and a caller says so.
    """
    ks = sorted(set(ks))  # a repeated cut-off would be counted twice into one share
    scored = [ex for ex in examples if ex.gold_passage_ids]
    hits_at = {k: 0 for k in ks}
    recall_sum = {k: 0.0 for k in ks}
    first_gold: dict[str, int | None] = {}
    per_question: dict[str, dict[str, float]] = {}
    kmax = max(ks)
    fewer_hits = 0
    scored_only = isinstance(retriever, BM25Retriever)
    for i in range(0, len(scored), batch_size):
        batch = scored[i : i + batch_size]
        for ex, hits in zip(batch, retriever.search([ex.question for ex in batch], kmax)):
            ids = [h.id for h in hits if h.score > 0 or not scored_only]
            fewer_hits += len(ids) < kmax
            first = first_gold_rank(ids, ex.gold_passage_ids)
            first_gold[ex.id] = first
            per_question[ex.id] = {str(k): recall_at_k(ids, ex.gold_passage_ids, k) for k in ks}
            for k in ks:
                hits_at[k] += first is not None and first < k
                recall_sum[k] += per_question[ex.id][str(k)]
        if on_batch:
            on_batch(len(batch))
    n = len(scored)
    rate = {f"hit@{k}": (hits_at[k] / n if n else float("nan")) for k in ks}
    recall = {f"recall@{k}": (recall_sum[k] / n if n else float("nan")) for k in ks}
    return {"n": n, "skipped": len(examples) - n, **recall, **rate, "fewer_hits": fewer_hits,
            "per_question": per_question, "first_gold": first_gold}


def _hits(passages, scores, rows) -> list[list[Hit]]:
    out = []
    for srow, rrow in zip(scores, rows):
        out.append([Hit(passages[r].id, passages[r].title, passages[r].text, float(s), int(r))
                    for s, r in zip(srow, rrow) if r >= 0])
    return out


def tune_dense(index_path: str | os.PathLike, questions: Sequence[str], encoder: str | os.PathLike | None = None,
               context_encoder: str | os.PathLike | None = None, swap: bool = False, k: int = 5,
               target_recall: float = 0.95, rerank_depth: int | None = None, held_out: float = 0.2,
               seed: int = 0) -> dict:
    """Choose a compressed index's search parameter for a recall target on the tuning questions, measure
    its recall on held-out ones, and record both in the manifest, where every later search
    (`DenseIndex.load`) applies the setting.

    `held_out` of the questions (`tuning.split_held_out`, seeded with `seed`; each side at least
    `tuning.MIN_SPLIT_QUESTIONS`) are set apart; the others are encoded with the question encoder
    (`open_retriever`'s rules), their exact top-k is computed from the stored vectors, and
    `tuning.tune_search` finds the smallest nprobe (IVF) or efSearch (HNSW) whose recall@k on them
    reaches `target_recall` (`reached`: True; False says the index's codes cannot reach the target at
    any setting). That recall (`tuned_recall_at_k`) crosses the target by construction, so it sits
    above what unseen questions get; the recall at the chosen setting on the held-out questions
    (`held_out_recall_at_k`, and `held_out_reached` whether it meets the target there too) is the one
    to expect; `held_out_found_k` is False where some held-out question finds fewer than k passages at
    that setting, which then misses the target whatever the recall. `held_out` 0 tunes on every
    question and records no held-out recall (None). With `rerank_depth`, each search takes that many
    candidates and re-ranks them exactly from the stored vectors (float16 or float32), and the
    manifest records the depth so that searches do the same. Returns what was recorded.
    """
    manifest = store.read_manifest(index_path, kind="dense")  # a BM25 index has no vectors to tune: one line, not a traceback
    if manifest.get("faiss_factory") == "Flat" and rerank_depth is None:
        # (--rerank-depth given is refused by name: tuning.tune_search) as a BM25 index is: nothing recorded
        raise InputError(index_path, "a Flat index searches exactly: it has no nprobe or efSearch to tune, and its recall "
                         "against exact search is 1; nothing recorded", field="faiss_factory")
    retriever = open_retriever(index_path, encoder, swap, context_encoder)
    index = retriever.index
    if not questions:
        raise InputError("--questions", "no questions to tune on")
    store.check_depth(k, len(index.passages))
    if rerank_depth is not None and not k <= rerank_depth <= len(index.passages):
        raise InputError("--rerank-depth", f"must be between --n-docs ({k}) and the index's {len(index.passages)} "
                         f"passages, got {rerank_depth}")
    tune_rows, held_rows = tuning.split_held_out(len(questions), held_out, seed)  # refused before any encoding
    q = retriever.encode(questions)
    # a few rows past k: a row tied with the k-th exact score counts as exact (tuning.recall_at_k), and
    # any found row the listing lacks is scored against the stored vectors (`exact_vectors`), so that it
    # counts however many rows tie (40 copies of one passage)
    scores, exact = tuning.exact_top_k(index.scan_vectors(), q, min(k + 8, len(index.passages)))
    vectors = index.embeddings if rerank_depth else None
    # FAISS's rows checked as every search of the index checks them: a row number damaged past the
    # passages is one line naming index.faiss, not an IndexError where a re-ranking reads its vector
    result = tuning.tune_search(index.faiss_index, q[tune_rows], exact[tune_rows], k, target_recall,
                                rerank_vectors=vectors, rerank_depth=rerank_depth, exact_scores=scores[tune_rows],
                                exact_vectors=index.embeddings, check_rows=index._known_rows)
    held_recall = held_reached = held_found_k = None
    if len(held_rows):  # the index is left at the chosen setting (tune_search)
        recall, held_found_k = tuning.measure(index.faiss_index, q[held_rows], exact[held_rows], k,
                                              rerank_vectors=vectors, rerank_depth=rerank_depth,
                                              exact_scores=scores[held_rows], exact_vectors=index.embeddings,
                                              check_rows=index._known_rows)
        # a held-out question that finds fewer than k passages misses the target whatever the recall: training
        # and answering refuse such a search (`tuning.tune_search`); `held_out_found_k` says which of the two it was
        held_recall, held_reached = round(recall, 4), recall >= target_recall and held_found_k
    record = {"target_recall": target_recall, "k": k, "knob": result.knob, "reached": result.reached,
              "tuned_recall_at_k": round(result.recall, 4), "tuning_questions": len(tune_rows),
              "held_out_recall_at_k": held_recall, "held_out_reached": held_reached,
              "held_out_found_k": held_found_k, "held_out_questions": len(held_rows),
              "held_out": held_out, "seed": seed if len(held_rows) else None, "questions": len(questions),
              "queries_per_s": round(result.qps, 1), "trials": {str(v): round(r, 4) for v, r in result.trials.items()}}
    manifest = {**index.manifest, "search_params": result.params, "rerank_depth": rerank_depth, "tuning": record}
    write_json(Path(index_path) / store.MANIFEST, manifest)
    return {"search_params": result.params, "rerank_depth": rerank_depth, **record}
