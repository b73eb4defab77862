"""RAG fine-tuning (Lewis et al. 2020, §2.4): the question encoder and BART trained jointly on
(question, answer) pairs, the documents a latent variable retrieved from a fixed FAISS index.

`train_rag(cfg, out)` is an explicit loop run through accelerate: AdamW with linear warmup and
decay, gradient accumulation, optional bf16 or fp16 autocast of the forward passes, dev exact match
at intervals with the best model kept, a JSONL log that also watches for retrieval collapse, and
checkpoints that resume to the same weights and the same log as a run that was never interrupted.

fp16 (GPU only) goes with a gradient scaler: the loss is multiplied by a scale before backward, the
gradients are divided by it again before clipping, and a step whose gradients hold inf or NaN is
skipped (the weights stay, the scale halves; it still counts as a step of the schedule). Its log
lines carry `loss_scale` and `skipped_inf`, and the scaler's state is part of the checkpoint; a run
whose every step was skipped, or whose last loss is not finite, stops as diverged at its last step,
as the closed-book and stitched runs do (skipped steps leave finite weights, which pass the NaN checks). With
bf16 or full precision there is no scaler. `gradient_checkpointing` recomputes the activations of
BART, of the question encoder (unless frozen) and of a trained context encoder in the backward
pass instead of storing them: less memory for one more forward pass per step, the same loss and
gradients.

Several processes (`accelerate launch --multi_gpu --num_processes N`, CPU or GPU) split each
global batch evenly; each opens the index memory-mapped, so the OS keeps one copy of its vectors
(with `shared_retrieval`, only each node's first process reads the FAISS index and searches for
the node's processes: `lewisrag.index.shared`),
and gradients are averaged across processes by hand (the retrieval step runs outside a module's
`forward`, where DistributedDataParallel would hook in), which makes an N-process step equal a
1-process step on the same global batch. For the same reason gradient accumulation is written
out (micro-batch gradients summed, then one optimizer step) instead of accelerate's `accumulate`,
which expects a DDP-wrapped model.

With `train_context_encoder` the RAG loss trains DPR's context encoder too, the index re-encoded
every `reindex_every` steps (`training.end2end`, which says how and why).

The run folder's records and the checks of a `--resume` are `training.rag_run`'s; the device, precision,
compile and seeding helpers `training.devices`'; AdamW and its schedule `training.optim`'s.

Output directory:

    config.json   this config, the sha256 of its --train and --dev files' content (`data_sha256`), the
                  index manifest's content_hash and n_passages (`index_passages`); with `root`, the
                  folder the run and its inputs move with (`run_root`)
    log.jsonl     one line per optimizer step
    checkpoint/   resumable state (its state.json records the same `data_sha256`, `index_passages` and
                  `run_root`)
    best/         best dev EM model    final/   last model
"""

from __future__ import annotations

import glob
import hashlib
import json
import math
import os
import shutil
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from accelerate.utils import broadcast_object_list, gather_object

from lewisrag.data.io import InputError, LewisragWarning, read_json
from lewisrag.data.outputs import check_inputs_outside, check_out_dir, is_ours, physical, replace_dir
from lewisrag.data.records import QAExample
from lewisrag.index.shared import NodeSearch
from lewisrag.rag_model.answering import answer_questions
from lewisrag.rag_model.model import max_positions
from lewisrag.scoring.qa import answer_exact_match
from lewisrag.scoring.qbleu import q_bleu1
from lewisrag.scoring.retrieval import hit_rate
from lewisrag.training import checkpoint as C
from lewisrag.training import end2end as E
from lewisrag.training.configs import RagTrainConfig
from lewisrag.training.configs import RAG_KIND as KIND  # the marker kind of training run folders (lewisrag.data.outputs)
from lewisrag.training.devices import (_accelerator, _check_precision, _checkpoint_activations, _seed_everything, autocast,
                                       compile_models)
