"""Loading transformers checkpoint directories safely: safetensors only, every weight accounted for.

Left to itself, `from_pretrained` falls back to pickled `pytorch_model.bin` files, only warns when a
checkpoint lacks weights the model needs (they stay randomly initialised) or holds weights it does
not use, silently skips a malformed generation_config.json, and reports a damaged directory with
assorted OSError, ValueError, KeyError or SafetensorError messages. Here the directory is checked
first, so that a damaged file is named precisely; then the loader runs with `use_safetensors=True`
and `output_loading_info=True`, and whatever still fails becomes an `InputError` (exit code 2 in
the CLI) naming the directory.

    model = load_model(BartForConditionalGeneration.from_pretrained, path, "generator", dtype=torch.float32)
    tokenizer = load_tokenizer(AutoTokenizer.from_pretrained, path, "generator tokenizer", use_fast=True)
    config = load_config(AutoConfig.from_pretrained, path, "generator config")
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open

from lewisrag.data.io import InputError, first_line, read_json
from lewisrag.data.threads import resolve_device

WEIGHTS = "model.safetensors"
SHARDED = "model.safetensors.index.json"  # {"weight_map": {key: shard file}} of a large checkpoint
NOT_READ = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack")
# JSON files transformers may read from a model or tokenizer directory; checked first so a bad one is named
GENERATION = "generation_config.json"
JSON_FILES = ("config.json", GENERATION, "tokenizer.json", "tokenizer_config.json",
              "special_tokens_map.json", "added_tokens.json", "vocab.json", SHARDED)
# what transformers and tokenizers raise for a directory they cannot read or a config that does not fit
LOAD_ERRORS = (OSError, ValueError, KeyError, TypeError, RuntimeError)
RECIPE = "recipe.json"  # `lewisrag pretrain` writes it beside the weights, with their sha256
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "merges.txt", "vocab.txt")
# sentencepiece models: spiece.model (T5), sentencepiece.bpe.model (mBART), source.spm and target.spm (Marian)
SENTENCEPIECE = ("*.model", "*.spm")


def load_model(loader: Callable, path: str | os.PathLike, what: str, *, allow_unexpected: bool = False,
               ignore_missing: str | None = None, ignore_unexpected: str | None = None, **kw: Any):
    """`loader(path, use_safetensors=True, **kw)`, refusing a checkpoint that does not fit the model.

    `loader` is a model class's `from_pretrained`; `what` names the model in messages. Every weight
    the model has must come from the checkpoint, except keys matching the regex `ignore_missing`
    (parts the caller never uses), and with the same shape; every weight in the checkpoint must be
    used unless `allow_unexpected` (a base model read from a checkpoint with a task head, whose head
    is dropped) or it matches the regex `ignore_unexpected` (named weights the model never runs, such
    as the BERT pooler that DPR checkpoints converted from facebookresearch/DPR carry). Keys the
    model class itself declares ignorable (tied or recomputed buffers, `_keys_to_ignore_on_load_*`)
    are already left out of what transformers reports.
    """
    p = Path(path)
    weights = check_weights(p, what)
    with as_input_error(p, what):
        # ignore_mismatched_sizes: report a wrong shape in loading_info (refused below) instead of
        # raising a RuntimeError that points at a report transformers logs at warning level
        model, info = loader(p, use_safetensors=True, output_loading_info=True, ignore_mismatched_sizes=True, **kw)
    _check_keys(info, p / (WEIGHTS if weights == [p / WEIGHTS] else SHARDED), what, allow_unexpected, ignore_missing,
                ignore_unexpected)
    return model


def _check_keys(info: dict, source: Path, what: str, allow_unexpected: bool, ignore_missing: str | None,
                ignore_unexpected: str | None = None) -> None:
    """Refuse what transformers' loading_info reports (it would only log it): see `load_model`."""
    missing = sorted(k for k in info["missing_keys"] if not (ignore_missing and re.search(ignore_missing, k)))
    if missing:
        raise InputError(source, f"the {what} checkpoint lacks weights the model needs ({_few(missing)}): "
                                 "wrong model type or a damaged checkpoint")
    if info["mismatched_keys"]:
        shapes = [f"{k} {tuple(saved)} where the model has {tuple(wanted)}"
                  for k, saved, wanted in sorted(info["mismatched_keys"])]
        raise InputError(source, f"the {what} checkpoint has weights of the wrong shape ({_few(shapes)}): "
                                 "its config.json does not match its weights")
    unexpected = [] if allow_unexpected else sorted(
        k for k in info["unexpected_keys"] if not (ignore_unexpected and re.search(ignore_unexpected, k)))
    if unexpected:
        raise InputError(source, f"the {what} checkpoint has weights the model does not use ({_few(unexpected)}): "
                                 "wrong model type or a damaged checkpoint")
    if info["error_msgs"]:
        raise InputError(source, f"cannot load the {what}: {_first_line(info['error_msgs'][0])}")


