"""A bad flag is refused before torch and transformers load: the training commands check their flags
with `training.configs` (settings, presets, marker kinds: neither library), compare its run folder,
and index build its settings, so a typo costs a moment, not ten seconds of imports (as `reproduce`'s,
tests/test_reproduce.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

RAG = ["--index", "i", "--encoder", "e", "--generator", "g", "--train", "t.jsonl", "--dev", "d.jsonl"]
STITCHED = ["--index", "i", "--generator", "g", "--train", "t.jsonl"]
DPR = ["--train", "t.jsonl", "--passages", "p.jsonl"]
CASES = {  # the flags after the command, and what the refusal says
    "dpr --lr": (["train", "dpr", *DPR, "--lr", "inf"], "error: --lr: must be a positive finite number, got inf"),
    "dpr --mixed-precision": (["train", "dpr", *DPR, "--mixed-precision", "fp8"], "error: --mixed-precision: must be one of"),
    "rag --n-docs": (["train", "rag", *RAG, "--n-docs", "0"], "error: --n-docs: must be at least 1, got 0"),
    "rag --lr": (["train", "rag", *RAG, "--lr", "inf"], "error: --lr: must be a positive finite number, got inf"),
    "rag --variant": (["train", "rag", *RAG, "--variant", "tokens"], "error: --variant: must be one of token, sequence"),
    # AdamW's first step divides the learning rate by 1 - beta1: 3e38 overflowed float32 there, a traceback
    "rag --lr 3e38": (["train", "rag", *RAG, "--lr", "3e38"], "error: --lr: must be at most 3.4e+37"),
    "rag --retriever-lr-scale": (["train", "rag", *RAG, "--retriever-lr-scale", "1e300"],
                                 "error: --retriever-lr-scale: times --lr 0.0001 is the encoders' learning rate, which must be at most"),
    "rag --device": (["train", "rag", *RAG, "--device", "gpu"], "error: --device: must be auto, cpu or cuda, got 'gpu'"),
    "reproduce --device": (["reproduce", "--device", "gpu"], "error: --device: must be auto, cpu or cuda, got 'gpu'"),
    "rag --weight-decay": (["train", "rag", *RAG, "--weight-decay", "1e300"], "error: --weight-decay: times --lr 0.0001 must be below 1"),
    "stitched --n-docs": (["train", "stitched", *STITCHED, "--n-docs", "0"], "error: --n-docs: must be at least 1, got 0"),
    "stitched --lr": (["train", "stitched", *STITCHED, "--lr", "1e40"], "error: --lr: must be at most 3.4e+37"),
    "stitched --gold-position": (["train", "stitched", *STITCHED, "--gold-position", "first"], "error: --gold-position:"),
    "pretrain --preset": (["pretrain", "--preset", "huge"], "error: --preset: unknown preset 'huge'"),
    "pretrain --steps --minutes": (["pretrain", "--steps", "5", "--minutes", "1"], "error: --minutes: give --steps or --minutes, not both"),
    "pretrain --device": (["pretrain", "--device", "gpu"], "error: --device: must be auto, cpu or cuda[:N], got 'gpu'"),
    "compare --run": (["compare", "--run", "nope"], "field '--run': run folder not found"),
    "compare --concurrency": (["compare", "--run", "nope", "--concurrency", "0"], "'--concurrency'"),
    "ask --num-beams": (["ask", "--model", "m", "--index", "i", "q", "--num-beams", "0"], "error: --num-beams: must be at least 1, got 0"),
    "index build --device": (["index", "build", "--passages", "p.jsonl", "--encoder", "ctx", "--device", "gpu"],
                             "error: --device: must be auto, cpu or cuda[:N], got 'gpu'"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_bad_flag_is_refused_before_torch_and_transformers_load(tmp_path, case):
    """Run in a folder of its own: the relative paths name nothing, but a context encoder's folder
    (only its config.json is read before the flags) and the passages, which index build reads after them."""
    args, said = CASES[case]
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "config.json").write_text(json.dumps({"architectures": ["DPRContextEncoder"]}))
    (tmp_path / "p.jsonl").write_text(json.dumps({"id": "p1", "title": "T", "text": "A passage."}) + "\n")
    code = ("import sys\nfrom lewisrag.cli import main\nsys.argv = ['lewisrag', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    print(e.code, sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = [] if args[0] in ("compare", "ask") else ["--out", "out"]
    # blas: no CPU then needs torch for $LEWISRAG_CPU_LINEAR (auto loads it on an AMD Zen 5, to choose oneDNN)
    env = {**os.environ, "LEWISRAG_CPU_LINEAR": "blas"}
    r = subprocess.run([sys.executable, "-c", code, *args, *out], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert r.stdout.strip() == "2 []" and r.stderr.startswith("error: ") and said in r.stderr, (r.stdout, r.stderr)
    assert not (tmp_path / "out").exists()


def test_the_settings_name_what_the_model_and_the_trainer_take():
    """`training.configs` keeps its own --variant and --task values, which torch-free checks need:
    the model's variants and a dev metric for every task."""
    from lewisrag.rag_model.settings import VARIANTS
    from lewisrag.training import configs
    from lewisrag.training.tasks import DEV_METRIC

    assert configs.VARIANTS == VARIANTS and set(configs.TASKS) == set(DEV_METRIC)


@pytest.mark.parametrize("raw, said", [
    (b"/tmp/caf\xe9.jsonl", "error: /tmp/caf\\xe9.jsonl: field '--questions': is not valid UTF-8"),
    ("/tmp/北京.jsonl".encode(), "error: /tmp/北京.jsonl: field '--questions': is UTF-8, but this Python reads arguments "
                                 "as ascii (the locale's): run with PYTHONUTF8=1"),
])
def test_an_argument_python_cannot_read_as_text_is_named_with_its_cause(tmp_path, raw, said):
    """A UTF-8 argument under an ASCII locale (PYTHONUTF8=0, LC_ALL=C) was called "not valid UTF-8", a
    user's correct text blamed; bytes of another encoding are."""
    env = {**os.environ, "PYTHONUTF8": "0", "LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": "utf-8"}
    args = [b"eval", b"retrieval", b"--index", b"i", b"--questions", raw]
    r = subprocess.run([os.fsencode(sys.executable), b"-m", b"lewisrag", *args], capture_output=True, cwd=tmp_path, env=env)
    err = r.stderr.decode("utf-8")
    assert r.returncode == 2 and err.strip().splitlines() == [err.strip()] and err.startswith(said), err
