"""Pretraining a small BART generator that reads: `lewisrag pretrain`.

The paper fine-tunes a pretrained BART; a BART trained from nothing on the built-in world does not
learn to read on a CPU budget (docs/recipe.md). Three things make it read, and this module does
all three:

1. an init of std 1/sqrt(d_model) instead of BART's 0.02, so the encoder does not collapse to one
   output for every input;
2. BART's denoising objective (text infilling) on freshly generated passages about entities the
   world never uses (world.fresh_documents): there are too many to memorise, so the model learns to
   copy what it reads;
3. reading comprehension on fresh entities too (world.fresh_examples: `title / passage // question`
   -> answer), with the denoising objective kept alive in every step, so answering never turns into
   recalling memorised answers.

The result is a transformers BartForConditionalGeneration and a PreTrainedTokenizerFast saved with
save_pretrained, plus recipe.json (config, steps, minutes, learning curve, weights' sha256).
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import torch
from transformers import BartConfig, BartForConditionalGeneration

import lewisrag

from lewisrag.data import lang_zh, world
from lewisrag.data.io import InputError, write_json
from lewisrag.data.outputs import check_out_dir, staged_dir
from lewisrag.data.pretrained import WEIGHTS, file_sha256, load_generator
from lewisrag.data.records import Passage, QAExample
from lewisrag.data.threads import environment, resolve_device
from lewisrag.scoring.qa import exact_match
from lewisrag.training import pretrain_data as D
from lewisrag.training.configs import GENERATOR_KIND as KIND  # the marker kind of generator folders (lewisrag.data.outputs)
from lewisrag.training.configs import PretrainConfig
from lewisrag.training.optim import adamw, diverged, finite

SHIPPED_DIR = Path(__file__).resolve().parent.parent / "pretrained"  # package data: lewisrag/pretrained/<name>/


# ---------------------------------------------------------------------------------------------
# model, batches, schedule


def build_generator(cfg: PretrainConfig, vocab_size: int):
    """A BartForConditionalGeneration from config, with BART's special-token ids (0-4)."""
    std = cfg.init_std if cfg.init_std is not None else 1 / math.sqrt(cfg.d_model)
    config = BartConfig(
        vocab_size=vocab_size, d_model=cfg.d_model, encoder_layers=cfg.encoder_layers, decoder_layers=cfg.decoder_layers,
        encoder_attention_heads=cfg.heads, decoder_attention_heads=cfg.heads, encoder_ffn_dim=cfg.ffn_dim,
        decoder_ffn_dim=cfg.ffn_dim, max_position_embeddings=max(cfg.max_source_length, cfg.max_target_length),
        init_std=std, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        bos_token_id=0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None,
    )
    model = BartForConditionalGeneration(config)
    model.generation_config.update(decoder_start_token_id=2, bos_token_id=0, eos_token_id=2, pad_token_id=1,
                                   forced_bos_token_id=None, forced_eos_token_id=None, num_beams=1, do_sample=False,
                                   max_length=None, max_new_tokens=cfg.max_target_length)
    return model


def _labels(ids):
    """Padded target ids -> labels with -100 on padding (transformers shifts them into decoder inputs)."""
    labels = ids.clone()
    labels[labels == 1] = -100
    return labels


def qa_batch(pairs: Sequence[tuple[str, str]], tokenizer, cfg: PretrainConfig) -> dict:
    src = tokenizer([s for s, _ in pairs], padding=True, truncation=True, max_length=cfg.max_source_length, return_tensors="pt")
    tgt = tokenizer([t for _, t in pairs], padding=True, truncation=True, max_length=cfg.max_target_length, return_tensors="pt")
    return {"input_ids": src["input_ids"], "attention_mask": src["attention_mask"], "labels": _labels(tgt["input_ids"])}


