"""RAG decoding: RAG-Token greedy/beam search and RAG-Sequence thorough and fast decoding.

Arguments mean what they mean in transformers' `RagTokenForGeneration.generate` and
`RagSequenceForGeneration.generate`, and the outputs are the same token ids, but for three deliberate
differences: RAG-Sequence's search reads padded contexts masked by their attention mask, as training does;
RAG-Token stops after max_new_tokens tokens, as every other transformers model does, where transformers'
RAG-Token generate ignores it and stops at max_length; and a max_length passed to generate beats a
max_new_tokens saved in the generation config (`resolve_settings`), where transformers' RAG-Sequence keeps
the saved max_new_tokens, so that `ask --max-length` means what it says whatever the checkpoint carries.
The work differs:

- every document is encoded once (not once per beam, nor once per candidate answer), and its
  cross-attention keys/values are shared by all rows reading it (`bart_decoder.py`);
- RAG-Sequence runs one beam search over all B·K documents at once, then scores every candidate
  under every document of its question in one batched decoder pass (transformers loops over
  questions in Python and reruns the whole model per question);
- RAG-Sequence *fast* decoding (the paper's §2.5): a candidate that a document's beam did not
  produce gets p(y|x,z) ≈ 0 under that document, so no extra forward pass is needed.

Shape alphabet: B questions, K docs, W beams, C candidates per question, T length, V vocab, D model.
"""

from __future__ import annotations

import copy
import json
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from transformers.generation import (
    ForcedBOSTokenLogitsProcessor, ForcedEOSTokenLogitsProcessor, GenerationMode, LogitsProcessorList,
    MinLengthLogitsProcessor, NoRepeatNGramLogitsProcessor,
)

from lewisrag.data.io import InputError
from lewisrag.rag_model import marginalize as M
from lewisrag.rag_model.bart_decoder import GroupedBartDecoder, reorder_cache
from lewisrag.rag_model.beam_search import Hypotheses, SearchSettings, beam_search, greedy

_UNSUPPORTED = {  # generation options transformers would honour and these searches do not
    "do_sample": False, "bad_words_ids": None, "encoder_no_repeat_ngram_size": 0, "min_new_tokens": None,
    "sequence_bias": None, "suppress_tokens": None, "begin_suppress_tokens": None, "num_beam_groups": 1,
    "exponential_decay_length_penalty": None, "repetition_penalty": 1.0, "remove_invalid_values": False,
    "renormalize_logits": False, "encoder_repetition_penalty": 1.0, "guidance_scale": 1.0, "max_time": None,
    "stop_strings": None, "watermarking_config": None, "constraints": None, "force_words_ids": None,
    # several answers per question are asked of `generate` (its num_return_sequences argument), never
    # read from a saved config: answering takes one row per question
    "num_return_sequences": 1,
    # contrastive search (penalty_alpha with top_k > 1), DoLa and assisted generation: other searches, which
    # transformers refuses for RAG; read as greedy search they changed every answer in silence
    "penalty_alpha": None, "dola_layers": None, "prompt_lookup_num_tokens": None, "assistant_early_exit": None,
    "use_mtp": False,
}
# options refused only where they select their search (transformers' get_generation_mode): penalty_alpha 0.0,
# or beside top_k 1 or beams, and dola_layers beside beams leave greedy or beam search as it was
_SELECTS = {"penalty_alpha": GenerationMode.CONTRASTIVE_SEARCH, "dola_layers": GenerationMode.DOLA_GENERATION}
LOGITS_CHUNK = 2**22  # logits elements scored at once in thorough decoding (16 MB of float32)
MIX_FLOOR = 2.0**-100  # smallest RAG-Token mixture probability summed as a probability (_token_mixture)


@dataclass
class Decoded:
    """Generated ids plus the evidence behind them (`return_evidence=True`)."""

    sequences: torch.Tensor  # (B*n, T) token ids, decoder start token first
    doc_posterior: torch.Tensor  # sequence: (B*n, K) p(z|x,y); token: (B*n, T, K), row t for sequences[:, t+1]
    # (B*n,) log p(y|x) as the decoder ranked it: length-penalised for RAG-Token beams; for RAG-Sequence,
    # thorough decoding's is −NLL as transformers computes it (label-smoothed when the model's
    # label_smoothing is set), fast decoding's the raw log-likelihood, never smoothed. Both keep
    # transformers' quirk: where the second target token is padding (an empty answer, its end token
    # alone) the prior p(z|x) is lost (marginalize.py), so such an answer's score can exceed log 1 = 0
    scores: torch.Tensor


