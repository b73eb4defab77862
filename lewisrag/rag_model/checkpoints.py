"""RAG checkpoints: transformers RAG directories in and out, and lewisrag's own safetensors layout.

`RagModel.from_hf_pretrained`, `to_hf`, `save_pretrained` and `from_pretrained` call these; the
loaders take the model class as their first argument, so this module never imports the model.
(Training state, optimizer included, is `lewisrag.training.checkpoint`'s.)

lewisrag layout (`save_native`):

    DIR/rag.json               {"format": "lewisrag-rag/1", "settings": RagSettings as a dict}
    DIR/question_encoder/      transformers save_pretrained (config.json + model.safetensors)
    DIR/generator/             the same, plus generation_config.json
    DIR/context_encoder/       only a model that trained its context encoder (`RagModel.context_encoder`):
                               written by that module's save_pretrained (`training.end2end.PassageEncoder`: a
                               transformers DPRContextEncoder folder with its tokenizer); not read back by
                               `load_native`, since a loaded model scores with its index's stored vectors

A transformers RAG directory that `lewisrag export` wrote also holds `lewisrag_export.json`
(`EXPORT_RECORD`), with what transformers' layout has no place for; `load_hf` gives it back to
the model (`apply_export_record`).

Nothing is unpickled: weights are read from safetensors only (`lewisrag.data.pretrained`), and
configs are JSON.
"""

from __future__ import annotations

import copy
import json
import math
import os
import warnings
from dataclasses import asdict, fields, replace
from pathlib import Path

from transformers import AutoModel, AutoModelForSeq2SeqLM, RagConfig

from lewisrag.data.io import InputError, LewisragWarning, is_count, read_json, write_json
from lewisrag.data.outputs import staged_dir
from lewisrag.data.pretrained import load_model, rag_generator_problem
from lewisrag.rag_model.decoding import check_generation_config, generation_file
from lewisrag.rag_model.settings import RagSettings

FORMAT = "lewisrag-rag/1"
EXPORT_RECORD = "lewisrag_export.json"  # written by `lewisrag export` (experiments/export.py)
EXPORT_FORMAT = "lewisrag-export/1"
_HF_CLASSES = {"RagTokenForGeneration": "token", "RagSequenceForGeneration": "sequence"}
# settings of a generation config that no decoding of its own mode reads, each with the value that means "off"
# (None: any value is on), which transformers refuses to save in a config changed since it was read
# (`GenerationConfig.save_pretrained` validates it strictly then): beam-only ones beside num_beams=1,
# sampling-only ones without do_sample (RAG decoding never samples: decoding._UNSUPPORTED), and what generate()
# would return beside the ids without return_dict_in_generate
BEAM_ONLY = {"early_stopping": False, "length_penalty": 1.0}
SAMPLING_ONLY = {"temperature": 1.0, "top_k": 50, "top_p": 1.0, "min_p": None, "top_h": None, "typical_p": 1.0,
                 "epsilon_cutoff": 0.0, "eta_cutoff": 0.0}
EXTRA_OUTPUTS = {"output_attentions": False, "output_hidden_states": False, "output_scores": False, "output_logits": False}


def _hf_class(variant: str):
    # transformers' RAG models load on first use: they import `datasets` (~0.6 s more), and only the
    # transformers-format path (load_hf, save_hf) needs them; lewisrag's own layout never does
    from transformers import RagSequenceForGeneration, RagTokenForGeneration

    return RagTokenForGeneration if variant == "token" else RagSequenceForGeneration


def check_generator(path: str | os.PathLike) -> None:
    """The RAG model folder `path` (lewisrag's layout or transformers') holds a generator RAG decodes
    (`data.pretrained.RAG_GENERATORS`: BART), told by its config before any weights load, else an
    InputError naming the config file and field: a T5 or mBART generator loaded, then failed at the
    first decode (ask, swap, the reproduce stages). A config that does not name the model is left to
    the loader, which names what is wrong with it."""
    path = Path(path)
    native = (path / "rag.json").is_file()
    file, field = (path / "generator" / "config.json", "model_type") if native else (path / "config.json", "generator.model_type")
    try:
        config = read_json(file) if file.is_file() else None
    except InputError:  # damaged: the loader's own checks name it
        return
    if not native:
        config = config.get("generator") if isinstance(config, dict) else None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if isinstance(model_type, str) and (why := rag_generator_problem(model_type)) is not None:
        raise InputError(file, f"the model's generator: {why}", field=field)


