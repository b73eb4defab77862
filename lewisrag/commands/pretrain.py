"""`lewisrag pretrain`: build a small generator that reads (see lewisrag/training/pretrain.py)."""

from __future__ import annotations

import math
import shlex
from pathlib import Path

import typer

from lewisrag.commands import _ui
from lewisrag.data.io import InputError, given_once


def parse_overrides(pairs: list[str]) -> dict:
    """KEY=VALUE strings -> typed PretrainConfig fields (the type of the field's default).

    >>> parse_overrides(["lr=2e-3", "d_model=256", "long_form=true", "init_std=none"])
    {'lr': 0.002, 'd_model': 256, 'long_form': True, 'init_std': None}
    """
    from dataclasses import fields

    from lewisrag.data.world import MAX_ENTITIES, MIN_ENTITIES
    from lewisrag.training.configs import MIN_VOCAB, PretrainConfig, lr_problem

    known = {f.name: f.type for f in fields(PretrainConfig)}
    given_once("--set", [pair.partition("=")[0] for pair in pairs])  # else the last would win in silence
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in known or key in FLAGS:
            raise InputError("--set", f"expected KEY=VALUE with KEY a PretrainConfig field (not {'/'.join(FLAGS)}), got {pair!r}")
        out[key] = _typed(key, value, known[key])
        if key == "lr" and (why := lr_problem(out[key])) is not None:  # as every trainer's --lr: 1e40 overflowed float32
            raise InputError("--set", f"lr {why}")
        if key in AT_LEAST_ONE and out[key] < 1:
            raise InputError("--set", f"{key} must be at least 1, got {out[key]}")
        if key in AT_MOST and out[key] > AT_MOST[key]:  # d_model=1073741824 was a 2.5 TB allocation, a traceback
            raise InputError("--set", f"{key} must be at most {AT_MOST[key]}, got {out[key]}")
        if key in LENGTHS and out[key] < 3:  # the tokenizer adds <s> and </s>; at max_length 1 it cuts nothing at all
            raise InputError("--set", f"{key} must be at least 3 (<s>, one token, </s>), got {out[key]}")
        if key in SHARES and out[key] > 1:
            raise InputError("--set", f"{key} is a share: at most 1, got {out[key]}")
        if key == "snapshot_b_share" and out[key] > MAX_B_SHARE:  # 1 divided by zero once reading began
            raise InputError("--set", f"snapshot_b_share must be at most {MAX_B_SHARE}, not just below 1: each refill of "
                             f"the reading stream adds share / (1 - share) snapshot-B pairs per snapshot-A pair, got {out[key]}")
        if key == "vocab_size" and out[key] < MIN_VOCAB:  # else built larger than asked, recipe.json telling otherwise
            raise InputError("--set", f"vocab_size must be at least {MIN_VOCAB} (256 bytes and {MIN_VOCAB - 256} special "
                             f"tokens), got {out[key]}")
        if key == "world_entities" and not MIN_ENTITIES <= out[key] <= MAX_ENTITIES:
            raise InputError("--set", f"world_entities must be between {MIN_ENTITIES} and {MAX_ENTITIES}, got {out[key]}")
    return out


FLAGS = ("steps", "minutes", "seed", "lang", "device")  # PretrainConfig fields set by their own flags, not --set
# sizes a model or a step cannot be built with at 0 (the batch sizes may be 0: that objective is then off)
AT_LEAST_ONE = {"vocab_size", "d_model", "encoder_layers", "decoder_layers", "heads", "ffn_dim", "max_source_length",
                "max_target_length", "tokenizer_docs", "eval_size", "world_entities"}


# sizes past these run out of memory or never finish on any machine lewisrag trains on (train dpr's scratch
# model has the same caps; BART-large is 1024 wide, 4096 in its feed-forward, 12 layers of 16 heads, 1024 positions)
AT_MOST = {"d_model": 4096, "ffn_dim": 16384, "encoder_layers": 96, "decoder_layers": 96, "heads": 128,
           "vocab_size": 262144, "max_source_length": 4096, "max_target_length": 4096,
           "qa_batch_size": 65536, "denoise_batch_size": 65536,
           # fresh passages (with 3 questions each) the tokenizer learns from: 50 x the shipped recipes' 20,000: 100,000
           # took 18 s and 0.4 GB before any step, so this cap some 3 minutes and 4 GB, and the BPE's time after it
           "tokenizer_docs": 1_000_000}
# the reading stream's refill adds len(pairs) * share / (1 - share) snapshot-B pairs to about 226 of snapshot A's:
# 9 times as many at 0.9; at 0.999 it buffered 226,000 pairs (762 MB) in one refill, and more hung or ran out of memory
MAX_B_SHARE = 0.9
LENGTHS = {"max_source_length", "max_target_length"}  # token counts the tokenizer truncates to
SHARES = {"qa_start", "snapshot_b_share", "mask_ratio", "final_lr_ratio"}  # in [0, 1]


