"""Notes went to stdout through rich (`_ui.out`): hard-wrapped at 80 columns and dropped with --json
(export's `note: generate() decodes as ...`, reproduce's knowledge-update notes). Notes are stderr's,
one unwrapped line each, as ask's and swap's are, with or without --json; stdout keeps the results."""

from __future__ import annotations

import json

import pytest

from conftest import run_main

LONG = ("index_a and index_b hold the same passages, so the knowledge-update matrix measures nothing that a single "
        "index would not (a note longer than eighty columns, to be kept on one line)")


@pytest.mark.parametrize("as_json", [[], ["--json"]])
@pytest.mark.parametrize("variant", ["token", "sequence"])
def test_export_prints_its_decoding_note_on_stderr(variant, as_json, tmp_path, monkeypatch, capsys):
    import lewisrag.experiments.export as E
    from lewisrag.commands.export import decoding_note

    summary = E.ExportSummary(out=str(tmp_path / "hf"), variant=variant, n_docs=5, n_passages=60, dim=128, model="m",
                              index="i", generate_kwargs={"num_beams": 1, "max_length": 32, "forced_bos_token_id": 0},
                              beam_kwargs={"early_stopping": True})
    monkeypatch.setattr(E, "export_rag", lambda *a, **kw: summary)
    code, out, err = run_main(monkeypatch, capsys, "export", "--model", tmp_path / "m", "--index", tmp_path / "i",
                              "--out", tmp_path / "hf", *as_json)
    assert code == 0, err
    note = decoding_note(variant, summary.generate_kwargs, summary.beam_kwargs)
    assert len(note) > 80 and note in err.splitlines(), err  # whole, on one line
    assert "note:" not in out
    if as_json:
        assert json.loads(out) == summary.to_dict()  # the whole of stdout


@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_reproduce_prints_its_knowledge_update_notes_on_stderr(as_json, tmp_path, monkeypatch, capsys):
    import lewisrag.experiments.reproduce as R

    results = {"retrieval": {"split": "test", "recall_at_1": 0.5, "bm25": {"recall_at_1": 0.25}},
               "qa": {"rag_token": {"exact_match": 0.75, "f1": 0.8, "rougeL": 0.8}},
               "knowledge_update": {"rag_token": {"index_a": {"questions_a": 0.9, "questions_b": 0.1}}},
               "stages": {"knowledge_update": {"notes": [LONG, "a second note"]}}}
    monkeypatch.setattr(R, "reproduce", lambda preset, out, **kw: results)
    code, out, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", tmp_path / "run", *as_json)
    assert code == 0, err
    assert [line for line in err.splitlines() if line.startswith("note:")] == [f"note: {LONG}", "note: a second note"], err
    assert "note:" not in out
    if as_json:
        assert json.loads(out)["knowledge_update"] == results["knowledge_update"]
    else:
        assert "results:" in out  # the tables are still there
