"""RAG fine-tuning (Lewis et al. 2020, §2.4): the question encoder and BART trained jointly on
(question, answer) pairs, the documents a latent variable retrieved from a fixed FAISS index.

`train_rag(cfg, out)` is an explicit loop run through accelerate: AdamW with linear warmup and
decay, gradient accumulation, optional bf16 or fp16 autocast of the forward passes, dev exact match
at intervals with the best model kept, a JSONL log that also watches for retrieval collapse, and
checkpoints that resume to the same weights and the same log as a run that was never interrupted.

fp16 (GPU only) goes with a gradient scaler: the loss is multiplied by a scale before backward, the
gradients are divided by it again before clipping, and a step whose gradients hold inf or NaN is
skipped (the weights stay, the scale halves; it still counts as a step of the schedule). Its log
lines carry `loss_scale` and `skipped_inf`, and the scaler's state is part of the checkpoint. With
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

Output directory:

    config.json   this config, and the sha256 of its --train and --dev files' content (`data_sha256`);
                  with `root`, the folder the run and its inputs move with (`run_root`)
    log.jsonl     one line per optimizer step
    checkpoint/   resumable state (its state.json records the same `data_sha256` and `run_root`)
    best/         best dev EM model    final/   last model
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import math
import os
import random
import shutil
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, fields
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import broadcast_object_list, gather_object

from lewisrag.data.io import InputError, LewisragWarning, atomic_path, expect, is_count, is_number, read_json, write_json
from lewisrag.data.outputs import (check_inputs_outside, check_out_dir, exclusive, existing, is_ours, mark, physical,
                                   record_files, replace_dir)
from lewisrag.data.records import QAExample
from lewisrag.data.threads import resolve_device
from lewisrag.index.shared import NodeSearch
from lewisrag.rag_model.answering import answer_questions
from lewisrag.rag_model.model import max_positions
from lewisrag.scoring.qa import answer_exact_match
from lewisrag.scoring.qbleu import q_bleu1
from lewisrag.scoring.retrieval import hit_rate
from lewisrag.training import checkpoint as C
from lewisrag.training import end2end as E
from lewisrag.training.configs import PRECISIONS, RagTrainConfig, check_precision
from lewisrag.training.configs import RAG_KIND as KIND  # the marker kind of training run folders (lewisrag.data.outputs)
from lewisrag.training.tasks import DEV_METRIC, fever_accuracy, rag_label_log_probs
from lewisrag.training.rag_data import DataPosition, answer_labels, doc_entropy, load_components, next_batch, place_search, shard


def learning_rate_factor(step: int, steps: int, warmup_steps: int) -> float:
    """Linear warmup to 1, then linear decay to 0 at `steps` (transformers' linear schedule).

    >>> [learning_rate_factor(s, 10, 2) for s in (0, 1, 2, 6, 10)]
    [0.0, 0.5, 1.0, 0.5, 0.0]
    """
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    return max(0.0, (steps - step) / max(1, steps - warmup_steps))


def adamw(params, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW over `params` (tensors or groups), fused into one kernel per step when the weights are on
    a GPU, as nanoGPT does (torch's default there launches several multi-tensor kernels per step).

    On the CPU, the multi-tensor (foreach) implementation: torch's default there is the for-loop one,
    about ten small ops per parameter from Python (7.6 ms of a 63 ms step of the small preset's
    stitched reader, 91 parameters, on 2 cores), and the foreach one does the same arithmetic in
    the same order, bit for bit (`tests/test_devices.py`), without the Python loop. The fused CPU
    kernel is faster still but rounds differently, and with it the small preset's FEVER runs ended
    under their 0.85 target (0.849 / 0.847).

    Every parameter decays, biases and LayerNorm weights too, where the paper's fine-tuning script and
    DPR's trainer exclude them: at 0.01 over these runs' steps the difference is small, and every
    number the docs record was trained this way."""
    params = list(params)
    first = params[0]["params"][0] if isinstance(params[0], dict) else params[0]
    on_gpu = first.device.type == "cuda"
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True if on_gpu else None,
                             foreach=None if on_gpu else True)


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

    `out` must be missing or empty, or (with `resume`) a run of this kind. With `overwrite`, a
    non-empty `out` is replaced by the new run when it has finished: training happens in a hidden
    sibling folder that every process names alike (after the config), and a killed run is resumed there.
    `root`: a folder that holds `out` and inputs of the run and may move as a whole (a reproduction's
    RUN): a resume compares the input paths inside it by their place in it (`ROOT_KEY`).
    """
    out = Path(out)
    if not 0 <= cfg.seed < 2**32:  # numpy's seed range: else a traceback once the models have loaded
        raise InputError("--seed", f"must be between 0 and 2**32 - 1, got {cfg.seed}")
    data = data_fingerprints(cfg)
    filled = out.is_dir() and any(out.iterdir())
    inputs = {"--index": cfg.index, "--encoder": cfg.encoder, "--context-encoder": cfg.context_encoder,
              "--generator": cfg.generator, "--train": cfg.train, "--dev": cfg.dev}
    if filled and not resume:  # replaced or refused, but never with the run's own inputs inside
        check_inputs_outside(out, inputs)
    recorded = _recorded(data, root)
    if not overwrite or resume or not filled:
        with _held(out):
            return _train_rag(cfg, out, resume, on_progress, recorded)
    check_out_dir(out, KIND, overwrite=True, inputs=inputs)  # nor a folder inside an input (--out RUN/dpr/x)
    # named by the config and the data's content: a killed run is resumed there by the same command, and
    # one with other settings or data starts afresh beside it instead of failing as a --resume of another run
    digest = hashlib.sha256(json.dumps(_run_config(cfg, {DATA_KEY: data}), sort_keys=True).encode()).hexdigest()[:12]
    where = physical(out)  # `.` has no name to put the staging folder beside
    staging = where.with_name(f".{where.name}.overwrite-{digest}")
    resumed = staging.exists()
    with _held(staging):
        summary = _train_rag(cfg, staging, resumed, on_progress, recorded)
    if summary["main"]:
        replace_dir(staging, where)
        for stale in where.parent.glob(f".{glob.escape(where.name)}.overwrite*"):  # killed runs with other settings
            if is_ours(stale, KIND):
                shutil.rmtree(stale, ignore_errors=True)
    return {**summary, "out": str(out)}


def _held(folder: Path):
    """`folder` held by the process that writes it (rank 0 under `accelerate launch`; the others
    only read there): a second run into the same folder is refused instead of interleaving its
    checkpoints with this one's."""
    return exclusive(folder) if os.environ.get("RANK", "0") == "0" else contextlib.nullcontext()


