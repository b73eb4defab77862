"""The package as a whole: no import cycles, the one-way layer order of docs/architecture.md, and
every docstring example runs."""

import ast
import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import lewisrag

ROOT = Path(lewisrag.__file__).parent

# docs/architecture.md: the layers each layer may import (besides itself). Two one-way chains share
# the bottom: experiments -> training -> rag_model -> index -> data, and experiments -> eval -> data;
# the evaluator never imports a model, the model never imports training, nothing imports the CLI.
BOTTOM = {"data", "scoring", "pretrained"}
MAY_IMPORT = {
    "__main__": {"cli"},
    "cli": {"commands", "experiments", "training", "rag_model", "index", "eval", "chat_client"} | BOTTOM,
    "commands": {"experiments", "training", "rag_model", "index", "eval", "chat_client"} | BOTTOM,
    "experiments": {"training", "rag_model", "index", "eval", "chat_client"} | BOTTOM,
    "training": {"rag_model", "index"} | BOTTOM,
    "rag_model": {"index", "chat_client"} | BOTTOM,
    "index": BOTTOM,
    "eval": {"chat_client"} | BOTTOM,
    "chat_client": {"data"},
    "data": {"pretrained"},
    "scoring": set(),
    "pretrained": set(),
}


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages([str(ROOT)], "lewisrag.") if "hf_metrics" not in m.name)


def _path(module: str) -> Path:
    rel = Path(*module.split(".")[1:])
    return ROOT / rel / "__init__.py" if (ROOT / rel).is_dir() else ROOT / rel.with_suffix(".py")


def _imports(module: str) -> set[str]:
    """lewisrag modules `module` imports anywhere in its body (function-level imports included)."""
    tree = ast.parse(_path(module).read_text(encoding="utf-8"))
    known, out = set(_modules()) | {"lewisrag"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("lewisrag")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lewisrag"):
            for a in node.names:  # `from lewisrag.eval import stats` imports the module lewisrag.eval.stats
                sub = f"{node.module}.{a.name}"
                out.add(sub if sub in known else node.module)
    return {m for m in out if m in known and m != module}


def _graph() -> dict[str, set[str]]:
    return {m: _imports(m) for m in _modules()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules, or None (depth-first search, colouring nodes)."""
    state, stack = {}, []

    def visit(m: str) -> list[str] | None:
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == "open":
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def _without_package_inits(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """A package's __init__ re-exporting its own submodules is not a cycle: drop parent -> child edges."""
    return {m: {n for n in deps if not n.startswith(m + ".")} for m, deps in graph.items()}


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles():
    cycle = _cycle(_without_package_inits(_graph()))
    assert cycle is None, " -> ".join(cycle)


def _layer(module: str) -> str:
    return module.split(".")[1] if module.count(".") else "lewisrag"


def test_layers_import_one_way():
    graph = _graph()
    assert {_layer(m) for m in graph} - {"lewisrag"} <= set(MAY_IMPORT), "a new layer needs its MAY_IMPORT entry"
    wrong = []
    for m, deps in graph.items():
        a = _layer(m)
        for n in deps:
            b = _layer(n)
            if a != b and "lewisrag" not in (a, b) and b not in MAY_IMPORT.get(a, ()):
                wrong.append(f"{m} -> {n}")
    assert not wrong, "\n".join(wrong)


CODE_MODULES = [m for m in _modules() if not m.startswith("lewisrag.pretrained")]


@pytest.mark.parametrize("module", CODE_MODULES)
def test_every_module_imports(module):
    assert importlib.import_module(module).__name__ == module


@pytest.mark.parametrize("module", [m for m in CODE_MODULES if ">>> " in _path(m).read_text(encoding="utf-8")])
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, result


PUBLIC = {  # names outside code calls (docs/architecture.md); moving a module must keep these importable
    "lewisrag.rag_model": ["RagModel", "RagSettings"],
    "lewisrag.eval.qa": ["exact_match", "token_f1", "rouge_l"],
    "lewisrag.eval.citations": ["check_sentence", "Check"],
    "lewisrag.eval.judges": ["FunctionJudge", "LexicalJudge", "NLIJudge", "LLMJudge", "LabelJudge", "from_spec"],
    "lewisrag.eval.metrics": ["faithfulness", "citation_quality", "recall_at_k"],
    "lewisrag.eval.stats": ["proportion_interval", "mcnemar", "score_distribution"],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_public_names_stay_importable(module):
    mod = importlib.import_module(module)
    assert [n for n in PUBLIC[module] if not hasattr(mod, n)] == []
    parent, _, child = module.rpartition(".")
    assert getattr(importlib.import_module(parent), child) is mod  # `from parent import child` too
