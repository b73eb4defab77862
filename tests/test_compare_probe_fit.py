"""compare's position probe and scorecard over an outside generator whose prompt holds fewer passages
than it is given (an hf: model's: `LLMStitchedSystem.answer_from` drops them from the worst-ranked end).

The probe moves the gold passage to the last positions, exactly those dropped: EM there was measured
without the gold passage and read as the model's use of that position. The recall row took its k
from the first answer, though answers read different numbers of passages. And a tie of the two Lewis
variants named one of them "the better Lewis variant"."""

from __future__ import annotations

import math
import re

from lewisrag.data.records import Passage, QAExample
from lewisrag.experiments import compare as C
from lewisrag.experiments.stitched_llm import LLMStitchedSystem, Reply, prompt_settings
from lewisrag.experiments.systems import Answered


class Noise:
    """A retriever whose top k are passages without any answer."""

    def search(self, questions, k):
        return [[Passage(f"n{j}", "Noise", f"nothing about it {j}") for j in range(k)] for _ in questions]


class Reader:
    """A generator that answers right whenever its prompt holds the answer, whose prompt holds the best
    `held[question]` passages (all of them for a question not named): the position of the gold passage
    does not matter to it, only whether it was read."""

    usage: dict = {}

    def __init__(self, held: dict[str, int]):
        self.held = held

    def fit(self, question, passages, settings) -> int:
        return min(len(passages), self.held.get(question, len(passages)))

    def __call__(self, prompts):
        return [Reply(m.group(1) + " [1]" if (m := re.search(r"(ans\d+)", p)) else "unknown", None, 10, 2) for p in prompts]


def _examples(n: int) -> tuple[list[QAExample], dict]:
    examples = [QAExample(f"q{i}", f"Who is number {i}?", [f"ans{i}"], gold_passage_ids=[f"g{i}"], kind="short")
                for i in range(n)]
    return examples, {f"g{i}": Passage(f"g{i}", "Gold", f"the answer is ans{i}") for i in range(n)}


def _system(held: dict[str, int], k: int = 3) -> LLMStitchedSystem:
    return LLMStitchedSystem(Noise(), Reader(held), prompt_settings(k), {"generator": "hf:reader"})


def test_a_probe_whose_prompt_dropped_the_gold_passage_is_left_out_and_counted():
    """Every prompt holds 2 of 3 passages for two questions of four: at position 3 their gold passage
    was not read. It scored 0 there (EM 0.5 read as the reader losing the last position); now
    position 3's EM is over the two that read it, and the curve says how many were left out."""
    examples, gold = _examples(4)
    held = {examples[0].question: 2, examples[1].question: 2}
    curve = C.position_curves({"stitched": _system(held)}, examples, gold)["stitched"]
    assert curve["exact_match"] == [1.0, 1.0, 1.0], curve  # the reader finds it wherever it was read
    assert curve["not_read"] == [0, 0, 2] and curve["scored"] == [4, 4, 2] and curve["n"] == 4
    assert "failed" not in curve  # left out for not being read, not for a failed answer


def test_a_position_no_prompt_held_is_unscored_and_the_shape_ignores_it():
    """Prompts that all hold 2 of 3: old EM [1, 1, 0], as if the reader lost the last position."""
    examples, gold = _examples(3)
    curve = C.position_curves({"stitched": _system({ex.question: 2 for ex in examples})}, examples, gold)["stitched"]
    assert curve["exact_match"][:2] == [1.0, 1.0] and math.isnan(curve["exact_match"][2])
    assert curve["not_read"] == [0, 0, 3] and curve["scored"] == [3, 3, 0]


def test_a_prompt_that_holds_every_passage_is_probed_as_before():
    examples, gold = _examples(3)
    curve = C.position_curves({"stitched": _system({})}, examples, gold)["stitched"]
    assert curve == {"positions": [1, 2, 3], "exact_match": [1.0, 1.0, 1.0], "n": 3}


def _card(em: dict, position: dict | None = None) -> dict:
    names = list(em)
    return {"qa": {n: {"exact_match": v, "f1": v, "rougeL": v, "n": 4, "answered": 4} for n, v in em.items()},
            "retrieval": {n: {"recall_at_k": 1.0, "k": 3} for n in names},
            "layers": {n: {"forward_passes_per_answer": 1.0, "not_in_kb": {"n": 0, "refused": 0}, "failure_layers": {}}
                       for n in names},
            "timings": {n: {"latency_s": 0.1} for n in names}, "position": position or {}}


def test_the_report_says_which_positions_had_probes_left_out():
    curve = {"positions": [1, 2, 3], "exact_match": [1.0, 1.0, 1.0], "n": 4, "not_read": [0, 0, 2], "scored": [4, 4, 2]}
    for lang, says in (("en", "1: 4/4, 2: 4/4, 3: 2/4"), ("zh", "1: 4/4，2: 4/4，3: 2/4")):
        (line,) = [s for s in C.findings(_card({"stitched": 0.5}, {"stitched": curve}), lang) if "`stitched`" in s
                   and ("Position probe" in s or "位置探针" in s)]
        assert says in line, line
    (plain,) = [s for s in C.findings(_card({"stitched": 0.5}, {"stitched": {**curve, "scored": None, "not_read": None}}))
                if "Position probe" in s]
    assert plain.endswith("3: 1.000 (flat: the same wherever the gold passage is).")  # nothing left out: as before


def test_the_recall_row_is_labelled_with_the_most_passages_an_answer_read():
    """The first answer's prompt held 1 passage, the others 3: the row said recall@1 over answers that read 3."""
    examples, _ = _examples(3)
    answers = [Answered("x", "x", [Passage(f"p{j}", "", "") for j in range(k)], 1, 1, 0.1) for k in (1, 3, 3)]
    _, recall = C.qa_scores(answers, examples)
    assert recall["k"] == 3 == C.recall_ks(answers)[-1]  # the evaluator's k for the same answers


def test_tied_lewis_variants_are_both_named_in_the_gap_sentence():
    (gap,) = [s for s in C.findings(_card({"rag_token": 0.5, "rag_sequence": 0.5, "stitched": 0.45})) if "stitched system's EM" in s]
    assert "better Lewis variant" not in gap and "`rag_token`" in gap and "`rag_sequence`" in gap, gap
    (zh,) = [s for s in C.findings(_card({"rag_token": 0.5, "rag_sequence": 0.5, "stitched": 0.45}), "zh") if "提示拼接系统的 EM" in s]
    assert "较好的" not in zh and "`rag_token`" in zh and "`rag_sequence`" in zh, zh
    (one,) = [s for s in C.findings(_card({"rag_token": 0.5, "rag_sequence": 0.4, "stitched": 0.45})) if "stitched system's EM" in s]
    assert one.startswith("- The stitched system's EM is -0.050 from the better Lewis variant (`rag_token`)"), one  # as before
