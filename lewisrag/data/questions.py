"""Questions about the built-in world: short answers (EM), long answers (ROUGE-L), and the
evaluation categories of the reference chapter (single_doc, multi_doc, not_in_kb, distractor, conflict).

Every short answer is a string that appears verbatim in a gold passage; every long answer is
2-4 reference statements joined into one text, each statement a fact of the gold passage: it
states only what every phrasing of that passage states (`statement_facts`, held by
`world.check_world`).

The phrasings are the entity's language's (`text_tables`): the tables below for English, the same
names in `lang_zh` for Chinese.
"""

from __future__ import annotations

import functools
import itertools
import random
import string
import sys

from lewisrag.data import lang_zh
from lewisrag.data.entities import Entity, parse_population
from lewisrag.data.names import LANGS
from lewisrag.data.records import QAExample

ANSWER_FORMS: dict[str, str] = {}  # attribute -> how a short answer writes the fact ("{}"): English gives it as is

SHORT = {
    "capital": ("What is the capital of {ref}?", "Which city is the capital of {ref}?", "Name the capital city of {ref}.",
                "{Ref} has its capital in which city?", "What city serves as the capital of {ref}?"),
    "currency": ("What currency does {ref} use?", "What is the currency of {ref}?", "Which currency is used in {ref}?",
                 "What do people in {ref} pay with?", "Name the official currency of {ref}."),
    "founded": ("When was {ref} founded?", "In what year was {ref} founded?", "What year was {ref} established?",
                "{Ref} was founded in which year?", "In which year was {ref} established?"),
    "language": ("What is the official language of {ref}?", "Which language is official in {ref}?",
                 "What language do people in {ref} speak?", "Name the official language of {ref}."),
    "leader": ("Who is the {title_l} of {ref}?", "Who leads {ref}?", "Who is the current leader of {ref}?",
               "Who governs {ref}?", "Name the {title_l} of {ref}."),
    "population": ("What is the population of {ref}?", "How many people live in {ref}?", "How many inhabitants does {ref} have?",
                   "What is the population of {ref} today?", "How large is the population of {ref}?"),
    "headquarters": ("Where is {ref} headquartered?", "In which city are the headquarters of {ref}?", "Where is {ref} based?",
                     "Which city is home to {ref}?", "Where does {ref} have its headquarters?"),
    "head": ("Who heads {ref}?", "Who is the {title_l} of {ref}?", "Who leads {ref}?", "Who is in charge of {ref}?",
             "Name the head of {ref}."),
    "members": ("How many members does {ref} have?", "What is the membership of {ref}?", "How many members belong to {ref}?",
                "How large is the membership of {ref}?"),
}
SHORT_ATTRS = {"country": ("capital", "currency", "founded", "language", "leader", "population"),
               "organisation": ("headquarters", "founded", "head", "members")}
