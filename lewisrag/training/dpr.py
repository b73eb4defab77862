"""DPR bi-encoder training (Karpukhin et al. 2020): in-batch negatives plus BM25 hard negatives.

For a batch of B questions, the passages are the B gold passages followed by one hard negative per
question: the top BM25 hit over the passages that is not gold and holds no answer, or one of the hard negatives the
training file gives (DPR's own files hold DPR's BM25 negatives, `hard_negative_ctxs`), drawn at
random each time the question is batched, as DPR's training does. Each question scores all 2B passages
by inner product and the loss is the cross-entropy of its own gold passage: every other
question's positive and every hard negative is a negative (the paper's "Gold + 1 BM25" setup),
except a passage that is also gold for it (a shared passage, or a question's second gold id).
With `self_negatives_at`, from that share of the steps on each question also brings the passage
the model itself then ranked highest among those neither gold nor holding an answer (mined once, as ANCE does).

With `shared=True` the question and passage sides are one network while training (a Siamese
bi-encoder). The built-in world's test entities have names that no training question contains,
so their tokens' embeddings never receive a gradient; only a network that treats both sides
alike maps such a name to matching vectors in a question and in its passage. The checkpoint
still holds two encoders (equal at first), as DPR's do, and RAG fine-tuning then moves only the
question encoder.

Starting points: a small BERT config with a WordPiece tokenizer trained on the corpus; a local
pretrained BERT-like checkpoint or one transformers DPR encoder folder (`init`), copied into both
encoders; a DPR checkpoint lewisrag wrote (`init`), whose pair and tokenizer train on (shared
only while its two encoders are equal); or a question encoder and a context encoder
(`init_question`, `init_context`: a transformers DPRQuestionEncoder / DPRContextEncoder pair such
as facebook/dpr-*-single-nq-base, or two BERT-like checkpoints), each starting its own side. A pair
starts as two networks, so it trains as `shared=False`. Every starting weight is checked: missing,
unused or misshapen ones are an InputError naming them, except a BERT-like checkpoint's pretraining
heads and pooler and a DPR folder's BERT pooler, which DPR never runs. With `steps=0` the checkpoint
holds the starting weights exactly (a DPR pair converted to lewisrag's layout, fingerprint unchanged).
A DPR start keeps its token limits (`start_limits`), so a converted pair also encodes as its folders do.
Passages are tokenized in the start's passage encoding (`index.encoders.passage_encoding`): DPR's for
a transformers DPR folder (a pair: its context side's), the recorded one for a lewisrag checkpoint,
lewisrag's "pair" from scratch or a BERT-like start; the checkpoint's tokenizer records it, so its
index is built, and its negatives mined, as it trained.

It trains, and mines its own negatives, on `device` (a GPU when one is visible, by default), with
`mixed_precision` bf16 or fp16 (a gradient scaler) autocasting the encoders' forward passes; the
inner products and the loss stay in float32. The checkpoint is written from the CPU. On the CPU in
full precision it is the plain loop, digit for digit.
"""

from __future__ import annotations

import copy
import math
import os
import random
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoModel, AutoTokenizer, DPRConfig, DPRContextEncoder, DPRQuestionEncoder, get_linear_schedule_with_warmup

from lewisrag.data.io import InputError, LewisragWarning, read_json
from lewisrag.data.outputs import check_out_dir, staged_dir
from lewisrag.data.passages import passages_at
from lewisrag.data.pretrained import SHARDED, WEIGHTS, check_state_fits, load_model, load_tokenizer
from lewisrag.data.records import Passage, QAExample
from lewisrag.index.encoders import (DPR_ARCHITECTURES, DPR_POOLER, META_FILE, DPRCheckpoint, adopt_passage_encoding,
                                     checkpoint_limits, config_architectures, own_limit, passage_encoding,
                                     set_passage_encoding, state_fingerprint, tokenize_texts)
from lewisrag.scoring.aggregate import mean
from lewisrag.training.configs import DPR_KIND as KIND  # the marker kind of DPR checkpoint folders (lewisrag.data.outputs)
from lewisrag.training.configs import DPRTrainConfig, check_init
from lewisrag.training.negatives import (hard_negative_rows, hard_negative_source, mine_self_negatives, note_unused_given,
                                         pick_negative)
