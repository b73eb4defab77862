"""Generation settings that change no greedy or beam id (sampling-only ones without do_sample, output flags,
beam-only ones beside num_beams=1) no longer stop an export or a save: transformers validates a generation config
it did not read as it is strictly on save ("GenerationConfig is invalid"). And decoding with no length set
anywhere stops where transformers' RAG-Token and RAG-Sequence stop."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
import torch
from conftest import run_cli
from test_rag_train import make_config, rag_inputs, trained_rag  # noqa: F401  (session fixtures)

BART_LARGE = {"num_beams": 4, "early_stopping": True, "no_repeat_ngram_size": 3, "forced_bos_token_id": 0}


@pytest.fixture(scope="module")
def top_k_run(rag_inputs, tmp_path_factory):  # noqa: F811
    """A one-step `train rag` run whose generator's generation_config.json says "top_k": 10 (do_sample off)."""
    from lewisrag.training.rag import train_rag

    root = tmp_path_factory.mktemp("top_k")
    gen = shutil.copytree(rag_inputs["gen"], root / "gen")
    config = json.loads((gen / "generation_config.json").read_text())
    (gen / "generation_config.json").write_text(json.dumps({**config, "top_k": 10}))
    train_rag(make_config({**rag_inputs, "gen": gen}, steps=1, eval_every=0), root / "run")
    return root / "run"


def test_a_top_k_generator_exports_and_the_export_loads(top_k_run, rag_inputs, tmp_path):  # noqa: F811
    """It trained and answered, then `lewisrag export` crashed (exit 3) with transformers' "GenerationConfig is
    invalid ... `top_k`" traceback: the export's num_beams=1 and max_length=32 made the config one transformers
    validates strictly."""
    from transformers import RagRetriever, RagTokenForGeneration, RagTokenizer

    from lewisrag.index.dense import DenseIndex
    from lewisrag.training.checkpoint import load_trained

    assert json.loads((top_k_run / "final" / "generator" / "generation_config.json").read_text())["top_k"] == 10
    out = tmp_path / "hf"
    r = run_cli("export", "--model", str(top_k_run), "--index", str(rag_inputs["index"]), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    saved = json.loads((out / "generation_config.json").read_text())
    assert "top_k" not in saved and saved["num_beams"] == 1 and saved["max_length"] == 32
    hf = RagTokenForGeneration.from_pretrained(out, retriever=RagRetriever.from_pretrained(out)).eval()
    tokenizer = RagTokenizer.from_pretrained(out)
    enc = tokenizer.question_encoder(["Who is the leader of Valdoria?"], return_tensors="pt")
    model, tokenizers = load_trained(top_k_run)
    with torch.no_grad():
        theirs = hf.generate(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
        question = tokenizer.question_encoder.batch_decode(enc["input_ids"], skip_special_tokens=True)
        got = model.retrieve(question, DenseIndex.load(rag_inputs["index"]), tokenizers)
        ours = model.generate(got.context_input_ids, got.context_attention_mask, got.doc_scores, num_beams=1, max_length=32)
    assert theirs.tolist() == ours.tolist()  # top_k changed no id: greedy decoding never reads it


def test_a_setting_transformers_still_refuses_is_one_line_naming_the_file(top_k_run, rag_inputs, tmp_path):  # noqa: F811
    """Any other setting transformers will not save in the export's config: one line naming the model's
    generation_config.json and the field (exit 2), no traceback, no output folder."""
    model = shutil.copytree(top_k_run / "final", tmp_path / "model")
    file = model / "generator" / "generation_config.json"
    # (cache_implementation, once this test's example, is dropped from the export: lewisrag never reads it)
    file.write_text(json.dumps({**json.loads(file.read_text()), "use_cache": False, "cache_config": {"x": 1}}))
    out = tmp_path / "hf"
    r = run_cli("export", "--model", str(model), "--index", str(rag_inputs["index"]), "--out", str(out))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"{file}: field 'cache_config':" in r.stderr
    assert not out.exists()


@pytest.mark.parametrize("settings", [
    {"top_k": 10}, {"temperature": 0.7}, {"top_p": 0.9}, {"typical_p": 0.9}, {"min_p": 0.1},
    {"epsilon_cutoff": 3e-4}, {"eta_cutoff": 3e-4}, {"output_scores": True}, {"output_logits": True},
    {"output_attentions": True}, {"early_stopping": True}, {"length_penalty": 2.0},
], ids=lambda s: next(iter(s)))
def test_the_exported_generation_config_saves(settings, tmp_path):
    """Each setting that no greedy search reads is put back to transformers' default in the export's copy
    (which transformers then saves), and the model's own config keeps it."""
    from transformers import GenerationConfig

    from lewisrag.experiments.export import ask_generation_config

    read = GenerationConfig.from_dict({"bos_token_id": 0, "decoder_start_token_id": 2, "eos_token_id": 2,
                                       "pad_token_id": 1, **settings})  # as from a generation_config.json
    exported = ask_generation_config(read)
    exported.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "generation_config.json").read_text())
    assert not set(settings) & set(saved) and saved["num_beams"] == 1 and saved["max_length"] == 32
    assert all(getattr(read, name) == value for name, value in settings.items())


