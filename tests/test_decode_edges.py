"""Edges of decoding and what reads its output: where a RAG-Token sentence ends for its implicit
citations, an index smaller than the passages asked for, a saved num_return_sequences, and fast
decoding's passage posterior for a candidate that transformers' scoring takes without the prior."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from lewisrag.data.io import InputError
from lewisrag.rag_model.implicit_citations import cite, token_citations

# --- implicit citations: sentences end where the evaluator's splitter ends them -----------------------------


def _cited(pieces: list[str]) -> str:
    post = torch.tensor([[0.9, 0.1]]).repeat(len(pieces), 1)  # (T, K)
    return cite(token_citations(pieces, post, ["1", "2"]))


def test_a_dot_inside_a_number_or_abbreviation_ends_no_sentence():
    """BART makes "." a token of its own inside "71.3", "$3.50" and "U.S.": each closed a sentence, so
    'The population is 71 [1]. 3 million [1].' went to the evaluator, which reads one sentence there
    (eval/statements.py: a stop ends one before whitespace or the end, never after an abbreviation)."""
    assert _cited([" The", " population", " is", " 71", ".", "3", " million", "."]) == \
        "The population is 71.3 million [1]."
    assert _cited([" It", " costs", " $", "3", ".", "5", "0", " today"]) == "It costs $3.50 today [1]"
    assert _cited([" He", " moved", " to", " the", " ", "U", ".", "S", ".", " in", " 1990", "."]) == \
        "He moved to the U.S. in 1990 [1]."
    assert _cited([" Dr", ".", " Smith", " leads", " it", ".", " Since", " 2010", "."]) == \
        "Dr. Smith leads it [1]. Since 2010 [1]."


def test_stops_before_a_space_and_cjk_stops_still_end_sentences():
    post = torch.tensor([[0.9, 0.1], [0.9, 0.1], [0.1, 0.9], [0.1, 0.9], [0.2, 0.8], [0.2, 0.8]])
    pieces = ["登录失败", "。", "返回 422", "!", " Then", "?"]
    assert token_citations(pieces, post, ["1", "2"]) == [("登录失败。", ["1"]), ("返回 422!", ["2"]), ("Then?", ["2"])]


# --- check_found: an index of fewer passages than asked for ---------------------------------------------------


def test_an_index_smaller_than_n_docs_is_refused_by_every_search(tmp_path):
    """The float32 product search returns only N columns when k > N, no -1: check_found passed it and
    `retrieve` failed later with a bare ValueError (a traceback, exit 3)."""
    from lewisrag.data.records import Passage
    from lewisrag.index.dense import DenseIndex, build_faiss
    from lewisrag.rag_model.model import check_found

    x = np.random.default_rng(0).normal(size=(2, 8)).astype(np.float32)
    idx = DenseIndex(tmp_path / "idx", {"dim": 8, "faiss_factory": "Flat"}, build_faiss(x, "Flat"), x,
                     [Passage("0", "a", "b"), Passage("1", "c", "d")])
    for device in (None, "cpu"):  # FAISS, then the product search
        if device:
            idx.search_on(device, "float32")
        _, rows = idx.search(x[:1], 3)
        held = r"it holds 2 passages, fewer than the 3 asked for .*at most 2 \(--n-docs\)"
        with pytest.raises(InputError, match=held) as e:
            check_found(rows, 3, idx)
        assert e.value.field == "n_passages"


def test_rows_narrower_than_k_are_short_even_without_a_passage_count():
    from lewisrag.rag_model.model import check_found

    with pytest.raises(InputError, match="fewer than 3 passages for 2 of 2 questions") as e:
        check_found(np.array([[0, 1], [1, 0]]), 3, SimpleNamespace(path="idx"))
    assert e.value.field == "search_params"
    check_found(np.array([[0, 1, 2]]), 3, SimpleNamespace(path="idx", passages=[0, 1, 2]))  # enough


# --- a saved num_return_sequences -----------------------------------------------------------------------------


def test_a_saved_num_return_sequences_is_refused_naming_the_field():
    """transformers returns that many rows a question; answering reads one, and RAG decoding used to
    ignore the saved value silently."""
    from transformers import GenerationConfig

    from lewisrag.rag_model.decoding import check_generation_config, resolve_settings

    gc = GenerationConfig(decoder_start_token_id=2, eos_token_id=2, pad_token_id=1, num_beams=2,
                          num_return_sequences=2)
    with pytest.raises(InputError, match="answers are one per question") as e:
        check_generation_config(gc, 100, "generation_config.json")
    assert e.value.field == "num_return_sequences"
    with pytest.raises(ValueError, match="num_return_sequences"):
        resolve_settings(gc)
    gc.num_return_sequences = 1
    check_generation_config(gc, 100, "generation_config.json")


def test_a_max_length_of_the_start_token_alone_is_refused():
    """max_length 1 leaves nothing to generate: greedy search wrote one token past it, beam search none."""
    from transformers import BartConfig, GenerationConfig

    from lewisrag.rag_model.decoding import check_generation_config, check_length

    gc = GenerationConfig(decoder_start_token_id=2, eos_token_id=2, pad_token_id=1, max_length=1)
    with pytest.raises(InputError, match="at least 2") as e:
        check_generation_config(gc, 100, "generation_config.json")
    assert e.value.field == "max_length"
    for rescores in (True, False):
        with pytest.raises(ValueError, match="max_length: 1 leaves no token to generate"):
            check_length(gc, BartConfig(max_position_embeddings=64), rescores)
    gc.max_length = 2
    check_generation_config(gc, 100, "generation_config.json")
    check_length(gc, BartConfig(max_position_embeddings=64), True)


# --- fast decoding's passage posterior --------------------------------------------------------------------------


def test_fast_posterior_keeps_the_prior_where_transformers_score_drops_it(tmp_path):
    """A candidate whose second target token is padding is ranked without p(z|x) (transformers'
    scoring loses it there), but p(z|x,y) is still prior times likelihood: with a question's documents
    alike, p(y|x,z) is the same under each and the posterior is the prior. Fast decoding gave the
    uniform [1/3, 1/3, 1/3] there where thorough decoding gave the prior."""
    from lewisrag.rag_model import RagModel
    from lewisrag.rag_model.testing import tiny_batch, tiny_hf_rag

    tiny_hf_rag("sequence", seed=1, layers=1, n_docs=3, eos_bias=5.0).save_pretrained(tmp_path)
    ours = RagModel.from_hf_pretrained(tmp_path)
    ids, mask, scores, _ = tiny_batch(3, 3, 9, 4, 100, seed=2)
    ids[0, -2:], mask[:] = 7, 1
    ids = ids.view(3, 3, -1)[:, :1].expand(3, 3, -1).reshape(9, -1)  # a question's documents alike
    kw = dict(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, n_docs=3, num_beams=2,
              return_evidence=True)
    for max_length in (2, 3):  # [start, end] and [start, end, end]: the second target is padding
        fast = ours.generate(**kw, max_length=max_length, decoding="fast")
        thorough = ours.generate(**kw, max_length=max_length)
        torch.testing.assert_close(fast.sequences, thorough.sequences, rtol=0, atol=0)
        torch.testing.assert_close(fast.doc_posterior, torch.softmax(scores, -1), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(fast.doc_posterior, thorough.doc_posterior, rtol=1e-4, atol=1e-5)


def test_fast_posterior_gives_a_masked_document_nothing(tmp_path):
    """A document masked out with the score −inf has p(z|x) = 0, so p(z|x,y) = 0 too, as thorough
    decoding has it; fast decoding gave it a third of the posterior for a short candidate."""
    from lewisrag.rag_model import RagModel
    from lewisrag.rag_model.testing import tiny_batch, tiny_hf_rag

    tiny_hf_rag("sequence", seed=1, layers=1, n_docs=3, eos_bias=5.0).save_pretrained(tmp_path)
    ours = RagModel.from_hf_pretrained(tmp_path)
    ids, mask, scores, _ = tiny_batch(3, 3, 9, 4, 100, seed=2)
    ids[0, -2:], mask[:] = 7, 1
    scores[0, 1] = float("-inf")
    kw = dict(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, n_docs=3, num_beams=2,
              max_length=8, return_evidence=True)
    fast = ours.generate(**kw, decoding="fast")
    thorough = ours.generate(**kw)
    torch.testing.assert_close(fast.sequences, thorough.sequences, rtol=0, atol=0)
    assert fast.doc_posterior[0, 1] == 0
    torch.testing.assert_close(fast.doc_posterior[0], thorough.doc_posterior[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(fast.doc_posterior.sum(-1), torch.ones(3))
