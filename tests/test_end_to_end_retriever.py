"""The end-to-end retriever (`train rag --train-context-encoder --reindex-every N`, training.end2end):
retrieved passages are scored by the context encoder, which gets gradient and moves only with the
flag; re-indexing happens at its steps and stores what the current encoder makes; a saved model
carries an index that `ask` accepts and `index build` remakes; an interrupted run resumes to the
same weights and log; bad flag combinations are one-line errors."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from conftest import one_thread, run_main
from lewisrag.data.io import InputError
from lewisrag.index.encoders import context_fingerprint, load_context_encoder, load_question_encoder
from test_checkpoints_in import _rag_flags, hf  # noqa: F401  (module fixture)
from test_rag_train import cli_flags, log_lines, make_config, rag_inputs, trained_rag, weights  # noqa: F401  (session fixtures)

E2E = dict(train_context_encoder=True)


def context_weights(model_dir) -> dict[str, torch.Tensor]:
    return load_file(str(model_dir / "context_encoder" / "model.safetensors"))


def start_context_weights(rag_inputs) -> dict[str, torch.Tensor]:  # noqa: F811
    from lewisrag.index.encoders import DPRCheckpoint

    return DPRCheckpoint.load(rag_inputs["dpr"]).ctx_encoder.state_dict()


def test_retrieved_passages_are_scored_by_the_context_encoder_with_gradient(rag_inputs):  # noqa: F811
    from lewisrag.training.rag_data import load_components

    with one_thread():
        plain = load_components(make_config(rag_inputs))
        e2e = load_components(make_config(rag_inputs, **E2E))
        questions = [ex.question for ex, _ in plain.pairs[:4]]
        r0 = plain.model.retrieve(questions, plain.index, plain.tokenizers)
        r1 = e2e.model.retrieve(questions, e2e.index, e2e.tokenizers)
    assert plain.model.context_encoder is None
    assert not any(k.startswith("context_encoder.") for k in plain.model.state_dict())
    # the index was built by this very encoder: the same passages, and its stored vectors' scores
    assert (r0.rows == r1.rows).all()
    assert torch.allclose(r0.doc_scores, r1.doc_scores, rtol=1e-5, atol=1e-5)
    r1.doc_scores.logsumexp(-1).sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in e2e.model.context_encoder.parameters())


def test_reindex_stores_what_the_current_encoder_makes(rag_inputs):  # noqa: F811
    from lewisrag.index.encoders import encode_texts, state_fingerprint
    from lewisrag.training.end2end import reindex
    from lewisrag.training.rag_data import load_components

    with one_thread():
        parts = load_components(make_config(rag_inputs, **E2E))
        model, index, ctx = parts.model, parts.index, parts.model.context_encoder
        before = np.array(index.embeddings)
        with torch.no_grad():  # as if training had moved it
            g = torch.Generator().manual_seed(0)
            for p in ctx.parameters():
                p.add_(0.5 * torch.randn(p.shape, generator=g))
        seconds = reindex(model, index)
        fresh = encode_texts(ctx.encoder, ctx.tokenizer, [(p.title, p.text) for p in index.passages], max_length=128)
        q = np.random.default_rng(0).standard_normal((3, index.dim)).astype(np.float32)
        _, rows = index.search(q, 4)
        model.retrieve(["Who leads the country?"], index, parts.tokenizers)  # its fingerprint check accepts it
    assert seconds > 0 and index.is_exact and ctx.max_length == 128
    assert np.array_equal(index.embeddings, fresh) and not np.allclose(before, fresh)
    assert (rows == np.argsort(-(q @ fresh.T), axis=1)[:, :4]).all()
    assert index.ctx_fingerprint == model.settings.index_fingerprint == state_fingerprint(ctx.encoder)


def test_training_moves_the_context_encoder_and_reindexes_on_schedule(rag_inputs, tmp_path, monkeypatch, capsys):  # noqa: F811
    from lewisrag.data.records import read_passages
    from lewisrag.index.dense import DenseIndex, build_dense_index
    from lewisrag.training.rag import train_rag

    run = tmp_path / "run"
    with one_thread():
        train_rag(make_config(rag_inputs, steps=3, eval_every=3, save_every=3, reindex_every=2, **E2E), run)
    records = [json.loads(line) for line in log_lines(run)]
    assert [("reindex_s" in r) for r in records] == [False, True, False] and records[1]["reindex_s"] > 0
    start = start_context_weights(rag_inputs)
    for model in ("best", "final"):
        moved = context_weights(run / model)
        assert moved.keys() == start.keys() and any(not torch.equal(moved[k], start[k]) for k in start)
    # the checkpoint's live vectors are step 2's; final/ re-encoded them with step 3's encoder
    state = json.loads((run / "checkpoint" / "state.json").read_text())
    assert state["live_index"]["step"] == 2
    final = DenseIndex.load(run / "final" / "index")
    assert not np.allclose(np.load(run / "checkpoint" / "index_vectors.npy"), final.embeddings)
    settings = json.loads((run / "final" / "rag.json").read_text())["settings"]
    assert settings["index_path"] == str((run / "final" / "index").resolve())
    # `index build` from the saved context encoder remakes the saved index, fingerprint included
    rebuilt = build_dense_index(read_passages(rag_inputs["world"] / "passages_a.jsonl"), run / "final" / "context_encoder",
                                tmp_path / "rebuilt")
    assert rebuilt["build"]["max_length"] == 128
    assert rebuilt["encoder"]["ctx_fingerprint"] == final.ctx_fingerprint == settings["index_fingerprint"]
    assert np.allclose(np.load(tmp_path / "rebuilt" / "embeddings.npy"), final.embeddings, atol=1e-5)
    # `ask` reads the model with its own index, and refuses the starting one, which it no longer matches
    code, out, err = run_main(monkeypatch, capsys, "ask", "--model", run, "--index", run / "best" / "index",
                              "Who is the leader?", "--json")
    assert code == 0 and len(json.loads(out)["passages"]) == 2, err
    code, _, err = run_main(monkeypatch, capsys, "ask", "--model", run, "--index", rag_inputs["index"], "Who?")
    assert code == 2 and "ctx_fingerprint" in err and "--swap" in err
    # the model directory stands for its encoders: `eval retrieval` searches its own index with it,
    # `index build` / --context-encoder take its context_encoder/
    code, out, err = run_main(monkeypatch, capsys, "eval", "retrieval", "--index", run / "final" / "index",
                              "--encoder", run / "final", "--questions", rag_inputs["world"] / "dev.jsonl", "--json")
    assert code == 0, err
    (result,) = json.loads(out).values()
    assert 0 <= result["recall@1"] <= result["recall@5"] <= 1 and result["n"] > 0
    assert load_context_encoder(run / "final").ctx_fingerprint == settings["index_fingerprint"]
    assert context_fingerprint(run / "final") == settings["index_fingerprint"]


def test_a_rag_model_directory_is_a_question_encoder(rag_inputs, trained_rag, monkeypatch, capsys, tmp_path):  # noqa: F811
    """`--encoder RUN/best`: the question encoder RAG training left, paired with the index it trained on."""
    dev = rag_inputs["world"] / "dev.jsonl"
    code, out, err = run_main(monkeypatch, capsys, "eval", "retrieval", "--index", rag_inputs["index"], "--encoder",
                              trained_rag / "best", "--questions", dev, "--json")
    assert code == 0, err
    ckpt = load_question_encoder(trained_rag / "best")
    start = load_question_encoder(rag_inputs["dpr"])
    assert ckpt.ctx_fingerprint == start.ctx_fingerprint and ckpt.tokenizer.vocab == start.tokenizer.vocab
    # its question_encoder/ alone has no tokenizer: the error names the directory to give instead
    code, _, err = run_main(monkeypatch, capsys, "eval", "retrieval", "--index", rag_inputs["index"], "--encoder",
                            trained_rag / "best" / "question_encoder", "--questions", dev)
    assert code == 2 and "give the model directory" in err and str(trained_rag / "best") in err
    with pytest.raises(InputError, match="--train-context-encoder"):
        load_context_encoder(trained_rag / "best")
    with pytest.raises(InputError, match="names its own context encoder"):
        load_question_encoder(trained_rag / "best", context_encoder=rag_inputs["dpr"])
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "rag.json").write_text('{"format": "lewisrag-rag/1", "settings": {"index_fingerprint": 7}}')
    with pytest.raises(InputError, match="settings.index_fingerprint"):
        load_question_encoder(tmp_path / "bad")


def test_without_the_flag_nothing_of_it_is_written(rag_inputs, tmp_path):  # noqa: F811
    from lewisrag.training.rag import train_rag

    with one_thread():
        train_rag(make_config(rag_inputs, steps=1, eval_every=0, save_every=1), tmp_path / "run")
    assert not (tmp_path / "run" / "final" / "context_encoder").exists() and not (tmp_path / "run" / "final" / "index").exists()
    assert not (tmp_path / "run" / "checkpoint" / "index_vectors.npy").exists()
    assert "live_index" not in json.loads((tmp_path / "run" / "checkpoint" / "state.json").read_text())
    assert "reindex_s" not in log_lines(tmp_path / "run")[0]
    assert not any(k.startswith("context_encoder") for k in load_file(str(tmp_path / "run" / "checkpoint" / "model.safetensors")))


def test_a_transformers_pair_trains_its_context_encoder_folder(hf, monkeypatch, capsys, tmp_path):  # noqa: F811
    """A DPRQuestionEncoder folder has no context encoder: --context-encoder's folder is the one trained."""
    from transformers import DPRContextEncoder

    from lewisrag.index.encoders import load_context_encoder

    e2e = ["--train-context-encoder", "--reindex-every", 1]
    code, _, err = run_main(monkeypatch, capsys, *_rag_flags(hf, tmp_path / "unpaired"), *e2e, "--swap")
    assert code == 2 and "--train-context-encoder" in err and "--context-encoder" in err, err
    with one_thread():
        code, _, err = run_main(monkeypatch, capsys, *_rag_flags(hf, tmp_path / "run"), *e2e, "--context-encoder", hf["context"])
    assert code == 0, err
    start = DPRContextEncoder.from_pretrained(hf["context"]).state_dict()
    saved = load_context_encoder(tmp_path / "run" / "final" / "context_encoder")  # a transformers folder, tokenizer included
    trained = saved.ctx_encoder.state_dict()
    assert any(not torch.equal(trained[k], start[k]) for k in start)
    built = json.loads((hf["index"] / "manifest.json").read_text())["build"]["max_length"]
    assert saved.meta["max_length"] == built


