"""`RagSettings`: what a RAG checkpoint carries besides its weights (shared by the model and its checkpoints)."""

from __future__ import annotations

from dataclasses import dataclass

VARIANTS = ("token", "sequence")


@dataclass(frozen=True)
class RagSettings:
    """Everything besides the weights that a RAG checkpoint must carry to be used again."""

    variant: str = "token"  # "token" (eq. 2) or "sequence" (eq. 1) marginalization
    n_docs: int = 5  # K, documents retrieved and marginalized per question
    label_smoothing: float = 0.0  # ε of transformers' RAG loss: (1-ε)·NLL + ε/V·(−Σ_v log p(v))
    exclude_bos_score: bool = False  # sequence loss: drop the first target's score when it is BOS
    do_deduplication: bool = True  # sequence decoding: merge identical candidates from different docs
    title_sep: str = " / "  # generator input: prefix + title + title_sep + text + doc_sep + question
    doc_sep: str = " // "  # (transformers' RagRetriever.postprocess_docs builds the same string)
    prefix: str = ""  # prepended to every generator input (T5-style models use one)
    max_combined_length: int = 300  # generator input tokens per (question, document), truncated; a RagModel
    # caps it at its generator's max_position_embeddings (model.fit_to_generator)
    question_tokenizer: str | None = None  # path of the question encoder's tokenizer
    generator_tokenizer: str | None = None  # path of the generator's tokenizer
    index_path: str | None = None  # the index the model was trained with, if any
    index_fingerprint: str | None = None  # that index's context-encoder fingerprint, which the question encoder was
    # trained to search (under --swap too); None: a transformers RAG checkpoint, or a `train rag --swap` run of a
    # DPRQuestionEncoder folder without --context-encoder saved before runs recorded their index's

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        if self.n_docs < 1:
            raise ValueError(f"n_docs must be at least 1, got {self.n_docs}")
