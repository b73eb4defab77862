"""Task inputs that trained or scored the wrong thing with exit 0: FEVER claims trained as free-text
QA answers by `train rag` without --task fever, a fever_test_b.jsonl of another world paired with
fever_test.jsonl by id alone in the hot swap, and grouped training examples (FEVER's minimal pairs)
cut across optimizer steps without a word."""

from __future__ import annotations

import json
import warnings

import pytest

from conftest import one_thread, run_main
from lewisrag.data.io import InputError, LewisragWarning
from lewisrag.data.records import QAExample
from test_faults import assert_one_line_error
from test_hub_qa_schemas import _hub_fever
from test_rag_train import make_config, rag_inputs  # noqa: F401  (session fixture)

# --- 1. FEVER claims under --task qa ------------------------------------------------------------------


@pytest.mark.parametrize("task", ["qa", "jeopardy"])
def test_train_rag_without_task_fever_refuses_fever_claims(rag_inputs, task):  # noqa: F811
    """The labels were trained as answers and scored by exact match (exit 0); `reproduce --preset base`
    refused the same files, `train rag` did not."""
    from lewisrag.training.rag_data import load_components

    w = rag_inputs["world"]
    cfg = make_config(rag_inputs, task=task, train=str(w / "fever_train.jsonl"), dev=str(w / "dev.jsonl"), cpu=True)
    with pytest.raises(InputError, match=f"FEVER claims .*which --task {task} trains and scores as free-text answers: "
                                         "train them with --task fever") as e:
        load_components(cfg)
    assert (e.value.source, e.value.line, e.value.field) == (str(w / "fever_train.jsonl"), 1, "answers[0]")


def test_train_rag_cli_refuses_fever_claims_in_one_line_writing_nothing(rag_inputs, tmp_path, monkeypatch,
                                                                        capsys):  # noqa: F811
    w, out = rag_inputs["world"], tmp_path / "run"
    code, _, err = run_main(monkeypatch, capsys, "train", "rag", "--index", rag_inputs["index"],
                            "--encoder", rag_inputs["dpr"], "--generator", rag_inputs["gen"],
                            "--train", w / "fever_train.jsonl", "--dev", w / "dev.jsonl", "--out", out,
                            "--steps", 1, "--batch-size", 4, "--n-docs", 2, "--max-combined-length", 128,
                            "--max-target-length", 16, "--eval-every", 0, "--device", "cpu")
    assert_one_line_error(code, err, "fever_train.jsonl:1: field 'answers[0]': FEVER claims", "--task fever")
    assert not out.exists()
    train, dev = _hub_fever(w, tmp_path)  # FEVER v1.0's Parquet: the field its labels are read from
    capsys.readouterr()  # the writes' progress bars
    code, _, err = run_main(monkeypatch, capsys, "train", "rag", "--index", rag_inputs["index"],
                            "--encoder", rag_inputs["dpr"], "--generator", rag_inputs["gen"], "--train", train,
                            "--dev", dev, "--out", out, "--steps", 1, "--batch-size", 4, "--device", "cpu")
    assert_one_line_error(code, err, "fever_train.parquet:1: field 'label': FEVER claims", "--task qa trains and scores")
    assert not out.exists()


def test_a_qa_file_with_some_label_like_answers_is_not_fever():
    from lewisrag.training.rag_data import fever_claims

    claims = [QAExample("1", "c", ["SUPPORTS"]), QAExample("2", "d", ["REFUTES", "NOT ENOUGH INFO"]),
              QAExample("3", "e", [])]
    assert fever_claims(claims)
    assert not fever_claims([*claims, QAExample("4", "Who leads A?", ["Dova Kelm"])])
    assert not fever_claims([QAExample("1", "q", [])])  # nothing answered: the "no answers" checks speak


# --- 2. the FEVER hot swap's second snapshot file -----------------------------------------------------


