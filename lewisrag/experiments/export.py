"""Export a trained RAG model and its dense index as one folder transformers' own RAG classes load.

Layout of `DIR` (what `RagRetriever.from_pretrained(DIR)`, `RagTokenizer.from_pretrained(DIR)` and
`RagTokenForGeneration` / `RagSequenceForGeneration.from_pretrained(DIR, retriever=...)` read):

    DIR/config.json                 RagConfig: index_name "custom", passages_path, index_path (absolute),
                                    retrieval_vector_size, n_docs, title_sep/doc_sep/prefix/max_combined_length
    DIR/model.safetensors           RAG weights (`RagModel.to_hf`), generation_config.json
    DIR/question_encoder_tokenizer/ DIR/generator_tokenizer/   (RagTokenizer's layout; model_max_length at most the
                                    positions of the model each feeds: `within_positions`)
    DIR/passages/                   datasets save_to_disk's layout: id, title, text, embeddings (the index's stored
                                    vectors as float32), written once (`write_passages`)
    DIR/passages.faiss              the index's FAISS index (inner product, rows = passages' rows), faiss.write_index
    DIR/lewisrag_export.json        where it came from: model, index (absolute paths), variant, the exported index's fingerprint
                                    (index_fingerprint) and the context encoder the model is paired with
                                    (paired_fingerprint; they differ after --swap), generate_kwargs, beam_kwargs,
                                    and the task it was trained for (`train rag --task`; null: unknown), which
                                    `lewisrag swap` refuses unless QA (`swap.check_tasks`)

The paths in config.json are absolute: after moving DIR, pass `passages_path=` and `index_path=` to
`RagRetriever.from_pretrained`. lewisrag reads DIR back as the model exported (`load_trained`,
`RagModel.from_hf_pretrained`: `rag_model.checkpoints.apply_export_record`), pairing and decoding alike.

Decoding as `lewisrag ask` does. `ask` decodes with the model's generation config, except that it
passes its own `num_beams` (default 1: greedy) and `max_length` (default 32). The export writes
that default: its generation config has num_beams=1 and max_length=32, so RAG-Token's plain
`generate()` gives default `ask`'s answers. A beam-only setting (bart-large's `early_stopping=True`)
cannot be saved beside num_beams=1 (transformers refuses), so it is left out there and listed in
`beam_kwargs`; sampling-only settings (a generator's `"top_k": 10`: RAG decoding never samples) and
output flags without return_dict_in_generate, which transformers refuses as well and which change no
id, are left out too (`rag_model.checkpoints.unread_settings`). A saved transformers RAG-Sequence
folder keeps no generation config for its generator at all: transformers rebuilds one from the BART
config, without settings such as bart-large's `forced_bos_token_id=0` and `no_repeat_ngram_size=3`.
Hence, in the summary and lewisrag_export.json:

    generate_kwargs   generate(**generate_kwargs) gives default `ask`'s answers, either variant:
                      num_beams=1, max_length=32 and (RAG-Sequence) every setting its reload loses
    beam_kwargs       add these and num_beams=N to get `ask --num-beams N`'s answers

except, for RAG-Sequence, the padding: transformers' retriever pads every passage to max_combined_length
and transformers 5 runs the per-passage search without an attention mask, attending to that padding
(`ask` masks it, as training does), so its answers differ from `ask`'s; passing the generator the mask
gives them back (docs/real-data.md, "One difference no setting can carry").

Either variant answers the question *decoded* from its input ids: transformers' retriever builds each
generator input from `question_encoder_tokenizer.batch_decode`, not from the string asked. It matches
`ask` given that string, which an uncased question tokenizer lowercases and a BERT tokenizer writes with a
space between Chinese characters; a generator trained on cased (or unspaced Chinese) questions may answer
the question as typed otherwise (docs/real-data.md).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa
import torch

from lewisrag.data.io import InputError, make_parents, one_line, remove_if_empty, write_json
from lewisrag.data.outputs import check_out_dir, exclusive, staged_dir
from lewisrag.data.passages import PASSAGE_SCHEMA, PassageTable
from lewisrag.experiments.swap import trained_task
from lewisrag.index.dense import DenseIndex
from lewisrag.index.dense.files import faiss_write_error
from lewisrag.rag_model.checkpoints import BEAM_ONLY, EXPORT_FORMAT, EXPORT_RECORD, reset_unread
from lewisrag.rag_model.decoding import generation_file
from lewisrag.rag_model.model import max_positions
from lewisrag.training.checkpoint import load_trained, resolve_model_dir

KIND = "export"
PASSAGES = "passages"
FAISS_FILE = "passages.faiss"
# `lewisrag ask`'s --num-beams and --max-length defaults (commands/ask.py; tests/test_export.py checks they agree)
ASK_DEFAULTS = {"num_beams": 1, "max_length": 32}
# what generate() returns beside the ids, or whether it keeps a cache while decoding; never which ids: not a
# decoding setting a reload can lose. A generator folder whose generation_config.json does not name them
# (bart-large's, written by transformers 4; any folder without the file) reads None there, where the config
# transformers rebuilds has the model config's False (True for use_cache).
SHARD_BYTES = 500 * 10**6  # the largest Arrow file of passages/: `datasets`' save_to_disk default, "500MB"
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
    # the context encoder the model is paired with; None: it names none (a transformers RAG checkpoint)
    paired_fingerprint: str | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def export_rag(model_path: str | os.PathLike, index_path: str | os.PathLike, out: str | os.PathLike,
               swap: bool = False, overwrite: bool = False) -> ExportSummary:
    """Write the transformers RAG folder described in the module docstring to `out` (atomically, marked "export").

    `out` is checked as `lewisrag export --out` is (`outputs.check_out_dir`): a folder the user filled
    is never replaced, another lewisrag output or files added to an earlier export only with `overwrite`.
    While it runs, `out` is held (`outputs.exclusive`): a second export (or any lewisrag writer) into it is refused."""
    given = out
    out = check_out_dir(out, KIND, overwrite=overwrite, inputs={"--model": model_path, "--index": index_path},
                        replaces=True)  # before anything is loaded
    # `out` held from here to the swap, as every writer of a folder holds it (`outputs.exclusive`, which
    # `rewritten_dir` takes too): a second export into it is refused in one line instead of racing this one
    # to the rename (both would move the old folder to one `.NAME.old`). The lock is on `out` itself, which
    # stays put until the staged folder replaces it; parents made for it go again if the export fails.
    made = make_parents(out)
    try:
        with exclusive(out, "--out"):
            return _export(model_path, index_path, out, given, swap)
    except BaseException:
        remove_if_empty(made)
        raise


def _export(model_path, index_path, out: Path, given, swap: bool) -> ExportSummary:
    """`export_rag` once `out` is checked and held."""
    # transformers' RAG classes import `datasets`; only this path needs them
    from transformers import RagConfig, RagTokenizer

    task = trained_task(resolve_model_dir(model_path))  # a damaged train_config.json: refused before any weight loads
    model, tokenizers = load_trained(model_path)
    dense = DenseIndex.load(index_path, mmap=True)  # nprobe/efSearch applied: FAISS writes them with the index
    if dense.manifest.get("rerank_depth"):  # lewisrag re-ranks candidates exactly; transformers searches FAISS alone
        raise InputError(Path(index_path) / "manifest.json", "is re-ranked from the stored vectors (index tune "
                         "--rerank-depth), which transformers' retriever does not do: it would return other passages than "
                         "`lewisrag ask`; export a copy tuned without --rerank-depth", field="rerank_depth")
    # transformers' RAG searches by inner product, as lewisrag does: `DenseIndex.load` refuses a manifest naming another
    # metric (`store.check_manifest`; one naming none is inner product, as for every other command)
    with torch.no_grad():  # the question encoder's output size, checked against the index's like `ask` does
        q = tokenizers.question(["dimension probe"], return_tensors="pt")
        dim = int(model.encode_questions(q["input_ids"], q["attention_mask"]).shape[1])
    # a model naming no context encoder (a transformers RAG checkpoint) takes any index of its width, as in `ask`
    # (`RagModel.retrieve`); the command says so in a note (`ask.unpaired_note`)
    paired = model.settings.index_fingerprint
    dense.check_encoder(paired, dim, swap=swap or paired is None, flags=("--swap",))
    n = len(dense.passages)
    if model.n_docs > n:
        raise InputError(index_path, f"holds {n} passages, fewer than the model's n_docs {model.n_docs}", field="n_passages")

    final = out.resolve()
    s = model.settings
    beams = beam_settings(model.generation_config)
    model.generation_config = ask_generation_config(model.generation_config)  # what the export decodes with
    with staged_dir(out, KIND) as tmp:
        try:
            model.to_hf(tmp / "rag", warn_lost=False)  # lewisrag_export.json below records what it loses
        except ValueError as e:  # a setting transformers will not save that `ask_generation_config` kept
            refusal = unsavable(e, generation_source(resolve_model_dir(model_path), s.variant))
            if refusal is None:
                raise
            raise refusal from None
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
        RagTokenizer(question_encoder=within_positions(tokenizers.question, model.question_encoder.config),
                     generator=within_positions(tokenizers.generator, model.generator.config)).save_pretrained(tmp)

        write_passages(dense, tmp / PASSAGES)
        try:
            faiss.write_index(dense.faiss_index, str(tmp / FAISS_FILE))
        except RuntimeError as e:  # FAISS's report of a failed write (a full disk), not an OSError
            raise faiss_write_error(final / FAISS_FILE, e) from None
        # the inputs by absolute path, as a reproduction's config.json names its assets: the record outlives the shell it ran in
        summary = ExportSummary(str(given), s.variant, s.n_docs, n, dim, str(resolve_model_dir(model_path).resolve()),
                                str(Path(index_path).resolve()), {**ASK_DEFAULTS, **lost_generation_settings(model)}, beams,
                                s.index_fingerprint)
        # the model's own pairing (in the summary) beside the exported index's: they differ when --swap paired it with another;
        # the task, which transformers' layout has no place for, so that `swap` still refuses a FEVER or Jeopardy model
        write_json(tmp / EXPORT_RECORD, {"format": EXPORT_FORMAT, **summary.to_dict(), "index_fingerprint": dense.ctx_fingerprint,
                                         "task": task})
    return summary


def within_positions(tokenizer, config):
    """`tokenizer`, or a copy of it whose model_max_length is the positions of the model it feeds (`config`'s
    max_position_embeddings) where it allowed more: a DPR trained here has a tokenizer that knows no limit
    (model_max_length 1e30), so transformers' truncation=True kept a long question whole and generate() ran
    past the question encoder's positions, where `lewisrag ask` cuts it at them (`RagModel.retrieve`)."""
    positions, limit = max_positions(config), getattr(tokenizer, "model_max_length", None)
    if positions is None or (isinstance(limit, int) and limit <= positions):
        return tokenizer
    tokenizer = copy.deepcopy(tokenizer)  # the caller's tokenizer keeps its own
    tokenizer.model_max_length = positions
    return tokenizer