def denoise_batch(docs: Sequence[Passage], tokenizer, cfg: PretrainConfig, rng: random.Random) -> dict:
    """Text infilling on `title / text` of each passage (the reading format without the question)."""
    texts = [f"{p.title} / {p.text}" for p in docs]
    ids = tokenizer(texts, truncation=True, max_length=min(cfg.max_source_length, cfg.max_target_length))["input_ids"]
    pairs = [D.denoise_pair(x, rng, cfg.mask_ratio, cfg.poisson_lambda, tokenizer.mask_token_id) for x in ids]
    width_in, width_out = max(len(a) for a, _ in pairs), max(len(b) for _, b in pairs)
    inp = torch.tensor([a + [1] * (width_in - len(a)) for a, _ in pairs])
    out = torch.tensor([b + [1] * (width_out - len(b)) for _, b in pairs])
    return {"input_ids": inp, "attention_mask": (inp != 1).long(), "labels": _labels(out)}


class FreshStream:
    """Endless fresh QA pairs and passages, from their own seeded generators."""

    def __init__(self, seed: int, long_form: bool = False, snapshot_b_share: float = 0.0, lang: str = "en"):
        self.world, self.long_form, self.b_share, self.lang = world, long_form, snapshot_b_share, lang
        self.qa_rng, self.doc_rng = random.Random(f"pretrain-qa:{seed}"), random.Random(f"pretrain-docs:{seed}")
        self.mask_rng = random.Random(f"pretrain-mask:{seed}")
        self.buffer: list[tuple[str, str]] = []

    def qa(self, n: int) -> list[tuple[str, str]]:
        while len(self.buffer) < n:
            examples, docs = self.world.fresh_examples(self.qa_rng, 256, self.lang)
            examples = [ex for ex in examples if self.long_form or ex.kind == "short"]
            pairs = D.reading_pairs(examples, docs)
            if self.b_share:
                n_b = round(len(pairs) * self.b_share / (1 - self.b_share))
                b_examples, b_docs = D.fresh_update_examples(self.qa_rng, n_b, self.lang)
                pairs += D.reading_pairs(b_examples, b_docs)
            self.qa_rng.shuffle(pairs)  # fresh_examples come entity by entity
            self.buffer += pairs
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def docs(self, n: int) -> list[Passage]:
        n_b = round(n * self.b_share)
        b = self.world.fresh_documents(self.doc_rng, n_b, snapshot=1, lang=self.lang) if n_b else []
        return self.world.fresh_documents(self.doc_rng, n - n_b, lang=self.lang) + b


def learning_rate(cfg: PretrainConfig, step: int, progress: float) -> float:
    """Linear warmup over warmup_steps, then cosine decay to lr * final_lr_ratio at progress 1.

    >>> c = PretrainConfig(steps=10, lr=1.0, warmup_steps=4, final_lr_ratio=0.0)
    >>> learning_rate(c, 1, 0.1), learning_rate(c, 5, 0.0), round(learning_rate(c, 9, 1.0), 6)
    (0.25, 1.0, 0.0)
    """
    if step < cfg.warmup_steps:
        return cfg.lr * step / cfg.warmup_steps
    cos = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return cfg.lr * (cfg.final_lr_ratio + (1 - cfg.final_lr_ratio) * cos)


# ---------------------------------------------------------------------------------------------
# evaluation