STATEMENTS = {
    "capital": "The capital of {ref} is {capital}.", "currency": "The currency of {ref} is the {currency}.",
    "founded": "{Ref} was founded in {founded}.", "language": "The official language of {ref} is {language}.",
    "leader": "The {title_l} of {ref} is {leader}.", "since": "{who} took office in {since}.",
    "population": "{Ref} has a population of {population}.", "exports": "{Ref} is known for its {exports}.",
    "region": "{Ref} is a country in {region}.", "headquarters": "{Ref} has its headquarters in {headquarters}.",
    "head": "{Ref} is headed by {title} {head}.", "members": "{Ref} has {members} members.",
    "field": "{Ref} works in {field}.",
}
LONG = {  # topic: (the attributes its reference states, in order; its question phrasings)
    ("country", "government"): (("leader", "since", "population"), (
        "Describe the government of {ref}.", "Tell me about the government of {ref}.",
        "Who runs {ref}, and how many people live there?", "Give an overview of the leadership and population of {ref}.")),
    ("country", "economy"): (("currency", "exports"), (
        "Tell me about the economy of {ref}.", "Describe the economy of {ref}.", "What is known about the economy of {ref}?")),
    ("country", "history"): (("region", "founded", "capital"), (
        "Tell me about the history and geography of {ref}.", "Describe where {ref} lies, when it was founded and its capital.",
        "Give an overview of the history of {ref}.")),
    ("organisation", "leadership"): (("head", "since", "members"), (
        "Describe the leadership of {ref}.", "Who runs {ref}, and how large is it?", "Tell me about the leadership of {ref}.")),
    ("organisation", "history"): (("founded", "headquarters", "field"), (
        "Tell me about the history of {ref}.", "Describe {ref}.", "Give an overview of {ref}.")),
}
VIA_CAPITAL = ("Who leads the country whose capital is {capital}?", "Who is the {title_l} of the country whose capital is {capital}?")
VIA_HEADQUARTERS = ("In which country are the headquarters of {ref}?", "{Ref} is based in the capital of which country?")
FOUNDED_EARLIER = "Which was founded earlier, {x} or {y}?"
MORE_INHABITANTS = "Which has more inhabitants, {x} or {y}?"
SENTENCE_JOIN = " "  # joins the reference statements of a long answer
CONTESTED = ("leader", "population", "head", "members")  # what an archive passage contradicts
LONG_RATE = 0.75  # one long question for 3 in 4 entities: about 12% of a split's questions


def text_tables(lang: str):
    """Where the questions of `lang` live: this module for English, `lang_zh` for Chinese (the same
    names: SHORT, STATEMENTS, LONG, VIA_CAPITAL, VIA_HEADQUARTERS, ..., ANSWER_FORMS)."""
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {LANGS}, got {lang!r}")
    return lang_zh if lang == "zh" else sys.modules[__name__]


def answer(entity: Entity, attr: str, snapshot: int = 0) -> str:
    """The short answer about `attr` as the passages write it: '1921' in English, '1921年' in Chinese."""
    return text_tables(entity.lang).ANSWER_FORMS.get(attr, "{}").format(entity.fact(attr, snapshot))


def _slots(entity: Entity, snapshot: int = 0) -> dict:
    """What a question or statement template may name: the entity's facts in `snapshot`, {ref} and
    {Ref} (how questions name it), {title_l} (the title in small letters) and {who} (leader or head)."""
    facts = {**entity.static, **entity.snapshots[snapshot]}
    return {**facts, "ref": entity.ref, "Ref": entity.ref[0].upper() + entity.ref[1:],
            "title_l": facts["title"].lower(), "who": facts.get("leader", facts.get("head"))}


def _fill(template: str, entity: Entity, snapshot: int = 0) -> str:
    return template.format(**_slots(entity, snapshot))


def statement(entity: Entity, attr: str, snapshot: int = 0) -> str:
    """The reference statement of one fact.

    >>> e = Entity("country-0001", "country", "Valdoria", "test", {"capital": "Zerth", "title": "President"}, ({}, {}), 0)
    >>> statement(e, "capital")
    'The capital of Valdoria is Zerth.'
    """
    return _fill(text_tables(entity.lang).STATEMENTS[attr], entity, snapshot)


def statement_attrs(kind: str) -> tuple[str, ...]:
    """The attributes an entity of `kind` has reference statements about: its short ones, then those
    of its long topics."""
    long_attrs = (a for (k, _), (attrs, _) in LONG.items() if k == kind for a in attrs)
    return tuple(dict.fromkeys((*SHORT_ATTRS[kind], *long_attrs)))


def statement_facts(entity: Entity, attr: str, snapshot: int = 0) -> list[str]:
    """What the reference statement of `attr` asserts: the values it fills in, all but the entity's
    own name (the passage's title). Each must be in every phrasing of the passage that states `attr`
    (`world.check_world` checks it): a fact only some phrasings give, as a country's form of
    government, has no place in a statement.

    >>> e = Entity("country-0001", "country", "Valdoria", "test", {"title": "King"}, ({"leader": "Ana Kel"}, {}), 0)
    >>> statement(e, "leader"), statement_facts(e, "leader")
    ('The king of Valdoria is Ana Kel.', ['king', 'Ana Kel'])
    """
    return [str(_slots(entity, snapshot)[name]) for name in _asserted(text_tables(entity.lang).STATEMENTS[attr])]


