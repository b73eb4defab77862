"""The stages `lewisrag reproduce --tasks qa,jeopardy,fever` adds: the paper's Table 2 tasks on the
built-in world (`lewisrag.data.tasks`), each trained with both RAG variants and the closed-book
baseline from the same generator and retriever as the QA runs, and evaluated as the paper does.

    RUN/tasks/dpr, index_a, index_b      the retriever of both tasks: DPR trained on the QA questions and
                                         their reference statements, and its indexes of snapshots A and B
                                         (reproduce.train_world_dpr, world_index)
    RUN/fever/generator                  the QA runs' generator taught to compare on fresh claims (training.verifier)
    RUN/<task>/rag_token, rag_sequence   train_rag folders (--task jeopardy|fever)
    RUN/<task>/closed_book               the generator fine-tuned on the same examples without retrieval
    RUN/<task>/predictions.json          every system's test outputs
    RUN/jeopardy/evidence.json           one clue's per-token document posterior under RAG-Token (Figure 2)

The tasks have their own retriever because the QA runs' DPR, trained from scratch on a few question
templates, does not carry over to claims ("The capital of Valdoria is Zerth.") or bare entity names:
measured on the default world, recall@5 of the FEVER test claims' evidence 0.45 and of the Jeopardy
entities' passages 0.82. Trained the same way on the same questions plus their reference statements
(`data.tasks.statement_queries`; no task example) it finds 0.87 and 0.94 (docs/recipe.md). Its
schedule is the preset's `tasks_dpr` where set, else `dpr`'s (the small preset keeps BERT's attention
dropout here, which its QA retriever drops for speed). The QA runs keep their own DPR, so `--tasks`
changes none of their numbers.

results.json gains `jeopardy.<system>.{q_bleu1,bleu1}` with paired bootstrap intervals on the
differences the paper's ordering asserts, and `fever.<system>.{acc3,acc2}`,
`fever.retrieval.{top1_overlap,top10_overlap}` (the shares of SUPPORTS/REFUTES claims whose first
retrieved passage, or one of the first ten, is from a gold article: `evidence_overlap`) and
`fever.swap` (the claims whose label differs between the snapshots, judged on index A and index B).
A share over no claims (acc2 and the overlaps when every test claim is NOT ENOUGH INFO) is null, its
reason under the section's `nan_reasons`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from lewisrag.data.io import InputError, write_json
from lewisrag.data.outputs import discard_output
from lewisrag.data.pretrained import load_generator
from lewisrag.data.records import answer_sources, read_passages, read_qa
from lewisrag.data.tasks import NEI, article
from lewisrag.eval.stats.paired import paired_bootstrap
from lewisrag.experiments.presets import Preset
from lewisrag.experiments.stages import LEGACY, claimed, write_evidence
from lewisrag.index.dense import DenseIndex
from lewisrag.rag_model.answering import answer_questions
from lewisrag.scoring.aggregate import mean
from lewisrag.scoring.qa import bleu_1
from lewisrag.scoring.qbleu import q_bleu1
from lewisrag.training.checkpoint import load_trained
from lewisrag.training.closed_book import (
    ClosedBookConfig,
    answer_closed_book,
    closed_book_label_log_probs,
    train_closed_book,
)
from lewisrag.training.closed_book import KIND as CLOSED_BOOK_KIND
from lewisrag.training.closed_book import LAYOUT as CLOSED_BOOK_LAYOUT
from lewisrag.training.rag import KIND as RAG_KIND
from lewisrag.training.rag import train_rag
from lewisrag.training.rag_data import check_labels
from lewisrag.training.tasks import fever_accuracy, rag_label_log_probs
from lewisrag.training.verifier import VerifierConfig, pretrain_verifier

Progress = Callable[[str, int, int, str], None]  # (task, done, total, info)
SYSTEMS = ("rag_token", "rag_sequence", "closed_book")


def stages(run: Path, preset: Preset, seed: int, task: str, resume: bool, on_progress: Progress,
           overwrite: bool = False) -> list[tuple[str, Callable]]:
    """(stage name, function) for one task, in order: both RAG variants, closed book, evaluation
    (after the tasks' retriever stages, `reproduce`; `overwrite`: reproduce's, for the folders the stages replace)."""
    out = []
    if preset.tasks[task].verifier_steps:
        out.append((f"{task}_verifier", lambda: verifier(run, preset, seed, task, on_progress, overwrite)))
    out += [(f"{task}_rag_{v}", lambda v=v: train(run, preset, seed, task, v, resume, on_progress, overwrite))
            for v in ("token", "sequence")]
    out.append((f"{task}_closed_book", lambda: train_closed(run, preset, seed, task, on_progress, overwrite)))
    evaluate = jeopardy_evaluate if task == "jeopardy" else fever_evaluate
    out.append((f"{task}_evaluate", lambda: evaluate(run, preset, on_progress)))
    return out


def starting_generator(run: Path, preset: Preset, task: str) -> Path:
    """The generator a task's runs start from: the QA runs' one, or RUN/<task>/generator after the verifier stage."""
    return run / task / "generator" if preset.tasks[task].verifier_steps else run / "generator"


def verifier(run: Path, preset: Preset, seed: int, task: str, on_progress: Progress, overwrite: bool = False) -> dict:
    """RUN/<task>/generator: the QA runs' generator taught to compare claims with passages on fresh
    entities (training.verifier explains why); measured on the dev claims with their gold passages."""
    sched, world = preset.tasks[task], run / "world"
    cfg = VerifierConfig(steps=sched.verifier_steps, seed=seed, device=preset.device)
    dev = read_scored(world / f"{task}_dev.jsonl", labels=True)
    r = pretrain_verifier(run / "generator", run / task / "generator", cfg, dev, read_passages(world / "passages_a.jsonl"),
                          on_step=lambda step, steps, loss: on_progress(f"{task} verifier", step, steps, f"loss {loss:.3f}"),
                          overwrite=overwrite)
    # no "minutes": results.json holds no wall-clock number, so that the same seed writes the same file
    # (timings.json has the stage's seconds, RUN/<task>/generator/recipe.json its minutes)
    return {"dir": f"{task}/generator", "steps": r["steps"], "final_loss": r["final_loss"],
            "dev_gold_passage": r["dev_gold_passage"]}


def train(run: Path, preset: Preset, seed: int, task: str, variant: str, resume: bool, on_progress: Progress,
          overwrite: bool = False) -> dict:
    """RUN/<task>/rag_<variant>: train_rag on the task's files over index A, from the QA runs' starting point.
    It checkpoints every `preset.rag.save_every` steps, as the QA runs do, so that a killed stage resumes
    from its last checkpoint (a checkpoint reads the RNG, never draws from it: the weights are the same)."""
    sched, world, out = preset.tasks[task], run / "world", run / task / f"rag_{variant}"
    cfg = replace(preset.rag, task=task, variant=variant, seed=seed, index=str(run / "tasks" / "index_a"),
                  encoder=str(run / "tasks" / "dpr"),
                  generator=str(starting_generator(run, preset, task)), train=str(world / f"{task}_train.jsonl"),
                  dev=str(world / f"{task}_dev.jsonl"), train_kinds="", steps=sched.steps, lr=sched.lr,
                  retriever_lr_scale=sched.retriever_lr_scale, max_target_length=sched.max_target_length,
                  eval_every=sched.steps, eval_questions=sched.eval_questions,
                  cpu=preset.rag.cpu or preset.device == "cpu")
    if not resume:  # reproduce's `stages.check_rerun` found nothing of the user's in it; checked again now, as stages.rag does
        discard_output(out, RAG_KIND, LEGACY[RAG_KIND], unmarked=False, overwrite=overwrite,
                       what=f"the {task} RAG-{variant} stage")
    name = f"{task} RAG-{variant}"
    s = train_rag(cfg, out, resume=True, root=run,  # root: a moved run folder resumes its killed stage (stages.rag)
                  on_progress=lambda step, steps, rec: on_progress(name, step, steps, f"loss {rec['loss']:.3f}"))
    return {"dir": f"{task}/rag_{variant}", "steps": s["steps"], "best_dev": s["best_dev"], "dev_metric": s["dev_metric"],
            "n_train": s["n_train"]}


def train_closed(run: Path, preset: Preset, seed: int, task: str, on_progress: Progress, overwrite: bool = False) -> dict:
    """RUN/<task>/closed_book: the same generator fine-tuned on the task's training examples without retrieval."""
    sched, out = preset.tasks[task], run / task / "closed_book"
    cfg = ClosedBookConfig(generator=str(starting_generator(run, preset, task)), task=task,
                           train=str(run / "world" / f"{task}_train.jsonl"),
                           steps=sched.closed_book_steps, lr=sched.closed_book_lr, batch_size=preset.closed_book.batch_size,
                           max_target_length=sched.max_target_length, seed=seed, device=preset.device,
                           mixed_precision=preset.closed_book.mixed_precision)
    discard_output(out, CLOSED_BOOK_KIND, legacy=CLOSED_BOOK_LAYOUT, overwrite=overwrite,  # checked again now
                   what=f"the {task} closed-book stage")
    s = train_closed_book(cfg, out, lambda step, steps, rec: on_progress(f"{task} closed book", step, steps, f"loss {rec['loss']:.3f}"))
    return {"dir": f"{task}/closed_book", "steps": s["steps"], "final_loss": s["final_loss"], "n_train": s["n_train"]}


