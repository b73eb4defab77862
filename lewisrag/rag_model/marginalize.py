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

The file has three parts. The reference section states eqs. 1 and 2 as plain tensor code, to be
checked line by line against the paper. The shared helpers hold the conventions both use (shapes,
p(z|x), the label shift). The fast path is what the model and decoding call: the same equations,
cheaper in memory, with transformers' label smoothing and BOS exclusion; the tests hold it equal to
the reference and to transformers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# ─── Reference: eqs. 1 and 2 as written in the paper ────────────────────────────────────────────


def _reference_terms(logits: torch.Tensor, doc_scores: torch.Tensor, labels: torch.Tensor, pad_id: int):
    """What both equations are made of: the targets y (B, T), log p(y_i | x, z, y_<i) (B, K, T) for
    every document, and log p(z|x) (B, K)."""
    b, k = _check_shapes(logits, doc_scores, labels)
    t, v = logits.shape[1], logits.shape[2]
    y = shift_labels_left(labels, pad_id)  # (B, T): y[:, i] is the token position i predicts
    log_p_token = F.log_softmax(logits, dim=-1).view(b, k, t, v)  # (B, K, T, V): log p(· | x, z, y_<i)
    log_p_y_i = log_p_token.gather(-1, y[:, None, :, None].expand(b, k, t, 1)).squeeze(-1)  # (B, K, T)
    log_p_z = F.log_softmax(doc_scores, dim=1)  # (B, K): log p(z|x) (eq. 3)
    return y, log_p_y_i, log_p_z


def rag_sequence_nll_reference(logits: torch.Tensor, doc_scores: torch.Tensor, labels: torch.Tensor, pad_id: int) -> torch.Tensor:
    """RAG-Sequence NLL, −log Σ_z p(z|x) Π_i p(y_i|x,z,y_<i) (eq. 1), as plain tensor code. (B,).

    logits (B*K, T, V), doc_scores (B, K), labels (B, T) as in `rag_sequence_nll`. Only the plain
    likelihood: no label smoothing (ε = 0), padding targets simply left out of the product, p(z|x)
    counted once per document. To leave out the first token (transformers' `exclude_bos_score`),
    pass labels with it replaced by padding. `rag_sequence_nll` equals this wherever target position
    1 is a real token (see the fast path's note on transformers). Builds (B, K, T, V) log-probs.

    >>> y = torch.tensor([[2, 0, 3]])    # decoder start, then the two predicted tokens
    >>> round(rag_sequence_nll_reference(torch.zeros(1, 3, 4), torch.zeros(1, 1), y, pad_id=1).item(), 4)
    2.7726
    """
    y, log_p_y_i, log_p_z = _reference_terms(logits, doc_scores, labels, pad_id)
    log_p_y_i = log_p_y_i.masked_fill(y.eq(pad_id)[:, None, :], 0.0)  # padding: log 1, out of the product
    log_p_y_given_z = log_p_y_i.sum(-1)  # (B, K): log Π_i p(y_i | x, z, y_<i)
    return -torch.logsumexp(log_p_z + log_p_y_given_z, dim=1)  # (B,): −log Σ_z p(z|x) p(y|x,z)


def rag_token_nll_reference(logits: torch.Tensor, doc_scores: torch.Tensor, labels: torch.Tensor, pad_id: int) -> torch.Tensor:
    """RAG-Token NLL, −Σ_i log Σ_z p(z|x) p(y_i|x,z,y_<i) (eq. 2), as plain tensor code. (B,).

    logits (B*K, T, V), doc_scores (B, K), labels (B, T) as in `rag_token_nll`. Only the plain
    likelihood: no label smoothing (ε = 0), padding targets left out of the sum. `rag_token_nll`
    with ε = 0 equals this. Builds (B, K, T, V) log-probs.

    >>> y = torch.tensor([[2, 0, 3]])
    >>> round(rag_token_nll_reference(torch.zeros(2, 3, 4), torch.zeros(1, 2), y, pad_id=1).item(), 4)
    2.7726
    """
    y, log_p_y_i, log_p_z = _reference_terms(logits, doc_scores, labels, pad_id)
    log_mixture = torch.logsumexp(log_p_z[:, :, None] + log_p_y_i, dim=1)  # (B, T): log Σ_z p(z|x) p(y_i|x,z,y_<i)
    log_mixture = log_mixture.masked_fill(y.eq(pad_id), 0.0)  # padding: log 1, out of the product over i
    return -log_mixture.sum(1)  # (B,)


