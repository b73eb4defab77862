"""`lewisrag swap`: the model × index × question-set EM matrix, and the encoder check that guards it."""

from __future__ import annotations

import doctest
import json
import shutil

import pytest
import torch
from typer.testing import CliRunner

from conftest import run_cli, write_jsonl
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


@pytest.fixture(scope="module")
def talkative_rag(trained_rag, tmp_path_factory):  # noqa: F811
    """trained_rag's final model with a generator of large random weights.

    The 3-step model answers "" to every question from any passages, so each of its cells is 0
    whatever index it reads; this generator's answers depend on the passages it is given.
    """
    from transformers import AutoModelForSeq2SeqLM

    out = tmp_path_factory.mktemp("swap") / "talkative_rag"
    shutil.copytree(trained_rag / "final", out)
    generator = AutoModelForSeq2SeqLM.from_pretrained(out / "generator")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in generator.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g))
    generator.save_pretrained(out / "generator")
    return out


def _snapshot(path):
    """{passage id: text} of a passages file."""
    from lewisrag.data.records import read_passages

    return {p.id: p.text for p in read_passages(path)}


def _direct_answers(model_dir, index_path, questions, max_length=8):
    """What the model answers from that index, computed here: retrieve, decode greedily, strip specials."""
    from lewisrag.training.checkpoint import load_trained
    from lewisrag.index.dense import DenseIndex

    model, tokenizers = load_trained(model_dir)
    with torch.no_grad():
        r = model.retrieve(questions, DenseIndex.load(index_path), tokenizers)
        ids = model.generate(r.context_input_ids, r.context_attention_mask, r.doc_scores, num_beams=1,
                             max_length=max_length)
    return [a.strip() for a in tokenizers.generator.batch_decode(ids, skip_special_tokens=True)]


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
    from lewisrag.experiments import swap
    from lewisrag.experiments.swap import swap_matrix

    w = rag_inputs["world"]
    truth = {"index": {ex.question: ex.answers[0] for ex in read_qa(w / "questions_a.jsonl")},
             "index_b": {ex.question: ex.answers[0] for ex in read_qa(w / "questions_b.jsonl")}}

    def oracle(model, tokenizers, index, questions, *, on_batch=None, **kw):
        on_batch(len(questions))
        return [truth[index.path.name][q] for q in questions]

    monkeypatch.setattr(swap, "answer_questions", oracle)  # swap_matrix's answerer, as swap.py imports it
    steps = []
    r = swap_matrix([trained_rag], [rag_inputs["index"], index_b], [w / "questions_a.jsonl", w / "questions_b.jsonl"],
                    on_progress=lambda stage, done, total: steps.append((done, total)))
    m = r["models"][0]
    assert r["indexes"] == ["index", "index_b"] and r["questions"] == ["questions_a", "questions_b"]
    assert r["em"][m] == {"index": {"questions_a": 1.0, "questions_b": 0.0}, "index_b": {"questions_a": 0.0, "questions_b": 1.0}}
    assert steps[-1][0] == steps[-1][1] == 4 * r["n_questions"]["questions_a"]


def test_real_model_cells_equal_answers_computed_directly(rag_inputs, talkative_rag, index_b, tmp_path,  # noqa: F811
                                                           monkeypatch):
    """Each cell holds the model's own answers from that index to that set, scored against that set.

    Both sets ask the questions of questions_a (set_b in reverse order); their gold answers are the
    model's answers computed here from index (set_a) and from index_b (set_b). Matched cells are
    then 1 and mismatched ones below 1, by as much as reading the other snapshot changes answers.
    """
    from lewisrag.data.records import read_qa
    from lewisrag.experiments.swap import swap_matrix
    from lewisrag.rag_model import RagModel
    from lewisrag.scoring.qa import exact_match

    w = rag_inputs["world"]
    asked = [ex.question for ex in read_qa(w / "questions_a.jsonl")]
    sets = {"set_a": asked, "set_b": asked[::-1]}
    indexes = {"index": rag_inputs["index"], "index_b": index_b}
    direct = {i: {q: _direct_answers(talkative_rag, path, qs) for q, qs in sets.items()} for i, path in indexes.items()}
    assert all(a for cell in direct.values() for answers in cell.values() for a in answers)
    assert direct["index"]["set_a"] != direct["index_b"]["set_a"]  # the snapshot read changes some answers
    gold = {"set_a": direct["index"]["set_a"], "set_b": direct["index_b"]["set_b"]}
    paths = [write_jsonl(tmp_path / f"{q}.jsonl", [{"id": f"q{n}", "question": x, "answers": [a]}
                                                    for n, (x, a) in enumerate(zip(qs, gold[q]))])
             for q, qs in sets.items()]

    read, retrieve = {}, RagModel.retrieve

    def recording(self, questions, index, *args, **kwargs):
        r = retrieve(self, questions, index, *args, **kwargs)
        read[index.path.name, tuple(questions)] = [p for ps in r.passages for p in ps]
        return r

    monkeypatch.setattr(RagModel, "retrieve", recording)
    r = swap_matrix([talkative_rag], list(indexes.values()), paths, max_length=8)
    em, predictions = r["em"]["talkative_rag"], r["predictions"]["talkative_rag"]
    for i in indexes:
        for q in sets:
            assert predictions[i][q] == direct[i][q], (i, q)
            assert em[i][q] == sum(exact_match(p, [g]) for p, g in zip(direct[i][q], gold[q])) / len(asked), (i, q)
    assert em["index"]["set_a"] == em["index_b"]["set_b"] == 1.0
    assert em["index_b"]["set_a"] < 1.0 and em["index"]["set_b"] < 1.0
    # every cell read its own index's passages, and the mismatched ones snapshot B's updated facts
    snapshots = {"index": _snapshot(w / "passages_a.jsonl"), "index_b": _snapshot(w / "passages_b.jsonl")}
    assert len(read) == 4
    for (i, _), passages in read.items():
        assert all(snapshots[i][p.id] == p.text for p in passages)
    assert any(snapshots["index"][p.id] != p.text for p in read["index_b", tuple(sets["set_a"])])


