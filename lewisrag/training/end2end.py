"""The end-to-end retriever (`train rag --train-context-encoder`): the RAG loss trains DPR's context
encoder as well, as RAG-end2end (Siriwardhana et al. 2023) does; Lewis et al. 2020 (§2.4) keep it
fixed and name this as future work.

The index still chooses each question's K passages, from vectors an earlier context encoder made,
but the document vectors d(z) in p(z|x) ∝ exp(q(x)·d(z)) are computed in the step by the current
context encoder (`PassageEncoder`, installed as `RagModel.context_encoder`), so the gradient of the
loss reaches it through p(z|x). Its weights are a third AdamW group at the question encoder's
learning rate (lr × retriever_lr_scale).

Every `reindex_every` optimizer steps (`reindex`) every passage is encoded again by the current
encoder and the index's search is rebuilt in memory, as an exact Flat index over the new vectors
with the index's own passages. This runs in the training process between steps, not in a background
process as RAG-end2end does for Wikipedia: at the world's size (4,000 passages, a small encoder) a
re-encoding costs seconds (`reindex_s` in the log line of each step that re-indexed), so overlapping
it with training would save little, while between steps the config alone fixes which steps search
which vectors: a run stays deterministic and a resumed run equals an uninterrupted one. With several
processes each one re-encodes the corpus itself (equal weights give equal vectors).

Resuming: model.safetensors holds the context encoder and the optimizer state its moments; once the
index has been re-encoded the checkpoint also holds the vectors it searches (`checkpoint.LIVE_VECTORS`,
with the step and fingerprint that made them under "live_index" in state.json), because the weights
that made them are gone by then.

Dev evaluation: at an evaluation step (`train rag --eval-every`) the dev questions search the index a
new best/ would carry (`index_to_save`): the training index itself where this step re-indexed, else
the passages encoded now by the current context encoder, searched for dev alone (training goes on
searching the last re-index's vectors, so a run's trajectory, and its resume, are as before). The
score recorded in best/train_config.json is then that of the retriever best/ holds; scoring the
last re-index's vectors instead chose best/ by a retriever it did not save. Cost: one encoding of
the corpus at each evaluation step that did not re-index (before, at each new best alone), and none
where --eval-every is a multiple of --reindex-every: at the world's size seconds (a re-index's 3.3 s),
and at any size one re-index's work per evaluation, which early in a run (when nearly every
evaluation is a new best) was paid already.

Saved models (best/, final/) hold `context_encoder/`, a transformers DPRContextEncoder folder with its
tokenizer, which cuts passages at the training index's length (`lewisrag index build --encoder
MODEL/context_encoder` encodes another corpus for the model), and `index/`, the training index's
passages encoded by it (the live vectors when the current encoder made them, else encoded then),
which rag.json names with its fingerprint: `lewisrag ask --model RUN --index RUN/best/index` reads
it, while the starting index, whose vectors the model no longer matches, is refused unless --swap.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from lewisrag.data.io import InputError, read_json, write_json
from lewisrag.data.records import Passage
from lewisrag.index.dense import DenseIndex
from lewisrag.index.store import MANIFEST
from lewisrag.index.encoders import (
    DPRCheckpoint, dpr_layout, encode_texts, load_context_encoder, passage_encoding, passage_text, state_fingerprint,
    tokenize_texts, tokenizer_fingerprint,
)
from lewisrag.training import checkpoint as C

ENCODE_BATCH = 64  # passages per forward pass when the corpus is re-encoded (index build's default)
ENCODE_BLOCK = 4096  # passages made into (title, text) pairs at a time, so memory stays bounded


class PassageEncoder(nn.Module):
    """DPR's context encoder d(z), applied with gradient to passages tokenized as the index was built
    (`index.encoders.tokenize_texts`, cut at `max_length` tokens)."""

    def __init__(self, encoder: nn.Module, tokenizer, max_length: int):
        super().__init__()
        self.encoder, self.tokenizer, self.max_length = encoder, tokenizer, max_length

    def forward(self, passages: Sequence[Passage]) -> torch.Tensor:
        """The (N, D) vectors of N passages."""
        device = next(self.encoder.parameters()).device
        inputs = tokenize_texts(self.tokenizer, [passage_text(p.title, p.text) for p in passages], self.max_length)
        return self.encoder(**inputs.to(device)).pooler_output  # (N, D)

    def encode_all(self, passages: Sequence[Passage], mixed_precision: str = "no") -> np.ndarray:
        """Every passage's vector, (N, D) float32, made as an index build makes them: without
        gradient and in eval mode (no dropout, so no random draw: resuming stays exact)."""
        was_training = self.training
        self.eval()
        try:
            out = np.empty((len(passages), self.encoder.config.projection_dim or self.encoder.config.hidden_size),
                           dtype=np.float32)
            for start in range(0, len(passages), ENCODE_BLOCK):
                block = passages[start : start + ENCODE_BLOCK]
                out[start : start + len(block)] = encode_texts(
                    self.encoder, self.tokenizer, [passage_text(p.title, p.text) for p in block], batch_size=ENCODE_BATCH,
                    max_length=self.max_length, mixed_precision=mixed_precision)
        finally:
            self.train(was_training)
        return out

    def fingerprint(self) -> str:
        """What an index built by this encoder records (`index.encoders.state_fingerprint`)."""
        return state_fingerprint(self.encoder)

    def save_pretrained(self, path: str | os.PathLike) -> None:
        """A transformers DPRContextEncoder folder with its tokenizer, whose model_max_length is
        `max_length`, so that `index build` from it cuts passages where training did."""
        self.encoder.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        config = Path(path) / "tokenizer_config.json"
        write_json(config, {**read_json(config), "model_max_length": self.max_length})


def passage_encoder(dpr: DPRCheckpoint, cfg, index: DenseIndex) -> PassageEncoder:
    """The context encoder `cfg` (a `rag.RagTrainConfig`) trains: the DPR checkpoint's own, a RAG model's
    context_encoder/ (one `train rag --train-context-encoder` saved, paired with its index/), or with a
    transformers DPRQuestionEncoder folder the DPRContextEncoder folder of `--context-encoder`.
    Passages are cut at the length `index` was built with, which must fit the encoder's positions."""
    if dpr.ctx_encoder is not None:
        ctx = dpr
    elif dpr_layout(cfg.encoder) == "rag":  # a RAG model goes on with the context encoder it trained, its index's
        if not (Path(cfg.encoder) / "context_encoder").is_dir():
            raise InputError("--train-context-encoder", f"{cfg.encoder} is a RAG model trained without "
                             "--train-context-encoder: it holds no context encoder to train (its index's stayed "
                             "frozen); start from the DPR checkpoint or transformers DPR pair that built its index")
        ctx = load_context_encoder(cfg.encoder)  # its context_encoder/
    elif cfg.context_encoder:
        ctx = load_context_encoder(cfg.context_encoder)
    else:
        raise InputError("--train-context-encoder", f"{cfg.encoder} is a transformers DPRQuestionEncoder folder, "
                         "without a context encoder to train: pass its pair's DPRContextEncoder folder as --context-encoder")
    max_length = int(index.manifest.get("build", {}).get("max_length") or ctx.meta.get("max_length", 256))
    positions = int(ctx.ctx_encoder.config.max_position_embeddings)
    if max_length > positions:  # an index another encoder built (--swap): a traceback at the first step, a half-made --out
        raise InputError(Path(index.path) / MANIFEST, f"the index was built cutting passages at {max_length} tokens, more "
                         f"than the {positions} positions of the context encoder --train-context-encoder trains: give an "
                         "--index built at most that long, or train the context encoder that built it", field="build.max_length")
    return PassageEncoder(ctx.ctx_encoder, ctx.tokenizer, max_length)


