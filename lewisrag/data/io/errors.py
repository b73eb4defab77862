"""The error types, `InputError` (bad input: one line, exit code 2) and `LewisragWarning`, and a
library's error text as one line. It imports nothing of lewisrag: every module may import it."""

from __future__ import annotations

import os


class LewisragWarning(UserWarning):
    """Something the user should know but that does not stop the command; the CLI prints it as one
    line, `warning: message` (`warnings` shows each message once)."""


class InputError(Exception):
    """Bad input, reported as `file:line: field 'name': message` (exit code 2 in the CLI), one line of
    printable text: a file's value quoted raw (a line break, a terminal's escape code) is escaped
    there (`escaped`), so it can neither break the line nor reach the terminal. The parts are kept
    as given."""

    def __init__(self, source: str | os.PathLike, message: str, line: int | None = None, field: str | None = None):
        self.source, self.line, self.field, self.message = str(source), line, field, message
        where = self.source if line is None else f"{self.source}:{line}"
        what = f"field '{field}': {message}" if field else message
        super().__init__(escaped(f"{where}: {what}"))


def one_line(error: BaseException | str) -> str:
    """A library's error text as one printable line: its lines joined with "; ", control characters
    escaped (pyarrow quotes the raw byte it stopped at: "don't know what type: \\x0f").

    >>> one_line("Couldn't deserialize thrift: don't know what type: \\x0f\\nDeserializing page header failed.\\n")
    "Couldn't deserialize thrift: don't know what type: \\\\x0f; Deserializing page header failed."
    """
    text = str(error) or type(error).__name__
    return escaped("; ".join(line.strip() for line in text.splitlines() if line.strip()))


def escaped(text: str) -> str:
    """`text` with each character that is not printable escaped as `repr` escapes it.

    >>> print(escaped("foo\\nbar\\x1b[31m"))
    foo\\nbar\\x1b[31m
    """
    if text.isprintable():  # nearly every message: no copy
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def first_line(error: BaseException | str) -> str:
    """The first non-blank line of a library's error, as `one_line` prints it; the error's type if it
    has no text. Libraries put the cause first and a traceback or advice after it.

    >>> first_line(ValueError("\\nbad magic number\\nat offset 0")), first_line(KeyError())
    ('bad magic number', 'KeyError')
    """
    lines = [line for line in str(error).splitlines() if line.strip()]
    return one_line(lines[0]) if lines else type(error).__name__
