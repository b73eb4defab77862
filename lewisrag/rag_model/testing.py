"""Tiny random transformers RAG models, for tests and benchmarks (no model hub needed)."""

from __future__ import annotations

import torch
from transformers import BartConfig, DPRConfig, RagConfig, RagSequenceForGeneration, RagTokenForGeneration


def tiny_rag_config(
    vocab: int = 100,
    d_model: int = 32,
    layers: int = 1,
    heads: int = 2,
    ffn: int = 48,
    n_docs: int = 3,
    init_std: float = 0.3,
    label_smoothing: float = 0.0,
    max_positions: int = 128,
):
    """A transformers RagConfig with a DPR question encoder and a BART generator of the given size.

    `init_std` is larger than BART's 0.02 so that random models prefer different tokens under
    different documents; with near-uniform outputs every decoding test would pass trivially.
    """
    q = DPRConfig(
        vocab_size=vocab, hidden_size=d_model, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=ffn, max_position_embeddings=max_positions, initializer_range=init_std,
    )
    g = BartConfig(
        vocab_size=vocab, d_model=d_model, encoder_layers=layers, decoder_layers=layers,
        encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn,
        max_position_embeddings=max_positions, init_std=init_std, dropout=0.0, attention_dropout=0.0,
    )
    return RagConfig.from_question_encoder_generator_configs(q, g, n_docs=n_docs, label_smoothing=label_smoothing)


def tiny_hf_rag(variant: str = "token", seed: int = 0, eos_bias: float = 0.0, **config_kwargs):
    """A transformers RagTokenForGeneration / RagSequenceForGeneration with random weights, in eval mode.

    `eos_bias` raises the end token's logit so that hypotheses end at different lengths.
    """
    torch.manual_seed(seed)
    cls = RagTokenForGeneration if variant == "token" else RagSequenceForGeneration
    model = cls(config=tiny_rag_config(**config_kwargs)).eval()
    with torch.no_grad():  # a non-zero logits bias so that the bias is exercised too
        g = torch.Generator().manual_seed(seed + 1)
        model.generator.final_logits_bias.copy_(torch.randn(model.generator.final_logits_bias.shape, generator=g))
        model.generator.final_logits_bias[0, model.config.generator.eos_token_id] += eos_bias
    return model


def tiny_batch(batch: int, n_docs: int, length: int, target_length: int, vocab: int, seed: int = 0):
    """Random contexts (B*K, L) with some padding, doc scores (B, K) and labels (B, T) in RAG's convention."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch * n_docs, length), generator=g)
    mask = torch.ones_like(ids)
    ids[0, -2:], mask[0, -2:] = 1, 0  # one padded context
    ids[:, 0] = 0  # BART's <s>
    scores = torch.randn(batch, n_docs, generator=g)
    labels = torch.randint(3, vocab, (batch, target_length), generator=g)
    labels[:, 0] = 2  # decoder start token
    labels[0, -2:] = 1  # one padded target
    return ids, mask, scores, labels
