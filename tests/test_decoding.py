"""RAG decoding equals transformers' generate on the same weights; fast equals thorough when it must."""

from __future__ import annotations

import pytest
import torch

from lewisrag.rag_model import RagModel
from lewisrag.rag_model import marginalize as M
from lewisrag.rag_model.testing import tiny_batch, tiny_hf_rag

K = 3


@pytest.fixture(scope="module", params=[5.0, 6.0], ids=["eos-late", "eos-early"])
def pair(request, tmp_path_factory):
    """(variant → (transformers model, RagModel loaded from its checkpoint dir))."""
    out = {}
    for variant in ("token", "sequence"):
        hf = tiny_hf_rag(variant, seed=1, layers=2, n_docs=K, eos_bias=request.param)
        path = tmp_path_factory.mktemp(f"hf_{variant}")
        hf.save_pretrained(path)
        out[variant] = (hf, RagModel.from_hf_pretrained(path))
    return out


def _inputs(seed=2, batch=3):
    ids, mask, scores, _ = tiny_batch(batch, K, 9, 4, 100, seed=seed)
    return dict(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, n_docs=K)


@pytest.mark.parametrize("num_beams,nret", [(1, 1), (3, 1), (3, 2)])
@pytest.mark.parametrize("ngram", [0, 2])
def test_rag_token_equals_transformers(pair, num_beams, nret, ngram):
    hf, ours = pair["token"]
    kw = dict(_inputs(), num_beams=num_beams, max_length=12, num_return_sequences=nret, no_repeat_ngram_size=ngram)
    expected = hf.generate(**kw)
    torch.testing.assert_close(ours.generate(**kw), expected, rtol=0, atol=0)


@pytest.mark.parametrize("eos_bias", [2.0, 6.0], ids=["full-length", "early-ends"])
def test_rag_token_beam_search_equals_transformers_at_tiny_bench_size(tmp_path, eos_bias):
    """The size of `bench_rag.py --size tiny`: d_model 48, 40-token documents, 4 docs, 4 beams, batch 8."""
    hf = tiny_hf_rag("token", seed=0, vocab=1000, d_model=48, layers=1, heads=4, ffn=192, n_docs=4, init_std=0.05,
                     eos_bias=eos_bias)
    hf.save_pretrained(tmp_path)
    ours = RagModel.from_hf_pretrained(tmp_path)
    ids, mask, scores, _ = tiny_batch(8, 4, 40, 16, 1000, seed=3)
    kw = dict(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, n_docs=4, num_beams=4,
              max_length=20, num_return_sequences=2)
    torch.testing.assert_close(ours.generate(**kw), hf.generate(**kw), rtol=0, atol=0)