class Interrupted(Exception):
    pass


def test_interrupted_then_resumed_equals_uninterrupted(rag_inputs, tmp_path):  # noqa: F811
    """Stopped at step 5: the checkpoint (step 4) holds step 3's re-encoded vectors, older than its weights."""
    from lewisrag.training.rag import train_rag

    cfg = make_config(rag_inputs, steps=6, eval_every=3, save_every=2, reindex_every=3, **E2E)

    def stop_at_5(step, steps, record):
        if step == 5:
            raise Interrupted

    with one_thread():
        with pytest.raises(Interrupted):
            train_rag(cfg, tmp_path / "killed", on_progress=stop_at_5)
        assert json.loads((tmp_path / "killed" / "checkpoint" / "state.json").read_text())["live_index"]["step"] == 3
        train_rag(cfg, tmp_path / "killed", resume=True)
        train_rag(cfg, tmp_path / "straight")

    def without_timing(out):  # reindex_s is wall-clock time
        return [{k: v for k, v in json.loads(line).items() if k != "reindex_s"} for line in log_lines(out)]

    assert without_timing(tmp_path / "killed") == without_timing(tmp_path / "straight")
    assert [("reindex_s" in json.loads(x)) for x in log_lines(tmp_path / "killed")] == [False, False, True] * 2
    for model in ("final", "best"):
        a, b = tmp_path / "killed" / model, tmp_path / "straight" / model
        wa, wb = {**weights(a), **context_weights(a)}, {**weights(b), **context_weights(b)}
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
        assert np.array_equal(np.load(a / "index" / "embeddings.npy"), np.load(b / "index" / "embeddings.npy"))