def check_weights(path: str | os.PathLike, what: str) -> list[Path]:
    """The safetensors files `load_model` reads from `path`, each header parsed and no tensor loaded:
    a pickle-only or truncated checkpoint refused in a moment, before the stages that come first run."""
    p = _directory(path, what, needs_config=True)
    weights = _weight_files(p, what)
    for f in weights:
        _check_safetensors(f, what)
    return weights


def model_files(path: str | os.PathLike) -> list[Path]:
    """What loading the checked model folder `path` reads (config, generation settings, safetensors
    weights, tokenizer, recipe.json): a hub download also holds the other frameworks' weights, a
    README and .cache/, gigabytes that no copy of it needs."""
    p = Path(path)
    weights = _weight_files(p, "model")
    index = [p / SHARDED] if weights != [p / WEIGHTS] else []
    recipe = [p / RECIPE] if (p / RECIPE).is_file() else []
    return _read_besides_weights(p) + recipe + weights + index


def _read_besides_weights(folder: Path) -> list[Path]:
    """The files in `folder` that loading a model and its tokenizer reads, weights and recipe.json aside."""
    named = [folder / name for name in ("config.json", GENERATION, *TOKENIZER_FILES) if (folder / name).is_file()]
    return named + _sentencepiece_files(folder)


def _sentencepiece_files(folder: Path) -> list[Path]:
    return sorted(f for pattern in SENTENCEPIECE for f in folder.glob(pattern) if f.is_file())


def check_state_fits(expected: dict[str, tuple[int, ...]], state: dict, source: str | os.PathLike, what: str) -> None:
    """Refuse weights `state` (name -> tensor) that do not fill a module whose weights are `expected`
    (name -> shape) exactly: an InputError naming the missing, unused and misshapen keys.

    For weights taken out of one model to start another (a BERT's into a DPR encoder), where
    transformers' own loading_info does not apply.
    """
    missing = sorted(set(expected) - set(state))
    unused = sorted(set(state) - set(expected))
    shapes = sorted(f"{k} {tuple(state[k].shape)} where the model has {expected[k]}"
                    for k in set(expected) & set(state) if tuple(state[k].shape) != tuple(expected[k]))
    problems = ([f"lacks {_few(missing)}"] if missing else []) + ([f"has unused {_few(unused)}"] if unused else []) \
        + ([f"has wrong shapes: {_few(shapes)}"] if shapes else [])
    if problems:
        raise InputError(source, f"the {what} does not fit: it {'; it '.join(problems)}")


def load_tokenizer(loader: Callable, path: str | os.PathLike, what: str, **kw: Any):
    """`loader(path, **kw)` for a tokenizer class's `from_pretrained`, every failure an InputError."""
    p = _directory(path, what, needs_config=False)
    if not (p / "tokenizer.json").is_file():  # a BPE tokenizer in two files: name the missing one (transformers' error does not)
        halves = [name for name in ("vocab.json", "merges.txt") if (p / name).is_file()]
        if len(halves) == 1:
            missing = "merges.txt" if halves == ["vocab.json"] else "vocab.json"
            raise InputError(p / missing, f"{what}: file not found (a BPE tokenizer needs vocab.json and merges.txt, or "
                             "tokenizer.json)")
        # without any vocabulary transformers 5 builds the tokenizer of its few special tokens, every word
        # one unknown token, and training runs on that
        if not (halves or (p / "vocab.txt").is_file() or _sentencepiece_files(p)):
            raise InputError(p / "tokenizer.json", f"{what}: file not found, nor a vocabulary (vocab.json and merges.txt, "
                             "vocab.txt or a sentencepiece model)")
    with as_input_error(p, what):
        return loader(p, **kw)