def reindex(model, index: DenseIndex, mixed_precision: str = "no") -> float:
    """Re-encode every passage of `index` with the model's context encoder and search those vectors
    from now on (the model's index fingerprint follows them). Returns the seconds it took."""
    start = time.perf_counter()
    use_vectors(model, index, model.context_encoder.encode_all(index.passages, mixed_precision),
                model.context_encoder.fingerprint(), mixed_precision)
    return time.perf_counter() - start


def use_vectors(model, index: DenseIndex, vectors: np.ndarray, fingerprint: str, mixed_precision: str) -> None:
    """`index` searches `vectors`, made by the context encoder of `fingerprint`, which the model
    then names as its index's, so `RagModel.retrieve`'s encoder check accepts it."""
    index.replace_vectors(vectors, reencoded(index, fingerprint, model.context_encoder, mixed_precision))
    model.settings = replace(model.settings, index_fingerprint=fingerprint)


def reencoded(index: DenseIndex, fingerprint: str, encoder: PassageEncoder, mixed_precision: str) -> dict:
    """The manifest fields of `index` re-encoded by `encoder` (whose weights' fingerprint, or those of
    an earlier step's, is `fingerprint`), its passage encoding and tokenizer included as `index build`
    records them, so that `index verify` encodes afresh as it encoded (its folder, `path`, is known
    once a model is saved: `checkpoint.save_model`)."""
    return {"encoder": {"path": None, "ctx_fingerprint": fingerprint, "format": "transformers",
                        "tokenizer_fingerprint": tokenizer_fingerprint(encoder.tokenizer),
                        "passage_encoding": passage_encoding(encoder.tokenizer)},
            "build": {"max_length": encoder.max_length, "mixed_precision": mixed_precision, "vector_dtype": "float32",
                      "reencoded_from": str(index.path)}}