def load_hf(model_cls, path: str | os.PathLike, variant: str | None = None):
    """Load a transformers RAG checkpoint directory; the variant comes from `architectures` unless given.

    A folder `lewisrag export` wrote gets back what its lewisrag_export.json records (`apply_export_record`):
    the model's pairing, which `ask` and `swap` check an index against, and the generation settings
    transformers' layout drops. One from elsewhere names no pairing (`settings.index_fingerprint` None)."""
    path = Path(path)
    cfg = read_json(path / "config.json")
    model_type = cfg.get("model_type") if isinstance(cfg, dict) else None
    if model_type != "rag":
        raise InputError(path / "config.json", f"not a RAG checkpoint (model_type {model_type!r})", field="model_type")
    if variant is not None and variant not in _HF_CLASSES.values():  # anything but "token" loaded RAG-Sequence
        raise InputError("variant", f"must be one of {', '.join(_HF_CLASSES.values())} (or None: from config.json), "
                         f"got {variant!r}")
    architectures = cfg.get("architectures")
    if architectures is not None and not (isinstance(architectures, list) and all(isinstance(a, str) for a in architectures)):
        raise InputError(path / "config.json", f"expected a list of class names, got {architectures!r}", field="architectures")
    if variant is None:
        known = [_HF_CLASSES[a] for a in architectures or [] if a in _HF_CLASSES]
        if not known:
            raise InputError(path / "config.json", "cannot tell RAG-Token from RAG-Sequence: set it to "
                             '["RagTokenForGeneration"] or ["RagSequenceForGeneration"]', field="architectures")
        variant = known[0]
    check_generator(path)
    encoder = cfg.get("question_encoder")  # else its weights were named as missing, or an unknown type as a key
    encoder_type = encoder.get("model_type") if isinstance(encoder, dict) else None
    if encoder_type != "dpr":
        raise InputError(path / "config.json", f"expected a DPR question encoder's config (model_type 'dpr'), got "
                         f"{encoder_type if isinstance(encoder, dict) else encoder!r}",
                         field="question_encoder.model_type" if isinstance(encoder, dict) else "question_encoder")
    # a DPR question encoder converted from facebookresearch/DPR (facebook/dpr-question_encoder-*) carries BERT's
    # pooler, which DPR never runs: transformers loads it with a warning, and so do the DPR loaders here.
    # Imported here: `lewisrag.index` loads FAISS and bm25s, which lewisrag's own layout never needs
    from lewisrag.index.encoders import DPR_POOLER

    hf = load_model(_hf_class(variant).from_pretrained, path, f"transformers RAG-{variant.capitalize()} model",
                    ignore_unexpected=DPR_POOLER)
    model = from_hf(model_cls, hf, path)
    if (path / EXPORT_RECORD).is_file():
        apply_export_record(model, path / EXPORT_RECORD, cfg)
    return model


