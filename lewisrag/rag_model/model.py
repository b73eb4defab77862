"""The Lewis et al. 2020 RAG model: a question encoder, a BART generator and K retrieved documents.

`RagModel` holds the two transformers modules and computes the RAG-Sequence or RAG-Token loss
(`marginalize.py`) with transformers' RAG conventions, so its losses and generations equal
`RagSequenceForGeneration` / `RagTokenForGeneration` on the same weights.

Shape alphabet: B batch, K retrieved docs, L input length, T target length, V vocabulary, D embedding.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from lewisrag.data.io import InputError, LewisragWarning
from lewisrag.rag_model import checkpoints
from lewisrag.rag_model import marginalize as M
from lewisrag.rag_model.decoding import check_count, generate
from lewisrag.rag_model.settings import RagSettings

VERY_LARGE = int(1e30)  # transformers' model_max_length of a tokenizer that knows no limit


@dataclass
class RagOutput:
    loss: torch.Tensor | None  # (B,) per-example NLL, or a scalar when reduce_loss
    logits: torch.Tensor  # (B*K, T, V) per-document generator logits
    doc_scores: torch.Tensor  # (B, K) retrieval scores q·d


@dataclass
class Retrieved:
    """Generator inputs for B questions and their K documents each, as transformers' retriever makes them."""

    context_input_ids: torch.Tensor  # (B*K, L)
    context_attention_mask: torch.Tensor  # (B*K, L)
    doc_scores: torch.Tensor  # (B, K) q·d, differentiable w.r.t. the question encoder
    rows: np.ndarray  # (B, K) index rows of the retrieved passages
    passages: list[list[Any]] = field(default_factory=list)  # B lists of K Passage(id, title, text)


class Tokenizers(NamedTuple):
    question: Any  # tokenizer of the question encoder (DPR: BERT wordpiece)
    generator: Any  # tokenizer of the generator (BART: byte-level BPE)


# where a config keeps its positions: most models' (BART's, DPR's and BERT's), GPT-2's and GPT-J's older
# name, MPT's, ChatGLM's and Qwen(1)'s: the first that is a positive whole number
POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")


def max_positions(config: Any) -> int | None:
    """The most input tokens a model's position embeddings hold (the first of `POSITION_KEYS` that is
    a positive whole number), or None for a model without such a limit (T5's relative positions).
    `config`: the transformers config, or its config.json as a dict.

    >>> from types import SimpleNamespace as C
    >>> max_positions(C(n_positions=8192)), max_positions({"max_position_embeddings": None, "max_seq_len": 2048}), max_positions(C())
    (8192, 2048, None)
    """
    for key in POSITION_KEYS:
        n = config.get(key) if isinstance(config, dict) else getattr(config, key, None)
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            return n
    return None


def check_decoder_length(flag: str, length: int, positions: int | None, reads: str, whose: str = "the generator") -> None:
    """Refuse a length the decoder runs to (`flag`'s `length`) past the generator's `positions`
    (`max_positions`), which its decoder reads `reads` in: past them a target or an answer that had
    not ended was an IndexError from the position embedding, after the time spent."""
    if positions is not None and length > positions:
        raise InputError(flag, f"{length} exceeds {whose}'s {positions} positions (max_position_embeddings), which its "
                         f"decoder reads {reads} in; must be at most {positions}")


def fit_to_generator(settings: RagSettings, generator_config: Any) -> RagSettings:
    """`settings` with `max_combined_length` capped at the generator's positions.

    The rule behind every generator input of a RagModel: `max_combined_length` is where the
    tokenized (title, text, question) string is cut, and a cut past the generator's last position
    embedding is an IndexError in the middle of a forward pass. So the effective length is
    min(setting, positions), applied when the settings are given to a model: training, answering,
    `rag.json` and an export's RagConfig (whose RagRetriever pads every input to it) all read it,
    and a model saved with a larger value loads and answers, capped.

    >>> from types import SimpleNamespace as C
    >>> fit_to_generator(RagSettings(max_combined_length=300), C(max_position_embeddings=256)).max_combined_length
    256
    >>> fit_to_generator(RagSettings(max_combined_length=300), C()).max_combined_length
    300
    """
    limit = max_positions(generator_config)
    if limit is None or settings.max_combined_length <= limit:
        return settings
    return replace(settings, max_combined_length=limit)


