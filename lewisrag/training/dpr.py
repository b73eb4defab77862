"""DPR bi-encoder training (Karpukhin et al. 2020): in-batch negatives plus BM25 hard negatives.

For a batch of B questions, the passages are the B gold passages followed by one BM25 hard
negative per question (the top BM25 hit that is not gold). Each question scores all 2B passages
by inner product and the loss is the cross-entropy of its own gold passage: every other
question's positive and every hard negative is a negative (the paper's "Gold + 1 BM25" setup).
With `self_negatives_at`, from that share of the steps on each question also brings the passage
the model itself then ranked highest among the non-gold ones (mined once, as ANCE does).

With `shared=True` the question and passage sides are one network while training (a Siamese
bi-encoder). The built-in world's test entities have names that no training question contains,
so their tokens' embeddings never receive a gradient; only a network that treats both sides
alike maps such a name to matching vectors in a question and in its passage. The checkpoint
still holds two encoders (equal at first), as DPR's do, and RAG fine-tuning then moves only the
question encoder.

Starting points: a small BERT config with a WordPiece tokenizer trained on the corpus, or a local
pretrained BERT-like checkpoint (`init`), copied into both encoders.
"""

from __future__ import annotations

import copy
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoModel, AutoTokenizer, DPRConfig, DPRContextEncoder, DPRQuestionEncoder, get_linear_schedule_with_warmup

from lewisrag.data.io import InputError
from lewisrag.data.outputs import check_out_dir, staged_dir
from lewisrag.data.pretrained import load_model, load_tokenizer
from lewisrag.data.records import Passage, QAExample
from lewisrag.index.bm25 import BM25Index
from lewisrag.index.encoders import DPRCheckpoint
from lewisrag.scoring.aggregate import mean
from lewisrag.training.tokenizer import bert_wordpiece_tokenizer

KIND = "dpr"  # the marker kind of DPR checkpoint folders (lewisrag.data.outputs)


@dataclass(frozen=True)
class DPRTrainConfig:
    init: str | None = None  # local BERT-like checkpoint dir to start from; None = small model from scratch
    vocab_size: int = 2000  # corpus-trained WordPiece (scratch only); small, so unseen names split into seen pieces
    hidden_size: int = 128  # scratch model width
    layers: int = 2  # scratch model depth
    heads: int = 4  # scratch attention heads
    q_max_length: int = 32  # question tokens
    p_max_length: int = 128  # passage tokens (title + text); 100 words fit
    batch_size: int = 32  # questions per step; 2x passages (gold + one hard negative each)
    steps: int = 600  # optimizer steps
    lr: float = 1e-3  # AdamW peak learning rate (linear warmup, linear decay)
    warmup: float = 0.1  # share of steps spent warming up
    weight_decay: float = 0.01
    hard_negatives: bool = True  # add one BM25 hard negative per question
    self_negatives_at: float = 0.0  # at this share of the steps, add the model's own best-ranked non-gold passage as a second hard negative (0 = never)
    shared: bool = True  # one encoder for both sides while training (saved as two equal encoders): see below
    seed: int = 0


def train_tokenizer(texts: Sequence[str], vocab_size: int):
    """A lowercasing WordPiece tokenizer (BERT's pipeline, CJK as characters) for `texts`, deterministic."""
    return bert_wordpiece_tokenizer(texts, vocab_size)


