"""The stitched reader's training batches: with the gold passage at its retrieval rank and all k passages
(the reproduce stage's setting) an example stitches the same text each time it is drawn, so each text
is tokenized once; the batches must be the same to the token as tokenizing every step, and the
trained weights the same to the bit."""

from __future__ import annotations

import random
from dataclasses import replace

import torch

from conftest import one_thread
from lewisrag.training import stitched_train as S
from lewisrag.training.pretrain import SHIPPED_DIR
from test_rag_train import rag_inputs  # noqa: F401  (session fixture)
from test_stitched_length_and_overflow import _stitched_config


class _Counting:
    """A tokenizer counting the texts it encodes (a batch call counts each of its texts)."""

    def __init__(self, tokenizer):
        self.tokenizer, self.texts = tokenizer, 0

    def __call__(self, texts, **kw):
        self.texts += 1 if isinstance(texts, str) else len(texts)
        return self.tokenizer(texts, **kw)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def _batches(seed=0, n=12):
    rng = random.Random(seed)
    words = ["Marn", "Valdoria", "the capital", "is", "[1]", "river", "1945", "population", "of"]
    inputs = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 40))) for _ in range(5)]
    targets = [f"[{rng.randint(1, 3)}] {rng.choice(words)}" for _ in range(5)]
    return [([rng.choice(inputs) for _ in range(4)], [rng.choice(targets) for _ in range(4)]) for _ in range(n)]


def test_cached_batches_equal_batches_tokenized_each_step():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_DIR / "generator-small")
    plain, counting = S._Encoder(tokenizer, 24, 8), _Counting(tokenizer)
    cached = S._Encoder(counting, 24, 8, cache=True)
    batches = _batches()
    for inputs, targets in batches:
        for a, b in zip(plain(inputs, targets), cached(inputs, targets)):
            assert torch.equal(a, b)  # ids, attention mask, labels (padding -100), cut at the same limits
    distinct = len({t for i, _ in batches for t in i}) + len({t for _, t in batches for t in t})
    assert counting.texts == distinct  # once per distinct text, not once per draw (96 draws)
    padded = [plain(*b) for b in batches]
    assert any((m == 0).any() for _, m, _ in padded) and any((labels == -100).any() for *_, labels in padded)
    assert any(m.shape[1] == 24 for _, m, _ in padded)  # some inputs were cut: the limit is exercised


def test_training_with_the_cache_gives_the_weights_of_training_without_it(rag_inputs, tmp_path, monkeypatch):  # noqa: F811
    cfg = _stitched_config(rag_inputs, steps=3, gold_position="retrieved", cite_first=True)
    with one_thread():
        S.train_stitched(cfg, tmp_path / "cached")
        uncached = S._Encoder.__init__

        def no_cache(self, *a, cache=False, **kw):
            uncached(self, *a, cache=False, **kw)
        monkeypatch.setattr(S._Encoder, "__init__", no_cache)
        S.train_stitched(cfg, tmp_path / "plain")
    from safetensors.torch import load_file

    a, b = (load_file(tmp_path / d / "model.safetensors") for d in ("cached", "plain"))
    assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)
