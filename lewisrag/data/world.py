"""The built-in world: a deterministic, encyclopedia-like corpus about fictional countries and
organisations, in two snapshots, with the questions a RAG model is trained and tested on.

Files that `write_world` produces (all JSON Lines but world.json):

- passages_a.jsonl, passages_b.jsonl: snapshot A ("2016") and B ("2018"). B gives most entities a
  new leader or head and a new population or membership; static facts stay. Passage ids are the
  same in both (f"{slot}-{k}"), so gold ids carry over.
- train.jsonl, dev.jsonl, test.jsonl: questions answered by snapshot A. Entities are split
  80/10/10 and a split's questions only ask about its own entities, so dev and test can only be
  answered by reading. About 12% are long-form (kind "long").
- questions_a.jsonl, questions_b.jsonl: the same questions (same ids) about test entities whose
  facts changed, answered by A and by B: the knowledge-update experiment.
- eval.jsonl: the five evaluation categories over the test entities (see questions.eval_questions).
- jeopardy_{train,dev,test}.jsonl, fever_{train,dev,test}.jsonl, fever_test_b.jsonl: the paper's
  Jeopardy question generation and FEVER verification over the same entities and splits
  (`lewisrag.data.tasks`).
- world.json: seed, version and counts (and "lang" for a world in another language than English).

`build_world(..., lang="zh")` writes the same world in Chinese (`lang_zh`: names, passages of at
most MAX_CHARS characters, several phrasings per question) through the same generators; it has no
Jeopardy or FEVER files yet (`World.tasks` is empty).

Everything comes from `random.Random` instances seeded by strings derived from the seed, so the same
seed gives byte-identical files on any machine.
"""

from __future__ import annotations

import dataclasses
import os
import random
from dataclasses import dataclass
from pathlib import Path

from lewisrag.data import questions as Q
from lewisrag.data import tasks as T
from lewisrag.data.entities import SNAPSHOT_YEARS, Entity, make_archive, make_country, make_organisation, org_kind, passages
from lewisrag.data.io import write_json, write_jsonl
from lewisrag.data.names import LANGS, Namer
from lewisrag.data.outputs import output_dir
from lewisrag.data.records import CATEGORIES, Passage, QAExample

VERSION = "lewisrag-world-1"
DEFAULT_ENTITIES = 2000  # about 4,000 passages: the small CPU preset's corpus
MIN_ENTITIES = 40  # below this the dev and test splits cannot hold every question category
MAX_ENTITIES = 100_000  # tested (about 2 CPU-minutes, 2.5 in Chinese); far beyond it the made-up names run out
SPLITS = ("train", "dev", "test")
HELD_OUT_SHARE = 0.1  # of the entities for dev and for test each; the rest is train
COUNTRY_SHARE = 0.7  # the other entities are organisations
LOOKALIKE_SHARE = 0.2  # of the entities come in pairs with similar names ("Valdoria", "Veldoria")
CHANGE_RATE = 0.85  # of the entities get new time-varying facts in snapshot B
CONFLICT_SHARE = 0.1  # of the test entities get a contradicting archive passage
HQ_IN_CAPITAL = 0.7  # of the organisations sit in a capital of their split (for multi-document questions)
MAX_WORDS = 100  # the paper's passage length
MAX_CHARS = 200  # a Chinese passage's length in characters (the world's are at most about 150)
QUESTION_FILES = ("train", "dev", "test", "questions_a", "questions_b", "eval")
TASK_FILES = tuple(f"{t}_{s}" for t in ("jeopardy", "fever") for s in SPLITS) + ("fever_test_b",)


@dataclass(frozen=True)
class World:
    seed: int  # what build_world was given
    entities: tuple[Entity, ...]  # every entity of the corpus, in slot order
    absent: tuple[Entity, ...]  # entities that appear nowhere in the corpus (not_in_kb questions)
    passages_a: tuple[Passage, ...]  # snapshot A ("2016")
    passages_b: tuple[Passage, ...]  # snapshot B ("2018"): same ids, changed time-varying facts
    questions: dict  # file stem (QUESTION_FILES) -> tuple of QAExample
    tasks: dict  # file stem (TASK_FILES) -> tuple of QAExample: Jeopardy and FEVER (data.tasks); empty unless English
    lang: str = "en"  # the language of every name, passage and question ("en" or "zh")

    @property
    def split_entities(self) -> dict[str, tuple[str, ...]]:
        """Entity names per split: dev and test names never occur in train questions."""
        return {s: tuple(e.name for e in self.entities if e.split == s) for s in SPLITS}


