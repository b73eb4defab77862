"""Batched question answering with a RAG model: retrieve K passages, decode, return the text.

The one answering loop behind training's dev exact match, the reproduce stages, the ablations
(BM25 in place of the dense retriever) and the index-swap matrix.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from lewisrag.rag_model.bm25_adapter import bm25_retrieve


def answer_questions(model, tokenizers, index, questions: Sequence[str], *, n_docs: int | None = None,
                     num_beams: int = 1, max_length: int = 32, batch_size: int = 16, swap: bool = False,
                     bm25=None, on_batch: Callable[[int], None] | None = None) -> list[str]:
    """Decoded answers (greedy, or beam search with `num_beams`), special tokens stripped.

    K is `n_docs` (default: the model's). Passages come from the dense `index`, or from `bm25`
    (a `lewisrag.index.bm25.BM25Index`) when given; `swap` lets the model read an index built by
    another context encoder. The model runs in eval mode and is put back as it was.
    """
    answers: list[str] = []
    was_training = model.training
    model.eval()  # retrieval too must run without dropout
    try:
        with torch.no_grad():
            for i in range(0, len(questions), batch_size):
                chunk = list(questions[i : i + batch_size])
                r = (bm25_retrieve(model, chunk, bm25, tokenizers, n_docs or model.n_docs) if bm25 is not None
                     else model.retrieve(chunk, index, tokenizers, n_docs=n_docs, swap=swap))
                ids = model.generate(r.context_input_ids, r.context_attention_mask, r.doc_scores, n_docs=n_docs,
                                     num_beams=num_beams, max_length=max_length)  # (B, T)
                answers += [a.strip() for a in tokenizers.generator.batch_decode(ids, skip_special_tokens=True)]
                if on_batch:
                    on_batch(len(chunk))
    finally:
        model.train(was_training)
    return answers
