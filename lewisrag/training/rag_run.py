"""A RAG fine-tuning run's folder (the layout `training.rag` describes): the lock held while a run
writes it (`_held`); what config.json and each checkpoint's state.json record beside the config, the
sha256 of the --train and --dev files (`data_fingerprints`), the index's passages and the context
encoder that encoded them (`index_fingerprint`) and the run's root; the checks a `--resume` makes
before any model loads (`_check_out`: the same settings but RESUMABLE_CHANGES, the same data and
index, a checkpoint and log that are whole); the
folder made ready to (re)start from the checkpoint (`_prepare_out`); the list of what the run wrote
(`_record`); and what a run refused or diverged before saving anything wrote, removed (`_forget_unsaved`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
from dataclasses import asdict, fields
from pathlib import Path

from lewisrag.data.io import InputError, atomic_path, expect, is_count, is_number, read_json, write_json
from lewisrag.data.outputs import MARKER, check_out_dir, exclusive, existing, is_ours, mark, record_files
from lewisrag.index.store import read_manifest
from lewisrag.training import checkpoint as C
from lewisrag.training.configs import RagTrainConfig
from lewisrag.training.configs import RAG_KIND as KIND  # the marker kind of training run folders (lewisrag.data.outputs)
from lewisrag.training.rag_data import DataPosition


def _held(folder: Path):
    """`folder` held by the process that writes it (rank 0 under `accelerate launch`; the others
    only read there): a second run into the same folder is refused instead of interleaving its
    checkpoints with this one's."""
    return exclusive(folder) if os.environ.get("RANK", "0") == "0" else contextlib.nullcontext()


# Fields a resumed run may change: they say how fast or where, not what is trained. A run killed
# on one machine may go on on another (the device: --device cpu is `cpu`; where a Flat index is
# searched), as `reproduce --resume` promises (experiments/presets.comparable), with or without
# --compile, and with --gradient-checkpointing after running out of memory (the same loss and
# gradients, recomputed) or --shared-retrieval (the same search, made by each node's first process).
RESUMABLE_CHANGES = ("compile", "cpu", "search_device", "gradient_checkpointing", "shared_retrieval")
PATH_FIELDS = ("index", "encoder", "context_encoder", "generator", "train", "dev")  # one file however it is spelled
# The data files' content, recorded beside the config (config.json, and state.json at each checkpoint):
# the config names them by path, and a file edited at the same path between a kill and a --resume
# trained on other data without a word.
DATA_FIELDS = ("train", "dev")
DATA_KEY = "data_sha256"
DATA_SUFFIXES = (".parquet", ".arrow")  # a folder's data files: Parquet shards, a save_to_disk folder's Arrow files
# The folder a run and its inputs move with (`train_rag(root=)`, a reproduction's RUN), as an absolute path when
# the run wrote it, beside DATA_KEY. Paths compare by the file they name, and after `mv RUN RUN2` RUN/index_a is
# no file at all: a resume compares a path inside the recorded root with one inside the root now by their place
# in it, so a moved reproduction resumes its killed RAG stage, while RUN2/index_b for RUN/index_a (another file
# of the run) or a path outside the root that changed is refused as before.
ROOT_KEY = "run_root"
# The index's passages as its manifest fingerprints them, recorded beside DATA_KEY: the config names --index
# by its path, and an index rebuilt there from other passages between a kill and a --resume went on searching
# other documents without a word.
INDEX_KEY = "index_passages"
INDEX_FIELDS = ("content_hash", "n_passages")  # the manifest's fingerprint of every passage in row order, and their count
# Beside INDEX_KEY, the fingerprint of the context encoder that made the index's vectors (its manifest's
# encoder.ctx_fingerprint): the same passages encoded again at that path by another --encoder searched other
# vectors, as silently. A run recorded before it resumes unchecked by encoder.
INDEX_ENCODER_KEY = "index_ctx_fingerprint"


