"""Write the lesson notebooks of docs/lessons/ from their sources in scripts/lessons/, in English and Chinese.

    python scripts/make_lessons.py           # (re)write docs/lessons/<lesson>.{en,zh}.ipynb
    python scripts/make_lessons.py --check   # exit 1 when a committed notebook differs from its source

A lesson source is a list of cells: a markdown cell carries both languages, a code cell is shared, so
the two notebooks of a lesson run the same code; an exercise's check cell (`common.check`) is a code cell whose
source starts collapsed (it holds the answer). The notebooks are written without outputs, with fixed cell ids,
so that writing them twice gives the same bytes (and `--check` can hold them to the source).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "lessons"))  # the lesson sources import their shared cells as `common`

import evaluation
import hot_swap
import marginalization
import original_vs_modern
from common import Code

LESSONS = (marginalization, hot_swap, original_vs_modern, evaluation)
LANGUAGES = ("en", "zh")
OUT = HERE.parent / "docs" / "lessons"
KERNEL = {"name": "python3", "display_name": "Python 3 (lewisrag)", "language": "python"}


def notebook(cells, lang: str) -> nbformat.NotebookNode:
    """One language's notebook: the shared code cells, the markdown cells in `lang`, no outputs."""
    nb_cells = []
    for i, cell in enumerate(cells):
        if isinstance(cell, Code):
            c = new_code_cell(cell.source)
            if cell.hidden:  # JupyterLab shows the cell collapsed; running it needs no click
                c["metadata"]["jupyter"] = {"source_hidden": True}
        else:
            c = new_markdown_cell(getattr(cell, lang))
        c["id"] = f"cell-{i:02d}"  # fixed: the same source always gives the same file
        nb_cells.append(c)
    meta = {"kernelspec": KERNEL, "language_info": {"name": "python"}, "lewisrag_lesson": {"language": lang}}
    nb = new_notebook(cells=nb_cells, metadata=meta)
    nbformat.validate(nb)
    return nb


def rendered() -> dict[Path, str]:
    """{notebook path: its text} for every lesson in every language."""
    return {OUT / f"{lesson.TITLE}.{lang}.ipynb": nbformat.writes(notebook(lesson.CELLS, lang)) + "\n"
            for lesson in LESSONS for lang in LANGUAGES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare the committed notebooks with the sources")
    args = parser.parse_args(argv)
    stale = []
    for path, text in rendered().items():
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(HERE.parent)}")
    for path in stale:
        print(f"{path.relative_to(HERE.parent)} differs from its source: run python scripts/make_lessons.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
