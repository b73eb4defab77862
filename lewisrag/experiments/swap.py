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
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from lewisrag.data.io import InputError, given_once, read_json
from lewisrag.data.records import answer_sources, read_qa
from lewisrag.data.tasks import LABELS
from lewisrag.data.threads import resolve_device
from lewisrag.experiments.ask import check_max_length, knows_no_word, question_problem, unpaired_note
from lewisrag.rag_model.checkpoints import EXPORT_RECORD, read_settings
from lewisrag.training.checkpoint import load_trained, resolve_model_dir
from lewisrag.training.rag_data import fever_claims, place_search
from lewisrag.index.dense import DenseIndex
from lewisrag.rag_model.answering import answer_questions
from lewisrag.scoring.qa import answer_exact_match, is_regex_answered


# how the tasks that are no QA are scored, which exact match of a generated answer is not
NOT_EXACT_MATCH = {"fever": ": label accuracy, whose hot swap is `lewisrag reproduce --tasks fever`'s fever.swap",
                   "jeopardy": ": Q-BLEU-1 of a generated clue"}


def labels(paths: Sequence[str | os.PathLike], stem: bool = False) -> list[str]:
    """Short unique names for paths: the last component (a local file's stem), else the whole path. A local
    path with no last name of its own (".", "./", "..") is named by the folder it resolves to. An hf: spec
    keeps its dots: its config's (trivia_qa's rc.nocontext) are no file suffix.

    >>> labels(["runs/a/rag", "runs/b/rag"]), labels(["x/questions_a.jsonl", "y/questions_b.jsonl"], stem=True)
    (['runs/a/rag', 'runs/b/rag'], ['questions_a', 'questions_b'])
    >>> labels(["hf:trivia_qa:rc.nocontext:validation", "hf:nq_open:validation"], stem=True)
    ['hf:trivia_qa:rc.nocontext:validation', 'hf:nq_open:validation']
    """
    def short(p: str | os.PathLike) -> str:
        path, hub = Path(p), str(p).startswith("hf:")
        if not hub and path.name in ("", ".."):  # Path(".").name is ""
            path = Path(os.path.realpath(p))
        return (path.stem if stem and not hub else path.name) or str(p)  # "/" resolves to "/"

    names = [short(p) for p in paths]
    return names if len(set(names)) == len(names) else [str(p) for p in paths]


def load_question_sets(paths: Sequence[str | os.PathLike], qa_fields: dict[str, str] | None = None,
                       left_out: list[dict[str, int]] | None = None) -> list[list]:
    """Each file's short-answer questions that have an answer (exact match needs one); `qa_fields`
    as `data.records.read_qa` takes it. `left_out`, if given, gets per file the questions not
    scored: {"long": long-form ones, "no_answer": not_in_kb ones without an answer}. A file of FEVER
    claims (`rag_data.fever_claims`) is refused: its labels would be scored as answers."""
    sets = []
    for p in paths:
        examples = read_qa(p, qa_fields)
        if fever_claims(examples):  # the labels scored as free-text answers, exit 0, as check_tasks refuses a FEVER model
            line, where = next((line, where[0]) for (line, where), ex in zip(answer_sources(p, qa_fields), examples)
                               if ex.answers)  # the first answer, in the file's own field ('label' in FEVER v1.0's)
            raise InputError(p, f"FEVER claims (every answer, from this one on, is one of {', '.join(LABELS)}), which are "
                             f"not scored by exact match of a generated answer{NOT_EXACT_MATCH['fever']}; swap measures "
                             "QA models on QA questions", line=line, field=where)
        scored = [ex for ex in examples if ex.kind == "short" and ex.answers]
        if not scored:
            raise InputError(p, "no short-answer question with an answer to score by exact match", field="answers")
        sets.append(scored)
        if left_out is not None:
            left_out.append({"long": sum(ex.kind != "short" for ex in examples),
                             "no_answer": sum(ex.kind == "short" and not ex.answers for ex in examples)})
    return sets


