"""Character classes shared by the scores and the sentence splitter."""

from __future__ import annotations


def is_cjk(ch: str) -> bool:
    """True for a CJK ideograph or a Japanese kana (characters that are words on their own).

    >>> is_cjk("登"), is_cjk("a"), is_cjk("。")
    (True, False, False)
    """
    o = ord(ch)
    return (
        0x4E00 <= o <= 0x9FFF or 0x3400 <= o <= 0x4DBF or 0xF900 <= o <= 0xFAFF
        or 0x20000 <= o <= 0x2FA1F or 0x3040 <= o <= 0x30FF
    )


def split_cjk(word: str) -> list[str]:
    """One piece per CJK character, the other characters between them kept together.

    >>> split_cjk("abc登录x")
    ['abc', '登', '录', 'x']
    """
    pieces: list[str] = []
    rest = ""
    for ch in word:
        if is_cjk(ch):
            pieces.extend([rest, ch] if rest else [ch])
            rest = ""
        else:
            rest += ch
    return pieces + [rest] if rest else pieces