def test_a_save_puts_back_only_what_its_mode_never_reads_in_a_changed_config(tmp_path):
    """Output flags with return_dict_in_generate and beam-only settings with beams are read: kept. A config as it
    was read is saved as it is (transformers only warns there), a changed one without the settings it refuses."""
    from transformers import GenerationConfig

    from lewisrag.rag_model.checkpoints import savable_generation_config

    def read(**settings):  # as from a model folder's generation_config.json
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        folder.mkdir()
        (folder / "generation_config.json").write_text(json.dumps(settings))
        return GenerationConfig.from_pretrained(folder)

    def changed(**settings):
        gc = read(**settings)
        gc.max_length = 32  # as apply_export_record or a caller sets a value after reading
        return gc

    for gc in (changed(return_dict_in_generate=True, output_scores=True),
               changed(num_beams=4, early_stopping=True, length_penalty=2.0),
               changed(top_k=50, temperature=1.0, output_attentions=False),
               read(top_k=10, early_stopping=True)):
        assert savable_generation_config(gc) is gc
    gc = changed(top_k=10, early_stopping=True, output_scores=True, no_repeat_ngram_size=3)
    saved = savable_generation_config(gc)
    assert (saved.top_k, saved.early_stopping, saved.output_scores, saved.no_repeat_ngram_size) == (None, None, None, 3)
    assert (gc.top_k, gc.early_stopping, gc.output_scores) == (10, True, True)


@pytest.mark.parametrize("variant", ["token", "sequence"])
def test_a_model_read_back_from_an_export_with_beam_settings_saves(variant, trained_rag, rag_inputs, tmp_path):  # noqa: F811
    """bart-large's early_stopping=True comes back from lewisrag_export.json's beam_kwargs beside num_beams=1:
    RagModel.save_pretrained and to_hf then failed ("GenerationConfig is invalid ... `early_stopping`").
    They save a copy without it; the model in memory keeps it for `generate(num_beams=N)`."""
    from transformers import RagSequenceForGeneration, RagTokenForGeneration

    from lewisrag.experiments.export import export_rag
    from lewisrag.rag_model import RagModel
    from lewisrag.training.checkpoint import load_trained

    model, tokenizers = load_trained(trained_rag)
    model.settings = replace(model.settings, variant=variant)
    model.generation_config.update(**BART_LARGE)
    model_dir = tmp_path / "model"
    model.save_pretrained(model_dir)
    tokenizers.question.save_pretrained(model_dir / "question_tokenizer")
    tokenizers.generator.save_pretrained(model_dir / "generator_tokenizer")
    summary = export_rag(model_dir, rag_inputs["index"], tmp_path / "hf")
    assert summary.beam_kwargs == {"early_stopping": True}

    back = RagModel.from_hf_pretrained(tmp_path / "hf")
    assert back.generation_config.num_beams == 1 and back.generation_config.early_stopping is True
    back.save_pretrained(tmp_path / "native")
    back.to_hf(tmp_path / "to_hf")
    assert back.generation_config.early_stopping is True  # the copy was saved, not the model's own
    assert back.generator.generation_config is back.generation_config
    saved = json.loads((tmp_path / "native" / "generator" / "generation_config.json").read_text())
    assert "early_stopping" not in saved and saved["num_beams"] == 1 and saved["no_repeat_ngram_size"] == 3
    again = RagModel.from_pretrained(tmp_path / "native")
    assert again.variant == variant and again.generation_config.forced_bos_token_id == 0
    cls = RagTokenForGeneration if variant == "token" else RagSequenceForGeneration
    assert cls.from_pretrained(tmp_path / "to_hf") is not None


