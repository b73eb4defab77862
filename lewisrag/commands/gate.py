"""`lewisrag gate`: a candidate evaluation run against a baseline, tier by tier. Exit 0 pass, 1 fail, 2 bad input."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.text import Text

from lewisrag.commands import _ui

VERDICT_STYLE = {"pass": "green", "fail": "bold red", "skip": "dim", "warn": "yellow"}


def gate(
    baseline: Path = typer.Option(..., "--baseline", help="Baseline run directory or its results.json."),
    candidate: Path = typer.Option(..., "--candidate", help="Candidate run directory or its results.json."),
    config: Path = typer.Option(None, "--config", help="TOML thresholds overriding the packaged defaults key by key."),
    allow_judge_change: bool = typer.Option(
        False, "--allow-judge-change", help="Compare runs whose judge or statement splitter differ (or go unrecorded), the claim "
        "extractor when claims.* metrics are gated, or answer_relevancy's embedder (refused otherwise, exit 2); the "
        "comparison is flagged."),
    as_json: bool = typer.Option(False, "--json", help="Print the verdicts and their evidence as JSON."),
) -> None:
    """Gate a candidate run against a baseline: citation rules, paired retrieval, judged metrics.

    Runs of several systems are gated system by system: each paired check, ceiling and unmeasurable
    count names its system (faithfulness < 1 \\[rag_token]).

    Exit 0: every check passed; 1: a check failed; 2: bad input (a missing or malformed run or
    config, a score that is not a score) or runs judged differently.
    """
    from rich.table import Table

    from lewisrag.eval.gate import gate as run

    report = run(baseline, candidate, config, allow_judge_change)
    if as_json:
        _ui.print_json(report.to_json())
    else:
        # results.json is data: its tier, check names, evidence (question ids) and judge are printed as
        # `_ui.printable` shows them, so an escape sequence in one cannot reach the terminal
        shown = _ui.printable
        t = Table(title=shown(f"gate: {candidate} against {baseline}"), show_lines=False)
        for col in ("tier", "check", "verdict", "evidence"):
            t.add_column(col, overflow="fold")
        for c in report.checks:
            style = VERDICT_STYLE[c.verdict]
            t.add_row(shown(c.tier), shown(c.name), Text(c.verdict, style=style), shown(c.evidence))  # markup is off: a styled Text
        _ui.out.print(t)
        failed = [c for c in report.checks if c.verdict == "fail"]
        judge = report.judges["candidate"]
        _ui.out.print(shown(f"judge: {judge.get('name', '-')} {str(judge.get('fingerprint', '-'))[:12]}"))
        corr = report.correction
        if corr.get("method", "none") != "none":  # gate.toml's `correction`: the levels the verdicts were decided at
            _ui.out.print(f"multiple comparisons: {corr['method']}: McNemar p-values adjusted over {corr['tests']} "
                          f"tests (alpha {corr['alpha']:g}); bootstrap intervals at {100 * corr['interval_confidence']:.4g}% "
                          f"(Bonferroni over {corr['intervals']})")
        if failed:
            _ui.out.print(Text.assemble(("FAIL", "bold red"), f": {len(failed)} check(s) failed"))
        else:
            _ui.out.print(Text("PASS", "bold green"))
    raise typer.Exit(0 if report.passed else 1)