def _train_rag(cfg: RagTrainConfig, out: Path, resume: bool, on_progress, recorded: dict) -> dict:
    """`recorded`: what config.json and each state.json hold beside the config (`_recorded`)."""
    _check_precision(cfg)
    ckpt = _check_out(out, cfg, resume, recorded[DATA_KEY], recorded.get(ROOT_KEY))  # before the models load
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
    warmup_steps = int(cfg.warmup * cfg.steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: learning_rate_factor(s, cfg.steps, warmup_steps))
    scaler = torch.amp.GradScaler(acc.device.type, enabled=cfg.mixed_precision == "fp16")
    _seed_everything(cfg.seed, acc.process_index)
    log_file = out / "log.jsonl"
    # "best_em" holds the best dev score of the task (DEV_METRIC); the name stays so that older checkpoints resume
    state = {"step": 0, "position": asdict(DataPosition()), "best_em": None, "config": asdict(cfg)}
    if ckpt is not None:
        state = C.load_checkpoint(ckpt, model, opt, sched, scaler, rank=acc.process_index, examples=len(parts.pairs))
        E.restore(ckpt, state, model, parts.index, cfg.mixed_precision)
    acc.wait_for_everyone()  # every process has read the checkpoint before the main one may move it back
    if acc.is_main_process:
        _prepare_out(out, cfg, recorded, ckpt, log_file)
        if ckpt is not None:
            _mend_best(cfg, model, parts, out, state)
    acc.wait_for_everyone()
    state = _loop(cfg, acc, parts, model, params, opt, sched, scaler, state, recorded, out, log_file, on_progress)
    if acc.is_main_process:
        index = E.index_to_save(model, parts.index, _reindexed_at(state) == state["step"], cfg.mixed_precision)
        C.save_model(model, parts.tokenizers, out / "final", {**asdict(cfg), "step": state["step"]}, index)
        _record(out)
    acc.wait_for_everyone()
    best = state["best_em"]
    return {"steps": state["step"], "best_em": best if cfg.task == "qa" else None, "best_dev": best,
            "dev_metric": DEV_METRIC[cfg.task], "n_train": len(parts.pairs),
            "skipped_no_answer": parts.skipped, "processes": acc.num_processes, "main": acc.is_main_process,
            "search": searched_on, "out": str(out)}


