"""Where a trainer runs and in what precision: a one-process trainer's device and gradient scaler
(`single_device`), RAG fine-tuning's accelerate set-up (`_accelerator`), the checks of
--mixed-precision and --compile made before anything loads, autocast of the forward passes,
gradient (activation) checkpointing, torch.compile of the RAG models, and the seeding of each
process's random generators. `training.rag` uses all of them; DPR, the closed-book generator and the
stitched reader use `single_device` and `autocast` (and `training.negatives` autocast).
"""

from __future__ import annotations

import contextlib
import random
import shutil

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState

from lewisrag.data.io import InputError
from lewisrag.data.threads import resolve_device
from lewisrag.training.configs import PRECISIONS, RagTrainConfig, check_precision


def _check_precision(cfg: RagTrainConfig) -> None:
    if cfg.mixed_precision in PRECISIONS:  # an unknown one is rag_data.check_config's to name
        check_precision(cfg.mixed_precision, "cpu" if cfg.cpu or not torch.cuda.is_available() else "cuda")
    if cfg.compile:
        check_compiler()


def check_compiler() -> None:
    """`--compile` needs a C compiler: inductor builds its kernels (C++ on the CPU, triton's
    launcher on a GPU) with the system's. Checked before anything loads."""
    if not any(shutil.which(cc) for cc in ("cc", "gcc", "clang")):
        raise InputError("--compile", "needs a C compiler on PATH (cc, gcc or clang): torch.compile builds its kernels with it")


def single_device(device: str, mixed_precision: str) -> tuple[torch.device, torch.amp.GradScaler]:
    """Where a one-process trainer (closed book, DPR, the stitched reader) runs (`device`: auto, cpu,
    cuda[:N]) and its gradient scaler, on under fp16 only; `mixed_precision` checked first."""
    where = torch.device(check_precision(mixed_precision, resolve_device(device)))
    return where, torch.amp.GradScaler(where.type, enabled=mixed_precision == "fp16")


def _accelerator(cfg: RagTrainConfig):
    # accelerate keeps its settings process-wide and refuses new ones, but one process may train
    # several models (`lewisrag reproduce`); the process group (PartialState) is kept
    AcceleratorState._reset_state(reset_partial_state=False)
    # without a GPU, accelerate joins the processes torchrun started only when told it is on the CPU
    return Accelerator(cpu=cfg.cpu or not torch.cuda.is_available(),
                       mixed_precision=cfg.mixed_precision if cfg.mixed_precision in PRECISIONS else "no")


def _checkpoint_activations(model, frozen_retriever: bool) -> None:
    """Turn on gradient checkpointing in the generator and, unless frozen (it then runs in eval
    mode, where checkpointing is off, and no gradient flows through it), the question encoder."""
    parts = {"generator": model.generator} | ({} if frozen_retriever else {"question encoder": model.question_encoder})
    if model.context_encoder is not None:
        parts["context encoder"] = model.context_encoder
    for name, part in parts.items():
        _enable_checkpointing(part)
        if not any(getattr(m, "gradient_checkpointing", False) for m in part.modules()):
            raise InputError("--gradient-checkpointing", f"the {name} ({type(part).__name__}) has no transformers "
                                                         "model inside that supports gradient checkpointing")


def compile_models(model, mode: str | None = None) -> None:
    """torch.compile the generator, the question encoder and (end to end) the context encoder, in
    place: their `state_dict` keys and the saved folders stay as they are, and only their own
    `__call__` is compiled (decoding calls BART's encoder and layers directly and stays eager).
    `dynamic=True`: every batch pads to its own lengths, so one graph with symbolic lengths instead
    of a recompilation for each new shape. Each compiles on the training step's first call, and
    again on the first call in eval mode without gradient (the question encoder at a dev
    evaluation, the generator at FEVER's, the context encoder at a re-index). On two CPU cores a
    compilation took about 15-45 s for the test models and 65-77 s for the CPU bench's (d_model
    256), 19-27 s when inductor's on-disk cache already held its kernels.

    Why: torch.compile fuses the layer norms, activations, dropout and residual additions between
    the matrix products, which is what a bf16 step spends its time on besides them. Measured on
    the CPU bench's RAG-Token step (two cores, `scripts/bench_rag.py --compile`): 1.03-1.09x faster
    in bf16, 0.97-0.99x in fp32, where the products dominate; on a GPU, `scripts/bench_gpu.py --parts
    compiled` measures it. `mode`: torch.compile's ("reduce-overhead" replays CUDA graphs; the
    bench's `--mfu-modes compiled:cudagraphs` measures it at a fixed shape), None its default."""
    parts = [model.generator, model.question_encoder]
    if model.context_encoder is not None:  # end to end: its DPR model, after PassageEncoder has tokenized
        parts.append(getattr(model.context_encoder, "encoder", model.context_encoder))
    for part in parts:
        part.compile(dynamic=True, mode=mode)


def _enable_checkpointing(module: torch.nn.Module) -> None:
    """`module`'s own gradient checkpointing or, where it has none (transformers' DPR encoders),
    that of the outermost models inside it which have (DPR's BertModel)."""
    if not getattr(module, "supports_gradient_checkpointing", False):
        for child in module.children():
            _enable_checkpointing(child)
        return
    # the newer transformers name; the older one warns that it is deprecated there
    enable = getattr(module, "activation_checkpointing_enable", None) or module.gradient_checkpointing_enable
    # non-reentrant: it needs no input that requires grad and keeps dropout's random draws
    enable({"use_reentrant": False})


def autocast(mixed_precision: str, device_type: str):
    """Autocast of the forward passes in `mixed_precision` ("no", "bf16", "fp16"; accelerate's own
    skips fp16 off a GPU)."""
    if mixed_precision == "no":
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=torch.bfloat16 if mixed_precision == "bf16" else torch.float16)


def _seed_everything(seed: int, rank: int = 0) -> None:
    """Seed python's, numpy's and torch's global generators (dropout draws from torch's); each
    process of a multi-process run from its own seed, so that their dropout masks differ (the data
    order has its own seed, `rag_data.next_batch`). One process: `seed` itself. numpy takes seeds
    below 2**32 (`--seed` is checked against that): the other processes' wrap around there."""
    random.seed(seed + rank)
    np.random.seed((seed + rank) % 2**32)
    torch.manual_seed(seed + rank)