@pytest.mark.parametrize("scale", [3.0, 300.0], ids=["as-probabilities", "underflowing"])
def test_token_mixture_equals_the_log_space_marginal(scale):
    """The decoding step's mixture, summed as probabilities, equals eq. 2 in log space; where some
    token is all but impossible under every document (scale 300) it falls back to log space itself."""
    from lewisrag.rag_model.decoding import MIX_FLOOR, _token_mixture

    g = torch.Generator().manual_seed(0)
    b, k, w, v = 3, 4, 2, 50
    logits = torch.randn(b * k, w, v, generator=g) * scale  # (B*K, W, V)
    doc_scores = torch.randn(b, k, generator=g)
    expected = M.rag_token_marginal_logprobs(logits, doc_scores).view(b * w, v)  # (B*W, V)
    assert (expected.min() < torch.tensor(MIX_FLOOR).log()) == (scale > 100)
    torch.testing.assert_close(_token_mixture(logits, doc_scores), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("num_beams,nret", [(1, 1), (2, 1), (3, 2)])
@pytest.mark.parametrize("dedup", [True, False])
def test_rag_sequence_thorough_equals_transformers(pair, num_beams, nret, dedup):
    hf, ours = pair["sequence"]
    kw = dict(_inputs(), num_beams=num_beams, max_length=12, num_return_sequences=nret, do_deduplication=dedup)
    expected = hf.generate(**kw)
    torch.testing.assert_close(ours.generate(**kw), expected, rtol=0, atol=0)


def test_rag_sequence_with_label_smoothing_and_ngram_equals_transformers(tmp_path):
    hf = tiny_hf_rag("sequence", seed=4, n_docs=K, eos_bias=5.0, label_smoothing=0.1)
    hf.save_pretrained(tmp_path)
    ours = RagModel.from_hf_pretrained(tmp_path)
    kw = dict(_inputs(seed=7), num_beams=3, max_length=10, num_return_sequences=2, no_repeat_ngram_size=2)
    torch.testing.assert_close(ours.generate(**kw), hf.generate(**kw), rtol=0, atol=0)


def test_fast_equals_thorough_when_every_beam_holds_every_candidate(pair):
    _, ours = pair["sequence"]
    kw = _inputs(seed=3)
    ids = kw["context_input_ids"].view(3, K, -1)
    kw["context_input_ids"] = ids[:, :1].expand(3, K, ids.shape[2]).reshape(3 * K, -1)  # a question's docs alike
    kw["context_attention_mask"] = kw["context_input_ids"].ne(1).long()
    fast = ours.generate(**kw, num_beams=3, max_length=10, num_return_sequences=2, decoding="fast", return_evidence=True)
    thorough = ours.generate(**kw, num_beams=3, max_length=10, num_return_sequences=2, return_evidence=True)
    torch.testing.assert_close(fast.sequences, thorough.sequences, rtol=0, atol=0)
    torch.testing.assert_close(fast.scores, thorough.scores, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(fast.doc_posterior, thorough.doc_posterior, rtol=1e-4, atol=1e-4)


def test_fast_decoding_runs_on_distinct_documents(pair):
    _, ours = pair["sequence"]
    out = ours.generate(**_inputs(), num_beams=2, max_length=10, decoding="fast", return_evidence=True)
    assert out.sequences.shape[0] == 3 and torch.isfinite(out.scores).all()
    torch.testing.assert_close(out.doc_posterior.sum(-1), torch.ones(3))


def test_sequence_evidence_is_the_posterior_of_a_full_forward(pair):
    _, ours = pair["sequence"]
    kw = _inputs()
    out = ours.generate(**kw, num_beams=2, max_length=10, return_evidence=True)
    logits = ours(kw["context_input_ids"], kw["context_attention_mask"], kw["doc_scores"], labels=out.sequences).logits
    expected = M.rag_sequence_doc_posterior(logits, kw["doc_scores"], out.sequences, ours.pad_token_id)
    torch.testing.assert_close(out.doc_posterior, expected, rtol=1e-4, atol=1e-5)


def test_token_evidence_equals_uncached_forward(pair):
    """Cached beam decoding's per-token doc posteriors equal those of one teacher-forced forward."""
    _, ours = pair["token"]
    kw = _inputs()
    out = ours.generate(**kw, num_beams=3, max_length=10, return_evidence=True)
    logits = ours(kw["context_input_ids"], kw["context_attention_mask"], kw["doc_scores"], labels=out.sequences).logits
    expected = M.rag_token_doc_posterior(logits, kw["doc_scores"], out.sequences, ours.pad_token_id)
    torch.testing.assert_close(out.doc_posterior, expected, rtol=1e-4, atol=1e-5)
    assert out.doc_posterior.shape == (3, out.sequences.shape[1], K)


def test_bad_arguments_are_clear(pair):
    _, ours = pair["token"]
    with pytest.raises(ValueError, match="num_return_sequences=2 needs num_beams >= 2"):
        ours.generate(**_inputs(), num_return_sequences=2)
    with pytest.raises(ValueError, match="do_sample"):
        ours.generate(**_inputs(), do_sample=True)
    with pytest.raises(ValueError, match=r"doc_scores \(B, K=3\)"):
        ours.generate(**{**_inputs(), "doc_scores": torch.zeros(3, 2)})


def test_max_new_tokens_wins_over_max_length(pair):
    _, ours = pair["token"]
    out = ours.generate(**_inputs(), num_beams=1, max_new_tokens=3, max_length=50)
    assert out.shape[1] <= 4  # the start token and at most 3 new ones


def test_explicit_max_length_beats_a_saved_max_new_tokens():
    from transformers import GenerationConfig

    from lewisrag.rag_model.decoding import _max_length, resolve_settings

    saved = GenerationConfig(max_new_tokens=40)  # as a pretrained generator may carry it
    assert _max_length(resolve_settings(saved)) == 41
    assert _max_length(resolve_settings(saved, max_length=5)) == 5
    assert _max_length(resolve_settings(saved, max_length=5, max_new_tokens=3)) == 4
