"""The training commands, a second audit: a --resume whose --train or --dev file changed at the same
path (refused, naming the flag and the file, with or without a checkpoint; a run recorded before the
data's sha256 resumes), a --max-combined-length that holds nothing but the generator's special
tokens, flags `train dpr --steps 0` and `train stitched --n-docs 1` ignored in silence, and a
checkpoint's re-encoded index vectors of the wrong shape."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import one_thread, run_main
from lewisrag.data.io import InputError
from test_faults import assert_one_line_error
from test_rag_train import make_config, rag_inputs  # noqa: F401  (session fixture)


class Interrupted(Exception):
    pass


def _killed_at(cfg, out: Path, step: int) -> None:
    """`cfg`'s run in `out`, stopped as a kill would after `step` steps (its later checkpoints unsaved)."""
    from lewisrag.training.rag import train_rag

    def stop(done: int, total: int, record: dict) -> None:
        if done == step:
            raise Interrupted

    with one_thread(), pytest.raises(Interrupted):
        train_rag(cfg, out, on_progress=stop)


def _own_copies(rag_inputs, folder: Path) -> dict:  # noqa: F811
    """The world's train and dev files copied into `folder`, for a test to edit."""
    folder.mkdir()
    return {name: str(shutil.copyfile(rag_inputs["world"] / f"{name}.jsonl", folder / f"{name}.jsonl"))
            for name in ("train", "dev")}


def _drop_last_line(path: str) -> None:
    lines = Path(path).read_text().splitlines(keepends=True)
    Path(path).write_text("".join(lines[:-1]))


# --- 1. the data's content, not only its path -------------------------------------------------------


def test_a_resume_whose_train_file_changed_at_the_same_path_is_refused(rag_inputs, tmp_path):  # noqa: F811
    """The run's settings name --train by its path: the file edited between the kill and the resume
    trained on other data without a word."""
    from lewisrag.training.rag import train_rag

    data = _own_copies(rag_inputs, tmp_path / "data")
    cfg = make_config(rag_inputs, **data, steps=3, eval_every=0, save_every=1)
    run = tmp_path / "run"
    _killed_at(cfg, run, 2)
    recorded = json.loads((run / "checkpoint" / "state.json").read_text())["data_sha256"]
    assert recorded == {name: hashlib.sha256(Path(data[name]).read_bytes()).hexdigest() for name in ("train", "dev")}
    assert json.loads((run / "config.json").read_text())["data_sha256"] == recorded
    original = Path(data["train"]).read_bytes()
    _drop_last_line(data["train"])
    state = run / "checkpoint" / "state.json"
    with pytest.raises(InputError, match=re.escape(f"{state}: field 'data_sha256': --resume with other data than "
                                                   f"the run's, the same path holding other content: --train {data['train']} "
                                                   "(sha256 ")) as e:
        train_rag(cfg, run, resume=True)
    assert "--dev" not in str(e.value) and "\n" not in str(e.value)
    Path(data["train"]).write_bytes(original)  # the run's own data again: it goes on
    with one_thread():
        assert train_rag(cfg, run, resume=True)["steps"] == 3


def test_a_resume_before_the_first_checkpoint_compares_the_data_of_config_json(rag_inputs, tmp_path):  # noqa: F811
    from lewisrag.training.rag import train_rag

    data = _own_copies(rag_inputs, tmp_path / "data")
    cfg = make_config(rag_inputs, **data, steps=3, eval_every=0, save_every=3)
    run = tmp_path / "run"
    _killed_at(cfg, run, 1)
    assert not (run / "checkpoint").exists()
    _drop_last_line(data["dev"])
    with pytest.raises(InputError, match=re.escape(f"{run / 'config.json'}: field 'data_sha256': --resume with other "
                                                   f"data than the run's, the same path holding other content: --dev "
                                                   f"{data['dev']} (sha256 ")):
        train_rag(cfg, run, resume=True)


def test_a_run_recorded_without_the_data_sha256_still_resumes_and_records_it(rag_inputs, tmp_path):  # noqa: F811
    from lewisrag.training.rag import train_rag

    cfg = make_config(rag_inputs, steps=3, eval_every=0, save_every=1)
    run = tmp_path / "run"
    _killed_at(cfg, run, 2)
    for file in (run / "checkpoint" / "state.json", run / "config.json"):
        record = json.loads(file.read_text())
        del record["data_sha256"]
        file.write_text(json.dumps(record))
    with one_thread():
        assert train_rag(cfg, run, resume=True)["steps"] == 3
    train = hashlib.sha256(Path(cfg.train).read_bytes()).hexdigest()
    assert json.loads((run / "config.json").read_text())["data_sha256"]["train"] == train
    assert json.loads((run / "checkpoint" / "state.json").read_text())["data_sha256"]["train"] == train


