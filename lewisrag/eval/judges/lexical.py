"""`LexicalJudge`: a deterministic token-support baseline, for English and Chinese alike."""

from __future__ import annotations

import itertools
import re
import unicodedata

from lewisrag.eval.judges.base import Verdict, digest

# A number is whole, its thousands separators dropped ("1,000" is "1000"; "5.3" is not "3.5"): the
# citation checker's reading (eval.citations), so the two agree on what a number is.
_NUMBER_RE = r"[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)*(?![0-9a-z])|[0-9]+(?:\.[0-9]+)*(?![0-9a-z])"
_NUMBER = re.compile(_NUMBER_RE)
_WORD = re.compile(_NUMBER_RE + r"|[a-z0-9]+(?:[.'][a-z0-9]+)*")
_CASED_WORD = re.compile(_WORD.pattern, re.IGNORECASE)  # the same words, read before lowercasing
_SENTENCE_END = frozenset(".!?。！？;；:：\n")  # the word after one is capitalised whatever it is ("According to")
# kana, CJK ideographs (the extensions past U+20000 too: rare names are written in them), Hangul
_CJK_CLASS = r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f]"
_CJK = re.compile(_CJK_CLASS)
# CJK characters and the digits written against them ("于2016年成为"): a measure word's support is read
# with its number ("2016年" in the premise covers 年), as a character's is with its neighbours
_CJK_DIGIT_RUN = re.compile(rf"(?:{_CJK_CLASS}|[0-9])+")
_CJK_GAP = re.compile(rf"(?<={_CJK_CLASS})\s+(?={_CJK_CLASS})")  # whitespace between two CJK characters
# Function words carry no claim; leaving them out keeps "the", "是", "的" from propping up a score.
_STOP_EN = frozenset(
    "a an the is are was were be been being of to in on at by for with and or but not no it its this that these "
    "those as from into than then so if do does did has have had will would can could should may might must "
    "there their they he she we you i".split()
)
_STOP_ZH_CHARS = "的了是在和与及或也就都而把被对向从之其这那个一有为以"
_STOP_ZH = frozenset(_STOP_ZH_CHARS)
# English words that open a sentence without naming anything: every sentence's first word is capitalised,
# so there the writing cannot tell "However" from "Tamm". The closed classes (with _STOP_EN) are finite
# lists; the discourse markers are those answers open with ("According to [1]", "Overall", "Answer:"),
# and a sentence adverb set off by a comma ("Notably,") needs no entry (`_ordinary`). Any other
# capitalised first word the premise lacks reads as a name, unless the statement also writes it in small
# letters. They stay content units: only the name rule reads this list.
_OPENERS = frozenset(
    # determiners, quantifiers, numerals, pronouns and question words beyond _STOP_EN
    "all any both each every either neither some many most much several few other another such "
    "one two three four five six seven eight nine ten first second third last none his her our your my "
    "nothing something everything anything nobody somebody everybody anybody everyone someone anyone "
    "what which who whom whose where when why how here "
    # prepositions and conjunctions beyond _STOP_EN
    "about after against along among around before behind below between beyond despite during except "
    "like near over per since through throughout under unlike until upon via within without "
    "although because though unless whereas while whether yet once nor "
    # discourse markers, answers' first words and the participles used as prepositions ("Based on")
    "according based given following regarding including using also however therefore thus hence moreover "
    "furthermore finally next then later still instead otherwise overall indeed meanwhile nevertheless "
    "nonetheless currently today now only just yes sure answer note let".split()
)


# the typographic apostrophes NFKC keeps: "Don’t" read as the words "Don" and "t" made "Don" a name
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u02bc": "'"})


def _nfkc(text: str) -> str:
    """NFKC, with the typographic apostrophes (U+2019, U+02BC) written as "'"."""
    return unicodedata.normalize("NFKC", text).translate(_APOSTROPHES)


def _fold(text: str) -> str:
    """`_nfkc`, lowercased, with whitespace between CJK characters removed (a line break inside a word joins it)."""
    return _CJK_GAP.sub("", _nfkc(text).lower())


def content_tokens(text: str) -> list[str]:
    """Lowercased NFKC words and numbers, plus single CJK characters, without function words.

    These are the units `LexicalJudge` counts (how it decides a CJK character is supported is its own rule).

    >>> content_tokens("The API returns HTTP 422.")
    ['api', 'returns', 'http', '422']
    >>> content_tokens("接口返回了 422")
    ['422', '接', '口', '返', '回']
    """
    s = _nfkc(text).lower()
    words = [w for _, w in _words(s) if w not in _STOP_EN]
    chars = [c for c in _CJK.findall(s) if c not in _STOP_ZH]
    return words + chars  # words first, then characters


