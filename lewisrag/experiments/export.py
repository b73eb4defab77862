"""Export a trained RAG model and its dense index as one folder transformers' own RAG classes load.

Layout of `DIR` (what `RagRetriever.from_pretrained(DIR)`, `RagTokenizer.from_pretrained(DIR)` and
`RagTokenForGeneration` / `RagSequenceForGeneration.from_pretrained(DIR, retriever=...)` read):

    DIR/config.json                 RagConfig: index_name "custom", passages_path, index_path (absolute),
                                    retrieval_vector_size, n_docs, title_sep/doc_sep/prefix/max_combined_length
    DIR/model.safetensors           RAG weights (`RagModel.to_hf`), generation_config.json
    DIR/question_encoder_tokenizer/ DIR/generator_tokenizer/   (RagTokenizer's layout)
    DIR/passages/                   datasets save_to_disk: id, title, text, embeddings (the index's stored float32 vectors)
    DIR/passages.faiss              the index's FAISS index (inner product, rows = passages' rows), faiss.write_index
    DIR/lewisrag_export.json        where it came from: model, index, variant, index fingerprint

The paths in config.json are absolute: after moving DIR, pass `passages_path=` and `index_path=` to
`RagRetriever.from_pretrained`.

Decoding as `lewisrag ask` does. `ask` decodes with the model's generation config, except that it
passes its own `num_beams` (default 1: greedy) and `max_length` (default 32). The export writes
that default: its generation config has num_beams=1 and max_length=32, so RAG-Token's plain
`generate()` gives default `ask`'s answers. A beam-only setting (bart-large's `early_stopping=True`)
cannot be saved beside num_beams=1 (transformers refuses), so it is left out there and listed in
`beam_kwargs`. A saved transformers RAG-Sequence folder keeps no generation config for its
generator at all: transformers rebuilds one from the BART config, without settings such as
bart-large's `forced_bos_token_id=0` and `no_repeat_ngram_size=3`. Hence, in the summary and
lewisrag_export.json:

    generate_kwargs   generate(**generate_kwargs) gives default `ask`'s answers, either variant:
                      num_beams=1, max_length=32 and (RAG-Sequence) every setting its reload loses
    beam_kwargs       add these and num_beams=N to get `ask --num-beams N`'s answers

transformers' retriever builds each generator input from the question *decoded* from its input ids
(`question_encoder_tokenizer.batch_decode`), not from the string asked: with an uncased question
tokenizer the question reaches the generator lowercased, as it does in transformers' RAG itself.
"""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np
import torch

from lewisrag.data.io import InputError, write_json
from lewisrag.data.outputs import staged_dir
from lewisrag.index.dense import DenseIndex
from lewisrag.training.checkpoint import load_trained, resolve_model_dir

KIND = "export"
PASSAGES = "passages"
FAISS_FILE = "passages.faiss"
META = "lewisrag_export.json"
# `lewisrag ask`'s --num-beams and --max-length defaults (commands/ask.py; tests/test_export.py checks they agree)
ASK_DEFAULTS = {"num_beams": 1, "max_length": 32}
BEAM_ONLY = ("early_stopping", "length_penalty")  # settings transformers refuses to save with num_beams=1
# what generate() returns beside the ids, or whether it keeps a cache while decoding; never which ids: not a
# decoding setting a reload can lose. A generator folder whose generation_config.json does not name them
# (bart-large's, written by transformers 4; any folder without the file) reads None there, where the config
# transformers rebuilds has the model config's False (True for use_cache).
NOT_DECODING = ("output_attentions", "output_hidden_states", "output_scores", "output_logits", "return_dict_in_generate",
                "use_cache")


