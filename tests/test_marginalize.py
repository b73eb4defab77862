"""RAG marginalization: the fast path equal to transformers' get_nll, to the plain reference of eqs. 1 and 2,
to a brute-force loop, and to plain NLL at K=1."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from transformers import RagSequenceForGeneration, RagTokenForGeneration

from lewisrag.rag_model import marginalize as M

PAD, BOS = 1, 0


def _hf_self(k: int) -> SimpleNamespace:
    """The few attributes transformers' get_nll reads from `self`."""
    cfg = SimpleNamespace(n_docs=k, bos_token_id=None, generator=SimpleNamespace(pad_token_id=PAD, bos_token_id=BOS))
    ns = SimpleNamespace(config=cfg)
    ns.marginalize = lambda logits, scores, n_docs=None: RagTokenForGeneration.marginalize(ns, logits, scores, n_docs)
    return ns


def _batch(b=3, k=4, t=6, v=11, seed=0, bos_first=False):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b * k, t, v, generator=g) * 3
    scores = torch.randn(b, k, generator=g) * 2
    labels = torch.randint(3, v, (b, t), generator=g)
    labels[:, 0] = 2  # decoder start token
    if bos_first:
        labels[:, 1] = BOS
    labels[0, -2:] = PAD  # a padded row
    return logits, scores, labels


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("reduce", [False, True])
def test_sequence_nll_equals_transformers(eps, reduce):
    logits, scores, labels = _batch()
    hf = RagSequenceForGeneration.get_nll(_hf_self(4), logits, scores, labels, reduce_loss=reduce, epsilon=eps, n_docs=4)
    ours = M.rag_sequence_nll(logits, scores, labels, PAD, epsilon=eps, reduce=reduce)
    torch.testing.assert_close(ours, hf, rtol=1e-5, atol=1e-5)