def evaluate_reading(generator, tokenizer, examples: Sequence[QAExample], passages: Sequence[Passage],
                     batch_size: int = 64, max_new_tokens: int = 24, lang: str = "en") -> dict:
    """Exact match of greedy answers read from each short example's gold passage (K=1), at most
    `max_new_tokens` of them, and no more than the generator has positions (a decoder of 16 ended the
    final evaluation in an IndexError once training was done).

    Returns {"em", "n", "by_attribute": {group: em}}; long-form examples are left out.
    """
    max_new_tokens = min(max_new_tokens, generator.config.max_position_embeddings)
    short = [ex for ex in examples if ex.kind == "short" and ex.answers]
    pairs = D.reading_pairs(short, passages)
    was_training = generator.training
    generator.eval()
    scores: list[float] = []
    with torch.no_grad():
        for i in range(0, len(pairs), batch_size):
            chunk = pairs[i:i + batch_size]
            enc = tokenizer([s for s, _ in chunk], padding=True, truncation=True, return_tensors="pt",
                            max_length=generator.config.max_position_embeddings).to(generator.device)
            gen = generator.generate(**enc, max_new_tokens=max_new_tokens, num_beams=1, do_sample=False)
            preds = tokenizer.batch_decode(gen, skip_special_tokens=True)
            scores += [exact_match(p.strip(), ex.answers) for p, ex in zip(preds, short[i:i + batch_size])]
    generator.train(was_training)
    groups: dict[str, list[float]] = {}
    for ex, s in zip(short, scores):
        groups.setdefault(D.ATTRIBUTE_GROUPS.get(D.attribute_of(ex.question, lang), "other"), []).append(s)
    return {"em": sum(scores) / max(1, len(scores)), "n": len(scores),
            "by_attribute": {g: sum(v) / len(v) for g, v in sorted(groups.items())}}


def _world_test(cfg: PretrainConfig) -> tuple[list[QAExample], tuple[Passage, ...]]:
    w = world.build_world(cfg.world_seed, cfg.world_entities, lang=cfg.lang)
    return [q for q in w.questions["test"] if q.kind == "short"], w.passages_a


# ---------------------------------------------------------------------------------------------
# the training loop


def _tokenizer_corpus(cfg: PretrainConfig) -> list[str]:
    """Fresh passages, questions and answers; for Chinese also every string of the language's tables,
    so each character a world can write (archive passages' words too) is one piece of the vocabulary.

    Long-form answers (reference statements) only where the model trains on them (`long_form`): they
    are the evaluator's wording, and rewording one statement template changed the vocabulary, and so
    the weights, of a generator that never read a long-form example (the shipped ones could not be
    rebuilt by their own command: tests/test_pretrain.py checks the shipped tokenizers against this)."""
    rng = random.Random(f"pretrain-tokenizer:{cfg.seed}")
    examples, docs = world.fresh_examples(rng, cfg.tokenizer_docs * 3, cfg.lang)  # about 3 questions per passage
    answers = [ex.answers[0] for ex in examples if cfg.long_form or ex.kind == "short"]
    tables = list(_strings(vars(lang_zh))) if cfg.lang == "zh" else []
    return [f"{p.title} / {p.text}" for p in docs] + [ex.question for ex in examples] + answers + tables


