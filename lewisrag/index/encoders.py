"""DPR encoders: loading a checkpoint directory, fingerprints, and batched encoding.

Two layouts are read. A DPR checkpoint directory (written by `lewisrag train dpr`) holds both
encoders, in transformers format:

    question_encoder/   DPRQuestionEncoder + config
    ctx_encoder/        DPRContextEncoder + config
    tokenizer/          a PreTrainedTokenizerFast
    lewisrag_dpr.json   {"ctx_fingerprint", "dim", "max_length", ...}

A transformers encoder folder (facebook/dpr-question_encoder-single-nq-base,
facebook/dpr-ctx_encoder-single-nq-base: config.json naming DPRQuestionEncoder or DPRContextEncoder
under `architectures`, model.safetensors, its BERT tokenizer's files) holds one side:
`load_context_encoder` reads the passage side for `index build`, `load_question_encoder` the
question side for searching and `train rag`.

The context encoder's fingerprint (`state_fingerprint` of its weights) is what an index manifest
records: a question encoder may search an index only if it was trained against the same (frozen)
context encoder. A lewisrag checkpoint records its pair's fingerprint in lewisrag_dpr.json. A
transformers question-encoder folder records nothing, so its pair is named explicitly:
`context_encoder=` (the CLI's `--context-encoder`) is the DPRContextEncoder folder it was trained
with, fingerprinted from its weights exactly as `index build` fingerprinted it. Without it, only
`swap=True` (`--swap`) lets it search.

How a passage becomes the context encoder's input is a property of the encoder too, its passage
encoding (`passage_encoding`), since an index, a training run and its self-mined negatives must
all encode passages the way the encoder learnt to read them:

- "dpr": DPR's own (facebookresearch/DPR's BertTensorizer, as generate_dense_embeddings.py runs it,
  which made wiki_dpr's vectors and facebook/dpr-ctx_encoder-*): `[CLS] title [SEP] text [SEP]` with
  every segment id 0, the text alone (`[CLS] text [SEP]`) when the title is empty.
- "pair": lewisrag's own since its first checkpoints (a DPR trained by `train dpr` from scratch or a
  BERT-like start): a BERT pair, the text in segment 1, an empty title kept as `[CLS] [SEP] text [SEP]`.

It is recorded in the tokenizer's tokenizer_config.json (`ENCODING_KEY`), which every layout saves
with its encoder, and held by the loaded tokenizer (`tokenize_texts` reads it there). Where it is
not recorded, a transformers DPR folder is "dpr" (the hub's, made by DPR) and a lewisrag checkpoint,
or a RAG model's context_encoder/, "pair" (written before the field, by lewisrag's encoding).
`train dpr` keeps its start's: a transformers DPR folder trains (and mines) as "dpr".
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lewisrag.data.io import InputError, is_count, read_json, write_json
from lewisrag.data.pretrained import check_weights, load_config, load_model, load_tokenizer

META_FILE = "lewisrag_dpr.json"
DPR_ARCHITECTURES = {"DPRQuestionEncoder": "question", "DPRContextEncoder": "context"}  # config.json architectures -> side
# DPR checkpoints converted from facebookresearch/DPR (facebook/dpr-*-single-nq-base) carry BERT's pooler,
# which DPR never runs (it takes the [CLS] vector): the one kind of unused weight not refused
DPR_POOLER = r"(^|\.)bert_model\.pooler\."
PASSAGE_ENCODINGS = ("pair", "dpr")  # how passages become encoder input (see the module's docstring)
ENCODING_KEY = "lewisrag_passage_encoding"  # tokenizer_config.json's field that records it


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
    """The encoders of a DPR bi-encoder (both for lewisrag's layout, one side for a transformers folder),
    their tokenizer and metadata."""

    question_encoder: object  # transformers DPRQuestionEncoder; None for a transformers DPRContextEncoder folder
    ctx_encoder: object  # transformers DPRContextEncoder; None for a transformers DPRQuestionEncoder folder
    tokenizer: object  # PreTrainedTokenizerFast (a transformers folder: its own BERT tokenizer)
    meta: dict  # lewisrag_dpr.json; for a transformers folder, what `load_transformers_encoder` derives

    @property
    def ctx_fingerprint(self) -> str | None:
        """The fingerprint of the context encoder this question encoder belongs to (None: not known)."""
        return self.meta.get("ctx_fingerprint")

    @property
    def dim(self) -> int:
        return int(self.meta["dim"])

    @property
    def passage_encoding(self) -> str:
        """"pair" or "dpr": how this encoder's passages are tokenized (`passage_encoding`)."""
        return passage_encoding(self.tokenizer)

    @property
    def tokenizer_fingerprint(self) -> str:
        return tokenizer_fingerprint(self.tokenizer)

    @classmethod
    def load(cls, path: str | Path) -> DPRCheckpoint:
        """A DPR checkpoint directory lewisrag wrote (both encoders).

        The tokenizer's model_max_length becomes the checkpoint's q_max_length, where DPR was trained to
        cut questions. A RAG model takes this tokenizer, cuts its questions at model_max_length
        (`RagModel.retrieve`) and saves it with itself, so a RAG run, its saved model and its export read
        a question as `eval retrieval` and `index search` encode it (`DenseRetriever`): with a scratch
        tokenizer, which knows no limit, RAG read up to the encoder's 128 positions where DPR had
        trained on 32. Passages are cut at `max_length`, which every call gives (`tokenize_texts`)."""
        # transformers (and torch with it) loads on first use, for the BM25 paths (see state_fingerprint)
        import torch
        from transformers import DPRContextEncoder, DPRQuestionEncoder, PreTrainedTokenizerFast

        p = Path(path)
        meta = _read_meta(p)
        # float32 whatever the saved dtype (transformers 5 loads a bf16/fp16 checkpoint in its own dtype)
        q = load_model(DPRQuestionEncoder.from_pretrained, p / "question_encoder", "DPR question encoder",
                       dtype=torch.float32).eval()
        c = load_model(DPRContextEncoder.from_pretrained, p / "ctx_encoder", "DPR context encoder", dtype=torch.float32).eval()
        tok = load_tokenizer(PreTrainedTokenizerFast.from_pretrained, p / "tokenizer", "DPR tokenizer")
        adopt_passage_encoding(tok, "pair", p / "tokenizer")
        _check_lengths(meta, int(c.config.max_position_embeddings), int(q.config.max_position_embeddings), p / META_FILE)
        tok.model_max_length = meta["q_max_length"]  # where questions are cut (the docstring)
        for side, encoder in (("context", c), ("question", q)):  # an index sized by a wrong dim failed deep in its build
            if _output_dim(encoder) != meta["dim"]:
                raise InputError(p / META_FILE, f"says {meta['dim']}-d vectors, but the {side} encoder gives "
                                 f"{_output_dim(encoder)}-d", field="dim")
        return cls(q, c, tok, meta)

    def save(self, path: str | Path, extra: dict | None = None) -> None:
        """Write the checkpoint; the context fingerprint is recomputed from the weights, and the passage
        encoding and q_max_length (as model_max_length) recorded in tokenizer/tokenizer_config.json."""
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        self.meta = {
            **self.meta,
            **(extra or {}),
            "ctx_fingerprint": state_fingerprint(self.ctx_encoder),
            "dim": int(self.ctx_encoder.config.projection_dim or self.ctx_encoder.config.hidden_size),
        }
        self.question_encoder.save_pretrained(p / "question_encoder")
        self.ctx_encoder.save_pretrained(p / "ctx_encoder")
        set_passage_encoding(self.tokenizer, self.passage_encoding)  # recorded, not left to a default
        # saved cutting questions where DPR trained on them, as `load` reads it: transformers' own
        # tokenizer(q, truncation=True) cut nothing at a scratch tokenizer's 1e30 (passages are cut at
        # max_length by every call, `tokenize_texts`; one tokenizer serves both sides)
        self.tokenizer.model_max_length = self.meta["q_max_length"]
        self.tokenizer.save_pretrained(p / "tokenizer")
        write_json(p / META_FILE, self.meta)


def dpr_layout(path: str | os.PathLike) -> str:
    """What the directory `path` holds: "lewisrag" (a `lewisrag train dpr` checkpoint), "rag" (a trained
    RAG model directory, `train rag`'s best/ or final/: its question encoder is used), or "question" /
    "context" (a transformers DPRQuestionEncoder / DPRContextEncoder folder, told by config.json's
    architectures). Anything else is an InputError."""
    p = Path(path)
    if not p.is_dir():
        raise InputError(p, f"DPR encoder: {'not a directory' if p.exists() else 'directory not found'}")
    if (p / META_FILE).exists():
        return "lewisrag"
    if (p / "rag.json").is_file():
        return "rag"
    # a `train rag` run folder: its config.json is the run's settings, not a model's (export and ask take
    # the folder itself, its best/ model); here its model is named
    models = [p / m for m in ("best", "final") if (p / m / "rag.json").is_file()]
    if models:
        raise InputError(p, f"a `train rag` run folder, not an encoder: give its model, {models[0]} (whose question "
                            "encoder is used)")
    if not (p / "config.json").is_file():
        raise InputError(p, f"not a DPR checkpoint: no {META_FILE} (a `lewisrag train dpr` checkpoint) and no config.json "
                            "(a transformers DPRQuestionEncoder or DPRContextEncoder folder)")
    architectures = config_architectures(p / "config.json")
    sides = [DPR_ARCHITECTURES[a] for a in architectures if a in DPR_ARCHITECTURES]
    if not sides:
        raise InputError(p / "config.json", f"not a DPR encoder folder: architectures is {architectures or None!r}, not "
                         f"DPRQuestionEncoder or DPRContextEncoder (and there is no {META_FILE} of a `lewisrag train dpr` "
                         "checkpoint)", field="architectures")
    return sides[0]


def config_architectures(config_file: Path) -> list[str]:
    """The class names `config_file` (a model's config.json) lists under architectures, as transformers
    writes them; none where the field is missing or null, or the file holds no JSON object. Any other
    value is refused: a number or a nested list was a TypeError's traceback, and a string was read
    character by character."""
    config = read_json(config_file)
    architectures = config.get("architectures") if isinstance(config, dict) else None
    if architectures is not None and not (isinstance(architectures, list) and all(isinstance(a, str) for a in architectures)):
        raise InputError(config_file, f"expected a list of class names, got {architectures!r}", field="architectures")
    return architectures or []


def own_limit(config, tokenizer) -> int:
    """The tokens a transformers encoder folder reads: its positions, or its tokenizer's model_max_length
    if smaller (what transformers' tokenizer would be asked to cut at). `train dpr` converting a pair
    keeps this limit, so the checkpoint encodes as the folders do (`training.dpr.start_limits`)."""
    limit = int(config.max_position_embeddings)
    asked = getattr(tokenizer, "model_max_length", None)
    return int(asked) if isinstance(asked, int) and 0 < asked < limit else limit


def load_transformers_encoder(path: str | os.PathLike, side: str,
                              tokenizer_path: str | os.PathLike | None = None) -> DPRCheckpoint:
    """A transformers DPRQuestionEncoder (`side` "question") or DPRContextEncoder ("context") folder
    with its tokenizer (in the folder, or in `tokenizer_path`), as a DPRCheckpoint holding that side only.

    Loading is strict (`data.pretrained.load_model`): every weight the encoder has must be in
    model.safetensors and every weight there used, except BERT's pooler (`DPR_POOLER`). Texts are
    cut at the model's own limit (its positions, or the tokenizer's model_max_length if smaller), as
    transformers' tokenizer would be asked to; a context folder's fingerprint is taken from its weights.
    """
    # transformers (and torch with it) loads on first use, for the BM25 paths (see state_fingerprint)
    import torch
    from transformers import DPRContextEncoder, DPRQuestionEncoder

    p = Path(path)
    arch = "DPRQuestionEncoder" if side == "question" else "DPRContextEncoder"
    cls = DPRQuestionEncoder if side == "question" else DPRContextEncoder
    if tokenizer_path is None and (p.parent / "rag.json").is_file() and not (p / "tokenizer_config.json").is_file():
        raise InputError(p, f"the {p.name} of a trained RAG model holds no tokenizer (it is in {p.parent.name}/"
                            f"question_tokenizer): give the model directory {p.parent} instead")
    model = load_model(cls.from_pretrained, p, arch, ignore_unexpected=DPR_POOLER, dtype=torch.float32).eval()
    tokenizer = _bert_tokenizer(Path(tokenizer_path or p), arch, int(model.config.vocab_size))
    # a RAG model's context_encoder/ without the field was trained, and its index/ encoded, by lewisrag's "pair"
    adopt_passage_encoding(tokenizer, "pair" if (p.parent / "rag.json").is_file() else "dpr", Path(tokenizer_path or p))
    limit = own_limit(model.config, tokenizer)
    meta = {"format": "transformers", "architecture": arch, "path": str(p.resolve()), "dim": _output_dim(model),
            "max_length": limit, "q_max_length": limit,
            "ctx_fingerprint": state_fingerprint(model) if side == "context" else None}
    if side == "question":
        return DPRCheckpoint(model, None, tokenizer, meta)
    return DPRCheckpoint(None, model, tokenizer, meta)


def check_transformers_encoder(path: str | os.PathLike, side: str) -> None:
    """What `load_transformers_encoder` reads from a DPR folder of `side`, checked without loading a
    weight: the safetensors headers parse and the tokenizer loads and fits. For `reproduce --preset
    base`, so that a pickle-only, truncated or tokenizer-less folder is refused before the stages run."""
    from transformers import AutoConfig

    arch = "DPRQuestionEncoder" if side == "question" else "DPRContextEncoder"
    check_weights(path, arch)
    _bert_tokenizer(Path(path), arch, int(load_config(AutoConfig.from_pretrained, path, f"{arch} config").vocab_size))


def _bert_tokenizer(folder: Path, arch: str, vocab_size: int):
    """The BERT tokenizer in a DPR `folder`, refused unless it can be its encoder's (of `vocab_size`
    embedding rows): without vocab.txt and tokenizer.json transformers 5 builds a BertTokenizer of the
    5 special tokens, every word [UNK], and training runs on it to the end."""
    from transformers import AutoTokenizer

    what = f"{arch}'s tokenizer"
    files = [folder / name for name in ("tokenizer.json", "vocab.txt") if (folder / name).is_file()]
    if folder.is_dir() and not files:  # a folder not there is named by load_tokenizer
        raise InputError(folder / "vocab.txt", f"{what}: file not found (a BERT tokenizer needs vocab.txt or tokenizer.json)")
    tokenizer = load_tokenizer(AutoTokenizer.from_pretrained, folder, what, use_fast=True)
    # A token id must index the embedding (a larger one fails inside it, mid-run). The hub's DPR folders
    # have exactly vocab_size tokens, and a checkpoint may keep spare rows (an embedding padded to a
    # multiple of 64, tokens removed); under half the rows, though, the vocabulary is another model's
    # or a stub, whose words the encoder never learnt.
    if not vocab_size / 2 <= len(tokenizer) <= vocab_size:
        raise InputError(files[0], f"{what}: {len(tokenizer)} tokens, where the encoder's config.json has vocab_size "
                         f"{vocab_size}: not the tokenizer this encoder was trained with")
    return tokenizer


def context_encoder_layout(path: str | os.PathLike) -> str:
    """`dpr_layout` of a folder that must encode passages, checked without loading weights: a
    DPRQuestionEncoder folder, or a RAG model without a trained context encoder, is an InputError."""
    layout = dpr_layout(path)
    if layout == "question":
        raise InputError(Path(path) / "config.json", "a DPRQuestionEncoder folder encodes questions; an index is built by "
                         "the context encoder: give the DPRContextEncoder folder of its pair", field="architectures")
    if layout == "rag":
        _rag_context_folder(path)
    return layout


def load_context_encoder(path: str | os.PathLike) -> DPRCheckpoint:
    """The passage side that builds an index: a `lewisrag train dpr` checkpoint or a transformers
    DPRContextEncoder folder (`ctx_encoder`, `tokenizer`, `dim`, `ctx_fingerprint`, `meta["max_length"]`)."""
    layout = context_encoder_layout(path)
    if layout == "lewisrag":
        return DPRCheckpoint.load(path)
    return load_transformers_encoder(_rag_context_folder(path) if layout == "rag" else path, "context")


def _rag_context_folder(path: str | os.PathLike) -> Path:
    """A trained RAG model's context encoder: context_encoder/, written only by a run that trained it
    (`train rag --train-context-encoder`); the others' passages were encoded by the DPR that built their index."""
    p = Path(path) / "context_encoder"
    if not p.is_dir():
        raise InputError(Path(path), "a trained RAG model directory has no context encoder unless it was trained with "
                                     "--train-context-encoder: give the DPR checkpoint that built its index")
    return p


def load_question_encoder(path: str | os.PathLike, context_encoder: str | os.PathLike | None = None) -> DPRCheckpoint:
    """The question side that searches an index and starts `train rag`'s retriever.

    `path` is a `lewisrag train dpr` checkpoint (which names its context encoder itself) or a
    transformers DPRQuestionEncoder folder; for the latter `context_encoder` names its pair (a
    DPRContextEncoder folder or a lewisrag checkpoint), whose fingerprint becomes `ctx_fingerprint`.
    Without it `ctx_fingerprint` is None: no index accepts the encoder unless swapping.
    """
    layout = dpr_layout(path)
    if layout == "context":
        raise InputError(Path(path) / "config.json", "a DPRContextEncoder folder encodes passages, not questions: give "
                         "--encoder the DPRQuestionEncoder folder of its pair (and --context-encoder this folder)",
                         field="architectures")
    if layout in ("lewisrag", "rag"):
        if context_encoder:
            what = "DPR checkpoint" if layout == "lewisrag" else "RAG model (its index's)"
            raise InputError("--context-encoder", f"{path} is a lewisrag {what}, which names its own context "
                             "encoder; --context-encoder goes with a transformers DPRQuestionEncoder folder")
        return DPRCheckpoint.load(path) if layout == "lewisrag" else load_rag_question_encoder(path)
    ckpt = load_transformers_encoder(path, "question")
    if context_encoder:
        ckpt.meta["ctx_fingerprint"] = context_fingerprint(context_encoder)
        ckpt.meta["context_encoder"] = str(Path(context_encoder).resolve())
    return ckpt


def load_rag_question_encoder(path: str | os.PathLike) -> DPRCheckpoint:
    """The question encoder of a trained RAG model directory (question_encoder/ and question_tokenizer/),
    paired with the context encoder of the index it was trained against (rag.json's index_fingerprint),
    so recall can be measured with the retriever RAG training left, on that index or under --swap."""
    p = Path(path)
    # rag.json is read as a file here, not through lewisrag.rag_model (a layer above this one)
    meta = read_json(p / "rag.json")
    settings = meta.get("settings") if isinstance(meta, dict) else None
    if not isinstance(settings, dict):
        raise InputError(p / "rag.json", "no settings object: not a lewisrag RAG model directory", field="settings")
    fingerprint = settings.get("index_fingerprint")
    if fingerprint is not None and not isinstance(fingerprint, str):
        raise InputError(p / "rag.json", f"must be a string or null, got {fingerprint!r}", field="settings.index_fingerprint")
    ckpt = load_transformers_encoder(p / "question_encoder", "question", tokenizer_path=p / "question_tokenizer")
    ckpt.meta.update(ctx_fingerprint=fingerprint, path=str(p.resolve()))
    return ckpt


def load_encoder_pair(path: str | os.PathLike, context_encoder: str | os.PathLike | None = None,
                      ) -> tuple[DPRCheckpoint, DPRCheckpoint]:
    """(question side, context side), both loaded, for `index cut`, which searches stored vectors and
    so needs the weights of the context encoder that made them (8 are encoded afresh to check them),
    not its fingerprint alone. A `lewisrag train dpr` checkpoint is both sides. A transformers
    DPRQuestionEncoder folder and a trained RAG model (whose question encoder searches; the context
    encoder its index was built with is not in it) take the context side from `context_encoder` (a
    DPRContextEncoder folder, a DPR checkpoint, or a RAG model trained with --train-context-encoder).
    A RAG model records its index's context-encoder fingerprint, and a `context_encoder` of another
    is refused: its question encoder was trained to search that one's vectors."""
    layout = dpr_layout(path)
    if layout == "lewisrag":
        if context_encoder:
            raise InputError("--context-encoder", f"{path} is a lewisrag DPR checkpoint, which holds its own context "
                             "encoder; --context-encoder goes with a transformers DPRQuestionEncoder folder or a RAG model")
        ckpt = DPRCheckpoint.load(path)
        return ckpt, ckpt
    if layout == "rag":
        ckpt = load_rag_question_encoder(path)
        what, pair = "RAG model", "the DPR checkpoint or DPRContextEncoder folder that built the index it was trained against"
    else:
        ckpt = load_question_encoder(path, context_encoder)  # refuses a DPRContextEncoder folder
        what, pair = "DPRQuestionEncoder folder", "the DPRContextEncoder of its pair"
    if not context_encoder:
        raise InputError("--context-encoder", f"needed with the {what} {path}: {pair}, which made the stored vectors "
                         "(8 of them are checked against fresh encodings)")
    ctx = load_context_encoder(context_encoder)
    if layout == "rag" and ckpt.ctx_fingerprint not in (None, ctx.ctx_fingerprint):
        raise InputError("--context-encoder", f"{context_encoder} is not the context encoder the RAG model {path} was "
                         f"trained against: its fingerprint is {ctx.ctx_fingerprint}, the model's index's (rag.json's "
                         f"settings.index_fingerprint) {ckpt.ctx_fingerprint}; give the DPR checkpoint or "
                         "DPRContextEncoder folder that built that index")
    return ckpt, ctx


def context_fingerprint(path: str | os.PathLike) -> str:
    """The fingerprint of the context encoder in `path` (`--context-encoder`): a transformers
    DPRContextEncoder folder (its weights, loaded strictly; no tokenizer needed) or a lewisrag DPR
    checkpoint (the fingerprint its lewisrag_dpr.json records)."""
    # transformers (and torch with it) loads on first use, for the BM25 paths (see state_fingerprint)
    import torch
    from transformers import DPRContextEncoder

    p = Path(path)
    if not p.exists():
        raise InputError(p, "--context-encoder: directory not found")
    layout = dpr_layout(p)
    if layout == "lewisrag":
        return _read_meta(p)["ctx_fingerprint"]
    if layout == "question":
        raise InputError(p / "config.json", "--context-encoder needs the DPRContextEncoder folder the index was built "
                         "with; this is a DPRQuestionEncoder", field="architectures")
    if layout == "rag":
        p = _rag_context_folder(p)
    return state_fingerprint(load_model(DPRContextEncoder.from_pretrained, p, "DPRContextEncoder (--context-encoder)",
                                        ignore_unexpected=DPR_POOLER, dtype=torch.float32))  # as index build loads it


def passage_text(title: str, text: str) -> tuple[str, str]:
    """A passage as `tokenize_texts` takes it: the pair (title, text), which the encoder's passage
    encoding turns into tokens (the module's docstring)."""
    return title, text


def passage_encoding(tokenizer) -> str:
    """The passage encoding ("pair" or "dpr") that `tokenizer` carries: what `adopt_passage_encoding`
    set when its encoder was loaded or started from, else "pair" (a scratch tokenizer of `train dpr`)."""
    return getattr(tokenizer, "init_kwargs", {}).get(ENCODING_KEY) or "pair"


def adopt_passage_encoding(tokenizer, default: str, folder: str | os.PathLike | None = None):
    """Give `tokenizer` the passage encoding its tokenizer_config.json records (in `folder`, named by
    an error), or `default` where it records none; it is saved with the tokenizer from then on.
    Returns the tokenizer."""
    return set_passage_encoding(tokenizer, tokenizer.init_kwargs.get(ENCODING_KEY, default), folder)


def set_passage_encoding(tokenizer, encoding: str, folder: str | os.PathLike | None = None):
    """`tokenizer` carries `encoding` (one of PASSAGE_ENCODINGS; another is refused, naming the
    tokenizer_config.json of `folder`) and saves it with itself. Returns the tokenizer."""
    if encoding not in PASSAGE_ENCODINGS:
        raise InputError(Path(folder or ".") / "tokenizer_config.json", f"must be one of {', '.join(PASSAGE_ENCODINGS)}, "
                         f"got {encoding!r}", field=ENCODING_KEY)
    tokenizer.init_kwargs[ENCODING_KEY] = encoding
    return tokenizer


def tokenizer_fingerprint(tokenizer) -> str:
    """sha256 of how `tokenizer` turns text into ids: its backend's pipeline and vocabulary (to_str(),
    without the truncation and padding state each call sets), its special tokens and do_lower_case.
    An index build's plan holds it, so a changed tokenizer restarts a build as changed weights do."""
    h = hashlib.sha256()
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        spec = json.loads(backend.to_str())
        spec.pop("truncation", None), spec.pop("padding", None)
        h.update(json.dumps(spec, sort_keys=True).encode())
    else:  # a slow tokenizer: its vocabulary
        h.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    h.update(json.dumps({"special_tokens": tokenizer.special_tokens_map, "do_lower_case":
                         tokenizer.init_kwargs.get("do_lower_case")}, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def tokenize_texts(tokenizer, texts: Sequence[str] | Sequence[tuple[str, str]], max_length: int):
    """Encoder inputs (torch tensors, padded to the longest) for strings (questions) or (title, text)
    pairs (passages, `passage_text`) in the tokenizer's passage encoding (`passage_encoding`), cut to
    `max_length` tokens.

    "pair" cuts the text alone, as it always did, except where the title leaves no room for any of
    it: there title and text are cut together (longest_first), which is what "dpr" does throughout, as
    DPR does (the tokenizers library fails on such a title, not cut). Segment ids are always returned,
    whatever the tokenizer's model_input_names: a tokenizer saved by a BERT-like start reloads without
    them, and its index was encoded all in segment 0 where it had trained with the text in segment 1.

    Index builds (`encode_texts`), `train dpr` and its self-mined negatives, and the end-to-end
    retriever's passage encoder (`training.end2end.PassageEncoder`) all tokenize here, so a passage
    re-encoded in training gets the tokens its stored vector was made from.
    """
    if not isinstance(texts[0], tuple):
        return tokenizer(list(texts), truncation=True, max_length=max_length, padding=True, return_tensors="pt")
    titles, bodies = [t[0] for t in texts], [t[1] for t in texts]
    if passage_encoding(tokenizer) == "dpr":
        titled = [i for i, title in enumerate(titles) if title]  # DPR: `if title` pairs it, else the text alone
        untitled = [i for i, title in enumerate(titles) if not title]
        groups = [(titled, "longest_first", True), (untitled, True, False)]
    else:
        specials = tokenizer.num_special_tokens_to_add(pair=True)
        # cut at max_length (a longer title is long already), which also keeps transformers from warning of it
        lengths = [len(ids) for ids in tokenizer(titles, add_special_tokens=False, truncation=True,
                                                 max_length=max_length)["input_ids"]]
        fits = [i for i, n in enumerate(lengths) if n + specials < max_length]  # only_second can cut the text
        long = [i for i, n in enumerate(lengths) if n + specials >= max_length]
        if not long:  # the call it always was (lewisrag's own tokenizers return segment ids anyway)
            return tokenizer(titles, bodies, truncation="only_second", max_length=max_length, padding=True,
                             return_token_type_ids=True, return_tensors="pt")
        groups = [(fits, "only_second", True), (long, "longest_first", True)]
    rows: list[dict | None] = [None] * len(texts)
    for rows_of, truncation, paired in groups:
        if not rows_of:
            continue
        first = [titles[i] for i in rows_of] if paired else [bodies[i] for i in rows_of]
        second = [bodies[i] for i in rows_of] if paired else None
        enc = tokenizer(first, second, truncation=truncation, max_length=max_length, return_token_type_ids=True)
        for k, i in enumerate(rows_of):
            rows[i] = {name: values[k] for name, values in enc.items()}
    batch = tokenizer.pad(rows, padding=True, return_tensors="pt")
    if passage_encoding(tokenizer) == "dpr":
        batch["token_type_ids"].zero_()  # DPR's segments are all 0
    return batch


def encode_texts(
    encoder,
    tokenizer,
    texts: Sequence[str] | Sequence[tuple[str, str]],
    *,
    batch_size: int = 64,
    max_length: int = 256,
    mixed_precision: str = "no",
    on_batch: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Encode strings (questions) or (title, text) pairs (passages) into float32 (N, D) vectors.

    Runs on the encoder's device (move it to a GPU first to encode there); `mixed_precision`
    "bf16" or "fp16" autocasts the forward passes (vectors change in the third digit or so).
    """
    import torch  # loads on first use, for the BM25 paths (see state_fingerprint)

    device = next(encoder.parameters()).device
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mixed_precision)
    out = []
    with torch.inference_mode(), torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
        for batch in _batches(texts, batch_size):
            vecs = encoder(**tokenize_texts(tokenizer, batch, max_length).to(device)).pooler_output  # (N, D)
            out.append(vecs.float().cpu().numpy())
            if on_batch:
                on_batch(len(batch))
    dim = _output_dim(encoder)
    return np.concatenate(out, axis=0).astype(np.float32) if out else np.zeros((0, dim), np.float32)


def _read_meta(p: Path) -> dict:
    """lewisrag_dpr.json of the checkpoint in `p`, checked."""
    if not (p / META_FILE).exists():
        raise InputError(p, f"not a DPR checkpoint (no {META_FILE}); train one with `lewisrag train dpr`")
    meta = read_json(p / META_FILE)
    if not (isinstance(meta, dict) and isinstance(meta.get("ctx_fingerprint"), str) and isinstance(meta.get("dim"), int)):
        raise InputError(p / META_FILE, "expected a JSON object with ctx_fingerprint (a string) and dim (an integer)")
    return meta


def checkpoint_limits(path: str | os.PathLike, ctx_positions: int, q_positions: int) -> tuple[int, int]:
    """(max_length, q_max_length) of the checkpoint in `path`, as `DPRCheckpoint.load` reads them (defaults
    included), for `train dpr --init` to train on at the limits its encoders encode with."""
    p = Path(path)
    meta = _read_meta(p)
    _check_lengths(meta, ctx_positions, q_positions, p / META_FILE)
    return meta["max_length"], meta["q_max_length"]


def _check_lengths(meta: dict, ctx_positions: int, q_positions: int, source: Path) -> None:
    """The token limits lewisrag_dpr.json records (passages: max_length, questions: q_max_length),
    each within its encoder's positions (a longer one fails deep inside BERT's embeddings); missing
    ones (a hand-made file) become 256 and 64 tokens, or the positions if fewer."""
    for field, default, positions, side in (("max_length", 256, ctx_positions, "context"),
                                            ("q_max_length", 64, q_positions, "question")):
        value = meta.setdefault(field, min(default, positions))
        if not (is_count(value) and 0 < value <= positions):
            raise InputError(source, f"expected a whole number from 1 to the {side} encoder's {positions} positions, "
                             f"got {value!r}", field=field)


def _output_dim(encoder) -> int:
    cfg = encoder.config
    return int(getattr(cfg, "projection_dim", 0) or cfg.hidden_size)


def _batches(items: Sequence, size: int) -> Iterator[Sequence]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
