"""The `lewisrag ...` command lines of the docs name commands and flags the CLI has (the README and
`--help` stay true to the code): README.md, docs/*.md, docs/lessons/README.md and the lesson
notebooks, both languages. Each command path is walked through the click app and each `--flag`
looked up among that command's parameters; a hidden one is a deprecated spelling
(tests/test_cli_flags.py), which the docs should not show either."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer

from lewisrag.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "docs" / "lessons" / "README.md",
        *sorted((ROOT / "docs" / "lessons").glob("*.ipynb"))]
DOCS = [p for p in DOCS if not p.name.endswith(".run.ipynb")]  # .run: executed copies of the lessons

LEWISRAG = re.compile(r"(?<![\w.-])lewisrag(?:\.cli)?(?=\s|$)")  # not `.lewisrag`, `lewisrag/…`, `lewisrag_dpr.json`
SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.S)  # an inline code span, over line breaks too
COMMENT = re.compile(r"(?:^|\s)#")  # a shell or Python comment
FLAG = re.compile(r"(?:^|(?<=[\s\[{(|/]))(--?[A-Za-z][A-Za-z0-9-]*)")  # `--x`, `[--x`, `--query|-q`, `--a/--b`
ALTERNATIVES = re.compile(r"\{?([a-z][a-z-]*(?:\|[a-z][a-z-]*)+)\}?")  # `{rag|stitched}` where a command is due


@dataclass(frozen=True)
class Invocation:
    where: str  # file:line (a notebook: file:cell N line M)
    words: tuple[str, ...]  # what follows `lewisrag`, quoted arguments taken out


def code_invocations(code: str, where: str) -> list[Invocation]:
    """The invocations in one piece of code: a shell line (continuations joined) or an inline span.

    An invocation is `lewisrag` (also `!lewisrag`, `$ lewisrag`, `.venv/bin/lewisrag`, `python -m
    lewisrag`, `-m lewisrag.cli`) and the words after it, up to `;`, `&&`, `||` or a pipe into a
    program (`| jq`). Usage syntax stays in the words: `[--n-docs K]`, `--query|-q Q`, `{a|b}`,
    `[--steps N | --minutes M]`, `...`, RUN."""
    found = []
    for m in LEWISRAG.finditer(code):
        rest = re.split(r";|&&|\|\||\s\|\s+(?=[a-z])", code[m.end():])[0]
        rest = re.sub(r"\"[^\"]*\"|'[^']*'", " ARG ", rest)  # "a question" is one argument
        found.append(Invocation(where, tuple(rest.split())))
    return found


def _code_block(lines: list[tuple[int, str]], where) -> list[Invocation]:
    """A fenced block or a notebook code cell: each line's comment read as prose (its code spans);
    a line ending in `\\`, or an indented one (the README's usage block), continues the line above."""
    found, logical = [], []  # logical: [(line number, code)] of one command line
    for n, line in lines:
        code, *comment = COMMENT.split(line, maxsplit=1)
        if comment:
            found += _spans(comment[0], n, where)
        if logical and (logical[-1][1].endswith("\\") or line[:1].isspace()):
            logical.append((n, code.rstrip().removesuffix("\\")))
        else:
            if logical:
                found += code_invocations(" ".join(c for _, c in logical), where(logical[0][0]))
            logical = [(n, code.rstrip().removesuffix("\\"))]
    if logical:
        found += code_invocations(" ".join(c for _, c in logical), where(logical[0][0]))
    return found


def _spans(text: str, first_line: int, where) -> list[Invocation]:
    found = []
    for m in SPAN.finditer(text):
        n = first_line + text.count("\n", 0, m.start())
        found += code_invocations(m.group(2).replace("\\|", "|").replace("\n", " "), where(n))
    return found


def markdown_invocations(text: str, where) -> list[Invocation]:
    """Fenced blocks line by line, prose paragraph by paragraph (its code spans only: a bare
    "lewisrag" in prose is the project's name). `where(n)` names line n (1-based)."""
    found, fence, block, para = [], None, [], []

    def end_paragraph():
        if para:
            found.extend(_spans("\n".join(t for _, t in para), para[0][0], where))
            para.clear()

    for n, line in enumerate(text.splitlines(), 1):
        marker = re.match(r"\s*(```|~~~)", line)
        if fence:
            if marker and marker.group(1) == fence:
                found += _code_block(block, where)
                fence, block = None, []
            else:
                block.append((n, line))
        elif marker:
            end_paragraph()
            fence = marker.group(1)
        elif line.strip():
            para.append((n, line))
        else:
            end_paragraph()
    end_paragraph()
    return found


def file_invocations(path: Path) -> list[Invocation]:
    name = str(path.relative_to(ROOT))
    if path.suffix != ".ipynb":
        return markdown_invocations(path.read_text(encoding="utf-8"), lambda n: f"{name}:{n}")
    found = []
    for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        source = "".join(cell["source"])
        where = lambda n, i=i: f"{name}:cell {i} line {n}"  # noqa: E731
        if cell["cell_type"] == "code":
            found += _code_block(list(enumerate(source.splitlines(), 1)), where)
        else:
            found += markdown_invocations(source, where)
    return found


# ---------------------------------------------------------------------------------------------
# the check

LEWISRAG_CLICK = typer.main.get_command(app)  # built once: ~40 ms a call


def resolve(words: tuple[str, ...]):
    """(click command, its path, the words after the path), or a problem. A word that names no
    command where one is due is a problem: `lewisrag does three things` never sits in a code span.
    (typer ships its own click: a group is told by its `commands`.)"""
    cmd, path = LEWISRAG_CLICK, []
    for i, word in enumerate(words):
        subs = getattr(cmd, "commands", None)
        if subs is None or word not in subs:
            if subs is not None and re.fullmatch(r"[a-z][a-z-]*", word):
                return f"no command {' '.join(['lewisrag', *path, word])!r}"
            return cmd, path, list(words[i:])
        cmd = cmd.commands[word]
        path.append(word)
    return cmd, path, []


def problems(inv: Invocation) -> list[str]:
    """What is wrong with one invocation: an unknown command or flag, a deprecated spelling (a
    hidden option, or `eval answers`' old positional FILE), a positional where the command takes
    none, a value after a boolean flag. A flag shown without its value is fine: prose names
    flags (`lewisrag pretrain --device` alone)."""
    if not inv.words or inv.words[0] == "...":  # the name alone, or `lewisrag ...` (any command)
        return []
    for i, word in enumerate(inv.words[:2]):
        if alternatives := ALTERNATIVES.fullmatch(word):  # `lewisrag train {rag|stitched} ...`: each one
            return [p for alt in alternatives.group(1).split("|")
                    for p in problems(Invocation(inv.where, (*inv.words[:i], alt, *inv.words[i + 1:])))]
    resolved = resolve(inv.words)
    if isinstance(resolved, str):
        return [f"{inv.where}: {resolved}: lewisrag {' '.join(inv.words)}"]
    cmd, path, rest = resolved
    command, where = " ".join(["lewisrag", *path]), inv.where
    params = {opt: p for p in cmd.params for opt in (*p.opts, *p.secondary_opts)}
    arguments = [p for p in cmd.params if p.param_type_name == "argument"]
    found = []
    if rest and re.match(r"[\w/~]", rest[0]) and not any(not p.hidden for p in arguments):  # FILE, "a question"
        found.append(f"{where}: `{command}` {rest[0]}: deprecated spelling in docs (a positional)" if arguments
                     else f"{where}: `{command}` takes no positional argument, the docs give it {rest[0]!r}")
    for i, word in enumerate(rest):
        for flag in FLAG.findall(word):
            param = params.get(flag)
            if flag == "--help":
                continue
            if param is None:
                found.append(f"{where}: `{command}` has no {flag}")
            elif param.hidden:
                found.append(f"{where}: `{command}` {flag}: deprecated spelling in docs")
            elif (param.is_flag and word.lstrip("[{(") == flag and not arguments and i + 1 < len(rest)
                  and re.match(r"[\w/~]", rest[i + 1])):
                found.append(f"{where}: `{command}` {flag} takes no value, the docs give it {rest[i + 1]!r}")
    return found


ALL = [inv for path in DOCS for inv in file_invocations(path)]
CHECKED = [inv for inv in ALL if inv.words and inv.words[0] != "..."]


def test_the_docs_command_lines_name_real_commands_and_flags():
    print(f"{len(CHECKED)} lewisrag command lines checked in {len(DOCS)} files")
    assert len(CHECKED) >= 100, len(CHECKED)  # 148 today: the extractor still finds them
    assert {inv.where.split(":")[0] for inv in CHECKED} >= {"README.md", "docs/retriever.md", "docs/lessons/02_hot_swap.zh.ipynb"}
    found = [p for inv in CHECKED for p in problems(inv)]
    assert not found, "\n".join(found)


# ---------------------------------------------------------------------------------------------
# the checker itself, on invented lines


def _check(text: str) -> list[str]:
    return [p for inv in markdown_invocations(text, lambda n: f"x.md:{n}") for p in problems(inv)]


def test_an_invented_flag_a_command_and_an_old_spelling_are_caught():
    text = "intro\n\n```\nlewisrag world --out W\nlewisrag index search --index IDX \\\n  --no-such-flag\n```\n"
    assert _check(text) == ["x.md:5: `lewisrag index search` has no --no-such-flag"]
    assert _check("Run `lewisrag index frobnicate --index I`.") == [
        "x.md:1: no command 'lewisrag index frobnicate': lewisrag index frobnicate --index I"]
    assert _check("Then\n`lewisrag eval retrieval --index I\n-k 5`") == [
        "x.md:2: `lewisrag eval retrieval` -k: deprecated spelling in docs"]
    assert _check("`lewisrag train rag --index I [--compile yes]`") == [
        "x.md:1: `lewisrag train rag` --compile takes no value, the docs give it 'yes]'"]
    assert _check("`lewisrag eval answers answers.jsonl --out R`, `lewisrag index build P --out I`") == [
        "x.md:1: `lewisrag eval answers` answers.jsonl: deprecated spelling in docs (a positional)",
        "x.md:1: `lewisrag index build` takes no positional argument, the docs give it 'P'"]
    assert _check("`lewisrag train {rag|stitched} --index I --cite-first`") == [
        "x.md:1: `lewisrag train rag` has no --cite-first"]


@pytest.mark.parametrize("text", [
    "lewisrag does three things; `lewisrag` (kind, version); `.lewisrag` marker; `lewisrag/data/world.py`",
    "`lewisrag index search --index IDX --query|-q Q [--n-docs K] [--encoder E [--context-encoder C]] [--swap]`",
    "```\nlewisrag compare --run RUN [--questions F [--qa-fields ...]] [--lang en|zh]   # --no-such in a comment\n"
    "                 [--device auto|cpu|cuda[:N]] [--out DIR | --overwrite]\n```",
    "`HOME=/tmp/x lewisrag ... --out ~ --overwrite`, `mv RUN RUN2; lewisrag reproduce --out RUN2 --resume`",
    "`lewisrag pretrain [--steps N | --minutes M]`, `lewisrag eval bughunt --json | jq .layers --raw`",
    "`lewisrag train {dpr|rag|stitched} --train F --out DIR`, `lewisrag train dpr --init-question/--init-context`",
    "```\n!lewisrag ask --model RUN --index IDX \"who leads --x?\" --swap\n$ python -m lewisrag index verify --index I\n```",
])
def test_usage_syntax_and_prose_parse_clean(text):
    assert _check(text) == []


def test_usage_continuation_lines_are_read():
    text = "```\nlewisrag world --out W   # a world\n              [--seed S] [--bogus]\n```"
    assert _check(text) == ["x.md:2: `lewisrag world` has no --bogus"]
