"""`compare`'s records pair and score as the scorecard does: gold passage ids are the question's own,
whatever order a run retrieved them in (`lewisrag gate` pairs two comparisons by them); EM, F1 and
ROUGE-L score every gold answer (a pattern by regex); each system's recall is labelled at the k it
read, not past it; an index A over other passages than the world's is refused in one line."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from conftest import run_main
from lewisrag.data.records import Passage, QAExample
from lewisrag.experiments import compare as C
from lewisrag.experiments.systems import Answered
from lewisrag.scoring import qa as Q
from test_compare import run_dir  # noqa: F401  (the module's trained run, a fixture)

GOLD = Passage("p-gold", "Sepom", "The capital of Sepom is Tomgasze.")
OTHERS = [Passage(f"p-{i}", f"T{i}", f"Some other text number {i}.") for i in range(4)]


class Fake:
    """A system answering each question with a fixed reply from fixed passages, in the order given."""

    def __init__(self, passages: list[Passage], reply: str = "Tomgasze"):
        self.passages, self.reply = passages, reply

    def answer(self, questions: list[str]) -> list[Answered]:
        return [Answered(self.reply, f"{self.reply} [1]", list(self.passages), 1, 10, 0.0) for _ in questions]


def _examples() -> list[QAExample]:
    statements = ["The capital of Sepom is Tomgasze."]
    return [QAExample("q1", "What is the capital of Sepom?", ["Tomgasze City", "Tomgasze"], [GOLD.id],
                      reference_statements=statements),
            QAExample("q2", "Which city is Sepom's capital?", ["Tom(gasze)?"], [GOLD.id], reference_statements=statements,
                      answer_match="regex")]


def _records(card: dict, system: str) -> dict:
    return {r["id"]: r for r in card["results"]["records"] if r["system"] == system}


def test_gold_ids_are_the_questions_whatever_order_a_run_retrieved(tmp_path, monkeypatch, capsys):
    """The gold passage read second was saved as gold ['2'], read first as ['1']: two comparisons whose
    retrieval order differed failed the gate's pairing | labels check, the labels being the same."""
    examples = _examples()
    first = C.scorecard({"rag_token": Fake([GOLD, *OTHERS[:2]])}, [], examples)
    second = C.scorecard({"rag_token": Fake([OTHERS[0], GOLD, OTHERS[1]])}, [], examples)
    for card, read in ((first, 1), (second, 2)):
        for rec in _records(card, "rag_token").values():
            assert rec["gold_passage_ids"] == [GOLD.id], rec["gold_passage_ids"]
            assert rec["passage_ids"][read - 1] == GOLD.id and rec["metrics"]["recall_at_k"]["3"] == 1.0
        # report.html still marks the gold context among those read (its contexts are numbered 1..k)
        monkeypatch.setattr(C, "render_report_html", lambda data: data)
        page = C.report_html(card, {p.id: p for p in [GOLD, *OTHERS]})
        for q in page["questions"]:
            answer = q["answers"][0]
            assert [c["gold"] for c in answer["contexts"]] == [n == read for n in (1, 2, 3)] and not answer["missing_gold"]
    # a gold passage not read keeps its id, and shows from the passages given
    missed = C.scorecard({"rag_token": Fake(OTHERS[:3])}, [], examples)
    assert all(r["gold_passage_ids"] == [GOLD.id] and r["metrics"]["recall_at_k"]["3"] == 0.0
               for r in _records(missed, "rag_token").values())
    page = C.report_html(missed, {p.id: p for p in [GOLD, *OTHERS]})
    assert page["questions"][0]["answers"][0]["missing_gold"][0]["text"] == GOLD.text
    # the gate pairs the two runs' questions by the same labels
    for name, card in (("base", first), ("cand", second)):
        (tmp_path / name).mkdir()
        r = card["results"]
        (tmp_path / name / "results.json").write_text(json.dumps(
            {"records": r["records"], "judge": r["judge"], "splitter": r["splitter"], "aggregates": r["aggregates"]}))
    _, out, err = run_main(monkeypatch, capsys, "gate", "--baseline", tmp_path / "base", "--candidate", tmp_path / "cand",
                           "--json")
    pairing = {c["name"]: c for c in json.loads(out)["checks"] if c["tier"] == "pairing"}
    assert pairing["questions"]["verdict"] == "pass" and "2 paired" in pairing["questions"]["evidence"], pairing
    assert "labels" not in pairing, pairing["labels"]  # shown only when a question's labels changed


