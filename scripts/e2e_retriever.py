"""The end-to-end retriever on the world, measured against the frozen document encoder.

    python scripts/e2e_retriever.py --out DIR [--preset small] [--dpr-steps 60] [--rag-steps 600]
                                    [--lr 1e-4] [--retriever-lr-scale 1] [--reindex-every 100] [--seed 0] [--json]

Starts from a deliberately weak DPR (`--dpr-steps` of the preset's DPR schedule, no self-mined
negatives) and the preset's generator, builds index A with it, then trains RAG-Token twice with the
same schedule: once with the context encoder frozen (the paper's setting: the index stays as built)
and once end to end (`train_context_encoder`, the index re-encoded every `--reindex-every` steps,
`lewisrag.training.end2end`). Each model is measured on the test split's short questions with the
index it searches (the frozen model: index A; the end-to-end one: the index its best/ carries):
recall@1 and recall@5 of the gold passage and exact match of greedy answers. The weak DPR's own
recall is the "before". Re-indexing's cost comes from the runs' logs (`reindex_s`), the training
time from each arm's own record (DIR/ARM.train_s.json, written step by step while it trains, so a
call that finds an arm trained already, or resumes one a killed call left, reports the time its
training took, not the time this call spent). Prints one JSON object (with --json) or a table;
writes DIR/summary.json. docs/recipe.md ("The end-to-end retriever") holds the numbers of one run.

DIR keeps what a call built (the world, the weak DPR, index A, the generator, both arms), and a
later call with the same settings reuses it (and resumes an arm a killed call left unfinished).
The settings are recorded in DIR/e2e_config.json: a call with other settings (another --rag-steps,
--lr, --seed, ...) or a DIR holding files but no such record is refused in one line (exit 2)
instead of measuring the earlier call's models under the new settings' name; give it a new --out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from lewisrag.data.io import InputError, read_json, write_json
from lewisrag.data.records import read_passages, read_qa
from lewisrag.data.world import build_world, write_world
from lewisrag.experiments.presets import get_preset
from lewisrag.experiments.stages import generator as generator_stage
from lewisrag.index.dense import DenseBuildConfig, DenseIndex, build_dense_index
from lewisrag.index.search import open_retriever, retrieval_recall
from lewisrag.rag_model.answering import answer_questions
from lewisrag.scoring.qa import exact_match
from lewisrag.scoring.retrieval import hit_rate
from lewisrag.training.checkpoint import load_trained
from lewisrag.training.configs import check_rag_flags
from lewisrag.training.dpr import train_dpr
from lewisrag.training.rag import train_rag


def measure(model_dir: Path, index_dir: Path, test, n_docs: int, max_length: int) -> dict:
    """recall@1, recall@5 and exact match of the RAG model in `model_dir` searching `index_dir`."""
    model, tokenizers = load_trained(model_dir)
    index = DenseIndex.load(index_dir, mmap=True)
    questions, gold = [q.question for q in test], [q.gold_passage_ids for q in test]
    rows = []
    with torch.no_grad():
        for i in range(0, len(questions), 64):
            rows += model.retrieve(questions[i:i + 64], index, tokenizers, n_docs=5).passages
    top1, _ = hit_rate([[p.id for p in ps[:1]] for ps in rows], gold)
    top5, n = hit_rate([[p.id for p in ps[:5]] for ps in rows], gold)
    answers = answer_questions(model, tokenizers, index, questions, n_docs=n_docs, max_length=max_length)
    em = sum(exact_match(a, q.answers) for a, q in zip(answers, test)) / len(test)
    return {"recall_at_1": top1 / n, "recall_at_5": top5 / n, "exact_match": em, "n": len(test)}


def dpr_recall(dpr_dir: Path, index_dir: Path, test) -> dict:
    """The weak DPR's own recall@1 and @5 on the test questions (the retriever before RAG training)."""
    r = retrieval_recall(open_retriever(index_dir, encoder=dpr_dir), test, (1, 5))
    return {"recall_at_1": r["hit@1"], "recall_at_5": r["hit@5"], "n": r["n"]}  # a gold passage among the top k, as the recipe reports it


CONFIG = "e2e_config.json"  # the settings DIR's files were built with


def claim(out: Path, settings: dict) -> None:
    """Record `settings` in `out` (new or empty), or check them against the record there: a
    mismatch, or files with no record, is an InputError naming the first difference."""
    record = out / CONFIG
    if record.is_file():
        before = read_json(record)
        if before != settings:
            key = next(k for k in (*settings, *before) if before.get(k) != settings.get(k))
            raise InputError("--out", f"{out} holds a run with {key} {before.get(key)!r}, this call asks {settings.get(key)!r}: "
                             "its models would be measured under this call's settings; give a new --out")
        return
    if out.is_dir() and any(out.iterdir()):
        raise InputError("--out", f"{out} holds files but no {CONFIG} (an earlier script's run, or another folder): "
                         "their settings cannot be checked; give a new --out")
    out.mkdir(parents=True, exist_ok=True)
    write_json(record, settings)


def train_record(out: Path, arm: str) -> Path:
    """Where the seconds training `arm` took are kept: beside its run folder, which `train_rag` keeps to itself."""
    return out / f"{arm}.train_s.json"


def train_seconds(out: Path, arm: str) -> float | None:
    """The seconds training `arm` took, from its own record (None for an arm trained before the record existed)."""
    record = train_record(out, arm)
    return read_json(record)["train_s"] if record.is_file() else None


