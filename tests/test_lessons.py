"""The lessons of docs/lessons/: every notebook runs to the end, in English and in Chinese, on one tiny run
that the first of them makes; the committed files carry no outputs and match their source
(scripts/make_lessons.py)."""

from __future__ import annotations

import subprocess
import sys
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


def _code(path: Path) -> list[str]:
    return [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def test_every_lesson_is_there_in_both_languages():
    committed = {p for p in LESSONS.glob("*.ipynb") if not p.name.endswith(".run.ipynb")}  # .run: executed copies
    assert committed == set(NOTEBOOKS)


def test_both_languages_run_the_same_code():
    for t in TITLES:
        en, zh = (_code(LESSONS / f"{t}.{lang}.ipynb") for lang in LANGUAGES)
        assert en == zh, t


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


@pytest.fixture(scope="session")
def kernel_specs(tmp_path_factory) -> KernelSpecManager:
    """A kernel spec for this interpreter (sys.executable) in a temporary folder: nothing is registered
    in the user's or the system's Jupyter paths."""
    prefix = tmp_path_factory.mktemp("jupyter")
    ipykernel.kernelspec.install(kernel_name=KERNEL, prefix=str(prefix))
    return KernelSpecManager(kernel_dirs=[str(prefix / "share" / "jupyter" / "kernels")])


@pytest.fixture(scope="session")
def lesson_run(tmp_path_factory) -> Path:
    """The tiny run every lesson reads: the first notebook to run makes it, the others reuse it."""
    return tmp_path_factory.mktemp("lessons") / "run"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_lesson_runs(path, kernel_specs, lesson_run, tmp_path, monkeypatch):
    monkeypatch.setenv("LEWISRAG_LESSON_RUN", str(lesson_run))  # the kernel inherits the environment
    nb = nbformat.read(path, as_version=4)
    km = KernelManager(kernel_name=KERNEL, kernel_spec_manager=kernel_specs)
    # a cell that raises fails the test with its traceback (CellExecutionError)
    NotebookClient(nb, km=km, timeout=600, resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert (lesson_run / "results.json").is_file()
    assert all(o.get("output_type") != "error" for c in nb.cells if c.cell_type == "code" for o in c.outputs)
