"""The world's Jeopardy and FEVER files keep their promises: clues that join two passages and never
name their entity, claims whose label only reading can decide, entity-disjoint splits, and test
claims relabelled against snapshot B exactly where a time-varying fact changed."""

import re
from collections import Counter

import pytest

from lewisrag.data import tasks as T
from lewisrag.data.world import SPLITS, build_world


@pytest.fixture(scope="module")
def world():
    return build_world(seed=3, entities=300)


def _passages(world, snapshot=0):
    return {p.id: p for p in (world.passages_a if snapshot == 0 else world.passages_b)}


CLUE_WORDS = {w.strip(".,").lower() for ts in T.CLUES.values() for t in ts for w in t.split() if "{" not in w}


def _words(text: str) -> set[str]:
    return {w.strip(".,").lower() for w in text.split()}


def test_clues_join_two_passages_and_never_name_the_entity(world):
    by_id = _passages(world)
    for stem in ("jeopardy_train", "jeopardy_test"):
        for ex in world.tasks[stem]:
            assert ex.kind == "long" and sorted(ex.gold_passage_ids) == [g for g in sorted(ex.gold_passage_ids) if g in by_id]
            static, varying = (_words(by_id[g].text) for g in sorted(ex.gold_passage_ids))
            for clue in ex.answers:
                assert ex.question not in clue
                facts = _words(clue) - CLUE_WORDS
                assert facts <= static | varying and facts & static - varying and facts & varying - static, clue


def test_dev_and_test_hold_one_example_per_entity_with_every_clue(world):
    test_entities = [e for e in world.entities if e.split == "test"]
    exs = world.tasks["jeopardy_test"]
    assert sorted(ex.question for ex in exs) == sorted(e.name for e in test_entities)
    for ex in exs:
        e = next(e for e in test_entities if e.name == ex.question)
        assert sorted(ex.answers) == sorted(T.clues(e))


def test_splits_are_entity_disjoint(world):
    train_inputs = {ex.question for ex in world.tasks["jeopardy_train"]}
    held = {e.name for e in world.entities if e.split != "train"}
    assert not train_inputs & held
    train_claims = " ".join(ex.question for ex in world.tasks["fever_train"])
    assert not any(f" {name} " in f" {train_claims} " for name in held if " " not in name)


TEMPLATE_WORDS = {w.strip(".,").lower() for ps in T.CLAIMS.values() for p in ps for w in p.replace("{", " ").replace("}", " ").split()}


def _unstated(claim: str, passage) -> set[str]:
    """Words of `claim` that neither its phrasing nor `passage` (title and text) contains."""
    seen = {w.strip(".,").lower() for w in f"{passage.title} {passage.text}".split()} | TEMPLATE_WORDS | {"the"}
    return {w for w in (x.strip(".,").lower() for x in claim.split()) if w and w not in seen}


def test_fever_labels_are_balanced_and_decided_by_the_passages(world):
    by_id = _passages(world)
    for split in SPLITS:
        exs = world.tasks[f"fever_{split}"]
        counts = Counter(ex.answers[0] for ex in exs)
        assert set(counts) == set(T.LABELS)
        assert max(counts.values()) / len(exs) < 0.36
        for ex in exs:
            if ex.answers[0] == T.NEI:
                assert ex.gold_passage_ids == []
                continue
            (evidence,) = [by_id[g] for g in ex.gold_passage_ids]
            assert bool(_unstated(ex.question, evidence)) == (ex.answers[0] == T.REFUTES), (ex.question, evidence.text)


def _attribute(claim: str) -> str:
    """The attribute a claim is about, told by the phrasing it matches."""
    for attr, phrasings in T.CLAIMS.items():
        for p in phrasings:
            pattern = re.escape(p)
            for slot in ("ref", "Ref", "v", "V", "title", "title_l"):
                pattern = pattern.replace(re.escape("{" + slot + "}"), ".+")
            if re.fullmatch(pattern, claim):
                return attr
    raise AssertionError(f"no phrasing matches {claim!r}")