def init_encoders(cfg: DPRTrainConfig, corpus_texts: Sequence[str]):
    """(question encoder, context encoder, tokenizer), both encoders starting from the same weights."""
    torch.manual_seed(cfg.seed)
    if cfg.init:
        if not Path(cfg.init).exists():
            raise InputError(cfg.init, "pretrained encoder directory not found", field="init")
        # a BERT-like checkpoint may carry a pretraining head and may lack the pooler: DPR uses neither
        bert = load_model(AutoModel.from_pretrained, cfg.init, "pretrained encoder (--init)", allow_unexpected=True,
                          ignore_missing=r"^pooler\.")
        tokenizer = load_tokenizer(AutoTokenizer.from_pretrained, cfg.init, "pretrained encoder's tokenizer (--init)",
                                   use_fast=True)
        dcfg = DPRConfig(**{k: v for k, v in bert.config.to_dict().items() if k in DPRConfig().to_dict()})
    else:
        tokenizer = train_tokenizer(corpus_texts, cfg.vocab_size)
        dcfg = DPRConfig(vocab_size=len(tokenizer), hidden_size=cfg.hidden_size, num_hidden_layers=cfg.layers,
                         num_attention_heads=cfg.heads, intermediate_size=4 * cfg.hidden_size,
                         max_position_embeddings=max(cfg.p_max_length, 128), pad_token_id=tokenizer.pad_token_id)
        bert = None
    q_enc, c_enc = DPRQuestionEncoder(dcfg), DPRContextEncoder(dcfg)
    if bert is not None:
        # every weight but the pooler, which DPR does not use and BERT-like checkpoints may lack
        weights = {k: v for k, v in bert.state_dict().items() if not k.startswith("pooler.")}
        try:
            q_enc.question_encoder.bert_model.load_state_dict(weights)
        except RuntimeError as e:  # missing, unexpected or misshapen weights
            raise InputError(cfg.init, f"not a BERT-like encoder: {str(e).splitlines()[1].strip()}", field="init") from None
    if cfg.shared:
        c_enc.ctx_encoder.bert_model = q_enc.question_encoder.bert_model
    else:
        c_enc.ctx_encoder.bert_model.load_state_dict(q_enc.question_encoder.bert_model.state_dict())
    return q_enc, c_enc, tokenizer


def mine_hard_negatives(examples: Sequence[QAExample], passages: Sequence[Passage], depth: int = 10) -> list[int | None]:
    """Per example, the row of the best-ranked BM25 passage that is not gold (None if none)."""
    index = BM25Index.in_memory(passages)
    _, rows = index.search([ex.question for ex in examples], depth)
    out = []
    for ex, row in zip(examples, rows):
        gold = set(ex.gold_passage_ids)
        out.append(next((int(r) for r in row if passages[r].id not in gold), None))
    return out


def mine_self_negatives(q_enc, c_enc, tokenizer, cfg: DPRTrainConfig, examples: Sequence[QAExample],
                        passages: Sequence[Passage], batch_size: int = 256, depth: int = 10) -> list[int | None]:
    """Per example, the row of the passage the current encoders rank highest that is not gold: the
    confusions BM25 cannot find (near-identical made-up names score nothing alike to BM25), mined as
    ANCE does from the model being trained (Xiong et al. 2021)."""
    was = q_enc.training, c_enc.training
    q_enc.eval(), c_enc.eval()
    with torch.no_grad():
        p_vec = torch.cat([c_enc(**tokenizer([p.title for p in chunk], [p.text for p in chunk], truncation="only_second",
                                             max_length=cfg.p_max_length, padding=True, return_tensors="pt")).pooler_output
                           for chunk in _chunks(passages, batch_size)])  # (N, D)
        q_vec = torch.cat([q_enc(**tokenizer([ex.question for ex in chunk], truncation=True, max_length=cfg.q_max_length,
                                             padding=True, return_tensors="pt")).pooler_output
                           for chunk in _chunks(examples, batch_size)])  # (Q, D)
        top = (q_vec @ p_vec.T).topk(min(depth, len(passages)), dim=1).indices.tolist()  # (Q, depth)
    q_enc.train(was[0]), c_enc.train(was[1])
    out = []
    for ex, row in zip(examples, top):
        gold = set(ex.gold_passage_ids)
        out.append(next((r for r in row if passages[r].id not in gold), None))
    return out


def _chunks(items: Sequence, n: int):
    for i in range(0, len(items), n):
        yield items[i : i + n]


