"""The paper's math: RAG-Sequence and RAG-Token marginalization over retrieved documents.

Lewis et al. 2020 (arXiv 2005.11401), section 2.1:

    RAG-Sequence  p(y|x) ≈ Σ_z p(z|x) Π_i p(y_i | x, z, y_<i)          (eq. 1)
    RAG-Token     p(y|x) ≈ Π_i Σ_z p(z|x) p(y_i | x, z, y_<i)          (eq. 2)

where p(z|x) ∝ exp(d(z)·q(x)) over the top-K retrieved documents (eq. 3).

Pure functions, tensors in and out. Shape alphabet: B batch, K retrieved docs, T target length,
V vocabulary. Per-document generator logits arrive as (B*K, T, V), rows ordered question-major
(the K documents of question 0, then of question 1, ...), as transformers' RAG lays them out.
Log-probabilities may be passed instead of logits: log-softmax is idempotent.

Labels follow transformers' RAG convention: `labels` are fed to the decoder as they are, so the
token predicted at position t is labels[:, t + 1] and the last position predicts padding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _check_shapes(logits: torch.Tensor, doc_scores: torch.Tensor, target: torch.Tensor | None = None) -> tuple[int, int]:
    """Return (B, K) after checking logits (B*K, T, V), doc_scores (B, K), target (B, T)."""
    if doc_scores.dim() != 2:
        raise ValueError(f"doc_scores: expected (B, K), got {tuple(doc_scores.shape)}")
    b, k = doc_scores.shape
    if logits.dim() != 3 or logits.shape[0] != b * k:
        raise ValueError(f"logits: expected (B*K={b * k}, T, V), got {tuple(logits.shape)}")
    if target is not None and tuple(target.shape) != (b, logits.shape[1]):
        raise ValueError(f"labels: expected (B, T)=({b}, {logits.shape[1]}), got {tuple(target.shape)}")
    return b, k


def doc_log_prior(doc_scores: torch.Tensor) -> torch.Tensor:
    """log p(z|x): a log-softmax of the retrieval scores over the K documents (eq. 3).

    >>> doc_log_prior(torch.tensor([[0.0, 0.0]])).exp()
    tensor([[0.5000, 0.5000]])
    """
    if doc_scores.dim() != 2:
        raise ValueError(f"doc_scores: expected (B, K), got {tuple(doc_scores.shape)}")
    return F.log_softmax(doc_scores, dim=1)  # (B, K)


def shift_labels_left(labels: torch.Tensor, pad_id: int) -> torch.Tensor:
    """The token each decoder position predicts: labels[:, t + 1], and padding at the end.

    >>> shift_labels_left(torch.tensor([[2, 0, 7, 2]]), pad_id=1)
    tensor([[0, 7, 2, 1]])
    """
    return torch.cat([labels[:, 1:], labels.new_full((labels.shape[0], 1), pad_id)], dim=1)  # (B, T)


def _flush_subnormals(grad: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """`grad` with the entries below the dtype's smallest normal number (subnormals) set to zero.

    Subnormals arise here when exp(x − max) underflows for very unlikely tokens and when a small
    document posterior scales a row of probabilities. Without flush-to-zero, many CPUs (Intel's
    among them) run the lm_head products that consume this gradient (g @ W, gᵀ @ h) an order of
    magnitude slower on them. Each zeroed entry is under 2^-126 in float32, below the rounding
    error of any sum that also holds one of the gradient's non-negligible entries. One elementwise
    pass, where the gradient is made: torch.set_flush_denormal is per-thread global state that
    would not reach every intra-op worker thread.
    """
    return torch.hardshrink(grad, torch.finfo(grad.dtype).tiny, out=grad if in_place else None)


class _FlushSubnormalGrad(torch.autograd.Function):
    """Identity forward; the backward flushes its gradient's subnormals (`_flush_subnormals`)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:
        return _flush_subnormals(g)  # not in place: g may also be held by a hook or retain_grad