def test_no_attribute_tells_the_label(world):
    """Every attribute has as many SUPPORTS as REFUTES as NOT ENOUGH INFO claims, so a model that
    reads only the claim cannot beat a third; some NOT ENOUGH INFO claims name entities the corpus
    never mentions."""
    for split in SPLITS:
        by_attr = {}
        for ex in world.tasks[f"fever_{split}"]:
            attr = _attribute(ex.question)
            attr = "leader or head" if attr in ("leader", "head") else attr  # "The president of X is Y." is either
            by_attr.setdefault(attr, Counter())[ex.answers[0]] += 1
        assert {"term", "seats", "meetings", "capital", "leader or head"} <= set(by_attr)
        for attr, counts in by_attr.items():
            assert counts[T.SUPPORTS] == counts[T.REFUTES] == counts[T.NEI] > 0, (split, attr, counts)
    corpus_names = {e.name for e in world.entities}
    assert any(ex.answers[0] == T.NEI and not any(n in ex.question for n in corpus_names) for ex in world.tasks["fever_train"])


def test_snapshot_b_relabels_exactly_the_changed_time_varying_claims(world):
    by_b = _passages(world, snapshot=1)
    changed = 0
    for a, b in zip(world.tasks["fever_test"], world.tasks["fever_test_b"]):
        assert (a.id, a.question, a.gold_passage_ids) == (b.id, b.question, b.gold_passage_ids)
        if a.answers != b.answers:
            changed += 1
            assert a.gold_passage_ids[0].endswith("-1") and T.NEI not in a.answers + b.answers
            (evidence,) = [by_b[g] for g in b.gold_passage_ids]
            assert bool(_unstated(b.question, evidence)) == (b.answers[0] == T.REFUTES), (b.question, evidence.text)
    assert changed >= 5


def test_training_claims_come_in_minimal_pairs(world):
    """The training split's claims come two by two, adjacent and sharing a group: the same words
    about the same entity's fact, differing only in the value (SUPPORTS then REFUTES, or two NOT
    ENOUGH INFO claims); dev and test hold one claim per entity-attribute, ungrouped."""
    exs = world.tasks["fever_train"]
    assert len(exs) % 2 == 0
    for a, b in zip(exs[::2], exs[1::2]):
        assert a.group == b.group is not None and a.group != exs[exs.index(a) - 1].group
        assert (a.answers[0], b.answers[0]) in ((T.SUPPORTS, T.REFUTES), (T.NEI, T.NEI)), (a, b)
        assert a.gold_passage_ids == b.gold_passage_ids and _attribute(a.question) == _attribute(b.question)
        words_a, words_b = a.question.rstrip(".").split(), b.question.rstrip(".").split()
        assert len(words_a) == len(words_b), (a.question, b.question)  # zip would hide a word added or lost
        differ = [i for i, (x, y) in enumerate(zip(words_a, words_b)) if x != y]
        # one value's words, side by side: a run of consecutive positions, nothing else changed
        assert differ and differ == list(range(differ[0], differ[-1] + 1)) and len(differ) <= 3, (a.question, b.question)
    assert len({ex.group for ex in exs}) == len(exs) // 2
    for split in ("dev", "test"):
        assert all(ex.group is None for ex in world.tasks[f"fever_{split}"])


@pytest.mark.parametrize("seed,entities", [(3, 53), (16, 40), (0, 40)])
def test_no_task_file_of_a_small_world_is_empty(seed, entities):
    """seed 3, 53 entities wrote fever_test.jsonl with no claims (no attribute of its five test
    entities had all three labels; seed 16, 40 entities: fever_dev.jsonl), which every later reader
    refused ("no examples")."""
    w = build_world(seed=seed, entities=entities)
    assert all(w.tasks[stem] for stem in w.tasks), {stem: len(exs) for stem, exs in w.tasks.items()}
    for s in SPLITS:
        assert {q.answers[0] for q in w.tasks[f"fever_{s}"]} == set(T.LABELS), s


def test_a_world_with_an_empty_task_file_is_not_written(tmp_path):
    from dataclasses import replace

    from lewisrag.data.world import write_world

    w = build_world(seed=0, entities=40)
    with pytest.raises(ValueError, match="fever_dev: no examples"):
        write_world(replace(w, tasks={**w.tasks, "fever_dev": ()}), tmp_path / "w")
    assert not (tmp_path / "w").exists()
