"""Edges of the paper's other tasks and the files they read:

- a --qa-fields mapping read lewisrag's optional fields from the file's columns of the same names,
  mapped or not: the hub's Jeopardy `category` ("HISTORY") was refused as lewisrag's category, and
  `category=` is refused too, so the hub file could not be trained on as it is;
- the Jeopardy and FEVER RAG stages of `reproduce --tasks` saved a checkpoint only at their last step,
  so a killed stage started over from step 0;
- FEVER's evidence overlap, printed beside the paper's per-article 71% / 90%, counted only the gold
  passage itself;
- data/tasks.py said the two kinds of NOT ENOUGH INFO claims come half each.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from conftest import copy_run, one_thread, write_jsonl
from lewisrag.data import tasks as data_tasks
from lewisrag.data.io import InputError
from lewisrag.data.records import QAExample, read_qa, read_questions
from lewisrag.experiments import stages
from lewisrag.experiments import tasks as T
from lewisrag.experiments.presets import PRESETS

# the hub's jeopardy rows (category, air_date, question, value, answer, round, show_number)
JEOPARDY = [{"category": "HISTORY", "air_date": "2004-12-31", "question": "This country has its capital at Zerth.",
             "value": "$200", "answer": "Valdoria", "round": "Jeopardy!", "show_number": "4680",
             "gold_passage_ids": ["country-0001-0"]},
            {"category": "GEO", "air_date": "2004-12-31", "question": "Dova Kelm leads this country.",
             "value": None, "answer": "Kelmora", "round": "Final Jeopardy!", "show_number": "4680",
             "gold_passage_ids": ["country-0002-1"]}]
CLUE = {"question": "answer", "answers": "question"}  # Jeopardy's "answer" is lewisrag's input, its clue the target


def test_a_mapping_reads_category_kind_and_group_only_where_it_names_them(tmp_path):
    """The hub Jeopardy's own `category` ("HISTORY") was read as lewisrag's and refused, and no mapping
    could leave it unread; lewisrag's own words (gold_passage_ids) are read by their names as before."""
    path = write_jsonl(tmp_path / "jeopardy.jsonl", JEOPARDY)
    first = read_qa(path, CLUE)[0]
    assert (first.question, first.answers, first.category, first.group) == (
        "Valdoria", ["This country has its capital at Zerth."], None, None)
    assert read_qa(path, CLUE)[1].gold_passage_ids == ["country-0002-1"]
    assert read_questions(path, CLUE)[0].gold_passage_ids == ["country-0001-0"]
    assert read_qa(path, {**CLUE, "group": "category"})[1].group == "GEO"
    with pytest.raises(InputError, match="jeopardy.jsonl:1: field 'category': unknown category 'HISTORY'"):
        read_qa(path, {**CLUE, "category": "category"})


def test_a_file_without_a_mapping_reads_its_optional_fields_as_before(tmp_path):
    path = write_jsonl(tmp_path / "qa.jsonl", [{"question": "q?", "answers": ["a"], "category": "single_doc",
                                                "gold_passage_ids": ["p1"], "kind": "short", "group": "g"}])
    ex = read_qa(path)[0]
    assert (ex.category, ex.gold_passage_ids, ex.group) == ("single_doc", ["p1"], "g")
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"question": "q?", "answers": ["a"], "category": "HISTORY"}])
    with pytest.raises(InputError, match="bad.jsonl:1: field 'category': unknown category 'HISTORY'"):
        read_qa(bad)


def _fake_train_rag(seen: dict):
    def fake(cfg, out, resume, root, on_progress):
        seen["cfg"] = cfg
        return {"steps": cfg.steps, "best_dev": 0.0, "best_em": 0.0, "dev_metric": "q_bleu1", "n_train": 1}
    return fake


def test_task_rag_stages_checkpoint_as_the_qa_stages_do(tmp_path, monkeypatch):
    preset = replace(PRESETS["tiny"], rag=replace(PRESETS["tiny"].rag, save_every=4))
    qa, task = {}, {}
    for module, seen in ((stages, qa), (T, task)):
        monkeypatch.setattr(module, "train_rag", _fake_train_rag(seen))
        monkeypatch.setattr(module, "discard_output", lambda *a, **k: None)
    stages.rag(tmp_path, preset, 0, "rag_token", "token", False, False, lambda *a: None)
    T.train(tmp_path, preset, 0, "jeopardy", "token", False, lambda *a: None)
    assert task["cfg"].steps == preset.tasks["jeopardy"].steps == 12
    assert task["cfg"].save_every == qa["cfg"].save_every == 4  # was 12, the stage's last step alone


