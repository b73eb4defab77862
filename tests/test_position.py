"""The position probe measures where a reader finds the gold passage; the Lewis model has no position."""

from __future__ import annotations


import torch

from lewisrag.data.records import Passage, QAExample
from lewisrag.experiments import position
from lewisrag.rag_model import RagModel
from lewisrag.rag_model.testing import tiny_batch, tiny_hf_rag


def test_a_reader_of_the_first_passage_only(tmp_path):
    gold = [Passage(f"g{i}", "t", f"ans{i}") for i in range(4)]
    other = [[Passage(f"o{i}{j}", "t", "noise") for j in range(3)] for i in range(4)]
    examples = [QAExample(f"q{i}", "?", [f"ans{i}"]) for i in range(4)]

    def first_only(questions, passages):
        return [ps[0].text for ps in passages]

    curve = position.position_probe(examples, [o[:2] + [g] for o, g in zip(other, gold)], gold, first_only)
    assert curve["positions"] == [1, 2, 3] and curve["exact_match"] == [1.0, 0.0, 0.0] and curve["n"] == 4
    position.plot_positions({"first only": curve, "flat": {**curve, "exact_match": [0.5] * 3}}, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_the_lewis_model_ignores_document_order(tmp_path):
    """Permuting the K documents (with their scores) leaves RAG's loss and decoded answer unchanged."""
    for variant in ("token", "sequence"):
        hf = tiny_hf_rag(variant, seed=3, n_docs=3)
        hf.save_pretrained(tmp_path / variant)
        model = RagModel.from_hf_pretrained(tmp_path / variant)
        ids, mask, scores, labels = tiny_batch(2, 3, 9, 4, 100, seed=4)
        perm = torch.tensor([2, 0, 1])
        ids_p = ids.view(2, 3, -1)[:, perm].reshape(6, -1)
        mask_p = mask.view(2, 3, -1)[:, perm].reshape(6, -1)
        kw = dict(labels=labels, reduce_loss=False, n_docs=3)
        a = model(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, **kw).loss
        b = model(context_input_ids=ids_p, context_attention_mask=mask_p, doc_scores=scores[:, perm], **kw).loss
        torch.testing.assert_close(a, b)
        gen = dict(n_docs=3, num_beams=1, max_length=6)
        torch.testing.assert_close(model.generate(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, **gen),
                                   model.generate(context_input_ids=ids_p, context_attention_mask=mask_p, doc_scores=scores[:, perm], **gen))