def content_sha256(spec: str) -> str | None:
    """sha256 of what a data path holds, read in blocks (a large file is never in memory whole): a
    file's bytes; a folder's data files (DATA_SUFFIXES), each by its name inside the folder and its
    bytes' sha256, in name order. None for an `hf:` spec, which names a hub dataset that only a
    download could hash (its cache is no record of what the hub serves now), and for a path that
    cannot be read, which the run's loader then names."""
    if not spec or spec.startswith("hf:"):
        return None
    path = Path(spec)
    try:
        if path.is_dir():
            files = sorted((f.relative_to(path).as_posix(), f) for f in path.rglob("*")
                           if f.suffix.lower() in DATA_SUFFIXES and f.is_file())
            listing = "".join(f"{name}\0{_file_sha256(f)}\n" for name, f in files)
            return hashlib.sha256(listing.encode()).hexdigest()
        return _file_sha256(path) if path.is_file() else None
    except OSError:
        return None


def _file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def data_fingerprints(cfg: RagTrainConfig) -> dict[str, str | None]:
    """`content_sha256` of each of `cfg`'s DATA_FIELDS, as the run records them."""
    return {name: content_sha256(getattr(cfg, name)) for name in DATA_FIELDS}


def index_fingerprint(cfg: RagTrainConfig) -> dict | None:
    """INDEX_FIELDS of `cfg.index`'s manifest, and its context encoder's fingerprint under
    INDEX_ENCODER_KEY (None: the manifest names none), as the run records them (`_recorded`); None for an
    index that cannot be read, which the run's loader then names."""
    try:
        manifest = read_manifest(cfg.index)
    except (InputError, OSError):
        return None
    if any(manifest.get(name) is None for name in INDEX_FIELDS):  # an index written before they were: not compared
        return None
    encoder = manifest.get("encoder")
    encoder = encoder.get("ctx_fingerprint") if isinstance(encoder, dict) else None  # a damaged one is the loader's
    return {name: manifest[name] for name in INDEX_FIELDS} | {INDEX_ENCODER_KEY: encoder if isinstance(encoder, str) else None}


def _recorded(data: dict, index: dict | None = None, root: str | os.PathLike | None = None) -> dict:
    """What a run records beside its config: its data files' content (DATA_KEY), its index's passages
    (INDEX_KEY) and context encoder (INDEX_ENCODER_KEY), both from `index_fingerprint`, and, given, its
    root (ROOT_KEY)."""
    passages = None if index is None else {name: index[name] for name in INDEX_FIELDS}
    encoder = None if index is None else index.get(INDEX_ENCODER_KEY)
    return ({DATA_KEY: data, INDEX_KEY: passages, INDEX_ENCODER_KEY: encoder}
            | ({ROOT_KEY: os.path.abspath(root)} if root is not None else {}))


def _run_config(cfg: RagTrainConfig, recorded: dict) -> dict:
    """What a run's config.json holds: the config, and what `_recorded` adds."""
    return {**asdict(cfg), **recorded}


def _check_out(out: Path, cfg: RagTrainConfig, resume: bool, data: dict | None = None,
               root: str | None = None, index: dict | None = None, encoder: str | None = None) -> Path | None:
    """The checkpoint to resume from, if any; refuses to overwrite a run or resume a different one
    (other settings, other `data`: `data_fingerprints`, or another `index`: `index_fingerprint`'s passages,
    and `encoder` its context encoder's fingerprint; None: not compared). `root`: the folder the run
    moves with now (ROOT_KEY), against the one it recorded."""
    check_out_dir(out, KIND)
    ckpt = existing(out / "checkpoint")
    if not resume:
        if out.exists() and any(out.iterdir()):
            raise InputError(out, "output directory is not empty; pass --resume to continue its run, --overwrite to "
                             "replace it, or choose another --out")
        return None
    if ckpt is None and existing(out / "final") is not None:  # finished, its checkpoint deleted (it is the
        # largest folder): a resume would train again from step 0 and replace the model in final/ and best/
        raise InputError(out, "holds a finished run (final/) whose checkpoint/ is gone: there is nothing to resume "
                         "from; --overwrite trains it again from step 0, replacing final/ and best/, or choose another --out")
    if ckpt is None:  # killed before its first checkpoint: it starts again, but only as the run it was
        file = out / "config.json"
        if file.is_file():
            saved = _read_run_config(file)
            _check_same_config(saved, cfg, file, (_saved_root(saved, file, "; the run folder is damaged"), root))
            _check_same_data(saved.get(DATA_KEY), cfg, data, file, "; the run folder is damaged")
            _check_same_index(saved.get(INDEX_KEY), cfg, index, file, "; the run folder is damaged")
            _check_same_encoder(saved.get(INDEX_ENCODER_KEY), cfg, encoder, file, "; the run folder is damaged")
        return None
    state = _read_state(ckpt)
    file = ckpt / C.STATE_JSON
    _check_same_config(state["config"], cfg, file, (_saved_root(state, file, "; the checkpoint is damaged"), root))
    _check_same_data(state.get(DATA_KEY), cfg, data, file, "; the checkpoint is damaged")
    _check_same_index(state.get(INDEX_KEY), cfg, index, file, "; the checkpoint is damaged")
    _check_same_encoder(state.get(INDEX_ENCODER_KEY), cfg, encoder, file, "; the checkpoint is damaged")
    step = state["step"]
    if step > cfg.steps:  # the same config, so no run of it saved a later step: the loop would end at once
        raise InputError(ckpt / C.STATE_JSON, f"step {step} is beyond the run's --steps {cfg.steps}; the checkpoint "
                         "is damaged", field="step")
    return ckpt


