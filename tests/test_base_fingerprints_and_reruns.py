"""`reproduce --preset base`: what its resume fingerprints, what `--hub-dir` checks, what a fresh rerun keeps.

- A passages folder was fingerprinted by every .parquet/.arrow/.json/.jsonl/.tsv file below it, where loading
  reads only the top-level shards or the files a save_to_disk folder's state.json lists: the cache-*.arrow
  `datasets` writes into a saved dataset's folder, or a run whose --out lies inside the folder, made
  --resume refuse an unchanged corpus as other content. A run recorded by that rule is still checked by it.
- `--hub-dir` alone reported a wiki_dpr folder missing one numbered shard, and a model folder without its
  tokenizer's vocabulary, as on this machine; a run then refused both.
- A fresh rerun without --passages-b kept the earlier run's RUN/index_b and data/questions_*.jsonl, and its
  marker listed them as its own.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import copy_run, one_thread, run_main
from lewisrag.data.outputs.markers import MARKER
from lewisrag.experiments import base
from lewisrag.experiments.presets import get_preset
from test_reproduce_base import _flags, assets, finished_base_run  # noqa: F401 (a fixture)

SWAP_SETS = ("data/questions_a.jsonl", "data/questions_b.jsonl")


@pytest.fixture(scope="module")
def inputs(assets, tmp_path_factory) -> dict:  # noqa: F811 (the imported fixture)
    """The assets with a copy of snapshot A's save_to_disk folder, which the tests add files to (and take away)."""
    root = tmp_path_factory.mktemp("fingerprint_inputs")
    return {**assets, "passages": shutil.copytree(assets["passages"], root / "psgs_a")}


@pytest.fixture(scope="module")
def inside(inputs) -> Path:
    """A finished tiny base run whose --out lies inside its --passages folder."""
    return finished_base_run(inputs, inputs["passages"] / "runs" / "run")


@contextlib.contextmanager
def _added(path: Path, content: bytes = b"cache"):
    """`path` written inside the block (a file no stage reads), then removed."""
    path.write_bytes(content)
    try:
        yield path
    finally:
        path.unlink()


def test_a_passages_folder_is_fingerprinted_by_what_loading_reads(tmp_path):
    import datasets

    saved = tmp_path / "saved"
    datasets.Dataset.from_dict({"id": ["1", "2"], "text": ["a b", "c d"], "title": ["A", "C"]}).save_to_disk(str(saved))
    shards = tmp_path / "shards"
    shards.mkdir()
    for k in range(2):
        shard = shards / f"train-{k:05d}-of-00002.parquet"
        pq.write_table(pa.table({"id": [str(k)], "text": ["t"], "title": ["T"]}), shard)
    given = base.BaseAssets(passages=str(saved), passages_b=str(shards))
    first = base.asset_fingerprints(given)
    (saved / "cache-0123456789abcdef.arrow").write_bytes(b"datasets' cache of a map()")  # no stage reads these
    (saved / "notes.json").write_text("{}")
    for folder in (saved, shards):
        (folder / "runs" / "run" / "data").mkdir(parents=True)
        (folder / "runs" / "run" / "data" / "train.jsonl").write_text("{}\n")
        (folder / "runs" / "run" / "index.parquet").write_bytes(b"a run's own")
    assert base.asset_fingerprints(given) == first
    info = json.loads((saved / "dataset_info.json").read_text())
    (saved / "dataset_info.json").write_text(json.dumps({**info, "description": "edited"}))
    pq.write_table(pa.table({"id": ["1"], "text": ["other"], "title": ["T"]}), shards / "train-00001-of-00002.parquet")
    now = base.asset_fingerprints(given)
    assert now["passages"] != first["passages"] and now["passages_b"] != first["passages_b"]


def test_a_resume_is_not_refused_for_files_no_stage_reads(inputs, inside, monkeypatch, capsys):
    """The reviewer's two cases at once: a cache-*.arrow beside the saved dataset's files, and a run (a
    copy of `inside`, resumed) inside the passages folder. Every stage is skipped, exit 0."""
    run = copy_run(inside, inputs["passages"] / "runs" / "resumed")
    try:
        with _added(inputs["passages"] / "cache-0123456789abcdef.arrow"):
            code, _, err = run_main(monkeypatch, capsys, *_flags(inputs, run), "--resume")
        assert code == 0, err
        assert "index_a: done before, skipped" in err and "closed_book: done before, skipped" in err
        config = json.loads((run / "config.json").read_text())
        assert config[base.RULE_KEY] == base.RULE
    finally:
        shutil.rmtree(run)