def ask_generation_config(generation_config):
    """A copy of `generation_config` that decodes as `lewisrag ask` does by default (`ASK_DEFAULTS`), without
    the settings that cannot change its ids and that transformers will not save in a config the export changed
    (`rag_model.checkpoints.unread_settings`): beam-only ones beside num_beams=1, sampling-only ones (a
    generator's `"top_k": 10`, which trained and answered, crashed the export), output flags.

    The start token is written as lewisrag resolves it: it decodes from bos_token_id where decoder_start_token_id
    is unset (`decoding._search_settings`), where transformers' RAG-Token generate() failed (torch.full's fill_value
    None) and RAG-Sequence's reloaded generator starts from the BART config's token (generate_kwargs now names
    lewisrag's). cache_implementation, which lewisrag never reads, is dropped: transformers' beam search with a
    "static" cache answered otherwise than `ask --num-beams 3` (12 of 12 questions)."""
    gc = copy.deepcopy(generation_config)
    start = gc.decoder_start_token_id if gc.decoder_start_token_id is not None else gc.bos_token_id
    # ask's max_length beats a saved max_new_tokens (decoding.resolve_settings)
    gc.update(**ASK_DEFAULTS, max_new_tokens=None, decoder_start_token_id=start, cache_implementation=None)
    return reset_unread(gc)


