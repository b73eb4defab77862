"""`train dpr`'s starting folders and its self-mining: memory bounded over a large corpus, every unused
starting weight refused, config.json's architectures read as the list of names it must be, the mining
step rounded as warmup's, and the summary's final loss said to be a mean."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import run_main
from lewisrag.data.io import InputError
from lewisrag.data.records import read_passages, read_qa
from lewisrag.index.encoders import dpr_layout
from lewisrag.scoring.aggregate import mean
from lewisrag.training import dpr as dpr_module
from lewisrag.training import negatives
from lewisrag.training.dpr import DPRTrainConfig, init_encoders, starting_encoder, train_dpr
from lewisrag.training.optim import warmup_steps
from lewisrag.training.tokenizer import bert_wordpiece_tokenizer

TINY = dict(vocab_size=300, hidden_size=16, layers=1, heads=2, device="cpu")


def _texts(corpus) -> list[str]:
    return [f"{p.title} {p.text}" for p in read_passages(corpus["passages"])] + [ex.question for ex in read_qa(corpus["qa"])]


def _checkpoint(path, texts, kind: str = "BertModel", layers: int = 1):
    """A tiny BERT-like checkpoint of the class `kind` (a head on it or none) with a WordPiece tokenizer."""
    import transformers

    tok = bert_wordpiece_tokenizer(texts, 300)
    electra = dict(embedding_size=16) if kind.startswith("Electra") else {}  # as wide as its layers: no projection
    config_class = transformers.ElectraConfig if electra else transformers.BertConfig
    config = config_class(vocab_size=len(tok), hidden_size=16, num_hidden_layers=layers, num_attention_heads=2,
                          intermediate_size=32, max_position_embeddings=128, **electra)
    getattr(transformers, kind)(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _dpr_folder(path, texts, architectures):
    """A transformers DPRQuestionEncoder folder whose config.json's architectures is `architectures`."""
    from transformers import DPRConfig, DPRQuestionEncoder

    tok = bert_wordpiece_tokenizer(texts, 300)
    DPRQuestionEncoder(DPRConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=32, max_position_embeddings=128)).save_pretrained(path)
    tok.save_pretrained(path)
    config = json.loads((path / "config.json").read_text())
    config["architectures"] = architectures
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_self_mining_scores_the_questions_a_part_at_a_time(tiny_corpus, monkeypatch):
    """Mining took the top passages of one (questions, passages) score matrix: NQ's 58,880 questions over
    a cut of a million passages, the recipe of docs/real-data.md, needed some 235 GB there. The parts
    stay within SCORE_BYTES and mine what the whole matrix mined; a matrix within it is scored whole."""
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    cfg = DPRTrainConfig(**TINY)
    q_enc, c_enc, tok = init_encoders(cfg, _texts(tiny_corpus))
    scored, topk = [], torch.Tensor.topk

    def spy(self, *args, **kwargs):
        scored.append(tuple(self.shape))
        return topk(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "topk", spy)
    whole = negatives.mine_self_negatives(q_enc, c_enc, tok, cfg, qa, passages)
    assert scored == [(30, 60)]  # the scores of all 30 questions over the 60 passages, as before
    scored.clear()
    monkeypatch.setattr(negatives, "SCORE_BYTES", 7 * 60 * 4, raising=False)  # 7 questions' float32 scores
    assert negatives.mine_self_negatives(q_enc, c_enc, tok, cfg, qa, passages) == whole
    assert scored == [(6, 60)] * 5  # equal parts within it, no lone last row
    # both of the small preset's mining passes (its QA retriever's, and the tasks' retriever's with --tasks) are one part
    monkeypatch.undo()
    assert 18_600 * 4_016 * 4 <= negatives.SCORE_BYTES


def test_a_bert_start_whose_config_leaves_layers_unused_is_refused(tiny_corpus, tmp_path, monkeypatch, capsys):
    """A two-layer checkpoint whose config.json was edited to one layer trained on its first layer, the
    second dropped in silence: AutoModel reports it as unexpected, and every such weight was allowed
    so as to drop a pretraining head."""
    start = _checkpoint(tmp_path / "bert", _texts(tiny_corpus), layers=2)
    config = json.loads((start / "config.json").read_text())
    (start / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    code, _, err = run_main(monkeypatch, capsys, "train", "dpr", "--train", tiny_corpus["qa"], "--passages",
                            tiny_corpus["passages"], "--out", tmp_path / "dpr", "--steps", 1, "--batch-size", 8,
                            "--device", "cpu", "--init", start)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {start / 'model.safetensors'}: --init: its config.json's BERT leaves weights of the "
                          "checkpoint unused (16; the first: encoder.layer.1."), err
    assert not (tmp_path / "dpr").exists()


@pytest.mark.parametrize("kind", ["BertForPreTraining", "BertForMaskedLM", "ElectraForPreTraining"])
def test_a_bert_start_leaves_out_its_pretraining_heads_and_pooler(tiny_corpus, tmp_path, kind):
    """Pretraining heads (BERT's cls.*, ELECTRA's discriminator) and the pooler are what DPR never runs:
    they stay excused while every other unused weight is refused."""
    start = _checkpoint(tmp_path / kind, _texts(tiny_corpus), kind)
    _, weights, _ = starting_encoder(str(start), "--init")
    assert weights and all(k.startswith("bert_model.") and ".pooler." not in k for k in weights)