from lewisrag.training.devices import autocast, single_device
from lewisrag.training.optim import adamw, all_overflowed, backward_step, diverged, finite, warmup_steps
from lewisrag.training.tokenizer import bert_wordpiece_tokenizer


FINAL_LOSS_STEPS = 20  # the metadata's final_loss: the mean loss of the last 20 steps, steadier than the last one's


def train_tokenizer(texts: Sequence[str], vocab_size: int):
    """A lowercasing WordPiece tokenizer (BERT's pipeline, CJK as characters) for `texts`, deterministic."""
    return bert_wordpiece_tokenizer(texts, vocab_size)


def vocab_note(tokenizer, asked: int) -> str:
    """Why a scratch vocabulary has more tokens than `asked`: WordPiece keeps every character of the corpus."""
    chars = sum(len(t) == 1 for t in tokenizer.get_vocab())  # the word-initial characters: every other entry is longer
    return (f"--vocab-size {asked}: the vocabulary has {len(tokenizer)} tokens, as WordPiece keeps each of the corpus's "
            f"{chars} characters (word-initial and ##continuation) and the special tokens; the model is built with "
            f"{len(tokenizer)}, which lewisrag_dpr.json records (config.vocab_size; the asked size as vocab_size_asked)")


def init_encoders(cfg: DPRTrainConfig, corpus_texts: Sequence[str]):
    """(question encoder, context encoder, tokenizer): both from the same weights (scratch or `init`),
    or each side from its own folder (`init_question`, `init_context`)."""
    torch.manual_seed(cfg.seed)
    if cfg.init_question or cfg.init_context:
        return _init_pair(cfg)
    if cfg.init and (Path(cfg.init) / META_FILE).is_file():
        return _continue_checkpoint(cfg)
    if cfg.init:
        dcfg, weights, tokenizer = starting_encoder(cfg.init, "--init")
    else:
        tokenizer = train_tokenizer(corpus_texts, cfg.vocab_size)
        dcfg = DPRConfig(vocab_size=len(tokenizer), hidden_size=cfg.hidden_size, num_hidden_layers=cfg.layers,
                         num_attention_heads=cfg.heads, intermediate_size=4 * cfg.hidden_size,
                         max_position_embeddings=max(cfg.p_max_length, 128), pad_token_id=tokenizer.pad_token_id,
                         hidden_dropout_prob=cfg.dropout, attention_probs_dropout_prob=cfg.attention_dropout)
        weights = None
    q_enc, c_enc = DPRQuestionEncoder(dcfg), DPRContextEncoder(dcfg)
    if weights is not None:
        q_enc.question_encoder.load_state_dict(weights)  # checked to fit by starting_encoder
    c_enc.ctx_encoder.load_state_dict(q_enc.question_encoder.state_dict())
    if cfg.shared:
        _tie(q_enc, c_enc)
    return q_enc, c_enc, tokenizer


def _tie(q_enc, c_enc, copy_of: Callable = lambda module: module) -> None:
    """The context side takes the question side's modules: its BERT and, with projection_dim > 0, its
    encode_proj (tied alone, each side would train its own projection: two networks recorded as one).
    With `copy_of=copy.deepcopy`, equal copies instead: the two encoders a shared run saves."""
    q, c = q_enc.question_encoder, c_enc.ctx_encoder
    c.bert_model = copy_of(q.bert_model)
    if q.projection_dim > 0:
        c.encode_proj = copy_of(q.encode_proj)


def _tied(q_enc, c_enc) -> bool:
    """Whether the two sides are one network (`_tie`)."""
    q, c = q_enc.question_encoder, c_enc.ctx_encoder
    return c.bert_model is q.bert_model and (q.projection_dim <= 0 or c.encode_proj is q.encode_proj)


def _continue_checkpoint(cfg: DPRTrainConfig):
    """Both encoders and the tokenizer of a DPR checkpoint lewisrag wrote, to train further. With
    `shared`, the two sides become one network again only if they still hold equal weights (a
    checkpoint trained shared); a pair that has moved apart (a question encoder fine-tuned on its own)
    trains as two, or the context side's weights would be lost."""
    ckpt = DPRCheckpoint.load(cfg.init)
    q_enc, c_enc = ckpt.question_encoder, ckpt.ctx_encoder
    if cfg.shared and state_fingerprint(q_enc.question_encoder) == state_fingerprint(c_enc.ctx_encoder):
        _tie(q_enc, c_enc)
    return q_enc, c_enc, ckpt.tokenizer