def generation_source(model_dir: Path, variant: str) -> Path:
    """The file `model_dir`'s generation config was read from (a RAG-Sequence folder of transformers' layout
    keeps its generator's in config.json)."""
    if (model_dir / "rag.json").is_file():
        return generation_file(model_dir / "generator")
    return generation_file(model_dir) if variant == "token" else model_dir / "config.json"


def unsavable(error: ValueError, source: Path) -> InputError | None:
    """transformers' refusal to save a generation config (`GenerationConfig.save_pretrained`: "GenerationConfig
    is invalid", one issue a line "- `name`: why", or another check's error, each ending "Fix these issues to
    save the configuration.") as one line naming `source` and the first setting; None for any other ValueError."""
    text = str(error)
    if "to save the configuration" not in text:
        return None
    issue = re.search(r"^- `(\w+)`: (.*)$", text, re.MULTILINE)
    if issue:
        field, why = issue.group(1), issue.group(2)
    else:
        named = re.search(r"`(\w+)`", text)
        field, why = (named.group(1) if named else None), one_line(text.split("\n\nFix these issues")[0])
    return InputError(source, f"transformers will not save this generation setting in the export: {why}", field=field)


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


def write_passages(dense: DenseIndex, folder: Path, batch_rows: int = 4096) -> None:
    """`dense`'s passages with their stored vectors (as float32) in `folder`, laid out as `datasets`'
    save_to_disk lays out a Dataset (what `load_from_disk`, and so transformers' retriever, reads):
    Arrow shards of at most SHARD_BYTES, state.json and dataset_info.json.

    Written once, Arrow batch by Arrow batch from the index: `Dataset.from_generator` would first
    write every row to a cache of its own, which save_to_disk then copies (twice the writing, and
    twice the disk until the cache is removed), and it turns every row into Python objects first.
    """
    from datasets import DatasetInfo, Features, Sequence, Value
    from datasets.arrow_writer import ArrowWriter
    from datasets.splits import SplitDict, SplitInfo

    features = Features({"id": Value("string"), "title": Value("string"), "text": Value("string"),
                         "embeddings": Sequence(Value("float32"))})
    folder.mkdir()
    parts: list[tuple[Path, int, int]] = []  # (file, rows, bytes) per shard
    tables = _passage_tables(dense, batch_rows)
    table = next(tables)  # the index holds at least the model's n_docs passages
    while table is not None:
        file, written = folder / f"part-{len(parts):05d}.arrow", 0
        with ArrowWriter(features=features, path=str(file)) as writer:
            while table is not None and written < SHARD_BYTES:
                writer.write_table(table)
                written += table.nbytes
                table = next(tables, None)
            parts.append((file, *writer.finalize()))
    names = [f"data-{i:05d}-of-{len(parts):05d}.arrow" for i in range(len(parts))]  # save_to_disk's names
    for (part, _, _), name in zip(parts, names):
        os.replace(part, folder / name)
    rows, size = sum(p[1] for p in parts), sum(p[2] for p in parts)
    fingerprint = hashlib.sha256(json.dumps(dense.manifest, sort_keys=True).encode()).hexdigest()[:16]
    write_json(folder / "state.json", {"_data_files": [{"filename": n} for n in names], "_fingerprint": fingerprint,
                                       "_format_columns": None, "_format_kwargs": {}, "_format_type": None,
                                       "_output_all_columns": False, "_split": "train"})
    splits = SplitDict({"train": SplitInfo(name="train", num_bytes=size, num_examples=rows)})
    DatasetInfo(features=features, splits=splits, dataset_size=size, size_in_bytes=size).write_to_directory(str(folder))


def _passage_tables(dense: DenseIndex, batch_rows: int):
    """`dense`'s passages as Arrow tables of `batch_rows` rows: id, title, text and their stored vectors
    (float32 lists), in row order; an index's passage store goes Arrow to Arrow, a list (an index of
    the first format) a batch of Passages at a time."""
    passages, stored = dense.passages, dense.scan_vectors()  # the vectors read from first row to last
    if isinstance(passages, PassageTable):
        batches = passages.arrow_batches(batch_rows)
    else:
        batches = (pa.record_batch([pa.array([getattr(p, name) for p in passages[start:start + batch_rows]], pa.string())
                                    for name in PASSAGE_SCHEMA.names], schema=PASSAGE_SCHEMA)
                   for start in range(0, len(passages), batch_rows))
    start = 0
    for batch in batches:
        vectors = np.ascontiguousarray(stored[start:start + batch.num_rows], dtype=np.float32)
        offsets = pa.array(np.arange(0, vectors.size + 1, vectors.shape[1], dtype=np.int32))
        embeddings = pa.ListArray.from_arrays(offsets, pa.array(vectors.reshape(-1)))
        yield pa.Table.from_batches([batch]).append_column("embeddings", embeddings)
        start += batch.num_rows
