"""The closed-book baseline (Lewis et al. 2020, Table 1's "BART" row): the same starting generator
fine-tuned on the same training questions, but with no retrieval. The question is the whole input
and the answer the target, so whatever the model answers it must have stored in its weights.

Targets follow the RAG label convention (`rag_data.answer_labels`: decoder start token, then
`<s> answer </s>`), so the closed-book model and the RAG models learn the very same sequences from
the very same starting weights; only the generator's input differs.

It trains where the RAG runs do: on a GPU when one is visible (`device`), with the RAG runs'
`mixed_precision` (bf16, or fp16 with a gradient scaler whose skipped steps the log records) and
AdamW fused there; on the CPU in full precision by default, where the numbers stay the same digit
for digit from run to run.

Output directory: config.json, log.jsonl (one line per step), and final/ (generator + tokenizer
written with save_pretrained, loadable with `lewisrag.data.pretrained.load_generator`), all written
together once training has finished: a run that fails, diverges or is killed leaves no folder.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from lewisrag.data.io import InputError, write_json
from lewisrag.data.outputs import staged_dir
from lewisrag.data.pretrained import load_generator
from lewisrag.data.records import of_kinds, read_qa, refuse_regex_targets
from lewisrag.training.configs import ClosedBookConfig
from lewisrag.training.devices import autocast, single_device
from lewisrag.training.optim import (adamw, all_overflowed, backward_step, diverged, finite, first_non_finite,
                                     learning_rate_factor, warmup_steps)
from lewisrag.training.rag_data import (DataPosition, answer_labels, group_units, next_batch, training_pairs,
                                       warn_split_groups)
from lewisrag.training.tasks import label_log_probs, prepare_generator

KIND = "closed book"  # the marker kind of its folders (lewisrag.data.outputs; those written before had none)
LAYOUT = ("config.json", "log.jsonl", "final")  # what it writes there


def decoder_pair(labels, pad_id: int):
    """(decoder inputs, targets) from RAG-convention labels (B, T): inputs drop the last position,
    targets drop the first and ignore padding (-100), as RAG's loss shifts them.

    >>> import torch
    >>> d, t = decoder_pair(torch.tensor([[2, 0, 7, 2, 1]]), pad_id=1)
    >>> d.tolist(), t.tolist()
    ([[2, 0, 7, 2]], [[0, 7, 2, -100]])
    """
    targets = labels[:, 1:].clone()  # (B, T-1)
    targets[targets == pad_id] = -100
    return labels[:, :-1], targets


def train_closed_book(cfg: ClosedBookConfig, out: str | os.PathLike,
                      on_progress: Callable[[int, int, dict], None] | None = None) -> dict:
    """Fine-tune the generator on (question -> answer); returns a summary. Refuses a non-empty `out`."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise InputError(out, "output directory is not empty; choose another")
    device, scaler = single_device(cfg.device, cfg.mixed_precision)
    examples = read_qa(cfg.train)
    refuse_regex_targets(examples, cfg.train)
    pairs, skipped = training_pairs(of_kinds(examples, cfg.train_kinds))
    if len(pairs) < cfg.batch_size:
        raise InputError(cfg.train, f"{len(pairs)} questions with answers, fewer than batch size {cfg.batch_size}")
    units = group_units([ex for ex, _ in pairs])  # minimal pairs in one batch, as the RAG runs
    warn_split_groups(units, cfg.batch_size, f"--batch-size {cfg.batch_size}", cfg.train)
    generator, tokenizer = load_generator(cfg.generator, any_seq2seq=True)  # decodes with `generate`: any seq2seq
    if (broken := first_non_finite(generator.named_parameters())) is not None:  # it said "lower --lr"
        raise InputError(cfg.generator, f"the generator's weights hold NaN or inf ({broken}), so its loss would "
                         "be NaN from the first step; give another generator (lewisrag pretrain writes one)")
    prepare_generator(cfg.task, generator, tokenizer)
    generator.to(device)
    torch.manual_seed(cfg.seed)
    opt = adamw(generator.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    warmup = warmup_steps(cfg.warmup, cfg.steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: learning_rate_factor(s, cfg.steps, warmup))
    pos, log, overflowed = DataPosition(), [], 0  # overflowed: fp16 steps the scaler skipped
    generator.train()
    for step in range(1, cfg.steps + 1):
        ids, pos = next_batch(pos, cfg.seed, len(pairs), cfg.batch_size, units)
        with autocast(cfg.mixed_precision, device.type):
            loss, tokens = _step_loss(generator, tokenizer, [pairs[i] for i in ids], cfg)
        # answer_nll: summed over an answer's tokens, the unit of the RAG runs' loss, so the curves compare
        record = {"step": step, "loss": float(loss.detach()), "answer_nll": float(loss.detach()) * tokens / len(ids),
                  "lr": sched.get_last_lr()[0], "epoch": pos.epoch}
        # under fp16 the step adds loss_scale and skipped_inf
        record.update(backward_step(loss, opt, sched, scaler, generator.parameters(), cfg.max_grad_norm))
        overflowed += bool(record.get("skipped_inf"))
        opt.zero_grad(set_to_none=True)
        log.append(record)
        if not math.isfinite(record["loss"]) and not scaler.is_enabled():  # under fp16 the scaler skips such a step
            if step == 1:  # before any update: the starting weights overflow it, whatever the lr
                raise InputError(cfg.generator, f"the closed-book loss was {record['loss']} at step 1, before any "
                                 "update: the generator's weights overflow it (finite, but too large); give another "
                                 "generator (lewisrag pretrain writes one)")
            raise diverged(f"the closed-book loss became {record['loss']} at step {step}", cfg.lr)
        if on_progress:
            on_progress(step, cfg.steps, record)
    # fp16: skipped steps leave the weights as they were, finite, and the check below passes
    if scaler.is_enabled() and (why := all_overflowed(overflowed, cfg.steps, log[-1]["loss"])):
        raise diverged(why, cfg.lr, also=" or train with --mixed-precision bf16")
    if not finite(generator.parameters()):  # the last step's update, whatever the loss
        raise diverged(f"the closed-book generator's weights hold NaN or inf after step {cfg.steps}", cfg.lr)
    # whole or absent: a run that failed or was killed before this point leaves no folder that looks finished
    with staged_dir(out, KIND) as tmp:  # marked, with what it holds listed (outputs.check_part)
        write_json(tmp / "config.json", asdict(cfg))
        (tmp / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log), encoding="utf-8")
        generator.save_pretrained(tmp / "final", safe_serialization=True)
        tokenizer.save_pretrained(tmp / "final")
    return {"steps": cfg.steps, "final_loss": log[-1]["loss"], "n_train": len(pairs), "skipped_no_answer": skipped}