def _rng(seed: int, part: str) -> random.Random:
    # random.Random seeds from a str through SHA-512, never through the salted hash()
    return random.Random(f"lewisrag-world:{seed}:{part}")


def build_world(seed: int = 0, entities: int = DEFAULT_ENTITIES, lang: str = "en") -> World:
    """The whole world for `seed`, with `entities` entities in the corpus, in `lang` (pure and deterministic)."""
    if not MIN_ENTITIES <= entities <= MAX_ENTITIES:
        raise ValueError(f"entities must be between {MIN_ENTITIES} and {MAX_ENTITIES}, got {entities}")
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    namer = Namer(_rng(seed, "names"), side="world", lang=lang)
    ents = _populate(_plan(_rng(seed, "plan"), entities), namer, _rng(seed, "facts"))
    ents = _add_archives(ents, namer, _rng(seed, "archives"))
    absent = tuple(_absent(namer, _rng(seed, "absent"), Q.EVAL_SIZES["not_in_kb"]))
    by_split = {s: [e for e in ents if e.split == s] for s in SPLITS}
    qs = {s: tuple(Q.split_questions(s, by_split[s], _rng(seed, f"questions:{s}"))) for s in SPLITS}
    qa, qb = Q.update_questions(by_split["test"], _rng(seed, "questions:update"))
    qs |= {"questions_a": tuple(qa), "questions_b": tuple(qb),
           "eval": tuple(Q.eval_questions(by_split["test"], list(absent), _rng(seed, "questions:eval")))}
    pa = tuple(p for e in ents for p in passages(e, 0))
    pb = tuple(p for e in ents for p in passages(e, 1))
    tasks = _tasks(seed, ents, by_split) if lang == "en" else {}  # the task templates are English only
    return World(seed, tuple(ents), absent, pa, pb, qs, tasks, lang)


def _tasks(seed: int, ents: list[Entity], by_split: dict[str, list[Entity]]) -> dict:
    """Jeopardy and FEVER files; FEVER's claims about unknown entities use fresh names (disjoint from
    every world), as many per split as half its entities."""
    need = {s: round(len(by_split[s]) * T.ABSENT_SHARE) for s in SPLITS}
    fresh = fresh_entities(_rng(seed, "tasks:absent"), sum(need.values()))
    absent, start = {}, 0
    for s in SPLITS:
        absent[s], start = fresh[start : start + need[s]], start + need[s]
    files = T.task_files(ents, absent, lambda part: _rng(seed, f"tasks:{part}"))
    return {stem: tuple(files[stem]) for stem in TASK_FILES}


def _plan(rng: random.Random, n: int) -> list[tuple[str, int, str]]:
    """Groups of (kind, size, split): size 2 is a look-alike pair, kept in one split."""
    pairs = round(n * LOOKALIKE_SHARE / 2)
    sizes = [2] * pairs + [1] * (n - 2 * pairs)
    splits = _split_labels(pairs, rng) + _split_labels(n - 2 * pairs, rng)
    groups = [("country" if rng.random() < COUNTRY_SHARE else "organisation", size, split) for size, split in zip(sizes, splits)]
    rng.shuffle(groups)
    return groups


def _split_labels(n: int, rng: random.Random) -> list[str]:
    held = max(1, round(n * HELD_OUT_SHARE))
    labels = ["dev"] * held + ["test"] * held + ["train"] * (n - 2 * held)
    rng.shuffle(labels)
    return labels


