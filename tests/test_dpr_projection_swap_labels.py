"""DPR training from a projecting encoder (one network means its encode_proj too), the sizes a started
run records, and swap's labels for paths with no last name of their own."""

from __future__ import annotations

import json

import pytest
import torch

from lewisrag.data.records import read_passages, read_qa
from lewisrag.experiments.swap import labels
from lewisrag.index.encoders import META_FILE, DPRCheckpoint, state_fingerprint
from lewisrag.training.dpr import DPRTrainConfig, train_dpr


@pytest.fixture(scope="module")
def projecting_question_encoder(tiny_corpus, tmp_path_factory):
    """A transformers DPRQuestionEncoder folder with projection_dim 16 over a 32-wide, 1-layer BERT."""
    from transformers import DPRConfig, DPRQuestionEncoder

    from lewisrag.training.tokenizer import bert_wordpiece_tokenizer

    tok = bert_wordpiece_tokenizer([p.text for p in read_passages(tiny_corpus["passages"])], 150)
    torch.manual_seed(0)
    model = DPRQuestionEncoder(DPRConfig(vocab_size=len(tok) + 7, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=64, projection_dim=16, hidden_dropout_prob=0.05,
                                         attention_probs_dropout_prob=0.0, max_position_embeddings=128))
    out = tmp_path_factory.mktemp("projq") / "projq"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_shared_training_ties_the_projection_too(tiny_corpus, projecting_question_encoder, tmp_path):
    """Was: `shared` tied only bert_model, so with projection_dim > 0 each side trained its own encode_proj
    while lewisrag_dpr.json recorded shared: true; a later --init on that checkpoint then found the two
    sides unequal and trained them as two networks without a word. Now both sides' encode_proj is one
    module while training and the saved copies are equal."""
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    meta = train_dpr(DPRTrainConfig(init=str(projecting_question_encoder), steps=2, lr=1e-2, batch_size=8, device="cpu"),
                     qa, passages, tmp_path / "ckpt")
    assert meta["config"]["shared"] is True
    ckpt = DPRCheckpoint.load(tmp_path / "ckpt")
    q, c = ckpt.question_encoder.question_encoder, ckpt.ctx_encoder.ctx_encoder
    from transformers import DPRQuestionEncoder

    before = DPRQuestionEncoder.from_pretrained(projecting_question_encoder).question_encoder.encode_proj.weight
    assert not torch.equal(q.encode_proj.weight, before)  # the projection trained: the equality below is no start's
    assert torch.equal(q.encode_proj.weight, c.encode_proj.weight) and torch.equal(q.encode_proj.bias, c.encode_proj.bias)
    assert state_fingerprint(q) == state_fingerprint(c)
    # saved as two independent copies: RAG fine-tuning moves the question side alone
    assert q.encode_proj is not c.encode_proj and q.bert_model is not c.bert_model
    # continued with --init, it is one network again
    more = train_dpr(DPRTrainConfig(init=str(tmp_path / "ckpt"), steps=1, batch_size=8, device="cpu"), qa, passages,
                     tmp_path / "more")
    assert more["config"]["shared"] is True


def test_a_started_run_records_its_models_sizes(tiny_corpus, projecting_question_encoder, tmp_path):
    """Was: a run started from --init recorded the scratch flags' defaults in lewisrag_dpr.json's config
    (hidden_size 128, layers 2, heads 4, vocab_size 2000, dropouts 0.1), sizes its model does not have.
    Now it records the started model's own."""
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    train_dpr(DPRTrainConfig(init=str(projecting_question_encoder), steps=0, batch_size=8, device="cpu"), qa, passages,
              tmp_path / "ckpt")
    saved = json.loads((tmp_path / "ckpt" / META_FILE).read_text())["config"]
    model = DPRCheckpoint.load(tmp_path / "ckpt").question_encoder.config
    assert (saved["hidden_size"], saved["layers"], saved["heads"], saved["vocab_size"]) == (32, 1, 2, model.vocab_size)
    assert model.vocab_size != 2000 and (saved["dropout"], saved["attention_dropout"]) == (0.05, 0.0)
    assert "vocab_size_asked" not in json.loads((tmp_path / "ckpt" / META_FILE).read_text())


def test_swap_labels_name_dot_paths_by_their_folder(tmp_path, monkeypatch):
    """Was: an index or model given as "." (or "./", "a/..") was labelled "" in swap's table and JSON, as
    Path(".").name is "". Now such a local path is named by the folder it resolves to; hf: names and
    plain paths are unchanged, and two paths whose names agree still get their whole paths."""
    (tmp_path / "a" / "index").mkdir(parents=True)
    (tmp_path / "b" / "index").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a" / "index")
    assert labels(["."]) == labels(["./"]) == labels(["../index/sub/.."]) == ["index"]
    assert labels([".", "../../b"]) == ["index", "b"]
    assert labels([".", "../../b/index"]) == [".", "../../b/index"]  # both "index": the whole paths, distinct
    assert labels(["hf:org/rag-model", "runs/x/final"]) == ["rag-model", "final"]
    assert labels(["x/questions_a.jsonl", "."], stem=True) == ["questions_a", "index"]
    assert all(labels(["/"]))
