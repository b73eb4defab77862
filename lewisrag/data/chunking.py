"""Split documents into disjoint passages of at most N words, as the paper split Wikipedia into
100-word passages (Lewis et al. 2020, section 3; Karpukhin et al. 2020).

A "word" is a run of non-space characters, except that every CJK character (and CJK punctuation)
counts as one word by itself, with the combining marks and variation selectors written after it
(a decomposed か + ゛, a kanji's ideographic variation selector): Chinese and Japanese text has no
spaces, so it is chunked by characters, and mixed text counts each Latin word and each CJK
character once. Pieces are cut from the original text, so they keep its spacing; joining them
gives the text back up to whitespace.

>>> chunk_text("one two three four five", words=2)
['one two', 'three four', 'five']
>>> chunk_text("检索增强生成模型", words=3)
['检索增', '强生成', '模型']
>>> chunk_text("RAG 模型很好", words=2)
['RAG 模', '型很', '好']
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from lewisrag.data.records import Passage

# Hiragana/Katakana, CJK extension A, unified ideographs, compatibility ideographs, Hangul syllables,
# CJK symbols and punctuation, full-width forms, and the ideographs past U+FFFF (extension B on): each
# character is one unit. The ideographic space U+3000 is a space, as \s says: a unit of it alone would
# be a passage of no text.
_CJK = ("\u3001-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\uff00-\uffef"
        "\U00020000-\U0003134f")
# what belongs to the character before it: combining marks (diacritics, their extensions and
# supplement, those for symbols, half marks), the kana voicing marks, variation selectors and the
# ideographic ones (U+E0100-U+E01EF). A unit of them alone would start a passage with a mark of no base.
_MARKS = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f\u3099\u309a\ufe00-\ufe0f\U000e0100-\U000e01ef"
_UNIT = re.compile(f"[{_CJK}][{_MARKS}]*|[^\\s{_CJK}]+")


def count_units(text: str) -> int:
    """Words as chunk_text counts them.

    >>> count_units("RAG 模型 is good")
    5
    """
    return sum(1 for _ in _UNIT.finditer(text))


def chunk_text(text: str, words: int = 100) -> list[str]:
    """Disjoint consecutive pieces of `text`, each at most `words` words, in order, none empty."""
    if words < 1:
        raise ValueError(f"words must be at least 1, got {words}")
    spans = [m.span() for m in _UNIT.finditer(text)]
    return [text[spans[i][0] : spans[min(i + words, len(spans)) - 1][1]] for i in range(0, len(spans), words)]


def chunk_documents(docs: Iterable[Passage], words: int = 100) -> list[Passage]:
    """Every document's pieces as passages with the document's title and ids "<docid>-<k>" (k from 0).

    The ids are unique when the document ids are: the text after the last '-' is the piece number,
    so an id splits back into one (document, piece) pair.

    >>> chunk_documents([Passage("d1", "Title", "a b c")], words=2)
    [Passage(id='d1-0', title='Title', text='a b'), Passage(id='d1-1', title='Title', text='c')]
    """
    return [Passage(f"{doc.id}-{k}", doc.title, piece) for doc in docs for k, piece in enumerate(chunk_text(doc.text, words))]
