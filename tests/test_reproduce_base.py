"""`lewisrag reproduce --preset base` end to end on local assets in the hub's own layouts: a tiny
DPRQuestionEncoder / DPRContextEncoder pair and a BART folder (tests/hf_layouts.py), nq_open
Parquet QA files, wiki_dpr-schema passages as a `datasets` save_to_disk folder (snapshot A; also as
the hub's folder of Parquet shards) and JSONL (snapshot B), with questions about each snapshot for
the swap matrix.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import one_thread, run_main, write_jsonl
from hf_layouts import bart, dpr_pair
from lewisrag.data.io import InputError
from lewisrag.data.records import read_passages, read_qa
from lewisrag.index.encoders import encode_texts, load_context_encoder

NQ_OPEN = pa.schema([("question", pa.string()), ("answer", pa.list_(pa.string()))])


def _nq_open(path: Path, examples) -> Path:
    rows = [{"question": ex.question, "answer": list(ex.answers)} for ex in examples]
    pq.write_table(pa.Table.from_pylist(rows, schema=NQ_OPEN), path)
    return path


@pytest.fixture(scope="module")
def assets(tiny_corpus, tmp_path_factory) -> dict:
    import datasets

    root = tmp_path_factory.mktemp("base_assets")
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    texts = [f"{p.title} {p.text}" for p in passages] + [q.question for q in qa]
    with one_thread():
        pair = dpr_pair(root, texts)
        gen = bart(root, texts)
    features = datasets.Features({"id": datasets.Value("string"), "text": datasets.Value("string"),
                                  "title": datasets.Value("string")})
    ds = datasets.Dataset.from_dict({"id": [p.id for p in passages], "text": [p.text for p in passages],
                                     "title": [p.title for p in passages]}, features=features)
    ds.save_to_disk(str(root / "psgs_a"))
    # snapshot A as the hub holds wiki_dpr: Parquet shards with the context encoder's stored vectors
    shards = root / "wiki_dpr" / "data" / "psgs_w100" / "nq"
    shards.mkdir(parents=True)
    ctx = load_context_encoder(pair["context"])
    vectors = encode_texts(ctx.ctx_encoder, ctx.tokenizer, [(p.title, p.text) for p in passages],
                           max_length=int(ctx.meta["max_length"]))
    with_vectors = ds.add_column("embeddings", vectors.tolist(), feature=datasets.List(datasets.Value("float32")))
    for k in range(2):
        with_vectors.shard(2, k, contiguous=True).to_parquet(str(shards / f"train-{k:05d}-of-00002.parquet"))
    # snapshot B: every leader replaced
    b = [{"id": p.id, "title": p.title, "text": p.text.replace("Its leader is", "Its new leader is Ren")} for p in passages]
    return {**pair, "bart": gen, "passages": root / "psgs_a", "shards": shards, "vectors": vectors, "passages_b": write_jsonl(root / "psgs_b.jsonl", b),
            "train": _nq_open(root / "train.parquet", qa), "dev": _nq_open(root / "dev.parquet", qa[:6]),
            "test": _nq_open(root / "test.parquet", qa[:6]), "questions_a": tiny_corpus["qa"],
            "questions_b": write_jsonl(root / "qb.jsonl", [{"question": q.question, "answers": ["Ren"]} for q in qa[:4]])}


def _flags(a: dict, out: Path, *extra) -> list:
    return ["reproduce", "--preset", "base", "--out", out, "--question-encoder", a["question"], "--context-encoder",
            a["context"], "--generator", a["bart"], "--train", a["train"], "--dev", a["dev"], "--test", a["test"],
            "--passages", a["passages"], "--steps", 2, "--max-train", 16, "--max-passages", 24, *extra]


def finished_base_run(a: dict, out: Path) -> Path:
    """`lewisrag reproduce` with `_flags(a, out)` run to the end in this process on one thread, for a
    module's fixture (which the function-scoped monkeypatch and capsys cannot serve)."""
    from _pytest.monkeypatch import MonkeyPatch

    from lewisrag.cli import main

    with MonkeyPatch.context() as mp, one_thread():
        mp.setattr("sys.argv", ["lewisrag", *map(str, _flags(a, out))])
        with pytest.raises(SystemExit) as exit_info:
            main()
    assert not exit_info.value.code
    return out


