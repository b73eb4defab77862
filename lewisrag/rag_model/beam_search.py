"""Greedy and beam search with transformers' exact selection rules, over any step function.

`step(last_tokens (R,), cur_len) -> logits (R, V)` gives next-token scores for R running rows;
`reorder(rows (R,))` tells the caller's cache which rows survived. The beam search reproduces
transformers' vectorised `_beam_search` (length penalty, early stopping, its -1e9 masking), so the
same scores yield the same sequences. Alongside each hypothesis it keeps the raw (unprocessed)
log-probability sum, which RAG-Sequence fast decoding needs as p(y|x,z).

Shapes: B search batch, W beams, V vocabulary, S max_length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

NEG = -1.0e9  # transformers' "impossible" score; sums with it must match theirs, so not -inf


@dataclass(frozen=True)
class SearchSettings:
    max_length: int  # total length including the decoder start token
    num_beams: int = 1  # W; 1 means greedy
    num_return_sequences: int = 1  # best hypotheses returned per batch row (≤ num_beams)
    length_penalty: float = 1.0  # finished score = sum log p / generated_length ** length_penalty
    early_stopping: bool | str = False  # transformers' meaning: True, False or "never"
    start_id: int = 2  # decoder start token
    eos_ids: tuple[int, ...] = (2,)  # tokens that finish a hypothesis
    pad_id: int | None = 1  # fills finished rows and unused positions


@dataclass
class Hypotheses:
    sequences: torch.Tensor  # (B*n, S') token ids, start token first, padded
    raw_logprob: torch.Tensor  # (B*n,) Σ raw log p over generated tokens that are not padding
    first_logprob: torch.Tensor  # (B*n,) raw log p of the first generated token
    scores: torch.Tensor  # (B*n,) the search's own score (length-penalised for beams)
    lengths: torch.Tensor  # (B*n,) generated tokens, end token included


def _gather(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    while idx.dim() < x.dim():
        idx = idx.unsqueeze(-1)
    return torch.take_along_dim(x, idx, dim=1)


def greedy(step: Callable, batch: int, s: SearchSettings, processors, device="cpu") -> Hypotheses:
    """transformers' greedy search (`_sample` without sampling), step by step."""
    seqs = torch.full((batch, 1), s.start_id, dtype=torch.long, device=device)
    eos = torch.tensor(s.eos_ids, device=device)
    unfinished = torch.ones(batch, dtype=torch.bool, device=device)
    raw, first = torch.zeros(batch, device=device), torch.zeros(batch, device=device)
    lengths = torch.zeros(batch, dtype=torch.long, device=device)
    while True:
        logits = step(seqs[:, -1], seqs.shape[1]).float()  # (B, V)
        raw_lp = F.log_softmax(logits, dim=-1)
        nxt = processors(seqs, logits).argmax(-1)  # (B,)
        if s.pad_id is not None:
            nxt = torch.where(unfinished, nxt, s.pad_id)
        lp = raw_lp.gather(1, nxt[:, None]).squeeze(1) * (nxt != s.pad_id)  # (B,)
        first = lp if seqs.shape[1] == 1 else first
        raw = raw + lp
        lengths += unfinished
        seqs = torch.cat([seqs, nxt[:, None]], dim=1)
        unfinished &= ~(torch.isin(nxt, eos) | (seqs.shape[1] >= s.max_length))
        if not unfinished.any():
            return Hypotheses(seqs, raw, first, raw.clone(), lengths)