def statements_of(entity: Entity, snapshot: int = 0) -> dict[str, tuple[str, list[str]]]:
    """Every reference statement of `entity` in `snapshot` (one per `statement_attrs`), each with its
    attribute and what it asserts (`statement_facts`)."""
    slots, table = _slots(entity, snapshot), text_tables(entity.lang).STATEMENTS
    return {table[a].format(**slots): (a, [str(slots[name]) for name in _asserted(table[a])])
            for a in statement_attrs(entity.kind)}


@functools.cache
def _asserted(template: str) -> tuple[str, ...]:
    """The placeholders of a statement template that assert a fact: all but the entity's name."""
    return tuple(name for _, name, _, _ in string.Formatter().parse(template) if name and name not in ("ref", "Ref"))


def short_question(qid: str, entity: Entity, attr: str, template: str, snapshot: int = 0,
                   category: str | None = None) -> QAExample:
    """A short-answer question about `attr` in the phrasing `template` (one of SHORT[attr] of its language)."""
    return QAExample(
        id=qid, question=_fill(template, entity, snapshot), answers=[answer(entity, attr, snapshot)],
        gold_passage_ids=[entity.passage_of(attr)], category=category,
        reference_statements=[statement(entity, attr, snapshot)], kind="short")


def long_question(qid: str, entity: Entity, rng: random.Random, category: str | None = None) -> QAExample:
    """A question asking for a few sentences; answers[0] joins its reference statements.

    An entity with an archive passage is asked only about topics the archive does not contradict.
    """
    tables = text_tables(entity.lang)
    long = tables.LONG
    topics = sorted(t for k, t in long if k == entity.kind and not (entity.archive and set(long[k, t][0]) & set(CONTESTED)))
    attrs, phrasings = long[(entity.kind, rng.choice(topics))]
    statements = [statement(entity, a) for a in attrs]
    return QAExample(
        id=qid, question=_fill(rng.choice(phrasings), entity), answers=[tables.SENTENCE_JOIN.join(statements)],
        gold_passage_ids=sorted({entity.passage_of(a) for a in attrs}), category=category,
        reference_statements=statements, kind="long")


def entity_questions(entity: Entity, rng: random.Random, skip: tuple[str, ...] = ()) -> list[str | None]:
    """What to ask about one entity: every short attribute but `skip`, plus, with probability
    LONG_RATE, one long question (None)."""
    attrs: list[str | None] = [a for a in SHORT_ATTRS[entity.kind] if a not in skip]
    return attrs + [None] if rng.random() < LONG_RATE else attrs


def split_questions(prefix: str, entities: list[Entity], rng: random.Random) -> list[QAExample]:
    """All questions of one split, shuffled; conflict entities are not asked about what their
    archive passage contradicts (that belongs to the evaluation's conflict category)."""
    pairs = []
    for e in entities:
        pairs += [(e, a) for a in entity_questions(e, rng, skip=CONTESTED if e.archive else ())]
    rng.shuffle(pairs)
    return [short_question(f"{prefix}-{i:05d}", e, a, rng.choice(text_tables(e.lang).SHORT[a])) if a
            else long_question(f"{prefix}-{i:05d}", e, rng)
            for i, (e, a) in enumerate(pairs, start=1)]


def update_questions(entities: list[Entity], rng: random.Random) -> tuple[list[QAExample], list[QAExample]]:
    """The same questions about facts that changed between snapshots, answered by A and by B.

    One question about the leader (or head) and one about the population (or membership) of every
    changed entity, as the paper asked about world leaders in its 2016 and 2018 indices.
    """
    qa, qb = [], []
    for e in (e for e in entities if e.changed and not e.archive):
        for attr in (("leader", "population") if e.kind == "country" else ("head", "members")):
            qid, template = f"update-{len(qa) + 1:05d}", rng.choice(text_tables(e.lang).SHORT[attr])
            qa.append(short_question(qid, e, attr, template, snapshot=0))
            qb.append(short_question(qid, e, attr, template, snapshot=1))
    return qa, qb