def _init_pair(cfg: DPRTrainConfig):
    """The two sides from their own folders; one tokenizer must serve both."""
    check_init(cfg)
    q_cfg, q_weights, tokenizer = starting_encoder(cfg.init_question, "--init-question", side="question")
    c_cfg, c_weights, c_tokenizer = starting_encoder(cfg.init_context, "--init-context", side="context")
    q_dim, c_dim = (int(c.projection_dim or c.hidden_size) for c in (q_cfg, c_cfg))
    if q_dim != c_dim:
        raise InputError(cfg.init_context, f"--init-context gives {c_dim}-d vectors, --init-question {q_dim}-d: not a pair")
    if c_tokenizer.get_vocab() != tokenizer.get_vocab():
        raise InputError(cfg.init_context, "--init-context's tokenizer has another vocabulary than --init-question's: "
                         "a DPR pair reads one tokenization")
    set_passage_encoding(tokenizer, passage_encoding(c_tokenizer))  # passages are the context side's to read
    q_enc, c_enc = DPRQuestionEncoder(q_cfg), DPRContextEncoder(c_cfg)
    q_enc.question_encoder.load_state_dict(q_weights)  # both checked to fit by starting_encoder
    c_enc.ctx_encoder.load_state_dict(c_weights)
    return q_enc, c_enc, tokenizer


def start_limits(cfg: DPRTrainConfig, q_enc, c_enc, tokenizer) -> tuple[int, int]:
    """(passage, question) token limits of the run and its checkpoint.

    A DPR start reads at its own limits: a transformers DPR folder at the folder's (`index.encoders.own_limit`, as
    `load_transformers_encoder` reads it, so that a pair converted at `steps=0` encodes
    passages and questions as the folders do: the same fingerprint, the same vectors, the index the
    folders built), a lewisrag checkpoint at those its lewisrag_dpr.json records. A scratch model or
    a BERT-like start trains at the config's, within its position tables (a starting BERT may have
    fewer than 128 positions).
    """
    if cfg.init and (Path(cfg.init) / META_FILE).is_file():  # loaded by DPRCheckpoint.load in init_encoders
        # its limits as loaded, defaults within the positions included (a flat 256 overran a 128-position encoder)
        return checkpoint_limits(cfg.init, c_enc.config.max_position_embeddings, q_enc.config.max_position_embeddings)
    limits = [min(cfg.p_max_length, c_enc.config.max_position_embeddings),
              min(cfg.q_max_length, q_enc.config.max_position_embeddings)]
    folders = (cfg.init_context, cfg.init_question) if cfg.init_question else (cfg.init, cfg.init)
    for i, (folder, encoder) in enumerate(zip(folders, (c_enc, q_enc))):
        if folder and _dpr_architecture(Path(folder)) is not None:
            # `tokenizer` is the question folder's (or --init's); a pair's context side has its own
            own = tokenizer if i or not cfg.init_question else load_tokenizer(
                AutoTokenizer.from_pretrained, folder, "pretrained encoder's tokenizer (--init-context)", use_fast=True)
            limits[i] = own_limit(encoder.config, own)
    return limits[0], limits[1]


def _dpr_architecture(p: Path) -> str | None:
    """The DPR encoder class the folder's config.json names under architectures (`config_architectures`, which
    refuses a value that is no list of names); None: a BERT-like checkpoint."""
    names = config_architectures(p / "config.json") if (p / "config.json").is_file() else []
    return next((a for a in names if a in DPR_ARCHITECTURES), None)


# A BERT-like checkpoint's weights that DPR never runs: the pretraining heads (BERT's masked-LM and next-sentence
# `cls.*`, ELECTRA's discriminator and generator heads) and the pooler
BERT_UNUSED = r"^(cls|discriminator_predictions|generator_predictions|generator_lm_head|pooler)\."


def _load_bert_like(p: Path, flag: str):
    """(AutoModel of the BERT-like folder `p`, the checkpoint's weights it left out but `BERT_UNUSED`, sorted).
    `load_model` lets them pass, for `starting_encoder` to refuse once the weights are known to be a BERT's: a
    checkpoint of another kind (a BART) is named whole by `check_state_fits` first."""
    unused: list[str] = []

    def auto_model(path, **kw):
        model, info = AutoModel.from_pretrained(path, **kw)
        unused.extend(sorted(k for k in info["unexpected_keys"] if not re.search(BERT_UNUSED, k)))
        return model, info

    return load_model(auto_model, p, f"pretrained encoder ({flag})", allow_unexpected=True,
                      ignore_missing=r"^pooler\."), unused


