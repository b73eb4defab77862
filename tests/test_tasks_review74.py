"""Review 74 of the paper's other tasks: FEVER claim files given to `compare --questions` and `train
stitched --train` (their labels scored or trained as free-text answers, exit 0); FEVER numbers over no
claims (acc2, the evidence overlaps of an all NOT ENOUGH INFO test set) written as NaN into the stage
record, which the next --resume refused as damaged and report.md printed as "nan"; and a `datasets`
save_to_disk folder given where a QA file is read, refused without saying how to pass it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import run_main, write_jsonl
from lewisrag.data.io import InputError, iter_records, write_json
from test_faults import assert_one_line_error

CLAIMS = [{"id": "f1", "question": "Valdoria is led by Dova Kelm.", "answers": ["NOT ENOUGH INFO"], "gold_passage_ids": []},
          {"id": "f2", "question": "Kelmora was founded in 1901.", "answers": ["SUPPORTS"], "gold_passage_ids": ["p1"]},
          {"id": "f3", "question": "Zurho has 3 million people.", "answers": ["REFUTES"], "gold_passage_ids": ["p2"]}]
PASSAGES = [{"id": "p1", "title": "Kelmora", "text": "Kelmora was founded in 1901."},
            {"id": "p2", "title": "Zurho", "text": "About 69.9 million people live in Zurho."}]
# FEVER v1.0's own schema, a row per evidence sentence: its labels are read from 'label'
HUB_CLAIMS = [{"id": 7, "label": "SUPPORTS", "claim": "Kelmora was founded in 1901.", "evidence_annotation_id": 1,
               "evidence_id": 1, "evidence_wiki_url": "Kelmora", "evidence_sentence_id": 0}]


# --- 1. FEVER claims given to compare and train stitched ------------------------------------------------


@pytest.fixture
def fake_run(tmp_path) -> Path:
    """A run folder as far as compare reads before any model: the world's test questions and a rag_token folder."""
    run = tmp_path / "run"
    (run / "world").mkdir(parents=True)
    (run / "rag_token").mkdir()
    write_jsonl(run / "world" / "test.jsonl", [{"id": "q1", "question": "Who leads A?", "answers": ["B"]}])
    return run


def test_compare_refuses_fever_claims_as_questions(fake_run, tmp_path, monkeypatch, capsys):
    """compare scored the labels ("SUPPORTS", ...) as free-text answers by exact match, exit 0."""
    from lewisrag.experiments.compare import compare_run

    claims, out = write_jsonl(tmp_path / "fever_test.jsonl", CLAIMS), tmp_path / "cmp"
    with pytest.raises(InputError, match="FEVER claims .*which compare scores as free-text answers by exact match: "
                                         "FEVER's label accuracy is `lewisrag reproduce --tasks fever`'s") as e:
        compare_run(fake_run, out, names=("rag_token",), data=claims, position_questions=0)
    assert (e.value.source, e.value.line, e.value.field) == (str(claims), 1, "answers[0]")
    hub = write_jsonl(tmp_path / "fever_hub.jsonl", HUB_CLAIMS)
    code, _, err = run_main(monkeypatch, capsys, "compare", "--run", fake_run, "--systems", "rag_token",
                            "--questions", hub, "--position-questions", 0, "--out", out)
    assert_one_line_error(code, err, "fever_hub.jsonl:1: field 'label': FEVER claims")
    assert not out.exists()


def test_train_stitched_refuses_fever_claims(tmp_path, monkeypatch, capsys):
    """train stitched trained the labels as cited answers, and left every NOT ENOUGH INFO claim out as
    one without a gold passage, exit 0."""
    from lewisrag.data.records import read_passages
    from lewisrag.index.bm25 import build_bm25_index
    from lewisrag.training.configs import StitchedTrainConfig
    from lewisrag.training.stitched_train import train_stitched

    index = tmp_path / "bm25"
    build_bm25_index(read_passages(write_jsonl(tmp_path / "passages.jsonl", PASSAGES)), index)
    claims, out = write_jsonl(tmp_path / "fever_train.jsonl", CLAIMS), tmp_path / "s"
    cfg = StitchedTrainConfig(index=str(index), generator=str(tmp_path / "never-read"), train=str(claims), k=1,
                              steps=1, batch_size=1, device="cpu")
    with pytest.raises(InputError, match="FEVER claims .*which train stitched trains as free-text answers .*"
                                         "`lewisrag train rag --task fever`") as e:
        train_stitched(cfg, out)
    assert (e.value.source, e.value.line, e.value.field) == (str(claims), 1, "answers[0]")
    code, _, err = run_main(monkeypatch, capsys, "train", "stitched", "--index", index, "--generator", tmp_path / "g",
                            "--train", write_jsonl(tmp_path / "fever_hub.jsonl", HUB_CLAIMS), "--n-docs", 1,
                            "--steps", 1, "--batch-size", 1, "--device", "cpu", "--out", out)
    assert_one_line_error(code, err, "fever_hub.jsonl:1: field 'label': FEVER claims")
    assert not out.exists()


# --- 2. FEVER numbers over no claims ---------------------------------------------------------------------


