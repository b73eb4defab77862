"""How passages become a DPR context encoder's input (`index.encoders.passage_encoding`): DPR's own
for transformers DPR folders and what `train dpr` starts from them, lewisrag's pair for its own
checkpoints, unchanged; a title that fills the token limit; encoders saved in half precision.

Each of these once went wrong: a facebook/dpr-ctx_encoder-* folder encoded passages with the text in
segment 1 and an empty title as `[CLS] [SEP] text [SEP]` (DPR, which made the encoder and wiki_dpr's
vectors, puts every token in segment 0 and encodes the text alone); a title as long as the limit ended
`index build` and `train dpr` in the tokenizers library's bare Exception (exit 3); a bf16 folder
loaded in bf16, and its fingerprint was not its float32 copy's.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from conftest import run_main
from hf_layouts import dpr_pair
from lewisrag.data.io import InputError
from lewisrag.data.records import Passage, read_passages, read_qa
from lewisrag.index.dense import DenseBuildConfig, DenseIndex, build_dense_index
from lewisrag.index.encoders import (ENCODING_KEY, DPRCheckpoint, context_fingerprint, encode_texts, load_context_encoder,
                                     tokenize_texts)
from lewisrag.training.configs import DPRTrainConfig
from lewisrag.training.dpr import train_dpr

TINY = dict(vocab_size=300, hidden_size=32, layers=1, heads=2, batch_size=8, device="cpu")
PASSAGES = [("Valdoria", "The capital of Valdoria is Marn."), ("", "A passage without a title."),
            ("Orlin", "Its leader is Tam Vey, elected in 1850.")]


@pytest.fixture(scope="module")
def pair(tiny_corpus, tmp_path_factory):
    texts = [p.title + " " + p.text for p in read_passages(tiny_corpus["passages"])]
    return dpr_pair(tmp_path_factory.mktemp("hub"), texts)


@pytest.fixture(scope="module")
def scratch(tiny_corpus, tmp_path_factory):
    """A DPR trained from scratch, as the demo's is."""
    out = tmp_path_factory.mktemp("scratch") / "ckpt"
    train_dpr(DPRTrainConfig(steps=3, **TINY), read_qa(tiny_corpus["qa"]), read_passages(tiny_corpus["passages"]), out)
    return out


def dpr_reference(ckpt: DPRCheckpoint, passages, max_length: int):
    """Vectors as facebookresearch/DPR makes them (BertTensorizer.text_to_tensor, then
    generate_dense_embeddings.py): `encode(title, text_pair=text, truncation=True)` when there is a
    title, else `encode(text)`; segment ids all zero."""
    out = []
    for title, text in passages:
        ids = ckpt.tokenizer.encode(title, text_pair=text, truncation=True, max_length=max_length) if title else \
            ckpt.tokenizer.encode(text, truncation=True, max_length=max_length)
        ids = torch.tensor([ids])
        with torch.inference_mode():
            out.append(ckpt.ctx_encoder(input_ids=ids, attention_mask=torch.ones_like(ids),
                                        token_type_ids=torch.zeros_like(ids)).pooler_output[0])
    return torch.stack(out).numpy()


def spy_segments(monkeypatch) -> list:
    """The token_type_ids of every DPRContextEncoder forward pass from now on (None: not passed)."""
    from transformers import DPRContextEncoder

    seen, forward = [], DPRContextEncoder.forward

    def spy(self, input_ids=None, attention_mask=None, token_type_ids=None, **kw):
        seen.append(token_type_ids)
        return forward(self, input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, **kw)

    monkeypatch.setattr(DPRContextEncoder, "forward", spy)
    return seen


def test_a_transformers_context_folder_encodes_passages_as_dpr_did(pair):
    ckpt = load_context_encoder(pair["context"])
    assert ckpt.passage_encoding == "dpr"
    batch = tokenize_texts(ckpt.tokenizer, PASSAGES, 64)
    assert not batch["token_type_ids"].any()  # every segment id 0
    alone = ckpt.tokenizer(PASSAGES[1][1])["input_ids"]  # [CLS] text [SEP]: no empty title before it
    assert batch["input_ids"][1, : len(alone)].tolist() == alone and not batch["attention_mask"][1, len(alone):].any()
    vectors = encode_texts(ckpt.ctx_encoder, ckpt.tokenizer, PASSAGES, max_length=64)
    assert vectors == pytest.approx(dpr_reference(ckpt, PASSAGES, 64), abs=1e-5)


def test_a_lewisrag_checkpoint_keeps_its_pair_encoding_exactly(scratch):
    """lewisrag's own checkpoints trained, and their indexes were built, with the text in segment 1
    and an empty title kept: their tokens are the call they always were."""
    ckpt = DPRCheckpoint.load(scratch)
    assert ckpt.passage_encoding == "pair"
    titles, texts = [t for t, _ in PASSAGES], [x for _, x in PASSAGES]
    before = ckpt.tokenizer(titles, texts, truncation="only_second", max_length=12, padding=True, return_tensors="pt")
    after = tokenize_texts(ckpt.tokenizer, PASSAGES, 12)
    assert {k: v.tolist() for k, v in after.items()} == {k: v.tolist() for k, v in before.items()}
    assert after["token_type_ids"].max() == 1


