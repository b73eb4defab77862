"""RAG fine-tuning: the loss falls, a frozen retriever stays frozen, the log watches retrieval, the best
model is kept, a SIGKILLed run resumes to the same weights and log, and 2 processes equal 1."""

from __future__ import annotations

import doctest
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from conftest import like_the_cli, one_thread, run_cli
from lewisrag.data.io import InputError, owner_tag

TRAIN_FLAGS = dict(n_docs=2, batch_size=4, lr=1e-2, max_combined_length=128, max_target_length=16, eval_questions=4)


def build_rag_inputs(root: Path) -> dict:
    """A 40-entity world, a tiny DPR (see spread_encoders), its dense index and a tiny random BART.

    Built once per session on disk (the modules that import this fixture share it).
    """
    paths = {"world": root / "world", "dpr": root / "dpr", "index": root / "index", "gen": root / "gen", "root": root}
    if (root / "done").exists():
        return paths
    from transformers import BartConfig, BartForConditionalGeneration

    from lewisrag.data.records import read_passages, read_qa
    from lewisrag.data.world import build_world, write_world
    from lewisrag.index.dense import build_dense_index
    from lewisrag.training.dpr import DPRTrainConfig, train_dpr
    from lewisrag.training.pretrain_data import train_generator_tokenizer

    shutil.rmtree(root, ignore_errors=True)
    write_world(build_world(entities=40), paths["world"])
    passages, train = read_passages(paths["world"] / "passages_a.jsonl"), read_qa(paths["world"] / "train.jsonl")
    train_dpr(DPRTrainConfig(vocab_size=300, hidden_size=16, layers=1, heads=2, batch_size=8, steps=1), train, passages,
              paths["dpr"])
    spread_encoders(paths["dpr"])
    build_dense_index(passages, paths["dpr"], paths["index"])
    tok = train_generator_tokenizer([f"{p.title} {p.text}" for p in passages] + [q.question for q in train], 300)
    torch.manual_seed(0)
    g = BartForConditionalGeneration(BartConfig(
        vocab_size=len(tok), d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=256, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, bos_token_id=0, pad_token_id=1, eos_token_id=2,
        decoder_start_token_id=2, forced_eos_token_id=None))
    g.generation_config.update(decoder_start_token_id=2, bos_token_id=0, eos_token_id=2, pad_token_id=1,
                               forced_bos_token_id=None, forced_eos_token_id=None)
    g.save_pretrained(paths["gen"])
    tok.save_pretrained(paths["gen"])
    (root / "done").write_text("")
    return paths


def spread_encoders(dpr_dir: Path) -> None:
    """Give the DPR checkpoint random weights of a larger scale (both sides equal), without dropout.

    A tiny encoder trained for a few steps gives every passage nearly the same vector; p(z|x) is
    then uniform and the retriever's gradient is rounding noise, which AdamW would amplify. With
    no dropout, N processes and 1 process compute the same thing (their masks would differ).
    """
    from lewisrag.index.encoders import DPRCheckpoint

    ckpt = DPRCheckpoint.load(dpr_dir)
    q = ckpt.question_encoder.question_encoder.bert_model
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in q.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g))
    ckpt.ctx_encoder.ctx_encoder.bert_model.load_state_dict(q.state_dict())
    for enc in (ckpt.question_encoder, ckpt.ctx_encoder):
        enc.config.hidden_dropout_prob = enc.config.attention_probs_dropout_prob = 0.0
    ckpt.save(dpr_dir)


@pytest.fixture(scope="session")
def rag_inputs(tmp_path_factory) -> dict:
    with one_thread():  # the same tiny models whatever OMP_NUM_THREADS the suite runs under
        return build_rag_inputs(tmp_path_factory.getbasetemp() / "rag_inputs")


