"""RagModel: losses and gradients equal transformers' RAG; checkpoints round-trip; question mode retrieves."""

from __future__ import annotations

import doctest
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerFast, RagSequenceForGeneration, RagTokenForGeneration

from lewisrag.data.io import InputError
from lewisrag.data.records import Passage
from lewisrag.rag_model import RagModel, RagSettings, Tokenizers
from lewisrag.rag_model import marginalize as M
from lewisrag.rag_model import model as model_module
from lewisrag.rag_model.testing import tiny_batch, tiny_hf_rag

K = 3


def _load(variant, tmp_path, **kw):
    hf = tiny_hf_rag(variant, seed=0, n_docs=K, **kw)
    hf.save_pretrained(tmp_path)
    return hf, RagModel.from_hf_pretrained(tmp_path)


def test_docstring_examples():
    assert doctest.testmod(model_module).failed == 0


@pytest.mark.parametrize("variant", ["token", "sequence"])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_loss_equals_transformers(variant, eps, tmp_path):
    hf, ours = _load(variant, tmp_path, label_smoothing=eps)
    ids, mask, scores, labels = tiny_batch(2, K, 8, 6, 100)
    for reduce in (False, True):
        expected = hf(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, labels=labels,
                      reduce_loss=reduce, n_docs=K).loss
        got = ours(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, labels=labels,
                   reduce_loss=reduce, n_docs=K)
        assert got.loss.shape == expected.shape == ((2,) if not reduce else ())
        torch.testing.assert_close(got.loss, expected, rtol=1e-5, atol=1e-5)
        assert got.logits.shape == (2 * K, 6, 100) and got.doc_scores is scores


def test_sequence_exclude_bos_equals_transformers(tmp_path):
    hf, ours = _load("sequence", tmp_path)
    hf.config.exclude_bos_score = True
    ids, mask, scores, labels = tiny_batch(2, K, 8, 6, 100)
    labels[:, 1] = 0  # every first target is BOS
    expected = hf(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, labels=labels, n_docs=K).loss
    got = ours(ids, mask, scores, labels=labels, exclude_bos_score=True).loss
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", ["token", "sequence"])
def test_question_encoder_gradient_equals_transformers(variant, tmp_path):
    hf, ours = _load(variant, tmp_path)
    ids, mask, _, labels = tiny_batch(2, K, 8, 6, 100)
    g = torch.Generator().manual_seed(9)
    q_ids = torch.randint(3, 100, (2, 7), generator=g)
    docs = torch.randn(2, K, 32, generator=g)  # fixed stored doc vectors (B, K, D)
    grads = []
    for model, encode in ((hf, lambda: hf.question_encoder(q_ids)[0]), (ours, lambda: ours.encode_questions(q_ids, torch.ones_like(q_ids)))):
        model.train(False)
        model.zero_grad()
        q = encode()  # (B, D)
        doc_scores = torch.bmm(q.unsqueeze(1), docs.transpose(1, 2)).squeeze(1)  # (B, K)
        model(context_input_ids=ids, context_attention_mask=mask, doc_scores=doc_scores, labels=labels, n_docs=K).loss.sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.question_encoder.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 0
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("variant", ["token", "sequence"])
def test_one_document_equals_plain_bart_nll(variant, tmp_path):
    _, ours = _load(variant, tmp_path)
    ids, mask, scores, labels = tiny_batch(2, 1, 8, 6, 100)
    loss = ours(ids, mask, scores, labels=labels, n_docs=1).loss
    logits = ours.generator(input_ids=ids, attention_mask=mask, decoder_input_ids=labels).logits
    target = M.shift_labels_left(labels, 1)
    plain = F.cross_entropy(logits.transpose(1, 2), target, ignore_index=1, reduction="none").sum(1)
    torch.testing.assert_close(loss, plain, rtol=1e-5, atol=1e-5)


