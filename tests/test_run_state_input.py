"""A run's own state read back as input: RUN/stitched/stitched.json and RUN/config.json when `compare`
reads them, RUN/stages/<name>.json when `reproduce --resume` does. A damaged or hand-edited file is
one line on stderr naming the file and the field, exit code 2, and nothing written; never a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import copy_run, run_main
from lewisrag.data.io import InputError
from lewisrag.experiments.presets import PRESETS


@pytest.fixture
def run(tiny_qa_run, tmp_path) -> Path:
    """A copy of the session's finished tiny reproduction, for the test to edit."""
    return copy_run(tiny_qa_run, tmp_path / "run")


def edit_json(path: Path, change) -> None:
    """Write `change(data)` (or `data` changed in place when it returns None) back to `path`."""
    data = json.loads(path.read_text())
    changed = change(data)
    path.write_text(json.dumps(data if changed is None else changed, indent=2) + "\n")  # as lewisrag writes it


def assert_one_line_error(code: int, err: str, file: Path, field: str, *needles: str) -> None:
    """Exit 2, no traceback, and the last line of stderr the only error: `error: FILE[:LINE]: field 'FIELD': ...`
    (`reproduce` prints its skipped stages above it)."""
    assert code == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines and lines[-1].startswith(f"error: {file}"), err
    assert [ln for ln in lines if ln.startswith("error:")] == lines[-1:], err
    assert f"field '{field}'" in lines[-1], lines[-1]
    for needle in needles:
        assert needle in lines[-1], (needle, lines[-1])


def compare(monkeypatch, capsys, run: Path, out: Path):
    return run_main(monkeypatch, capsys, "compare", "--run", run, "--systems", "stitched", "--out", out,
                    "--position-questions", "0")


def _set(key, value):
    def change(d):
        d["settings"][key] = value
    return change


def _without_settings(d):
    del d["settings"]


STITCHED_CASES = {
    "no settings": (_without_settings, "settings", "missing"),
    "settings not an object": (lambda d: d.update(settings=[3]), "settings", "expected an object"),
    "unknown key": (_set("bogus", 1), "settings.bogus", "unknown setting"),
    "k a string": (_set("k", "2"), "settings.k", "expected a whole number >= 1, got '2'"),
    "k zero": (_set("k", 0), "settings.k", "expected a whole number >= 1, got 0"),
    "k a boolean": (_set("k", True), "settings.k", "got True"),
    "k past the index": (_set("k", 10**6), "settings.k", "at most the index's"),
    "passage_sep a number": (_set("passage_sep", 5), "settings.passage_sep", "expected a string, got 5"),
    "question_last a string": (_set("question_last", "yes"), "settings.question_last", "expected true or false"),
    "a list": (lambda d: [], "(top level)", "expected a JSON object"),
}


@pytest.mark.parametrize("case", list(STITCHED_CASES))
def test_compare_refuses_a_damaged_stitched_json_in_one_line(case, run, tmp_path, monkeypatch, capsys):
    change, field, message = STITCHED_CASES[case]
    settings = run / "stitched" / "stitched.json"
    edit_json(settings, change)
    out = tmp_path / "C"
    code, _, err = compare(monkeypatch, capsys, run, out)
    assert_one_line_error(code, err, settings, field, message)
    assert len(err.strip().splitlines()) == 1, err
    assert not out.exists()  # nothing half-written


def _rag(key, value):
    def change(d):
        d["preset"]["rag"][key] = value
    return change


CONFIG_CASES = {
    "max_target_length a string": (_rag("max_target_length", "x"), "preset.rag.max_target_length", "got 'x'"),
    "max_target_length negative": (_rag("max_target_length", -3), "preset.rag.max_target_length", "got -3"),
    "max_target_length zero": (_rag("max_target_length", 0), "preset.rag.max_target_length", "got 0"),
    "max_target_length a float": (_rag("max_target_length", 16.5), "preset.rag.max_target_length", "got 16.5"),
    # within the checks of whole numbers, past what the generator decodes: an IndexError once an answer ran on
    "max_target_length past the positions": (_rag("max_target_length", 10**6), "preset.rag.max_target_length",
                                             "positions of"),
    "rag not an object": (lambda d: d["preset"].update(rag=[]), "preset.rag", "expected an object"),
    "preset not an object": (lambda d: d.update(preset="tiny"), "preset", "expected an object"),
    "a list": (lambda d: [], "(top level)", "expected a JSON object"),
}