def _populate(groups: list[tuple[str, int, str]], namer: Namer, rng: random.Random) -> list[Entity]:
    """Countries first, so that organisations can be headquartered in a capital of their split."""
    ents: list[Entity] = []
    capitals: dict[str, list[str]] = {s: [] for s in SPLITS}
    counters = {"country": 0, "organisation": 0}
    for kind in ("country", "organisation"):
        for gkind, size, split in groups:
            if gkind != kind:
                continue
            base = None
            for _ in range(size):
                slot = f"{kind}-{counters[kind]:04d}"
                counters[kind] += 1
                change = rng.random() < CHANGE_RATE
                name = namer.lookalike(base.name) if base else None
                if kind == "country":
                    e = make_country(slot, split, namer, rng, change, name=name)
                    capitals[split].append(e.static["capital"])
                else:
                    hq = rng.choice(capitals[split]) if capitals[split] and rng.random() < HQ_IN_CAPITAL else None
                    e = make_organisation(slot, split, namer, rng, change, hq, name=name, org_kind=_org_kind(base))
                ents.append(dataclasses.replace(e, lookalike_of=base.name) if base else e)
                base = base or e
    return ents


def _org_kind(base: Entity | None):
    """A look-alike organisation keeps its twin's kind: 'Kelmora Institute' and 'Kelmorra Institute'."""
    if base is None:
        return None
    return org_kind(base)


def _add_archives(ents: list[Entity], namer: Namer, rng: random.Random) -> list[Entity]:
    """Give a few test entities, none of a look-alike pair, an outdated contradicting passage."""
    twins = {e.lookalike_of for e in ents if e.lookalike_of}
    pool = [i for i, e in enumerate(ents) if e.split == "test" and not e.lookalike_of and e.name not in twins]
    chosen = set(rng.sample(pool, max(1, round(len(pool) * CONFLICT_SHARE))))
    return [dataclasses.replace(e, archive=make_archive(e, namer, rng)) if i in chosen else e for i, e in enumerate(ents)]


def _absent(namer: Namer, rng: random.Random, n: int) -> list[Entity]:
    """Entities with names the corpus never uses (same namer, so no word is shared)."""
    out = []
    for i in range(n):
        if rng.random() < COUNTRY_SHARE:
            out.append(make_country(f"absent-{i:04d}", "absent", namer, rng, change=False))
        else:
            out.append(make_organisation(f"absent-{i:04d}", "absent", namer, rng, change=False, headquarters=None))
    return out


# ---------------------------------------------------------------------------------------------
# checking and writing


def check_world(world: World) -> None:
    """Raise ValueError unless the world keeps its promises (checked before anything is written):
    unique ids, the same passage ids in both snapshots, titled passages of at most MAX_WORDS words
    (Chinese: MAX_CHARS characters), gold ids that exist, short answers found verbatim in a gold
    passage, and reference statements that assert nothing their gold passage does not state."""
    snaps = {0: {p.id: p for p in world.passages_a}, 1: {p.id: p for p in world.passages_b}}
    ents, told = {e.slot: e for e in world.entities}, {}
    if len(snaps[0]) != len(world.passages_a) or snaps[0].keys() != snaps[1].keys():
        raise ValueError("passage ids repeat or differ between the snapshots")
    limit, unit, length = (MAX_WORDS, "words", lambda t: len(t.split())) if world.lang == "en" else (MAX_CHARS, "characters", len)
    for p in world.passages_a + world.passages_b:
        if not p.title or length(p.text) > limit:
            raise ValueError(f"passage {p.id}: empty title or more than {limit} {unit}")
    for stem in QUESTION_FILES:
        qs, by_id = world.questions[stem], snaps[1 if stem == "questions_b" else 0]
        if len({q.id for q in qs}) != len(qs):
            raise ValueError(f"{stem}: question ids repeat")
        for q in qs:
            gold = [by_id.get(g) for g in q.gold_passage_ids]
            if None in gold:
                raise ValueError(f"{stem} {q.id}: unknown gold passage id in {q.gold_passage_ids}")
            if q.kind == "short" and q.answers and not any(q.answers[0] in f"{p.title} {p.text}" for p in gold):
                raise ValueError(f"{stem} {q.id}: answer {q.answers[0]!r} is in no gold passage")
            _check_statements(stem, q, gold, 1 if stem == "questions_b" else 0, ents, told)
    if [(q.id, q.question) for q in world.questions["questions_a"]] != [(q.id, q.question) for q in world.questions["questions_b"]]:
        raise ValueError("questions_a and questions_b must hold the same questions")
    _check_tasks(world, snaps[0])


