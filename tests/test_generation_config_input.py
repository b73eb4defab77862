"""A model folder's generation_config.json that RAG decoding cannot follow (an option it does not
support, a value of the wrong type, a token id outside the vocabulary, no start token) is bad input:
refused where the generator or RAG model loads, as one line naming the file and the field, exit code 2,
before anything is written. It used to be a traceback at the first decoding: in `train rag` at its
first dev evaluation, after the run folder was written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import run_main
from lewisrag.data.io import InputError
from test_rag_train import cli_flags, make_config, rag_inputs, trained_rag  # noqa: F401  (session fixtures)

# (name, how generation_config.json changes, the field the error names)
BAD = [
    ("do_sample", lambda c: {**c, "do_sample": True}, "do_sample"),
    ("repetition_penalty", lambda c: {**c, "repetition_penalty": 1.2}, "repetition_penalty"),
    ("empty", lambda c: {}, "decoder_start_token_id"),
    ("start_id_a_string", lambda c: {**c, "decoder_start_token_id": "x"}, "decoder_start_token_id"),
    ("start_id_beyond_vocab", lambda c: {**c, "decoder_start_token_id": 99999}, "decoder_start_token_id"),
    ("eos_list_beyond_vocab", lambda c: {**c, "eos_token_id": [2, 99999]}, "eos_token_id"),
    ("num_beams_a_string", lambda c: {**c, "num_beams": "4"}, "num_beams"),
    # transformers' own validation: it was raised naming the folder, not the file
    ("max_new_tokens_zero", lambda c: {**c, "max_new_tokens": 0}, "max_new_tokens"),
]


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def edit_generation_config(folder: Path, change) -> Path:
    f = folder / "generation_config.json"
    f.write_text(json.dumps(change(json.loads(f.read_text()))), encoding="utf-8")
    return f


@pytest.fixture
def bad_model(trained_rag, tmp_path):  # noqa: F811
    """A copy of trained_rag's final model whose generator/generation_config.json the test edits."""
    return Path(shutil.copytree(trained_rag / "final", tmp_path / "model"))


# --- train rag: refused with its other inputs, no run folder left behind ---------------------------------------


@pytest.mark.parametrize("name,change,field", BAD, ids=[b[0] for b in BAD])
def test_train_rag_refuses_the_generator_before_writing(name, change, field, rag_inputs, tmp_path, monkeypatch,  # noqa: F811
                                                         capsys):
    gen = Path(shutil.copytree(rag_inputs["gen"], tmp_path / "gen"))
    f = edit_generation_config(gen, change)
    cfg = make_config(rag_inputs, generator=str(gen), steps=2, eval_every=1)
    code, _, err = run_main(monkeypatch, capsys, "train", "rag", *cli_flags(cfg), "--out", tmp_path / "run")
    assert_one_line_error(code, err, str(f), f"field '{field}'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gen"]  # no run folder, nothing staged beside it


def test_train_rag_accepts_what_rag_decoding_follows(rag_inputs, tmp_path):  # noqa: F811
    """eos as a list, early_stopping "never", and options at their "off" value load."""
    from lewisrag.training.rag_data import load_components

    gen = Path(shutil.copytree(rag_inputs["gen"], tmp_path / "gen"))
    edit_generation_config(gen, lambda c: {**c, "eos_token_id": [2, 3], "early_stopping": "never", "do_sample": False,
                                           "repetition_penalty": 1.0, "num_beams": 2})
    parts = load_components(make_config(rag_inputs, generator=str(gen)))
    assert parts.model.generation_config.eos_token_id == [2, 3]


# --- ask, swap, compare: a trained model whose generation config went bad -----------------------------------


@pytest.mark.parametrize("name,change,field", BAD[:3] + BAD[4:5], ids=[b[0] for b in BAD[:3] + BAD[4:5]])
def test_ask_refuses_the_model(name, change, field, bad_model, rag_inputs, monkeypatch, capsys):  # noqa: F811
    f = edit_generation_config(bad_model / "generator", change)
    code, out, err = run_main(monkeypatch, capsys, "ask", "--model", bad_model, "--index", rag_inputs["index"],
                              "Who is the leader of Valdoria?")
    assert_one_line_error(code, err, str(f), f"field '{field}'")
    assert out == ""


def test_swap_refuses_the_model_before_writing(bad_model, rag_inputs, tmp_path, monkeypatch, capsys):  # noqa: F811
    f = edit_generation_config(bad_model / "generator", lambda c: {**c, "do_sample": True})
    out = tmp_path / "swap"
    code, _, err = run_main(monkeypatch, capsys, "swap", "--model", bad_model, "--index", rag_inputs["index"],
                            "--questions", rag_inputs["world"] / "dev.jsonl", "--out", out)
    assert_one_line_error(code, err, str(f), "field 'do_sample'")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_compare_refuses_the_model_before_writing(bad_model, rag_inputs, tmp_path, monkeypatch, capsys):  # noqa: F811
    """A reproduce run's folder with only what `compare --systems rag_token` reads."""
    run = tmp_path / "run"
    shutil.copytree(rag_inputs["world"], run / "world")
    shutil.copytree(rag_inputs["index"], run / "index_a")
    shutil.move(bad_model, run / "rag_token")
    f = edit_generation_config(run / "rag_token" / "generator", lambda c: {**c, "repetition_penalty": 1.2})
    out = tmp_path / "cmp"
    code, _, err = run_main(monkeypatch, capsys, "compare", "--run", run, "--systems", "rag_token",
                            "--position-questions", 0, "--out", out)
    assert_one_line_error(code, err, str(f), "field 'repetition_penalty'")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["run"]


# --- the loaders themselves ------------------------------------------------------------------------------------


def test_a_transformers_rag_folder_is_checked_too(tmp_path):
    from lewisrag.rag_model import RagModel
    from lewisrag.rag_model.testing import tiny_hf_rag

    tiny_hf_rag("token", seed=0, n_docs=2).save_pretrained(tmp_path / "hf")
    assert RagModel.from_hf_pretrained(tmp_path / "hf").n_docs == 2
    f = edit_generation_config(tmp_path / "hf", lambda c: {**c, "do_sample": True})
    with pytest.raises(InputError, match="not supported by RAG decoding") as e:
        RagModel.from_hf_pretrained(tmp_path / "hf")
    assert (e.value.source, e.value.field) == (str(f), "do_sample")


def test_the_shipped_generator_passes_and_the_runtime_rule_is_the_same():
    """The folder check and `generate`'s own refusal read one table: what one refuses, the other does."""
    from transformers import GenerationConfig

    from lewisrag.rag_model.decoding import check_generation_config, resolve_settings

    shipped = Path(__file__).resolve().parent.parent / "lewisrag" / "pretrained" / "generator-small"
    gc = GenerationConfig.from_pretrained(shipped)
    check_generation_config(gc, 4000, shipped / "generation_config.json")
    for option, value in (("do_sample", True), ("num_beam_groups", 2), ("suppress_tokens", [5])):
        bad = GenerationConfig.from_dict({**gc.to_dict(), option: value})
        with pytest.raises(ValueError, match=option):
            resolve_settings(bad)
        with pytest.raises(InputError) as e:
            check_generation_config(bad, 4000, "generation_config.json")
        assert e.value.field == option
