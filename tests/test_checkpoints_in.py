"""Transformers checkpoint folders in: DPRQuestionEncoder / DPRContextEncoder folders (the
facebook/dpr-*-single-nq-base layout) build and search indexes, ranking exactly as transformers'
own encoders do, and start `train dpr` and `train rag`; BartForConditionalGeneration folders (the
facebook/bart-base layout) start `train rag`, `train stitched` and the closed-book baseline with
their own tokenizer. Loading is strict: a folder that does not fit is exit 2 naming the keys.

The pairing rule (README "CLI conventions"): an index records its context encoder's fingerprint;
a transformers DPRQuestionEncoder folder searches it when `--context-encoder` names the
DPRContextEncoder folder that built it, else only with `--swap`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import one_thread, run_main
from hf_layouts import bart, dpr_pair
from lewisrag.data.io import InputError
from lewisrag.data.records import read_passages, read_qa


@pytest.fixture(scope="module")
def hf(tiny_corpus, tmp_path_factory) -> dict:
    """The tiny corpus, a DPR pair and a BART in transformers' layouts, and an index built by the pair's
    context encoder through the CLI's library call."""
    from lewisrag.index.dense import build_dense_index

    root = tmp_path_factory.mktemp("hf_layouts")
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    texts = [f"{p.title} {p.text}" for p in passages] + [q.question for q in qa]
    with one_thread():
        pair = dpr_pair(root, texts)
        other = dpr_pair(root / "other", texts, seed=7)  # another pair: its context encoder built no index here
        gen = bart(root, texts)
        build_dense_index(passages, pair["context"], root / "index")
    return {**pair, "other": other, "bart": gen, "index": root / "index", "passages": passages, "qa": qa,
            "corpus": tiny_corpus, "root": root}


def transformers_top(hf: dict, questions: list[str], k: int):
    """Top-k passage ids and scores as transformers' DPR encoders give them: pooler_output of
    DPRQuestionEncoder / DPRContextEncoder, each text encoded alone, dot product; passages as DPR
    encoded wiki_dpr's (and transformers' RAG example its own): the pair's input ids, segment ids all 0."""
    from transformers import AutoTokenizer, DPRContextEncoder, DPRQuestionEncoder

    q_enc = DPRQuestionEncoder.from_pretrained(hf["question"]).eval()
    c_enc = DPRContextEncoder.from_pretrained(hf["context"]).eval()
    q_tok, c_tok = AutoTokenizer.from_pretrained(hf["question"]), AutoTokenizer.from_pretrained(hf["context"])
    with torch.no_grad():
        p = torch.cat([c_enc(input_ids=c_tok(x.title, x.text, return_tensors="pt")["input_ids"]).pooler_output
                       if x.title else c_enc(input_ids=c_tok(x.text, return_tensors="pt")["input_ids"]).pooler_output
                       for x in hf["passages"]])
        q = torch.cat([q_enc(**q_tok(x, return_tensors="pt")).pooler_output for x in questions])
    top = (q @ p.T).topk(k, dim=1)  # (Q, k)
    return [[hf["passages"][i].id for i in row] for row in top.indices.tolist()], top.values.numpy()


# --- DPR folders: index build and search ---------------------------------------------------------------