def generator_input(title: str, text: str, question: str, settings: RagSettings) -> str:
    """The string the generator reads for one (question, document), as transformers builds it.

    >>> generator_input('"Paris"', "Capital of France.", "where?", RagSettings())
    'Paris / Capital of France. // where?'
    """
    title = title.removeprefix('"').removesuffix('"')
    return (settings.prefix + title + settings.title_sep + text + settings.doc_sep + question).replace("  ", " ")


def score_docs(q: torch.Tensor, docs: torch.Tensor) -> torch.Tensor:
    """doc_scores q·d(z), (B, D) x (B, K, D) -> (B, K), in float32 whatever the autocast: DPR's
    scores are large (about 80), where bfloat16's steps are 0.5 apart, which would move p(z|x) and
    the question encoder's gradient by tens of percent."""
    with torch.autocast(q.device.type, enabled=False):
        return torch.bmm(q.float().unsqueeze(1), docs.float().transpose(1, 2)).squeeze(1)  # (B, K)


def check_found(rows: np.ndarray, k: int, index: Any, queries: np.ndarray | None = None) -> None:
    """Refuse a search that found fewer than `k` passages for some question. FAISS pads such a row
    with -1, which would read as the last passage (Python's index -1) and be scored by another
    passage's vector: a compressed index searched too narrowly (nprobe, efSearch) does that, and so
    does a query vector of NaN (`queries`), which finds nothing: then the encoder is at fault, not the index.
    An index of fewer than `k` passages gives short rows (the product search on a device: fewer
    than `k` columns) whatever its search, and is refused as such."""
    rows = np.asarray(rows)
    n_passages = len(index.passages) if hasattr(index, "passages") else None
    if n_passages is not None and n_passages < k:
        raise InputError(getattr(index, "path", "the index"), f"it holds {n_passages} passages, fewer than the {k} "
                         f"asked for each question: ask for at most {n_passages} (--n-docs)", field="n_passages")
    if rows.ndim == 2 and rows.shape[1] < k:  # fewer columns than asked for: every row is short
        raise InputError(getattr(index, "path", "the index"), f"its search found fewer than {k} passages for "
                         f"{len(rows)} of {len(rows)} questions: ask for fewer (--n-docs, where the command has it)",
                         field="search_params")
    short = int((rows < 0).any(axis=1).sum())
    if short and queries is not None and not np.isfinite(queries).all():
        bad = int((~np.isfinite(queries)).any(axis=1).sum())
        raise InputError("the question encoder", f"its vectors hold NaN or inf for {bad} of {len(queries)} questions, "
                         "so their search found nothing: its weights diverged (in training: lower --lr)")
    if short:
        raise InputError(getattr(index, "path", "the index"), f"its search found fewer than {k} passages for {short} of "
                         f"{len(rows)} questions: search it wider (`lewisrag index tune` records a higher nprobe or "
                         f"efSearch that every later search of it uses) or read fewer passages per question (--n-docs, "
                         f"where the command has it)", field="search_params")