def live_state(index: DenseIndex, reindexed_at: int) -> dict:
    """state.json's "live_index": the step whose encoder made the vectors `index` searches (0: never
    re-encoded, none stored) and its fingerprint."""
    return {"step": reindexed_at, "ctx_fingerprint": index.ctx_fingerprint if reindexed_at else None}


def restore(ckpt: Path, state: dict, model, index: DenseIndex, mixed_precision: str = "no") -> int:
    """After `checkpoint.load_checkpoint`: `index` searches the vectors the checkpoint holds, if it
    had been re-encoded by then. Returns the step that re-encoded it (0: never)."""
    live = state.get("live_index") or {}
    if live.get("step"):
        vectors = C.load_vectors(ckpt, (len(index.passages), index.dim))
        use_vectors(model, index, vectors, live["ctx_fingerprint"], mixed_precision)
    return int(live.get("step") or 0)


@contextlib.contextmanager
def searching(model, index: DenseIndex | None):
    """The model names `index`'s context encoder as its own while the block runs (`RagModel.retrieve`
    then searches it: the dev evaluation of `index_to_save`'s index), its settings restored after.
    None: nothing changes (no context encoder trained)."""
    if index is None:
        yield
        return
    settings = model.settings
    model.settings = replace(settings, index_fingerprint=index.ctx_fingerprint)
    try:
        yield
    finally:
        model.settings = settings


def index_to_save(model, index: DenseIndex, current: bool, mixed_precision: str = "no") -> DenseIndex | None:
    """The index a saved model carries (`checkpoint.save_model(index=...)`): None without a context
    encoder; `index` itself when the current encoder made its vectors (`current`); else the passages
    encoded now, `index` left as it is."""
    if model.context_encoder is None:
        return None
    if current:
        return index
    enc = model.context_encoder
    manifest = {**index.manifest, **reencoded(index, enc.fingerprint(), enc, mixed_precision)}
    return DenseIndex.from_vectors(index.path, manifest, enc.encode_all(index.passages, mixed_precision), index.passages)