_NONE_IS_SAVED = ("num_beams", "max_length")  # generate's own arguments, whose None means "the saved setting"


def resolve_settings(generation_config, **overrides):
    """transformers' GenerationConfig with `overrides` applied; unknown or unsupported options raise.

    An override of None sets the option to None (off, or transformers' default), as transformers'
    generate(**kwargs) does: generate(forced_eos_token_id=None) switches a saved one off. Only
    num_beams and max_length, named arguments of `generate`, read None as "keep the saved value".
    Overrides that leave no start token or no padding (each with its fallback) raise.
    """
    gc = copy.deepcopy(generation_config)
    given = {k: v for k, v in overrides.items() if v is not None or k not in _NONE_IS_SAVED}
    if "max_length" in given and "max_new_tokens" not in given:
        gc.max_new_tokens = None  # an explicit max_length beats a max_new_tokens saved in the model's config
    unused = gc.update(**given)
    if unused:
        raise ValueError(f"unknown generation arguments: {sorted(unused)}")
    bad = unsupported_option(gc)
    if bad:
        raise ValueError(f"generation option {bad[0]}={bad[1]!r} is not supported by RAG decoding")
    for pair, role in ((("decoder_start_token_id", "bos_token_id"), "to start decoding from"),
                       (("pad_token_id", "eos_token_id"), "to fill finished answers with")):
        # a saved config is checked as it loads (check_generation_config); these are overrides' doing
        if any(name in given for name in pair) and all(getattr(gc, name) is None for name in pair):
            raise ValueError(f"{pair[0]} and {pair[1]} are both None: no token {role}")
    return gc


def unsupported_option(gc) -> tuple[str, Any] | None:
    """(name, value) of the first option of `gc` that transformers would honour and these searches do
    not (`_UNSUPPORTED`: set, and not to the default that means "off"); None if there is none."""
    for name, default in _UNSUPPORTED.items():
        value = getattr(gc, name, None)
        if value is not None and value != default:
            if name in _SELECTS and gc.get_generation_mode() != _SELECTS[name]:
                continue
            return name, value
    return None


_ID_OPTIONS = ("decoder_start_token_id", "bos_token_id", "eos_token_id", "pad_token_id", "forced_bos_token_id",
               "forced_eos_token_id")  # token ids the searches read
_ID_LISTS = ("eos_token_id", "forced_eos_token_id")  # which may also be lists of ids
# max_length counts the start token: 1 leaves nothing to generate (greedy search wrote one token past it, beam
# search none; `ask` and `swap` refuse --max-length below 2 too)
_COUNT_OPTIONS = {"num_beams": 1, "max_length": 2, "max_new_tokens": 1, "min_length": 0, "no_repeat_ngram_size": 0}


def generation_file(folder: str | os.PathLike) -> Path:
    """The file a model folder's generation config comes from: its generation_config.json, or, without
    one, its config.json (transformers derives the generation config from the model config)."""
    folder = Path(folder)
    return folder / "generation_config.json" if (folder / "generation_config.json").is_file() else folder / "config.json"


