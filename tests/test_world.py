"""The built-in world keeps its promises: determinism, held-out entities, verbatim answers, two
snapshots that differ in time-varying facts only, all evaluation categories, and fresh text that
shares no name with the world."""

import doctest
import random
import re
from collections import Counter

import pytest

from lewisrag.data import entities, names, questions
from lewisrag.data.records import CATEGORIES, read_passages, read_qa
from lewisrag.data.world import (
    MAX_WORDS,
    QUESTION_FILES,
    TASK_FILES,
    build_world,
    check_world,
    fresh_documents,
    fresh_examples,
    fresh_entities,
    summary,
    write_world,
)

SMALL = 120


@pytest.fixture(scope="module")
def world():
    return build_world(seed=7, entities=SMALL)


@pytest.fixture(scope="module")
def big():
    return build_world(seed=7)  # the default size: about 0.5 s


def made_up_words(e):
    """Every made-up word that names or describes entity e (all facts that come from the namer)."""
    facts = [e.name, e.static.get("capital", ""), e.static.get("currency", ""), e.static.get("language", ""),
             *(s.get("leader", s.get("head", "")) for s in e.snapshots)]
    return {w for f in facts for w in f.split() if w[:1].isupper() or f == e.static.get("currency")} - {
        "New", "North", "South", "Upper", "Lower", "East", "West", *(k for kind in entities.ORG_KINDS for k in kind[0].split())}


def mentions(text, phrase):
    """Whether `phrase` occurs in `text` as whole words ('200' is not in '2006' nor in '1,200')."""
    return re.search(rf"(?<![\w,.]){re.escape(phrase)}(?![\w]|[.,]\d)", text) is not None


def test_mentions():
    assert mentions("counts 200 members.", "200") and not mentions("since 2006", "200") and not mentions("1,200", "200")


def test_doctests():
    for module in (names, entities, questions):
        assert doctest.testmod(module).failed == 0


def test_same_seed_same_files_and_other_seed_differs(tmp_path, world):
    write_world(world, tmp_path / "a")
    write_world(build_world(seed=7, entities=SMALL), tmp_path / "b")
    write_world(build_world(seed=8, entities=SMALL), tmp_path / "c")
    files = sorted(p.name for p in (tmp_path / "a").iterdir() if p.name != ".lewisrag")
    stems = (*QUESTION_FILES, *TASK_FILES)
    assert files == sorted([*(f"{s}.jsonl" for s in stems), "passages_a.jsonl", "passages_b.jsonl", "world.json"])
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert (tmp_path / "a" / "passages_a.jsonl").read_bytes() != (tmp_path / "c" / "passages_a.jsonl").read_bytes()


def test_files_read_back_with_the_project_readers(tmp_path, world):
    write_world(world, tmp_path)
    assert len(read_passages(tmp_path / "passages_b.jsonl")) == len(world.passages_b)
    for stem in QUESTION_FILES:
        assert [q.to_dict() for q in read_qa(tmp_path / f"{stem}.jsonl")] == [q.to_dict() for q in world.questions[stem]]
    for stem in TASK_FILES:
        assert [q.to_dict() for q in read_qa(tmp_path / f"{stem}.jsonl")] == [q.to_dict() for q in world.tasks[stem]]


def test_held_out_entities_never_appear_in_train_questions(big):
    train_text = " ".join(f"{q.question} {' '.join(q.answers)} {' '.join(q.reference_statements)}" for q in big.questions["train"])
    train_words = set(re.findall(r"[\w-]+", train_text))
    for split in ("dev", "test"):
        held = [e for e in big.entities if e.split == split]
        assert {e.name for e in held} == set(big.split_entities[split])
        leaked = {w for e in held for w in made_up_words(e)} & train_words
        assert not leaked, f"{split} words in train questions: {sorted(leaked)[:5]}"
    # and each split asks about its own entities only
    test_names = set(big.split_entities["test"])
    assert all(any(n in q.question for n in test_names) for q in big.questions["test"][:200])


def test_passages_are_short_titled_and_aligned(big):
    assert len(big.passages_a) == len(big.passages_b) > 3000
    for a, b in zip(big.passages_a, big.passages_b):
        assert a.id == b.id and a.title == b.title != ""
        assert len(a.text.split()) <= MAX_WORDS and len(b.text.split()) <= MAX_WORDS
        if a.id.endswith(("-0", "-2")):
            assert a == b, "static and archive passages are the same in both snapshots"
    changed = sum(e.changed for e in big.entities) / len(big.entities)
    assert 0.8 <= changed <= 0.9