def starting_encoder(path: str, flag: str, side: str | None = None):
    """(DPRConfig, weights of a DPR encoder (`bert_model.*`, `encode_proj.*`), tokenizer) from the folder `path`.

    A transformers DPRQuestionEncoder / DPRContextEncoder folder (told by config.json's
    architectures; `side` "question"/"context" asks for one) is loaded strictly, BERT's pooler
    excepted. Anything else is read as a BERT-like checkpoint: its pretraining heads and pooler are
    dropped (DPR uses neither), and every other weight must fill the DPR encoder exactly.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(path, "pretrained encoder directory not found", field=flag.lstrip("-").replace("-", "_"))
    if (p / META_FILE).is_file():  # else "config.json: file not found", as if it were no model at all
        raise InputError(path, f"{flag}: a DPR checkpoint lewisrag wrote (both encoders and their tokenizer): give it as "
                         "--init to train on", field=flag.lstrip("-").replace("-", "_"))
    config = read_json(p / "config.json") if (p / "config.json").is_file() else {}
    config = config if isinstance(config, dict) else {}
    arch = _dpr_architecture(p)
    if arch is not None:
        if side is not None and DPR_ARCHITECTURES[arch] != side:
            wanted = "DPRQuestionEncoder" if side == "question" else "DPRContextEncoder"
            raise InputError(p / "config.json", f"{flag} needs a {wanted} (or a BERT-like checkpoint); this folder holds "
                             f"a {arch}", field="architectures")
        cls = DPRQuestionEncoder if arch == "DPRQuestionEncoder" else DPRContextEncoder
        model = load_model(cls.from_pretrained, p, f"{arch} ({flag})", ignore_unexpected=DPR_POOLER)
        dcfg = model.config
        weights = (model.question_encoder if arch == "DPRQuestionEncoder" else model.ctx_encoder).state_dict()
    else:
        if config.get("model_type") == "dpr":
            raise InputError(p / "config.json", f"{flag}: a DPR config whose architectures names neither "
                             "DPRQuestionEncoder nor DPRContextEncoder", field="architectures")
        # a BERT-like checkpoint may carry a pretraining head and may lack the pooler: DPR uses neither
        bert, unused = _load_bert_like(p, flag)
        if getattr(getattr(getattr(bert, "embeddings", None), "position_embeddings", None), "padding_idx", None) is not None:
            # RoBERTa's weights carry BERT's names, so they fitted and trained, each position reading another's row
            raise InputError(p / "config.json", f"{flag}: a {config.get('model_type')} checkpoint numbers positions from "
                             "its pad id + 1 (RoBERTa's embeddings), DPR's BERT from 0; use a BERT-like checkpoint",
                             field="model_type")
        dcfg = DPRConfig(**{k: v for k, v in bert.config.to_dict().items() if k in DPRConfig().to_dict()})
        weights = {k: v for k, v in bert.state_dict().items() if not k.startswith("pooler.")}
        check_state_fits(_bert_shapes(dcfg), weights, p, f"pretrained encoder ({flag}) as DPR's BERT")
        if unused:  # layers its config.json no longer counts (edited to fewer), dropped in silence else
            raise InputError(p / WEIGHTS if (p / WEIGHTS).is_file() else p / SHARDED,
                             f"{flag}: its config.json's BERT leaves weights of the checkpoint unused ({len(unused)}; "
                             f"the first: {unused[0]}): a config.json edited to fewer layers, or another model's "
                             "weights; only pretraining heads and the pooler may be left out")
        weights = {f"bert_model.{k}": v for k, v in weights.items()}
    tokenizer = load_tokenizer(AutoTokenizer.from_pretrained, p, f"pretrained encoder's tokenizer ({flag})", use_fast=True)
    if len(tokenizer) > dcfg.vocab_size:  # an id past the embedding table: an IndexError at the first step
        raise InputError(p, f"{flag}: its tokenizer has {len(tokenizer)} tokens, the model's embeddings only "
                         f"{dcfg.vocab_size}: another model's tokenizer", field="vocab_size")
    if tokenizer.pad_token is None:  # a batch of questions is padded: a ValueError at the first step
        raise InputError(p, f"{flag}: its tokenizer has no pad token, and DPR pads its batches", field="pad_token")
    # a transformers DPR folder was trained in DPR's passage encoding, anything else is lewisrag's (`passage_encoding`)
    adopt_passage_encoding(tokenizer, "pair" if arch is None else "dpr", p)
    types = tokenize_texts(tokenizer, [("a", "b")], 8).get("token_type_ids")
    segment = int(types.max()) if types is not None else 0  # a passage is (title, text): its text's segment
    if segment >= dcfg.type_vocab_size:  # an IndexError at the first step
        raise InputError(p / "config.json", f"{flag}: its tokenizer puts a passage's text in segment {segment}, the model "
                         f"has {dcfg.type_vocab_size} segment embedding(s)", field="type_vocab_size")
    return dcfg, weights, tokenizer


def _bert_shapes(dcfg) -> dict[str, tuple[int, ...]]:
    """Name -> shape of the weights of a DPR encoder's BERT under `dcfg`, built on the meta device
    (no memory, no initialisation: a config far from the checkpoint's costs nothing)."""
    with torch.device("meta"):
        bert = DPRQuestionEncoder(dcfg).question_encoder.bert_model
    return {k: tuple(v.shape) for k, v in bert.state_dict().items()}


class _HeldRows:
    """The passages training reads each step, held from one read of the table: a step's gold passages
    and hard negatives (and, once mined, its self-negatives) are fixed per question, so the steps read
    no row group. Read at each step, a table's rows would decode most of its row groups each step (a
    batch's rows fall across all of them), row by row one for almost every row. Memory: these passages
    alone (the training file's), not the corpus."""

    def __init__(self, passages: Sequence[Passage]):
        self.passages = passages
        self.held: dict[int, Passage] = {}

    def hold(self, rows: Sequence[int]) -> None:
        new = sorted({int(r) for r in rows} - self.held.keys())
        self.held.update(zip(new, passages_at(self.passages, new)))

    def __call__(self, rows: Sequence[int]) -> list[Passage]:
        self.hold(rows)  # none new: every row a step reads was held
        return [self.held[int(r)] for r in rows]


def train_dpr(
    cfg: DPRTrainConfig,
    examples: Sequence[QAExample],
    passages: Sequence[Passage],
    out: str | os.PathLike,
    on_step: Callable[[int, float], None] | None = None,
    overwrite: bool = False,
) -> dict:
    """Train the bi-encoder and save it as a DPR checkpoint directory. Returns the metadata.

    Questions none of whose gold ids is in `passages` cannot be trained on; they are left out and
    counted in the metadata (`n_no_gold`), never dropped without a word. (`lewisrag train dpr`
    refuses a gold id its --passages lack before this runs, as bad input; a caller training on a
    subset of a corpus on purpose gets the count.) `out` must be missing,
    empty or a DPR checkpoint lewisrag wrote, holding no file the user added since, unless `overwrite`.
    So are the questions left without a hard negative (`hard_negative_rows`) or a self-mined one
    (`n_no_self_negative`), and the steps whose batch held no negative at all (`n_steps_no_negative`, with
    a warning: their loss is 0). Under fp16 a run whose gradient scaler skipped every step saves nothing
    (`optim.all_overflowed`): its encoders were the starting ones, finite, and passed the NaN check.
    """
    out = check_out_dir(out, KIND, overwrite=overwrite, replaces=True)  # the new checkpoint replaces it whole
    check_init(cfg)
    device, scaler = single_device(cfg.device, cfg.mixed_precision)
    # no data with steps=0 and a starting checkpoint: a conversion, e.g. a transformers DPR pair to one folder
    converting = cfg.steps == 0 and not examples and bool(cfg.init or cfg.init_question)
    row_of = {p.id: i for i, p in enumerate(passages)}
    usable = []
    for ex in examples:
        gold = [g for g in ex.gold_passage_ids if g in row_of]
        if gold:
            usable.append((ex, row_of[gold[0]]))
    gold_rows = [{row_of[g] for g in ex.gold_passage_ids if g in row_of} for ex, _ in usable]  # every gold, masked in the loss
    if not usable and not converting and not any(ex.gold_passage_ids for ex in examples):
        # a DPR biencoder file of the older releases: contexts of title and text only, which name no passage
        raise InputError("--train", "no training question names a gold passage id (gold_passage_ids; in DPR's JSON, "
                         "positive_ctxs[].passage_id or psg_id): a DPR file whose contexts carry only title and text "
                         "cannot be matched to --passages (their title and text are not used)")
    if not usable and not converting:
        raise InputError("--train", "no training question has a gold_passage_id found in --passages", field="gold_passage_ids")
    if cfg.steps and cfg.batch_size > len(usable):  # else every step trained on all of them, a smaller batch than asked
        raise InputError("--batch-size", f"{cfg.batch_size} exceeds the {len(usable)} training questions with a gold "
                         "passage in --passages")
    scratch = not (cfg.init or cfg.init_question)
    # only a scratch tokenizer reads the texts: a copy of every passage's, some 15 GB for psgs_w100's 21 M
    texts = [f"{p.title} {p.text}" for p in passages] + [ex.question for ex, _ in usable] if scratch else []
    q_enc, c_enc, tokenizer = init_encoders(cfg, texts)  # before mining: a starting folder that does not fit fails first
    asked = cfg.vocab_size
    if scratch:  # the size the model was built with, which a corpus of many characters (Chinese) makes larger than asked
        cfg = replace(cfg, vocab_size=len(tokenizer))
        if cfg.vocab_size > asked:
            warnings.warn(LewisragWarning(vocab_note(tokenizer, asked)), stacklevel=2)
    else:  # the start's sizes (its question side's), not the scratch flags' defaults, which the CLI refuses with --init*
        started = q_enc.config
        cfg = replace(cfg, vocab_size=started.vocab_size, hidden_size=started.hidden_size, layers=started.num_hidden_layers,
                      heads=started.num_attention_heads, dropout=started.hidden_dropout_prob,
                      attention_dropout=started.attention_probs_dropout_prob)
    # shared is what the start made of it: a pair, or a checkpoint whose encoders have moved apart, trains as two
    p_max_length, q_max_length = start_limits(cfg, q_enc, c_enc, tokenizer)
    cfg = replace(cfg, shared=_tied(q_enc, c_enc), p_max_length=p_max_length, q_max_length=q_max_length)
    source = hard_negative_source(cfg, [ex for ex, _ in usable], row_of)
    if source == "bm25" and cfg.hard_negatives_from == "auto":
        note_unused_given([ex for ex, _ in usable], row_of)
    negatives, counts = hard_negative_rows(source, [ex for ex, _ in usable], passages, row_of)
    cfg = replace(cfg, hard_negatives_from=source)  # the source used, as vocab_size and shared record theirs
    held = _HeldRows(passages)
    if cfg.steps:  # every step's gold passages and hard negatives, read once
        held.hold([r for _, r in usable] + [r for candidates in negatives for r in candidates])
    q_enc.to(device), c_enc.to(device)
    q_enc.train(), c_enc.train()
    params = list({id(p): p for p in [*q_enc.parameters(), *c_enc.parameters()]}.values())
    opt = adamw(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = get_linear_schedule_with_warmup(opt, warmup_steps(cfg.warmup, cfg.steps), cfg.steps)
    rng = random.Random(cfg.seed)
    pick_rng = random.Random(f"hard-negatives:{cfg.seed}")  # apart from `rng`: the batch order is the same whatever the source
    order: list[int] = []
    losses = []
    skipped = 0  # fp16 steps whose gradients overflowed (the scaler left the weights alone)
    unlearned: list[int] = []  # steps whose batch held no negative for any question: a loss of 0, nothing to learn
    # the one mining pass, at the share of the steps rounded as warmup's (0.29 x 100 is step 29, where int() made it 28)
    mine_at = warmup_steps(cfg.self_negatives_at, cfg.steps) if cfg.self_negatives_at else None
    mined: list[int | None] = []  # per usable question, its self-mined negative from step `mine_at` on
    for step in range(cfg.steps):
        if len(order) < cfg.batch_size:
            fresh = list(range(len(usable)))
            rng.shuffle(fresh)
            order += fresh
        batch, order = order[: cfg.batch_size], order[cfg.batch_size :]
        if step == mine_at:
            mined = mine_self_negatives(q_enc, c_enc, tokenizer, cfg, [ex for ex, _ in usable], passages)
            held.hold([r for r in mined if r is not None])
            counts["n_no_self_negative"] = mined.count(None)  # every passage it ranks high is gold or holds an answer
        picked = [pick_negative(negatives[i], pick_rng) for i in batch]
        rows = [usable[i][1] for i in batch] + [r for r in picked if r is not None]
        rows += [mined[i] for i in batch if mined and mined[i] is not None]
        q = tokenizer([usable[i][0].question for i in batch], truncation=True, max_length=cfg.q_max_length,
                      padding=True, return_tensors="pt").to(device)
        read = held(rows)
        p = tokenize_texts(tokenizer, [(x.title, x.text) for x in read], cfg.p_max_length).to(device)
        with autocast(cfg.mixed_precision, device.type):
            q_vec = q_enc(**q).pooler_output  # (B, D)
            p_vec = c_enc(**p).pooler_output  # (B + negatives, D): golds, hard negatives, self-mined ones
        scores = q_vec.float() @ p_vec.float().T  # (B, B + negatives), in float32 whatever the autocast
        # A passage gold for this question (another question's positive, or another's hard negative, that is
        # also this one's gold: two questions about one passage, or a question with several gold ids) is no
        # negative for it; only its own column n stays.
        same = [[rows[j] in gold_rows[i] and j != n for j in range(len(rows))] for n, i in enumerate(batch)]
        if all(masked or j == n for n, row in enumerate(same) for j, masked in enumerate(row)):
            unlearned.append(step + 1)  # their one gold passage shared, no hard negative: each scores its own alone
        scores = scores.masked_fill(torch.tensor(same, device=device), -1e4)  # (B, B + negatives)
        loss = F.cross_entropy(scores, torch.arange(len(batch), device=device))
        opt.zero_grad(set_to_none=True)
        skipped += bool(backward_step(loss, opt, sched, scaler, params, 2.0).get("skipped_inf"))
        losses.append(loss.item())
        if not math.isfinite(losses[-1]) and not scaler.is_enabled():  # under fp16 the scaler skips such a step
            raise diverged(f"the loss became {losses[-1]} at step {step + 1}", cfg.lr)
        if on_step:
            on_step(step + 1, losses[-1])
    # fp16: skipped steps leave the weights as they were, finite, and the check below passes: the untrained encoders
    if cfg.steps and scaler.is_enabled() and (why := all_overflowed(skipped, cfg.steps, losses[-1])):
        raise diverged(why, cfg.lr, also=" or train with --mixed-precision bf16")
    if unlearned:
        warnings.warn(LewisragWarning(
            f"{len(unlearned)} of the {cfg.steps} steps (the first: step {unlearned[0]}) had no negative to learn from: "
            + ("a batch of one question (--batch-size 1) holds only its own gold passage, and no hard negative was "
               "given, so their loss is 0; raise --batch-size (the other questions' passages are the in-batch "
               "negatives), or give hard negatives" if cfg.batch_size == 1 else
               "every passage of the batch is gold for every question in it (questions sharing one gold passage, and "
               "no hard negative), so their loss is 0; give more distinct gold passages, or hard negatives")
            + " (n_steps_no_negative in lewisrag_dpr.json)"), stacklevel=2)
    if cfg.steps and not finite(params):  # the last step's update, whatever the loss (an index of NaN vectors else)
        raise diverged(f"the encoders' weights hold NaN or inf after step {cfg.steps}", cfg.lr)
    q_enc.cpu().eval(), c_enc.cpu().eval()  # the checkpoint is written, and returned, from the CPU
    if cfg.shared:  # two independent copies from here on: RAG fine-tuning moves only the question side
        _tie(q_enc, c_enc, copy.deepcopy)
    ckpt = DPRCheckpoint(q_enc, c_enc, tokenizer, {})
    meta = {"config": asdict(cfg), "max_length": cfg.p_max_length, "q_max_length": cfg.q_max_length,
            "final_loss": mean(losses[-FINAL_LOSS_STEPS:]), "n_train": len(usable), "n_no_gold": len(examples) - len(usable),
            **counts, "n_steps_no_negative": len(unlearned)}
    if scratch:  # config's vocab_size is the size used; this one, what --vocab-size asked
        meta["vocab_size_asked"] = asked
    with staged_dir(out, KIND) as tmp:
        ckpt.save(tmp, meta)
    return ckpt.meta
