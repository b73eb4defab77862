"""Transformers checkpoint folders in the hub's own layouts, built here from configs (no hub needed).

- `dpr_pair`: a tiny random DPRQuestionEncoder and DPRContextEncoder (hidden 32, 1 layer) laid out as
  facebook/dpr-question_encoder-single-nq-base and facebook/dpr-ctx_encoder-single-nq-base are:
  config.json naming the architecture, model.safetensors, and BERT's WordPiece tokenizer over a
  vocabulary trained on the given texts (vocab.txt, tokenizer_config.json, special_tokens_map.json;
  tokenizer.json in the question folder only, as some hub folders lack it).
- `bart`: a tiny random BartForConditionalGeneration laid out as facebook/bart-base is: config.json,
  generation_config.json (bart-base's decoding settings), model.safetensors, and a byte-level BPE
  trained on the texts saved as vocab.json + merges.txt with tokenizer_config.json, without tokenizer.json.
- `other_seq2seq`: a tiny random T5 or mBART with a BART folder's tokenizer: sequence-to-sequence models
  that RAG does not decode (its grouped decoder computes BART's decoder only) and `train stitched` trains.

Both are what `save_pretrained` writes (safetensors); each takes well under a second.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch

BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
BART_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def bert_tokenizer(texts: Sequence[str], out: Path, vocab_size: int = 400, max_length: int = 128):
    """transformers' BERT tokenizer (WordPiece in the `tokenizers` library, lowercasing) over a vocabulary
    trained on `texts`, saved in `out` as BertTokenizerFast writes it.

    The vocabulary comes from lewisrag's deterministic WordPiece trainer (`training.tokenizer`):
    `tokenizers`' own trainer breaks ties in hash-map order, so the fixture, and the random weights
    drawn for its size, would differ from run to run.
    """
    from transformers import BertTokenizerFast

    from lewisrag.training.tokenizer import wordpiece_vocab

    vocab = wordpiece_vocab(texts, vocab_size, specials=BERT_SPECIALS)
    tok = BertTokenizerFast(vocab={piece: i for i, piece in enumerate(vocab)}, do_lower_case=True,
                            model_max_length=max_length)
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(out)
    # the hub's DPR folders have it; transformers 5 no longer writes it (it reads it when there)
    (out / "special_tokens_map.json").write_text(json.dumps({"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                                                             "cls_token": "[CLS]", "mask_token": "[MASK]"}))
    if not (out / "vocab.txt").is_file():  # the hub's DPR folders always have it
        (out / "vocab.txt").write_text("".join(piece + "\n" for piece in vocab), encoding="utf-8")
    return tok


def dpr_pair(root: Path, texts: Sequence[str], seed: int = 0, hidden: int = 32, layers: int = 1, heads: int = 2,
             vocab_size: int = 400, init_std: float = 0.3, dropout: float = 0.0) -> dict[str, Path]:
    """{"question": folder, "context": folder}: a DPR pair with one tokenizer, different random weights.

    The weights are drawn at std 0.3 by default (transformers' 0.02 makes every [CLS] vector nearly
    the same, so rankings would hang on rounding) and dropout is off. `scripts/bench_gpu.py` builds
    DPR-base's shape with it (hidden 768, 12 layers, 12 heads, transformers' init and dropout).
    """
    from transformers import DPRConfig, DPRContextEncoder, DPRQuestionEncoder

    q_dir, c_dir = root / "dpr-question_encoder", root / "dpr-ctx_encoder"
    tok = bert_tokenizer(texts, q_dir, vocab_size=vocab_size, max_length=512 if layers > 1 else 128)
    c_dir.mkdir(parents=True, exist_ok=True)
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):  # no tokenizer.json: read from vocab.txt
        (c_dir / name).write_bytes((q_dir / name).read_bytes())
    cfg = DPRConfig(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                    intermediate_size=(4 if layers > 1 else 2) * hidden, max_position_embeddings=512 if layers > 1 else 128,
                    initializer_range=init_std, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
                    pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    DPRQuestionEncoder(cfg).save_pretrained(q_dir)
    torch.manual_seed(seed + 1)
    DPRContextEncoder(cfg).save_pretrained(c_dir)
    return {"question": q_dir, "context": c_dir}


def bart(root: Path, texts: Sequence[str], seed: int = 0, d_model: int = 16, layers: int = 1, heads: int = 2,
         vocab_size: int = 400, model_vocab: int | None = None, dropout: float = 0.0) -> Path:
    """A BART folder in facebook/bart-base's layout (vocab.json + merges.txt, no tokenizer.json).

    `model_vocab` (default: the tokenizer's size) gives the embedding and output layer the real
    checkpoints' 50265 rows while the tokenizer stays small; `scripts/bench_gpu.py` builds
    bart-large's shape with it (d_model 1024, 12+12 layers, 16 heads, dropout 0.1).
    """
    from tokenizers import ByteLevelBPETokenizer
    from transformers import BartConfig, BartForConditionalGeneration, BartTokenizerFast

    out = root / "bart"
    out.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(list(texts), vocab_size=vocab_size, min_frequency=1, special_tokens=BART_SPECIALS, show_progress=False)
    bpe.save_model(str(out))  # vocab.json, merges.txt
    tok = BartTokenizerFast.from_pretrained(out)
    tok.save_pretrained(out)
    (out / "tokenizer.json").unlink(missing_ok=True)
    assert (out / "vocab.json").is_file() and (out / "merges.txt").is_file()
    torch.manual_seed(seed)
    model = BartForConditionalGeneration(BartConfig(
        vocab_size=model_vocab or len(tok), d_model=d_model, encoder_layers=layers, decoder_layers=layers,
        encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=(4 if layers > 1 else 2) * d_model,
        decoder_ffn_dim=(4 if layers > 1 else 2) * d_model, max_position_embeddings=1024 if layers > 1 else 256,
        dropout=dropout, attention_dropout=0.0, activation_dropout=0.0, bos_token_id=0, pad_token_id=1, eos_token_id=2,
        decoder_start_token_id=2, forced_eos_token_id=2))
    # facebook/bart-base's generation_config.json
    model.generation_config.update(bos_token_id=0, decoder_start_token_id=2, eos_token_id=2, pad_token_id=1,
                                   forced_bos_token_id=0, forced_eos_token_id=2, no_repeat_ngram_size=3, num_beams=4,
                                   early_stopping=True)
    model.save_pretrained(out)
    return out


def other_seq2seq(kind: str, out: Path, tokenizer_from: Path, seed: int = 0) -> Path:
    """A tiny random T5ForConditionalGeneration (`kind` "t5") or MBartForConditionalGeneration ("mbart")
    in `out`, with the tokenizer of the BART folder `tokenizer_from` (ids: <s> 0, <pad> 1, </s> 2)."""
    from transformers import (AutoTokenizer, MBartConfig, MBartForConditionalGeneration, T5Config,
                              T5ForConditionalGeneration)

    tok = AutoTokenizer.from_pretrained(tokenizer_from)
    torch.manual_seed(seed)
    if kind == "t5":
        model = T5ForConditionalGeneration(T5Config(vocab_size=len(tok), d_model=16, d_kv=8, d_ff=32, num_layers=1,
                                                    num_heads=2, pad_token_id=1, eos_token_id=2, decoder_start_token_id=1))
    elif kind == "mbart":
        model = MBartForConditionalGeneration(MBartConfig(
            vocab_size=len(tok), d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=256,
            pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None))
    else:
        raise ValueError(f"kind must be t5 or mbart, got {kind!r}")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out
