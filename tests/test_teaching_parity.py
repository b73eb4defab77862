"""The teaching material says the same things in English and Chinese: the lessons (docs/lessons/*.ipynb and
their sources, scripts/lessons/), their README and the report catalogue (`lewisrag.eval.reports.i18n`).

What a machine can hold the two languages to, beside what tests/test_lessons.py (same code, no outputs,
notebooks match their sources) and tests/test_i18n.py (same placeholder names) check already: the same
cells in the same order, every figure (a decimal, a percentage, a number of two digits or more) in both,
the same formulas and code spans, a Chinese cell that is Chinese and an English one with no Chinese in it,
and in the catalogue the same format of every number (`{v:.3f}` in one language is `{v:.3f}` in the other)."""

from __future__ import annotations

import re
import string
import sys
from pathlib import Path

import nbformat
import pytest

from lewisrag.eval.reports.i18n import MESSAGES

ROOT = Path(__file__).resolve().parents[1]
LESSONS = ROOT / "docs" / "lessons"
sys.path.insert(0, str(ROOT / "scripts" / "lessons"))  # the sources import their shared cells as `common`

import evaluation  # noqa: E402
import hot_swap  # noqa: E402
import marginalization  # noqa: E402
import original_vs_modern  # noqa: E402
from common import Markdown  # noqa: E402

SOURCES = (marginalization, hot_swap, original_vs_modern, evaluation)
CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")
MATH = re.compile(r"\$[^$]+\$")
CODE = re.compile(r"`[^`\n]+`")
# a figure: a decimal, a percentage or a whole number of two digits or more, not part of a name (BM25, y_1)
FIGURE = re.compile(r"(?<![A-Za-z0-9_.])(?:\d+\.\d+|\d+%|\d{2,})(?![A-Za-z0-9_])")


def figures(text: str) -> set[str]:
    """The figures of a text outside its formulas and code spans (`2016 年 12 月`: the month is Chinese only,
    so a Chinese cell may hold a figure the English one lacks only where it writes a date)."""
    return set(FIGURE.findall(CODE.sub(" ", MATH.sub(" ", text))))


def markdown_pairs():
    for lesson in SOURCES:
        for i, cell in enumerate(lesson.CELLS):
            if isinstance(cell, Markdown):
                yield pytest.param(cell, id=f"{lesson.TITLE}-cell-{i:02d}")


@pytest.mark.parametrize("title", [lesson.TITLE for lesson in SOURCES])
def test_both_notebooks_have_the_same_cells_in_the_same_order(title):
    en, zh = (nbformat.read(LESSONS / f"{title}.{lang}.ipynb", as_version=4) for lang in ("en", "zh"))
    assert [(c.id, c.cell_type) for c in en.cells] == [(c.id, c.cell_type) for c in zh.cells]
    assert en.metadata["lewisrag_lesson"]["language"] == "en" and zh.metadata["lewisrag_lesson"]["language"] == "zh"


@pytest.mark.parametrize("cell", markdown_pairs())
def test_a_markdown_cell_is_in_its_language(cell):
    assert cell.en.strip() and cell.zh.strip()
    assert not CJK.search(cell.en), CJK.findall(cell.en)
    assert len(CJK.findall(cell.zh)) > len(cell.zh) // 10, "the Chinese cell is mostly not Chinese"


@pytest.mark.parametrize("cell", markdown_pairs())
def test_a_markdown_cell_quotes_the_same_figures_formulas_and_code(cell):
    en_figures, zh_figures = figures(cell.en), figures(cell.zh)
    dates = {m for m in re.findall(r"(\d+) 月", cell.zh)}
    assert en_figures == zh_figures - (dates - en_figures), (en_figures ^ zh_figures)
    assert set(MATH.findall(cell.en)) == set(MATH.findall(cell.zh))
    # code spans: a span that names something (a command, a file, a flag) is the same in both; only a span
    # with words to translate in it (`<s> 答案 </s>`, `<实体>-0`) may differ, one for one
    en_code, zh_code = CODE.findall(cell.en), CODE.findall(cell.zh)
    assert len(en_code) == len(zh_code), (en_code, zh_code)
    translated = [c for c in zh_code if CJK.search(c)]
    assert {c for c in zh_code if not CJK.search(c)} <= set(en_code), set(zh_code) - set(en_code)
    assert len(set(en_code) - set(zh_code)) <= len(translated), set(en_code) - set(zh_code)


def _format_fields(template: str) -> list[tuple[str, str, str | None]]:
    return sorted((name, spec, conv) for _, name, spec, conv in string.Formatter().parse(template) if name is not None)


def test_every_message_formats_its_numbers_alike_in_both_languages():
    for key, (en, zh) in MESSAGES.items():
        if key == "rep.plots.no_cjk":  # Chinese only: the note about a missing CJK font
            continue
        assert _format_fields(en) == _format_fields(zh), key


def test_every_message_quotes_the_same_decimals_and_percentages():
    decimal = re.compile(r"(?<![\w.])\d+\.\d+|\d+%")
    for key, (en, zh) in MESSAGES.items():
        strip = lambda t: re.sub(r"\{[^{}]*\}", " ", t)  # noqa: E731  placeholders are compared above
        assert set(decimal.findall(strip(en))) == set(decimal.findall(strip(zh))), key


def _readme_sections() -> tuple[str, str]:
    text = (LESSONS / "README.md").read_text(encoding="utf-8")
    en, zh = text.split("\n## English\n", 1)[1].split("\n## 中文\n", 1)
    return en, zh


def test_the_readme_says_the_same_in_both_languages():
    en, zh = _readme_sections()
    link = re.compile(r"\]\(([^)#]+\.ipynb)\)")
    assert set(link.findall(en)) == set(link.findall(zh)) == {f"{t.TITLE}.{lang}.ipynb" for t in SOURCES
                                                              for lang in ("en", "zh")}
    rows = re.compile(r"^\| \[`(\w+)`\]", re.MULTILINE)
    assert rows.findall(en) == rows.findall(zh) == [t.TITLE for t in SOURCES]
    heading = re.compile(r"^### ", re.MULTILINE)
    assert len(heading.findall(en)) == len(heading.findall(zh))
    assert figures(en) == figures(zh), figures(en) ^ figures(zh)
    assert not CJK.search(en.replace("[中文]", ""))

    def commands(section: str) -> list[str]:  # the shell lines, comments and the notebook's language aside
        blocks = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
        lines = [re.sub(r"\s+#.*$", "", line).strip() for block in blocks for line in block.splitlines()]
        return [re.sub(r"\.(en|zh)\.", ".LANG.", line) for line in lines if line]

    assert commands(en) == commands(zh)
    code = lambda s: {c for c in CODE.findall(s) if not re.search(r"\.(en|zh)\.", c)}  # noqa: E731
    assert code(en) == code(zh), code(en) ^ code(zh)
