"""The results.json contract (lewisrag.eval.results): written and read back through one module."""

import importlib.metadata
import json
import math
import subprocess
import sys

import pytest

from lewisrag.data.io import InputError
from lewisrag.eval.bughunt import load_bughunt
from lewisrag.eval.evaluator import evaluate_bughunt
from lewisrag.eval.results import FORMAT, Producer, QuestionRecord, Results, read_results, write_results, write_run_dir


def _results() -> Results:
    recs = [QuestionRecord("q1", "a", "single_doc", {"faithfulness": 0.5, "recall_at_k": {"1": 1.0}}, {}, False,
                           {"statements": [{"text": "x", "supported": True}]}),
            QuestionRecord("q2", "a", "not_in_kb", {"faithfulness": math.nan}, {"faithfulness": "not judged"}, True)]
    return Results(Producer.here("eval"), {"splitter": "sentences"}, recs, {"name": "lexical", "fingerprint": "f"},
                   {"name": "sentences", "version": "1"}, {"faithfulness": {"n": 1}}, {"qa": {"a": {"exact_match": 1.0}}})


def test_round_trip_keeps_every_field_and_writes_nan_as_null(tmp_path):
    write_results(tmp_path / "results.json", _results())
    raw = json.loads((tmp_path / "results.json").read_text())
    assert raw["lewisrag"]["format"] == FORMAT and raw["lewisrag"]["kind"] == "eval"
    assert raw["records"][1]["metrics"]["faithfulness"] is None  # NaN is not JSON
    back = read_results(tmp_path)  # a run directory reads as its results.json
    assert back.to_json() == raw
    assert back.records[0].detail == {"statements": [{"text": "x", "supported": True}]}
    assert back.sections == {"qa": {"a": {"exact_match": 1.0}}} and back.judge["name"] == "lexical"


def test_a_newer_format_is_refused_and_a_missing_one_reads_as_1(tmp_path):
    raw = _results().to_json()
    raw["lewisrag"]["format"] = FORMAT + 1
    (tmp_path / "r.json").write_text(json.dumps(raw))
    with pytest.raises(InputError, match="lewisrag.format.*newer"):
        read_results(tmp_path / "r.json")
    del raw["lewisrag"]["format"]
    (tmp_path / "r.json").write_text(json.dumps(raw))
    assert read_results(tmp_path / "r.json").producer.format == 1


@pytest.mark.parametrize("field, value, match", [
    ("records[0].id", None, "records\\[0\\].id"),
    ("records[0].metrics", [], "records\\[0\\].metrics"),
    ("records[1].refused", None, "records\\[1\\].refused"),  # a not_in_kb record must say
    ("records[0].metrics.faithfulness", float("nan"), "NaN is not JSON"),
])
def test_bad_records_name_the_field(tmp_path, field, value, match):
    raw = _results().to_json()
    rec = raw["records"][int(field[8])]
    path = field.split(".")[1:]
    target = rec
    for key in path[:-1]:
        target = target[key]
    if value is None and path[-1] in ("refused",):
        del target[path[-1]]
    else:
        target[path[-1]] = value
    (tmp_path / "r.json").write_text(json.dumps(raw))
    with pytest.raises(InputError, match=match):
        read_results(tmp_path / "r.json")


def test_write_run_dir_writes_every_file_or_none(tmp_path):
    names = write_run_dir(tmp_path / "run", "evaluation", _results(), report_md="# r\n", report_html="<p>r</p>",
                          config={"command": "test"}, more=lambda d: (d / "extra.txt").write_text("x") and ["extra.txt"])
    assert names == ["extra.txt"]
    assert {p.name for p in (tmp_path / "run").iterdir()} >= {"config.json", "report.md", "results.json", "report.html", "extra.txt"}

    def fail(d):
        raise RuntimeError("plot failed")

    with pytest.raises(RuntimeError):
        write_run_dir(tmp_path / "run2", "evaluation", _results(), report_md="", report_html="", more=fail)
    assert not (tmp_path / "run2").exists()

    (tmp_path / "run" / "my_notes.txt").write_text("mine")  # a rerun into its own folder keeps the user's files
    before = (tmp_path / "run" / "results.json").read_text()
    with pytest.raises(RuntimeError):
        write_run_dir(tmp_path / "run", "evaluation", _results(), report_md="# new\n", report_html="", more=fail)
    assert (tmp_path / "run" / "report.md").read_text() == "# r\n" and (tmp_path / "run" / "results.json").read_text() == before
    write_run_dir(tmp_path / "run", "evaluation", _results(), report_md="# new\n", report_html="<p>new</p>")
    assert (tmp_path / "run" / "report.md").read_text() == "# new\n" and (tmp_path / "run" / "my_notes.txt").read_text() == "mine"


def test_the_evaluator_writes_what_the_reader_reads(tmp_path):
    results = evaluate_bughunt(load_bughunt())
    write_results(tmp_path / "results.json", results)
    back = read_results(tmp_path / "results.json")
    assert back.producer.kind == "bughunt" and len(back.records) == len(results.records) == 6
    assert back.to_json() == results.to_json()


def test_a_results_json_folder_is_named_as_one(tmp_path):
    from lewisrag.data.io import InputError
    from lewisrag.eval.results import read_results

    (tmp_path / "results.json").mkdir()
    with pytest.raises(InputError, match="is a folder; a results.json file is needed") as e:
        read_results(tmp_path)
    assert e.value.source == str(tmp_path / "results.json")


def test_producer_version_without_installed_metadata():
    """lewisrag run from a checkout (PYTHONPATH, no `pip install`) has no package metadata: the version
    written into results.json comes from the package itself, the same number an install records."""
    import lewisrag

    code = ("import importlib.metadata as m\n"
            "def missing(name): raise m.PackageNotFoundError(name)\n"
            "m.version = missing\n"
            "from lewisrag.eval.results import Producer\n"
            "print(Producer.here('eval').version)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == lewisrag.__version__ == importlib.metadata.version("lewisrag")