from lewisrag.training.optim import (adamw, all_overflowed, diverged, finite, learning_rate_factor, optimizer_step,
                                     warmup_steps)
from lewisrag.training.rag_data import DataPosition, answer_labels, doc_entropy, load_components, next_batch, place_search, shard
from lewisrag.training.rag_run import (DATA_KEY, INDEX_ENCODER_KEY, INDEX_KEY, RESUMABLE_CHANGES, ROOT_KEY, _check_out,
                                       _forget_unsaved, _held, _prepare_out, _record, _recorded, _run_config,
                                       data_fingerprints, index_fingerprint)
from lewisrag.training.tasks import DEV_METRIC, fever_accuracy, rag_label_log_probs


def combined_length_note(cfg: RagTrainConfig) -> str | None:
    """A one-line note when `cfg.max_combined_length` exceeds the generator's positions, else None.

    The run then trains and saves with the generator's `max_position_embeddings` instead
    (`rag_model.model.fit_to_generator`, the rule of every RagModel): the setting is a truncation
    length, and past the last position embedding it can only crash. Capping, rather than refusing,
    keeps one rule for every model (one saved with a larger value loads and answers, capped), and
    keeps the default 300 working with generators of fewer positions. The run's config keeps the
    value asked for (a `--resume` compares it); the saved models' rag.json holds the capped one.
    Read from the generator's config.json alone, before anything loads; a folder that cannot be
    read gives None here and its error when the run loads it.
    """
    try:
        config = read_json(Path(cfg.generator) / "config.json")
    except (InputError, OSError):
        return None
    limit = max_positions(config) if isinstance(config, dict) else None
    if limit is None or cfg.max_combined_length <= limit:
        return None
    return (f"note: --max-combined-length {cfg.max_combined_length} exceeds the generator's {limit} positions "
            f"(max_position_embeddings); generator inputs are cut at {limit} tokens")


# --- evaluation ------------------------------------------------------------------------------------


def dev_exact_match(model, tokenizers, index, dev: Sequence[QAExample], cfg: RagTrainConfig) -> float:
    """Exact match on the first `cfg.eval_questions` short-answer dev questions that have answers
    (a regex-answered one's by `regex_match`: `scoring.qa.answer_exact_match`)."""
    scored = [ex for ex in dev if ex.kind == "short" and ex.answers][: cfg.eval_questions]
    if not scored:
        return float("nan")
    preds = answer_questions(model, tokenizers, index, [ex.question for ex in scored], num_beams=cfg.eval_beams,
                             max_length=cfg.max_target_length, batch_size=cfg.eval_batch_size, swap=cfg.swap)
    return sum(answer_exact_match(p, ex) for p, ex in zip(preds, scored)) / len(scored)


def dev_score(model, tokenizers, index, dev: Sequence[QAExample], cfg: RagTrainConfig) -> float:
    """The task's dev score (`training.tasks.DEV_METRIC`) on the first `cfg.eval_questions` dev examples:
    exact match (QA), mean Q-BLEU-1 of greedy clues (Jeopardy), 3-way label accuracy (FEVER)."""
    if cfg.task == "qa":
        return dev_exact_match(model, tokenizers, index, dev, cfg)
    scored = [ex for ex in dev if ex.answers][: cfg.eval_questions]
    if not scored:
        return float("nan")
    questions = [ex.question for ex in scored]
    if cfg.task == "fever":
        scores = rag_label_log_probs(model, tokenizers, index, questions, batch_size=cfg.eval_batch_size, swap=cfg.swap)
        return fever_accuracy(scores, [ex.answers[0] for ex in scored])["acc3"]
    preds = answer_questions(model, tokenizers, index, questions, num_beams=cfg.eval_beams,
                             max_length=cfg.max_target_length, batch_size=cfg.eval_batch_size, swap=cfg.swap)
    return sum(q_bleu1(p, ex.answers) for p, ex in zip(preds, scored)) / len(scored)


