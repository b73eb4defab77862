"""`lewisrag reproduce --preset base` on every QA and passage format the readers take besides nq_open
and wiki_dpr: DPR's psgs_w100 `.tsv` passages, its `.qa.csv` QA files and biencoder retriever JSON
(gold ids from positive_ctxs), KILT's NQ, FEVER v1.0 and MS MARCO v2.1. Each either runs end to end
with numbers that mean what results.json says, or is refused before any stage with one line naming
the flag (exit 2).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import one_thread, run_main, write_jsonl
from lewisrag.data.records import read_passages, read_qa
from test_dpr_formats import biencoder_record, write_json, write_psgs
from test_hub_qa_schemas import fever_row, kilt, marco, write
from test_reproduce_base import _flags, assets  # noqa: F401  (module fixture: the tiny DPR pair, BART, nq_open files)


@pytest.fixture(scope="module")
def formats(tiny_corpus, tmp_path_factory) -> dict:
    """The tiny world's passages and questions in each format."""
    root = tmp_path_factory.mktemp("formats")
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    psgs = write_psgs(root / "psgs_w100.tsv", [(p.id, p.text, p.title) for p in passages])
    psgs_b = write_psgs(root / "psgs_b.tsv", [(p.id, p.text.replace("Its leader is", "Its new leader is Ren"), p.title)
                                              for p in passages])
    # DPR's files: `question<TAB>['answer']`, and the retriever JSON whose positive contexts name psgs_w100's ids
    qa_csv = root / "nq-test.qa.csv"
    qa_csv.write_text("".join(f"{q.question}\t{q.answers!r}\n" for q in qa), encoding="utf-8")
    bienc = write_json(root / "biencoder-nq-train.json", [
        biencoder_record(q.question, q.answers, [{"passage_id": g, "title": "t"} for g in q.gold_passage_ids]) for q in qa])
    return {
        "tsv": psgs, "tsv_b": psgs_b, "qa_csv": qa_csv, "biencoder": bienc,
        "kilt": write(root / "kilt_nq.jsonl", "kilt", [kilt(q.id, q.question, q.answers) for q in qa]),
        "fever": write(root / "fever.parquet", "fever", [fever_row(i, f"{q.answers[0]} leads a country.", "SUPPORTS")
                                                         for i, q in enumerate(qa)]),
        "kilt_fever": write(root / "kilt_fever.jsonl", "kilt", [kilt(q.id, f"{q.answers[0]} leads a country.", ["SUPPORTS"])
                                                                for q in qa]),
        "marco": write(root / "marco.parquet", "ms_marco", [marco(i, q.question, [], [f"The leader is {q.answers[0]}."])
                                                            for i, q in enumerate(qa)]),
        "qb": write_jsonl(root / "qb.jsonl", [{"question": q.question, "answers": ["Ren"]} for q in qa[:4]]),
    }


def _run(monkeypatch, capsys, flags: list, **swap) -> tuple[int, str, str]:
    for flag, value in swap.items():
        flag = "--" + flag.replace("_", "-")
        if flag in flags:
            flags[flags.index(flag) + 1] = value
        else:
            flags += [flag, value]
    with one_thread():
        return run_main(monkeypatch, capsys, *flags)


def test_base_on_psgs_tsv_and_biencoder_json_measures_recall_on_the_cut(assets, formats, tiny_corpus, tmp_path,
                                                                        monkeypatch, capsys):
    """DPR's files end to end: psgs_w100.tsv cut to 24 passages, biencoder JSON for every QA set (its
    gold ids, some beyond the cut), a .tsv as snapshot B and DPR's .qa.csv and KILT's NQ as the swap
    matrix's questions. Training questions whose gold passages lie beyond the cut were refused by
    `train rag` at the rag_token stage, once the index was built; they train, counted."""
    out = tmp_path / "run"
    code, _, err = _run(monkeypatch, capsys, _flags(assets, out), passages=formats["tsv"], train=formats["biencoder"],
                        dev=formats["biencoder"], test=formats["biencoder"], passages_b=formats["tsv_b"],
                        questions_a=formats["qa_csv"], questions_b=formats["qb"])
    assert code == 0, err
    r = json.loads((out / "results.json").read_text())
    kept = {p.id for p in read_passages(tiny_corpus["passages"])[:24]}
    outside = sum(not kept & set(ex.gold_passage_ids) for ex in read_qa(tiny_corpus["qa"]))
    assert 0 < outside < 30 and r["retrieval"]["gold_not_indexed"] == outside and r["retrieval"]["n"] == 30 - outside
    assert 0 <= r["retrieval"]["recall_at_1"] <= r["retrieval"]["recall_at_20"] <= 1
    first16 = read_qa(tiny_corpus["qa"])[:16]
    assert r["stages"]["data"]["gold_not_indexed"] == {"train": sum(not kept & set(ex.gold_passage_ids) for ex in first16),
                                                       "dev": outside}
    assert r["stages"]["index_a"]["n_passages"] == 24 and r["stages"]["index_b"]["n_passages"] == 24
    assert r["qa"]["rag_token"]["n"] == 30 and set(r["knowledge_update"]) == {"rag_token", "rag_sequence"}
    train = [json.loads(line) for line in (out / "data" / "train.jsonl").read_text().splitlines()]
    assert all(set(ex["gold_passage_ids"]) <= kept for ex in train)