def _check_precision(cfg: RagTrainConfig) -> None:
    if cfg.mixed_precision in PRECISIONS:  # an unknown one is rag_data.check_config's to name
        check_precision(cfg.mixed_precision, "cpu" if cfg.cpu or not torch.cuda.is_available() else "cuda")
    if cfg.compile:
        check_compiler()


def check_compiler() -> None:
    """`--compile` needs a C compiler: inductor builds its kernels (C++ on the CPU, triton's
    launcher on a GPU) with the system's. Checked before anything loads."""
    if not any(shutil.which(cc) for cc in ("cc", "gcc", "clang")):
        raise InputError("--compile", "needs a C compiler on PATH (cc, gcc or clang): torch.compile builds its kernels with it")


def single_device(device: str, mixed_precision: str) -> tuple[torch.device, torch.amp.GradScaler]:
    """Where a one-process trainer (closed book, DPR, the stitched reader) runs (`device`: auto, cpu,
    cuda[:N]) and its gradient scaler, on under fp16 only; `mixed_precision` checked first."""
    where = torch.device(check_precision(mixed_precision, resolve_device(device)))
    return where, torch.amp.GradScaler(where.type, enabled=mixed_precision == "fp16")


def backward_step(loss, opt, sched, scaler, params, max_grad_norm: float) -> dict:
    """A one-process trainer's step after its forward pass: backward (scaled under fp16), the clip of
    the true gradients (none for 0), then `optimizer_step`; returns its log fields."""
    scaler.scale(loss).backward()  # as is without fp16
    scaler.unscale_(opt)
    if max_grad_norm:
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    return optimizer_step(opt, sched, scaler)


def diverged(what: str, lr: float, flag: str = "--lr", field: str | None = None, also: str = "") -> InputError:
    """The one line a trainer (DPR, the stitched reader, pretraining, FEVER's verifier, RAG fine-tuning)
    stops with when its loss or weights turn NaN or inf, saving nothing: its NaN weights were saved,
    with exit 0."""
    return InputError(flag, f"{what}: training diverged; lower {field or flag} (now {lr:g}){also}", field=field)


def finite(params) -> bool:
    """Whether every tensor of `params` holds finite numbers only (a trainer checks once, after its last step)."""
    return all(bool(torch.isfinite(w).all()) for w in params)


def _accelerator(cfg: RagTrainConfig):
    # accelerate keeps its settings process-wide and refuses new ones, but one process may train
    # several models (`lewisrag reproduce`); the process group (PartialState) is kept
    AcceleratorState._reset_state(reset_partial_state=False)
    # without a GPU, accelerate joins the processes torchrun started only when told it is on the CPU
    return Accelerator(cpu=cfg.cpu or not torch.cuda.is_available(),
                       mixed_precision=cfg.mixed_precision if cfg.mixed_precision in PRECISIONS else "no")


def _checkpoint_activations(model, frozen_retriever: bool) -> None:
    """Turn on gradient checkpointing in the generator and, unless frozen (it then runs in eval
    mode, where checkpointing is off, and no gradient flows through it), the question encoder."""
    parts = {"generator": model.generator} | ({} if frozen_retriever else {"question encoder": model.question_encoder})
    if model.context_encoder is not None:
        parts["context encoder"] = model.context_encoder
    for name, part in parts.items():
        _enable_checkpointing(part)
        if not any(getattr(m, "gradient_checkpointing", False) for m in part.modules()):
            raise InputError("--gradient-checkpointing", f"the {name} ({type(part).__name__}) has no transformers "
                                                         "model inside that supports gradient checkpointing")