# --- the loop --------------------------------------------------------------------------------------


def train_rag(cfg: RagTrainConfig, out: str | os.PathLike, resume: bool = False,
              on_progress: Callable[[int, int, dict], None] | None = None, overwrite: bool = False,
              root: str | os.PathLike | None = None) -> dict:
    """Fine-tune a RAG model; returns a summary. `on_progress(step, steps, log_record)` (main process).

    `out` must be missing or empty, or (with `resume`) a run of this kind; a run begun there that is
    refused or diverges before it saved a checkpoint leaves it as it was (`rag_run._forget_unsaved`).
    With `overwrite`, a non-empty `out` is replaced by the new run when it has finished: training
    happens in a hidden sibling folder that every process names alike (after the config), and a
    killed run is resumed there.
    `root`: a folder that holds `out` and inputs of the run and may move as a whole (a reproduction's
    RUN): a resume compares the input paths inside it by their place in it (`ROOT_KEY`).
    """
    out = Path(out)
    if not 0 <= cfg.seed < 2**32:  # numpy's seed range: else a traceback once the models have loaded
        raise InputError("--seed", f"must be between 0 and 2**32 - 1, got {cfg.seed}")
    data, index = data_fingerprints(cfg), index_fingerprint(cfg)
    filled = out.is_dir() and any(out.iterdir())
    inputs = {"--index": cfg.index, "--encoder": cfg.encoder, "--context-encoder": cfg.context_encoder,
              "--generator": cfg.generator, "--train": cfg.train, "--dev": cfg.dev}
    if filled and not resume:  # replaced or refused, but never with the run's own inputs inside
        check_inputs_outside(out, inputs)
    recorded = _recorded(data, index, root)
    if not overwrite or resume or not filled:
        with _held(out):
            return _train_rag(cfg, out, resume, on_progress, recorded, out)
    check_out_dir(out, KIND, overwrite=True, inputs=inputs)  # nor a folder inside an input (--out RUN/dpr/x)
    # named by what a --resume compares, the config but RESUMABLE_CHANGES and the content of the data and index: a
    # killed run is resumed there by the same command or one that changes only how fast or where it runs (with all
    # of the config, a rerun with --gradient-checkpointing after running out of memory began again at step 0), and
    # one with other settings or data starts afresh beside it instead of failing as a --resume of another run
    named = {k: v for k, v in _run_config(cfg, {DATA_KEY: data, INDEX_KEY: index}).items()
             if k not in RESUMABLE_CHANGES}
    digest = hashlib.sha256(json.dumps(named, sort_keys=True).encode()).hexdigest()[:12]
    where = physical(out)  # `.` has no name to put the staging folder beside
    staging = where.with_name(f".{where.name}.overwrite-{digest}")
    resumed = staging.exists()
    with _held(staging):
        summary = _train_rag(cfg, staging, resumed, on_progress, recorded, where)  # its models name paths in `where`
    if summary["main"]:
        replace_dir(staging, where)
        for stale in where.parent.glob(f".{glob.escape(where.name)}.overwrite*"):  # killed runs with other settings
            if is_ours(stale, KIND):
                shutil.rmtree(stale, ignore_errors=True)
    return {**summary, "out": str(out)}


