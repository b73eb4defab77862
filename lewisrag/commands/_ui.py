"""Rendering shared by the commands: rich progress bars and tables. Library code never prints."""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import re
from collections.abc import Iterator

import typer
import typer.core
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from lewisrag.data.cpu_linear_choice import keeps_torch_linear
from lewisrag.data.io import InputError
from lewisrag.data.qa_formats import check_qa_fields

# markup and emoji codes off: passages, questions, answers, model names and paths are printed as they are
# ("[/x]" in a title was a rich.errors.MarkupError, exit 1; "[bold]" in a passage vanished; "chat:ok: 3
# answers" printed "chat🆗 3 answers"); styles are given as styles
class OutputClosed(Exception):
    """The reader of the output went away (`lewisrag gate ... | head -1`): `cli.main` exits 141."""


class _Console(Console):
    """rich's Console, but on a closed pipe: rich exits 1 there, a failed gate's code, so a CI step that pipes
    a passing gate into `head` under pipefail would fail. This raises OutputClosed for `cli.main`, which exits
    141 (128 + SIGPIPE, the code a shell gives a writer whose reader closed the pipe)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise OutputClosed


# COLUMNS=0 (some shells and CI runners set it) is a width of 0 to rich: every table and line vanished, exit 0
_COLUMNS = os.environ.get("COLUMNS", "").strip()
_WIDTH = 80 if _COLUMNS.isdigit() and int(_COLUMNS) == 0 else None
console = _Console(stderr=True, markup=False, emoji=False, width=_WIDTH)  # progress bars and notes: stdout keeps only results
out = _Console(markup=False, emoji=False, width=_WIDTH)


def status(message: str):
    """A spinner with `message` as plain text (rich's Status reads a string as markup whatever the console says)."""
    return console.status(Text(message))


@contextlib.contextmanager
def progress() -> Iterator[Progress]:
    """A rich progress display with ETA; use `bars(p)` to drive tasks from library callbacks."""
    p = Progress(
        TextColumn("{task.description}", style="bold", markup=False), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[info]}", markup=False),
        TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=console, transient=False,
    )
    p.start()
    try:
        yield p
    except Exception:
        # bad input is one line on stderr: the unfinished bars are erased, and the live display alone is stopped
        # (Progress.stop ends with a blank line on a console that is not a terminal)
        p.live.transient = True
        p.live.stop()
        raise
    except BaseException:
        p.stop()
        raise
    p.stop()


class Bars:
    """Maps library callbacks `(stage, done, total)` onto one progress task per stage."""

    def __init__(self, p: Progress, labels: dict[str, str] | None = None):
        self.p, self.labels, self.tasks = p, labels or {}, {}

    def __call__(self, stage: str, done: int, total: int, info: str = "", *_: object) -> None:
        if stage not in self.tasks:
            self.tasks[stage] = self.p.add_task(self.labels.get(stage, stage), total=total, info=info)
        self.p.update(self.tasks[stage], completed=done, total=total, info=info)


def print_json(obj) -> None:
    """`--json`: one JSON object on stdout and nothing else there (progress and notes go to stderr).
    Paths and other values JSON has no type for are written as strings.

    Written as text, not through rich: rich colours it where FORCE_COLOR or TTY_COMPATIBLE is set, even
    into a pipe, and `json.load` then failed on the escape codes. The text is rich's uncoloured one (two
    spaces' indent, non-ASCII kept, a line break at the end); a closed pipe is `OutputClosed`, as rich's is."""
    # a stdout that cannot write every character (an ASCII or Latin-1 locale, Windows' cp1252) gets JSON's own
    # \uXXXX escapes: the stream's backslashreplace wrote Python's (\xfc), which JSON does not read
    utf = (getattr(out.file, "encoding", None) or "utf-8").lower().replace("-", "").replace("_", "") in ("utf8", "utf8sig")
    text = json.dumps(obj, indent=2, ensure_ascii=not utf, default=str) + "\n"
    try:
        out.file.write(text)
        out.file.flush()
    except BrokenPipeError:
        raise OutputClosed from None


