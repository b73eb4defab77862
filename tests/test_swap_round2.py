"""`lewisrag swap`, second review: FEVER claim files (and exports of FEVER models) scored by exact match
with exit 0; `train rag --swap` recording its DPR pair's fingerprint instead of its training index's;
the same passages in another row order not noted; the question counts missing from reproduce's swap
tables."""

from __future__ import annotations

import doctest
import json
import shutil

import pytest
import torch

from conftest import run_main
from lewisrag.data.io import InputError
from test_faults import assert_one_line_error
from test_rag_train import make_config, rag_inputs, trained_rag  # noqa: F401  (session fixtures)


def _no_decoding(monkeypatch):
    """swap_matrix's answerer made instant: these tests read its notes and checks, not its answers."""
    from lewisrag.experiments import swap

    def blank(model, tokenizers, index, questions, *, on_batch=None, **kw):
        on_batch(len(questions))
        return [""] * len(questions)

    monkeypatch.setattr(swap, "answer_questions", blank)


def _foreign(index, to):
    """A copy of `index` whose manifest names another context encoder (as one built by another DPR would)."""
    shutil.copytree(index, to)
    manifest = json.loads((to / "manifest.json").read_text())
    manifest["encoder"]["ctx_fingerprint"] = "f" * 16
    (to / "manifest.json").write_text(json.dumps(manifest))
    return to


# --- 1. FEVER claims: question files and exported FEVER models ------------------------------------------


def test_swap_refuses_a_fever_claim_file_naming_line_and_field(rag_inputs, trained_rag, monkeypatch, capsys):  # noqa: F811
    """fever_test.jsonl was scored by exact match against SUPPORTS/REFUTES labels, exit 0, where a FEVER
    model is refused for that very reason."""
    from lewisrag.experiments.swap import load_question_sets, swap_matrix

    w = rag_inputs["world"]
    with pytest.raises(InputError, match="FEVER claims .*not scored by exact match of a generated answer: label "
                                         "accuracy, whose hot swap is `lewisrag reproduce --tasks fever`'s fever.swap; "
                                         "swap measures QA models") as e:
        swap_matrix([trained_rag], [rag_inputs["index"]], [w / "questions_a.jsonl", w / "fever_test.jsonl"])
    assert (e.value.source, e.value.line, e.value.field) == (str(w / "fever_test.jsonl"), 1, "answers[0]")
    assert load_question_sets([w / "questions_a.jsonl"])  # QA questions still read
    code, _, err = run_main(monkeypatch, capsys, "swap", "--model", trained_rag, "--index", rag_inputs["index"],
                              "--questions", w / "fever_test.jsonl", "--device", "cpu")
    assert_one_line_error(code, err, "fever_test.jsonl:1: field 'answers[0]': FEVER claims")


def test_an_export_records_its_task_and_swap_refuses_an_exported_fever_model(rag_inputs, trained_rag, tmp_path,  # noqa: F811
                                                                             monkeypatch):
    """check_tasks read train_config.json only, which an export has not: a FEVER model passed once exported."""
    from lewisrag.experiments.export import export_rag
    from lewisrag.experiments.swap import check_tasks, swap_matrix

    _no_decoding(monkeypatch)
    fever = shutil.copytree(trained_rag / "final", tmp_path / "fever_model")
    config = json.loads((fever / "train_config.json").read_text())
    (fever / "train_config.json").write_text(json.dumps({**config, "task": "fever"}))
    with pytest.raises(InputError, match="was trained for --task fever"):
        check_tasks([fever])
    export_rag(fever, rag_inputs["index"], tmp_path / "fever_export")
    record = tmp_path / "fever_export" / "lewisrag_export.json"
    assert json.loads(record.read_text())["task"] == "fever"
    w = rag_inputs["world"]
    with pytest.raises(InputError, match="was trained for --task fever") as e:
        swap_matrix([tmp_path / "fever_export"], [rag_inputs["index"]], [w / "questions_a.jsonl"])
    assert e.value.field == "task"

    export_rag(trained_rag / "final", rag_inputs["index"], tmp_path / "qa_export")
    assert json.loads((tmp_path / "qa_export" / "lewisrag_export.json").read_text())["task"] == "qa"
    swap_matrix([tmp_path / "qa_export"], [rag_inputs["index"]], [w / "questions_a.jsonl"])  # a QA model: scored
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "task": 3}))
    with pytest.raises(InputError, match="expected a task name, got 3") as e:
        check_tasks([tmp_path / "fever_export"])
    assert (e.value.source, e.value.field) == (str(record), "task")
    record.write_text(json.dumps({k: v for k, v in data.items() if k != "task"}))  # an export from before the field
    check_tasks([tmp_path / "fever_export"])


