"""calibrate's table and records, and ask's refusals and warnings, saying what the user needs: both three-way
labels of a "label" disagreement, the model behind a judge, a run's resume checkpoint given as a model, and a
question too long for the model's generator inputs told from passages that are."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from conftest import run_main, write_jsonl
from lewisrag.cli import app
from lewisrag.commands import _ui
from lewisrag.data.io import LewisragWarning
from lewisrag.data.records import Passage
from lewisrag.eval.evaluator import judge_info
from lewisrag.eval.judges import Label, Verdict
from lewisrag.eval.stats import calibrate

PREMISE = "Talfo has 5.8 million people."
ROWS = [("a", "contradiction", "neutral"), ("b", "entailment", "entailment")]


def _labels(tmp_path, which: int, name: str):
    return write_jsonl(tmp_path / name, [{"id": i, "premise": PREMISE, "hypothesis": f"Statement {i}.",
                                          "supported": r[which] == "entailment", "label": r[which]} for i, *r in ROWS])


def test_a_label_row_shows_both_three_way_labels(tmp_path, monkeypatch):
    """A neutral-against-contradiction disagreement printed `False | False`: what differed was only in --json."""
    _labels(tmp_path, 0, "human.jsonl"), _labels(tmp_path, 1, "judge.jsonl")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(_ui.out, "width", 200)  # each row on one line (the console reads COLUMNS once, at import)
    res = CliRunner().invoke(app, ["calibrate", "--judge", "labels:judge.jsonl", "--labels", "human.jsonl"])
    assert res.exit_code == 0, res.output
    row = next(line for line in res.stdout.splitlines() if " a " in line and "label" in line)
    assert "False (contradiction)" in row and "False (neutral)" in row, res.stdout


class ModelJudge:
    """A judge with a model, as an LLM judge has: its verdicts from a fixed list."""

    name, fingerprint, model, params = "llm", "e" * 64, "judge-model-7b", {"temperature": 0.0}

    def __init__(self, answers):
        self.answers = list(answers)

    def judge(self, pairs):
        return [Verdict(self.answers.pop(0), "scripted") for _ in pairs]


def test_calibration_records_the_judge_as_eval_answers_does(tmp_path, monkeypatch):
    """calibration.json and --json said {name, fingerprint}: which LLM, NLI checkpoint or labels file was
    measured was nowhere, nor in the table's title."""
    labels = [Label("a", PREMISE, "x", True), Label("b", PREMISE, "y", False)]
    judge = ModelJudge([True, True])
    r = calibrate(judge, labels)
    assert r["judge"] == judge_info(judge) and r["judge"]["model"] == "judge-model-7b" and r["judge"]["params"]
    # the labels judge: its file, in --out's calibration.json and in the title
    _labels(tmp_path, 0, "human.jsonl"), _labels(tmp_path, 1, "judge.jsonl")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(_ui.out, "width", 200)  # the title on one line (the console reads COLUMNS once, at import)
    res = CliRunner().invoke(app, ["calibrate", "--judge", "labels:judge.jsonl", "--labels", "human.jsonl", "--out", "out"])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "out" / "calibration.json").read_text())["judge"]["source"] == "judge.jsonl"
    assert "judge labels judge.jsonl " in res.stdout
    # an LLM judge: its model in the title
    monkeypatch.setattr("lewisrag.eval.judges.from_spec", lambda *a, **k: ModelJudge([True, False, True]))
    res = CliRunner().invoke(app, ["calibrate", "--judge", "lexical", "--labels", "human.jsonl"])
    assert res.exit_code == 0, res.output
    assert "judge llm judge-model-7b eeeeeeeeeeee on human.jsonl" in res.stdout


def _run(tmp_path, models: tuple[str, ...]):
    """A `train rag` run folder: its resume checkpoint, and the models named in `models`."""
    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)
    (run / "checkpoint" / "model.safetensors").write_bytes(b"")
    (run / "checkpoint" / "state.json").write_text(json.dumps({"step": 7}))
    for name in models:
        (run / name).mkdir()
        (run / name / "rag.json").write_text("{}")
    return run