def compile_models(model, mode: str | None = None) -> None:
    """torch.compile the generator, the question encoder and (end to end) the context encoder, in
    place: their `state_dict` keys and the saved folders stay as they are, and only their own
    `__call__` is compiled (decoding calls BART's encoder and layers directly and stays eager).
    `dynamic=True`: every batch pads to its own lengths, so one graph with symbolic lengths instead
    of a recompilation for each new shape. Each compiles on the training step's first call, and
    again on the first call in eval mode without gradient (the question encoder at a dev
    evaluation, the generator at FEVER's, the context encoder at a re-index). On two CPU cores a
    compilation took about 15-45 s for the test models and 65-77 s for the CPU bench's (d_model
    256), 19-27 s when inductor's on-disk cache already held its kernels.

    Why: torch.compile fuses the layer norms, activations, dropout and residual additions between
    the matrix products, which is what a bf16 step spends its time on besides them. Measured on
    the CPU bench's RAG-Token step (two cores, `scripts/bench_rag.py --compile`): 1.03-1.09x faster
    in bf16, 0.97-0.99x in fp32, where the products dominate; on a GPU, `scripts/bench_gpu.py --parts
    compiled` measures it. `mode`: torch.compile's ("reduce-overhead" replays CUDA graphs; the
    bench's `--mfu-modes compiled:cudagraphs` measures it at a fixed shape), None its default."""
    parts = [model.generator, model.question_encoder]
    if model.context_encoder is not None:  # end to end: its DPR model, after PassageEncoder has tokenized
        parts.append(getattr(model.context_encoder, "encoder", model.context_encoder))
    for part in parts:
        part.compile(dynamic=True, mode=mode)


def _enable_checkpointing(module: torch.nn.Module) -> None:
    """`module`'s own gradient checkpointing or, where it has none (transformers' DPR encoders),
    that of the outermost models inside it which have (DPR's BertModel)."""
    if not getattr(module, "supports_gradient_checkpointing", False):
        for child in module.children():
            _enable_checkpointing(child)
        return
    # the newer transformers name; the older one warns that it is deprecated there
    enable = getattr(module, "activation_checkpointing_enable", None) or module.gradient_checkpointing_enable
    # non-reentrant: it needs no input that requires grad and keeps dropout's random draws
    enable({"use_reentrant": False})


def autocast(mixed_precision: str, device_type: str):
    """Autocast of the forward passes in `mixed_precision` ("no", "bf16", "fp16"; accelerate's own
    skips fp16 off a GPU)."""
    if mixed_precision == "no":
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=torch.bfloat16 if mixed_precision == "bf16" else torch.float16)


def _seed_everything(seed: int, rank: int = 0) -> None:
    """Seed python's, numpy's and torch's global generators (dropout draws from torch's); each
    process of a multi-process run from its own seed, so that their dropout masks differ (the data
    order has its own seed, `rag_data.next_batch`). One process: `seed` itself."""
    random.seed(seed + rank)
    np.random.seed(seed + rank)
    torch.manual_seed(seed + rank)


# Fields a resumed run may change: they say how fast or where, not what is trained. A run killed
# on one machine may go on on another (the device: --device cpu is `cpu`; where a Flat index is
# searched), as `reproduce --resume` promises (experiments/presets.comparable), with or without
# --compile, and with --gradient-checkpointing after running out of memory (the same loss and
# gradients, recomputed) or --shared-retrieval (the same search, made by each node's first process).
RESUMABLE_CHANGES = ("compile", "cpu", "search_device", "gradient_checkpointing", "shared_retrieval")
PATH_FIELDS = ("index", "encoder", "context_encoder", "generator", "train", "dev")  # one file however it is spelled
# The data files' content, recorded beside the config (config.json, and state.json at each checkpoint):
# the config names them by path, and a file edited at the same path between a kill and a --resume
# trained on other data without a word.
DATA_FIELDS = ("train", "dev")
DATA_KEY = "data_sha256"
DATA_SUFFIXES = (".parquet", ".arrow")  # a folder's data files: Parquet shards, a save_to_disk folder's Arrow files
# The folder a run and its inputs move with (`train_rag(root=)`, a reproduction's RUN), as an absolute path when
# the run wrote it, beside DATA_KEY. Paths compare by the file they name, and after `mv RUN RUN2` RUN/index_a is
# no file at all: a resume compares a path inside the recorded root with one inside the root now by their place
# in it, so a moved reproduction resumes its killed RAG stage, while RUN2/index_b for RUN/index_a (another file
# of the run) or a path outside the root that changed is refused as before.
ROOT_KEY = "run_root"


