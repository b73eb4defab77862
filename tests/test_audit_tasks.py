"""The paper's other tasks (Jeopardy, FEVER), audited: a RAG run whose loss turns NaN (a NaN model
scored a FEVER dev accuracy of one label's share, was kept as best/ and final/, exit 0), FEVER's
verifier diverging (NaN weights and a bare NaN in recipe.json saved, exit 0), the world's task files
read back by the evaluation and verifier stages with a claim that has no label or a label spelled
otherwise (an IndexError; a wrong prediction in silence) or a clue without references (a ValueError),
and Q-BLEU-1 of a prediction that is not a string (a TypeError naming nothing)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import one_thread, run_main
from lewisrag.data.io import InputError
from test_faults import assert_one_line_error
from test_rag_train import make_config, rag_inputs  # noqa: F401  (session fixture)

def _fever(rag_inputs, **overrides):  # noqa: F811
    w = rag_inputs["world"]
    return make_config(rag_inputs, task="fever", train=str(w / "fever_train.jsonl"), dev=str(w / "fever_dev.jsonl"),
                       cpu=True, **overrides)


# --- 1. a RAG run that diverges ----------------------------------------------------------------------


def test_a_fever_run_whose_loss_turns_nan_exits_2_without_keeping_a_model(rag_inputs, tmp_path, monkeypatch,
                                                                          capsys):  # noqa: F811
    """The NaN model's label scores all compared false, so every claim was SUPPORTS: dev acc3 0.5 was
    logged, the NaN weights kept as best/ and final/, and the run exited 0."""
    w, out = rag_inputs["world"], tmp_path / "run"
    code, _, err = run_main(monkeypatch, capsys, "train", "rag", "--task", "fever", "--index", rag_inputs["index"],
                            "--encoder", rag_inputs["dpr"], "--generator", rag_inputs["gen"],
                            "--train", w / "fever_train.jsonl", "--dev", w / "fever_dev.jsonl", "--out", out,
                            "--steps", 4, "--batch-size", 4, "--n-docs", 2, "--max-combined-length", 128,
                            "--max-target-length", 16, "--eval-every", 2, "--save-every", 2, "--eval-questions", 4,
                            "--device", "cpu", "--lr", "1e6", "--max-grad-norm", 0, "--freeze-retriever")
    assert_one_line_error(code, err, "--lr: the loss became nan at step 2: training diverged; lower --lr (now 1e+06)")
    assert not out.exists()  # nothing saved before it diverged: no model, and no config or log left to refuse a rerun


@pytest.mark.parametrize("task", ["qa", "jeopardy"])
def test_a_run_whose_weights_turn_nan_is_stopped_before_its_evaluation(rag_inputs, tmp_path, monkeypatch,
                                                                       task):  # noqa: F811
    """Step 1's loss is finite and its update leaves a NaN weight: the evaluation right after it scored
    the model (EM, Q-BLEU-1 0.0) and saved it as best/."""
    import torch

    from lewisrag.training import rag

    real_step = rag.optimizer_step

    def nan_update(opt, sched, scaler):
        out = real_step(opt, sched, scaler)
        with torch.no_grad():
            opt.param_groups[0]["params"][-1].fill_(float("nan"))
        return out

    monkeypatch.setattr(rag, "optimizer_step", nan_update)
    w = rag_inputs["world"]
    files = {} if task == "qa" else dict(train=str(w / "jeopardy_train.jsonl"), dev=str(w / "jeopardy_dev.jsonl"))
    cfg = make_config(rag_inputs, task=task, steps=3, eval_every=1, save_every=3, cpu=True, **files)
    with one_thread(), pytest.raises(InputError, match=r"the weights hold NaN or inf after step 1: training diverged"):
        rag.train_rag(cfg, tmp_path / "run")
    assert not (tmp_path / "run" / "best").exists() and not (tmp_path / "run" / "final").exists()


def test_a_search_that_found_nothing_for_nan_queries_names_the_encoder_not_the_index():
    """A question encoder turned NaN on a step that neither evaluates nor saves: FAISS finds nothing
    for a NaN vector (flat, IVF and HNSW indexes alike), which was refused as an index searched too
    narrowly (search_params), before the step's loss could show the NaN."""
    import numpy as np

    from lewisrag.rag_model.model import check_found

    rows = np.array([[3, 1], [-1, -1], [-1, -1]])
    queries = np.ones((3, 4), dtype=np.float32)
    with pytest.raises(InputError, match=r"fewer than 2 passages for 2 of 3 questions") as e:
        check_found(rows, 2, "idx", queries)  # finite queries: the index's search was too narrow
    assert e.value.field == "search_params"
    queries[1:, 0] = np.nan
    with pytest.raises(InputError) as e:
        check_found(rows, 2, "idx", queries)
    assert str(e.value) == ("the question encoder: its vectors hold NaN or inf for 2 of 3 questions, so their search "
                            "found nothing: its weights diverged (in training: lower --lr)")