# --- no max_length anywhere: transformers' own default, per variant ---------------------------------------------


@pytest.mark.parametrize("variant,positions,length", [("token", 128, 20), ("sequence", 128, 21), ("sequence", 16, 16)])
def test_decoding_with_no_length_set_stops_where_transformers_does(variant, positions, length, tmp_path):
    """A generation config without max_length (nor max_new_tokens), none passed: transformers' RAG-Token decodes
    20 ids, RAG-Sequence's generator "the model-agnostic default max_length (=21)", 20 after its start token, cut
    at the generator's positions. lewisrag decoded 20 for both (and refused RAG-Sequence at 16 positions)."""
    from transformers import RagSequenceForGeneration, RagTokenForGeneration

    from lewisrag.rag_model import RagModel
    from lewisrag.rag_model.testing import tiny_batch, tiny_hf_rag

    tiny_hf_rag(variant, seed=1, n_docs=3, eos_bias=-5.0, max_positions=positions).save_pretrained(tmp_path)
    ours = RagModel.from_hf_pretrained(tmp_path)
    cls = RagTokenForGeneration if variant == "token" else RagSequenceForGeneration
    hf = cls.from_pretrained(tmp_path).eval()
    gc = hf.generation_config if variant == "token" else hf.generator.generation_config
    assert gc.max_length is None and gc.max_new_tokens is None and ours.generation_config.max_length is None
    ids, mask, scores, _ = tiny_batch(2, 3, 9, 4, 100, seed=2)
    ids[0, -2:], mask[:] = 5, 1  # no padding: transformers' RAG-Sequence searches without the mask
    kw = dict(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, n_docs=3)
    with torch.no_grad():
        expected = hf.generate(**kw)
    got = ours.generate(**kw)
    assert expected.shape[1] == length  # the eos bias keeps every answer going to the limit
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert ours.generation_config.max_length is None  # the model's config is left as it was


@pytest.mark.parametrize("variant", ["token", "sequence"])
def test_to_hf_warns_where_a_reloaded_rag_sequence_would_decode_otherwise(tmp_path, variant):
    """A RAG-Sequence folder keeps no generation settings (transformers decodes it with its generator's):
    num_beams 3 and max_length 6 came back as the defaults, other answers, without a word."""
    import warnings as w

    from lewisrag.data.io import LewisragWarning
    from lewisrag.rag_model import RagModel
    from lewisrag.rag_model.testing import tiny_hf_rag

    tiny_hf_rag(variant, seed=0, n_docs=2).save_pretrained(tmp_path / "hf")
    model = RagModel.from_hf_pretrained(tmp_path / "hf")
    with w.catch_warnings(record=True) as seen:
        w.simplefilter("always")
        model.to_hf(tmp_path / "same")  # nothing changed: nothing lost
    assert not [x for x in seen if issubclass(x.category, LewisragWarning)]
    model.generation_config.num_beams, model.generation_config.max_length = 3, 6
    with w.catch_warnings(record=True) as seen:
        w.simplefilter("always")
        model.to_hf(tmp_path / "changed")
    said = [str(x.message) for x in seen if issubclass(x.category, LewisragWarning)]
    if variant == "token":  # RAG-Token's generation_config.json keeps them
        assert not said and RagModel.from_hf_pretrained(tmp_path / "changed").generation_config.num_beams == 3
    else:
        assert len(said) == 1 and "max_length, num_beams" in said[0] and "lewisrag export" in said[0]