def content_sha256(spec: str) -> str | None:
    """sha256 of what a data path holds, read in blocks (a large file is never in memory whole): a
    file's bytes; a folder's data files (DATA_SUFFIXES), each by its name inside the folder and its
    bytes' sha256, in name order. None for an `hf:` spec, which names a hub dataset that only a
    download could hash (its cache is no record of what the hub serves now), and for a path that
    cannot be read, which the run's loader then names."""
    if not spec or spec.startswith("hf:"):
        return None
    path = Path(spec)
    try:
        if path.is_dir():
            files = sorted((f.relative_to(path).as_posix(), f) for f in path.rglob("*")
                           if f.suffix.lower() in DATA_SUFFIXES and f.is_file())
            listing = "".join(f"{name}\0{_file_sha256(f)}\n" for name, f in files)
            return hashlib.sha256(listing.encode()).hexdigest()
        return _file_sha256(path) if path.is_file() else None
    except OSError:
        return None


def _file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def data_fingerprints(cfg: RagTrainConfig) -> dict[str, str | None]:
    """`content_sha256` of each of `cfg`'s DATA_FIELDS, as the run records them."""
    return {name: content_sha256(getattr(cfg, name)) for name in DATA_FIELDS}


def _recorded(data: dict, root: str | os.PathLike | None = None) -> dict:
    """What a run records beside its config: its data files' content (DATA_KEY) and, given, its root (ROOT_KEY)."""
    return {DATA_KEY: data} | ({ROOT_KEY: os.path.abspath(root)} if root is not None else {})


def _run_config(cfg: RagTrainConfig, recorded: dict) -> dict:
    """What a run's config.json holds: the config, and what `_recorded` adds."""
    return {**asdict(cfg), **recorded}


def _check_out(out: Path, cfg: RagTrainConfig, resume: bool, data: dict | None = None,
               root: str | None = None) -> Path | None:
    """The checkpoint to resume from, if any; refuses to overwrite a run or resume a different one
    (other settings, or other `data`: `data_fingerprints`; None: not compared). `root`: the folder the
    run moves with now (ROOT_KEY), against the one it recorded."""
    check_out_dir(out, KIND)
    ckpt = existing(out / "checkpoint")
    if not resume:
        if out.exists() and any(out.iterdir()):
            raise InputError(out, "output directory is not empty; pass --resume to continue its run, --overwrite to "
                             "replace it, or choose another --out")
        return None
    if ckpt is None and existing(out / "final") is not None:  # finished, its checkpoint deleted (it is the
        # largest folder): a resume would train again from step 0 and replace the model in final/ and best/
        raise InputError(out, "holds a finished run (final/) whose checkpoint/ is gone: there is nothing to resume "
                         "from; --overwrite trains it again from step 0, replacing final/ and best/, or choose another --out")
    if ckpt is None:  # killed before its first checkpoint: it starts again, but only as the run it was
        file = out / "config.json"
        if file.is_file():
            saved = _read_run_config(file)
            _check_same_config(saved, cfg, file, (_saved_root(saved, file, "; the run folder is damaged"), root))
            _check_same_data(saved.get(DATA_KEY), cfg, data, file, "; the run folder is damaged")
        return None
    state = _read_state(ckpt)
    file = ckpt / C.STATE_JSON
    _check_same_config(state["config"], cfg, file, (_saved_root(state, file, "; the checkpoint is damaged"), root))
    _check_same_data(state.get(DATA_KEY), cfg, data, ckpt / C.STATE_JSON, "; the checkpoint is damaged")
    step = state["step"]
    if step > cfg.steps:  # the same config, so no run of it saved a later step: the loop would end at once
        raise InputError(ckpt / C.STATE_JSON, f"step {step} is beyond the run's --steps {cfg.steps}; the checkpoint "
                         "is damaged", field="step")
    return ckpt