def _train_rag(cfg: RagTrainConfig, out: Path, resume: bool, on_progress, recorded: dict, read_at: Path) -> dict:
    """`recorded`: what config.json and each state.json hold beside the config (`_recorded`). `read_at`: the
    folder the run is read from once it has finished, `out` itself unless it trains in a staging folder
    (`--overwrite`): the paths its saved models record (`checkpoint.save_model`) are there."""
    _check_precision(cfg)
    # before the models load
    ckpt = _check_out(out, cfg, resume, recorded[DATA_KEY], recorded.get(ROOT_KEY), recorded[INDEX_KEY],
                      recorded[INDEX_ENCODER_KEY])
    fresh = ckpt is None and not (out.is_dir() and any(out.iterdir()))  # nothing of a run's there yet
    acc = _accelerator(cfg)
    shared = cfg.shared_retrieval and acc.num_processes > 1
    if shared and cfg.search_device == "gpu":
        raise InputError("--search-device", "gpu does not apply with --shared-retrieval: each node's first process "
                         "searches with FAISS for all of them")
    # a process whose searches its node's first process serves never reads the FAISS index
    parts = load_components(cfg, acc.num_processes, with_faiss=not shared or acc.local_process_index == 0)
    if cfg.shared_retrieval and not shared and acc.is_main_process:  # said, not ignored in silence
        warnings.warn("--shared-retrieval has no other process to serve: this single process searches its own index",
                      LewisragWarning, stacklevel=2)
    if shared:
        parts = parts._replace(index=NodeSearch.for_this_node(parts.index))
        searched_on = "node"
    else:
        searched_on = place_search(parts.index, cfg.search_device, acc.device)
    acc.wait_for_everyone()  # every process has checked --out before the main one writes to it
    model = parts.model.to(acc.device)
    if cfg.freeze_retriever:
        model.question_encoder.requires_grad_(False)
    if cfg.gradient_checkpointing:
        _checkpoint_activations(model, cfg.freeze_retriever)
    if cfg.compile:
        compile_models(model)
    params = [p for p in model.parameters() if p.requires_grad]
    question = {id(p) for p in model.question_encoder.parameters()}
    context = {id(p) for p in model.context_encoder.parameters()} if model.context_encoder is not None else set()
    retriever = question | context
    groups = [{"params": [p for p in params if id(p) not in retriever], "lr": cfg.lr},
              {"params": [p for p in params if id(p) in question], "lr": cfg.lr * cfg.retriever_lr_scale},
              {"params": [p for p in params if id(p) in context], "lr": cfg.lr * cfg.retriever_lr_scale}]
    opt = adamw([g for g in groups if g["params"]], lr=cfg.lr, weight_decay=cfg.weight_decay)
    warmup = warmup_steps(cfg.warmup, cfg.steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: learning_rate_factor(s, cfg.steps, warmup))
    scaler = torch.amp.GradScaler(acc.device.type, enabled=cfg.mixed_precision == "fp16")
    _seed_everything(cfg.seed, acc.process_index)
    log_file = out / "log.jsonl"
    # "best_em" holds the best dev score of the task (DEV_METRIC); the name stays so that older checkpoints resume
    state = {"step": 0, "position": asdict(DataPosition()), "best_em": None, "config": asdict(cfg)}
    if ckpt is not None:
        state = C.load_checkpoint(ckpt, model, opt, sched, scaler, rank=acc.process_index, examples=len(parts.pairs))
        E.restore(ckpt, state, model, parts.index, cfg.mixed_precision)
    acc.wait_for_everyone()  # every process has read the checkpoint before the main one may move it back
    try:
        if acc.is_main_process:
            _prepare_out(out, cfg, recorded, ckpt, log_file)
            if ckpt is not None:
                _mend_best(cfg, model, parts, out, state, read_at)
        acc.wait_for_everyone()
        state = _loop(cfg, acc, parts, model, params, opt, sched, scaler, state, recorded, out, log_file, on_progress,
                      read_at)
        if acc.is_main_process:
            index = _index_to_save(cfg, model, parts.index, _reindexed_at(state) == state["step"], state["step"])
            C.save_model(model, parts.tokenizers, out / "final", {**asdict(cfg), "step": state["step"]}, index,
                         **_read_at(out, read_at, "final"))
            _record(out)
    except InputError:  # refused or diverged: a run that saved nothing leaves no half-written folder (an interrupt
        if fresh and acc.is_main_process:  # leaves it as a kill does, for the --resume of the same run)
            _forget_unsaved(out)
        raise
    acc.wait_for_everyone()
    best = state["best_em"]
    return {"steps": state["step"], "best_em": best if cfg.task == "qa" else None, "best_dev": best,
            "dev_metric": DEV_METRIC[cfg.task], "n_train": len(parts.pairs),
            "skipped_no_answer": parts.skipped, "processes": acc.num_processes, "main": acc.is_main_process,
            "search": searched_on, "out": str(out)}