class RagModel(nn.Module):
    """RAG = question encoder (retrieval distribution p(z|x)) + BART generator (p(y|x,z)).

    `forward` takes retrieved contexts (transformers' arguments); `forward_questions` takes
    questions and an index and retrieves first. `generate` lives in `decoding.py`.

    `context_encoder` (None unless training an end-to-end retriever, `training.end2end`) is a
    module mapping N passages to their (N, D) vectors: when set, `retrieve` scores the K passages it
    finds with it instead of the index's stored vectors, so the RAG loss trains it too. A saved
    model keeps it in `context_encoder/`; a loaded one has none and scores with its index's vectors,
    which that encoder made.
    """

    def __init__(self, question_encoder: nn.Module, generator: nn.Module, variant: str = "token", n_docs: int = 5,
                 settings: RagSettings | None = None, generation_config: Any = None,
                 context_encoder: nn.Module | None = None):
        super().__init__()
        self.question_encoder = question_encoder
        self.generator = generator
        self.context_encoder = context_encoder  # registered after the others: their state_dict keys come first
        self.settings = replace(settings or RagSettings(), variant=variant, n_docs=n_docs)  # capped: see `settings`
        # decoding defaults (max_length, forced EOS, ...) as transformers' generate reads them
        self.generation_config = generation_config if generation_config is not None else generator.generation_config
        # generator inputs `retrieve` made, and how many of them it cut at max_combined_length (`inputs_cut`)
        self.inputs_made, self.inputs_cut = 0, 0

    @property
    def settings(self) -> RagSettings:
        """What the model was trained with; `max_combined_length` never exceeds the generator's positions."""
        return self._settings

    @settings.setter
    def settings(self, value: RagSettings) -> None:
        # every assignment (here, checkpoints, training) goes through `fit_to_generator`
        self._settings = fit_to_generator(value, getattr(self.generator, "config", None))

    @property
    def variant(self) -> str:
        return self.settings.variant

    @property
    def n_docs(self) -> int:
        return self.settings.n_docs

    @property
    def pad_token_id(self) -> int:
        return self.generator.config.pad_token_id

    def forward(self, context_input_ids: torch.Tensor, context_attention_mask: torch.Tensor, doc_scores: torch.Tensor,
                labels: torch.Tensor | None = None, reduce_loss: bool = False, n_docs: int | None = None,
                label_smoothing: float | None = None, exclude_bos_score: bool | None = None,
                decoder_input_ids: torch.Tensor | None = None) -> RagOutput:
        """Generator logits for every (question, document) pair and, given labels, the RAG loss.

        context_input_ids / context_attention_mask (B*K, L), doc_scores (B, K), labels (B, T) fed to
        the decoder as is (transformers' RAG convention: labels start with the decoder start token).
        decoder_input_ids (B, T), when given, are fed instead. n_docs: None, or K as a positive int.
        """
        check_count("n_docs", n_docs)
        k = n_docs if n_docs is not None else (doc_scores.shape[1] if doc_scores.dim() == 2 else self.n_docs)
        if doc_scores.dim() != 2 or doc_scores.shape[1] != k:
            raise ValueError(f"doc_scores: expected (B, K={k}), got {tuple(doc_scores.shape)}")
        b = doc_scores.shape[0]
        if context_input_ids.shape[0] != b * k:
            raise ValueError(f"context_input_ids: expected (B*K={b * k}, L), got {tuple(context_input_ids.shape)}")
        # one row per question: a (K, B) doc_scores with n_docs=B passes the checks above, and is caught here
        for name, ids in (("labels", labels), ("decoder_input_ids", decoder_input_ids)):
            if ids is not None and (ids.dim() != 2 or ids.shape[0] != b):
                raise ValueError(f"{name}: expected (B={b}, T), one row per row of doc_scores, got {tuple(ids.shape)}")
        dec = decoder_input_ids if decoder_input_ids is not None else labels
        if dec is None:
            raise ValueError("forward needs labels or decoder_input_ids")
        out = self.generator(input_ids=context_input_ids, attention_mask=context_attention_mask,
                             decoder_input_ids=dec.repeat_interleave(k, dim=0), use_cache=False, return_dict=True)
        logits = out.logits  # (B*K, T, V)
        loss = None
        if labels is not None:
            loss = self.loss(logits, doc_scores, labels, reduce_loss, label_smoothing, exclude_bos_score)
        return RagOutput(loss=loss, logits=logits, doc_scores=doc_scores)

    def loss(self, logits: torch.Tensor, doc_scores: torch.Tensor, labels: torch.Tensor, reduce_loss: bool = False,
             label_smoothing: float | None = None, exclude_bos_score: bool | None = None) -> torch.Tensor:
        """The variant's NLL with transformers' defaults for smoothing and BOS exclusion."""
        eps = self.settings.label_smoothing if label_smoothing is None else label_smoothing
        if self.variant == "token":
            return M.rag_token_nll(logits, doc_scores, labels, self.pad_token_id, epsilon=eps, reduce=reduce_loss)
        exclude = self.settings.exclude_bos_score if exclude_bos_score is None else exclude_bos_score
        return M.rag_sequence_nll(logits, doc_scores, labels, self.pad_token_id, epsilon=eps, reduce=reduce_loss,
                                  exclude_first=exclude and self._first_targets_are_bos(labels))

    def _first_targets_are_bos(self, labels: torch.Tensor) -> bool:
        # transformers drops the BOS score only when *every* row's first target is BOS
        bos = self.generator.config.bos_token_id
        return bos is not None and labels.shape[1] > 1 and bool(labels[:, 1].eq(bos).all())

    # --- questions + index ---------------------------------------------------------------------

    def encode_questions(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """q(x): the question encoder's pooled output, (B, D)."""
        out = self.question_encoder(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        q = out[0]
        return q[:, 0] if q.dim() == 3 else q  # a BERT-like encoder without pooler: the [CLS] vector

    def retrieve(self, questions: list[str], index: Any, tokenizers: Tokenizers, n_docs: int | None = None,
                 swap: bool = False) -> Retrieved:
        """Top-K passages per question from `index`, and the generator inputs built from them.

        doc_scores = q·d with the index's stored vectors: the gradient reaches the question encoder
        through p(z|x) and never the index. `index` needs `search(q (B, D), k)`, `vectors(rows)` and
        `passages[row]`, as `lewisrag.index.dense.DenseIndex` has. An index built by another
        context encoder than the one this model was trained with is refused unless `swap`.

        With a `context_encoder`, d = context_encoder(passage) instead, computed now for the K
        passages found (the index still chooses them, from its possibly older vectors), and the
        gradient reaches the context encoder as well (RAG-end2end, Siriwardhana et al. 2023).
        """
        k = n_docs or self.n_docs
        device = next(self.parameters()).device
        # cut where the retriever was trained to read questions: a DPR checkpoint's tokenizer carries its
        # q_max_length as model_max_length (`DPRCheckpoint.load`), as eval retrieval cuts them; and at the
        # question encoder's positions, for a tokenizer that knows no limit (model_max_length 1e30)
        limits = [n for n in (max_positions(getattr(self.question_encoder, "config", None)),
                              getattr(tokenizers.question, "model_max_length", None))
                  if isinstance(n, int) and 0 < n < VERY_LARGE]
        q_tok = tokenizers.question(questions, padding=True, truncation=True, max_length=min(limits) if limits else None,
                                    return_tensors="pt").to(device)
        q = self.encode_questions(q_tok["input_ids"], q_tok["attention_mask"])  # (B, D)
        if hasattr(index, "check_encoder"):
            # the model's own question encoder: ask, swap and export take --swap, none --context-encoder. A
            # model naming no context encoder (a transformers RAG checkpoint) has only the width checked
            fingerprint = self.settings.index_fingerprint
            index.check_encoder(fingerprint, q.shape[1], swap=swap or fingerprint is None, flags=("--swap",))
        queries = np.ascontiguousarray(q.detach().float().cpu().numpy())  # (B, D)
        _, rows = index.search(queries, k)  # (B, K)
        check_found(rows, k, index, queries)
        passages = [[index.passages[int(r)] for r in row] for row in rows]
        if self.context_encoder is None:
            docs = torch.as_tensor(np.asarray(index.vectors(rows)), dtype=q.dtype, device=device)  # (B, K, D)
        else:
            docs = self.context_encoder([p for ps in passages for p in ps]).to(q.dtype)  # (B*K, D)
            docs = docs.view(q.shape[0], k, -1)  # (B, K, D)
        if docs.shape != (q.shape[0], k, q.shape[1]):
            raise ValueError(f"document vectors: expected (B, K, D)={(q.shape[0], k, q.shape[1])}, got {tuple(docs.shape)}")
        doc_scores = score_docs(q, docs)  # (B, K)
        texts = [generator_input(p.title, p.text, question, self.settings)
                 for question, ps in zip(questions, passages) for p in ps]
        ctx = tokenizers.generator(texts, padding=True, truncation=True, max_length=self.settings.max_combined_length,
                                   return_tensors="pt").to(device)
        self._count_cut(texts, ctx["attention_mask"], tokenizers.generator,
                        [question for question, ps in zip(questions, passages) for _ in ps])  # each text's
        return Retrieved(ctx["input_ids"], ctx["attention_mask"], doc_scores, np.asarray(rows), passages)

    def _count_cut(self, texts: list[str], mask: torch.Tensor, tokenizer, questions: list[str] | None = None) -> None:
        """Count the generator inputs cut at max_combined_length, and say once that it happens: the question
        comes last ("title / text // question"), so a passage as long as the limit leaves the generator
        part or none of the question to read, in training, evaluation and `ask` alike, without a word
        (transformers' RagRetriever cuts the same way). Only inputs that fill the limit are tokenized
        again, whole: none when the passages are short.

        `questions` (each text's; `retrieve` passes them) tells the two causes apart: a question cut even
        beside an empty passage is too long itself, and shorter passages, once the only advice, would not
        help. The limit is named with the command whose flag sets it: ask, swap and eval read it from the
        model, and advising their users to raise a --max-combined-length they do not have sent them looking."""
        limit = self.settings.max_combined_length
        full = (mask.sum(1) >= limit).nonzero().flatten().tolist()
        cut = []
        if full:
            lengths = tokenizer([texts[i] for i in full], truncation=False, verbose=False)["input_ids"]
            cut = [i for i, ids in zip(full, lengths) if len(ids) > limit]
        self.inputs_made, self.inputs_cut = self.inputs_made + len(texts), self.inputs_cut + len(cut)
        asked = sorted({questions[i] for i in cut}) if questions is not None else []
        alone = tokenizer([generator_input("", "", q, self.settings) for q in asked], truncation=False,
                          verbose=False)["input_ids"] if asked else []
        too_long = {q for q, ids in zip(asked, alone) if len(ids) > limit}  # cut beside an empty passage too
        if too_long:
            warnings.warn(LewisragWarning(
                f"a question is longer than max_combined_length ({limit} tokens) by itself: the generator input "
                "(title / text // question) is cut at the end, so the generator reads only part of the question "
                "beside any passage; shorten the question (the limit is the model's, set at training by `lewisrag "
                "train rag --max-combined-length`, up to the generator's positions)"), stacklevel=2)
        if any(questions is None or questions[i] not in too_long for i in cut):
            warnings.warn(LewisragWarning(
                f"generator inputs (title / text // question) longer than max_combined_length ({limit} tokens) are "
                "cut at the end, where the question is: the generator reads part or none of it (as transformers' "
                "RagRetriever cuts); shorten the passages (lewisrag chunk --words N) or raise the limit (`lewisrag "
                "train rag --max-combined-length`, up to the generator's positions; a trained model keeps its own)"),
                stacklevel=2)

    def forward_questions(self, questions: list[str], index: Any, tokenizers: Tokenizers, labels: torch.Tensor,
                          reduce_loss: bool = False, n_docs: int | None = None,
                          swap: bool = False) -> tuple[RagOutput, Retrieved]:
        """Retrieve for `questions`, then `forward` with `labels` (B, T)."""
        r = self.retrieve(questions, index, tokenizers, n_docs, swap)
        out = self(r.context_input_ids, r.context_attention_mask, r.doc_scores, labels=labels,
                   reduce_loss=reduce_loss, n_docs=r.doc_scores.shape[1])
        return out, r

    # --- decoding and checkpoints (decoding.py, checkpoints.py) -----------------------------------

    @torch.no_grad()
    def generate(self, context_input_ids: torch.Tensor, context_attention_mask: torch.Tensor, doc_scores: torch.Tensor,
                 n_docs: int | None = None, **kwargs):
        """Decode answers with transformers' RAG `generate` arguments; see `decoding.generate`."""
        return generate(self, context_input_ids, context_attention_mask, doc_scores, n_docs=n_docs, **kwargs)

    @classmethod
    def from_hf_pretrained(cls, path, variant: str | None = None) -> RagModel:
        """Load a transformers RagTokenForGeneration / RagSequenceForGeneration checkpoint directory."""
        return checkpoints.load_hf(cls, path, variant)

    def to_hf(self, path, warn_lost: bool = True) -> None:
        """Write a transformers checkpoint directory that `Rag{Token,Sequence}ForGeneration.from_pretrained` loads
        (a RAG-Sequence model's generation settings it cannot keep are warned about: `checkpoints.save_hf`)."""
        checkpoints.save_hf(self, path, warn_lost)

    def save_pretrained(self, path) -> None:
        """Safetensors weights, both module configs, and `rag.json` naming variant, tokenizers and index."""
        checkpoints.save_native(self, path)

    @classmethod
    def from_pretrained(cls, path) -> RagModel:
        return checkpoints.load_native(cls, path)