def test_a_gold_id_not_read_is_no_context_number():
    """A passage whose id is "2" but was not read is not context 2 (another passage): no recall from it."""
    two = Passage("2", "Two", "A passage whose id is a number.")
    ex = [QAExample("q", "What is the capital of Sepom?", ["Tomgasze"], ["2"], reference_statements=["x"])]
    card = C.scorecard({"stitched": Fake([GOLD, OTHERS[0]])}, [], ex)
    rec = _records(card, "stitched")["q"]
    assert rec["metrics"]["recall_at_k"] == {"1": 0.0, "2": 0.0} and rec["gold_passage_ids"] == ["2"]
    assert C.scorecard({"stitched": Fake([GOLD, two])}, [], ex)["results"]["records"][0]["metrics"]["recall_at_k"]["2"] == 1.0


def test_record_scores_use_every_gold_answer_as_the_scorecard_does():
    """The evaluator was given the first answer only: "Tomgasze" against ["Tomgasze City", "Tomgasze"]
    scored EM 0 in results.json while the scorecard's EM was 1; a pattern was no score at all."""
    examples = _examples()
    card = C.scorecard({"rag_token": Fake([GOLD])}, examples, examples)
    recs = _records(card, "rag_token")
    text, pattern = recs["q1"], recs["q2"]
    assert text["metrics"]["exact_match"] == 1.0 == Q.answer_exact_match("Tomgasze", examples[0])
    assert text["metrics"]["f1"] == 1.0 and text["metrics"]["rougeL"] == 1.0
    assert pattern["metrics"]["exact_match"] == 1.0 and "exact_match" not in pattern["nan_reasons"]
    assert pattern["metrics"]["f1"] is None and pattern["metrics"]["rougeL"] is None  # F1 against a pattern measures nothing
    assert card["qa"]["rag_token"]["exact_match"] == 1.0
    assert card["results"]["aggregates"]["exact_match"]["mean"] == 1.0
    # a wrong answer is wrong against every answer, the pattern too
    wrong = _records(C.scorecard({"rag_token": Fake([GOLD], "Sepom")}, [], examples), "rag_token")
    assert wrong["q1"]["metrics"]["exact_match"] == 0.0 and wrong["q2"]["metrics"]["exact_match"] == 0.0


def test_each_system_is_evaluated_at_the_k_it_read():
    """EvalConfig's default ks (1, 5, 10) labelled recall@5 and recall@10 on systems that read 3 and 2 passages."""
    examples = _examples()
    card = C.scorecard({"rag_token": Fake([OTHERS[0], OTHERS[1], GOLD]), "stitched": Fake([OTHERS[0], GOLD])}, [], examples)
    for system, k in (("rag_token", "3"), ("stitched", "2")):
        for rec in _records(card, system).values():
            assert set(rec["metrics"]["recall_at_k"]) == {"1", k} and rec["metrics"]["recall_at_k"][k] == 1.0
            assert rec["diagnosis"]["layers"]["retrieval"] == "pass"
        at = {m for m in card["results"]["aggregates"]["by_system"][system] if m.startswith("recall_at_k@")}
        assert at == {"recall_at_k@1", f"recall_at_k@{k}"}, at
    assert card["results"]["config"]["ks"] == {"rag_token": [1, 3], "stitched": [1, 2]}


@pytest.mark.parametrize("change", ["subset", "edited"])
def test_an_index_a_over_other_passages_than_the_worlds_is_refused(run_dir, tmp_path, monkeypatch, capsys, change):  # noqa: F811
    """The gold ids, report.html and the position probe read world/passages_a.jsonl while the systems
    search index A: over a subset the probe failed with a KeyError traceback, over other texts the
    comparison was scored silently."""
    from lewisrag.data.records import read_passages
    from lewisrag.index.dense import build_dense_index

    run = tmp_path / "run"
    run.mkdir()
    for name in ("world", "dpr", "generator", "rag_token"):
        (run / name).symlink_to(run_dir / name)
    passages = read_passages(run_dir / "world" / "passages_a.jsonl")
    other = passages[:20] if change == "subset" else [replace(p, text=p.text + " Edited.") for p in passages]
    build_dense_index(other, run_dir / "dpr", run / "index_a")
    code, _, err = run_main(monkeypatch, capsys, "compare", "--run", run, "--systems", "rag_token",
                            "--position-questions", 4, "--out", tmp_path / "cmp")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{run / 'index_a'}: holds other passages than {run / 'world' / 'passages_a.jsonl'}" in err
    assert not (tmp_path / "cmp").exists()
