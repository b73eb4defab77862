"""lewisrag's metrics as `evaluate` modules, for pipelines that already speak evaluate.

Each module is a directory holding `<name>.py`. Pass `path(name)` to evaluate's `load` function
(offline: nothing is fetched from the Hub), then combine the loaded modules with `evaluate.combine`
and call `compute(predictions=..., references=..., contexts=...)`:

- `lewisrag_qa`: exact_match, f1, rougeL of predictions against lists of references;
- `lewisrag_faithfulness`: faithfulness and ALCE citation recall/precision of predictions against
  their retrieved contexts (plus context recall and completeness given reference_statements).

The modules call the same functions as `lewisrag eval answers`, so the numbers agree.
"""

from __future__ import annotations

from pathlib import Path

NAMES = ("lewisrag_qa", "lewisrag_faithfulness")


def path(name: str) -> str:
    """The directory of the evaluate module `name` inside the installed package.

    >>> Path(path("lewisrag_qa")).name
    'lewisrag_qa'
    """
    if name not in NAMES:
        raise ValueError(f"unknown metric module {name!r}; have {', '.join(NAMES)}")
    return str(Path(__file__).resolve().parent / name)