def beam_search(step: Callable, reorder: Callable, batch: int, s: SearchSettings, processors, device="cpu") -> Hypotheses:
    """transformers' `_beam_search` (no sampling), with raw log-probabilities tracked per hypothesis.

    Each hypothesis is a dict of per-beam tensors: "seq" (B, W, S) ids, "raw" Σ raw log p,
    "first" raw log p of its first token, "gen" generated length; all (B, W) but "seq".
    """
    w = s.num_beams
    eos = torch.tensor(s.eos_ids, device=device)
    keep = max(2, 1 + len(s.eos_ids)) * w  # candidates kept per step, so W survive even if W end
    top_w = torch.arange(keep, device=device) < w  # (2W,)
    fill = s.pad_id if s.pad_id else s.eos_ids[0]  # transformers' `pad or eos`, 0 included
    seq = torch.full((batch, w, s.max_length), fill, dtype=torch.long, device=device)  # (B, W, S)
    seq[:, :, 0] = s.start_id
    zeros = torch.zeros(batch, w, device=device)
    run = {"seq": seq, "raw": zeros, "first": zeros, "gen": zeros.long()}
    run_scores = zeros.clone()
    run_scores[:, 1:] = NEG  # only beam 0 is live at the start, so beams do not repeat each other
    done = {name: x.clone() for name, x in run.items()}
    done_scores = torch.full((batch, w), NEG, device=device)
    finished = torch.zeros(batch, w, dtype=torch.bool, device=device)
    improvable = torch.ones(batch, 1, dtype=torch.bool, device=device)
    cur = 1
    while True:
        flat = run["seq"][:, :, :cur].reshape(batch * w, cur)  # (B*W, cur)
        raw_lp = F.log_softmax(step(flat[:, -1], cur).float(), dim=-1)  # (B*W, V)
        v = raw_lp.shape[-1]
        lp = processors(flat, raw_lp).view(batch, w, v) + run_scores[:, :, None]  # (B, W, V)
        top_lp, top_idx = torch.topk(lp.view(batch, w * v), k=keep)  # (B, 2W)
        src, tok = top_idx // v, top_idx % v  # (B, 2W) source beam, new token
        top = {name: _gather(x, src) for name, x in run.items()}
        top["seq"][:, :, cur] = tok
        tok_raw = raw_lp.view(batch, w * v).gather(1, top_idx) * (tok != s.pad_id)  # (B, 2W)
        top["raw"] = top["raw"] + tok_raw
        top["first"] = tok_raw if cur == 1 else top["first"]
        top["gen"] = top["gen"] + 1
        hits = torch.isin(tok, eos) | (cur + 1 >= s.max_length)  # (B, 2W)

        live = top_lp + hits.to(torch.float32) * NEG
        nxt = torch.topk(live, k=w)[1]  # (B, W)
        run = {name: _gather(x, nxt) for name, x in top.items()}
        run_scores = _gather(live, nxt)
        done, done_scores, finished = _update_finished(done, done_scores, finished, top, top_lp, hits & top_w,
                                                       improvable, cur, s)
        reorder((_gather(src, nxt) + torch.arange(batch, device=device)[:, None] * w).reshape(-1))  # (B*W,)
        cur += 1
        improvable = _still_improvable(improvable, run_scores, done_scores, finished, cur, s)
        if not (improvable.any() & ~(finished.all() & (s.early_stopping is True)) & ~hits.all()):
            break
    n = s.num_return_sequences
    out_len = 1 + int(done["gen"][:, :n].max())
    return Hypotheses(done["seq"][:, :n, :out_len].reshape(batch * n, out_len), done["raw"][:, :n].reshape(-1),
                      done["first"][:, :n].reshape(-1), done_scores[:, :n].reshape(-1), done["gen"][:, :n].reshape(-1))


def _update_finished(done, done_scores, finished, top, top_lp, just, improvable, cur, s: SearchSettings):
    """Merge the hypotheses that just ended into the W best finished ones, as transformers does."""
    score = top_lp / (cur ** s.length_penalty)  # length penalty over generated tokens
    score += (finished.all(-1, keepdim=True) & (s.early_stopping is True)).to(torch.float32) * NEG
    score += (~improvable).to(torch.float32) * NEG
    score += (~just) * NEG
    merged = torch.cat([done_scores, score], dim=1)  # (B, 3W)
    pick = torch.topk(merged, k=s.num_beams)[1]  # (B, W)
    done = {name: _gather(torch.cat([done[name], top[name]], 1), pick) for name in done}
    return done, _gather(merged, pick), _gather(torch.cat([finished, just], 1), pick)


def _still_improvable(improvable, run_scores, scores, finished, cur, s: SearchSettings) -> torch.Tensor:
    """transformers' early-stop heuristic: can the best running beam still beat the worst finished one?"""
    if s.early_stopping == "never" and s.length_penalty > 0.0:
        best_len = s.max_length - 1
    else:
        best_len = cur - 1
    best_running = run_scores[:, :1] / (best_len ** s.length_penalty)
    worst_done = torch.where(finished, torch.min(scores, dim=1, keepdim=True)[0], NEG)
    return improvable & torch.any(best_running > worst_done, dim=-1, keepdim=True)
