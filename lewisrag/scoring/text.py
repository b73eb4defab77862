"""Character classes shared by the scores and the sentence splitter."""

from __future__ import annotations

import re

_INITIALS_RE = re.compile(r"[A-Z](?:\.[A-Z])*")  # "J", "J.K": a name's initials, before the name
# lower-cased words that end with a dot without ending the sentence
_ABBREVIATIONS = frozenset(
    "e.g i.e etc vs cf al approx fig figs eq eqs no nos vol pp p mr mrs ms dr prof st jr sr inc ltd co "
    "corp dept est u.s u.k sec ch".split()
)


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


def word_dot_ends_sentence(text: str, i: int, after: str) -> bool:
    """Whether the '.' at text[i], written after a word, ends a sentence, `after` being the next visible
    character past the stop ("" at the end): not after an abbreviation ("e.g.", "Dr.", "U.S."), "No."
    before a number, "etc." before a small letter, or a name's initials ("J. Smith", "J.K. Rowling").
    The evaluator's splitter (`eval.statements`) and RAG-Token's sentence citations (`rag_model.
    implicit_citations`) both end sentences by it.

    >>> [word_dot_ends_sentence(t, t.index("."), a) for t, a in (("Dr. Kel", "K"), ("No. 5", "5"), ("no.", ""), ("J. Smith", "S"))]
    [False, False, True, False]
    """
    k = i  # walk back over the word before the dot (letters and inner dots, as in "e.g")
    while k > 0 and text[k - 1].isascii() and (text[k - 1].isalpha() or text[k - 1] == "."):
        k -= 1
    word = text[k:i].lstrip(".")
    if not word:
        return True
    if word.lower() in ("no", "nos"):  # "No. 5", but "He said no."
        return not after.isdigit()
    if word.lower() == "etc":  # "JSON, XML, etc. The server ..." ends; "etc. and more", "etc., then" do not
        return after.isupper() or is_cjk(after) if after else True
    if word.lower() in _ABBREVIATIONS:
        return False
    return not _INITIALS_RE.fullmatch(word)  # initials: "J. Smith", "J.K. Rowling", "由J.K.罗琳创作"
