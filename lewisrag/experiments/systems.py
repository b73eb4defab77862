"""The three systems the scorecard compares, each answering with [n] citations and its cost.

`LewisSystem` wraps a trained RAG-Token or RAG-Sequence model (implicit citations from p(z|x,y));
`StitchedSystem` wraps prompt-stitching RAG (explicit citations). Both return `Answered`: the
answer, the passages read in input order, the ids of those its [n] markers cite, generator forward
passes, input tokens and latency.
Each retrieves for itself: a Lewis model its top K through the question encoder it fine-tuned, the
stitched system its top k through the run's DPR, so they share the index, not always the passages.

A forward pass reads one input: encoding it, one decoding step over it, or one teacher-forced pass
of a whole answer over it. `lewis_forward_passes` counts a Lewis answer's, the rescoring included.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from lewisrag.data.records import Passage
from lewisrag.eval.statements import strip_citations
from lewisrag.rag_model.decoding import Decoded
from lewisrag.rag_model.implicit_citations import cited_answers, pieces_of
from lewisrag.rag_model.model import generator_input, score_docs
from lewisrag.rag_model.stitched import PromptStitchingRAG, cited_ids


@dataclass
class Answered:
    text: str  # the answer without citations (QA metrics)
    response: str  # the answer with [n] citations, n the 1-based input position of a passage
    passages: list  # the passages the generator read, in input order (id, title, text)
    forward_passes: int | None  # generator forward passes over one input each, rescoring included (None: unknown)
    input_tokens: int | None  # generator input tokens read, over all inputs (None: an endpoint that did not say)
    seconds: float  # wall time of its batch, shared equally among the batch's answers
    token_posteriors: dict | None = None  # RAG-Token: {tokens, docs, matrix} for report.html's heatmap
    failure: str | None = None  # an outside generator gave no answer (after its retries): why; scored null, not as ""
    cited: list[str] | None = None  # the passage ids the response's [n] markers point at (`stitched.cited_ids`)


def as_passage(p) -> Passage:
    return Passage(p.id, p.title, p.text)


class LewisSystem:
    """A trained RAG-Token or RAG-Sequence model answering from its dense index, with implicit citations."""

    def __init__(self, model, tokenizers, index, batch_size: int = 16, max_length: int = 32):
        self.model, self.tokenizers, self.index = model.eval(), tokenizers, index
        self.batch_size, self.max_length = batch_size, max_length
        self.row_of = {p.id: r for r, p in enumerate(index.passages)}

    def answer(self, questions: list[str]) -> list[Answered]:
        start = time.perf_counter()
        with torch.no_grad():
            r = self.model.retrieve(questions, self.index, self.tokenizers)
        answers = self._decode(r.context_input_ids, r.context_attention_mask, r.doc_scores, r.passages)
        for a in answers:  # latency counts retrieval too, as the stitched system's does
            a.seconds = (time.perf_counter() - start) / len(answers)
        return answers

    def top_k(self, questions: list[str]) -> list[list[Passage]]:
        with torch.no_grad():
            return [[as_passage(p) for p in ps] for ps in self.model.retrieve(questions, self.index, self.tokenizers).passages]

    def answer_with(self, questions: list[str], passages: list[list]) -> list[str]:
        """Plain answers from given passages (the position probe); doc scores are q·d as in retrieval."""
        tok, device = self.tokenizers, next(self.model.parameters()).device
        with torch.no_grad():
            q_tok = tok.question(questions, padding=True, truncation=True, return_tensors="pt").to(device)
            q = self.model.encode_questions(q_tok["input_ids"], q_tok["attention_mask"])  # (B, D)
            rows = np.array([[self.row_of[p.id] for p in ps] for ps in passages])  # (B, K)
            docs = torch.as_tensor(np.asarray(self.index.vectors(rows)), dtype=q.dtype, device=device)  # (B, K, D)
            scores = score_docs(q, docs)  # (B, K)
            texts = [generator_input(p.title, p.text, x, self.model.settings) for x, ps in zip(questions, passages) for p in ps]
            ctx = tok.generator(texts, padding=True, truncation=True, max_length=self.model.settings.max_combined_length,
                                return_tensors="pt").to(device)
        return [a.text for a in self._decode(ctx["input_ids"], ctx["attention_mask"], scores, passages)]

    def _decode(self, ids, mask, doc_scores, passages) -> list[Answered]:
        """ids/mask (B*K, L), doc_scores (B, K): decode greedily with the evidence behind each token."""
        start = time.perf_counter()
        b, k = doc_scores.shape
        tok = self.tokenizers.generator
        sequence = self.model.variant == "sequence"
        # RAG-Sequence: every document's hypothesis back, best first, to count the distinct candidates thorough
        # decoding rescored; undeduplicated, a candidate keeps its score, so the first is the default's answer
        every = {"num_return_sequences": k, "do_deduplication": False} if sequence else {}
        with torch.no_grad():
            out = self.model.generate(ids, mask, doc_scores, n_docs=k, num_beams=1, max_length=self.max_length,
                                      return_evidence=True, **every)
        hyps = out.sequences.view(b, -1, out.sequences.shape[-1]).tolist()  # (B, K or 1, T)
        if sequence:
            out = Decoded(out.sequences[::k], out.doc_posterior[::k], out.scores[::k])  # (B, T), (B, K), (B,)
        labels = [str(n) for n in range(1, k + 1)]
        responses = cited_answers(out, tok, [labels] * b, self.model.variant)
        tokens = mask.view(b, k, -1).sum((1, 2)).tolist()  # (B,) input tokens over the K inputs
        specials = set(tok.all_special_ids)
        seconds = (time.perf_counter() - start) / b
        answers = []
        for i, seq in enumerate(out.sequences.tolist()):
            keep = [t for t, x in enumerate(seq[1:]) if x not in specials]
            steps = [sum(x != tok.pad_token_id for x in h[1:]) for h in hyps[i]]  # tokens each search generated
            passes = lewis_forward_passes(self.model.variant, k, steps, len(set(map(tuple, hyps[i]))))
            tp = None
            if self.model.variant == "token" and keep:
                matrix = out.doc_posterior[i][keep].float()  # (T', K)
                tp = {"tokens": pieces_of(tok, [seq[1 + t] for t in keep]), "docs": [f"[{n}]" for n in labels],
                      "matrix": [[round(float(v), 4) for v in row] for row in matrix]}
            read = [as_passage(p) for p in passages[i]]
            # the implicit citations are [n] markers too, read by the evaluator as the stitched system's are
            answers.append(Answered(tok.decode(seq, skip_special_tokens=True).strip(), responses[i], read, passes,
                                    int(tokens[i]), seconds, tp, cited=cited_ids(responses[i], read)))
        return answers


def lewis_forward_passes(variant: str, k: int, steps: list[int], candidates: int) -> int:
    """Generator forward passes of one Lewis answer, each over one of its K inputs (a passage with the question):

    - K encoder passes;
    - the search: RAG-Token decodes the K inputs together, K passes per token of its answer (`steps` = [its
      tokens]); RAG-Sequence searches each document alone, `steps[z]` passes for document z's hypothesis;
    - the rescoring, one teacher-forced pass per candidate and input: RAG-Token's answer under each document for
      its implicit citations (K), RAG-Sequence's thorough decoding (§2.5) of each of the C distinct hypotheses
      under each document (C×K).

    >>> lewis_forward_passes("token", 3, [4], 1)  # 3 + 3*4 + 3*1
    18
    >>> lewis_forward_passes("sequence", 3, [4, 4, 6], 2)  # 3 + (4+4+6) + 3*2
    23
    """
    search = k * steps[0] if variant == "token" else sum(steps)
    return k + search + k * candidates


class StitchedSystem:
    """Prompt-stitching RAG: top-k passages and the question in one input, the answer citing [n]."""

    def __init__(self, retriever, model, tokenizer, settings, max_new_tokens: int = 32, max_input_tokens: int = 1024):
        longest = min(max_input_tokens, getattr(model.config, "max_position_embeddings", max_input_tokens))
        self.generator = CountingSeq2Seq(model, tokenizer, max_new_tokens, longest)
        self.rag = PromptStitchingRAG(retriever, self.generator, settings)

    def top_k(self, questions: list[str]) -> list[list[Passage]]:
        return [[as_passage(h) for h in hits] for hits in self.rag.retriever.search(questions, self.rag.settings.k)]

    def answer(self, questions: list[str]) -> list[Answered]:
        start = time.perf_counter()
        out = self.rag.answer(questions)
        seconds = (time.perf_counter() - start) / max(1, len(questions))
        return [Answered(strip_citations(a.answer), a.answer, [as_passage(p) for p in a.passages], 1 + steps,
                         int(a.input_tokens or 0), seconds, cited=a.cited) for a, steps in zip(out, self.generator.last_steps)]

    def answer_with(self, questions: list[str], passages: list[list]) -> list[str]:
        return [strip_citations(a.answer) for a in self.rag.answer_with(questions, passages)]


class CountingSeq2Seq:
    """A seq2seq model as a `prompts -> answers` callable (greedy) that counts what it read and how
    many decoder passes each answer took (the generated tokens after the start token, end included)."""

    def __init__(self, model, tokenizer, max_new_tokens: int, max_input_tokens: int):
        self.model, self.tokenizer = model.eval(), tokenizer
        self.max_new_tokens, self.max_input_tokens = max_new_tokens, max_input_tokens
        self.last_input_tokens: list[int] = []  # read by PromptStitchingRAG
        self.last_steps: list[int] = []

    def __call__(self, prompts: list[str]) -> list[str]:
        tok = self.tokenizer
        enc = tok(prompts, return_tensors="pt", padding=True, truncation=True,
                  max_length=self.max_input_tokens).to(self.model.device)
        with torch.inference_mode():
            out = self.model.generate(**enc, max_new_tokens=self.max_new_tokens, num_beams=1, do_sample=False,
                                      pad_token_id=tok.pad_token_id)  # (B, T), decoder start token first
        self.last_input_tokens = enc["attention_mask"].sum(1).tolist()
        self.last_steps = out[:, 1:].ne(tok.pad_token_id).sum(1).tolist()
        return [t.strip() for t in tok.batch_decode(out, skip_special_tokens=True)]
