"""Training checkpoints that resume exactly, and trained-model directories with their tokenizers.

A training checkpoint directory holds:

    model.safetensors   every weight of the RagModel (question encoder, generator and, where it
                        trains, the context encoder)
    state.safetensors   every tensor of the optimizer and scheduler state dicts (AdamW's moments and
                        step counts) and torch's CPU and CUDA RNG states (uint8 tensors)
    state.json          step, data position, best dev EM, python/numpy RNG states (every process's
                        where several trained: rank 0's under "rng", the others' under "rng_ranks"),
                        the config, and under "torch_state" the rest of the optimizer and scheduler
                        state dicts (param groups, learning rates) with each tensor replaced by its name in
                        state.safetensors, under "stateless_params" the numbers of the parameters the
                        optimizer holds no state for (never given a gradient), and in an fp16 run the
                        gradient scaler's state (its scale and growth counter, a few numbers) under
                        "scaler"; a checkpoint without it resumes with a fresh scaler
    log.jsonl           the training log up to this step (the resumed log starts from it)
    index_vectors.npy   only when training the context encoder and its index has been re-encoded:
                        the vectors the index searches, (N, D) float32 (`training.end2end`)

It is built in a temporary directory and swapped into place, so a kill at any moment leaves either
the previous checkpoint or the new one, never half of one. Nothing is pickled or unpickled: a
checkpoint of the old format (a pickled `state.pt` file) is refused.
"""

from __future__ import annotations

import os
import random
import shutil
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer

from lewisrag.data.io import InputError, LewisragWarning, expect, is_count, read_json, write_json
from lewisrag.data.outputs import staged_dir, written_files
from lewisrag.data.pretrained import SHARDED, as_input_error, check_tokenizer_fits, load_tokenizer
from lewisrag.data.threads import resolve_device
from lewisrag.index.dense import write_dense_index
from lewisrag.rag_model import RagModel, Tokenizers
from lewisrag.rag_model.checkpoints import EXPORT_RECORD, check_generator
from lewisrag.training.state_checks import STATELESS, check_position, check_torch_state

WEIGHTS = "model.safetensors"
STATE_TENSORS = "state.safetensors"
STATE_JSON = "state.json"
OLD_STATE = "state.pt"  # the pickle of the old format, refused
LOG = "log.jsonl"
LIVE_VECTORS = "index_vectors.npy"
# AdamW's settings that say how its step is computed, not what it computes: `optim.adamw` chooses them by
# device (fused on a GPU, foreach on the CPU, where the fused kernel rounds differently), and a resume may
# change the device (`rag_run.RESUMABLE_CHANGES`). load_state_dict takes the saved groups' whole: a GPU run
# resumed on the CPU stepped with the fused CPU kernel that `adamw` avoids. The live optimizer's are kept.
IMPLEMENTATION = ("fused", "foreach", "capturable", "differentiable")


def capture_rng() -> tuple[dict, dict]:
    """(JSON-able python and numpy global RNG states, torch RNG tensors)."""
    version, state, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    as_json = {"python": [version, list(state), gauss], "numpy": [name, keys.tolist(), pos, has_gauss, cached]}
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        tensors["cuda"] = torch.cuda.get_rng_state_all()
    return as_json, tensors