def make_config(inputs: dict, **overrides):
    from lewisrag.training.rag import RagTrainConfig

    w = inputs["world"]
    paths = dict(index=str(inputs["index"]), encoder=str(inputs["dpr"]), generator=str(inputs["gen"]),
                 train=str(w / "train.jsonl"), dev=str(w / "dev.jsonl"))
    return RagTrainConfig(**{**paths, **TRAIN_FLAGS, **overrides})


@pytest.fixture(scope="session")
def trained_rag(rag_inputs, tmp_path_factory) -> Path:
    """A RAG-Token run of a few steps (its best/ and final/ models), shared by the ask and swap tests."""
    from lewisrag.training.rag import train_rag

    out = tmp_path_factory.getbasetemp() / "trained_rag"
    if not (out / "final" / "rag.json").exists():
        shutil.rmtree(out, ignore_errors=True)
        train_rag(make_config(rag_inputs, steps=3, eval_every=3, save_every=3), out)
    return out


def cli_flags(cfg) -> list[str]:
    """The `lewisrag train rag` flags for `cfg` (one flag per config field)."""
    flags = []
    for name, value in cfg.__dict__.items():
        flag = "--" + name.replace("_", "-")
        if value is None or value == "":  # not given (qa_fields: told from the files; train_kinds: all)
            continue
        if name.startswith("eval_") and name != "eval_every" and not cfg.eval_every:  # refused: no evaluation to shape
            continue
        if name == "cpu":  # the field behind --device cpu
            flags += ["--device", "cpu"] if value else []
            continue
        if isinstance(value, dict):  # qa_fields: --qa-fields question=query,answers=golds
            value = ",".join(f"{k}={v}" for k, v in value.items())
        if isinstance(value, bool):
            flags += [flag] if value else []
        else:
            flags += [flag, str(value)]
    return flags


def weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return {f"{part}.{k}": v for part in ("question_encoder", "generator")
            for k, v in load_file(str(model_dir / part / "model.safetensors")).items()}


def log_lines(out: Path) -> list[str]:
    return (out / "log.jsonl").read_text().splitlines()


def test_doctests():
    from lewisrag.training import checkpoint, rag, rag_data

    for module in (rag_data, checkpoint, rag):
        assert doctest.testmod(module).failed == 0


def test_loss_falls_on_a_fixed_batch(rag_inputs):
    from lewisrag.training.rag_data import load_components
    from lewisrag.training.rag_data import answer_labels

    parts = load_components(make_config(rag_inputs, variant="sequence"))
    assert isinstance(parts.index.embeddings, np.memmap)  # each process maps the vectors, none copies them
    model, tok = parts.model.train(), parts.tokenizers
    pairs = parts.pairs[:4]
    gen = model.generator.config
    labels = answer_labels([t for _, t in pairs], tok.generator, gen.decoder_start_token_id, gen.pad_token_id, 16)
    assert labels[0, 0] == gen.decoder_start_token_id and labels[0, 1] == 0  # start token, then <s> answer </s>
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(8):
        out, _ = model.forward_questions([ex.question for ex, _ in pairs], parts.index, tok, labels)
        loss = out.loss.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0] and losses == sorted(losses, reverse=True)


def test_grad_accum_draws_what_one_larger_batch_draws_across_epochs(rag_inputs, tmp_path, monkeypatch):
    """--batch-size 2 --grad-accum 4 trains on the examples --batch-size 8 does, step by step, past an
    epoch's end: drawn a micro-batch at a time, the skipped tail depended on the micro-batch size, one
    step straddled two epochs and held one example twice (198 pairs: step 25 of 8 x 1 and 4 x 2 differed)."""
    from lewisrag.training import rag

    def steps(batch_size: int, grad_accum: int) -> list[list[int]]:
        drawn = []

        def spy(cfg, acc, parts, model, ids, scaler):  # the ids each micro-batch trains on; no forward
            drawn.append(list(ids))
            return [1.0, 1.0, 0.0, 0.0, 0.0]

        monkeypatch.setattr(rag, "_micro_step", spy)
        cfg = make_config(rag_inputs, batch_size=batch_size, grad_accum=grad_accum, steps=30, eval_every=0,
                          save_every=1000, warmup=0.0)
        rag.train_rag(cfg, tmp_path / f"{batch_size}x{grad_accum}")
        return [sum(drawn[i : i + grad_accum], []) for i in range(0, len(drawn), grad_accum)]

    whole = steps(8, 1)
    assert len(whole) == 30 and len({i for s in whole[:24] for i in s}) == 192  # 198 pairs: the epoch ends at step 24
    assert steps(4, 2) == whole and steps(2, 4) == whole
    assert all(len(set(s)) == len(s) for s in whole)


