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
"""

from __future__ import annotations

import random
import zlib

SIDES = ("world", "fresh")
ONSETS = ("b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kr", "tr", "st", "th", "sh")
VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ai", "ou")
CODAS = ("", "", "", "", "n", "r", "l", "s", "m", "k")
COUNTRY_ENDINGS = ("ia", "a", "or", "ea", "", "", "")
LANGUAGE_ENDINGS = ("ic", "ish", "ese", "an")
MAX_TRIES = 100_000  # draws before giving up on an exhausted name space (a world far too large)
PLACE_PREFIXES = ("New", "North", "South", "Upper", "Lower", "East", "West")


def word_side(word: str) -> str:
    """The side a made-up word belongs to: 'world' for even CRC-32, 'fresh' for odd."""
    return SIDES[zlib.crc32(word.encode("utf-8")) & 1]


class Namer:
    """Draws unique made-up words and names from one side of the name space.

    Uniqueness is per namer: every word it returns is new to it, so one world never uses the same
    made-up word for two things (a capital is never also a person's surname).
    """

    def __init__(self, rng: random.Random, side: str):
        if side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {side!r}")
        self.rng, self.side = rng, side
        self.used: set[str] = set()  # membership tests only; never iterated, so order cannot leak

    def word(self, syllables: tuple[int, int] = (2, 3), ending: str = "", lower: bool = False) -> str:
        """A new capitalised (or `lower`-case) word of `syllables` (min, max) syllables plus `ending`."""
        for _ in range(MAX_TRIES):
            n = self.rng.randint(*syllables)
            parts = [self.rng.choice(ONSETS) + self.rng.choice(VOWELS) + self.rng.choice(CODAS) for _ in range(n)]
            if ending[:1] in ("a", "e", "i", "o", "u") and parts[-1][-1] in "aeiou":
                parts[-1] += self.rng.choice(CODAS[4:])  # 'Valdo' + 'ia' would read 'Valdoia'
            w = ("".join(parts) + ending).capitalize()
            w = w.lower() if lower else w  # lower-casing changes the checksum: claim the form used
            if len(w) >= 4 and self.claim(w):
                return w
        raise ValueError(f"no unused {syllables}-syllable word left after {MAX_TRIES} tries: the world is too large")

    def claim(self, word: str) -> bool:
        """Reserve `word` if it is unused and on this namer's side."""
        if word in self.used or word_side(word) != self.side:
            return False
        self.used.add(word)
        return True

    def country(self) -> str:
        return self.word((2, 2), ending=self.rng.choice(COUNTRY_ENDINGS))

    def city(self) -> str:
        return self.word((2, 3))

    def person(self) -> str:
        """'First Last', two syllables each: short enough for small models to copy."""
        return f"{self.word((2, 2))} {self.word((2, 2))}"

    def language(self) -> str:
        return self.word((1, 2), ending=self.rng.choice(LANGUAGE_ENDINGS))

    def currency(self) -> str:
        return self.word((2, 2), lower=True)

    def lookalike(self, name: str) -> str:
        """A new name that a careless reader could take for `name`.

        Tries, in a random order, doubling a consonant ('Valdoria' -> 'Valdorria'), changing one
        vowel ('Valdoria' -> 'Veldoria') and a place prefix ('New Valdoria'); the base word of a
        multi-word name (e.g. an organisation's) is the one that varies.
        """
        base, _, rest = name.partition(" ")
        candidates = [_double_consonant(base, i) for i in range(1, len(base) - 1)]
        candidates += [_change_vowel(base, i, v) for i in range(len(base)) for v in "aeiou"]
        self.rng.shuffle(candidates)
        for cand in candidates:
            if cand and cand != base and self.claim(cand):
                return f"{cand} {rest}".strip()
        for prefix in self.rng.sample(PLACE_PREFIXES, len(PLACE_PREFIXES)):
            cand = f"{prefix} {name}"
            if cand not in self.used:
                self.used.add(cand)
                return cand
        raise ValueError(f"no look-alike left for {name!r}")


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