def test_save_load_roundtrip(tmp_path):
    _, ours = _load("sequence", tmp_path / "hf")
    ours.settings = RagSettings(variant="sequence", n_docs=K, generator_tokenizer="tok/gen", index_path="idx", index_fingerprint="abc")
    ours.save_pretrained(tmp_path / "ckpt")
    again = RagModel.from_pretrained(tmp_path / "ckpt")
    meta = json.loads((tmp_path / "ckpt" / "rag.json").read_text())
    assert meta["settings"]["variant"] == "sequence" and meta["settings"]["index_fingerprint"] == "abc"
    assert again.settings == ours.settings and again.variant == "sequence" and again.n_docs == K
    assert list((tmp_path / "ckpt" / "generator").glob("*.safetensors"))
    ids, mask, scores, labels = tiny_batch(2, K, 8, 6, 100)
    torch.testing.assert_close(again(ids, mask, scores, labels=labels).loss, ours(ids, mask, scores, labels=labels).loss)


@pytest.mark.parametrize("variant,cls", [("token", RagTokenForGeneration), ("sequence", RagSequenceForGeneration)])
def test_to_hf_roundtrip(variant, cls, tmp_path):
    _, ours = _load(variant, tmp_path / "in", label_smoothing=0.1)
    ours.to_hf(tmp_path / "out")
    hf = cls.from_pretrained(tmp_path / "out").eval()
    assert hf.config.label_smoothing == 0.1 and hf.config.n_docs == K
    ids, mask, scores, labels = tiny_batch(2, K, 8, 6, 100)
    expected = hf(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, labels=labels, n_docs=K).loss
    torch.testing.assert_close(ours(ids, mask, scores, labels=labels).loss, expected, rtol=1e-5, atol=1e-5)
    assert RagModel.from_hf_pretrained(tmp_path / "out").variant == variant


def test_bad_checkpoints_are_input_errors(tmp_path):
    (tmp_path / "rag.json").write_text('{"format": "lewisrag-rag/1", "settings": {"variant": "token", "colour": 1}}')
    with pytest.raises(InputError, match="unknown settings"):
        RagModel.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "bart"}')
    with pytest.raises(InputError, match="not a RAG checkpoint"):
        RagModel.from_hf_pretrained(tmp_path)



@pytest.mark.parametrize(("settings", "field", "message"), [
    ({"title_sep": None}, "settings.title_sep", "expected a string, got null"),
    ({"prefix": 3}, "settings.prefix", "expected a string, got 3"),
    ({"n_docs": "two"}, "settings.n_docs", "expected an integer"),
    ({"n_docs": True}, "settings.n_docs", "expected an integer"),
    ({"do_deduplication": "yes"}, "settings.do_deduplication", "expected true or false"),
    ({"label_smoothing": "a"}, "settings.label_smoothing", "expected a number"),
    ({"max_combined_length": 0}, "settings.max_combined_length", "out of range"),
    ({"label_smoothing": 1.5}, "settings.label_smoothing", "out of range"),
])
def test_rag_json_settings_of_the_wrong_type_are_named(tmp_path, settings, field, message):
    # each failed later, in a traceback (ask, swap, export) or silently (a zero-token context)
    (tmp_path / "rag.json").write_text(json.dumps({"format": "lewisrag-rag/1", "settings": {"variant": "token", **settings}}))
    with pytest.raises(InputError, match=message) as e:
        RagModel.from_pretrained(tmp_path)
    assert e.value.field == field and e.value.source == str(tmp_path / "rag.json")

# --- question mode against a fake index with the DenseIndex API ---------------------------------


class FakeIndex:
    """search / vectors / passages over a few numpy vectors, as lewisrag.index.dense.DenseIndex offers."""

    def __init__(self, vectors: np.ndarray, passages: list[Passage]):
        self._vectors, self.passages = vectors, passages

    def search(self, q: np.ndarray, k: int):
        scores = q @ self._vectors.T  # (B, N)
        rows = np.argsort(-scores, axis=1)[:, :k]
        return np.take_along_axis(scores, rows, 1).astype(np.float32), rows.astype(np.int64)

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        return self._vectors[rows]


