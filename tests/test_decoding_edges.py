"""RAG-Sequence's search reads its contexts with their attention mask, whatever the generation config's pad
id says; contrastive search, DoLa and assisted generation are refused, not run as greedy search."""

from __future__ import annotations

import pytest
import torch
from transformers import GenerationConfig
from transformers.generation import GenerationMode

from lewisrag.rag_model import RagModel
from lewisrag.rag_model.decoding import unsupported_option
from lewisrag.rag_model.testing import tiny_batch, tiny_hf_rag

K = 3


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    hf = tiny_hf_rag("sequence", seed=1, layers=2, n_docs=K, eos_bias=3.0)
    folder = tmp_path_factory.mktemp("rag_sequence")
    hf.save_pretrained(folder)
    return hf, RagModel.from_hf_pretrained(folder)


def _question(g: torch.Generator, length: int):
    ids = torch.randint(3, 100, (K, length), generator=g)
    ids[:, 0], ids[:, -1] = 0, 2
    return ids, torch.randn(1, K, generator=g)


def _batch(questions) -> dict:
    length = max(ids.shape[1] for ids, _ in questions)
    ids = torch.cat([torch.nn.functional.pad(q, (0, length - q.shape[1]), value=1) for q, _ in questions])
    return dict(context_input_ids=ids, context_attention_mask=ids.ne(1).long(),
                doc_scores=torch.cat([s for _, s in questions]), n_docs=K, max_length=10)


def test_an_answer_does_not_hang_on_its_batch_neighbours_without_a_generation_pad(models):
    """With no pad_token_id in the generation config, the search's mask was all ones: a question batched
    with a longer one read that batch's padding and answered otherwise."""
    _, model = models
    g = torch.Generator().manual_seed(5)
    a, b = _question(g, 6), _question(g, 14)
    pad = model.generation_config.pad_token_id
    try:
        model.generation_config.pad_token_id = None
        assert model.generate(**_batch([a]))[0].tolist() == model.generate(**_batch([a, b]))[0].tolist()
    finally:
        model.generation_config.pad_token_id = pad


def test_a_generation_pad_of_zero_hides_no_start_token(models):
    """`generate(pad_token_id=0)` masked BART's <s> (id 0) in every context: answers left transformers'."""
    hf, model = models
    ids, mask, scores, _ = tiny_batch(2, K, 9, 4, 100, seed=0)
    mask[:] = 1  # no padding at all
    kw = dict(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, n_docs=K, max_length=9, num_beams=3)
    assert model.generate(**kw, pad_token_id=0).tolist() == hf.generate(**kw, pad_token_id=0).tolist()


@pytest.mark.parametrize("option", [{"penalty_alpha": 0.6, "top_k": 4}, {"prompt_lookup_num_tokens": 3},
                                    {"assistant_early_exit": 2}, {"use_mtp": True}])
def test_contrastive_search_and_assisted_generation_are_refused(option):
    assert unsupported_option(GenerationConfig(**option))[0] == next(iter(option))


@pytest.mark.parametrize("option", [{"dola_layers": "low"}, {"dola_layers": [2, 3]}])
def test_dola_generation_is_refused(option):
    """transformers' RAG refuses DoLa; read as greedy search it would change answers in silence."""
    assert unsupported_option(GenerationConfig(**option))[0] == "dola_layers"


@pytest.mark.parametrize("option", [{"penalty_alpha": 0.0, "top_k": 4}, {"penalty_alpha": 0.6, "top_k": 1},
                                    {"penalty_alpha": 0.6, "top_k": 4, "num_beams": 3},
                                    {"dola_layers": "low", "num_beams": 3}])
def test_options_that_select_no_other_search_are_accepted(option):
    """penalty_alpha and dola_layers change the search only where transformers' get_generation_mode says so:
    elsewhere greedy or beam search runs as it would without them, in transformers as here."""
    gc = GenerationConfig(**option)
    assert gc.get_generation_mode() in (GenerationMode.GREEDY_SEARCH, GenerationMode.BEAM_SEARCH)
    assert unsupported_option(gc) is None
