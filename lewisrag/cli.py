"""The `lewisrag` command. It only registers subcommands; each lives in `lewisrag.commands`.

Bad input anywhere surfaces as `InputError`, printed here as one line on stderr with exit code 2,
never as a traceback; so does an `OSError` (a path that cannot be read or written is the user's
input too: a read-only folder, a full disk). Anything else is a bug in lewisrag: its traceback, and
exit code 3, so that a CI job tells a crash from a failed gate (1) and from input to fix (2).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import traceback
import warnings

# Library progress bars (transformers' weight loading, bm25s) would interleave with ours.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import typer  # noqa: E402

from lewisrag.data.io import InputError, LewisragWarning  # noqa: E402

INTERNAL_ERROR = 3  # the exit code of a bug (see the module docstring)

app = typer.Typer(
    name="lewisrag",
    help="Train the original RAG, swap its index, compare it with prompt-stitching RAG, and evaluate RAG answers layer by layer.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
index_app = typer.Typer(help="Build, search, tune and verify passage indexes (BM25 or dense FAISS); cut a corpus to "
                         "what its questions retrieve; make CuratedTrec's training targets.", no_args_is_help=True)
train_app = typer.Typer(help="Train the retriever (DPR), the RAG model, or the stitched system's reader.", no_args_is_help=True)
eval_app = typer.Typer(help="Evaluate retrieval, answers, or the BugHunt sample.", no_args_is_help=True)
app.add_typer(index_app, name="index")
app.add_typer(train_app, name="train")
app.add_typer(eval_app, name="eval")

# --- data -------------------------------------------------------------------------------------
from lewisrag.commands import data as _data  # noqa: E402

app.command("chunk")(_data.chunk)
app.command("shard")(_data.shard)
app.command("world")(_data.world)

# --- index ------------------------------------------------------------------------------------
from lewisrag.commands import index as _index  # noqa: E402

index_app.command("build")(_index.build)
index_app.command("search")(_index.search)
index_app.command("tune")(_index.tune)
index_app.command("verify")(_index.verify)
index_app.command("cut")(_index.cut)
index_app.command("targets")(_index.targets)

# --- train ------------------------------------------------------------------------------------
from lewisrag.commands import train as _train  # noqa: E402

train_app.command("dpr")(_train.dpr)
train_app.command("rag")(_train.rag)
train_app.command("stitched")(_train.stitched)

# --- eval -------------------------------------------------------------------------------------
from lewisrag.commands import retrieval as _retrieval  # noqa: E402

eval_app.command("retrieval")(_retrieval.retrieval)

from lewisrag.commands import evaluate as _evaluate  # noqa: E402

eval_app.command("answers")(_evaluate.answers)
eval_app.command("bughunt")(_evaluate.bughunt)

from lewisrag.commands import calibrate as _calibrate  # noqa: E402
from lewisrag.commands import gate as _gate  # noqa: E402

app.command("gate")(_gate.gate)
app.command("calibrate")(_calibrate.calibrate)

# --- experiments ------------------------------------------------------------------------------
from lewisrag.commands import experiments as _experiments  # noqa: E402

app.command("reproduce")(_experiments.reproduce)

from lewisrag.commands import ask as _ask  # noqa: E402

app.command("ask")(_ask.ask)

from lewisrag.commands import export as _export  # noqa: E402

app.command("export")(_export.export)

from lewisrag.commands import swap as _swap  # noqa: E402

app.command("swap")(_swap.swap)

from lewisrag.commands import compare as _compare  # noqa: E402

app.command("compare")(_compare.compare)

from lewisrag.commands import pretrain as _pretrain  # noqa: E402

app.command("pretrain")(_pretrain.pretrain)

from lewisrag.commands import _ui  # noqa: E402
from lewisrag.commands._ui import Command as _Command  # noqa: E402

for _typer in (app, index_app, train_app, eval_app):  # every command refuses an empty flag value (commands/_ui.py)
    for _info in _typer.registered_commands:
        _info.cls = _Command


def _terminate(signum, frame) -> None:
    """SIGTERM takes Ctrl-C's way out: the staging folders and temporary files of the command
    are removed by the same `finally` blocks, instead of the process dying where it stands."""
    _TERMINATED.append(signum)
    raise KeyboardInterrupt


_TERMINATED: list[int] = []
_RESENT: list[threading.Timer] = []  # the SIGTERMs `_resend_lost_terminate` sends again, cancelled once the command ends


def _resend_lost_terminate(unraisable) -> None:
    """sys.unraisablehook while a command runs. Python discards an exception raised in a finalizer (a
    `__del__`, a weakref callback) after printing "Exception ignored in ...": `_terminate`'s KeyboardInterrupt,
    where SIGTERM landed in one, was lost, and the command ran on to exit 0 (a reproduction terminated at its
    closed_book stage finished every later stage). That SIGTERM is sent again a moment later, once the
    finalizer and this hook have returned, so that it lands in the command's own code (or, in a finalizer
    again, comes back here); any other unraisable exception is reported as before."""
    tb = unraisable.exc_traceback
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or tb.tb_frame.f_code is not _terminate.__code__:
        _other_unraisable(unraisable)
        return
    timer = threading.Timer(0.1, os.kill, (os.getpid(), _TERMINATED[-1]))
    timer.daemon = True
    try:
        timer.start()
    except RuntimeError:  # the interpreter is shutting down: the exit code was decided (`_run`)
        return
    _RESENT.append(timer)


_other_unraisable = sys.unraisablehook
_python_warning = warnings.formatwarning


def _say(line: str) -> None:
    """An error line on stderr; where its reader went away (`2>&1 | head`), the exit code still says what
    happened, so the line is dropped, not raised as a BrokenPipeError with exit 1."""
    try:
        typer.echo(line, err=True)
    except BrokenPipeError:
        _silence()


def _silence() -> None:
    """Point stdout and stderr at /dev/null: Python's flush at exit would otherwise fail on the closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        if stream is None:  # closed when Python started: nothing to flush
            continue
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):  # not a file (a test's capture): nothing to flush at exit
            pass


