"""Edges of decoding an export with transformers as `lewisrag ask` decodes: each test is a case where transformers
answered otherwise than `ask`, crashed, or where the export was refused, though the docs said it would match."""

from __future__ import annotations

import json
import shutil

from test_export import QUESTIONS, _ask_ids, _check_same_answers, _hf_generate, _noisy
from test_rag_train import rag_inputs, trained_rag  # noqa: F401  (session fixtures)

K = 3  # passages per question, other than the fixture's n_docs (2)


def test_rag_sequence_answers_ask_n_docs_k_with_config_n_docs_k(rag_inputs, trained_rag, tmp_path, monkeypatch):  # noqa: F811
    """transformers' RagSequenceForGeneration.generate(n_docs=K) searches K passages but ranks what it found by a
    forward pass that retrieves config.n_docs: its answers differed from `ask --n-docs K`'s on every question of a
    tiny run. The note and docs/real-data.md say to set model.config.n_docs = K; done so, the answers are ask's."""
    from transformers import RagSequenceForGeneration

    from lewisrag.commands.export import decoding_note
    from lewisrag.experiments.export import export_rag

    note = decoding_note("sequence", {"num_beams": 1, "max_length": 32}, {})
    assert "set model.config.n_docs = K" in note and "generate(n_docs=K)" in note, note
    assert "model.config.n_docs = K" not in decoding_note("token", {"num_beams": 1, "max_length": 32}, {})
    model = _noisy(trained_rag, tmp_path / "model", seed=3, variant="sequence")
    out = tmp_path / "hf"
    s = export_rag(model, rag_inputs["index"], out)
    assert s.n_docs != K
    load = RagSequenceForGeneration.from_pretrained

    def with_k(*args, **kwargs):  # the docs' advice, on the model test_export's helpers load
        hf = load(*args, **kwargs)
        hf.config.n_docs = K
        return hf

    monkeypatch.setattr(RagSequenceForGeneration, "from_pretrained", with_k)
    lost = {k: v for k, v in s.generate_kwargs.items() if k not in ("num_beams", "max_length")}
    _check_same_answers(rag_inputs, model, out, k=K, **lost)


def test_a_generator_without_a_start_token_exports_its_start_token(rag_inputs, trained_rag, tmp_path):  # noqa: F811
    """A generation config naming no decoder_start_token_id: lewisrag decodes from bos_token_id, transformers'
    RAG-Token generate() failed (torch.full's fill_value None) and RAG-Sequence's started from the BART config's."""
    from lewisrag.experiments.export import export_rag
    from lewisrag.index.dense import DenseIndex
    from lewisrag.training.checkpoint import load_trained

    index = DenseIndex.load(rag_inputs["index"])
    for variant in ("token", "sequence"):
        model_dir = _noisy(trained_rag, tmp_path / variant / "model", seed=4, variant=variant, decoder_start_token_id=None)
        model, tokenizers = load_trained(model_dir)
        gc = model.generation_config
        assert gc.decoder_start_token_id is None and gc.bos_token_id is not None
        assert gc.bos_token_id != model.generator.config.decoder_start_token_id  # which start it is shows
        out = tmp_path / variant / "hf"
        s = export_rag(model_dir, rag_inputs["index"], out)
        if variant == "token":
            saved = json.loads((out / "generation_config.json").read_text())
            assert saved["decoder_start_token_id"] == gc.bos_token_id and s.generate_kwargs == {"num_beams": 1, "max_length": 32}
        else:  # the reloaded generator's config starts from the BART config's token: generate_kwargs names lewisrag's
            assert s.generate_kwargs["decoder_start_token_id"] == gc.bos_token_id, s.generate_kwargs
        answers, asked = _hf_generate(out, variant, QUESTIONS, **s.generate_kwargs)
        assert answers == _ask_ids(model, tokenizers, index, asked), variant


def test_an_index_manifest_naming_no_metric_exports(rag_inputs, trained_rag, tmp_path):  # noqa: F811
    """A manifest without "metric" is inner product to every command (store.check_manifest); export alone refused it."""
    from lewisrag.experiments.export import export_rag

    index = tmp_path / "index"
    shutil.copytree(rag_inputs["index"], index)
    manifest = json.loads((index / "manifest.json").read_text())
    assert manifest.pop("metric") == "inner_product"
    (index / "manifest.json").write_text(json.dumps(manifest))
    s = export_rag(trained_rag, index, tmp_path / "hf")
    assert s.n_passages == manifest["n_passages"] and (tmp_path / "hf" / "passages.faiss").is_file()


def test_a_static_cache_is_not_exported(rag_inputs, trained_rag, tmp_path):  # noqa: F811
    """lewisrag never reads cache_implementation; kept in a RAG-Token export, transformers' beam search with a
    "static" cache answered otherwise than `ask --num-beams 3` on 12 of 12 questions."""
    from lewisrag.experiments.export import export_rag
    from lewisrag.index.dense import DenseIndex
    from lewisrag.training.checkpoint import load_trained

    model_dir = _noisy(trained_rag, tmp_path / "model", seed=5, cache_implementation="static")
    model, tokenizers = load_trained(model_dir)
    assert model.generation_config.cache_implementation == "static"
    out = tmp_path / "hf"
    s = export_rag(model_dir, rag_inputs["index"], out)
    assert "cache_implementation" not in json.loads((out / "generation_config.json").read_text())
    index = DenseIndex.load(rag_inputs["index"])
    beams, asked = _hf_generate(out, "token", QUESTIONS, **{**s.beam_kwargs, "num_beams": 3, "max_length": 8})
    assert beams == _ask_ids(model, tokenizers, index, asked, num_beams=3, max_length=8)
