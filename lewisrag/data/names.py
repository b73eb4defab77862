"""Made-up, pronounceable names for the built-in world.

Names are built from syllables so that a model can only learn them by reading. Every made-up
word belongs to one of two disjoint *sides*, fixed by the parity of its CRC-32 (a stable checksum,
unlike Python's salted `hash()`): the world uses only "world" words and the fresh-text generators
use only "fresh" words, so no fresh passage ever names anything the world contains, whatever the
seeds. Both sides are drawn from the same syllables, so fresh text looks exactly like world text.

>>> import random
>>> namer = Namer(random.Random(0), side="world")
>>> w = namer.word()
>>> w[0].isupper(), word_side(w)
(True, 'world')
>>> word_side("Valdoria"), word_side("Valdorria")
('world', 'fresh')

Chinese names (`lang="zh"`, characters from `lang_zh`) are claimed whole, suffix included (塔维港,
拉莫币, 克洛研究所), and go by the same two sides. Chinese has no spaces between words, so a Chinese
namer also refuses a name that holds a claimed name or lies inside one (李明 and 李明华, 维兰 and
维兰多): an answer is then never part of another name, and a name never turns up inside another.

>>> zh = Namer(random.Random(0), side="world", lang="zh")
>>> c = zh.country()
>>> 3 <= len(c) <= 5, word_side(c), zh.claim(c[:2]), zh.claim(c + "亚")
(True, 'world', False, False)

Names are told apart without regard to case, as every retriever and scorer of this project lower-cases:
a namer never gives the currency 'purstar' once it has given the capital 'Purstar'. The sides are those
of the exact spelling, so a world's 'Purstar' may meet a fresh text's currency 'purstar': the same
letters, never the same facts (a fresh entity's facts are drawn anew).
"""

from __future__ import annotations

import itertools
import random
import zlib

from lewisrag.data import lang_zh

LANGS = ("en", "zh")
SIDES = ("world", "fresh")
ONSETS = ("b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kr", "tr", "st", "th", "sh")
VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ai", "ou")
CODAS = ("", "", "", "", "n", "r", "l", "s", "m", "k")
COUNTRY_ENDINGS = ("ia", "a", "or", "ea", "", "", "")
LANGUAGE_ENDINGS = ("ic", "ish", "ese", "an")
MAX_TRIES = 100_000  # draws before giving up on an exhausted name space (a world far too large)
WIDEN_AFTER = 500  # failed draws of a Chinese name before it may be a character longer
PLACE_PREFIXES = ("New", "North", "South", "Upper", "Lower", "East", "West")


def word_side(word: str) -> str:
    """The side a made-up word belongs to: 'world' for even CRC-32, 'fresh' for odd."""
    return SIDES[zlib.crc32(word.encode("utf-8")) & 1]