def check_generation_config(gc, vocab_size: int, source: str | os.PathLike) -> None:
    """Refuse, before anything decodes or is written, a generation config that RAG decoding cannot
    follow: an option `resolve_settings` refuses (`unsupported_option`), a value the searches read of
    the wrong type, a token id outside the generator's `vocab_size` ids, or no decoder start token
    (decoder_start_token_id or bos_token_id) or padding (pad_token_id or eos_token_id). Each an
    InputError naming `source` (the model folder's file, `generation_file`) and the field."""

    def refuse(name: str, message: str):
        raise InputError(source, message, field=name)

    bad = unsupported_option(gc)
    if bad:
        name, value = bad
        off = "remove it" if _UNSUPPORTED[name] is None else f"remove it or set it to {json.dumps(_UNSUPPORTED[name])}"
        if name == "num_return_sequences":  # honoured as generate's argument, not as a saved setting
            off = f"answers are one per question; {off}"
        refuse(name, f"{_shown(value)} is not supported by RAG decoding (greedy or beam search): {off}")
    for name in _ID_OPTIONS:
        value = getattr(gc, name, None)
        ids = value if name in _ID_LISTS and isinstance(value, list) else [value]
        if value is None or (ids and all(_is_int(i) and 0 <= i < vocab_size for i in ids)):
            continue
        either = " (or a list of them)" if name in _ID_LISTS else ""
        refuse(name, f"expected a token id between 0 and {vocab_size - 1}, the generator's vocabulary{either}, "
                     f"got {_shown(value)}")
    if getattr(gc, "decoder_start_token_id", None) is None and getattr(gc, "bos_token_id", None) is None:
        refuse("decoder_start_token_id", "missing (and no bos_token_id): RAG decoding needs the token the decoder starts from")
    if getattr(gc, "pad_token_id", None) is None and getattr(gc, "eos_token_id", None) is None:
        refuse("pad_token_id", "missing (and no eos_token_id): RAG decoding needs the token that fills finished answers")
    for name, least in _COUNT_OPTIONS.items():
        value = getattr(gc, name, None)
        if value is not None and not (_is_int(value) and value >= least):
            refuse(name, f"expected an integer of at least {least}, got {_shown(value)}")
    penalty = getattr(gc, "length_penalty", None)
    if penalty is not None and not (isinstance(penalty, (int, float)) and not isinstance(penalty, bool)
                                    and math.isfinite(penalty)):
        refuse("length_penalty", f"expected a number, got {_shown(penalty)}")
    stop = getattr(gc, "early_stopping", None)
    if stop is not None and not (isinstance(stop, bool) or stop == "never"):
        refuse("early_stopping", f'expected true, false or "never", got {_shown(stop)}')


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shown(value) -> str:
    """A config value as its JSON file spells it."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _search_settings(gc, num_return_sequences: int) -> SearchSettings:
    eos = gc.eos_token_id
    eos = tuple(eos) if isinstance(eos, (list, tuple)) else ((eos,) if eos is not None else ())
    pad = gc.pad_token_id if gc.pad_token_id is not None else (eos[0] if eos else None)
    start = gc.decoder_start_token_id if gc.decoder_start_token_id is not None else gc.bos_token_id
    # transformers leaves unset options as None and applies its defaults late; so do we
    return SearchSettings(max_length=_max_length(gc), num_beams=_or(gc.num_beams, 1),
                          num_return_sequences=num_return_sequences, length_penalty=_or(gc.length_penalty, 1.0),
                          early_stopping=_or(gc.early_stopping, False), start_id=start, eos_ids=eos, pad_id=pad)


def _or(value, default):
    return default if value is None else value


DEFAULT_MAX_LENGTH = 20  # transformers' max_length where none is set (GenerationConfig's generate-time default)


def _max_length(gc) -> int:
    """Decoder length limit, start token included; `max_new_tokens` wins over `max_length`, as in transformers."""
    return 1 + gc.max_new_tokens if gc.max_new_tokens is not None else _or(gc.max_length, DEFAULT_MAX_LENGTH)


def default_max_length(variant: str, generator_config) -> int:
    """The length limit (start token included) transformers' RAG decodes to when neither generate() nor the
    generation config sets max_length or max_new_tokens. RAG-Token's generate fills in the default, 20.
    RAG-Sequence's runs its generator's generate, which reads an unset max_length as 20 tokens *after* the
    decoder's input, the start token ("the model-agnostic default `max_length` (=21)"), cut at the generator's
    positions (`GenerationMixin._prepare_generated_length`)."""
    if variant == "token":
        return DEFAULT_MAX_LENGTH
    length = DEFAULT_MAX_LENGTH + 1
    positions = getattr(generator_config, "max_position_embeddings", None)
    return min(length, positions) if _is_int(positions) else length


def logits_processors(gc, device="cpu"):
    """The processors transformers' generate builds from `gc`, in its order (the supported subset)."""
    out = LogitsProcessorList()
    eos = gc.eos_token_id
    if gc.no_repeat_ngram_size:
        out.append(NoRepeatNGramLogitsProcessor(gc.no_repeat_ngram_size))
    if gc.min_length and eos is not None:
        out.append(MinLengthLogitsProcessor(gc.min_length, eos, device=device))
    if gc.forced_bos_token_id is not None:
        out.append(ForcedBOSTokenLogitsProcessor(gc.forced_bos_token_id))
    if gc.forced_eos_token_id is not None:
        out.append(ForcedEOSTokenLogitsProcessor(_max_length(gc), gc.forced_eos_token_id, device=device))

    def apply(ids, scores):
        # each of these takes (ids, scores) and returns new scores, never writing to its input: called
        # directly, as LogitsProcessorList would after inspecting every signature at every step
        for processor in out:
            scores = processor(ids, scores)
        return scores

    return apply