def apply_export_record(model, file: Path, config: dict) -> None:
    """Give `model`, loaded from a folder `lewisrag export` wrote, what `file` (its lewisrag_export.json)
    records beside transformers' layout, every field checked (an InputError naming it):

    - the context encoder its question encoder is paired with (`paired_fingerprint`; null: none),
      as `settings.index_fingerprint`: transformers' RagConfig has no place for it, and without it
      `ask` and `swap` would search an index of any encoder of the same width. An export written
      before the field existed records only the exported index's (`index_fingerprint`), the same
      fingerprint unless it was exported with --swap;
    - the generation settings a reloaded model lacks (`generate_kwargs`: a RAG-Sequence generator's,
      which a saved RAG folder drops; `beam_kwargs`: those transformers will not save beside
      num_beams=1), so that it answers as the model that was exported did;
    - the variant and K it was exported with, against the folder's `config` (its config.json): where
      they differ, a warning says so (`_differs_from_record`).
    """
    record = read_json(file)
    if not isinstance(record, dict):
        raise InputError(file, f"expected a JSON object, got {type(record).__name__}", field="(top level)")
    if record.get("format", EXPORT_FORMAT) != EXPORT_FORMAT:
        raise InputError(file, f"expected {EXPORT_FORMAT!r}, got {record['format']!r}", field="format")
    name = "paired_fingerprint" if "paired_fingerprint" in record else "index_fingerprint"
    fingerprint = record.get(name)
    if not (isinstance(fingerprint, str) and fingerprint) and not (name == "paired_fingerprint" and fingerprint is None):
        what = "the model's" if name == "paired_fingerprint" else "the exported index's"
        raise InputError(file, f"expected {what} context-encoder fingerprint (a string), got {fingerprint!r}", field=name)
    model.settings = replace(model.settings, index_fingerprint=fingerprint)
    _differs_from_record(model, record, file, config)
    gc = model.generation_config
    for name in ("generate_kwargs", "beam_kwargs"):
        settings = record.get(name, {})
        if not isinstance(settings, dict):
            raise InputError(file, f"expected an object of generation settings, got {settings!r}", field=name)
        for key, value in settings.items():  # set, not gc.update(): its validation raises and warns on its own
            if key.startswith("_") or key not in vars(gc):
                raise InputError(file, "not a generation setting", field=f"{name}.{key}")
            setattr(gc, key, value)
    check_generation_config(gc, model.generator.config.vocab_size, file)


def _differs_from_record(model, record: dict, file: Path, config: dict) -> None:
    """Say where `config` (transformers' config.json, which a user may edit: K at test time is the paper's
    own knob) decodes otherwise than the exported model did: another K or variant, or K and the input
    length missing (RagConfig's defaults then: 5 documents, 300 tokens), which took effect without a word."""
    variant, n_docs = record.get("variant"), record.get("n_docs")
    if variant is not None and variant not in _HF_CLASSES.values():
        raise InputError(file, f"expected one of {', '.join(_HF_CLASSES.values())}, got {variant!r}", field="variant")
    if n_docs is not None and not (is_count(n_docs) and n_docs >= 1):
        raise InputError(file, f"expected a whole number of at least 1, got {n_docs!r}", field="n_docs")
    said = [f"{name} {now!r}, exported with {was!r}" for name, now, was in
            (("variant", model.variant, variant), ("n_docs", model.settings.n_docs, n_docs)) if was is not None and was != now]
    said += [f"no {name}, so RagConfig's default" for name in ("n_docs", "max_combined_length") if name not in config]
    if said:
        warnings.warn(LewisragWarning(f"{file.parent / 'config.json'} differs from the export ({file.name}): {'; '.join(said)}"))


def from_hf(model_cls, hf, path: Path | None = None):
    """A model over the modules of `hf`, a transformers RagTokenForGeneration/RagSequenceForGeneration
    in memory (shared, not copied), with its settings and the generation config it decodes with;
    `path`, when `hf` was read from one, supplies the tokenizers' folders."""
    variant = _HF_CLASSES[type(hf).__name__]
    c = hf.config
    values = dict(n_docs=c.n_docs, label_smoothing=c.label_smoothing, exclude_bos_score=c.exclude_bos_score,
                  do_deduplication=c.do_deduplication, title_sep=c.title_sep, doc_sep=c.doc_sep,
                  # transformers' retriever prepends the generator config's prefix, never the RAG config's
                  prefix=getattr(hf.generator.config, "prefix", None) or "", max_combined_length=c.max_combined_length)
    if path is not None:  # read from a folder: a value RAG cannot use is named here, not a traceback later
        check_settings(values, path / "config.json", lambda name: "generator.prefix" if name == "prefix" else name)
    settings = RagSettings(
        variant=variant, **values,
        question_tokenizer=_existing(path / "question_encoder_tokenizer") if path else None,
        generator_tokenizer=_existing(path / "generator_tokenizer") if path else None,
    )
    # transformers' RAG-Token decodes with the RAG model's generation config, RAG-Sequence with the
    # generator's (which a saved RAG folder does not keep: see lewisrag.experiments.export)
    gc = hf.generation_config if variant == "token" else hf.generator.generation_config
    if path is not None:  # read from a folder: refuse what RAG decoding cannot follow now, naming the file
        # (a RAG-Sequence folder holds its generator's settings in config.json only)
        check_generation_config(gc, hf.generator.config.vocab_size,
                                generation_file(path) if variant == "token" else path / "config.json")
    return model_cls(hf.question_encoder, hf.generator, variant, c.n_docs, settings, gc).eval()


