"""Where DPR training takes its hard negatives from (`training.dpr`): mined by BM25 over the
passages, given by the training file (DPR's own files hold DPR's BM25 negatives,
`hard_negative_ctxs`, read into `QAExample.hard_negative_ids`), or mined from the model being trained
(ANCE's self-negatives); and which one a question brings to each step (`pick_negative`).
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import warnings
from collections.abc import Container, Mapping, Sequence

import torch

from lewisrag.data.io import InputError, LewisragWarning
from lewisrag.data.passages import PassageTable, passages_at
from lewisrag.data.records import Passage, QAExample, ids_present, missing_passage_id
from lewisrag.index.bm25 import BM25Index
from lewisrag.index.encoders import tokenize_texts
from lewisrag.scoring.qa import has_answer, is_regex_answered, normalize_passage
from lewisrag.training.configs import HARD_NEGATIVE_SOURCES
from lewisrag.training.devices import autocast


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


def given_negatives(examples: Sequence[QAExample], row_of: dict[str, int]) -> tuple[list[list[int]], dict[str, int], list[int]]:
    """Per example, the rows of its given hard negatives that `row_of` (the passages) holds; the counts
    of those dropped (`n_hard_negatives_gold`, `n_hard_negatives_missing`); and the examples left
    without any because every one that is not gold is missing.

    A given negative that is also one of the question's gold passages is dropped: the file contradicts
    itself there, and the loss masks a question's gold passages anyway, so it would only take the slot
    of a real negative. One the passages lack is dropped too and the rest are kept: a corpus cut to
    what a small run affords (`index cut`) keeps only some of the passages DPR mined its negatives
    from, and each one left is still one of DPR's (`hard_negative_rows` says what becomes of a question
    left without any, and `check_hard_negative_ids` refuses a file none of whose ids are there)."""
    out, gold_dropped, missing, lost = [], 0, 0, []
    for i, ex in enumerate(examples):
        gold = set(ex.gold_passage_ids)
        candidates = [pid for pid in ex.hard_negative_ids if pid not in gold]
        out.append([row_of[pid] for pid in candidates if pid in row_of])
        gold_dropped += len(ex.hard_negative_ids) - len(candidates)
        missing += len(candidates) - len(out[-1])
        if candidates and not out[-1]:
            lost.append(i)
    return out, {"n_hard_negatives_gold": gold_dropped, "n_hard_negatives_missing": missing}, lost


def check_hard_negative_ids(examples: Sequence[QAExample], passages, path: str | os.PathLike, where: str,
                            fields: Mapping[str, str] | None = None) -> None:
    """Refuse given hard negatives of which `passages` hold none (but gold ones): a file written for
    another corpus, where training would keep nothing of it. The first missing id is named by file,
    line and field (DPR's JSON: the context that holds it, `hard_negative_ctxs[j].passage_id`, or `.psg_id`), as a
    missing gold id is (`records.missing_passage_id`, one helper for both). Some missing and some
    there is a cut corpus: training keeps those there, with a warning (`hard_negative_rows`).
    `examples` are `read_qa(path, fields)`'s, in its order."""
    present = ids_present(passages, {pid for ex in examples for pid in ex.hard_negative_ids})
    if any(pid in present and pid not in ex.gold_passage_ids for ex in examples for pid in ex.hard_negative_ids):
        return
    error = missing_passage_id(examples, "hard_negative_ids", present, path, where, fields)
    if error is not None:
        raise error


def pick_negative(candidates: list[int], rng: random.Random) -> int | None:
    """One of a question's hard negatives for this step: DPR shuffles a question's hard_negative_ctxs
    each time it is batched and takes the first (`create_biencoder_input(shuffle=True)`, one hard
    negative), i.e. one at random. A single candidate (a BM25 one) draws nothing from `rng`."""
    if len(candidates) <= 1:
        return candidates[0] if candidates else None
    return candidates[rng.randrange(len(candidates))]


def mine_hard_negatives(examples: Sequence[QAExample], passages: Sequence[Passage], depth: int = 10) -> list[int | None]:
    """Per example, the row of the best-ranked BM25 passage that is not gold and holds no answer, nor is a copy
    of the gold passage (`_first_negative`; None if none)."""
    index = BM25Index.in_memory(passages)
    _, rows = index.search([ex.question for ex in examples], depth)
    return _first_negative(examples, [[int(r) for r in row] for row in rows], passages)


# The float32 scores of one part of the questions over every passage, at most (`mine_self_negatives`): both of the
# small preset's mining passes fit it whole (its QA retriever's 152 MiB, 9,898 questions x 4,016 passages, and
# with --tasks the tasks' retriever's 285 MiB, its 18,600 queries), so they mine as they always did, bit for bit.
SCORE_BYTES = 512 << 20


def mine_self_negatives(q_enc, c_enc, tokenizer, cfg, examples: Sequence[QAExample],
                        passages: Sequence[Passage], batch_size: int = 256, depth: int = 10) -> list[int | None]:
    """Per example, the row of the passage the current encoders rank highest that is not gold and holds no
    answer, nor is a copy of the gold passage (`_first_negative`; None if none): the confusions BM25
    cannot find (near-identical made-up names score nothing alike to BM25), mined as ANCE does from
    the model being trained (Xiong et al. 2021)."""
    was = q_enc.training, c_enc.training
    q_enc.eval(), c_enc.eval()
    device = next(q_enc.parameters()).device
    with torch.no_grad(), autocast(cfg.mixed_precision, device.type):
        # tokenized as training and the index tokenize them (the tokenizer's passage encoding)
        p_vec = torch.cat([c_enc(**tokenize_texts(tokenizer, [(p.title, p.text) for p in chunk], cfg.p_max_length)
                                 .to(device)).pooler_output.float()
                           for chunk in _chunks(passages, batch_size)])  # (N, D)
        q_vec = torch.cat([q_enc(**tokenizer([ex.question for ex in chunk], truncation=True, max_length=cfg.q_max_length,
                                             padding=True, return_tensors="pt").to(device)).pooler_output.float()
                           for chunk in _chunks(examples, batch_size)])  # (Q, D)
    # the (Q, N) scores, in float32, a part of the questions at a time: whole, NQ's 58,880 questions over a cut of a
    # million passages were some 235 GB. A matrix within SCORE_BYTES is one part, the product as it always was;
    # a larger one splits into equal parts within it (no lone last row: BLAS takes a one-row product another way,
    # its last bits apart from the same row's in a larger one)
    most = max(1, SCORE_BYTES // (4 * len(passages)))  # questions a part may hold
    with torch.no_grad():
        top = [hits for part in q_vec.tensor_split(math.ceil(len(q_vec) / most))
               for hits in (part @ p_vec.T).topk(min(depth, len(passages)), dim=1).indices.tolist()]  # (Q, depth)
    q_enc.train(was[0]), c_enc.train(was[1])
    return _first_negative(examples, top, passages)


READ_ROWS = 1 << 16  # passages read at a time (`_first_negative`)


def _first_negative(examples: Sequence[QAExample], ranked: Sequence[Sequence[int]],
                    passages: Sequence[Passage]) -> list[int | None]:
    """Per example, the first of its `ranked` rows that is a negative (None if none): not one of its
    gold passages, nor a copy of one (its title and text under another id: the positive's own words,
    and under the model its own vector), nor, for an example with answers, a passage whose text holds
    one (`scoring.qa.has_answer`, patterns too). DPR's BM25 negatives are the top passages "that
    do not contain the answer" (Karpukhin et al. 2020, §3.2): one that does is a false negative.

    The hits are read in one pass in row order, `READ_ROWS` passages at a time (a table decodes each
    row group about once, where reading row by row decoded one for almost every row); memory keeps of
    each its id, a digest of its title and text, and which of its questions' answers it holds, not
    the passage. Gold passages are found among the hits; those that are not, by one more read of the
    ids alone."""
    holds = set()  # (example, rank) whose passage holds an answer of the example
    asked: dict[int, list[tuple[int, int]]] = {}  # row -> (example, rank) to check for an answer
    for i, (ex, row) in enumerate(zip(examples, ranked)):
        for k, r in enumerate(row if ex.answers else ()):
            asked.setdefault(r, []).append((i, k))
    id_of, key_of = _read_hits(sorted({r for row in ranked for r in row}), passages, examples, asked, holds)
    gold = [set(ex.gold_passage_ids) for ex in examples]
    gold_keys = _gold_keys(gold, id_of, key_of, passages)
    out = []
    for i, row in enumerate(ranked):
        out.append(next((r for k, r in enumerate(row) if id_of[r] not in gold[i] and (i, k) not in holds
                         and key_of[r] not in gold_keys[i]), None))
    return out


def _read_hits(rows: list[int], passages: Sequence[Passage], examples: Sequence[QAExample],
               asked: dict[int, list[tuple[int, int]]], holds: set) -> tuple[dict[int, str], dict[int, bytes]]:
    """Of the ascending `rows`: each one's id and `_key`, read `READ_ROWS` at a time; the pairs of `asked`
    whose example is not gold there and whose answer the text holds are added to `holds`."""
    id_of, key_of = {}, {}
    for lo in range(0, len(rows), READ_ROWS):
        part = rows[lo:lo + READ_ROWS]
        for r, p in zip(part, passages_at(passages, part)):
            id_of[r], key_of[r] = p.id, _key(p)
            normalized = None  # the text as has_answer compares it, made once for all its questions
            for i, k in asked.get(r, ()):
                ex = examples[i]
                if p.id in ex.gold_passage_ids:
                    continue
                if normalized is None and not is_regex_answered(ex):
                    normalized = normalize_passage(p.text)
                if has_answer(p.text, ex, normalized):
                    holds.add((i, k))
    return id_of, key_of


def _gold_keys(gold: list[set[str]], id_of: dict[int, str], key_of: dict[int, bytes],
               passages: Sequence[Passage]) -> list[set[bytes]]:
    """Per example, the `_key`s of its gold passages: those among the hits as read; the rest found by a
    read of the ids alone (`PassageTable.ids_at`), only where some gold passage is not a hit."""
    key_by_id = {id_of[r]: key_of[r] for r in id_of}
    missing = set().union(*gold) - key_by_id.keys()
    if missing:
        found = {}
        for lo in range(0, len(passages), READ_ROWS):
            part = range(lo, min(len(passages), lo + READ_ROWS))
            ids = passages.ids_at(part) if isinstance(passages, PassageTable) else [passages[r].id for r in part]
            found.update((pid, r) for r, pid in zip(part, ids) if pid in missing)
        rows = sorted(found.values())
        for lo in range(0, len(rows), READ_ROWS):
            key_by_id.update((p.id, _key(p)) for p in passages_at(passages, rows[lo:lo + READ_ROWS]))
    return [{key_by_id[g] for g in ids if g in key_by_id} for ids in gold]


def _key(p: Passage) -> bytes:
    """A digest of `p`'s title and text: equal for copies of one passage (ids apart)."""
    both = f"{len(p.title)}:{p.title}{p.text}"  # the title's length first: ("ab", "c") is no ("a", "bc")
    return hashlib.blake2b(both.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def hard_negative_rows(source: str, examples: Sequence[QAExample], passages: Sequence[Passage],
                       row_of: dict[str, int]) -> tuple[list[list[int]], dict[str, int]]:
    """Per example, the rows its hard negative is picked from each step (`pick_negative`), by `source`; and, for
    given ones, the counts the metadata reports. With given negatives no BM25 index is built (over a
    corpus of millions that index is what would not fit a small machine), but for the questions whose
    every given negative the passages lack: DPR trained each of them on one of its BM25 negatives, and
    the top BM25 hit over the passages left is the nearest to it, where in-batch negatives alone would
    train them on weaker ones than the rest (why `auto` takes given ones only when all have them). A
    question the file gives none keeps none, as before: DPR too trains it without a BM25 one (its
    `hard_neg_fallback` takes a random negative, which in-batch negatives are already). The dropped
    ids and the questions BM25 mined for are counted in one warning. Mined by BM25, the questions it
    finds none for (every passage it ranks holds an answer, or is gold) are counted
    (`n_no_bm25_negative`): they train on in-batch negatives alone."""
    if source == "bm25":
        mined = mine_hard_negatives(examples, passages)
        return [[] if r is None else [r] for r in mined], {"n_no_bm25_negative": mined.count(None)}
    if source == "none":
        return [[] for _ in examples], {}
    rows, counts, lost = given_negatives(examples, row_of)
    if not any(rows):
        if counts["n_hard_negatives_missing"]:  # `train dpr` names the line first (check_hard_negative_ids)
            pid, qid = _first_missing(examples, row_of)
            raise InputError("--hard-negatives-from", f"given, but the passages hold none of the given hard negatives "
                             f"that are not gold (the first: {pid!r}, of question {qid!r}): a file written for another "
                             "corpus; use bm25")
        raise InputError("--hard-negatives-from", "given, but no training question has a hard negative in --train "
                         "(DPR's hard_negative_ctxs[].passage_id, lewisrag's hard_negative_ids) that is not its gold "
                         "passage: use bm25")
    mined = mine_hard_negatives([examples[i] for i in lost], passages) if lost else []
    for i, row in zip(lost, mined):
        rows[i] = [] if row is None else [row]
    if counts["n_hard_negatives_missing"]:
        pid, qid = _first_missing(examples, row_of)
        none = sum(row is None for row in mined)
        warnings.warn(LewisragWarning(
            f"the passages lack {counts['n_hard_negatives_missing']} of the given hard negatives (the first: {pid!r}, of "
            f"question {qid!r}): they are dropped and the others kept; {len(lost)} of {len(examples)} training "
            "questions are left without any, and BM25 over the passages mines theirs"
            + (f" ({none} find none and train on in-batch negatives only)" if none else "")), stacklevel=3)
    return rows, {"n_no_hard_negative": sum(not r for r in rows), **counts,
                  "n_bm25_hard_negative": len(mined) - mined.count(None)}


def _first_missing(examples: Sequence[QAExample], row_of: Container[str]) -> tuple[str, str]:
    """(id, question id) of the first given hard negative, not gold, that the passages lack."""
    return next((pid, ex.id) for ex in examples for pid in ex.hard_negative_ids
                if pid not in row_of and pid not in ex.gold_passage_ids)


def note_unused_given(examples: Sequence[QAExample], row_of: dict[str, int]) -> None:
    """Warn where `auto` mines BM25 although every question has given negatives, some of them not in
    the passages: a corpus cut to fewer passages, or a file written for another corpus. `given` would
    keep those there, so the warning counts what it would keep."""
    if not examples or not all(set(ex.hard_negative_ids) - set(ex.gold_passage_ids) for ex in examples):
        return
    missing = [(pid, ex.id) for ex in examples for pid in ex.hard_negative_ids if pid not in row_of]
    rows, _, lost = given_negatives(examples, row_of)
    kept = sum(map(len, rows))
    instead = (f"--hard-negatives-from given keeps the {kept} there and mines BM25 only for the {len(lost)} questions "
               "left without any" if kept else "none of them is there: --hard-negatives-from given names the file's line")
    warnings.warn(LewisragWarning(
        f"every training question has given hard negatives, but the passages lack {len(missing)} of their ids "
        f"(the first: {missing[0][0]!r}, of question {missing[0][1]!r}): BM25 mines the hard negatives over the "
        f"passages instead; {instead}"), stacklevel=3)


def _chunks(items: Sequence, n: int):
    for i in range(0, len(items), n):
        yield items[i : i + n]