def _nei_only_fever_out(monkeypatch) -> dict:
    """fever_evaluate's section for a test set of NOT ENOUGH INFO claims only, from the functions it calls."""
    from lewisrag.experiments import tasks as T
    from lewisrag.training.tasks import fever_accuracy

    monkeypatch.setattr(T, "load_trained", lambda d, device="cpu": (SimpleNamespace(), None))  # searched for no claim

    out = {}
    for system in ("rag_token", "rag_sequence", "closed_book"):
        acc = fever_accuracy([[-1.0, -2.0, -3.0], [-3.0, -2.0, -1.0]], ["NOT ENOUGH INFO"] * 2)  # one right
        acc.pop("predictions")
        out[system] = acc
    out["retrieval"] = T.evidence_overlap(Path("x"), None, [])  # the claims with a gold article: none
    return out | {"majority_rate": 1.0, "swap": {"n": 0}}


def test_fever_numbers_over_no_claims_are_null_with_their_reason(monkeypatch):
    fever = _nei_only_fever_out(monkeypatch)
    assert fever["rag_token"]["acc3"] == 0.5 and fever["rag_token"]["acc2"] is None  # the old code: NaN
    assert fever["rag_token"]["nan_reasons"] == {"acc2": "no SUPPORTS or REFUTES claim to score"}
    r = fever["retrieval"]
    assert (r["top1_overlap"], r["top10_overlap"], r["n"]) == (None, None, 0)
    assert set(r["nan_reasons"]) == {"top1_overlap", "top10_overlap"}


def test_a_fever_stage_record_over_no_claims_resumes(tmp_path, monkeypatch):
    """The stage record wrote NaN, which the next --resume refused as damaged ("expected a finite number
    or null, got NaN"): null is read back, and a reason that is no string is still refused."""
    from lewisrag.experiments.record_schema import check_stage_record
    from lewisrag.experiments.stages import read_stage_record

    path = tmp_path / "fever_evaluate.json"
    write_json(path, {"out": {"fever": _nei_only_fever_out(monkeypatch)}, "seconds": 1.0})
    assert "NaN" not in path.read_text()
    check_stage_record(path, "fever_evaluate", read_stage_record(path))
    record = json.loads(path.read_text())
    record["out"]["fever"]["retrieval"]["nan_reasons"]["top1_overlap"] = 3
    write_json(path, record)
    with pytest.raises(InputError, match="expected a string"):
        check_stage_record(path, "fever_evaluate", read_stage_record(path))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_report_prints_n_a_for_fever_numbers_over_no_claims(lang, monkeypatch):
    """report.md printed "nan" and "nan%" where results.json said null."""
    from lewisrag.eval.reports.i18n import messages
    from lewisrag.experiments.report import _table2

    t = messages(lang)
    text = "\n".join(_table2({"fever": _nei_only_fever_out(monkeypatch)}, t))
    assert "nan" not in text.lower()
    row = next(line for line in text.splitlines() if line.startswith(f"| {t.system('rag_token')} |"))
    assert row.endswith(f"| 0.500 | {t('na')} |")  # 3-way accuracy, then the 2-way one over no claims
    assert text.count(t("na")) >= 3 + 2  # every 2-way accuracy and both overlaps


def test_fever_accuracy_still_numbers_every_claim_it_has():
    from lewisrag.training.tasks import fever_accuracy

    r = fever_accuracy([[-1.0, -2.0, -3.0], [-1.0, -2.0, -0.5]], ["SUPPORTS", "REFUTES"])
    assert (r["acc3"], r["acc2"], r["n"], r["n2"]) == (0.5, 0.5, 2, 2) and "nan_reasons" not in r
    assert all(math.isfinite(r[k]) for k in ("acc3", "acc2"))


# --- 3. a datasets save_to_disk folder where a file is read ------------------------------------------------


def test_a_save_to_disk_folder_is_told_how_to_be_passed(tmp_path):
    """It said "is a folder; a file is needed", though --passages reads such folders; what it says now works."""
    datasets = pytest.importorskip("datasets")
    from lewisrag.data.records import read_qa

    ds = datasets.Dataset.from_list(CLAIMS)
    ds.save_to_disk(str(tmp_path / "claims"))
    datasets.DatasetDict({"train": ds}).save_to_disk(str(tmp_path / "splits"))
    folder = tmp_path / "claims"
    with pytest.raises(InputError, match="is a `datasets` save_to_disk folder; a file is needed: write it as "
                                         r"Parquet, datasets\.load_from_disk\(.*\)\.to_parquet\(.*\), and pass the "
                                         r"\.parquet") as e:
        list(iter_records(folder))
    assert e.value.source == str(folder)
    with pytest.raises(InputError, match="is a `datasets` save_to_disk folder; a file is needed"):
        read_qa(folder)  # --train, --dev, --questions: their own format check came first and said "is a folder"
    exec(str(e.value).split("Parquet, ", 1)[1].split(", and pass", 1)[0], {"datasets": datasets})  # its own advice
    assert [ex.id for ex in read_qa(tmp_path / "claims.parquet")] == ["f1", "f2", "f3"]
    with pytest.raises(InputError, match=r"save_to_disk folder of splits; .*load_from_disk\(.*\)\['SPLIT'\]"):
        list(iter_records(tmp_path / "splits"))
    with pytest.raises(InputError, match="is a folder; a file is needed$"):  # any other folder, as before
        list(iter_records(tmp_path))
