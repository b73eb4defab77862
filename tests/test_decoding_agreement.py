"""RAG-Sequence decoding against what it must agree with: its reported scores against the loss of a
full forward, fast decoding against thorough decoding, and both against a brute-force search.

transformers' parity of thorough decoding and RAG-Token decoding is in test_decoding.py.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from lewisrag.rag_model import RagModel
from lewisrag.rag_model import marginalize as M
from lewisrag.rag_model.testing import tiny_batch, tiny_hf_rag

K = 3


def _model(path, **config) -> RagModel:
    tiny_hf_rag("sequence", **config).save_pretrained(path)
    return RagModel.from_hf_pretrained(path)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return _model(tmp_path_factory.mktemp("rag_sequence"), seed=1, layers=2, n_docs=K, eos_bias=5.0)


def _inputs(batch=3, k=K, vocab=100, seed=2):
    ids, mask, scores, _ = tiny_batch(batch, k, 9, 4, vocab, seed=seed)
    return dict(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, n_docs=k)


def _forward_logits(model, kw, sequences):
    """Teacher-forced logits (N*K, T, V) of `sequences` (N, T), N = B*n, each under its question's K documents,
    and the doc scores (N, K) they go with."""
    b, k = kw["doc_scores"].shape
    n = sequences.shape[0] // b
    ids = kw["context_input_ids"].view(b, k, -1).repeat_interleave(n, dim=0).flatten(0, 1)  # (N*K, L)
    mask = kw["context_attention_mask"].view(b, k, -1).repeat_interleave(n, dim=0).flatten(0, 1)  # (N*K, L)
    scores = kw["doc_scores"].repeat_interleave(n, dim=0)  # (N, K)
    with torch.no_grad():
        return model(ids, mask, scores, labels=sequences).logits, scores


def _marginal_loglik(model, kw, sequences):
    """log p(y|x) of each sequence (N,) recomputed with `rag_sequence_nll` from a full forward."""
    logits, scores = _forward_logits(model, kw, sequences)
    return -M.rag_sequence_nll(logits, scores, sequences, model.pad_token_id, reduce=False)


def _per_doc_loglik(model, kw, sequences):
    """log p(y|x,z) of each sequence under each of its question's documents, (N, K)."""
    logits, scores = _forward_logits(model, kw, sequences)
    k = scores.shape[1]
    one_doc = torch.zeros(logits.shape[0], 1)  # each document alone: p(z|x) = 1
    nll = M.rag_sequence_nll(logits, one_doc, sequences.repeat_interleave(k, dim=0), model.pad_token_id, reduce=False)
    return -nll.view(-1, k)


@pytest.mark.parametrize("num_beams,nret", [(1, 1), (3, 2)])
def test_thorough_scores_are_the_marginal_likelihood_of_a_full_forward(model, num_beams, nret):
    kw = _inputs()
    out = model.generate(**kw, num_beams=num_beams, max_length=10, num_return_sequences=nret, return_evidence=True)
    assert not out.sequences[:, 1].eq(model.generator.config.bos_token_id).any()  # no BOS score to exclude
    torch.testing.assert_close(out.scores, _marginal_loglik(model, kw, out.sequences), rtol=1e-4, atol=1e-4)
    assert (out.scores.view(3, nret).diff(dim=1) <= 0).all()  # best first


