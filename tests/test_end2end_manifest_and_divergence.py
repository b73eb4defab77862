"""The index an end-to-end run (`train rag --train-context-encoder`) saves: its manifest records the
passage encoding it was encoded in (a transformers DPR pair's "dpr"), so `index verify` encodes afresh
as it did; it names its context encoder wherever the run ends up (`--overwrite`'s staging folder gone,
the run moved); a context encoder diverging is told as divergence, not as an index to tune; and a RAG
model that trained its context encoder starts another end-to-end run with it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from conftest import one_thread, run_main
from lewisrag.data.io import InputError
from lewisrag.index.encoders import load_context_encoder
from test_checkpoints_in import _rag_flags, hf  # noqa: F401  (module fixture)
from test_rag_train import make_config, rag_inputs, trained_rag  # noqa: F401  (session fixtures)

E2E = ["--train-context-encoder", "--reindex-every", 1]


def verify(monkeypatch, capsys, index) -> tuple[int, dict | None, str]:
    code, out, err = run_main(monkeypatch, capsys, "index", "verify", "--index", index, "--json")
    return code, json.loads(out) if code == 0 else None, err


def encoding_check(report: dict) -> str:
    (check,) = [c["result"] for c in report["checks"] if c["check"] == "encoding"]
    return check


def test_a_transformers_pairs_end_to_end_index_verifies_in_dprs_encoding(hf, monkeypatch, capsys, tmp_path):  # noqa: F811
    run = tmp_path / "run"
    with one_thread():
        code, _, err = run_main(monkeypatch, capsys, *_rag_flags(hf, run), *E2E, "--context-encoder", hf["context"])
    assert code == 0, err
    start = json.loads((hf["index"] / "manifest.json").read_text())["encoder"]
    assert start["passage_encoding"] == "dpr"
    for model in ("best", "final"):
        with one_thread():
            code, report, err = verify(monkeypatch, capsys, run / model / "index")
        assert code == 0, err  # was: exit 2, "row ... is not its passage's vector" (re-encoded as "pair")
        assert "encoded afresh" in encoding_check(report)
        encoder = json.loads((run / model / "index" / "manifest.json").read_text())["encoder"]
        # the tokenizer is not trained: the encoding and tokenizer are the starting index's
        assert encoder["passage_encoding"] == "dpr" and encoder["tokenizer_fingerprint"] == start["tokenizer_fingerprint"]
        assert (run / model / "index" / encoder["path"]).resolve() == (run / model / "context_encoder").resolve()
        assert load_context_encoder(run / model).passage_encoding == "dpr"  # what a run started from it encodes in


DIVERGES = dict(train_context_encoder=True, freeze_retriever=True, reindex_every=1, steps=6, eval_every=3,
                save_every=100, lr=1e-3, retriever_lr_scale=1e8, warmup=0)


def test_a_context_encoder_diverging_before_a_reindex_is_told_as_divergence(rag_inputs, tmp_path):  # noqa: F811
    from lewisrag.training.rag import train_rag

    with one_thread(), pytest.raises(InputError) as e:
        train_rag(make_config(rag_inputs, **DIVERGES), tmp_path / "run")
    message = str(e.value)
    # was: "<index>: field 'search_params': its search found fewer than 2 passages ... `lewisrag index tune`"
    assert message.startswith("--lr: the weights hold NaN or inf after step ") and "\n" not in message
    assert "training diverged; lower --lr (now 0.001) or --retriever-lr-scale (now 1e+08)" in message
    assert "search_params" not in message and not (tmp_path / "run").exists()


def test_reencoded_vectors_not_finite_are_told_as_divergence(rag_inputs, tmp_path, monkeypatch):  # noqa: F811
    """Finite weights whose encoding overflows (fp16, say): the re-encoded vectors are checked themselves."""
    from lewisrag.training import end2end
    from lewisrag.training.rag import train_rag

    real = end2end.PassageEncoder.encode_all

    def overflowing(self, passages, mixed_precision="no"):
        vectors = real(self, passages, mixed_precision)
        vectors[3, 0] = np.inf
        return vectors

    monkeypatch.setattr(end2end.PassageEncoder, "encode_all", overflowing)
    cfg = make_config(rag_inputs, train_context_encoder=True, reindex_every=1, steps=2, eval_every=0, save_every=2)
    with one_thread(), pytest.raises(InputError, match=r"^--lr: the context encoder's passage vectors hold NaN or inf "
                                     r"at step 1's re-index: training diverged; lower --lr .* or --retriever-lr-scale"):
        train_rag(cfg, tmp_path / "run")


@pytest.fixture(scope="module")
def overwritten(rag_inputs, tmp_path_factory) -> Path:  # noqa: F811
    """An end-to-end run written with --overwrite over an earlier run (so trained in a staging folder)."""
    from lewisrag.training.rag import train_rag

    run = tmp_path_factory.mktemp("overwrite") / "run"
    with one_thread():
        train_rag(make_config(rag_inputs, steps=1, eval_every=0, save_every=1), run)
        train_rag(make_config(rag_inputs, train_context_encoder=True, reindex_every=1, steps=2, eval_every=2,
                              save_every=2), run, overwrite=True)
    assert not list(run.parent.glob(".run.overwrite*"))  # the staging folder is gone
    return run


def test_an_overwritten_run_names_its_own_paths_and_verifies_its_encoding(overwritten, monkeypatch, capsys, tmp_path):
    run = overwritten
    for model in ("best", "final"):
        settings = json.loads((run / model / "rag.json").read_text())["settings"]
        assert settings["index_path"] == str((run / model / "index").resolve())
        for name in ("question_tokenizer", "generator_tokenizer", "index_path"):
            assert Path(settings[name]).is_dir() and ".overwrite-" not in settings[name], settings[name]
        with one_thread():
            code, report, err = verify(monkeypatch, capsys, run / model / "index")
        assert code == 0, err
        # was: "not checked: the encoder that built the index (.../.run.overwrite-<digest>/...) is not found here"
        assert "encoded afresh" in encoding_check(report) and ".overwrite-" not in encoding_check(report)
    # a run moved elsewhere still finds its context encoder
    moved = tmp_path / "elsewhere"
    shutil.copytree(run, tmp_path / "copy")
    (tmp_path / "copy").rename(moved)
    with one_thread():
        code, report, err = verify(monkeypatch, capsys, moved / "final" / "index")
    assert code == 0, err
    assert str(moved / "final") in encoding_check(report) and "encoded afresh" in encoding_check(report)


def test_an_end_to_end_model_trains_its_context_encoder_further(overwritten, rag_inputs, trained_rag, monkeypatch,  # noqa: F811
                                                                  capsys, tmp_path):
    """`--encoder RUN/best --train-context-encoder` goes on with RUN/best/context_encoder (against RUN/best/index,
    the index it was saved with); a RAG model that froze its context encoder is refused in one line that
    offers nothing refused next."""
    w = rag_inputs["world"]
    common = ["train", "rag", "--generator", rag_inputs["gen"], "--train", w / "train.jsonl", "--dev", w / "dev.jsonl",
              "--steps", 1, "--n-docs", 2, "--batch-size", 4, "--lr", 1e-2, "--max-combined-length", 128,
              "--max-target-length", 16, "--eval-every", 0, "--save-every", 1, "--device", "cpu", *E2E]
    best = overwritten / "best"
    with one_thread():
        code, _, err = run_main(monkeypatch, capsys, *common, "--encoder", best, "--index", best / "index",
                                "--out", tmp_path / "again")
    assert code == 0, err  # was: exit 2, "... a transformers DPRQuestionEncoder folder ... pass --context-encoder"
    start, trained = load_file(str(best / "context_encoder" / "model.safetensors")), \
        load_file(str(tmp_path / "again" / "final" / "context_encoder" / "model.safetensors"))
    assert start.keys() == trained.keys() and any(not torch.equal(start[k], trained[k]) for k in start)
    with one_thread():
        code, report, err = verify(monkeypatch, capsys, tmp_path / "again" / "final" / "index")
    assert code == 0 and "encoded afresh" in encoding_check(report), err

    code, _, err = run_main(monkeypatch, capsys, *common, "--encoder", trained_rag / "best", "--index",
                            rag_inputs["index"], "--out", tmp_path / "frozen")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--train-context-encoder" in err and "holds no context encoder" in err and "--context-encoder" not in \
        err.replace("--train-context-encoder", "")
    assert not (tmp_path / "frozen").exists()
