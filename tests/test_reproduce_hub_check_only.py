"""`reproduce --preset base --hub-dir DIR` with no asset flag only checks that the recipe's checkpoints
and data are on this machine. It took --resume, --overwrite, --seed, --threads, --device, --report-lang
and --cpu-linear (--resume and --overwrite together too) and ignored them in silence: each is now one
line, exit 2. And it reported "every asset is on this machine" for a 0-byte model.safetensors and a
`{}` config.json: the check now reads what loading reads first (the safetensors headers, config.json's
model_type, the data files' framing), without loading anything."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from safetensors.numpy import save_file

from conftest import run_main
from lewisrag.experiments.presets import get_preset

HUB = get_preset("base").hub


def make_hub(root):
    """A folder holding DIR/<repo> for each asset of the base recipe: small, but what loading reads first is sound."""
    for asset in HUB:
        kind, _, repo = asset.partition(":")
        d = root / repo
        d.mkdir(parents=True)
        if kind == "model":
            (d / "config.json").write_text(json.dumps({"model_type": "bart" if "bart" in repo else "dpr"}))
            save_file({"w": np.zeros(4, np.float32)}, str(d / "model.safetensors"))
            (d / "vocab.txt").write_text("[PAD]\n[UNK]\n")  # a tokenizer's vocabulary: the check requires one
        else:
            pq.write_table(pa.table({"question": ["q"], "answer": [["a"]]}), d / "train-00000-of-00001.parquet")
    return root


@pytest.fixture
def hub(tmp_path, monkeypatch):
    monkeypatch.delenv("LEWISRAG_HUB_DIR", raising=False)
    monkeypatch.delenv("LEWISRAG_CPU_LINEAR", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    return make_hub(tmp_path / "hub")


def _check(monkeypatch, capsys, tmp_path, hub, *flags):
    return run_main(monkeypatch, capsys, "reproduce", "--preset", "base", "--out", tmp_path / "x", "--hub-dir", hub, *flags)


def test_sound_assets_are_validated(hub, tmp_path, monkeypatch, capsys):
    code, out, err = _check(monkeypatch, capsys, tmp_path, hub, "--json")
    assert code == 0, err
    assert set(json.loads(out)["validated"]) == set(HUB) and not (tmp_path / "x").exists()
    code, out, err = _check(monkeypatch, capsys, tmp_path, hub, "--seed", "0", "--device", "auto")  # their defaults: nothing set
    assert code == 0 and "every asset is on this machine" in out, err


@pytest.mark.parametrize("flags", [["--resume"], ["--overwrite"], ["--seed", "1"], ["--threads", "1"], ["--device", "cpu"],
                                   ["--report-lang", "zh"], ["--cpu-linear", "blas"], ["--resume", "--overwrite"]])
def test_flags_that_set_how_a_run_goes_are_refused(flags, hub, tmp_path, monkeypatch, capsys):
    code, out, err = _check(monkeypatch, capsys, tmp_path, hub, *flags)
    assert code == 2 and out == "" and not (tmp_path / "x").exists()
    assert err.strip().splitlines() == [f"error: {flags[0]}: does not apply: --preset base with --hub-dir alone only "
                                        "checks the assets (nothing runs, nothing is written)"], err


def test_cpu_linear_from_the_environment_is_no_flag_given(hub, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LEWISRAG_CPU_LINEAR", "blas")  # may stay set for other runs, as $LEWISRAG_HUB_DIR may
    code, _, err = _check(monkeypatch, capsys, tmp_path, hub, "--json")
    assert code == 0, err


def _one_line(code, out, err, *needles):
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (out, err)
    assert all(n in err for n in needles), err


def test_an_empty_weights_file_is_refused(hub, tmp_path, monkeypatch, capsys):
    weights = hub / "facebook" / "bart-large" / "model.safetensors"
    weights.write_bytes(b"")
    code, out, err = _check(monkeypatch, capsys, tmp_path, hub)
    _one_line(code, out, err, f"error: {weights}: model facebook/bart-large: not a readable safetensors file")


def test_a_truncated_weights_file_is_refused(hub, tmp_path, monkeypatch, capsys):
    weights = hub / "facebook" / "dpr-ctx_encoder-single-nq-base" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4])  # the header lists more data than the file holds
    code, out, err = _check(monkeypatch, capsys, tmp_path, hub)
    _one_line(code, out, err, str(weights), "truncated or damaged")


@pytest.mark.parametrize("config", ["{}", '{"model_type": ""}', "[]"])
def test_a_config_without_model_type_is_refused(config, hub, tmp_path, monkeypatch, capsys):
    path = hub / "facebook" / "dpr-question_encoder-single-nq-base" / "config.json"
    path.write_text(config)
    code, out, err = _check(monkeypatch, capsys, tmp_path, hub)
    _one_line(code, out, err, f"error: {path}", "model facebook/dpr-question_encoder-single-nq-base")


@pytest.mark.parametrize("content, needle", [(b"", "empty file"), (b"PAR1 not really parquet", "not a Parquet file (no PAR1 magic bytes at both ends)")])
def test_an_empty_or_damaged_data_file_is_refused(content, needle, hub, tmp_path, monkeypatch, capsys):
    data = hub / "nq_open" / "train-00000-of-00001.parquet"
    data.write_bytes(content)
    code, out, err = _check(monkeypatch, capsys, tmp_path, hub)
    _one_line(code, out, err, f"error: {data}: dataset nq_open: {needle}")


def test_the_cache_needs_one_sound_snapshot(tmp_path, monkeypatch, capsys):
    """From the Hugging Face cache: a snapshot with 0-byte weights is refused, a sound one beside it passes."""
    monkeypatch.delenv("LEWISRAG_HUB_DIR", raising=False)
    cache = tmp_path / "cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    hub = make_hub(tmp_path / "hub")
    bart = hub / "facebook" / "bart-large"
    snapshots = cache / "models--facebook--bart-large" / "snapshots"
    broken = snapshots / "aaaa"
    broken.mkdir(parents=True)
    (broken / "config.json").write_text(json.dumps({"model_type": "bart"}))
    (broken / "model.safetensors").write_bytes(b"")
    moved = tmp_path / "bart"
    bart.rename(moved)  # not in --hub-dir: found in the cache
    code, out, err = _check(monkeypatch, capsys, tmp_path, hub)
    _one_line(code, out, err, str(broken / "model.safetensors"), "not a readable safetensors file")
    moved.rename(snapshots / "bbbb")
    code, out, err = _check(monkeypatch, capsys, tmp_path, hub, "--json")
    assert code == 0 and json.loads(out)["validated"]["model:facebook/bart-large"] == str(snapshots), err


def test_a_hub_dir_from_the_environment_is_named_so(hub, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LEWISRAG_HUB_DIR", str(hub))
    code, out, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "base", "--out", tmp_path / "x", "--resume")
    assert code == 2 and err.strip().splitlines() == ["error: --resume: does not apply: --preset base with "
                                                      "$LEWISRAG_HUB_DIR alone only checks the assets (nothing runs, "
                                                      "nothing is written)"], err
    code, out, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "base", "--out", tmp_path / "x", "--json")
    assert code == 0 and set(json.loads(out)["validated"]) == set(HUB), err