def test_sequence_nll_exclude_bos_equals_transformers():
    logits, scores, labels = _batch(bos_first=True)
    hf = RagSequenceForGeneration.get_nll(_hf_self(4), logits, scores, labels, exclude_bos_score=True, n_docs=4)
    ours = M.rag_sequence_nll(logits, scores, labels, PAD, exclude_first=True)
    torch.testing.assert_close(ours, hf, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_token_nll_equals_transformers(eps):
    logits, scores, labels = _batch()
    hf = RagTokenForGeneration.get_nll(_hf_self(4), logits, scores, labels, epsilon=eps, n_docs=4)
    ours = M.rag_token_nll(logits, scores, labels, PAD, epsilon=eps)
    torch.testing.assert_close(ours, hf, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", ["sequence", "token"])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_gradients_equal_transformers(variant, eps):
    logits, scores, labels = _batch(seed=3)
    grads = []
    for impl in ("hf", "ours"):
        x, s = logits.clone().requires_grad_(), scores.clone().requires_grad_()
        if impl == "hf":
            cls = RagSequenceForGeneration if variant == "sequence" else RagTokenForGeneration
            loss = cls.get_nll(_hf_self(4), x, s, labels, epsilon=eps, n_docs=4)
        else:
            fn = M.rag_sequence_nll if variant == "sequence" else M.rag_token_nll
            loss = fn(x, s, labels, PAD, epsilon=eps)
        (loss * torch.arange(1.0, 4.0)).sum().backward()
        grads.append((x.grad, s.grad))
    torch.testing.assert_close(grads[1][0], grads[0][0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads[1][1], grads[0][1], rtol=1e-5, atol=1e-6)


def _brute_force(logits, scores, labels, variant):
    """Equations 1 and 2 written as Python loops over questions, documents and tokens."""
    b, k = scores.shape
    out = []
    for i in range(b):
        prior = [math.exp(s) for s in scores[i].tolist()]
        prior = [p / sum(prior) for p in prior]
        steps = [t for t in range(labels.shape[1] - 1) if labels[i, t + 1] != PAD]
        per_doc = [F.log_softmax(logits[i * k + z], -1) for z in range(k)]
        if variant == "sequence":
            p = sum(prior[z] * math.exp(sum(per_doc[z][t, labels[i, t + 1]].item() for t in steps)) for z in range(k))
            out.append(-math.log(p))
        else:
            out.append(-sum(math.log(sum(prior[z] * per_doc[z][t, labels[i, t + 1]].exp().item() for z in range(k))) for t in steps))
    return torch.tensor(out)


FAST = {"sequence": M.rag_sequence_nll, "token": M.rag_token_nll}
REFERENCE = {"sequence": M.rag_sequence_nll_reference, "token": M.rag_token_nll_reference}


@pytest.mark.parametrize("variant", ["sequence", "token"])
@pytest.mark.parametrize("impl", ["fast", "reference"])
def test_vectorized_equals_brute_force_loop(variant, impl):
    logits, scores, labels = _batch(b=2, k=3, t=5, v=7, seed=5)
    fn = (FAST if impl == "fast" else REFERENCE)[variant]
    torch.testing.assert_close(fn(logits, scores, labels, PAD), _brute_force(logits, scores, labels, variant), rtol=1e-5, atol=1e-5)


def _padded_batch(b, k, t, v, seed, dtype, min_targets):
    """Random logits (B*K, T, V), scores (B, K) and labels (B, T): each row predicts between `min_targets`
    and T − 1 real tokens, then padding; row 0 predicts exactly `min_targets`."""
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(b * k, t, v, generator=g, dtype=torch.float64) * 3).to(dtype)
    scores = (torch.randn(b, k, generator=g, dtype=torch.float64) * 2).to(dtype)
    labels = torch.randint(3, v, (b, t), generator=g)
    labels[:, 0] = 2  # decoder start token
    n_targets = torch.randint(min_targets, t, (b,), generator=g)  # (B,): labels[:, 1:1 + n] are real
    n_targets[0] = min_targets
    labels[torch.arange(t) > n_targets[:, None]] = PAD
    return logits, scores, labels


TOL = {torch.float32: {"rtol": 1e-5, "atol": 1e-5}, torch.float64: {"rtol": 1e-10, "atol": 1e-10}}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("variant", ["sequence", "token"])
@pytest.mark.parametrize("b,k,t,v", [(1, 1, 3, 5), (2, 3, 5, 7), (3, 4, 8, 13), (2, 5, 4, 50)])
def test_fast_path_equals_reference_values_and_gradients(b, k, t, v, variant, dtype):
    # RAG-Sequence's fast path follows transformers, which drops p(z|x) when target position 1 is padding
    # (test_sequence_prior_lost_when_second_target_is_padding): here every row predicts at least 2 tokens
    logits, scores, labels = _padded_batch(b, k, t, v, seed=b * 1000 + k * 100 + t * 10 + v, dtype=dtype,
                                           min_targets=2 if variant == "sequence" else 0)
    weights = torch.randn(b, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(dtype)
    results = []
    for fn in (FAST[variant], REFERENCE[variant]):
        x, s = logits.clone().requires_grad_(), scores.clone().requires_grad_()
        nll = fn(x, s, labels, PAD)
        (nll * weights).sum().backward()
        results.append((nll.detach(), x.grad, s.grad))
    (fast, fast_dx, fast_ds), (ref, ref_dx, ref_ds) = results
    assert fast.shape == (b,) and fast.dtype == dtype
    torch.testing.assert_close(fast, ref, **TOL[dtype])
    torch.testing.assert_close(fast_dx, ref_dx, **TOL[dtype])
    torch.testing.assert_close(fast_ds, ref_ds, **TOL[dtype])


def test_sequence_exclude_first_equals_reference_with_first_target_padded():
    logits, scores, labels = _padded_batch(3, 4, 7, 11, seed=7, dtype=torch.float64, min_targets=2)
    exclude = torch.tensor([True, False, True])
    dropped = labels.clone()
    dropped[exclude, 1] = PAD  # the first predicted token, labels[:, 1], left out of the product
    torch.testing.assert_close(M.rag_sequence_nll(logits, scores, labels, PAD, exclude_first=exclude),
                               M.rag_sequence_nll_reference(logits, scores, dropped, PAD), **TOL[torch.float64])


def test_sequence_prior_lost_when_second_target_is_padding():
    """transformers adds log p(z|x) at target position 1, before masking padding: a one-token target loses it.

    The fast path keeps this for parity; the reference is eq. 1 and keeps the prior."""
    logits, scores, labels = _batch(seed=11)
    labels[0, 2:] = PAD  # row 0 predicts a single token: target position 1 is padding
    hf = RagSequenceForGeneration.get_nll(_hf_self(4), logits, scores, labels, n_docs=4)
    fast = M.rag_sequence_nll(logits, scores, labels, PAD)
    ref = M.rag_sequence_nll_reference(logits, scores, labels, PAD)
    torch.testing.assert_close(fast, hf, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ref, _brute_force(logits, scores, labels, "sequence"), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fast[1:], ref[1:], rtol=1e-5, atol=1e-5)
    no_prior = M.rag_sequence_nll_reference(logits, torch.zeros_like(scores), labels, PAD)[0] - math.log(4)
    torch.testing.assert_close(fast[0], no_prior, rtol=1e-5, atol=1e-5)  # −log Σ_z p(y|x,z), unweighted
    assert (fast[0] - ref[0]).abs() > 1e-2


@pytest.mark.parametrize("variant", ["sequence", "token"])
def test_one_document_equals_plain_nll(variant):
    logits, scores, labels = _batch(k=1)
    target = M.shift_labels_left(labels, PAD)
    plain = F.cross_entropy(logits.transpose(1, 2), target, ignore_index=PAD, reduction="none").sum(1)
    fn = M.rag_sequence_nll if variant == "sequence" else M.rag_token_nll
    torch.testing.assert_close(fn(logits, scores, labels, PAD), plain, rtol=1e-5, atol=1e-5)


def test_token_marginal_sums_to_one():
    logits, scores, _ = _batch()
    marginal = M.rag_token_marginal_logprobs(logits, scores)
    assert marginal.shape == (3, 6, 11)
    torch.testing.assert_close(marginal.exp().sum(-1), torch.ones(3, 6))


def test_posteriors_are_distributions():
    logits, scores, labels = _batch()
    seq = M.rag_sequence_doc_posterior(logits, scores, labels, PAD)
    tok = M.rag_token_doc_posterior(logits, scores, labels, PAD)
    assert seq.shape == (3, 4) and tok.shape == (3, 6, 4)
    torch.testing.assert_close(seq.sum(-1), torch.ones(3))
    torch.testing.assert_close(tok.sum(-1), torch.ones(3, 6))


def test_shape_errors_name_expected_and_actual():
    logits, scores, labels = _batch()
    with pytest.raises(ValueError, match=r"expected \(B\*K=12, T, V\), got \(11, 6, 11\)"):
        M.rag_token_nll(logits[:11], scores, labels, PAD)
    with pytest.raises(ValueError, match="labels: expected"):
        M.rag_sequence_nll(logits, scores, labels[:, :4], PAD)


@pytest.mark.parametrize("with_sum", [False, True])
def test_target_logprobs_value_and_gradient_equal_autograd_even_when_the_target_underflows(with_sum):
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(3, 4, 50, generator=g, dtype=torch.float64).float() * 3
    target = torch.randint(0, 50, (3, 4), generator=g)
    logits[0, 0, target[0, 0]] = -200.0  # exp underflows in float32: p(target) rounds to 0
    x1, x2 = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    tgt, total = M.target_logprobs(x1, target, with_sum=with_sum)
    ref = F.log_softmax(x2, dim=-1)
    ref_tgt, ref_total = ref.gather(-1, target.unsqueeze(-1)).squeeze(-1), ref.sum(-1)
    assert torch.isfinite(tgt).all() and torch.allclose(tgt, ref_tgt, atol=1e-4)
    w1, w2 = torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g)
    ((tgt * w1).sum() + ((total * w2).sum() if with_sum else 0)).backward()
    ((ref_tgt * w1).sum() + ((ref_total * w2).sum() if with_sum else 0)).backward()
    assert torch.allclose(x1.grad, x2.grad, atol=1e-4)
    with torch.no_grad():  # the scoring path (no gradient) gives the same values
        assert torch.allclose(M.target_logprobs(logits, target, with_sum=with_sum)[0], tgt.detach(), atol=1e-5)