@torch.no_grad()
def generate(model, context_input_ids, context_attention_mask, doc_scores, n_docs=None, num_beams=None,
             max_length=None, num_return_sequences=None, do_deduplication=None, decoding="thorough",
             return_evidence=False, **kwargs):
    """Decode answers for B questions from their K retrieved contexts (B*K, L) and doc_scores (B, K).

    Returns (B*num_return_sequences, T) ids, or a `Decoded` with `return_evidence=True`.
    RAG-Sequence: `decoding` is "thorough" (transformers' algorithm) or "fast"; `do_deduplication`
    defaults to the checkpoint's setting (True unless its config said otherwise), as in transformers.
    `Decoded.scores` then differ under label smoothing: thorough decoding's are −(smoothed NLL), fast
    decoding's the raw log-likelihood. RAG-Token has neither choice, and refuses decoding="fast" and
    do_deduplication (transformers' RAG-Token generate refuses both as unused arguments).
    n_docs, num_beams and num_return_sequences: None means the default, anything else a positive int.
    num_beams' default is, as in transformers, the generation config's for RAG-Token and 1 for
    RAG-Sequence: transformers' RagSequenceForGeneration reads num_beams off its RagConfig, which has
    none, and never its generator's saved one (bart-large's 4).
    """
    check_count("n_docs", n_docs)
    check_count("num_beams", num_beams)
    check_count("num_return_sequences", num_return_sequences)
    check_decoding(model.variant, decoding, do_deduplication)
    if num_beams is None and model.variant == "sequence":
        num_beams = 1
    k = n_docs if n_docs is not None else (doc_scores.shape[1] if doc_scores.dim() == 2 else model.n_docs)
    if doc_scores.dim() != 2 or doc_scores.shape[1] != k or context_input_ids.shape[0] != doc_scores.shape[0] * k:
        raise ValueError(f"expected context_input_ids (B*K, L) and doc_scores (B, K={k}), got "
                         f"{tuple(context_input_ids.shape)} and {tuple(doc_scores.shape)}")
    gc = resolve_settings(model.generation_config, num_beams=num_beams, max_length=max_length, **kwargs)
    if gc.max_length is None and gc.max_new_tokens is None:  # no length anywhere: transformers' default, per variant
        gc.max_length = default_max_length(model.variant, model.generator.config)
    # RAG-Sequence's thorough decoding and RAG-Token's evidence score the finished answers once more
    rescores = (decoding == "thorough") if model.variant == "sequence" else return_evidence
    check_length(gc, model.generator.config, rescores)
    n = num_return_sequences if num_return_sequences is not None else 1
    was_training = model.training
    model.eval()  # decoding is deterministic: no dropout, whatever mode training left the model in
    try:
        out = _decode(model, context_input_ids, context_attention_mask, doc_scores, gc, n, do_deduplication,
                      decoding, return_evidence)
    finally:
        model.train(was_training)
    return out if return_evidence else out.sequences


def check_count(name: str, value) -> None:
    """Refuse a count argument (n_docs, num_beams, ...) that is neither None (its default) nor a
    positive int: 0 would read as "the default" and a float fail deep inside the search."""
    if value is not None and not (_is_int(value) and value >= 1):
        raise ValueError(f"{name}: expected a positive integer (or None for the default), got {value!r}")


def check_decoding(variant: str, decoding, do_deduplication) -> None:
    """Refuse a `decoding` other than "thorough" or "fast", for either variant, and RAG-Sequence's
    choices (decoding="fast", do_deduplication) given to RAG-Token, which has neither: read as the
    one RAG-Token decoding they changed nothing, a typo ("fsat") included, and said nothing."""
    if decoding not in ("thorough", "fast"):
        raise ValueError(f"decoding must be 'thorough' or 'fast', got {decoding!r}")
    if variant != "token":
        return
    if decoding == "fast":
        raise ValueError("decoding='fast' is RAG-Sequence's (the paper's fast decoding): RAG-Token searches the "
                         "per-token mixture, with no second pass to skip; leave decoding out")
    if do_deduplication is not None:
        raise ValueError(f"do_deduplication={do_deduplication!r} is RAG-Sequence's: RAG-Token's beams are its "
                         "answers, with no per-document candidates to deduplicate; leave it out")


