"""The `lewisrag` command and `python -m lewisrag`: `lewisrag.cli`, imported inside `main` so that a
Ctrl-C or SIGTERM while it is still importing ends as one during a command does (one line, exit 130
or 143), not with a traceback."""

import signal
import sys
from typing import NoReturn

STOPPED = {130: "interrupted", 143: "terminated (SIGTERM)"}  # exit code: the line, as cli._interrupted writes it


def stop(code: int) -> NoReturn:
    """End as a stopped command ends (`lewisrag.cli` cannot be imported here: it is what is loading); with
    stderr closed from the start (None) or its reader gone, the line is dropped and the code kept, as
    `cli._interrupted` does, instead of an AttributeError or BrokenPipeError traceback with exit 1."""
    try:
        sys.stderr.write(STOPPED[code] + "\n")
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):
        pass
    sys.exit(code)


def main() -> None:
    # nothing is written yet: no cleanup to run; cli.main sets its own handler
    signal.signal(signal.SIGTERM, lambda signum, frame: stop(143))
    try:
        from lewisrag.cli import main as cli_main
    except KeyboardInterrupt:
        stop(130)
    cli_main()


if __name__ == "__main__":
    main()