def _existing(p: Path) -> str | None:
    return str(p) if p.exists() else None


def save_hf(model, path: str | os.PathLike, warn_lost: bool = True) -> None:
    """Write `model` as a transformers RagTokenForGeneration / RagSequenceForGeneration directory.

    transformers' RAG-Sequence decodes with its generator's generation config, which a saved RAG folder
    does not keep: a RAG-Sequence model whose settings differ from those its generator's config gives
    (num_beams, max_length, ...) is warned about (`warn_lost`), as it reloads to decode otherwise;
    `lewisrag export` records them beside the folder (`EXPORT_RECORD`)."""
    s = model.settings
    config = RagConfig.from_question_encoder_generator_configs(
        model.question_encoder.config, model.generator.config, n_docs=s.n_docs, label_smoothing=s.label_smoothing,
        exclude_bos_score=s.exclude_bos_score, do_deduplication=s.do_deduplication, title_sep=s.title_sep,
        doc_sep=s.doc_sep, prefix=s.prefix or None, max_combined_length=s.max_combined_length,
    )
    config.generator.prefix = s.prefix or None  # where transformers reads it; None overrides a BART folder's own
    hf = _hf_class(s.variant)(config=config)
    # copy weights into a fresh model rather than handing ours over: its post_init may re-initialise
    hf.question_encoder.load_state_dict(model.question_encoder.state_dict())
    hf.generator.load_state_dict(model.generator.state_dict())
    hf.generation_config = savable_generation_config(model.generation_config)
    if warn_lost and s.variant == "sequence":
        _warn_lost_settings(hf.generation_config, model.generator.config, path)
    with staged_dir(path) as tmp:
        hf.save_pretrained(tmp)


def _warn_lost_settings(gc, generator_config, path) -> None:
    """Warn where `gc` decodes otherwise than the generation config a reloaded RAG-Sequence folder gets (its
    generator's, derived from `generator_config`)."""
    from transformers import GenerationConfig

    mine, kept = gc.to_diff_dict(), GenerationConfig.from_model_config(generator_config).to_diff_dict()
    lost = sorted(k for k in mine.keys() | kept.keys()
                  if not k.startswith("_") and k != "transformers_version" and mine.get(k) != kept.get(k))
    if lost:
        warnings.warn(LewisragWarning(
            f"{path}: transformers' RAG-Sequence decodes with its generator's generation settings, which a saved RAG "
            f"folder does not keep: reloaded, it decodes without this model's {', '.join(lost)} (`lewisrag export` "
            "records them in lewisrag_export.json, which RagModel.from_hf_pretrained reads back)"), stacklevel=3)


def save_native(model, path: str | os.PathLike) -> None:
    with staged_dir(path) as tmp:
        model.question_encoder.save_pretrained(tmp / "question_encoder")
        model.generator.generation_config = savable_generation_config(model.generation_config)
        try:
            model.generator.save_pretrained(tmp / "generator")
        finally:
            model.generator.generation_config = model.generation_config
        if model.context_encoder is not None:
            model.context_encoder.save_pretrained(tmp / "context_encoder")
        write_json(tmp / "rag.json", {"format": FORMAT, "settings": asdict(model.settings)})


def savable_generation_config(gc):
    """`gc` itself, or, where it was changed since it was read (transformers validates only such a config
    strictly on save: `GenerationConfig.save_pretrained`) and holds a setting its decoding mode never reads
    (`unread_settings`), a copy with those at transformers' defaults: the same ids, and a config transformers
    saves. A model read back from an export with `beam_kwargs` (bart-large's early_stopping=True beside
    num_beams=1: `apply_export_record`) was refused by save_pretrained and to_hf ("GenerationConfig is invalid").
    A beam-only setting so dropped no longer applies to `generate(num_beams=N)` after a reload: the export
    lists it in beam_kwargs, lewisrag's layout has no place for it."""
    if not unread_settings(gc) or getattr(gc, "_original_object_hash", None) == hash(gc):  # as read: saved as it is
        return gc
    return reset_unread(copy.deepcopy(gc))


