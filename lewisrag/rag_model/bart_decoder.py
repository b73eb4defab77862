"""BART's decoder run over *groups* of sequences that share one encoded document.

Decoding RAG means many decoder rows per document: beams (RAG-Token, per-document beam search)
or candidate answers (RAG-Sequence thorough scoring). transformers flattens them into one batch
and gives every row its own copy of the document's encoder states and cross-attention keys and
values, re-copied at every beam step. Cross-attention has no causal mask and rows of one group
read the same document, so here a group's rows become extra *query positions* against one
(N, H, L, dh) key/value tensor per document: computed once, never copied.

Rows are laid out document-major: (N documents, G rows per document), so (N, G) ↔ (N*G) is a view.
Only BartForConditionalGeneration-style decoders (post-LayerNorm, learned positions offset 2) are
supported; the arithmetic follows transformers' BartDecoderLayer step by step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class GroupedBartDecoder:
    """Wraps a BartForConditionalGeneration; owns no weights. Shapes: N docs, G rows each, L, T, D."""

    def __init__(self, generator: nn.Module):
        self.model = generator
        self.decoder = generator.get_decoder()
        if not hasattr(self.decoder, "embed_positions") or getattr(self.decoder, "layer_norm", None) is not None:
            raise ValueError(f"grouped decoding supports BART decoders, got {type(self.decoder).__name__}")
        cfg = generator.config
        self.heads = cfg.decoder_attention_heads
        self.act = self.decoder.layers[0].activation_fn

    @torch.no_grad()
    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Encode N documents once; return per layer the cross-attention (keys, values), each (N, H, L, dh)."""
        enc = self.model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        h = enc.last_hidden_state  # (N, L, D)
        return [(self._heads(layer.encoder_attn.k_proj(h)), self._heads(layer.encoder_attn.v_proj(h)))
                for layer in self.decoder.layers]

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        n, length, d = x.shape
        return x.view(n, length, self.heads, d // self.heads).transpose(1, 2)  # (N, H, L, dh)

    @torch.no_grad()
    def hidden(self, tokens: torch.Tensor, start: int, cross: list, cross_mask: torch.Tensor,
               self_cache: list | None = None) -> torch.Tensor:
        """Decoder output states for tokens (N, G, T) at positions start..start+T-1, (N, G, T, D).

        `self_cache` (a list, one (keys, values) per layer, each (N*G, H, start, dh)) is extended in
        place when given; T > 1 without a cache runs causal teacher forcing. cross_mask (N, L) bool.
        """
        n, g, t = tokens.shape
        dec = self.decoder
        pos = torch.arange(start, start + t, device=tokens.device)
        h = dec.embed_tokens(tokens.reshape(n * g, t)) + dec.embed_positions(tokens, position_ids=pos)  # (N*G, T, D)
        h = dec.layernorm_embedding(h)
        mask = cross_mask[:, None, None, :]  # (N, 1, 1, L)
        for i, layer in enumerate(dec.layers):
            h = layer.self_attn_layer_norm(h + self._self_attention(layer.self_attn, h, i, self_cache))
            q = self._heads(layer.encoder_attn.q_proj(h).view(n, g * t, -1))  # (N, H, G*T, dh)
            k, v = cross[i]
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=layer.encoder_attn.scaling)  # (N, H, G*T, dh)
            a = a.transpose(1, 2).reshape(n * g, t, -1)  # (N*G, T, D)
            h = layer.encoder_attn_layer_norm(h + layer.encoder_attn.out_proj(a))
            h = layer.final_layer_norm(h + layer.fc2(self.act(layer.fc1(h))))
        return h.view(n, g, t, -1)  # (N, G, T, D)

    def _self_attention(self, attn: nn.Module, h: torch.Tensor, i: int, cache: list | None) -> torch.Tensor:
        q, k, v = self._heads(attn.q_proj(h)), self._heads(attn.k_proj(h)), self._heads(attn.v_proj(h))  # (N*G, H, T, dh)
        if cache is not None:
            if len(cache) > i:
                k = torch.cat([cache[i][0], k], dim=2)  # (N*G, H, start+T, dh)
                v = torch.cat([cache[i][1], v], dim=2)
                cache[i] = (k, v)
            else:
                cache.append((k, v))
        causal = q.shape[2] > 1
        if causal and k.shape[2] != q.shape[2]:  # is_causal aligns the mask top-left: only without a prefix
            raise ValueError(f"several new positions ({q.shape[2]}) after a cached prefix are not supported")
        a = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=attn.scaling)  # (N*G, H, T, dh)
        return attn.out_proj(a.transpose(1, 2).reshape(h.shape))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The generator's LM head: (..., D) → (..., V), with BART's final_logits_bias."""
        out = self.model.lm_head(hidden)
        bias = getattr(self.model, "final_logits_bias", None)
        return out + bias if bias is not None else out


def reorder_cache(cache: list, rows: torch.Tensor) -> None:
    """Keep self-attention cache rows `rows` (N*G,), in place: the beams that survived a step."""
    for i, (k, v) in enumerate(cache):
        cache[i] = (k.index_select(0, rows), v.index_select(0, rows))
