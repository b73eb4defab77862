"""DPR encoders: loading a checkpoint directory, fingerprints, and batched encoding.

A DPR checkpoint directory (written by `lewisrag train dpr`) holds, in transformers format:

    question_encoder/   DPRQuestionEncoder + config
    ctx_encoder/        DPRContextEncoder + config
    tokenizer/          a PreTrainedTokenizerFast
    lewisrag_dpr.json   {"ctx_fingerprint", "dim", "max_length", ...}

The context encoder's fingerprint is what an index manifest records: a question encoder may
search an index only if it was trained against the same (frozen) context encoder.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lewisrag.data.io import InputError, read_json, write_json
from lewisrag.data.pretrained import load_model, load_tokenizer

META_FILE = "lewisrag_dpr.json"


def state_fingerprint(module) -> str:
    """sha256 over parameter names, shapes and bytes: equal weights give equal fingerprints."""
    import torch  # loads on first use: BM25 paths import this module (through lewisrag.index) and never need torch

    h = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(name.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.view(-1).view(dtype=torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


@dataclass
class DPRCheckpoint:
    """The two encoders of a DPR bi-encoder, their tokenizer and metadata."""

    question_encoder: object  # transformers DPRQuestionEncoder
    ctx_encoder: object  # transformers DPRContextEncoder
    tokenizer: object  # PreTrainedTokenizerFast
    meta: dict

    @property
    def ctx_fingerprint(self) -> str:
        return self.meta["ctx_fingerprint"]

    @property
    def dim(self) -> int:
        return int(self.meta["dim"])

    @classmethod
    def load(cls, path: str | Path) -> DPRCheckpoint:
        # transformers (and torch with it) loads on first use, for the BM25 paths (see state_fingerprint)
        from transformers import DPRContextEncoder, DPRQuestionEncoder, PreTrainedTokenizerFast

        p = Path(path)
        if not (p / META_FILE).exists():
            raise InputError(p, f"not a DPR checkpoint (no {META_FILE}); train one with `lewisrag train dpr`")
        meta = read_json(p / META_FILE)
        if not (isinstance(meta, dict) and isinstance(meta.get("ctx_fingerprint"), str) and isinstance(meta.get("dim"), int)):
            raise InputError(p / META_FILE, "expected a JSON object with ctx_fingerprint (a string) and dim (an integer)")
        q = load_model(DPRQuestionEncoder.from_pretrained, p / "question_encoder", "DPR question encoder").eval()
        c = load_model(DPRContextEncoder.from_pretrained, p / "ctx_encoder", "DPR context encoder").eval()
        tok = load_tokenizer(PreTrainedTokenizerFast.from_pretrained, p / "tokenizer", "DPR tokenizer")
        return cls(q, c, tok, meta)

    def save(self, path: str | Path, extra: dict | None = None) -> None:
        """Write the checkpoint; the context fingerprint is recomputed from the weights."""
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        self.question_encoder.save_pretrained(p / "question_encoder")
        self.ctx_encoder.save_pretrained(p / "ctx_encoder")
        self.tokenizer.save_pretrained(p / "tokenizer")
        self.meta = {
            **self.meta,
            **(extra or {}),
            "ctx_fingerprint": state_fingerprint(self.ctx_encoder),
            "dim": int(self.ctx_encoder.config.projection_dim or self.ctx_encoder.config.hidden_size),
        }
        write_json(p / META_FILE, self.meta)


def passage_text(title: str, text: str) -> tuple[str, str]:
    """DPR encodes a passage as the pair (title, text): `[CLS] title [SEP] text [SEP]`."""
    return title, text


def encode_texts(
    encoder,
    tokenizer,
    texts: Sequence[str] | Sequence[tuple[str, str]],
    *,
    batch_size: int = 64,
    max_length: int = 256,
    on_batch: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Encode strings (questions) or (title, text) pairs (passages) into float32 (N, D) vectors."""
    import torch  # loads on first use, for the BM25 paths (see state_fingerprint)

    out = []
    with torch.inference_mode():
        for batch in _batches(texts, batch_size):
            if isinstance(batch[0], tuple):
                enc = tokenizer([b[0] for b in batch], [b[1] for b in batch], truncation="only_second",
                                max_length=max_length, padding=True, return_tensors="pt")
            else:
                enc = tokenizer(list(batch), truncation=True, max_length=max_length, padding=True, return_tensors="pt")
            vecs = encoder(**enc).pooler_output  # (N, D)
            out.append(vecs.float().cpu().numpy())
            if on_batch:
                on_batch(len(batch))
    dim = _output_dim(encoder)
    return np.concatenate(out, axis=0).astype(np.float32) if out else np.zeros((0, dim), np.float32)


def _output_dim(encoder) -> int:
    cfg = encoder.config
    return int(getattr(cfg, "projection_dim", 0) or cfg.hidden_size)


def _batches(items: Sequence, size: int) -> Iterator[Sequence]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