@pytest.mark.parametrize("case", list(CONFIG_CASES))
def test_compare_refuses_a_damaged_run_config_in_one_line(case, run, tmp_path, monkeypatch, capsys):
    change, field, message = CONFIG_CASES[case]
    config = run / "config.json"
    edit_json(config, change)
    out = tmp_path / "C"
    code, _, err = compare(monkeypatch, capsys, run, out)
    assert_one_line_error(code, err, config, field, message)
    assert len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_compare_still_reads_an_intact_run(run, tmp_path, monkeypatch, capsys):
    """The checks refuse only what is wrong: the run as reproduce wrote it compares."""
    code, _, err = compare(monkeypatch, capsys, run, tmp_path / "C")
    assert code == 0, err
    assert (tmp_path / "C" / "results.json").is_file()


def test_an_outside_generators_k_comes_from_checked_files(run):
    """`--stitched-generator` takes its k from stitched.json, else the preset's stitched_k: a damaged
    value is an InputError naming it, not a k taken from elsewhere in silence."""
    from lewisrag.experiments.stitched_llm import run_k

    assert run_k(run) == PRESETS["tiny"].stitched_k
    edit_json(run / "stitched" / "stitched.json", _set("k", "3"))
    with pytest.raises(InputError) as e:
        run_k(run)
    assert e.value.field == "settings.k" and e.value.source == str(run / "stitched" / "stitched.json")
    shutil.rmtree(run / "stitched")
    assert run_k(run) == PRESETS["tiny"].stitched_k
    edit_json(run / "config.json", lambda d: d["preset"].update(stitched_k=-1))
    with pytest.raises(InputError) as e:
        run_k(run)
    assert e.value.field == "preset.stitched_k" and e.value.source == str(run / "config.json")


def _damage_record(d):
    d["records"][1]["id"] = None


def _drop(*keys):
    """A change deleting the field at `keys` (a path into the record)."""
    def change(d):
        for key in keys[:-1]:
            d = d[key]
        del d[keys[-1]]
    return change


STAGE_CASES = {
    "retrieval a list": ("retrieval", lambda d: [], "(top level)", "expected a JSON object, got 'list'"),
    "retrieval without split": ("retrieval", lambda d: d.pop("split") and None, "split", "missing"),
    "retrieval dense not an object": ("retrieval", lambda d: d.update(dense=3), "dense", "got 3"),
    "retrieval records not a list": ("retrieval", lambda d: d.update(records={}), "records", "got {}"),
    "a record without an id": ("retrieval", _damage_record, "records[1].id", "missing or not a non-empty string"),
    "dpr without seconds": ("dpr", lambda d: {}, "seconds", "missing"),
    "world seconds a string": ("world", lambda d: d.update(seconds="1"), "seconds", "got '1'"),
    "evaluate out not an object": ("evaluate", lambda d: d.update(out=[]), "out", "got []"),
    # what results.json and the report read (record_schema): refused before either is written
    "swap matrix a string": ("knowledge_update", lambda d: d["out"].update(knowledge_update="x"),
                             "out.knowledge_update", "got 'x'"),
    "swap cell missing": ("knowledge_update", _drop("out", "knowledge_update", "rag_token", "index_b", "questions_a"),
                           "out.knowledge_update.rag_token.index_b.questions_a", "missing"),
    "swap notes not text": ("knowledge_update", lambda d: d.update(notes=[1]), "notes[0]", "got 1"),
    "ablations without n_docs": ("ablations", _drop("out", "ablations", "n_docs"),
                                 "out.ablations.n_docs", "missing"),
    "ablations without a K": ("ablations", _drop("out", "ablations", "bm25_retriever", "by_k", "2"),
                              "out.ablations.bm25_retriever.by_k.2", "missing, though ks holds 2"),
    "ablations out empty": ("ablations", lambda d: d.update(out={}), "out.ablations", "missing"),
    "qa system a list": ("evaluate", lambda d: d["out"]["qa"].update(rag_token=[]), "out.qa.rag_token", "got []"),
    "qa exact match a string": ("evaluate", lambda d: d["out"]["qa"]["closed_book"].update(exact_match="1"),
                                "out.qa.closed_book.exact_match", "got '1'"),
    "compare adds a section": ("compare", lambda d: d["out"].update(config={}), "out.config", "does not write"),
    "layers not an object": ("compare", lambda d: d["out"].update(layers=None), "out.layers", "got None"),
    "retrieval bm25 without a k": ("retrieval", _drop("bm25", "recall_at_1"), "bm25.recall_at_1",
                                   "missing"),
}