# ─── Shared helpers: shapes, p(z|x), the label shift ────────────────────────────────────────────


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


# ─── Fast path: what the model, training and decoding call ─────────────────────────────────────
#
# The same eqs. 1 and 2, computed to spare memory and time; tests/test_marginalize.py holds values
# and gradients equal to the reference. The reference builds log_softmax over V for each of the K
# documents, a (B, K, T, V) tensor that autograd keeps along with its gradient and the gather's.
# Eq. 1, and eq. 2 without label smoothing, need only log p(y_t) per document and position (and
# label smoothing Σ_v log p(v)); `_TargetLogProb` gets both from one softmax, keeps it as the only
# (B*K, T, V) tensor and turns it into the gradient in place, and writes no tensor that size when
# no gradient is wanted (decoding). Gradients leave with subnormal entries flushed to zero
# (`_flush_subnormals`), which keeps the lm_head products that consume them fast on CPUs.
#
# transformers parity: `rag_sequence_nll` equals `RagSequenceForGeneration.get_nll`, which does not
# add log p(z|x) once per document as eq. 1 does, but to every vocabulary entry at target position 1
# (the second predicted token), so that the prior survives `exclude_bos_score` dropping position 0.
# Kept as is, with its consequences: the padding mask applies after the addition, so a target whose
# position 1 is padding (a single predicted token, or T < 2) loses the prior; the label-smoothing
# sum Σ_v counts the prior V times; and excluding the first token takes it out of the NLL only, not
# out of the smoothing term. `carries_prior` marks position 1, `counted_in_nll` the positions the
# NLL sums. Where position 1 is a real token and ε = 0, the result is eq. 1: the reference's value.


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


NEGLIGIBLE_SHARE = 2.0**-50  # of an example's largest gradient entry: far below float32's resolution (2^-24)


