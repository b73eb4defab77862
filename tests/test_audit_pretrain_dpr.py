"""Audit of `lewisrag pretrain` and `lewisrag train dpr`: inputs a researcher hits, each a defect fixed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch.nn.functional as real_F

from conftest import run_main
from lewisrag.data.io import InputError
from lewisrag.data.records import QAExample, read_passages, read_qa
from lewisrag.training import dpr as dpr_module
from lewisrag.training.dpr import DPRTrainConfig, train_dpr

TINY = dict(vocab_size=300, hidden_size=16, layers=1, heads=2, device="cpu")


def test_a_gold_passage_of_a_question_is_never_its_in_batch_negative(tiny_corpus, tmp_path, monkeypatch):
    """q0 has two gold passages, c0-0 and c1-0; q1's one gold is c1-0. In one batch, q1's positive
    (c1-0) was a negative for q0 although gold for it: only a passage equal to q0's *first* gold was
    masked, so the loss pushed q0 away from one of its own gold passages."""
    passages = read_passages(tiny_corpus["passages"])
    qa = [QAExample("q0", "Who leads both?", ["x"], ["c0-0", "c1-0"]), QAExample("q1", "Who leads one?", ["y"], ["c1-0"])]
    seen = []

    def cross_entropy(scores, target):
        seen.append(scores.detach().clone())
        return real_F.cross_entropy(scores, target)

    monkeypatch.setattr(dpr_module, "F", SimpleNamespace(cross_entropy=cross_entropy))
    train_dpr(DPRTrainConfig(steps=1, batch_size=2, hard_negatives=False, **TINY), qa, passages, tmp_path / "dpr")
    (scores,) = seen  # (2, 2): one question per row, the two positives as columns
    masked = (scores == -1e4).tolist()
    assert not masked[0][0] and not masked[1][1]  # each question's own positive stays
    assert sorted([masked[0][1], masked[1][0]]) == [False, True]  # c1-0 for q0 only: c0-0 is not gold for q1


def _bert_folder(path, texts, model_vocab: int, drop_pad: bool = False, segments: int = 2):
    """A tiny BERT-like checkpoint with the deterministic WordPiece tokenizer of `texts` (300 tokens)."""
    import json

    from transformers import BertConfig, BertModel

    from lewisrag.training.tokenizer import bert_wordpiece_tokenizer

    tok = bert_wordpiece_tokenizer(texts, 300)
    BertModel(BertConfig(vocab_size=model_vocab, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=128, type_vocab_size=segments)).save_pretrained(path)
    tok.save_pretrained(path)
    if drop_pad:
        conf = json.loads((path / "tokenizer_config.json").read_text())
        conf.pop("pad_token", None)
        (path / "tokenizer_config.json").write_text(json.dumps(conf))
    return path


@pytest.mark.parametrize("flags, folder, message", [
    # a tokenizer of 300 tokens beside embeddings of 100 rows: IndexError at the first step, exit 3
    (("--init",), dict(model_vocab=100), "field 'vocab_size': --init: its tokenizer has 300 tokens, the model's "
                                         "embeddings only 100: another model's tokenizer"),
    (("--init-question", "--init-context"), dict(model_vocab=100), "field 'vocab_size': --init-question: its tokenizer has 300"),
    # no pad token: transformers' ValueError "Asking to pad" at the first step, exit 3
    (("--init",), dict(model_vocab=300, drop_pad=True), "field 'pad_token': --init: its tokenizer has no pad token"),
    # one segment embedding, and a passage's text is segment 1: IndexError at the first step, exit 3
    (("--init",), dict(model_vocab=300, segments=1), "config.json: field 'type_vocab_size': --init: its tokenizer puts a "
                                                     "passage's text in segment 1, the model has 1 segment embedding(s)"),
])
def test_a_starting_checkpoint_whose_tokenizer_does_not_fit_is_one_line(tiny_corpus, tmp_path, monkeypatch, capsys, flags,
                                                                       folder, message):
    texts = [p.text for p in read_passages(tiny_corpus["passages"])]
    start = _bert_folder(tmp_path / "bert", texts, **folder)
    out = tmp_path / "dpr"
    code, _, err = run_main(monkeypatch, capsys, "train", "dpr", "--train", tiny_corpus["qa"], "--passages",
                            tiny_corpus["passages"], "--out", out, "--steps", 1, "--batch-size", 8, "--device", "cpu",
                            *[x for flag in flags for x in (flag, start)])
    assert code == 2 and err.startswith(f"error: {start}") and message in err and len(err.splitlines()) == 1, err
    assert not out.exists()


def test_a_lewisrag_checkpoint_given_as_one_side_of_a_pair_says_to_use_init(tiny_corpus, tmp_path, monkeypatch, capsys):
    """--init-question/--init-context on a `train dpr` checkpoint said "config.json: file not found (not a
    transformers model directory)", as if the folder held no model."""
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    train_dpr(DPRTrainConfig(steps=0, batch_size=8, **TINY), qa, passages, tmp_path / "ckpt")
    code, _, err = run_main(monkeypatch, capsys, "train", "dpr", "--train", tiny_corpus["qa"], "--passages",
                            tiny_corpus["passages"], "--out", tmp_path / "dpr", "--steps", 1, "--batch-size", 8,
                            "--device", "cpu", "--init-question", tmp_path / "ckpt", "--init-context", tmp_path / "ckpt")
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.strip() == (f"error: {tmp_path / 'ckpt'}: field 'init_question': --init-question: a DPR checkpoint lewisrag "
                           "wrote (both encoders and their tokenizer): give it as --init to train on")


