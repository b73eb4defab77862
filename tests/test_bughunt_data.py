"""The BugHunt sample shipped as package data: its labels, the chapter's numbers, its format."""

import dataclasses
import json
from importlib import resources

import pytest

from lewisrag.eval import bughunt
from lewisrag.eval.bughunt import answer_records, human_labels, load_bughunt, rule_checker_rows, rule_checker_table
from lewisrag.eval.citations import STATUSES
from lewisrag.eval.statements import citation_ids


@pytest.fixture(scope="module")
def sample():
    return load_bughunt()


def test_the_scenario_is_complete(sample):
    assert [a.name for a in sample.answers] == [
        "correct", "not_retrieved", "retrieved_not_used", "hallucinated", "off_topic", "misplaced_citations"]
    assert list(sample.reference_statements) == ["R1", "R2", "R3"]
    titles = " ".join(d.title for d in sample.docs)
    assert all(name in titles for name in ("REQ-AUTH-03", "REQ-USER-02", "BUG-"))
    assert len(sample.edge_sentences) == 5 and len(sample.all_sentences()) == 22
    assert sample.gold_passage_ids == ("1",)
    docs = sample.doc_texts()
    assert "422" in docs["1"] and '"email or password": ["is invalid"]' in docs["1"] and "红色列表" in docs["1"]
    assert "422" in docs["3"] and "has already been taken" in docs["3"]


def test_rule_checker_table_matches_the_chapter(sample):
    assert rule_checker_table(sample) == {"caught": 7, "passed": 12, "false_block": 1, "missed": 1, "unverifiable": 1}


def test_the_three_edge_cases_land_where_the_chapter_puts_them(sample):
    by_outcome = {}
    for row in rule_checker_rows(sample):
        by_outcome.setdefault(row["outcome"], []).append(row)
    (missed,) = by_outcome["missed"]
    (false_block,) = by_outcome["false_block"]
    (unverifiable,) = by_outcome["unverifiable"]
    assert "「422」" in missed["sentence"] and citation_ids(missed["sentence"]) == ("3",)  # the registration doc
    assert "HTTP 422" in false_block["sentence"] and false_block["detail"].endswith(": http")
    assert "登录表单上方" in unverifiable["sentence"]
    assert {r["answer"] for r in (missed, false_block, unverifiable)} == {"edge"}


def test_every_status_appears_in_the_sample(sample):
    assert {r["status"] for r in rule_checker_rows(sample)} == set(STATUSES)


def test_table_does_not_depend_on_titles_being_part_of_the_documents(sample):
    titled = tuple(dataclasses.replace(d, text=f"{d.title} {d.text}") for d in sample.docs)
    assert rule_checker_table(dataclasses.replace(sample, docs=titled)) == rule_checker_table(sample)


def share(labels):
    return sum(labels) / len(labels)


def test_misplaced_citations_are_faithful_but_cite_wrongly(sample):
    a = sample.answer("misplaced_citations")
    assert share([s.faithful for s in a.sentences]) == 1.0
    assert share([s.citation_ok for s in a.sentences]) == 0.0
    assert {citation_ids(s.text) for s in a.sentences} == {("3",)}


def test_hallucinated_score_moves_with_granularity(sample):
    a = sample.answer("hallucinated")
    assert len(a.sentences) == 3 and len(a.atomic) == 6
    scores = [share([s.faithful for s in a.sentences]), share([ok for _, ok in a.atomic]), float(a.whole_faithful)]
    assert [round(100 * x, 1) for x in scores] == [33.3, 16.7, 0.0]
    assert "toast" in a.sentences[1].text and "3 秒" in a.sentences[1].text
    assert "5 次" in a.sentences[2].text and "15 分钟" in a.sentences[2].text


def test_each_answer_fails_in_its_own_layer(sample):
    a = {x.name: x for x in sample.answers}
    assert "1" not in a["not_retrieved"].retrieved_ids and len(a["not_retrieved"].context_supports) == 1  # recall 0.33
    assert a["retrieved_not_used"].covers == ("R1",) and "1" in a["retrieved_not_used"].retrieved_ids
    assert not any(s.on_topic for s in a["off_topic"].sentences) and all(s.citation_ok for s in a["off_topic"].sentences)
    assert all(s.faithful and s.citation_ok and s.on_topic for s in a["correct"].sentences)
    assert [x.expected_primary for x in sample.answers] == [
        None, "retrieval", "generation_not_used", "generation_distorted", "generation_off_topic", "citation"]


