"""The position probe's counts behind each point, and `lewisrag swap`'s refusals: when they come and what
they name.

A probe point whose EM rested on 1 answer of 4 (3 failed) was printed as if over all 4 and decided a
"lost in the middle" verdict; swap refused a foreign index only after loading every model and copying
every Flat index to the GPU; a question the encoder reads nothing of was refused without its line; and
an hf: question set was labelled as cut at the first dot of its config."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from conftest import write_jsonl
from lewisrag.data.io import InputError
from lewisrag.data.records import Passage, QAExample
from lewisrag.experiments import compare as C
from lewisrag.experiments.position import position_probe
from test_rag_train import rag_inputs, trained_rag  # noqa: F401  (session fixtures)
from test_swap import _foreign


def _probe_inputs(n: int = 4):
    examples = [QAExample(f"q{i}", f"Who leads {i}?", [f"Ana{i}"]) for i in range(n)]
    gold = [Passage(f"g{i}", "T", f"Ana{i} leads.") for i in range(n)]
    tops = [[Passage(f"o{i}{j}", "T", "x") for j in range(3)] for i in range(n)]
    return examples, gold, tops


class FailingChat:
    """An outside generator whose prompt holds every passage; with the gold passage first, 3 of its 4
    answers fail (a chat error, an answer cut at max_new_tokens); with it second, 3 of 4 are wrong."""

    def answer_from(self, questions, passages):
        out = []
        for q, ps in zip(questions, passages):
            at = next(n for n, p in enumerate(ps, 1) if p.id.startswith("g"))
            i = int(q.split()[2][:-1])
            failure = "cut at max_new_tokens" if at == 1 and i < 3 else None
            out.append(SimpleNamespace(text=f"Ana{i}" if at != 2 or i == 0 else "wrong", failure=failure,
                                       passages=list(ps)))
        return out


def _card(curve: dict) -> dict:
    return {"qa": {"stitched": {"exact_match": 0.5, "f1": 0.5, "rougeL": 0.5, "n": 4, "answered": 4}},
            "retrieval": {}, "layers": {"stitched": {"forward_passes_per_answer": 1.0}}, "position": {"stitched": curve}}


def _position_line(curve: dict, lang: str = "en") -> str:
    (line,) = [s for s in C.findings(_card(curve), lang) if "`stitched`" in s and ("Position probe" in s or "位置探针" in s)]
    return line


def test_failed_answers_are_counted_per_position_and_a_thin_point_gives_no_shape():
    """EM [1, 0.25, 1] with position 1 over 1 answer of 4 read as "lost in the middle"; the curve now says
    each position's n and failures, and the findings line prints them and reads no shape."""
    examples, gold, tops = _probe_inputs()
    curve = C._reading_probe(FailingChat(), examples, tops, gold, 2, None)
    assert curve["exact_match"] == [1.0, 0.25, 1.0] and curve["n"] == 4
    assert curve["scored"] == [1, 4, 4] and curve["failed"] == [3, 0, 0] and "not_read" not in curve
    assert C.position_shape("stitched", curve["exact_match"]) == "cmp.pos.middle"  # the numbers alone say so
    assert C.thin_positions(curve) == [1]
    line = _position_line(curve)
    assert "lost in the middle" not in line and "no shape is read" in line and "at position 1)" in line, line
    assert "(1: 1/4, 2: 4/4, 3: 4/4)" in line and "answer failed" in line, line
    zh = _position_line(curve, "zh")
    assert "lost in the middle" not in zh and "看不出形状" in zh and "1: 1/4，2: 4/4，3: 4/4" in zh, zh


def test_a_point_on_half_its_probes_still_reads_a_shape():
    """The rule: fewer than half; 2 of 4 is enough, and an unscored position (NaN) is left out as before."""
    curve = {"positions": [1, 2, 3], "exact_match": [1.0, 0.25, 1.0], "n": 4, "scored": [2, 4, 4], "failed": [2, 0, 0]}
    assert C.thin_positions(curve) == []
    assert "lost in the middle" in _position_line(curve)
    unscored = {**curve, "exact_match": [1.0, 0.25, math.nan], "scored": [4, 4, 0], "failed": [0, 0, 4]}
    assert C.thin_positions(unscored) == []


