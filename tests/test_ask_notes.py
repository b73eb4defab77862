"""`lewisrag ask`'s notes and refusals, from the user's side: an answer cut at --max-length under a
forced end token, the note at the generator's last position, a question of characters the question
encoder drops, and a transformers RAG checkpoint given an index of another width."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest

from conftest import run_main
from lewisrag.data.io import InputError
from test_rag_train import rag_inputs, trained_rag  # noqa: F401  (session fixtures)
from test_swap import talkative_rag  # noqa: F401  (a model whose answers fill --max-length)

QUESTION = "Who is the leader of Valdoria?"


def _with_forced_eos(model_dir, out):
    """A copy of `model_dir` whose generator forces its end token at the last position, as every
    facebook/bart-large generator does (BartConfig's forced_eos_token_id=2)."""
    shutil.copytree(model_dir, out)
    file = out / "generator" / "generation_config.json"
    gc = json.loads(file.read_text())
    file.write_text(json.dumps({**gc, "forced_eos_token_id": gc["eos_token_id"]}))
    return out


def test_an_end_token_forced_at_the_last_position_is_not_the_answers_own(rag_inputs, talkative_rag, tmp_path,  # noqa: F811
                                                                         monkeypatch, capsys):
    """With forced_eos_token_id set, decoding puts the end token at position max_length − 1 whatever
    the model says: an answer cut there looked finished, and neither the "may be cut" note nor
    reached_max_length appeared (RAG-Token and RAG-Sequence alike)."""
    from lewisrag.experiments.ask import ask
    from lewisrag.index.dense import DenseIndex
    from lewisrag.training.checkpoint import load_trained

    forced = _with_forced_eos(talkative_rag, tmp_path / "forced")
    args = ["ask", "--model", forced, "--index", rag_inputs["index"], "--n-docs", "2", "--max-length", "3", "--json"]
    code, out, err = run_main(monkeypatch, capsys, *args, QUESTION)
    assert code == 0 and json.loads(out)["reached_max_length"] is True, err
    assert "note: the answer reached --max-length 3 before its end token, so it may be cut" in err

    model, tokenizers = load_trained(forced)
    eos = model.generation_config.eos_token_id
    assert model.generation_config.forced_eos_token_id == eos  # where decoding reads it
    model.settings = replace(model.settings, variant="sequence")
    index = DenseIndex.load(rag_inputs["index"])
    a = ask(model, tokenizers, index, QUESTION, n_docs=2, max_length=3)
    assert a.variant == "sequence" and a.reached_max_length


def test_an_answer_that_ends_on_its_own_is_not_cut_under_a_forced_end_token():
    """The forced position counts only where the answer reached it: an end token before it is the
    model's own, and without forced_eos_token_id the last position's end token is too."""
    from types import SimpleNamespace

    import torch

    from lewisrag.experiments.ask import ended_by_the_model

    forced, free = SimpleNamespace(eos_token_id=2, forced_eos_token_id=2), SimpleNamespace(eos_token_id=2)
    assert not ended_by_the_model(torch.tensor([2, 7, 8, 2]), forced, 4)
    assert ended_by_the_model(torch.tensor([2, 7, 8, 2]), free, 4)
    assert ended_by_the_model(torch.tensor([2, 7, 2, 1]), forced, 4)  # RAG-Sequence pads a shorter candidate
    assert ended_by_the_model(torch.tensor([2, 7, 2]), forced, 4)
    assert ended_by_the_model(torch.tensor([2, 7, 8, 5, 2]), SimpleNamespace(eos_token_id=[2, 5], forced_eos_token_id=[2]), 5)


def test_at_the_generators_last_position_no_larger_max_length_is_advised(rag_inputs, talkative_rag,  # noqa: F811
                                                                          monkeypatch, capsys):
    """At --max-length equal to the generator's positions, the note advised a larger --max-length,
    which `ask` then refuses."""
    from lewisrag.experiments.ask import max_length_note

    n = json.loads((talkative_rag / "generator" / "config.json").read_text())["max_position_embeddings"]
    args = ["ask", "--model", talkative_rag, "--index", rag_inputs["index"], "--n-docs", "2", "--json"]
    code, out, err = run_main(monkeypatch, capsys, *args, "--max-length", n, QUESTION)
    assert code == 0 and json.loads(out)["reached_max_length"] is True, err
    assert (f"note: the answer reached --max-length {n} before its end token, so it may be cut: the generator cannot "
            f"decode a longer answer (its {n} positions)\n") in err, err
    assert "pass a larger --max-length" not in err
    code, _, err = run_main(monkeypatch, capsys, *args, "--max-length", n + 1, QUESTION)
    assert code == 2 and f"must be at most {n}" in err, err  # what "a larger --max-length" led to
    code, _, err = run_main(monkeypatch, capsys, *args, "--max-length", 5, QUESTION)
    assert code == 0 and "so it may be cut: pass a larger --max-length" in err, err
    from lewisrag.experiments.ask import Answer

    cut = Answer("q", "a", "token", [], reached_max_length=True)
    assert max_length_note(cut, 6, None).endswith("pass a larger --max-length")  # no positions: no limit


@pytest.mark.parametrize("question", ["\u200b", "\u00ad", "\u200b\u00ad \u200b"])
def test_a_question_of_characters_the_question_encoder_drops_is_refused(rag_inputs, trained_rag, question,  # noqa: F811
                                                                          monkeypatch, capsys):
    """BERT's tokenizer drops U+200B and the soft hyphen: such a question was answered silently from
    [CLS] [SEP] alone, as if asked."""
    from lewisrag.experiments.ask import ask
    from lewisrag.index.dense import DenseIndex
    from lewisrag.training.checkpoint import load_trained

    code, out, err = run_main(monkeypatch, capsys, "ask", "--model", trained_rag, "--index", rag_inputs["index"], question)
    assert (code, out, err) == (2, "", "error: QUESTION: holds no character the question encoder reads\n")
    model, tokenizers = load_trained(trained_rag)
    with pytest.raises(InputError, match="QUESTION: holds no character"):
        ask(model, tokenizers, DenseIndex.load(rag_inputs["index"]), question)
    ask(model, tokenizers, DenseIndex.load(rag_inputs["index"]), f"Who{question} leads Kreve?", max_length=3)  # words too


@pytest.fixture(scope="module")
def unpaired(rag_inputs, trained_rag, tmp_path_factory):  # noqa: F811
    """A transformers RAG checkpoint naming no context encoder: an export without lewisrag_export.json."""
    from lewisrag.experiments.export import export_rag

    out = tmp_path_factory.mktemp("ask_notes") / "export"
    export_rag(trained_rag, rag_inputs["index"], out)
    (out / "lewisrag_export.json").unlink()
    return out


def _other_width_index(rag_inputs, out, dim):  # noqa: F811
    from lewisrag.index.dense import DenseIndex, write_dense_index

    own = DenseIndex.load(rag_inputs["index"])
    assert own.dim != dim
    vectors = np.random.default_rng(0).standard_normal((len(own.passages), dim)).astype(np.float32)
    write_dense_index(DenseIndex.from_vectors(out, {**own.manifest, "dim": dim}, vectors, own.passages), out)
    return out


def test_a_checkpoint_naming_no_context_encoder_has_its_width_checked(rag_inputs, unpaired, tmp_path, monkeypatch,  # noqa: F811
                                                                      capsys):
    """Only a model naming its context encoder was checked against the index: a transformers RAG
    checkpoint given an index of another width was a ValueError traceback from the search (exit 3),
    where `export` and `swap` refuse it in one line. --swap accepts another encoder, not another width."""
    from lewisrag.experiments.swap import swap_matrix
    from lewisrag.index.dense import DenseIndex

    own = DenseIndex.load(rag_inputs["index"]).dim
    other = _other_width_index(rag_inputs, tmp_path / "idx8", 8)
    for extra in ([], ["--swap"]):
        code, out, err = run_main(monkeypatch, capsys, "ask", "--model", unpaired, "--index", other, *extra, QUESTION)
        assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, err
        assert err == f"error: {other}: field 'dim': question encoder gives {own}-d vectors, index holds 8-d\n", err
    with pytest.raises(InputError, match="index holds 8-d"):  # swap refused it so already
        swap_matrix([unpaired], [other], [rag_inputs["world"] / "questions_a.jsonl"])
    # an index of its own width is still searched, with the note that nothing else was checked
    code, _, err = run_main(monkeypatch, capsys, "ask", "--model", unpaired, "--index", rag_inputs["index"], "--json",
                            QUESTION)
    assert code == 0 and err.startswith(f"note: {unpaired} names no context encoder"), err