@pytest.mark.parametrize(("models", "said", "resume"), [
    (("best", "final"), "not a model: give a model the run saved, {run}/best or {run}/final", False),
    (("best",), "not a model: give a model the run saved, {run}/best, or finish the run with", True),
    ((), "not a model, and its run has saved no model yet (no best/ nor final/; step 7): finish the run with", True),
])
def test_a_resume_checkpoint_given_as_a_model_is_named_as_one(tmp_path, monkeypatch, capsys, models, said, resume):
    """RUN/checkpoint (model.safetensors + state.json) was "config.json: file not found ... the model folder is
    incomplete", as if an export had lost a file."""
    run = _run(tmp_path, models)
    code, out, err = run_main(monkeypatch, capsys, "ask", "--model", run / "checkpoint", "--index", tmp_path / "idx", "Who?")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"{run / 'checkpoint'}: a training checkpoint (resume state), which only `train rag --resume` reads, not a model" in err
    assert said.format(run=run) in err and "config.json" not in err
    assert (f"`lewisrag train rag --out {run} --resume`" in err) == resume


def _model(limit: int):
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models, pre_tokenizers

    from lewisrag.rag_model import RagModel, RagSettings, Tokenizers
    from lewisrag.rag_model.testing import tiny_hf_rag

    hf = tiny_hf_rag("token", seed=0, n_docs=2)
    model = RagModel(hf.question_encoder, hf.generator, "token", 2, RagSettings(max_combined_length=limit))
    vocab = {w: i for i, w in enumerate(["<s>", "<pad>", "</s>", "<unk>", "paris", "/", "//", "t"])}
    word = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    word.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=word, bos_token="<s>", pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    return model, Tokenizers(tok, tok)


class WordIndex:
    """search / vectors / passages over a few vectors, as DenseIndex offers."""

    def __init__(self, passages: list[Passage]):
        self.passages = passages
        self._vectors = np.random.default_rng(0).normal(size=(len(passages), 32)).astype(np.float32)

    def search(self, q: np.ndarray, k: int):
        rows = np.argsort(-(q @ self._vectors.T), axis=1)[:, :k]  # (B, K)
        return None, rows.astype(np.int64)

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        return self._vectors[rows]


def _said(model, tokenizers, index, question: str) -> list[str]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        model.retrieve([question], index, tokenizers)
    return [str(w.message) for w in seen if issubclass(w.category, LewisragWarning)]


def test_a_question_too_long_is_told_from_passages_too_long():
    """A long question in `ask` was told to shorten the passages or raise --max-combined-length, a flag ask
    and swap lack: the question alone over the limit is its own case, and the limit is `train rag`'s."""
    model, tokenizers = _model(12)
    short = WordIndex([Passage(str(i), "t", "paris") for i in range(3)])  # "t / paris // Q": 4 tokens and the question
    said = _said(model, tokenizers, short, "paris " * 20)
    assert len(said) == 1 and "a question is longer than max_combined_length (12 tokens) by itself" in said[0], said
    assert "shorten the question" in said[0] and "`lewisrag train rag --max-combined-length`" in said[0]
    assert "shorten the passages" not in said[0]
    long = WordIndex([Passage(str(i), "t", "paris " * 20) for i in range(3)])
    said = _said(model, tokenizers, long, "paris")
    assert len(said) == 1 and "longer than max_combined_length (12 tokens) are cut at the end" in said[0], said
    assert "shorten the passages (lewisrag chunk --words N)" in said[0]
    assert "raise the limit (`lewisrag train rag --max-combined-length`" in said[0] and "shorten the question" not in said[0]
    assert model.inputs_cut == 4  # both of each question's inputs, counted as before
    assert _said(model, tokenizers, short, "paris") == []


def test_the_help_says_what_the_readers_take():
    """calibrate's --labels said JSONL of four fields; ask's --model "its best/ model" only."""
    commands = typer.main.get_command(app).commands

    def help_of(command: str, name: str) -> str:
        return next(p.help for p in commands[command].params if p.name == name)

    labels = help_of("calibrate", "labels")
    assert all(s in labels for s in (".json/", ".parquet", "hf:NAME[:CONFIG]:SPLIT", '"label"?', "contradiction")), labels
    model = help_of("ask", "model")
    assert "else its final/" in model and "transformers RAG folder" in model, model
