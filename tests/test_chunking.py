"""Chunking: disjoint pieces of at most N words, order kept, nothing lost, CJK by characters."""

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lewisrag.data.chunking import chunk_documents, chunk_text, count_units
from lewisrag.data.records import Passage


def no_space(text):
    return re.sub(r"\s+", "", text)


def test_english_by_words():
    text = " ".join(f"w{i}" for i in range(250))
    pieces = chunk_text(text, words=100)
    assert [len(p.split()) for p in pieces] == [100, 100, 50]
    assert " ".join(pieces) == text


def test_chinese_by_characters():
    text = "检索增强生成把检索到的文档作为隐变量。" * 12  # 19 characters a sentence, no spaces
    pieces = chunk_text(text, words=100)
    assert [len(p) for p in pieces] == [100, 100, 28]
    assert "".join(pieces) == text


def test_mixed_text_counts_latin_words_and_cjk_characters():
    assert count_units("DPR 检索器 top-5 准确率") == 1 + 3 + 1 + 3
    assert chunk_text("DPR 检索器 top-5 准确率", words=4) == ["DPR 检索器", "top-5 准确率"]


def test_empty_and_whitespace_text_give_no_pieces():
    assert chunk_text("") == [] and chunk_text(" \n\t ") == []


def test_the_ideographic_space_is_a_space_and_far_ideographs_are_words():
    """U+3000 counted as a word: "一二三\u3000" in 3-word pieces made a passage of nothing but it,
    which index build then refused. Ideographs past U+FFFF ran together as one word."""
    assert chunk_text("一二三\u3000", words=3) == ["一二三"] and chunk_text("\u3000\u3000") == []
    assert count_units("𠀀𠀁𠀂") == 3 and chunk_text("𠀀𠀁𠀂", words=2) == ["𠀀𠀁", "𠀂"]


def test_full_width_letters_and_digits_run_together_as_latin_ones_do():
    """With --words 6, 该国建立于２０１６年。 split ２|０１６: each full-width digit was a word."""
    assert chunk_text("该国建立于２０１６年。", words=6) == ["该国建立于２０１６", "年。"]
    assert count_units("ＲＡＧ模型") == 1 + 2 and count_units("ＧＰＴ４ and ＢＥＲＴ") == 3
    assert count_units("２０１６，") == 2  # full-width punctuation is still a word of its own


def test_korean_goes_by_spaces():
    assert count_units("서울은 한국의 수도이다") == 3
    assert chunk_text("서울은 한국의 수도이다", words=2) == ["서울은 한국의", "수도이다"]
    assert count_units("ﾊﾝｸﾞﾙ 한\u302e국") == 4 + 1  # half-width Hangul letters too; a tone mark joins its word


def test_half_width_voicing_marks_stay_with_their_kana():
    assert count_units("ｶﾞｷﾞｸﾞ") == 3 and chunk_text("ｶﾞｷﾞｸﾟ", words=1) == ["ｶﾞ", "ｷﾞ", "ｸﾟ"]


@pytest.mark.parametrize("text", [
    "\u2f00\u2f01\u2f02",  # Kangxi radicals
    "\u2e80\u2e81\u2e82",  # CJK radicals supplement
    "\u3105\u3106\u3107",  # Bopomofo
    "\u31a0\u31a1\u31a2",  # Bopomofo extended
    "\u3220\u3221\u3222",  # enclosed CJK letters (parenthesised ideographs)
    "\u3300\u3301\u3302",  # CJK compatibility
    "\ufe30\ufe31\ufe32",  # CJK compatibility forms
    "\ufe50\ufe51\ufe52",  # small form variants
    "\U00031350\U00031351\U00031352",  # CJK extension H
])
def test_every_cjk_block_counts_a_character_a_word(text):
    """These ran together as one word, against "every CJK character counts as one word"."""
    assert count_units(text) == 3 and chunk_text(text, words=2) == [text[:2], text[2:]]


def test_limit_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        chunk_text("a b", words=0)


alphabet = st.sampled_from(list("abc xyz\n\t,.") + list("中文检索。，") + ["Ünï", "かな", "한국", "２０", "ｶﾞ", "ㄅ", "\u3099"])


@settings(max_examples=200, deadline=None)
@given(text=st.lists(alphabet, max_size=80).map("".join), words=st.integers(1, 12))
def test_pieces_are_disjoint_bounded_ordered_and_lossless(text, words):
    pieces = chunk_text(text, words)
    assert all(p and p == p.strip() and count_units(p) <= words for p in pieces)
    assert no_space("".join(pieces)) == no_space(text)
    assert len(pieces) == math.ceil(count_units(text) / words)
    # disjoint and in order: each piece is found after the previous one in the original text
    at = 0
    for p in pieces:
        at = text.index(p, at) + len(p)


def test_documents_keep_titles_and_get_numbered_ids():
    docs = [Passage("d1", "First", "one two three"), Passage("d2", "第二", "中文文本")]
    out = chunk_documents(docs, words=2)
    assert [(p.id, p.title, p.text) for p in out] == [
        ("d1-0", "First", "one two"), ("d1-1", "First", "three"), ("d2-0", "第二", "中文"), ("d2-1", "第二", "文本")]