def test_base_on_whole_psgs_tsv_qa_csv_and_kilt(assets, formats, tmp_path, monkeypatch, capsys):
    """All of a .tsv read (no --max-passages), DPR's .qa.csv to train and test on, KILT's NQ as dev:
    no gold ids, so recall is recorded as not measured rather than as 0. The swap matrix reads
    biencoder JSON and KILT questions."""
    out = tmp_path / "run"
    flags = _flags(assets, out)
    i = flags.index("--max-passages")
    del flags[i:i + 2]
    code, _, err = _run(monkeypatch, capsys, flags, passages=formats["tsv"], train=formats["qa_csv"],
                        dev=formats["kilt"], test=formats["qa_csv"], passages_b=formats["tsv_b"],
                        questions_a=formats["biencoder"], questions_b=formats["kilt"])
    assert code == 0, err
    r = json.loads((out / "results.json").read_text())
    assert r["stages"]["index_a"]["n_passages"] == 60 and "gold_passage_ids" in r["retrieval"]["skipped"]
    report = (out / "report.md").read_text()
    assert "recall_at_1" not in r["retrieval"] and "Not measured: no test question has gold_passage_ids" in report
    assert r["qa"]["rag_token"]["n"] == 30 and 0 <= r["qa"]["rag_token"]["exact_match"] <= 1
    assert r["stages"]["index_b"]["n_passages"] == 60 and set(r["knowledge_update"]["rag_token"]) == {"index_a", "index_b"}
    assert "gold_not_indexed" not in r["stages"]["data"]  # no gold ids to drop


def test_ms_marco_test_set_is_scored_as_long_answers(assets, formats, tmp_path, monkeypatch, capsys):
    """MS MARCO's written answers have no exact match: the test stage scores them by ROUGE-L and
    BLEU-1 (qa.<system>.long) and leaves exact match null, not 0."""
    out = tmp_path / "run"
    code, _, err = _run(monkeypatch, capsys, _flags(assets, out), test=formats["marco"])
    assert code == 0, err
    r = json.loads((out / "results.json").read_text())
    for system in ("rag_token", "rag_sequence", "closed_book"):
        qa = r["qa"][system]
        assert qa["n"] == 0 and qa["exact_match"] is None and qa["long"]["n"] == 30 and 0 <= qa["long"]["rougeL"] <= 1


REFUSED = [  # (flag, file, words of the one line)
    ("--train", "fever", "`lewisrag train rag --task fever`"),
    ("--dev", "fever", "`lewisrag train rag --task fever`"),
    ("--test", "fever", "`lewisrag train rag --task fever`"),
    ("--questions-a", "fever", "`lewisrag train rag --task fever`"),
    ("--test", "kilt_fever", "`lewisrag train rag --task fever`"),
    ("--dev", "marco", "no short-answer question with an answer"),
    ("--questions-b", "marco", "no short-answer question with an answer"),
]


@pytest.mark.parametrize(("flag", "name", "words"), REFUSED)
def test_sets_the_base_preset_cannot_score_are_refused_before_any_stage(assets, formats, tmp_path, monkeypatch, capsys,
                                                                        flag, name, words):
    out = tmp_path / "run"
    swap = {"passages_b": formats["tsv_b"], "questions_a": formats["qa_csv"], "questions_b": formats["qb"]}
    code, _, err = _run(monkeypatch, capsys, _flags(assets, out), **{**swap, flag[2:].replace("-", "_"): formats[name]})
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and flag + ":" in lines[0] and words in lines[0], err
    assert not out.exists()


def test_a_training_set_counts_only_questions_with_answers_for_its_batch(assets, formats, tmp_path, monkeypatch, capsys):
    """MS MARCO's "No Answer Present." questions have no answer: the batch was capped at the questions
    read, more than `train rag` trains on, which it refused at the rag_token stage."""
    rows = [marco(i, q.question, [], [f"The leader is {q.answers[0]}."]) for i, q in enumerate(read_qa(formats["qa_csv"]))]
    for row in rows[:3]:
        row["wellFormedAnswers"], row["answers"] = [], ["No Answer Present."]
    train = write(tmp_path / "marco_train.parquet", "ms_marco", rows[:8])
    out = tmp_path / "run"
    code, _, err = _run(monkeypatch, capsys, _flags(assets, out), train=train)
    assert code == 0, err
    r = json.loads((out / "results.json").read_text())
    assert r["config"]["settings"]["rag"]["batch_size"] == 5 and r["stages"]["rag_token"]["n_train"] == 5