def test_swapping_the_index_changes_the_passages_read(rag_inputs, trained_rag, index_b):  # noqa: F811
    from lewisrag.data.records import read_qa
    from lewisrag.training.checkpoint import load_trained
    from lewisrag.index.dense import DenseIndex

    w = rag_inputs["world"]
    model, tokenizers = load_trained(trained_rag)
    questions = [ex.question for ex in read_qa(w / "questions_a.jsonl")]
    with torch.no_grad():
        a = model.retrieve(questions, DenseIndex.load(rag_inputs["index"]), tokenizers)
        b = model.retrieve(questions, DenseIndex.load(index_b), tokenizers)
    snap_a, snap_b = _snapshot(w / "passages_a.jsonl"), _snapshot(w / "passages_b.jsonl")
    assert [[p.id for p in ps] for ps in a.passages] != [[p.id for p in ps] for ps in b.passages]
    assert all(snap_a[p.id] == p.text for ps in a.passages for p in ps)
    assert all(snap_b[p.id] == p.text for ps in b.passages for p in ps)
    assert any(snap_a[p.id] != p.text for ps in b.passages for p in ps)  # B's updated facts, not A's
    assert not torch.equal(a.doc_scores, b.doc_scores)
    assert a.context_input_ids.shape != b.context_input_ids.shape or not torch.equal(a.context_input_ids,
                                                                                     b.context_input_ids)


def test_cli_json_equals_an_in_process_rerun(rag_inputs, talkative_rag, index_b, tmp_path):  # noqa: F811
    """Decoding is deterministic: the CLI's JSON holds exactly the answers and scores of a second run."""
    from lewisrag.cli import app
    from lewisrag.experiments.swap import load_question_sets, swap_matrix

    w = rag_inputs["world"]
    indexes, sets = [rag_inputs["index"], index_b], [w / "questions_a.jsonl", w / "questions_b.jsonl"]
    out = tmp_path / "swap.json"
    r = CliRunner().invoke(app, ["swap", "--model", str(talkative_rag), "--index", str(indexes[0]), "--index",
                                 str(indexes[1]), "--questions", str(sets[0]), "--questions", str(sets[1]),
                                 "--max-length", "8", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "questions_a" in r.stdout and "index_b" in r.stdout
    result = json.loads(out.read_text())
    again = swap_matrix([talkative_rag], indexes, sets, max_length=8)
    assert result["em"] == again["em"] and result["predictions"] == again["predictions"]
    n = {q.stem: len(load_question_sets([q])[0]) for q in sets}
    assert result["n_questions"] == again["n_questions"] == n
    predictions = again["predictions"]["talkative_rag"]
    assert predictions["index"]["questions_a"] != predictions["index_b"]["questions_a"]
    assert all(len(p) == n[q] and all(p) for cell in predictions.values() for q, p in cell.items())


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


def test_a_question_the_encoder_reads_nothing_of_is_refused_as_ask_refuses_it(rag_inputs, trained_rag, tmp_path):  # noqa: F811
    """A zero-width space or a bell was answered from [CLS] [SEP] alone and scored, with exit 0 and no note."""
    from lewisrag.experiments.swap import swap_matrix

    path = write_jsonl(tmp_path / "q.jsonl", [{"id": "fine", "question": "Who leads Valdoria?", "answers": ["x"]},
                                              {"id": "blank", "question": "\u200b\u0007", "answers": ["x"]}])
    with pytest.raises(InputError, match="question 'blank'") as e:
        swap_matrix([trained_rag], [rag_inputs["index"]], [path])
    assert e.value.field == "question" and e.value.source == str(path)