# the RAG trainer's flags that this script sets under its own names
OWN_FLAGS = {"--steps": "--rag-steps", "--eval-every": "--rag-steps", "--save-every": "--rag-steps"}


def arm_configs(out: Path, preset, dpr_steps: int, rag_steps: int, lr: float, reindex_every: int, seed: int,
                retriever_lr_scale: float) -> dict:
    """Both arms' RAG-Token settings, checked as `train rag` checks its flags (before anything is built or
    recorded: a value that cannot work would otherwise claim DIR for good), errors named by this script's flags."""
    if dpr_steps < 1:
        raise InputError("--dpr-steps", f"must be at least 1, got {dpr_steps}")
    base = replace(preset.rag, variant="token", seed=seed, steps=rag_steps, lr=lr, retriever_lr_scale=retriever_lr_scale,
                   eval_every=rag_steps // 3 or 1,
                   save_every=rag_steps, index=str(out / "index_a"), encoder=str(out / "dpr_weak"),
                   generator=str(out / "generator"), train=str(out / "world" / "train.jsonl"),
                   dev=str(out / "world" / "dev.jsonl"))
    arms = {"frozen_documents": base,
            "end_to_end": replace(base, train_context_encoder=True, reindex_every=reindex_every)}
    for cfg in arms.values():
        try:
            check_rag_flags(cfg)
        except InputError as e:
            raise InputError(OWN_FLAGS.get(e.source, e.source), e.message.replace("--steps", "--rag-steps")) from None
    return arms


def run(out: Path, preset_name: str, dpr_steps: int, rag_steps: int, lr: float, reindex_every: int, seed: int,
        retriever_lr_scale: float = 1.0) -> dict:
    preset = get_preset(preset_name)
    settings = {"preset": preset_name, "dpr_steps": dpr_steps, "rag_steps": rag_steps, "lr": lr,
                "retriever_lr_scale": retriever_lr_scale, "reindex_every": reindex_every, "seed": seed}
    arms = arm_configs(out, preset, dpr_steps, rag_steps, lr, reindex_every, seed, retriever_lr_scale)
    claim(out, settings)
    if not (out / "world" / "world.json").exists():
        write_world(build_world(seed=seed, entities=preset.entities), out / "world")
    passages = read_passages(out / "world" / "passages_a.jsonl")
    train = read_qa(out / "world" / "train.jsonl")
    test = [q for q in read_qa(out / "world" / "test.jsonl") if q.kind == "short"]
    if not (out / "dpr_weak").exists():
        train_dpr(replace(preset.dpr, steps=dpr_steps, self_negatives_at=None, seed=seed), train, passages, out / "dpr_weak")
    if not (out / "index_a").exists():
        build_dense_index(passages, out / "dpr_weak", out / "index_a", DenseBuildConfig(factory=preset.index_factory))
    if not (out / "generator").exists():
        generator_stage(out, preset, seed, lambda *a: None)
    before = dpr_recall(out / "dpr_weak", out / "index_a", test)

    results = {"config": {**settings, "threads": torch.get_num_threads()}, "before": before}
    for name, cfg in arms.items():
        if not (out / name / "final").exists():
            # the arm's training time, written at every step: a killed call's share stays counted when a
            # later call resumes the arm
            spent, t = train_seconds(out, name) or 0.0, time.perf_counter()
            train_rag(cfg, out / name, resume=True,
                      on_progress=lambda step, total, rec, name=name, spent=spent, t=t: write_json(
                          train_record(out, name), {"train_s": round(spent + time.perf_counter() - t, 1), "step": step}))
            write_json(train_record(out, name), {"train_s": round(spent + time.perf_counter() - t, 1), "step": cfg.steps})
        seconds = train_seconds(out, name)
        log = [json.loads(line) for line in (out / name / "log.jsonl").read_text().splitlines()]
        reindex = [r["reindex_s"] for r in log if "reindex_s" in r]
        index_dir = out / name / "best" / "index" if cfg.train_context_encoder else out / "index_a"
        results[name] = {**measure(out / name / "best", index_dir, test, cfg.n_docs, cfg.max_target_length),
                         "train_s": seconds, "reindexes": len(reindex),
                         "reindex_s_mean": round(sum(reindex) / len(reindex), 2) if reindex else None,
                         "best_step": read_json(out / name / "best" / "train_config.json")["step"]}
    write_json(out / "summary.json", results)
    return results


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--preset", default="small")
    p.add_argument("--dpr-steps", type=int, default=60)
    p.add_argument("--rag-steps", type=int, default=600)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--retriever-lr-scale", type=float, default=1.0,
                   help="the question and context encoders' learning rate as a multiple of --lr (both arms)")
    p.add_argument("--reindex-every", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    try:
        r = run(a.out, a.preset, a.dpr_steps, a.rag_steps, a.lr, a.reindex_every, a.seed, a.retriever_lr_scale)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(r))
        return 0
    print(f"weak DPR: recall@1 {r['before']['recall_at_1']:.3f}  recall@5 {r['before']['recall_at_5']:.3f}")
    for name in ("frozen_documents", "end_to_end"):
        m = r[name]
        print(f"{name:17s} recall@1 {m['recall_at_1']:.3f}  recall@5 {m['recall_at_5']:.3f}  EM {m['exact_match']:.3f}  "
              f"train {'?' if m['train_s'] is None else format(m['train_s'], '.0f')}s  "
              f"re-index {m['reindexes']} x {m['reindex_s_mean']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