def test_a_run_that_does_not_diverge_trains_as_before(rag_inputs, tmp_path):  # noqa: F811
    from lewisrag.training.rag import train_rag

    with one_thread():
        s = train_rag(_fever(rag_inputs, steps=2, eval_every=2, save_every=2), tmp_path / "run")
    assert s["steps"] == 2 and s["dev_metric"] == "acc3" and (tmp_path / "run" / "best").is_dir()


# --- 2. FEVER's verifier diverging --------------------------------------------------------------------


def test_a_diverging_verifier_stops_with_one_line_and_saves_nothing(rag_inputs, tmp_path):  # noqa: F811
    """lr 1e6: the loss was nan from step 2, the NaN weights were saved with recipe.json's
    `"final_loss": NaN` (not JSON), and the FEVER runs started from them."""
    from lewisrag.training.verifier import VerifierConfig, pretrain_verifier

    cfg = VerifierConfig(steps=3, batch_size=4, lr=1e6, warmup_steps=1, device="cpu")
    with one_thread(), pytest.raises(InputError) as e:
        pretrain_verifier(rag_inputs["gen"], tmp_path / "v", cfg)
    assert str(e.value) == "verifier: field 'lr': the loss became nan at step 2: training diverged; lower lr (now 1e+06)"
    assert not (tmp_path / "v").exists() and not list(tmp_path.iterdir())


# --- 3. the world's task files, read back --------------------------------------------------------------


