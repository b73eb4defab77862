"""The loss head's gradient holds no subnormal floats, which CPUs without flush-to-zero multiply slowly.

A trained generator is confident: one token far above a long tail of very unlikely ones, so
exp(x − max) underflows into the subnormal range, and documents that disagree with the answer get
tiny posteriors that scale whole rows of probabilities down into it. The lm_head products that
consume this gradient (g @ W, gᵀ @ h) ran an order of magnitude slower on such inputs (Intel Xeon).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lewisrag.rag_model import marginalize as M

PAD, V, K = 1, 8192, 4
TINY = torch.finfo(torch.float32).tiny  # smallest normal float32, 2^-126


def _confident_batch(b: int = 2, t: int = 6, seed: int = 0):
    """Logits (B*K, T, V) of a confident generator, peaked doc scores (B, K) and labels (B, T).

    Every (document, position) puts +30 on one token and spreads the rest over [-60, -10].
    Document 0 backs the answer at every position but one, where the answer is its runner-up at
    +29; document 1 backs it at all positions but another, documents 2 and 3 at every other one:
    their posteriors run from about 1 down to far below 1e-30.
    """
    g = torch.Generator().manual_seed(seed)
    logits = torch.rand(b * K, t, V, generator=g) * -50 - 10  # (B*K, T, V)
    labels = torch.randint(3, V, (b, t), generator=g)
    labels[:, 0] = 2  # decoder start token
    labels[0, -1] = PAD  # a padded target
    target = M.shift_labels_left(labels, PAD).repeat_interleave(K, dim=0)  # (B*K, T)
    backs = torch.ones(b, K, t, dtype=torch.bool)  # (B, K, T): does the document back the answer here?
    backs[:, 0, 1] = backs[:, 1, 2] = False
    backs[:, 2:, ::2] = False
    top = torch.where(backs.view(b * K, t), target, (target + 1 + torch.arange(t)) % V)  # (B*K, T)
    logits.scatter_(-1, top.unsqueeze(-1), 30.0)
    logits[::K, 1].scatter_(-1, target[::K, 1:2], 29.0)  # document 0's runner-up at position 1
    scores = torch.tensor([[6.0, 2.0, 0.0, -4.0]]).expand(b, K) + torch.randn(b, K, generator=g)  # (B, K)
    return logits, scores, labels


def _subnormals(x: torch.Tensor) -> int:
    return int(((x != 0) & (x.abs() < TINY)).sum())


@pytest.mark.parametrize("variant", ["sequence", "token"])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_loss_head_gradient_has_no_subnormals(variant, eps):
    logits, scores, labels = _confident_batch()
    assert _subnormals(torch.softmax(logits, -1)) > 0  # the inputs do reach the subnormal range
    fn = M.rag_sequence_nll if variant == "sequence" else M.rag_token_nll
    x = logits.clone().requires_grad_()
    fn(x, scores, labels, PAD, epsilon=eps).sum().backward()
    assert _subnormals(x.grad) == 0 and x.grad.abs().max() > 0.1


def test_flush_keeps_normals_and_non_finite_values():
    g = torch.tensor([1e-40, -1e-40, TINY * 2, -TINY * 2, 1.0, 0.0, float("nan"), float("-inf")])
    out = M._flush_subnormals(g.clone(), in_place=True)
    expected = torch.tensor([0.0, 0.0, TINY * 2, -TINY * 2, 1.0, 0.0, float("nan"), float("-inf")])
    torch.testing.assert_close(out, expected, equal_nan=True, rtol=0, atol=0)


def test_flushed_gradient_still_equals_autograd():
    logits, scores, labels = _confident_batch(b=1, t=4, seed=1)
    target = M.shift_labels_left(labels, PAD).repeat_interleave(K, dim=0)  # (B*K, T)
    x1, x2 = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    w = torch.rand(K, 4, generator=torch.Generator().manual_seed(2)) * 1e-20  # posterior-sized weights
    (M.target_logprobs(x1, target)[0] * w).sum().backward()
    (F.log_softmax(x2, -1).gather(-1, target.unsqueeze(-1)).squeeze(-1) * w).sum().backward()
    assert _subnormals(x1.grad) == 0 < _subnormals(x2.grad)
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-5, atol=TINY)


def test_rag_sequence_backward_leaves_out_documents_with_negligible_posteriors():
    """Documents whose posterior given the answer is under 2^-50 of the best one's get an exact zero
    gradient (their decoder backward would otherwise run on numbers shrinking into subnormals); the
    others get eq. 1's gradient."""
    logits, scores, labels = _confident_batch()
    b = scores.shape[0]
    x, ref = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    M.rag_sequence_nll(x, scores, labels, PAD).sum().backward()
    M.rag_sequence_nll_reference(ref, scores, labels, PAD).sum().backward()
    with torch.no_grad():  # each document's posterior given the answer, from the reference's gradient mass
        mass = ref.grad.abs().view(b, K, -1).sum(-1)  # (B, K)
        negligible = mass < mass.amax(1, keepdim=True) * M.NEGLIGIBLE_SHARE
    assert negligible.any() and (~negligible).sum(1).min() >= 1  # the batch has both kinds
    grads, refs = x.grad.view(b, K, *x.shape[1:]), ref.grad.view(b, K, *x.shape[1:])
    assert (grads[negligible] == 0).all() and (refs[negligible] != 0).any()
    torch.testing.assert_close(grads[~negligible], refs[~negligible], rtol=1e-4, atol=1e-6)