# Chinese support is written by hand rather than with a word segmenter: jieba is unmaintained, and any
# segmenter's dictionary would miss the invented transliterated names the worlds are made of (塔姆, 瓦尔多利亚),
# which are exactly what a statement gets wrong. Instead a character counts only inside a substring of at
# least two characters that the premise holds contiguously: the classic dictionary-free CJK approach (Lucene's
# CJK analyzer indexes overlapping character bigrams for the same reason).
def _covered(run: str, premise: str) -> list[bool]:
    """Which characters of a hypothesis CJK run lie inside a substring (length >= 2) of it found in the premise;
    a run of one character is covered when that character occurs in the premise."""
    n = len(run)
    if n == 1:
        return [run in premise]
    cover = [False] * n
    end = 0  # run[i:end] is in the premise whenever end >= i + 2: a piece of the last match
    for i in range(n - 1):
        if end < i + 2:
            if run[i:i + 2] not in premise:
                continue
            end = i + 2
        while end < n and run[i:end + 1] in premise:  # the longest match from i covers every shorter one
            end += 1
        cover[i:end] = [True] * (end - i)
    return cover


def _words(text: str) -> list[tuple[int, str]]:
    """(start, word) of each Latin word or number of folded `text`, numbers without thousands separators."""
    return [(m.start(), m[0].replace(",", "") if _NUMBER.fullmatch(m[0]) else m[0]) for m in _WORD.finditer(text)]


def _names(text: str) -> list[str]:
    """The Latin words of `text` (NFKC, not lowercased) written as names: capital and small letters
    mixed. A sentence's first word is capitalised whatever it is, so there a word whose only capital is
    its first letter is a name unless it reads as an ordinary word (`_ordinary`: "In", "However", or one
    the text writes in small letters elsewhere: "Login ... the login page").
    All capitals read as a term ("POST", "HTTP"), not a name; function words never are names ("The").

    >>> _names("According to the report, Tamm met the BUG team in Rome. Paris is big; McKay too. It's Ruus's.")
    ['Tamm', 'Rome', 'Paris', 'McKay', "Ruus's"]
    >>> _names("Login fails: the login page shows 422.")
    []
    """
    words = list(_CASED_WORD.finditer(text))
    small = {m[0] for m in words if m[0].islower()}
    names = []
    for m in words:
        w = m[0]
        if w.islower() or w.isupper() or w.isdigit() or w.lower() in _STOP_EN:  # "POST", "HTTP": terms, not names
            continue
        if _opens_sentence(text, m.start()) and not any(c.isupper() for c in w[1:]) and _ordinary(text, m, small):
            continue
        names.append(w)
    return names


def _ordinary(text: str, m: re.Match, small: set[str]) -> bool:
    """Whether the capitalised first word `m` of `text` reads as an ordinary word: a function word or
    opener, its clitic's host one ("It's", "Let's"), a negated auxiliary ("Don't"), a word in -ly set
    off by a comma ("Unfortunately,"; "Kelly, ..." is rarer than "Kelly is ..."), or one written in
    small letters (`small`) elsewhere in the text."""
    w = m[0].lower()
    host = w.split("'")[0]
    adverb = w.endswith("ly") and text[m.end():m.end() + 1] == ","
    return w.endswith("n't") or host in _STOP_EN or host in _OPENERS or adverb or w in small


def _opens_sentence(text: str, start: int) -> bool:
    """Whether only punctuation, spaces or quotes stand between a sentence's end (or the text's start) and `start`."""
    i = start - 1
    while i >= 0 and not (text[i].isalnum() or text[i] in _SENTENCE_END):
        i -= 1
    return i < 0 or text[i] in _SENTENCE_END


def _numbers(words: list[tuple[int, str]]) -> list[str]:
    """The numbers among `_words`' `words`: "2016" and "1,000" are, "covid19" and "4k" are words."""
    return [w for _, w in words if _NUMBER.fullmatch(w)]


