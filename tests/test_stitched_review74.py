"""The stitched system, reviewed: a `train stitched` folder given to `compare --stitched-generator hf:OUT`
was asked with the chat instruction and a "Question:/Answer:" layout it was never trained on, at the run's
k rather than its own; an hf: model loaded in its checkpoint's dtype (bf16 for most hub LLMs, whose greedy
answers then depend on the batch), recorded nowhere; and the reproduce `stitched` stage cut the tiny
preset's long-form targets at 24 tokens, their citations with them."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch

from conftest import one_thread
from lewisrag.data.records import Passage, of_kinds, read_qa
from lewisrag.experiments import stitched_llm
from lewisrag.experiments.compare import stitched_config, train_stitched_stage
from lewisrag.experiments.presets import PRESETS
from lewisrag.experiments.systems import CountingSeq2Seq
from lewisrag.rag_model.stitched import stitch
from lewisrag.training import stitched_train as S
from test_rag_train import rag_inputs  # noqa: F401  (session fixture)

PASSAGES = [Passage("a", "Valdoria", "Ana Kel leads it."), Passage("b", "Veldoria", "Bo Ren leads it.")]


def _run(rag_inputs, root: Path) -> Path:  # noqa: F811
    """A run-like folder: the parts `compare` and the `stitched` stage read (world, DPR, index A, generator)."""
    root.mkdir()
    for name, src in (("world", "world"), ("dpr", "dpr"), ("index_a", "index"), ("generator", "gen")):
        (root / name).symlink_to(rag_inputs[src])
    return root


@pytest.fixture(scope="module")
def trained(rag_inputs, tmp_path_factory):  # noqa: F811
    """(run, a `train stitched` output trained as the CLI trains it: question last, 2 passages)."""
    root = tmp_path_factory.mktemp("review74")
    run, out = _run(rag_inputs, root / "run"), root / "stitched"
    cfg = S.StitchedTrainConfig(index=str(run / "index_a"), encoder=str(run / "dpr"), generator=str(run / "generator"),
                                train=str(run / "world" / "train.jsonl"), train_kinds="short", k=2, steps=1,
                                batch_size=2, question_last=True, max_target_length=None, device="cpu")
    with one_thread():
        S.train_stitched(cfg, out, check_lengths=True)
    return run, out


def _system(run: Path, folder: Path, **options) -> stitched_llm.LLMStitchedSystem:
    return stitched_llm.build_system(run, stitched_llm.check_options(stitched_llm.GeneratorOptions(f"hf:{folder}", **options)), 8)


def test_a_train_stitched_folder_reads_its_prompts_as_it_was_trained(trained):
    """hf:OUT got ANSWER_INSTRUCTION, "Question: ..." last and "Answer:" (prompt_settings), at the run's k (5 by
    default); it must read `stitch` under its stitched.json settings alone, as the run's own stitched system
    reads RUN/stitched, and so give that system's answers."""
    run, folder = trained
    layout = S.read_settings(folder)
    assert layout.question_last and layout.k == 2  # the fixture's layout differs from prompt_settings' in every field
    system = _system(run, folder)
    assert system.settings == layout
    questions = ["Who leads Valdoria?", "Who leads Veldoria?"]
    prompts = [stitch(q, PASSAGES, layout) for q in questions]
    assert [system.answers.text(stitch(q, PASSAGES, system.settings)) for q in questions] == prompts
    # the tokens training read: special tokens added, nothing around the prompt
    model, tokenizer, _ = S.load_stitched(folder)
    assert [system.answers.tokens(p) for p in prompts] == [len(tokenizer(p)["input_ids"]) for p in prompts]
    own = CountingSeq2Seq(model, tokenizer, 8, 1024)  # the run's own stitched system's generator (`StitchedSystem`)
    with one_thread():
        assert system.answers.generator(prompts) == own(prompts)
    g = system.describe()
    assert (g["prompt_version"], g["instruction"], g["n_docs"]) == (stitched_llm.TRAINED_PROMPT_VERSION, "", 2)
    assert g["layout"] == asdict(layout) and g["trained_settings"] == str(folder / S.SETTINGS_FILE)
    assert g["chat_template"] is False
    # --n-docs changes the number of passages only
    assert _system(run, folder, n_docs=1).settings == replace(layout, k=1)