class Killed(BaseException):
    pass


def test_a_killed_task_rag_stage_resumes_from_its_checkpoint_to_the_same_weights(tiny_qa_run, tmp_path):
    """The Jeopardy RAG-Token stage, killed at step 10 of 12 with checkpoints every 4 steps, resumes
    from step 8 and ends with the weights of an uninterrupted run: a checkpoint reads the RNG, never
    draws from it."""
    preset = replace(PRESETS["tiny"], rag=replace(PRESETS["tiny"].rag, save_every=4))
    finals = []
    for kill in (None, 10):
        run = copy_run(tiny_qa_run, tmp_path / f"run_{kill}")
        shutil.copytree(run / "index_a", run / "tasks" / "index_a")  # the tasks' retriever: the QA one will do
        shutil.copytree(run / "dpr", run / "tasks" / "dpr")
        steps, killed = [], []

        def progress(label, done, total, info):
            steps.append(done)
            if done == kill and not killed:
                killed.append(done)
                raise Killed

        with one_thread():
            try:
                T.train(run, preset, 0, "jeopardy", "token", False, progress)
            except Killed:
                steps.clear()
                T.train(run, preset, 0, "jeopardy", "token", True, progress)
        assert steps == ([9, 10, 11, 12] if kill else list(range(1, 13)))  # the old code started over: 1 to 12
        final = run / "jeopardy" / "rag_token" / "final"
        finals.append({p.relative_to(final): p.read_bytes() for p in sorted(final.rglob("*.safetensors"))})
    assert finals[0] and finals[0] == finals[1]


def test_fever_evidence_overlap_counts_a_document_from_a_gold_article(monkeypatch):
    """The paper's 71% / 90% count a top document from a gold article: here another passage of the
    claim's entity, which the old count missed (top-1 0.0)."""
    claim = QAExample("c1", "Valdoria is led by President Dova Kelm.", ["SUPPORTS"], ["country-0001-1"])
    other = QAExample("c2", "Kelmora was founded in 1901.", ["REFUTES"], ["organisation-0002-0"])
    retrieved = {claim.question: ["country-0001-0", "country-0001-1"],  # the gold passage second, its article first
                 other.question: ["country-0010-0", "country-0011-2"]}  # no passage of the gold article
    model = NS(retrieve=lambda qs, index, tok, n_docs: NS(passages=[[NS(id=i) for i in retrieved[q]] for q in qs]))
    monkeypatch.setattr(T, "load_trained", lambda d, device="cpu": (model, None))
    assert T.evidence_overlap(Path("x"), NS(passages=[0] * 10), [claim, other]) == {
        "top1_overlap": 0.5, "top10_overlap": 0.5, "n": 2}


def test_the_nei_kinds_are_as_the_module_says():
    """data/tasks.py said "half each"; on the default world most NOT ENOUGH INFO claims are about an
    absent entity (every attribute but the three optional ones), in the shares its docstring gives."""
    from lewisrag.data.world import build_world

    world = build_world(seed=0)
    optional = ("holds elections every", "The national assembly of", "The council of")  # the optional facts' claims
    assert sorted(a for attrs in data_tasks.OPTIONAL.values() for a in attrs) == ["meetings", "seats", "term"]
    assert all(any(o in data_tasks.CLAIMS[a][0] for o in optional) for a in ("meetings", "seats", "term"))
    shares = []
    for stem in ("fever_train", "fever_dev", "fever_test"):
        nei = [ex for ex in world.tasks[stem] if ex.answers[0] == data_tasks.NEI]
        unstated = sum(any(o in ex.question for o in optional) for ex in nei)
        shares.append(round(100 * (len(nei) - unstated) / len(nei)))
    doc = " ".join(data_tasks.__doc__.split())
    assert "half each" not in doc
    assert re.search(rf"{shares[0]}% of the training split's NOT ENOUGH INFO claims, {shares[1]}% of dev's and "
                     rf"{shares[2]}% of test's", doc), shares
