"""A generator with fewer positions than `max_combined_length`: a RagModel cuts its generator inputs at the
generator's `max_position_embeddings` (`rag_model.model.fit_to_generator`) in training, in answering, in its
saved rag.json and in an export's RagConfig, and a model saved with a larger value loads and answers, capped."""

from __future__ import annotations

import doctest
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import run_cli
from test_export import BART_LARGE, _ask_ids, _hf_generate, _noisy
from test_rag_train import cli_flags, make_config, rag_inputs  # noqa: F401  (session fixture)

POSITIONS = 64  # the fixture's generator inputs are 130-250 tokens long: every one of them is cut
ASKED = 128  # --max-combined-length of the run (TRAIN_FLAGS' value), more than POSITIONS
LONG = "Who is the leader of Valdoria? " * 60  # longer than the question encoder's 128 positions too
QUESTIONS = ["Who is the leader of Valdoria?", "What is the capital of Valdoria?", LONG]


def _settings(model_dir: Path) -> dict:
    return json.loads((model_dir / "rag.json").read_text())["settings"]


def generator_with_positions(gen: str | Path, out: Path, positions: int) -> Path:
    """The BART at `gen` with only its first `positions` position embeddings, and its tokenizer, in `out`."""
    from transformers import AutoTokenizer, BartForConditionalGeneration

    full = BartForConditionalGeneration.from_pretrained(gen)
    config = full.config
    config.max_position_embeddings = positions
    short = BartForConditionalGeneration(config)
    state = full.state_dict()
    for name in state:
        if "embed_positions" in name:  # BART's learned positions keep 2 extra rows (its offset)
            state[name] = state[name][: positions + 2]
    short.load_state_dict(state)
    short.generation_config = full.generation_config
    short.save_pretrained(out)
    AutoTokenizer.from_pretrained(gen).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def short_generator(rag_inputs, tmp_path_factory) -> Path:  # noqa: F811
    """rag_inputs' BART with only its first POSITIONS position embeddings, and its tokenizer."""
    return generator_with_positions(rag_inputs["gen"], tmp_path_factory.mktemp("short_generator"), POSITIONS)


@pytest.fixture(scope="module")
def short_run(rag_inputs, short_generator, tmp_path_factory):  # noqa: F811
    """`lewisrag train rag --max-combined-length 128` on that generator (2 steps, a dev evaluation at each)."""
    out = tmp_path_factory.mktemp("short_run") / "run"
    cfg = make_config(rag_inputs, generator=str(short_generator), steps=2, eval_every=1, save_every=2)
    assert cfg.max_combined_length == ASKED
    return run_cli("train", "rag", *cli_flags(cfg), "--out", str(out), "--json"), out


def test_train_rag_cuts_at_the_generators_positions(short_run):
    r, out = short_run
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    notes = [line for line in r.stderr.splitlines() if line.startswith("note:")]
    note = (f"note: --max-combined-length {ASKED} exceeds the generator's {POSITIONS} positions "
            f"(max_position_embeddings); generator inputs are cut at {POSITIONS} tokens")
    assert notes == [note], r.stderr  # one line
    assert json.loads(r.stdout)["steps"] == 2
    assert json.loads((out / "config.json").read_text())["max_combined_length"] == ASKED  # what --resume compares
    for model in ("best", "final"):
        assert _settings(out / model)["max_combined_length"] == POSITIONS
    assert all("dev_em" in json.loads(line) for line in (out / "log.jsonl").read_text().splitlines())