def load_config(loader: Callable, path: str | os.PathLike, what: str, **kw: Any):
    """`loader(path, **kw)` for a config class's `from_pretrained`, every failure an InputError."""
    p = _directory(path, what, needs_config=True)
    with as_input_error(p, what):
        return loader(p, **kw)


def _directory(path: str | os.PathLike, what: str, needs_config: bool) -> Path:
    """`path` as a local directory whose JSON files parse; hub names are not looked up."""
    p = Path(path)
    if not p.is_dir():
        raise InputError(p, f"{what}: {'not a directory' if p.exists() else 'directory not found'}")
    if needs_config and not (p / "config.json").is_file():
        raise InputError(p / "config.json", f"{what}: file not found (not a transformers model directory)")
    for name in JSON_FILES:
        if not (p / name).is_file():
            continue
        with open(p / name, "rb") as f:  # read_json takes one; transformers does not: a generation_config.json
            bom = f.read(3) == b"\xef\xbb\xbf"  # with one was dropped in silence, its settings with it
        if bom:
            dropped = " (a generation_config.json it cannot read is ignored, its settings with it)" if name == GENERATION else ""
            raise InputError(p / name, f"{what}: starts with a UTF-8 byte-order mark, which transformers cannot read"
                             f"{dropped}: save it as UTF-8 without one")
        if not isinstance(read_json(p / name), dict):
            raise InputError(p / name, f"{what}: expected a JSON object")
    if (p / GENERATION).is_file():
        _check_generation_file(p / GENERATION, what)
    return p


def _check_generation_file(f: Path, what: str) -> None:
    """Refuse a generation_config.json whose values transformers' own validation rejects
    (`"max_new_tokens": 0`): from_pretrained raised it naming neither the file nor the field's file.
    Its warnings (flags it ignores) stay those the load itself prints, not printed twice."""
    from transformers import GenerationConfig
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        GenerationConfig.from_dict(read_json(f))
    except (ValueError, TypeError) as e:
        named = re.match(r"`(\w+)`", str(e))  # "`max_new_tokens` must be greater than 0, but is 0."
        raise InputError(f, f"{what}: {_first_line(e)}", field=named.group(1) if named else None) from None
    finally:
        hf_logging.set_verbosity(level)


def _weight_files(p: Path, what: str) -> list[Path]:
    """The safetensors files of the checkpoint in `p`: one file, or the shards its index lists."""
    if (p / WEIGHTS).is_file():
        return [p / WEIGHTS]
    if (p / SHARDED).is_file():
        weight_map = read_json(p / SHARDED).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise InputError(p / SHARDED, f"{what}: no weight_map", field="weight_map")
        shards = sorted(set(map(str, weight_map.values())))
        for name in shards:
            if Path(name).name != name or not (p / name).is_file():
                raise InputError(p / name, f"{what}: safetensors shard listed in {SHARDED} not found")
        return [p / name for name in shards]
    found = [name for name in NOT_READ if (p / name).exists()]
    hint = f" (found {', '.join(found)}: convert it to safetensors first)" if found else ""
    raise InputError(p / WEIGHTS, f"{what}: file not found; only safetensors weights are read, never pickle{hint}")


def _check_safetensors(f: Path, what: str) -> None:
    """Parse the header and check that the file covers every tensor it lists (a truncated copy does not)."""
    try:
        with safe_open(str(f), framework="pt") as st:
            st.keys()
    except (SafetensorError, OSError) as e:
        raise InputError(f, f"{what}: not a readable safetensors file ({_first_line(e)}): truncated or damaged") from None


@contextlib.contextmanager
def as_input_error(source: str | os.PathLike, what: str) -> Iterator[None]:
    """Turn what transformers, tokenizers and safetensors raise inside the block into an InputError."""
    try:
        yield
    except (*LOAD_ERRORS, SafetensorError) as e:
        raise InputError(source, f"cannot load the {what}: {_first_line(e)}") from None
    except Exception as e:
        # tokenizers raises a plain Exception for a tokenizer.json it cannot parse; transformers' strict
        # config dataclasses raise huggingface_hub's StrictDataclassError for a config.json value of the
        # wrong type ("num_hidden_layers": "one"), matched by name: older huggingface_hub lacks the class
        if any(c.__name__ == "StrictDataclassError" for c in type(e).__mro__):  # its message spans lines: one line here
            where = Path(source) / "config.json" if Path(source).is_dir() else source
            raise InputError(where, f"cannot load the {what}: {' '.join(str(e).split())}") from None
        if type(e) is not Exception:
            raise
        raise InputError(source, f"cannot load the {what}: {_first_line(e)}") from None


