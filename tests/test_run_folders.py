"""`lewisrag reproduce` run folders: a resume keeps the run's CPU linear library (--cpu-linear), a moved
run folder resumes its killed RAG stage, and --overwrite never replaces a part of another lewisrag output."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import run_main
from lewisrag.data.io import InputError
from lewisrag.data.outputs import mark
from lewisrag.experiments.presets import PRESETS
from lewisrag.experiments.reproduce import reproduce


class Killed(Exception):
    """A stand-in for a kill: raised by a stage the test replaces."""


def _killed(*a, **kw):
    raise Killed


def test_a_resume_with_another_cpu_linear_library_is_refused_naming_the_flag(tmp_path, monkeypatch, capsys):
    """results.json's environment names one library for the whole run: a resume with another, whose
    stages' digits would differ in the last bits, was taken without a word (a change of --threads is
    refused the same way)."""
    import lewisrag.experiments.reproduce as R

    run = tmp_path / "run"
    monkeypatch.setattr(R, "train_world_dpr", _killed)  # killed after the world stage
    with pytest.raises(Killed):
        reproduce(PRESETS["tiny"], run, cpu_linear="onednn")
    config = json.loads((run / "config.json").read_text())
    assert config["cpu_linear"] == "onednn"
    before = (run / "config.json").read_bytes()
    with pytest.raises(InputError, match=r"--cpu-linear blas \(the run's: onednn\); resume with --cpu-linear onednn"):
        reproduce(PRESETS["tiny"], run, resume=True, cpu_linear="blas")
    assert (run / "config.json").read_bytes() == before and sorted(p.name for p in (run / "stages").iterdir()) == ["world.json"]
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run, "--resume",
                            "--cpu-linear", "blas")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--cpu-linear blas (the run's: onednn)" in err
    assert str(run / "config.json") in err and "Traceback" not in err
    with pytest.raises(Killed):  # the run's own library goes on: world skipped, dpr reached
        reproduce(PRESETS["tiny"], run, resume=True, cpu_linear="onednn")
    # a run whose config.json predates the record (an older lewisrag) resumes unchecked, and stays unrecorded
    (run / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "cpu_linear"}))
    with pytest.raises(Killed):
        reproduce(PRESETS["tiny"], run, resume=True, cpu_linear="blas")
    assert "cpu_linear" not in json.loads((run / "config.json").read_text())


@pytest.fixture(scope="module")
def qa_run(tmp_path_factory):
    """A finished tiny reproduction (QA only: about 10 s)."""
    out = tmp_path_factory.mktemp("qa") / "run"
    reproduce(PRESETS["tiny"], out, seed=0)
    return out


def test_a_moved_run_resumes_its_killed_rag_stage(qa_run, tmp_path):
    """`mv RUN RUN2; reproduce --out RUN2 --resume` with the RAG-Token stage killed after its last
    checkpoint: train_rag compared RUN/index_a, RUN/dpr, ... with RUN2's and refused every path,
    though each names the same file of the moved run."""
    old = tmp_path / "run"
    shutil.copytree(qa_run, old, symlinks=True)
    # the copy's RAG run recorded the fixture's paths: as if it had been made here
    for file in (old / "rag_token" / "config.json", old / "rag_token" / "checkpoint" / "state.json"):
        file.write_text(file.read_text().replace(str(qa_run), str(old)))
    (old / "stages" / "rag_token.json").unlink()  # killed before its record
    run = tmp_path / "run2"
    old.rename(run)
    events = []
    reproduce(PRESETS["tiny"], run, seed=0, resume=True, on_stage=lambda name, event, _: events.append((name, event)))
    assert [n for n, e in events if e == "done"] == ["rag_token", "report"]
    assert (run / "results.json").read_bytes() == (qa_run / "results.json").read_bytes()
    assert json.loads((run / "rag_token" / "config.json").read_text())["run_root"] == str(run)


def test_a_moved_run_still_refuses_another_file(qa_run, tmp_path):
    """Inside the run folder a path compares by its place there; another file of the run, or a path
    outside it that changed, is refused as before, and so is a moved run without a recorded root."""
    from lewisrag.training import rag_run
    from lewisrag.training.rag import RagTrainConfig

    run = tmp_path / "run2"
    shutil.copytree(qa_run, run, symlinks=True)
    out = run / "rag_token"
    saved = json.loads((out / "checkpoint" / "state.json").read_text())
    assert saved["run_root"] == str(qa_run)
    cfg = RagTrainConfig(**saved["config"])
    moved = replace(cfg, **{k: getattr(cfg, k).replace(str(qa_run), str(run))
                            for k in ("index", "encoder", "generator", "train", "dev")})
    assert rag_run._check_out(out, moved, resume=True, root=str(run)) is not None
    with pytest.raises(InputError, match=r"--index \S+/run2/index_b \(the run's: \S+/index_a\)"):
        rag_run._check_out(out, replace(moved, index=str(run / "index_b")), resume=True, root=str(run))
    elsewhere = tmp_path / "train.jsonl"
    shutil.copy(run / "world" / "train.jsonl", elsewhere)
    with pytest.raises(InputError, match="--train "):
        rag_run._check_out(out, replace(moved, train=str(elsewhere)), resume=True, root=str(run))
    with pytest.raises(InputError, match="--index "):  # no root now: compared by the file, as `train rag` does
        rag_run._check_out(out, moved, resume=True)


def test_overwrite_never_replaces_a_part_of_another_lewisrag_output(tmp_path, monkeypatch, capsys):
    """`reproduce --out RUN/world --overwrite` replaced a reproduction's world with a whole run (the rule
    that --overwrite replaces another kind of output is for outputs that stand alone)."""
    import lewisrag.experiments.reproduce as R

    monkeypatch.setattr(R, "_world", _killed)  # the old code went on to run the stages
    run = tmp_path / "RUN"
    mark(run, R.KIND)
    mark(run / "world", "world")
    (run / "world" / "passages_a.jsonl").write_text("the run's world\n")
    with pytest.raises(InputError, match=r"is part of the lewisrag reproduction at \S+/RUN .* --overwrite never") as e:
        reproduce(PRESETS["tiny"], run / "world", overwrite=True)
    assert e.value.field == "--out" and e.value.source == str(run / "world")
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run / "world", "--overwrite")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "'--out'" in err and str(run / "world") in err
    # the same for another command, and for a folder deeper inside, of another kind's output
    mark(run / "tasks" / "index_a", "index")
    (run / "tasks" / "index_a" / "manifest.json").write_text("{}")
    code, _, err = run_main(monkeypatch, capsys, "world", "--out", run / "tasks" / "index_a", "--entities", 40,
                            "--overwrite")
    assert code == 2 and "is part of the lewisrag reproduction" in err
    assert (run / "world" / "passages_a.jsonl").read_text() == "the run's world\n"
    assert (run / "tasks" / "index_a" / "manifest.json").exists()
    assert sorted(p.name for p in run.iterdir()) == [".lewisrag", "tasks", "world"]  # no staging folder either


def test_overwrite_never_replaces_a_file_of_another_lewisrag_output(tmp_path, monkeypatch, capsys):
    """A file --out is refused as a folder --out is: `swap --out RUN/index_b/manifest.json --overwrite`
    replaced that index's manifest with a swap matrix (exit 0, the index destroyed). A file the marker
    lists is the output's; a new file may be written there, and one it does not list (the user's own
    `chunk --out RUN/chunks.jsonl`, written before) replaced, as a file of no marked folder is."""
    from lewisrag.data.outputs import check_out_file, record_files

    run = tmp_path / "RUN"
    mark(run, "reproduction")  # a reproduction's marker lists no files: its stages' folders are outputs
    mark(run / "index_b", "index")
    manifest = run / "index_b" / "manifest.json"
    manifest.write_text("{}")
    listed = manifest.with_suffix(".jsonl")
    listed.write_text("the index's\n")
    record_files(run / "index_b", ["manifest.json", "manifest.jsonl"])
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"id": "d1", "title": "T", "text": "one two three"}) + "\n")
    code, _, err = run_main(monkeypatch, capsys, "chunk", "--docs", docs, "--out", listed, "--overwrite")
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "is part of the lewisrag index at" in err and "'--out'" in err and str(listed) in err
    assert listed.read_text() == "the index's\n"  # chunk writes .jsonl files only: swap's check below
    with pytest.raises(InputError, match="is part of the lewisrag index at") as e:  # swap's and `index questions`' check
        check_out_file(manifest, overwrite=True)
    assert e.value.field == "--out" and manifest.read_text() == "{}"
    assert run_main(monkeypatch, capsys, "chunk", "--docs", docs, "--out", run / "new.jsonl")[0] == 0
    assert run_main(monkeypatch, capsys, "chunk", "--docs", docs, "--out", run / "new.jsonl", "--overwrite")[0] == 0
    alone = tmp_path / "alone.jsonl"
    alone.write_text("old\n")
    assert run_main(monkeypatch, capsys, "chunk", "--docs", docs, "--out", alone, "--overwrite")[0] == 0
    assert alone.read_text() != "old\n"
    # a marker that lists what its output wrote: only those files are its own; an earlier swap's file
    # (written beside them, not by the output) is replaced with --overwrite as any file is
    from lewisrag.data.outputs import record_files
    listed = tmp_path / "IDX"
    mark(listed, "index")
    (listed / "manifest.json").write_text("{}")
    record_files(listed, ["manifest.json"])
    (listed / "swap.json").write_text("an earlier swap's")
    with pytest.raises(InputError, match="is part of the lewisrag index at"):
        check_out_file(listed / "manifest.json", overwrite=True)
    assert check_out_file(listed / "swap.json", overwrite=True) == listed / "swap.json"


def test_no_file_output_writes_a_marker(tmp_path):
    """`swap --out RUN/.lewisrag --overwrite` replaced a reproduction's marker with a swap matrix: the run
    could no longer resume, and its world was no longer protected from `world --out RUN/world --overwrite`.
    A marker is never a file output's, in a marked folder or not."""
    from lewisrag.data.outputs import MARKER, check_out_file, made_by

    run = tmp_path / "RUN"
    mark(run, "reproduction")
    for out in (run / MARKER, tmp_path / "plain" / MARKER):
        with pytest.raises(InputError, match="the name of the marker lewisrag keeps") as e:
            check_out_file(out, overwrite=True)
        assert e.value.field == "--out"
    assert made_by(run) == "reproduction" and not (tmp_path / "plain").exists()