def test_gold_passages_exist_and_hold_short_answers_verbatim(big):
    check_world(big)  # the same promise, as write_world checks it
    snaps = {"a": {p.id: p for p in big.passages_a}, "b": {p.id: p for p in big.passages_b}}
    for stem in QUESTION_FILES:
        by_id = snaps["b" if stem == "questions_b" else "a"]
        for q in big.questions[stem]:
            gold = [by_id[g] for g in q.gold_passage_ids]
            if q.category == "not_in_kb":
                assert q.answers == [] and gold == []
            elif q.kind == "short":
                assert any(q.answers[0] in f"{p.title} {p.text}" for p in gold), (stem, q)
            else:
                assert 2 <= len(q.reference_statements) <= 4 and q.answers == [" ".join(q.reference_statements)]


def test_question_mix_and_phrasings(big):
    for split in ("train", "dev", "test"):
        qs = big.questions[split]
        share_long = sum(q.kind == "long" for q in qs) / len(qs)
        assert 0.10 <= share_long <= 0.15, (split, share_long)
    capital = [q.question for q in big.questions["train"] if q.gold_passage_ids[0].endswith("-0") and "capital" in q.question]
    assert len({re.sub(r"\b[A-Z]\w+\b", "X", q) for q in capital}) >= 4


def test_knowledge_update_questions_follow_their_snapshot(big):
    qa, qb = big.questions["questions_a"], big.questions["questions_b"]
    assert len(qa) == len(qb) > 100
    pa, pb = {p.id: p for p in big.passages_a}, {p.id: p for p in big.passages_b}
    for a, b in zip(qa, qb):
        assert (a.id, a.question, a.gold_passage_ids) == (b.id, b.question, b.gold_passage_ids)
        assert a.answers != b.answers
        (g,) = a.gold_passage_ids
        assert mentions(pa[g].text, a.answers[0]) and not mentions(pb[g].text, a.answers[0])
        assert mentions(pb[g].text, b.answers[0]) and not mentions(pa[g].text, b.answers[0])


def test_eval_has_every_category_with_its_shape(world, big):
    for w in (world, big):
        cats = summary(w)["eval_categories"]
        assert set(cats) == set(CATEGORIES) and min(cats.values()) >= 1, cats
    corpus = " ".join(f"{p.title} {p.text}" for p in big.passages_a)
    by_name = {e.name: e for e in big.entities}
    for q in big.questions["eval"]:
        assert q.reference_statements or q.category == "not_in_kb"
        if q.category == "multi_doc":
            assert len(set(q.gold_passage_ids)) == 2
        if q.category == "distractor":
            (e,) = [e for e in big.entities if e.passage_of("founded").rsplit("-", 1)[0] == q.gold_passage_ids[0].rsplit("-", 1)[0]]
            assert e.lookalike_of or any(t.lookalike_of == e.name for t in big.entities)
        if q.category == "conflict":
            slot = q.gold_passage_ids[0].rsplit("-", 1)[0]
            archive = next(p for p in big.passages_a if p.id == f"{slot}-2")
            assert q.answers[0] not in archive.text
    for e in big.absent:
        assert not re.search(rf"\b{re.escape(e.name)}\b", corpus) and e.name not in by_name


def test_fresh_text_is_new_and_consistent(big):
    world_words = {w for e in big.entities for w in made_up_words(e)}
    docs = fresh_documents(random.Random(1), 50)
    assert len(docs) == 50 and docs == fresh_documents(random.Random(1), 50)
    assert all(len(p.text.split()) <= MAX_WORDS and p.title for p in docs)
    fresh_words = {w for e in fresh_entities(random.Random(2), 300) for w in made_up_words(e)}
    assert not fresh_words & world_words
    assert all(names.word_side(w) == "fresh" for w in fresh_words if " " not in w)
    examples, passages = fresh_examples(random.Random(3), 200)
    by_id = {p.id: p for p in passages}
    assert len(examples) == 200 and len({q.id for q in examples}) == 200
    assert any(q.kind == "long" for q in examples)
    for q in examples:
        if q.kind == "short":
            assert any(q.answers[0] in by_id[g].text for g in q.gold_passage_ids)


def test_no_made_up_word_names_two_things_whatever_the_case(big):
    """The currency 'batrai' beside the country 'Batrai' (seed 0: 14 such pairs; seed 7 more): every
    retriever and scorer lower-cases, so a question about one found the other's passage."""
    words = {w for e in (*big.entities, *big.absent) for w in made_up_words(e)}
    twice = [w for w, n in Counter(w.lower() for w in words).items() if n > 1]
    assert not twice, twice[:5]