def _check_same_config(saved: dict, cfg: RagTrainConfig, file: Path,
                       roots: tuple[str | None, str | None] = (None, None)) -> None:
    """Refuse a --resume whose settings differ from the run's (`saved`, its config as written in
    `file`) but for RESUMABLE_CHANGES, naming each flag with both values. A field `saved` lacks was
    added since: its default is what that run used. Paths name the same file however written
    (relative to another working directory, through a link), or the same place inside the run's
    root as `roots` (the recorded one, the one now) give them: a moved root (ROOT_KEY)."""
    now = asdict(cfg)
    was_root, root = roots

    def same(f) -> bool:
        was = saved.get(f.name, f.default)
        if f.name in PATH_FIELDS and isinstance(was, str) and isinstance(now[f.name], str):
            if was == now[f.name] or (not was.startswith("hf:") and os.path.realpath(was) == os.path.realpath(now[f.name])):
                return True
            place = _inside(was, was_root), _inside(now[f.name], root)
            return None not in place and place[0] == place[1]
        return was == now[f.name]

    changed = [f"--{f.name.replace('_', '-')} {_shown(now[f.name])} (the run's: {_shown(saved.get(f.name, f.default))})"
               for f in fields(cfg) if f.name not in RESUMABLE_CHANGES and not same(f)]
    if changed:
        raise InputError(file, f"--resume with other settings than the run's: {'; '.join(changed)}. Resume with the "
                         "run's own, or start a new run (another --out, or --overwrite)", field="config")


def _saved_root(saved: dict, file: Path, damaged: str) -> str | None:
    """The root a run recorded (ROOT_KEY; None for a run without one, or written before it existed)."""
    root = saved.get(ROOT_KEY)
    expect(root is None or (isinstance(root, str) and os.path.isabs(root)), file, ROOT_KEY, "null or an absolute path",
           root, damaged)
    return root


def _inside(path: str, root: str | None) -> str | None:
    """`path`'s place inside `root` ("index_a", "world/train.jsonl"), or None: no root, or a path
    that is not absolute (its folder was the working directory of another time) or not inside it.
    Read from the text, since the recorded root may no longer exist."""
    if root is None or not os.path.isabs(path):
        return None
    rel = os.path.relpath(os.path.normpath(path), os.path.normpath(root))
    return None if rel == os.curdir or rel == os.pardir or rel.startswith(os.pardir + os.sep) else rel


def _check_same_data(saved, cfg: RagTrainConfig, data: dict | None, file: Path, damaged: str) -> None:
    """Refuse a --resume whose --train or --dev file (the same path: `_check_same_config` compared
    the paths) holds other content than the run recorded (`saved`: DATA_KEY of the checkpoint's
    state.json, else of the run's config.json, both `file`), naming each flag and file. A run
    recorded before DATA_KEY existed resumes unchecked; a file now unreadable is the loader's to name."""
    if saved is None or data is None:
        return
    expect(isinstance(saved, dict), file, DATA_KEY, "an object of the data files' sha256", saved, damaged)
    for name in DATA_FIELDS:
        was = saved.get(name)
        expect(was is None or (isinstance(was, str) and len(was) == 64 and all(c in "0123456789abcdef" for c in was)),
               file, f"{DATA_KEY}.{name}", "null or a sha256 in hex", was, damaged)
    changed = [f"--{name} {getattr(cfg, name)} (sha256 {data[name][:12]}..., the run's {saved[name][:12]}...)"
               for name in DATA_FIELDS if saved.get(name) and data[name] and saved[name] != data[name]]
    if changed:
        raise InputError(file, f"--resume with other data than the run's, the same path holding other content: "
                         f"{'; '.join(changed)}. Resume with the files the run trained on, or start a new run "
                         "(another --out, or --overwrite)", field=DATA_KEY)


def _shown(value: object) -> str:
    """A config value as a flag takes it: `--qa-fields question=query,answers=golds`, a switch on or off."""
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, bool):
        return "on" if value else "off"
    return "(none)" if value in (None, "") else str(value)


