"""`reproduce --preset base` and the gold passage ids of its QA files: without --max-passages every
passage is indexed, so a gold id --passages lacks is bad input, refused before any stage; with a cut
the questions whose gold passages lie outside it are counted, worded as either cause; and the
retrieval stage labels no recall@k past the passages indexed."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from conftest import one_thread, run_main, write_jsonl
from hf_layouts import bart, dpr_pair
from lewisrag.data.io import LewisragWarning
from lewisrag.data.records import read_passages, read_qa


@pytest.fixture(scope="module")
def assets(tiny_corpus, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("base_gold_ids")
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    texts = [f"{p.title} {p.text}" for p in passages] + [q.question for q in qa]
    with one_thread():
        pair = dpr_pair(root, texts)
        gen = bart(root, texts)
    return {**pair, "bart": gen, "passages": tiny_corpus["passages"], "qa": tiny_corpus["qa"]}


def _flags(a: dict, out: Path, **files) -> list:
    qa = {"train": a["qa"], "dev": a["qa"], "test": a["qa"], **files}
    return ["reproduce", "--preset", "base", "--out", out, "--question-encoder", a["question"], "--context-encoder",
            a["context"], "--generator", a["bart"], "--train", qa["train"], "--dev", qa["dev"], "--test", qa["test"],
            "--passages", a["passages"], "--steps", 2, "--max-train", 16]


def _mistyped(a: dict, path: Path, line: int) -> Path:
    """The QA file with the gold id on `line` mistyped (c2-0 as c2-O)."""
    recs = [json.loads(s) for s in Path(a["qa"]).read_text().splitlines()]
    recs[line - 1]["gold_passage_ids"] = [g.replace("-0", "-O") for g in recs[line - 1]["gold_passage_ids"]]
    return write_jsonl(path, recs)


@pytest.mark.parametrize("flag", ["train", "dev", "test"])
def test_a_gold_id_the_passages_lack_is_refused_without_a_cut(assets, tmp_path, monkeypatch, capsys, flag):
    """It was dropped (or left out of recall) and blamed on `--max-passages`, which was not given."""
    bad = _mistyped(assets, tmp_path / f"{flag}.jsonl", 3)
    out = tmp_path / "run"
    code, _, err = run_main(monkeypatch, capsys, *_flags(assets, out, **{flag: bad}))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{bad}:3: field 'gold_passage_ids': gold passage id 'c2-O' is not in --passages {assets['passages']}" in err
    assert not out.exists()


def test_a_training_question_past_max_train_is_not_checked(assets, tmp_path):
    """--max-train reads the first N training questions: a bad id after them is not trained on."""
    from lewisrag.experiments.base import BaseAssets, prepare

    bad = _mistyped(assets, tmp_path / "train.jsonl", 20)
    given = BaseAssets(question_encoder=str(assets["question"]), context_encoder=str(assets["context"]),
                       generator=str(assets["bart"]), train=str(bad), dev=str(assets["qa"]), test=str(assets["qa"]),
                       passages=str(assets["passages"]), max_train=16)
    assert len(prepare(given)["train"]) == 16


def test_with_a_cut_the_ids_outside_it_are_counted_as_either_cause(tmp_path):
    """With --max-passages an id outside the indexed passages may be cut away or not be in --passages at all."""
    from lewisrag.data.records import Passage, QAExample
    from lewisrag.experiments.base import _data

    sets = {name: [QAExample("q", "Who?", ["A"], ["gone"])] for name in ("train", "dev", "test")}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = _data(tmp_path, sets, [Passage("p", "", "text")])
    said = [str(w.message) for w in caught if issubclass(w.category, LewisragWarning)]
    assert summary["gold_not_indexed"] == {"train": 1, "dev": 1}
    assert len(said) == 1 and "(--max-passages, or not in --passages)" in said[0], said


def test_retrieval_labels_no_recall_past_the_passages_indexed(assets, tmp_path, monkeypatch, capsys):
    """With --max-passages 8, recall@20 was 1.0 over the 8 passages (and top-20 accuracy the top 8's)."""
    out = tmp_path / "run"
    with one_thread():
        code, _, err = run_main(monkeypatch, capsys, *_flags(assets, out), "--max-passages", 8)
    assert code == 0, err
    results = json.loads((out / "results.json").read_text())
    r = results["retrieval"]
    assert {k for k in r if k.startswith("recall_at_")} == {"recall_at_1", "recall_at_5"}, r
    assert set(r["answer_recall"]) == {"1", "5"} and r["gold_not_indexed"] == 26 and r["n"] == 4
    report = (out / "report.md").read_text()
    assert "recall@5" in report and "top-5" in report and "recall@20" not in report and "top-20" not in report
    assert results["stages"]["data"]["gold_not_indexed"] == {"train": 12, "dev": 26}  # counted, not refused, with a cut
