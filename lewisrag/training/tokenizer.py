"""A deterministic WordPiece vocabulary, built from counted character n-grams.

Why not `tokenizers`' own trainers: their WordPiece/BPE trainers break ties between equally
frequent merges in hash-map order, so training twice on the same text gives different
vocabularies (measured: three runs, three vocabularies), and then different weights — and the
project promises that the same seed on the same data gives the same `results.json`.

The vocabulary here: the special tokens, every character (word-initial and `##` continuation),
then the n-grams of words ranked by how many characters they save, `count * (len - 1)`, ties
broken alphabetically. Tokenizing is `tokenizers`' WordPiece (greedy longest match) after BERT's
normalizer and pre-tokenizer, which lowercase and put CJK characters one per token.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def wordpiece_vocab(texts: Iterable[str], vocab_size: int, max_piece: int = 10,
                    specials: Sequence[str] = BERT_SPECIALS, lowercase: bool = True) -> list[str]:
    """The vocabulary (a list, ids in order) for `texts`: `vocab_size` entries, fewer when the text
    has fewer pieces, more when its characters alone need more (every one is kept, twice: a corpus of
    many Chinese characters), since a character missing from it would read as [UNK].

    "abab" saves 3 characters once; "ab" (twice), "aba" and "##bab" save 2; ties go alphabetically:

    >>> wordpiece_vocab(["abab ab"], 9, specials=["[UNK]"])
    ['[UNK]', 'a', 'b', '##a', '##b', 'abab', '##bab', 'ab', 'aba']
    """
    norm = normalizers.BertNormalizer(lowercase=lowercase)
    pre = pre_tokenizers.BertPreTokenizer()
    words: Counter[str] = Counter()
    for text in texts:
        words.update(w for w, _ in pre.pre_tokenize_str(norm.normalize_str(text)))
    alphabet = sorted({ch for w in words for ch in w})
    vocab = [*specials, *alphabet, *("##" + ch for ch in alphabet)]
    pieces: Counter[str] = Counter()
    for w, c in words.items():
        for i in range(len(w)):
            for j in range(i + 2, min(len(w), i + max_piece) + 1):
                pieces[("##" if i else "") + w[i:j]] += c
    ranked = sorted(pieces.items(), key=lambda kv: (-kv[1] * (len(kv[0].removeprefix("##")) - 1), kv[0]))
    seen = set(vocab)
    for piece, _ in ranked:
        if len(vocab) >= vocab_size:
            break
        if piece not in seen:
            vocab.append(piece)
            seen.add(piece)
    return vocab


def bert_wordpiece_tokenizer(texts: Iterable[str], vocab_size: int):
    """A BERT-style PreTrainedTokenizerFast (`[CLS] a [SEP] b [SEP]`) with a deterministic vocabulary."""
    vocab = wordpiece_vocab(texts, vocab_size)
    tok = Tokenizer(models.WordPiece({p: i for i, p in enumerate(vocab)}, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls_id, sep_id = vocab.index("[CLS]"), vocab.index("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    tok.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]",
                                   model_input_names=["input_ids", "token_type_ids", "attention_mask"])
