"""The `lewisrag` command and `python -m lewisrag`: `lewisrag.cli`, imported inside `main` so that a
Ctrl-C or SIGTERM while it is still importing ends as one during a command does (one line, exit 130
or 143), not with a traceback."""

import signal
import sys


def main() -> None:
    def terminated(signum, frame) -> None:
        print("terminated (SIGTERM)", file=sys.stderr)
        sys.exit(143)

    signal.signal(signal.SIGTERM, terminated)  # nothing is written yet: no cleanup to run; cli.main sets its own
    try:
        from lewisrag.cli import main as cli_main
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    cli_main()


if __name__ == "__main__":
    main()