def test_pretraining_that_diverges_exits_2_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """--set lr=1e30: the loss turned NaN at step 3, the NaN weights were saved, recipe.json held a bare
    `NaN` (not JSON), and the command exited 0."""
    out = tmp_path / "g"
    code, _, err = run_main(monkeypatch, capsys, "pretrain", "--preset", "tiny", "--steps", 3, "--device", "cpu",
                            "--set", "lr=1e30", "--out", out)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("error: --set: field 'lr': the loss became nan at step ") and "training diverged" in err
    assert not out.exists() and not list(tmp_path.iterdir())


def test_dpr_training_that_diverges_is_refused_and_writes_nothing(tiny_corpus, tmp_path):
    """--lr 1e30: the loss was NaN from step 2, the checkpoint was saved with NaN weights (every vector
    of an index built from it NaN), and the summary's final loss, a mean that skips NaN, read 3.3."""
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    with pytest.raises(InputError, match=r"^--lr: the loss became nan at step \d+: training diverged; lower --lr "
                                         r"\(now 1e\+30\)$"):
        train_dpr(DPRTrainConfig(steps=4, batch_size=8, lr=1e30, **TINY), qa, passages, tmp_path / "dpr")
    assert not list(tmp_path.iterdir())


def test_a_roberta_checkpoint_is_refused_as_a_starting_bert(tiny_corpus, tmp_path, monkeypatch, capsys):
    """RoBERTa's weights carry BERT's names, so `--init roberta-folder` fitted DPR's BERT and trained,
    exit 0: but RoBERTa numbers positions from its pad id + 1 and BERT from 0, so every token read
    another position's embedding."""
    from transformers import RobertaConfig, RobertaModel

    from lewisrag.training.tokenizer import bert_wordpiece_tokenizer

    start = tmp_path / "roberta"
    tok = bert_wordpiece_tokenizer([p.text for p in read_passages(tiny_corpus["passages"])], 300)
    RobertaModel(RobertaConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=32, max_position_embeddings=130)).save_pretrained(start)
    tok.save_pretrained(start)
    code, _, err = run_main(monkeypatch, capsys, "train", "dpr", "--train", tiny_corpus["qa"], "--passages",
                            tiny_corpus["passages"], "--out", tmp_path / "dpr", "--steps", 1, "--batch-size", 8,
                            "--device", "cpu", "--init", start)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {start / 'config.json'}: field 'model_type': --init: a roberta checkpoint numbers "
                          "positions from its pad id + 1")
    assert not (tmp_path / "dpr").exists()