# --- 2. the pairing a `train rag --swap` run records -------------------------------------------------------


def test_train_rag_swap_records_the_training_index_encoder(rag_inputs, tmp_path):  # noqa: F811
    """Under --swap the model recorded its DPR pair's fingerprint: the index it trained on was then refused
    by `ask` and `swap`, and an index of the pair, never seen, accepted."""
    from lewisrag.index.dense import DenseIndex
    from lewisrag.index.store import IndexMismatchError
    from lewisrag.training.rag_data import load_components

    foreign = _foreign(rag_inputs["index"], tmp_path / "foreign")
    parts = load_components(make_config(rag_inputs, index=str(foreign), swap=True, cpu=True))
    assert parts.model.settings.index_fingerprint == "f" * 16
    with torch.no_grad():
        parts.model.retrieve(["Who leads it?"], DenseIndex.load(foreign), parts.tokenizers)  # its own index: searched
        with pytest.raises(IndexMismatchError, match="--swap"):
            parts.model.retrieve(["Who leads it?"], DenseIndex.load(rag_inputs["index"]), parts.tokenizers)


def test_swap_says_what_a_train_rag_run_naming_no_context_encoder_is(rag_inputs, trained_rag, tmp_path,  # noqa: F811
                                                                      monkeypatch):
    """A run saved with a null fingerprint (a DPRQuestionEncoder folder under --swap, before runs recorded their
    index's) was called "a transformers RAG checkpoint"."""
    from lewisrag.experiments.swap import swap_matrix

    _no_decoding(monkeypatch)
    model = shutil.copytree(trained_rag / "final", tmp_path / "unpaired")
    rag = json.loads((model / "rag.json").read_text())
    rag["settings"]["index_fingerprint"] = None
    (model / "rag.json").write_text(json.dumps(rag))
    r = swap_matrix([model], [rag_inputs["index"]], [rag_inputs["world"] / "questions_a.jsonl"])
    (note,) = [n for n in r["notes"] if "names no context encoder" in n]
    assert "a `train rag --swap` run of a transformers DPRQuestionEncoder folder" in note, note
    assert "transformers RAG checkpoint" not in note
    from lewisrag.experiments.ask import unpaired_note  # what `ask` and `export` say of it: the same

    assert unpaired_note(model, None) == note


# --- 3. the same passages in another row order ----------------------------------------------------------------


def test_the_same_passages_in_another_row_order_are_noted(rag_inputs, trained_rag, tmp_path, monkeypatch):  # noqa: F811
    from lewisrag.data.records import read_passages
    from lewisrag.experiments.swap import swap_matrix
    from lewisrag.index.dense import build_dense_index

    _no_decoding(monkeypatch)
    passages = read_passages(rag_inputs["world"] / "passages_a.jsonl")
    reversed_index = tmp_path / "index_rev"
    build_dense_index(passages[::-1], rag_inputs["dpr"], reversed_index)
    questions = [rag_inputs["world"] / "questions_a.jsonl"]
    r = swap_matrix([trained_rag], [rag_inputs["index"], reversed_index], questions)
    (note,) = [n for n in r["notes"] if "hold the same" in n]
    assert note.startswith(f"indexes index and index_rev hold the same {len(passages)} passages in another row order "
                           "(passage set hash "), note

    def old(index, to):  # a manifest written before passage_set_hash: compared by content hash, as before
        shutil.copytree(index, to)
        manifest = json.loads((to / "manifest.json").read_text())
        del manifest["passage_set_hash"]
        (to / "manifest.json").write_text(json.dumps(manifest))
        return to

    old_a, old_rev = old(rag_inputs["index"], tmp_path / "old_a"), old(reversed_index, tmp_path / "old_rev")
    assert not [n for n in swap_matrix([trained_rag], [old_a, old_rev], questions)["notes"] if "hold the same" in n]
    r = swap_matrix([trained_rag], [old_a, rag_inputs["index"]], questions)  # one old manifest: by content hash
    (note,) = [n for n in r["notes"] if "hold the same" in n]
    assert f"hold the same {len(passages)} passages (content hash " in note, note