def _check_same_config(saved: dict, cfg: RagTrainConfig, file: Path,
                       roots: tuple[str | None, str | None] = (None, None)) -> None:
    """Refuse a --resume whose settings differ from the run's (`saved`, its config as written in
    `file`) but for RESUMABLE_CHANGES, naming each flag with both values. A field `saved` lacks was
    added since: its default is what that run used. Paths name the same file however written
    (relative to another working directory, through a link), or the same place inside the run's
    root as `roots` (the recorded one, the one now) give them: a moved root (ROOT_KEY)."""
    now = asdict(cfg)
    was_root, root = roots

    def same(f) -> bool:
        was = saved.get(f.name, f.default)
        if f.name in PATH_FIELDS and isinstance(was, str) and isinstance(now[f.name], str):
            if was == now[f.name] or (not was.startswith("hf:") and os.path.realpath(was) == os.path.realpath(now[f.name])):
                return True
            place = _inside(was, was_root), _inside(now[f.name], root)
            return None not in place and place[0] == place[1]
        return was == now[f.name]

    changed = [f"--{f.name.replace('_', '-')} {_shown(now[f.name])} (the run's: {_shown(saved.get(f.name, f.default))})"
               for f in fields(cfg) if f.name not in RESUMABLE_CHANGES and not same(f)]
    if changed:
        raise InputError(file, f"--resume with other settings than the run's: {'; '.join(changed)}. Resume with the "
                         "run's own, or start a new run (another --out, or --overwrite)", field="config")


def _saved_root(saved: dict, file: Path, damaged: str) -> str | None:
    """The root a run recorded (ROOT_KEY; None for a run without one, or written before it existed)."""
    root = saved.get(ROOT_KEY)
    expect(root is None or (isinstance(root, str) and os.path.isabs(root)), file, ROOT_KEY, "null or an absolute path",
           root, damaged)
    return root


def _inside(path: str, root: str | None) -> str | None:
    """`path`'s place inside `root` ("index_a", "world/train.jsonl"), or None: no root, or a path
    that is not absolute (its folder was the working directory of another time) or not inside it.
    Read from the text, since the recorded root may no longer exist."""
    if root is None or not os.path.isabs(path):
        return None
    rel = os.path.relpath(os.path.normpath(path), os.path.normpath(root))
    return None if rel == os.curdir or rel == os.pardir or rel.startswith(os.pardir + os.sep) else rel


def _check_same_data(saved, cfg: RagTrainConfig, data: dict | None, file: Path, damaged: str) -> None:
    """Refuse a --resume whose --train or --dev file (the same path: `_check_same_config` compared
    the paths) holds other content than the run recorded (`saved`: DATA_KEY of the checkpoint's
    state.json, else of the run's config.json, both `file`), naming each flag and file. A run
    recorded before DATA_KEY existed resumes unchecked; a file now unreadable is the loader's to name."""
    if saved is None or data is None:
        return
    expect(isinstance(saved, dict), file, DATA_KEY, "an object of the data files' sha256", saved, damaged)
    for name in DATA_FIELDS:
        was = saved.get(name)
        expect(was is None or (isinstance(was, str) and len(was) == 64 and all(c in "0123456789abcdef" for c in was)),
               file, f"{DATA_KEY}.{name}", "null or a sha256 in hex", was, damaged)
    changed = [f"--{name} {getattr(cfg, name)} (sha256 {data[name][:12]}..., the run's {saved[name][:12]}...)"
               for name in DATA_FIELDS if saved.get(name) and data[name] and saved[name] != data[name]]
    if changed:
        raise InputError(file, f"--resume with other data than the run's, the same path holding other content: "
                         f"{'; '.join(changed)}. Resume with the files the run trained on, or start a new run "
                         "(another --out, or --overwrite)", field=DATA_KEY)


