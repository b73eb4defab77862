"""Rendering shared by the commands: rich progress bars and tables. Library code never prints."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

console = Console(stderr=True)  # progress and tables on stderr keep stdout clean for --json
out = Console()


@contextlib.contextmanager
def progress() -> Iterator[Progress]:
    """A rich progress display with ETA; use `bars(p)` to drive tasks from library callbacks."""
    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=console, transient=False,
    ) as p:
        yield p


class Bars:
    """Maps library callbacks `(stage, done, total)` onto one progress task per stage."""

    def __init__(self, p: Progress, labels: dict[str, str] | None = None):
        self.p, self.labels, self.tasks = p, labels or {}, {}

    def __call__(self, stage: str, done: int, total: int, info: str = "", *_: object) -> None:
        if stage not in self.tasks:
            self.tasks[stage] = self.p.add_task(self.labels.get(stage, stage), total=total, info=info)
        self.p.update(self.tasks[stage], completed=done, total=total, info=info)


def table(title: str, columns: list[str], rows: list[list]) -> Table:
    t = Table(title=title)
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*[_fmt(v) for v in r])
    return t


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)