def _diverged(cfg: RagTrainConfig, what: str, or_bf16: bool = False) -> InputError:
    """`optim.diverged`'s line, naming --retriever-lr-scale too where the retriever trains (its encoders'
    learning rate is --lr times it), and with `or_bf16` bf16, whose range does not overflow as fp16's does."""
    trains_retriever = cfg.train_context_encoder or not cfg.freeze_retriever
    also = f" or --retriever-lr-scale (now {cfg.retriever_lr_scale:g})" if trains_retriever else ""
    return diverged(what, cfg.lr, also=also + (" or train with --mixed-precision bf16" if or_bf16 else ""))


def _index_to_save(cfg: RagTrainConfig, model, index, current: bool, step: int):
    """`E.index_to_save`, its fresh encoding checked as a re-index's is, before a model carries it: finite
    weights can still encode to NaN or inf (fp16, a huge --lr), which best/ or final/ saved as their index/,
    exit 0, for `ask` to search finding nothing."""
    saved = E.index_to_save(model, index, current, cfg.mixed_precision)
    if saved is not None and not current and not np.isfinite(saved.embeddings).all():
        raise _diverged(cfg, f"the context encoder's passage vectors hold NaN or inf after step {step}")
    return saved


def _reindexed_at(state: dict) -> int:
    """The step whose context encoder made the vectors the index searches (0: the index's own)."""
    return (state.get("live_index") or {}).get("step", 0)


