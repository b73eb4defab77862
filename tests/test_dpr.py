"""DPR training: a deterministic tokenizer, the loss falls, the checkpoint's shape and metadata."""

from __future__ import annotations

import doctest

import torch

from conftest import run_cli, write_jsonl
from lewisrag.data.records import read_passages, read_qa
from lewisrag.index.encoders import DPRCheckpoint, state_fingerprint
from lewisrag.training import tokenizer as tokenizer_module
from lewisrag.training.dpr import DPRTrainConfig, init_encoders, train_dpr, train_tokenizer
from lewisrag.training.negatives import mine_hard_negatives, mine_self_negatives

TINY = dict(vocab_size=300, hidden_size=32, layers=1, heads=2, batch_size=8)


def test_tokenizer_doctest_and_determinism(tiny_corpus):
    assert doctest.testmod(tokenizer_module).failed == 0
    texts = [p.text for p in read_passages(tiny_corpus["passages"])]
    a, b = train_tokenizer(texts, 200), train_tokenizer(texts, 200)
    assert a.get_vocab() == b.get_vocab() and len(a) == 200
    assert "[UNK]" not in a.tokenize(texts[0])  # every corpus character is in the alphabet
    assert a.tokenize("密码") == ["[UNK]", "[UNK]"]  # CJK split per character; unseen ones are unknown
    zh = train_tokenizer(["密码错误", "登录失败"], 40)
    assert zh.tokenize("密码") == ["密", "码"]


def test_hard_negatives_are_never_gold(tiny_corpus):
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    mined = mine_hard_negatives(qa, passages)
    assert len(mined) == len(qa)  # one per question: zip would let a short list pass
    for ex, row in zip(qa, mined):
        assert row is not None and passages[row].id not in ex.gold_passage_ids


def test_self_negatives_are_the_models_best_non_gold(tiny_corpus, tmp_path):
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    cfg = DPRTrainConfig(steps=6, self_negatives_at=0.5, **TINY)
    q_enc, c_enc, tok = init_encoders(cfg, [f"{p.title} {p.text}" for p in passages] + [ex.question for ex in qa])
    q_enc.eval(), c_enc.eval()
    mined = mine_self_negatives(q_enc, c_enc, tok, cfg, qa, passages, batch_size=3)
    with torch.no_grad():
        p = tok([x.title for x in passages], [x.text for x in passages], truncation="only_second",
                max_length=cfg.p_max_length, padding=True, return_tensors="pt")
        q = tok([ex.question for ex in qa], truncation=True, max_length=cfg.q_max_length, padding=True, return_tensors="pt")
        scores = q_enc(**q).pooler_output @ c_enc(**p).pooler_output.T  # (Q, N)
    assert len(mined) == len(qa)
    for ex, row, s in zip(qa, mined, scores):
        assert row is not None and passages[row].id not in ex.gold_passage_ids
        others = [float(s[i]) for i, x in enumerate(passages) if x.id not in ex.gold_passage_ids]
        assert abs(float(s[row]) - max(others)) < 1e-4
    # training with them runs and records the setting
    train_dpr(cfg, qa, passages, tmp_path / "ckpt")
    assert DPRCheckpoint.load(tmp_path / "ckpt").meta["config"]["self_negatives_at"] == 0.5


def test_training_lowers_the_loss_and_saves_two_encoders(tiny_corpus, tmp_path):
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    losses = []
    meta = train_dpr(DPRTrainConfig(steps=40, lr=3e-3, **TINY), qa, passages, tmp_path / "ckpt",
                     on_step=lambda s, loss: losses.append(loss))
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5
    ckpt = DPRCheckpoint.load(tmp_path / "ckpt")
    assert meta["ctx_fingerprint"] == state_fingerprint(ckpt.ctx_encoder) and ckpt.dim == 32
    # trained as one network, saved as two equal encoders that RAG fine-tuning can then separate
    q = ckpt.question_encoder.question_encoder.bert_model.state_dict()
    c = ckpt.ctx_encoder.ctx_encoder.bert_model.state_dict()
    assert all(torch.equal(q[k], c[k]) for k in q)
    assert not (tmp_path / "ckpt.partial").exists()


def test_same_seed_same_checkpoint(tiny_corpus, tmp_path):
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    a = train_dpr(DPRTrainConfig(steps=3, **TINY), qa, passages, tmp_path / "a")
    b = train_dpr(DPRTrainConfig(steps=3, **TINY), qa, passages, tmp_path / "b")
    assert a["ctx_fingerprint"] == b["ctx_fingerprint"]


def test_cli_no_usable_gold_ids_is_bad_input(tiny_corpus, tmp_path):
    qa = write_jsonl(tmp_path / "qa.jsonl", [{"id": "1", "question": "Who?", "answers": ["x"], "gold_passage_ids": ["nope"]}])
    r = run_cli("train", "dpr", "--train", str(qa), "--passages", str(tiny_corpus["passages"]), "--out", str(tmp_path / "o"), "--steps", "1")
    assert r.returncode == 2 and "gold_passage_ids" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