def test_fresh_examples_come_four_to_seven_an_entity():
    """fresh_examples' docstring said 5-7: an organisation has 4 short questions and maybe a long one."""
    examples, _ = fresh_examples(random.Random(5), 600)
    last = examples[-1].id.rsplit("-q", 1)[0]  # the last entity's questions may be cut short
    per_entity = Counter(q.id.rsplit("-q", 1)[0] for q in examples if not q.id.startswith(f"{last}-q"))
    assert set(per_entity.values()) == {4, 5, 6, 7}
    assert "(4-7 each" in " ".join(fresh_examples.__doc__.split())


def test_too_small_a_world_is_refused():
    with pytest.raises(ValueError, match="between"):
        build_world(seed=0, entities=10)


def test_statements_read_as_sentences(world):
    e = next(e for e in world.entities if e.kind == "organisation")
    s = questions.statement(e, "members")
    assert s.startswith("The ") and s.endswith(" members.") and e.snapshots[0]["members"] in s


@pytest.mark.parametrize("seed", range(12))
def test_the_smallest_worlds_still_have_every_category(seed):
    w = build_world(seed=seed, entities=40)
    check_world(w)
    cats = summary(w)["eval_categories"]
    assert min(cats.values()) >= 1, cats
    assert all(w.questions[s] for s in ("train", "dev", "test", "questions_a"))


def test_dates_are_consistent(big):
    for e in big.entities:
        founded, (a, b) = int(e.static["founded"]), e.snapshots
        assert founded < int(a["since"]) <= 2016
        assert int(b["since"]) == int(a["since"]) or 2017 <= int(b["since"]) <= 2018
        if e.archive:
            assert founded < int(e.archive["year"]) < int(a["since"])


def test_default_size_is_deterministic_too(tmp_path, big):
    write_world(big, tmp_path / "a")
    write_world(build_world(seed=7), tmp_path / "b")
    for p in sorted((tmp_path / "a").iterdir()):
        assert p.read_bytes() == (tmp_path / "b" / p.name).read_bytes(), p.name


def test_an_exhausted_name_space_is_an_error_not_a_hang():
    namer = names.Namer(random.Random(0), side="world")
    with pytest.raises(ValueError, match="no unused"):
        for _ in range(1000):
            namer.word((1, 1))  # one-syllable words of four letters or more: about 250 on each side


# sha256 of the English files of build_world(seed=0, entities=120) as written before the language
# layer (lang_zh) existed; the Jeopardy/FEVER files and world.json (which counts them) are left out,
# as data/tasks.py changes them on its own. Since changed: eval.jsonl's multi-document questions no
# longer compare a pair twice (questions.multi_doc_questions), and every question file's leader
# statements (answers of the long "government" questions too) read "The king of X is Y." where they
# named the form of government, which a passage may leave out (passages unchanged)
ENGLISH_SEED0_SHA256 = {
    "dev.jsonl": "1265e3ee560d2bbd0e68ed5ac9848b6025ba707c8d6aa844ecdfac6291bafe4e",
    "eval.jsonl": "872074cccd091d6408da94a28ca705a1e56e2f0962e85aa00f765683eef44b43",
    "passages_a.jsonl": "443016a6457d7f4ed1287f463c945b23b7d78921f85fda2cd7a69bdba0f0af69",
    "passages_b.jsonl": "8ff35b8baf3db82fbd95e0b120b0f09118b3d3e4071c895b7166fa3172bf6eb0",
    "questions_a.jsonl": "b41043bd98ebd1eea91f6b0cfa8c204aa3f4d366fd6c56cf7e14afc540450dd1",
    "questions_b.jsonl": "89f8c34e194c4a90dadb7313636630f9d4d6619c409b7c602c822e8118a8f2a5",
    "test.jsonl": "3a184575526997fc346570e651c7d1b7b0397cda0dd93a09b943a615c5517fe2",
    "train.jsonl": "df7fdbe6937e9d55b3a94d0c9614e084126adcb766018a45387150cc95a19b13",
}


def test_english_files_are_unchanged_by_the_language_layer(tmp_path):
    import hashlib

    w = build_world(seed=0, entities=120)
    assert w.lang == "en" and "lang" not in summary(w)
    write_world(w, tmp_path)
    got = {name: hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() for name in ENGLISH_SEED0_SHA256}
    assert got == ENGLISH_SEED0_SHA256
