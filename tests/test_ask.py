"""`lewisrag ask`: the answer, p(z|x) and p(z|x,y) per passage, and the passage each RAG-Token token leaned on."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import run_cli
from lewisrag.data.io import InputError
from test_rag_train import make_config, rag_inputs, trained_rag  # noqa: F401  (session fixtures)
from test_swap import talkative_rag  # noqa: F401  (a model whose answers are not empty)


def test_token_answer_with_evidence(rag_inputs, trained_rag, talkative_rag):  # noqa: F811
    from lewisrag.experiments.ask import ask
    from lewisrag.training.checkpoint import load_trained, resolve_model_dir
    from lewisrag.index.dense import DenseIndex

    assert resolve_model_dir(trained_rag) == trained_rag / "best"  # a run directory means its best model
    model, tokenizers = load_trained(talkative_rag)  # the 3-step model answers "": no token to lean on anything
    a = ask(model, tokenizers, DenseIndex.load(rag_inputs["index"]), "Who is the leader of Valdoria?", n_docs=3)
    assert a.variant == "token" and a.answer.strip() and len(a.passages) == 3
    assert [p.rank for p in a.passages] == [1, 2, 3]
    assert math.isclose(sum(p.prior for p in a.passages), 1, abs_tol=1e-5)
    assert math.isclose(sum(p.posterior for p in a.passages), 1, abs_tol=1e-5)
    assert a.passages[0].prior >= a.passages[-1].prior  # retrieval order is prior order
    ids = {p.id for p in a.passages}
    for t in a.tokens:
        assert 1 <= t.doc_rank <= 3 and t.doc_id in ids and 1 / 3 - 1e-6 <= t.probability <= 1 + 1e-6
    assert "".join(t.token for t in a.tokens).strip() == a.answer


def test_sequence_answer_and_bad_k(rag_inputs, tmp_path):  # noqa: F811
    from lewisrag.experiments.ask import ask
    from lewisrag.training.checkpoint import load_trained
    from lewisrag.index.dense import DenseIndex
    from lewisrag.training.rag import train_rag

    train_rag(make_config(rag_inputs, variant="sequence", steps=1, eval_every=0), tmp_path / "run")
    model, tokenizers = load_trained(tmp_path / "run")  # no best/ without evaluation: final/
    index = DenseIndex.load(rag_inputs["index"])
    a = ask(model, tokenizers, index, "What is the capital of Valdoria?")
    assert a.variant == "sequence" and a.tokens == [] and len(a.passages) == 2
    assert math.isclose(sum(p.posterior for p in a.passages), 1, abs_tol=1e-5)
    with pytest.raises(InputError, match="--n-docs"):
        ask(model, tokenizers, index, "Why?", n_docs=10_000)
    with pytest.raises(InputError, match="--num-beams: must be between 1 and the generator's vocabulary"):
        ask(model, tokenizers, index, "Why?", num_beams=100_000)


def test_cli_json_and_tables(rag_inputs, talkative_rag):  # noqa: F811
    from lewisrag.cli import app
    from lewisrag.commands import _ui

    runner = CliRunner()
    args = ["ask", "--model", str(talkative_rag), "--index", str(rag_inputs["index"]), "Who is the leader of Valdoria?"]
    r = runner.invoke(app, [*args, "--json", "--n-docs", "2"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert {"question", "answer", "variant", "passages", "tokens"} <= set(out) and out["answer"].strip()
    assert len(out["passages"]) == 2 and {"prior", "posterior", "id", "title", "text"} <= set(out["passages"][0])
    assert out["tokens"] and {t["doc_id"] for t in out["tokens"]} <= {p["id"] for p in out["passages"]}
    r = runner.invoke(app, args)
    # the answer as written, its control characters escaped (this untrained model's answer holds some)
    assert r.exit_code == 0 and "p(z|x)" in r.stdout and f"A: {_ui.printable(out['answer'])}" in r.stdout


def test_cli_bad_model_is_exit_2(rag_inputs, tmp_path):  # noqa: F811
    r = run_cli("ask", "--model", str(tmp_path), "--index", str(rag_inputs["index"]), "Who?")
    assert r.returncode == 2 and "rag.json" in r.stderr and "Traceback" not in r.stderr


def test_a_reproduce_run_folder_names_its_models(tmp_path):
    from lewisrag.data.io import InputError
    from lewisrag.training.checkpoint import resolve_model_dir

    for name in ("rag_token", "rag_sequence"):
        (tmp_path / name / "best").mkdir(parents=True)
        (tmp_path / name / "best" / "rag.json").write_text("{}")
    with pytest.raises(InputError, match="a reproduce run holds its models in") as e:
        resolve_model_dir(tmp_path)
    assert f"{tmp_path}/rag_sequence" in str(e.value) and f"{tmp_path}/rag_token" in str(e.value)


def test_a_run_without_final_is_used_with_a_warning(trained_rag, rag_inputs, tmp_path):  # noqa: F811
    """A killed (or still running) `train rag` holds best/ but no final/: ask, eval and export take
    best/ and say so in one line, instead of passing it off as the finished run's model."""
    import shutil

    run = tmp_path / "run"
    for part in ("best", "checkpoint"):
        shutil.copytree(trained_rag / part, run / part)
    r = run_cli("ask", "--model", str(run), "--index", str(rag_inputs["index"]), "--json", "Who is the leader of Valdoria?")
    assert r.returncode == 0, r.stderr
    # a 3-step model's answers run long, and the fixture's passages fill max_combined_length
    said = [line for line in r.stderr.splitlines() if "before its end token" not in line and "where the question is" not in line]
    assert said == [f"warning: {run}: this training run has no final/ (it is still training, or it "
                                     "stopped before the end; its last checkpoint is at step 3); using best/, saved at step 3"]
    shutil.copytree(trained_rag / "final", run / "final")
    r = run_cli("ask", "--model", str(run), "--index", str(rag_inputs["index"]), "--json", "Who is the leader of Valdoria?")
    assert r.returncode == 0 and [line for line in r.stderr.splitlines()
                                  if "before its end token" not in line and "where the question is" not in line] == []