def read_scored(path: Path, labels: bool = False) -> list:
    """The world's task file at `path`, each example with an answer to score against (with `labels`, a
    FEVER label): a claim without one ended in an IndexError, a clue in a ValueError, and a label
    spelled otherwise was scored as a wrong prediction in silence."""
    examples = read_qa(path)
    if not all(ex.answers for ex in examples):  # the file is read again only to name the line, as check_labels does
        line = next(line for (line, _), ex in zip(answer_sources(path), examples) if not ex.answers)
        raise InputError(path, "no answer to score against", line=line, field="answers")
    if labels:
        check_labels(examples, path)
    return examples


def _ticker(on_progress: Progress, label: str, total: int) -> Callable[[int], None]:
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        on_progress(label, done[0], total, "")

    return tick


# --- Jeopardy ----------------------------------------------------------------------------------


def jeopardy_evaluate(run: Path, preset: Preset, on_progress: Progress) -> dict:
    """Q-BLEU-1 (best over the entity's reference clues) and BLEU-1 (against all of them at once) of
    every system's clue for each test entity, the paired bootstrap of the differences RAG-Token −
    RAG-Sequence and RAG-Sequence − closed book, and RUN/jeopardy/evidence.json."""
    test = read_scored(run / "world" / "jeopardy_test.jsonl")
    entities, length = [ex.question for ex in test], preset.tasks["jeopardy"].max_target_length
    index = DenseIndex.load(run / "tasks" / "index_a", mmap=True)
    preds, scores = {}, {}
    for system in SYSTEMS:
        tick = _ticker(on_progress, f"jeopardy {system}", len(test))
        if system == "closed_book":
            gen, tok = load_generator(run / "jeopardy" / "closed_book" / "final", device=preset.device)
            preds[system] = answer_closed_book(gen, tok, entities, max_length=length, on_batch=tick)
        else:
            model, tokenizers = load_trained(run / "jeopardy" / system, device=preset.device)
            preds[system] = answer_questions(model, tokenizers, index, entities, n_docs=preset.rag.n_docs, max_length=length,
                                             on_batch=tick)
        scores[system] = {"q_bleu1": [q_bleu1(p, ex.answers) for p, ex in zip(preds[system], test)],
                          "bleu1": [bleu_1(p, ex.answers) for p, ex in zip(preds[system], test)]}
    out = {system: {m: mean(v) for m, v in s.items()} | {"n": len(test)} for system, s in scores.items()}
    out["differences"] = {
        "rag_token_minus_rag_sequence": _diff(scores["rag_sequence"]["q_bleu1"], scores["rag_token"]["q_bleu1"]),
        "rag_sequence_minus_closed_book": _diff(scores["closed_book"]["q_bleu1"], scores["rag_sequence"]["q_bleu1"]),
    }
    write_json(claimed(run, run / "jeopardy" / "predictions.json"),
               {system: dict(zip([ex.id for ex in test], p)) for system, p in preds.items()})
    write_evidence(run / "jeopardy" / "rag_token", index, test[0].question, length, run / "jeopardy" / "evidence.json",
                   device=preset.device, run=run)
    return {"out": {"jeopardy": out}}


