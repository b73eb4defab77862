"""The lessons of docs/lessons/: every notebook runs to the end, in English and in Chinese, on one tiny run
that the first of them makes; the English ones with the exercises' solutions filled in, so that every check
cell must accept them; the committed files carry no outputs and match their source (scripts/make_lessons.py)."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from itertools import takewhile
from pathlib import Path

import ipykernel.kernelspec
import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
LESSONS = ROOT / "docs" / "lessons"
TITLES = ("01_marginalization", "02_hot_swap", "03_original_vs_modern", "04_evaluation")
LANGUAGES = ("en", "zh")
NOTEBOOKS = [LESSONS / f"{t}.{lang}.ipynb" for t in TITLES for lang in LANGUAGES]
KERNEL = "lewisrag-lessons"

# The exercises' solutions on the tiny run of seed 0, by lesson: each replaces the cell `<name> = None  # ...` where
# the learner works, and the collapsed check cell after it must print "right".
SOLUTIONS = {
    "01_marginalization": {
        "ex1": "ex1 = [[0.9, 0.9], [0.1, 0.1]]",
        "ex2": """r1 = model.retrieve([ex.question], index, tok, n_docs=1)
logits1 = model(r1.context_input_ids, r1.context_attention_mask, r1.doc_scores, labels=labels).logits
s1, t1, log_p_token1 = by_hand(logits1, r1.doc_scores, labels)
ex2 = (float(s1), float(t1), float(-log_p_token1.sum()))""",
        "ex3": "ex3 = [float(x) for x in by_hand(reader_logits, torch.zeros_like(rb.doc_scores), reader_labels)[:2]]",
        "ex4": """generated = reader.generate(rb.context_input_ids, rb.context_attention_mask, rb.doc_scores, n_docs=K,
                            return_evidence=True)
g_labels = generated.sequences[:1]
g_logits = reader(rb.context_input_ids, rb.context_attention_mask, rb.doc_scores, labels=g_labels).logits
ex4 = torch.softmax(rb.doc_scores[0].log_softmax(0)[:, None] + by_hand(g_logits, rb.doc_scores, g_labels)[2], dim=0)""",
    },
    "02_hot_swap": {
        "ex1": 'ex1 = {"retrieval": 0, "reading": 3}',
        "ex2": "ex2 = (0.17, 16.7)",  # 2/12 each, as the lesson prints it and as a percentage
    },
    "03_original_vs_modern": {
        "ex1": """passes = {name: layer["forward_passes_per_answer"] for name, layer in card["layers"].items()}
ex1 = ((passes["rag_token"] - 2 * model.n_docs) / model.n_docs, passes["stitched"] - 1)""",
        "ex2": 'ex2 = {"dropped": {1, 3}, "cited_3": {1, 3}}',
        "ex3": 'ex3 = {"faithfulness", "answer_completeness", "citation_recall", "citation_precision"}',
    },
    "04_evaluation": {
        "ex1": "ex1 = 0.2",
        "ex2": 'ex2 = ("false_kill_rate", "up", {"correct"})',
        "ex3": 'ex3 = ("faithfulness < 0.5", 1)',
    },
}


def _code(path: Path) -> list[str]:
    return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def test_every_lesson_is_there_in_both_languages():
    committed = {p for p in LESSONS.glob("*.ipynb") if not p.name.endswith(".run.ipynb")}  # .run: executed copies
    assert committed == set(NOTEBOOKS)


def test_both_languages_run_the_same_code():
    for t in TITLES:
        en, zh = (_code(LESSONS / f"{t}.{lang}.ipynb") for lang in LANGUAGES)
        assert en == zh, t


def _checks(nb) -> list:
    """The exercises' check cells: collapsed, each after the cell where the learner sets its variable."""
    return [c for c in nb.cells if c.cell_type == "code" and c.metadata.get("jupyter", {}).get("source_hidden")]


def test_every_exercise_has_a_check_and_a_solution():
    for t in TITLES:
        nb = nbformat.read(LESSONS / f"{t}.en.ipynb", as_version=4)
        blanks = [c.source.split(" = None")[0] for c in nb.cells if c.cell_type == "code" and " = None  #" in c.source]
        assert blanks == list(SOLUTIONS[t]), t
        assert len(_checks(nb)) == len(blanks), t


def test_committed_notebooks_have_no_outputs():
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: cell {cell.id} has outputs"