@pytest.mark.parametrize("case", list(STAGE_CASES))
def test_resume_refuses_a_damaged_stage_record_in_one_line(case, run, monkeypatch, capsys):
    """A stage records itself last and atomically, so a record that is there but wrong was damaged
    afterwards: refused naming the file and field, with how to run the stage again (delete it)."""
    name, change, field, message = STAGE_CASES[case]
    record = run / "stages" / f"{name}.json"
    edit_json(record, change)
    before = record.read_bytes()
    results, report = (run / "results.json").read_bytes(), (run / "report.md").read_bytes()
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run, "--resume")
    assert_one_line_error(code, err, record, field, message)
    assert record.read_bytes() == before and (run / "results.json").read_bytes() == results
    assert (run / "report.md").read_bytes() == report
    assert not list(run.rglob("*.tmp")) and not list(run.rglob("*.partial"))


def test_a_record_error_names_the_line_its_record_opens_on(run, monkeypatch, capsys):
    record = run / "stages" / "retrieval.json"
    edit_json(record, _damage_record)
    opens = [i for i, line in enumerate(record.read_text().splitlines(), start=1) if line == "    {"]  # records[i]'s "{"
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run, "--resume")
    assert_one_line_error(code, err, record, "records[1].id")
    assert f"error: {record}:{opens[1]}: field" in err and opens[1] > 1


RESUME_CONFIG_CASES = {  # a damaged field is named as such: "threads": "x" was quoted "--threads 1 (the run's: 1)",
    "top level": (lambda d: [], "(top level)", "expected a JSON object"),  # and "tasks": "qa" as "(the run's: q,a)"
    "threads": (lambda d: d.update(threads="x"), "threads", "got 'x'; the run's config.json is damaged"),
    "tasks": (lambda d: d.update(tasks="qa"), "tasks", "expected a list of task names, got 'qa'"),
    "seed": (lambda d: d.update(seed=None), "seed", "got None"),
    "preset threads": (lambda d: d["preset"].update(threads=[1]), "preset.threads", "got [1]"),
}


@pytest.mark.parametrize("case", list(RESUME_CONFIG_CASES))
def test_resume_refuses_a_damaged_run_config_in_one_line(case, run, monkeypatch, capsys):
    change, field, message = RESUME_CONFIG_CASES[case]
    edit_json(run / "config.json", change)
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run, "--resume")
    assert_one_line_error(code, err, run / "config.json", field, message)
    assert "the run's:" not in err


def test_a_deleted_stage_record_runs_the_stage_again(run, monkeypatch, capsys):
    """What the damaged record's message says to do works: without its record the stage runs again."""
    (run / "stages" / "retrieval.json").unlink()
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run, "--resume")
    assert code == 0, err
    assert json.loads((run / "stages" / "retrieval.json").read_text())["split"] == "test"


def test_a_rag_run_folder_given_as_encoder_names_its_model(tiny_qa_run, monkeypatch, capsys):
    """A `train rag` run folder's config.json is the run's settings: read as an encoder's (eval retrieval,
    index cut, index targets: index.encoders.dpr_layout) it was refused as "architectures is None"; the
    refusal now names the run's model, whose question encoder is used."""
    run = tiny_qa_run
    code, _, err = run_main(monkeypatch, capsys, "eval", "retrieval", "--questions", str(run / "world" / "test.jsonl"),
                            "--index", str(run / "index_a"), "--encoder", str(run / "rag_token"))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "a `train rag` run folder, not an encoder" in err and str(run / "rag_token" / "best") in err, err
    code, _, err = run_main(monkeypatch, capsys, "eval", "retrieval", "--questions", str(run / "world" / "test.jsonl"),
                            "--index", str(run / "index_a"), "--encoder", str(run / "rag_token" / "best"), "--json")
    assert code == 0, err  # the model it names is taken


def test_compare_refuses_a_reproduction_without_its_config_and_a_folder_of_another_kind(run, tmp_path, monkeypatch,
                                                                                         capsys):
    """Without RUN/config.json the answers were decoded 32 tokens long, not the preset's (exit 0, every
    answer different); a trained model's folder given as --run was "no trained 'rag_token' system"."""
    (run / "config.json").unlink()
    out = tmp_path / "C"
    code, _, err = compare(monkeypatch, capsys, run, out)
    assert code == 2 and err.strip() == (f"error: {run / 'config.json'}: missing: the reproduction records its preset "
                                         "there, which compare decodes with; the run folder is damaged (`lewisrag "
                                         "reproduce --resume` with its flags rewrites it)"), err
    code, _, err = run_main(monkeypatch, capsys, "compare", "--run", run / "rag_token", "--out", out)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"error: {run / 'rag_token'}: field '--run': is a lewisrag " in err and "not a reproduction's" in err, err
    assert not out.exists()