class _DropNegligibleDocuments(torch.autograd.Function):
    """Identity forward on per-document token log-probs (B, K, T); the backward sets to zero the
    gradient entries under NEGLIGIBLE_SHARE of their example's largest one.

    In eq. 1 a document's tokens get the gradient −p(z|x, y), its posterior given the whole answer,
    a product over tokens: documents that do not hold the answer get 1e-20, 1e-35 and less. Their
    whole decoder backward then runs on numbers that shrink into subnormals layer by layer, and the
    CPU's matrix products slow down on them by an order of magnitude (measured on the small preset:
    100 RAG-Sequence training steps 36 s, 12 s with flush-to-zero set, 11 s for RAG-Token). Flushing
    at the loss head (`_flush_subnormals`) catches only the first product. A share under 2^-50 of
    the example's largest entry is lost anyway wherever it is added to that document's share of a
    shared weight's gradient; zero, its backward is fast."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:
        largest = g.abs().flatten(1).amax(1).view(-1, *([1] * (g.dim() - 1)))  # (B, 1, 1)
        return torch.where(g.abs() < largest * NEGLIGIBLE_SHARE, torch.zeros_like(g), g)


class _TargetLogProb(torch.autograd.Function):
    """log p(target) and Σ_v log p(v) per position, with one exponential per vocabulary entry.

    Both directions need softmax(x) over the vocabulary, and its exponentials are what the loss head
    spends its time on. When a gradient is wanted, the forward computes it once and keeps it for the
    backward, which turns it into the gradient in place from the closed form
    d/dx = onehot·g_target + g_sum − softmax(x)·(g_target + V·g_sum): one (N, T, V) tensor in all.
    Autograd through log_softmax → gather → sum keeps the log-probs, builds three such tensors and
    takes the exponentials a second time in its backward. Without a gradient (decoding) nothing of that size
    is written.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, want_sum: bool):
        v = logits.shape[-1]
        idx = target.unsqueeze(-1)  # (N, T, 1)
        probs = None
        if ctx.needs_input_grad[0]:
            probs = torch.softmax(logits, dim=-1)  # (N, T, V), kept for the backward
            target_logprob = probs.gather(-1, idx).squeeze(-1).log()  # (N, T)
            # p(target) near float32's underflow: the log of the rounded value is inexact, so redo those rows
            underflowed = target_logprob < -80.0  # (N, T)
            if underflowed.any():
                target_logprob[underflowed] = F.log_softmax(logits[underflowed], dim=-1).gather(
                    -1, target[underflowed].unsqueeze(-1)).squeeze(-1)
        else:  # scoring only (decoding): log-softmax a block of rows at a time, nothing of size (N, T, V) written
            flat, rows_idx = logits.reshape(-1, v), idx.reshape(-1, 1)  # (N*T, V), (N*T, 1)
            rows = max(1, 2**20 // v)  # ~4 MB float32 blocks, which stay in cache
            target_logprob = torch.cat([F.log_softmax(flat[i:i + rows], dim=-1).gather(1, rows_idx[i:i + rows])
                                        for i in range(0, flat.shape[0], rows)]).view(target.shape)  # (N, T)
        if want_sum:  # Σ_v log p(v) = Σ_v x_v − V·logsumexp(x), and logsumexp(x) = x_target − log p(target)
            log_normaliser = logits.gather(-1, idx).squeeze(-1) - target_logprob  # (N, T): logsumexp(x)
            sum_logprob_over_vocab = logits.sum(-1) - v * log_normaliser  # (N, T)
        else:
            sum_logprob_over_vocab = torch.zeros_like(target_logprob)
        if probs is not None:
            ctx.save_for_backward(probs, target)
        ctx.want_sum = want_sum
        return target_logprob, sum_logprob_over_vocab

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_target: torch.Tensor, g_sum: torch.Tensor):
        """Gradients g_target of log p(target) and g_sum of Σ_v log p(v), each (N, T), → (N, T, V)."""
        probs, target = ctx.saved_tensors
        v = probs.shape[-1]
        grad = probs  # consumed in place: a second backward through this graph raises (version counter)
        if ctx.want_sum:
            grad.mul_(-(g_target + v * g_sum).unsqueeze(-1))
            grad.add_(g_sum.unsqueeze(-1))
        else:
            grad.mul_(-g_target.unsqueeze(-1))
        grad.scatter_add_(-1, target.unsqueeze(-1), g_target.unsqueeze(-1))
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
    Equals transformers' `RagSequenceForGeneration.get_nll`; eq. 1 in plain form is
    `rag_sequence_nll_reference`.

    With one document and a uniform 4-token vocabulary, a 2-token answer has NLL 2·log 4:

    >>> y = torch.tensor([[2, 0, 3]])    # decoder start, then the two predicted tokens
    >>> round(rag_sequence_nll(torch.zeros(1, 3, 4), torch.zeros(1, 1), y, pad_id=1).item(), 4)
    2.7726
    """
    b, k = _check_shapes(logits, doc_scores, labels)
    t, v = logits.shape[1], logits.shape[2]
    target = shift_labels_left(labels, pad_id)  # (B, T)
    target_logprob, sum_logprob_over_vocab = target_logprobs(
        logits, target.repeat_interleave(k, dim=0), with_sum=epsilon != 0.0)  # (B*K, T) each
    tgt = _DropNegligibleDocuments.apply(target_logprob.view(b, k, t))
    total = _DropNegligibleDocuments.apply(sum_logprob_over_vocab.view(b, k, t))
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
    """`rag_sequence_nll` from per-document log-probs, without the (B, K, T, V) logits.

    tgt (B, K, T): log p(y_t | x, z, y_<t) of each target token under each document; total
    (B, K, T): Σ_v log p(v | x, z, y_<t), which only label smoothing reads (zeros will do at ε = 0).
    `target` (B, T) is already shifted (`shift_labels_left`). Decoding uses this form: it computes
    the log-probs in chunks and never holds the (B, K, T, V) logits.
    """
    target_logprob, sum_logprob_over_vocab = tgt, total  # (B, K, T) each
    b, k, t = target_logprob.shape
    if (tuple(doc_scores.shape) != (b, k) or tuple(target.shape) != (b, t)
            or sum_logprob_over_vocab.shape != target_logprob.shape):
        raise ValueError(f"expected tgt/total (B, K, T), doc_scores (B, K), target (B, T); got {tuple(tgt.shape)}, "
                         f"{tuple(total.shape)}, {tuple(doc_scores.shape)}, {tuple(target.shape)}")
    dtype, device = target_logprob.dtype, target_logprob.device
    keep = target.ne(pad_id).unsqueeze(1)  # (B, 1, T)
    prior = doc_log_prior(doc_scores)  # (B, K)
    # transformers' placement of log p(z|x): on every vocabulary entry of target position 1, masked
    # with the padding after (see the note that opens the fast path). Selected, not multiplied by a
    # 0/1 mask: a document masked out with the score −inf has log p(z|x) = −inf, and −inf·0 is NaN.
    carries_prior = torch.arange(t, device=device).eq(1) & keep  # (B, 1, T)
    prior_at = torch.where(carries_prior, prior.unsqueeze(-1), 0.0)  # (B, K, T)
    keep = keep.to(dtype)  # the log-probs are finite: multiplying them by 0/1 is safe, and cheaper
    ll = target_logprob * keep + prior_at  # (B, K, T)
    smooth = sum_logprob_over_vocab * keep + vocab * prior_at  # (B, K, T)
    exclude = torch.as_tensor(exclude_first, device=device).expand(b)  # (B,)
    counted_in_nll = torch.ones(b, 1, t, dtype=dtype, device=device)  # (B, 1, T): 0 at an excluded first token
    counted_in_nll[:, 0, 0] = (~exclude.bool()).to(dtype)  # position 0 never holds the prior: finite
    nll = -torch.logsumexp((ll * counted_in_nll).sum(2), dim=1)  # (B,)
    smooth_nll = -torch.logsumexp(smooth.sum(2), dim=1)  # (B,): smoothing counts every position
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
    Equals transformers' `RagTokenForGeneration.get_nll`; eq. 2 in plain form is
    `rag_token_nll_reference`. Without label smoothing only the target token's log-probability per
    document is needed, so the (B, T, V) mixture is never built; with smoothing, Σ_v log p(v) of the
    mixture needs it.

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
        target_logprob, _ = target_logprobs(logits, target.repeat_interleave(k, dim=0))  # (B*K, T)
        per_token = torch.logsumexp(target_logprob.view(b, k, t) + prior.unsqueeze(-1), dim=1)  # (B, T)
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
    target_logprob, _ = target_logprobs(logits, target.repeat_interleave(k, dim=0))  # (B*K, T)
    target_logprob = target_logprob.view(b, k, -1) * target.ne(pad_id).unsqueeze(1)  # (B, K, T)
    return torch.softmax(doc_log_prior(doc_scores) + target_logprob.sum(2), dim=1)  # (B, K)


def rag_token_doc_posterior(logits: torch.Tensor, doc_scores: torch.Tensor, labels: torch.Tensor, pad_id: int) -> torch.Tensor:
    """p(z | x, y_t, y_<t) ∝ p(z|x) p(y_t|x,z,y_<t): the document each token leaned on. (B, T, K).

    Padding positions get the prior p(z|x).
    """
    b, k = _check_shapes(logits, doc_scores, labels)
    target = shift_labels_left(labels, pad_id)  # (B, T)
    target_logprob, _ = target_logprobs(logits, target.repeat_interleave(k, dim=0))  # (B*K, T)
    target_logprob = target_logprob.view(b, k, -1) * target.ne(pad_id).unsqueeze(1)  # (B, K, T)
    return torch.softmax(doc_log_prior(doc_scores).unsqueeze(-1) + target_logprob, dim=1).transpose(1, 2)  # (B, T, K)