class _TargetLogProb(torch.autograd.Function):
    """log p(target) and Σ_v log p(v) per position, with one exponential per vocabulary entry.

    Both directions need softmax(x) over the vocabulary, and its exponentials are what the loss head
    spends its time on. When a gradient is wanted, the forward computes it once and keeps it for the
    backward, which turns it into the gradient in place from the closed form
    d/dx = onehot·g_t + g_s − softmax(x)·(g_t + V·g_s): one (N, T, V) tensor in all. Autograd through
    log_softmax → gather → sum keeps the log-probs, builds three such tensors and takes the
    exponentials a second time in its backward. Without a gradient (decoding) nothing of that size
    is written.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, want_sum: bool):
        v = logits.shape[-1]
        idx = target.unsqueeze(-1)  # (N, T, 1)
        probs = None
        if ctx.needs_input_grad[0]:
            probs = torch.softmax(logits, dim=-1)  # (N, T, V), kept for the backward
            tgt = probs.gather(-1, idx).squeeze(-1).log()  # (N, T)
            tiny = tgt < -80.0  # p(target) near float32's underflow: log of the rounded value is inexact
            if tiny.any():
                tgt[tiny] = F.log_softmax(logits[tiny], dim=-1).gather(-1, target[tiny].unsqueeze(-1)).squeeze(-1)
        else:  # scoring only (decoding): log-softmax a block of rows at a time, nothing of size (N, T, V) written
            flat, rows_idx = logits.reshape(-1, v), idx.reshape(-1, 1)  # (N*T, V), (N*T, 1)
            rows = max(1, 2**20 // v)  # ~4 MB float32 blocks, which stay in cache
            tgt = torch.cat([F.log_softmax(flat[i:i + rows], dim=-1).gather(1, rows_idx[i:i + rows])
                             for i in range(0, flat.shape[0], rows)]).view(target.shape)  # (N, T)
        if want_sum:  # Σ_v log p(v) = Σ_v x_v − V·logsumexp(x), and logsumexp(x) = x_target − log p(target)
            lse = logits.gather(-1, idx).squeeze(-1) - tgt  # (N, T)
            total = logits.sum(-1) - v * lse  # (N, T)
        else:
            total = torch.zeros_like(tgt)
        if probs is not None:
            ctx.save_for_backward(probs, target)
        ctx.want_sum = want_sum
        return tgt, total

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_tgt: torch.Tensor, g_total: torch.Tensor):
        probs, target = ctx.saved_tensors
        v = probs.shape[-1]
        grad = probs  # consumed in place: a second backward through this graph raises (version counter)
        if ctx.want_sum:
            grad.mul_(-(g_tgt + v * g_total).unsqueeze(-1))
            grad.add_(g_total.unsqueeze(-1))
        else:
            grad.mul_(-g_tgt.unsqueeze(-1))
        grad.scatter_add_(-1, target.unsqueeze(-1), g_tgt.unsqueeze(-1))
        return _flush_subnormals(grad, in_place=True), None, None


def target_logprobs(logits: torch.Tensor, target: torch.Tensor, with_sum: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(target_t), Σ_v log p(v)_t) for logits (N, T, V) and target (N, T); each (N, T).

    The sum is what label smoothing needs; it is zeros unless `with_sum`.

    >>> lp, s = target_logprobs(torch.zeros(1, 1, 4), torch.tensor([[3]]), with_sum=True)
    >>> round(lp.item(), 4), round(s.item(), 4)   # log(1/4), 4·log(1/4)
    (-1.3863, -5.5452)
    """
    if logits.dim() != 3 or tuple(target.shape) != tuple(logits.shape[:2]):
        raise ValueError(f"expected logits (N, T, V) and target (N, T), got {tuple(logits.shape)} and {tuple(target.shape)}")
    return _TargetLogProb.apply(logits, target, with_sum)


def _finish(nll: torch.Tensor, smooth: torch.Tensor, epsilon: float, vocab: int, reduce: bool) -> torch.Tensor:
    """transformers' label smoothing: (1 − ε)·NLL + ε/V · (−Σ_v log p(v)), summed over the batch if `reduce`."""
    if reduce:
        nll, smooth = nll.sum(), smooth.sum()
    return (1.0 - epsilon) * nll + (epsilon / vocab) * smooth


