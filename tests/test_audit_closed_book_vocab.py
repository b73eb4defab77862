"""Closed-book training and DPR's scratch vocabulary, audited: a closed-book run whose loss or weights
turn NaN went on and saved NaN weights; its config.json was written before training, so a run that
failed or was killed left a folder that looked begun-and-kept; and a WordPiece vocabulary that a
corpus of many characters (Chinese) made larger than --vocab-size was recorded as the size asked."""

from __future__ import annotations

import json
import random
import re
import warnings

import pytest
import torch

from conftest import one_thread, run_cli, write_jsonl
from lewisrag.data.io import InputError, LewisragWarning
from lewisrag.data.records import read_passages, read_qa
from lewisrag.index.encoders import META_FILE, DPRCheckpoint
from lewisrag.training import closed_book as CB
from lewisrag.training.dpr import DPRTrainConfig, train_dpr, train_tokenizer
from lewisrag.training.pretrain import SHIPPED_DIR

TINY_DPR = dict(hidden_size=32, layers=1, heads=2, batch_size=8, steps=1, hard_negatives=False, device="cpu")


def _closed_book(tiny_corpus, **kw) -> CB.ClosedBookConfig:
    base = dict(generator=str(SHIPPED_DIR / "generator-small"), train=str(tiny_corpus["qa"]), steps=3, batch_size=4,
                lr=1e-3, device="cpu")
    return CB.ClosedBookConfig(**{**base, **kw})


def test_closed_book_training_that_diverges_stops_and_writes_nothing(tiny_corpus, tmp_path):
    """lr 1e30: the loss was NaN from step 2 on, and the NaN weights were saved in final/."""
    with one_thread(), pytest.raises(InputError) as e:
        CB.train_closed_book(_closed_book(tiny_corpus, lr=1e30), tmp_path / "cb")
    assert re.fullmatch(r"--lr: the closed-book loss became nan at step \d+: training diverged; lower --lr "
                        r"\(now 1e\+30\)", str(e.value)), e.value
    assert not list(tmp_path.iterdir())  # no folder, no staging leftover


def test_closed_book_weights_that_turn_nan_at_the_last_step_are_caught(tiny_corpus, tmp_path, monkeypatch):
    """The loss of the last step is computed before its update: only the weights show that update's NaN."""
    step = CB.backward_step

    def nan_update(loss, opt, *a, **kw):
        out = step(loss, opt, *a, **kw)
        with torch.no_grad():
            opt.param_groups[0]["params"][0].fill_(float("nan"))
        return out

    monkeypatch.setattr(CB, "backward_step", nan_update)
    with one_thread(), pytest.raises(InputError, match=r"^--lr: the closed-book generator's weights hold NaN or inf after "
                                                       r"step 1: training diverged; lower --lr \(now 0\.001\)$"):
        CB.train_closed_book(_closed_book(tiny_corpus, steps=1), tmp_path / "cb")
    assert not list(tmp_path.iterdir())


def test_closed_book_failing_mid_training_leaves_no_config(tiny_corpus, tmp_path):
    """config.json was written before the first step: a run that stopped part-way left it behind, and
    its folder then refused the next run as not empty. A finished run writes every file at once."""
    def fail_at_step_2(step, steps, record):
        if step == 2:
            raise RuntimeError("killed")

    out = tmp_path / "cb"
    with one_thread(), pytest.raises(RuntimeError, match="killed"):
        CB.train_closed_book(_closed_book(tiny_corpus), out, fail_at_step_2)
    assert not (out / "config.json").exists() and not list(tmp_path.iterdir())
    with one_thread():
        summary = CB.train_closed_book(_closed_book(tiny_corpus, steps=2), out)
    assert summary["steps"] == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["cb"]
    assert sorted(p.name for p in out.iterdir()) == [".lewisrag", "config.json", "final", "log.jsonl"]  # the marker: the closed book is an output
    assert json.loads((out / "config.json").read_text())["steps"] == 2
    assert len((out / "log.jsonl").read_text().splitlines()) == 2