@pytest.mark.parametrize("overrides, flag", [
    (dict(reindex_every=2), "--reindex-every"),
    (dict(reindex_every=-1, **E2E), "--reindex-every"),
    (dict(shared_retrieval=True, **E2E), "--shared-retrieval"),
])
def test_bad_flag_combinations_are_one_line_errors(rag_inputs, tmp_path, overrides, flag):  # noqa: F811
    from lewisrag.training.rag import train_rag

    with pytest.raises(InputError) as e:
        train_rag(make_config(rag_inputs, **overrides), tmp_path / "out")
    assert str(e.value).startswith(flag) and "\n" not in str(e.value)
    assert not (tmp_path / "out").exists()


def test_cli_flags_reach_the_config(rag_inputs, tmp_path, monkeypatch, capsys):  # noqa: F811
    import lewisrag.training.rag as R
    from lewisrag.cli import app

    seen = []

    def fake(cfg, out, **kw):
        seen.append(cfg)
        return {"main": True, "steps": cfg.steps, "best_em": None, "best_dev": None, "dev_metric": "em", "n_train": 0,
                "skipped_no_answer": 0, "processes": 1, "search": "faiss", "out": str(out)}

    real = R.train_rag
    monkeypatch.setattr(R, "train_rag", fake)
    cfg = make_config(rag_inputs, reindex_every=3, **E2E)
    code, _, err = run_main(monkeypatch, capsys, "train", "rag", *cli_flags(cfg), "--out", tmp_path / "run", "--json")
    assert code == 0, err
    assert seen == [cfg]
    monkeypatch.setattr(R, "train_rag", real)
    code, _, err = run_main(monkeypatch, capsys, "train", "rag", *cli_flags(replace(cfg, train_context_encoder=False)),
                            "--out", tmp_path / "run")
    assert code == 2 and "--reindex-every" in err and len(err.strip().splitlines()) == 1
    help_text = CliRunner().invoke(app, ["train", "rag", "--help"], env={"COLUMNS": "200"}).stdout
    assert "--train-context-encoder" in help_text and "--reindex-every" in help_text