def test_a_run_begun_before_a_preset_field_existed_resumes_while_one_away_from_its_default_does_not(tmp_path):
    """DPRTrainConfig.hard_negatives_from came with a default that trains as before: a config.json
    written without it was refused as "another lewisrag version's preset began the run"."""
    from dataclasses import asdict

    from lewisrag.experiments.reproduce import check_resumed_config

    config = json.loads(json.dumps({"preset": asdict(PRESETS["tiny"]), "seed": 0, "threads": 1}))
    old = json.loads(json.dumps(config))
    del old["preset"]["dpr"]["hard_negatives_from"]
    (tmp_path / "config.json").write_text(json.dumps(old), encoding="utf-8")
    check_resumed_config(tmp_path, config, True, "preset")
    old["preset"]["dpr"]["hard_negatives_from"] = "bm25"  # a value away from the default is a difference
    (tmp_path / "config.json").write_text(json.dumps(old), encoding="utf-8")
    with pytest.raises(InputError, match=r"the preset's dpr \(another lewisrag version's preset began the run\)"):
        check_resumed_config(tmp_path, config, True, "preset")
    old["preset"]["dpr"]["hard_negatives_from"] = "auto"
    old["preset"]["dpr"]["steps"] += 1  # and so is any other field
    (tmp_path / "config.json").write_text(json.dumps(old), encoding="utf-8")
    with pytest.raises(InputError, match=r"the preset's dpr"):
        check_resumed_config(tmp_path, config, True, "preset")