def test_train_dpr_from_a_dpr_folder_trains_mines_and_records_dprs_encoding(pair, tiny_corpus, tmp_path, monkeypatch):
    """A DPR started from facebook's encoder must read passages in training, and mine its own
    negatives, as its index will encode them: in DPR's encoding, which the checkpoint records."""
    seen = spy_segments(monkeypatch)
    passages = read_passages(tiny_corpus["passages"])
    out = tmp_path / "ckpt"
    train_dpr(DPRTrainConfig(init=str(pair["context"]), steps=2, batch_size=8, device="cpu", self_negatives_at=0.5),
              read_qa(tiny_corpus["qa"]), passages, out)
    assert len(seen) >= 3 and all(t is not None and not t.any() for t in seen)  # 2 steps and the mining pass
    assert json.loads((out / "tokenizer" / "tokenizer_config.json").read_text())[ENCODING_KEY] == "dpr"
    assert DPRCheckpoint.load(out).passage_encoding == "dpr"


def test_a_bert_like_start_builds_its_index_in_the_segments_it_trained_in(tiny_corpus, tmp_path, monkeypatch):
    """A BERT-like start trains with the text in segment 1 (lewisrag's pair encoding); its tokenizer,
    saved without token_type_ids among its model_input_names, reloaded without them, and its index
    was encoded all in segment 0."""
    from transformers import BertConfig, BertModel

    from hf_layouts import bert_tokenizer

    passages = read_passages(tiny_corpus["passages"])
    tok = bert_tokenizer([p.title + " " + p.text for p in passages], tmp_path / "bert")
    BertModel(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                         max_position_embeddings=128)).save_pretrained(tmp_path / "bert")
    seen = spy_segments(monkeypatch)
    train_dpr(DPRTrainConfig(init=str(tmp_path / "bert"), steps=1, batch_size=8, device="cpu"), read_qa(tiny_corpus["qa"]),
              passages, tmp_path / "ckpt")
    trained, seen[:] = list(seen), []
    build_dense_index(passages[:8], tmp_path / "ckpt", tmp_path / "idx", DenseBuildConfig(device="cpu"))
    assert trained and seen and all(t is not None and t.max() == 1 for t in trained + seen)  # every passage has a title


def test_a_converted_dpr_pair_builds_the_index_dpr_would(pair, tiny_corpus, tmp_path):
    """`train dpr --init-question/--init-context --steps 0` converts a pair: its index holds DPR's vectors."""
    train_dpr(DPRTrainConfig(init_question=str(pair["question"]), init_context=str(pair["context"]), steps=0, batch_size=8,
                             device="cpu"), [], [], tmp_path / "conv")
    passages = read_passages(tiny_corpus["passages"])[:6]
    build_dense_index(passages, tmp_path / "conv", tmp_path / "idx", DenseBuildConfig(device="cpu"))
    index = DenseIndex.load(tmp_path / "idx")
    assert index.manifest["encoder"]["passage_encoding"] == "dpr"
    reference = dpr_reference(load_context_encoder(pair["context"]), [(p.title, p.text) for p in passages], 128)
    assert np.asarray(index.embeddings) == pytest.approx(reference, abs=1e-5)


def test_a_rag_models_context_encoder_keeps_the_encoding_it_was_trained_in(pair, tmp_path):
    """`train rag --train-context-encoder` saves a transformers folder in MODEL/context_encoder: one saved
    before the encoding was recorded was trained in lewisrag's pair encoding, and is read so."""
    model = tmp_path / "model"
    shutil.copytree(pair["context"], model / "context_encoder")
    (model / "rag.json").write_text("{}")
    assert load_context_encoder(model / "context_encoder").passage_encoding == "pair"
    config = model / "context_encoder" / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), ENCODING_KEY: "dpr"}))
    assert load_context_encoder(model / "context_encoder").passage_encoding == "dpr"
    config.write_text(json.dumps({**json.loads(config.read_text()), ENCODING_KEY: "segments"}))
    with pytest.raises(InputError, match=f"tokenizer_config.json: field '{ENCODING_KEY}'"):
        load_context_encoder(model / "context_encoder")


