"""`lewisrag reproduce --preset base`'s input checks, once and in one line:

- `prepare` (every QA file read, every stored vector scanned: minutes at 21M passages) ran twice per
  invocation, in the CLI and again in `reproduce`, on every --resume too: the CLI now hands on what it
  read, and `reproduce` called from Python without it prepares itself;
- a QA file in a format not told apart was advised `--qa-fields`, which reproduce does not have ("No
  such option"): its error names the fields to write instead;
- a refused --resume printed the test-overlap warning before its error: the refusal is one line.
"""

from __future__ import annotations

import pytest

from conftest import one_thread, run_cli, run_main, write_jsonl
from lewisrag.data.io import InputError
from lewisrag.data.qa_formats import MAP_FIELDS
from lewisrag.data.records import read_qa
from lewisrag.experiments import base, reproduce
from lewisrag.experiments.base import BaseAssets
from lewisrag.experiments.presets import get_preset
from test_reproduce_base import _flags, assets  # noqa: F401  (assets: the module fixture of hub-layout folders and files)


@pytest.fixture
def prepared(monkeypatch) -> list:
    """Each call of `base.prepare`, under both the names the CLI and `reproduce` call it by."""
    calls, real = [], base.prepare

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(base, "prepare", counting)
    monkeypatch.setattr(reproduce, "prepare", counting)
    return calls


def test_a_base_run_prepares_its_inputs_once_and_a_refused_resume_is_one_line(assets, prepared, tmp_path, monkeypatch,  # noqa: F811
                                                                             capsys):
    out = tmp_path / "run"
    with one_thread():
        code, _, err = run_main(monkeypatch, capsys, *_flags(assets, out))
    assert code == 0, err
    assert len(prepared) == 1
    # --test is --train's first 6 questions: the run warns of it, but a refused resume says only why it is refused
    r = run_cli(*map(str, _flags(assets, out, "--resume", "--seed", 1)))
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and "was written by another preset, seed or assets" in r.stderr
    assert "--test questions are also" not in r.stderr
    prepared.clear()
    code, _, err = run_main(monkeypatch, capsys, *_flags(assets, out, "--resume", "--seed", 1))
    assert code == 2 and len(prepared) == 1, err


def test_reproduce_called_without_what_was_read_prepares_itself(assets, prepared, tmp_path):  # noqa: F811
    given = BaseAssets(question_encoder=str(assets["question"]), context_encoder=str(assets["context"]),
                       generator=str(assets["bart"]), train=str(assets["train"]), dev=str(assets["dev"]),
                       test=str(tmp_path / "missing.parquet"), passages=str(assets["passages"]))
    with pytest.raises(InputError, match="--test: not found"):
        reproduce.reproduce(get_preset("base"), tmp_path / "run", assets=given)
    assert len(prepared) == 1 and not (tmp_path / "run").exists()


def test_an_unknown_qa_format_is_not_advised_a_flag_reproduce_lacks(assets, tmp_path, monkeypatch, capsys):  # noqa: F811
    rows = [{"query": ex.question, "golds": list(ex.answers)} for ex in read_qa(assets["train"])]
    other = write_jsonl(tmp_path / "train.jsonl", rows)
    out = tmp_path / "run"
    code, _, err = run_main(monkeypatch, capsys, *_flags({**assets, "train": other}, out))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"error: {other}:1: cannot tell the QA format from the fields ['golds', 'query']"), err
    assert "--qa-fields question=" not in err and "write the file with lewisrag's 'question' and 'answers'" in err
    assert not out.exists()
    # the commands with --qa-fields (train rag, swap, index cut, ...) still advise it
    with pytest.raises(InputError) as e:
        read_qa(other)
    assert e.value.message.endswith(MAP_FIELDS)
