"""Generation options RAG decoding must refuse or honour as transformers does, the padding its scoring
masks, and a RAG-Token step's log-probabilities independent of the questions batched with it."""

from __future__ import annotations

import pytest
import torch

from lewisrag.rag_model import RagModel
from lewisrag.rag_model.testing import tiny_batch, tiny_hf_rag

K = 3


def _pair(tmp_path, variant, eos_bias):
    hf = tiny_hf_rag(variant, seed=1, layers=2, n_docs=K, eos_bias=eos_bias)
    hf.save_pretrained(tmp_path / variant)
    return hf, RagModel.from_hf_pretrained(tmp_path / variant)


def _inputs(seed, batch=3):
    ids, mask, scores, _ = tiny_batch(batch, K, 9, 4, 100, seed=seed)
    ids[0, -2:], mask[:] = 7, 1  # no padded context: transformers 5 reads padding unmasked (docs/real-data.md)
    return dict(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, n_docs=K)


def _base_config(**options):
    from transformers import GenerationConfig

    return GenerationConfig(decoder_start_token_id=2, bos_token_id=0, eos_token_id=2, pad_token_id=1, **options)


# --- options transformers honours and these searches do not --------------------------------------------------

HONOURED = [("renormalize_logits", True, False), ("encoder_repetition_penalty", 3.0, 1.0),
            ("guidance_scale", 2.0, 1.0), ("max_time", 0.0, None), ("stop_strings", ["x"], None),
            ("watermarking_config", {"greenlist_ratio": 0.25}, None), ("constraints", [], None),
            ("force_words_ids", [[5]], None)]


@pytest.mark.parametrize("name,value,neutral", HONOURED, ids=[h[0] for h in HONOURED])
def test_an_option_transformers_honours_is_refused_unless_neutral(name, value, neutral):
    """Each changes transformers' ids (or makes its RAG refuse); accepted and ignored, ours differed."""
    from lewisrag.data.io import InputError
    from lewisrag.rag_model.decoding import check_generation_config, resolve_settings

    saved = _base_config(**{name: value})
    with pytest.raises(InputError, match="not supported by RAG decoding") as e:
        check_generation_config(saved, 100, "generation_config.json")
    assert e.value.field == name
    with pytest.raises(ValueError, match=name):
        resolve_settings(saved)
    with pytest.raises(ValueError, match=name):
        resolve_settings(_base_config(), **{name: value})  # as generate(**kwargs)
    check_generation_config(_base_config(**{name: neutral}), 100, "generation_config.json")
    resolve_settings(_base_config(), **{name: neutral})


def test_generate_refuses_renormalize_logits(tmp_path):
    _, ours = _pair(tmp_path, "token", 2.0)
    with pytest.raises(ValueError, match="renormalize_logits"):
        ours.generate(**_inputs(0), num_beams=3, max_length=10, renormalize_logits=True)


# --- a generation config without pad_token_id ----------------------------------------------------------------


def _without_generation_pad(hf, ours):
    """Drop pad_token_id from every generation config both models read; the model configs keep theirs."""
    for gc in {id(g): g for g in (hf.generator.generation_config, getattr(hf, "generation_config", None),
                                  ours.generation_config) if g is not None}.values():
        gc.pad_token_id = None
    assert ours.generation_config.eos_token_id == 2 and ours.generator.config.pad_token_id == 1


def test_rag_sequence_without_a_generation_pad_equals_transformers(tmp_path):
    """transformers scores candidates masking the model's pad (get_nll), not EOS: with the pad taken
    from the generation config, which fell back to EOS, every EOS target was masked out of p(y|x,z)."""
    hf, ours = _pair(tmp_path, "sequence", 3.0)
    _without_generation_pad(hf, ours)
    for seed in range(10):
        for num_beams in (2, 3):
            kw = dict(_inputs(seed), num_beams=num_beams, max_length=8)
            torch.testing.assert_close(ours.generate(**kw), hf.generate(**kw), rtol=0, atol=0,
                                       msg=f"seed {seed}, num_beams {num_beams}")