def test_world_measurement_script_compares_both_arms(tmp_path):
    """scripts/e2e_retriever.py (docs/recipe.md's numbers) on the tiny preset: both arms train and are
    measured with the index each searches; the end-to-end arm re-indexed on schedule."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("e2e_retriever", Path(__file__).parents[1] / "scripts" / "e2e_retriever.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    r = script.run(tmp_path / "e2e", "tiny", dpr_steps=5, rag_steps=4, lr=1e-3, reindex_every=2, seed=0, retriever_lr_scale=3.0)
    assert set(r) == {"config", "before", "frozen_documents", "end_to_end"} and r["config"]["retriever_lr_scale"] == 3.0
    for arm in ("frozen_documents", "end_to_end"):
        assert json.loads((tmp_path / "e2e" / arm / "config.json").read_text())["retriever_lr_scale"] == 3.0
    for arm in ("frozen_documents", "end_to_end"):
        assert all(0.0 <= r[arm][k] <= 1.0 for k in ("recall_at_1", "recall_at_5", "exact_match")) and r[arm]["n"] > 0
    assert r["frozen_documents"]["reindexes"] == 0 and r["end_to_end"]["reindexes"] == 2
    assert (tmp_path / "e2e" / "end_to_end" / "best" / "index").is_dir()
    assert json.loads((tmp_path / "e2e" / "summary.json").read_text()) == r


def test_world_measurement_script_reruns_only_with_the_same_settings(tmp_path, capsys):
    """A second call into the same --out reuses the trained arms only under the settings they were
    trained with (and reports their own training time, not 0); other settings, or a folder of files
    with no record of its settings, are refused in one line (exit 2) with summary.json untouched."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("e2e_retriever", Path(__file__).parents[1] / "scripts" / "e2e_retriever.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "e2e"
    flags = ["--out", str(out), "--preset", "tiny", "--dpr-steps", "5", "--rag-steps", "4", "--lr", "1e-3",
             "--reindex-every", "2", "--json"]
    assert script.main(flags) == 0
    first = json.loads(capsys.readouterr().out)
    arms = ("frozen_documents", "end_to_end")
    assert all(first[arm]["train_s"] > 0 for arm in arms)
    logs = {arm: (out / arm / "log.jsonl").read_text() for arm in arms}
    assert script.main(flags) == 0
    again = json.loads(capsys.readouterr().out)
    assert all(again[arm]["train_s"] == first[arm]["train_s"] for arm in arms)  # the arms' own record, not retrained
    assert {arm: (out / arm / "log.jsonl").read_text() for arm in arms} == logs
    summary = (out / "summary.json").read_text()
    other = flags[:7] + ["8"] + flags[8:]
    assert other[6:8] == ["--rag-steps", "8"]
    assert script.main(other) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out: ") and "rag_steps 4" in err and len(err.strip().splitlines()) == 1, err
    assert (out / "summary.json").read_text() == summary
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    assert script.main(["--out", str(stray)] + flags[2:]) == 2
    assert "e2e_config.json" in capsys.readouterr().err and sorted(p.name for p in stray.iterdir()) == ["notes.txt"]


def test_world_measurement_script_checks_its_flags_before_it_builds_or_claims(tmp_path, capsys):
    """A value `train rag` refuses is refused before the world, DPR and generator are built and before
    DIR records its settings (which would refuse the corrected call), named by the script's own flag."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("e2e_retriever", Path(__file__).parents[1] / "scripts" / "e2e_retriever.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "e2e"
    for flags, says in ((["--rag-steps", "0"], "error: --rag-steps: must be at least 1"),
                        (["--dpr-steps", "0"], "error: --dpr-steps: must be at least 1"),
                        (["--rag-steps", "4", "--reindex-every", "9"], "error: --reindex-every: 9 is past --rag-steps 4"),
                        (["--lr", "nan"], "error: --lr:"), (["--retriever-lr-scale", "-1"], "error: --retriever-lr-scale:")):
        assert script.main(["--out", str(out), "--preset", "tiny", *flags]) == 2, flags
        err = capsys.readouterr().err
        assert err.startswith(says) and len(err.strip().splitlines()) == 1, (flags, err)
        assert not out.exists()
