"""Edges of transformers' RAG layout, in (a checkpoint from elsewhere, a folder that is not one) and out (`lewisrag
export`): each test is a case that was refused, crashed in transformers, or named the wrong thing."""

from __future__ import annotations

import copy

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import run_main
from lewisrag.data.io import InputError
from lewisrag.rag_model import RagModel
from lewisrag.rag_model.testing import tiny_batch, tiny_hf_rag
from test_rag_train import rag_inputs, trained_rag  # noqa: F401  (session fixtures)

K = 3
LONG_QUESTION = "Who is the leader of Valdoria? " * 40  # past the fixture's question encoder's 128 positions


@pytest.fixture(scope="module")
def exported(trained_rag, rag_inputs, tmp_path_factory):  # noqa: F811
    """The trained RAG-Token model (its DPR trained here: a question tokenizer that knows no length limit)
    exported with its own index; read, never changed, by the tests."""
    from lewisrag.experiments.export import export_rag

    out = tmp_path_factory.mktemp("export_edges") / "export"
    export_rag(trained_rag, rag_inputs["index"], out)
    return out


def _tiny_rag_folder(path: Path, **extra_weights) -> tuple:
    """A tiny transformers RAG-Token saved at `path`, with `extra_weights` (name relative to its question
    encoder's BERT, a tensor or a function of the hidden size) added to model.safetensors."""
    hf = tiny_hf_rag("token", n_docs=K)
    hf.save_pretrained(path)
    weights = load_file(path / "model.safetensors")
    bert = next(k for k in weights if "bert_model.embeddings.word_embeddings" in k).split("bert_model.")[0] + "bert_model."
    hidden = hf.config.question_encoder.hidden_size
    for name, make in extra_weights.items():
        weights[bert + name] = make(hidden)
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    return hf, bert


def test_a_dpr_question_encoder_with_berts_pooler_loads(tmp_path):
    """A RAG checkpoint built from facebook/dpr-question_encoder-single-nq-base carries BERT's pooler, which DPR never
    runs and transformers loads (with a warning): it was refused as a wrong model type or a damaged checkpoint."""
    hf, bert = _tiny_rag_folder(tmp_path / "rag", **{"pooler.dense.weight": lambda h: torch.zeros(h, h),
                                                     "pooler.dense.bias": lambda h: torch.zeros(h)})
    assert bert == "rag.question_encoder.question_encoder.bert_model."  # the key the report named
    ours = RagModel.from_hf_pretrained(tmp_path / "rag")
    ids, mask, scores, labels = tiny_batch(2, K, 8, 6, hf.config.generator.vocab_size)
    with torch.no_grad():
        expected = hf(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, labels=labels, n_docs=K).loss
        got = ours(context_input_ids=ids, context_attention_mask=mask, doc_scores=scores, labels=labels, n_docs=K).loss
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    # only the pooler: any other weight the model does not use is still refused
    _tiny_rag_folder(tmp_path / "other", **{"encoder.extra.weight": lambda h: torch.zeros(h)})
    with pytest.raises(InputError, match=r"has weights the model does not use \(.*bert_model\.encoder\.extra\.weight"):
        RagModel.from_hf_pretrained(tmp_path / "other")


def test_the_export_tokenizers_cut_at_the_models_positions(exported, trained_rag, rag_inputs):  # noqa: F811
    """A DPR trained here had a question tokenizer whose model_max_length was 1e30: the export kept it, so
    truncation=True kept a long question whole and transformers' generate() failed past the question encoder's
    positions, where `lewisrag ask` cut the question at them. The question is cut where DPR was trained now
    (its q_max_length, within the positions), in lewisrag and in the export alike."""
    from transformers import RagRetriever, RagTokenForGeneration, RagTokenizer

    from lewisrag.experiments.ask import ask
    from lewisrag.index.dense import DenseIndex
    from lewisrag.training.checkpoint import load_trained

    model, tokenizers = load_trained(trained_rag)
    q_cut = tokenizers.question.model_max_length  # the DPR's q_max_length
    g_positions = model.generator.config.max_position_embeddings
    assert q_cut <= model.question_encoder.config.max_position_embeddings
    tokenizer = RagTokenizer.from_pretrained(exported)
    assert tokenizer.question_encoder.model_max_length == q_cut
    assert tokenizer.generator.model_max_length <= g_positions

    retriever = RagRetriever.from_pretrained(exported)
    hf = RagTokenForGeneration.from_pretrained(exported, retriever=retriever).eval()
    enc = tokenizer.question_encoder(LONG_QUESTION, return_tensors="pt", truncation=True)
    assert enc["input_ids"].shape[1] == q_cut
    with torch.no_grad():
        q = hf.question_encoder(enc["input_ids"], attention_mask=enc["attention_mask"])[0]
        _, _, docs = retriever.retrieve(q.numpy().astype("float32"), 2)
        seqs = hf.generate(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], n_docs=2)
    assert seqs.shape[0] == 1
    ours = ask(model, tokenizers, DenseIndex.load(rag_inputs["index"]), LONG_QUESTION, n_docs=2)
    assert [p.id for p in ours.passages] == list(docs[0]["id"])  # the same question read: the same passages

    from lewisrag.experiments.export import within_positions

    unlimited = copy.deepcopy(tokenizers.question)  # a tokenizer that knows no limit (a DPR's from before q_max_length)
    unlimited.model_max_length = int(1e30)
    q_positions = model.question_encoder.config.max_position_embeddings
    assert within_positions(unlimited, model.question_encoder.config).model_max_length == q_positions
    assert unlimited.model_max_length == int(1e30)  # a copy is capped, never the tokenizer given


