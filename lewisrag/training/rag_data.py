"""The inputs of RAG fine-tuning, checked before anything is written (QA files, index, DPR checkpoint or
transformers DPRQuestionEncoder folder, generator); targets in transformers' RAG label convention; a resumable seeded order; sharding
across processes; and the retrieval-collapse monitor.

Shape alphabet: B batch, K retrieved docs, T target length.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from lewisrag.data.io import InputError, LewisragWarning
from lewisrag.data.pretrained import check_generator_folder, load_generator
from lewisrag.data.records import QAExample, answer_sources, check_gold_ids, of_kinds, read_qa, refuse_regex_targets
from lewisrag.data.tasks import LABELS
from lewisrag.index.dense import DenseIndex
from lewisrag.index.encoders import load_question_encoder
from lewisrag.rag_model import RagModel, RagSettings, Tokenizers
from lewisrag.rag_model.decoding import check_generation_config, generation_file
from lewisrag.rag_model.model import check_decoder_length, max_positions
from lewisrag.training.configs import check_rag_flags
from lewisrag.training.end2end import passage_encoder
from lewisrag.training.tasks import prepare_generator


class Components(NamedTuple):
    model: Any  # RagModel
    tokenizers: Any  # Tokenizers(question, generator)
    index: Any  # DenseIndex, memory-mapped
    pairs: list[tuple[QAExample, str]]  # training (example, target answer)
    dev: list[QAExample]  # dev examples scored by the task's metric (training.tasks.DEV_METRIC)
    skipped: int  # training questions without an answer, left out
    units: list[list[int]] | None  # indices of `pairs` that train in one batch (group_units); None: none grouped


def load_components(cfg, processes: int = 1, with_faiss: bool = True) -> Components:
    """Read and check every input of `cfg` (a `rag.RagTrainConfig`); any problem is an InputError, raised
    before anything is written. `with_faiss=False`: the index opens without its FAISS index (another
    process searches it, `index.shared`)."""
    check_config(cfg, processes)
    every, dev = read_qa(cfg.train, cfg.qa_fields), read_qa(cfg.dev, cfg.qa_fields)
    refuse_regex_targets(every, cfg.train, cfg.qa_fields)
    for path, examples, does in ((cfg.train, every, "trains and scores"), (cfg.dev, dev, "scores")):
        if cfg.task != "fever":  # the labels trained or scored as free-text answers, exit 0
            refuse_fever_claims(examples, path, cfg.qa_fields,
                                f"--task {cfg.task} {does} as free-text answers: train them with --task fever")
    train = of_kinds(every, cfg.train_kinds)
    pairs, skipped = training_pairs(train)
    # an optimizer step draws its whole batch at once (`next_batch`), so the data must hold all of it
    need, asked = cfg.batch_size * cfg.grad_accum, (f"--batch-size {cfg.batch_size}" if cfg.grad_accum == 1 else
                                                    f"--batch-size {cfg.batch_size} x --grad-accum {cfg.grad_accum}")
    if len(pairs) < need and len(training_pairs(every)[0]) >= need:  # the kinds, not the answers
        raise InputError("--train-kinds", f"{cfg.train_kinds} keeps {len(pairs)} of {cfg.train}'s questions with "
                         f"answers, fewer than {asked}")
    if len(pairs) < need:
        raise InputError(cfg.train, f"{len(pairs)} questions with answers, fewer than {asked}", field="answers")
    units = group_units([ex for ex, _ in pairs])
    warn_split_groups(units, need, asked, cfg.train)
    index = DenseIndex.load(cfg.index, mmap=True, with_faiss=with_faiss)
    dpr = load_question_encoder(cfg.encoder, cfg.context_encoder)
    index.check_encoder(dpr.ctx_fingerprint, dpr.dim, swap=cfg.swap)
    if cfg.n_docs > len(index.passages):
        raise InputError(cfg.index, f"--n-docs {cfg.n_docs} exceeds the index's {len(index.passages)} passages")
    for path, examples in ((cfg.train, every), (cfg.dev, dev)):  # a gold id elsewhere made the dev hit@k a miss in silence
        check_gold_ids(examples, index.passages, path, f"the index {cfg.index}", cfg.qa_fields)
    if cfg.task == "fever":  # any other answer trained as a label and scored 0 accuracy, exit 0
        for path, examples in ((cfg.train, every), (cfg.dev, dev)):
            check_labels(examples, path, cfg.qa_fields)
    check_dev_scorable(dev, cfg)
    generator, gen_tokenizer = load_generator(cfg.generator)
    # the lengths a RagModel uses: the combined one capped at the generator's positions (fit_to_generator)
    check_lengths(cfg.max_target_length, cfg.max_combined_length, gen_tokenizer, max_positions(generator.config))
    prepare_generator(cfg.task, generator, gen_tokenizer)  # FEVER's labels as single tokens
    # the dev evaluations decode with its generation_config.json: refused now, not at the first one
    check_generation_config(generator.generation_config, generator.config.vocab_size, generation_file(cfg.generator))
    # the index's encoder, which the question encoder is trained to search (the pair's, unless --swap took another's or
    # a DPRQuestionEncoder folder named none): `ask` and `swap` then accept the index it trained on, and refuse others
    settings = RagSettings(variant=cfg.variant, n_docs=cfg.n_docs, label_smoothing=cfg.label_smoothing,
                           max_combined_length=cfg.max_combined_length, index_path=str(Path(cfg.index).resolve()),
                           index_fingerprint=index.ctx_fingerprint)
    context_encoder = passage_encoder(dpr, cfg, index) if cfg.train_context_encoder else None  # training.end2end
    model = RagModel(dpr.question_encoder, generator, cfg.variant, cfg.n_docs, settings, context_encoder=context_encoder)
    return Components(model, Tokenizers(dpr.tokenizer, gen_tokenizer), index, pairs, dev, skipped, units)


GPU_SEARCH_SHARE = 0.5  # "auto" puts the vectors on the GPU only if they take at most this share of its free memory


def check_dev_scorable(dev: Sequence[QAExample], cfg) -> None:
    """With dev evaluations on, `dev` holds an example the task's dev score counts (`rag.dev_score`:
    QA scores short-answer questions with answers, the other tasks any with answers), else an
    InputError: a dev score of NaN at every evaluation kept no best model, and the run exited 0."""
    if not cfg.eval_every:
        return
    scored = [ex for ex in dev if ex.answers and (cfg.task != "qa" or ex.kind == "short")]
    if not scored:
        what, why = ("short-answer question", "long-form ones are not scored by exact match; ") if cfg.task == "qa" else ("example", "")
        raise InputError(cfg.dev, f"no {what} with answers to score the dev evaluations on ({why}--eval-every "
                         f"{cfg.eval_every}, 0 turns them off)", field=(cfg.qa_fields or {}).get("answers", "answers"))


def check_labels(examples: Sequence[QAExample], path, fields=None) -> None:
    """FEVER: every answer of `examples` (`read_qa(path, fields)`'s) is one of LABELS, else an
    InputError naming file, line and field (`records.answer_sources`: a FEVER v1.0 claim's first row,
    its `label`; a KILT record's `output[j].answer`)."""
    if all(answer in LABELS for ex in examples for answer in ex.answers):
        return  # the file is read again only to name a bad label
    for (line, fields_of), ex in zip(answer_sources(path, fields), examples):
        for answer, where in zip(ex.answers, fields_of):
            if answer not in LABELS:
                raise InputError(path, f"{answer!r} is no FEVER label (--task fever: {', '.join(LABELS)})", line=line,
                                 field=where)


def fever_claims(examples: Sequence[QAExample]) -> bool:
    """Whether `examples` are FEVER claims: some have answers, and every answer is one of LABELS. `train rag`
    without --task fever, `train stitched` and `compare --questions` (`refuse_fever_claims`), `swap` and
    `reproduce --preset base` (`experiments.base`) refuse them: the labels were trained and scored as
    free-text answers, exit 0.

    >>> claim, question = QAExample("1", "c", ["SUPPORTS"]), QAExample("2", "q", ["Paris"])
    >>> fever_claims([claim, QAExample("3", "d", [])]), fever_claims([claim, question])
    (True, False)
    """
    answered = [ex.answers for ex in examples if ex.answers]
    return bool(answered) and all(answer in LABELS for answers in answered for answer in answers)


def refuse_fever_claims(examples: Sequence[QAExample], path, fields, which: str) -> None:
    """An InputError when `examples` (`read_qa(path, fields)`'s) are FEVER claims (`fever_claims`), at the
    first answer, in the file's own field ('label' in FEVER v1.0's); the message goes on with `which`:
    what the command would have done with the labels (`train rag` without --task fever, `train stitched`,
    `compare --questions`: each scored or trained them as free-text answers, exit 0)."""
    if not fever_claims(examples):
        return
    line, where = next((line, where[0]) for (line, where), ex in zip(answer_sources(path, fields), examples)
                       if ex.answers)
    raise InputError(path, f"FEVER claims (every answer, from this one on, is one of {', '.join(LABELS)}), "
                     f"which {which}", line=line, field=where)


def check_lengths(max_target_length: int, max_combined_length: int, tokenizer, positions: int | None = None) -> None:
    """Both lengths leave room for content beside the tokenizer's own specials: `--max-target-length`
    for the decoder start token and one answer token (`answer_labels`: BART's 3 left every target
    empty, and at 2 the tokenizer read its max_length of 1 as no truncation at all);
    `--max-combined-length` for one passage token and one question token (the generator reads
    (title, text, question) as one string cut at this length, `rag_model.model.generator_input`: at 2
    BART read its two special tokens alone).

    `positions`: the generator's `max_position_embeddings` (`rag_model.model.max_positions`; None: no
    such limit). A RagModel cuts its inputs at min(--max-combined-length, positions)
    (`fit_to_generator`), so that is the length checked, the refusal naming the positions: BART of 3
    positions with --max-combined-length 300 passed a check of 300, then read one token beside its two
    specials. Its decoder reads each target (and each dev evaluation decodes up to --max-target-length
    tokens) in the same positions, so a --max-target-length past them is refused: a long answer or
    decoding ended in an IndexError in the middle of training.
    """
    specials = tokenizer.num_special_tokens_to_add()
    combined = max_combined_length if positions is None else min(max_combined_length, positions)
    room = f"its {specials} special tokens, one passage token and one question token"
    if combined < specials + 2 <= max_combined_length:  # the flag has room; the generator's positions do not
        raise InputError("--max-combined-length", f"{max_combined_length} is capped at the generator's {positions} "
                         f"positions (max_position_embeddings), which leave no room for content: at least {specials + 2} "
                         f"are needed with this generator's tokenizer ({room})")
    if combined < specials + 2:
        raise InputError("--max-combined-length", f"must be at least {specials + 2} with this generator's tokenizer "
                         f"({room}), got {max_combined_length}")
    if max_target_length < specials + 2:
        raise InputError("--max-target-length", f"must be at least {specials + 2} with this generator's tokenizer (the "
                         f"decoder start token, its {specials} special tokens and one answer token), got {max_target_length}")
    check_decoder_length("--max-target-length", max_target_length, positions, "each target and each decoded answer")


def place_search(index: DenseIndex, choice: str, device) -> str:
    """Where training searches `index`: "faiss" (on the CPU) or the GPU `device` (`DenseIndex.search_on`).

    "auto" takes the GPU when training runs on one, the index is Flat (exact) and its vectors fit
    in GPU_SEARCH_SHARE of the free memory, as float32 or else as float16 (`search_dtype`); "gpu"
    insists (an error if it cannot).
    """
    on_gpu = getattr(device, "type", str(device)) == "cuda"
    if choice == "cpu" or (choice == "auto" and not (on_gpu and index.is_exact)):
        return "faiss"
    if not on_gpu:
        raise InputError("--search-device", "gpu: training is not on a GPU")
    free, _ = torch.cuda.mem_get_info(device)
    dtype = search_dtype(len(index.embeddings) * index.dim, free)
    if dtype is None and choice == "auto":
        return "faiss"
    index.search_on(str(device), dtype or "float16")  # refuses an approximate index
    return str(device)


def search_dtype(values: int, free_bytes: int) -> str | None:
    """How `values` vector entries fit in GPU_SEARCH_SHARE of `free_bytes` of device memory:
    "float32", else "float16" (half the bytes; a float32 re-scoring of the top candidates keeps the
    exact top-K, see `DenseIndex.search_on`), else None.

    >>> GiB = 2**30
    >>> [search_dtype(21_015_324 * 768, free * GiB) for free in (140, 100, 40)]  # the paper's 21M passages
    ['float32', 'float16', None]
    """
    for dtype, size in (("float32", 4), ("float16", 2)):
        if values * size <= GPU_SEARCH_SHARE * free_bytes:
            return dtype
    return None


def check_config(cfg, processes: int) -> None:
    """Flag values that cannot work, named by their CLI flag (`configs.check_rag_flags`), then the input paths."""
    check_rag_flags(cfg, processes)
    for flag, path in (("--train", cfg.train), ("--dev", cfg.dev), ("--index", cfg.index), ("--encoder", cfg.encoder),
                       ("--generator", cfg.generator)):
        if not path or not (path.startswith("hf:") or Path(path).exists()):
            raise InputError(path or flag, f"{flag}: not found")
    if cfg.context_encoder and not Path(cfg.context_encoder).exists():
        raise InputError(cfg.context_encoder, "--context-encoder: not found")
    if Path(cfg.generator).is_dir():  # a BART (RAG decodes with its decoder), told by config.json before anything loads
        check_generator_folder(cfg.generator)


def training_pairs(examples: Sequence[QAExample]) -> tuple[list[tuple[QAExample, str]], int]:
    """(example, target) for every example with an answer (its first), and how many had none.

    Questions without an answer (`not_in_kb`) give the generator nothing to learn; the caller
    reports how many were left out.

    >>> ex = [QAExample("1", "q?", ["a", "b"]), QAExample("2", "r?", [], category="not_in_kb")]
    >>> [(e.id, t) for e, t in training_pairs(ex)[0]], training_pairs(ex)[1]
    ([('1', 'a')], 1)
    """
    pairs = [(ex, ex.answers[0]) for ex in examples if ex.answers]
    return pairs, len(examples) - len(pairs)


def answer_labels(answers: Sequence[str], tokenizer, decoder_start_id: int, pad_id: int, max_length: int):
    """Labels (B, T) in transformers' RAG convention: fed to the decoder as is, targets shifted left.

    The first label is the decoder start token and the rest is the tokenized answer with the
    tokenizer's own specials (`<s> answer </s>` for BART): the same sequence BART's shift-right
    makes from that answer, so a generator pretrained as plain BART starts from what it knows, and
    decoding from the start token reproduces it.
    """
    ids = tokenizer(list(answers), truncation=True, max_length=max_length - 1)["input_ids"]
    t = 1 + max(len(x) for x in ids)
    labels = torch.full((len(ids), t), pad_id, dtype=torch.long)  # (B, T)
    for i, x in enumerate(ids):
        labels[i, 0] = decoder_start_id
        labels[i, 1 : 1 + len(x)] = torch.tensor(x, dtype=torch.long)
    return labels


def epoch_order(seed: int, epoch: int, n: int) -> np.ndarray:
    """The seeded permutation of `n` examples for `epoch`: recomputed, never stored, on resume.

    >>> bool((epoch_order(0, 3, 10) == epoch_order(0, 3, 10)).all()), sorted(epoch_order(0, 1, 5).tolist())
    (True, [0, 1, 2, 3, 4])
    """
    return np.random.default_rng([seed, epoch]).permutation(n)


@dataclass(frozen=True)
class DataPosition:
    """Where training stands in the data: the epoch and the next index into its permutation."""

    epoch: int = 0
    index: int = 0


def next_batch(pos: DataPosition, seed: int, n: int, batch_size: int,
               units: Sequence[Sequence[int]] | None = None) -> tuple[list[int], DataPosition]:
    """The next `batch_size` example ids and the position after them.

    An epoch's tail shorter than a batch is skipped, so every batch is full and every process
    gets an equal share of it. With `units` (`group_units`) the epoch permutes whole units and
    lays their examples side by side, so a unit stays in one batch when all units have one size and
    the batch size is a multiple of it (FEVER's minimal pairs with an even batch size); units of
    mixed sizes can straddle two batches (`warn_split_groups` says so when a run loads). Without, it
    permutes the examples (as before units existed, so a run resumes the same).

    >>> next_batch(DataPosition(0, 8), 0, 10, 4)[1]
    DataPosition(epoch=1, index=4)
    >>> len(next_batch(DataPosition(), 0, 10, 4)[0])
    4
    >>> ids, _ = next_batch(DataPosition(), 0, 6, 2, units=[[0, 1], [2, 3], [4, 5]])
    >>> ids[1] == ids[0] + 1 and ids[0] % 2 == 0
    True
    """
    if batch_size > n:
        raise ValueError(f"batch size {batch_size} exceeds the {n} training examples")
    if pos.index + batch_size > n:
        pos = DataPosition(pos.epoch + 1, 0)
    order = epoch_order(seed, pos.epoch, n if units is None else len(units))
    if units is not None:
        order = np.array([i for u in order for i in units[u]])
    return order[pos.index : pos.index + batch_size].tolist(), DataPosition(pos.epoch, pos.index + batch_size)


def group_units(examples: Sequence[QAExample]) -> list[list[int]] | None:
    """Indices of `examples` in units that train in one batch: those sharing a `group` (minimal
    pairs, `data.tasks.fever_examples`), each other example alone; None when no example has a
    group (plain shuffling, `next_batch`).

    Why: a small reader shown a claim's SUPPORTS and REFUTES versions in different batches stayed
    at chance between them; in one batch, where the value is all that differs, it learnt the
    comparison (docs/recipe.md, "FEVER").

    >>> ex = [QAExample(str(i), "q", ["a"], group=g) for i, g in enumerate(["p1", None, "p2", "p1", "p2"])]
    >>> group_units(ex), group_units(ex[1:2])
    ([[0, 3], [1], [2, 4]], None)
    """
    if all(ex.group is None for ex in examples):
        return None
    units: dict = {}
    for i, ex in enumerate(examples):
        units.setdefault(("group", ex.group) if ex.group is not None else ("alone", i), []).append(i)
    return list(units.values())


def warn_split_groups(units: Sequence[Sequence[int]] | None, step: int, asked: str, path) -> None:
    """A LewisragWarning when some groups (`group_units`) can be cut across two optimizer steps: a step
    draws `step` examples at once (`next_batch`: --batch-size x --grad-accum, `asked` naming them), so
    every group trains within one step only when all units are of one size and `step` is a multiple of
    it, or a step takes the whole data. Said, not refused: the run trains, only not on whole pairs."""
    if units is None or step >= sum(len(u) for u in units):
        return
    sizes = sorted({len(u) for u in units})
    if len(sizes) == 1 and step % sizes[0] == 0:
        return
    groups = sum(len(u) > 1 for u in units)
    if len(sizes) == 1:
        what = (f"its {groups} groups of {sizes[0]} examples (field 'group') train in one optimizer step only when "
                f"{asked} is a multiple of {sizes[0]}: some will be cut across two steps")
    else:  # at any batch size: a unit of another size before a group shifts where it starts
        what = (f"its {groups} groups (field 'group') beside units of other sizes ({', '.join(map(str, sizes))} examples; "
                f"an example without a group is a unit of 1) can be cut across two optimizer steps whatever {asked}: "
                "give every group the same number of examples, and every example a group")
    warnings.warn(LewisragWarning(f"{path}: {what}"), stacklevel=3)


def shard(batch: Sequence, rank: int, world: int) -> list:
    """This process's contiguous share of a global batch; the shares' union is the batch.

    >>> shard([1, 2, 3, 4, 5, 6], 1, 2)
    [4, 5, 6]
    """
    if len(batch) % world:
        raise ValueError(f"a batch of {len(batch)} does not split evenly over {world} processes")
    per = len(batch) // world
    return list(batch[rank * per : (rank + 1) * per])


def doc_entropy(doc_scores) -> float:
    """Mean entropy (nats) of p(z|x) = softmax(doc_scores) over a batch (B, K).

    Near log K the retriever cannot tell documents apart; falling toward 0 while recall drops is
    the collapse the paper's retriever can fall into (it then always trusts one document).

    >>> import math
    >>> import torch
    >>> round(doc_entropy(torch.zeros(2, 4)), 4) == round(math.log(4), 4)
    True
    """
    logp = torch.log_softmax(doc_scores.detach().float(), dim=-1)  # (B, K)
    return float(-(logp.exp() * logp).sum(-1).mean())