def test_notebooks_match_their_source():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_lessons.py"), "--check"],
                          check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _cells(line: str) -> list[str]:
    """A markdown table line's cells, stripped (an escaped `\\|` stays inside its cell)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def _readme_table(header: str) -> dict[str, dict[str, str]]:
    """README.md's table whose first column is headed `header`: {a row's first cell: {a column's header: its cell}}."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|") and _cells(line)[:1] == [header])
    columns = _cells(lines[start])
    rows = map(_cells, takewhile(lambda line: line.startswith("|"), lines[start + 2:]))  # + 2: past the |---| line
    return {cells[0]: dict(zip(columns[1:], cells[1:])) for cells in rows}


def test_lesson_3_quotes_the_readme_as_it_stands():
    """Lesson 3 quotes the `small` run's exact match, position probe and forward passes from the README's results
    table: each figure, formatted into its text from README_ROWS, must be the README's cell in the row and column it
    names, so that a new run in the README fails here until the lesson says the same (it once kept the old run's)."""
    sys.path.insert(0, str(ROOT / "scripts" / "lessons"))
    try:
        lesson = importlib.import_module("original_vs_modern")
    finally:
        sys.path.remove(str(ROOT / "scripts" / "lessons"))
    table = _readme_table("test split")
    for row, quoted in lesson.README_ROWS.items():
        assert row in table, f"README.md's results table has no row {row!r}"
        for column, figure in quoted.items():
            assert table[row].get(column) == figure, \
                f"{row!r}, {column}: lesson 3 says {figure}, README.md {table[row].get(column)!r}"
    for lang in ("en", "zh"):  # the text says them all, in both languages
        text = "\n".join(getattr(cell, lang) for cell in lesson.CELLS if hasattr(cell, lang))
        assert not [f for f in lesson.SMALL.values() if f not in text], lang


@pytest.fixture(scope="session")
def kernel_specs(tmp_path_factory) -> KernelSpecManager:
    """A kernel spec for this interpreter (sys.executable) in a temporary folder: nothing is registered
    in the user's or the system's Jupyter paths."""
    prefix = tmp_path_factory.mktemp("jupyter")
    ipykernel.kernelspec.install(kernel_name=KERNEL, prefix=str(prefix))
    return KernelSpecManager(kernel_dirs=[str(prefix / "share" / "jupyter" / "kernels")])


@pytest.fixture(scope="session")
def lesson_run(tmp_path_factory) -> Path:
    """The tiny run every lesson reads, lesson_run/ beside the notebooks as a learner's: the first notebook
    to run makes it, the others reuse it."""
    return tmp_path_factory.mktemp("lessons") / "lesson_run"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_lesson_runs(path, kernel_specs, lesson_run, monkeypatch):
    monkeypatch.delenv("LEWISRAG_LESSON_RUN", raising=False)  # the kernel inherits the environment
    nb = nbformat.read(path, as_version=4)
    title, lang = path.name.split(".")[:2]
    solved = lang == "en"  # the English notebooks run with the solutions, the Chinese ones as a learner opens them
    for cell in nb.cells:
        name = cell.source.split(" = None  #")[0]
        if solved and cell.cell_type == "code" and name in SOLUTIONS[title] and cell.source.startswith(f"{name} = None"):
            cell.source = SOLUTIONS[title][name]
    km = KernelManager(kernel_name=KERNEL, kernel_spec_manager=kernel_specs)
    # a cell that raises fails the test with its traceback (CellExecutionError)
    NotebookClient(nb, km=km, timeout=600, resources={"metadata": {"path": str(lesson_run.parent)}}).execute()
    assert (lesson_run / "results.json").is_file()
    assert all(o.get("output_type") != "error" for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    for cell in _checks(nb):
        printed = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
        expected = "right" if solved else "set ex"  # accepted, or a reminder to answer first
        assert expected in printed, f"{path.name}: {cell.id} printed {printed!r}"


def test_a_mistyped_lesson_run_is_refused_not_trained(tmp_path):
    """LEWISRAG_LESSON_RUN names a run of the learner's: where none is, the setup cell says so instead of
    training the tiny run at the mistyped path (and teaching on it under the learner's run's name)."""
    sys.path.insert(0, str(ROOT / "scripts" / "lessons"))
    try:
        from common import setup
    finally:
        sys.path.remove(str(ROOT / "scripts" / "lessons"))
    typo = tmp_path / "runs" / "demoo"  # given relative: the error shows where the notebook's folder put it
    r = subprocess.run([sys.executable, "-c", setup("01_marginalization").source], capture_output=True, text=True,
                       cwd=tmp_path, env={**os.environ, "LEWISRAG_LESSON_RUN": "runs/demoo"}, timeout=300)
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1].startswith(
        f"FileNotFoundError: LEWISRAG_LESSON_RUN=runs/demoo: no finished run at {typo} (no results.json); "
        "give an absolute path"), r.stderr[-2000:]
    assert not typo.exists() and not (tmp_path / "lesson_work").exists()


def test_a_run_of_the_chinese_world_is_refused(tmp_path):
    """The lessons' text, in both languages, describes the English world (its shipped generator, its passages):
    on a `reproduce --lang zh` run, given or left in lesson_run/, the setup cell says so instead of teaching on it."""
    sys.path.insert(0, str(ROOT / "scripts" / "lessons"))
    try:
        from common import setup
    finally:
        sys.path.remove(str(ROOT / "scripts" / "lessons"))
    for run, given in ((tmp_path / "runs" / "zh", True), (tmp_path / "lesson_run", False)):
        run.mkdir(parents=True)
        (run / "results.json").write_text("{}")
        (run / "config.json").write_text('{"preset": {"name": "tiny", "lang": "zh"}, "seed": 0, "threads": 1, "lang": "zh"}')
        env = {k: v for k, v in os.environ.items() if k != "LEWISRAG_LESSON_RUN"} | ({"LEWISRAG_LESSON_RUN": str(run)} if given else {})
        r = subprocess.run([sys.executable, "-c", setup("01_marginalization").source], capture_output=True, text=True,
                           cwd=tmp_path, env=env, timeout=300)
        where = f"LEWISRAG_LESSON_RUN={run}" if given else str(run)
        assert r.returncode == 1 and r.stderr.strip().splitlines()[-1].startswith(
            f"ValueError: {where}: a run of the zh world (reproduce --lang zh); the lessons need an English run"), r.stderr[-2000:]
        assert not (tmp_path / "lesson_work").exists()
