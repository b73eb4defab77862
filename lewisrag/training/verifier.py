"""Teaching the reader to verify: a short continued pretraining before FEVER (`reproduce --tasks fever`).

The paper fine-tunes BART-large on FEVER claims directly, with no evidence supervision: BART brings
from its pretraining the ability to compare a claim with a text. The small shipped generator was
pretrained to read (copy an answer out of a passage) and to denoise, never to compare, and fine-tuned
on the world's claims through retrieval it stays at chance between SUPPORTS and REFUTES, even on
unlimited fresh claims with their gold passages (docs/recipe.md, "FEVER"). What taught it, measured:
claims in minimal pairs (the same words, the true value or a false one) in one batch, so that the
value is all that tells the labels apart.

So, like the reading skill, the comparison skill is pretrained on entities no world uses
(`world.fresh_entities`): each claim read with the passage that decides it (`data.tasks.
verification_pairs`), the label as one generated token (`training.tasks.prepare_generator`), pairs
kept in one batch. The world's FEVER runs then fine-tune this generator as the paper fine-tunes
BART: claims alone, retrieval unsupervised. The world's own claims and passages are only measured
(dev claims with their gold passage, `evaluate_verification`), never trained on here.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from lewisrag.data import world
from lewisrag.data.io import InputError
from lewisrag.data.outputs import check_out_dir, staged_dir
from lewisrag.data.pretrained import load_generator
from lewisrag.data.records import Passage, QAExample
from lewisrag.data.tasks import LABELS, NEI, verification_pairs
from lewisrag.data.threads import resolve_device
from lewisrag.rag_model.model import generator_input
from lewisrag.rag_model.settings import RagSettings
from lewisrag.training.pretrain import KIND, _save_into, built_with, on_device
from lewisrag.training.optim import adamw, diverged, finite
from lewisrag.training.tasks import label_ids, predicted_label, prepare_generator

FRESH_PER_DRAW = 48  # fresh entities per draw: two thirds stated, one third absent (NOT ENOUGH INFO about unknowns)


@dataclass(frozen=True)
class VerifierConfig:
    steps: int = 2500  # optimizer steps (a probe: 3-way accuracy read with gold passages 0.70, 0.88, 0.93, 0.95 at 500-2,500)
    batch_size: int = 16  # claims a step: minimal pairs, so even
    lr: float = 3e-4  # AdamW, after a linear warmup, constant (lr 1e-3 left it at chance without pairs too)
    warmup_steps: int = 100
    weight_decay: float = 0.01
    max_source_length: int = 192  # the generator's input tokens (a world passage and a claim fit)
    seed: int = 0  # the fresh entities drawn
    eval_size: int = 300  # dev claims measured at the end
    device: str = "auto"  # where it trains and is measured: "auto" (a GPU when one is visible), "cpu" or "cuda[:N]"

    def __post_init__(self):
        if self.steps < 1 or self.batch_size < 2 or self.batch_size % 2:
            raise InputError("verifier", f"steps >= 1 and an even batch size >= 2, got {self.steps} and {self.batch_size}")


class FreshClaims:
    """Endless minimal-pair claims about fresh entities, each with its passage, pairs adjacent."""

    def __init__(self, seed: int, settings: RagSettings):
        self.rng, self.settings, self.buffer = random.Random(f"verifier:{seed}"), settings, []

    def take(self, n: int) -> list[tuple[str, str]]:
        """(generator input, label) for the next `n` claims."""
        while len(self.buffer) < n:
            ents = world.fresh_entities(self.rng, FRESH_PER_DRAW)
            stated = ents[: 2 * FRESH_PER_DRAW // 3]
            units = verification_pairs(stated, ents[len(stated):], self.rng)
            self.buffer += [(read_input(ex, p, self.settings), ex.answers[0]) for ex, p in units]
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out


def read_input(claim: QAExample, passage: Passage, settings: RagSettings) -> str:
    """The generator's input for a claim read with one passage, as the RAG model builds it."""
    return generator_input(passage.title, passage.text, claim.question, settings)


