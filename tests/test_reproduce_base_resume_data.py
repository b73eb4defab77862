"""`lewisrag reproduce --preset base --resume` and the content of its assets. config.json named the
assets by path only (`presets.comparable`), so a --train file edited at the same path between a kill and
a --resume went on in silence: RUN/data/train.jsonl kept the old answers, the RAG and closed-book stages
trained on them, and results.json's config.assets.train named the edited file. config.json now records
each asset's content (`base.FINGERPRINTS`) and a resume whose asset holds other content is refused in one
line naming the flag and the file, before any stage runs, as `train rag --resume` refuses its own
--train and --dev (`data_sha256`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import copy_run, one_thread, run_main, write_jsonl
from lewisrag.data.records import read_passages, read_qa
from lewisrag.experiments import base
from test_reproduce_base import _flags, assets, finished_base_run  # noqa: F401 (a fixture)


@pytest.fixture(scope="module")
def inputs(assets, tiny_corpus, tmp_path_factory) -> dict:  # noqa: F811 (the imported fixture)
    """The assets as a user keeps them in one folder: JSONL QA files and passages, and copies of the
    model folders, which the tests edit (and put back)."""
    root = tmp_path_factory.mktemp("resume_inputs")
    qa = [{"question": ex.question, "answers": list(ex.answers)} for ex in read_qa(tiny_corpus["qa"])]
    passages = [p.to_dict() for p in read_passages(tiny_corpus["passages"])]
    return {**assets, "train": write_jsonl(root / "T.jsonl", qa), "dev": write_jsonl(root / "D.jsonl", qa[:6]),
            "test": write_jsonl(root / "E.jsonl", qa[6:12]), "passages": write_jsonl(root / "P.jsonl", passages),
            "bart": shutil.copytree(assets["bart"], root / "bart"),
            "question": shutil.copytree(assets["question"], root / "question")}


@pytest.fixture(scope="module")
def finished(inputs, tmp_path_factory) -> Path:
    """A finished tiny base run over `inputs` (each test resumes a copy of it)."""
    return finished_base_run(inputs, tmp_path_factory.mktemp("resume_base") / "run")


def _state(run: Path) -> dict:
    """Every file in `run` with its bytes' digest and modification time."""
    return {str(p.relative_to(run)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(run.rglob("*")) if p.is_file()}


@contextlib.contextmanager
def _edited(path: Path, edit):
    """`path` rewritten by `edit` (text -> text) inside the block, then put back as it was."""
    before = path.read_bytes()
    path.write_text(edit(path.read_text(encoding="utf-8")), encoding="utf-8")
    try:
        yield
    finally:
        path.write_bytes(before)


def _other_answers(text: str) -> str:
    """The same questions (so the same counts and settings), every answer another."""
    rows = [json.loads(line) for line in text.splitlines()]
    return "".join(json.dumps({**r, "answers": ["Zed Quorin"]}) + "\n" for r in rows)


def _other_passage(text: str) -> str:
    rows = [json.loads(line) for line in text.splitlines()]
    rows[0]["text"] = rows[0]["text"].replace("Its leader is", "Its leader was")
    return "".join(json.dumps(r) + "\n" for r in rows)


def _extra_key(text: str) -> str:
    return json.dumps({**json.loads(text), "lewisrag_test_edit": 1})


def test_resume_refuses_a_train_file_edited_since_the_run(inputs, finished, tmp_path, monkeypatch, capsys):
    """The reviewer's case: exit 0, RUN/data/train.jsonl with the old answers, results.json naming the new file."""
    run = copy_run(finished, tmp_path / "run")
    before = _state(run)
    with _edited(inputs["train"], _other_answers):
        code, _, err = run_main(monkeypatch, capsys, *_flags(inputs, run), "--resume")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert f"--train {inputs['train']} (sha256 " in lines[0] and str(run / "config.json") in lines[0]
    assert f"field '{base.FINGERPRINTS}'" in lines[0] and "--out" in lines[0] and "--resume" in lines[0]
    assert "--dev" not in lines[0] and "--passages" not in lines[0]  # only what changed
    assert _state(run) == before  # refused before any stage ran: nothing redone, config.json as it was


@pytest.mark.parametrize("key, file, edit, flag", [
    ("dev", None, _other_answers, "--dev"),
    ("test", None, _other_answers, "--test"),
    ("passages", None, _other_passage, "--passages"),
    ("bart", "config.json", _extra_key, "--generator"),
    ("question", "config.json", _extra_key, "--question-encoder"),
])
def test_resume_refuses_every_asset_edited_since_the_run(inputs, finished, tmp_path, monkeypatch, capsys, key, file, edit,
                                                         flag):
    run = copy_run(finished, tmp_path / "run")
    before = _state(run)
    with _edited(inputs[key] / file if file else inputs[key], edit):
        code, _, err = run_main(monkeypatch, capsys, *_flags(inputs, run), "--resume")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert f"{flag} {inputs[key]} (sha256 " in lines[0] and "--train" not in lines[0], err
    assert _state(run) == before


def test_an_unchanged_resume_goes_on_and_records_the_content(inputs, finished, tmp_path, monkeypatch, capsys):
    """The same content resumes, a file only touched (small files are read whole) too; results.json holds
    the content digests, the same on every run of the same data, and no file's size or time."""
    run = copy_run(finished, tmp_path / "run")
    stat = inputs["train"].stat()
    os.utime(inputs["train"], ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    code, _, err = run_main(monkeypatch, capsys, *_flags(inputs, run), "--resume")
    assert code == 0, err
    assert "rag_token: done before, skipped" in err and "closed_book: done before, skipped" in err  # progress: stderr
    recorded = json.loads((run / "config.json").read_text())[base.FINGERPRINTS]
    assert set(recorded) == {"question_encoder", "context_encoder", "generator", "train", "dev", "test", "passages"}
    train = hashlib.sha256(inputs["train"].read_bytes()).hexdigest()
    assert recorded["train"] == {"sha256": train}  # a file's own sha256, as sha256sum gives it
    config = json.loads((run / "results.json").read_text())["config"]
    assert config[base.CONTENT] == {k: v["sha256"] for k, v in recorded.items()} and config[base.CONTENT]["train"] == train
    assert base.FINGERPRINTS not in config
    assert (run / "results.json").read_bytes() == (finished / "results.json").read_bytes()


def test_a_run_recorded_before_the_content_was_resumes_unchecked(inputs, finished, tmp_path, monkeypatch, capsys):
    """A config.json without the record cannot be checked: it resumes as before, and is not given a
    record its finished stages may not have read."""
    run = copy_run(finished, tmp_path / "run")
    file = run / "config.json"
    file.write_text(json.dumps({k: v for k, v in json.loads(file.read_text()).items() if k != base.FINGERPRINTS}))
    with _edited(inputs["train"], _other_answers):
        code, _, err = run_main(monkeypatch, capsys, *_flags(inputs, run), "--resume")
    assert code == 0, err
    assert base.FINGERPRINTS not in json.loads(file.read_text())
    assert base.CONTENT not in json.loads((run / "results.json").read_text())["config"]


def test_a_damaged_record_is_named(inputs, finished, tmp_path, monkeypatch, capsys):
    run = copy_run(finished, tmp_path / "run")
    file = run / "config.json"
    config = json.loads(file.read_text())
    file.write_text(json.dumps({**config, base.FINGERPRINTS: {**config[base.FINGERPRINTS], "train": {"sha256": "x"}}}))
    code, _, err = run_main(monkeypatch, capsys, *_flags(inputs, run), "--resume")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"field '{base.FINGERPRINTS}.train'" in err and "damaged" in err and str(file) in err


def test_a_plain_rerun_records_the_new_content(inputs, finished, tmp_path, monkeypatch, capsys):
    """Dropping --resume, as the refusal says, runs the stages again on the edited file (and records it)."""
    run = copy_run(finished, tmp_path / "run")
    with _edited(inputs["train"], _other_answers):
        with one_thread():
            code, _, err = run_main(monkeypatch, capsys, *_flags(inputs, run))
        assert code == 0, err
        assert {"Zed Quorin"} == {a for ex in read_qa(run / "data" / "train.jsonl") for a in ex.answers}
        recorded = json.loads((run / "config.json").read_text())[base.FINGERPRINTS]["train"]
        assert recorded == {"sha256": hashlib.sha256(inputs["train"].read_bytes()).hexdigest()}


def test_large_passages_are_fingerprinted_by_names_sizes_and_times(tmp_path, monkeypatch):
    """Passages over WHOLE_BYTES (wiki_dpr's 21 M rows) are not read: their files' names, sizes and
    modification times stand for them, in config.json only (not results.json: they differ between copies)."""
    monkeypatch.setattr(base, "WHOLE_BYTES", 100)
    monkeypatch.setattr(base, "SMALL_BYTES", 10)
    shards = tmp_path / "shards"
    shards.mkdir()
    for k in range(2):
        (shards / f"train-{k:05d}-of-00002.parquet").write_bytes(bytes(80))
    (shards / "README.md").write_text("not data")
    (shards / ".cache").mkdir()
    (shards / ".cache" / "x.parquet").write_bytes(b"cache")
    one = tmp_path / "psgs_w100.tsv"
    one.write_bytes(bytes(200))
    qa = tmp_path / "q.jsonl"
    qa.write_bytes(bytes(200))  # QA files are read whole at any size
    given = base.BaseAssets(passages=str(shards), passages_b=str(one), train=str(qa), dev="hf:nq_open:validation")
    first = base.asset_fingerprints(given)
    assert set(first["passages"]) == {"files"} and set(first["passages_b"]) == {"files"}
    assert first["train"] == {"sha256": hashlib.sha256(bytes(200)).hexdigest()} and first["dev"] is None
    (shards / "README.md").write_text("edited")
    (shards / ".cache" / "x.parquet").write_bytes(b"other")
    assert base.asset_fingerprints(given) == first  # not what is read
    shard = shards / "train-00001-of-00002.parquet"
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 10**9))
    one.write_bytes(bytes(201))
    now = base.asset_fingerprints(given)
    assert now["passages"] != first["passages"] and now["passages_b"] != first["passages_b"] and now["train"] == first["train"]