def _check_statements(stem: str, q: QAExample, gold: list[Passage], snapshot: int, ents: dict[str, Entity],
                      told: dict) -> None:
    """Each reference statement of `q` is the statement (questions.statement) of a fact that one of
    its gold passages states, and that passage holds every value the statement asserts
    (questions.statement_facts), whichever phrasing it was rendered in. `told` caches, per entity
    and snapshot, its statements (questions.statements_of)."""
    for s in q.reference_statements:
        source = None
        for p in gold:
            e = ents.get(p.id.rsplit("-", 1)[0])
            if e is None:
                continue
            if (e.slot, snapshot) not in told:
                told[e.slot, snapshot] = Q.statements_of(e, snapshot)
            attr, facts = told[e.slot, snapshot].get(s, (None, []))
            if attr is not None and e.passage_of(attr) == p.id:
                source = facts, p
                break
        if source is None:
            raise ValueError(f"{stem} {q.id}: reference statement {s!r} is about no fact its gold passages "
                             f"{q.gold_passage_ids} state")
        facts, p = source
        text = f"{p.title} {p.text}".lower()  # a statement may write a title in small letters ("the king of")
        missing = [v for v in facts if v.lower() not in text]
        if missing:
            raise ValueError(f"{stem} {q.id}: reference statement {s!r} states {missing[0]!r}, which its gold "
                             f"passage {p.id} does not")


def _check_tasks(world: World, by_id: dict) -> None:
    """Task files none empty, ids unique, gold ids that exist, FEVER labels known, fever_test_b the
    test claims again (a world without task files, a Chinese one, has nothing to check)."""
    if not world.tasks:
        return
    for stem in TASK_FILES:
        exs = world.tasks[stem]
        if not exs:
            raise ValueError(f"{stem}: no examples")
        if len({q.id for q in exs}) != len(exs):
            raise ValueError(f"{stem}: ids repeat")
        for q in exs:
            if any(g not in by_id for g in q.gold_passage_ids):
                raise ValueError(f"{stem} {q.id}: unknown gold passage id in {q.gold_passage_ids}")
            if stem.startswith("fever") and (len(q.answers) != 1 or q.answers[0] not in T.LABELS):
                raise ValueError(f"{stem} {q.id}: label {q.answers} is not one of {T.LABELS}")
            if stem.startswith("fever") and (q.answers[0] == T.NEI) != (not q.gold_passage_ids):
                raise ValueError(f"{stem} {q.id}: evidence must be given exactly for SUPPORTS and REFUTES")
    if [q.question for q in world.tasks["fever_test"]] != [q.question for q in world.tasks["fever_test_b"]]:
        raise ValueError("fever_test and fever_test_b must hold the same claims")


def summary(world: World) -> dict:
    """What world.json records: seed, version, and counts of entities, passages and questions."""
    ents = world.entities
    return {
        "version": VERSION,
        "seed": world.seed,
        **({"lang": world.lang} if world.lang != "en" else {}),  # English worlds' files stay as they were
        "snapshots": {"a": SNAPSHOT_YEARS[0], "b": SNAPSHOT_YEARS[1]},
        "entities": {
            "total": len(ents),
            "countries": sum(e.kind == "country" for e in ents),
            "organisations": sum(e.kind == "organisation" for e in ents),
            **{s: sum(e.split == s for e in ents) for s in SPLITS},
            "lookalikes": sum(e.lookalike_of is not None for e in ents),
            "changed_in_b": sum(e.changed for e in ents),
            "with_archive": sum(e.archive is not None for e in ents),
            "absent": len(world.absent),
        },
        "passages": {"a": len(world.passages_a), "b": len(world.passages_b),
                     "changed_in_b": sum(a != b for a, b in zip(world.passages_a, world.passages_b))},
        "questions": {stem: {"total": len(qs), "short": sum(q.kind == "short" for q in qs), "long": sum(q.kind == "long" for q in qs)}
                      for stem, qs in world.questions.items()},
        "eval_categories": {c: sum(q.category == c for q in world.questions["eval"]) for c in CATEGORIES},
        "tasks": {stem: {"total": len(exs), **({label: sum(q.answers[0] == label for q in exs) for label in T.LABELS}
                                               if stem.startswith("fever") else {})}
                  for stem, exs in world.tasks.items()},
    }