@pytest.mark.parametrize("num_beams", [1, 3])
def test_fast_rag_sequence_without_a_generation_pad_scores_the_end_token(tmp_path, num_beams):
    """Fast decoding reads p(y|x,z) off the search, which masked the tokens equal to the search's pad:
    with none saved, that pad is EOS and every answer's end token dropped out of its score, which then
    differed from thorough decoding's (it masks the model's pad). Every document alike, both must agree."""
    _, ours = _pair(tmp_path, "sequence", 3.0)
    ours.generation_config.pad_token_id = None
    kw = _inputs(3)
    ids = kw["context_input_ids"].view(3, K, -1)
    kw["context_input_ids"] = ids[:, :1].expand(3, K, ids.shape[2]).reshape(3 * K, -1)  # a question's docs alike
    kw = dict(kw, num_beams=num_beams, max_length=8, num_return_sequences=1, return_evidence=True)
    fast, thorough = ours.generate(**kw, decoding="fast"), ours.generate(**kw)
    assert (fast.sequences[:, 1:] == 2).any(), "no answer ended within max_length: the test shows nothing"
    torch.testing.assert_close(fast.sequences, thorough.sequences, rtol=0, atol=0)
    torch.testing.assert_close(fast.scores, thorough.scores, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(fast.doc_posterior, thorough.doc_posterior, rtol=1e-4, atol=1e-4)


def test_rag_token_evidence_without_a_generation_pad_scores_the_end_token(tmp_path):
    """Up to each answer's end token, the per-token posteriors are those read with a pad: the end
    token, EOS, is a target (it was masked, its posterior left at the prior)."""
    hf, ours = _pair(tmp_path, "token", 6.0)
    kw = dict(_inputs(2), num_beams=1, max_length=8, return_evidence=True)
    padded = ours.generate(**kw)
    _without_generation_pad(hf, ours)
    unpadded = ours.generate(**kw)
    seqs = padded.sequences
    ends = [int((row[1:] == 2).nonzero()[0]) for row in seqs]  # row t of doc_posterior is token t+1
    assert any(e < seqs.shape[1] - 2 for e in ends)  # some answer ends before the others (fill follows)
    for q, e in enumerate(ends):
        torch.testing.assert_close(unpadded.sequences[q, : e + 2], seqs[q, : e + 2], rtol=0, atol=0)
        torch.testing.assert_close(unpadded.doc_posterior[q, : e + 1], padded.doc_posterior[q, : e + 1])


# --- None as an option's value --------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["token", "sequence"])
def test_none_switches_a_saved_option_off_as_in_transformers(tmp_path, variant):
    hf, ours = _pair(tmp_path, variant, -3.0)
    assert ours.generation_config.forced_eos_token_id == 2
    kw = dict(_inputs(1), num_beams=1, max_length=6)
    expected = hf.generate(**kw, forced_eos_token_id=None)
    assert not expected[:, -1].eq(2).all()  # the saved option, off, changes the ids
    torch.testing.assert_close(ours.generate(**kw, forced_eos_token_id=None), expected, rtol=0, atol=0)


def test_none_keeps_the_saved_value_for_generates_named_arguments():
    """generate(num_beams=None, max_length=None) is how answering passes 'not given' (answer_questions)."""
    from lewisrag.rag_model.decoding import _max_length, resolve_settings

    saved = _base_config(num_beams=3, max_new_tokens=9)
    gc = resolve_settings(saved, num_beams=None, max_length=None)
    assert (gc.num_beams, _max_length(gc)) == (3, 10)
    assert _max_length(resolve_settings(saved, max_new_tokens=None, max_length=5)) == 5


def test_none_leaving_no_start_or_padding_token_is_refused():
    from lewisrag.rag_model.decoding import resolve_settings

    with pytest.raises(ValueError, match="no token to start decoding from"):
        resolve_settings(_base_config(), decoder_start_token_id=None, bos_token_id=None)
    with pytest.raises(ValueError, match="no token to fill finished answers"):
        resolve_settings(_base_config(), pad_token_id=None, eos_token_id=None)
    assert resolve_settings(_base_config(), decoder_start_token_id=None).bos_token_id == 0


# --- RAG-Token's mixture, per row -----------------------------------------------------------------------------


@pytest.mark.parametrize("beams", [1, 2])
def test_a_questions_step_log_probs_do_not_depend_on_its_batch_mates(beams):
    """A question batched with one whose mixture underflows (logits scaled by 300) gets the very
    log-probabilities it gets alone: the log-space fallback used to switch for the whole batch."""
    from lewisrag.rag_model.decoding import MIX_FLOOR, _token_mixture

    g = torch.Generator().manual_seed(0)
    k, v = 4, 50
    calm, calm_scores = torch.randn(k, beams, v, generator=g) * 3, torch.randn(1, k, generator=g)
    wild, wild_scores = torch.randn(k, beams, v, generator=g) * 300, torch.randn(1, k, generator=g)
    alone = _token_mixture(calm, calm_scores)  # (W, V)
    assert alone.min() > torch.tensor(MIX_FLOOR).log()  # summed as probabilities
    for order in ((calm, wild), (wild, calm)):
        logits = torch.cat(order)
        scores = torch.cat((calm_scores, wild_scores) if order[0] is calm else (wild_scores, calm_scores))
        both = _token_mixture(logits, scores).view(2, beams, v)
        q = 0 if order[0] is calm else 1
        assert torch.equal(both[q], alone)
        assert torch.equal(both[1 - q], _token_mixture(wild, wild_scores))