def _diff(a: list[float], b: list[float]) -> dict:
    r = paired_bootstrap(a, b)
    return {k: r[k] for k in ("mean_diff", "low", "high", "pvalue", "n")}


# --- FEVER -------------------------------------------------------------------------------------


def fever_evaluate(run: Path, preset: Preset, on_progress: Progress) -> dict:
    """3-way and 2-way label accuracy per system on the test claims; how often RAG-Token's retrieved
    documents come from a gold article (top-1, top-10: the paper's 71% / 90% check); and the hot swap
    on the claims whose label differs between snapshots A and B."""
    world = run / "world"
    test, test_b = (read_scored(world / f"{name}.jsonl", labels=True) for name in ("fever_test", "fever_test_b"))
    for line, (a, b) in enumerate(zip(test, test_b), start=1):  # the swap pairs the two files' claims line by line
        if a.id != b.id:
            raise InputError(world / "fever_test_b.jsonl", f"claim '{b.id}' where fever_test.jsonl has '{a.id}': the "
                             "snapshots' claims must come in the same order", line=line, field="id")
        if a.question != b.question:  # another world's file: the same sequential ids, other claims
            raise InputError(world / "fever_test_b.jsonl", f"claim '{b.id}' reads {b.question!r} where fever_test.jsonl's "
                             f"reads {a.question!r}: the snapshots' files must hold the same claims (one world's)",
                             line=line, field="question")
    if len(test) != len(test_b):
        raise InputError(world / "fever_test_b.jsonl", f"{len(test_b)} claims, fever_test.jsonl has {len(test)}")
    claims, gold = [ex.question for ex in test], [ex.answers[0] for ex in test]
    index_a = DenseIndex.load(run / "tasks" / "index_a", mmap=True)
    out, preds = {}, {}
    for system in SYSTEMS:
        tick = _ticker(on_progress, f"fever {system}", len(test))
        if system == "closed_book":
            gen, tok = load_generator(run / "fever" / "closed_book" / "final", device=preset.device)
            scores = closed_book_label_log_probs(gen, tok, claims, on_batch=tick)
        else:
            model, tokenizers = load_trained(run / "fever" / system, device=preset.device)
            scores = rag_label_log_probs(model, tokenizers, index_a, claims, n_docs=preset.rag.n_docs, on_batch=tick)
        acc = fever_accuracy(scores, gold)
        preds[system] = acc.pop("predictions")
        out[system] = acc
    out["majority_rate"] = max(gold.count(label) for label in set(gold)) / len(gold)
    out["retrieval"] = evidence_overlap(run / "fever" / "rag_token", index_a, [ex for ex in test if ex.answers[0] != NEI],
                                        device=preset.device)
    out["swap"] = fever_swap(run, preset, test, test_b, on_progress)
    write_json(claimed(run, run / "fever" / "predictions.json"),
               {system: dict(zip([ex.id for ex in test], p)) for system, p in preds.items()})
    return {"out": {"fever": out}}