def _writable(stream) -> bool:
    """Whether `stream` can still be written (its reader has not closed the pipe; None: closed from the start)."""
    if stream is None:
        return False
    try:
        stream.flush()
        return True
    except (BrokenPipeError, ValueError):
        return False


def _output_closed() -> None:
    """The reader of stdout went away (`| head -1`): exit 141, as a shell's writer killed by SIGPIPE."""
    _silence()
    sys.exit(141)


def _interrupted() -> None:
    """Exit 130 (Ctrl-C) or 143 (SIGTERM) with one line on stderr; where stderr's reader went away too
    (`2>&1 | tee log`, tee killed with the command), the line is dropped and the code kept."""
    for timer in _RESENT:  # the command has ended: a SIGTERM sent again now would break into this exit
        timer.cancel()
    terminated = bool(_TERMINATED)
    _say("terminated (SIGTERM)" if terminated else "interrupted")
    sys.exit(143 if terminated else 130)


def _on_devnull(stream) -> bool:
    """Whether `stream` writes to /dev/null."""
    try:
        return os.path.samestat(os.fstat(stream.fileno()), os.stat(os.devnull))
    except (OSError, ValueError):  # not a file (a test's capture)
        return False


def _help_output_closed(e: SystemExit, was_devnull: bool) -> bool:
    """Whether `e` is rich's exit on a closed stdout: typer prints --help (and a bare `lewisrag`'s help)
    through a rich Console of its own, which on a broken pipe points stdout at /dev/null and exits 1, a failed
    gate's code, so `lewisrag --help | head -1` failed under pipefail. `was_devnull`: stdout's at the start."""
    return e.code == 1 and isinstance(e.__context__, BrokenPipeError) and not was_devnull and _on_devnull(sys.stdout)


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """lewisrag's own warnings as `warning: message`; any other library's as Python prints them."""
    if issubclass(category, LewisragWarning):
        return f"warning: {message}\n"
    return _python_warning(message, category, filename, lineno, line)