# ---------------------------------------------------------------------------------------------
# the evaluation set: the reference chapter's five categories, over the test split's entities

EVAL_SIZES = {"single_doc": 60, "multi_doc": 40, "distractor": 30, "not_in_kb": 30}  # conflict: one per archive


def eval_questions(entities: list[Entity], absent: list[Entity], rng: random.Random) -> list[QAExample]:
    """Questions in all five categories, answered by snapshot A.

    conflict: the entity's archive passage (slot 2, dated before both snapshots) contradicts its
    current passage; the reference answer is the current fact and the gold passage the current one,
    because the newer source wins. not_in_kb: `absent` entities appear nowhere in the corpus; the
    correct behaviour is to refuse, so answers, gold ids and statements are empty.
    """
    originals = {e.lookalike_of for e in entities if e.lookalike_of}
    twins = [e for e in entities if e.lookalike_of or e.name in originals]
    plain = [e for e in entities if not e.archive and not (e.lookalike_of or e.name in originals)]  # no trap but the asked one
    out: list[tuple[str, QAExample]] = []
    n_single = min(EVAL_SIZES["single_doc"], len(plain))
    for i, e in enumerate(rng.sample(plain, n_single)):
        if i % 3 == 2:
            out.append(("single_doc", long_question("", e, rng, "single_doc")))
        else:
            attr = rng.choice(SHORT_ATTRS[e.kind])
            out.append(("single_doc", short_question("", e, attr, rng.choice(text_tables(e.lang).SHORT[attr]), category="single_doc")))
    out += [("multi_doc", q) for q in multi_doc_questions(plain, rng, EVAL_SIZES["multi_doc"])]
    for e in rng.sample(twins, min(EVAL_SIZES["distractor"], len(twins))):
        attr = rng.choice(SHORT_ATTRS[e.kind])
        out.append(("distractor", short_question("", e, attr, rng.choice(text_tables(e.lang).SHORT[attr]), category="distractor")))
    for e in (e for e in entities if e.archive):
        attr = rng.choice(tuple(a for a in CONTESTED if a in SHORT_ATTRS[e.kind]))
        out.append(("conflict", short_question("", e, attr, rng.choice(text_tables(e.lang).SHORT[attr]), category="conflict")))
    for e in absent[: EVAL_SIZES["not_in_kb"]]:
        attr = rng.choice(SHORT_ATTRS[e.kind])
        q = _fill(rng.choice(text_tables(e.lang).SHORT[attr]), e)
        out.append(("not_in_kb", QAExample("", q, [], [], "not_in_kb", [], "short")))
    rng.shuffle(out)  # so that any prefix of the file mixes the categories
    return [QAExample(f"eval-{i:04d}", q.question, q.answers, q.gold_passage_ids, cat, q.reference_statements, q.kind)
            for i, (cat, q) in enumerate(out, start=1)]