def evidence_overlap(model_dir: Path, index, claims: list, k: int = 10, batch_size: int = 16, device: str = "cpu") -> dict:
    """Share of claims whose first retrieved document is from a gold article, and whose top `k` hold
    one: the paper's check (71% / 90%), which counts per Wikipedia page, so here per article of the
    world (`data.tasks.article`: the entity, whichever of its passages is retrieved), not per passage.
    Without claims both shares are None, with their reason under "nan_reasons" (`fever_accuracy`'s)."""
    n = len(claims)
    if not n:  # every test claim NOT ENOUGH INFO: no gold article to find
        why = "no SUPPORTS or REFUTES claim: only those have gold articles"
        return {"top1_overlap": None, f"top{k}_overlap": None, "n": 0,
                "nan_reasons": {"top1_overlap": why, f"top{k}_overlap": why}}
    model, tokenizers = load_trained(model_dir, device=device)
    top1 = topk = 0
    with torch.no_grad():
        for i in range(0, len(claims), batch_size):
            chunk = claims[i : i + batch_size]
            r = model.retrieve([ex.question for ex in chunk], index, tokenizers, n_docs=min(k, len(index.passages)))
            for ex, ps in zip(chunk, r.passages):
                gold, found = {article(g) for g in ex.gold_passage_ids}, [article(p.id) for p in ps]
                top1 += found[0] in gold
                topk += any(a in gold for a in found)
    return {"top1_overlap": top1 / n, f"top{k}_overlap": topk / n, "n": n}


def fever_swap(run: Path, preset: Preset, test: list, test_b: list, on_progress: Progress) -> dict:
    """Label accuracy of both RAG models on index A and index B, against the labels of A and of B,
    on the claims whose label changed (a time-varying fact that snapshot B updates)."""
    changed = [(a, b) for a, b in zip(test, test_b) if a.answers != b.answers]
    claims = [a.question for a, _ in changed]
    out = {"n": len(changed)}
    if not changed:
        return out
    for system in ("rag_token", "rag_sequence"):
        model, tokenizers = load_trained(run / "fever" / system, device=preset.device)
        cells = {}
        for snap in ("a", "b"):
            index = DenseIndex.load(run / "tasks" / f"index_{snap}", mmap=True)
            scores = rag_label_log_probs(model, tokenizers, index, claims, n_docs=preset.rag.n_docs,
                                         on_batch=_ticker(on_progress, f"fever swap {system} index {snap}", len(claims)))
            pred = fever_accuracy(scores, [a.answers[0] for a, _ in changed])["predictions"]
            cells[f"index_{snap}"] = {f"labels_{s}": sum(p == ex.answers[0] for p, ex in zip(pred, col)) / len(changed)
                                      for s, col in (("a", [a for a, _ in changed]), ("b", [b for _, b in changed]))}
        out[system] = cells
    return out