def write_world(world: World, out_dir: str | os.PathLike, overwrite: bool = False) -> dict[str, int]:
    """Check the world, then write its files (all of them beside the old ones first, then swapped
    in; world.json last, as the mark of a complete directory). Returns the number of records
    written per file name.

    `out_dir` must be missing, empty or a world lewisrag wrote, unless `overwrite`
    (`lewisrag.data.outputs`)."""
    check_world(world)
    with output_dir(out_dir, "world", overwrite=overwrite) as out:
        return _write_files(world, out)


def _write_files(world: World, out: Path) -> dict[str, int]:
    # `out` is a staging folder that replaces the old world whole (outputs.output_dir): a rerun
    # stopped or killed at any moment leaves the old world or the new, never files of both
    files = {"passages_a.jsonl": (p.to_dict() for p in world.passages_a),
             "passages_b.jsonl": (p.to_dict() for p in world.passages_b)}
    files.update({f"{stem}.jsonl": (_qa_dict(q) for q in world.questions[stem]) for stem in QUESTION_FILES})
    files.update({f"{stem}.jsonl": (_qa_dict(q) for q in world.tasks[stem]) for stem in world.tasks})
    counts = {name: write_jsonl(out / name, records) for name, records in files.items()}
    write_json(out / "world.json", summary(world))
    counts["world.json"] = 1
    return counts


def _qa_dict(q: QAExample) -> dict:
    d = q.to_dict()
    if not d["reference_statements"] and q.category != "not_in_kb":
        del d["reference_statements"]
    return d


# ---------------------------------------------------------------------------------------------
# fresh text: unlimited new entities whose names the world never uses (names.word_side)


def fresh_entities(rng: random.Random, n: int, lang: str = "en") -> list[Entity]:
    """`n` new entities in `lang`, in the world's proportions of countries and organisations.

    Their made-up words come from the other side of the name space, so they are disjoint from every
    world (of any seed); organisations sit in a capital of an earlier fresh country when there is one.
    (A Chinese fresh name never equals a world name, but may hold one: 维兰多城 beside 维兰多.)
    """
    namer = Namer(rng, side="fresh", lang=lang)
    out: list[Entity] = []
    capitals: list[str] = []  # kept as the countries come (gathered anew per organisation, n entities took n² steps)
    for _ in range(n):
        slot = f"fresh-{rng.getrandbits(48):012x}"
        change = rng.random() < CHANGE_RATE
        if rng.random() < COUNTRY_SHARE:
            out.append(make_country(slot, "fresh", namer, rng, change))
            capitals.append(out[-1].static["capital"])
        else:
            hq = rng.choice(capitals) if capitals and rng.random() < HQ_IN_CAPITAL else None
            out.append(make_organisation(slot, "fresh", namer, rng, change, hq))
    return out


def fresh_documents(rng: random.Random, n: int, snapshot: int = 0, lang: str = "en") -> list[Passage]:
    """`n` new passages (both passages of each new entity), for denoising pretraining."""
    ents = fresh_entities(rng, (n + 1) // 2, lang)
    return [p for e in ents for p in passages(e, snapshot)][:n]


def fresh_examples(rng: random.Random, n: int, lang: str = "en") -> tuple[list[QAExample], list[Passage]]:
    """`n` new QA examples (the world's templates and long-form share) and the passages they
    refer to by gold_passage_ids: QA training over more entities than a model can memorise.

    Examples come entity by entity (4-7 each: 4 or 5 about an organisation, 6 or 7 about a country);
    shuffle them if a batch should mix entities.
    """
    examples: list[QAExample] = []
    docs: list[Passage] = []
    while len(examples) < n:
        (e,) = fresh_entities(rng, 1, lang)
        docs += passages(e, 0)
        for j, attr in enumerate(Q.entity_questions(e, rng)):
            qid = f"{e.slot}-q{j}"
            examples.append(Q.short_question(qid, e, attr, rng.choice(Q.text_tables(lang).SHORT[attr])) if attr
                            else Q.long_question(qid, e, rng))
    return examples[:n], docs