def test_base_runs_end_to_end_on_local_assets(assets, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    with one_thread():
        code, stdout, err = run_main(monkeypatch, capsys, *_flags(assets, out), "--passages-b", assets["passages_b"],
                                     "--questions-a", assets["questions_a"], "--questions-b", assets["questions_b"], "--json")
    assert code == 0, err
    r = json.loads((out / "results.json").read_text())
    for system in ("rag_token", "rag_sequence", "closed_book"):
        em = r["qa"][system]["exact_match"]
        assert 0 <= em <= 1 and r["qa"][system]["n"] == 6 and 0 <= r["qa"][system]["f1"] <= 1
    a = r["config"]["assets"]
    assert a["question_encoder"] == str(assets["question"]) and a["context_encoder"] == str(assets["context"])
    assert a["generator"] == str(assets["bart"]) and a["passages"] == str(assets["passages"])
    assert a["steps"] == 2 and a["max_train"] == 16 and a["max_passages"] == 24
    assert r["stages"]["rag_token"]["steps"] == 2 and r["stages"]["rag_token"]["n_train"] == 16
    assert r["stages"]["index_a"]["n_passages"] == 24 and r["stages"]["index_b"]["n_passages"] == 24
    assert r["stages"]["index_a"]["embeddings"] == "encoded" and "why_encoded" not in r["stages"]["index_a"]  # no vectors
    assert "gold_passage_ids" in r["retrieval"]["skipped"]  # nq_open has no gold passages
    assert {"world", "dpr", "bm25_a", "ablations", "stitched", "compare"} <= set(r["skipped"])
    assert "knowledge_update" not in r["skipped"] and set(r["knowledge_update"]) == {"rag_token", "rag_sequence"}
    assert set(r["knowledge_update"]["rag_token"]) == {"index_a", "index_b"}
    rag_cfg = json.loads((out / "rag_token" / "config.json").read_text())
    assert rag_cfg["context_encoder"] == str(assets["context"]) and rag_cfg["n_docs"] == 10
    report = (out / "report.md").read_text()
    assert "RAG-Token" in report and "Stages not run" in report and "`stitched`" in report
    s = json.loads(stdout)
    assert s["qa"] == r["qa"] and s["retrieval"] == r["retrieval"]


def test_missing_base_flags_are_named_and_other_presets_refuse_them(assets, tmp_path, monkeypatch, capsys):
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "base", "--out", tmp_path / "x",
                            "--generator", assets["bart"], "--train", assets["train"])
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1, err
    for flag in ("--question-encoder", "--context-encoder", "--dev", "--test", "--passages"):
        assert flag in lines[0]
    assert "--generator," not in lines[0] and not (tmp_path / "x").exists()
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", tmp_path / "y", "--steps", 2)
    assert code == 2 and "--steps" in err and not (tmp_path / "y").exists()


def test_wrong_model_folders_are_refused_before_any_stage(assets, tmp_path, monkeypatch, capsys):
    """A BART folder as the question encoder, the context side as the question side, a DPR folder as the
    generator: one line each, from config.json, and nothing written (not found after the index is built)."""
    swaps = [({"question": assets["bart"]}, "--question-encoder: not a DPR encoder folder"),
             ({"question": assets["context"]}, "--question-encoder: a DPRContextEncoder folder"),
             ({"context": assets["question"]}, "--context-encoder: a DPRQuestionEncoder folder"),
             ({"bart": assets["context"]}, "--generator: not a sequence-to-sequence generator folder")]
    for i, (swap, message) in enumerate(swaps):
        out = tmp_path / f"run{i}"
        code, _, err = run_main(monkeypatch, capsys, *_flags({**assets, **swap}, out))
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists()


