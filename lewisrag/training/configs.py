"""The training commands' settings: DPR (`training.dpr`), RAG fine-tuning (`training.rag`) and the
closed-book baseline (`training.closed_book`), each one frozen dataclass whose fields are the command's
flags.

They stand apart from the code that trains, as transformers keeps a model's configuration apart from its
modeling file: a preset (`experiments.presets`) is built from them, so that `reproduce --preset huge`
is refused in a moment, not after torch and transformers have loaded. Each training module still
exports its own (`from lewisrag.training.rag import RagTrainConfig`).
"""

from __future__ import annotations

from dataclasses import dataclass


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
    q_max_length: int = 32  # question tokens
    p_max_length: int = 128  # passage tokens (title + text); 100 words fit
    batch_size: int = 32  # questions per step; 2x passages (gold + one hard negative each)
    steps: int = 600  # optimizer steps
    lr: float = 1e-3  # AdamW peak learning rate (linear warmup, linear decay)
    warmup: float = 0.1  # share of steps spent warming up
    weight_decay: float = 0.01
    hard_negatives: bool = True  # add one hard negative per question (from hard_negatives_from)
    hard_negatives_from: str = "auto"  # "given": the examples' hard_negative_ids; "bm25": mined over the passages; "auto": given when every question has one, else bm25. The checkpoint records the one used ("none" without)
    self_negatives_at: float = 0.0  # at this share of the steps, add the model's own best-ranked non-gold passage as a second hard negative (0 = never)
    shared: bool = True  # one encoder for both sides while training (saved as two equal encoders): see below
    seed: int = 0
    device: str = "auto"  # where it trains and mines: "auto" (a GPU when one is visible), "cpu" or "cuda[:N]"
    mixed_precision: str = "no"  # "no", "bf16" (CPU or GPU) or "fp16" (GPU only, with a gradient scaler)


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
    save_every: int = 50  # steps between resumable checkpoints (the last step is always saved)
    seed: int = 0  # data order, dropout and every other random choice
    mixed_precision: str = "no"  # "no", "bf16" (CPU or GPU), "fp16" (GPU only, with a gradient scaler): autocast of forward passes
    gradient_checkpointing: bool = False  # recompute activations in the backward pass (transformers' gradient checkpointing)
    compile: bool = False  # torch.compile the generator and the encoders (inductor, dynamic shapes): see `compile_models`
    cpu: bool = False  # stay on the CPU even when a GPU is present
    search_device: str = "auto"  # "auto": a Flat index is searched on the training GPU when its vectors fit; "cpu": FAISS; "gpu"
    shared_retrieval: bool = False  # with several processes: each node's first process searches for all of them (index.shared)


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