def test_a_damaged_data_sha256_is_one_line_naming_the_field(rag_inputs, tmp_path):  # noqa: F811
    from lewisrag.training.rag import train_rag

    cfg = make_config(rag_inputs, steps=3, eval_every=0, save_every=1)
    run = tmp_path / "run"
    _killed_at(cfg, run, 2)
    state = run / "checkpoint" / "state.json"
    record = json.loads(state.read_text())
    record["data_sha256"]["dev"] = "abc"
    state.write_text(json.dumps(record))
    with pytest.raises(InputError, match=re.escape(f"{state}: field 'data_sha256.dev'") + ".*the checkpoint is damaged"):
        train_rag(cfg, run, resume=True)


def test_an_overwrite_killed_then_rerun_on_changed_data_starts_afresh(rag_inputs, tmp_path):  # noqa: F811
    """`--overwrite` trains in a staging folder named after the run and resumes a killed one there: a
    rerun on edited data is another run, started beside it, not a refused --resume."""
    from lewisrag.training.rag import train_rag

    data = _own_copies(rag_inputs, tmp_path / "data")
    cfg = make_config(rag_inputs, **data, steps=2, eval_every=0, save_every=1)
    run = tmp_path / "run"

    def stop(done: int, total: int, record: dict) -> None:
        raise Interrupted

    with one_thread():
        train_rag(cfg, run)  # a finished run for --overwrite to replace
        with pytest.raises(Interrupted):
            train_rag(cfg, run, overwrite=True, on_progress=stop)
        assert len(list(tmp_path.glob(".run.overwrite*"))) == 1
        _drop_last_line(data["train"])
        assert train_rag(cfg, run, overwrite=True)["steps"] == 2
    assert json.loads((run / "config.json").read_text())["data_sha256"]["train"] == hashlib.sha256(
        Path(data["train"]).read_bytes()).hexdigest()
    assert not list(tmp_path.glob(".run.overwrite*"))


def test_the_content_sha256_of_files_folders_and_hub_specs(tmp_path):
    from lewisrag.training.rag_run import content_sha256

    file = tmp_path / "a.jsonl"
    file.write_bytes(b'{"question": "q", "answers": ["a"]}\n')
    assert content_sha256(str(file)) == hashlib.sha256(file.read_bytes()).hexdigest()
    shards = tmp_path / "shards"
    shards.mkdir()
    for name, body in (("train-00000-of-00002.parquet", b"one"), ("train-00001-of-00002.parquet", b"two")):
        (shards / name).write_bytes(body)
    (shards / "README.md").write_text("not data")
    before = content_sha256(str(shards))
    (shards / "README.md").write_text("still not data")
    assert content_sha256(str(shards)) == before
    (shards / "train-00001-of-00002.parquet").write_bytes(b"TWO")
    assert content_sha256(str(shards)) != before
    saved = tmp_path / "saved" / "train"  # a datasets save_to_disk folder
    saved.mkdir(parents=True)
    (saved / "data-00000-of-00001.arrow").write_bytes(b"rows")
    (saved / "state.json").write_text("{}")
    arrow = content_sha256(str(tmp_path / "saved"))
    (saved / "data-00000-of-00001.arrow").write_bytes(b"other rows")
    assert content_sha256(str(tmp_path / "saved")) not in (None, arrow)
    assert content_sha256("hf:nq_open:train") is None and content_sha256(str(tmp_path / "missing.jsonl")) is None


# --- 2. a generator input of special tokens alone -----------------------------------------------------


