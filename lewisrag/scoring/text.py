"""Character classes shared by the scores and the sentence splitter, and where that splitter cuts an answer
(`sentence_bounds`, which the implicit citations of RAG-Token and RAG-Sequence cut with too)."""

from __future__ import annotations

import re

from lewisrag.scoring.markers import CITATION_RE, _code_spans, _fence_starts, _in_code, citation_markers

_INITIALS_RE = re.compile(r"[A-Z](?:\.[A-Z])*")  # "J", "J.K": a name's initials, before the name
# lower-cased words that end with a dot without ending the sentence: "Dr. Smith", "ca. 1900", "the U.S. Army"
_ABBREVIATIONS = frozenset(
    "e.g i.e vs cf al approx fig figs eq eqs no nos vol pp p mr mrs ms dr prof st jr sr inc ltd co "
    "corp dept est u.s u.k sec ch ca incl esp viz mt gen col lt capt sgt gov sen rev hon".split()
)
# ... and those that as often close a sentence: as "etc.", they end one only before a capital letter or a CJK
# character ("at 5 p.m. The office ..."), not before a number or a small letter ("at 9 a.m. every day",
# "in Jan. 2020", "15 min. after")
_CLOSING_ABBREVIATIONS = frozenset(
    "etc a.m p.m jan feb mar apr jun jul aug sep sept oct nov dec ph.d min mins hr hrs".split()
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
    character past the stop and any citations after it ("" at the end): not after an abbreviation ("e.g.",
    "Dr.", "U.S."), "No." before a number, "etc.", "p.m.", "Jan." and the like before a small letter or a
    digit, or a name's initials ("J. Smith", "J.K. Rowling").
    The evaluator's splitter (`eval.statements`) and the RAG models' sentence citations (`rag_model.
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
    if word.lower() in _CLOSING_ABBREVIATIONS:  # "JSON, XML, etc. The server ..." ends; "etc. and more" does not
        return after.isupper() or is_cjk(after) if after else True
    if word.lower() in _ABBREVIATIONS:
        return False
    return not _INITIALS_RE.fullmatch(word)  # initials: "J. Smith", "J.K. Rowling", "由J.K.罗琳创作"


# --- where sentences end: the evaluator's splitter's rules (`eval.statements`, SPLITTER_VERSION "13"), here
# so that the implicit citations of RAG models cut an answer with the same function -------------------------

_HSPACE = r"[^\S\n]"  # any space but a newline: no-break and thin spaces too
_CITATION_RUN_RE = re.compile(rf"(?:{_HSPACE}*" + CITATION_RE.pattern + r")+")
_SPACE_RUN_RE = re.compile(r"\s*")
_HSPACE_RUN_RE = re.compile(rf"{_HSPACE}*")
_OPENERS = frozenset("[［【")

_ALWAYS_END = frozenset("。！？｡")
_ELLIPSES = frozenset("…⋯")  # "…", "……" (and "⋯⋯") end a sentence as "..." does
_END_RUN = frozenset("。！？｡.!?．") | _ELLIPSES
_CLOSERS = frozenset(")）")
_OPEN_CLOSE = {"「": "」", "『": "』", "“": "”"}
_CLOSE = frozenset(_OPEN_CLOSE.values())
# “ and " are closed by either ('提示“用户名或密码错误"[1]' mixes them), unless their own mark comes later on the
# line: in '“He said "Stop. Now." and left.”' the " nest
_EITHER_CLOSE = frozenset('"”')
# closing quote marks that end a sentence when a stop comes right before them: the tracked ones, the
# straight double quote, and single quotes (’ and ', not tracked: ' is also an apostrophe)
_QUOTE_CLOSERS = _CLOSE | frozenset("\"’'")
_TYPOGRAPHIC_CLOSERS = _CLOSE | frozenset("’")  # never an opening mark: part of the run a stop ends
# what, after a closing quote and a space, continues the sentence: 'He said "Stop." and left'
_CONTINUES = frozenset(",;:，；：、—–")
# words after an ellipsis that continue the sentence, as "etc." before a small letter: 苹果、香蕉……等
_ELLIPSIS_CONTINUES = ("等", "之类", "什么的")
_ELIDED_AFTER = frozenset(",，、")  # an ellipsis after a comma elides items of a list: "A, B, … and Z"

# a list's number: digits or a Chinese numeral (一, 十二)
_LIST_NUMBER = r"(?:\d{1,3}|[一二三四五六七八九十]{1,3})"
_LIST_NUMBER_RE = re.compile(_LIST_NUMBER)
# numbers written as one character, most of which NFKC makes digits ("①" is "1", "⒈" "1."): ①-⑳, ⑴-⒇,
# ⒈-⒛, ⓪-⓿, the dingbats ❶-➓, ㉑-㊿
_ENCLOSED_NUMBER = "[\u2460-\u249b\u24ea-\u24ff\u2776-\u2793\u3251-\u325f\u32b1-\u32bf]"
# the characters `is_cjk` accepts, as a regex class
_CJK = "[\u4e00-\u9fff\u3400-\u4dbf\uf900-\ufaff\U00020000-\U0002fa1f\u3040-\u30ff]"
# a line opening "1. ", "2) ", "3、", "4）", "（5）", "(6)", "①", "⑴", "⒈", "一、" or "（一）"; "1." and "2)" also right
# before a CJK character, as Chinese lists are written without the space ("1.登录失败"); "3.5" and "e.g." are no marker
_NUMBER_MARKER_RE = re.compile(
    rf"(?m)^[^\S\n]*(?:{_LIST_NUMBER}(?:[.)](?:\s|(?={_CJK}))|[、．）])|[（(]{_LIST_NUMBER}[）)]|{_ENCLOSED_NUMBER})")
_LIST_MARKER_RE = re.compile(  # ... and "- "
    rf"^(?:{_LIST_NUMBER}(?:[.)]\s+|[.)](?={_CJK})|[、．）]\s*)|[（(]{_LIST_NUMBER}[）)]\s*|{_ENCLOSED_NUMBER}\s*|[-*•]\s+)")
_BULLET_RE = re.compile(r"^[-*•]\s+")


def _is_numbered_list(text: str) -> bool:
    """Two lines or more open with a number and a list mark: a lone "42. It is ..." is an answer
    that starts with a number, not a list."""
    return len(_NUMBER_MARKER_RE.findall(text)) >= 2


def _dot_ends_sentence(text: str, i: int, numbered: bool = False) -> bool:
    """Whether the '.', '!' or '?' at text[i] (outside quotes) ends a sentence; `numbered`: the text
    is a numbered list (`_is_numbered_list`), whose items' "1." end nothing."""
    j = i + 1
    while j < len(text) and text[j] in _END_RUN:
        j += 1
    while j < len(text) and text[j] in _CLOSERS:
        j += 1
    if j < len(text):
        nxt = text[j]
        if not (nxt.isspace() or nxt in _OPENERS or is_cjk(nxt) or nxt in _ALWAYS_END):
            return False  # 3.5, example.com, v1.2: the dot sits inside a token
    a = i
    while a > 0 and text[a - 1] in _END_RUN:
        a -= 1
    run = text[a:j]
    if ("…" in run or "⋯" in run or ".." in run) and not any(c in "!?" for c in run):
        return _ellipsis_ends_sentence(text, a, j)
    if text[i] != "." or (i > 0 and text[i - 1] == "."):
        return True
    marker = text[text.rfind("\n", 0, i) + 1 : i].strip()
    if numbered and _LIST_NUMBER_RE.fullmatch(marker):  # "1. " (or "一. ") opens a numbered list item
        return False
    m = _CITATION_RUN_RE.match(text, j)  # the next character past any citations: "etc. [1] It" ends at "I"
    return word_dot_ends_sentence(text, i, text[m.end() if m else j:].lstrip()[:1])


def _ellipsis_ends_sentence(text: str, a: int, j: int) -> bool:
    """Whether the ellipsis text[a:j] ("…", "……", "⋯⋯", "...", closing brackets after it) ends a
    sentence. An ellipsis mostly trails off inside one ('香蕉……还有橙子', 'JSON, XML… and YAML'), so
    it ends one only where what comes next reads as a new sentence: the end of the text (or of the
    line: only spaces follow); a citation marker right after it ('他沉默了……[1] 然后', the marker is
    the sentence's before it); a citation marker right before it on its line ('返回 422 [1]……然后', 'It returns
    422 [1]… then': a cited sentence trailing off, so what follows must cite on its own); or a space
    and a capital letter ('Wait... What?', 'It returns 422… Then the account is deleted'), unless the
    word is all capitals (a term: 'JSON… XML and YAML'; "I" is a word). Never before 等 / 之类 / 什么的
    (香蕉……等水果) or after a comma ("A, B, … and Z" elides list items)."""
    b = a  # back over spaces, not a line break: a citation ending the line before cites that line
    while b > 0 and text[b - 1].isspace() and text[b - 1] != "\n":
        b -= 1
    if text.startswith(_ELLIPSIS_CONTINUES, j) or (b > 0 and text[b - 1] in _ELIDED_AFTER):
        return False  # 香蕉……等水果; "A, B, … and Z" elides list items
    k = _HSPACE_RUN_RE.match(text, j).end()
    if k == len(text) or text[k] == "\n" or _CITATION_RUN_RE.match(text, j):
        return True
    o = max(text.rfind(c, max(0, b - 64), b) for c in _OPENERS)  # a marker right before: 返回 422 [1]……然后
    if o >= 0 and CITATION_RE.fullmatch(text, o, b):
        return True
    if k > j and text[k].isupper():
        word = re.match(r"[^\W\d_]+", text[k:])
        return word is None or len(word[0]) == 1 or not word[0].isupper()
    return False


def _sentence_end(text: str, i: int, cited: bool = False) -> int:
    """Index just past the sentence that ends at text[i]: the run of end marks, closing
    brackets and any citations that follow on the same line, unless the sentence has `cited`
    already and more text follows them on the line: then they open the next sentence
    ("[1] 指出 A。[1] 还指出 B。")."""
    j = i + 1
    while j < len(text) and (text[j] in _END_RUN or text[j] in _CLOSERS or text[j] in _TYPOGRAPHIC_CLOSERS):
        j += 1
    m = _CITATION_RUN_RE.match(text, j)
    if m is None:
        return j
    rest = text[m.end():].split("\n", 1)[0]
    return j if cited and rest.strip() else m.end()


def _quote_ends_sentence(text: str, i: int) -> bool:
    """Whether the closing quote mark at text[i] (outside other quotes) ends a sentence: a stop comes
    right before it ("Invalid credentials." or “用户名或密码错误。”) and what follows reads as a new
    sentence. That is the end of the text or its line; citations ('..." [1] It is', “...。”[1]账户)
    unless a small letter, a comma or a dash follows them; or a space and then anything but a small
    letter, a comma or a dash. A quoted sentence inside a sentence ends nothing: 'He said "Stop." and left', '"Stop!" he
    said', 「错误。」列表 (a CJK character right after the mark)."""
    k = i
    while k > max(0, i - 3) and text[k - 1] in _QUOTE_CLOSERS:  # nested quotes: ‘好。’”
        k -= 1
    if k == 0 or text[k - 1] not in _END_RUN:
        return False
    j = i + 1
    while j < len(text) and (text[j] in _QUOTE_CLOSERS or text[j] in _CLOSERS or text[j] in _END_RUN):
        j += 1
    m = _CITATION_RUN_RE.match(text, j)
    spaced = m is not None or (j < len(text) and text[j].isspace())
    j = _HSPACE_RUN_RE.match(text, m.end() if m else j).end()
    if j == len(text) or text[j] == "\n":
        return True
    return spaced and not (text[j].islower() or text[j] in _CONTINUES)


def _next(text: str, mark: str, i: int, cache: dict[str, int]) -> int:
    """Index of the first `mark` after text[i] (len(text) if none); `cache` keeps the last answers, valid
    while i only grows (a long line of quote marks is searched once, not once per mark)."""
    at = cache.get(mark, -1)
    if at <= i:
        at = text.find(mark, i + 1)
        cache[mark] = at = len(text) if at < 0 else at
    return at


def sentence_bounds(text: str) -> list[tuple[int, int]]:
    """Where the evaluator's splitter finds the sentences of `text`: (start, end) of each, in order, without
    the spaces around it or the list marker opening it ("1. ", "- "), empty ones dropped
    (`eval.statements.sentence_spans` then merges those of only citations and punctuation into their
    neighbours). The RAG models' implicit citations (`rag_model.implicit_citations`) cite the sentences
    these give, so each marker is scored against the sentence it was meant for.

    >>> t = "返回 422。[1] 前端显示「错误。」列表！Version 3.5 is out, e.g. today. Done"
    >>> [t[a:b] for a, b in sentence_bounds(t)]
    ['返回 422。[1]', '前端显示「错误。」列表！', 'Version 3.5 is out, e.g. today.', 'Done']
    >>> t = "Two facts:\\n1. It returns 422 [1].\\n2. It locks [2]\\n- 锁定 15 分钟 [2]。"
    >>> [t[a:b] for a, b in sentence_bounds(t)]
    ['Two facts:', 'It returns 422 [1].', 'It locks [2]', '锁定 15 分钟 [2]。']
    """
    cuts: list[tuple[int, int]] = []  # the pieces between cuts, spaces and list markers included
    numbered = _is_numbered_list(text)
    code = _code_spans(text)
    fences = _fence_starts(text, code) if code else frozenset()
    start = i = 0
    stack: list[str] = []  # closing quote marks we are waiting for
    opened: list[int] = []  # where each of them opened
    stray: set[int] = set()  # quote marks that never closed on their line: no quotes
    found: dict[str, int] = {}  # `_next`'s cache
    while i < len(text) or stack:
        if stack and (i == len(text) or text[i] == "\n" and not _in_code(i, code)):
            # a quote still open at the end of its line ('提示“错误“[1]。账户 ...', a stray mark) would make the
            # line one sentence, its claims sharing a citation: its marks open nothing, and the line is read again
            stray.update(opened)
            i = opened[0] + 1
            stack.clear()
            opened.clear()
            found.clear()
            continue
        ch = text[i]
        end = None
        if _in_code(i, code):
            pass  # `os.exit(1). [2]`, `print("a")`, a fence's lines: code ends nothing and opens no quote
        elif ch == "\n":
            end = i + 1
        elif stack and (ch == stack[-1] or ch in _EITHER_CLOSE and stack[-1] in _EITHER_CLOSE
                        and _next(text, stack[-1], i, found) >= _next(text, "\n", i, found)):
            stack.pop()
            opened.pop()
            if not stack and _quote_ends_sentence(text, i):  # “用户名或密码错误。”[1]账户 ...
                end = _sentence_end(text, i, cited=bool(citation_markers(text[start:i])))
        elif ch in _OPEN_CLOSE and i not in stray:
            stack.append(_OPEN_CLOSE[ch])
            opened.append(i)
        elif ch == '"' and i not in stray and not (i > 0 and text[i - 1].isdigit()):  # 27" wide: inches
            stack.append('"')
            opened.append(i)
        elif ch in _QUOTE_CLOSERS:
            # a stray closing mark (ignored rather than unbalancing the stack) or a single quote
            if not stack and _quote_ends_sentence(text, i):
                end = _sentence_end(text, i, cited=bool(citation_markers(text[start:i])))
        elif not stack and ch in _END_RUN:
            # a run of stops ("...", "……", "?!", "。。") is decided once: it ends the sentence where any
            # of its marks does (deciding each mark walked the whole run: 20,000 dots took 20 s)
            r = i + 1
            while r < len(text) and text[r] in _END_RUN and not _in_code(r, code):
                r += 1
            if (any(c in _ALWAYS_END for c in text[i:r]) or _dot_ends_sentence(text, i, numbered)
                    or (r - i > 1 and _dot_ends_sentence(text, i + 1, numbered))):
                end = _sentence_end(text, i, cited=bool(citation_markers(text[start:i])))
            else:
                i = r
                continue
        if end is not None and fences:
            # a fenced block belongs to the sentence before it: "Install it with [1]:\n```\npip ...\n```"
            nxt = _SPACE_RUN_RE.match(text, end).end()
            if nxt in fences:
                end, i = None, nxt
                continue
        if end is None:
            i += 1
            continue
        cuts.append((start, end))
        start = i = end
    cuts.append((start, len(text)))
    marker = _LIST_MARKER_RE if numbered else _BULLET_RE
    bounds: list[tuple[int, int]] = []
    for a, b in cuts:
        piece = text[a:b].strip()
        b = a + len(text[a:b].rstrip())
        a = b - len(marker.sub("", piece))  # the marker is a prefix of the stripped piece
        if a < b:
            bounds.append((a, b))
    return bounds