@pytest.mark.parametrize("architectures", [5, [["DPRQuestionEncoder"]], "DPRQuestionEncoder", [None]])
def test_architectures_that_are_no_list_of_names_are_one_line(tiny_corpus, tmp_path, monkeypatch, capsys, architectures):
    """A number or a nested list was a TypeError's traceback (exit 3); a string was read character by
    character (`train dpr` took a DPRQuestionEncoder folder for "a DPR config whose architectures names
    neither ...")."""
    folder = _dpr_folder(tmp_path / "q", _texts(tiny_corpus), architectures)
    said = f"{folder / 'config.json'}: field 'architectures': expected a list of class names, got {architectures!r}"
    code, _, err = run_main(monkeypatch, capsys, "train", "dpr", "--out", tmp_path / "dpr", "--steps", 0, "--init", folder)
    assert code == 2 and err.strip() == f"error: {said}", err
    with pytest.raises(InputError) as refused:
        dpr_layout(folder)  # index build, eval retrieval, index cut: a transformers DPR folder told by its architectures
    assert str(refused.value) == said
    assert not (tmp_path / "dpr").exists()


def test_self_mining_starts_at_the_share_of_the_steps_rounded_as_warmup(tiny_corpus, tmp_path, monkeypatch):
    """`--self-negatives-at 0.58 --steps 50` mined after 28 steps: int() cut 0.58 x 50 = 28.999... to 28,
    where the warmup rounds the same share to 29 (`optim.warmup_steps`)."""
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    done = []

    class Mined(Exception):
        pass

    def mine(*args, **kwargs):
        raise Mined(len(done))

    monkeypatch.setattr(dpr_module, "mine_self_negatives", mine)
    with pytest.raises(Mined) as mined:
        train_dpr(DPRTrainConfig(steps=50, batch_size=8, self_negatives_at=0.58, **TINY), qa, passages, tmp_path / "dpr",
                  on_step=lambda step, loss: done.append(step))
    assert mined.value.args == (29,)
    assert warmup_steps(0.5, 800) == 400  # the small preset's mining step, as it was


def test_the_summary_says_its_final_loss_is_a_mean(tiny_corpus, tmp_path, monkeypatch, capsys):
    """The table's "final loss" was the mean of the last 20 steps' losses, said nowhere: the progress
    bar's last loss differs from it. lewisrag_dpr.json's final_loss stays that mean."""
    losses = []
    train = dpr_module.train_dpr

    def recorded(cfg, examples, passages, out, on_step, **kwargs):
        return train(cfg, examples, passages, out, lambda step, loss: (losses.append(loss), on_step(step, loss)), **kwargs)

    monkeypatch.setattr(dpr_module, "train_dpr", recorded)
    code, out, err = run_main(monkeypatch, capsys, "train", "dpr", "--train", tiny_corpus["qa"], "--passages",
                              tiny_corpus["passages"], "--out", tmp_path / "dpr", "--steps", 22, "--batch-size", 8,
                              "--device", "cpu", "--hidden-size", 16, "--layers", 1, "--vocab-size", 300,
                              "--self-negatives-at", 0)
    assert code == 0, err
    assert "final loss (mean of last 20 steps)" in out
    meta = json.loads((tmp_path / "dpr" / "lewisrag_dpr.json").read_text())
    assert len(losses) == 22 and meta["final_loss"] == mean(losses[-20:]) != losses[-1]


def test_a_batch_of_one_without_hard_negatives_is_warned_for_its_size(tmp_path):
    """`--batch-size 1 --no-hard-negatives` trained every step on a loss of 0, warned as "questions sharing
    one gold passage": the cause is the batch of one, whose only passage is its own gold one."""
    import warnings

    from conftest import one_thread, write_jsonl
    from lewisrag.data.io import LewisragWarning
    from lewisrag.data.records import read_passages, read_qa
    from lewisrag.training.configs import DPRTrainConfig
    from lewisrag.training.dpr import train_dpr

    p = write_jsonl(tmp_path / "p.jsonl", [{"id": f"p{i}", "title": f"T{i}", "text": f"Thing{i} is red."} for i in range(4)])
    q = write_jsonl(tmp_path / "q.jsonl", [{"id": f"q{i}", "question": f"What colour is thing{i}?", "answers": ["red"],
                                           "gold_passage_ids": [f"p{i}"]} for i in range(4)])
    cfg = DPRTrainConfig(vocab_size=300, hidden_size=16, layers=1, heads=2, batch_size=1, steps=2, device="cpu",
                         hard_negatives=False, self_negatives_at=0)
    with one_thread(), warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        meta = train_dpr(cfg, read_qa(q), read_passages(p), tmp_path / "out")
    ours = [str(w.message) for w in said if issubclass(w.category, LewisragWarning)]
    assert meta["n_steps_no_negative"] == 2 and len(ours) == 1, ours
    assert "--batch-size 1" in ours[0] and "raise --batch-size" in ours[0] and "sharing one gold" not in ours[0], ours[0]
