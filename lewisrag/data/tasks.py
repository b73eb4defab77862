"""The paper's other two tasks on the built-in world (Lewis et al. 2020, §4.3 and §4.4).

Jeopardy question generation. The input is an entity (the Jeopardy "answer", e.g. "Valdoria") and
the target a clue about it that never names it ("This country with its capital at Zerth has been
led by President Dova Kelm since 2011."). Every clue joins a static fact (passage 0) with a
time-varying one (passage 1), so a generator that reads one document per output (RAG-Sequence)
must guess half of it, while RAG-Token can move from one document to the other within the clue: the
paper's Figure 2. Training files hold one example per clue template (the same input, several
targets); dev and test hold one example per entity whose `answers` are all its clues, so a clue in
any template scores as the reference it matches best.

FEVER-style verification. The input is a claim and the target its label, SUPPORTS, REFUTES or NOT
ENOUGH INFO (FEVER's strings), judged against snapshot A. SUPPORTS claims state a fact of the
entity's passages; REFUTES claims give another value: for a time-varying fact that changed, the
entity's snapshot-B value, in every split (so that the hot swap flips a test claim's label, and
training meets such claims too); on an optional attribute, another number in the attribute's range;
else another entity's of the same split (so nothing learnt about training entities tells a test
claim false). NOT ENOUGH INFO claims are of two kinds, which the attribute decides: on an optional
attribute, a fact the entity's passages happen not to state (every country's second passage states
either its election term or its assembly seats, every organisation's first either its yearly report
or its council meetings); on every other attribute, a claim about an entity the corpus never
mentions (fresh names, `world.fresh_entities`). Every attribute gets as many claims of each label
and only three of them are optional (`OPTIONAL`), so the second kind is most of them: on the
default world, seed 0, 76% of the training split's NOT ENOUGH INFO claims, 85% of dev's and 87% of
test's. A model can only tell them apart by reading: the claim's wording never gives the label
away. `gold_passage_ids` are the evidence (none for NOT ENOUGH INFO). fever_test_b.jsonl holds the
test claims again, labelled against snapshot B.

Records use the QA format (`records.QAExample`): Jeopardy examples are kind "long" (a generated
sentence, scored by Q-BLEU-1 and BLEU-1), FEVER examples kind "short" (one label, scored by accuracy).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import replace

from lewisrag.data.entities import (
    Entity,
    format_count,
    format_population,
    parse_population,
    render,
)
from lewisrag.data.names import Namer
from lewisrag.data.records import Passage, QAExample

SPLITS = ("train", "dev", "test")

# --- Jeopardy ---------------------------------------------------------------------------------

CLUES = {  # each joins a fact of passage 0 with one of passage 1; the entity is "this ..."
    "country": (
        "This country with its capital at {capital} has been led by {title} {leader} since {since}.",
        "This country, founded in {founded}, is home to {population} people.",
        "{Title} {leader} leads this country, where people pay with the {currency}.",
        "{Language} is the official language of this country of {population} people.",
    ),
    "organisation": (
        "This organisation, based in {headquarters}, has been headed by {title} {head} since {since}.",
        # the field as the passages write it ("the arts"): put before "organisation" it read "this the arts organisation"
        "Founded in {founded}, this organisation in {field} counts {members} members.",
        "{Title} {head} leads this body, which has its headquarters in {headquarters}.",
    ),
}


def clues(entity: Entity, snapshot: int = 0) -> list[str]:
    """Every clue about `entity` as snapshot `snapshot` states its facts, in template order.

    >>> e = Entity("organisation-0001", "organisation", "Kelmora Institute", "test",
    ...            {"founded": "1901", "headquarters": "Zerth", "field": "research", "title": "Director", "meetings": "4"},
    ...            ({"head": "Dova Kelm", "since": "2011", "members": "4,350"},) * 2, 0)
    >>> clues(e)[1]
    'Founded in 1901, this organisation in research counts 4,350 members.'
    """
    facts = {**entity.static, **entity.snapshots[snapshot]}
    upper = {"Title": facts["title"], "Language": facts.get("language", "")}
    return [t.format(**facts, **upper) for t in CLUES[entity.kind]]


def jeopardy_examples(split: str, entities: Sequence[Entity], rng: random.Random) -> list[QAExample]:
    """One split's Jeopardy examples, shuffled: every clue of every entity for training, one example
    per entity with all its clues as references for dev and test. Gold ids: both passages."""
    out = []
    for e in entities:
        gold = [f"{e.slot}-0", f"{e.slot}-1"]
        cs = clues(e)
        if split == "train":
            out += [QAExample("", e.name, [c], gold, kind="long") for c in cs]
        else:
            first = rng.randrange(len(cs))  # answers[0]: one clue, the others follow as further references
            out.append(QAExample("", e.name, [cs[first], *cs[:first], *cs[first + 1:]], gold, kind="long"))
    rng.shuffle(out)
    return [_with_id(ex, f"jeopardy-{split}-{i:05d}") for i, ex in enumerate(out, start=1)]


# --- FEVER ------------------------------------------------------------------------------------

SUPPORTS, REFUTES, NEI = "SUPPORTS", "REFUTES", "NOT ENOUGH INFO"
LABELS = (SUPPORTS, REFUTES, NEI)  # FEVER's label strings, in the paper's order
CLAIMS = {  # attribute: phrasings with {v} the claimed value
    "capital": ("The capital of {ref} is {v}.", "{Ref} has its capital in {v}."),
    "currency": ("{Ref} uses the {v} as its currency.", "The currency of {ref} is the {v}."),
    "founded": ("{Ref} was founded in {v}.", "{Ref} was established in {v}."),
    "language": ("{V} is the official language of {ref}.", "People in {ref} speak {v} as the official language."),
    "leader": ("{Ref} is led by {title} {v}.", "The {title_l} of {ref} is {v}."),
    "population": ("{Ref} has a population of {v}.", "About {v} people live in {ref}."),
    "headquarters": ("{Ref} is based in {v}.", "The headquarters of {ref} are in {v}."),
    "head": ("{Ref} is headed by {title} {v}.", "The {title_l} of {ref} is {v}."),
    "members": ("{Ref} has {v} members.", "Membership of {ref} stands at {v}."),
    "term": ("{Ref} holds elections every {v} years.",),
    "seats": ("The national assembly of {ref} has {v} seats.",),
    "meetings": ("The council of {ref} meets {v} times a year.",),
}
STATED = {"country": ("capital", "currency", "founded", "language", "leader", "population"),
          "organisation": ("headquarters", "founded", "head", "members")}
VARYING = ("leader", "population", "head", "members")  # in passage 1, and changed in snapshot B for most entities
OPTIONAL = {"country": ("term", "seats"), "organisation": ("meetings",)}  # stated by some entities' passages only
NAME_SORTS = {  # attribute: the Namer method that makes up a value of its sort (_false_value's last resort)
    "capital": "city", "headquarters": "city", "leader": "person", "head": "person", "currency": "currency",
    "language": "language",
}
OPTIONAL_PHRASES = {"term": ("every {v} years", 1), "seats": ("has {v} seats", 1), "meetings": ("meets {v} times", 0)}
ABSENT_SHARE = 0.5  # entities the corpus never mentions, per entity of a split: NOT ENOUGH INFO claims about them


def article(passage_id: str) -> str:
    """The world's article a passage is part of, the entity it describes (its `slot`): the passage's
    id less its number. FEVER's evidence is a Wikipedia page, so the paper counts a retrieved
    document as evidence when it comes from a gold article (`experiments.tasks.evidence_overlap`).

    >>> article("country-0001-1"), article("organisation-0042-2")
    ('country-0001', 'organisation-0042')
    """
    return passage_id.rsplit("-", 1)[0]


def stated_optional(entity: Entity) -> tuple[str | None, str | None]:
    """(the optional attribute `entity`'s passages state, one they do not), None where it has no such pair.

    >>> e = Entity("organisation-0001", "organisation", "Kelmora Institute", "test",
    ...            {"founded": "1901", "headquarters": "Zerth", "field": "research", "title": "Director", "meetings": "4"},
    ...            ({"head": "Dova Kelm", "since": "2011", "members": "4,350"},) * 2, 0)
    >>> stated_optional(e) in (("meetings", None), (None, "meetings"))
    True
    """
    said, unsaid = None, None
    for attr in OPTIONAL[entity.kind]:
        phrase, k = OPTIONAL_PHRASES[attr]
        if phrase.format(v=entity.static[attr]) in render(entity, k).text:
            said = attr
        else:
            unsaid = attr
    return said, unsaid


def claim(entity: Entity, attr: str, value: str, rng: random.Random) -> str:
    """A claim that `entity`'s `attr` is `value`, in one of CLAIMS[attr]'s phrasings."""
    ref, title = entity.ref, entity.static["title"]
    return rng.choice(CLAIMS[attr]).format(ref=ref, Ref=ref[0].upper() + ref[1:], v=value, V=value[0].upper() + value[1:],
                                           title=title, title_l=title.lower())


def _evidence(entity: Entity, attr: str) -> list[str]:
    if attr in OPTIONAL_PHRASES:
        return [f"{entity.slot}-{OPTIONAL_PHRASES[attr][1]}"]
    return [entity.passage_of(attr)]


def _false_value(entity: Entity, attr: str, pool: Sequence[Entity], rng: random.Random) -> str:
    """A value of `attr` that `entity` does not have in snapshot A: its snapshot-B value when that
    changed, else on an optional attribute another number in its range, else another entity's of
    `pool` (the same split) among 20 sampled. Where none of those is of its kind with another value:
    a nearby number, or for a name another entity's of the whole pool, else a made-up name of the
    same sort (a fresh one). The sample is drawn from `pool` itself: a copy of it per claim made the
    tasks of a large world quadratic in its entities."""
    true = entity.fact(attr)
    if attr in VARYING and entity.snapshots[1][attr] != true:
        return entity.snapshots[1][attr]
    if attr in OPTIONAL_PHRASES:
        low, high = {"term": (4, 6), "seats": (40, 400), "meetings": (2, 12)}[attr]
        return str(rng.choice([n for n in range(low, high + 1) if str(n) != true]))
    others = [e.fact(attr) for e in rng.sample(pool, min(len(pool), 20)) if e.kind == entity.kind]
    others = [v for v in others if v != true]
    if others:
        return others[0]
    if attr == "population":
        return format_population(parse_population(true) + rng.choice((-3, 3)))
    if attr == "members":
        return format_count(int(true.replace(",", "")) + rng.choice((-37, 37)))
    if true.isdigit():
        return str(int(true) + rng.choice((-3, 3)))
    # A name: not the true one reversed ('Drepainstok' -> 'Kotsniaperd' gave the label away; a palindrome
    # stayed true). Nothing below draws from `rng`, so the claims after this one stay as they were.
    own = random.Random(f"{entity.slot}:{attr}")
    others = [e.fact(attr) for e in pool if e.kind == entity.kind and e.fact(attr) != true]
    if others:
        return own.choice(others)
    made = getattr(Namer(own, side="fresh", lang=entity.lang), NAME_SORTS[attr])
    first = made()
    return first if first != true else made()  # a namer never gives a name twice


def fever_examples(split: str, entities: Sequence[Entity], absent: Sequence[Entity], rng: random.Random,
                   pairs: bool = False) -> list[QAExample]:
    """One split's claims, shuffled: as many of each label as there are entities, and for every
    attribute as many SUPPORTS as REFUTES as NOT ENOUGH INFO claims, so that no attribute (and no
    phrasing) tells the label: only the passages do. SUPPORTS and REFUTES claims are about facts the
    entity's passages state (each entity-attribute pair gives one of the two, or, in a split so small
    that this left no attribute with all three labels, either or both); NOT ENOUGH INFO claims
    about an optional fact its passages leave out, or about an `absent` entity. Entities with an
    archive passage are not asked about time-varying facts (the archive contradicts them on purpose:
    the evaluation's conflict category).

    With `pairs` (the training split) the claims come in minimal pairs, adjacent and sharing a
    `group`: an entity-attribute pair gives both its SUPPORTS and its REFUTES claim, worded alike
    and differing only in the value, and a NOT ENOUGH INFO pair claims the true and a false value of
    a fact the passages leave out. Trained in the same batch (`training.rag_data.group_units`), a
    pair leaves the value as the only thing that tells the labels apart; without pairs a small
    reader stayed at chance between SUPPORTS and REFUTES (docs/recipe.md)."""
    out = []
    for g, unit in enumerate(_fever_units(entities, absent, rng, pairs), start=1):
        for ex, _, _ in unit:
            ex = _with_id(ex, f"fever-{split}-{len(out) + 1:05d}")
            out.append(replace(ex, group=f"fever-{split}-pair-{g:05d}") if pairs else ex)
    return out


def verification_pairs(entities: Sequence[Entity], absent: Sequence[Entity], rng: random.Random) -> list[tuple[QAExample, Passage]]:
    """Minimal-pair claims about `entities` (fever_examples with pairs, adjacent) each with the
    passage a reader checks it against: its evidence; for NOT ENOUGH INFO the entity's passage where
    the unstated fact would be, or for an `absent` entity a passage of another entity of its kind.
    The verifier's pretraining data (training.verifier), on fresh entities."""
    by_kind: dict[str, list[Entity]] = {}
    for e in entities:
        by_kind.setdefault(e.kind, []).append(e)
    inside = {e.slot for e in entities}
    out = []
    for unit in _fever_units(entities, absent, rng, pairs=True):
        ex, e, attr = unit[0]  # both claims of a pair are read with the same passage
        if ex.gold_passage_ids:
            k = int(ex.gold_passage_ids[0].rsplit("-", 1)[1])
        else:
            k = OPTIONAL_PHRASES[attr][1] if attr in OPTIONAL_PHRASES else int(e.passage_of(attr).rsplit("-", 1)[1])
            e = e if e.slot in inside else rng.choice(by_kind.get(e.kind) or list(entities))
        passage = render(e, k)
        out += [(claim_, passage) for claim_, _, _ in unit]
    return out


def _fever_units(entities: Sequence[Entity], absent: Sequence[Entity], rng: random.Random,
                 pairs: bool) -> list[list[tuple[QAExample, Entity, str]]]:
    """fever_examples' claims (without ids) in their units, each with the entity and attribute it is about."""
    pools: dict[str, dict[str, list[Entity]]] = {label: {} for label in LABELS}  # label -> attribute -> entities
    stated: dict[str, list[Entity]] = {}  # attribute -> the entities whose passages state it
    for e in entities:
        said, unsaid = stated_optional(e)
        for attr in [a for a in STATED[e.kind] if not (e.archive and a in VARYING)] + ([said] if said else []):
            stated.setdefault(attr, []).append(e)
            for label in (SUPPORTS, REFUTES) if pairs else (rng.choice((SUPPORTS, REFUTES)),):
                pools[label].setdefault(attr, []).append(e)
        if unsaid:
            pools[NEI].setdefault(unsaid, []).append(e)
    for e in absent:
        for attr in STATED[e.kind]:
            pools[NEI].setdefault(attr, []).append(e)
    attrs = sorted(set.intersection(*(set(p) for p in pools.values())))
    if not attrs:
        # A split of a few entities whose coin tosses left no attribute with all three labels (a 53-entity
        # world's test split had none, and no claims): any stated fact may then give either label, as in pairs.
        pools[SUPPORTS] = {a: list(es) for a, es in stated.items()}
        pools[REFUTES] = {a: list(es) for a, es in stated.items()}
        attrs = sorted(set.intersection(*(set(p) for p in pools.values())))
    per_attr = {a: min(len(pools[label][a]) for label in LABELS) for a in attrs}
    scale = min(1.0, len(entities) / max(1, sum(per_attr.values())))
    units: list[list[QAExample]] = []
    for attr in attrs:
        k = max(1, round(per_attr[attr] * scale))
        if not pairs:
            for label in LABELS:
                units += [[(_fever_claim(e, attr, label, _claimed(e, attr, label, entities, rng), rng), e, attr)]
                          for e in rng.sample(pools[label][attr], k)]
            continue
        k = min(per_attr[attr], max(2, k + k % 2))  # even: its NOT ENOUGH INFO claims come two to a pair too
        for e in rng.sample(pools[SUPPORTS][attr], k):
            units.append(_fever_pair(e, attr, (SUPPORTS, REFUTES), entities, rng))
        for e in rng.sample(pools[NEI][attr], k // 2):
            units.append(_fever_pair(e, attr, (NEI, NEI), entities, rng))
    rng.shuffle(units)
    return units


def _fever_claim(e: Entity, attr: str, label: str, value: str, rng: random.Random) -> QAExample:
    return QAExample("", claim(e, attr, value, rng), [label], [] if label == NEI else _evidence(e, attr))


def _fever_pair(e: Entity, attr: str, labels: tuple[str, str], pool: Sequence[Entity],
                rng: random.Random) -> list[tuple[QAExample, Entity, str]]:
    """Two claims about `e`'s `attr` in the same words: its true value, then a false one."""
    wording = rng.random()
    values = (e.fact(attr), _false_value(e, attr, pool, rng))
    return [(_fever_claim(e, attr, label, v, random.Random(wording)), e, attr) for label, v in zip(labels, values)]


def _claimed(e: Entity, attr: str, label: str, pool: Sequence[Entity], rng: random.Random) -> str:
    """The value a claim of `label` gives: the true one (SUPPORTS), another one (REFUTES), either
    (NOT ENOUGH INFO: the passages cannot tell)."""
    if label == SUPPORTS or (label == NEI and rng.random() < 0.5):
        return e.fact(attr)
    return _false_value(e, attr, pool, rng)


def relabel(examples: Sequence[QAExample], entities: Sequence[Entity], snapshot: int) -> list[QAExample]:
    """The same claims, labelled against `snapshot`: only claims about a time-varying fact that
    changed can change label (the claim states A's value, or B's)."""
    by_slot = {e.slot: e for e in entities}
    out = []
    for ex in examples:
        label = ex.answers[0]
        e, attr = _about(ex, by_slot)
        if label != NEI and attr in VARYING and e.changed:
            label = SUPPORTS if e.fact(attr, snapshot) in _values_in(ex.question, e, attr) else REFUTES
        out.append(QAExample(ex.id, ex.question, [label], list(ex.gold_passage_ids), ex.category, [], ex.kind))
    return out


def _about(ex: QAExample, entities: Mapping[str, Entity] | Sequence[Entity]) -> tuple[Entity | None, str | None]:
    """The entity and time-varying attribute a claim's evidence points at (None for others).
    `entities` by slot, as relabel builds them once for all its claims (a search of the list per
    claim made it quadratic), or a sequence of them."""
    if not ex.gold_passage_ids or not ex.gold_passage_ids[0].endswith("-1"):
        return None, None
    by_slot = entities if isinstance(entities, Mapping) else {x.slot: x for x in entities}
    e = by_slot.get(ex.gold_passage_ids[0][: -len("-1")])
    if e is None:
        return None, None
    attr = next((a for a in VARYING if a in e.snapshots[0] and _values_in(ex.question, e, a)), None)
    return e, attr


def _values_in(text: str, e: Entity, attr: str) -> list[str]:
    values = {e.snapshots[0][attr], e.snapshots[1][attr]}
    return [v for v in values if f" {v}" in f" {text}"]


def statement_queries(examples: Sequence[QAExample]) -> list[QAExample]:
    """The reference statements of short-answer QA examples as retrieval queries with the same gold
    passages ("The capital of Valdoria is Zerth." -> the passage stating it): statement-shaped
    training queries for the retriever of the other tasks, which the world's questions alone do
    not teach (experiments.tasks, docs/recipe.md). No Jeopardy or FEVER example is used.

    >>> ex = QAExample("q1", "What is the capital of Valdoria?", ["Zerth"], ["country-0001-0"],
    ...                reference_statements=["The capital of Valdoria is Zerth."])
    >>> statement_queries([ex])[0].question
    'The capital of Valdoria is Zerth.'
    """
    return [QAExample(f"{ex.id}-statement", ex.reference_statements[0], ex.answers, ex.gold_passage_ids)
            for ex in examples if ex.kind == "short" and len(ex.reference_statements) == 1 and ex.gold_passage_ids]


def _with_id(ex: QAExample, qid: str) -> QAExample:
    return replace(ex, id=qid)


def task_files(entities: Sequence[Entity], absent: dict[str, Sequence[Entity]], rng_for) -> dict[str, list[QAExample]]:
    """Every task file of the world by stem: jeopardy_<split>, fever_<split>, fever_test_b.
    `absent[split]`: fresh entities for that split's NOT ENOUGH INFO claims; `rng_for(part)` a
    seeded generator per part, so each file is deterministic on its own."""
    by_split = {s: [e for e in entities if e.split == s] for s in SPLITS}
    files = {}
    for s in SPLITS:
        files[f"jeopardy_{s}"] = jeopardy_examples(s, by_split[s], rng_for(f"jeopardy:{s}"))
        files[f"fever_{s}"] = fever_examples(s, by_split[s], absent[s], rng_for(f"fever:{s}"), pairs=s == "train")
    files["fever_test_b"] = relabel(files["fever_test"], by_split["test"], snapshot=1)
    return files
