"""Split documents into disjoint passages of at most N words, as the paper split Wikipedia into
100-word passages (Lewis et al. 2020, section 3; Karpukhin et al. 2020).

A "word" is a run of non-space characters, except that every CJK character (and CJK punctuation)
counts as one word by itself, with the combining marks and variation selectors written after it
(a decomposed か + ゛, a half-width ｶ + ﾞ, a kanji's ideographic variation selector): Chinese and
Japanese text has no spaces, so it is chunked by characters, and mixed text counts each Latin word
and each CJK character once. Full-width letters and digits are Latin ones in another width: a run of
them is one word (２０１６ as 2016). Korean separates its words with spaces, so Hangul goes by
spaces too. Pieces are cut from the original text, so they keep its spacing; joining them gives the
text back up to whitespace.

>>> chunk_text("one two three four five", words=2)
['one two', 'three four', 'five']
>>> chunk_text("检索增强生成模型", words=3)
['检索增', '强生成', '模型']
>>> chunk_text("RAG 模型很好", words=2)
['RAG 模', '型很', '好']
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from lewisrag.data.records import Passage

# Each of these characters is one unit: CJK radicals (the supplement, Kangxi) and ideographic
# description characters, CJK symbols and punctuation, Hiragana/Katakana, Bopomofo (and its extension),
# Kanbun, CJK strokes and the Katakana phonetic extensions, enclosed CJK letters and CJK compatibility,
# CJK extension A, unified ideographs, compatibility ideographs, the vertical, compatibility and small
# forms, the full-width and half-width forms but full-width letters and digits (FF10-FF19, FF21-FF3A,
# FF41-FF5A: Latin in another width) and half-width Hangul (FFA0-FFDC), the kana supplements, and the
# ideographs of planes 2 and 3 (extension B on, H included); the marks below are none of them, wherever
# they sit. Hangul syllables and jamo are not here: Korean words are separated by spaces. The
# ideographic space U+3000 is a space, as \s says: a unit of it alone would be a passage of no text.
_CJK = ("\u2e80-\u2fff\u3001-\u3029\u3030-\u303f\u3040-\u3098\u309b-\u30ff\u3100-\u312f\u3190-\u31ff"
        "\u3200-\u33ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\ufe10-\ufe1f\ufe30-\ufe6f"
        "\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff9d\uffe0-\uffef"
        "\U0001aff0-\U0001b16f\U00020000-\U0003ffff")
# what belongs to the character before it: combining marks (diacritics, their extensions and
# supplement, those for symbols, half marks), the ideographic and Hangul tone marks, the kana voicing
# marks (and their half-width forms), variation selectors and the ideographic ones (U+E0100-U+E01EF).
# A unit of them alone would start a passage with a mark of no base.
_MARKS = ("\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f\u302a-\u302f\u3099\u309a\uff9e\uff9f"
          "\ufe00-\ufe0f\U000e0100-\U000e01ef")
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


def iter_chunks(docs: Iterable[Passage], words: int = 100) -> Iterator[Passage]:
    """Every document's pieces as passages with the document's title and ids "<docid>-<k>" (k from 0),
    one at a time: `lewisrag chunk` writes them as they come, so memory holds no list of the output
    (3 M passages held were 1.1 GB).

    The ids are unique when the document ids are: the text after the last '-' is the piece number,
    so an id splits back into one (document, piece) pair.

    >>> list(iter_chunks([Passage("d1", "Title", "a b c")], words=2))
    [Passage(id='d1-0', title='Title', text='a b'), Passage(id='d1-1', title='Title', text='c')]
    """
    for doc in docs:
        for k, piece in enumerate(chunk_text(doc.text, words)):
            yield Passage(f"{doc.id}-{k}", doc.title, piece)


def chunk_documents(docs: Iterable[Passage], words: int = 100) -> list[Passage]:
    """`iter_chunks`' passages as a list.

    >>> chunk_documents([Passage("d1", "Title", "a b c")], words=2)
    [Passage(id='d1-0', title='Title', text='a b'), Passage(id='d1-1', title='Title', text='c')]
    """
    return list(iter_chunks(docs, words))
