"""docs/real-data.md followed end to end at toy size: the assets as a user without the hub would hold
them after the doc's download commands (a DPR pair and a BART folder in transformers' layouts, nq_open
written by `datasets`' to_parquet, wiki_dpr as the hub's Parquet shards with their `embeddings`
column), the doc's commands on them, and the export loaded back into transformers.

Each test here pins a place where following the doc went wrong.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import one_thread, run_main
from hf_layouts import bart, dpr_pair
from lewisrag.data.records import read_passages, read_qa

# facebook/bart-large's generation_config.json as transformers 4 wrote it: no output_attentions or
# output_hidden_states (transformers 5 writes them), so they read None on load
BART_LARGE_GENERATION = {"_from_model_config": True, "bos_token_id": 0, "decoder_start_token_id": 2, "early_stopping": True,
                         "eos_token_id": 2, "forced_bos_token_id": 0, "forced_eos_token_id": 2, "no_repeat_ngram_size": 3,
                         "num_beams": 4, "pad_token_id": 1, "transformers_version": "4.27.0.dev0"}


@pytest.fixture(scope="module")
def assets(tiny_corpus, tmp_path_factory) -> dict:
    """`assets/` as docs/real-data.md's section 1 leaves it: q/, c/, bart/, nq_train.parquet, nq_dev.parquet and
    wiki_dpr/data/psgs_w100/nq/train-0000K-of-00002.parquet (with the context encoder's vectors)."""
    import datasets

    from lewisrag.index.encoders import encode_texts, load_context_encoder

    root = tmp_path_factory.mktemp("assets")
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    texts = [f"{p.title} {p.text}" for p in passages] + [q.question for q in qa]
    with one_thread():
        pair = dpr_pair(root, texts)
        gen = bart(root, texts)
    (gen / "generation_config.json").write_text(json.dumps(BART_LARGE_GENERATION, indent=2))
    nq = datasets.Features({"question": datasets.Value("string"), "answer": datasets.List(datasets.Value("string"))})
    rows = [{"question": q.question.lower().rstrip("?"), "answer": list(q.answers)} for q in qa]
    datasets.Dataset.from_list(rows[:24], features=nq).to_parquet(str(root / "nq_train.parquet"))
    datasets.Dataset.from_list(rows[24:], features=nq).to_parquet(str(root / "nq_dev.parquet"))
    ctx = load_context_encoder(pair["context"])
    with one_thread():
        vectors = encode_texts(ctx.ctx_encoder, ctx.tokenizer, [(p.title, p.text) for p in passages],
                               max_length=int(ctx.meta["max_length"]))
    features = datasets.Features({"id": datasets.Value("string"), "text": datasets.Value("string"),
                                  "title": datasets.Value("string"), "embeddings": datasets.List(datasets.Value("float32"))})
    ds = datasets.Dataset.from_dict({"id": [str(i + 1) for i in range(len(passages))], "text": [p.text for p in passages],
                                     "title": [p.title for p in passages], "embeddings": vectors.tolist()}, features=features)
    shards = root / "wiki_dpr" / "data" / "psgs_w100" / "nq"
    shards.mkdir(parents=True)
    for k in range(2):
        ds.shard(2, k, contiguous=True).to_parquet(str(shards / f"train-{k:05d}-of-00002.parquet"))
    return {**pair, "bart": gen, "train": root / "nq_train.parquet", "dev": root / "nq_dev.parquet", "shards": shards}


def _hf_generate(out: Path, questions: list[str], **kwargs) -> list[str]:
    """transformers' RagSequenceForGeneration.generate(**kwargs) on the exported folder, as the doc calls it."""
    import torch
    from transformers import RagRetriever, RagSequenceForGeneration, RagTokenizer

    tokenizer = RagTokenizer.from_pretrained(out)
    model = RagSequenceForGeneration.from_pretrained(out, retriever=RagRetriever.from_pretrained(out)).eval()
    enc = tokenizer.question_encoder(questions, padding=True, return_tensors="pt")
    with torch.no_grad():
        ids = model.generate(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], **kwargs)
    return tokenizer.batch_decode(ids, skip_special_tokens=True)


def test_a_sequence_export_from_bart_large_settings_names_only_decoding_settings(assets, tmp_path, monkeypatch, capsys):
    """`export`'s generate_kwargs for RAG-Sequence listed output_attentions=None and output_hidden_states=None
    beside the settings the reload loses, for any generator whose generation_config.json does not name them
    (bart-large's, written by transformers 4): they change what generate() returns, never the answer, and the
    printed advice told the user to pass them."""
    idx, run, out = tmp_path / "idx", tmp_path / "run", tmp_path / "exported"
    with one_thread():
        code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", assets["shards"], "--encoder",
                                assets["context"], "--out", idx, "--reuse-embeddings")
        assert code == 0, err
        code, _, err = run_main(monkeypatch, capsys, "train", "rag", "--variant", "sequence", "--index", idx, "--encoder",
                                assets["question"], "--context-encoder", assets["context"], "--generator", assets["bart"],
                                "--train", assets["train"], "--dev", assets["dev"], "--out", run, "--steps", 1,
                                "--batch-size", 4, "--n-docs", 2, "--eval-every", 0)
        assert code == 0, err
        code, stdout, err = run_main(monkeypatch, capsys, "export", "--model", run, "--index", idx, "--out", out, "--json")
    assert code == 0, err
    expected = {"num_beams": 1, "max_length": 32, "no_repeat_ngram_size": 3, "forced_bos_token_id": 0}
    assert json.loads(stdout)["generate_kwargs"] == expected
    meta = json.loads((out / "lewisrag_export.json").read_text())
    assert meta["generate_kwargs"] == expected and meta["beam_kwargs"] == {"early_stopping": True}
    code, stdout, err = run_main(monkeypatch, capsys, "export", "--model", run, "--index", idx, "--out", out)
    assert code == 0, err
    (note,) = [line for line in err.splitlines() if line.startswith("note:")]  # on stderr, one line; stdout: the result
    assert "note:" not in stdout
    assert "generate(num_beams=1, max_length=32, no_repeat_ngram_size=3, forced_bos_token_id=0)" in note, note
    assert "output_" not in note, note
    with one_thread():  # the documented call runs on the reloaded folder
        answers = _hf_generate(out, ["who is the leader of valdoria"], **meta["generate_kwargs"])
    assert len(answers) == 1
