"""Where DPR training takes its hard negatives from (`training.dpr`): mined by BM25 over the
passages, given by the training file (DPR's own files hold DPR's BM25 negatives,
`hard_negative_ctxs`, read into `QAExample.hard_negative_ids`), or mined from the model being trained
(ANCE's self-negatives); and which one a question brings to each step (`pick_negative`).
"""

from __future__ import annotations

import os
import random
import warnings
from collections.abc import Container, Mapping, Sequence

import torch

from lewisrag.data.io import InputError, LewisragWarning
from lewisrag.data.qa_formats import qa_records
from lewisrag.data.records import Passage, QAExample, ids_present
from lewisrag.index.bm25 import BM25Index
from lewisrag.training.rag import autocast

HARD_NEGATIVE_SOURCES = ("auto", "given", "bm25")  # what hard_negatives_from may ask for


def hard_negative_source(cfg, examples: Sequence[QAExample], present: Container[str]) -> str:
    """Where training takes its hard negatives from, by `cfg` (a `DPRTrainConfig`): "none", "given" or
    "bm25". `auto` takes the given
    ones only when every example has one that is not gold and every given id is in `present` (the
    passages' ids): a share of questions without would train on weaker negatives than the rest, and
    ids of another corpus are for `given` to name, so BM25 mines them all then (the built-in world
    gives none, and so trains as it always did).

    >>> from types import SimpleNamespace
    >>> cfg = SimpleNamespace(hard_negatives=True, hard_negatives_from="auto", steps=1)  # DPRTrainConfig's defaults
    >>> ex = [QAExample("1", "q?", ["a"], ["p1"], hard_negative_ids=["p2"]), QAExample("2", "q?", ["a"], ["p2"])]
    >>> [hard_negative_source(cfg, e, {"p1", "p2"}) for e in (ex[:1], ex, [])]
    ['given', 'bm25', 'bm25']
    >>> hard_negative_source(cfg, ex[:1], {"p1"})  # its negative is not among the passages
    'bm25'
    """
    if cfg.hard_negatives_from not in HARD_NEGATIVE_SOURCES:
        raise InputError("--hard-negatives-from", f"{cfg.hard_negatives_from!r}: one of {', '.join(HARD_NEGATIVE_SOURCES)}")
    if not cfg.hard_negatives or cfg.steps == 0:
        return "none"
    if cfg.hard_negatives_from != "auto":
        return cfg.hard_negatives_from
    every = bool(examples) and all(set(ex.hard_negative_ids) - set(ex.gold_passage_ids) for ex in examples)
    return "given" if every and all(pid in present for ex in examples for pid in ex.hard_negative_ids) else "bm25"


def given_negatives(examples: Sequence[QAExample], row_of: dict[str, int]) -> tuple[list[list[int]], int]:
    """Per example, the rows of its given hard negatives; and how many given ones were dropped as gold.

    A given negative that is also one of the question's gold passages is dropped: the file contradicts
    itself there, and the loss masks a question's gold passages anyway, so it would only take the slot
    of a real negative. An id not in the passages is an InputError (`train dpr` names its line first:
    `check_hard_negative_ids`)."""
    out, dropped = [], 0
    for ex in examples:
        gold = set(ex.gold_passage_ids)
        for pid in ex.hard_negative_ids:
            if pid not in row_of:
                raise InputError("--train", f"hard negative id {pid!r} of question {ex.id!r} is not in the passages",
                                 field="hard_negative_ids")
        out.append([row_of[pid] for pid in ex.hard_negative_ids if pid not in gold])
        dropped += len(ex.hard_negative_ids) - len(out[-1])
    return out, dropped


def check_hard_negative_ids(examples: Sequence[QAExample], passages, path: str | os.PathLike, where: str,
                            fields: Mapping[str, str] | None = None) -> None:
    """Refuse a given hard negative id that `passages` lack, named by file, line and field (DPR's JSON:
    the context that holds it, `hard_negative_ctxs[j].passage_id`), as `records.check_gold_ids` names a
    gold one: a file written for another corpus. `examples` are `read_qa(path, fields)`'s, in its order."""
    given = {pid for ex in examples for pid in ex.hard_negative_ids}
    present = ids_present(passages, given)
    if given <= present:
        return
    for (line, rec), ex in zip(qa_records(path), examples):
        missing = [pid for pid in ex.hard_negative_ids if pid not in present]
        if missing:
            field = (fields or {}).get("hard_negative_ids", "hard_negative_ids")
            if fields is None and isinstance(rec.get("hard_negative_ctxs"), list):
                j = next(j for j, c in enumerate(rec["hard_negative_ctxs"]) if str(c.get("passage_id")) == missing[0])
                field = f"hard_negative_ctxs[{j}].passage_id"
            elif isinstance(rec.get(field), list) and missing[0] in rec[field]:
                field = f"{field}[{rec[field].index(missing[0])}]"
            raise InputError(path, f"hard negative id {missing[0]!r} is not in {where}", line=line, field=field)