def test_a_plain_hf_folder_keeps_the_instruction_prompt(trained, tmp_path):
    """A folder without stitched.json (any transformers LM) is still asked with the instruction."""
    run, folder = trained
    plain = tmp_path / "plain"
    shutil.copytree(folder, plain)
    (plain / S.SETTINGS_FILE).unlink()
    system = _system(run, plain, n_docs=2)
    assert system.settings == stitched_llm.prompt_settings(2)
    assert system.answers.text("Q") == f"{stitched_llm.ANSWER_INSTRUCTION}\n\nQ\nAnswer:"
    g = system.describe()
    assert (g["prompt_version"], g["instruction"]) == (stitched_llm.PROMPT_VERSION, stitched_llm.ANSWER_INSTRUCTION)
    assert "layout" not in g


def test_an_hf_generator_loads_in_float32_whatever_its_checkpoint_holds(trained, tmp_path):
    """A checkpoint saved in bf16 loaded in bf16 (transformers' "auto"), as most hub LLMs would, and
    results.json said nothing of it: the run's own models load in float32."""
    from lewisrag.rag_model.stitched import HFGenerator

    run, folder = trained
    bf16 = tmp_path / "bf16"
    model, tokenizer, _ = S.load_stitched(folder)
    model.to(torch.bfloat16).save_pretrained(bf16)
    tokenizer.save_pretrained(bf16)
    shutil.copy(folder / S.SETTINGS_FILE, bf16 / S.SETTINGS_FILE)
    system = _system(run, bf16)
    assert system.answers.generator.model.dtype == torch.float32
    assert system.describe()["dtype"] == "float32"
    assert HFGenerator.from_pretrained(str(bf16), dtype=torch.bfloat16).model.dtype == torch.bfloat16  # when asked


def _longest_target(run: Path, cfg) -> int:
    """Tokens of the longest cited answer the stage trains on (the CLI's `longest_target`)."""
    from transformers import AutoTokenizer

    examples = [S._Example(ex.question, ex.answers[0], None, []) for ex in of_kinds(read_qa(cfg.train), cfg.train_kinds)
                if ex.answers and ex.gold_passage_ids]
    return S.longest_target(examples, AutoTokenizer.from_pretrained(run / "generator"), cfg)


def test_the_stitched_stage_keeps_every_targets_citation(rag_inputs, tmp_path):  # noqa: F811
    """The tiny preset trains every kind (train_kinds '') at max_target_length 16 + 8: a long-form target
    ('... known for its olives and glass. [1]') was cut before its citation, which the CLI refuses. The small
    preset's short answers fit its 48 + 8: its config and numbers stay as they were."""
    run = _run(rag_inputs, tmp_path / "run")
    tiny = replace(PRESETS["tiny"], stitched_steps=1, stitched_batch_size=2, stitched_k=2, device="cpu")
    cfg = stitched_config(run, tiny, 0)
    longest = _longest_target(run, cfg)
    assert cfg.train_kinds == "" and cfg.max_target_length == 24 < longest  # the fixture holds targets the cut would hit
    with one_thread():
        train_stitched_stage(run, tiny, 0)
    assert json.loads((run / "stitched" / S.SETTINGS_FILE).read_text())["config"]["max_target_length"] == longest

    small_run = _run(rag_inputs, tmp_path / "small")
    small = replace(PRESETS["small"], stitched_steps=1, stitched_batch_size=2, device="cpu")
    cfg = stitched_config(small_run, small, 0)
    assert (cfg.train_kinds, cfg.max_target_length) == ("short", 56) and _longest_target(small_run, cfg) < 56
    with one_thread():
        train_stitched_stage(small_run, small, 0)
    assert json.loads((small_run / "stitched" / S.SETTINGS_FILE).read_text())["config"] == {
        **asdict(cfg), "max_target_length": 56}