def test_the_fever_swap_refuses_a_test_b_of_other_claims_under_the_same_ids(tmp_path):
    """Another world's fever_test_b.jsonl holds the same sequential ids: paired by id alone, its labels
    were scored against this world's claims."""
    from lewisrag.experiments.presets import get_preset
    from lewisrag.experiments.tasks import fever_evaluate

    world = tmp_path / "world"
    world.mkdir()
    rows = [{"id": "c1", "question": "A is led by B.", "answers": ["SUPPORTS"]},
            {"id": "c2", "question": "C is led by D.", "answers": ["REFUTES"]}]
    (world / "fever_test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    other = [rows[0], {**rows[1], "question": "E is led by F."}]
    (world / "fever_test_b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in other))
    with pytest.raises(InputError, match="claim 'c2' reads 'E is led by F.' where fever_test.jsonl's reads "
                                         "'C is led by D.'") as e:
        fever_evaluate(tmp_path, get_preset("tiny"), lambda *a: None)
    assert e.value.source == str(world / "fever_test_b.jsonl") and (e.value.line, e.value.field) == (2, "question")
    assert len(str(e.value).splitlines()) == 1


# --- 3. groups cut across optimizer steps ---------------------------------------------------------------


def _fever(rag_inputs, **overrides):  # noqa: F811
    w = rag_inputs["world"]
    return make_config(rag_inputs, task="fever", train=str(w / "fever_train.jsonl"), dev=str(w / "fever_dev.jsonl"),
                       cpu=True, eval_every=0, **overrides)


def _split_warnings(cfg) -> list[str]:
    from lewisrag.training.rag_data import load_components

    with one_thread(), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        load_components(cfg)
    return [str(w.message) for w in seen if issubclass(w.category, LewisragWarning) and "group" in str(w.message)]


def test_an_odd_batch_warns_that_minimal_pairs_are_cut_across_steps(rag_inputs):  # noqa: F811
    """The world's FEVER training claims are pairs; a step of 3 cuts one at its first boundary, where the
    docs said a group trains in one batch."""
    from lewisrag.data.records import read_qa
    from lewisrag.training.rag_data import DataPosition, group_units, next_batch, training_pairs

    pairs, _ = training_pairs(read_qa(rag_inputs["world"] / "fever_train.jsonl"))
    units = group_units([ex for ex, _ in pairs])
    assert {len(u) for u in units} == {2}
    ids, _ = next_batch(DataPosition(), 0, len(pairs), 3, units)
    (cut,) = [u for u in units if ids[-1] in u]
    assert not set(cut) <= set(ids)  # the third example's pair trains in the next step
    (message,) = _split_warnings(_fever(rag_inputs, batch_size=3))
    train = rag_inputs["world"] / "fever_train.jsonl"
    assert message.startswith(f"{train}: its {len(units)} groups of 2 examples (field 'group') train in one optimizer "
                              "step only when --batch-size 3 is a multiple of 2: some will be cut across two steps")
    (message,) = _split_warnings(_fever(rag_inputs, batch_size=3, grad_accum=3))
    assert "--batch-size 3 x --grad-accum 3 is a multiple of 2" in message


def test_a_step_of_whole_pairs_does_not_warn(rag_inputs):  # noqa: F811
    """A step draws --batch-size x --grad-accum examples at once (`next_batch`), so micro-batches of 3 make
    whole pairs in a step of 6, and of 1 in a step of 2."""
    assert _split_warnings(_fever(rag_inputs, batch_size=3, grad_accum=2)) == []
    assert _split_warnings(_fever(rag_inputs, batch_size=1, grad_accum=2)) == []
    assert _split_warnings(make_config(rag_inputs, cpu=True, eval_every=0, batch_size=3)) == []  # no groups: no word


def test_groups_beside_units_of_other_sizes_warn_at_any_batch_size():
    from lewisrag.training.rag_data import warn_split_groups

    with pytest.warns(LewisragWarning, match=r"t.jsonl: its 1 groups \(field 'group'\) beside units of other sizes "
                                             r"\(1, 2 examples; .*whatever --batch-size 4"):
        warn_split_groups([[0, 3], [1], [2]], 2, "--batch-size 4", "t.jsonl")  # a unit of 1 first: the pair straddles
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_split_groups([[0, 3], [1], [2]], 4, "--batch-size 4", "t.jsonl")  # a step of the whole data
        warn_split_groups([[0], [1]], 1, "--batch-size 1", "t.jsonl")  # groups of one each
        warn_split_groups(None, 3, "--batch-size 3", "t.jsonl")


def test_the_closed_book_warns_too_when_its_batch_cuts_pairs(rag_inputs, tmp_path):  # noqa: F811
    """The closed book draws its batches as `train rag` does (`next_batch` with the same units), by
    --batch-size alone: an odd one cuts FEVER's pairs there too."""
    from lewisrag.training import closed_book as CB
    from lewisrag.training.pretrain import SHIPPED_DIR

    train = rag_inputs["world"] / "fever_train.jsonl"
    seen = {}
    for batch_size in (3, 4):
        cfg = CB.ClosedBookConfig(generator=str(SHIPPED_DIR / "generator-small"), train=str(train), task="fever",
                                  steps=1, batch_size=batch_size, device="cpu")
        with one_thread(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            CB.train_closed_book(cfg, tmp_path / f"cb{batch_size}")
        seen[batch_size] = [str(w.message) for w in caught
                            if issubclass(w.category, LewisragWarning) and "group" in str(w.message)]
    (message,) = seen[3]
    assert message.startswith(f"{train}: its ") and "--batch-size 3 is a multiple of 2" in message
    assert seen[4] == []


def test_train_rag_without_task_fever_refuses_fever_claims_as_dev_too(rag_inputs):  # noqa: F811
    """QA training beside FEVER's dev claims scored the labels by exact match as the best-model choice
    (exit 0): the dev file is checked as the train file is."""
    from lewisrag.training.rag_data import load_components

    w = rag_inputs["world"]
    cfg = make_config(rag_inputs, train=str(w / "train.jsonl"), dev=str(w / "fever_dev.jsonl"), cpu=True)
    with pytest.raises(InputError, match="FEVER claims .*which --task qa scores as free-text answers: "
                                         "train them with --task fever") as e:
        load_components(cfg)
    assert (e.value.source, e.value.line, e.value.field) == (str(w / "fever_dev.jsonl"), 1, "answers[0]")