def _read_run_config(file: Path) -> dict:
    """A run's config.json (written by `_prepare_out`), an object, else one line naming it."""
    config = read_json(file)
    expect(isinstance(config, dict), file, "(top level)", "a JSON object of the run's config", config,
           "; the run folder is damaged")
    return config


def _read_state(ckpt: Path) -> dict:
    """The checkpoint's state.json with what this loop keeps in it checked (`checkpoint.read_state`
    checks the rest): one line naming a damaged field, before any model loads."""
    state, file = C.read_state(ckpt), ckpt / C.STATE_JSON

    def need(ok: bool, field: str, what: str, value: object) -> None:
        expect(ok, file, field, what, value, "; the checkpoint is damaged")

    for field in ("step", "position", "config"):
        if field not in state:
            raise InputError(file, "missing: the checkpoint is damaged", field=field)
    need(isinstance(state["config"], dict), "config", "an object", state["config"])
    position = state["position"]
    need(isinstance(position, dict) and set(position) == {f.name for f in fields(DataPosition)}, "position",
         "an object of epoch and index", position)
    for name in sorted(position):
        need(is_count(position[name]), f"position.{name}", "a whole number >= 0", position[name])
    best = state.get("best_em")
    need(best is None or (is_number(best) and math.isfinite(best)), "best_em", "null or a finite number", best)
    best_step = state.get("best_step")
    need(best_step is None or (is_count(best_step) and best_step <= state["step"]), "best_step",
         "null or a whole number no later than the step", best_step)
    live = state.get("live_index")
    need(live is None or (isinstance(live, dict) and is_count(live.get("step", 0))), "live_index",
         "null or an object with a whole-number step", live)
    _check_log(ckpt / C.LOG)
    return state


def _check_log(file: Path) -> None:
    """The checkpoint's copy of log.jsonl (the resumed log starts from it): one JSON object per line,
    else one line naming the line; a damaged line was copied into the resumed run's log."""
    if not file.is_file():
        return
    with open(file, "rb") as f:
        for line, raw in enumerate(f, 1):
            try:
                ok = isinstance(json.loads(raw), dict)
            except ValueError:  # also bytes that are not UTF-8
                ok = False
            if not ok:
                raise InputError(file, "not a JSON object of the training log; the checkpoint is damaged", line=line)


def _prepare_out(out: Path, cfg: RagTrainConfig, recorded: dict, ckpt: Path | None, log_file: Path) -> None:
    """config.json, and the log as of the checkpoint (lines written after it are redone)."""
    mark(out, KIND)  # a killed run's staging folders were swept by check_out_dir: a live writer's are kept
    ckpt = _settle_replaced(out, ckpt)
    write_json(out / "config.json", _run_config(cfg, recorded))
    saved_log = ckpt / C.LOG if ckpt is not None else None
    with atomic_path(log_file) as tmp:
        tmp.write_bytes(saved_log.read_bytes() if saved_log is not None and saved_log.exists() else b"")


REPLACED = ("checkpoint", "best", "final")  # the run's folders that each save replaces whole (outputs.replace_dir)
LAYOUT = ("config.json", "log.jsonl", *REPLACED)  # what a run writes at its top level


def _record(out: Path) -> None:
    """List what the run wrote in its marker (`outputs.record_files`), after each save, so that a later
    rerun tells a file the user added from the run's own (`outputs.check_part`)."""
    record_files(out, [n for n in LAYOUT if (out / n).exists()])


def _settle_replaced(out: Path, ckpt: Path | None) -> Path | None:
    """Put back what a kill between the two renames of a replace left (`outputs.replace_dir`): the
    previous folder at `.NAME.old`, NAME missing (moved back: it is what `existing` resumed from) or
    NAME already the new one (the old removed). Left there, carrying no marker of its own, it made
    the next save of NAME refuse the run's own folder as a user's, steps after the resume. Returns
    where `ckpt` now is."""
    for name in REPLACED:
        old, folder = out / f".{name}.old", out / name
        if old.is_symlink() or not old.is_dir():
            continue
        if folder.exists():
            shutil.rmtree(old)
        else:
            os.replace(old, folder)
            if ckpt == old:
                ckpt = folder
    return ckpt