def _first_line(e: BaseException | str) -> str:
    return f"missing entry {str(e).strip()}" if isinstance(e, KeyError) else first_line(e)


def _few(items: list[str], n: int = 3) -> str:
    """
    >>> _few(["a", "b", "c", "d", "e"])
    'a, b, c, ... and 2 more'
    """
    return ", ".join(items[:n]) + (f", ... and {len(items) - n} more" if len(items) > n else "")


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_recipe(path: str | os.PathLike, required: bool = False) -> None:
    """A generator directory with a recipe.json (one `lewisrag pretrain` wrote, or a shipped one)
    must hold the very weights the recipe records; `required`: the recipe must be there."""
    path = Path(path)
    if not (path / RECIPE).is_file():
        if required:
            raise InputError(str(path), f"not a pretrained generator directory ({WEIGHTS} and {RECIPE} needed)")
        return
    if not (path / WEIGHTS).is_file():
        raise InputError(str(path), f"not a pretrained generator directory ({WEIGHTS} and {RECIPE} needed)")
    recipe = read_json(path / RECIPE)
    expected = recipe.get("weights_sha256") if isinstance(recipe, dict) else None
    if not isinstance(expected, str):  # the recipe is damaged, not the weights it would have named
        raise InputError(path / RECIPE, "no weights sha256 recorded: a damaged recipe", field="weights_sha256")
    if file_sha256(path / WEIGHTS) != expected:
        raise InputError(str(path / WEIGHTS), f"sha256 does not match {RECIPE} ({expected[:12]}...): damaged or replaced weights")
    # the other files loading reads (tokenizer, config), where the recipe records them (since recipes of
    # 2026-12-07): another generator's smaller tokenizer fits the embeddings and read these at EM 0.0
    files = recipe.get("files_sha256", {})
    if not isinstance(files, dict):
        raise InputError(path / RECIPE, "not an object of file names and sha256", field="files_sha256")
    for name, digest in files.items():
        f = path / str(name)
        if not f.is_file():
            raise InputError(str(f), f"missing: {RECIPE} records it (files_sha256)")
        if file_sha256(f) != digest:
            raise InputError(str(f), f"sha256 does not match {RECIPE} ({str(digest)[:12]}...): damaged or replaced, "
                             f"perhaps another generator's")
    # and a file loading reads that the recipe does not list was added since: a special_tokens_map.json
    # dropped beside the tokenizer changed its specials (eos "<mask>") and loaded as the recorded generator
    if "files_sha256" in recipe:
        added = [f for f in _read_besides_weights(path) if f.name not in files]
        if added:
            raise InputError(str(added[0]), f"not in {RECIPE} (files_sha256), yet loading reads it: added since the "
                             "generator was written, perhaps from another generator; remove it")


# The generators a RagModel decodes with, by config.json's model_type. RAG's decoding runs the decoder through
# `rag_model.bart_decoder.GroupedBartDecoder`, which computes BartDecoder step by step (post-LayerNorm layers,
# learned positions offset by 2, layernorm_embedding) and nothing else: a T5 (T5Stack) or an mBART (pre-LayerNorm
# layers, a final layer_norm) trained, then failed at the first decode. Other seq2seq models train with
# `train stitched` (and the closed-book baseline), which decode with transformers' own `generate`.
RAG_GENERATORS = ("bart",)


def rag_generator_problem(model_type: object) -> str | None:
    """Why a generator of `model_type` cannot be a RAG generator, or None.

    >>> rag_generator_problem("bart") is None, rag_generator_problem("t5")
    (True, "model_type is 't5': RAG decodes with BART's decoder only (model_type 'bart')")
    """
    if model_type in RAG_GENERATORS:
        return None
    return f"model_type is {model_type!r}: RAG decodes with BART's decoder only (model_type 'bart')"