def test_labels_file_is_the_generated_one_in_the_contract_format(sample):
    text = resources.files("lewisrag.eval.bughunt").joinpath("labels.jsonl").read_text(encoding="utf-8")
    shipped = [json.loads(line) for line in text.splitlines()]
    assert shipped == human_labels(sample)  # regenerate with human_labels() after editing sample.json
    assert all(list(r) == ["id", "premise", "hypothesis", "supported"] for r in shipped)
    assert all(isinstance(r["supported"], bool) and r["hypothesis"] for r in shipped)
    assert len({r["id"] for r in shipped}) == len(shipped)
    verdicts = {}
    for r in shipped:  # a (premise, hypothesis) pair never gets two different verdicts
        assert verdicts.setdefault((r["premise"], r["hypothesis"]), r["supported"]) == r["supported"]
    ids = {r["id"] for r in shipped}
    assert {"correct-s1-faithful", "misplaced_citations-s3-citation", "edge-e5-citation-2", "hallucinated-a6-faithful",
            "not_retrieved-R1-context", "retrieved_not_used-R3-answer"} <= ids


def test_answer_records_follow_the_answers_format(sample):
    records = answer_records(sample)
    assert [r["id"] for r in records] == [a.name for a in sample.answers]
    for r, a in zip(records, sample.answers):
        assert r["user_input"] == sample.question and r["response"] == a.response
        assert [c["id"] for c in r["retrieved_contexts"]] == list(a.retrieved_ids)
        assert set(r["retrieved_contexts"][0]) == {"id", "title", "text"}


def test_data_folders_are_packages_so_builds_ship_them():
    for pkg in ("lewisrag.eval.bughunt", "lewisrag.eval.gate", "lewisrag.eval.reports.assets"):
        assert resources.files(pkg).joinpath("__init__.py").is_file()
    names = {p.name for p in resources.files("lewisrag.eval.bughunt").iterdir()}
    assert {"sample.json", "kb.jsonl", "labels.jsonl"} <= names


def test_loader_refuses_labels_the_splitter_would_cut_differently():
    broken = {"name": "x", "description": "", "retrieved_ids": ["1"], "expected_primary": None, "covers": [],
              "context_supports": [], "sentences": [{"text": "两句话。合在一起 [1]。", "faithful": True,
                                                     "citation_ok": True, "on_topic": True}]}
    with pytest.raises(ValueError, match="does not reproduce"):
        bughunt._answer(broken)


def test_claim_labels_decide_every_claim_check_and_each_preset_shows_its_failure(sample):
    """The human labels cover the claim-level checks too (each claim against the reference and each
    retrieved document alone), so RAGChecker's diagnostics on the presets come from human verdicts
    and each preset's failure shows in the metrics that are meant to catch it."""
    from lewisrag.eval.evaluator import evaluate_bughunt

    records = {r["id"]: r for r in evaluate_bughunt(sample).to_json()["records"]}
    assert all(r["claims"]["undecided"] == 0 for r in records.values())
    m = {name: {k.removeprefix("claims."): v for k, v in r["metrics"].items() if k.startswith("claims.")}
         for name, r in records.items()}
    assert m["correct"]["precision"] == m["correct"]["recall"] == 1.0 and m["correct"]["hallucination"] == 0.0
    assert m["not_retrieved"]["claim_recall"] == pytest.approx(1 / 3)  # retrieval: the passages hold one reference claim of 3
    assert m["retrieved_not_used"]["claim_recall"] == 1.0 and m["retrieved_not_used"]["context_utilization"] == pytest.approx(1 / 3)
    assert m["hallucinated"]["hallucination"] == pytest.approx(2 / 3)  # two wrong claims that no passage holds
    assert m["off_topic"]["noise_sensitivity_in_irrelevant"] == 1.0 and m["off_topic"]["recall"] == 0.0
    assert m["misplaced_citations"]["precision"] == 1.0  # right content: only the citations are wrong
    ids = {r["id"] for r in human_labels(sample)}
    assert {"hallucinated-s2-reference", "off_topic-s1-doc-4", "R2-doc-3"} <= ids


def test_claim_labels_must_agree_with_the_sentence_labels(sample):
    raw = json.loads(resources.files("lewisrag.eval.bughunt").joinpath("sample.json").read_text(encoding="utf-8"))
    s = raw["answers"][3]["sentences"][1]  # hallucinated: the toast, cited [1], citation_ok false
    with pytest.raises(ValueError, match="citation_ok disagrees with supported_by"):
        bughunt._sentence({**s, "supported_by": ["1"], "faithful": True}, ("1", "2", "3"))
    with pytest.raises(ValueError, match="yet the contexts do not"):
        bughunt._sentence({**s, "supported_by": ["2"]}, ("1", "2", "3"))
    with pytest.raises(ValueError, match="not retrieved"):
        bughunt._sentence({**s, "supported_by": ["4"], "faithful": True}, ("1", "2", "3"))
