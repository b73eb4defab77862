"""BM25 in place of the dense retriever (Lewis et al. 2020, Table 6's "BM25" rows).

A trained RAG model reads documents that BM25 found, with p(z|x) = softmax of the BM25 scores:
fixed scores, no gradient, and the question encoder is not used at all. The result is the same
`Retrieved` that `RagModel.retrieve` makes, so `RagModel.generate` and `forward` take it as is.

Shape alphabet: B questions, K documents, L generator input length.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from lewisrag.rag_model.model import Retrieved, Tokenizers, generator_input


def bm25_retrieve(model, questions: Sequence[str], index, tokenizers: Tokenizers, n_docs: int) -> Retrieved:
    """Top-`n_docs` passages of `index` (a `lewisrag.index.bm25.BM25Index`) per question, as generator
    inputs built with `model.settings`; doc_scores (B, K) are the BM25 scores, detached."""
    if not 1 <= n_docs <= len(index.passages):
        raise ValueError(f"n_docs must be between 1 and the index's {len(index.passages)} passages, got {n_docs}")
    scores, rows = index.search(list(questions), n_docs)  # (B, K) each
    if scores.shape != (len(questions), n_docs):
        raise ValueError(f"BM25 scores: expected (B, K)={(len(questions), n_docs)}, got {scores.shape}")
    device = next(model.parameters()).device
    doc_scores = torch.as_tensor(np.asarray(scores, dtype=np.float32), device=device)  # (B, K), no grad
    passages = [[index.passages[int(r)] for r in row] for row in rows]
    texts = [generator_input(p.title, p.text, q, model.settings) for q, ps in zip(questions, passages) for p in ps]
    ctx = tokenizers.generator(texts, padding=True, truncation=True, max_length=model.settings.max_combined_length,
                               return_tensors="pt").to(device)  # (B*K, L)
    return Retrieved(ctx["input_ids"], ctx["attention_mask"], doc_scores, np.asarray(rows), passages)