def test_a_run_whose_best_model_was_deleted_is_refused(trained_rag, rag_inputs, tmp_path):  # noqa: F811
    """final/ answered in best/'s place without a word; a run that never saved a best (no dev set) uses final/."""
    import shutil

    run = Path(shutil.copytree(trained_rag, tmp_path / "run"))
    shutil.rmtree(run / "best")
    r = run_cli("ask", "--model", str(run), "--index", str(rag_inputs["index"]), "--json", "Who is the leader of Valdoria?")
    assert r.returncode == 2 and r.stderr.strip() == (
        f"error: {run / 'best'}: missing, though this run saved its best model there (its marker lists best/): the run "
        "folder is damaged; give its final/ to use the last model"), r.stderr
    r = run_cli("ask", "--model", str(run / "final"), "--index", str(rag_inputs["index"]), "--json", "Who is the leader of Valdoria?")
    assert r.returncode == 0, r.stderr


def test_a_character_split_over_two_tokens_is_one_piece(rag_inputs, talkative_rag, monkeypatch):  # noqa: F811
    """Each token was decoded alone, so a character a byte-level tokenizer splits over two tokens
    ("ö" in "Gödel") showed as two U+FFFD rows; the pieces now join to the answer."""
    import torch

    from lewisrag.experiments.ask import ask
    from lewisrag.index.dense import DenseIndex
    from lewisrag.rag_model.decoding import Decoded
    from lewisrag.training.checkpoint import load_trained

    model, tokenizers = load_trained(talkative_rag)
    tok, gc = tokenizers.generator, model.generation_config
    ids = tok(" Gödel", add_special_tokens=False)["input_ids"]
    assert any(tok.decode([i]).endswith("\ufffd") for i in ids), "no character split over two tokens"
    seq = torch.tensor([[gc.decoder_start_token_id, *ids, gc.eos_token_id]])
    real = model.generate

    def crafted(*args, **kwargs):  # the real decode's evidence shape, the answer replaced
        out = real(*args, **kwargs)
        k = out.doc_posterior.shape[-1]
        return Decoded(seq, torch.full((1, seq.shape[1] - 1, k), 1.0 / k), out.scores)

    monkeypatch.setattr(model, "generate", crafted)
    a = ask(model, tokenizers, DenseIndex.load(rag_inputs["index"]), "Who is the leader of Valdoria?", n_docs=3)
    assert a.answer == "Gödel" and "".join(t.token for t in a.tokens).strip() == "Gödel"
    assert not any("\ufffd" in t.token for t in a.tokens) and not a.reached_max_length


def test_an_answer_cut_at_max_length_is_noted(rag_inputs, talkative_rag):  # noqa: F811
    """`ask` printed an answer that filled --max-length without its end token, cut, with no word."""
    from lewisrag.experiments.ask import ask
    from lewisrag.index.dense import DenseIndex
    from lewisrag.training.checkpoint import load_trained

    model, tokenizers = load_trained(talkative_rag)
    index = DenseIndex.load(rag_inputs["index"])
    assert ask(model, tokenizers, index, "Who is the leader of Valdoria?", n_docs=2, max_length=3).reached_max_length
    args = ["ask", "--model", str(talkative_rag), "--index", str(rag_inputs["index"]), "--n-docs", "2"]
    r = run_cli(*args, "--max-length", "3", "--json", "Who is the leader of Valdoria?")
    assert r.returncode == 0 and json.loads(r.stdout)["reached_max_length"] is True, r.stderr
    assert "note: the answer reached --max-length 3 before its end token" in r.stderr