def _reindexed_at(state: dict) -> int:
    """The step whose context encoder made the vectors the index searches (0: the index's own)."""
    return (state.get("live_index") or {}).get("step", 0)


def _loop(cfg, acc, parts, model, params, opt, sched, scaler, state, recorded, out, log_file, on_progress) -> dict:
    step, pos, best, reindexed_at = state["step"], DataPosition(**state["position"]), state["best_em"], _reindexed_at(state)
    best_step = state.get("best_step")  # None in a checkpoint written before it was recorded
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
            raise diverged(f"the loss became {record['loss']} at step {step}", cfg.lr)
        if (step % cfg.save_every == 0 or step == cfg.steps or cfg.eval_every and step % cfg.eval_every == 0) \
                and not finite(params):  # this step's update, whatever its loss: checked before anything is written
            raise diverged(f"the weights hold NaN or inf after step {step}", cfg.lr)
        if cfg.reindex_every and step % cfg.reindex_every == 0:  # before the dev evaluation, which then searches it
            record["reindex_s"] = E.reindex(model, parts.index, cfg.mixed_precision)
            reindexed_at = step
        scored = None  # end to end: the index dev was measured on, which a new best/ carries
        if cfg.eval_every and (step % cfg.eval_every == 0 or step == cfg.steps):
            if acc.is_main_process:
                index = parts.index.local if isinstance(parts.index, NodeSearch) else parts.index  # the main process alone
                key = f"dev_{DEV_METRIC[cfg.task]}"
                # end to end, dev scores the retriever best/ would save (the passages encoded by the current
                # context encoder, `E.index_to_save`), not vectors of the last re-index that best/ would not hold
                scored = E.index_to_save(model, index, reindexed_at == step, cfg.mixed_precision)
                with E.searching(model, scored):
                    record[key] = dev_score(model, parts.tokenizers, index if scored is None else scored, parts.dev, cfg)
                if not math.isnan(record[key]) and (best is None or record[key] > best):
                    best, best_step = record[key], step
            acc.wait_for_everyone()
            if acc.num_processes > 1:  # whether this step checkpoints must be known to all (`gather_object` below)
                best, best_step = broadcast_object_list([best, best_step])
        improved = best_step == step
        state = {"step": step, "position": asdict(pos), "best_em": best, "best_step": best_step, "config": asdict(cfg),
                 **recorded}
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
            _save_best(cfg, model, parts, out, state, scored)
        acc.wait_for_everyone()
    return state


def _save_best(cfg, model, parts, out: Path, state: dict, index) -> None:
    """best/: the model as of `state` (its step is `state["best_step"]`), scoring `state["best_em"]`, with
    `index` (end to end: the index it carries, `E.index_to_save`; else None)."""
    C.save_model(model, parts.tokenizers, out / "best",
                 {**asdict(cfg), "step": state["step"], f"dev_{DEV_METRIC[cfg.task]}": state["best_em"]}, index)
    _record(out)  # listed at once: a kill before the next checkpoint left best/ unlisted, a user's file to --resume


def _mend_best(cfg, model, parts, out: Path, state: dict) -> None:
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
               E.index_to_save(model, index, _reindexed_at(state) == state["step"], cfg.mixed_precision))


def optimizer_step(opt, sched, scaler) -> dict:
    """The optimizer and schedule step; under fp16, the log fields of the gradient scaler."""
    if not scaler.is_enabled():
        opt.step()
        sched.step()
        return {}
    scale = scaler.get_scale()
    scaler.step(opt)  # leaves the weights (and AdamW's moments) alone when a gradient is inf or NaN
    scaler.update()  # halves the scale after a skipped step and never lowers it otherwise
    skipped = scaler.get_scale() < scale
    with warnings.catch_warnings():
        # a skipped first step never called opt.step(); the schedule follows the step count all the same
        warnings.filterwarnings("ignore", r"Detected call of `lr_scheduler\.step\(\)` before", UserWarning)
        sched.step()
    return {"loss_scale": scale, "skipped_inf": skipped}


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