def rag_sequence_nll(
    logits: torch.Tensor,
    doc_scores: torch.Tensor,
    labels: torch.Tensor,
    pad_id: int,
    epsilon: float = 0.0,
    reduce: bool = False,
    exclude_first: bool | torch.Tensor = False,
) -> torch.Tensor:
    """RAG-Sequence negative log-likelihood, −log Σ_z p(z|x) Π_t p(y_t|x,z,y_<t) (eq. 1).

    logits (B*K, T, V), doc_scores (B, K), labels (B, T) in transformers' convention.
    Returns (B,), or a scalar sum if `reduce`. `exclude_first` (a bool, or a (B,) bool mask) drops
    the first predicted token's score, as transformers' `exclude_bos_score` does for a BOS token.
    Equals transformers' `RagSequenceForGeneration.get_nll`.

    With one document and a uniform 4-token vocabulary, a 2-token answer has NLL 2·log 4:

    >>> y = torch.tensor([[2, 0, 3]])    # decoder start, then the two predicted tokens
    >>> round(rag_sequence_nll(torch.zeros(1, 3, 4), torch.zeros(1, 1), y, pad_id=1).item(), 4)
    2.7726
    """
    b, k = _check_shapes(logits, doc_scores, labels)
    t, v = logits.shape[1], logits.shape[2]
    target = shift_labels_left(labels, pad_id)  # (B, T)
    tgt, total = target_logprobs(logits, target.repeat_interleave(k, dim=0), with_sum=epsilon != 0.0)  # (B*K, T)
    tgt, total = tgt.view(b, k, t), total.view(b, k, t)  # (B, K, T)
    return sequence_nll_from_token_logprobs(tgt, total, doc_scores, target, pad_id, v, epsilon, reduce, exclude_first)


def sequence_nll_from_token_logprobs(
    tgt: torch.Tensor,
    total: torch.Tensor,
    doc_scores: torch.Tensor,
    target: torch.Tensor,
    pad_id: int,
    vocab: int,
    epsilon: float = 0.0,
    reduce: bool = False,
    exclude_first: bool | torch.Tensor = False,
) -> torch.Tensor:
    """`rag_sequence_nll` from per-document target log-probs tgt (B, K, T) and Σ_v log p(v) total (B, K, T).

    `target` (B, T) is already shifted (`shift_labels_left`). Decoding uses this form: it computes
    the log-probs in chunks and never holds the (B, K, T, V) logits.
    """
    b, k, t = tgt.shape
    if tuple(doc_scores.shape) != (b, k) or tuple(target.shape) != (b, t) or total.shape != tgt.shape:
        raise ValueError(f"expected tgt/total (B, K, T), doc_scores (B, K), target (B, T); got {tuple(tgt.shape)}, "
                         f"{tuple(total.shape)}, {tuple(doc_scores.shape)}, {tuple(target.shape)}")
    keep = target.ne(pad_id).unsqueeze(1).to(tgt.dtype)  # (B, 1, T)
    prior = doc_log_prior(doc_scores)  # (B, K)
    # transformers adds log p(z|x) to every vocabulary entry of the *second* target position, so
    # that the prior survives `exclude_bos_score` dropping the first; the pad mask applies after,
    # and the smoothing sum therefore sees the prior V times. Reproduced as is for parity.
    at_second = torch.zeros(t, dtype=tgt.dtype, device=tgt.device)
    if t >= 2:
        at_second[1] = 1.0
    ll = (tgt + prior.unsqueeze(-1) * at_second) * keep  # (B, K, T)
    smooth = (total + vocab * prior.unsqueeze(-1) * at_second) * keep  # (B, K, T)
    first = torch.as_tensor(exclude_first, device=ll.device).expand(b)  # (B,)
    scored = torch.ones(b, 1, t, dtype=ll.dtype, device=ll.device)  # (B, 1, T)
    scored[:, 0, 0] = (~first.bool()).to(ll.dtype)
    nll = -torch.logsumexp((ll * scored).sum(2), dim=1)  # (B,)
    smooth_nll = -torch.logsumexp(smooth.sum(2), dim=1)  # (B,)
    return _finish(nll, smooth_nll, epsilon, vocab, reduce)


def rag_token_marginal_logprobs(logits: torch.Tensor, doc_scores: torch.Tensor) -> torch.Tensor:
    """log p(y_t | x, y_<t) = log Σ_z p(z|x) p(y_t|x,z,y_<t), the per-token mixture of eq. 2.

    logits (B*K, T, V), doc_scores (B, K) → (B, T, V) log-probabilities that sum to one over V.
    This is what RAG-Token decoding picks tokens from.
    """
    b, k = _check_shapes(logits, doc_scores)
    logprobs = F.log_softmax(logits, dim=-1).view(b, k, logits.shape[1], logits.shape[2])  # (B, K, T, V)
    prior = doc_log_prior(doc_scores)  # (B, K)
    return torch.logsumexp(logprobs + prior[:, :, None, None], dim=1)  # (B, T, V)