def _check_arguments_encode(args: list[str]) -> None:
    """Refuse an argument that is not valid UTF-8 (a file name in another encoding, which Python holds
    as lone surrogates): every output records its inputs' paths in UTF-8 JSON, and such a name
    failed only there, after the work, leaving a half-written folder. UTF-8 read under a locale of another
    encoding (PYTHONUTF8=0 with LC_ALL=C: ASCII) comes here too, and is told so rather than called invalid."""
    for i, arg in enumerate(args):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            raw = os.fsencode(arg)  # the bytes as given
            shown = raw.decode("utf-8", "backslashreplace")
            flag = args[i - 1] if i and args[i - 1].startswith("-") else None  # the flag it is the value of, if any
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(shown, "is not valid UTF-8 (text or a file name in another encoding): give it in "
                                 "UTF-8, or rename the file", field=flag) from None
            raise InputError(shown, f"is UTF-8, but this Python reads arguments as {sys.getfilesystemencoding()} (the "
                             "locale's): run with PYTHONUTF8=1 or under a UTF-8 locale (LANG=C.UTF-8)", field=flag) from None


def _check_single_flags(args: list[str]) -> None:
    """Refuse a flag that takes one value given twice (`ask --index A --index B`, `-q A -qB`): click
    keeps the last in silence, so the run used an input the user may not have meant; and a switch given
    in both its spellings (`--claims --no-claims`), of which click keeps the last as silently. Flags that
    take several (`--questions`, `--recall-at`), and a switch in one spelling (`--json --json`), may repeat.

    The arguments are read as click reads them: a flag that takes a value takes the next argument
    whatever it looks like (`-k -3`, `--query --index`), or the rest of its own (`--n-docs=3`, `-k3`)."""
    command, i = click_command(), 0  # typer's own click: its classes, read by their attributes
    while hasattr(command, "commands") and i < len(args) and args[i] in command.commands:
        command, i = command.commands[args[i]], i + 1
    options = {name: p for p in command.params if p.param_type_name == "option" for name in p.opts + p.secondary_opts}
    seen: dict = {}  # a single-value option -> its spelling first given
    switched: dict = {}  # a switch with an off spelling (--claims/--no-claims) -> its spelling first given
    rest = iter(args[i:])
    for arg in rest:
        if arg == "--":
            break
        for name, attached in _option_names(arg, options):
            option = options[name]
            takes_value = not (option.is_flag or option.count)
            if takes_value:
                for _ in range(option.nargs - attached):  # its value(s), whatever they look like
                    next(rest, None)
            if option.is_flag and option.secondary_opts:
                first = switched.setdefault(option, name)
                if (first in option.secondary_opts) != (name in option.secondary_opts):
                    raise InputError(name, f"given with {first}: one turns off what the other turns on, and only the "
                                           "last would count; give one")
            if not takes_value or option.multiple:
                continue
            if option in seen:
                spelled = f" (as {seen[option]} and {name})" if seen[option] != name else ""
                raise InputError(name, f"given twice{spelled}: it takes one value, and only the last would count")
            seen[option] = name


def _option_names(arg: str, options: dict) -> list[tuple[str, bool]]:
    """The options that the argument `arg` gives, as click's parser reads it, each with whether its
    value is attached to it: `--n-docs=3` and `-k3` (a short option followed by its value, a negative
    number too: `-k-3`) are one option with its value; `-ab` would be two short switches. Nothing for an
    argument that is no option of the command (a value, a positional argument, or one click refuses)."""
    if arg.startswith("--"):
        name, sep, _ = arg.partition("=")
        return [(name, bool(sep))] if name in options else []
    if not arg.startswith("-") or len(arg) < 2:
        return []
    if arg in options:
        return [(arg, False)]
    found = []
    for j in range(1, len(arg)):  # click's short options: each letter a switch until one that takes a value
        name = "-" + arg[j]
        option = options.get(name)
        if option is None:
            return []  # not an option click knows: it refuses it itself
        found.append((name, j + 1 < len(arg)))
        if not (option.is_flag or option.count):
            break  # the rest of the argument is its value
    return found


