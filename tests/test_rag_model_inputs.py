"""RagModel's inputs at their edges: a document masked out with the score −inf, count arguments, label
shapes and lengths past the generator's positions. Each is held to transformers where it has an answer,
and to a clear ValueError naming the argument where it fails deep inside (or silently)."""

from __future__ import annotations

import re

import pytest
import torch

from lewisrag.rag_model import RagModel
from lewisrag.rag_model.testing import tiny_batch, tiny_hf_rag

K = 3
MASKED = float("-inf")  # the usual way to leave a document out: p(z|x) = 0


def _pair(tmp_path, variant, **kw):
    hf = tiny_hf_rag(variant, seed=1, n_docs=K, **kw)
    hf.save_pretrained(tmp_path)
    return hf, RagModel.from_hf_pretrained(tmp_path)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """(variant → (transformers model, RagModel loaded from its checkpoint)), without label smoothing."""
    return {v: _pair(tmp_path_factory.mktemp(v), v) for v in ("token", "sequence")}


def _masked_batch():
    """Two questions, document 0 masked out in both, and the second question's label a single
    predicted token: its target position 1 is padding, where transformers' RAG-Sequence loses the prior."""
    ids, mask, scores, labels = tiny_batch(2, K, 8, 6, 100, seed=3)
    scores[:, 0] = MASKED
    labels[1, 2:] = 1  # pad
    return ids, mask, scores, labels


# ─── a document with the score −inf ──────────────────────────────────────────────────────────────