def multi_doc_questions(entities: list[Entity], rng: random.Random, n: int) -> list[QAExample]:
    """`n` questions (or as many as exist) that need two passages: a leader found through a capital,
    the country of a headquarters, and comparisons of founding years or populations, none asked
    twice (a pair is compared on a fact once, in either order)."""
    t = text_tables(entities[0].lang if entities else "en")
    countries = [e for e in entities if e.kind == "country"]
    by_capital = {c.static["capital"]: c for c in countries}
    capital = [_two(c, c, ("capital", "leader"), c.fact("leader"), rng.choice(t.VIA_CAPITAL)) for c in countries]
    hosted = [o for o in entities if o.kind == "organisation" and o.static["headquarters"] in by_capital]
    hq = [_two(o, by_capital[o.static["headquarters"]], ("headquarters", "capital"), by_capital[o.static["headquarters"]].name,
               rng.choice(t.VIA_HEADQUARTERS)) for o in hosted]
    older, bigger = [], []
    asked: dict[str, set] = {"founded": set(), "population": set()}  # the pairs compared so far, by fact
    for _ in range(n if len(entities) >= 2 else 0):
        pair = _unasked(rng.sample(entities, 2), entities, "founded", asked["founded"], rng)
        if pair and _value(pair[0], "founded") != _value(pair[1], "founded"):
            x, y = pair
            older.append(_compare(x, y, "founded", min(x, y, key=lambda e: _value(e, "founded")), t.FOUNDED_EARLIER))
        more = None
        if len(countries) >= 2:
            more = _unasked(rng.sample(countries, 2), countries, "population", asked["population"], rng)
            if more and _value(more[0], "population") != _value(more[1], "population"):
                a, b = more
                bigger.append(_compare(a, b, "population", max(a, b, key=lambda e: _value(e, "population")), t.MORE_INHABITANTS))
        if pair is None and more is None:
            break  # every pair that tells an answer has been asked
    kinds = [rng.sample(k, len(k)) for k in (capital, hq, older, bigger)]
    return [q for round_ in itertools.zip_longest(*kinds) for q in round_ if q][:n]  # the four kinds in turn


def _value(entity: Entity, attr: str) -> int:
    """A compared fact as a number: the founding year, the population in tenths of a million."""
    return parse_population(entity.fact(attr)) if attr == "population" else int(entity.fact(attr))


def _unasked(pair: list[Entity], pool: list[Entity], attr: str, asked: set, rng: random.Random) -> list[Entity] | None:
    """`pair` (drawn from `pool`) if no question has compared its entities' `attr` yet, else another
    pair of `pool` that none has and whose values differ, drawn at random; None when none is left.
    The pair is then asked: a pair is compared once, in either order. `pair` is kept when it is new,
    so a world without a repeated pair draws what it always did."""
    key = frozenset(e.slot for e in pair)
    if key in asked:
        pair = next((p for p in _pairs(pool, rng)
                     if frozenset(e.slot for e in p) not in asked and _value(p[0], attr) != _value(p[1], attr)), None)
        if pair is None:
            return None
        key = frozenset(e.slot for e in pair)
    asked.add(key)
    return pair


RANDOM_DRAWS = 1000  # a large pool's random tries before its full walk (a world never needs a second)


def _pairs(pool: list[Entity], rng: random.Random):
    """Ordered pairs of `pool` in a random order, then none: a small pool's all, shuffled, each once;
    a large pool's (thousands of pairs, of which a few dozen are ever asked) first `RANDOM_DRAWS`
    drawn at random (a pair may come twice), then, should those all miss, every pair in a walk that
    ends."""
    if len(pool) <= 64:
        pairs = [[a, b] for a in pool for b in pool if a is not b]
        rng.shuffle(pairs)
        yield from pairs
        return
    for _ in range(RANDOM_DRAWS):
        yield rng.sample(pool, 2)
    for a in rng.sample(pool, len(pool)):  # a lazy walk: a list of every pair would hold millions
        yield from ([a, b] for b in rng.sample(pool, len(pool)) if b is not a)


def _two(first: Entity, second: Entity, attrs: tuple[str, str], answer: str, template: str) -> QAExample:
    return QAExample("", _fill(template, first), [answer], [first.passage_of(attrs[0]), second.passage_of(attrs[1])],
                     "multi_doc", [statement(first, attrs[0]), statement(second, attrs[1])], "short")


def _compare(x: Entity, y: Entity, attr: str, winner: Entity, template: str) -> QAExample:
    question = template.format(x=x.ref, y=y.ref)
    return QAExample("", question, [winner.name], [x.passage_of(attr), y.passage_of(attr)], "multi_doc",
                     [statement(x, attr), statement(y, attr)], "short")
