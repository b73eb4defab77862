"""Implicit citations: the Lewis model's document posterior turned into [id] citations."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from lewisrag.rag_model import RagModel
from lewisrag.rag_model import implicit_citations as ic
from lewisrag.rag_model import marginalize as M
from lewisrag.rag_model.decoding import Decoded
from lewisrag.rag_model.testing import tiny_batch, tiny_hf_rag


class LetterTokenizer:
    """ids 3.. decode to letters, 50 to '. ' (a stop before a space ends a sentence, as the evaluator's
    splitter reads one), 0-2 are special (BOS, PAD, EOS)."""

    all_special_ids = [0, 1, 2]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(". " if i == 50 else chr(ord("a") + i % 26) for i in ids if i not in self.all_special_ids)


def test_sequence_cites_the_most_probable_document():
    dec = Decoded(torch.tensor([[2, 3, 4, 50, 2]]), torch.tensor([[0.2, 0.5, 0.3]]), torch.zeros(1))
    assert ic.cited_answers(dec, LetterTokenizer(), [["p1", "p2", "p3"]], "sequence") == ["de [p2]."]


def test_token_cites_per_sentence_and_skips_special_tokens():
    seq = torch.tensor([[2, 3, 50, 4, 50, 2, 1]])  # start, d . e . eos pad
    post = torch.tensor([[[0.9, 0.1], [0.9, 0.1], [0.1, 0.9], [0.2, 0.8], [0.5, 0.5], [0.5, 0.5]]])  # (1, T-1, K)
    dec = Decoded(seq, post, torch.zeros(1))
    assert ic.cited_answers(dec, LetterTokenizer(), [["p1", "p2"]], "token") == ["d [p1]. e [p2]."]


@pytest.mark.parametrize("text", [
    "Ana Kel leads Valdoria. She has since 2010.",
    "Zoë leads Ünal.",  # ë and Ü each span two byte-level tokens
    "登录失败返回 422。",
])
def test_token_cited_answer_reads_the_decoded_answer_with_a_byte_level_tokenizer(text):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(Path(ic.__file__).parents[1] / "pretrained" / "generator-small")
    ids = tok(text, add_special_tokens=False)["input_ids"]
    seq = torch.tensor([[tok.eos_token_id, *ids, tok.eos_token_id]])  # decoder start, answer, end
    post = torch.tensor([[0.9, 0.1]]).expand(seq.shape[1] - 1, 2)[None]  # (1, T-1, K)
    answer = ic.cited_answers(Decoded(seq, post, torch.zeros(1)), tok, [["p1", "p2"]], "token")[0]
    assert "".join(ic.pieces_of(tok, ids)) == tok.decode(ids)
    assert answer.count("[p1]") == text.count(".") + text.count("。") and re.sub(r" \[p1\]", "", answer) == text


def test_shape_errors_name_expected_and_actual():
    with pytest.raises(ValueError, match=r"expected \(2, 3\), got \(2, 2\)"):
        ic.token_citations(["a", "b"], torch.zeros(2, 2), ["x", "y", "z"])


def _real_decode(variant, tmp_path):
    """A tiny random model's beam-search answers to 2 questions of 3 documents each, with their evidence.

    The bias on '.' (id 50) gives answers of several sentences; the one against EOS, answers at all.
    """
    hf = tiny_hf_rag(variant, seed=3, n_docs=3, eos_bias=-2.0)
    with torch.no_grad():
        hf.generator.final_logits_bias[0, 50] += 1.0
    hf.save_pretrained(tmp_path)
    model = RagModel.from_hf_pretrained(tmp_path)
    ids, mask, scores, _ = tiny_batch(2, 3, 9, 4, 100, seed=2)
    dec = model.generate(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, n_docs=3, num_beams=2,
                         max_length=12, no_repeat_ngram_size=1, return_evidence=True)
    with torch.no_grad():
        logits = model(ids, mask, scores, labels=dec.sequences).logits  # a teacher-forced pass of its own
    return model, dec, logits, scores


DOC_IDS = [["a1", "a2", "a3"], ["b1", "b2", "b3"]]


def _sentences(seq):
    """Positions (into seq[1:]) of each sentence's letter and '.' tokens; specials belong to none."""
    out, now = [], []
    for t, i in enumerate(seq[1:]):
        if i in LetterTokenizer.all_special_ids:
            continue
        now.append(t)
        if i == 50:
            out, now = out + [now], []
    return out + [now] if now else out


def test_token_citations_of_a_real_decode_follow_each_sentences_posterior(tmp_path):
    """Each sentence cites the top document of its tokens' mean p(z|x,y_t), then any other with ≥ 0.3."""
    model, dec, logits, scores = _real_decode("token", tmp_path)
    post = M.rag_token_doc_posterior(logits, scores, dec.sequences, model.pad_token_id)  # (B, T, K)
    prior_top = M.doc_log_prior(scores).argmax(1)  # (B,)
    answers = ic.cited_answers(dec, LetterTokenizer(), DOC_IDS, "token")
    tops = []
    for b, (answer, seq) in enumerate(zip(answers, dec.sequences.tolist())):
        sentences = []
        for positions in _sentences(seq):
            mean = post[b, positions].mean(0)  # (K,): row t is for token seq[t + 1]
            order = sorted(range(3), key=lambda z: -float(mean[z]))
            cited = [order[0]] + [z for z in order[1:] if mean[z] >= 0.3]
            text = LetterTokenizer().decode([seq[1 + t] for t in positions]).strip()
            sentences.append((text, [DOC_IDS[b][z] for z in cited]))
            tops.append((b, order[0]))
        assert answer == ic.cite(sentences)
        assert set(re.findall(r"\[(\w+)\]", answer)) <= set(DOC_IDS[b])  # its own question's documents
    # not trivially satisfied: answers have several sentences, which cite different documents,
    # and some sentence's top document is not the one retrieval ranked first
    assert all(a for a in answers) and len(tops) > len(answers)
    assert any(len({z for bb, z in tops if bb == b}) > 1 for b in range(2))
    assert any(z != prior_top[b] for b, z in tops)


def test_sequence_citation_of_a_real_decode_is_the_posterior_argmax(tmp_path):
    model, dec, logits, scores = _real_decode("sequence", tmp_path)
    post = M.rag_sequence_doc_posterior(logits, scores, dec.sequences, model.pad_token_id)  # (B, K)
    answers = ic.cited_answers(dec, LetterTokenizer(), DOC_IDS, "sequence")
    for b, (answer, seq) in enumerate(zip(answers, dec.sequences.tolist())):
        text = LetterTokenizer().decode(seq[1:]).strip()
        top = DOC_IDS[b][int(post[b].argmax())]  # every sentence of the answer cites it
        assert text and answer == ic._insert_citations(text, [(s, e, [top]) for s, e in ic.sentences_of(text)])
        assert re.sub(r" \[\w+\]", "", answer) == text and answer.count(f"[{top}]") == len(ic.sentences_of(text))
    assert (post.argmax(1) != scores.argmax(1)).any()  # the answer, not retrieval alone, picks the document
