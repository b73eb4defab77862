"""Data for generator pretraining: the tokenizer, BART text infilling, and reading-comprehension pairs.

Everything here is pure Python on token-id lists and strings (no torch), so it is cheap to test.
Randomness comes only from the `random.Random` passed in.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from functools import lru_cache

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from lewisrag.data import questions as Q
from lewisrag.data.entities import passages
from lewisrag.data.records import Passage, QAExample
from lewisrag.data.world import fresh_entities
from lewisrag.rag_model.model import RagSettings, generator_input
from lewisrag.training.configs import SPECIALS

ATTRIBUTE_GROUPS = {  # report group of each question attribute (countries and organisations together)
    "leader": "leader/head", "head": "leader/head", "capital": "capital/hq", "headquarters": "capital/hq",
    "currency": "currency", "language": "language", "founded": "year", "population": "population/members",
    "members": "population/members",
}


# One pre-token per CJK character: BPE then merges each character's three UTF-8 bytes into one piece
# and never merges across characters. A Chinese name reads as the same pieces wherever it stands in a
# sentence (there are no spaces to anchor a byte-level BPE's words), so the generator copies what it
# reads; the world uses about 550 distinct characters, so a vocabulary of characters is small.
CJK_CHAR = r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]"


def train_generator_tokenizer(texts: Sequence[str], vocab_size: int, lang: str = "en"):
    """A byte-level BPE tokenizer with BART's special tokens (ids 0-4), trained on `texts`.

    English: a prefix space is added to every input, so a name at the start of an answer splits
    exactly as it does in the middle of a passage: the generator copies the same pieces it reads.
    Chinese (`lang="zh"`): every CJK character (and full-width punctuation) is its own pre-token, no
    prefix space (CJK_CHAR says why). Byte-level pieces never produce <unk>, in either language.
    """
    if lang not in ("en", "zh"):
        raise ValueError(f"lang must be en or zh, got {lang!r}")
    tok = Tokenizer(models.BPE())
    if lang == "zh":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(CJK_CHAR), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", pad_token="<pad>", eos_token="</s>",
                                   unk_token="<unk>", mask_token="<mask>", clean_up_tokenization_spaces=False,
                                   model_input_names=["input_ids", "attention_mask"])


def poisson(rng: random.Random, lam: float) -> int:
    """A Poisson(lam) draw by Knuth's method (lam is small: BART uses 3).

    >>> sorted({poisson(random.Random(s), 3.0) for s in range(200)})[:3]
    [0, 1, 2]
    """
    limit, k, p = math.exp(-lam), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


def mask_spans(n: int, rng: random.Random, ratio: float, lam: float) -> list[tuple[int, int]]:
    """Non-overlapping, sorted (start, length) spans covering about `ratio` of `n` tokens.

    Span lengths are Poisson(lam), at least 1 (BART's text infilling; its zero-length insertions are
    left out). Spans stop once round(ratio * n) tokens are covered; the last one is cut to fit. One
    unmasked token stays between two spans, so past `configs.max_mask_ratio(lam)` the random
    placement runs out of room and covers less than asked (PretrainConfig refuses such a ratio).

    >>> mask_spans(10, random.Random(0), 0.0, 3.0)
    []
    >>> sum(length for _, length in mask_spans(100, random.Random(0), 0.3, 3.0))
    30
    """
    budget = round(ratio * n)
    covered = [False] * n
    spans: list[tuple[int, int]] = []
    total, tries = 0, 0
    while total < budget and tries < 20 * n:
        tries += 1
        length = min(max(1, poisson(rng, lam)), budget - total)
        start = rng.randrange(0, n - length + 1)
        if any(covered[start - 1 if start else 0: start + length + 1]):
            continue  # keep one unmasked token between spans, so every span is its own <mask>
        covered[start:start + length] = [True] * length
        spans.append((start, length))
        total += length
    return sorted(spans)


def infill(ids: Sequence[int], spans: Sequence[tuple[int, int]], mask_id: int) -> list[int]:
    """`ids` with each span replaced by one `mask_id` (BART's text infilling input).

    >>> infill([10, 11, 12, 13, 14], [(1, 2)], 4)
    [10, 4, 13, 14]
    """
    out, pos = [], 0
    for start, length in spans:
        out += list(ids[pos:start]) + [mask_id]
        pos = start + length
    return out + list(ids[pos:])


def denoise_pair(ids: Sequence[int], rng: random.Random, ratio: float, lam: float, mask_id: int) -> tuple[list[int], list[int]]:
    """(corrupted input, original target) for one document's token ids, bos and eos included.

    Only the inner tokens are masked, so the input still starts with <s> and ends with </s>.
    """
    inner = list(ids[1:-1])
    spans = mask_spans(len(inner), rng, ratio, lam)
    return [ids[0]] + infill(inner, spans, mask_id) + [ids[-1]], list(ids)


def reading_pairs(examples: Sequence[QAExample], passages: Sequence[Passage]) -> list[tuple[str, str]]:
    """(generator input, answer) per example, reading its first gold passage (K=1, as RagModel builds it)."""
    settings, by_id = RagSettings(), {p.id: p for p in passages}
    out = []
    for ex in examples:
        gold = by_id[ex.gold_passage_ids[0]]
        out.append((generator_input(gold.title, gold.text, ex.question, settings), ex.answers[0]))
    return out


def fresh_update_examples(rng: random.Random, n: int, lang: str = "en") -> tuple[list[QAExample], list[Passage]]:
    """`n` questions about the time-varying facts (leader or head, population or members) of new
    entities, answered by snapshot B's passages: its wording ("took office in 2018", "elections are
    held every 5 years") differs from A's, and a reader trained on A's alone misreads its numbers."""
    examples: list[QAExample] = []
    docs: list[Passage] = []
    while len(examples) < n:
        (e,) = fresh_entities(rng, 1, lang)
        docs += passages(e, 1)
        for attr in ("leader", "population") if e.kind == "country" else ("head", "members"):
            template = rng.choice(Q.text_tables(lang).SHORT[attr])
            examples.append(Q.short_question(f"{e.slot}-b{len(examples)}", e, attr, template, snapshot=1))
    return examples[:n], docs


@lru_cache(maxsize=2)
def _template_patterns(lang: str) -> tuple[tuple[re.Pattern, str], ...]:
    pats = []
    for attr, templates in Q.text_tables(lang).SHORT.items():
        for t in templates:
            rx = re.sub(r"\\\{\w+\\\}", ".+", re.escape(t))  # every {field} of the template matches any text
            pats.append((re.compile(f"^{rx}$"), attr))
    return tuple(pats)


def attribute_of(question: str, lang: str = "en") -> str:
    """The attribute a short world question asks for, read off its template ('other' if none fits).

    >>> attribute_of("Who is the president of Palzer?"), attribute_of("How many people live in Dox?")
    ('leader', 'population')
    >>> attribute_of("卡温拉斯的首都是哪座城市？", "zh")
    'capital'
    """
    for rx, attr in _template_patterns(lang):
        if rx.match(question):
            return attr
    return "other"
