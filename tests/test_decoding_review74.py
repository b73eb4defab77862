"""RAG decoding against transformers where a review found it otherwise: RAG-Sequence's default beam count, the
precision of RAG-Token's log-space mixture rows, and RAG-Sequence's choices given to RAG-Token."""

from __future__ import annotations

import pytest
import torch

from lewisrag.rag_model import RagModel
from lewisrag.rag_model.checkpoints import from_hf
from lewisrag.rag_model.testing import tiny_batch, tiny_hf_rag

K = 3


def _inputs():
    ids, mask, scores, _ = tiny_batch(2, K, 9, 4, 100, seed=5)
    ids[0, -2:], mask[:] = 7, 1  # no padding: transformers' RAG-Sequence searches without the mask
    return dict(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, n_docs=K)


@pytest.mark.parametrize("variant,config", [("token", {"eos_bias": 2.0}),
                                            ("sequence", {"eos_bias": 3.0, "init_std": 1.0})])
def test_without_num_beams_each_variant_searches_as_transformers(variant, config):
    """generate() without num_beams: transformers' RAG-Token reads the saved num_beams, its RAG-Sequence reads
    the RagConfig's, which has none, so 1 beam, whatever its generator saved (bart-large saves 4). lewisrag's
    RAG-Sequence searched with the generator's saved 3 beams here: other answers than transformers'."""
    hf = tiny_hf_rag(variant, seed=1, layers=2, n_docs=K, **config)
    gc = hf.generation_config if variant == "token" else hf.generator.generation_config
    gc.num_beams, gc.max_length = 3, 8
    ours = from_hf(RagModel, hf)
    with torch.no_grad():
        expected = hf.generate(**_inputs())
    got = ours.generate(**_inputs())
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    three, greedy = ours.generate(**_inputs(), num_beams=3), ours.generate(**_inputs(), num_beams=1)
    assert not torch.equal(three, greedy)  # the saved 3 beams answer otherwise: which one was read shows
    torch.testing.assert_close(got, three if variant == "token" else greedy, rtol=0, atol=0)
    assert ours.generation_config.num_beams == 3  # the model's config is left as it was


def test_token_mixture_rows_summed_in_log_space_are_float32_in_a_half_precision_model():
    """A row with a token all but impossible under every document is summed in log space; in a bfloat16
    model its log-softmax ran in bfloat16, where 0.03125 above a 5000-way tie rounds away: token 0 won,
    where float32 (and the rows summed as probabilities) pick token 5."""
    from lewisrag.rag_model.decoding import _token_mixture

    logits = torch.zeros(2, 1, 5000)  # (B*K, W, V): one question, two documents, one beam
    logits[:, 0, 5], logits[:, 0, 4999] = 0.03125, -200.0  # token 4999 below MIX_FLOOR: the log-space row
    doc_scores = torch.zeros(1, 2)
    exact = _token_mixture(logits, doc_scores)  # (1, V)
    half = _token_mixture(logits.bfloat16(), doc_scores)
    assert exact.argmax().item() == 5 and half.argmax().item() == 5
    torch.testing.assert_close(half, exact, rtol=0, atol=1e-6)


@pytest.fixture(scope="module")
def models():
    return {v: from_hf(RagModel, tiny_hf_rag(v, seed=1, layers=1, n_docs=K)) for v in ("token", "sequence")}


@pytest.mark.parametrize("variant", ["token", "sequence"])
def test_a_decoding_typo_is_refused_by_either_variant(models, variant):
    """RAG-Token took decoding="fsat" in silence (RAG-Sequence refused it)."""
    with pytest.raises(ValueError, match="decoding must be 'thorough' or 'fast', got 'fsat'"):
        models[variant].generate(**_inputs(), max_length=4, decoding="fsat")


@pytest.mark.parametrize("extra,named", [({"decoding": "fast"}, "decoding='fast'"),
                                         ({"do_deduplication": False}, "do_deduplication=False"),
                                         ({"do_deduplication": True}, "do_deduplication=True")])
def test_rag_token_refuses_rag_sequence_choices(models, extra, named):
    """Fast decoding and deduplication are RAG-Sequence's: RAG-Token decoded as without them, and said nothing
    (transformers' RAG-Token generate refuses both as unused arguments). RAG-Sequence still takes them."""
    with pytest.raises(ValueError, match=f"^{named} is RAG-Sequence's"):
        models["token"].generate(**_inputs(), max_length=4, **extra)
    assert models["sequence"].generate(**_inputs(), max_length=4, **extra).shape[0] == 2
    assert models["token"].generate(**_inputs(), max_length=4, decoding="thorough").shape[0] == 2  # the default, given
