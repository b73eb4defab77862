"""The fictional entities of the built-in world and the encyclopedia passages that describe them.

Each entity has two passages, split the way a Wikipedia article splits into sections:
passage 0 holds the static facts (capital, currency, founding year, ...) and passage 1 the
time-varying ones (leader, population, ...). Snapshot A ("2016") and snapshot B ("2018") share
passage 0 word for word; passage 1 differs only in the facts that changed, because both are
rendered from the same sentence choices (`Entity.style`). A few entities also have an outdated
"archive" passage (slot 2) that contradicts passage 1: the conflict category of the evaluation.

The words and sentences come from the entity's language (`Entity.lang`): the tables below for
English, the same names in `lang_zh` for Chinese (`text_tables`); the code that draws and renders
is the same for both.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass

from lewisrag.data import lang_zh
from lewisrag.data.names import LANGS, Namer
from lewisrag.data.records import Passage

REGIONS = ("the northern highlands", "the eastern lowlands", "the southern coast", "the western islands",
           "the central plains", "the far north", "a great river delta", "the inland sea basin")
CLIMATES = ("mild and wet", "hot and dry", "cold in winter and warm in summer", "humid all year", "temperate")
EXPORTS = ("copper", "wool", "timber", "tea", "salt", "glass", "amber", "rice", "olives", "iron", "silk",
           "fish", "coffee", "marble", "wine", "cotton")
GOVERNMENTS = (("republic", "President"), ("parliamentary republic", "Prime Minister"), ("kingdom", "King"),
               ("kingdom", "Queen"), ("federation", "Chancellor"), ("principality", "Prince"))
ORG_KINDS = (("Institute", "Director", "research"), ("Trade League", "Secretary-General", "trade"),
             ("Academy", "President", "the arts"), ("Shipping Guild", "Grand Master", "shipping"),
             ("Medical Society", "Chair", "medicine"), ("Rail Union", "General Secretary", "railways"),
             ("Science Council", "Chair", "science"), ("Football Association", "President", "football"))
SNAPSHOT_YEARS = (2016, 2018)  # like the paper's Dec 2016 and Dec 2018 Wikipedia dumps
AND = " and "  # joins the two exports
SENTENCE_JOIN = " "


def text_tables(lang: str):
    """Where the words and sentences of `lang` live: this module for English, `lang_zh` for Chinese
    (the same names: REGIONS, GOVERNMENTS, ORG_KINDS, COUNTRY_STATIC, ..., format_population)."""
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {LANGS}, got {lang!r}")
    return lang_zh if lang == "zh" else sys.modules[__name__]


@dataclass(frozen=True)
class Entity:
    slot: str  # passage ids are f"{slot}-{k}": k=0 static facts, 1 time-varying facts, 2 archive
    kind: str  # "country" or "organisation"
    name: str  # the passage title: "Valdoria", "Kelmora Institute"
    split: str  # "train", "dev" or "test": which question split may ask about it
    static: dict  # facts that never change (str values as they appear in the passages)
    snapshots: tuple  # (facts in snapshot A, facts in snapshot B): the time-varying ones
    style: int  # seed of the sentence choices, shared by both snapshots so only facts differ
    lookalike_of: str | None = None  # name of the entity this one was named to resemble
    archive: dict | None = None  # outdated time-varying facts of a contradicting passage
    lang: str = "en"  # the language of its names, facts and passages ("en" or "zh")

    @property
    def ref(self) -> str:
        """How questions name it: 'Valdoria', 'the Kelmora Institute' (Chinese: the name alone)."""
        return self.name if self.kind == "country" or self.lang != "en" else f"the {self.name}"

    @property
    def changed(self) -> bool:
        return self.snapshots[0] != self.snapshots[1]

    def fact(self, attr: str, snapshot: int = 0) -> str:
        return self.static[attr] if attr in self.static else self.snapshots[snapshot][attr]

    def passage_of(self, attr: str) -> str:
        """Id of the passage that states `attr`."""
        return f"{self.slot}-{0 if attr in self.static else 1}"


def format_population(tenths: int) -> str:
    """A population given in tenths of a million, written with one decimal as every passage and
    answer writes it. Integers throughout keep the files identical on any platform's libm.

    >>> format_population(129), parse_population("12.9 million")
    ('12.9 million', 129)
    """
    return f"{tenths // 10}.{tenths % 10} million"


def parse_population(text: str) -> int:
    """The tenths of a million that format_population (either language's) wrote."""
    if text.endswith("万"):
        return lang_zh.parse_population(text)
    return int(text.split()[0].replace(".", ""))


def format_count(n: int) -> str:
    """A count with thousands separators.

    >>> format_count(4350)
    '4,350'
    """
    return f"{n:,}"


def make_country(slot: str, split: str, namer: Namer, rng: random.Random, change: bool, name: str | None = None) -> Entity:
    """A country with random facts in the namer's language; `change` decides whether snapshot B has a new leader."""
    t = text_tables(namer.lang)
    government, title = rng.choice(t.GOVERNMENTS)
    static = {
        "region": rng.choice(t.REGIONS), "founded": str(rng.randint(1100, 1990)), "capital": namer.city(),
        "currency": namer.currency(), "language": namer.language(), "exports": t.AND.join(rng.sample(t.EXPORTS, 2)),
        "climate": rng.choice(t.CLIMATES), "government": government, "title": title,
        "term": str(rng.choice((4, 5, 6))), "seats": str(rng.randint(40, 400)),
    }
    tenths = rng.randint(10, 99) if rng.random() < 0.5 else rng.randint(100, 900)  # 1.0-9.9 or 10-90 million
    a = {"leader": namer.person(), "since": str(rng.randint(2006, 2016)), "population": t.format_population(tenths)}
    b = dict(a)
    if change:
        b = {"leader": namer.person(), "since": str(rng.randint(2017, 2018)),
             "population": t.format_population(_changed(tenths, rng))}
    return Entity(slot, "country", name or namer.country(), split, static, (a, b), rng.getrandbits(32), lang=namer.lang)


def make_organisation(slot: str, split: str, namer: Namer, rng: random.Random, change: bool,
                      headquarters: str | None, name: str | None = None, org_kind: tuple | None = None) -> Entity:
    """An organisation; `headquarters` is a city (a country's capital, for multi-document questions)
    or None for a new one; `org_kind` is one of the language's ORG_KINDS, drawn when None."""
    kind, title, field = org_kind or rng.choice(text_tables(namer.lang).ORG_KINDS)
    static = {"founded": str(rng.randint(1750, 2000)), "headquarters": headquarters or namer.city(),
              "field": field, "title": title, "meetings": str(rng.randint(2, 12))}
    members = rng.randint(150, 9000)
    a = {"head": namer.person(), "since": str(rng.randint(2006, 2016)), "members": format_count(members)}
    b = dict(a)
    if change:
        b = {"head": namer.person(), "since": str(rng.randint(2017, 2018)),
             "members": format_count(_changed(members, rng))}
    return Entity(slot, "organisation", name or namer.organisation(kind), split, static, (a, b), rng.getrandbits(32),
                  lang=namer.lang)


def org_kind(entity: Entity) -> tuple[str, str, str]:
    """The ORG_KINDS entry an organisation's name ends with: ('Institute', 'Director', 'research')."""
    sep = " " if entity.lang == "en" else ""
    return next(k for k in text_tables(entity.lang).ORG_KINDS if entity.name.endswith(sep + k[0]))


def make_archive(entity: Entity, namer: Namer, rng: random.Random) -> dict:
    """Outdated time-varying facts, dated after the founding and before both snapshots (whose
    leaders took office in 2006 or later), for a contradicting passage."""
    year = rng.randint(max(1995, int(entity.static["founded"]) + 1), 2005)
    if entity.kind == "country":
        tenths = parse_population(entity.snapshots[0]["population"]) * rng.randint(70, 90) // 100
        return {"year": str(year), "leader": namer.person(), "population": text_tables(entity.lang).format_population(tenths)}
    members = int(entity.snapshots[0]["members"].replace(",", "")) * rng.randint(60, 90) // 100
    return {"year": str(year), "head": namer.person(), "members": format_count(members)}


def _changed(value: int, rng: random.Random) -> int:
    """`value` grown or shrunk by 2-12% (never by nothing, since value >= 10)."""
    return value + rng.choice((1, -1)) * max(1, value * rng.randint(2, 12) // 100)


# ---------------------------------------------------------------------------------------------
# passages: each sentence has a few phrasings; the entity's style seed picks them


COUNTRY_STATIC = (
    ("{name} is a country in {region}.", "{name} is a nation located in {region}.", "Located in {region}, {name} is an independent country."),
    ("It was founded in {founded}.", "The country was established in {founded}.", "{name} was founded in {founded}."),
    ("Its capital is {capital}.", "The capital city of {name} is {capital}.", "{capital} is the capital and largest city of {name}."),
    ("The currency of {name} is the {currency}.", "Its currency is the {currency}.", "People in {name} pay with the {currency}."),
    ("The official language is {language}.", "Most people speak {language}, the official language."),
    ("{name} is known for its {exports}.", "The economy of {name} relies on {exports}.", "Its main exports are {exports}."),
    ("The climate is {climate}.", "Its climate is {climate}."),
)
COUNTRY_VARYING = (
    ("{name} is a {government} led by {title} {leader}.", "The {title_l} of {name} is {leader}.", "{title} {leader} leads {name}, a {government}."),
    ("{leader} took office in {since}.", "{leader} has held office since {since}."),
    ("{name} has a population of {population}.", "About {population} people live in {name}.", "The population of {name} is {population}."),
    ("Elections are held every {term} years.", "The national assembly has {seats} seats."),
)
ORG_STATIC = (
    ("The {name} is an organisation working in {field}, founded in {founded}.", "Founded in {founded}, the {name} works in {field}."),
    ("Its headquarters are in {headquarters}.", "The {name} is based in {headquarters}.", "It has its headquarters in {headquarters}."),
    ("It publishes a yearly report on {field}.", "Its council meets {meetings} times a year."),
)
ORG_VARYING = (
    ("The {name} is headed by {title} {head}.", "{title} {head} leads the {name}.", "The {title_l} of the {name} is {head}."),
    ("{head} took office in {since}.", "{head} has held the post since {since}."),
    ("It has {members} members.", "The {name} counts {members} members.", "Membership of the {name} stands at {members}."),
)


ARCHIVE = {  # an outdated passage (slot 2); {year} and the old facts come from Entity.archive
    "country": "Archived entry from {year}. In {year}, {name} was led by {title} {leader}. Its population was {population} at the time.",
    "organisation": "Archived entry from {year}. In {year}, the {name} was headed by {title} {head}. It had {members} members at the time.",
}


def render(entity: Entity, k: int, snapshot: int = 0) -> Passage:
    """Passage k of `entity` as it reads in `snapshot` (0 = A, 1 = B)."""
    t = text_tables(entity.lang)
    facts = {**entity.static, **entity.snapshots[snapshot], "name": entity.name,
             "title_l": entity.static["title"].lower()}
    if k == 2:
        return Passage(f"{entity.slot}-2", entity.name, t.ARCHIVE[entity.kind].format(**{**facts, **entity.archive}))
    country = entity.kind == "country"
    sentences = (t.COUNTRY_STATIC if country else t.ORG_STATIC) if k == 0 else (t.COUNTRY_VARYING if country else t.ORG_VARYING)
    rng = random.Random(entity.style * 2 + k)
    chosen = [rng.choice(options).format(**facts) for options in sentences]
    middle = chosen[1:]
    rng.shuffle(middle)  # the first sentence introduces the entity; the rest come in any order
    text = t.SENTENCE_JOIN.join([chosen[0], *middle])
    return Passage(f"{entity.slot}-{k}", entity.name, text[0].upper() + text[1:])


def passages(entity: Entity, snapshot: int) -> list[Passage]:
    """All passages of `entity` in `snapshot`: 0 and 1, plus the archive when it has one."""
    ks = (0, 1, 2) if entity.archive else (0, 1)
    return [render(entity, k, snapshot) for k in ks]