def test_init_from_a_local_pretrained_encoder(tiny_corpus, tmp_path):
    """--init: both encoders start from a BERT-like checkpoint directory and keep its tokenizer."""
    from transformers import BertConfig, BertModel

    from lewisrag.training.tokenizer import bert_wordpiece_tokenizer

    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    tok = bert_wordpiece_tokenizer([p.text for p in passages], 150)
    bert = BertModel(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=64, max_position_embeddings=128))
    bert.save_pretrained(tmp_path / "pre")
    tok.save_pretrained(tmp_path / "pre")
    train_dpr(DPRTrainConfig(init=str(tmp_path / "pre"), steps=0, batch_size=8), qa, passages, tmp_path / "ckpt")
    ckpt = DPRCheckpoint.load(tmp_path / "ckpt")
    loaded = ckpt.question_encoder.question_encoder.bert_model.state_dict()
    shared = [k for k in bert.state_dict() if k in loaded]
    assert len(shared) == len(loaded)  # every encoder weight came from the checkpoint (its pooler is unused)
    assert all(torch.equal(loaded[k], bert.state_dict()[k]) for k in shared)
    assert ckpt.tokenizer.get_vocab() == tok.get_vocab()


def test_init_continues_a_lewisrag_checkpoint(tiny_corpus, tmp_path):
    """--init on a `train dpr` checkpoint: its weights and tokenizer go on training; trained shared, it
    stays shared; a pair whose sides differ trains as two, its context side kept, not overwritten."""
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    train_dpr(DPRTrainConfig(steps=3, **TINY), qa, passages, tmp_path / "first")
    first = DPRCheckpoint.load(tmp_path / "first")
    train_dpr(DPRTrainConfig(init=str(tmp_path / "first"), steps=0, batch_size=8), qa, passages, tmp_path / "same")
    same = DPRCheckpoint.load(tmp_path / "same")
    assert same.ctx_fingerprint == first.ctx_fingerprint and same.tokenizer.get_vocab() == first.tokenizer.get_vocab()
    assert same.meta["config"]["shared"]

    # a question encoder moved apart from its context encoder, as RAG fine-tuning leaves it
    with torch.no_grad():
        for w in first.question_encoder.parameters():
            w.add_(0.01)
    first.save(tmp_path / "apart")
    meta = train_dpr(DPRTrainConfig(init=str(tmp_path / "apart"), steps=0, batch_size=8), qa, passages, tmp_path / "pair")
    pair = DPRCheckpoint.load(tmp_path / "pair")
    assert not meta["config"]["shared"] and pair.ctx_fingerprint == first.ctx_fingerprint
    assert state_fingerprint(pair.question_encoder) == state_fingerprint(first.question_encoder)
    moved = train_dpr(DPRTrainConfig(init=str(tmp_path / "apart"), steps=2, lr=1e-2, batch_size=8), qa, passages,
                      tmp_path / "moved")
    assert moved["ctx_fingerprint"] != first.ctx_fingerprint  # both sides train


def test_init_that_does_not_exist_is_bad_input(tiny_corpus, tmp_path):
    r = run_cli("train", "dpr", "--train", str(tiny_corpus["qa"]), "--passages", str(tiny_corpus["passages"]),
                "--out", str(tmp_path / "o"), "--init", str(tmp_path / "missing"), "--steps", "1")
    assert r.returncode == 2 and "pretrained encoder directory not found" in r.stderr and not (tmp_path / "o").exists()


def test_scratch_dropouts_reach_the_model_and_the_cli_checks_them(tiny_corpus, tmp_path):
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    texts = [p.text for p in passages]
    for dropout, attention in ((0.1, 0.1), (0.2, 0.0)):
        q_enc, c_enc, _ = init_encoders(DPRTrainConfig(dropout=dropout, attention_dropout=attention, **TINY), texts)
        for enc in (q_enc, c_enc):
            assert (enc.config.hidden_dropout_prob, enc.config.attention_probs_dropout_prob) == (dropout, attention)
    train_dpr(DPRTrainConfig(steps=2, attention_dropout=0.0, **TINY), qa, passages, tmp_path / "ckpt")
    ckpt = DPRCheckpoint.load(tmp_path / "ckpt")
    assert ckpt.question_encoder.config.attention_probs_dropout_prob == 0.0  # what RAG fine-tuning then runs with
    assert ckpt.meta["config"]["attention_dropout"] == 0.0
    r = run_cli("train", "dpr", "--train", str(tiny_corpus["qa"]), "--passages", str(tiny_corpus["passages"]),
                "--out", str(tmp_path / "o"), "--attention-dropout", "1")
    assert r.returncode == 2 and r.stderr.strip().endswith("--attention-dropout: must be in [0, 1), got 1.0")
    assert "Traceback" not in r.stderr and not (tmp_path / "o").exists()


def test_an_infinite_learning_rate_is_bad_input(tiny_corpus, tmp_path):
    """`lr > 0` let inf through: both encoders trained to NaN weights and the command exited 0."""
    r = run_cli("train", "dpr", "--train", str(tiny_corpus["qa"]), "--passages", str(tiny_corpus["passages"]),
                "--out", str(tmp_path / "o"), "--steps", "1", "--lr", "inf")
    assert r.returncode == 2 and r.stderr.startswith("error: --lr: must be a positive finite number"), r.stderr
    assert not (tmp_path / "o").exists()
    r = run_cli("train", "dpr", "--train", str(tiny_corpus["qa"]), "--passages", str(tiny_corpus["passages"]),
                "--out", str(tmp_path / "o"), "--steps", "1", "--lr", "1e40")  # float32 overflowed: a traceback
    assert r.returncode == 2 and r.stderr.strip() == "error: --lr: must be at most 3.4e+37 (AdamW divides it by 1 - beta1 = 0.1 into a float32), got 1e+40"
    assert not (tmp_path / "o").exists()