def _typed(key: str, value: str, annotation: str):
    if value.lower() == "none" and "None" in str(annotation):
        return None
    try:
        if "bool" in str(annotation):
            if value.lower() not in ("true", "false"):
                raise ValueError(value)
            return value.lower() == "true"
        number = (int if str(annotation).startswith("int") else float)(value)
    except ValueError:
        raise InputError("--set", f"{key}: cannot read {value!r} as {annotation}") from None
    if not math.isfinite(number) or number < 0:  # no field takes NaN or a negative: a traceback mid-training else
        raise InputError("--set", f"{key} must be a finite number, at least 0, got {value!r}")
    return number


def pretrain(
    out: Path = typer.Option(..., "--out", help="Output directory: config.json, model.safetensors, tokenizer files, recipe.json."),
    preset: str = typer.Option("small", "--preset", help="small (the shipped generator's recipe) or tiny (a smoke test)."),
    steps: int = typer.Option(None, "--steps", help="Optimizer steps (deterministic under --seed); default: the preset's (small: 6,000; 12,000 with --lang zh)."),
    minutes: float = typer.Option(None, "--minutes", help="Train for this many minutes instead of a number of steps."),
    seed: int = typer.Option(0, "--seed", min=0, max=2**32 - 1, help="Seed of the model init and the fresh-text streams."),
    lang: str = typer.Option("en", "--lang", help="Language of the fresh text, the tokenizer and the world measured: "
                             "en, or zh (a character-level vocabulary; the Chinese demo's generator-small-zh)."),
    device: str = typer.Option("auto", "--device", help="Where it trains and is measured: auto (a GPU when one is "
                               "visible), cpu or cuda[:N]."),
    overrides: list[str] = typer.Option(None, "--set", help="Override a config field for an experiment, KEY=VALUE (repeatable; see PretrainConfig)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even if it holds files that are not a "
                                   "generator lewisrag wrote (replaced once training has finished); never a folder lewisrag did not make."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object instead of a table."),
) -> None:
    """Pretrain a BART generator on fresh text (denoising + reading comprehension) and measure it on the world's test split."""
    # the flags are checked before torch and transformers load (the presets and their config need neither)
    from lewisrag.data.outputs import check_out_dir
    from lewisrag.data.threads import check_device_flag
    from lewisrag.eval.reports.i18n import check_lang
    from lewisrag.training.configs import GENERATOR_KIND, pretrain_preset

    check_lang(lang)  # as every --lang is checked
    check_out_dir(out, GENERATOR_KIND, overwrite=overwrite, replaces=True, alone=True)
    if steps is not None and minutes is not None:
        raise InputError("--minutes", "give --steps or --minutes, not both")
    parsed = parse_overrides(overrides or [])
    try:
        cfg = pretrain_preset(preset, steps=steps, minutes=minutes, seed=seed, lang=lang, device=device, **parsed)
    except ValueError as e:  # PretrainConfig's own checks (d_model divisible by heads)
        raise InputError("--set", str(e)) from None
    if cfg.lr * cfg.weight_decay >= 1 and "weight_decay" in parsed:
        # decoupled decay multiplies the weights by 1 - lr x weight_decay: 1e40 diverged, the error blaming lr.
        # Only when weight_decay is set: a huge lr alone diverges, and that error rightly names lr
        raise InputError("--set", f"weight_decay times lr {cfg.lr:g} must be below 1 (decoupled decay multiplies the "
                         f"weights by 1 - lr x weight_decay), got {cfg.weight_decay:g}")
    check_device_flag(device)  # a mistyped one in a moment: the run resolves it once torch has loaded
    from lewisrag.training.pretrain import pretrain as run

    budget = ["--steps", str(cfg.steps)] if cfg.steps is not None else ["--minutes", str(cfg.minutes)]
    sets = [x for kv in overrides or [] for x in ("--set", kv)]
    langs = ["--lang", lang] if lang != "en" else []
    where = ["--device", device] if device != "auto" else []
    command = shlex.join(["lewisrag", "pretrain", "--out", str(out), "--preset", preset, *budget, "--seed", str(seed), *langs,
                          *where, *sets])
    with _ui.progress() as p:
        task = p.add_task(f"pretraining ({preset})", total=1000, info="")

        def on_step(step: int, progress: float, loss: float, em: float | None) -> None:
            last = "—" if em is None else f"{em:.3f}"
            p.update(task, completed=round(1000 * progress), info=f"step {step} loss {loss:.3f} test EM {last}")

        recipe = run(cfg, out, on_step, command=command, overwrite=overwrite)
    if as_json:
        _ui.print_json({"out": str(out), "steps": recipe["steps"], "minutes": recipe["minutes"], "parameters": recipe["parameters"],
                        "weights_bytes": recipe["weights_bytes"], "test_em": recipe["final"]["em"],
                        "test_em_by_attribute": recipe["final"]["by_attribute"]})
        return
    rows = [["steps", recipe["steps"]], ["minutes", recipe["minutes"]], ["parameters", recipe["parameters"]],
            ["weights (bytes)", recipe["weights_bytes"]], ["test EM (gold passage)", recipe["final"]["em"]]]
    rows += [[f"  {group}", em] for group, em in recipe["final"]["by_attribute"].items()]
    _ui.out.print(_ui.table(f"generator written to {out}", ["field", "value"], rows))
