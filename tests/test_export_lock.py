"""`lewisrag export` holds its --out folder (`outputs.exclusive`) from the check to the swap, as every other
writer of a folder does: two exports into one folder at once ended in a traceback (both moved the old
folder to one `.NAME.old`); the second is now refused in one line, exit 2, and the first's output is whole."""

from __future__ import annotations

import json

from conftest import run_main
from lewisrag.data.outputs import exclusive
from test_rag_train import rag_inputs, trained_rag  # noqa: F401  (session fixtures)


def test_a_second_export_into_a_held_folder_is_refused(trained_rag, rag_inputs, tmp_path, monkeypatch, capsys):  # noqa: F811
    out = tmp_path / "exports" / "export"
    args = ("export", "--model", trained_rag, "--index", rag_inputs["index"], "--out", out, "--json")
    with exclusive(out):  # another process's export (a flock conflicts between two opens in one process too)
        code, stdout, err = run_main(monkeypatch, capsys, *args)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code == 2 and "Traceback" not in err and len(lines) == 1, err
        assert lines[0].startswith("error: ") and str(out) in lines[0] and "--out" in lines[0], err
        assert "another lewisrag process is writing here" in lines[0] and stdout == ""
        assert list(out.iterdir()) == [] and sorted(p.name for p in out.parent.iterdir()) == ["export"]  # nothing staged
    code, stdout, err = run_main(monkeypatch, capsys, *args)  # the lock given back: it exports
    assert code == 0, err
    assert json.loads(stdout)["n_passages"] > 0 and (out / "lewisrag_export.json").is_file()
    assert sorted(p.name for p in out.parent.iterdir()) == ["export"]
    with exclusive(out):  # an export there already: refused the same, the earlier one left as it was
        before = sorted(p.name for p in out.iterdir())
        code, _, err = run_main(monkeypatch, capsys, *args, "--overwrite")
        assert code == 2 and "another lewisrag process is writing here" in err and err.count("\n") == 1, err
        assert sorted(p.name for p in out.iterdir()) == before


def test_a_refused_export_leaves_no_folder_behind(rag_inputs, tmp_path, monkeypatch, capsys):  # noqa: F811
    """The lock makes --out (and its parents) before anything is loaded; an export refused later takes them away."""
    out = tmp_path / "new" / "deeper" / "export"
    code, _, err = run_main(monkeypatch, capsys, "export", "--model", tmp_path / "no_model", "--index", rag_inputs["index"],
                            "--out", out)
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert not (tmp_path / "new").exists()