def test_inputs_found_only_after_index_a_are_refused_before_any_stage(assets, tmp_path, monkeypatch, capsys):
    """A hub name as a model flag, encoders of two widths, and a swap flag without the other two each
    failed, or were found useless, only once index A was built (hours at full size; the corrected config
    then refused as a --resume of another run)."""
    other = dpr_pair(tmp_path / "wide", ["a question about a country", "a passage about it"], hidden=48)
    cases = [({"bart": "hf:facebook/bart-large"}, (), "--generator: a local folder is needed, not a hub name"),
             ({"question": "hf:facebook/dpr-question_encoder-single-nq-base"}, (), "--question-encoder: a local folder"),
             ({"question": other["question"]}, (), "--question-encoder gives 48-d vectors and --context-encoder 32-d"),
             ({}, ("--passages-b", assets["passages_b"]), "give all three or none (given: --passages-b)"),
             ({}, ("--questions-a", assets["questions_a"], "--questions-b", assets["questions_b"]),
              "give all three or none (given: --questions-a, --questions-b)")]
    for i, (swap, extra, message) in enumerate(cases):
        out = tmp_path / f"run{i}"
        code, _, err = run_main(monkeypatch, capsys, *_flags({**assets, **swap}, out, *extra))
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists()


def test_generation_settings_rag_cannot_decode_with_are_refused_before_any_stage(assets, tmp_path, monkeypatch, capsys):
    """A do_sample in the generator's generation_config.json failed at the rag_token stage, after the
    indexes were built."""
    gen = shutil.copytree(assets["bart"], tmp_path / "gen")
    file = gen / "generation_config.json"
    settings = json.loads(file.read_text()) if file.is_file() else {"decoder_start_token_id": 2}
    file.write_text(json.dumps({**settings, "do_sample": True}))
    out = tmp_path / "run"
    code, _, err = run_main(monkeypatch, capsys, *_flags({**assets, "bart": gen}, out))
    assert code == 2 and "generation_config.json" in err and "field 'do_sample'" in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_base_measures_recall_when_test_questions_name_gold_passages(assets, tiny_corpus, tmp_path, monkeypatch, capsys):
    """A test file in lewisrag's schema with gold_passage_ids gets recall@k; without --passages-b
    there is no index B and no swap matrix, both listed as skipped. The passages here are the hub's
    Parquet shards of snapshot A, read where they lie, and their stored vectors, which
    --context-encoder made, are copied into index A, not encoded again."""
    out = tmp_path / "run"
    flags = _flags(assets, out)
    flags[flags.index("--test") + 1] = tiny_corpus["qa"]
    flags[flags.index("--passages") + 1] = assets["shards"]
    with one_thread():
        code, stdout, err = run_main(monkeypatch, capsys, *flags)
    assert code == 0, err
    r = json.loads((out / "results.json").read_text())
    # --max-passages 24 keeps the corpus's first 24 passages: questions whose gold passages lie beyond
    # them are counted apart, not scored as misses at every k
    kept = {p.id for p in read_passages(tiny_corpus["passages"])[:24]}
    outside = sum(not kept & set(ex.gold_passage_ids) for ex in read_qa(tiny_corpus["qa"]))
    assert 0 < outside < 30 and r["retrieval"]["gold_not_indexed"] == outside and r["retrieval"]["n"] == 30 - outside
    assert 0 <= r["retrieval"]["recall_at_1"] <= r["retrieval"]["recall_at_20"] <= 1
    assert f"{outside} questions whose gold passages all lie outside" in (out / "report.md").read_text()
    assert r["skipped"]["index_b"] == "no --passages-b" and r["skipped"]["knowledge_update"] == "no --passages-b"
    assert "knowledge_update" not in r and not (out / "index_b").exists() and r["qa"]["rag_token"]["n"] == 30
    assert "not run: knowledge_update" in stdout and "recall@1" in (out / "report.md").read_text()
    assert r["stages"]["index_a"]["embeddings"] == "reused"
    np.testing.assert_array_equal(np.load(out / "index_a" / "embeddings.npy"), assets["vectors"][:24])