def check_generator_folder(path: str | os.PathLike, flag: str = "--generator", any_seq2seq: bool = False) -> None:
    """A local transformers BART folder (`RAG_GENERATORS`), told by its config.json before any weights load:
    a DPR or causal-LM folder, or a T5 or mBART given as a RAG generator, is one clear line. `any_seq2seq`:
    any sequence-to-sequence model (`train stitched` and the closed-book baseline decode with `generate`)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES

    p = Path(path)
    if not (p / "config.json").is_file():
        raise InputError(p, f"{flag}: not a transformers model folder (no config.json)")
    config = read_json(p / "config.json")
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type not in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        raise InputError(p / "config.json", f"{flag}: not a sequence-to-sequence generator folder (BART): model_type "
                         f"is {model_type!r}", field="model_type")
    if not any_seq2seq and (why := rag_generator_problem(model_type)) is not None:
        raise InputError(p / "config.json", f"{flag}: {why}; a T5, mBART or other seq2seq model trains with "
                         "`lewisrag train stitched`", field="model_type")


def load_generator(path: str | os.PathLike, require_recipe: bool = False, device: str = "cpu", any_seq2seq: bool = False):
    """(seq2seq generator in fp32 eval mode on `device` (auto, cpu, cuda[:N]), its fast tokenizer)
    from a local transformers directory, checked against its recipe.json when it has one (`check_recipe`).
    A BART unless `any_seq2seq` (`check_generator_folder`)."""
    # torch and transformers load on first use: the evaluator (eval.metrics, eval.judges.nli) and
    # the BM25 index path import this module for load_model and never need them
    import torch
    from transformers import AutoModelForSeq2SeqLM

    check_recipe(path, required=require_recipe)
    if Path(path).is_dir():
        check_generator_folder(path, any_seq2seq=any_seq2seq)
    generator = load_model(AutoModelForSeq2SeqLM.from_pretrained, path, "generator", dtype=torch.float32).eval()
    tokenizer = generator_tokenizer(path, generator.config)  # before the weights move to a GPU
    generator.to(resolve_device(device))
    return generator, tokenizer


def generator_tokenizer(path: str | os.PathLike, config=None):
    """The generator folder's fast tokenizer (`load_generator`'s; `reproduce --preset base` checks it before any
    stage), refused unless it fits the model whose transformers `config` it feeds (read from the folder's
    config.json when not given): `check_generator_tokenizer`."""
    from transformers import AutoConfig, AutoTokenizer

    tokenizer = load_tokenizer(AutoTokenizer.from_pretrained, path, "generator tokenizer", use_fast=True)
    if config is None:
        config = load_config(AutoConfig.from_pretrained, path, "generator config")
    check_generator_tokenizer(tokenizer, config, Path(path))
    return tokenizer


def check_generator_tokenizer(tokenizer, config, folder: Path) -> None:
    """`tokenizer` fits the generator of transformers `config` in `folder` (`check_tokenizer_fits`, naming
    config.json): a larger one was an IndexError inside the embedding at the first training step, after
    `reproduce --preset base` had built its index."""
    check_tokenizer_fits(tokenizer, config, folder / "config.json", "generator", "generator tokenizer")


def check_tokenizer_fits(tokenizer, config, source, model: str, name: str = "tokenizer") -> None:
    """`tokenizer` fits the `model` whose transformers `config` it feeds: no token id past its embeddings
    (config's vocab_size) and the same padding id (pad_token_id); else an InputError naming `source` and
    the field. Shared by the generators read here and the trained models' tokenizers
    (`training.checkpoint.check_tokenizer`)."""
    vocab = getattr(config, "vocab_size", None)
    if isinstance(vocab, int) and len(tokenizer) > vocab:
        raise InputError(source, f"the {name} has {len(tokenizer)} tokens, the {model}'s embeddings {vocab} rows: "
                         "the tokenizer of another model", field="vocab_size")
    pad = getattr(config, "pad_token_id", None)
    if pad is not None and tokenizer.pad_token_id is not None and tokenizer.pad_token_id != pad:
        raise InputError(source, f"the {name} pads with id {tokenizer.pad_token_id}, the {model}'s config with {pad}: "
                         "the tokenizer of another model", field="pad_token_id")