def reset_unread(gc):
    """`gc` with its `unread_settings` set to transformers' defaults, in place; returns it."""
    for name, value in unread_settings(gc).items():  # set, not gc.update(): its validation warns about the rest
        setattr(gc, name, value)
    return gc


def unread_settings(gc) -> dict:
    """The settings of `gc` that its decoding mode never reads and that transformers refuses to save in a
    config changed since it was read (`BEAM_ONLY` beside num_beams=1, `SAMPLING_ONLY` without do_sample,
    `EXTRA_OUTPUTS` without return_dict_in_generate), each with transformers' default (GenerationConfig())."""
    unread = {**(BEAM_ONLY if gc.num_beams is None or gc.num_beams <= 1 else {}),
              **(SAMPLING_ONLY if gc.do_sample is not True else {}),
              **(EXTRA_OUTPUTS if gc.return_dict_in_generate is not True else {})}
    unset = type(gc)()
    return {name: getattr(unset, name) for name, off in unread.items()
            if getattr(gc, name, None) is not None and getattr(gc, name) != off}


def read_settings(path: str | os.PathLike) -> RagSettings:
    """The RagSettings in DIR/rag.json of lewisrag's layout, every fault an InputError naming the field."""
    path = Path(path)
    meta = read_json(path / "rag.json")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise InputError(path / "rag.json", f"expected format {FORMAT!r}", field="format")
    raw = meta.get("settings")
    known = {f.name for f in fields(RagSettings)}
    if not isinstance(raw, dict) or set(raw) - known:
        raise InputError(path / "rag.json", f"unknown settings {sorted(set(raw or {}) - known)}", field="settings")
    check_settings(raw, path / "rag.json", lambda name: f"settings.{name}")
    try:
        settings = RagSettings(**raw)
    except (TypeError, ValueError) as e:
        raise InputError(path / "rag.json", str(e), field="settings") from None
    return settings


def check_settings(raw: dict, file: Path, field) -> None:
    """Refuse a value of `raw` (RagSettings' names) of another type than its setting's default or out of
    its range: an InputError naming `file` and `field(name)`, where it would fail later in a traceback
    (ask, swap, export) or silently (a zero-token generator input)."""
    for f in fields(RagSettings):
        if f.name in raw and not _of_type(raw[f.name], f.default):
            kind = ("a string or null" if f.default is None else "true or false" if isinstance(f.default, bool)
                    else "a number" if isinstance(f.default, float) else "an integer" if isinstance(f.default, int)
                    else "a string")
            raise InputError(file, f"expected {kind}, got {json.dumps(raw[f.name])}", field=field(f.name))
    for name, ok in (("n_docs", raw.get("n_docs", 1) >= 1), ("max_combined_length", raw.get("max_combined_length", 1) >= 1),
                     ("label_smoothing", 0 <= raw.get("label_smoothing", 0.0) < 1)):
        if not ok:
            raise InputError(file, f"out of range: {raw[name]!r}", field=field(name))


def _of_type(value, default) -> bool:
    """Whether a rag.json value has the type of its setting's default (None: an optional string)."""
    if default is None:
        return value is None or isinstance(value, str)
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and math.isfinite(value)
    return isinstance(value, type(default))


def load_native(model_cls, path: str | os.PathLike):
    path = Path(path)
    settings = read_settings(path)
    check_generator(path)
    question_encoder = load_model(AutoModel.from_pretrained, path / "question_encoder", "question encoder")
    generator = load_model(AutoModelForSeq2SeqLM.from_pretrained, path / "generator", "generator")
    check_generation_config(generator.generation_config, generator.config.vocab_size, generation_file(path / "generator"))
    return model_cls(question_encoder, generator, settings.variant, settings.n_docs, settings).eval()
