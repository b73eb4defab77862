"""The training commands' settings: DPR (`training.dpr`), RAG fine-tuning (`training.rag`), the
closed-book baseline (`training.closed_book`), the stitched generator (`training.stitched_train`) and
generator pretraining (`training.pretrain`, with its presets), each one frozen dataclass whose fields
are the command's flags; the checks of their values that need no model (`check_rag_flags`,
`check_stitched`, `lr_problem`, ...), and the marker kinds of the folders the commands write.

They stand apart from the code that trains, as transformers keeps a model's configuration apart from its
modeling file: a preset (`experiments.presets`) is built from them, and the commands check their flags
with them, so that `reproduce --preset huge` or `train dpr --lr inf` is refused in a moment, not after
torch and transformers have loaded. Each training module still exports its own
(`from lewisrag.training.rag import RagTrainConfig`, its `KIND`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from lewisrag.data.io import InputError
from lewisrag.data.threads import check_device_flag, resolve_device

# the marker kinds of the folders the training commands write (lewisrag.data.outputs), each module's KIND:
# a command checks its --out against them before its trainer loads
DPR_KIND = "dpr"  # DPR checkpoint folders
RAG_KIND = "rag run"  # training run folders
STITCHED_KIND = "stitched generator"  # the stitched generator's folders
GENERATOR_KIND = "generator"  # generator folders (`pretrain`)

PRECISIONS = ("no", "bf16", "fp16")  # --mixed-precision values; fp16 needs a GPU


def check_precision(mixed_precision: str, device: str) -> str:
    """`device`, once `mixed_precision` is known and possible there (fp16 needs a GPU). A device of
    "auto" is resolved for fp16 alone, so that a command refuses a mistyped name before torch loads.

    >>> check_precision("bf16", "auto")
    'auto'
    """
    if mixed_precision not in PRECISIONS:
        raise InputError("--mixed-precision", f"must be one of {', '.join(PRECISIONS)}, got {mixed_precision!r}")
    if mixed_precision == "fp16" and not resolve_device(device).startswith("cuda"):
        raise InputError("--mixed-precision", "fp16 needs a GPU; use bf16 on the CPU")
    return device


FLOAT32_MAX = float.fromhex("0x1.fffffep+127")  # torch.finfo(torch.float32).max
ADAM_BETA1 = 0.9  # the first-moment decay of every trainer's AdamW (training.optim.adamw: torch's default)
# AdamW's first update divides the learning rate by 1 - beta1 (the bias correction) into a float32 step
# size: past this it overflows, a RuntimeError mid-step
LR_MAX = FLOAT32_MAX * (1 - ADAM_BETA1)


def lr_problem(lr: float) -> str | None:
    """Why `lr` cannot be a learning rate, or None. `lr > 0` alone let inf through (NaN weights, exit 0),
    and 1e40 passed `isfinite` to end in a torch traceback at the first step (3e38 too: the first step
    divides it by 1 - beta1).

    >>> lr_problem(1e-4), lr_problem(float("inf")), lr_problem(3e38)
    (None, 'must be a positive finite number, got inf', 'must be at most 3.4e+37 (AdamW divides it by 1 - beta1 = 0.1 into a float32), got 3e+38')
    """
    if not (math.isfinite(lr) and lr > 0):  # every comparison with NaN is false
        return f"must be a positive finite number, got {lr}"
    if lr > LR_MAX:
        return f"must be at most {LR_MAX:.2g} (AdamW divides it by 1 - beta1 = {1 - ADAM_BETA1:.1g} into a float32), got {lr:g}"
    return None


def optimizer_checks(lr: float, warmup: float, weight_decay: float, max_grad_norm: float) -> list[tuple[bool, str, str]]:
    """(ok, flag, message) for the schedule's numbers (`lr_problem` for the learning rate); every
    comparison with NaN is false, hence `isfinite`.

    >>> [flag for ok, flag, _ in optimizer_checks(float("inf"), 0.1, 0.01, 1.0) if not ok]
    ['--lr']
    >>> [message for ok, _, message in optimizer_checks(0.1, 0.1, 10.0, 1.0) if not ok]
    ['times --lr 0.1 must be below 1 (decoupled decay multiplies the weights by 1 - lr x weight decay), got 10']
    """
    return [
        (lr_problem(lr) is None, "--lr", lr_problem(lr) or ""),
        (0 <= warmup < 1, "--warmup", f"must be in [0, 1), got {warmup}"),
        (math.isfinite(weight_decay) and weight_decay >= 0, "--weight-decay", f"must be a finite number >= 0, got {weight_decay}"),
        # 1e300 was taken, the weights turned to NaN and the error blamed --lr. A decay below 1 passes: the
        # product reaches 1 only with a learning rate above 1, whose divergence rightly names --lr
        (not (math.isfinite(weight_decay) and math.isfinite(lr)) or weight_decay < 1 or lr * weight_decay < 1, "--weight-decay",
         f"times --lr {lr:g} must be below 1 (decoupled decay multiplies the weights by 1 - lr x weight decay), got {weight_decay:g}"),
        (math.isfinite(max_grad_norm) and max_grad_norm >= 0, "--max-grad-norm",
         f"must be a finite number >= 0 (0: no clipping), got {max_grad_norm}"),
    ]


@dataclass(frozen=True)
class DPRTrainConfig:
    init: str | None = None  # local BERT-like checkpoint or DPR encoder folder starting both encoders, or a lewisrag DPR checkpoint to continue; None = small model from scratch
    init_question: str | None = None  # with init_context: a DPRQuestionEncoder (or BERT-like) folder starting the question side
    init_context: str | None = None  # with init_question: a DPRContextEncoder (or BERT-like) folder starting the passage side
    vocab_size: int = 2000  # corpus-trained WordPiece (scratch only); small, so unseen names split into seen pieces (more if the characters alone need more)
    hidden_size: int = 128  # scratch model width
    layers: int = 2  # scratch model depth
    heads: int = 4  # scratch attention heads
    dropout: float = 0.1  # scratch model's hidden dropout (BERT's 0.1)
    attention_dropout: float = 0.1  # scratch model's dropout of attention probabilities (BERT's 0.1); 0 lets the CPU use its fused attention kernel
    # token limits of a scratch model or a BERT-like start; a DPR start keeps its own (a transformers DPR folder's:
    # its positions or its tokenizer's model_max_length; a checkpoint's recorded ones), which the checkpoint records
    q_max_length: int = 32  # question tokens
    p_max_length: int = 128  # passage tokens (title + text); 100 words fit
    batch_size: int = 32  # questions per step; 2x passages (gold + one hard negative each)
    steps: int = 600  # optimizer steps
    lr: float = 1e-3  # AdamW peak learning rate (linear warmup, linear decay)
    warmup: float = 0.1  # share of steps spent warming up
    weight_decay: float = 0.01
    hard_negatives: bool = True  # add one hard negative per question (from hard_negatives_from)
    hard_negatives_from: str = "auto"  # "given": the examples' hard_negative_ids; "bm25": mined over the passages; "auto": given when every question has one, else bm25. The checkpoint records the one used ("none" without)
    self_negatives_at: float = 0.0  # at this share of the steps, add the model's own best-ranked passage that is not gold and holds no answer as a second hard negative (0 = never)
    shared: bool = True  # one encoder for both sides while training (saved as two equal encoders): see below
    seed: int = 0
    device: str = "auto"  # where it trains and mines: "auto" (a GPU when one is visible), "cpu" or "cuda[:N]"
    mixed_precision: str = "no"  # "no", "bf16" (CPU or GPU) or "fp16" (GPU only, with a gradient scaler)


HARD_NEGATIVE_SOURCES = ("auto", "given", "bm25")  # what hard_negatives_from may ask for


def check_init(cfg: DPRTrainConfig) -> None:
    """The starting-point flags: --init alone, or --init-question with --init-context, each an existing folder."""
    if cfg.init and (cfg.init_question or cfg.init_context):
        raise InputError("--init", "give --init (one checkpoint for both encoders) or --init-question with --init-context "
                         "(one each), not both")
    if bool(cfg.init_question) != bool(cfg.init_context):
        missing = "--init-context" if cfg.init_question else "--init-question"
        raise InputError(missing, "--init-question and --init-context go together: the question encoder and the context "
                         "encoder it was trained with (use --init for one checkpoint starting both)")
    for flag, path in (("init", cfg.init), ("init_question", cfg.init_question), ("init_context", cfg.init_context)):
        if path and not Path(path).exists():
            raise InputError(path, "pretrained encoder directory not found", field=flag)


@dataclass(frozen=True)
class RagTrainConfig:
    variant: str = "token"  # "token" (eq. 2) or "sequence" (eq. 1) marginalization
    task: str = "qa"  # "qa", "jeopardy" or "fever" (training.tasks): the dev score, and FEVER's label tokens
    index: str = ""  # dense index directory (FAISS + stored passage vectors), opened memory-mapped
    encoder: str = ""  # DPR checkpoint or transformers DPRQuestionEncoder folder: its question encoder and tokenizer start the retriever
    context_encoder: str | None = None  # with a DPRQuestionEncoder folder: the DPRContextEncoder folder of its pair (index.encoders)
    generator: str = ""  # local transformers BART directory with its tokenizer
    train: str = ""  # training QA examples (the first answer is the target)
    train_kinds: str = ""  # comma-separated question kinds trained on, e.g. "short" ("" = every kind)
    dev: str = ""  # dev examples scored at intervals by the task's metric (exact match, Q-BLEU-1, label accuracy)
    qa_fields: dict[str, str] | None = None  # the QA files' own field names (data.records.read_qa); None = told from the files
    n_docs: int = 5  # K documents marginalized per question
    freeze_retriever: bool = False  # keep the question encoder fixed (the paper's frozen-retriever ablation)
    retriever_lr_scale: float = 1.0  # the question (and a trained context) encoder's learning rate as a multiple of `lr`
    train_context_encoder: bool = False  # train DPR's context encoder too: retrieved passages re-encoded in the step (training.end2end)
    reindex_every: int = 0  # with train_context_encoder: steps between re-encodings of every passage (0 = never)
    swap: bool = False  # accept an index built by another context encoder than the DPR checkpoint's
    steps: int = 200  # optimizer steps
    batch_size: int = 8  # questions per micro-batch across all processes (split evenly between them)
    grad_accum: int = 1  # micro-batches per optimizer step
    lr: float = 1e-4  # peak AdamW learning rate
    warmup: float = 0.1  # share of the steps spent warming up linearly; then linear decay to 0
    weight_decay: float = 0.01  # AdamW decoupled weight decay
    max_grad_norm: float = 1.0  # global gradient-norm clip (0 = none)
    label_smoothing: float = 0.0  # ε of transformers' RAG loss
    max_combined_length: int = 300  # generator input tokens per (question, document)
    max_target_length: int = 32  # answer tokens including the decoder start and end tokens
    eval_every: int = 50  # steps between dev evaluations (0 = never); the best model goes to best/
    eval_questions: int = 200  # dev questions evaluated (the first ones, so every evaluation is comparable)
    eval_beams: int = 1  # beams when decoding dev answers (1 = greedy)
    eval_batch_size: int = 16  # dev questions decoded at once
    save_every: int = 50  # steps between resumable checkpoints (the last step is always saved, and each new best before best/)
    seed: int = 0  # data order, dropout and every other random choice
    mixed_precision: str = "no"  # "no", "bf16" (CPU or GPU), "fp16" (GPU only, with a gradient scaler): autocast of forward passes
    gradient_checkpointing: bool = False  # recompute activations in the backward pass (transformers' gradient checkpointing)
    compile: bool = False  # torch.compile the generator and the encoders (inductor, dynamic shapes): see `compile_models`
    cpu: bool = False  # stay on the CPU even when a GPU is present
    search_device: str = "auto"  # "auto": a Flat index is searched on the training GPU when its vectors fit; "cpu": FAISS; "gpu"
    shared_retrieval: bool = False  # with several processes: each node's first process searches for all of them (index.shared)


TASKS = ("qa", "jeopardy", "fever")  # --task values (training.tasks)
# --variant values: rag_model.settings' VARIANTS, which loads torch with its package (tests/test_cli_fast_refusal.py holds them equal)
VARIANTS = ("token", "sequence")
SEARCH_DEVICES = ("auto", "cpu", "gpu")  # --search-device values


def check_task(task: str) -> None:
    if task not in TASKS:
        raise InputError("--task", f"unknown task '{task}' (one of {', '.join(TASKS)})")


def check_rag_flags(cfg: RagTrainConfig, processes: int = 1) -> None:
    """Flag values that cannot work, named by their CLI flag; `processes`, the processes a batch splits
    over: `train rag` checks before accelerate has counted them, `rag_data.check_config` again once it
    has, and then the input paths."""
    checks = [
        (cfg.variant in VARIANTS, "--variant", f"must be one of {', '.join(VARIANTS)}"),
        (cfg.task in TASKS, "--task", f"must be one of {', '.join(TASKS)}"),
        (cfg.mixed_precision in PRECISIONS, "--mixed-precision", f"must be one of {', '.join(PRECISIONS)}"),
        *((getattr(cfg, name) >= 1, flag, f"must be at least 1, got {getattr(cfg, name)}") for name, flag in (
            ("steps", "--steps"), ("batch_size", "--batch-size"), ("grad_accum", "--grad-accum"), ("n_docs", "--n-docs"))),
        (cfg.batch_size % processes == 0, "--batch-size", f"{cfg.batch_size} does not split evenly over {processes} processes"),
        (cfg.eval_every >= 0, "--eval-every", f"must be at least 0 (0: never), got {cfg.eval_every}"),
        (cfg.save_every >= 1, "--save-every", f"must be at least 1, got {cfg.save_every}"),
        # 0 questions logged "dev_em": NaN and exited 0; -1 was read as a slice; 0 beams or batch a traceback
        (cfg.eval_questions >= 1, "--eval-questions", f"must be at least 1, got {cfg.eval_questions}"),
        (1 <= cfg.eval_beams <= 1024, "--eval-beams", f"must be between 1 and 1024, got {cfg.eval_beams}"),
        (cfg.eval_batch_size >= 1, "--eval-batch-size", f"must be at least 1, got {cfg.eval_batch_size}"),
        # tokenizers read max_length 0 or 1 as "no truncation", and a negative one is a traceback
        (cfg.max_combined_length >= 2, "--max-combined-length", f"must be at least 2, got {cfg.max_combined_length}"),
        (cfg.max_target_length >= 2, "--max-target-length", f"must be at least 2 (start and end tokens), got {cfg.max_target_length}"),
        *optimizer_checks(cfg.lr, cfg.warmup, cfg.weight_decay, cfg.max_grad_norm),
        (0 <= cfg.label_smoothing < 1, "--label-smoothing", f"must be in [0, 1), got {cfg.label_smoothing}"),
        (math.isfinite(cfg.retriever_lr_scale) and cfg.retriever_lr_scale >= 0, "--retriever-lr-scale",
         "must be a finite number >= 0"),
        # the encoders' learning rate, --lr times the scale: 1e300 overflowed AdamW's float32 step, a traceback
        (not (cfg.retriever_lr_scale > 0 and math.isfinite(cfg.retriever_lr_scale) and lr_problem(cfg.lr) is None)
         or lr_problem(cfg.lr * cfg.retriever_lr_scale) is None, "--retriever-lr-scale",
         f"times --lr {cfg.lr:g} is the encoders' learning rate, which {lr_problem(cfg.lr * cfg.retriever_lr_scale)}"),
        (cfg.search_device in SEARCH_DEVICES, "--search-device", f"must be one of {', '.join(SEARCH_DEVICES)}"),
        (cfg.reindex_every >= 0, "--reindex-every", f"must be at least 0, got {cfg.reindex_every}"),
        (cfg.train_context_encoder or not cfg.reindex_every, "--reindex-every",
         "re-encodes the index with the context encoder being trained: it needs --train-context-encoder"),
        (not (cfg.train_context_encoder and cfg.shared_retrieval), "--shared-retrieval",
         "cannot be combined with --train-context-encoder (every process re-encodes and searches its own index)"),
        # flags that would be ignored in silence
        (cfg.reindex_every <= cfg.steps, "--reindex-every", f"{cfg.reindex_every} is past --steps {cfg.steps}: it would never re-encode"),
        (cfg.task != "fever" or cfg.eval_beams == 1, "--eval-beams",
         "does not apply with --task fever: its dev labels are scored by log-probability, not decoded"),
        # the context encoder's learning rate is --lr times the scale: at 0 the run re-encoded with the weights it started from
        (not (cfg.train_context_encoder and cfg.retriever_lr_scale == 0), "--retriever-lr-scale",
         "0 leaves --train-context-encoder nothing to train (its learning rate is --lr times the scale): drop "
         "--train-context-encoder to keep the context encoder fixed"),
        (not cfg.freeze_retriever or cfg.train_context_encoder or cfg.retriever_lr_scale == 1.0, "--retriever-lr-scale",
         "has nothing to scale: --freeze-retriever keeps the question encoder fixed (add --train-context-encoder to train the other)"),
    ]
    for ok, flag, message in checks:
        if not ok:
            raise InputError(flag, message)


@dataclass(frozen=True)
class ClosedBookConfig:
    generator: str = ""  # local transformers BART directory with its tokenizer (the RAG runs' starting point)
    task: str = "qa"  # "qa", "jeopardy" or "fever": FEVER's labels become single tokens, as in the RAG runs (training.tasks)
    train: str = ""  # training QA examples (the first answer is the target), the RAG runs' file
    train_kinds: str = ""  # comma-separated question kinds trained on, as the RAG runs ("" = every kind)
    steps: int = 200  # optimizer steps
    batch_size: int = 8  # questions per step
    lr: float = 1e-4  # peak AdamW learning rate (linear warmup, then linear decay to 0)
    warmup: float = 0.1  # share of the steps spent warming up
    weight_decay: float = 0.01  # AdamW decoupled weight decay
    max_grad_norm: float = 1.0  # global gradient-norm clip (0 = none)
    max_source_length: int = 64  # question tokens
    max_target_length: int = 32  # answer tokens including the decoder start and end tokens
    seed: int = 0  # data order and dropout
    device: str = "auto"  # "auto" (a GPU when one is visible), "cpu" or "cuda[:N]"
    mixed_precision: str = "no"  # "no", "bf16" (CPU or GPU), "fp16" (GPU only, with a gradient scaler)


@dataclass(frozen=True)
class StitchedTrainConfig:
    index: str = ""  # dense index directory the passages are retrieved from (snapshot A)
    encoder: str = ""  # DPR checkpoint or DPRQuestionEncoder folder whose question encoder searches it ("" = the index's own)
    context_encoder: str = ""  # with a DPRQuestionEncoder folder: the DPRContextEncoder folder of its pair
    generator: str = ""  # starting seq2seq checkpoint (BART directory with its tokenizer)
    train: str = ""  # training QA examples; those with an answer and a gold passage are used
    qa_fields: dict[str, str] | None = None  # the QA file's own field names (data.records.read_qa); None = told from the file
    train_kinds: str = ""  # comma-separated question kinds trained on, e.g. "short" ("" = every kind)
    k: int = 5  # passages stitched into each input
    steps: int = 200  # optimizer steps
    batch_size: int = 8  # examples per step
    lr: float = 1e-4  # peak AdamW learning rate
    warmup: float = 0.1  # share of steps warming up linearly; then linear decay to 0
    weight_decay: float = 0.01  # AdamW decoupled weight decay
    max_grad_norm: float = 1.0  # global gradient-norm clip (0 = none)
    max_input_length: int = 1024  # stitched input tokens; a BART with fewer positions is extended to this many
    max_target_length: int | None = 40  # target tokens: the answer and its citation; None: the longest cited answer
    question_last: bool = False  # stitch the question after the passages (StitchSettings.question_last)
    mixed_k: bool = False  # each example stitches 1..k passages (gold among them), a curriculum from one-passage reading
    gold_position: str = "random"  # "random": the gold passage at a random position; "retrieved": where the retriever ranked it (last if missed)
    cite_first: bool = False  # the target cites before it answers ("[3] Tomgasze") instead of after ("Tomgasze [3]")
    seed: int = 0  # batch order and gold positions
    device: str = "auto"  # "auto" (a GPU when one is visible), "cpu" or "cuda[:N]"
    mixed_precision: str = "no"  # "no", "bf16" (CPU or GPU) or "fp16" (GPU only, with a gradient scaler)


def check_stitched(cfg: StitchedTrainConfig) -> None:
    """The stitched trainer's flag values, before anything is read: the counts, the schedule's numbers, the
    gold position, the device and the mixed precision (torch loads only to see a GPU named, or fp16's on auto)."""
    if cfg.k < 1 or cfg.steps < 1 or cfg.batch_size < 1:
        raise InputError("--n-docs/--steps/--batch-size", "must all be at least 1")
    for ok, flag, message in optimizer_checks(cfg.lr, cfg.warmup, cfg.weight_decay, cfg.max_grad_norm):
        if not ok:
            raise InputError(flag, message)
    if cfg.gold_position not in ("random", "retrieved"):
        raise InputError("--gold-position", f"must be random or retrieved, got '{cfg.gold_position}'")
    check_precision(cfg.mixed_precision, check_device_flag(cfg.device))


SPECIALS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")  # the pretrained tokenizer's special tokens, BART's order: ids 0..4
MIN_VOCAB = 256 + len(SPECIALS)  # the byte alphabet and the specials: BPE's tokenizer never has fewer


# Text infilling (`pretrain_data.mask_spans`) places Poisson(poisson_lambda)-long spans at random with one
# unmasked token between two spans, and gives up after 20 tries a token: past a share that depends on
# the span length it runs out of room (asked 0.8 at lambda 3, it hid 0.63 of every passage). Measured on
# passages of 12-158 tokens, it hides within 2% of these shares: (smallest poisson_lambda, largest mask_ratio)
MASK_RATIO_LIMITS = ((3.0, 0.6), (1.5, 0.5), (0.0, 0.4))


def max_mask_ratio(poisson_lambda: float) -> float:
    """The largest mask_ratio text infilling delivers with spans of mean length `poisson_lambda`.

    >>> max_mask_ratio(3.0), max_mask_ratio(2.0), max_mask_ratio(1.0)
    (0.6, 0.5, 0.4)
    """
    return next((ratio for lam, ratio in MASK_RATIO_LIMITS if poisson_lambda >= lam), MASK_RATIO_LIMITS[-1][1])  # below 0: spans of 1


@dataclass(frozen=True)
class PretrainConfig:
    vocab_size: int = 4000  # byte-level BPE trained on fresh text; small, so names split into shared syllable pieces
    d_model: int = 128  # width
    encoder_layers: int = 2  # depth of the encoder
    decoder_layers: int = 2  # depth of the decoder
    heads: int = 4  # attention heads (encoder and decoder)
    ffn_dim: int = 512  # feed-forward width
    init_std: float | None = None  # weight init std; None = 1/sqrt(d_model) (0.02 makes the encoder collapse)
    max_source_length: int = 192  # generator input tokens (a world passage has at most 100 words)
    max_target_length: int = 160  # target tokens (a denoised passage, or a long-form answer)
    qa_batch_size: int = 16  # reading-comprehension examples per step
    denoise_batch_size: int = 8  # denoised passages per step (0: no denoising)
    denoise_weight: float = 1.0  # weight of the denoising loss next to the QA loss
    qa_start: float = 0.0  # share of training before QA starts (denoising only until then)
    snapshot_b_share: float = 0.25  # share of questions in snapshot B's wording and of passages drawn from B, ~11% then in B's wording (docs/recipe.md); 0: A's only
    long_form: bool = False  # also train on long-form questions (their 40-token targets triple a QA step's cost)
    mask_ratio: float = 0.3  # share of a passage's tokens hidden by text infilling (BART: 0.3; at most max_mask_ratio(poisson_lambda))
    poisson_lambda: float = 3.0  # mean masked span length (BART: 3)
    lr: float = 1e-3  # AdamW peak learning rate
    warmup_steps: int = 100  # linear warmup
    final_lr_ratio: float = 0.1  # cosine decay ends at lr * this
    weight_decay: float = 0.01  # AdamW weight decay
    tokenizer_docs: int = 20000  # fresh passages (plus their questions) the tokenizer is trained on
    eval_every: float = 3.0  # minutes of training between learning-curve points (0 = never: the final measurement alone)
    eval_size: int = 300  # world test questions per curve point (the final evaluation uses all)
    world_seed: int = 0  # the built-in world whose test split is measured (never trained on)
    world_entities: int = 2000  # its size (the small preset's world)
    steps: int | None = None  # stop after this many optimizer steps (deterministic) ...
    minutes: float | None = None  # ... or after this many minutes of training (evaluation excluded)
    seed: int = 0  # model init and the fresh-text streams
    save_fp16: bool = True  # store weights in fp16 (half the size); loading upcasts to fp32
    lang: str = "en"  # the language of the fresh text, the tokenizer and the world measured ("en" or "zh")
    device: str = "auto"  # where it trains and is measured: "auto" (a GPU when one is visible), "cpu" or "cuda[:N]"

    def __post_init__(self):
        if self.lang not in ("en", "zh"):
            raise ValueError(f"lang must be en or zh, got {self.lang!r}")
        if (self.steps is None) == (self.minutes is None):
            raise ValueError("give exactly one of steps and minutes")
        if self.d_model % self.heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by heads {self.heads}")
        if (why := lr_problem(self.lr)) is not None:  # `lr > 0` let 1e40 through: a torch traceback at the first update
            raise ValueError(f"lr {why}")
        if not self.denoise_weight >= 0:
            raise ValueError("denoise_weight must be at least 0")
        if self.mask_ratio > (most := max_mask_ratio(self.poisson_lambda)):  # 0.8 masked 0.63, in silence
            raise ValueError(f"mask_ratio {self.mask_ratio:g} is more than text infilling can hide with poisson_lambda "
                             f"{self.poisson_lambda:g}: at most {most:g} (each span keeps one unmasked token beside it)")
        if not (self.denoise_batch_size and self.denoise_weight) and not (self.qa_batch_size and self.qa_start == 0):
            # every step trains something: without denoising, QA from the first step
            raise ValueError("without denoising (denoise_batch_size or denoise_weight 0), qa_batch_size must be at least 1 "
                             f"and qa_start 0, got qa_batch_size {self.qa_batch_size}, qa_start {self.qa_start}")


PRETRAIN_PRESETS = {
    "tiny": PretrainConfig(vocab_size=600, d_model=32, encoder_layers=1, decoder_layers=1, heads=2, ffn_dim=64,
                           qa_batch_size=4, denoise_batch_size=2, warmup_steps=2, tokenizer_docs=300,
                           eval_size=20, world_entities=60, steps=4),
    "small": PretrainConfig(steps=6000, lr=2e-3),  # the shipped generator-small: test EM 0.970 (docs/recipe.md); lr 1e-3 reached 0.86
}
# A preset's budget in another language, where it differs: the Chinese small generator starts to copy
# made-up place, currency and language names only after about 7,000 steps (0.56 EM at 6,000, 0.99 at
# 12,000: docs/recipe.md), so its schedule is twice as long.
PRETRAIN_LANG_STEPS = {("small", "zh"): 12000}


def pretrain_preset(name: str, **overrides) -> PretrainConfig:
    """A pretraining preset with some fields replaced; steps and minutes replace each other."""
    if name not in PRETRAIN_PRESETS:
        raise InputError("--preset", f"unknown preset {name!r}; choose one of {', '.join(PRETRAIN_PRESETS)}")
    base = PRETRAIN_PRESETS[name]
    for flag in ("steps", "minutes"):
        if overrides.get(flag) is not None and not (math.isfinite(overrides[flag]) and overrides[flag] > 0):
            raise InputError(f"--{flag}", f"must be a positive finite number, got {overrides[flag]}")  # inf trained forever
    budget = {}  # the preset's budget unless one is given: steps and minutes replace each other
    if (name, overrides.get("lang")) in PRETRAIN_LANG_STEPS:
        budget = {"steps": PRETRAIN_LANG_STEPS[name, overrides["lang"]], "minutes": None}
    if overrides.get("minutes") is not None:
        budget = {"steps": None, "minutes": overrides["minutes"]}
    elif overrides.get("steps") is not None:
        budget = {"steps": overrides["steps"], "minutes": None}
    rest = {k: v for k, v in overrides.items() if v is not None and k not in ("steps", "minutes")}
    return replace(base, **rest, **budget)