def _check_same_index(saved, cfg: RagTrainConfig, index: dict | None, file: Path, damaged: str) -> None:
    """Refuse a --resume whose --index (the same path: `_check_same_config` compared the paths) holds
    other passages than the run recorded (`saved`: INDEX_KEY of the checkpoint's state.json, else of the
    run's config.json, both `file`), naming the index and both fingerprints. A run recorded before
    INDEX_KEY existed resumes unchecked."""
    if saved is None or index is None:
        return
    expect(isinstance(saved, dict) and isinstance(saved.get("content_hash"), str) and is_count(saved.get("n_passages")),
           file, INDEX_KEY, "null or an object of the index's content_hash and n_passages", saved, damaged)
    if any(saved[name] != index[name] for name in INDEX_FIELDS):
        raise InputError(file, f"--resume with another index than the run's, the same path holding other passages: "
                         f"--index {cfg.index} (content_hash {index['content_hash']}, {index['n_passages']} passages; "
                         f"the run's {saved['content_hash']}, {saved['n_passages']} passages). Resume with the index "
                         "the run trained on, or start a new run (another --out, or --overwrite)", field=INDEX_KEY)


def _check_same_encoder(saved, cfg: RagTrainConfig, encoder: str | None, file: Path, damaged: str) -> None:
    """Refuse a --resume whose --index holds the run's passages (`_check_same_index`) encoded by another
    context encoder than the run recorded (`saved`: INDEX_ENCODER_KEY of `file`): rebuilt at the same path by
    another --encoder, its vectors are not those the run searched. A run recorded before INDEX_ENCODER_KEY
    existed, or whose index names no encoder, resumes unchecked."""
    expect(saved is None or isinstance(saved, str), file, INDEX_ENCODER_KEY, "null or the fingerprint of the index's "
           "context encoder", saved, damaged)
    if saved is not None and encoder is not None and saved != encoder:
        raise InputError(file, f"--resume with another index than the run's, the same passages encoded by another "
                         f"context encoder: --index {cfg.index} was built by context encoder {encoder}, the run's by "
                         f"{saved} (rebuilt since, by another --encoder). Resume with the index the run trained on, and "
                         "its --encoder, or start a new run (another --out, or --overwrite)", field=INDEX_ENCODER_KEY)


def _shown(value: object) -> str:
    """A config value as a flag takes it: `--qa-fields question=query,answers=golds`, a switch on or off."""
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, bool):
        return "on" if value else "off"
    return "(none)" if value in (None, "") else str(value)


def _read_run_config(file: Path) -> dict:
    """A run's config.json (written by `_prepare_out`), an object, else one line naming it."""
    config = read_json(file)
    expect(isinstance(config, dict), file, "(top level)", "a JSON object of the run's config", config,
           "; the run folder is damaged")
    return config


def _read_state(ckpt: Path) -> dict:
    """The checkpoint's state.json with what this loop keeps in it checked (`checkpoint.read_state`
    checks the rest): one line naming a damaged field, before any model loads."""
    state, file = C.read_state(ckpt), ckpt / C.STATE_JSON

    def need(ok: bool, field: str, what: str, value: object) -> None:
        expect(ok, file, field, what, value, "; the checkpoint is damaged")

    for field in ("step", "position", "config"):
        if field not in state:
            raise InputError(file, "missing: the checkpoint is damaged", field=field)
    need(isinstance(state["config"], dict), "config", "an object", state["config"])
    position = state["position"]
    need(isinstance(position, dict) and set(position) == {f.name for f in fields(DataPosition)}, "position",
         "an object of epoch and index", position)
    for name in sorted(position):
        need(is_count(position[name]), f"position.{name}", "a whole number >= 0", position[name])
    best = state.get("best_em")
    need(best is None or (is_number(best) and math.isfinite(best)), "best_em", "null or a finite number", best)
    best_step = state.get("best_step")
    need(best_step is None or (is_count(best_step) and best_step <= state["step"]), "best_step",
         "null or a whole number no later than the step", best_step)
    skipped = state.get("skipped_inf")  # fp16 steps the gradient scaler skipped (`rag._loop`)
    need(skipped is None or (is_count(skipped) and skipped <= state["step"]), "skipped_inf",
         "null or a whole number of steps no more than the step", skipped)
    live = state.get("live_index")
    need(live is None or (isinstance(live, dict) and is_count(live.get("step", 0))), "live_index",
         "null or an object with a whole-number step", live)
    if live and live.get("step"):  # the saved model's index, and the encoder check of its retrieval, name it
        fingerprint = live.get("ctx_fingerprint")
        need(isinstance(fingerprint, str) and fingerprint != "", "live_index.ctx_fingerprint",
             "the fingerprint of the context encoder that re-encoded the index", fingerprint)
    _check_log(ckpt / C.LOG, state["step"])
    return state