@pytest.mark.parametrize("variant", ["token", "sequence"])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_loss_with_a_masked_document_equals_transformers(variant, eps, tmp_path):
    hf, ours = _pair(tmp_path, variant, label_smoothing=eps)
    ids, mask, scores, labels = _masked_batch()
    for reduce in (False, True):
        kw = dict(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, labels=labels,
                  reduce_loss=reduce, n_docs=K)
        expected = hf(**kw).loss
        got = ours(**kw).loss
        assert torch.isfinite(expected).all()
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    if variant == "sequence":  # transformers' BOS exclusion too (every first target BOS)
        labels[:, 1] = hf.config.generator.bos_token_id
        hf.config.exclude_bos_score = True
        kw = dict(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, labels=labels, n_docs=K)
        torch.testing.assert_close(ours(**kw, exclude_bos_score=True).loss, hf(**kw).loss, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", ["token", "sequence"])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_gradients_with_a_masked_document_are_finite_and_equal_transformers(variant, eps, tmp_path):
    hf, ours = _pair(tmp_path, variant, label_smoothing=eps)
    ids, mask, scores, labels = _masked_batch()
    grads = []
    for model in (hf, ours):
        model.zero_grad()
        doc_scores = scores.clone().requires_grad_(True)
        model(context_input_ids=ids, context_attention_mask=mask, doc_scores=doc_scores, labels=labels,
              n_docs=K, reduce_loss=True).loss.backward()
        grads.append({"doc_scores": doc_scores.grad,
                      **{n: p.grad for n, p in model.generator.named_parameters() if p.grad is not None}})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 1
    for name, g in grads[1].items():
        assert torch.isfinite(g).all(), name
        torch.testing.assert_close(g, grads[0][name], rtol=1e-4, atol=1e-5, msg=name)


def _with_masked_document(seed=2):
    ids, mask, scores, _ = tiny_batch(3, K, 9, 4, 100, seed=seed)
    scores[:, 0] = MASKED
    scores[1, 2] = MASKED  # question 1 keeps one document only
    return dict(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, n_docs=K)


@pytest.mark.parametrize("nret", [1, 2])
def test_sequence_generate_with_a_masked_document_equals_transformers(pairs, nret):
    hf, ours = pairs["sequence"]
    kw = dict(_with_masked_document(), num_beams=2, max_length=8, num_return_sequences=nret)
    out = ours.generate(**kw, return_evidence=True)
    torch.testing.assert_close(out.sequences, hf.generate(**kw), rtol=0, atol=0)
    assert torch.isfinite(out.scores).all() and torch.isfinite(out.doc_posterior).all()
    assert out.doc_posterior[:, 0].eq(0).all()  # the masked document explains nothing
    # each score is log p(y|x) as transformers ranks it: −its loss on that one answer
    bos = hf.config.generator.bos_token_id
    assert out.sequences[:, 1].ne(bos).all()  # no BOS to exclude: one answer scores as its question's candidates
    for row, seq in enumerate(out.sequences):
        q = row // nret
        expected = -hf(context_input_ids=kw["context_input_ids"][q * K:(q + 1) * K],
                       context_attention_mask=kw["context_attention_mask"][q * K:(q + 1) * K],
                       doc_scores=kw["doc_scores"][q:q + 1], labels=seq[None], n_docs=K).loss
        torch.testing.assert_close(out.scores[row:row + 1], expected, rtol=1e-4, atol=1e-4)


def test_sequence_fast_decoding_with_a_masked_document_equals_thorough(pairs):
    """Where every document's beams hold every candidate (a question's documents alike), fast decoding
    scores as thorough decoding does, masked document or not."""
    _, ours = pairs["sequence"]
    kw = _with_masked_document(seed=3)
    ids = kw["context_input_ids"].view(3, K, -1)
    kw["context_input_ids"] = ids[:, :1].expand(3, K, ids.shape[2]).reshape(3 * K, -1)
    kw["context_attention_mask"] = kw["context_input_ids"].ne(1).long()
    fast = ours.generate(**kw, num_beams=3, max_length=10, num_return_sequences=2, decoding="fast", return_evidence=True)
    thorough = ours.generate(**kw, num_beams=3, max_length=10, num_return_sequences=2, return_evidence=True)
    assert torch.isfinite(fast.scores).all()
    torch.testing.assert_close(fast.sequences, thorough.sequences, rtol=0, atol=0)
    torch.testing.assert_close(fast.scores, thorough.scores, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(fast.doc_posterior, thorough.doc_posterior, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("num_beams,nret", [(1, 1), (3, 2)])
def test_token_generate_with_a_masked_document_equals_transformers(pairs, num_beams, nret):
    hf, ours = pairs["token"]
    kw = dict(_with_masked_document(), num_beams=num_beams, max_length=8, num_return_sequences=nret)
    out = ours.generate(**kw, return_evidence=True)
    torch.testing.assert_close(out.sequences, hf.generate(**kw), rtol=0, atol=0)
    assert torch.isfinite(out.scores).all() and out.doc_posterior[:, :, 0].eq(0).all()


# ─── count arguments ─────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("variant", ["token", "sequence"])
@pytest.mark.parametrize("name,value", [
    ("num_return_sequences", 0), ("num_return_sequences", -1), ("num_return_sequences", 1.5),
    ("n_docs", 0), ("n_docs", -3), ("num_beams", 0), ("num_beams", 2.0), ("num_beams", True),
])
def test_generate_refuses_a_count_that_is_not_a_positive_int(pairs, variant, name, value):
    _, ours = pairs[variant]
    kw = {**_with_masked_document(), "num_beams": 2, "max_length": 6, name: value}
    with pytest.raises(ValueError, match=rf"^{name}: expected a positive integer.*got {re.escape(repr(value))}$"):
        ours.generate(**kw)


@pytest.mark.parametrize("variant", ["token", "sequence"])
def test_generate_reads_none_as_the_default(pairs, variant):
    _, ours = pairs[variant]
    kw = {**_with_masked_document(), "max_length": 6}
    out = ours.generate(**{**kw, "n_docs": None}, num_beams=None, num_return_sequences=None)
    torch.testing.assert_close(out, ours.generate(**kw, num_beams=1, num_return_sequences=1), rtol=0, atol=0)
    assert out.shape[0] == 3


def test_forward_refuses_n_docs_zero(pairs):
    _, ours = pairs["sequence"]
    ids, mask, scores, labels = tiny_batch(2, K, 8, 6, 100)
    with pytest.raises(ValueError, match="^n_docs: expected a positive integer"):
        ours(ids, mask, scores, labels=labels, n_docs=0)
    assert ours(ids, mask, scores, labels=labels, n_docs=None).loss.shape == (2,)  # None: K from doc_scores


# ─── label shapes ────────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("variant", ["token", "sequence"])
def test_forward_refuses_labels_that_are_not_one_row_per_question(pairs, variant):
    _, ours = pairs[variant]
    ids, mask, scores, labels = tiny_batch(2, K, 8, 6, 100)
    for bad in (labels[:1], labels[0], labels[:, :, None]):
        with pytest.raises(ValueError, match=rf"^labels: expected \(B=2, T\).*got {re.escape(str(tuple(bad.shape)))}$"):
            ours(ids, mask, scores, labels=bad)
        with pytest.raises(ValueError, match=rf"^decoder_input_ids: expected \(B=2, T\).*got {re.escape(str(tuple(bad.shape)))}$"):
            ours(ids, mask, scores, decoder_input_ids=bad)
    # doc_scores transposed, (K, B), with n_docs=B: the contexts' B*K rows still match; the labels do not
    with pytest.raises(ValueError, match=r"^labels: expected \(B=3, T\)"):
        ours(ids, mask, scores.T, labels=labels, n_docs=2)


# ─── lengths past the generator's positions ──────────────────────────────────────────────────────


@pytest.fixture(scope="module")
def short(tmp_path_factory):
    """Generators of 16 positions whose answers never end (the end token's logit far down)."""
    return {v: _pair(tmp_path_factory.mktemp(f"short_{v}"), v, max_positions=16, eos_bias=-20.0)
            for v in ("token", "sequence")}


def _short_inputs():
    ids, mask, scores, _ = tiny_batch(2, K, 8, 4, 100, seed=5)
    return dict(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, n_docs=K, num_beams=2)


def test_generate_refuses_num_beams_zero_by_name(pairs):
    _, ours = pairs["token"]
    with pytest.raises(ValueError, match="^num_beams: ") as e:
        ours.generate(**_with_masked_document(), num_beams=0)
    assert "num_return_sequences" not in str(e.value)


@pytest.mark.parametrize("variant,extra,most", [
    ("token", {}, 17),  # the search reads every token but the last: one more than the positions
    ("token", {"return_evidence": True}, 16),  # evidence scores whole answers again
    ("sequence", {}, 16),  # thorough decoding scores whole answers again
    ("sequence", {"decoding": "fast"}, 17),
])
def test_generate_refuses_a_length_past_the_positions_before_decoding(short, variant, extra, most):
    hf, ours = short[variant]
    longest = ours.generate(**_short_inputs(), max_length=most, **extra)
    sequences = longest.sequences if extra.get("return_evidence") else longest
    assert sequences.shape[1] == most  # the limit itself decodes, as in transformers
    if not extra:
        torch.testing.assert_close(sequences, hf.generate(**_short_inputs(), max_length=most), rtol=0, atol=0)
    with pytest.raises(ValueError, match=rf"^max_length: {most + 1} exceeds the generator's 16 positions"
                                         rf".*must be at most {most}$"):
        ours.generate(**_short_inputs(), max_length=most + 1, **extra)
    with pytest.raises(ValueError, match=rf"^max_new_tokens: {most} exceeds the generator's 16 positions"
                                         rf".*must be at most {most - 1}$"):
        ours.generate(**_short_inputs(), max_new_tokens=most, **extra)
    # max_new_tokens sets the length where both are given (transformers' rule): a long max_length is not refused
    assert ours.generate(**_short_inputs(), max_new_tokens=3, max_length=1000).shape[1] == 4
