"""Fine-tune a seq2seq generator for prompt-stitching RAG: many passages in one input, answers cite [n].

The Lewis model learns to read one passage at a time; a stitched generator must learn two other
things: to find the passage that answers among k stitched ones, and to say which one it was. So
each training input is the question and its top-k passages from the dense index (the gold passage
guaranteed among them, at a position drawn anew every time the example is used, so no position
is favoured), and its target is the answer followed by the gold passage's number: "Tomgasze [3]",
or with `cite_first` the number first: "[3] Tomgasze" (the reader names its passage, then copies
from it; on the world that cut copy errors, docs/recipe.md "Prompt stitching at this size").

It starts from the same checkpoint as the Lewis models (a BART directory from `pretrain`), so the
comparison holds the generator's prior knowledge fixed. The loop is written out: AdamW, linear
warmup and decay, seeded batches and positions; it runs on `device` (a GPU when one is visible) with
`mixed_precision` bf16 or fp16 (a gradient scaler) as the RAG runs do, and on the CPU in full
precision as the plain loop.

Output directory: the transformers model and tokenizer (`save_pretrained`), and `stitched.json`
with this config and the stitching settings, so the system can be rebuilt from the folder alone.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import torch
from transformers.models.bart.modeling_bart import BartLearnedPositionalEmbedding

from lewisrag.data.io import InputError, expect, is_count, read_json, write_json
from lewisrag.data.outputs import check_out_dir, staged_dir
from lewisrag.data.pretrained import load_generator
from lewisrag.data.records import check_gold_ids, of_kinds, read_qa, refuse_regex_targets
from lewisrag.index import open_retriever
from lewisrag.index.store import check_depth, read_manifest
from lewisrag.rag_model.stitched import StitchSettings, stitch
from lewisrag.training.configs import STITCHED_KIND as KIND  # the marker kind of its output folders (lewisrag.data.outputs)
from lewisrag.training.configs import StitchedTrainConfig, check_stitched
from lewisrag.training.devices import autocast, single_device
from lewisrag.training.optim import (adamw, all_overflowed, backward_step, diverged, finite, learning_rate_factor,
                                     warmup_steps)
from lewisrag.training.rag_data import refuse_fever_claims

SETTINGS_FILE = "stitched.json"


def keep_rank(retrieved: Sequence, gold, k: int, gold_ids: Collection[str] = ()) -> tuple[list, int]:
    """The top-k passages as retrieved, `gold` replacing the last if no gold one was retrieved; returns
    (passages, position of the first gold one). `gold_ids`: every gold passage's id (a question with
    several, as DPR's positive_ctxs), `gold`'s alone when empty.

    >>> keep_rank(["a", "g", "c"], "g", 3), keep_rank(["a", "b", "c"], "g", 3), keep_rank(["h", "g"], "g", 2, {"g", "h"})
    ((['a', 'g', 'c'], 2), (['a', 'b', 'g'], 3), (['h', 'g'], 1))
    """
    ids = set(gold_ids) or {_id(gold)}
    top = list(retrieved[:k])
    for i, p in enumerate(top):
        if _id(p) in ids:  # the first gold passage the retriever ranked: the one cited
            return top, i + 1
    top = top[: k - 1] + [gold]
    return top, len(top)


def place_gold(retrieved: Sequence, gold, k: int, rng: random.Random, gold_ids: Collection[str] = ()) -> tuple[list, int]:
    """The top-k passages with `gold` among them at a random 1-based position; returns (passages, position).
    The others are retrieved passages that are not gold (`gold_ids`, as `keep_rank`'s): a second gold
    passage among them would answer too, uncited.

    >>> place_gold(["a", "b", "c"], "g", 3, random.Random(0)), place_gold(["h", "b", "c"], "g", 3, random.Random(0), {"g", "h"})
    ((['a', 'g', 'b'], 2), (['b', 'g', 'c'], 2))
    """
    ids = set(gold_ids) or {_id(gold)}
    others = [p for p in retrieved if _id(p) not in ids][: k - 1]
    position = rng.randint(1, len(others) + 1)
    return others[: position - 1] + [gold] + others[position - 1 :], position


def extend_positions(model, length: int) -> bool:
    """Let a BART read `length` positions by repeating its learned position table (the initialization
    Longformer used, Beltagy et al. 2020); True if it grew. A generator pretrained on one passage
    (~192 positions) would otherwise see only the first passage or two of a stitched input. The
    rows it already had are kept, so inputs that fitted before are read exactly as before.
    """
    if getattr(model.config, "model_type", "") != "bart":  # a T5's config has no max_position_embeddings
        return False
    old = model.config.max_position_embeddings
    if length <= old:
        return False
    for part in (model.model.encoder, model.model.decoder):  # one config size serves both on reload
        w = part.embed_positions.weight.data  # (2 + old, D); BART's first 2 rows are an offset
        grown = BartLearnedPositionalEmbedding(length, w.shape[1]).to(w.dtype)
        grown.weight.data[:2] = w[:2]
        grown.weight.data[2:] = w[2:].repeat(math.ceil(length / old), 1)[:length]  # (length, D)
        part.embed_positions = grown
    model.config.max_position_embeddings = length
    return True


def _id(p) -> str:
    return p if isinstance(p, str) else p.id


def cited_target(answer: str, position: int, first: bool = False) -> str:
    """The training target: the answer, then the gold passage's number as a citation (or, `first`,
    the citation, then the answer).

    >>> cited_target("Tomgasze", 3), cited_target("Tomgasze", 3, first=True)
    ('Tomgasze [3]', '[3] Tomgasze')
    """
    return f"[{position}] {answer}" if first else f"{answer} [{position}]"


@dataclass(frozen=True)
class _Example:
    question: str
    answer: str
    gold: object  # the (first) gold Passage
    retrieved: list  # the top-k retrieved passages (gold may be missing)
    gold_ids: frozenset = frozenset()  # every gold passage's id (empty: `gold`'s alone)


def training_examples(examples, retriever, passages_by_id: dict, k: int, batch_size: int = 64,
                      source: str | os.PathLike = "--train") -> list[_Example]:
    """Examples with an answer and a gold passage, each with its top-k retrieved passages (retrieved once)."""
    usable = [ex for ex in examples if ex.answers and ex.gold_passage_ids]
    if not usable:  # `source`: the file, so that the one line names what to fix
        raise InputError(source, "no example has both an answer and a gold passage id (gold_passage_ids): "
                         "train stitched needs both", field="--train")
    out = []
    for s in range(0, len(usable), batch_size):
        batch = usable[s : s + batch_size]
        for ex, hits in zip(batch, retriever.search([ex.question for ex in batch], k)):
            # every gold id is in the index: `data.records.check_gold_ids` refused the file otherwise
            out.append(_Example(ex.question, ex.answers[0], passages_by_id[ex.gold_passage_ids[0]], list(hits),
                                frozenset(ex.gold_passage_ids)))
    return out


def make_batch(items: Sequence[_Example], k: int, settings: StitchSettings, rng: random.Random,
               mixed_k: bool = False, gold_position: str = "random", cite_first: bool = False) -> tuple[list[str], list[str]]:
    """(stitched inputs, cited targets) for `items`, the gold passage at a fresh random position each
    (or, with `gold_position="retrieved"`, at its retrieval rank); with `mixed_k`, each input holds a
    random number of passages from 1 to k; with `cite_first`, targets cite before they answer."""
    inputs, targets = [], []
    for ex in items:
        n = rng.randint(1, k) if mixed_k else k
        if gold_position == "retrieved":
            passages, position = keep_rank(ex.retrieved, ex.gold, n, ex.gold_ids)
        else:
            passages, position = place_gold(ex.retrieved, ex.gold, n, rng, ex.gold_ids)
        inputs.append(stitch(ex.question, passages, settings))
        targets.append(cited_target(ex.answer, position, cite_first))
    return inputs, targets


def train_stitched(cfg: StitchedTrainConfig, out: str | os.PathLike,
                   on_progress: Callable[[int, int, float], None] | None = None, overwrite: bool = False,
                   check_lengths: bool = False) -> dict:
    """Fine-tune the generator on stitched inputs; `on_progress(step, steps, loss)`. Returns a summary.

    `out` must be missing, empty or a stitched generator lewisrag wrote, unless `overwrite`; it is
    replaced only when training has finished. `check_lengths` (`train stitched`): refuse inputs longer
    than the generator reads and targets longer than max_target_length (`check_input_lengths`); the
    reproduce stage keeps its input cut at k x max_combined_length, as the Lewis models cut each
    passage, so its results stay as they were, and raises max_target_length to its longest cited answer
    (`longest_target`): a target cut there lost its citation (the tiny preset trains long-form answers),
    which the reader then learned to leave out. Short answers (the small preset's) fit: nothing changes."""
    check_stitched(cfg)
    device, scaler = single_device(cfg.device, cfg.mixed_precision)
    inputs = {"--index": cfg.index, "--generator": cfg.generator, "--train": cfg.train,
              "--encoder": cfg.encoder or None, "--context-encoder": cfg.context_encoder or None}
    check_out_dir(out, KIND, overwrite=overwrite, inputs=inputs, replaces=True)
    if (cfg.encoder or cfg.context_encoder) and read_manifest(cfg.index)["kind"] == "bm25":  # not ignored in silence
        raise InputError("--encoder" if cfg.encoder else "--context-encoder",
                         f"encodes questions for dense indexes; {cfg.index} is BM25")
    retriever = open_retriever(cfg.index, cfg.encoder or None, context_encoder=cfg.context_encoder or None,
                               flags=("--context-encoder",))  # `train stitched` has no --swap
    check_depth(cfg.k, len(retriever.index.passages))
    read = read_qa(cfg.train, cfg.qa_fields)
    refuse_regex_targets(read, cfg.train, cfg.qa_fields)
    refuse_fever_claims(read, cfg.train, cfg.qa_fields, "train stitched trains as free-text answers (every NOT ENOUGH "
                        "INFO claim left out, as it has no gold passage): train them with `lewisrag train rag --task fever`")
    kept = of_kinds(read, cfg.train_kinds)
    trained = {id(ex) for ex in kept if ex.answers}  # the questions training reads gold passages of
    check_gold_ids(read, retriever.index.passages, cfg.train, f"the index {cfg.index}", cfg.qa_fields,
                   used=lambda ex: id(ex) in trained)
    examples = training_examples(kept, retriever, {p.id: p for p in retriever.index.passages}, cfg.k, source=cfg.train)
    if cfg.batch_size > len(examples):  # else every step trained on all of them, a smaller batch than asked
        raise InputError("--batch-size", f"{cfg.batch_size} exceeds the {len(examples)} training examples with an "
                         f"answer and a gold passage id in {cfg.train}" + (f" of kinds {cfg.train_kinds}" if cfg.train_kinds else ""))
    model, tokenizer = load_generator(cfg.generator, any_seq2seq=True)  # decodes with `generate`: a T5 too
    grown = extend_positions(model, cfg.max_input_length)
    if cfg.max_target_length is None:  # every target whole (`train stitched`'s default), recorded in stitched.json
        cfg = replace(cfg, max_target_length=longest_target(examples, tokenizer, cfg))
    elif not check_lengths:  # the reproduce stage: every target whole too, never shorter than its preset's length
        cfg = replace(cfg, max_target_length=max(cfg.max_target_length, longest_target(examples, tokenizer, cfg)))
    if check_lengths:
        check_input_lengths(examples, tokenizer, cfg, _input_limit(model, cfg))
    model.to(device)
    settings = StitchSettings(k=cfg.k, question_last=cfg.question_last)
    torch.manual_seed(cfg.seed)  # dropout
    rng = random.Random(cfg.seed)
    opt = adamw(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    warmup = warmup_steps(cfg.warmup, cfg.steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: learning_rate_factor(s, cfg.steps, warmup))
    model.train()
    encode = _Encoder(tokenizer, _input_limit(model, cfg), cfg.max_target_length,
                      cache=cfg.gold_position == "retrieved" and not cfg.mixed_k)
    losses, skipped = [], 0  # skipped: fp16 steps whose gradients overflowed (the scaler left the weights alone)
    for step in range(1, cfg.steps + 1):
        batch = rng.sample(examples, cfg.batch_size)
        inputs, targets = make_batch(batch, cfg.k, settings, rng, cfg.mixed_k, cfg.gold_position, cfg.cite_first)
        with autocast(cfg.mixed_precision, device.type):
            loss = _loss(model, *encode(inputs, targets))
        skipped += bool(backward_step(loss, opt, sched, scaler, model.parameters(), cfg.max_grad_norm).get("skipped_inf"))
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        if not math.isfinite(losses[-1]) and not scaler.is_enabled():  # under fp16 the scaler skips such a step
            raise diverged(f"the loss became {losses[-1]} at step {step}", cfg.lr)
        if on_progress:
            on_progress(step, cfg.steps, losses[-1])
    # fp16: skipped steps leave the weights as they were, finite, and the check below passes
    if scaler.is_enabled() and (why := all_overflowed(skipped, cfg.steps, losses[-1])):
        raise diverged(why, cfg.lr, also=" or train with --mixed-precision bf16")
    if not finite(model.parameters()):  # the last step's update, whatever the loss
        raise diverged(f"the generator's weights hold NaN or inf after step {cfg.steps}", cfg.lr)
    model.cpu().eval()  # saved from the CPU
    with staged_dir(out, KIND) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_json(tmp / SETTINGS_FILE, {"config": asdict(cfg), "settings": asdict(settings)})
    return {"steps": cfg.steps, "n_train": len(examples), "n_left_out": len(kept) - len(examples), "positions_extended": grown, "first_loss": losses[0], "final_loss": losses[-1], "out": str(out)}


def _input_limit(model, cfg: StitchedTrainConfig) -> int:
    """The stitched input tokens the generator reads: max_input_length, or fewer where its learned
    positions end (a T5 has relative positions and no such limit: no max_position_embeddings)."""
    positions = getattr(model.config, "max_position_embeddings", None)
    return min(cfg.max_input_length, positions) if isinstance(positions, int) else cfg.max_input_length


def check_input_lengths(examples: Sequence[_Example], tokenizer, cfg: StitchedTrainConfig, limit: int) -> None:
    """Refuse examples whose k stitched passages and question do not fit in `limit` tokens: truncation
    cut the later passages (the gold one, at the draws that put it there), or with `question_last` the
    question, and the reader learned to cite a passage, or answer a question, it was never shown. Refuse
    too a cited answer longer than `max_target_length`: its cut dropped the citation (or, with
    `cite_first`, the answer's end), which the reader then learned to leave out."""
    settings = StitchSettings(k=cfg.k, question_last=cfg.question_last)
    for s in range(0, len(examples), 256):
        chunk = examples[s : s + 256]
        # the k passages make_batch stitches at most (fewer with mixed_k: a subset of these); at a random
        # position, the gold passage and the k-1 non-gold others, whose order barely changes the count;
        # at its retrieval rank, the top k as retrieved, other gold passages included
        texts = [stitch(ex.question, _most_passages(ex, cfg), settings) for ex in chunk]
        for ex, ids in zip(chunk, tokenizer(texts, truncation=False)["input_ids"]):
            if len(ids) > limit:
                cut = "the question (--question-last)" if cfg.question_last else "the passages stitched last"
                raise InputError(cfg.train, f"question {ex.question!r}: its {cfg.k} stitched passages and question are "
                                 f"{len(ids)} tokens, more than the {limit} the generator reads: truncation would cut "
                                 f"{cut}, and the target answers and cites what the input no longer shows; lower "
                                 "--n-docs", field="--n-docs")
        for ex, ids in zip(chunk, _targets(chunk, tokenizer, cfg)):
            if len(ids) > cfg.max_target_length:
                cut = "the answer's end (--cite-first)" if cfg.cite_first else "its citation"
                raise InputError(cfg.train, f"question {ex.question!r}: its cited answer is {len(ids)} tokens, more than "
                                 f"--max-target-length {cfg.max_target_length}: the cut would drop {cut}; raise "
                                 "--max-target-length (or --train-kinds short)", field="--max-target-length")


def _most_passages(ex: _Example, cfg: StitchedTrainConfig) -> list:
    """The passages `make_batch` stitches for `ex` with all k drawn (their order aside)."""
    if cfg.gold_position == "retrieved":
        return keep_rank(ex.retrieved, ex.gold, cfg.k, ex.gold_ids)[0]
    return place_gold(ex.retrieved, ex.gold, cfg.k, random.Random(0), ex.gold_ids)[0]


def _targets(chunk: Sequence[_Example], tokenizer, cfg: StitchedTrainConfig) -> list[list[int]]:
    """The token ids of each example's longest target, its answer cited as [k], as `_Encoder` reads them."""
    return tokenizer([cited_target(ex.answer, cfg.k, cfg.cite_first) for ex in chunk], truncation=False)["input_ids"]


def longest_target(examples: Sequence[_Example], tokenizer, cfg: StitchedTrainConfig) -> int:
    """The tokens of the longest cited answer among `examples` (a batch pads to its own longest)."""
    return max(len(ids) for s in range(0, len(examples), 256) for ids in _targets(examples[s : s + 256], tokenizer, cfg))


class _Encoder:
    """Token ids of a batch's stitched inputs (cut at `input_limit`: later passages are cut, not crashed
    on; `check_lengths` refuses them) and of its targets (cut at `max_target_length`), padded to the
    batch's longest, padding out of the labels (-100).

    With `cache`, each text is tokenized once: at the gold passage's retrieval rank and with all k
    passages (the reproduce stage's setting) an example stitches the same text every time it is drawn,
    so tokenizing it anew each step repeats work (about 4 ms of a 94 ms step of the demo's reader on 2 cores).
    Tokenizing a text alone gives the ids it gets in a batch (a fast tokenizer encodes each sequence on
    its own), so the batches are the same to the token. Without `cache` (a gold passage at random
    positions, or `mixed_k`) texts rarely repeat and are tokenized as they come."""

    def __init__(self, tokenizer, input_limit: int, max_target_length: int, cache: bool = False):
        self.tokenizer, self.limits = tokenizer, (input_limit, max_target_length)
        self.cache: dict[tuple[int, str], list[int]] | None = {} if cache else None

    def __call__(self, inputs: list[str], targets: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        enc = self._padded(inputs, 0)
        labels = self._padded(targets, 1)["input_ids"]
        labels = labels.masked_fill(labels == self.tokenizer.pad_token_id, -100)  # (B, T); padding is not a target
        return enc["input_ids"], enc["attention_mask"], labels

    def _padded(self, texts: list[str], which: int):
        limit = self.limits[which]
        if self.cache is None:
            return self.tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=limit)
        ids = []
        for text in texts:
            if (which, text) not in self.cache:
                self.cache[which, text] = self.tokenizer(text, truncation=True, max_length=limit)["input_ids"]
            ids.append(self.cache[which, text])
        return self.tokenizer.pad({"input_ids": ids}, return_tensors="pt")


def _loss(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor):
    """Mean token NLL of the cited targets (`_Encoder`'s tensors); BART shifts the labels right itself."""
    dev = model.device
    return model(input_ids=input_ids.to(dev), attention_mask=attention_mask.to(dev), labels=labels.to(dev)).loss


def load_stitched(path: str | os.PathLike, device: str = "cpu"):
    """(generator in eval mode on `device`, tokenizer, StitchSettings) from a `train_stitched` output directory."""
    p = Path(path)
    settings = read_settings(p)  # before the model: a damaged file is one line, not a load and a traceback
    model, tokenizer = load_generator(p, device=device, any_seq2seq=True)
    return model.eval(), tokenizer, settings


def read_settings(path: str | os.PathLike) -> StitchSettings:
    """The StitchSettings in DIR/stitched.json, read back field by field: a hand-edited or damaged file
    is an InputError naming the field, not a traceback when the first question is stitched. A setting
    the file lacks takes its default (older folders); one StitchSettings does not have is refused."""
    p = Path(path)
    file = p / SETTINGS_FILE
    if not file.is_file():
        raise InputError(p, f"not a stitched generator directory (no {SETTINGS_FILE})")
    meta = read_json(file)
    expect(isinstance(meta, dict), file, "(top level)", "a JSON object", type(meta).__name__)
    if "settings" not in meta:
        raise InputError(file, "missing", field="settings")
    raw = meta["settings"]
    expect(isinstance(raw, dict), file, "settings", "an object", raw)
    known = {f.name: f.default for f in fields(StitchSettings)}
    for name, value in raw.items():
        field = f"settings.{name}"
        if name not in known:  # StitchSettings(**raw) would refuse it in a traceback
            raise InputError(file, f"unknown setting (one of {', '.join(known)})", field=field)
        default = known[name]
        if isinstance(default, bool):
            expect(isinstance(value, bool), file, field, "true or false", value)
        elif isinstance(default, int):  # k: passages stitched into one input
            expect(is_count(value) and value >= 1, file, field, "a whole number >= 1", value)
        else:
            expect(isinstance(value, str), file, field, "a string", value)
    return StitchSettings(**raw)