def _step_loss(generator, tokenizer, pairs, cfg: ClosedBookConfig):
    """(mean token NLL of the answers given only the questions, number of target tokens)."""
    gen = generator.config
    src = tokenizer([ex.question for ex, _ in pairs], padding=True, truncation=True,
                    max_length=cfg.max_source_length, return_tensors="pt").to(generator.device)
    labels = answer_labels([t for _, t in pairs], tokenizer, gen.decoder_start_token_id, gen.pad_token_id,
                           cfg.max_target_length).to(generator.device)  # (B, T)
    dec, targets = decoder_pair(labels, gen.pad_token_id)  # (B, T-1) each
    logits = generator(input_ids=src["input_ids"], attention_mask=src["attention_mask"],
                       decoder_input_ids=dec, use_cache=False).logits  # (B, T-1, V)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)
    return loss, int((targets != -100).sum())


def answer_closed_book(generator, tokenizer, questions: Sequence[str], batch_size: int = 16, max_length: int = 32,
                       max_source_length: int = 64, on_batch: Callable[[int], None] | None = None) -> list[str]:
    """Greedy answers from the question alone (no documents), special tokens stripped; on the generator's device.
    `max_length` counts the decoder start token, as `RagModel.generate`'s: an answer of the same length limit,
    and below 2 a ValueError as there (`rag_model.decoding.check_length`): the start token alone leaves no
    token to generate."""
    if max_length < 2:
        raise ValueError(f"max_length: {max_length} leaves no token to generate after the start token; must be at least 2")
    answers: list[str] = []
    was_training = generator.training
    generator.eval()
    try:
        with torch.no_grad():
            for i in range(0, len(questions), batch_size):
                chunk = list(questions[i : i + batch_size])
                enc = tokenizer(chunk, padding=True, truncation=True, max_length=max_source_length,
                                return_tensors="pt").to(generator.device)
                # max_length counts the decoder start token, as RAG's does (rag_model.decoding._max_length):
                # the same limit decodes the same number of tokens in both (at 1, none: refused above, as in RAG's)
                ids = generator.generate(**enc, max_new_tokens=max_length - 1, num_beams=1,
                                         do_sample=False)  # (B, T <= max_length)
                answers += [a.strip() for a in tokenizer.batch_decode(ids, skip_special_tokens=True)]
                if on_batch:
                    on_batch(len(chunk))
    finally:
        generator.train(was_training)
    return answers


def closed_book_label_log_probs(generator, tokenizer, claims: Sequence[str], batch_size: int = 16,
                                max_source_length: int = 64, on_batch: Callable[[int], None] | None = None) -> list[list[float]]:
    """log p(label | claim) of each FEVER label from the claim alone (`training.tasks.label_log_probs`)."""
    gen = generator.config

    def score(chunk: list[str], labels: torch.Tensor) -> torch.Tensor:
        src = tokenizer(chunk, padding=True, truncation=True, max_length=max_source_length,
                        return_tensors="pt").to(generator.device)
        dec, targets = decoder_pair(labels.to(generator.device), gen.pad_token_id)
        logits = generator(input_ids=src["input_ids"], attention_mask=src["attention_mask"], decoder_input_ids=dec,
                           use_cache=False).logits  # (B, T-1, V)
        nll = F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=-100, reduction="none")  # (B, T-1)
        return nll.sum(1)

    was_training = generator.training
    generator.eval()
    try:
        return label_log_probs(score, tokenizer, gen.decoder_start_token_id, claims, batch_size, on_batch)
    finally:
        generator.train(was_training)
