"""Every reference statement of the built-in world states only what its gold passage states, in
whichever phrasing the passage was rendered (questions' docstring: "each statement a fact of the
gold passage"). The leader statement named the form of government ("X is a kingdom led by Queen Y"),
which one of the three phrasings of passage 1 leaves out ("The queen of X is Y"): about a third of
the leader statements taught and scored a fact no passage gave."""

import dataclasses
import string

import pytest

from lewisrag.data import questions
from lewisrag.data.world import build_world, check_world

ENTITIES = 200


@pytest.fixture(scope="module", params=("en", "zh"))
def world(request):
    return build_world(seed=0, entities=ENTITIES, lang=request.param)


def asserted(entity, attr, snapshot):
    """The values the statement template of `attr` fills in, but the entity's name (the passage's
    title), read off the template itself rather than through questions.statement_facts."""
    facts = {**entity.static, **entity.snapshots[snapshot]}
    facts |= {"title_l": facts["title"].lower(), "who": facts.get("leader", facts.get("head"))}
    template = questions.text_tables(entity.lang).STATEMENTS[attr]
    return [facts[n] for _, n, _, _ in string.Formatter().parse(template) if n and n not in ("ref", "Ref")]


def test_every_statement_asserts_only_what_a_gold_passage_states(world):
    ents = {e.slot: e for e in world.entities}
    attrs = {"country": ("capital", "currency", "founded", "language", "leader", "population", "since", "exports", "region"),
             "organisation": ("headquarters", "founded", "head", "members", "since", "field")}
    unstated, n = [], 0
    for stem, qs in world.questions.items():
        snapshot = 1 if stem == "questions_b" else 0
        text = {p.id: f"{p.title} {p.text}".lower() for p in (world.passages_b if snapshot else world.passages_a)}
        for q in qs:
            for s in q.reference_statements:
                n += 1
                gold = [(ents[g.rsplit("-", 1)[0]], g) for g in q.gold_passage_ids]
                sources = [(e, a, g) for e, g in gold for a in attrs[e.kind]]
                sources = [(e, a, g) for e, a, g in sources if e.passage_of(a) == g and questions.statement(e, a, snapshot) == s]
                assert sources, (stem, q.id, s)
                if not any(all(v.lower() in text[g] for v in asserted(e, a, snapshot)) for e, a, g in sources):
                    unstated.append((stem, q.id, s))
    assert n > 1000 and not unstated, (len(unstated), unstated[:3])


def test_the_leader_statement_is_the_fact_every_phrasing_states():
    e = next(e for e in build_world(seed=0, entities=40).entities if e.kind == "country")
    assert questions.statement(e, "leader") == f"The {e.static['title'].lower()} of {e.name} is {e.snapshots[0]['leader']}."
    z = next(e for e in build_world(seed=0, entities=40, lang="zh").entities if e.kind == "country")
    assert questions.statement(z, "leader") == f"{z.name}的{z.static['title']}是{z.snapshots[0]['leader']}。"
    assert questions.statement_facts(z, "leader") == [z.static["title"], z.snapshots[0]["leader"]]


@pytest.mark.parametrize("lang, old", [("en", "{Ref} is a {government} led by {title} {leader}."),
                                       ("zh", "{ref}是一个{government}，由{title}{leader}领导。")])
def test_check_world_refuses_a_statement_its_gold_passage_does_not_state(monkeypatch, lang, old):
    """The old leader template again: check_world (which write_world runs) names the question, the
    statement, the unstated fact and the passage."""
    monkeypatch.setitem(questions.text_tables(lang).STATEMENTS, "leader", old)
    w = build_world(seed=0, entities=ENTITIES, lang=lang)
    with pytest.raises(ValueError, match=r"reference statement .* states '[^']+', which its gold passage country-\d+-1 does not"):
        check_world(w)


def test_check_world_refuses_a_statement_of_no_gold_passage():
    w = build_world(seed=0, entities=40)
    q = w.questions["test"][0]
    w.questions["test"] = (dataclasses.replace(q, reference_statements=["Valdoria is a kingdom."]), *w.questions["test"][1:])
    with pytest.raises(ValueError, match=rf"test {q.id}: reference statement 'Valdoria is a kingdom.' is about no fact"):
        check_world(w)