@pytest.mark.parametrize("which", ["hub", "scratch"])
def test_a_title_as_long_as_the_limit_is_cut_not_a_crash(which, pair, scratch, tmp_path, monkeypatch, capsys):
    encoder = pair["context"] if which == "hub" else scratch
    ckpt = load_context_encoder(encoder)
    long_title = " ".join(["mountain river country"] * 60)  # some 180 tokens, past the 128 the encoders read
    batch = tokenize_texts(ckpt.tokenizer, [(long_title, "short text"), ("Orlin", "a capital")], 16)
    assert batch["input_ids"].shape == (2, 16) and batch["attention_mask"][0].all()
    rows = [{"id": f"p{i}", "title": t, "text": x} for i, (t, x) in enumerate(PASSAGES)]
    rows.append({"id": "long", "title": long_title, "text": "short text"})
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", tmp_path / "p.jsonl", "--encoder", encoder,
                            "--out", tmp_path / "idx", "--device", "cpu")
    assert code == 0, err
    assert DenseIndex.load(tmp_path / "idx").manifest["n_passages"] == 4


def test_train_dpr_and_its_mining_cut_a_long_title(tiny_corpus, tmp_path):
    passages = list(read_passages(tiny_corpus["passages"]))
    passages[0] = Passage(passages[0].id, " ".join(["mountain"] * 40), passages[0].text)  # past p_max_length 24
    train_dpr(DPRTrainConfig(steps=2, p_max_length=24, self_negatives_at=0.5, **TINY), read_qa(tiny_corpus["qa"]), passages,
              tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "lewisrag_dpr.json").is_file()


def test_an_encoder_saved_in_bf16_loads_in_float32(pair, tmp_path):
    """transformers 5 loads a checkpoint in the dtype it was saved in: a bf16 folder encoded in bf16, and
    `--context-encoder` fingerprinted other bytes than `train dpr --steps 0` converted."""
    from transformers import DPRContextEncoder

    folder = tmp_path / "bf16"
    shutil.copytree(pair["context"], folder)
    DPRContextEncoder.from_pretrained(pair["context"], dtype=torch.float32).to(torch.bfloat16).save_pretrained(folder)
    ckpt = load_context_encoder(folder)
    assert next(ckpt.ctx_encoder.parameters()).dtype == torch.float32
    assert context_fingerprint(folder) == ckpt.ctx_fingerprint
    train_dpr(DPRTrainConfig(init=str(folder), steps=0, batch_size=8, device="cpu"), [], [], tmp_path / "conv")
    converted = DPRCheckpoint.load(tmp_path / "conv")
    assert converted.ctx_fingerprint == ckpt.ctx_fingerprint
    assert next(converted.ctx_encoder.parameters()).dtype == torch.float32


def test_a_lewisrag_checkpoint_saved_in_bf16_loads_in_float32(scratch, tmp_path):
    from transformers import DPRContextEncoder, DPRQuestionEncoder

    ckpt = shutil.copytree(scratch, tmp_path / "bf16")
    for cls, side in ((DPRQuestionEncoder, "question_encoder"), (DPRContextEncoder, "ctx_encoder")):
        cls.from_pretrained(ckpt / side, dtype=torch.float32).to(torch.bfloat16).save_pretrained(ckpt / side)
    loaded = DPRCheckpoint.load(ckpt)
    assert {p.dtype for m in (loaded.question_encoder, loaded.ctx_encoder) for p in m.parameters()} == {torch.float32}


def test_verify_encodes_afresh_as_the_index_was_built(pair, tiny_corpus, tmp_path):
    """`index verify` re-encodes passages to compare with the stored vectors: an index built before its
    manifest recorded the passage encoding was built in lewisrag's pair encoding, also from a
    transformers DPR folder, which now reads as "dpr". Checked in the folder's encoding, such an index
    was called damaged (its vectors are those of another encoding)."""
    from lewisrag.index.verify import verify_index

    passages = read_passages(tiny_corpus["passages"])[:8]
    as_pair = tmp_path / "as_pair"
    shutil.copytree(pair["context"], as_pair)
    config = as_pair / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), ENCODING_KEY: "pair"}))
    build_dense_index(passages, as_pair, tmp_path / "old", DenseBuildConfig(device="cpu"))
    manifest_path = tmp_path / "old" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    assert manifest["encoder"].pop("passage_encoding") == "pair" and manifest["encoder"].pop("tokenizer_fingerprint")
    manifest_path.write_text(json.dumps(manifest))  # as an index built before the fields were recorded
    assert load_context_encoder(pair["context"]).passage_encoding == "dpr"  # the folder's own, which the build did not use
    checks = verify_index(tmp_path / "old", encoder=pair["context"])["checks"]
    assert any(c["check"] == "encoding" and "cosine" in c["result"] for c in checks), checks
    build_dense_index(passages, pair["context"], tmp_path / "new", DenseBuildConfig(device="cpu"))  # recorded: "dpr"
    assert DenseIndex.load(tmp_path / "new").manifest["encoder"]["passage_encoding"] == "dpr"
    checks = verify_index(tmp_path / "new", encoder=as_pair)["checks"]  # the same weights, told "pair": the manifest's wins
    assert any(c["check"] == "encoding" and "cosine" in c["result"] for c in checks), checks