def test_frozen_retriever_log_fields_and_best_model(rag_inputs, tmp_path):
    from lewisrag.index.encoders import DPRCheckpoint
    from lewisrag.training.rag import train_rag

    seen = []
    cfg = make_config(rag_inputs, steps=4, eval_every=2, save_every=2, freeze_retriever=True)
    summary = train_rag(cfg, tmp_path / "run", on_progress=lambda s, n, rec: seen.append(s))
    assert seen == [1, 2, 3, 4] and summary["steps"] == 4
    records = [json.loads(line) for line in log_lines(tmp_path / "run")]
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    for r in records:
        assert {"loss", "lr", "doc_entropy", "hit_at_k"} <= set(r) and 0 <= r["doc_entropy"] <= 0.7 + 1e-6
    assert [("dev_em" in r) for r in records] == [False, True, False, True]
    assert (tmp_path / "run" / "best" / "rag.json").exists() and (tmp_path / "run" / "checkpoint").is_dir()
    best = json.loads((tmp_path / "run" / "best" / "train_config.json").read_text())
    assert best["dev_em"] == max(r["dev_em"] for r in records if "dev_em" in r) and best["freeze_retriever"]
    final = weights(tmp_path / "run" / "final")
    start = DPRCheckpoint.load(rag_inputs["dpr"]).question_encoder.state_dict()
    assert all(torch.equal(final[f"question_encoder.{k}"], v) for k, v in start.items())
    settings = json.loads((tmp_path / "run" / "final" / "rag.json").read_text())["settings"]
    assert settings["index_path"] == str(Path(rag_inputs["index"]).resolve()) and settings["index_fingerprint"]
    with pytest.raises(InputError, match="other settings than the run.s: --lr 0.5 "):
        train_rag(replace(cfg, lr=0.5), tmp_path / "run", resume=True)
    with pytest.raises(InputError, match="not empty"):
        train_rag(cfg, tmp_path / "run")


def test_bf16_sequence_step(rag_inputs, tmp_path):
    from lewisrag.training.rag import train_rag

    seen = set()  # the dtypes of the training forward passes' linear layers (evaluation runs without grad)

    def record_dtype(module, inputs, output):
        if isinstance(module, torch.nn.Linear) and torch.is_grad_enabled():
            seen.add(output.dtype)

    hook = torch.nn.modules.module.register_module_forward_hook(record_dtype)
    try:
        train_rag(make_config(rag_inputs, variant="sequence", steps=1, eval_every=1, mixed_precision="bf16"), tmp_path / "r")
    finally:
        hook.remove()
    (record,) = [json.loads(line) for line in log_lines(tmp_path / "r")]
    assert seen == {torch.bfloat16}  # not silently fp32
    assert math.isfinite(record["loss"]) and "dev_em" in record