def test_a_bad_input_is_one_line_without_the_note(rag_inputs, short_generator, tmp_path):  # noqa: F811
    """The note on the capped length waits for training to start: a bad input found while loading is the
    only line on stderr."""
    cfg = make_config(rag_inputs, generator=str(short_generator), steps=2)
    flags = cli_flags(cfg)
    flags[flags.index("--n-docs") + 1] = "100000"
    r = run_cli("train", "rag", *flags, "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--n-docs 100000 exceeds" in r.stderr, r.stderr
    assert "note:" not in r.stderr


def test_long_question_is_answered(rag_inputs, short_run):  # noqa: F811
    from lewisrag.experiments.ask import ask
    from lewisrag.index.dense import DenseIndex
    from lewisrag.training.checkpoint import load_trained

    model, tokenizers = load_trained(short_run[1] / "final")
    index = DenseIndex.load(rag_inputs["index"])
    r = model.retrieve([LONG, "Who?"], index, tokenizers)
    assert r.context_input_ids.shape[1] == POSITIONS
    answer = ask(model, tokenizers, index, LONG)
    assert answer.question == LONG and len(answer.passages) == model.n_docs
    r = run_cli("ask", "--model", str(short_run[1]), "--index", str(rag_inputs["index"]), "--json", LONG)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["answer"] == answer.answer


def test_a_model_saved_with_a_larger_length_answers_capped(rag_inputs, short_run, tmp_path):  # noqa: F811
    from lewisrag.index.dense import DenseIndex
    from lewisrag.training.checkpoint import load_trained

    old = tmp_path / "old"
    shutil.copytree(short_run[1] / "final", old)
    meta = json.loads((old / "rag.json").read_text())
    meta["settings"]["max_combined_length"] = 300  # as lewisrag saved it before the cap
    (old / "rag.json").write_text(json.dumps(meta))
    model, tokenizers = load_trained(old)
    assert model.settings.max_combined_length == POSITIONS
    index = DenseIndex.load(rag_inputs["index"])
    capped, _ = load_trained(short_run[1] / "final")
    assert _ask_ids(model, tokenizers, index, QUESTIONS) == _ask_ids(capped, tokenizers, index, QUESTIONS)
    model.save_pretrained(tmp_path / "resaved")
    assert _settings(tmp_path / "resaved")["max_combined_length"] == POSITIONS


def test_export_pads_within_the_generators_positions(rag_inputs, short_run, tmp_path):  # noqa: F811
    from lewisrag.index.dense import DenseIndex
    from lewisrag.training.checkpoint import load_trained

    model_dir = _noisy(short_run[1] / "final", tmp_path / "model", seed=1, **BART_LARGE)  # answers that depend on what it reads
    meta = json.loads((model_dir / "rag.json").read_text())
    meta["settings"]["max_combined_length"] = 300  # saved before the cap: the export caps it all the same
    (model_dir / "rag.json").write_text(json.dumps(meta))
    out = tmp_path / "hf"
    r = run_cli("export", "--model", str(model_dir), "--index", str(rag_inputs["index"]), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "config.json").read_text())["max_combined_length"] == POSITIONS
    # transformers' RagRetriever pads every generator input to max_combined_length: past 64 positions, BART's
    # position embedding would fail on every question
    hf, asked = _hf_generate(out, "token", QUESTIONS)
    model, tokenizers = load_trained(model_dir)
    ours = _ask_ids(model, tokenizers, DenseIndex.load(rag_inputs["index"]), asked)
    assert hf == ours
    assert len({tuple(ids) for _, ids in ours}) > 1  # answers that differ by question


def test_every_settings_assignment_is_capped(tmp_path):
    from lewisrag.rag_model import RagModel, RagSettings
    from lewisrag.rag_model import model as model_module
    from lewisrag.rag_model.testing import tiny_hf_rag

    hf = tiny_hf_rag("token", max_positions=32)
    hf.config.max_combined_length = 300
    hf.save_pretrained(tmp_path / "hf")
    model = RagModel.from_hf_pretrained(tmp_path / "hf")
    assert model.settings.max_combined_length == 32
    model.settings = replace(model.settings, max_combined_length=500)
    assert model.settings.max_combined_length == 32
    model.settings = replace(model.settings, max_combined_length=20)  # below the limit: as given
    assert model.settings.max_combined_length == 20
    model = RagModel(hf.question_encoder, hf.generator, "sequence", 3, RagSettings(max_combined_length=1000))
    assert model.settings.max_combined_length == 32 and model.variant == "sequence"
    model.to_hf(tmp_path / "again")
    assert json.loads((tmp_path / "again" / "config.json").read_text())["max_combined_length"] == 32
    ids = torch.randint(3, 100, (3, 40))  # what `retrieve` would never build: the cap is what keeps it out
    with pytest.raises(IndexError):
        model.generator(input_ids=ids, decoder_input_ids=ids[:, :2])
    assert doctest.testmod(model_module).failed == 0


def test_inputs_cut_at_the_limit_are_counted_and_said(rag_inputs, short_run):  # noqa: F811
    """The question comes last in a generator input: cut at max_combined_length, the generator read part or
    none of it, in training, evaluation and ask alike, and nothing said so."""
    import warnings

    from lewisrag.data.io import LewisragWarning
    from lewisrag.index.dense import DenseIndex
    from lewisrag.training.checkpoint import load_trained

    model, tokenizers = load_trained(short_run[1] / "final")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # inputs that fit: counted, no warning
        texts = ["Valdoria / A small country. // Who leads it?", "x / y // z"]
        enc = tokenizers.generator(texts, padding=True, truncation=True, max_length=POSITIONS, return_tensors="pt")
        model._count_cut(texts, enc["attention_mask"], tokenizers.generator)
    assert (model.inputs_made, model.inputs_cut) == (2, 0)
    index = DenseIndex.load(rag_inputs["index"])  # its passages fill the 64 positions: every input is cut
    with pytest.warns(LewisragWarning, match=rf"longer than max_combined_length \({POSITIONS} tokens\) are cut at the "
                                             "end, where the question is"):
        model.retrieve(["Who?", LONG], index, tokenizers)
    assert (model.inputs_made, model.inputs_cut) == (2 + 2 * model.n_docs, 2 * model.n_docs)