def train_dpr(
    cfg: DPRTrainConfig,
    examples: Sequence[QAExample],
    passages: Sequence[Passage],
    out: str | os.PathLike,
    on_step: Callable[[int, float], None] | None = None,
    overwrite: bool = False,
) -> dict:
    """Train the bi-encoder and save it as a DPR checkpoint directory. Returns the metadata.

    Questions none of whose gold ids is in `passages` cannot be trained on; they are left out and
    counted in the metadata (`n_no_gold`), never dropped without a word. `out` must be missing,
    empty or a DPR checkpoint lewisrag wrote, unless `overwrite`.
    """
    out = check_out_dir(out, KIND, overwrite=overwrite)
    row_of = {p.id: i for i, p in enumerate(passages)}
    usable = []
    for ex in examples:
        gold = [g for g in ex.gold_passage_ids if g in row_of]
        if gold:
            usable.append((ex, row_of[gold[0]]))
    if not usable:
        raise InputError("--train", "no training question has a gold_passage_id found in --passages", field="gold_passage_ids")
    negatives = mine_hard_negatives([ex for ex, _ in usable], passages) if cfg.hard_negatives else [None] * len(usable)

    texts = [f"{p.title} {p.text}" for p in passages] + [ex.question for ex, _ in usable]
    q_enc, c_enc, tokenizer = init_encoders(cfg, texts)
    q_enc.train(), c_enc.train()
    params = list({id(p): p for p in [*q_enc.parameters(), *c_enc.parameters()]}.values())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = get_linear_schedule_with_warmup(opt, int(cfg.warmup * cfg.steps), cfg.steps)
    rng = random.Random(cfg.seed)
    order: list[int] = []
    losses = []
    mine_at = int(cfg.self_negatives_at * cfg.steps) if cfg.self_negatives_at else None  # the one mining pass
    mined: list[int | None] = []  # per usable question, its self-mined negative from step `mine_at` on
    for step in range(cfg.steps):
        if len(order) < cfg.batch_size:
            fresh = list(range(len(usable)))
            rng.shuffle(fresh)
            order += fresh
        batch, order = order[: cfg.batch_size], order[cfg.batch_size :]
        if step == mine_at:
            mined = mine_self_negatives(q_enc, c_enc, tokenizer, cfg, [ex for ex, _ in usable], passages)
        rows = [usable[i][1] for i in batch] + [negatives[i] for i in batch if negatives[i] is not None]
        rows += [mined[i] for i in batch if mined and mined[i] is not None]
        q = tokenizer([usable[i][0].question for i in batch], truncation=True, max_length=cfg.q_max_length,
                      padding=True, return_tensors="pt")
        p = tokenizer([passages[r].title for r in rows], [passages[r].text for r in rows], truncation="only_second",
                      max_length=cfg.p_max_length, padding=True, return_tensors="pt")
        q_vec = q_enc(**q).pooler_output  # (B, D)
        p_vec = c_enc(**p).pooler_output  # (B + negatives, D): golds, BM25 negatives, self-mined ones
        scores = q_vec @ p_vec.T  # (B, B + negatives)
        # Two questions about the same passage: the other's positive is not a negative for this one.
        same = torch.tensor([[rows[j] == usable[i][1] and j != n for j in range(len(rows))] for n, i in enumerate(batch)])
        scores = scores.masked_fill(same, -1e4)
        loss = F.cross_entropy(scores, torch.arange(len(batch)))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 2.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if on_step:
            on_step(step + 1, losses[-1])
    q_enc.eval(), c_enc.eval()
    if cfg.shared:  # two independent copies from here on: RAG fine-tuning moves only the question side
        c_enc.ctx_encoder.bert_model = copy.deepcopy(q_enc.question_encoder.bert_model)
    ckpt = DPRCheckpoint(q_enc, c_enc, tokenizer, {})
    meta = {"config": asdict(cfg), "max_length": cfg.p_max_length, "q_max_length": cfg.q_max_length,
            "final_loss": mean(losses[-20:]), "n_train": len(usable), "n_no_gold": len(examples) - len(usable)}
    with staged_dir(out, KIND) as tmp:
        ckpt.save(tmp, meta)
    return ckpt.meta