def check_length(gc, generator_config, rescores: bool) -> None:
    """Refuse, before decoding, a length past the generator's learned positions (max_position_embeddings):
    past them an answer that had not ended was an IndexError in the middle of the search.

    The length is `_max_length(gc)`, so the argument named is the one that set it: max_new_tokens
    when given, else max_length. The search reads an answer's tokens at positions 0 … length − 2 (the
    last token is predicted, never read back), so it runs to one more than the positions, as
    transformers' does; scoring finished answers again (`rescores`) reads all `length` tokens.
    """
    if _max_length(gc) < 2:  # the start token alone: greedy search wrote a token past it, beam search none
        raise ValueError(f"max_length: {_max_length(gc)} leaves no token to generate after the start token; "
                         "must be at least 2")
    positions = getattr(generator_config, "max_position_embeddings", None)
    if not _is_int(positions):
        return  # no learned positions, no limit
    most_length = positions if rescores else positions + 1
    length = _max_length(gc)
    if length <= most_length:
        return
    name, value, most = "max_length", length, most_length
    if gc.max_new_tokens is not None:  # the start token is the one of `length` not generated
        name, value, most = "max_new_tokens", gc.max_new_tokens, most_length - 1
    reads = "every token of an answer, to score it," if rescores else "every token of an answer but the last"
    raise ValueError(f"{name}: {value} exceeds the generator's {positions} positions (max_position_embeddings), "
                     f"which its decoder reads {reads} in; must be at most {most}")


def _decode(model, ids, mask, doc_scores, gc, n, do_deduplication, decoding, evidence) -> Decoded:
    """Dispatch on the variant; argument checks that depend on it live here."""
    if model.variant == "token":
        if n > _or(gc.num_beams, 1):
            raise ValueError(f"num_return_sequences={n} needs num_beams >= {n}")
        return _rag_token(model, ids, mask, doc_scores, gc, n, evidence)
    dedup = model.settings.do_deduplication if do_deduplication is None else do_deduplication
    return _rag_sequence(model, ids, mask, doc_scores, gc, n, dedup, decoding)


def _rag_token(model, ids, mask, doc_scores, gc, n, evidence: bool) -> Decoded:
    """RAG-Token: search over the per-token mixture Σ_z p(z|x) p(y_t|x,z,y_<t) (eq. 2).

    With `evidence`, one teacher-forced pass over the results gives p(z|x,y_t,y_<t) per token.
    """
    dec = GroupedBartDecoder(model.generator)
    b, k = doc_scores.shape
    s = _search_settings(gc, n)
    w = s.num_beams
    cross_mask = mask.bool()
    cross = dec.encode(ids, cross_mask)  # per layer (B*K, H, L, dh)
    doc_scores = doc_scores.float()
    cache: list = []
    dev = ids.device

    def step(last: torch.Tensor, cur: int) -> torch.Tensor:
        tokens = last.view(b, 1, w).expand(b, k, w).reshape(b * k, w, 1)  # (B*K, W, 1)
        h = dec.hidden(tokens, cur - 1, cross, cross_mask, cache)  # (B*K, W, 1, D)
        return _token_mixture(dec.logits(h[:, :, 0]), doc_scores)  # (B*W, V)

    # the cache row of (question b, doc z, beam j) is (b*K + z)*W + j, the search's row b*W + j
    doc_shift = (torch.arange(b * k, device=dev).view(b, k, 1) - torch.arange(b, device=dev)[:, None, None]) * w

    def reorder(rows: torch.Tensor) -> None:  # rows (B*W,) = b*W + surviving beam
        reorder_cache(cache, (rows.view(b, 1, w) + doc_shift).view(-1))  # (B*K*W,)

    procs = logits_processors(gc, dev)
    hyps = greedy(step, b, s, procs, dev) if w == 1 else beam_search(step, reorder, b, s, procs, dev)
    seqs = hyps.sequences  # (B*n, T)
    if not evidence:
        return Decoded(seqs, torch.empty(0, device=seqs.device), hyps.scores)
    tgt = _doc_target_logprobs(dec, cross, cross_mask, seqs.view(b, n, -1), _scoring_pad(model, s))  # (B, K, n, T)
    tgt = tgt.permute(0, 2, 3, 1)  # (B, n, T, K)
    prior = M.doc_log_prior(doc_scores)  # (B, K)
    post = torch.softmax(prior[:, None, None, :] + tgt, dim=-1).reshape(b * n, -1, k)  # (B*n, T, K)
    return Decoded(seqs, post, hyps.scores)


def _scoring_pad(model, s: SearchSettings) -> int:
    """The id that scoring finished answers masks out of their targets and that pads candidates: the
    generator's pad_token_id, as transformers' get_nll and _cat_and_pad read it and training masks
    labels with it; the search's (the generation config's, or its EOS) only where the model has none.
    A generation config without pad_token_id fills finished answers with EOS, which is then scored."""
    pad = model.generator.config.pad_token_id
    return pad if pad is not None else s.pad_id