@pytest.mark.parametrize("length", [2, 3])
def test_train_rag_refuses_a_combined_length_with_no_room_for_passage_and_question(rag_inputs, tmp_path, length):  # noqa: F811
    """BART's inputs begin with <s> and end with </s>: at 2 the generator read those two alone, whatever
    the passage and the question (exit 0)."""
    from lewisrag.training.rag import train_rag

    with pytest.raises(InputError, match=re.escape(f"--max-combined-length: must be at least 4 with this generator's "
                                                   f"tokenizer (its 2 special tokens, one passage token and one question "
                                                   f"token), got {length}")):
        train_rag(make_config(rag_inputs, steps=1, eval_every=0, max_combined_length=length), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_combined_length_that_holds_a_passage_and_a_question_token_loads(rag_inputs):  # noqa: F811
    from lewisrag.training.rag_data import load_components

    with one_thread():
        parts = load_components(make_config(rag_inputs, max_combined_length=4))
    assert parts.model.settings.max_combined_length == 4


# --- 3. flags that did nothing -----------------------------------------------------------------------


@pytest.mark.parametrize("flags, named", [
    (["--seed", 3], "--seed"),
    (["--separate-encoders"], "--separate-encoders"),
    (["--qa-fields", "question=query"], "--qa-fields"),
])
def test_train_dpr_steps_0_conversion_refuses_the_flags_it_ignores(rag_inputs, tmp_path, monkeypatch, capsys,  # noqa: F811
                                                                   flags, named):
    """`--steps 0` without data saves the starting encoders as they are: a seed, separate encoders or the
    QA files' field names changed nothing, and the command said nothing."""
    out = tmp_path / "converted"
    code, _, err = run_main(monkeypatch, capsys, "train", "dpr", "--init", rag_inputs["dpr"], "--steps", 0, "--out", out,
                            *flags)
    assert_one_line_error(code, err, named, "--steps 0")
    assert not out.exists()


def test_train_dpr_steps_0_still_converts_and_a_scratch_model_still_takes_its_seed(rag_inputs, tmp_path, monkeypatch,  # noqa: F811
                                                                                   capsys):
    from lewisrag.index.encoders import DPRCheckpoint

    code, _, err = run_main(monkeypatch, capsys, "train", "dpr", "--init", rag_inputs["dpr"], "--steps", 0, "--out",
                            tmp_path / "converted", "--seed", 0, "--json")  # the default, as a script spells it
    assert code == 0, err
    assert DPRCheckpoint.load(tmp_path / "converted").meta["n_train"] == 0
    # with data and no starting checkpoint, --seed draws the first weights of the model saved at --steps 0
    w = rag_inputs["world"]
    scratch = ["train", "dpr", "--train", w / "train.jsonl", "--passages", w / "passages_a.jsonl", "--steps", 0,
               "--vocab-size", 300, "--hidden-size", 16, "--layers", 1, "--json"]
    for seed in (1, 2):
        code, _, err = run_main(monkeypatch, capsys, *scratch, "--out", tmp_path / f"seed{seed}", "--seed", seed)
        assert code == 0, err
    fingerprints = {DPRCheckpoint.load(tmp_path / f"seed{seed}").meta["ctx_fingerprint"] for seed in (1, 2)}
    assert len(fingerprints) == 2


@pytest.mark.parametrize("flag", ["--mixed-n-docs", "--mixed-k"])
def test_train_stitched_refuses_mixed_n_docs_with_one_doc(rag_inputs, tmp_path, monkeypatch, capsys, flag):  # noqa: F811
    """--mixed-n-docs stitches 1..--n-docs passages per input: with --n-docs 1 it changed nothing."""
    out = tmp_path / "stitched"
    code, _, err = run_main(monkeypatch, capsys, "train", "stitched", "--index", rag_inputs["index"], "--generator",
                            rag_inputs["gen"], "--train", rag_inputs["world"] / "train.jsonl", "--out", out,
                            "--n-docs", 1, flag)
    assert_one_line_error(code, err.replace(f"warning: {flag} is deprecated here, use --mixed-n-docs (it will be removed "
                                            "in the next release)\n", ""), flag, "--n-docs 1")
    assert not out.exists()


# --- 4. a checkpoint's index vectors of the wrong shape --------------------------------------------


def test_load_vectors_refuses_another_shape_naming_the_file(tmp_path):
    from lewisrag.training.checkpoint import LIVE_VECTORS, load_vectors

    np.save(tmp_path / LIVE_VECTORS, np.zeros((3, 4), dtype=np.float32))
    assert load_vectors(tmp_path, (3, 4)).shape == (3, 4)
    for shape in ((3, 5), (2, 4)):
        with pytest.raises(InputError, match=re.escape(f"{tmp_path / LIVE_VECTORS}: holds float32 vectors of shape "
                                                       f"(3, 4), the index needs float32 of shape {shape}")):
            load_vectors(tmp_path, shape)
    np.save(tmp_path / LIVE_VECTORS, np.zeros((3, 4), dtype=np.float64))
    with pytest.raises(InputError, match="holds float64 vectors"):
        load_vectors(tmp_path, (3, 4))


def test_a_resume_with_index_vectors_of_the_wrong_shape_is_one_line(rag_inputs, tmp_path):  # noqa: F811
    """The checkpoint of a run that re-encoded its index holds the vectors it searched: another shape
    ended the resume in a ValueError (exit 3) once the models had loaded."""
    from lewisrag.training.rag import train_rag

    cfg = make_config(rag_inputs, steps=3, eval_every=0, save_every=1, train_context_encoder=True, reindex_every=1)
    run = tmp_path / "run"
    _killed_at(cfg, run, 2)
    vectors = run / "checkpoint" / "index_vectors.npy"
    saved = np.load(vectors)
    for wrong in (saved[:, :-1], saved[:-1]):
        np.save(vectors, wrong)
        with pytest.raises(InputError, match=re.escape(f"{vectors}: holds float32 vectors of shape {wrong.shape}, the "
                                                       f"index needs float32 of shape {saved.shape}")):
            train_rag(cfg, run, resume=True)
    np.save(vectors, saved)
    with one_thread():
        assert train_rag(cfg, run, resume=True)["steps"] == 3
