"""The "given twice" refusal (`lewisrag.cli._check_single_flags`) missed short options with their value
attached: `index search --index I -q "A" -q"B"` searched B in silence, `ask ... -k 2 -k3` used 3. And a
switch given in both its spellings (`eval answers --no-claims --claims`) took the last in silence.
Each is one line, exit 2, before the command runs; arguments are read as click reads them, so a
value that looks like a flag (`-k -3`, `--query -q`) is a value."""

from __future__ import annotations

import pytest

from conftest import run_main
from lewisrag.cli import _check_single_flags
from lewisrag.data.io import InputError

SEARCH = ["index", "search", "--index", "I"]
ASK = ["ask", "--model", "m", "--index", "i"]


@pytest.mark.parametrize("args, message", [
    ([*SEARCH, "-q", "A", "-qB", "--n-docs", "1"], "-q: given twice:"),
    ([*SEARCH, "-qA", "-q", "B"], "-q: given twice:"),
    ([*SEARCH, "-qA", "--query", "B"], "--query: given twice (as -q and --query):"),
    ([*SEARCH, "--query=A", "-q=B"], "-q: given twice (as --query and -q):"),
    ([*ASK, "-k", "2", "-k3", "q"], "-k: given twice:"),
    ([*ASK, "-k2", "-k-3", "q"], "-k: given twice:"),
    ([*SEARCH, "--query", "A", "-qB"], "-q: given twice (as --query and -q):"),
])
def test_a_short_option_with_its_value_attached_counts(args, message, monkeypatch, capsys):
    code, out, err = run_main(monkeypatch, capsys, *args)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [f"error: {message} it takes one value, and only the last would count"], err


@pytest.mark.parametrize("args", [
    [*ASK, "-k", "-3", "q"],  # -3 is -k's value, not an option
    [*SEARCH, "--query", "-q", "--n-docs", "1"],  # the query "-q"
    [*SEARCH, "-q", "--query"],  # the query "--query"
    [*SEARCH, "-q", "A", "--", "-qB"],  # past "--" nothing is an option
    ["eval", "retrieval", "--index", "A", "-k1", "-k", "5", "--questions", "q"],  # a deprecated flag that takes several
    ["eval", "answers", "--answers", "a", "--out", "o", "--claims", "--claims", "--json", "--json"],  # one spelling, again
])
def test_values_that_look_like_flags_and_repeatable_ones_pass(args):
    _check_single_flags(args)


@pytest.mark.parametrize("switches, named", [(["--no-claims", "--claims"], "--claims: given with --no-claims"),
                                             (["--claims", "--no-claims"], "--no-claims: given with --claims")])
def test_a_switch_in_both_spellings_is_refused(switches, named, tmp_path, monkeypatch, capsys):
    code, out, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", tmp_path / "a.jsonl", "--out",
                              tmp_path / "run", *switches)
    assert code == 2 and out == "" and not (tmp_path / "run").exists()
    assert err.strip().splitlines() == [f"error: {named}: one turns off what the other turns on, and only the last "
                                        "would count; give one"], err


def test_the_check_reads_a_value_after_the_flag_as_click_does():
    with pytest.raises(InputError, match="^-q: given twice"):
        _check_single_flags([*SEARCH, "--n-docs", "-q", "-q", "A", "-q", "B"])  # --n-docs's value is "-q"; then two
    _check_single_flags([*SEARCH, "--n-docs", "-q", "-q", "A"])  # one -q