def _chinese_corpus(root):
    """30 passages of made-up Chinese names and facts over ~400 distinct characters: more than a
    50-token vocabulary can hold, since WordPiece keeps every character (twice)."""
    rng = random.Random(0)
    pool = [chr(c) for c in range(0x4E00, 0x4E00 + 400)]
    passages, questions = [], []
    for i in range(30):
        name, leader = "".join(rng.sample(pool, 3)), "".join(rng.sample(pool, 3))
        passages.append({"id": f"z{i}", "title": name, "text": f"{name}的领导人是{leader}。" + "".join(rng.sample(pool, 12))})
        questions.append({"id": f"q{i}", "question": f"{name}的领导人是谁？", "answers": [leader], "gold_passage_ids": [f"z{i}"]})
    return write_jsonl(root / "passages.jsonl", passages), write_jsonl(root / "qa.jsonl", questions)


def test_a_vocabulary_larger_than_asked_is_recorded_as_built_and_said(tmp_path):
    """lewisrag_dpr.json recorded vocab_size 50 for a model built with every character's two entries."""
    passages, qa = _chinese_corpus(tmp_path)
    with one_thread(), pytest.warns(LewisragWarning) as said:
        meta = train_dpr(DPRTrainConfig(vocab_size=50, **TINY_DPR), read_qa(qa), read_passages(passages), tmp_path / "dpr")
    ckpt = DPRCheckpoint.load(tmp_path / "dpr")
    built = len(ckpt.tokenizer)
    assert built > 50 and built == ckpt.question_encoder.config.vocab_size == ckpt.ctx_encoder.config.vocab_size
    assert meta["config"]["vocab_size"] == ckpt.meta["config"]["vocab_size"] == built
    assert meta["vocab_size_asked"] == ckpt.meta["vocab_size_asked"] == 50
    chars = sum(len(t) == 1 for t in ckpt.tokenizer.get_vocab())
    assert [str(w.message) for w in said if w.category is LewisragWarning] == [
        f"--vocab-size 50: the vocabulary has {built} tokens, as WordPiece keeps each of the corpus's {chars} characters "
        f"(word-initial and ##continuation) and the special tokens; the model is built with {built}, which "
        "lewisrag_dpr.json records (config.vocab_size; the asked size as vocab_size_asked)"]
    # the record as written before the asked size was kept: a checkpoint without the field still loads
    file = tmp_path / "dpr" / META_FILE
    old = {k: v for k, v in json.loads(file.read_text()).items() if k != "vocab_size_asked"}
    file.write_text(json.dumps({**old, "config": {**old["config"], "vocab_size": 50}}))
    assert DPRCheckpoint.load(tmp_path / "dpr").ctx_fingerprint == ckpt.ctx_fingerprint


def test_a_vocabulary_that_fits_is_built_as_before_without_a_word(tiny_corpus, tmp_path):
    """English text fills the asked size exactly: the same vocabulary, the same model, no warning."""
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    with one_thread(), warnings.catch_warnings():
        warnings.simplefilter("error", LewisragWarning)
        meta = train_dpr(DPRTrainConfig(vocab_size=300, **TINY_DPR), qa, passages, tmp_path / "dpr")
    ckpt = DPRCheckpoint.load(tmp_path / "dpr")
    texts = [f"{p.title} {p.text}" for p in passages] + [ex.question for ex in qa]
    assert ckpt.tokenizer.get_vocab() == train_tokenizer(texts, 300).get_vocab() and len(ckpt.tokenizer) == 300
    assert meta["config"]["vocab_size"] == 300 and meta["vocab_size_asked"] == 300


def test_the_english_worlds_vocabulary_is_the_size_asked():
    """The tiny preset's world and DPR size (the demo's digits rest on its vocabulary: unchanged)."""
    from lewisrag.data.world import build_world

    world = build_world(seed=0, entities=60)
    texts = [f"{p.title} {p.text}" for p in world.passages_a] + [ex.question for ex in world.questions["train"] if ex.gold_passage_ids]
    assert len(train_tokenizer(texts, 1000)) == 1000


def test_train_dpr_says_so_in_one_line(tmp_path):
    """The command: exit 0, the checkpoint written, one `warning:` line on stderr, not a traceback."""
    passages, qa = _chinese_corpus(tmp_path)
    r = run_cli("train", "dpr", "--train", str(qa), "--passages", str(passages), "--out", str(tmp_path / "dpr"),
                "--steps", "1", "--batch-size", "8", "--hidden-size", "32", "--layers", "1", "--vocab-size", "50",
                "--no-hard-negatives", "--device", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "vocab" in line]
    assert len(said) == 1 and said[0].startswith("warning: --vocab-size 50: the vocabulary has "), r.stderr
    assert "Traceback" not in r.stderr
    assert json.loads((tmp_path / "dpr" / META_FILE).read_text())["vocab_size_asked"] == 50
