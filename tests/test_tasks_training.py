"""What differs between tasks in training: FEVER's labels as single tokens, labels scored in the RAG
label convention, 3-way and 2-way accuracy, and the --task flag."""

import doctest

import pytest
import torch
from conftest import run_cli

from lewisrag.data.io import InputError
from lewisrag.data.pretrained import load_generator
from lewisrag.data.tasks import LABELS
from lewisrag.training import tasks as TT
from lewisrag.training.pretrain import SHIPPED_DIR
from lewisrag.training.rag_data import answer_labels


@pytest.fixture()
def generator():
    return load_generator(SHIPPED_DIR / "generator-small")


def test_fever_labels_become_single_tokens_started_from_their_words(generator):
    gen, tok = generator
    before = len(tok)
    pieces = {label: TT.label_ids(tok, label.lower()) for label in LABELS}
    old = gen.get_input_embeddings().weight.detach().clone()
    assert TT.prepare_generator("fever", gen, tok) is True
    assert len(tok) == before + 3 and gen.get_input_embeddings().weight.shape[0] == before + 3
    emb = gen.get_input_embeddings().weight
    for label in LABELS:
        (i,) = TT.label_ids(tok, label)
        assert torch.allclose(emb[i], old[pieces[label]].mean(0))
        assert tok.decode([i]) == label
    assert len({tuple(emb[TT.label_ids(tok, label)[0]].tolist()) for label in LABELS}) == 3  # distinct rows
    assert TT.prepare_generator("fever", gen, tok) is False  # already there: a FEVER checkpoint loads as is
    assert TT.prepare_generator("jeopardy", *load_generator(SHIPPED_DIR / "generator-small")) is False


def test_label_log_probs_builds_the_rag_labels_and_ranks_by_likelihood(generator):
    gen, tok = generator
    TT.prepare_generator("fever", gen, tok)
    seen = []

    def score(chunk, labels):  # a model that finds the claim's own label likeliest
        seen.append(labels)
        label = tok.decode(labels[0, 2:3])
        return torch.tensor([0.1 if c.endswith(label) else 2.0 for c in chunk])

    claims = ["x SUPPORTS", "y REFUTES", "z NOT ENOUGH INFO"]
    scores = TT.label_log_probs(score, tok, gen.config.decoder_start_token_id, claims, batch_size=2)
    expected = answer_labels(["SUPPORTS"] * 2, tok, gen.config.decoder_start_token_id, gen.config.pad_token_id, 8)
    assert torch.equal(seen[0], expected)
    acc = TT.fever_accuracy(scores, ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"])
    assert acc["predictions"] == list(LABELS) and acc["acc3"] == 1.0 and acc["acc2"] == 1.0 and acc["n2"] == 2


def test_two_way_accuracy_rules_out_not_enough_info():
    scores = [[-2.0, -3.0, -0.1], [-3.0, -2.0, -0.1], [-1.0, -2.0, -3.0]]
    acc = TT.fever_accuracy(scores, ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"])
    assert acc["predictions"] == ["NOT ENOUGH INFO", "NOT ENOUGH INFO", "SUPPORTS"]
    assert acc["acc3"] == 0.0 and acc["acc2"] == 1.0  # both S/R claims right once NEI is ruled out


def test_unknown_task_is_bad_input(tmp_path):
    with pytest.raises(InputError, match="unknown task"):
        TT.check_task("squad")
    r = run_cli("train", "rag", "--task", "squad", "--index", str(tmp_path), "--encoder", str(tmp_path), "--generator",
                str(tmp_path), "--train", "x.jsonl", "--dev", "x.jsonl", "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and "--task" in r.stderr and "Traceback" not in r.stderr and not (tmp_path / "run").exists()


def test_doctests():
    assert doctest.testmod(TT).failed == 0