def restore_rng(as_json: dict, tensors: dict) -> None:
    """Set the global RNGs to `capture_rng()`'s states. The device may have changed since (`--resume`):
    of the CUDA states saved, those of the GPUs this process sees are restored (the first
    `device_count()`: an 8-GPU run resumed with CUDA_VISIBLE_DEVICES=0 restores GPU 0's), GPUs past
    those saved keep their seeding, and without CUDA the CUDA states are not used."""
    version, state, gauss = as_json["python"]
    random.setstate((version, tuple(state), gauss))
    name, keys, pos, has_gauss, cached = as_json["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(tensors["torch"])
    if "cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(list(tensors["cuda"])[:torch.cuda.device_count()])


def save_checkpoint(path: str | os.PathLike, model, optimizer, scheduler, state: dict, log_file: Path | None,
                    scaler: torch.amp.GradScaler | None = None, vectors: np.ndarray | None = None,
                    rngs: list[tuple[dict, dict]] | None = None) -> None:
    """Write a resumable checkpoint of the training run (see the module docstring); `vectors`: a
    re-encoded index's, which no weight in the checkpoint can remake. `rngs`: every process's
    `capture_rng()`, in rank order, where several train (their dropout draws differ); None: this
    process's own."""
    (rng_json, rng_tensors), *others = rngs or [capture_rng()]
    # clones: tied weights (BART's shared embeddings) share storage, which safetensors refuses
    weights = {k: v.detach().cpu().clone().contiguous() for k, v in model.state_dict().items()}
    tensors: dict = {}
    saved = optimizer.state_dict()
    stateless = [k for group in saved["param_groups"] for k in group["params"] if k not in saved["state"]]
    torch_state = {"optimizer": saved, STATELESS: stateless, "scheduler": scheduler.state_dict(), "rng": rng_tensors}
    if others:  # the other processes' RNGs, rank 1 first
        torch_state["rng_ranks"] = [t for _, t in others]
        state = {**state, "rng_ranks": [j for j, _ in others]}
    if scaler is not None and scaler.is_enabled():
        torch_state["scaler"] = scaler.state_dict()
    tree = to_tree(torch_state, tensors)
    with staged_dir(path) as tmp:
        save_file(weights, str(tmp / WEIGHTS))
        save_file(tensors, str(tmp / STATE_TENSORS))
        write_json(tmp / STATE_JSON, {**state, "rng": rng_json, "torch_state": tree})
        if log_file is not None and log_file.exists():
            shutil.copyfile(log_file, tmp / LOG)
        if vectors is not None:
            np.save(tmp / LIVE_VECTORS, np.asarray(vectors, dtype=np.float32))


def load_vectors(path: str | os.PathLike, shape: tuple[int, int]) -> np.ndarray:
    """The index vectors a checkpoint holds (`save_checkpoint(vectors=...)`): float32 of `shape`, (N, D)
    for the index's N passages and its D dimensions, else one line naming the file (another shape
    ended the resume in a ValueError of the index, exit 3)."""
    file = Path(path) / LIVE_VECTORS
    if not file.is_file():
        raise InputError(file, "checkpoint file missing: the checkpoint is damaged")
    try:
        vectors = np.load(file, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise InputError(file, f"cannot read the index vectors: {e}") from None
    if vectors.shape != tuple(shape) or vectors.dtype != np.float32:
        raise InputError(file, f"holds {vectors.dtype} vectors of shape {vectors.shape}, the index needs float32 of shape "
                         f"{tuple(shape)} (its passages, its dimensions): the checkpoint is damaged or not this index's")
    bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
    if bad.size:  # training checks each re-index's vectors before they are saved: NaN rows were searched in silence
        raise InputError(file, f"{bad.size} of {len(vectors)} vectors are not finite (NaN or inf; first: row {bad[0]}): "
                         "the checkpoint is damaged")
    return vectors


def read_state(path: str | os.PathLike) -> dict:
    """The checkpoint's state.json, the fields this module writes checked (`step` too, if there):
    a damaged or hand-edited one is one line naming the field, not a traceback halfway through a
    resume. What the training loop keeps in it (position, config, ...) is the loop's to check."""
    file = Path(path) / STATE_JSON
    state = read_json(file)
    if not isinstance(state, dict):
        raise InputError(file, f"expected a JSON object, got {type(state).__name__}; the checkpoint is damaged",
                         field="(top level)")
    for field in ("rng", "torch_state"):
        if not isinstance(state.get(field), dict):
            what = "missing" if field not in state else f"expected an object, got {state[field]!r}"
            raise InputError(file, f"{what}; the checkpoint is damaged", field=field)
    expect(is_count(state.get("step", 0)), file, "step", "a whole number >= 0", state.get("step"), "; the checkpoint is damaged")
    return state


def load_checkpoint(path: str | os.PathLike, model, optimizer, scheduler,
                    scaler: torch.amp.GradScaler | None = None, rank: int = 0, examples: int | None = None) -> dict:
    """Restore weights, optimizer, scheduler, gradient scaler (when saved) and RNG states in place;
    returns state.json. `rank`: whose RNG states to restore, when several processes saved theirs (a
    checkpoint saved by fewer processes gives the others rank 0's). `examples`: the size of the data
    the state's `position` counts into (its `index`, the next example of the epoch's order), when
    known: an index past it is refused (it began a new epoch in silence). The optimizer's and
    scheduler's saved state is checked against the live ones (`check_torch_state`) before anything
    is restored."""
    p = Path(path)
    if (p / OLD_STATE).exists():
        raise InputError(p / OLD_STATE, "old-format checkpoint (pickled optimizer state), which lewisrag no longer "
                                        f"reads; delete {p} to train from the start")
    for name in (WEIGHTS, STATE_TENSORS, STATE_JSON):
        if not (p / name).is_file():
            raise InputError(p / name, "checkpoint file missing: the checkpoint is damaged")
    with as_input_error(p / STATE_TENSORS, "checkpoint state"):
        tensors = load_file(str(p / STATE_TENSORS))
    state = read_state(p)
    with as_input_error(p / STATE_JSON, "checkpoint state"):
        blob = from_tree(state.pop("torch_state"), tensors)
    check_torch_state(p / STATE_JSON, blob, optimizer, scheduler, state.get("step"))
    check_position(p / STATE_JSON, state.get("position"), examples)
    with as_input_error(p / WEIGHTS, "checkpoint weights"):
        model.load_state_dict(load_file(str(p / WEIGHTS)))
    with as_input_error(p / STATE_JSON, "checkpoint state"):
        optimizer.load_state_dict(_live_implementation(blob["optimizer"], optimizer))
        scheduler.load_state_dict(blob["scheduler"])
        if scaler is not None and "scaler" in blob:
            scaler.load_state_dict(blob["scaler"])
        rng_json, rng_tensors, others = state.pop("rng"), blob["rng"], state.pop("rng_ranks", [])
        if 0 < rank <= len(others):
            rng_json, rng_tensors = others[rank - 1], blob["rng_ranks"][rank - 1]
        restore_rng(rng_json, rng_tensors)
    return state


def _live_implementation(saved: dict, optimizer) -> dict:
    """The optimizer state dict `saved` with each group's IMPLEMENTATION settings the live `optimizer`'s;
    load_state_dict then also puts the step counts where that implementation keeps them (on the
    parameter's device for the fused one)."""
    groups = [{**group, **{k: now[k] for k in IMPLEMENTATION if k in now}}
              for group, now in zip(saved["param_groups"], optimizer.param_groups)]
    return {**saved, "param_groups": groups}


# --- state dicts as JSON + named tensors ----------------------------------------------------------
# JSON has no tuples, no integer keys and no tensors; each gets a one-key object whose key starts
# with "__", which a plain dict never gets (a dict with such a key is written as "__items__").


def to_tree(obj, tensors: dict, name: str = "") -> Any:
    """`obj` (a state dict) as JSON; its tensors go, on the CPU, into `tensors` under their path in `obj`.

    >>> import torch
    >>> tensors = {}
    >>> tree = to_tree({"state": {0: {"step": torch.tensor(3.0)}}, "betas": (0.9, 0.999)}, tensors)
    >>> tree
    {'state': {'__items__': [[0, {'step': {'__tensor__': 'state/0/step'}}]]}, 'betas': {'__tuple__': [0.9, 0.999]}}
    >>> from_tree(tree, tensors)
    {'state': {0: {'step': tensor(3.)}}, 'betas': (0.9, 0.999)}
    """
    def at(key) -> str:
        return f"{name}/{key}" if name else str(key)

    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, torch.Tensor):
        key = name if name not in tensors else f"{name}#{len(tensors)}"
        tensors[key] = obj.detach().cpu().contiguous()
        return {"__tensor__": key}
    if isinstance(obj, (list, tuple)):
        items = [to_tree(v, tensors, at(i)) for i, v in enumerate(obj)]
        return items if isinstance(obj, list) else {"__tuple__": items}
    if isinstance(obj, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in obj):
            return {k: to_tree(v, tensors, at(k)) for k, v in obj.items()}
        return {"__items__": [[to_tree(k, tensors), to_tree(v, tensors, at(k))] for k, v in obj.items()]}
    raise TypeError(f"cannot store a {type(obj).__name__} in a checkpoint ({name or 'top level'})")


def from_tree(tree, tensors: dict) -> Any:
    """The inverse of `to_tree`."""
    if isinstance(tree, list):
        return [from_tree(v, tensors) for v in tree]
    if not isinstance(tree, dict):
        return tree
    if len(tree) == 1 and next(iter(tree)).startswith("__"):
        (tag, value), = tree.items()
        if tag == "__tensor__":
            return tensors[value]
        if tag == "__tuple__":
            return tuple(from_tree(v, tensors) for v in value)
        if tag == "__items__":
            return {from_tree(k, tensors): from_tree(v, tensors) for k, v in value}
        raise ValueError(f"unknown tag {tag!r}")
    return {k: from_tree(v, tensors) for k, v in tree.items()}


def save_model(model, tokenizers, path: str | os.PathLike, train_config: dict | None = None, index=None,
               read_at: str | os.PathLike | None = None) -> None:
    """A trained model directory: RagModel.save_pretrained, both tokenizers, and the training config.

    The settings name the tokenizers by their path inside this directory (`load_trained` looks inside
    the directory first, so it can be moved). `index` (a `DenseIndex` whose vectors the model's
    trained context encoder made, `training.end2end.index_to_save`) is written to `index/` and becomes
    the index the settings name; its manifest's encoder block, passage encoding and tokenizer kept,
    names `context_encoder/` relative to the index's own folder ("../context_encoder", which `index
    verify` resolves there), so the pair stays found wherever the directory goes. `read_at`: where the
    directory will be read from, when that is not `path` (`train rag --overwrite` trains in a staging
    folder moved into place at the end): the settings name paths there.
    """
    path = Path(path)
    at = Path(read_at if read_at is not None else path).resolve()
    settings = model.settings
    model.settings = replace(settings, question_tokenizer=str(at / "question_tokenizer"),
                             generator_tokenizer=str(at / "generator_tokenizer"))
    if index is not None:
        model.settings = replace(model.settings, index_path=str(at / "index"), index_fingerprint=index.ctx_fingerprint)
    try:
        with staged_dir(path) as tmp:
            model.save_pretrained(tmp / "model")  # save_pretrained builds its own directory atomically
            for name in os.listdir(tmp / "model"):
                os.replace(tmp / "model" / name, tmp / name)
            (tmp / "model").rmdir()
            tokenizers.question.save_pretrained(tmp / "question_tokenizer")
            tokenizers.generator.save_pretrained(tmp / "generator_tokenizer")
            if train_config is not None:
                write_json(tmp / "train_config.json", train_config)
            if index is not None:
                encoder = {**index.manifest.get("encoder", {}), "path": "../context_encoder",
                           "ctx_fingerprint": index.ctx_fingerprint, "format": "transformers"}
                write_dense_index(index, tmp / "index", encoder)
    finally:
        model.settings = settings


def resolve_model_dir(path: str | os.PathLike) -> Path:
    """A model directory itself, or a `train rag` run directory's best/ (else final/) model; its generator
    one RAG decodes (`rag_model.checkpoints.check_generator`: BART), told before any model loads."""
    p = Path(path)
    for candidate in (p, p / "best", p / "final"):
        if (candidate / "rag.json").is_file() or _is_hf_rag(candidate):
            check_generator(candidate)  # ask, swap and export resolve every model before they load one
            if candidate.name == "best" and candidate != p and not (p / "final").exists():
                warnings.warn(LewisragWarning(_unfinished(p)))  # one place: shown once however often resolved
            if candidate.name == "final" and candidate != p and "best" in (written_files(p) or ()):
                # the run saved a best model, since deleted: final/ would answer in its place without a word
                raise InputError(p / "best", "missing, though this run saved its best model there (its marker lists "
                                 "best/): the run folder is damaged; give its final/ to use the last model")
            return candidate
    saved = {"best", "final"} & set(written_files(p) or ())  # a model the run saved there, since deleted
    if (p / "checkpoint" / STATE_JSON).is_file() and not saved:  # a `train rag` run that has not saved one yet
        raise InputError(p, _no_model_yet(p))
    runs = [d.name for d in sorted(p.glob("rag_*")) if (d / "best" / "rag.json").is_file() or (d / "final" / "rag.json").is_file()]
    hint = (f"a reproduce run holds its models in {', '.join(f'{p}/{r}' for r in runs)}" if runs
            else "train one with `lewisrag train rag`")
    raise InputError(p, f"not a RAG model: no rag.json here nor in best/ or final/ ({hint})")


def _step(path: Path) -> object:
    """The step a run's state.json or train_config.json records; "?" where it cannot be read."""
    try:
        return read_json(path).get("step", "?")
    except (InputError, AttributeError):
        return "?"


def _unfinished(run: Path) -> str:
    """What to say when a run folder's best/ is taken while the run has no final/ yet."""
    best = _step(run / "best" / "train_config.json")
    where = f"; its last checkpoint is at step {_step(run / 'checkpoint' / STATE_JSON)}" if (run / "checkpoint").is_dir() else ""
    return (f"{run}: this training run has no final/ (it is still training, or it stopped before the end{where}); "
            f"using best/, saved at step {best}")


def _no_model_yet(run: Path) -> str:
    """What to say when a run folder holds a checkpoint but neither best/ nor final/: a run killed (or still
    running) before its first dev evaluation, which was refused as "not a RAG model"."""
    return (f"this training run has saved no model yet: no best/ nor final/ (it is still training, or it stopped "
            f"before the end; its last checkpoint is at step {_step(run / 'checkpoint' / STATE_JSON)}); finish it "
            f"with `lewisrag train rag --out {run} --resume` and the flags it was started with")


def _resume_state(checkpoint: Path) -> str:
    """What to say when a `train rag` run's checkpoint/ is given as a model: its weights and state.json are
    what `train rag --resume` reads, in no model folder's layout (they were called an export missing its
    config.json); the run's models are beside it, in best/ and final/."""
    run = checkpoint.parent
    saved = [str(run / name) for name in ("best", "final") if (run / name / "rag.json").is_file()]
    resume = f"`lewisrag train rag --out {run} --resume` and the flags it was started with"
    said = "a training checkpoint (resume state), which only `train rag --resume` reads, not a model"
    if not saved:
        return (f"{said}, and its run has saved no model yet (no best/ nor final/; step "
                f"{_step(checkpoint / STATE_JSON)}): finish the run with {resume}")
    finish = "" if str(run / "final") in saved else f", or finish the run with {resume}"
    return f"{said}: give a model the run saved, {' or '.join(saved)}{finish}"


def _is_hf_rag(p: Path) -> bool:
    """Whether `p` is a transformers RAG folder (config.json's model_type "rag"). A folder that is a model
    of another kind is named by its config.json's model_type (a BART given as --model), a `train rag` run's
    checkpoint/ as one (`_resume_state`), one with weights or an export record but no config.json by that
    file (an export missing it): an InputError, not the "no rag.json" of a folder that holds no model at all."""
    config = p / "config.json"
    if not config.is_file():
        if (p / STATE_JSON).is_file():  # its model.safetensors read as an export missing its config.json
            raise InputError(p, _resume_state(p))
        if any((p / name).is_file() for name in (WEIGHTS, SHARDED, EXPORT_RECORD)):
            raise InputError(config, "file not found, nor rag.json (lewisrag's own layout): the model folder is incomplete")
        return False
    cfg = read_json(config)
    model_type = cfg.get("model_type") if isinstance(cfg, dict) else None
    if model_type is None or model_type == "rag":  # a config.json of no model (a reproduce run's) says nothing
        return model_type == "rag"
    raise InputError(config, f"not a RAG model (model_type {model_type!r}, not 'rag'): give a folder `lewisrag train "
                     "rag` or `lewisrag export` wrote", field="model_type")


def check_tokenizer(tokenizer, config, folder: Path, model: str) -> None:
    """`tokenizer` (read from `folder`) fits the `model` whose transformers `config` it feeds
    (`data.pretrained.check_tokenizer_fits`): a generator's tokenizer in a question encoder's place was an
    IndexError at the first question, a tokenizer of another model searched other passages without a word."""
    check_tokenizer_fits(tokenizer, config, folder, model)


def load_trained(path: str | os.PathLike, device: str = "cpu"):
    """(RagModel in eval mode on `device` (auto, cpu, cuda[:N]), Tokenizers) from a lewisrag or
    transformers RAG checkpoint directory."""
    d = resolve_model_dir(path)
    model = RagModel.from_pretrained(d) if (d / "rag.json").is_file() else RagModel.from_hf_pretrained(d)
    model.to(resolve_device(device))
    s = model.settings
    question = _tokenizer(d, ("question_tokenizer", "question_encoder_tokenizer"), s.question_tokenizer,
                          model.question_encoder.config, "question encoder")
    generator = _tokenizer(d, ("generator_tokenizer",), s.generator_tokenizer, model.generator.config, "generator")
    return model.eval(), Tokenizers(question, generator)


def _tokenizer(d: Path, names: tuple[str, ...], recorded: str | None, config, model: str):
    """The tokenizer saved inside the model directory (it may have moved), else the recorded path; one
    the `model` whose `config` it feeds could not have been trained with is refused (`check_tokenizer`)."""
    for candidate in [d / n for n in names] + ([Path(recorded)] if recorded else []):
        if candidate.is_dir():
            tokenizer = load_tokenizer(AutoTokenizer.from_pretrained, candidate, names[0].replace("_", " "), use_fast=True)
            check_tokenizer(tokenizer, config, candidate, model)
            return tokenizer
    # every folder name looked for: an export's is question_encoder_tokenizer, lewisrag's own question_tokenizer
    raise InputError(d, f"no {' or '.join(names)} directory and no recorded tokenizer path that exists", field=names[0])