class Namer:
    """Draws unique made-up words and names from one side of the name space.

    Uniqueness is per namer: every word it returns is new to it, whatever the case, so one world never
    uses the same made-up word for two things (a capital is never also a person's surname, nor a
    currency).

    The draws from `rng` follow the rules of the first version (a name new if no claimed name had its
    exact spelling; a Chinese look-alike with a place prefix new if not claimed whole), and the names
    that those rules took but these refuse are replaced by names drawn from a stream of their own
    (`_redraw`): every other name of a world stays what it was, and a world those rules left sound
    keeps its files byte for byte.
    """

    def __init__(self, rng: random.Random, side: str, lang: str = "en"):
        if side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {side!r}")
        if lang not in LANGS:
            raise ValueError(f"lang must be one of {LANGS}, got {lang!r}")
        self.rng, self.side, self.lang = rng, side, lang
        self._claims = _Claims(zh=lang == "zh", fold_case=True)  # the names given, under the rules
        self._first = _Claims(zh=lang == "zh", fold_case=False)  # the names the first version's draws took
        # membership tests only; never iterated, so order cannot leak
        self.used: set[str] = self._claims.used  # every claimed name, lower-cased
        self.inside: set[str] = self._claims.inside  # Chinese: every piece (2+ characters) of a claimed name

    def word(self, syllables: tuple[int, int] = (2, 3), ending: str = "", lower: bool = False) -> str:
        """A new capitalised (or `lower`-case) word of `syllables` (min, max) syllables plus `ending`."""
        def spell(rng: random.Random, tries: int) -> str | None:
            n = rng.randint(*syllables)
            parts = [rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS) for _ in range(n)]
            if ending[:1] in ("a", "e", "i", "o", "u") and parts[-1][-1] in "aeiou":
                parts[-1] += rng.choice(CODAS[4:])  # 'Valdo' + 'ia' would read 'Valdoia'
            w = ("".join(parts) + ending).capitalize()
            w = w.lower() if lower else w  # lower-casing changes the checksum: claim the form used
            return w if len(w) >= 4 else None

        return self._draw(spell, f"{syllables}-syllable word")

    def claim(self, word: str) -> bool:
        """Reserve `word` if no claimed word is spelled alike, whatever the case, and it is on this
        namer's side (and, in Chinese, it neither holds a claimed name nor lies inside one)."""
        return word_side(word) == self.side and self._claims.take(word)

    def _draw(self, spell, what: str) -> str:
        """A new name from `spell(rng, tries)` (None: a spelling to draw again): the first that the
        first version's rules take from self.rng, or, if these rules refuse it, its replacement."""
        for tries in range(MAX_TRIES):
            w = spell(self.rng, tries)
            if w is not None and word_side(w) == self.side and self._first.take(w):
                return w if self.claim(w) else self._redraw(spell, w, what)
        raise ValueError(f"no unused {what} left after {MAX_TRIES} tries: the world is too large")

    def _redraw(self, spell, refused: str, what: str) -> str:
        """A name in place of `refused`, drawn from a stream seeded by it: self.rng draws on as before."""
        rng = random.Random(f"lewisrag-names:{self.side}:{refused}")
        for tries in range(MAX_TRIES):
            w = spell(rng, tries)
            if w is not None and self.claim(w):
                return w
        raise ValueError(f"no unused {what} left after {MAX_TRIES} tries: the world is too large")

    def country(self) -> str:
        if self.lang == "zh":
            return self._zh_word((2, 3), lang_zh.COUNTRY_ENDINGS)
        return self.word((2, 2), ending=self.rng.choice(COUNTRY_ENDINGS))

    def city(self) -> str:
        if self.lang == "zh":
            return self._zh_word((2, 3), lang_zh.CITY_ENDINGS)
        return self.word((2, 3))

    def person(self) -> str:
        """'First Last', two syllables each: short enough for small models to copy. Chinese: a
        surname and one or two given characters (李明, 陈晓云)."""
        if self.lang == "zh":
            def spell(rng: random.Random, tries: int) -> str | None:
                n = 1 if rng.random() < lang_zh.ONE_GIVEN_SHARE else 2
                name = rng.choice(lang_zh.SURNAMES) + "".join(rng.choice(lang_zh.GIVEN) for _ in range(n))
                return name if name[-1] != name[-2] else None

            return self._draw(spell, "person name")
        return f"{self.word((2, 2))} {self.word((2, 2))}"

    def language(self) -> str:
        if self.lang == "zh":
            return self._zh_word((2, 3), (lang_zh.LANGUAGE_ENDING,))
        return self.word((1, 2), ending=self.rng.choice(LANGUAGE_ENDINGS))

    def currency(self) -> str:
        if self.lang == "zh":
            return self._zh_word((2, 3), (lang_zh.CURRENCY_ENDING,))
        return self.word((2, 2), lower=True)

    def organisation(self, kind: str) -> str:
        """A made-up word and the kind: 'Kelmora Institute', 克洛拉研究所 (claimed whole in Chinese)."""
        if self.lang == "zh":
            return self._zh_word((2, 3), (kind,))
        return f"{self.word((2, 2))} {kind}"

    def _zh_word(self, syllables: tuple[int, int], endings: tuple[str, ...]) -> str:
        """A new Chinese name of `syllables` (min, max) characters of lang_zh.SYLLABLES (FRESH_SYLLABLES on
        the fresh side) plus one of `endings`, at least three characters long, never the same character
        twice in a row nor a lang_zh.NOT_FIRST character first. A crowded name space (a world of tens of thousands of
        entities) gets longer names: every WIDEN_AFTER failed draws allow one character more."""
        lo, hi = syllables
        pool = lang_zh.FRESH_SYLLABLES if self.side == "fresh" else lang_zh.SYLLABLES

        def spell(rng: random.Random, tries: int) -> str | None:
            n = rng.randint(lo, hi + tries // WIDEN_AFTER)
            w = "".join(rng.choice(pool) for _ in range(n)) + rng.choice(endings)
            ok = len(w) >= 3 and w[0] not in lang_zh.NOT_FIRST and all(a != b for a, b in itertools.pairwise(w))
            return w if ok else None

        return self._draw(spell, f"{syllables}-character name")

    def lookalike(self, name: str) -> str:
        """A new name that a careless reader could take for `name`.

        Tries, in a random order, doubling a consonant ('Valdoria' -> 'Valdorria'), changing one
        vowel ('Valdoria' -> 'Veldoria') and a place prefix ('New Valdoria'); the base word of a
        multi-word name (e.g. an organisation's) is the one that varies.
        """
        if self.lang == "zh":
            return self._zh_lookalike(name)
        base, _, rest = name.partition(" ")
        candidates = [_double_consonant(base, i) for i in range(1, len(base) - 1)]
        candidates += [_change_vowel(base, i, v) for i in range(len(base)) for v in "aeiou"]
        self.rng.shuffle(candidates)
        cand, first = self._pick([c for c in candidates if c and c != base])
        return f"{cand} {rest}".strip() if cand else self._prefixed(name, first, candidates=())

    def _zh_lookalike(self, name: str) -> str:
        """One character of the made-up part changed to one that sounds or looks alike (瓦尔多利亚 ->
        瓦尔朵利亚, 克洛拉研究所 -> 柯洛拉研究所), else a place prefix (新瓦尔多利亚): a prefixed name
        holds its twin, but like every Chinese name no other claimed name, nor lies inside one."""
        kind = next((k for k, _, _ in lang_zh.ORG_KINDS if name.endswith(k)), "")
        base = name.removesuffix(kind) if kind else name
        candidates = [base[:i] + c + base[i + 1 :] for i, ch in enumerate(base) for c in lang_zh.SIMILAR.get(ch, "")]
        self.rng.shuffle(candidates)
        candidates = [c + kind for c in candidates]
        cand, first = self._pick(candidates)
        return cand or self._prefixed(name, first, candidates)

    def _pick(self, candidates: list[str]) -> tuple[str | None, str | None]:
        """(the first of `candidates` this namer claims, or None; the first one the first version's
        rules took, or None). Only where those rules took one does the pick go on to the others."""
        first = next((c for c in candidates if word_side(c) == self.side and self._first.take(c)), None)
        if first is None or self.claim(first):
            return first, first
        return next((c for c in candidates if self.claim(c)), None), first

    def _prefixed(self, name: str, first: str | None, candidates: list[str]) -> str:
        """`name` with a place prefix ('New Valdoria', 新瓦尔多利亚) that this namer claims (in Chinese
        it may hold `name`, and no other claimed name). self.rng orders the prefixes exactly where the
        first version's rules took no candidate (`first` None), as they did; else a stream seeded by
        `first` does. Where no prefix is left, a Chinese look-alike may still be one of `candidates`
        that the first version's rules refused."""
        prefixes, sep = (lang_zh.PLACE_PREFIXES, "") if self.lang == "zh" else (PLACE_PREFIXES, " ")
        if first is None:
            order = self.rng.sample(prefixes, len(prefixes))
            self._first.take_prefixed(next((p + sep + name for p in order if p + sep + name not in self._first.used), ""))
        else:
            order = random.Random(f"lewisrag-names:{self.side}:{first}").sample(prefixes, len(prefixes))
        for prefix in order:
            if self._claims.take(prefix + sep + name, twin=name):
                return prefix + sep + name
        found = next((c for c in candidates if self.claim(c)), None)
        if found is None:
            raise ValueError(f"no look-alike left for {name!r}")
        return found


class _Claims:
    """The names a namer has claimed, under one set of rules: compared `fold_case` (lower-cased) or
    by exact spelling; Chinese (`zh`) names also by their pieces, so no name holds another."""

    def __init__(self, zh: bool, fold_case: bool):
        self.zh, self.fold_case = zh, fold_case
        self.used: set[str] = set()
        self.inside: set[str] = set()

    def take(self, name: str, twin: str = "") -> bool:
        """Claim `name` unless a claimed name is spelled alike or, in Chinese, lies inside it or holds
        it. `twin`: the name a prefixed look-alike is made of, the one name it may hold."""
        key = name.lower() if self.fold_case else name
        if key in self.used:
            return False
        if self.zh:
            pieces = _pieces(name)
            if name in self.inside or any(p in self.used for p in pieces - _pieces(twin) - {twin}):
                return False
            self.inside.update(pieces)
        self.used.add(key)
        return True

    def take_prefixed(self, name: str) -> None:
        """The first version's claim of a prefixed look-alike: the whole name only."""
        if name:
            self.used.add(name)


def _pieces(word: str) -> set[str]:
    """Every run of two or more characters of `word` but `word` itself: '李明华' -> {'李明', '明华'}."""
    n = len(word)
    return {word[i:j] for i in range(n) for j in range(i + 2, n + 1) if j - i < n}


def _double_consonant(word: str, i: int) -> str | None:
    """'Valdoria', 4 -> 'Valdorria': double a consonant that sits between two vowels."""
    vowels = "aeiou"
    if word[i].lower() in vowels or word[i - 1].lower() not in vowels or word[i + 1].lower() not in vowels:
        return None
    return word[: i + 1] + word[i] + word[i + 1 :]


def _change_vowel(word: str, i: int, vowel: str) -> str | None:
    """'Valdoria', 1, 'e' -> 'Veldoria'; only a vowel between two consonants changes."""
    vowels = "aeiou"
    if not 0 < i < len(word) - 1 or word[i].lower() == vowel:
        return None
    if word[i].lower() not in vowels or word[i - 1].lower() in vowels or word[i + 1].lower() in vowels:
        return None
    new = word[:i] + (vowel.upper() if word[i].isupper() else vowel) + word[i + 1 :]
    return new