def _check_log(file: Path, step: int) -> None:
    """The checkpoint's copy of log.jsonl (the resumed log starts from it): one JSON object per line,
    else one line naming the line; a damaged line was copied into the resumed run's log. Every step
    logs before it checkpoints, so only a checkpoint of step 0 may have none: a missing one began the
    resumed log empty, the steps before the checkpoint lost."""
    if not file.is_file():
        if step > 0:
            raise InputError(file, f"checkpoint file missing at step {step}: the checkpoint is damaged")
        return
    with open(file, "rb") as f:
        for line, raw in enumerate(f, 1):
            try:
                ok = isinstance(json.loads(raw), dict)
            except ValueError:  # also bytes that are not UTF-8
                ok = False
            if not ok:
                raise InputError(file, "not a JSON object of the training log; the checkpoint is damaged", line=line)


def _prepare_out(out: Path, cfg: RagTrainConfig, recorded: dict, ckpt: Path | None, log_file: Path) -> None:
    """config.json, and the log as of the checkpoint (lines written after it are redone)."""
    mark(out, KIND)  # a killed run's staging folders were swept by check_out_dir: a live writer's are kept
    ckpt = _settle_replaced(out, ckpt)
    write_json(out / "config.json", _run_config(cfg, recorded))
    saved_log = ckpt / C.LOG if ckpt is not None else None
    with atomic_path(log_file) as tmp:
        tmp.write_bytes(saved_log.read_bytes() if saved_log is not None and saved_log.exists() else b"")


REPLACED = ("checkpoint", "best", "final")  # the run's folders that each save replaces whole (outputs.replace_dir)
LAYOUT = ("config.json", "log.jsonl", *REPLACED)  # what a run writes at its top level


def _forget_unsaved(out: Path) -> None:
    """After a run that began in a missing or empty `out` was refused or diverged (an InputError; main
    process): when it saved nothing, no checkpoint/ for a --resume and no model (nor a `.NAME.old` of one),
    remove what it wrote (config.json, log.jsonl, its marker), so that `out` is as it was, with whatever
    the user put there since; the folder itself goes with `_held`'s lock when it made it. Left there, they
    made the rerun with a lower --lr that a divergence asks for a refused non-empty --out. An interrupted
    run keeps them, as a killed one does: its --resume is that run or refused (`_check_out`)."""
    if any(existing(out / name) is not None for name in REPLACED) or not is_ours(out, KIND):
        return
    for name in ("config.json", "log.jsonl", MARKER):
        (out / name).unlink(missing_ok=True)


def _record(out: Path) -> None:
    """List what the run wrote in its marker (`outputs.record_files`), after each save, so that a later
    rerun tells a file the user added from the run's own (`outputs.check_part`)."""
    record_files(out, [n for n in LAYOUT if (out / n).exists()])


def _settle_replaced(out: Path, ckpt: Path | None) -> Path | None:
    """Put back what a kill between the two renames of a replace left (`outputs.replace_dir`): the
    previous folder at `.NAME.old`, NAME missing (moved back: it is what `existing` resumed from) or
    NAME already the new one (the old removed). Left there, carrying no marker of its own, it made
    the next save of NAME refuse the run's own folder as a user's, steps after the resume. Returns
    where `ckpt` now is."""
    for name in REPLACED:
        old, folder = out / f".{name}.old", out / name
        if old.is_symlink() or not old.is_dir():
            continue
        if folder.exists():
            shutil.rmtree(old)
        else:
            os.replace(old, folder)
            if ckpt == old:
                ckpt = folder
    return ckpt