def _token_mixture(logits: torch.Tensor, doc_scores: torch.Tensor) -> torch.Tensor:
    """`M.rag_token_marginal_logprobs` for one decoding step, logits (B*K, W, V) → (B*W, V), faster.

    Summed as probabilities, in float32: one softmax and one (1, K) @ (K, W*V) product per question,
    where a log-sum-exp over log-softmaxes makes four passes with exponentials and logarithms.
    float32 keeps probabilities under 2^-126 inexactly or as 0, losing at most 2^-126 of a mixture
    in all; while every mixture probability is at least MIX_FLOOR = 2^-100 that is under 2^-26 of it,
    below rounding. A row (question, beam) with a smaller one (a token that every document finds all
    but impossible) is summed in log space instead, as transformers does. Decided row by row, so a
    question's log-probabilities never depend on the questions batched with it.
    """
    b, k = doc_scores.shape
    w, v = logits.shape[1], logits.shape[2]
    probs = torch.softmax(logits.float(), dim=-1).view(b, k, -1)  # (B, K, W*V)
    weights = M.doc_log_prior(doc_scores).exp()[:, None, :]  # (B, 1, K) p(z|x)
    mix = torch.bmm(weights, probs).view(b * w, v)  # (B*W, V)
    low = (mix.amin(dim=-1) < MIX_FLOOR).nonzero().squeeze(1)  # (R,) rows b*W + j to redo in log space
    out = mix.log_()
    if len(low):
        q, j = low // w, low % w
        rows = logits.reshape(b, k, w, v)[q, :, j].float()  # (R, K, V), float32 as the mixtures above
        out[low] = M.rag_token_marginal_logprobs(rows.reshape(-1, 1, v), doc_scores[q]).view(-1, v).to(out.dtype)
    return out  # (B*W, V)