class UsageError(typer.BadParameter):
    """A usage error printed as its message alone: one line, exit 2 (`lewisrag.cli.main` adds the --help hint)."""

    def format_message(self) -> str:
        return self.message


# The commands that train or run models on the CPU: they multiply float32 linear layers through the
# library $LEWISRAG_CPU_LINEAR names (auto by default; `data.cpu_linear`). `reproduce` takes it as a
# flag too; the others would pay torch's import for nothing.
MODEL_COMMANDS = frozenset({"dpr", "rag", "stitched", "pretrain", "build", "search", "tune", "verify", "cut", "targets", "retrieval", "ask",
                            "swap", "compare", "export"})


class Command(typer.core.TyperCommand):
    """Every lewisrag command's class (`lewisrag.cli` sets it): a flag or argument given as an empty
    or blank string on the command line is refused, one line, exit 2. No lewisrag flag takes one, and read
    as "not given" (`--judge ""`) or as the current folder (`Path("")` is `.`), it would run
    something other than what the user typed. The commands of `MODEL_COMMANDS` run inside
    `data.cpu_linear.cpu_linear` with the library $LEWISRAG_CPU_LINEAR names, where it is not torch's
    own (BLAS, which needs no block): so on most CPUs torch loads only once the command has checked its
    flags."""

    def invoke(self, ctx):
        if self.name not in MODEL_COMMANDS or keeps_torch_linear():
            return super().invoke(ctx)
        from lewisrag.data.cpu_linear import cpu_linear  # imports torch: only for the commands that run it

        with cpu_linear(None):
            return super().invoke(ctx)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for param in self.params:
            param.consume_value = _refusing_empty(param, param.consume_value)
        if self.help and not self.short_help:
            # The group's command list shows the docstring's first paragraph; in typer's rich mode it
            # keeps the docstring's line breaks there, which cut the summary mid-sentence.
            self.short_help = " ".join(inspect.cleandoc(self.help).split("\n\n")[0].split())


def _refusing_empty(param, consume):
    def consume_value(ctx, opts):
        value, source = consume(ctx, opts)
        values = value if isinstance(value, (list, tuple)) else [value]
        if source is not None and source.name == "COMMANDLINE" and any(isinstance(v, str) and not v.strip() for v in values):
            optional = param.param_type_name != "argument" and not param.required  # a required one has no default
            hint = "; leave the flag out for its default" if optional else ""
            raise typer.BadParameter(f"is empty{hint}", ctx=ctx, param=param)
        return value, source

    return consume_value


def given(ctx: typer.Context, *names: str) -> list[str]:
    """The flags, as spelled on the command line (`--timeout`), of those parameters among `names`
    that the user gave there or through the environment with a value other than the default."""
    flags = []
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name) if param.name in names else None
        if source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT") and ctx.params.get(param.name) != param.default:
            flags.append(param.opts[0])
    return flags


def refuse_given(ctx: typer.Context, names: tuple[str, ...] | list[str], why: str) -> None:
    """One line, exit 2, for the first flag among `names` given a value although it does not apply
    (`why` says when it does): such a value is never ignored in silence. A flag given its default
    changes nothing either way, so a script that spells out every flag still runs."""
    flags = given(ctx, *names)
    if flags:
        raise InputError(flags[0], why)


def renamed(ctx: typer.Context, new: str, old: str, new_flag: str, old_flag: str):
    """The value of the canonical flag `new_flag` (parameter `new`), or of its deprecated spelling
    `old_flag` (parameter `old`, a hidden option kept for one release) when that was given: it warns
    with one line on stderr and behaves the same. Both given with different values is a usage error.

    See the "CLI conventions" section of README.md for the canonical names."""
    old_value, new_value = ctx.params.get(old), ctx.params.get(new)
    if old_value is None or old_value is False or (isinstance(old_value, (list, tuple)) and not old_value):
        return new_value
    source = ctx.get_parameter_source(new)
    given = source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")
    if given and _canonical(new_value) != _canonical(old_value):  # the error alone: one line
        raise UsageError(f"{old_flag} {_show(old_value)} and {new_flag} {_show(new_value)} disagree: give only {new_flag}", ctx=ctx)
    typer.echo(f"warning: {old_flag} is deprecated here, use {new_flag} (it will be removed in the next release)", err=True)
    return list(old_value) if isinstance(old_value, tuple) else old_value