def _strings(value) -> Iterator[str]:
    """Every string inside `value` (a module's globals, a dict, tuple or list, nested), in order."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            if not str(k).startswith("__"):
                yield from _strings(k)
                yield from _strings(v)
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _strings(v)


def pretrain(cfg: PretrainConfig, out: str | os.PathLike, on_step: Callable | None = None, command: str | None = None,
             overwrite: bool = False) -> dict:
    """Train a tokenizer and a BART generator as described in the module docstring, save both and
    recipe.json to `out` (written to a temporary directory first, then renamed), return the recipe.

    `on_step(step, progress, loss, last_em)` is called after every optimizer step (progress in [0, 1]).
    `out` must be missing, empty or a generator lewisrag wrote, holding no file the user added since,
    unless `overwrite`.
    """
    out = check_out_dir(out, KIND, overwrite=overwrite, replaces=True)  # the new generator replaces it whole
    device = torch.device(resolve_device(cfg.device))
    torch.manual_seed(cfg.seed)
    tokenizer = D.train_generator_tokenizer(_tokenizer_corpus(cfg), cfg.vocab_size, cfg.lang)
    # the size built, which the BPE makes smaller than asked when its corpus has no more merges to learn
    # (recipe.json said 50000 for a model of 3262): config's vocab_size is the model's, as train dpr records it
    asked, cfg = cfg.vocab_size, replace(cfg, vocab_size=len(tokenizer))
    model = build_generator(cfg, cfg.vocab_size).to(device)  # initialized on the CPU: the same weights anywhere
    opt = adamw(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    stream, (test, test_passages) = FreshStream(cfg.seed, cfg.long_form, cfg.snapshot_b_share, cfg.lang), _world_test(cfg)
    curve, step, train_s, loss_ema = [], 0, 0.0, None
    model.train()
    while True:
        progress = step / cfg.steps if cfg.steps else train_s / (60 * cfg.minutes)
        if progress >= 1:
            break
        t0 = time.perf_counter()
        loss = _train_step(model, opt, tokenizer, stream, cfg, step, progress)
        if not math.isfinite(loss):  # full precision, no scaler: the weights are NaN from here on, and were saved, exit 0
            raise _diverged(cfg, f"the loss became {loss} at step {step + 1}") if step else _overflowed(cfg, loss)
        step, train_s = step + 1, train_s + time.perf_counter() - t0
        loss_ema = loss if loss_ema is None else 0.95 * loss_ema + 0.05 * loss
        if cfg.eval_every and train_s / 60 >= cfg.eval_every * (len(curve) + 1):  # 0: never (it was every step)
            curve.append(_curve_point(model, tokenizer, test[:cfg.eval_size], test_passages, step, train_s, loss_ema, cfg.lang))
        if on_step is not None:
            on_step(step, min(1.0, progress + 1 / cfg.steps if cfg.steps else train_s / (60 * cfg.minutes)),
                    loss_ema, curve[-1]["em"] if curve else None)
    if not finite(model.parameters()):  # the last step's update, whatever the loss
        raise _diverged(cfg, f"the weights hold NaN or inf after step {step}")
    final = evaluate_reading(model, tokenizer, test, test_passages, lang=cfg.lang)
    recipe = {"config": asdict(cfg), "vocab_size_asked": asked, "command": command, "steps": step,
              "minutes": round(train_s / 60, 2), "final_loss": loss_ema, "final": final, "curve": curve,
              "parameters": sum(p.numel() for p in model.parameters()), "built_with": built_with(device)}
    return _save(model, tokenizer, recipe, Path(out), cfg.save_fp16)


def built_with(device: torch.device) -> dict:
    """Where and with what a generator trained, for its recipe.json: `data.threads.environment` (CPU
    model, torch's thread count, the library multiplying float32 linear layers on the CPU, versions,
    the device and GPU; config's "device" may say "auto") and lewisrag's version. The same seed and
    steps give the same weights only where these match: `LEWISRAG_CPU_LINEAR=blas` and `onednn` built
    different weights that the device, threads and versions recorded alone did not tell apart."""
    return {**environment(str(device)), "lewisrag": lewisrag.__version__}


def _diverged(cfg: PretrainConfig, what: str) -> InputError:
    """`--set lr`'s line when pretraining diverges (recipe.json held a bare NaN, the weights NaN, exit 0)."""
    return diverged(what, cfg.lr, "--set", "lr", f" or lengthen warmup_steps (now {cfg.warmup_steps})")


def _overflowed(cfg: PretrainConfig, loss: float) -> InputError:
    """The line when the first step's loss is NaN or inf: no update has run yet, so the lr is not the
    cause (it was blamed: init_std=1e30 said "lower lr"), but the starting weights, or the weight the
    denoising loss is multiplied by where it is above 1 (a finite loss times 1e308 is inf)."""
    std = f"{cfg.init_std:g}" if cfg.init_std is not None else f"unset: 1/sqrt(d_model) = {1 / math.sqrt(cfg.d_model):.3g}"
    what = f"the loss was {loss} at step 1, before any update, so not because of lr"
    if cfg.denoise_batch_size and cfg.denoise_weight > 1:
        return InputError("--set", f"{what}: the starting weights or the loss weights overflow it; lower init_std "
                          f"(now {std}) or denoise_weight (now {cfg.denoise_weight:g})")
    return InputError("--set", f"{what}: the starting weights overflow it; lower init_std (now {std})", field="init_std")


def _train_step(model, opt, tokenizer, stream: FreshStream, cfg: PretrainConfig, step: int, progress: float) -> float:
    for group in opt.param_groups:
        group["lr"] = learning_rate(cfg, step, progress)
    loss = 0.0
    if progress >= cfg.qa_start and cfg.qa_batch_size:
        loss = model(**on_device(qa_batch(stream.qa(cfg.qa_batch_size), tokenizer, cfg), model.device)).loss
    if cfg.denoise_batch_size and cfg.denoise_weight:
        batch = denoise_batch(stream.docs(cfg.denoise_batch_size), tokenizer, cfg, stream.mask_rng)
        loss = loss + cfg.denoise_weight * model(**on_device(batch, model.device)).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()

    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return float(loss.detach())


def _curve_point(model, tokenizer, test, passages, step: int, train_s: float, loss: float, lang: str) -> dict:
    r = evaluate_reading(model, tokenizer, test, passages, lang=lang)
    return {"minutes": round(train_s / 60, 2), "step": step, "loss": round(loss, 4), "em": r["em"], "n": r["n"],
            "by_attribute": r["by_attribute"]}


def _save(model, tokenizer, recipe: dict, out: Path, fp16: bool) -> dict:
    """Write generator, tokenizer and recipe.json into a sibling temp dir, then swap it into `out`."""
    with staged_dir(out, KIND) as tmp:
        return _save_into(model, tokenizer, recipe, tmp, fp16)


def on_device(batch: dict, device: torch.device) -> dict:
    """A batch's tensors on `device` (a no-op on the CPU)."""
    return {k: v.to(device) for k, v in batch.items()}


def _save_into(model, tokenizer, recipe: dict, tmp: Path, fp16: bool) -> dict:
    model.cpu()  # saved from the CPU, wherever it trained
    to_save = model.to(torch.float16) if fp16 else model
    if not finite(to_save.parameters()):  # finite in fp32, past fp16's 65504 on disk: inf weights, exit 0
        model.to(torch.float32)
        raise InputError("--set", "a weight is past float16's range (65504) and would be saved as inf; keep the weights in float32 (--set save_fp16=false), or lower "
                         "init_std or lr", field="save_fp16")
    to_save.save_pretrained(tmp, safe_serialization=True)
    model.to(torch.float32)
    if fp16:  # loading reads the config's dtype: fp16 on disk, fp32 in memory
        cfg_path = tmp / "config.json"
        conf = json.loads(cfg_path.read_text())
        conf["dtype"] = "float32"
        cfg_path.write_text(json.dumps(conf, indent=2, sort_keys=True) + "\n")
    tokenizer.save_pretrained(tmp)
    # every file loading reads, so that a tokenizer or config swapped in from another generator is
    # refused as damaged weights are (`check_recipe`): a smaller tokenizer read the weights at EM 0.0
    files = {p.name: file_sha256(p) for p in sorted(tmp.iterdir()) if p.is_file() and p.name != WEIGHTS
             and not p.name.startswith(".")}
    recipe = {**recipe, "weights_sha256": file_sha256(tmp / WEIGHTS), "weights_bytes": (tmp / WEIGHTS).stat().st_size,
              "files_sha256": files}
    write_json(tmp / "recipe.json", recipe)
    return recipe


# ---------------------------------------------------------------------------------------------
# loading


def load_shipped_generator(name: str = "generator-small"):
    """The generator shipped with the package (lewisrag/pretrained/<name>), sha256-verified."""
    return load_generator(SHIPPED_DIR / name, require_recipe=True)