def _doc_target_logprobs(dec, cross, cross_mask, cand: torch.Tensor, pad_id: int, with_sum: bool = False):
    """log p(y_t | x, z, y_<t) of candidates cand (B, C, T) under each of their question's K docs.

    Returns (B, K, C, T) (and Σ_v log p(v), same shape, if `with_sum`); padding targets give 0.
    All B·K·C rows go through the decoder in chunks of documents sized so that a chunk's logits
    stay under LOGITS_CHUNK elements: memory stays flat however many questions are batched.
    """
    b, c, t = cand.shape
    n_docs = cross[0][0].shape[0]
    k = n_docs // b
    tokens = cand.unsqueeze(1).expand(b, k, c, t).reshape(n_docs, c, t)  # (B*K, C, T)
    target = M.shift_labels_left(tokens.reshape(n_docs * c, t), pad_id).view(n_docs, c, t)  # (B*K, C, T)
    vocab = dec.model.lm_head.out_features
    step = max(1, LOGITS_CHUNK // max(1, c * t * vocab))
    tgts, totals = [], []
    for i in range(0, n_docs, step):
        part = [(kk[i:i + step], vv[i:i + step]) for kk, vv in cross]  # views, (chunk, H, L, dh)
        hidden = dec.hidden(tokens[i:i + step], 0, part, cross_mask[i:i + step])  # (chunk, C, T, D)
        logits = dec.logits(hidden).view(-1, t, vocab)  # (chunk*C, T, V)
        tg, tot = M.target_logprobs(logits, target[i:i + step].reshape(-1, t), with_sum=with_sum)
        tgts.append(tg)
        totals.append(tot)
    keep = target.ne(pad_id).view(b, k, c, t)
    tgt = torch.cat(tgts).view(b, k, c, t) * keep  # (B, K, C, T)
    return (tgt, torch.cat(totals).view(b, k, c, t)) if with_sum else tgt


def _rag_sequence(model, ids, mask, doc_scores, gc, n, dedup, decoding) -> Decoded:
    """RAG-Sequence (eq. 1): beams per document, then candidates ranked by Σ_z p(z|x) p(y|x,z)."""
    dec = GroupedBartDecoder(model.generator)
    b, k = doc_scores.shape
    s = _search_settings(gc, _or(gc.num_beams, 1))  # each document returns all its W beams
    w, pad = s.num_beams, _scoring_pad(model, s)
    s = replace(s, unscored_id=pad)  # fast decoding's p(y|x,z) masks what scoring masks
    # the contexts read with the caller's mask, padding masked out as training reads them: transformers'
    # RagSequenceForGeneration passes its generator no mask (transformers 5.24 infers none for an
    # encoder-decoder model and attends to the padding its retriever adds up to max_combined_length, so an
    # export's answers differ from `ask`'s unless given this mask: docs/real-data.md). A mask read off the
    # generation config's pad id saw padding where that config has none (an answer then hung on its batch
    # neighbours' lengths) and hid <s> where it names id 0
    gen_mask = mask.bool()
    cross = dec.encode(ids, gen_mask)  # per layer (B*K, H, L, dh)
    cache: list = []

    def step(last: torch.Tensor, cur: int) -> torch.Tensor:
        h = dec.hidden(last.view(b * k, w, 1), cur - 1, cross, gen_mask, cache)  # (B*K, W, 1, D)
        return dec.logits(h[:, :, 0]).reshape(b * k * w, -1)  # (B*K*W, V)

    procs, dev = logits_processors(gc, ids.device), ids.device
    if w == 1:
        hyps = greedy(step, b * k, s, procs, dev)
    else:
        hyps = beam_search(step, lambda rows: reorder_cache(cache, rows), b * k, s, procs, dev)
    full, cands, owners = _candidates(hyps, b, k * w)
    bos = model.generator.config.bos_token_id
    # transformers scores with exclude_bos_score=True: the first token is dropped when, for a
    # question, every candidate starts with BOS
    skip_first = torch.tensor([bos is not None and c.shape[1] > 1 and bool(c[:, 1].eq(bos).all()) for c in cands],
                              device=ids.device)
    prior = M.doc_log_prior(doc_scores.float())  # (B, K)
    post = None  # thorough decoding's joint reads as the posterior too
    if decoding == "fast":
        joint, post = _fast_joint(hyps, cands, owners, skip_first, prior, w, pad)  # (B, C, K) each
    else:
        joint = _thorough_joint(model, dec, cross, gen_mask, cands, skip_first, prior, pad)  # (B, C, K)
    if not dedup:  # every hypothesis is a candidate; duplicates share the score of their first copy
        def every(x):  # (B, C, K) -> (B, K*W, K)
            return torch.stack([F.pad(x[q, owner], (0, 0, 0, k * w - len(owner)), value=float("-inf"))
                                for q, owner in enumerate(owners)])
        joint, post = every(joint), (None if post is None else every(post))
        cands = full
    return _rank(cands, joint, n, pad, post)


def _candidates(hyps: Hypotheses, b: int, per_question: int):
    """Split the B·K·W hypotheses by question and cut each to that question's longest.

    Returns per question all hypotheses (K*W, T_b), the distinct ones (C_b, T_b) in order of first
    appearance (transformers' deduplication order), and for each hypothesis its distinct index.
    """
    full, unique, owners = [], [], []
    for q in range(b):
        rows = slice(q * per_question, (q + 1) * per_question)
        seqs = hyps.sequences[rows, : 1 + int(hyps.lengths[rows].max())]  # (K*W, T_b)
        index: dict[tuple, int] = {}
        owner = [index.setdefault(tuple(row.tolist()), len(index)) for row in seqs]
        firsts: dict[int, int] = {}
        for row, c in enumerate(owner):
            firsts.setdefault(c, row)
        full.append(seqs)
        unique.append(seqs[[firsts[c] for c in range(len(index))]])
        owners.append(owner)
    return full, unique, owners


def _fast_joint(hyps, cands, owners, skip_first, prior, w, pad) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(z|x) p(y|x,z) per (question, candidate, doc), with p(y|x,z) from the beams themselves:
    −inf where document z's beam did not produce y. Returns it for ranking and for the posterior,
    (B, C, K) each.

    Ranked like thorough decoding: the first token dropped per `skip_first`, and the prior left out
    where transformers' scoring loses it (the second target token is padding). Selected with
    torch.where, not added as 0·prior: a document masked out with the score −inf has prior −inf.
    The posterior p(z|x,y) always has the prior, as thorough decoding's does (its joint carries the
    quirk in a per-candidate shift, which a softmax drops); only where every document that produced
    y has prior 0 (masked out) has it none to weigh, and is read without it.
    """
    k = prior.shape[1]
    c_max = max(c.shape[0] for c in cands)
    ll = torch.full((len(cands), c_max, k), float("-inf"), device=prior.device)  # (B, C, K)
    post = ll.clone()  # (B, C, K)
    for q, owner in enumerate(owners):
        for j, c in enumerate(owner):
            row = q * k * w + j
            score = hyps.raw_logprob[row] - (hyps.first_logprob[row] if skip_first[q] else 0.0)
            ll[q, c, j // w] = torch.maximum(ll[q, c, j // w], score)
        no_prior = torch.ones(cands[q].shape[0], dtype=torch.bool, device=prior.device)
        if cands[q].shape[1] > 2:
            no_prior = cands[q][:, 2].eq(pad)
        c_q = len(no_prior)
        with_prior = ll[q, :c_q] + prior[q]  # (C_q, K)
        weighed = torch.isfinite(with_prior).any(-1, keepdim=True)  # (C_q, 1)
        post[q, :c_q] = torch.where(weighed, with_prior, ll[q, :c_q])
        ll[q, :c_q] = torch.where(no_prior[:, None], ll[q, :c_q], with_prior)  # (C_q, K)
    return ll, post  # (B, C, K) now log p(z|x) p(y|x,z); rows past a question's C_q stay −inf


def _padded(cands: list[torch.Tensor], pad: int) -> torch.Tensor:
    c_max, t_max = max(c.shape[0] for c in cands), max(c.shape[1] for c in cands)
    out = cands[0].new_full((len(cands), c_max, t_max), pad)  # (B, C, T)
    for q, c in enumerate(cands):
        out[q, : c.shape[0], : c.shape[1]] = c
    return out


def _thorough_joint(model, dec, cross, cross_mask, cands, skip_first, prior, pad) -> torch.Tensor:
    """Every candidate scored under every document of its question: one batched decoder pass.

    Returns per (question, candidate, doc) log p(z|x) plus a score, whose log-sum-exp over the docs is
    −NLL as transformers' `get_nll(exclude_bos_score=True)` computes it (label smoothing included).
    """
    padded = _padded(cands, pad)  # (B, C, T)
    b, c, t = padded.shape
    k = prior.shape[1]
    eps = model.settings.label_smoothing
    if eps:
        tgt, total = _doc_target_logprobs(dec, cross, cross_mask, padded, pad, with_sum=True)  # (B, K, C, T)
    else:
        tgt = _doc_target_logprobs(dec, cross, cross_mask, padded, pad)  # (B, K, C, T)
        total = torch.zeros_like(tgt)
    flat = lambda x: x.permute(0, 2, 1, 3).reshape(b * c, k, t)  # noqa: E731  (B*C, K, T)
    target = M.shift_labels_left(padded.view(b * c, t), pad)  # (B*C, T)
    vocab = dec.model.lm_head.out_features
    doc_scores = prior.repeat_interleave(c, dim=0)  # (B*C, K); log-softmax of a log-softmax is itself
    nll = M.sequence_nll_from_token_logprobs(flat(tgt), flat(total), doc_scores, target, pad, vocab, eps,
                                             exclude_first=skip_first.repeat_interleave(c))  # (B*C,)
    # hand back per-document terms whose log-sum-exp with the prior is −nll; the posterior reads them
    per_doc = flat(tgt).sum(-1) - skip_first.repeat_interleave(c)[:, None] * flat(tgt)[:, :, 0]  # (B*C, K)
    shift = -nll - torch.logsumexp(per_doc + doc_scores, dim=1)  # (B*C,) smoothing / quirks, if any
    joint = (per_doc + shift[:, None]).view(b, c, k) + prior[:, None, :]  # (B, C, K)
    real = torch.tensor([[i < cq.shape[0] for i in range(c)] for cq in cands], device=joint.device)  # (B, C)
    return joint.masked_fill(~real[:, :, None], float("-inf"))


def _rank(cands, joint, n, pad, post=None) -> Decoded:
    """Top-n candidates per question by log Σ_z p(z|x) p(y|x,z), from joint (B, C, K) = log p(z|x) p(y|x,z);
    posteriors p(z|x,y) as evidence: the softmax of `post` (B, C, K), or of `joint` without it."""
    score = torch.logsumexp(joint, dim=-1)  # (B, C)
    seqs, posts, scores = [], [], []
    for q, c in enumerate(cands):
        if n > c.shape[0]:
            raise ValueError(f"num_return_sequences={n} exceeds the {c.shape[0]} candidates of question {q}")
        top = score[q, : c.shape[0]].topk(n).indices
        seqs.append(c[top])
        posts.append(torch.softmax((joint if post is None else post)[q, top], dim=-1))
        scores.append(score[q, top])
    t_max = max(x.shape[1] for x in seqs)
    out = torch.cat([F.pad(x, (0, t_max - x.shape[1]), value=pad) for x in seqs])  # (B*n, T)
    return Decoded(out, torch.cat(posts), torch.cat(scores))
