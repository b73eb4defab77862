"""Multi-document evaluation questions: each pair of entities is compared once (a small world asked
"Which has more inhabitants, Vekdalea or Talfo?" seven times), and a world that never repeated a pair
draws exactly the questions it drew before."""

import itertools
import random
from collections import Counter

import pytest

from lewisrag.data import questions as Q
from lewisrag.data.entities import parse_population
from lewisrag.data.world import build_world


def _pair(q):
    """What a multi-document question is about: its gold passages, in either order for a comparison."""
    return frozenset(q.gold_passage_ids) if q.question.startswith("Which") else tuple(q.gold_passage_ids)


@pytest.mark.parametrize("seed,entities", [(0, 60), (0, 40), (1, 40), (5, 60), (7, 120)])
def test_multi_doc_questions_never_repeat(seed, entities):
    w = build_world(seed=seed, entities=entities)
    multi = [q for q in w.questions["eval"] if q.category == "multi_doc"]
    assert multi and len(multi) <= Q.EVAL_SIZES["multi_doc"]
    assert len({q.question for q in multi}) == len(multi)
    repeated = [p for p, n in Counter(_pair(q) for q in multi).items() if n > 1]
    assert not repeated, repeated


def test_the_questions_stop_when_the_pairs_run_out():
    w = build_world(seed=0, entities=60)
    plain = [e for e in w.entities if e.split == "test" and not e.archive and not e.lookalike_of
             and e.name not in {x.lookalike_of for x in w.entities}]
    countries = [e for e in plain if e.kind == "country"]
    qs = Q.multi_doc_questions(plain, random.Random(0), 1000)
    older = [q for q in qs if q.question.startswith("Which was founded")]
    bigger = [q for q in qs if q.question.startswith("Which has more")]
    assert len(older) == sum(x.fact("founded") != y.fact("founded") for x, y in itertools.combinations(plain, 2))
    assert len(bigger) == sum(x.fact("population") != y.fact("population") for x, y in itertools.combinations(countries, 2))


def _first_version(entities, rng, n):
    """multi_doc_questions as the first version drew them (a pair could come again), and whether a
    pair did (one with equal facts, which asked nothing, included)."""
    t = Q.text_tables(entities[0].lang)
    countries = [e for e in entities if e.kind == "country"]
    by_capital = {c.static["capital"]: c for c in countries}
    capital = [Q._two(c, c, ("capital", "leader"), c.fact("leader"), rng.choice(t.VIA_CAPITAL)) for c in countries]
    hosted = [o for o in entities if o.kind == "organisation" and o.static["headquarters"] in by_capital]
    hq = [Q._two(o, by_capital[o.static["headquarters"]], ("headquarters", "capital"), by_capital[o.static["headquarters"]].name,
                 rng.choice(t.VIA_HEADQUARTERS)) for o in hosted]
    older, bigger, drawn = [], [], []
    for _ in range(n):
        x, y = rng.sample(entities, 2)
        drawn.append(("founded", frozenset((x.slot, y.slot))))
        if x.fact("founded") != y.fact("founded"):
            older.append(Q._compare(x, y, "founded", min(x, y, key=lambda e: int(e.fact("founded"))), t.FOUNDED_EARLIER))
        a, b = rng.sample(countries, 2)
        drawn.append(("population", frozenset((a.slot, b.slot))))
        size = {e.name: parse_population(e.fact("population")) for e in (a, b)}
        if size[a.name] != size[b.name]:
            bigger.append(Q._compare(a, b, "population", max(a, b, key=lambda e: size[e.name]), t.MORE_INHABITANTS))
    kinds = [rng.sample(k, len(k)) for k in (capital, hq, older, bigger)]
    return [q for round_ in itertools.zip_longest(*kinds) for q in round_ if q][:n], len(set(drawn)) < len(drawn)


@pytest.fixture(scope="module")
def pool():
    return [e for e in build_world(seed=7, entities=2000).entities if e.split == "test"]


def test_without_a_repeated_pair_the_draws_are_the_first_versions(pool):
    kept = 0
    for seed in range(8):
        old, repeated = _first_version(pool, random.Random(seed), 40)
        if not repeated:
            assert Q.multi_doc_questions(pool, random.Random(seed), 40) == old, seed
            kept += 1
    assert kept >= 4


@pytest.mark.parametrize("draws", [0, 50])
def test_a_large_pool_with_every_pair_asked_gives_none_and_stops(draws, monkeypatch):
    """A pool of over 64 entities is drawn from at random, then walked in full: with every pair whose
    founding years differ asked already, the draw ends in None (it used to draw without end)."""
    monkeypatch.setattr(Q, "RANDOM_DRAWS", draws)
    pool = build_world(seed=0, entities=80).entities[:70]
    differ = [(x, y) for x, y in itertools.combinations(pool, 2) if x.fact("founded") != y.fact("founded")]
    asked = {frozenset((x.slot, y.slot)) for x, y in differ}
    assert Q._unasked(list(differ[0]), pool, "founded", asked, random.Random(0)) is None
    last = differ.pop(len(differ) // 2)  # one pair left: the walk finds it whatever the draws missed
    asked.discard(frozenset((last[0].slot, last[1].slot)))
    found = Q._unasked(list(differ[0]), pool, "founded", asked, random.Random(0))
    assert found is not None and {e.slot for e in found} == {last[0].slot, last[1].slot}