def test_max_passages_checks_only_the_passages_it_indexes(assets, tiny_corpus, tmp_path):
    """A bad row past --max-passages does not stop the run (its 21 M rows are not all decoded first)."""
    from lewisrag.experiments.base import BaseAssets, prepare

    rows = [p.to_dict() for p in read_passages(tiny_corpus["passages"])]
    rows[40]["text"] = " "
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "p.parquet")
    given = BaseAssets(question_encoder=str(assets["question"]), context_encoder=str(assets["context"]),
                       generator=str(assets["bart"]), train=str(assets["train"]), dev=str(assets["dev"]),
                       test=str(assets["test"]), passages=str(tmp_path / "p.parquet"), max_passages=24)
    assert len(prepare(given)["passages"]["a"]) == 24
    with pytest.raises(InputError, match=r"p\.parquet:41: field 'text': empty"):
        prepare(BaseAssets(**{**given.__dict__, "max_passages": 50}))


def test_stored_vectors_another_encoder_made_are_encoded_again(assets, tmp_path):
    """Vectors that --context-encoder did not make are not copied: the index is encoded, and why is recorded."""
    from hf_layouts import dpr_pair
    from lewisrag.data.passages import open_passages
    from lewisrag.experiments.base import _stored_vectors

    table = open_passages(assets["shards"])
    assert _stored_vectors(table, assets["context"]) == (True, None)
    other = dpr_pair(tmp_path, [p.text for p in table], seed=5)
    reuse, why = _stored_vectors(table, other["context"])
    assert not reuse and why.startswith("the stored vectors were not made by --context-encoder (the embeddings were not made")
    assert _stored_vectors(open_passages(assets["passages"]), assets["context"]) == (False, None)  # no vectors at all


def test_the_test_split_is_answered_with_the_k_each_model_trained_with(monkeypatch, tmp_path):
    """The base preset caps K at the passages indexed (--max-passages 6 trains K=6); answering the
    test split asked for the preset's K=10 all the same, after the training time was spent."""
    from lewisrag.experiments import stages
    from lewisrag.experiments.presets import get_preset

    asked = {}
    monkeypatch.setattr(stages, "load_trained", lambda path, device: ("model", "tokenizers"))
    monkeypatch.setattr(stages, "answer_questions", lambda *a, **kw: asked.update(kw) or ["a"])
    stages._answers(tmp_path, get_preset("base"), "rag_token", ["q?"], 8, lambda n: None, index=None)
    assert "n_docs" in asked and asked["n_docs"] is None  # the model's own K (RagSettings.n_docs)


def test_a_test_file_with_nothing_to_score_is_refused_before_any_stage(assets, tmp_path, monkeypatch, capsys):
    """Only questions with an answer are scored: a --test file without any gave null scores, after training."""
    no_answers = write_jsonl(tmp_path / "test.jsonl", [{"id": f"q{i}", "question": f"who leads {i}?", "answers": [], "category": "not_in_kb"}
                                                       for i in range(3)])
    out = tmp_path / "run"
    code, _, err = run_main(monkeypatch, capsys, *_flags({**assets, "test": no_answers}, out))
    assert code == 2 and "--test: none of its 3 questions has an answer to score" in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


@pytest.mark.parametrize(("device", "precision", "batch"), [("cpu", "no", 64), ("cuda", "bf16", 256)])
def test_the_index_stage_encodes_on_a_gpu_as_the_rag_runs_train(monkeypatch, tmp_path, device, precision, batch):
    """The base preset's index stages encoded in float32, 64 passages a batch, on a GPU too: the
    2,871 passages/s docs/real-data.md quotes for 21M passages were measured in bf16 at 256."""
    from lewisrag.experiments import base
    from lewisrag.experiments.base import BaseAssets
    from lewisrag.experiments.presets import get_preset

    built = {}
    monkeypatch.setattr(base, "resolve_device", lambda name: device)
    monkeypatch.setattr(base, "build_dense_index", lambda passages, enc, out, cfg, *a, **kw: built.update(cfg=cfg)
                        or {"n_passages": 1, "content_hash": "h"})
    preset = get_preset("base")
    assert preset.rag.mixed_precision == "bf16"
    base._dense(tmp_path, preset, "a", ["p"], BaseAssets(context_encoder="ctx"), lambda *a: None)
    assert (built["cfg"].device, built["cfg"].mixed_precision, built["cfg"].batch_size) == (preset.device, precision, batch)
