"""What a generator's recipe.json records and what it lets load: the environment its weights depend
on (`built_with`), every file loading reads (`files_sha256`, a file added beside them refused too),
and a shipped recipe damaged before `reproduce` copies it."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

import lewisrag
from lewisrag.data.cpu_linear import cpu_linear, current_kind
from lewisrag.data.io import InputError
from lewisrag.data.pretrained import check_recipe, load_generator
from lewisrag.data.threads import environment
from lewisrag.experiments import stages as S
from lewisrag.experiments.presets import get_preset
from lewisrag.training import pretrain as P
from lewisrag.training.configs import pretrain_preset

def _copy_of(name: str, to: Path) -> Path:
    return Path(shutil.copytree(P.SHIPPED_DIR / name, to))


def _recipe(folder: Path) -> dict:
    return json.loads((folder / "recipe.json").read_text())


# --- 1. built_with: everything the weights depend on besides config and seed -----------------------------


def test_a_pretrained_recipe_records_the_cpu_and_its_linear_library(tmp_path):
    """LEWISRAG_CPU_LINEAR=blas and onednn built different weights whose built_with was the same
    {device, threads, lewisrag, torch, transformers}: the library and the CPU model were not recorded."""
    with cpu_linear("blas"):
        recipe = P.pretrain(pretrain_preset("tiny", steps=1, device="cpu"), tmp_path / "g")
        expected = {**environment("cpu"), "lewisrag": lewisrag.__version__}
    assert recipe["built_with"] == expected == _recipe(tmp_path / "g")["built_with"]
    assert {"cpu", "cpu_id", "cpu_linear", "threads", "device", "torch", "transformers"} <= set(expected)
    assert expected["cpu_linear"] == "blas" and expected["device"] == "cpu"


def test_built_with_names_the_library_in_force():
    """The recipe's entry follows the block the command runs in (`data.cpu_linear.cpu_linear`)."""
    for kind in ("blas", "onednn"):
        with cpu_linear(kind):
            assert current_kind() == kind
            assert P.built_with(torch.device("cpu"))["cpu_linear"] == kind


def test_the_verifier_recipe_records_built_with(tmp_path):
    """The FEVER verifier's recipe.json recorded no built_with at all."""
    from lewisrag.training.verifier import VerifierConfig, pretrain_verifier

    with cpu_linear("blas"):
        recipe = pretrain_verifier(P.SHIPPED_DIR / "generator-small", tmp_path / "v",
                                   VerifierConfig(steps=1, batch_size=2, device="cpu"))
        expected = {**environment("cpu"), "lewisrag": lewisrag.__version__}
    assert recipe["built_with"] == expected == _recipe(tmp_path / "v")["built_with"]
    load_generator(tmp_path / "v", require_recipe=True)


@pytest.mark.parametrize("name, lang", [("generator-small", "en"), ("generator-small-zh", "zh")])
def test_shipped_generators_as_they_are_still_pass(tmp_path, name, lang):
    """The shipped recipes record device, threads and versions only, and list the files their folders
    hold: checked, found by `reproduce` and copied as before."""
    assert "cpu_linear" not in _recipe(P.SHIPPED_DIR / name)["built_with"]
    check_recipe(P.SHIPPED_DIR / name, required=True)
    assert S.shipped_generator(get_preset("small").in_language(lang)) == P.SHIPPED_DIR / name
    S.copy_generator(P.SHIPPED_DIR / name, tmp_path / "g", require_recipe=True)
    check_recipe(tmp_path / "g", required=True)


# --- 3. a file loading reads that files_sha256 does not list ------------------------------------------------


@pytest.mark.parametrize("added", ["special_tokens_map.json", "added_tokens.json", "vocab.txt", "spiece.model"])
def test_a_tokenizer_file_added_beside_a_recorded_generator_is_refused(tmp_path, added):
    """A special_tokens_map.json dropped into a copy of generator-small made "<mask>" its eos and bos,
    and the folder loaded with require_recipe=True as the recorded generator."""
    g = _copy_of("generator-small", tmp_path / "g")
    content = json.dumps({"eos_token": "<mask>", "bos_token": "<mask>"}) if added.endswith(".json") else "x\n"
    (g / added).write_text(content)
    with pytest.raises(InputError) as e:
        load_generator(g, require_recipe=True)
    assert str(e.value).startswith(f"{g / added}: not in recipe.json (files_sha256), yet loading reads it")
    (g / added).unlink()
    load_generator(g, require_recipe=True)


def test_a_file_loading_does_not_read_is_left_alone(tmp_path):
    g = _copy_of("generator-small", tmp_path / "g")
    (g / "README.md").write_text("notes")
    check_recipe(g, required=True)


def test_a_recipe_from_before_files_sha256_does_not_refuse_added_files(tmp_path):
    """Recipes older than files_sha256 record the weights alone: no list to hold an added file against."""
    g = _copy_of("generator-small", tmp_path / "g")
    recipe = _recipe(g)
    del recipe["files_sha256"]
    (g / "recipe.json").write_text(json.dumps(recipe))
    (g / "special_tokens_map.json").write_text("{}")
    check_recipe(g, required=True)


# --- 2. a damaged shipped recipe.json before `reproduce` copies it -----------------------------------------


def _damaged_shipped(tmp_path: Path, monkeypatch, text: str | None = None, **fields) -> Path:
    shipped = tmp_path / "shipped"
    g = _copy_of("generator-small", shipped / "generator-small")
    (g / "recipe.json").write_text(text if text is not None else json.dumps({**_recipe(g), **fields}))
    monkeypatch.setattr(S, "SHIPPED_DIR", shipped)
    return g / "recipe.json"


@pytest.mark.parametrize("config", [None, [], "en"])
def test_a_shipped_recipe_without_a_config_object_is_one_line(tmp_path, monkeypatch, config):
    """{"config": null} or {"config": []} was an AttributeError traceback, exit 3."""
    recipe = _damaged_shipped(tmp_path, monkeypatch, config=config)
    with pytest.raises(InputError) as e:
        S.shipped_generator(get_preset("small"))
    assert str(e.value) == f"{recipe}: field 'config': expected an object (the pretraining config), got {config!r}"


@pytest.mark.parametrize("text", ["[]", '{"config": {"lang": "en"}}'])
def test_a_shipped_recipe_that_is_not_a_recipe_is_one_line(tmp_path, monkeypatch, text):
    recipe = _damaged_shipped(tmp_path, monkeypatch, text)
    with pytest.raises(InputError) as e:
        S.shipped_generator(get_preset("small"))
    assert str(e.value) == f"{recipe}: field 'weights_sha256': no weights sha256 recorded: a damaged recipe"


def test_reproduce_refuses_a_damaged_shipped_recipe_with_exit_2(tmp_path, monkeypatch, capsys):
    """The command as the user meets it: one line on stderr, exit 2, before any stage runs."""
    from lewisrag.cli import main

    recipe = _damaged_shipped(tmp_path, monkeypatch, "[]")
    monkeypatch.setattr(sys, "argv", ["lewisrag", "reproduce", "--preset", "small", "--out", str(tmp_path / "run")])
    with pytest.raises(SystemExit) as e:
        main()
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.count("\n") == 0 and str(recipe) in err and "weights_sha256" in err, err
    assert not (tmp_path / "run" / "world").exists()