def renamed_switch(ctx: typer.Context, new: str, old: str, new_flag: str, old_flag: str, means):
    """`renamed` for an old switch that meant one value of the new flag (`--cpu`: `--device cpu`):
    the new flag's value, or `means` when the old switch was given (one warning line); both given
    with another value is a usage error."""
    new_value = ctx.params.get(new)
    if not ctx.params.get(old):
        return new_value
    source = ctx.get_parameter_source(new)
    if source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT") and new_value != means:
        raise UsageError(f"{old_flag} and {new_flag} {_show(new_value)} disagree: give only {new_flag}", ctx=ctx)
    typer.echo(f"warning: {old_flag} is deprecated here, use {new_flag} {_show(means)} (it will be removed in the next release)",
               err=True)
    return means


def _canonical(v):
    return sorted(set(v)) if isinstance(v, (list, tuple)) else v


def _show(v) -> str:
    return ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)


QA_FIELDS_HELP = ("The QA files' own field names, e.g. question=query,answers=golds,id=qid (dotted paths reach into "
                  "objects: answers=answer.aliases). Default: told from the first record (lewisrag, nq_open, trivia_qa, web_questions, "
                  "fever, KILT, ms_marco, DPR's biencoder JSON; DPR's .qa.csv by its name; FEVER's labels are no answers: "
                  "`train rag --task fever` reads its claims, and compare, swap, train stitched and train rag without it "
                  "refuse them). A mapping reads lewisrag's fields "
                  "by their own names where it maps none, but category, kind and group only where it names them "
                  "(the hub Jeopardy's own category column is left alone).")


def qa_fields(spec: str | None) -> dict[str, str] | None:
    """`--qa-fields question=query,answers=golds,id=qid` as the mapping `records.read_qa` takes
    (None when the flag is not given); a malformed one is an InputError naming the flag."""
    if spec is None:
        return None
    fields: dict[str, str] = {}
    for part in spec.split(","):
        name, sep, path = (x.strip() for x in part.partition("="))
        if not sep or not name or not path:
            raise InputError("--qa-fields", f"expected NAME=FIELD pairs separated by commas, got '{part.strip()}'")
        if name in fields:
            raise InputError("--qa-fields", f"'{name}' is given twice")
        fields[name] = path
    check_qa_fields(fields, "--qa-fields")
    return fields


def table(title: str, columns: list[str], rows: list[list]) -> Table:
    """A table of `rows`; a cell too wide for the terminal (or for the 80 columns a pipe gets) wraps,
    never cut to "…": three columns named recall@… would read alike."""
    t = Table(title=printable(title))  # a system's name from an answers file may be in the title or a column
    for c in columns:
        t.add_column(printable(str(c)), overflow="fold")
    for r in rows:
        t.add_row(*[_fmt(v) for v in r])
    return t


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    return "–" if v is None else printable(str(v))  # no score, as the reports write it


# C0 and C1 controls but the line break and tab, and Unicode's bidirectional controls (ALM U+061C, LRM and
# RLM U+200E-200F, U+202A-202E, U+2066-2069): one in a passage or question reordered what the terminal showed
# after it ("Who leads\u202e Talfo?"). Error lines (`data.io.errors.escaped`) escape these too, written alike.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` (a passage, an id, an answer: data, not ours) with its control characters shown as escapes,
    line breaks and tabs kept: an escape sequence in a passage would otherwise clear the user's screen
    or retitle the window, as error lines already escape them.

    >>> printable("Evil \\x1b[2Jred\\x07 a\\tb"), printable("Who leads\\u202e Talfo?")
    ('Evil \\\\x1b[2Jred\\\\x07 a\\tb', 'Who leads\\\\u202e Talfo?')
    """
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)