@pytest.mark.parametrize("num_beams,nret", [(1, 1), (3, 2)])
def test_fast_scores_count_only_the_documents_whose_beams_found_the_answer(model, num_beams, nret):
    """Fast decoding's p(y|x) is Σ_z p(z|x) p(y|x,z) over the documents z whose beams produced y (its
    posterior's support), with p(y|x,z) that of a full forward; the others count as 0."""
    kw = _inputs()
    out = model.generate(**kw, num_beams=num_beams, max_length=10, num_return_sequences=nret, decoding="fast",
                         return_evidence=True)
    produced = out.doc_posterior > 0  # (N, K)
    assert produced.any(1).all() and not produced.all()  # some answers found by some documents only
    assert out.sequences[:, 2].ne(model.pad_token_id).all()  # 2+ tokens: the prior is in every score
    prior = M.doc_log_prior(kw["doc_scores"]).repeat_interleave(nret, dim=0)  # (N, K)
    joint = (prior + _per_doc_loglik(model, kw, out.sequences)).masked_fill(~produced, float("-inf"))  # (N, K)
    torch.testing.assert_close(out.scores, joint.logsumexp(1), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out.doc_posterior, joint.softmax(1), rtol=1e-4, atol=1e-5)
    # a lower bound on the marginal likelihood (here a strict one for some answer), reached where
    # every document produced the answer
    full = _marginal_loglik(model, kw, out.sequences)
    assert (out.scores <= full + 1e-4).all() and (out.scores < full - 1e-3).any()
    torch.testing.assert_close(out.scores[produced.all(1)], full[produced.all(1)], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("eos_bias", [2.0, 6.0], ids=["full-length", "early-ends"])
def test_with_one_document_fast_equals_thorough(tmp_path, eos_bias):
    """With K = 1 every candidate comes from the one document's beams: nothing for fast decoding to drop."""
    model = _model(tmp_path, seed=5, n_docs=1, eos_bias=eos_bias)
    kw = _inputs(batch=4, k=1, seed=6)
    gen = dict(num_beams=4, max_length=10, num_return_sequences=3, return_evidence=True)
    fast, thorough = model.generate(**kw, decoding="fast", **gen), model.generate(**kw, **gen)
    torch.testing.assert_close(fast.sequences, thorough.sequences, rtol=0, atol=0)
    torch.testing.assert_close(fast.scores, thorough.scores, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(fast.doc_posterior, torch.ones(12, 1))
    torch.testing.assert_close(thorough.scores, _marginal_loglik(model, kw, thorough.sequences), rtol=1e-4, atol=1e-4)
    assert (thorough.scores.view(4, 3).diff(dim=1) < 0).all()  # 3 distinct answers per question, best first


def _every_answer(vocab, max_length, start=2, eos=2, pad=1):
    """All sequences a search of `max_length` can end with (forced EOS at the last step), padded: (N, max_length)."""
    tokens = [t for t in range(vocab) if t != eos]
    out = []
    for n in range(max_length - 1):  # generated tokens before EOS
        for middle in itertools.product(tokens, repeat=n):
            seq = [start, *middle, eos]
            out.append(seq + [pad] * (max_length - len(seq)))
    return torch.tensor(out)


@pytest.mark.parametrize("decoding", ["thorough", "fast"])
@pytest.mark.parametrize("vocab,max_length", [(8, 3), (6, 4)])
def test_complete_candidate_set_equals_brute_force_ranking(tmp_path, decoding, vocab, max_length):
    """With as many beams as there are possible answers, every document's beams hold every answer: both
    decodings then rank all of them exactly as scoring each one with `rag_sequence_nll` does."""
    model = _model(tmp_path, seed=1, vocab=vocab, n_docs=K)
    kw = _inputs(batch=2, vocab=vocab)
    answers = _every_answer(vocab, max_length)  # (N, T)
    n = answers.shape[0]
    out = model.generate(**kw, num_beams=n, num_return_sequences=n, max_length=max_length, decoding=decoding,
                         return_evidence=True)
    brute = _marginal_loglik(model, kw, answers.repeat(2, 1)).view(2, n)  # (B, N)
    for b in range(2):
        best = brute[b].argsort(descending=True)
        assert (brute[b, best].diff() < -1e-4).all()  # no ties: the ranking is unique
        got = out.sequences.view(2, n, -1)[b]
        torch.testing.assert_close(got, answers[best], rtol=0, atol=0)
        torch.testing.assert_close(out.scores.view(2, n)[b], brute[b, best], rtol=1e-4, atol=1e-4)
    assert (out.doc_posterior > 0).all()  # every document produced every answer