def pick_negative(candidates: list[int], rng: random.Random) -> int | None:
    """One of a question's hard negatives for this step: DPR shuffles a question's hard_negative_ctxs
    each time it is batched and takes the first (`create_biencoder_input(shuffle=True)`, one hard
    negative), i.e. one at random. A single candidate (a BM25 one) draws nothing from `rng`."""
    if len(candidates) <= 1:
        return candidates[0] if candidates else None
    return candidates[rng.randrange(len(candidates))]


def mine_hard_negatives(examples: Sequence[QAExample], passages: Sequence[Passage], depth: int = 10) -> list[int | None]:
    """Per example, the row of the best-ranked BM25 passage that is not gold (None if none)."""
    index = BM25Index.in_memory(passages)
    _, rows = index.search([ex.question for ex in examples], depth)
    out = []
    for ex, row in zip(examples, rows):
        gold = set(ex.gold_passage_ids)
        out.append(next((int(r) for r in row if passages[r].id not in gold), None))
    return out


def mine_self_negatives(q_enc, c_enc, tokenizer, cfg, examples: Sequence[QAExample],
                        passages: Sequence[Passage], batch_size: int = 256, depth: int = 10) -> list[int | None]:
    """Per example, the row of the passage the current encoders rank highest that is not gold: the
    confusions BM25 cannot find (near-identical made-up names score nothing alike to BM25), mined as
    ANCE does from the model being trained (Xiong et al. 2021)."""
    was = q_enc.training, c_enc.training
    q_enc.eval(), c_enc.eval()
    device = next(q_enc.parameters()).device
    with torch.no_grad(), autocast(cfg.mixed_precision, device.type):
        p_vec = torch.cat([c_enc(**tokenizer([p.title for p in chunk], [p.text for p in chunk], truncation="only_second",
                                             max_length=cfg.p_max_length, padding=True,
                                             return_tensors="pt").to(device)).pooler_output.float()
                           for chunk in _chunks(passages, batch_size)])  # (N, D)
        q_vec = torch.cat([q_enc(**tokenizer([ex.question for ex in chunk], truncation=True, max_length=cfg.q_max_length,
                                             padding=True, return_tensors="pt").to(device)).pooler_output.float()
                           for chunk in _chunks(examples, batch_size)])  # (Q, D)
    with torch.no_grad():
        top = (q_vec @ p_vec.T).topk(min(depth, len(passages)), dim=1).indices.tolist()  # (Q, depth), in float32
    q_enc.train(was[0]), c_enc.train(was[1])
    out = []
    for ex, row in zip(examples, top):
        gold = set(ex.gold_passage_ids)
        out.append(next((r for r in row if passages[r].id not in gold), None))
    return out


def hard_negative_rows(source: str, examples: Sequence[QAExample], passages: Sequence[Passage],
                    row_of: dict[str, int]) -> tuple[list[list[int]], dict[str, int]]:
    """Per example, the rows its hard negative is picked from each step (`pick_negative`), by `source`; and, for
    given ones, the counts the metadata reports. With given negatives no BM25 index is built: over a
    corpus of millions that index is what would not fit a small machine."""
    if source == "bm25":
        return [[] if r is None else [r] for r in mine_hard_negatives(examples, passages)], {}
    if source == "none":
        return [[] for _ in examples], {}
    rows, dropped = given_negatives(examples, row_of)
    if not any(rows):
        raise InputError("--hard-negatives-from", "given, but no training question has a hard negative in --train "
                         "(DPR's hard_negative_ctxs[].passage_id, lewisrag's hard_negative_ids) that is not its gold "
                         "passage: use bm25")
    return rows, {"n_no_hard_negative": sum(not r for r in rows), "n_hard_negatives_gold": dropped}


def note_unused_given(examples: Sequence[QAExample], row_of: dict[str, int]) -> None:
    """Warn where `auto` mines BM25 although every question has given negatives, some of them not in
    the passages: a corpus cut to fewer passages, or a file written for another corpus."""
    if not examples or not all(set(ex.hard_negative_ids) - set(ex.gold_passage_ids) for ex in examples):
        return
    missing = [(pid, ex.id) for ex in examples for pid in ex.hard_negative_ids if pid not in row_of]
    warnings.warn(LewisragWarning(
        f"every training question has given hard negatives, but the passages lack {len(missing)} of their ids "
        f"(the first: {missing[0][0]!r}, of question {missing[0][1]!r}): BM25 mines the hard negatives over the "
        "passages instead; --hard-negatives-from given names the file's line"), stacklevel=3)


def _chunks(items: Sequence, n: int):
    for i in range(0, len(items), n):
        yield items[i : i + n]
