"""The hot-swap test (Lewis et al. 2020, §4.5): the same trained models read different indexes.

Every model answers every question set from every index, scored by exact match. If the model's
knowledge lives in the index, swapping the 2016 index for the 2018 one moves its answers from the
2016 facts to the 2018 ones: the matched cells are high and the mismatched ones low.

Indexes must be built with the context encoder the model was trained against (its fingerprint is
in the model's settings); another encoder is accepted only with `swap=True` (`--swap`), since the
question vectors would then be compared with vectors from a different space.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from lewisrag.data.io import InputError, given_once
from lewisrag.data.records import read_qa
from lewisrag.data.threads import resolve_device
from lewisrag.training.checkpoint import load_trained
from lewisrag.training.rag_data import place_search
from lewisrag.index.dense import DenseIndex
from lewisrag.rag_model.answering import answer_questions
from lewisrag.scoring.qa import exact_match


def labels(paths: Sequence[str | os.PathLike], stem: bool = False) -> list[str]:
    """Short unique names for paths: the last component (file stem), else the whole path.

    >>> labels(["runs/a/rag", "runs/b/rag"]), labels(["x/questions_a.jsonl", "y/questions_b.jsonl"], stem=True)
    (['runs/a/rag', 'runs/b/rag'], ['questions_a', 'questions_b'])
    """
    short = [Path(p).stem if stem else Path(p).name for p in paths]
    return short if len(set(short)) == len(short) else [str(p) for p in paths]


def load_question_sets(paths: Sequence[str | os.PathLike], qa_fields: dict[str, str] | None = None) -> list[list]:
    """Each file's short-answer questions that have an answer (exact match needs one); `qa_fields`
    as `data.records.read_qa` takes it."""
    sets = []
    for p in paths:
        scored = [ex for ex in read_qa(p, qa_fields) if ex.kind == "short" and ex.answers]
        if not scored:
            raise InputError(p, "no short-answer question with an answer to score by exact match", field="answers")
        sets.append(scored)
    return sets


def check_pairs(models: Sequence, indexes: Sequence, swap: bool) -> None:
    """Refuse, before any work, an index built by another context encoder than a model's (unless swap)."""
    for model in models:
        cfg = model.question_encoder.config
        dim = int(getattr(cfg, "projection_dim", 0) or cfg.hidden_size)
        for index in indexes:
            fingerprint = model.settings.index_fingerprint or index.ctx_fingerprint  # unknown: only dims checked
            index.check_encoder(fingerprint, dim, swap=swap, flags=("--swap",))


def swap_matrix(model_paths: Sequence[str | os.PathLike], index_paths: Sequence[str | os.PathLike],
                question_paths: Sequence[str | os.PathLike], swap: bool = False, num_beams: int = 1,
                max_length: int = 32, batch_size: int = 16,
                on_progress: Callable[[str, int, int], None] | None = None, qa_fields: dict[str, str] | None = None,
                device: str = "cpu") -> dict:
    """Exact match of every model × index × question set, with the predictions behind each cell; the
    models answer on `device` (auto, cpu, cuda[:N]).

    Returns {"models", "indexes", "questions": names, "n_questions": {set: n},
    "em": {model: {index: {set: EM}}}, "predictions": the same nesting with lists of answers}.
    """
    if not model_paths or not index_paths or not question_paths:
        raise InputError("swap", "needs at least one --model, one --index and one --questions")
    for flag, paths in (("--model", model_paths), ("--index", index_paths), ("--questions", question_paths)):
        # the matrix keys its cells by name: a repeat would fold into one cell
        given_once(flag, map(str, paths), key=lambda p: p if p.startswith("hf:") else os.path.realpath(p))
    sets = load_question_sets(question_paths, qa_fields)
    indexes = [DenseIndex.load(p, mmap=True) for p in index_paths]
    models = [load_trained(p, device=device) for p in model_paths]
    for index in indexes:  # a Flat index is searched on the GPU where it fits, as in training
        place_search(index, "auto", resolve_device(device))
    check_pairs([m for m, _ in models], indexes, swap)
    for (model, _), path in zip(models, model_paths):
        vocab = model.generator.config.vocab_size
        if num_beams > vocab:  # more beams than first tokens: an allocation's traceback, or hours
            raise InputError("--num-beams", f"must be at most the vocabulary of {path}'s generator ({vocab} tokens), got {num_beams}")
    names_m, names_i, names_q = labels(model_paths), labels(index_paths), labels(question_paths, stem=True)
    total = len(models) * len(indexes) * sum(len(s) for s in sets)
    done = 0
    em: dict = {}
    predictions: dict = {}
    for (model, tokenizers), m in zip(models, names_m):
        for index, i in zip(indexes, names_i):
            for questions, q in zip(sets, names_q):
                def tick(n: int) -> None:
                    nonlocal done
                    done += n
                    if on_progress:
                        on_progress("swap", done, total)

                preds = answer_questions(model, tokenizers, index, [ex.question for ex in questions], num_beams=num_beams,
                                         max_length=max_length, batch_size=batch_size, swap=swap, on_batch=tick)
                em.setdefault(m, {}).setdefault(i, {})[q] = sum(
                    exact_match(p, ex.answers) for p, ex in zip(preds, questions)) / len(questions)
                predictions.setdefault(m, {}).setdefault(i, {})[q] = preds
    return {"models": names_m, "indexes": names_i, "questions": names_q,
            "n_questions": {q: len(s) for q, s in zip(names_q, sets)}, "em": em, "predictions": predictions,
            "config": {"swap": swap, "num_beams": num_beams, "max_length": max_length,
                       "model_paths": [str(p) for p in model_paths], "index_paths": [str(p) for p in index_paths],
                       "question_paths": [str(p) for p in question_paths]}}