def test_every_dense_index_writer_records_the_passage_set_hash_and_old_manifests_read(rag_inputs, tmp_path):  # noqa: F811
    from lewisrag.data.records import read_passages
    from lewisrag.index import store
    from lewisrag.index.dense import DenseIndex, write_dense_index
    from lewisrag.index.verify import verify_index

    assert doctest.testmod(store).failed == 0
    passages = read_passages(rag_inputs["world"] / "passages_a.jsonl")
    built = store.read_manifest(rag_inputs["index"])
    assert built["passage_set_hash"] == store.build_hashes(passages)[2] == store.build_hashes(passages[::-1])[2]
    assert built["content_hash"] == store.content_hash(passages)  # unchanged: resumes and verify compare it
    # the end-to-end retriever's re-encoded index (`write_dense_index`) holds the same passages
    assert write_dense_index(DenseIndex.load(rag_inputs["index"]), tmp_path / "copy")["passage_set_hash"] == \
        built["passage_set_hash"]
    verify_index(tmp_path / "copy")
    older = {k: v for k, v in built.items() if k != "passage_set_hash"}
    store.check_manifest(older, tmp_path / "manifest.json")  # built before the field: read as it was
    with pytest.raises(InputError, match="field 'passage_set_hash': expected a string, got 7"):
        store.check_manifest({**built, "passage_set_hash": 7}, tmp_path / "manifest.json")


# --- 4. the question counts in reproduce's swap tables --------------------------------------------------------


def _results() -> dict:
    cells = {"index_a": {"questions_a": 0.75, "questions_b": 0.0}, "index_b": {"questions_a": 0.0, "questions_b": 0.5}}
    return {"retrieval": {"split": "test", "recall_at_1": 0.5}, "qa": {}, "knowledge_update": {"rag_token": cells},
            "stages": {"knowledge_update": {"n_questions": {"questions_a": 12, "questions_b": 7},
                                            "left_out": {"questions_a": {"long": 0, "no_answer": 0},
                                                         "questions_b": {"long": 0, "no_answer": 0}}, "notes": []}}}


def test_the_swap_tables_of_report_md_and_the_summary_show_each_question_count(tmp_path, capsys):
    """docs/architecture.md said report.md and the printed summary repeat the swap's n_questions; neither did."""
    from lewisrag.commands.experiments import _render
    from lewisrag.eval.reports.i18n import messages
    from lewisrag.experiments.report import _swap

    results = _results()
    assert "| model | index | questions about A (12) | questions about B (7) |" in _swap(results, messages("en"))
    assert any("关于 A 的问题（12）" in line and "关于 B 的问题（7）" in line for line in _swap(results, messages("zh")))
    _render(results, tmp_path)
    assert "questions A (12)" in capsys.readouterr().out
    _render(results, tmp_path, "zh")
    assert "问题 A（12）" in capsys.readouterr().out
    del results["stages"]  # a run recorded without the counts: the bare names
    assert "| model | index | questions about A | questions about B |" in _swap(results, messages("en"))


def test_an_index_of_another_width_is_refused_on_its_width_first(rag_inputs, trained_rag, tmp_path):  # noqa: F811
    """An index built by an encoder of another width was refused on the fingerprint, offering --swap, which then
    failed on the width: the width the model's question encoder declares is checked before any weight loads."""
    from lewisrag.experiments.swap import swap_matrix

    model = shutil.copytree(trained_rag / "final", tmp_path / "wide")
    config = json.loads((model / "question_encoder" / "config.json").read_text())
    config["hidden_size"] *= 2  # as a question encoder of another width declares it
    (model / "question_encoder" / "config.json").write_text(json.dumps(config))
    rag = json.loads((model / "rag.json").read_text())
    rag["settings"]["index_fingerprint"] = "f" * 16  # paired with another context encoder too
    (model / "rag.json").write_text(json.dumps(rag))
    for swap in (False, True):
        with pytest.raises(InputError, match=r"field 'dim': question encoder gives \d+-d vectors") as e:
            swap_matrix([model], [rag_inputs["index"]], [rag_inputs["world"] / "questions_a.jsonl"], swap=swap)
        assert "--swap" not in str(e.value)