@dataclass(frozen=True)
class ExportSummary:
    out: str
    variant: str
    n_docs: int
    n_passages: int
    dim: int
    model: str
    index: str
    generate_kwargs: dict  # generate(**generate_kwargs) on the reloaded model: default `lewisrag ask`'s answers
    beam_kwargs: dict  # with num_beams=N added to generate_kwargs: `lewisrag ask --num-beams N`'s answers

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def export_rag(model_path: str | os.PathLike, index_path: str | os.PathLike, out: str | os.PathLike,
               swap: bool = False) -> ExportSummary:
    """Write the transformers RAG folder described in the module docstring to `out` (atomically, marked "export")."""
    # transformers' RAG classes import `datasets`; only this path needs them
    from datasets import Dataset, Features, Sequence, Value
    from transformers import RagConfig, RagTokenizer

    model, tokenizers = load_trained(model_path)
    dense = DenseIndex.load(index_path, mmap=True)  # nprobe/efSearch applied: FAISS writes them with the index
    if dense.manifest.get("rerank_depth"):  # lewisrag re-ranks candidates exactly; transformers searches FAISS alone
        raise InputError(Path(index_path) / "manifest.json", "is re-ranked from the stored vectors (index tune "
                         "--rerank-depth), which transformers' retriever does not do: it would return other passages than "
                         "`lewisrag ask`; export a copy tuned without --rerank-depth", field="rerank_depth")
    metric = dense.manifest.get("metric")
    if metric != "inner_product":
        raise InputError(Path(index_path) / "manifest.json", f"transformers' RAG searches by inner product; this index's "
                         f"metric is {metric!r}", field="metric")
    with torch.no_grad():  # the question encoder's output size, checked against the index's like `ask` does
        q = tokenizers.question(["dimension probe"], return_tensors="pt")
        dim = int(model.encode_questions(q["input_ids"], q["attention_mask"]).shape[1])
    dense.check_encoder(model.settings.index_fingerprint, dim, swap=swap, flags=("--swap",))
    n = len(dense.passages)
    if model.n_docs > n:
        raise InputError(index_path, f"holds {n} passages, fewer than the model's n_docs {model.n_docs}")

    out = Path(out)
    final = out.resolve()
    s = model.settings
    beams = beam_settings(model.generation_config)
    model.generation_config = ask_generation_config(model.generation_config)  # what the export decodes with
    with staged_dir(out, KIND) as tmp:
        model.to_hf(tmp / "rag")
        for entry in (tmp / "rag").iterdir():  # the RAG weights and configs sit at the top of DIR
            os.replace(entry, tmp / entry.name)
        (tmp / "rag").rmdir()
        config = RagConfig.from_pretrained(tmp)
        config.index_name = "custom"
        config.passages_path = str(final / PASSAGES)
        config.index_path = str(final / FAISS_FILE)
        config.retrieval_vector_size = dim
        config.n_docs = s.n_docs
        config.title_sep, config.doc_sep, config.prefix = s.title_sep, s.doc_sep, s.prefix or None
        config.generator.prefix = s.prefix or None  # the one transformers' retriever prepends
        config.max_combined_length = s.max_combined_length  # within the generator's positions (RagModel caps it)
        config.save_pretrained(tmp)
        RagTokenizer(question_encoder=tokenizers.question, generator=tokenizers.generator).save_pretrained(tmp)

        features = Features({"id": Value("string"), "title": Value("string"), "text": Value("string"),
                             "embeddings": Sequence(Value("float32"))})

        stored = dense.scan_vectors()  # read from first row to last

        def rows(batch: int = 4096):
            for start in range(0, n, batch):
                vectors = np.asarray(stored[start:start + batch], dtype=np.float32)
                for i, v in enumerate(vectors):
                    p = dense.passages[start + i]
                    yield {"id": p.id, "title": p.title, "text": p.text, "embeddings": v}

        with _quiet_datasets():
            ds = Dataset.from_generator(rows, features=features, cache_dir=str(tmp / ".cache"))
            ds.save_to_disk(str(tmp / PASSAGES))
        del ds
        shutil.rmtree(tmp / ".cache", ignore_errors=True)
        faiss.write_index(dense.faiss_index, str(tmp / FAISS_FILE))
        summary = ExportSummary(str(out), s.variant, s.n_docs, n, dim, str(resolve_model_dir(model_path)), str(index_path),
                                {**ASK_DEFAULTS, **lost_generation_settings(model)}, beams)
        write_json(tmp / META, {"format": "lewisrag-export/1", **summary.to_dict(),
                                "index_fingerprint": dense.ctx_fingerprint})
    return summary


def ask_generation_config(generation_config):
    """A copy of `generation_config` that decodes as `lewisrag ask` does by default (`ASK_DEFAULTS`),
    without the beam-only settings that transformers will not save beside num_beams=1."""
    gc = copy.deepcopy(generation_config)
    gc.update(**ASK_DEFAULTS, max_new_tokens=None)  # ask's max_length beats a saved max_new_tokens (decoding.resolve_settings)
    unset = type(gc)()
    gc.update(**{name: getattr(unset, name) for name in BEAM_ONLY})
    return gc


def beam_settings(generation_config) -> dict:
    """The beam-only settings of `generation_config` that differ from transformers' defaults."""
    unset = type(generation_config)()
    return {name: getattr(generation_config, name) for name in BEAM_ONLY
            if getattr(generation_config, name) != getattr(unset, name)}


def lost_generation_settings(model) -> dict:
    """The generation settings transformers' RAG-Sequence will not have after reloading the export.

    It decodes with its generator's generation config, which a saved RAG folder does not hold;
    on loading, transformers builds a new one from the generator's config. Every setting where
    that differs from the model's generation config (in `export_rag`: already `ask_generation_config`)
    is returned, but those that never change the ids generate() decodes (`NOT_DECODING`); none for
    RAG-Token, whose own generation config is saved and read back.
    """
    from transformers import GenerationConfig

    if model.variant == "token":
        return {}
    ours = model.generation_config.to_dict()
    rebuilt = GenerationConfig.from_model_config(model.generator.config).to_dict()
    internal = {"transformers_version", "_from_model_config", "_commit_hash", "_original_object_hash", *NOT_DECODING}
    return {k: v for k, v in ours.items() if k not in internal and rebuilt.get(k) != v}


@contextlib.contextmanager
def _quiet_datasets():
    """`datasets` without its progress bars (library code never prints), restored afterwards."""
    import datasets

    was = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was:
            datasets.enable_progress_bars()
