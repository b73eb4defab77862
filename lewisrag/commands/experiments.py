"""`lewisrag reproduce`: the main job."""

from __future__ import annotations

from pathlib import Path

import typer

from lewisrag.commands import _ui


def reproduce(
    out: Path = typer.Option(..., "--out", help="Run folder: config.json, results.json, report.md and every stage's outputs."),
    preset: str = typer.Option("small", "--preset", help="tiny (smoke test, seconds) or small (the demo)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the world and of every training run."),
    resume: bool = typer.Option(False, "--resume", help="Skip the stages that a previous run into --out finished."),
) -> None:
    """Run the reproduction: world -> DPR -> dense indexes over snapshots A and B -> retrieval recall."""
    from lewisrag.experiments.presets import get_preset
    from lewisrag.experiments.reproduce import reproduce as run

    chosen = get_preset(preset)

    def on_stage(name: str, event: str, result: dict) -> None:
        if event == "skipped":
            _ui.console.print(f"[dim]{name}: done before, skipped (--resume)[/dim]")
        elif event == "done":
            _ui.console.print(f"[green]{name}[/green] done in {result['seconds']:.1f}s")

    with _ui.progress() as p:
        results = run(chosen, out, seed=seed, resume=resume, on_stage=on_stage, on_progress=_ui.Bars(p))
    r = results["retrieval"]
    ks = [k for k in ("recall_at_1", "recall_at_5", "recall_at_20") if k in r]
    _ui.out.print(_ui.table(f"retrieval on the {r['split']} split (snapshot A)", ["retriever", *ks],
                            [["DPR", *[r[k] for k in ks]], ["BM25", *[r["bm25"][k] for k in ks]]]))
    _ui.out.print(f"results: {Path(out) / 'results.json'}   report: {Path(out) / 'report.md'}")