def test_bad_inputs_raise_before_writing(rag_inputs, tmp_path):
    from lewisrag.training.rag import train_rag
    from lewisrag.training.rag_data import check_config

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "answers": ["x"]}\n')
    long_only = tmp_path / "long.jsonl"  # dev EM was NaN at every evaluation, no best/ kept, exit 0
    long_only.write_text("".join(json.dumps({**json.loads(line), "kind": "long"}) + "\n" for line in
                                 (rag_inputs["world"] / "dev.jsonl").read_text().splitlines()[:3]))
    cases = [(dict(train=str(bad)), "bad.jsonl:1: field 'question'"), (dict(generator=str(tmp_path)), "config.json"),
             (dict(mixed_precision="fp8"), "--mixed-precision"), (dict(n_docs=500), "--n-docs"),
             # `lr > 0` let inf through: NaN weights, "loss": NaN in log.jsonl, exit 0
             (dict(lr=float("inf")), "--lr"), (dict(weight_decay=float("nan")), "--weight-decay"),
             (dict(lr=1e40), r"--lr: must be at most 3\.4e\+37"),  # a RuntimeError at the first step: float32 overflows
             (dict(max_grad_norm=float("inf")), "--max-grad-norm"), (dict(label_smoothing=1.0), "--label-smoothing"),
             (dict(dev=str(long_only)), r"long.jsonl: field 'answers': no short-answer question with answers"),
             # a step's batch is drawn whole: 100 x 2 of the 198 pairs was a ValueError traceback at the first step
             (dict(batch_size=100, grad_accum=2), r"198 questions with answers, fewer than --batch-size 100 x --grad-accum 2")]
    for overrides, message in cases:
        with pytest.raises(InputError, match=message):
            train_rag(make_config(rag_inputs, **overrides), tmp_path / "out")
        assert not (tmp_path / "out").exists()
    with pytest.raises(InputError, match="split evenly over 2 processes"):
        check_config(make_config(rag_inputs, batch_size=3), processes=2)


def test_overwrite_keeps_its_inputs_and_a_killed_overwrite_does_not_block_other_settings(rag_inputs, tmp_path):
    from lewisrag.training.rag import train_rag

    mine = tmp_path / "mine"
    shutil.copytree(rag_inputs["world"], mine)
    with pytest.raises(InputError, match="holds --train"):  # replacing mine/ would delete the training data
        train_rag(replace(make_config(rag_inputs, steps=1), train=str(mine / "train.jsonl")), mine, overwrite=True)
    with pytest.raises(InputError, match="--seed"):  # numpy's range, checked before the models load
        train_rag(make_config(rag_inputs, steps=1, seed=-1), tmp_path / "new")
    assert (mine / "train.jsonl").is_file() and not (tmp_path / "new").exists()
    # the staging folder a killed --overwrite run left behind, made with other settings
    train_rag(make_config(rag_inputs, steps=2, eval_every=2, save_every=1), tmp_path / ".mine.overwrite")
    train_rag(make_config(rag_inputs, steps=1, eval_every=1), mine, overwrite=True)
    assert len(log_lines(mine)) == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_cli_mismatched_encoder_is_exit_2(rag_inputs, tmp_path):
    index = tmp_path / "index"
    shutil.copytree(rag_inputs["index"], index)
    manifest = json.loads((index / "manifest.json").read_text())
    manifest["encoder"]["ctx_fingerprint"] = "0" * 16
    (index / "manifest.json").write_text(json.dumps(manifest))
    cfg = replace(make_config(rag_inputs, steps=1), index=str(index))
    r = run_cli("train", "rag", *cli_flags(cfg), "--out", str(tmp_path / "out"))
    assert r.returncode == 2 and "ctx_fingerprint" in r.stderr and "--swap" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def saved_run(rag_inputs, tmp_path_factory):
    """A two-step run with its checkpoint, for resumes to damage copies of."""
    from lewisrag.training.rag import train_rag

    cfg = make_config(rag_inputs, steps=2, eval_every=0, save_every=2)
    run = tmp_path_factory.mktemp("saved") / "run"
    train_rag(cfg, run)
    return cfg, run


def test_an_intact_checkpoint_state_resumes(saved_run, tmp_path):
    """The control for the damaged ones below: the same config, the same files, a resume that works."""
    from lewisrag.training.rag import train_rag

    cfg, saved = saved_run
    shutil.copytree(saved, tmp_path / "run")
    # a staging folder of a process that is gone is swept; one of a live process (this one) is not
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = owner_tag().rsplit("-", 1)[1]
    dead, live = (tmp_path / "run" / f".best.tmp.{tag}.abcd1234" for tag in (f"{int(gone.stdout)}-{host}", owner_tag()))
    dead.mkdir(), live.mkdir()
    assert train_rag(cfg, tmp_path / "run", resume=True)["steps"] == 2
    assert not dead.exists() and live.is_dir()


