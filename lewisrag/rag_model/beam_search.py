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
    # a generated token left out of raw_logprob, as the scorer's padding (the model's pad, which
    # differs from pad_id where the generation config has none and fills with EOS); None: pad_id
    unscored_id: int | None = None

    @property
    def unscored(self) -> int | None:
        return self.pad_id if self.unscored_id is None else self.unscored_id


@dataclass
class Hypotheses:
    sequences: torch.Tensor  # (B*n, S') token ids, start token first, padded
    raw_logprob: torch.Tensor  # (B*n,) Σ raw log p over generated tokens up to the end, `unscored` ones left out
    first_logprob: torch.Tensor  # (B*n,) raw log p of the first generated token
    scores: torch.Tensor  # (B*n,) the search's own score (length-penalised for beams)
    lengths: torch.Tensor  # (B*n,) generated tokens, end token included


def _gather(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Rows idx (B, M) of x (B, N) or (B, N, S): (B, M) or (B, M, S)."""
    if x.dim() == 3:
        idx = idx[:, :, None].expand(-1, -1, x.shape[2])
    return x.gather(1, idx)


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
        lp = raw_lp.gather(1, nxt[:, None]).squeeze(1) * (unfinished & (nxt != s.unscored))  # (B,)
        first = lp if seqs.shape[1] == 1 else first
        raw = raw + lp
        lengths += unfinished
        seqs = torch.cat([seqs, nxt[:, None]], dim=1)
        unfinished &= ~(torch.isin(nxt, eos) | (seqs.shape[1] >= s.max_length))
        if not unfinished.any():
            return Hypotheses(seqs, raw, first, raw.clone(), lengths)


def beam_search(step: Callable, reorder: Callable, batch: int, s: SearchSettings, processors, device="cpu") -> Hypotheses:
    """transformers' `_beam_search` (no sampling), with raw log-probabilities tracked per hypothesis.

    Running beams: `seq` (B, W, S) ids, `raw` Σ raw log p and `first` raw log p of the first token,
    (B, W) each; all have generated cur-1 tokens. Finished ones, `done`, hold the same fields plus
    "gen", their generated length. Each step gathers the W survivors straight from the old beams,
    and builds the 2W candidates' records only in steps where one of them finishes.
    """
    w = s.num_beams
    eos = torch.tensor(s.eos_ids, dtype=torch.long, device=device)
    keep = max(2, 1 + len(s.eos_ids)) * w  # candidates kept per step, so W survive even if W end
    top_w = torch.arange(keep, device=device) < w  # (2W,)
    beam0 = torch.arange(batch, device=device)[:, None] * w  # (B, 1) flat row of each question's first beam
    fill = s.pad_id if s.pad_id else s.eos_ids[0]  # transformers' `pad or eos`, 0 included
    seq = torch.full((batch, w, s.max_length), fill, dtype=torch.long, device=device)  # (B, W, S)
    seq[:, :, 0] = s.start_id
    raw = first = torch.zeros(batch, w, device=device)
    run_scores = torch.zeros(batch, w, device=device)
    run_scores[:, 1:] = NEG  # only beam 0 is live at the start, so beams do not repeat each other
    done = {"seq": seq.clone(), "raw": raw, "first": first, "gen": torch.zeros_like(seq[:, :, 0])}
    done_scores = torch.full((batch, w), NEG, device=device)
    finished = torch.zeros(batch, w, dtype=torch.bool, device=device)
    improvable = torch.ones(batch, 1, dtype=torch.bool, device=device)
    for cur in range(1, s.max_length):
        ids = seq.view(batch * w, -1)[:, :cur]  # (B*W, cur), a view
        raw_lp = F.log_softmax(step(ids[:, -1], cur).float(), dim=-1)  # (B*W, V)
        v = raw_lp.shape[-1]
        lp = processors(ids, raw_lp).view(batch, w, v) + run_scores[:, :, None]  # (B, W, V)
        top_lp, top_idx = torch.topk(lp.view(batch, w * v), k=keep)  # (B, 2W)
        src, tok = top_idx // v, top_idx % v  # (B, 2W) source beam, new token
        tok_raw = raw_lp.view(batch, w * v).gather(1, top_idx)  # (B, 2W)
        if s.unscored is not None:
            tok_raw = tok_raw * (tok != s.unscored)  # a padding token adds nothing
        last = cur + 1 >= s.max_length
        hits = torch.ones_like(tok, dtype=torch.bool) if last else (tok[:, :, None] == eos).any(-1)  # (B, 2W)
        just = hits & top_w  # (B, 2W) only the W best candidates may finish
        # with none finishing, every merge score is NEG or below: merging could only swap one empty
        # finished slot (never returned) for another, so such steps build no candidate records
        if bool(just.any()):
            cand = {"seq": _gather(seq, src), "raw": _gather(raw, src) + tok_raw,
                    "first": tok_raw if cur == 1 else _gather(first, src), "gen": torch.full_like(tok, cur)}
            cand["seq"][:, :, cur] = tok
            done, done_scores, finished = _update_finished(done, done_scores, finished, cand, top_lp, just,
                                                           improvable, cur, s)
        run_scores, nxt = torch.topk(top_lp.add(hits, alpha=NEG), k=w)  # (B, W) best unfinished candidates
        beam = src.gather(1, nxt)  # (B, W) old beam each survivor extends
        new_raw = tok_raw.gather(1, nxt)  # (B, W)
        seq = _gather(seq, beam)
        seq[:, :, cur] = tok.gather(1, nxt)
        raw = _gather(raw, beam) + new_raw
        first = new_raw if cur == 1 else _gather(first, beam)
        improvable = _still_improvable(improvable, run_scores, done_scores, finished, cur + 1, s)
        if not improvable.any() or (s.early_stopping is True and finished.all()) or hits.all():
            break
        reorder((beam + beam0).view(-1))  # (B*W,) the caller's cache follows the survivors
    n = s.num_return_sequences
    out_len = 1 + int(done["gen"][:, :n].max())
    return Hypotheses(done["seq"][:, :n, :out_len].reshape(batch * n, out_len), done["raw"][:, :n].reshape(-1),
                      done["first"][:, :n].reshape(-1), done_scores[:, :n].reshape(-1), done["gen"][:, :n].reshape(-1))


def _update_finished(done, done_scores, finished, cand, top_lp, just, improvable, cur, s: SearchSettings):
    """Merge the candidates that just ended into the W best finished ones, as transformers does."""
    score = top_lp / (cur ** s.length_penalty)  # length penalty over generated tokens
    if s.early_stopping is True:
        score = score.add(finished.all(-1, keepdim=True), alpha=NEG)  # a full row takes no more
    score = score.add(~improvable, alpha=NEG).add(~just, alpha=NEG)  # (B, 2W)
    merged = torch.cat([done_scores, score], dim=1)  # (B, 3W)
    best, pick = torch.topk(merged, k=s.num_beams)  # (B, W)
    done = {name: _gather(torch.cat([done[name], cand[name]], 1), pick) for name in done}
    return done, best, _gather(torch.cat([finished, just], 1), pick)


def _still_improvable(improvable, run_scores, scores, finished, cur, s: SearchSettings) -> torch.Tensor:
    """transformers' early-stop heuristic: can the best running beam still beat the worst finished one?"""
    if s.early_stopping == "never" and s.length_penalty > 0.0:
        best_len = s.max_length - 1
    else:
        best_len = cur - 1
    best_running = run_scores[:, :1] / (best_len ** s.length_penalty)
    worst_done = torch.where(finished, scores.amin(1, keepdim=True), NEG)
    return improvable & torch.any(best_running > worst_done, dim=-1, keepdim=True)