def label_batch(items: Sequence[tuple[str, str]], tokenizer, max_length: int) -> dict:
    """Inputs and labels (the label's tokens with the tokenizer's specials, -100 on padding)."""
    enc = tokenizer([s for s, _ in items], padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    labels = tokenizer([y for _, y in items], padding=True, return_tensors="pt")["input_ids"]
    labels[labels == tokenizer.pad_token_id] = -100
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": labels}


@torch.no_grad()
def evaluate_verification(generator, tokenizer, items: Sequence[tuple[str, str]], max_length: int = 192,
                          batch_size: int = 64) -> dict:
    """3-way label accuracy of (generator input, label) items: the label whose token the generator
    finds likeliest after `<s>` (each label is one token), and each gold label's recall. A label no
    item holds has recall None, its reason under "nan_reasons" ("recall.<label>"), not a measured-
    looking 0.0: the world's measured claims hold no NOT ENOUGH INFO (`world_claims`)."""
    was_training = generator.training
    generator.eval()
    ids = [label_ids(tokenizer, label)[0] for label in LABELS]
    preds = []
    for i in range(0, len(items), batch_size):
        chunk = items[i:i + batch_size]
        enc = tokenizer([s for s, _ in chunk], padding=True, truncation=True, max_length=max_length,
                        return_tensors="pt").to(generator.device)
        start = torch.tensor([[generator.config.decoder_start_token_id, tokenizer.bos_token_id]] * len(chunk),
                             device=generator.device)
        logits = generator(**enc, decoder_input_ids=start).logits[:, -1, ids]
        preds += [predicted_label(row) for row in logits.tolist()]
    generator.train(was_training)
    gold = [y for _, y in items]
    recall = {label: sum(p == g == label for p, g in zip(preds, gold)) / gold.count(label) if label in gold else None
              for label in LABELS}
    reasons = {f"recall.{label}": f"no measured claim has this gold label (of {len(gold)})"
               for label, r in recall.items() if r is None}
    if not gold:
        reasons["acc3"] = "no claim measured"
    return {"acc3": sum(p == g for p, g in zip(preds, gold)) / len(gold) if gold else None, "n": len(gold), "recall": recall,
            "nan_reasons": reasons}


def world_claims(claims: Sequence[QAExample], passages: Sequence[Passage], settings: RagSettings) -> list[tuple[str, str]]:
    """The world's SUPPORTS and REFUTES claims, each read with its gold passage: the comparison
    this stage teaches (NOT ENOUGH INFO claims, and any without a gold passage in `passages`, have
    none to read them with)."""
    by_id = {p.id: p for p in passages}
    return [(read_input(ex, by_id[ex.gold_passage_ids[0]], settings), ex.answers[0])
            for ex in claims if ex.answers[0] != NEI and ex.gold_passage_ids and ex.gold_passage_ids[0] in by_id]


def pretrain_verifier(generator: str | os.PathLike, out: str | os.PathLike, cfg: VerifierConfig,
                      dev: Sequence[QAExample] = (), passages: Sequence[Passage] = (),
                      on_step: Callable[[int, int, float], None] | None = None, overwrite: bool = False) -> dict:
    """Continue `generator` (a folder) on fresh minimal-pair claims; save it with its FEVER label
    tokens and recipe.json (config, minutes, final loss, the dev measurement, `built_with`) into `out`, which must
    be missing, empty or a generator lewisrag wrote, holding no file the user added since, unless `overwrite`."""
    out = check_out_dir(out, KIND, overwrite=overwrite, replaces=True)
    device = torch.device(resolve_device(cfg.device))
    model, tokenizer = load_generator(generator)
    prepare_generator("fever", model, tokenizer)
    model.to(device)
    settings = RagSettings()
    torch.manual_seed(cfg.seed)
    opt = adamw(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    stream, loss_ema, t0 = FreshClaims(cfg.seed, settings), None, time.perf_counter()
    model.train()
    for step in range(1, cfg.steps + 1):
        for group in opt.param_groups:
            group["lr"] = cfg.lr * min(1.0, step / max(1, cfg.warmup_steps))
        loss = model(**on_device(label_batch(stream.take(cfg.batch_size), tokenizer, cfg.max_source_length), device)).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        value = float(loss.detach())
        if not math.isfinite(value):  # full precision, no scaler: the weights are NaN from here on, and were saved, exit 0
            raise _diverged(cfg, f"the loss became {value} at step {step}")
        loss_ema = value if loss_ema is None else 0.95 * loss_ema + 0.05 * value
        if on_step:
            on_step(step, cfg.steps, loss_ema)
    if not finite(model.parameters()):  # the last step's update, whatever the loss
        raise _diverged(cfg, f"the weights hold NaN or inf after step {cfg.steps}")
    minutes = (time.perf_counter() - t0) / 60
    measured = world_claims(dev, passages, settings)[: cfg.eval_size]
    recipe = {"config": asdict(cfg), "from": str(generator), "steps": cfg.steps, "minutes": round(minutes, 2),
              "final_loss": loss_ema,
              "dev_gold_passage": evaluate_verification(model, tokenizer, measured, cfg.max_source_length) if measured else None,
              "built_with": built_with(device)}
    with staged_dir(Path(out), KIND) as tmp:
        return _save_into(model, tokenizer, recipe, tmp, fp16=False)


def _diverged(cfg: VerifierConfig, what: str) -> InputError:
    """The one line a diverging verifier stops with, before anything is saved (no flag sets its lr)."""
    return diverged(what, cfg.lr, "verifier", "lr")