def _word_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(["<s>", "<pad>", "</s>", "<unk>", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def test_forward_questions_retrieves_and_trains_only_the_question_encoder(tmp_path):
    _, ours = _load("token", tmp_path)
    words = "who wrote hamlet shakespeare / // a play by the bard paris france capital".split()
    tok = _word_tokenizer(words)
    texts = [("hamlet", "a play by the bard"), ("paris", "capital of france"), ("bard", "shakespeare wrote hamlet"),
             ("france", "paris")]
    passages = [Passage(str(i), title, text) for i, (title, text) in enumerate(texts)]
    vecs = np.random.default_rng(0).normal(size=(4, 32)).astype(np.float32)
    index = FakeIndex(vecs.copy(), passages)
    labels = torch.tensor([[2, 0, 8, 2], [2, 0, 7, 2]])
    out, r = ours.forward_questions(["who wrote hamlet", "paris"], index, Tokenizers(tok, tok), labels, n_docs=K)
    assert r.context_input_ids.shape[0] == 2 * K and r.doc_scores.shape == (2, K) and len(r.passages[0]) == K
    top = passages[int(r.rows[0, 0])]
    assert tok.decode(r.context_input_ids[0], skip_special_tokens=True) == f"{top.title} / {top.text} // who wrote hamlet"
    q_tok = tok(["who wrote hamlet", "paris"], padding=True, return_tensors="pt")
    q = ours.encode_questions(q_tok["input_ids"], q_tok["attention_mask"])
    scores, rows = index.search(q.detach().numpy(), K)
    np.testing.assert_array_equal(rows, r.rows)
    np.testing.assert_allclose(r.doc_scores.detach().numpy(), scores, rtol=1e-5, atol=1e-5)
    out.loss.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in ours.question_encoder.parameters())
    np.testing.assert_array_equal(index._vectors, vecs)


class CheckedIndex(FakeIndex):
    """A fake index that, like DenseIndex, refuses a model trained against another context encoder."""

    def check_encoder(self, ctx_fingerprint: str, dim: int, swap: bool = False, flags: tuple[str, ...] = ()) -> None:
        if ctx_fingerprint != "enc-a" and not swap:
            raise InputError("idx", f"index was built with context encoder enc-a, not {ctx_fingerprint}")


def test_retrieve_refuses_another_encoders_index_unless_swapping(tmp_path):
    _, ours = _load("token", tmp_path)
    tok = _word_tokenizer(["paris", "france"])
    index = CheckedIndex(np.eye(4, 32, dtype=np.float32), [Passage(str(i), "t", "paris") for i in range(4)])
    ours.settings = RagSettings(variant="token", n_docs=K, index_fingerprint="enc-b")
    with pytest.raises(InputError, match="enc-a"):
        ours.retrieve(["paris"], index, Tokenizers(tok, tok))
    assert ours.retrieve(["paris"], index, Tokenizers(tok, tok), swap=True).doc_scores.shape == (1, K)


class ShortIndex(FakeIndex):
    """A compressed index searched too narrowly: FAISS pads the rows it did not find with -1."""

    path = "idx"

    def search(self, q: np.ndarray, k: int):
        scores, rows = super().search(q, k)
        rows[0, -1], scores[0, -1] = -1, -3.4e38
        return scores, rows


def test_retrieve_refuses_a_search_that_found_fewer_than_k(tmp_path):
    """Row -1 used to read as the last passage, scored with row 0's vector: a silent mismatch."""
    _, ours = _load("token", tmp_path)
    tok = _word_tokenizer(["paris", "france"])
    index = ShortIndex(np.eye(4, 32, dtype=np.float32), [Passage(str(i), "t", "paris") for i in range(4)])
    with pytest.raises(InputError, match=f"fewer than {K} passages for 1 of 2 questions") as e:
        ours.retrieve(["paris", "france"], index, Tokenizers(tok, tok), n_docs=K)
    assert e.value.field == "search_params"


def test_dense_index_vectors_refuse_a_missing_row(tmp_path):
    from lewisrag.index.dense import DenseIndex

    index = DenseIndex.__new__(DenseIndex)
    index.embeddings, index.manifest = np.arange(12, dtype=np.float32).reshape(3, 4), {"dim": 4}
    np.testing.assert_array_equal(index.vectors(np.array([[2, 0]])), index.embeddings[[[2, 0]]])
    with pytest.raises(ValueError, match="-1"):
        index.vectors(np.array([[2, -1]]))


def test_doc_scores_stay_float32_under_bf16_autocast(tmp_path):
    """Under autocast bmm ran in bfloat16: scores near 80 came out in steps of 0.5, moving p(z|x)."""
    _, ours = _load("token", tmp_path)
    tok = _word_tokenizer(["paris", "france"])
    vecs = np.random.default_rng(0).normal(scale=30.0, size=(6, 32)).astype(np.float32)
    index = FakeIndex(vecs, [Passage(str(i), "t", "paris") for i in range(6)])
    exact = ours.retrieve(["paris", "france"], index, Tokenizers(tok, tok), n_docs=K)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = ours.retrieve(["paris", "france"], index, Tokenizers(tok, tok), n_docs=K)
    assert mixed.doc_scores.dtype == torch.float32 and exact.doc_scores.abs().max() > 8
    q = ours.encode_questions(*tok(["paris", "france"], padding=True, return_tensors="pt").values())
    by_hand = torch.einsum("bd,bkd->bk", q.float(), torch.as_tensor(index.vectors(exact.rows)))
    torch.testing.assert_close(exact.doc_scores, by_hand, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(mixed.rows, exact.rows)
    # the encoder's own bf16 output differs a little; the product of it must not be rounded to bf16 again
    q_mixed = torch.autocast("cpu", dtype=torch.bfloat16)(ours.encode_questions)(
        *tok(["paris", "france"], padding=True, return_tensors="pt").values())
    in_fp32 = torch.einsum("bd,bkd->bk", q_mixed.float(), torch.as_tensor(index.vectors(exact.rows)))
    torch.testing.assert_close(mixed.doc_scores, in_fp32, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("variant", ["token", "sequence"])
def test_fever_label_log_probs_ignore_the_training_label_smoothing(variant, tmp_path):
    """FEVER ranks labels by log p(label | claim); the loss of a model trained with label smoothing
    used to add its smoothing term to that, by a different amount for each label."""
    from dataclasses import replace

    from lewisrag.training.tasks import rag_label_log_probs

    _, ours = _load(variant, tmp_path)
    tok = _word_tokenizer(["paris", "france", "SUPPORTS", "REFUTES", "NOT", "ENOUGH", "INFO"])
    ours.generator.config.decoder_start_token_id = 2
    index = FakeIndex(np.random.default_rng(0).normal(size=(6, 32)).astype(np.float32),
                      [Passage(str(i), "t", "paris") for i in range(6)])
    claims = ["paris france", "france", "paris paris"]
    plain = rag_label_log_probs(ours, Tokenizers(tok, tok), index, claims, n_docs=K)
    ours.settings = replace(ours.settings, label_smoothing=0.1)
    smoothed = rag_label_log_probs(ours, Tokenizers(tok, tok), index, claims, n_docs=K)
    np.testing.assert_allclose(smoothed, plain, rtol=1e-6)


@pytest.mark.parametrize("prefix", ["", "summarize: "])
def test_the_generator_prefix_goes_where_transformers_reads_it(prefix, tmp_path):
    """transformers' RAG prepends `generator.config.prefix` to each passage input and never reads the
    RAG config's own `prefix`: a prefix written only there was lost, and a BART folder's own
    (" ") was prepended where lewisrag adds none."""
    from dataclasses import replace

    _, ours = _load("token", tmp_path / "in")
    ours.generator.config.prefix = " "  # a generator folder that carries one
    ours.settings = replace(ours.settings, prefix=prefix)
    ours.to_hf(tmp_path / "out")
    hf = RagTokenForGeneration.from_pretrained(tmp_path / "out")
    assert getattr(hf.generator.config, "prefix", None) == (prefix or None)
    assert RagModel.from_hf_pretrained(tmp_path / "out").settings.prefix == prefix