def _run_with(tmp_path: Path, rag_inputs, name: str, edit) -> Path:  # noqa: F811
    """A run folder whose world/ holds the world's `name` file (and fever_test_b beside fever_test), its
    line 2 changed by `edit`."""
    world = tmp_path / "run" / "world"
    world.mkdir(parents=True)
    names = [name, "fever_test_b"] if name == "fever_test" else [name]
    for n in names:
        lines = (rag_inputs["world"] / f"{n}.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
        if n == name:
            lines[1] = json.dumps(edit(json.loads(lines[1]))) + "\n"
        (world / f"{n}.jsonl").write_text("".join(lines), encoding="utf-8")
    return tmp_path / "run"


EDITS = {
    "a lowercase label": (lambda r: {**r, "answers": [r["answers"][0].lower()]}, "answers[0]", "is no FEVER label"),
    "no label": (lambda r: {**r, "answers": [], "category": "not_in_kb"}, "answers", "no answer to score against"),
}


@pytest.mark.parametrize("edit", EDITS, ids=list(EDITS))
def test_fever_evaluation_refuses_a_test_claim_without_a_fever_label(rag_inputs, tmp_path, edit):  # noqa: F811
    """Every claim's first answer is the gold label: none was an IndexError, and "supports" was
    scored as a wrong prediction of every system in silence."""
    from lewisrag.experiments.presets import get_preset
    from lewisrag.experiments.tasks import fever_evaluate

    change, field, message = EDITS[edit]
    run = _run_with(tmp_path, rag_inputs, "fever_test", change)
    with pytest.raises(InputError, match=message) as e:
        fever_evaluate(run, get_preset("tiny"), lambda *a: None)
    assert (Path(e.value.source).name, e.value.line, e.value.field) == ("fever_test.jsonl", 2, field)


def test_the_verifier_stage_refuses_a_dev_claim_without_a_fever_label(rag_inputs, tmp_path):  # noqa: F811
    """Its dev claims are measured after training: "supports" counted as a label no prediction matched."""
    from lewisrag.experiments.presets import get_preset
    from lewisrag.experiments.tasks import verifier

    run = _run_with(tmp_path, rag_inputs, "fever_dev", EDITS["a lowercase label"][0])
    with pytest.raises(InputError, match="is no FEVER label") as e:
        verifier(run, get_preset("tiny"), 0, "fever", lambda *a: None)
    assert (e.value.line, e.value.field) == (2, "answers[0]")


def test_the_verifier_measures_only_claims_with_a_gold_passage():
    """A SUPPORTS claim without evidence ended the stage in an IndexError after its training."""
    from lewisrag.data.records import Passage, QAExample
    from lewisrag.rag_model.settings import RagSettings
    from lewisrag.training.verifier import world_claims

    passages = [Passage("p1", "Valdoria", "The capital of Valdoria is Zerth.")]
    claims = [QAExample("c1", "Valdoria's capital is Zerth.", ["SUPPORTS"], ["p1"]),
              QAExample("c2", "Valdoria's capital is Kelm.", ["REFUTES"], [])]
    assert [label for _, label in world_claims(claims, passages, RagSettings())] == ["SUPPORTS"]


def test_jeopardy_evaluation_refuses_an_entity_without_reference_clues(rag_inputs, tmp_path):  # noqa: F811
    """Q-BLEU-1 needs a reference: an entity without one ended in a ValueError traceback (exit 3)."""
    from lewisrag.experiments.presets import get_preset
    from lewisrag.experiments.tasks import jeopardy_evaluate

    run = _run_with(tmp_path, rag_inputs, "jeopardy_test", EDITS["no label"][0])
    with pytest.raises(InputError, match="no answer to score against") as e:
        jeopardy_evaluate(run, get_preset("tiny"), lambda *a: None)
    assert (Path(e.value.source).name, e.value.line, e.value.field) == ("jeopardy_test.jsonl", 2, "answers")


def test_the_world_files_as_written_read_as_before(rag_inputs):  # noqa: F811
    from lewisrag.data.records import read_qa
    from lewisrag.experiments.tasks import read_scored

    for name in ("jeopardy_test", "fever_dev", "fever_test", "fever_test_b"):
        path = rag_inputs["world"] / f"{name}.jsonl"
        assert read_scored(path, labels=name.startswith("fever")) == read_qa(path)


# --- 4. Q-BLEU-1 --------------------------------------------------------------------------------------


@pytest.mark.parametrize("prediction", [None, 3, ["a clue"]])
def test_q_bleu1_of_a_prediction_that_is_not_a_string_is_a_value_error(prediction):
    """As bleu_1's: None was a TypeError from unicodedata.normalize."""
    from lewisrag.scoring.qbleu import q_bleu1

    with pytest.raises(ValueError, match=re.escape(f"prediction must be a string, got {prediction!r}")):
        q_bleu1(prediction, ["This country has its capital at Zerth."])


def test_q_bleu1_edge_cases_keep_their_scores():
    """Empty predictions score 0; CJK and full-width text compare as written; identical clues score 1."""
    from lewisrag.scoring.qbleu import q_bleu1

    assert q_bleu1("", ["This country is big."]) == 0.0 and q_bleu1(" ? ", ["This country is big."]) == 0.0
    assert q_bleu1("这个国家的首都是泽尔斯。", ["这个国家的首都是泽尔斯。"]) == 1.0
    assert q_bleu1("Founded in １９２１.", ["Founded in 1921."]) == 1.0
    with pytest.raises(ValueError, match="references must be a non-empty list"):
        q_bleu1("x", [])