@functools.cache
def click_command():
    """The click command typer makes of `app`, made once: typer reads every command function's signature
    and type hints to make it (0.1 s, as long as the rest of a refused command's run), and `main` needs it
    twice, for the flag check and for the call."""
    return typer.main.get_command(app)


def main() -> None:
    """Run the command line; the exit code says how it ended (the module docstring). A stdout closed from the
    start (`>&-`) is refused, exit 2: Python has no sys.stdout then, and the command's results would be
    dropped in silence with exit 0. One that cannot encode a character (PYTHONIOENCODING=ascii, a Latin-1
    locale) writes it as a backslash escape: the final print crashed there (exit 3), hiding a gate's verdict."""
    if sys.stdout is None:
        _say("error: standard output is closed; redirect it to a file or /dev/null")
        sys.exit(2)
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    was_devnull = _on_devnull(sys.stdout)
    try:
        _run()
    except SystemExit as e:
        if _help_output_closed(e, was_devnull):
            _output_closed()
        raise


def _run() -> None:
    import signal

    from typer.exceptions import TyperException  # typer carries its own click: its usage errors derive from this

    global _other_unraisable
    _TERMINATED.clear()  # this command's SIGTERMs (a test runs several commands in one process)
    signal.signal(signal.SIGTERM, _terminate)
    if sys.unraisablehook is not _resend_lost_terminate:
        _other_unraisable, sys.unraisablehook = sys.unraisablehook, _resend_lost_terminate
    warnings.formatwarning = _one_line_warning
    try:
        _check_arguments_encode(sys.argv[1:])
        _check_single_flags(sys.argv[1:])
        code = click_command()(prog_name="lewisrag", standalone_mode=False)  # usage errors come back here, below
        # typer turns Ctrl-C (a KeyboardInterrupt) into 130, silently; a SIGTERM whose KeyboardInterrupt was lost
        # (`_resend_lost_terminate`) and that the command outran is no success either
        if code == 130 or _TERMINATED:
            _interrupted()
        sys.exit(code if isinstance(code, int) else 0)
    except typer.Abort:
        _interrupted()
    except _ui.OutputClosed:
        _output_closed()
    except BrokenPipeError as e:  # typer.echo's, or a pipe of another's: which, stdout tells
        if _writable(sys.stdout):
            _say(f"error: {e.filename + ': ' if e.filename else ''}{e.strerror or e}")
            sys.exit(2)
        _output_closed()
    except TyperException as e:
        ctx = getattr(e, "ctx", None)
        if type(e).__name__ == "NoArgsIsHelpError" and ctx is not None:  # a bare `lewisrag` or `lewisrag index`
            text = ctx.get_help()  # typer's rich help prints itself and returns ""
            if text:
                typer.echo(text)
        else:  # a missing, unknown or out-of-range flag: one line, like every other bad input
            hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
            _say(f"error: {e.format_message()}{hint}")
        sys.exit(getattr(e, "exit_code", 2))
    except InputError as e:
        _say(f"error: {e}")
        sys.exit(2)
    except OSError as e:  # a path the user named cannot be read or written (read-only, full disk, a folder)
        where = f"{e.filename}: " if e.filename else ""
        _say(f"error: {where}{e.strerror or e}")
        sys.exit(2)
    except KeyboardInterrupt:
        _interrupted()
    except Exception:  # a bug in lewisrag: its traceback, and a code of its own (Python's would be 1, a failed gate's)
        traceback.print_exc()
        sys.exit(INTERNAL_ERROR)


if __name__ == "__main__":
    main()