def _loop(cfg, acc, parts, model, params, opt, sched, scaler, state, recorded, out, log_file, on_progress,
          read_at: Path) -> dict:
    step, pos, best, reindexed_at = state["step"], DataPosition(**state["position"]), state["best_em"], _reindexed_at(state)
    best_step = state.get("best_step")  # None in a checkpoint written before it was recorded
    skipped = state.get("skipped_inf") or 0  # fp16 steps the scaler skipped (none in a checkpoint written before it was)
    while step < cfg.steps:
        model.train()
        if cfg.freeze_retriever:
            model.question_encoder.eval()  # a frozen retriever: deterministic p(z|x), no dropout
        totals = [0.0] * 5  # loss sum, examples, entropy sum, hits (a gold passage in the K), questions with gold ids
        # the step's whole batch in one draw, then cut into micro-batches: an epoch's tail is skipped by the
        # step's size, so --grad-accum N matches a batch N times larger (drawn a micro-batch at a time, an
        # epoch's tail depended on N and a step could straddle two epochs, one example in it twice)
        ids, pos = next_batch(pos, cfg.seed, len(parts.pairs), cfg.batch_size * cfg.grad_accum, parts.units)
        for micro in range(cfg.grad_accum):
            mine = shard(ids[micro * cfg.batch_size : (micro + 1) * cfg.batch_size], acc.process_index, acc.num_processes)
            totals = [a + b for a, b in zip(totals, _micro_step(cfg, acc, parts, model, mine, scaler))]
        _average_gradients(params, acc.num_processes)
        scaler.unscale_(opt)  # the clip compares true gradients with --max-grad-norm
        if cfg.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        lr = sched.get_last_lr()[0]
        scaling = optimizer_step(opt, sched, scaler)
        opt.zero_grad(set_to_none=True)
        step += 1
        loss_sum, n, ent_sum, hits, asked = _sum_across(totals, acc)
        record = {"step": step, "loss": loss_sum / n, "lr": lr, "doc_entropy": ent_sum / n,
                  "hit_at_k": hits / asked if asked else None, "epoch": pos.epoch, **scaling}
        # a NaN model was scored (a FEVER dev accuracy of one label's share), kept as best/ and final/, exit 0
        if not math.isfinite(record["loss"]) and not scaler.is_enabled():  # under fp16 the scaler skipped the step
            raise _diverged(cfg, f"the loss became {record['loss']} at step {step}")
        # the same count on every process: each scaler reads the gradients averaged across them. Skipped steps leave
        # the weights finite, so the checks below pass: a run whose every step overflowed saved its untrained model
        skipped += bool(scaling.get("skipped_inf"))
        if step == cfg.steps and scaler.is_enabled() and (why := all_overflowed(skipped, cfg.steps, record["loss"])):
            raise _diverged(cfg, why, or_bf16=True)
        reindexing = cfg.reindex_every and step % cfg.reindex_every == 0
        # this step's update, whatever its loss: checked before anything is written, or re-encoded (NaN vectors
        # searched found no passages, told as an index to `lewisrag index tune`)
        if (step % cfg.save_every == 0 or step == cfg.steps or cfg.eval_every and step % cfg.eval_every == 0
                or reindexing) and not finite(params):
            raise _diverged(cfg, f"the weights hold NaN or inf after step {step}")
        if reindexing:  # before the dev evaluation, which then searches it
            record["reindex_s"] = E.reindex(model, parts.index, cfg.mixed_precision)
            reindexed_at = step
            if not np.isfinite(parts.index.embeddings).all():  # finite weights overflowing in the encoding (fp16)
                raise _diverged(cfg, f"the context encoder's passage vectors hold NaN or inf at step {step}'s re-index")
        scored = None  # end to end: the index dev was measured on, which a new best/ carries
        if cfg.eval_every and (step % cfg.eval_every == 0 or step == cfg.steps):
            if acc.is_main_process:
                index = parts.index.local if isinstance(parts.index, NodeSearch) else parts.index  # the main process alone
                key = f"dev_{DEV_METRIC[cfg.task]}"
                # end to end, dev scores the retriever best/ would save (the passages encoded by the current
                # context encoder, `E.index_to_save`), not vectors of the last re-index that best/ would not hold
                scored = _index_to_save(cfg, model, index, reindexed_at == step, step)
                with E.searching(model, scored):
                    record[key] = dev_score(model, parts.tokenizers, index if scored is None else scored, parts.dev, cfg)
                if not math.isnan(record[key]) and (best is None or record[key] > best):
                    best, best_step = record[key], step
            acc.wait_for_everyone()
            if acc.num_processes > 1:  # whether this step checkpoints must be known to all (`gather_object` below)
                best, best_step = broadcast_object_list([best, best_step])
        improved = best_step == step
        state = {"step": step, "position": asdict(pos), "best_em": best, "best_step": best_step, "skipped_inf": skipped,
                 "config": asdict(cfg), **recorded}
        if cfg.train_context_encoder:
            state["live_index"] = E.live_state(parts.index, reindexed_at)
        if acc.is_main_process:
            with open(log_file, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
            if on_progress:
                on_progress(step, cfg.steps, record)
        # A new best checkpoints too, before best/ is written: a resume never starts from a checkpoint older than
        # best/. With best/ saved between checkpoints, a run killed before the next one resumed with the older best
        # score, and where it scored that step lower (another machine's rounding) it left best/ holding a model, and a
        # score, that its log and summary did not have. A kill between the two writes is mended by the resume
        # (`_mend_best`: the checkpoint holds the very weights best/ was to save).
        saving = step % cfg.save_every == 0 or step == cfg.steps or improved
        # every process's RNG goes into the checkpoint, which the main process writes: each resumes its own dropout
        rngs = gather_object([C.capture_rng()]) if saving and acc.num_processes > 1 else None
        if acc.is_main_process and saving:
            C.save_checkpoint(out / "checkpoint", model, opt, sched, state, log_file, scaler,
                              vectors=parts.index.embeddings if reindexed_at else None, rngs=rngs)
            _record(out)
        if acc.is_main_process and improved:
            _save_best(cfg, model, parts, out, state, scored, read_at)
        acc.wait_for_everyone()
    return state


def _save_best(cfg, model, parts, out: Path, state: dict, index, read_at: Path) -> None:
    """best/: the model as of `state` (its step is `state["best_step"]`), scoring `state["best_em"]`, with
    `index` (end to end: the index it carries, `E.index_to_save`; else None); `read_at` as `_train_rag`'s."""
    C.save_model(model, parts.tokenizers, out / "best",
                 {**asdict(cfg), "step": state["step"], f"dev_{DEV_METRIC[cfg.task]}": state["best_em"]}, index,
                 **_read_at(out, read_at, "best"))
    _record(out)  # listed at once: a kill before the next checkpoint left best/ unlisted, a user's file to --resume


def _read_at(out: Path, read_at: Path, name: str) -> dict:
    """`checkpoint.save_model`'s `read_at` for the model `out/name`: given only where the run is read from
    another folder than the one it trains in (`--overwrite`'s staging folder)."""
    return {} if read_at == out else {"read_at": read_at / name}


def _mend_best(cfg, model, parts, out: Path, state: dict, read_at: Path) -> None:
    """On resume (main process): a checkpoint written for a new best (`state["best_step"]` its own step) whose
    best/ is not that step's, the run killed between the two writes, gets it now from the weights just loaded,
    which are the ones best/ was to save."""
    if state.get("best_step") is None or state["best_step"] != state["step"]:
        return
    try:
        saved = read_json(out / "best" / "train_config.json")
    except (InputError, OSError):
        saved = None
    if isinstance(saved, dict) and saved.get("step") == state["step"]:
        return
    index = parts.index.local if isinstance(parts.index, NodeSearch) else parts.index
    _save_best(cfg, model, parts, out, state,
               _index_to_save(cfg, model, index, _reindexed_at(state) == state["step"], state["step"]), read_at)


def _micro_step(cfg, acc, parts, model, ids: list[int], scaler) -> list[float]:
    """Forward and backward on this process's share; the loss is a mean over that share so that,
    with equal shares, averaging gradients across processes gives the global batch's gradient."""
    pairs = [parts.pairs[i] for i in ids]
    gen = model.generator.config
    labels = answer_labels([t for _, t in pairs], parts.tokenizers.generator, gen.decoder_start_token_id,
                           gen.pad_token_id, cfg.max_target_length).to(acc.device)  # (B, T)
    with autocast(cfg.mixed_precision, acc.device.type):
        out, r = model.forward_questions([ex.question for ex, _ in pairs], parts.index, parts.tokenizers, labels,
                                         swap=cfg.swap)
    loss = out.loss.float().mean()
    scaler.scale(loss / cfg.grad_accum).backward()  # as is without fp16
    hits, asked = hit_rate([[p.id for p in ps] for ps in r.passages], [ex.gold_passage_ids for ex, _ in pairs])
    n = len(pairs)
    return [float(out.loss.detach().float().sum()), n, doc_entropy(r.doc_scores) * n, hits, asked]


def _average_gradients(params, processes: int) -> None:
    """All-reduce the mean gradient over processes, as one flat buffer (one collective per step)."""
    if processes == 1:
        return

    for p in params:  # every process must send the same layout, even for a parameter this batch missed
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat)
    flat /= processes
    offset = 0
    for p in params:
        p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
        offset += p.numel()


def _sum_across(values: list[float], acc) -> list[float]:
    if acc.num_processes == 1:
        return values

    t = torch.tensor(values, dtype=torch.float64, device=acc.device)  # NCCL reduces GPU tensors only
    dist.all_reduce(t)
    return t.tolist()
