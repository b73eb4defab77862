"""`lewisrag reproduce`: the stages of the small reproduction, resumable, into one run folder.

    RUN/config.json             the preset and seed that made the run
    RUN/world/                  the built-in world (snapshots A and B, splits)
    RUN/dpr/                    the trained DPR retriever
    RUN/index_a, RUN/index_b    dense indexes over snapshots A and B (same frozen doc encoder)
    RUN/bm25_a                  BM25 over snapshot A
    RUN/stages/<name>.json      what each finished stage produced; `--resume` skips those stages
    RUN/results.json            every number, RUN/report.md the same in words and tables

Each stage writes its outputs atomically and records itself last, so a run killed anywhere
resumes at the first unfinished stage.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from lewisrag.data.io import read_json, write_json, write_text
from lewisrag.experiments.presets import Preset

Progress = Callable[[str, int, int, str], None]  # (task, done, total, info)


def _stage_file(run: Path, name: str) -> Path:
    return run / "stages" / f"{name}.json"


def _run_stage(run: Path, name: str, resume: bool, fn: Callable[[], dict], on_stage) -> dict:
    """Run `fn` unless `resume` and the stage finished before; record what it returned."""
    path = _stage_file(run, name)
    if resume and path.exists():
        result = read_json(path)
        on_stage(name, "skipped", result)
        return result
    on_stage(name, "started", {})
    t = time.perf_counter()
    result = {**fn(), "seconds": round(time.perf_counter() - t, 2)}
    write_json(path, result)
    on_stage(name, "done", result)
    return result


def reproduce(
    preset: Preset,
    out: str | os.PathLike,
    seed: int = 0,
    resume: bool = False,
    on_stage: Callable[[str, str, dict], None] = lambda *a: None,
    on_progress: Progress = lambda *a: None,
) -> dict:
    """Run every stage of the reproduction into `out` and return the results."""
    run = Path(out)
    config = json.loads(json.dumps({"preset": asdict(preset), "seed": seed}))  # as it reads back from disk
    if resume and (run / "config.json").exists() and read_json(run / "config.json") != config:
        from lewisrag.data.io import InputError

        raise InputError(run / "config.json", "was written by another preset or seed; use a new --out or drop --resume")
    write_json(run / "config.json", config)
    stages = {}

    stages["world"] = _run_stage(run, "world", resume, lambda: _world(run, preset, seed), on_stage)
    stages["dpr"] = _run_stage(run, "dpr", resume, lambda: _dpr(run, preset, seed, on_progress), on_stage)
    for snap in ("a", "b"):
        stages[f"index_{snap}"] = _run_stage(run, f"index_{snap}", resume, lambda s=snap: _dense(run, preset, s, on_progress), on_stage)
    stages["bm25_a"] = _run_stage(run, "bm25_a", resume, lambda: _bm25(run), on_stage)
    stages["retrieval"] = _run_stage(run, "retrieval", resume, lambda: _retrieval(run, preset, on_progress), on_stage)

    results = {
        "lewisrag": {"kind": "reproduce", "version": _version()},
        "config": config,
        "environment": {"python": platform.python_version(), "machine": platform.machine()},
        "retrieval": {"split": stages["retrieval"]["split"], **stages["retrieval"]["dense"], "bm25": stages["retrieval"]["bm25"]},
        "records": stages["retrieval"]["records"],  # per question and retriever, for `lewisrag gate`
        "stages": {name: {k: v for k, v in s.items() if k not in ("seconds", "records")} | {"seconds": s["seconds"]}
                   for name, s in stages.items()},
    }
    write_json(run / "results.json", _without_timings(results))
    write_json(run / "timings.json", {name: s["seconds"] for name, s in stages.items()})
    write_text(run / "report.md", render_report(results))
    return results


def _world(run: Path, preset: Preset, seed: int) -> dict:
    from lewisrag.data.world import build_world, write_world

    world = build_world(seed=seed, entities=preset.entities)
    write_world(world, run / "world")
    return {"dir": "world", "summary": read_json(run / "world" / "world.json")["passages"]}


def _dpr(run: Path, preset: Preset, seed: int, on_progress: Progress) -> dict:
    from dataclasses import replace

    from lewisrag.data.records import read_passages, read_qa
    from lewisrag.training.dpr import train_dpr

    cfg = replace(preset.dpr, seed=seed)
    passages, train = read_passages(run / "world" / "passages_a.jsonl"), read_qa(run / "world" / "train.jsonl")
    meta = train_dpr(cfg, train, passages, run / "dpr", lambda s, loss: on_progress("dpr", s, cfg.steps, f"loss {loss:.3f}"))
    return {"dir": "dpr", "final_loss": meta["final_loss"], "ctx_fingerprint": meta["ctx_fingerprint"]}


def _dense(run: Path, preset: Preset, snap: str, on_progress: Progress) -> dict:
    from lewisrag.data.records import read_passages
    from lewisrag.index.dense import DenseBuildConfig, build_dense_index

    passages = read_passages(run / "world" / f"passages_{snap}.jsonl")
    manifest = build_dense_index(passages, run / "dpr", run / f"index_{snap}", DenseBuildConfig(factory=preset.index_factory),
                                 lambda stage, d, t: on_progress(f"index_{snap} {stage}", d, t, ""))
    return {"dir": f"index_{snap}", "n_passages": manifest["n_passages"], "content_hash": manifest["content_hash"]}


def _bm25(run: Path) -> dict:
    from lewisrag.data.records import read_passages
    from lewisrag.index.bm25 import build_bm25_index

    manifest = build_bm25_index(read_passages(run / "world" / "passages_a.jsonl"), run / "bm25_a")
    return {"dir": "bm25_a", "n_passages": manifest["n_passages"]}


def _retrieval(run: Path, preset: Preset, on_progress: Progress) -> dict:
    from lewisrag.data.records import read_qa
    from lewisrag.index import open_retriever, retrieval_recall

    examples = read_qa(run / "world" / f"{preset.eval_split}.jsonl")
    out = {"split": preset.eval_split, "records": []}
    for name, path in (("dense", run / "index_a"), ("bm25", run / "bm25_a")):
        done = [0]

        def tick(n: int, name=name, done=done) -> None:
            done[0] += n
            on_progress(f"recall ({name})", done[0], len(examples), "")

        r = retrieval_recall(open_retriever(path), examples, preset.ks, on_batch=tick)
        out[name] = {"n": r["n"], **{f"recall_at_{k}": r[f"recall@{k}"] for k in preset.ks}}
        category = {ex.id: ex.category for ex in examples}
        for qid, first in r["first_gold"].items():
            hit = {str(k): float(first is not None and first < k) for k in preset.ks}
            out["records"].append({"id": qid, "system": name, "category": category[qid], "metrics": {"recall_at_k": hit}})
    out["dense"]["recall_at_k"] = out["dense"][f"recall_at_{max(k for k in preset.ks if k <= 5)}"]
    return out


def _without_timings(results: dict) -> dict:
    """results.json holds no wall-clock numbers, so the same seed gives the same file."""
    return {**results, "stages": {n: {k: v for k, v in s.items() if k != "seconds"} for n, s in results["stages"].items()}}


def _version() -> str:
    from lewisrag import __version__

    return __version__


def render_report(results: dict) -> str:
    r = results["retrieval"]
    ks = [k for k in ("recall_at_1", "recall_at_5", "recall_at_20") if k in r]
    lines = [
        f"# lewisrag reproduce — preset `{results['config']['preset']['name']}`, seed {results['config']['seed']}",
        "",
        "## Retrieval (test split over snapshot A; test entities never appear in training questions)",
        "",
        "| retriever | " + " | ".join(k.replace("recall_at_", "recall@") for k in ks) + " |",
        "|---|" + "---:|" * len(ks),
        "| DPR (trained here) | " + " | ".join(f"{r[k]:.3f}" for k in ks) + " |",
        "| BM25 | " + " | ".join(f"{r['bm25'][k]:.3f}" for k in ks) + " |",
        "",
        f"The dense retriever finds a gold passage in its top 5 for {r['recall_at_5']:.1%} of test questions; "
        f"BM25 does for {r['bm25']['recall_at_5']:.1%}.",
        "",
    ]
    return "\n".join(lines)
