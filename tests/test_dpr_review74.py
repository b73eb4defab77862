"""`train dpr` review 74: a continued checkpoint's default limits, a DPR file without passage ids, and the
saved tokenizer's question limit."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from lewisrag.data.io import InputError
from lewisrag.data.records import Passage, read_passages, read_qa
from lewisrag.index.encoders import META_FILE, DPRCheckpoint, tokenizer_fingerprint
from lewisrag.training.dpr import DPRTrainConfig, train_dpr

TINY = dict(vocab_size=300, hidden_size=32, layers=1, heads=2, batch_size=4)


def test_a_checkpoint_without_recorded_limits_continues_within_its_positions(tiny_corpus, tmp_path):
    """A lewisrag_dpr.json without max_length / q_max_length (a hand-made file) loads at 256 and 64 tokens or
    its encoders' positions if fewer; continuing it trains at those, not at a flat 256 that overran 128 positions."""
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    train_dpr(DPRTrainConfig(steps=1, **TINY), qa, passages, tmp_path / "start")  # 128 positions
    meta_file = tmp_path / "start" / META_FILE
    meta = json.loads(meta_file.read_text())
    del meta["max_length"], meta["q_max_length"]
    meta_file.write_text(json.dumps(meta))
    long = [Passage(p.id, p.title, p.text + " and its leader is a country" * 60) for p in passages]  # past 128 tokens
    out = train_dpr(DPRTrainConfig(init=str(tmp_path / "start"), steps=1, batch_size=4), qa, long, tmp_path / "more")
    assert (out["max_length"], out["q_max_length"]) == (128, 64)
    loaded = DPRCheckpoint.load(tmp_path / "start").meta
    assert (loaded["max_length"], loaded["q_max_length"]) == (128, 64)  # the limits the start encodes with


def test_a_dpr_file_without_passage_ids_is_named_as_such(tiny_corpus, tmp_path):
    """DPR's older biencoder files carry contexts of title and text only: no gold ids, which is the file's
    doing, not --passages' lacking them."""
    passages = read_passages(tiny_corpus["passages"])
    records = [{"dataset": "x", "question": ex.question, "answers": ex.answers,
                "positive_ctxs": [{"title": "T", "text": "some text", "score": 1, "title_score": 0}],
                "negative_ctxs": [], "hard_negative_ctxs": []} for ex in read_qa(tiny_corpus["qa"])]
    path = tmp_path / "biencoder-old.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    qa = read_qa(path)
    assert not any(ex.gold_passage_ids for ex in qa)
    with pytest.raises(InputError, match=r"positive_ctxs\[\]\.passage_id .*carry only title and text") as e:
        train_dpr(DPRTrainConfig(steps=1, **TINY), qa, passages, tmp_path / "out")
    assert "found in --passages" not in str(e.value) and "\n" not in str(e.value)


def test_train_dpr_names_the_file_line_and_field_of_a_dpr_file_without_passage_ids(tiny_corpus, tmp_path, monkeypatch,
                                                                                      capsys):
    from conftest import run_main

    records = [{"dataset": "x", "question": ex.question, "answers": ex.answers,
                "positive_ctxs": [{"title": "T", "text": "some text"}], "hard_negative_ctxs": []}
               for ex in read_qa(tiny_corpus["qa"])]
    path = tmp_path / "biencoder-old.json"
    path.write_text(json.dumps(records, indent=1), encoding="utf-8")
    code, _, err = run_main(monkeypatch, capsys, "train", "dpr", "--train", path, "--passages", tiny_corpus["passages"],
                            "--out", tmp_path / "out", "--steps", "1")
    assert code == 2 and err.strip().splitlines()[-1].startswith(
        f"error: {path}:2: field 'positive_ctxs[0].passage_id': no training question names a gold passage id")
    assert not (tmp_path / "out").exists()


def test_the_saved_tokenizer_cuts_questions_at_q_max_length(tiny_corpus, tmp_path):
    """transformers users of the checkpoint's tokenizer (tokenizer(q, truncation=True)) cut questions where DPR
    trained on them, as `DPRCheckpoint.load` does; the tokenizer's fingerprint does not read the limit."""
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    train_dpr(DPRTrainConfig(steps=1, q_max_length=8, **TINY), qa, passages, tmp_path / "dpr")
    tok = AutoTokenizer.from_pretrained(tmp_path / "dpr" / "tokenizer")
    assert tok.model_max_length == 8
    assert len(tok(qa[0].question + " and who else" * 10, truncation=True)["input_ids"]) == 8
    ckpt = DPRCheckpoint.load(tmp_path / "dpr")
    assert ckpt.meta["q_max_length"] == ckpt.tokenizer.model_max_length == 8
    fingerprint = tokenizer_fingerprint(tok)
    tok.model_max_length = int(1e30)
    assert tokenizer_fingerprint(tok) == fingerprint