class LexicalJudge:
    """Supported iff at least `threshold` of the hypothesis' content units occur in the premise.

    Content units are English/number words and non-function CJK characters (`content_tokens`). A word
    is supported when the premise has it; a CJK character only when it lies inside a run of two or more
    of the statement's consecutive CJK characters that the premise holds contiguously (function
    characters may be part of that run), or, standing alone between non-CJK text, when the premise has
    it. So a wrong name cannot borrow its characters from elsewhere in the premise. A number the premise
    lacks makes the statement unsupported whatever the share: a wrong year or count is one unit among
    many, and a share of 5/6 would pass it. So does an English name the premise lacks, where the
    writing marks it as one (`_names`: a capitalised word inside a sentence, "... of Valdoria is Tamm",
    or opening one when it is no function word or opener and is nowhere written in small letters, "Tamm
    is ..."). A hypothesis with no content units cannot be judged (Verdict None). A cheap, deterministic
    floor for a real judge: it cannot see negation or paraphrase, nor a wrong name that nothing marks
    (Chinese has no capitals; a name that is also a function word, "Will", "May") when a long statement
    outweighs its few units.

    >>> LexicalJudge().judge([("Login fails with HTTP 422.", "login returns 422"), ("登录失败返回 422", "弹出提示")])
    [Verdict(supported=False, reason='2/3 content tokens in premise (0.67 < 0.75); missing: returns'), Verdict(supported=False, reason='0/4 content tokens in premise (0.00 < 0.75); missing: 弹出提示')]
    >>> LexicalJudge().judge([("国家元首是塔姆。", "国家元首是首塔")])  # 首 and 塔 are in the premise, "首塔" is not
    [Verdict(supported=False, reason='4/6 content tokens in premise (0.67 < 0.75); missing: 首塔')]
    >>> LexicalJudge().judge([("Tamm became head of state of Valdoria in 2016.", "Tamm became head of state of Valdoria in 2018.")])
    [Verdict(supported=False, reason='5/6 content tokens in premise (0.83 ≥ 0.75); missing: 2018; but the premise lacks the number 2018')]
    >>> LexicalJudge().judge([("Ruus became head of state of Valdoria in 2016.", "The head of state of Valdoria is Tamm.")])
    [Verdict(supported=False, reason='3/4 content tokens in premise (0.75 ≥ 0.75); missing: tamm; but the premise lacks the name Tamm')]
    >>> LexicalJudge().judge([("Ruus became head of state of Valdoria in 2016.", "Tamm is the head of state of Valdoria.")])
    [Verdict(supported=False, reason='3/4 content tokens in premise (0.75 ≥ 0.75); missing: tamm; but the premise lacks the name Tamm')]
    """

    name = "lexical"
    # bump when the tokenization or rule changes: it changes scores (2: CJK needs a 2+ character match;
    # 3: ideographs past U+20000 are CJK, not ignored; 4: a number the premise lacks is unsupported;
    # 5: so is an English name the premise lacks; 6: a sentence's first word too, unless it reads as ordinary;
    # 7: typographic apostrophes read as "'")
    version = "7"

    def __init__(self, threshold: float = 0.75):
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold

    @property
    def fingerprint(self) -> str:
        return digest("LexicalJudge", "", {"threshold": self.threshold}, self.version)

    def judge(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        return [self._one(p, h) for p, h in pairs]

    def _one(self, premise: str, hypothesis: str) -> Verdict:
        p, h = _fold(premise), _fold(hypothesis)
        p_words, h_words = _words(p), _words(h)
        words = {w for _, w in p_words if w not in _STOP_EN}
        units: list[tuple[int, bool, str]] = []  # (position, supported, what "missing" names)
        for start, w in h_words:
            if w not in _STOP_EN:
                units.append((start, w in words, w))
        for m in _CJK_DIGIT_RUN.finditer(h):  # the digits are read as numbers above; here they are context
            if m[0].isdigit():
                continue
            run, cover = m[0], _covered(m[0], p)
            i = 0
            for uncovered, group in itertools.groupby(cover, key=lambda c: not c):
                size = len(list(group))
                # "missing" names a maximal stretch of uncovered characters, trimmed of function characters
                name = run[i:i + size].strip(_STOP_ZH_CHARS + "0123456789") if uncovered else ""
                units += [(m.start() + x, not uncovered, name) for x in range(i, i + size)
                          if run[x] not in _STOP_ZH and not run[x].isdigit()]
                i += size
        if not units:
            return Verdict(None, "no content tokens in the statement")
        units.sort(key=lambda u: u[0])
        k, n = sum(ok for _, ok, _ in units), len(units)
        missing = list(dict.fromkeys(name for _, ok, name in units if not ok))
        share = k / n
        ok = share >= self.threshold
        why = f"{k}/{n} content tokens in premise ({share:.2f} {'≥' if ok else '<'} {self.threshold})"
        why += f"; missing: {', '.join(missing)}" if missing else ""
        if ok:  # the share alone would pass it: a wrong number or name still makes it unsupported
            held = set(_numbers(p_words))
            numbers = list(dict.fromkeys(x for x in _numbers(h_words) if x not in held))
            # a possessive's name is its host ("Ruus's" is backed by a premise naming Ruus)
            names = list(dict.fromkeys(x for x in _names(_CJK_GAP.sub("", _nfkc(hypothesis)))
                                       if x.lower() not in words and x.lower().split("'")[0] not in words))
            lacking = [f"the number {', '.join(numbers)}"] * bool(numbers) + [f"the name {', '.join(names)}"] * bool(names)
            if lacking:
                ok, why = False, why + f"; but the premise lacks {' and '.join(lacking)}"
        return Verdict(ok, why)
