"""Ask a trained RAG model one question and show the evidence behind its answer.

The answer comes with the K retrieved passages, each with its prior p(z|x) (how much the retriever
trusted it before reading) and its posterior p(z|x,y) (how much it explains the answer), and, for
RAG-Token, the document each generated token leaned on: the argmax of p(z|x,y_t,y_<t). RAG-Sequence's
p(z|x,y) is the one its decoding ranked the answer by, transformers' `exclude_bos_score=True`: when
every candidate answer starts with BOS (<s>), that token's p(<s>|x,z) is left out of each p(y|x,z).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

import torch

from lewisrag.data.io import InputError
from lewisrag.index.store import check_depth
from lewisrag.rag_model.implicit_citations import pieces_of
from lewisrag.rag_model.model import check_decoder_length, max_positions
from lewisrag.rag_model.stitched import ended_by_the_model, token_ids


@dataclass(frozen=True)
class PassageEvidence:
    rank: int  # 1-based retrieval rank
    id: str
    title: str
    text: str
    prior: float  # p(z|x) = softmax of q·d over the K retrieved passages
    # p(z|x,y); for RAG-Token the mean of p(z|x,y_t,y_<t) over the answer's tokens (an empty answer's: its end token's)
    posterior: float


@dataclass(frozen=True)
class TokenEvidence:
    token: str  # the generated piece, decoded on its own
    doc_rank: int  # the passage this token leaned on most (1-based rank)
    doc_id: str
    probability: float  # p(z|x,y_t,y_<t) of that passage


@dataclass(frozen=True)
class Answer:
    question: str
    answer: str
    variant: str  # "token" or "sequence"
    passages: list[PassageEvidence]
    tokens: list[TokenEvidence] = field(default_factory=list)  # RAG-Token only
    # the answer filled --max-length without its end token: it may be cut (`max_length_note`)
    reached_max_length: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def unpaired_note(path: str | os.PathLike, fingerprint: str | None) -> str | None:
    """What to tell the user when the model at `path` names no context encoder (`fingerprint`, its
    `settings.index_fingerprint`, is None), so no index can be checked against it: a transformers RAG
    checkpoint, or a lewisrag model (rag.json) of a `train rag --swap` run of a transformers
    DPRQuestionEncoder folder given without --context-encoder, saved before runs recorded their index's
    encoder (`rag_data.load_components`)."""
    if fingerprint is not None:
        return None
    from lewisrag.training.checkpoint import resolve_model_dir

    try:
        lewisrag_run = (resolve_model_dir(path) / "rag.json").is_file()
    except InputError:  # no model folder there (any more): nothing to tell it by
        lewisrag_run = False
    what = ("a `train rag --swap` run of a transformers DPRQuestionEncoder folder given without --context-encoder, "
            "saved before runs recorded their index's encoder" if lewisrag_run else "a transformers RAG checkpoint")
    return (f"{path} names no context encoder ({what}): any index of its width is searched without checking that "
            "it was built by the context encoder the model was trained with")


def knows_no_word(tokenizer, question: str) -> bool:
    """Whether the question encoder's `tokenizer` reads every piece of `question` as its unknown token
    (a Chinese question to an English DPR): the question vector is then the same for every such
    question, and so are the passages retrieved.

    >>> from tokenizers import Tokenizer, models, pre_tokenizers
    >>> from transformers import PreTrainedTokenizerFast
    >>> t = Tokenizer(models.WordLevel({"[UNK]": 0, "who": 1}, unk_token="[UNK]"))
    >>> t.pre_tokenizer = pre_tokenizers.Whitespace()
    >>> tok = PreTrainedTokenizerFast(tokenizer_object=t, unk_token="[UNK]")
    >>> knows_no_word(tok, "谁 是"), knows_no_word(tok, "who 是")
    (True, False)
    """
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is None:  # a byte-level vocabulary: every string has pieces it knows
        return False
    ids = tokenizer(question, add_special_tokens=False)["input_ids"]
    return bool(ids) and all(i == unk for i in ids)


def unknown_words_note(tokenizers, question: str) -> str | None:
    """What to tell the user when the question encoder knows no word of `question` (`knows_no_word`)."""
    if not knows_no_word(tokenizers.question, question):
        return None
    return ("the question encoder's vocabulary knows no word of the question (each is its unknown token, "
            f"{tokenizers.question.unk_token}): the passages were retrieved for a question without words, the same "
            "for every such question (a question in another language than the model's?)")


def longest_max_length(model) -> int | None:
    """The largest --max-length the generator decodes to: its positions (None: no such limit)."""
    return max_positions(model.generator.config)


def check_max_length(model, max_length: int, whose: str = "the generator") -> None:
    """Refuse a --max-length past the generator's positions (`train rag --max-target-length` is refused
    the same way, `training.rag_data.check_lengths`)."""
    check_decoder_length("--max-length", max_length, longest_max_length(model), "each decoded token", whose)


def question_problem(tokenizers, question: str) -> str | None:
    """Why a question has nothing the question encoder reads, or None: empty, or only characters its
    tokenizer drops (U+200B, a soft hyphen), which would be answered from [CLS] [SEP] alone."""
    if not question.strip():
        return "empty question"
    if not tokenizers.question(question, add_special_tokens=False)["input_ids"]:
        return "holds no character the question encoder reads"
    return None


def check_question(tokenizers, question: str) -> None:
    """Refuse a question `question_problem` finds one in."""
    if problem := question_problem(tokenizers, question):
        raise InputError("QUESTION", problem)


def ask(model, tokenizers, index, question: str, n_docs: int | None = None, num_beams: int = 1,
        max_length: int = 32, swap: bool = False) -> Answer:
    """Answer `question` with its evidence (see the module docstring)."""
    check_question(tokenizers, question)
    k = n_docs or model.n_docs
    if n_docs is None and k > len(index.passages):  # the model's own K: --n-docs was not given, so not "--n-docs: ..."
        raise InputError(index.path, f"holds {len(index.passages)} passages, fewer than the {k} the model reads per "
                         f"question (its n_docs): pass --n-docs {len(index.passages)} or fewer", field="n_passages")
    check_depth(k, len(index.passages))
    vocab = model.generator.config.vocab_size
    if not 1 <= num_beams <= vocab:  # more beams than first tokens: 100,000 were killed for memory, with no message
        raise InputError("--num-beams", f"must be between 1 and the generator's vocabulary ({vocab} tokens), got {num_beams}")
    check_max_length(model, max_length)
    with torch.no_grad():
        r = model.retrieve([question], index, tokenizers, n_docs=k, swap=swap)
        out = model.generate(r.context_input_ids, r.context_attention_mask, r.doc_scores, n_docs=k,
                             num_beams=num_beams, max_length=max_length, return_evidence=True)
    prior = torch.softmax(r.doc_scores[0].float(), dim=-1)  # (K,)
    seq = out.sequences[0]  # (T,) decoder start token first
    text = tokenizers.generator.decode(seq, skip_special_tokens=True).strip()
    tokens: list[TokenEvidence] = []
    if model.variant == "token":
        per_token = out.doc_posterior[0]  # (T, K): row t is the posterior for seq[t+1]
        shown = _shown_positions(seq, tokenizers.generator)
        # an empty answer shows no token: its posterior is the one given what it generated, its end token (the
        # prior in its place read as a measured posterior, where RAG-Sequence's is p(z|x,"</s>"))
        posterior = per_token[shown or _end_row(seq, model.generation_config)].mean(0)
        # each token's piece of the decoded answer: decoded alone, a character split over two byte-level
        # tokens showed as two U+FFFD rows ("Gödel"), where the pieces join to the answer
        pieces = pieces_of(tokenizers.generator, [int(seq[t + 1]) for t in shown])
        for t, piece in zip(shown, pieces):
            z = int(per_token[t].argmax())
            tokens.append(TokenEvidence(piece, z + 1, r.passages[0][z].id, float(per_token[t, z])))
    else:
        posterior = out.doc_posterior[0]  # (K,)
    passages = [PassageEvidence(i + 1, p.id, p.title, p.text, float(prior[i]), float(posterior[i]))
                for i, p in enumerate(r.passages[0])]
    ended = ended_by_the_model(seq, model.generation_config, max_length)
    return Answer(question, text, model.variant, passages, tokens, reached_max_length=not ended and len(seq) >= max_length)


def max_length_note(answer: Answer, max_length: int, longest: int | None = None) -> str | None:
    """What to tell the user when the answer filled `max_length` without its end token; `longest`:
    the largest --max-length the generator takes (`longest_max_length`), which no larger one can help.

    >>> max_length_note(Answer("q", "a b", "token", [], reached_max_length=True), 32)
    'the answer reached --max-length 32 before its end token, so it may be cut: pass a larger --max-length'
    >>> max_length_note(Answer("q", "a b", "token", [], reached_max_length=True), 32, longest=32)
    'the answer reached --max-length 32 before its end token, so it may be cut: the generator cannot decode a longer answer (its 32 positions)'
    """
    if not answer.reached_max_length:
        return None
    if longest is not None and max_length >= longest:
        advice = f"the generator cannot decode a longer answer (its {longest} positions)"
    else:
        advice = "pass a larger --max-length"
    return f"the answer reached --max-length {max_length} before its end token, so it may be cut: {advice}"


def _shown_positions(seq, tokenizer) -> list[int]:
    """Rows t whose generated token seq[t+1] is a real piece (not BOS, EOS or padding)."""
    special = set(tokenizer.all_special_ids)
    return [t for t in range(len(seq) - 1) if int(seq[t + 1]) not in special]


def _end_row(seq, generation_config) -> list[int]:
    """The row t of the first end token seq[t+1] (one of the generation config's eos_token_id), else every
    generated token's row (an answer of special tokens alone that never ended).

    >>> from types import SimpleNamespace as C
    >>> _end_row(torch.tensor([2, 0, 2]), C(eos_token_id=2)), _end_row(torch.tensor([2, 0, 0]), C(eos_token_id=[2]))
    ([1], [0, 1])
    """
    eos = set(token_ids(generation_config.eos_token_id))
    return next(([t] for t in range(len(seq) - 1) if int(seq[t + 1]) in eos), list(range(len(seq) - 1)))