def line_of(path: str | os.PathLike, example, qa_fields: dict[str, str] | None = None) -> int | None:
    """The line of `path` (an hf: split's record number) that `read_qa(path, qa_fields)` read `example` from,
    to name it in an error as the reader names its own: found again on that error's path alone, as
    `records.refuse_regex_targets` finds its line, so a file that is fine is read once."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what the reader warns of (merged rows) was said at the first read
        sources, examples = answer_sources(path, qa_fields), read_qa(path, qa_fields)
    return next((line for (line, _), ex in zip(sources, examples)
                 if (ex.id, ex.question) == (example.id, example.question)), None)


def check_tasks(model_dirs: Sequence[Path]) -> None:
    """Refuse a model (`training.checkpoint.resolve_model_dir`'s folder) trained for Jeopardy or FEVER
    (`train rag --task`, or an export of such a model: `trained_task`): the matrix scores free-form short
    answers by exact match, which is not how either task is scored (Q-BLEU-1; FEVER's label scoring, whose
    hot swap `reproduce --tasks fever` measures as fever.swap)."""
    for p in model_dirs:
        task = trained_task(p)
        if task not in (None, "qa"):
            raise InputError(p, f"was trained for --task {task}, which is not scored by exact match of a generated answer"
                             f"{NOT_EXACT_MATCH.get(task, '')}; swap measures QA models", field="task")


def trained_task(model_dir: Path) -> str | None:
    """The task (`train rag --task`) a `resolve_model_dir` folder was trained for: its train_config.json's
    (beside rag.json in best/ and final/; "qa" where it names none), else what the lewisrag_export.json of a
    folder `lewisrag export` wrote carries over (`export.export_rag`). None where neither records one: a
    transformers RAG folder from elsewhere, or an export written before the record held the task."""
    config, unknown = model_dir / "train_config.json", "qa"
    if not config.is_file():
        config, unknown = model_dir / EXPORT_RECORD, None  # an export's null: its source recorded none
        if not config.is_file():
            return None
    recorded = read_json(config)
    if not isinstance(recorded, dict):  # lewisrag writes an object: a list here is a damaged file
        raise InputError(config, f"expected a JSON object, got {type(recorded).__name__}", field="(top level)")
    task = recorded.get("task", unknown)
    if not (isinstance(task, str) or (task is None and unknown is None)):
        raise InputError(config, f"expected a task name, got {task!r}", field="task")
    return task


def overlap_notes(index_names: Sequence[str], indexes: Sequence, set_names: Sequence[str], sets: Sequence[list]) -> list[str]:
    """Say when two indexes hold the same passages, or two question sets ask the same questions with
    the same answers: their rows (columns) of the matrix can then differ by nothing that a knowledge
    update moves, and the matched and mismatched cells mean nothing. Short of that, say how many
    questions two sets share with an answer exact match counts as the same (`unchanged_answers`)."""
    notes = []
    for a in range(len(indexes)):
        for b in range(a + 1, len(indexes)):
            ma, mb = indexes[a].manifest, indexes[b].manifest
            if ma["n_passages"] != mb["n_passages"]:
                continue
            # the passages in any row order (`store.build_hashes`); an index built before the field, in row order only
            field = "passage_set_hash" if "passage_set_hash" in ma and "passage_set_hash" in mb else "content_hash"
            if ma[field] == mb[field]:
                order = " in another row order" if ma["content_hash"] != mb["content_hash"] else ""
                notes.append(f"indexes {index_names[a]} and {index_names[b]} hold the same {ma['n_passages']} passages"
                             f"{order} ({field.replace('_', ' ')} {ma[field]}): their rows can differ only by how they are "
                             "searched, not by what the model knows; a knowledge-update test reads indexes of different "
                             "snapshots")

    def asked(examples: list) -> list:
        return sorted((ex.question, sorted(ex.answers)) for ex in examples)

    for a in range(len(sets)):
        for b in range(a + 1, len(sets)):
            if asked(sets[a]) == asked(sets[b]):
                notes.append(f"question sets {set_names[a]} and {set_names[b]} ask the same {len(sets[a])} questions with "
                             "the same answers: their columns are the same experiment; a knowledge-update test asks "
                             "about facts each snapshot answers differently")
            elif same := unchanged_answers(sets[a], sets[b]):
                notes.append(f"question sets {set_names[a]} and {set_names[b]}: {same} of the {len(sets[a])} questions of "
                             f"{set_names[a]} are asked in {set_names[b]} with an answer exact match counts as the same in "
                             "both (an unchanged fact, or one written otherwise: case, punctuation, articles): they score "
                             "alike whichever index the model reads, and raise the mismatched cells")
    return notes


def unchanged_answers(first: list, second: list) -> int:
    """How many questions of `first` are asked in `second` (the same question text) with an answer that exact
    match (`answer_exact_match`, its normalization) scores right against both: the fact did not change
    between the snapshots, and reading the other snapshot's index still answers it.

    >>> from lewisrag.data.records import QAExample
    >>> a = [QAExample("1", "Who leads X?", ["Ana Kel"]), QAExample("2", "Who leads Y?", ["Bo Ren"])]
    >>> unchanged_answers(a, [QAExample("1", "Who leads X?", ["the ana kel."]), QAExample("2", "Who leads Y?", ["Cy Lo"])])
    1
    """
    by_question: dict[str, list] = {}
    for ex in second:
        by_question.setdefault(ex.question.strip(), []).append(ex)
    return sum(any(_same_fact(ex, other) for other in by_question.get(ex.question.strip(), [])) for ex in first)


def _same_fact(x, y) -> bool:
    """Whether an answer of one example is an exact match for the other (a regex example's answers are
    patterns, never predictions: two of them agree when their patterns do)."""
    if is_regex_answered(x) and is_regex_answered(y):
        return sorted(x.answers) == sorted(y.answers)
    return any(answer_exact_match(a, other) for this, other in ((x, y), (y, x)) if not is_regex_answered(this)
               for a in this.answers)


def paired_with(model_dir: Path) -> str | None:
    """The context encoder (its fingerprint) the question encoder of a `resolve_model_dir` folder is paired
    with, as `load_trained` gives it (`settings.index_fingerprint`), read without loading any weight: from
    rag.json's settings, or from the record of a folder `lewisrag export` wrote (`checkpoints.apply_export_record`).
    None where it names none: a transformers RAG folder from elsewhere, or a record its load refuses."""
    if (model_dir / "rag.json").is_file():
        return read_settings(model_dir).index_fingerprint
    if not (model_dir / EXPORT_RECORD).is_file():
        return None
    record = read_json(model_dir / EXPORT_RECORD)
    # an export written before paired_fingerprint records only its index's, as apply_export_record reads it
    fingerprint = record.get("paired_fingerprint", record.get("index_fingerprint")) if isinstance(record, dict) else None
    return fingerprint if isinstance(fingerprint, str) and fingerprint else None


def vector_dim(model) -> int:
    """The width of a loaded RAG model's question vectors: DPR's projection, else its pooled output."""
    cfg = model.question_encoder.config
    return int(getattr(cfg, "projection_dim", 0) or cfg.hidden_size)


def check_pairs(fingerprints: Sequence[str | None], indexes: Sequence, swap: bool,
                dims: Sequence[int | None] | None = None) -> None:
    """Refuse an index holding vectors of another width than a model's question encoder gives, or built by
    another context encoder than the model's (unless swap). `fingerprints`: the context encoders the models
    are paired with (None: unknown, only the width is checked); `dims`: the widths (None: unknown, each
    index's own is taken). Run before any weight loads or any index moves to a GPU, with what the folders
    record (`paired_with`, `declared_dim`), then with the loaded models' (`vector_dim`)."""
    for i, fingerprint in enumerate(fingerprints):
        for index in indexes:
            dim = index.dim if dims is None or dims[i] is None else dims[i]
            index.check_encoder(fingerprint or index.ctx_fingerprint, dim, swap=swap, flags=("--swap",))


def declared_dim(model_dir: Path) -> int | None:
    """The width of the question vectors of a `resolve_model_dir` folder, read from its question encoder's
    config without loading a weight (`vector_dim`'s rule: DPR's projection, else the hidden size), so that
    an index of another width is refused as such before its encoder's fingerprint: refused on the fingerprint,
    the message offered --swap, which then failed on the width. None where the config does not say."""
    own = model_dir / "question_encoder" / "config.json"  # lewisrag's layout; transformers' nests it in config.json
    try:
        cfg = read_json(own) if own.is_file() else read_json(model_dir / "config.json").get("question_encoder")
    except (InputError, AttributeError):  # no config there, or not an object: the load says what is wrong
        return None
    if not isinstance(cfg, dict):
        return None
    dim = cfg.get("projection_dim") or cfg.get("hidden_size")
    return dim if isinstance(dim, int) and dim > 0 else None


def swap_matrix(model_paths: Sequence[str | os.PathLike], index_paths: Sequence[str | os.PathLike],
                question_paths: Sequence[str | os.PathLike], swap: bool = False, num_beams: int = 1,
                max_length: int = 32, batch_size: int = 16,
                on_progress: Callable[[str, int, int], None] | None = None, qa_fields: dict[str, str] | None = None,
                device: str = "cpu") -> dict:
    """Exact match of every model × index × question set, with the predictions behind each cell; the
    models answer on `device` (auto, cpu, cuda[:N]).

    Returns {"models", "indexes", "questions": names, "n_questions": {set: n scored},
    "left_out": {set: {"long": n, "no_answer": n}} (questions exact match cannot score), "notes":
    [what makes cells hard to read: identical indexes or question sets, a model naming no context
    encoder], "em": {model: {index: {set: EM}}}, "predictions": the same nesting with lists of answers,
    one per scored question, "question_ids": {set: [the scored questions' ids]} in the order of the
    predictions (the scored ones alone: a list of a set that left questions out is shorter than its
    file; never repeated: a record without an id gets one derived from its question, suffixed where
    another record has it, `io.derived_id`)}.
    """
    if not model_paths or not index_paths or not question_paths:
        raise InputError("swap", "needs at least one --model, one --index and one --questions")
    for flag, paths in (("--model", model_paths), ("--index", index_paths), ("--questions", question_paths)):
        # the matrix keys its cells by name: a repeat would fold into one cell
        given_once(flag, map(str, paths), key=lambda p: p if p.startswith("hf:") else os.path.realpath(p))
    left_out: list[dict[str, int]] = []
    sets = load_question_sets(question_paths, qa_fields, left_out)  # the question sets first: seconds, not a model load
    model_dirs = [resolve_model_dir(p) for p in model_paths]  # once each: a run without final/ is said to be one once
    # a run folder and its best/ are one model: given both, it would be scored twice under two names
    resolved = {str(p): os.path.realpath(d) for p, d in zip(model_paths, model_dirs)}
    given_once("--model", map(str, model_paths), key=resolved.__getitem__)
    check_tasks(model_dirs)
    indexes = [DenseIndex.load(p, mmap=True) for p in index_paths]
    # a foreign index, before minutes of loading
    check_pairs([paired_with(d) for d in model_dirs], indexes, swap, [declared_dim(d) for d in model_dirs])
    models = [load_trained(d, device=device) for d in model_dirs]
    check_pairs([m.settings.index_fingerprint for m, _ in models], indexes, swap, [vector_dim(m) for m, _ in models])
    for index in indexes:  # a Flat index is searched on the GPU where it fits, as in training
        place_search(index, "auto", resolve_device(device))
    for (model, _), path in zip(models, model_paths):
        vocab = model.generator.config.vocab_size
        if num_beams > vocab:  # more beams than first tokens: an allocation's traceback, or hours
            raise InputError("--num-beams", f"must be at most the vocabulary of {path}'s generator ({vocab} tokens), got {num_beams}")
        check_max_length(model, max_length, f"the generator of {path}")
        for index, index_path in zip(indexes, index_paths):
            if model.n_docs > len(index.passages):  # else a search "found fewer passages", offering flags swap lacks
                raise InputError(index_path, f"holds {len(index.passages)} passages, fewer than the {model.n_docs} that "
                                 f"{path} reads per question (its n_docs)", field="n_passages")
    names_m, names_i, names_q = labels(model_paths), labels(index_paths), labels(question_paths, stem=True)
    notes = [] if swap else [n for (model, _), path in zip(models, model_paths)
                             if (n := unpaired_note(path, model.settings.index_fingerprint))]
    for q, scored, lo in zip(names_q, sets, left_out):
        why = [f"{lo['long']} long-form"] * bool(lo["long"])
        why += [f"{lo['no_answer']} without an answer"] * bool(lo["no_answer"])
        if why:
            notes.append(f"{q}: {len(scored)} of {len(scored) + sum(lo.values())} questions scored; exact match leaves out "
                         f"{' and '.join(why)}")
    notes += overlap_notes(names_i, indexes, names_q, sets)
    for (_, tokenizers), m in zip(models, names_m):
        for path, scored in zip(question_paths, sets):  # as `ask` refuses one: answered from [CLS] [SEP] alone
            for ex in scored:
                if problem := question_problem(tokenizers, ex.question):
                    raise InputError(path, f"question {ex.id!r} ({ex.question!r}): {problem} (of {m})",
                                     line=line_of(path, ex, qa_fields), field="question")
        for q, scored in zip(names_q, sets):
            if blind := sum(knows_no_word(tokenizers.question, ex.question) for ex in scored):
                notes.append(f"{q}: the question encoder of {m} knows no word of {blind} of its {len(scored)} questions "
                             "(each is its unknown token): their passages are retrieved for a question without words, "
                             "the same for each (questions in another language than the model's?)")
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
                    answer_exact_match(p, ex) for p, ex in zip(preds, questions)) / len(questions)
                predictions.setdefault(m, {}).setdefault(i, {})[q] = preds
    return {"models": names_m, "indexes": names_i, "questions": names_q,
            "n_questions": {q: len(s) for q, s in zip(names_q, sets)}, "left_out": dict(zip(names_q, left_out)),
            "notes": notes, "em": em, "predictions": predictions,
            "question_ids": {q: [ex.id for ex in s] for q, s in zip(names_q, sets)},
            "config": {"swap": swap, "num_beams": num_beams, "max_length": max_length,
                       "model_paths": [str(p) for p in model_paths], "index_paths": [str(p) for p in index_paths],
                       "question_paths": [str(p) for p in question_paths]}}