def test_a_config_without_the_variant_says_what_to_write(tmp_path):
    """ask and export take no variant: the message told the user to pass variant=, which only the Python API has."""
    tiny_hf_rag("token", n_docs=K).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["architectures"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError) as e:
        RagModel.from_hf_pretrained(tmp_path)
    assert e.value.source == str(tmp_path / "config.json") and e.value.field == "architectures"
    assert 'set it to ["RagTokenForGeneration"] or ["RagSequenceForGeneration"]' in str(e.value)
    assert "variant=" not in str(e.value)


def _refused_in_one_line(monkeypatch, capsys, *args) -> str:
    code, out, err = run_main(monkeypatch, capsys, *args)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (code, err)
    return err


def test_an_export_without_its_config_names_the_file(exported, rag_inputs, tmp_path, monkeypatch, capsys):  # noqa: F811
    """An export whose config.json was deleted was "not a RAG model: no rag.json here nor in best/ or final/"."""
    damaged = tmp_path / "export"
    shutil.copytree(exported, damaged)
    (damaged / "config.json").unlink()
    err = _refused_in_one_line(monkeypatch, capsys, "ask", "--model", damaged, "--index", rag_inputs["index"], "Who?")
    assert f"{damaged / 'config.json'}: file not found" in err, err
    (damaged / "lewisrag_export.json").unlink()  # weights alone: a model's folder all the same
    err = _refused_in_one_line(monkeypatch, capsys, "ask", "--model", damaged, "--index", rag_inputs["index"], "Who?")
    assert f"{damaged / 'config.json'}: file not found" in err, err


def test_a_model_of_another_kind_is_named_by_its_model_type(rag_inputs, tmp_path, monkeypatch, capsys):  # noqa: F811
    """A BART folder given as --model was "not a RAG model: no rag.json ...", naming neither config.json nor
    model_type; a reproduce run's config.json, which names no model type, still gets the run's models named."""
    bart = tmp_path / "bart"
    tiny_hf_rag("token").generator.save_pretrained(bart)
    out = tmp_path / "out"
    err = _refused_in_one_line(monkeypatch, capsys, "export", "--model", bart, "--index", rag_inputs["index"], "--out", out)
    assert f"{bart / 'config.json'}: field 'model_type': " in err and "'bart'" in err, err
    assert not out.exists()

    from lewisrag.training.checkpoint import resolve_model_dir

    run = tmp_path / "run"
    (run / "rag_token" / "best").mkdir(parents=True)
    (run / "rag_token" / "best" / "rag.json").write_text("{}")
    (run / "config.json").write_text(json.dumps({"preset": "tiny"}))
    with pytest.raises(InputError, match="a reproduce run holds its models in"):
        resolve_model_dir(run)


def test_a_transformers_rag_checkpoint_exports_as_ask_reads_it(exported, rag_inputs, tmp_path, monkeypatch,  # noqa: F811
                                                                capsys):
    """A RAG folder of transformers' own names no context encoder: `ask` and `swap` search any index of its
    width with a note saying so, where export refused it unless --swap, telling the user to "use the question
    encoder of the pair" that the transformers DPRQuestionEncoder names none of."""
    from lewisrag.training.checkpoint import load_trained

    plain = tmp_path / "plain"
    shutil.copytree(exported, plain)
    (plain / "lewisrag_export.json").unlink()
    out = tmp_path / "out"
    code, stdout, err = run_main(monkeypatch, capsys, "export", "--model", plain, "--index", rag_inputs["index"],
                                 "--out", out, "--json")
    assert code == 0, err
    assert err.startswith(f"note: {plain} names no context encoder (a transformers RAG checkpoint)"), err
    assert json.loads(stdout)["paired_fingerprint"] is None
    assert load_trained(out)[0].settings.index_fingerprint is None  # and still names none read back
    code, _, err = run_main(monkeypatch, capsys, "export", "--model", plain, "--index", rag_inputs["index"],
                            "--out", out, "--swap")
    assert code == 0 and "names no context encoder" not in err, err  # --swap: the user said so, as in `ask`


def test_an_index_smaller_than_the_models_k_is_named_by_its_field(exported, rag_inputs, tmp_path, monkeypatch,  # noqa: F811
                                                                   capsys):
    """export's "holds N passages, fewer than the model's n_docs" named no field, where ask and swap name n_passages."""
    from lewisrag.index.dense import DenseIndex

    model = tmp_path / "model"
    shutil.copytree(exported, model)
    n = len(DenseIndex.load(rag_inputs["index"]).passages)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "n_docs": n + 1}))
    (model / "lewisrag_export.json").unlink()  # (its record's K would differ from config.json's: a warning)
    out = tmp_path / "out"
    err = _refused_in_one_line(monkeypatch, capsys, "export", "--model", model, "--index", rag_inputs["index"],
                               "--out", out, "--swap")
    assert err == (f"error: {rag_inputs['index']}: field 'n_passages': holds {n} passages, fewer than the model's "
                   f"n_docs {n + 1}\n"), err
    assert not out.exists()