@pytest.mark.parametrize("edit,field", [
    (lambda s: [], "(top level)"),
    (lambda s: {**s, "config": "x"}, "config"),
    (lambda s: {**s, "step": "1"}, "step"),
    (lambda s: {**s, "position": None}, "position"),
    (lambda s: {**s, "position": {"epoch": 0, "index": -3}}, "position.index"),
    (lambda s: {**s, "best_em": float("nan")}, "best_em"),  # was resumed: every dev score then compared False with it
    (lambda s: {k: v for k, v in s.items() if k != "torch_state"}, "torch_state"),
    (lambda s: {**s, "step": 10**6}, "step"),  # beyond --steps: was resumed, and the loop ended at once
])
def test_a_damaged_checkpoint_state_is_one_line_naming_its_field(saved_run, tmp_path, edit, field):
    from lewisrag.training.rag import train_rag

    cfg, saved = saved_run
    run = tmp_path / "run"
    shutil.copytree(saved, run)
    state = run / "checkpoint" / "state.json"
    state.write_text(json.dumps(edit(json.loads(state.read_text()))))
    with pytest.raises(InputError, match=f"field '{re.escape(field)}'") as e:
        train_rag(cfg, run, resume=True)
    assert str(state) in str(e.value)
    assert state.read_text() == json.dumps(edit(json.loads((saved / "checkpoint" / "state.json").read_text())))  # untouched


@pytest.mark.parametrize("damage", [b'{"step": 1, "loss"', b"\xff\xfe\n", b"[1, 2]\n"])
def test_a_damaged_checkpoint_log_is_one_line_naming_its_line(saved_run, tmp_path, damage):
    """A bad line of the checkpoint's log.jsonl was copied into the resumed run's log."""
    from lewisrag.training.rag import train_rag

    cfg, saved = saved_run
    run = tmp_path / "run"
    shutil.copytree(saved, run)
    log = run / "checkpoint" / "log.jsonl"
    good = log.read_bytes()
    bad_line = good.count(b"\n") + 1
    assert bad_line >= 2
    log.write_bytes(good + damage)
    with pytest.raises(InputError, match=re.escape(f"{log}:{bad_line}: not a JSON object")):
        train_rag(cfg, run, resume=True)
    assert (run / "log.jsonl").read_bytes() == (saved / "log.jsonl").read_bytes()  # the run's own log untouched


def test_a_finished_run_without_its_checkpoint_is_not_trained_again_by_resume(saved_run, tmp_path):
    """checkpoint/ is the largest folder, the one a user deletes once a run is done: --resume then found
    nothing to resume from, trained again from step 0 and replaced the model in final/. It is refused."""
    from lewisrag.data.io import InputError
    from lewisrag.training.rag import train_rag

    cfg, saved = saved_run
    run = shutil.copytree(saved, tmp_path / "run")
    shutil.rmtree(run / "checkpoint")
    model = (run / "final" / "rag.json").read_bytes()
    with pytest.raises(InputError, match="a finished run .final/. whose checkpoint/ is gone: there is nothing to resume"):
        train_rag(cfg, run, resume=True)
    assert (run / "final" / "rag.json").read_bytes() == model and not (run / "checkpoint").exists()