def rag_token_nll(
    logits: torch.Tensor,
    doc_scores: torch.Tensor,
    labels: torch.Tensor,
    pad_id: int,
    epsilon: float = 0.0,
    reduce: bool = False,
) -> torch.Tensor:
    """RAG-Token negative log-likelihood, −Σ_t log Σ_z p(z|x) p(y_t|x,z,y_<t) (eq. 2).

    logits (B*K, T, V), doc_scores (B, K), labels (B, T). Returns (B,), or a scalar if `reduce`.
    Equals transformers' `RagTokenForGeneration.get_nll`. Without label smoothing only the target
    token's log-probability per document is needed, so the (B, T, V) mixture is never built; with
    smoothing, Σ_v log p(v) of the mixture needs it.

    >>> y = torch.tensor([[2, 0, 3]])
    >>> round(rag_token_nll(torch.zeros(2, 3, 4), torch.zeros(1, 2), y, pad_id=1).item(), 4)
    2.7726
    """
    b, k = _check_shapes(logits, doc_scores, labels)
    t, v = logits.shape[1], logits.shape[2]
    target = shift_labels_left(labels, pad_id)  # (B, T)
    keep = target.ne(pad_id).to(logits.dtype)  # (B, T)
    prior = doc_log_prior(doc_scores)  # (B, K)
    if epsilon == 0.0:
        tgt, _ = target_logprobs(logits, target.repeat_interleave(k, dim=0))
        per_token = torch.logsumexp(tgt.view(b, k, t) + prior.unsqueeze(-1), dim=1)  # (B, T)
        nll = -(per_token * keep).sum(1)  # (B,)
        return _finish(nll, torch.zeros_like(nll), 0.0, v, reduce)
    # autograd's log-softmax and logsumexp backward leave subnormals in the logits' gradient too
    marginal = rag_token_marginal_logprobs(_FlushSubnormalGrad.apply(logits), doc_scores)  # (B, T, V)
    ll = marginal.gather(-1, target.unsqueeze(-1)).squeeze(-1) * keep  # (B, T)
    smooth = marginal.sum(-1) * keep  # (B, T)
    return _finish(-ll.sum(1), -smooth.sum(1), epsilon, v, reduce)


def rag_sequence_doc_posterior(logits: torch.Tensor, doc_scores: torch.Tensor, labels: torch.Tensor, pad_id: int) -> torch.Tensor:
    """p(z | x, y) ∝ p(z|x) Π_t p(y_t|x,z,y_<t): which documents explain the whole answer. (B, K).

    >>> y = torch.tensor([[2, 3]])
    >>> rag_sequence_doc_posterior(torch.zeros(2, 2, 4), torch.tensor([[0.0, 0.0]]), y, pad_id=1)
    tensor([[0.5000, 0.5000]])
    """
    b, k = _check_shapes(logits, doc_scores, labels)
    target = shift_labels_left(labels, pad_id)  # (B, T)
    tgt, _ = target_logprobs(logits, target.repeat_interleave(k, dim=0))
    tgt = tgt.view(b, k, -1) * target.ne(pad_id).unsqueeze(1)  # (B, K, T)
    return torch.softmax(doc_log_prior(doc_scores) + tgt.sum(2), dim=1)  # (B, K)


def rag_token_doc_posterior(logits: torch.Tensor, doc_scores: torch.Tensor, labels: torch.Tensor, pad_id: int) -> torch.Tensor:
    """p(z | x, y_t, y_<t) ∝ p(z|x) p(y_t|x,z,y_<t): the document each token leaned on. (B, T, K).

    Padding positions get the prior p(z|x).
    """
    b, k = _check_shapes(logits, doc_scores, labels)
    target = shift_labels_left(labels, pad_id)  # (B, T)
    tgt, _ = target_logprobs(logits, target.repeat_interleave(k, dim=0))
    tgt = tgt.view(b, k, -1) * target.ne(pad_id).unsqueeze(1)  # (B, K, T)
    return torch.softmax(doc_log_prior(doc_scores).unsqueeze(-1) + tgt, dim=1).transpose(1, 2)  # (B, T, K)
