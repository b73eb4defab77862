"""Edges of the trainers that ran without a word: pretraining's `eval_every=0` and a `mask_ratio` text
infilling cannot deliver, FEVER's verifier measuring the recall of a label it has no claim of, and
the stitched reader on questions with several gold passages."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from lewisrag.data.records import Passage, QAExample

LEWISRAG = Path(sys.executable).parent / "lewisrag"


# ---------------------------------------------------------------------------------------------
# pretraining


def test_eval_every_0_draws_no_learning_curve(tmp_path):
    """`--set eval_every=0` evaluated after every step; 0 means never, as train rag's --eval-every 0."""
    from lewisrag.training import pretrain as P
    from lewisrag.training.configs import pretrain_preset

    recipe = P.pretrain(pretrain_preset("tiny", steps=3, eval_every=0.0), tmp_path / "g")
    assert recipe["steps"] == 3 and recipe["curve"] == [] and recipe["final"]["n"] > 0  # the final measurement stays
    assert json.loads((tmp_path / "g" / "recipe.json").read_text())["curve"] == []


@pytest.mark.parametrize("sets, message", [
    (["mask_ratio=0.8"], "mask_ratio 0.8 is more than text infilling can hide with poisson_lambda 3: at most 0.6"),
    (["mask_ratio=1"], "at most 0.6"),
    (["mask_ratio=0.5", "poisson_lambda=1"], "mask_ratio 0.5 is more than text infilling can hide with poisson_lambda 1: at most 0.4"),
])
def test_a_mask_ratio_the_sampler_cannot_deliver_exits_2_before_training(sets, message, tmp_path):
    """0.8 and 1.0 each masked 0.633 of a passage (one unmasked token between spans), in silence."""
    args = [x for kv in sets for x in ("--set", kv)]
    r = subprocess.run([str(LEWISRAG), "pretrain", "--preset", "tiny", *args, "--out", str(tmp_path / "x")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("error: --set") and message in r.stderr, r.stderr
    assert len(r.stderr.splitlines()) == 1 and not (tmp_path / "x").exists()


def test_the_mask_ratio_limits_are_what_the_sampler_delivers():
    """At each limit text infilling hides within 2% of the share asked, on passages short and long;
    above the limit of lambda 3 it falls short (the refusal's reason), and BART's 0.3 passes."""
    from lewisrag.training import pretrain_data as D
    from lewisrag.training.configs import MASK_RATIO_LIMITS, PretrainConfig, max_mask_ratio

    for lam, ratio in MASK_RATIO_LIMITS:
        assert max_mask_ratio(lam) == ratio
        for n in (20, 150):
            asked = covered = 0
            for s in range(100):
                covered += sum(length for _, length in D.mask_spans(n, random.Random(s), ratio, lam))
                asked += round(ratio * n)
            assert covered / asked >= 0.98, (lam, ratio, n, covered / asked)
    short = sum(length for s in range(100) for _, length in D.mask_spans(150, random.Random(s), 0.8, 3.0)) / (100 * 150)
    assert short < 0.7
    assert PretrainConfig(steps=1).mask_ratio == 0.3 and max_mask_ratio(-1.0) == max_mask_ratio(float("nan")) == 0.4
    with pytest.raises(ValueError, match="mask_ratio 0.61 is more than"):
        PretrainConfig(steps=1, mask_ratio=0.61)


# ---------------------------------------------------------------------------------------------
# FEVER's verifier


def test_the_recall_of_a_label_no_measured_claim_holds_is_null_with_its_reason():
    """The world's measured claims hold no NOT ENOUGH INFO (world_claims leaves them out): its recall
    was 0/max(1, 0) = 0.0, which results.json then showed as measured."""
    from lewisrag.data.tasks import NEI
    from lewisrag.training.pretrain import SHIPPED_DIR
    from lewisrag.data.pretrained import load_generator
    from lewisrag.training.tasks import prepare_generator
    from lewisrag.training.verifier import evaluate_verification

    generator, tokenizer = load_generator(SHIPPED_DIR / "generator-small")
    prepare_generator("fever", generator, tokenizer)
    items = [("Valdoria / Its capital is Zerth. // The capital of Valdoria is Zerth.", "SUPPORTS"),
             ("Valdoria / Its capital is Zerth. // The capital of Valdoria is Morn.", "REFUTES")]
    r = evaluate_verification(generator, tokenizer, items)
    assert r["n"] == 2 and r["recall"][NEI] is None
    assert all(isinstance(r["recall"][y], float) for y in ("SUPPORTS", "REFUTES")) and isinstance(r["acc3"], float)
    assert r["nan_reasons"] == {f"recall.{NEI}": "no measured claim has this gold label (of 2)"}
    assert json.loads(json.dumps(r, allow_nan=False)) == r  # plain JSON: null, not NaN
    empty = evaluate_verification(generator, tokenizer, [])
    assert empty["acc3"] is None and set(empty["recall"].values()) == {None} and "acc3" in empty["nan_reasons"]


def test_a_verifier_stage_record_with_an_unmeasured_recall_is_read_back(tmp_path):
    """`reproduce --resume` reads the fever_verifier record (its recall null) without refusing it."""
    from lewisrag.data.io import write_json
    from lewisrag.experiments.record_schema import check_stage_record
    from lewisrag.experiments.stages import read_stage_record

    path = tmp_path / "fever_verifier.json"
    record = {"seconds": 1.0, "dir": "fever/generator", "steps": 2, "final_loss": 0.5,
              "dev_gold_passage": {"acc3": 0.5, "n": 2, "recall": {"SUPPORTS": 1.0, "REFUTES": 0.0, "NOT ENOUGH INFO": None},
                                   "nan_reasons": {"recall.NOT ENOUGH INFO": "no measured claim has this gold label (of 2)"}}}
    write_json(path, record)
    read = read_stage_record(path)
    check_stage_record(path, "fever_verifier", read)
    assert read["dev_gold_passage"]["recall"]["NOT ENOUGH INFO"] is None


# ---------------------------------------------------------------------------------------------
# the stitched reader


GOLD = Passage("g", "Sepom", "The capital of Sepom is Tomgasze.")
SECOND = Passage("h", "Sepom (city)", "Tomgasze is the capital of Sepom.")  # a second gold passage
OTHERS = [Passage(f"p{i}", f"T{i}", f"text {i}") for i in range(4)]


def test_a_retrieved_second_gold_passage_is_cited_at_its_rank():
    """Only gold_passage_ids[0] counted: with the second gold passage retrieved first, the reader was
    taught to cite the first one's rank (or the last slot it replaced) while [1] held the answer."""
    from lewisrag.rag_model.stitched import StitchSettings
    from lewisrag.training.stitched_train import _Example, keep_rank, make_batch

    assert keep_rank([SECOND, OTHERS[0], GOLD], GOLD, 3, {"g", "h"}) == ([SECOND, OTHERS[0], GOLD], 1)
    assert keep_rank([SECOND, OTHERS[0], OTHERS[1]], GOLD, 3, {"g", "h"}) == ([SECOND, OTHERS[0], OTHERS[1]], 1)  # kept
    assert keep_rank(OTHERS, GOLD, 3, {"g", "h"}) == ([*OTHERS[:2], GOLD], 3)  # neither: the first gold takes the last slot
    item = _Example("Capital of Sepom?", "Tomgasze", GOLD, [SECOND, OTHERS[0], GOLD], frozenset({"g", "h"}))
    inputs, targets = make_batch([item], 3, StitchSettings(k=3), random.Random(0), gold_position="retrieved")
    assert targets == ["Tomgasze [1]"] and "[1] Sepom (city) / Tomgasze is the capital" in inputs[0]


def test_a_second_gold_passage_is_not_stitched_as_another_passage():
    """With the gold passage at a random position, the others were every retrieved passage but the
    first gold one: a second gold passage among them answered too, uncited."""
    from lewisrag.rag_model.stitched import CITATION, StitchSettings
    from lewisrag.training.stitched_train import _Example, make_batch, place_gold

    passages, position = place_gold([SECOND, OTHERS[0], OTHERS[1], GOLD], GOLD, 3, random.Random(0), {"g", "h"})
    assert GOLD in passages and SECOND not in passages and passages[position - 1] == GOLD
    items = [_Example("Capital of Sepom?", "Tomgasze", GOLD, [SECOND, *OTHERS], frozenset({"g", "h"}))] * 30
    inputs, targets = make_batch(items, 3, StitchSettings(k=3), random.Random(0))
    for text, target in zip(inputs, targets):
        n = int(CITATION.findall(target)[-1])
        assert f"[{n}] Sepom / The capital" in text and "Sepom (city)" not in text


class _Retriever:
    def __init__(self, hits):
        self.hits = hits

    def search(self, questions, k):
        return [self.hits[:k] for _ in questions]


def test_training_examples_keep_every_gold_id_and_single_gold_batches_are_unchanged():
    """A question's gold ids all reach make_batch; with one gold passage, passing it as the set or
    not at all draws the same batches from the same random state (the demo's numbers stay)."""
    from lewisrag.rag_model.stitched import StitchSettings
    from lewisrag.training.stitched_train import _Example, make_batch, training_examples

    by_id = {p.id: p for p in [GOLD, SECOND, *OTHERS]}
    examples = [QAExample("1", "Capital of Sepom?", ["Tomgasze"], ["g", "h"]),
                QAExample("2", "Capital of Sepom, again?", ["Tomgasze"], ["g"])]
    made = training_examples(examples, _Retriever([SECOND, *OTHERS]), by_id, 3)
    assert [ex.gold for ex in made] == [GOLD, GOLD] and [ex.gold_ids for ex in made] == [{"g", "h"}, {"g"}]
    rng = random.Random(5)
    single = [_Example("Capital of Sepom?", "Tomgasze", GOLD, rng.sample([GOLD, *OTHERS], 4)) for _ in range(20)]
    as_set = [_Example(ex.question, ex.answer, ex.gold, ex.retrieved, frozenset({"g"})) for ex in single]
    for kwargs in ({}, {"mixed_k": True}, {"gold_position": "retrieved"}, {"mixed_k": True, "gold_position": "retrieved"}):
        a, b = random.Random(1), random.Random(1)
        assert make_batch(single, 3, StitchSettings(k=3), a, **kwargs) == make_batch(as_set, 3, StitchSettings(k=3), b, **kwargs)
        assert a.getstate() == b.getstate()