@pytest.mark.parametrize("kill_at", ["first checkpoint", "random step"])
def test_sigkill_then_resume_equals_uninterrupted(rag_inputs, tmp_path, kill_at):
    """Killed once the first checkpoint exists, or at a random (seeded) step between checkpoints."""
    from lewisrag.training.rag import train_rag

    cfg = make_config(rag_inputs, steps=40, eval_every=10, save_every=5)
    cmd = [sys.executable, "-m", "lewisrag.cli", "train", "rag", *cli_flags(cfg), "--out", str(tmp_path / "killed")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    stderr = tmp_path / "killed.stderr"
    with open(stderr, "wb") as err:  # a file, not a pipe: a full pipe would stall the child
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
    state, log = tmp_path / "killed" / "checkpoint" / "state.json", tmp_path / "killed" / "log.jsonl"
    steps = random.Random(3).randint(6, 34)  # past a checkpoint, never on one's step

    def reached() -> bool:
        if kill_at == "first checkpoint":
            return state.exists()
        return log.exists() and log.read_bytes().count(b"\n") >= steps

    deadline = time.time() + 120
    while not reached() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, stderr.read_text()[-2000:]
    assert not (tmp_path / "killed" / "final").exists()  # it really died mid-run
    r = subprocess.run([*cmd, "--resume"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]

    with like_the_cli():  # float sums depend on the thread count and on the library that multiplies
        train_rag(cfg, tmp_path / "straight")
    assert log_lines(tmp_path / "killed") == log_lines(tmp_path / "straight")
    assert len(log_lines(tmp_path / "straight")) == 40
    for model in ("final", "best"):
        a, b = weights(tmp_path / "killed" / model), weights(tmp_path / "straight" / model)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("shared", [False, True], ids=["own-search", "shared-retrieval"])
def test_two_processes_equal_one_process(rag_inputs, tmp_path, shared):
    """With --shared-retrieval the first process searches for both (index.shared.NodeSearch): the same result."""
    from lewisrag.index.encoders import DPRCheckpoint

    # one step (of two accumulated micro-batches): AdamW's later steps divide by √v, which turns
    # rounding-level gradient differences on near-zero entries into visible ones
    # with a shared search, the main process's dev evaluation searches its own index alone
    cfg = make_config(rag_inputs, steps=1, grad_accum=2, eval_every=1 if shared else 0, warmup=0.0)
    accelerate = Path(sys.executable).with_name("accelerate")
    # `--multi_gpu` selects accelerate's torchrun launcher, which also runs CPU processes (gloo);
    # accelerate 1.x runs `--cpu --num_processes 2` as a single process unless MPI is configured
    cmd = [str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--main_process_port", str(_free_port()), "--mixed_precision", "no", "--dynamo_backend", "no",
           "-m", "lewisrag.cli", "train", "rag", *cli_flags(cfg), "--device", "cpu", "--out", str(tmp_path / "two"),
           "--json", *(["--shared-retrieval"] if shared else [])]
    r = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    assert summary["processes"] == 2 and summary["search"] == ("node" if shared else "faiss")
    saved = json.loads((tmp_path / "two" / "checkpoint" / "state.json").read_text())
    assert len(saved["rng_ranks"]) == 1 and saved["rng_ranks"][0] != saved["rng"]  # rank 1's own, gathered by rank 0
    # the reference run in a subprocess too: same thread settings as the launched processes
    one_cmd = [sys.executable, "-m", "lewisrag.cli", "train", "rag", *cli_flags(cfg), "--device", "cpu", "--out", str(tmp_path / "one")]
    r1 = subprocess.run(one_cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300)
    assert r1.returncode == 0, r1.stderr[-3000:]
    two, one = weights(tmp_path / "two" / "final"), weights(tmp_path / "one" / "final")
    start = DPRCheckpoint.load(rag_inputs["dpr"]).question_encoder.state_dict()
    assert any(not torch.equal(one[f"question_encoder.{k}"], v) for k, v in start.items())  # the retriever moved
    # AdamW's first step moves each weight by lr * sign(gradient); a gradient at rounding level
    # (|g| ~ 1e-9, e.g. a LayerNorm bias the loss barely touches) can take either sign when its sum
    # is split across two processes. Every other weight must agree to fp32 tolerance.
    total = flipped = 0
    for k in one:
        close = torch.isclose(two[k], one[k], rtol=1e-5, atol=1e-5)
        total, flipped = total + close.numel(), flipped + int((~close).sum())
    assert flipped <= max(1, total // 10_000), f"{flipped} of {total} weights differ"
    l1 = [json.loads(x) for x in log_lines(tmp_path / "one")]
    l2 = [json.loads(x) for x in log_lines(tmp_path / "two")]
    assert [round(x["loss"], 4) for x in l1] == [round(x["loss"], 4) for x in l2]
    assert [x.get("dev_em") for x in l1] == [x.get("dev_em") for x in l2]


def test_a_second_run_into_the_same_folder_is_refused_while_the_first_trains(rag_inputs, tmp_path):
    """Two `train rag` into one --out interleaved their checkpoints and logs; the writing process
    now holds the folder (a kernel lock) and a second one is refused before any model loads."""
    from lewisrag.data.outputs import exclusive
    from lewisrag.training.rag import train_rag

    cfg = make_config(rag_inputs, steps=1, eval_every=0, save_every=1)
    with exclusive(tmp_path / "run"):  # the first run, as another process would hold it
        (tmp_path / "run" / "log.jsonl").write_text('{"step": 1}\n')
        with pytest.raises(InputError, match="another lewisrag process is writing here"):
            train_rag(cfg, tmp_path / "run", resume=True)
        assert (tmp_path / "run" / "log.jsonl").read_text() == '{"step": 1}\n'


def test_retriever_lr_scale_and_train_kinds(rag_inputs, tmp_path):
    """--retriever-lr-scale 0 keeps the question encoder where it started while the generator moves,
    in train mode (unlike --freeze-retriever); --train-kinds trains on those questions alone."""
    from lewisrag.data.records import read_qa
    from lewisrag.index.encoders import DPRCheckpoint
    from lewisrag.training.rag import train_rag

    from lewisrag.data.io import LewisragWarning

    cfg = make_config(rag_inputs, steps=2, eval_every=0, save_every=2, retriever_lr_scale=0.0, train_kinds="short",
                      shared_retrieval=True)
    with pytest.warns(LewisragWarning, match="--shared-retrieval has no other process"):  # said, not ignored in silence
        summary = train_rag(cfg, tmp_path / "run")
    train = read_qa(cfg.train)
    assert summary["n_train"] == sum(ex.kind == "short" and bool(ex.answers) for ex in train)
    assert summary["n_train"] < sum(bool(ex.answers) for ex in train)  # the world has long-form questions too
    final = weights(tmp_path / "run" / "final")
    start = DPRCheckpoint.load(rag_inputs["dpr"]).question_encoder.state_dict()
    assert all(torch.equal(final[f"question_encoder.{k}"], v) for k, v in start.items())
    gen = load_file(str(Path(rag_inputs["gen"]) / "model.safetensors"))
    assert any(not torch.equal(final[f"generator.{k}"], v) for k, v in gen.items() if f"generator.{k}" in final)
    with pytest.raises(InputError, match="retriever-lr-scale"):
        train_rag(replace(cfg, retriever_lr_scale=-1.0), tmp_path / "bad")


def test_a_best_model_saved_between_checkpoints_is_listed_at_once(rag_inputs, tmp_path, monkeypatch):
    """The run's marker lists what it wrote after each checkpoint; best/, saved by an evaluation between
    two checkpoints, was listed only at the next one, so a kill in between left best/ looking like a
    user's folder, and `--resume` (or a reproduce rerun) refused the run's own model."""
    from lewisrag.data.outputs import written_files
    from lewisrag.training import checkpoint as C
    from lewisrag.training.rag import train_rag

    real, calls = C.save_checkpoint, []

    def killed_at_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # the kill: step 4's checkpoint (the third: step 3's new best wrote one), after step 3's evaluation saved best/
        return real(*args, **kwargs)

    monkeypatch.setattr(C, "save_checkpoint", killed_at_the_second)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        train_rag(make_config(rag_inputs, steps=5, eval_every=3, save_every=2), out)
    assert (out / "best").is_dir() and "best" in written_files(out)