def _as_recorded_by_rule_1(run: Path, inputs: dict) -> None:
    """`run`'s config.json as a lewisrag before RULE_KEY wrote it: no rule, the passages by rule 1, as they are now."""
    file = run / "config.json"
    config = json.loads(file.read_text())
    given = base.BaseAssets(passages=str(inputs["passages"]))
    old = base.asset_fingerprints(given, base.PASSAGES, rule=1)["passages"]
    config[base.FINGERPRINTS]["passages"] = old
    file.write_text(json.dumps({k: v for k, v in config.items() if k != base.RULE_KEY}))


def test_a_run_recorded_by_the_earlier_rule_resumes_by_it(inputs, inside, tmp_path, monkeypatch, capsys):
    """A run recorded with a cache file in the folder, unchanged since: its rule-1 record is checked by
    rule 1 (by rule 2 the cache file's absence would be other content), then recorded by rule 2."""
    run = copy_run(inside, tmp_path / "run")
    with _added(inputs["passages"] / "cache-0123456789abcdef.arrow"):
        _as_recorded_by_rule_1(run, inputs)
        code, _, err = run_main(monkeypatch, capsys, *_flags(inputs, run), "--resume")
        assert code == 0, err
        assert "rag_token: done before, skipped" in err
    config = json.loads((run / "config.json").read_text())
    assert config[base.RULE_KEY] == base.RULE
    assert config[base.FINGERPRINTS] == json.loads((inside / "config.json").read_text())[base.FINGERPRINTS]


def test_a_file_added_since_to_a_rule_1_run_is_named_with_the_rule(inputs, inside, tmp_path, monkeypatch, capsys):
    """Rule 1 cannot tell a file no stage reads from data: such a run whose folder got one is refused, and
    told so, with the remedy (the file moved away, it resumes)."""
    run = copy_run(inside, tmp_path / "run")
    _as_recorded_by_rule_1(run, inputs)
    before = (run / "config.json").read_bytes()
    with _added(inputs["passages"] / "cache-0123456789abcdef.arrow"):
        code, _, err = run_main(monkeypatch, capsys, *_flags(inputs, run), "--resume")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert f"--passages {inputs['passages']} (sha256 " in lines[0]
    assert "by the rule of the lewisrag that began the run" in lines[0]
    assert "cache-*.arrow" in lines[0] and "moved away, the run resumes" in lines[0]
    assert (run / "config.json").read_bytes() == before
    code, _, err = run_main(monkeypatch, capsys, *_flags(inputs, run), "--resume")  # moved away: it resumes
    assert code == 0, err


def test_a_damaged_rule_is_named(inputs, inside, tmp_path, monkeypatch, capsys):
    run = copy_run(inside, tmp_path / "run")
    file = run / "config.json"
    file.write_text(json.dumps({**json.loads(file.read_text()), base.RULE_KEY: "2"}))
    code, _, err = run_main(monkeypatch, capsys, *_flags(inputs, run), "--resume")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"field '{base.RULE_KEY}'" in err and "damaged" in err and str(file) in err


# --- reproduce --preset base --hub-dir DIR: the check alone ---------------------------------------------------