def test_the_fixtures_have_the_hub_layouts(hf):
    for side, arch in (("question", "DPRQuestionEncoder"), ("context", "DPRContextEncoder")):
        d = hf[side]
        assert json.loads((d / "config.json").read_text())["architectures"] == [arch]
        names = {f.name for f in d.iterdir()}
        assert {"model.safetensors", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"} <= names
        assert not (d / "pytorch_model.bin").exists()
    assert not (hf["context"] / "tokenizer.json").exists()  # read from vocab.txt
    names = {f.name for f in hf["bart"].iterdir()}
    assert {"config.json", "model.safetensors", "vocab.json", "merges.txt", "tokenizer_config.json"} <= names
    assert "tokenizer.json" not in names


def test_dpr_folders_rank_exactly_as_transformers(hf):
    from transformers import DPRContextEncoder

    from lewisrag.index import open_retriever
    from lewisrag.index.encoders import state_fingerprint

    manifest = json.loads((hf["index"] / "manifest.json").read_text())
    ctx = DPRContextEncoder.from_pretrained(hf["context"])
    assert manifest["encoder"]["format"] == "transformers" and manifest["dim"] == 32
    assert manifest["encoder"]["ctx_fingerprint"] == state_fingerprint(ctx)
    questions = [q.question for q in hf["qa"]] + ["capital founded", "Who leads?"]
    with one_thread():
        hits = open_retriever(hf["index"], hf["question"], context_encoder=hf["context"]).search(questions, 5)
        ids, scores = transformers_top(hf, questions, 5)
    assert [[h.id for h in row] for row in hits] == ids
    np.testing.assert_allclose([[h.score for h in row] for row in hits], scores, rtol=1e-5, atol=1e-5)
    # the random encoders tell passages apart (13 different top-5 lists of 32), by more than rounding (gaps ≥ 0.008)
    assert len({tuple(row) for row in ids}) >= 8 and np.diff(-scores, axis=1).min() > 1e-3


def test_index_search_cli_with_the_pair(hf, monkeypatch, capsys):
    q = hf["qa"][0].question
    base = ["index", "search", "--index", hf["index"], "-q", q, "--n-docs", 3, "--json", "--encoder", hf["question"]]
    code, out, err = run_main(monkeypatch, capsys, *base, "--context-encoder", hf["context"])
    assert code == 0, err
    with one_thread():
        ids, _ = transformers_top(hf, [q], 3)
    assert [h["id"] for h in json.loads(out)] == ids[0]
    # eval retrieval takes the same pair
    code, out, err = run_main(monkeypatch, capsys, "eval", "retrieval", "--index", hf["index"], "--questions", hf["corpus"]["qa"],
                              "--encoder", hf["question"], "--context-encoder", hf["context"], "--recall-at", 5, "--json")
    assert code == 0, err
    assert json.loads(out)[str(hf["index"])]["n"] == len(hf["qa"])


def test_the_pairing_rule(hf, monkeypatch, capsys):
    base = ["index", "search", "--index", hf["index"], "-q", "Who leads?", "--json"]
    # a DPRQuestionEncoder folder names no context encoder: refused, saying what to pass
    code, _, err = run_main(monkeypatch, capsys, *base, "--encoder", hf["question"])
    assert code == 2 and "--context-encoder" in err and "--swap" in err and str(hf["context"]) in err, err
    code, out, err = run_main(monkeypatch, capsys, *base, "--encoder", hf["question"], "--swap")
    assert code == 0 and len(json.loads(out)) == 5, err
    # another pair's context encoder is another fingerprint
    code, _, err = run_main(monkeypatch, capsys, *base, "--encoder", hf["other"]["question"], "--context-encoder",
                            hf["other"]["context"])
    assert code == 2 and "ctx_fingerprint" in err and "--swap" in err, err
    # the index's own folder is a context encoder: it cannot encode the question
    code, _, err = run_main(monkeypatch, capsys, *base)
    assert code == 2 and "--encoder" in err and "DPRQuestionEncoder" in err and "Traceback" not in err, err
    code, _, err = run_main(monkeypatch, capsys, *base, "--encoder", hf["context"])
    assert code == 2 and "DPRContextEncoder folder encodes passages" in err, err
    code, _, err = run_main(monkeypatch, capsys, *base, "--encoder", hf["question"], "--context-encoder", hf["question"])
    assert code == 2 and "is a DPRQuestionEncoder" in err, err
    # a command without --swap is not told to pass it (train stitched said "or --swap", then refused --swap)
    code, _, err = run_main(monkeypatch, capsys, "train", "stitched", "--index", hf["index"], "--encoder", hf["question"],
                            "--generator", hf["bart"], "--train", hf["corpus"]["qa"], "--out", hf["root"] / "never")
    assert code == 2 and "--context-encoder" in err and "--swap" not in err, err


def test_index_build_takes_only_a_context_encoder(hf, monkeypatch, capsys, tmp_path):
    args = ["index", "build", "--passages", hf["corpus"]["passages"], "--out", tmp_path / "idx", "--json"]
    code, _, err = run_main(monkeypatch, capsys, *args, "--encoder", hf["question"])
    assert code == 2 and "DPRQuestionEncoder folder encodes questions" in err and not (tmp_path / "idx").exists(), err
    code, _, err = run_main(monkeypatch, capsys, *args, "--encoder", hf["bart"])
    assert code == 2 and "architectures" in err and "BartForConditionalGeneration" in err, err
    code, out, err = run_main(monkeypatch, capsys, *args, "--encoder", hf["context"])
    assert code == 0, err
    recorded = json.loads((hf["index"] / "manifest.json").read_text())["encoder"]["ctx_fingerprint"]
    assert json.loads(out)["encoder"]["ctx_fingerprint"] == recorded
    np.testing.assert_array_equal(np.load(tmp_path / "idx" / "embeddings.npy"), np.load(hf["index"] / "embeddings.npy"))


def test_the_bert_pooler_is_the_harmless_extra(hf, tmp_path):
    """facebook's DPR checkpoints carry BERT's pooler, which DPR never runs: accepted. Any other
    unused or missing weight is refused, named."""
    from lewisrag.index.encoders import load_question_encoder

    d = _copy_with(hf["question"], tmp_path / "pooler", add={
        "question_encoder.bert_model.pooler.dense.weight": torch.zeros(32, 32),
        "question_encoder.bert_model.pooler.dense.bias": torch.zeros(32)})
    assert load_question_encoder(d, hf["context"]).dim == 32
    d = _copy_with(hf["question"], tmp_path / "extra", add={"question_encoder.extra.weight": torch.zeros(2)})
    with pytest.raises(InputError, match="does not use.*question_encoder.extra.weight"):
        load_question_encoder(d, hf["context"])


# --- train dpr from a pair ---------------------------------------------------------------------------------


def _copy_with(src: Path, dst: Path, add: dict | None = None, rename: dict | None = None) -> Path:
    """A copy of the folder `src` whose model.safetensors has keys added or renamed."""
    shutil.copytree(src, dst)
    weights = load_file(str(src / "model.safetensors"))
    for old, new in (rename or {}).items():
        weights[new] = weights.pop(old)
    save_file({**weights, **(add or {})}, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


def _train_dpr(monkeypatch, capsys, hf, out: Path, *flags):
    trains = "--steps" not in flags or flags[flags.index("--steps") + 1] != 0  # --steps 0 refuses training's flags
    return run_main(monkeypatch, capsys, "train", "dpr", "--train", hf["corpus"]["qa"], "--passages", hf["corpus"]["passages"],
                    "--out", out, *(["--batch-size", 8] if trains else []), "--json", *flags)


def test_train_dpr_starts_from_the_pair_exactly(hf, monkeypatch, capsys, tmp_path):
    from lewisrag.index.encoders import DPRCheckpoint

    code, out, err = _train_dpr(monkeypatch, capsys, hf, tmp_path / "ckpt", "--init-question", hf["question"],
                                "--init-context", hf["context"], "--steps", 0)
    assert code == 0, err
    ckpt = DPRCheckpoint.load(tmp_path / "ckpt")
    for model, folder in ((ckpt.question_encoder, hf["question"]), (ckpt.ctx_encoder, hf["context"])):
        source, loaded = load_file(str(folder / "model.safetensors")), model.state_dict()
        assert set(source) == set(loaded)
        assert all(torch.equal(loaded[k], source[k]) for k in source)  # every tensor, bit for bit
    assert ckpt.meta["config"]["shared"] is False  # a pair trains as two networks
    assert ckpt.tokenizer.get_vocab() == json.loads((hf["question"] / "tokenizer.json").read_text())["model"]["vocab"]
    # the same context encoder, the same fingerprint: the converted checkpoint searches the folder-built index
    manifest = json.loads((hf["index"] / "manifest.json").read_text())
    assert json.loads(out)["ctx_fingerprint"] == manifest["encoder"]["ctx_fingerprint"]
    code, out, err = run_main(monkeypatch, capsys, "index", "search", "--index", hf["index"], "-q", hf["qa"][3].question,
                              "--encoder", tmp_path / "ckpt", "--n-docs", 3, "--json")
    assert code == 0, err
    with one_thread():
        assert [h["id"] for h in json.loads(out)] == transformers_top(hf, [hf["qa"][3].question], 3)[0][0]
    # the README's conversion needs no data: --steps 0 without --train and --passages saves the same weights
    code, out, err = run_main(monkeypatch, capsys, "train", "dpr", "--init-question", hf["question"], "--init-context",
                              hf["context"], "--steps", 0, "--out", tmp_path / "bare", "--json")
    assert code == 0, err
    assert json.loads(out)["ctx_fingerprint"] == manifest["encoder"]["ctx_fingerprint"] and json.loads(out)["n_train"] == 0
    for flags, message in ((["--steps", 0], "--steps: 0 without --train"), ([], "--train: needed to train")):
        code, _, err = run_main(monkeypatch, capsys, "train", "dpr", "--out", tmp_path / "none", *flags)
        assert code == 2 and message in err and not (tmp_path / "none").exists()


def test_train_dpr_from_the_pair_trains(hf, monkeypatch, capsys, tmp_path):
    code, out, err = _train_dpr(monkeypatch, capsys, hf, tmp_path / "ckpt", "--init-question", hf["question"],
                                "--init-context", hf["context"], "--steps", 2, "--self-negatives-at", 0)
    assert code == 0 and json.loads(out)["final_loss"] is not None, err
    import torch
    from transformers import DPRQuestionEncoder

    from lewisrag.index.encoders import DPRCheckpoint

    start = DPRQuestionEncoder.from_pretrained(hf["question"]).state_dict()
    trained = DPRCheckpoint.load(tmp_path / "ckpt").question_encoder.state_dict()
    assert trained.keys() == start.keys()
    moved = [k for k in start if not torch.equal(trained[k], start[k])]
    assert moved  # two steps changed the weights ...
    flat = [torch.cat([d[k].flatten().float() for k in start]) for d in (start, trained)]
    assert torch.nn.functional.cosine_similarity(*flat, dim=0) > 0.99  # ... of the pair they started from


def test_train_dpr_from_a_pair_with_few_positions_keeps_its_limits_inside_them(hf, monkeypatch, capsys, tmp_path):
    """A starting BERT with 64 positions: the checkpoint's token limits (128 passage tokens by
    default) are cut to 64, so that it trains and its checkpoint loads and builds an index."""
    from transformers import DPRConfig, DPRContextEncoder, DPRQuestionEncoder

    pair = {}
    for side, cls in (("question", DPRQuestionEncoder), ("context", DPRContextEncoder)):
        folder = tmp_path / side
        shutil.copytree(hf[side], folder)
        cfg = DPRConfig.from_pretrained(folder)
        cfg.max_position_embeddings = 64
        cls(cfg).save_pretrained(folder)
        pair[side] = folder
    code, _, err = _train_dpr(monkeypatch, capsys, hf, tmp_path / "ckpt", "--init-question", pair["question"],
                                "--init-context", pair["context"], "--steps", 1, "--self-negatives-at", 0)
    assert code == 0, err
    meta = json.loads((tmp_path / "ckpt" / "lewisrag_dpr.json").read_text())
    assert (meta["max_length"], meta["q_max_length"]) == (64, 64)
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", hf["corpus"]["passages"], "--encoder",
                            tmp_path / "ckpt", "--out", tmp_path / "idx")
    assert code == 0, err


def test_train_dpr_refuses_folders_that_do_not_fit(hf, monkeypatch, capsys, tmp_path):
    def refused(*flags, says: list[str]):
        code, _, err = _train_dpr(monkeypatch, capsys, hf, tmp_path / "out", *flags, "--steps", 1)
        assert code == 2 and "Traceback" not in err and not (tmp_path / "out").exists(), err
        for s in says:
            assert s in err, (s, err)

    key = "question_encoder.bert_model.embeddings.word_embeddings.weight"
    renamed = _copy_with(hf["question"], tmp_path / "renamed", rename={key: key.replace("word_embeddings", "word_embedding")})
    refused("--init-question", renamed, "--init-context", hf["context"], says=[key, "lacks"])
    refused("--init-question", hf["bart"], "--init-context", hf["context"],
            says=["--init-question", "does not fit", "lacks embeddings.", "unused decoder."])
    refused("--init", hf["bart"], says=["--init", "lacks embeddings."])
    refused("--init-question", hf["context"], "--init-context", hf["context"], says=["needs a DPRQuestionEncoder"])
    refused("--init-question", hf["question"], says=["--init-context", "go together"])
    refused("--init", hf["question"], "--init-question", hf["question"], "--init-context", hf["context"], says=["not both"])
    refused("--init-question", hf["question"], "--init-context", tmp_path / "missing", says=["not found"])


def test_init_with_one_dpr_folder_starts_both_sides(hf, monkeypatch, capsys, tmp_path):
    from lewisrag.index.encoders import DPRCheckpoint

    code, _, err = _train_dpr(monkeypatch, capsys, hf, tmp_path / "ckpt", "--init", hf["context"], "--steps", 0)
    assert code == 0, err
    ckpt, source = DPRCheckpoint.load(tmp_path / "ckpt"), load_file(str(hf["context"] / "model.safetensors"))
    for side in (ckpt.question_encoder.question_encoder, ckpt.ctx_encoder.ctx_encoder):
        loaded = side.state_dict()
        assert len(loaded) == len(source) and all(torch.equal(loaded[k.removeprefix("ctx_encoder.")], v) for k, v in source.items())


# --- generators: BART folders ------------------------------------------------------------------------------


def test_bart_folder_loads_with_its_own_tokenizer(hf, tmp_path):
    from lewisrag.data.pretrained import load_generator

    model, tok = load_generator(hf["bart"])
    assert type(model).__name__ == "BartForConditionalGeneration"
    assert tok.get_vocab() == json.loads((hf["bart"] / "vocab.json").read_text())
    ids = tok(["Who is the leader?"])["input_ids"][0]
    assert ids[0] == 0 and ids[-1] == 2  # <s> ... </s>, as BART's tokenizer writes it
    assert model.generation_config.forced_bos_token_id == 0 and model.generation_config.no_repeat_ngram_size == 3
    d = _copy_with(hf["bart"], tmp_path / "extra", add={"model.unused.weight": torch.zeros(2)})
    with pytest.raises(InputError, match="model.unused.weight"):
        load_generator(d)
    # facebook/bart-base has no tokenizer_config.json either: config.json's model_type picks BART's tokenizer
    d = shutil.copytree(hf["bart"], tmp_path / "bare")
    (d / "tokenizer_config.json").unlink()
    bare = load_generator(d)[1]
    assert bare.get_vocab() == tok.get_vocab() and bare(["Who is the leader?"])["input_ids"][0] == ids


def _rag_flags(hf, out: Path) -> list:
    qa = hf["corpus"]["qa"]
    return ["train", "rag", "--index", hf["index"], "--encoder", hf["question"], "--generator", hf["bart"], "--train", qa,
            "--dev", qa, "--out", out, "--steps", 2, "--n-docs", 2, "--batch-size", 4, "--lr", 1e-3,
            "--max-combined-length", 64, "--max-target-length", 16, "--eval-every", 2, "--eval-questions", 4,
            "--save-every", 2, "--json"]


def test_train_rag_from_a_dpr_question_encoder_folder_and_a_bart_folder(hf, monkeypatch, capsys, tmp_path):
    from lewisrag.index.encoders import load_question_encoder
    from lewisrag.training.checkpoint import load_trained

    code, _, err = run_main(monkeypatch, capsys, *_rag_flags(hf, tmp_path / "unpaired"))
    assert code == 2 and "--context-encoder" in err and not (tmp_path / "unpaired").exists(), err
    with one_thread():
        code, out, err = run_main(monkeypatch, capsys, *_rag_flags(hf, tmp_path / "run"), "--context-encoder", hf["context"])
    assert code == 0, err
    assert json.loads(out)["steps"] == 2
    manifest = json.loads((hf["index"] / "manifest.json").read_text())
    rag = json.loads((tmp_path / "run" / "final" / "rag.json").read_text())
    assert rag["settings"]["index_fingerprint"] == manifest["encoder"]["ctx_fingerprint"]
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["context_encoder"] == str(hf["context"])
    model, tokenizers = load_trained(tmp_path / "run" / "final")
    assert tokenizers.generator.get_vocab() == json.loads((hf["bart"] / "vocab.json").read_text())
    start = load_question_encoder(hf["question"]).question_encoder.state_dict()
    trained = model.question_encoder.state_dict()
    assert set(trained) == set(start) and any(not torch.equal(trained[k], start[k]) for k in start)  # it trained
    # the trained model answers from the index it was trained on, its pair recorded
    code, out, err = run_main(monkeypatch, capsys, "ask", "--model", tmp_path / "run" / "final", "--index", hf["index"],
                              hf["qa"][0].question, "--n-docs", 2, "--json")
    assert code == 0, err


def test_train_stitched_and_closed_book_from_a_bart_folder(hf, monkeypatch, capsys, tmp_path):
    from lewisrag.training.closed_book import ClosedBookConfig, train_closed_book

    with one_thread():
        code, out, err = run_main(monkeypatch, capsys, "train", "stitched", "--index", hf["index"], "--encoder", hf["question"],
                                  "--context-encoder", hf["context"], "--generator", hf["bart"], "--train", hf["corpus"]["qa"],
                                  "--out", tmp_path / "stitched", "--steps", 1, "--n-docs", 2, "--batch-size", 2, "--json")
        assert code == 0, err
        summary = train_closed_book(ClosedBookConfig(generator=str(hf["bart"]), train=str(hf["corpus"]["qa"]), steps=1,
                                                     batch_size=2), tmp_path / "closed")
    assert json.loads(out)["steps"] == 1 and summary
