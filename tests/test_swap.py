"""`lewisrag swap`: the model × index × question-set EM matrix, and the encoder check that guards it."""

from __future__ import annotations

import doctest
import json
import shutil

import pytest
from typer.testing import CliRunner

from conftest import run_cli
from lewisrag.data.io import InputError
from test_rag_train import rag_inputs, trained_rag  # noqa: F401  (session fixtures)


@pytest.fixture(scope="module")
def index_b(rag_inputs, tmp_path_factory):  # noqa: F811
    """Snapshot B ("2018") indexed with the same DPR as snapshot A."""
    from lewisrag.data.records import read_passages
    from lewisrag.index.dense import build_dense_index

    out = tmp_path_factory.mktemp("swap") / "index_b"
    build_dense_index(read_passages(rag_inputs["world"] / "passages_b.jsonl"), rag_inputs["dpr"], out)
    return out


def _foreign(index, tmp_path):
    """A copy of `index` whose manifest claims another context encoder."""
    copy = tmp_path / "foreign"
    shutil.copytree(index, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["encoder"]["ctx_fingerprint"] = "f" * 16
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


def test_doctest():
    from lewisrag.experiments import swap

    assert doctest.testmod(swap).failed == 0


def test_matrix_cells_pair_each_index_with_each_question_set(rag_inputs, trained_rag, index_b, monkeypatch):  # noqa: F811
    """With a reader that answers from whichever snapshot it is given, matched cells are 1 and mismatched 0."""
    from lewisrag.data.records import read_qa
    from lewisrag.experiments.swap import swap_matrix
    from lewisrag.training import rag

    w = rag_inputs["world"]
    truth = {"index": {ex.question: ex.answers[0] for ex in read_qa(w / "questions_a.jsonl")},
             "index_b": {ex.question: ex.answers[0] for ex in read_qa(w / "questions_b.jsonl")}}

    def oracle(model, tokenizers, index, questions, *args, on_batch=None):
        on_batch(len(questions))
        return [truth[index.path.name][q] for q in questions]

    monkeypatch.setattr(rag, "predict", oracle)
    steps = []
    r = swap_matrix([trained_rag], [rag_inputs["index"], index_b], [w / "questions_a.jsonl", w / "questions_b.jsonl"],
                    on_progress=lambda stage, done, total: steps.append((done, total)))
    m = r["models"][0]
    assert r["indexes"] == ["index", "index_b"] and r["questions"] == ["questions_a", "questions_b"]
    assert r["em"][m] == {"index": {"questions_a": 1.0, "questions_b": 0.0}, "index_b": {"questions_a": 0.0, "questions_b": 1.0}}
    assert steps[-1][0] == steps[-1][1] == 4 * r["n_questions"]["questions_a"]


def test_real_model_matrix_and_cli_json(rag_inputs, trained_rag, index_b, tmp_path):  # noqa: F811
    from lewisrag.cli import app

    w = rag_inputs["world"]
    out = tmp_path / "swap.json"
    r = CliRunner().invoke(app, ["swap", "--model", str(trained_rag), "--index", str(rag_inputs["index"]), "--index",
                                 str(index_b), "--questions", str(w / "questions_a.jsonl"), "--questions",
                                 str(w / "questions_b.jsonl"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "questions_a" in r.stdout and "index_b" in r.stdout
    result = json.loads(out.read_text())
    for i in ("index", "index_b"):
        for q in ("questions_a", "questions_b"):
            assert 0.0 <= result["em"]["trained_rag"][i][q] <= 1.0
            assert len(result["predictions"]["trained_rag"][i][q]) == result["n_questions"][q]


def test_foreign_encoder_needs_swap(rag_inputs, trained_rag, tmp_path):  # noqa: F811
    from lewisrag.experiments.swap import swap_matrix

    foreign, qa = _foreign(rag_inputs["index"], tmp_path), rag_inputs["world"] / "questions_a.jsonl"
    with pytest.raises(InputError, match="--swap"):
        swap_matrix([trained_rag], [rag_inputs["index"], foreign], [qa])
    r = swap_matrix([trained_rag], [foreign], [qa], swap=True)
    assert r["indexes"] == ["foreign"] and r["config"]["swap"] is True


def test_cli_foreign_encoder_is_exit_2(rag_inputs, trained_rag, tmp_path):  # noqa: F811
    foreign = _foreign(rag_inputs["index"], tmp_path)
    r = run_cli("swap", "--model", str(trained_rag), "--index", str(foreign), "--questions",
                str(rag_inputs["world"] / "questions_a.jsonl"), "--out", str(tmp_path / "m.json"))
    assert r.returncode == 2 and "ctx_fingerprint" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "m.json").exists()
