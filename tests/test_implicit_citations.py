"""Implicit citations: the Lewis model's document posterior turned into [id] citations."""

from __future__ import annotations

import doctest

import pytest
import torch

from lewisrag.rag_model import RagModel
from lewisrag.rag_model import implicit_citations as ic
from lewisrag.rag_model.decoding import Decoded
from lewisrag.rag_model.testing import tiny_batch, tiny_hf_rag


class LetterTokenizer:
    """ids 3.. decode to letters, 50 to '.', 0-2 are special (BOS, PAD, EOS)."""

    all_special_ids = [0, 1, 2]

    def decode(self, ids, skip_special_tokens=True):
        return "".join("." if i == 50 else chr(ord("a") + i % 26) for i in ids if i not in self.all_special_ids)


def test_doctests():
    assert doctest.testmod(ic).failed == 0


def test_sequence_cites_the_most_probable_document():
    dec = Decoded(torch.tensor([[2, 3, 4, 50, 2]]), torch.tensor([[0.2, 0.5, 0.3]]), torch.zeros(1))
    assert ic.cited_answers(dec, LetterTokenizer(), [["p1", "p2", "p3"]], "sequence") == ["de [p2]."]


def test_token_cites_per_sentence_and_skips_special_tokens():
    seq = torch.tensor([[2, 3, 50, 4, 50, 2, 1]])  # start, d . e . eos pad
    post = torch.tensor([[[0.9, 0.1], [0.9, 0.1], [0.1, 0.9], [0.2, 0.8], [0.5, 0.5], [0.5, 0.5]]])  # (1, T-1, K)
    dec = Decoded(seq, post, torch.zeros(1))
    assert ic.cited_answers(dec, LetterTokenizer(), [["p1", "p2"]], "token") == ["d [p1]. e [p2]."]


def test_shape_errors_name_expected_and_actual():
    with pytest.raises(ValueError, match=r"expected \(2, 3\), got \(2, 2\)"):
        ic.token_citations(["a", "b"], torch.zeros(2, 2), ["x", "y", "z"])


@pytest.mark.parametrize("variant", ["token", "sequence"])
def test_from_a_real_decode(variant, tmp_path):
    hf = tiny_hf_rag(variant, seed=1, n_docs=3, eos_bias=3.0)
    hf.save_pretrained(tmp_path)
    model = RagModel.from_hf_pretrained(tmp_path)
    ids, mask, scores, _ = tiny_batch(2, 3, 9, 4, 100, seed=2)
    dec = model.generate(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, n_docs=3,
                         num_beams=2, max_length=8, return_evidence=True)
    answers = ic.cited_answers(dec, LetterTokenizer(), [["a1", "a2", "a3"], ["b1", "b2", "b3"]], variant)
    assert len(answers) == 2
    for answer, prefix in zip(answers, "ab"):
        assert answer == "" or f"[{prefix}" in answer  # every non-empty answer cites its own question's documents
