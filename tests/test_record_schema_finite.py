"""The numbers results.json and the report take from a stage record read back by `reproduce --resume`
are numbers a float holds: NaN, Infinity and 10**400 all parse as JSON numbers, but Infinity and NaN
became null in results.json, and 10**400 overflowed in the report's plot (a traceback, exit 3) after
results.json and timings.json had been rewritten. Refused, naming the file and the field, before
anything is written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import copy_run, run_main
from lewisrag.data.io import InputError, is_finite_number
from lewisrag.experiments.record_schema import MAX_COUNT, check_stage_record


def evaluate_record(em=0.5, unscored=0) -> dict:
    return {"seconds": 1.0, "out": {"qa": {"rag_token": {"exact_match": em, "n": 3}}, "test_unscored": unscored}}


def ablations_record(value=0.5, ks=(1, 2)) -> dict:
    row = {str(k): 0.5 for k in ks} | {"1": value}
    return {"seconds": 1.0, "out": {"ablations": {
        "ks": list(ks), "trained_k": 1, "n_docs": {"rag_token": row, "rag_sequence": dict(row)},
        "frozen_retriever": {"exact_match": 0.5, "by_k": dict(row)}, "bm25_retriever": {"exact_match": 0.5, "by_k": dict(row)}}}}


@pytest.mark.parametrize("value,shown", [
    (float("inf"), "Infinity"), (float("-inf"), "-Infinity"), (float("nan"), "NaN"),
    (10**400, "an integer of 401 digits"), (-10**309, "an integer of 310 digits"),
], ids=["inf", "-inf", "nan", "10**400", "-10**309"])
def test_a_number_a_float_cannot_hold_is_refused_by_file_and_field(value, shown):
    with pytest.raises(InputError) as e:
        check_stage_record(Path("stages/evaluate.json"), "evaluate", evaluate_record(em=value))
    assert e.value.field == "out.qa.rag_token.exact_match"
    assert f"expected a finite number or null, got {shown}; the stage record is damaged" in e.value.message
    with pytest.raises(InputError) as e:
        check_stage_record(Path("stages/ablations.json"), "ablations", ablations_record(value))
    assert e.value.field == "out.ablations.n_docs.rag_token.1" and f"expected a finite number, got {shown}" in e.value.message


@pytest.mark.parametrize("record,field", [
    (evaluate_record(unscored=MAX_COUNT + 1), "out.test_unscored"),
    (evaluate_record(unscored=10**400), "out.test_unscored"),
    (ablations_record(ks=(1, 10**400)), "out.ablations.ks[1]"),
], ids=["2**53+1", "10**400", "k 10**400"])
def test_a_count_past_2_53_is_refused(record, field):
    name = "evaluate" if "qa" in record["out"] else "ablations"
    with pytest.raises(InputError) as e:
        check_stage_record(Path(f"stages/{name}.json"), name, record)
    assert e.value.field == field and "expected a whole number from 0 to 2**53" in e.value.message


def test_large_finite_numbers_and_counts_still_pass():
    check_stage_record(Path("e.json"), "evaluate", evaluate_record(em=1e308, unscored=MAX_COUNT))
    check_stage_record(Path("e.json"), "evaluate", evaluate_record(em=-(10**308), unscored=0))
    check_stage_record(Path("e.json"), "evaluate", evaluate_record(em=None))
    check_stage_record(Path("a.json"), "ablations", ablations_record(value=0))
    assert [is_finite_number(v) for v in (True, "1", 1, 0.0, 2**1023)] == [False, False, True, True, True]


@pytest.fixture(scope="module")
def tiny_run(tiny_qa_run, tmp_path_factory) -> Path:
    return copy_run(tiny_qa_run, tmp_path_factory.mktemp("finite") / "run")


def _ablation_k1(d, value):
    d["out"]["ablations"]["n_docs"]["rag_token"]["1"] = value


def _em(d, value):
    d["out"]["qa"]["rag_token"]["exact_match"] = value


@pytest.mark.parametrize("stage,change,value,field", [
    ("ablations", _ablation_k1, 10**400, "out.ablations.n_docs.rag_token.1"),  # the reviewer's: exit 3 from matplotlib
    ("evaluate", _em, float("inf"), "out.qa.rag_token.exact_match"),  # became null in results.json
], ids=["ablation 10**400", "exact_match Infinity"])
def test_resume_refuses_it_before_anything_is_written(tiny_run, tmp_path, monkeypatch, capsys, stage, change, value, field):
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    record = run / "stages" / f"{stage}.json"
    data = json.loads(record.read_text())
    change(data, value)
    record.write_text(json.dumps(data, indent=2) + "\n")  # json writes Infinity, as a damaged record may hold it
    written = {f: f.read_bytes() for f in run.iterdir() if f.is_file()}
    assert {"results.json", "timings.json", "report.md"} <= {f.name for f in written}
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run, "--resume")
    assert code == 2 and "Traceback" not in err, err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert errors == [err.strip().splitlines()[-1]] and f"error: {record}: field '{field}': expected a finite" in errors[0]
    assert {f: f.read_bytes() for f in run.iterdir() if f.is_file()} == written
    assert not list(run.rglob("*.tmp")) and not list(run.rglob("*.partial"))


@pytest.mark.parametrize("seconds,shown", [("Infinity", "Infinity"), ("1e400", "Infinity"), ("1" + "0" * 400, "an integer of 401 digits"),
                                           ("-1", "-1")], ids=["Infinity", "1e400", "10**400", "-1"])
def test_a_stage_records_seconds_is_a_finite_number(tmp_path, seconds, shown):
    """timings.json holds each stage's seconds: Infinity and 10**400 were taken and passed on to it."""
    from lewisrag.experiments.stages import read_stage_record

    path = tmp_path / "evaluate.json"
    path.write_text('{"seconds": %s, "out": {}}' % seconds, encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_stage_record(path)
    assert e.value.field == "seconds" and f"expected a finite number >= 0, got {shown}; the stage record is damaged" in e.value.message
    path.write_text('{"seconds": 1e300, "out": {}}', encoding="utf-8")
    assert read_stage_record(path)["seconds"] == 1e300