def test_failures_and_unread_probes_are_told_apart():
    curve = {"positions": [1, 2, 3], "exact_match": [1.0, 1.0, 1.0], "n": 4, "scored": [3, 4, 2],
             "failed": [1, 0, 0], "not_read": [0, 0, 2]}
    line = _position_line(curve)
    assert "answer failed" in line and "could not hold the gold passage" in line and "(1: 3/4, 2: 4/4, 3: 2/4)" in line


def test_position_probe_counts_each_positions_answers_when_some_fail():
    examples, gold, tops = _probe_inputs()

    def answer(questions, passages):  # the last question's answer fails wherever its gold passage is
        return [None if q.endswith("3?") else ps[0].text.split()[0] for q, ps in zip(questions, passages)]

    curve = position_probe(examples, tops, gold, answer)
    assert curve["exact_match"] == [1.0, 0.0, 0.0] and curve["scored"] == [3, 3, 3] and curve["failed"] == [1, 1, 1]
    assert set(position_probe(examples, tops, gold, lambda qs, ps: ["x"] * len(qs))) == {"positions", "exact_match", "n"}


def test_a_foreign_index_is_refused_before_any_model_loads_or_index_is_placed(rag_inputs, trained_rag, tmp_path,  # noqa: F811
                                                                                monkeypatch):
    from lewisrag.experiments import swap

    def too_soon(*args, **kw):
        raise AssertionError("a model loaded or an index placed before the pairing was checked")

    monkeypatch.setattr(swap, "load_trained", too_soon)
    monkeypatch.setattr(swap, "place_search", too_soon)
    foreign = _foreign(rag_inputs["index"], tmp_path)
    with pytest.raises(InputError, match="--swap") as e:
        swap.swap_matrix([trained_rag], [rag_inputs["index"], foreign], [rag_inputs["world"] / "questions_a.jsonl"])
    assert e.value.field == "encoder.ctx_fingerprint" and e.value.source == str(foreign)


def test_the_pairing_is_read_from_the_settings_as_loading_gives_it(rag_inputs, trained_rag, tmp_path):  # noqa: F811
    from lewisrag.experiments.swap import paired_with
    from lewisrag.index.dense import DenseIndex
    from lewisrag.rag_model.checkpoints import EXPORT_RECORD

    assert paired_with(trained_rag / "final") == DenseIndex.load(rag_inputs["index"]).ctx_fingerprint
    for record, paired in (({"paired_fingerprint": "abc"}, "abc"), ({"index_fingerprint": "def"}, "def"),
                           ({"paired_fingerprint": None, "index_fingerprint": "def"}, None), ({}, None)):
        (tmp_path / EXPORT_RECORD).write_text(json.dumps(record))
        assert paired_with(tmp_path) == paired, record
    (tmp_path / EXPORT_RECORD).unlink()
    assert paired_with(tmp_path) is None  # a transformers RAG folder from elsewhere names no pairing


def test_a_question_the_encoder_reads_nothing_of_is_named_by_its_line(rag_inputs, trained_rag, tmp_path):  # noqa: F811
    from lewisrag.experiments.swap import swap_matrix

    path = write_jsonl(tmp_path / "q.jsonl", [{"id": "fine", "question": "Who leads Valdoria?", "answers": ["x"]},
                                              {"id": "long", "question": "Why?", "answers": ["x"], "kind": "long"},
                                              {"id": "blank", "question": "\u200b\u0007", "answers": ["x"]}])
    with pytest.raises(InputError, match="question 'blank'") as e:
        swap_matrix([trained_rag], [rag_inputs["index"]], [path])
    assert (e.value.source, e.value.line, e.value.field) == (str(path), 3, "question")
    assert str(e.value).startswith(f"{path}:3: field 'question': ")


def test_an_hf_question_set_keeps_its_config_whole():
    from lewisrag.experiments.swap import labels

    assert labels(["hf:trivia_qa:rc.nocontext:validation", "x/questions_b.jsonl"], stem=True) == \
        ["hf:trivia_qa:rc.nocontext:validation", "questions_b"]