@pytest.fixture
def hub(assets, tmp_path, monkeypatch) -> Path:  # noqa: F811 (the imported fixture)
    """DIR/<repo> for each of the base recipe's assets, in the hub's layouts: the DPR pair and BART with their
    tokenizers, nq_open's splits side by side, wiki_dpr's numbered shards."""
    monkeypatch.delenv("LEWISRAG_HUB_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "hub"
    models = {"facebook/dpr-question_encoder-single-nq-base": assets["question"],
              "facebook/dpr-ctx_encoder-single-nq-base": assets["context"], "facebook/bart-large": assets["bart"]}
    for repo, folder in models.items():
        shutil.copytree(folder, root / repo)
    for split in ("train", "validation"):
        (root / "nq_open" / "nq_open").mkdir(parents=True, exist_ok=True)
        shutil.copy(assets["train"], root / "nq_open" / "nq_open" / f"{split}-00000-of-00001.parquet")
    shutil.copytree(assets["shards"], root / "facebook" / "wiki_dpr" / "data" / "psgs_w100" / "nq")
    return root


def _check(monkeypatch, capsys, tmp_path, hub):
    return run_main(monkeypatch, capsys, "reproduce", "--preset", "base", "--out", tmp_path / "x", "--hub-dir", hub,
                    "--json")


def test_the_hub_check_passes_sound_assets(hub, tmp_path, monkeypatch, capsys):
    code, out, err = _check(monkeypatch, capsys, tmp_path, hub)
    assert code == 0, err
    assert set(json.loads(out)["validated"]) == set(get_preset("base").hub)


def test_the_hub_check_refuses_a_shard_set_missing_one(hub, tmp_path, monkeypatch, capsys):
    folder = hub / "facebook" / "wiki_dpr" / "data" / "psgs_w100" / "nq"
    (folder / "train-00000-of-00002.parquet").unlink()
    code, out, err = _check(monkeypatch, capsys, tmp_path, hub)
    assert code == 2 and out == "" and err.strip().splitlines() == [
        f"error: {folder / 'train-00000-of-00002.parquet'}: dataset facebook/wiki_dpr: missing: the folder holds 1 of "
        "the 2 shards its files are numbered for (an unfinished download?)"], err


@pytest.mark.parametrize("repo, removed, named", [
    ("facebook/dpr-ctx_encoder-single-nq-base", ("vocab.txt",), "tokenizer.json"),
    ("facebook/dpr-question_encoder-single-nq-base", ("vocab.txt", "tokenizer.json"), "tokenizer.json"),
    ("facebook/bart-large", ("merges.txt",), "merges.txt"),
])
def test_the_hub_check_refuses_a_model_without_its_vocabulary(hub, tmp_path, monkeypatch, capsys, repo, removed, named):
    for name in removed:
        (hub / repo / name).unlink()
    code, out, err = _check(monkeypatch, capsys, tmp_path, hub)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith(f"error: {hub / repo / named}: model {repo} tokenizer: file not found"), err


# --- a fresh rerun without --passages-b -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def swapped(assets, tmp_path_factory) -> Path:  # noqa: F811 (the imported fixture)
    """A finished tiny base run with --passages-b, --questions-a and --questions-b (index B, the question sets)."""
    from _pytest.monkeypatch import MonkeyPatch

    from lewisrag.cli import main

    out = tmp_path_factory.mktemp("swapped") / "run"
    flags = _flags(assets, out, "--passages-b", assets["passages_b"], "--questions-a", assets["questions_a"],
                   "--questions-b", assets["questions_b"])
    with MonkeyPatch.context() as mp, one_thread():
        mp.setattr("sys.argv", ["lewisrag", *map(str, flags)])
        with pytest.raises(SystemExit) as exit_info:
            main()
    assert not exit_info.value.code
    assert (out / "index_b").is_dir() and all((out / rel).is_file() for rel in SWAP_SETS)
    return out


def _marker(run: Path) -> dict:
    return json.loads((run / MARKER).read_text())


def test_a_fresh_rerun_without_passages_b_keeps_nothing_of_the_swap(assets, swapped, tmp_path, monkeypatch,  # noqa: F811
                                                                     capsys):
    run = copy_run(swapped, tmp_path / "run")
    with one_thread():
        code, _, err = run_main(monkeypatch, capsys, *_flags(assets, run))
    assert code == 0, err
    assert not (run / "index_b").exists() and not any((run / rel).exists() for rel in SWAP_SETS)
    assert not (run / "knowledge_update.json").exists() and not (run / "stages" / "index_b.json").exists()
    marker = _marker(run)
    assert not set(SWAP_SETS) & set(marker["tree"]) and "index_b" not in marker["files"]
    assert sorted(p.name for p in (run / "data").iterdir()) == ["dev.jsonl", "test.jsonl", "train.jsonl"]
    assert json.loads((run / "results.json").read_text())["skipped"]["index_b"] == "no --passages-b"


def _state(run: Path) -> dict:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def test_a_users_file_among_the_former_swap_parts_is_refused_first(assets, swapped, tmp_path, monkeypatch,  # noqa: F811
                                                                    capsys):
    """A file the user added to the earlier run's index B, or a question set its marker does not list, is
    refused by name before anything is removed (stage records, results, index B)."""
    run = copy_run(swapped, tmp_path / "run")
    (run / "index_b" / "notes.txt").write_text("mine")
    before = _state(run)
    code, _, err = run_main(monkeypatch, capsys, *_flags(assets, run))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"error: {run / 'index_b' / 'notes.txt'}: was not written by lewisrag, and a run begun "
                               "afresh without --passages-b replaces"), err
    assert _state(run) == before
    (run / "index_b" / "notes.txt").unlink()
    marker = _marker(run)
    (run / MARKER).write_text(json.dumps({**marker, "tree": [t for t in marker["tree"] if t != SWAP_SETS[1]]}))
    before = _state(run)
    code, _, err = run_main(monkeypatch, capsys, *_flags(assets, run))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"error: {run / SWAP_SETS[1]}: was not written by lewisrag, and a run begun afresh removes" in err
    assert _state(run) == before
