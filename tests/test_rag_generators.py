"""Which generators RAG takes: BART only (`data.pretrained.RAG_GENERATORS`). RAG decodes through
`rag_model.bart_decoder.GroupedBartDecoder`, which computes BartDecoder step by step; a T5 or an mBART
given to `train rag` trained, then failed at the first dev decode (`ValueError: grouped decoding
supports BART decoders`, exit 3, a half-written run folder), or with --eval-every 0 finished and made
`ask` fail the same way. Now refused from config.json, one line, before anything loads or is written;
`train stitched` and the closed-book baseline, which decode with transformers' `generate`, still take them."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import one_thread, run_cli, run_main
from hf_layouts import other_seq2seq
from lewisrag.data.io import InputError
from test_rag_train import cli_flags, make_config, rag_inputs, trained_rag  # noqa: F401  (session fixtures)


@pytest.fixture(scope="module")
def others(rag_inputs, tmp_path_factory) -> dict:  # noqa: F811
    root = tmp_path_factory.mktemp("other_seq2seq")
    with one_thread():
        return {kind: other_seq2seq(kind, root / kind, rag_inputs["gen"]) for kind in ("t5", "mbart")}


@pytest.mark.parametrize("kind", ["t5", "mbart"])
def test_train_rag_refuses_a_generator_other_than_bart_before_anything_loads(rag_inputs, others, tmp_path, monkeypatch,
                                                                              kind):  # noqa: F811
    from lewisrag.training import rag_data
    from lewisrag.training.rag import train_rag

    def never(*a, **kw):
        raise AssertionError("loaded before the generator was checked")

    monkeypatch.setattr(rag_data.DenseIndex, "load", never)
    monkeypatch.setattr(rag_data, "load_question_encoder", never)
    monkeypatch.setattr(rag_data, "load_generator", never)
    with pytest.raises(InputError, match=rf"--generator: model_type is '{kind}': RAG decodes with BART's decoder only") as e:
        train_rag(make_config(rag_inputs, generator=str(others[kind])), tmp_path / "out")
    assert e.value.source == str(others[kind] / "config.json") and e.value.field == "model_type"
    assert not (tmp_path / "out").exists()


def test_train_rag_cli_refuses_a_t5_generator_in_one_line(rag_inputs, others, tmp_path, monkeypatch, capsys):  # noqa: F811
    out = tmp_path / "out"
    cfg = make_config(rag_inputs, generator=str(others["t5"]), steps=2, eval_every=2)
    code, _, err = run_main(monkeypatch, capsys, "train", "rag", *cli_flags(cfg), "--out", out)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: {others['t5'] / 'config.json'}: field 'model_type': --generator: model_type is 't5'")
    assert "train stitched" in err and "Traceback" not in err and not out.exists()


def _with_generator(model_dir, generator, to):
    """A copy of the trained RAG model folder `model_dir` whose generator/ is `generator`'s model."""
    from transformers import AutoModelForSeq2SeqLM

    model = shutil.copytree(model_dir, to)
    shutil.rmtree(model / "generator")
    AutoModelForSeq2SeqLM.from_pretrained(generator).save_pretrained(model / "generator")
    return model


def test_ask_swap_and_export_refuse_a_model_whose_generator_is_not_bart(rag_inputs, trained_rag, others, tmp_path):  # noqa: F811
    model = _with_generator(trained_rag / "final", others["t5"], tmp_path / "model")
    index, questions = str(rag_inputs["index"]), str(rag_inputs["world"] / "dev.jsonl")
    expected = f"error: {model / 'generator' / 'config.json'}: field 'model_type': the model's generator: model_type is 't5'"
    for args in (("ask", "--model", str(model), "--index", index, "Who?"),
                 ("swap", "--model", str(trained_rag), "--model", str(model), "--index", index, "--questions", questions),
                 ("export", "--model", str(model), "--index", index, "--out", str(tmp_path / "exported"))):
        r = run_cli(*args)
        assert r.returncode == 2 and r.stderr.startswith(expected) and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
    assert not (tmp_path / "exported").exists()


def test_a_transformers_rag_folder_with_a_t5_generator_is_refused_from_its_config(tmp_path):
    from lewisrag.training.checkpoint import resolve_model_dir

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "rag", "architectures": ["RagTokenForGeneration"],
                                                      "generator": {"model_type": "t5"}, "question_encoder": {}}))
    with pytest.raises(InputError, match="the model's generator: model_type is 't5'") as e:
        resolve_model_dir(tmp_path)
    assert e.value.source == str(tmp_path / "config.json") and e.value.field == "generator.model_type"


def test_the_closed_book_baseline_still_trains_a_t5(rag_inputs, others, tmp_path):  # noqa: F811
    """It decodes with transformers' `generate`, which T5 supports (as `train stitched`: test_audit_stitched_closed)."""
    from lewisrag.training.closed_book import ClosedBookConfig, answer_closed_book, train_closed_book
    from lewisrag.data.pretrained import load_generator

    cfg = ClosedBookConfig(generator=str(others["t5"]), train=str(rag_inputs["world"] / "train.jsonl"), steps=1,
                           batch_size=2, device="cpu")
    with one_thread():
        train_closed_book(cfg, tmp_path / "cb")
        generator, tokenizer = load_generator(tmp_path / "cb" / "final", any_seq2seq=True)
        assert len(answer_closed_book(generator, tokenizer, ["Who?"], max_length=4)) == 1
