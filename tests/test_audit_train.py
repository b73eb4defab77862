"""The training commands' inputs and run folders: a resume after a kill in the middle of a folder's
replacement, a resume with other settings (refused naming the flags, whether or not a checkpoint
was saved; the same file by another path, or gradient checkpointing, accepted), and a batch size
larger than the training data."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import run_main
from lewisrag.data.io import InputError
from test_rag_train import log_lines, make_config, rag_inputs  # noqa: F401  (session fixture)


def _killed_at(cfg, out: Path, step: int) -> None:
    """`cfg`'s run in `out`, stopped as a kill would after `step` steps (its later checkpoints unsaved)."""
    from lewisrag.training.rag import train_rag

    def stop(done: int, total: int, record: dict) -> None:
        if done == step:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_rag(cfg, out, on_progress=stop)


@pytest.mark.parametrize("left", ["checkpoint moved aside", "best replaced, its old one left"])
def test_a_resume_after_a_kill_between_the_renames_of_a_replace_goes_on(rag_inputs, tmp_path, left):
    """A kill between the two renames that replace checkpoint/ (or best/) left `.checkpoint.old`: the
    resume read it, then its next checkpoint refused the run's own folder as a user's (exit 2)."""
    from lewisrag.training.rag import train_rag

    cfg = make_config(rag_inputs, steps=4, eval_every=2, save_every=2)
    run = tmp_path / "run"
    _killed_at(cfg, run, 3)
    if left == "checkpoint moved aside":
        os.replace(run / "checkpoint", run / ".checkpoint.old")
    else:
        shutil.copytree(run / "best", run / ".best.old")
    assert train_rag(cfg, run, resume=True)["steps"] == 4
    assert sorted(os.listdir(run)) == [".lewisrag", "best", "checkpoint", "config.json", "final", "log.jsonl"]
    train_rag(cfg, tmp_path / "straight")
    assert log_lines(run) == log_lines(tmp_path / "straight")


def test_a_resume_with_other_settings_names_each_flag_and_takes_a_file_by_another_path(rag_inputs, tmp_path,
                                                                                      monkeypatch):
    from dataclasses import replace

    from lewisrag.training.rag import train_rag

    cfg = make_config(rag_inputs, steps=3, eval_every=0, save_every=1)
    run = tmp_path / "run"
    _killed_at(cfg, run, 2)
    with pytest.raises(InputError, match=re.escape("field 'config': --resume with other settings than the run's: "
                                                   "--batch-size 2 (the run's: 4); --lr 0.5 (the run's: 0.01)")):
        train_rag(replace(cfg, batch_size=2, lr=0.5), run, resume=True)
    # the training file named from another folder, and activations recomputed to save memory: the same run
    monkeypatch.chdir(rag_inputs["world"])
    same = replace(cfg, train="train.jsonl", gradient_checkpointing=True)
    assert train_rag(same, run, resume=True)["steps"] == 3


def test_a_resume_before_the_first_checkpoint_is_the_same_run_or_refused(rag_inputs, tmp_path):
    """Killed before its first checkpoint, a run resumed with other settings started afresh under them
    in silence, keeping the first settings' best/ where no evaluation replaced it."""
    from dataclasses import replace

    from lewisrag.training.rag import train_rag

    cfg = make_config(rag_inputs, steps=4, eval_every=3, save_every=4)
    run = tmp_path / "run"
    _killed_at(cfg, run, 2)
    assert not (run / "checkpoint").exists()  # and no best/: a new best writes a checkpoint first
    with pytest.raises(InputError, match=re.escape(f"{run / 'config.json'}: field 'config': --resume with other "
                                                   "settings than the run's: --eval-every 0 (the run's: 3)")):
        train_rag(replace(cfg, eval_every=0), run, resume=True)
    (run / "config.json").write_text("[]")
    with pytest.raises(InputError, match="field '\\(top level\\)'"):
        train_rag(cfg, run, resume=True)


def test_train_dpr_refuses_a_batch_larger_than_its_questions(tiny_corpus, tmp_path, monkeypatch, capsys):
    """30 questions and --batch-size 31: every step trained on the 30, a smaller batch than asked, exit 0."""
    out = tmp_path / "dpr"
    code, _, err = run_main(monkeypatch, capsys, "train", "dpr", "--train", tiny_corpus["qa"], "--passages",
                            tiny_corpus["passages"], "--out", out, "--steps", 1, "--batch-size", 31, "--hidden-size", 16,
                            "--layers", 1, "--vocab-size", 300, "--device", "cpu")
    assert code == 2 and err.strip() == ("error: --batch-size: 31 exceeds the 30 training questions with a gold passage "
                                         "in --passages")
    assert not out.exists()


def test_train_stitched_refuses_a_batch_larger_than_its_examples(rag_inputs, tmp_path):
    from lewisrag.data.records import read_qa
    from lewisrag.training.stitched_train import StitchedTrainConfig, train_stitched

    train = rag_inputs["world"] / "train.jsonl"
    n = sum(1 for ex in read_qa(train) if ex.kind == "short" and ex.answers and ex.gold_passage_ids)
    cfg = StitchedTrainConfig(index=str(rag_inputs["index"]), generator=str(rag_inputs["gen"]), train=str(train),
                              train_kinds="short", k=2, steps=1, batch_size=n + 1, device="cpu")
    with pytest.raises(InputError, match=re.escape(f"--batch-size: {n + 1} exceeds the {n} training examples with an "
                                                   f"answer and a gold passage id in {train} of kinds short")):
        train_stitched(cfg, tmp_path / "stitched")
    assert not (tmp_path / "stitched").exists()


@pytest.mark.parametrize("length", [2, 3])
def test_train_rag_refuses_a_target_length_with_no_room_for_an_answer(rag_inputs, tmp_path, length):
    """BART's targets are the decoder start token, <s>, the answer and </s>: at 3 every target was
    empty, and at 2 the tokenizer read max_length 1 as no truncation, so whole answers trained (exit 0)."""
    from lewisrag.training.rag import train_rag

    with pytest.raises(InputError, match=re.escape(f"--max-target-length: must be at least 4 with this generator's "
                                                   f"tokenizer (the decoder start token, its 2 special tokens and one "
                                                   f"answer token), got {length}")):
        train_rag(make_config(rag_inputs, steps=1, max_target_length=length), tmp_path / "run")
    assert not (tmp_path / "run").exists()
