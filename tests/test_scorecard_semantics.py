"""What the compare scorecard and the reproduce report say is what their numbers show: recall@k per k
when the systems read different numbers of passages; forward passes that count the rescoring RAG-Token's
citations and RAG-Sequence's thorough decoding run; verdicts, ties, the 0.05 gap and the position probe's
shape decided on the numbers as printed; question sets whose answers did not change are counted."""

from __future__ import annotations

import doctest
import math
import types

import pytest

from lewisrag.data.records import Passage, QAExample
from lewisrag.experiments import compare as C
from lewisrag.experiments import report as R
from lewisrag.experiments import swap as S
from lewisrag.experiments import systems as Y
from lewisrag.eval.reports.i18n import messages

SYSTEMS = ("rag_token", "rag_sequence", "stitched")


def test_doctests():
    for module in (R, S, Y):  # compare's run in tests/test_compare.py
        assert doctest.testmod(module).failed == 0


def _card(em: dict, retrieval: dict | None = None, position: dict | None = None) -> dict:
    names = list(em)
    return {"qa": {n: {"exact_match": v, "f1": v, "rougeL": v, "n": 20, "answered": 20} for n, v in em.items()},
            "retrieval": retrieval or {n: {"recall_at_k": 0.9, "k": 3} for n in names},
            "layers": {n: {"citation_precision": None, "forward_passes_per_answer": 4.0, "tokens_per_answer": 40.0,
                           "failure_layers": {"none": 1}, "not_in_kb": {"n": 0, "refused": 0}} for n in names},
            "timings": {n: {"latency_s": 0.1} for n in names}, "position": position or {}}


# --- 1. recall@k: one row per k --------------------------------------------------------------------


def test_recall_has_a_row_per_k_when_the_systems_read_different_numbers_of_passages():
    """The small preset's Lewis models read K=5 passages, its stitched system k=3: one row labelled
    recall@k set recall@5 beside recall@3."""
    retrieval = {"rag_token": {"recall_at_k": 0.998, "k": 5}, "rag_sequence": {"recall_at_k": 0.997, "k": 5},
                 "stitched": {"recall_at_k": 0.995, "k": 3}}
    card = _card(dict.fromkeys(SYSTEMS, 0.9), retrieval)
    for lang in ("en", "zh"):
        names, rows = C.scorecard_rows(card, lang)
        recall = [r for r in rows if r[0].startswith("recall@")]
        assert recall == [["recall@3", None, None, 0.995], ["recall@5", 0.998, 0.997, None]], recall
    report = C.render_markdown(card)
    assert "| recall@3 | – | – | 0.995 |" in report and "| recall@5 | 0.998 | 0.997 | – |" in report
    assert "recall@k" not in report
    # one k for all: one row, as before
    same = C.scorecard_rows(_card(dict.fromkeys(SYSTEMS, 0.9)))[1]
    assert [r for r in same if r[0].startswith("recall@")] == [["recall@3", 0.9, 0.9, 0.9]]


# --- 2. forward passes count the rescoring --------------------------------------------------------


class _Tokenizer:
    """Enough of a generator tokenizer for `LewisSystem._decode`: 0 <s>, 1 <pad>, 2 </s>."""

    all_special_ids, pad_token_id = [0, 1, 2], 1

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(f"w{i}" for i in ids if i not in self.all_special_ids)


@pytest.fixture(scope="module")
def lewis(tmp_path_factory):
    """A tiny random RAG-Token and RAG-Sequence as `LewisSystem`s (K=3), ending answers at varied lengths."""
    from lewisrag.rag_model import RagModel
    from lewisrag.rag_model.testing import tiny_hf_rag

    out = {}
    for variant in ("token", "sequence"):
        path = tmp_path_factory.mktemp(f"tiny_{variant}")
        tiny_hf_rag(variant, seed=1, n_docs=3, eos_bias=2.0).save_pretrained(path)
        out[variant] = Y.LewisSystem(RagModel.from_hf_pretrained(path), types.SimpleNamespace(generator=_Tokenizer()),
                                     types.SimpleNamespace(passages=[]), max_length=10)
    return out


def _measured(monkeypatch):
    """Count what the decoder runs: encoder rows, decoding-step rows, teacher-forced (candidate, document) rows,
    and each question's hypotheses as RAG-Sequence's search left them."""
    from lewisrag.rag_model import bart_decoder, decoding

    seen: dict = {}
    encode, hidden, candidates = bart_decoder.GroupedBartDecoder.encode, bart_decoder.GroupedBartDecoder.hidden, decoding._candidates

    def counted_encode(self, ids, mask):
        seen["encoder"] += ids.shape[0]
        return encode(self, ids, mask)

    def counted_hidden(self, tokens, *args, **kwargs):  # tokens (rows, W or C, T)
        seen["steps" if tokens.shape[-1] == 1 else "forced"] += tokens.shape[0] * tokens.shape[1]
        return hidden(self, tokens, *args, **kwargs)

    def kept_candidates(hyps, b, per_question):
        full, unique, owners = candidates(hyps, b, per_question)
        seen["hypotheses"] += [f.tolist() for f in full]
        seen["distinct"] += [len(u) for u in unique]
        return full, unique, owners

    monkeypatch.setattr(bart_decoder.GroupedBartDecoder, "encode", counted_encode)
    monkeypatch.setattr(bart_decoder.GroupedBartDecoder, "hidden", counted_hidden)
    monkeypatch.setattr(decoding, "_candidates", kept_candidates)
    return seen


def _reset(seen: dict) -> dict:
    seen.update(encoder=0, steps=0, forced=0, hypotheses=[], distinct=[])
    return seen


def _one_question(seed: int):
    from lewisrag.rag_model.testing import tiny_batch

    ids, mask, scores, _ = tiny_batch(1, 3, 9, 4, 100, seed=seed)
    return ids, mask, scores, [[Passage(f"p{z}", "t", "x") for z in range(3)]]


def _tokens(seq: list[int]) -> int:
    return sum(x != _Tokenizer.pad_token_id for x in seq[1:])  # generated after the start token, the end included


def test_rag_token_passes_count_the_citation_pass_over_each_document(lewis, monkeypatch):
    """RAG-Token's implicit citations come from one more teacher-forced pass of the answer under each of
    the K documents (return_evidence=True); it ran, uncounted, beside K + K per token."""
    seen = _measured(monkeypatch)
    for seed in range(3):
        _reset(seen)
        [answer] = lewis["token"]._decode(*_one_question(seed))
        assert seen["forced"] == 3  # the answer under each of the K=3 documents
        assert answer.forward_passes == seen["encoder"] + seen["steps"] + seen["forced"], (seed, seen)


def test_rag_sequence_passes_count_every_candidate_rescored_under_every_document(lewis, monkeypatch):
    """Thorough decoding rescores each of the C distinct hypotheses under each of the K documents (C×K
    teacher-forced passes, the paper's §2.4 cost), after each document's own greedy search: RAG-Sequence
    was counted as K + K per token of its answer, the same as RAG-Token."""
    several, seen = 0, _measured(monkeypatch)
    for seed in range(4):
        _reset(seen)
        [answer] = lewis["sequence"]._decode(*_one_question(seed))
        [distinct], [hypotheses] = seen["distinct"], seen["hypotheses"]
        assert seen["forced"] == 3 * distinct
        assert answer.forward_passes == seen["encoder"] + sum(map(_tokens, hypotheses)) + seen["forced"], (seed, seen)
        several += distinct > 1
    assert several  # some question whose documents disagree: more than K rescoring passes


def test_rag_sequence_answers_as_the_default_decoding_does(lewis):
    """The scorecard asks for every document's hypothesis (to count the candidates); its answer and evidence
    stay those of plain `generate`."""
    from lewisrag.rag_model.implicit_citations import cited_answers
    from lewisrag.rag_model.testing import tiny_batch

    ids, mask, scores, _ = tiny_batch(4, 3, 9, 4, 100, seed=5)
    plain = lewis["sequence"].model.generate(ids, mask, scores, n_docs=3, num_beams=1, max_length=10, return_evidence=True)
    answers = lewis["sequence"]._decode(ids, mask, scores, [_one_question(0)[3][0]] * 4)
    tok = _Tokenizer()
    assert [a.text for a in answers] == [tok.decode(s) for s in plain.sequences.tolist()]
    assert [a.response for a in answers] == cited_answers(plain, tok, [["1", "2", "3"]] * 4, "sequence")
    assert len({a.text for a in answers}) > 1  # not one answer for every question


def test_the_cost_sentence_says_what_it_counts():
    cost = {lang: C.findings(_card({"rag_token": 0.5, "stitched": 0.5}), lang)[-1] for lang in ("en", "zh")}
    assert cost["en"].startswith("- Generator forward passes per answer: `rag_token` 4.000, `stitched` 4.000. Each pass reads one input")
    assert "teacher-forced" in cost["en"] and "every distinct candidate under every passage" in cost["en"]
    assert cost["zh"].startswith("- 每个回答的生成器前向次数：`rag_token` 4.000，`stitched` 4.000。每次前向读一个输入")
    assert "教师强制" in cost["zh"] and "每个不同的候选" in cost["zh"]


# --- 3. the hot swap's verdict, as printed --------------------------------------------------------


def _swap_sentence(aa, ab, ba, bb, lang="en") -> str:
    ku = {"rag_token": {"index_a": {"questions_a": aa, "questions_b": ab}, "index_b": {"questions_a": ba, "questions_b": bb}}}
    return R._swap({"knowledge_update": ku}, messages(lang))[-2]


def test_the_swap_verdict_is_decided_on_the_printed_percentages_and_the_targets():
    """`matched > crossed` on raw floats: 0.901 against 0.900 read "follows the index: 90% ... against 90%",
    and 0.2% against 0% (no knowledge update to speak of) did too."""
    same = _swap_sentence(0.9, 0.9, 0.9, 0.902)
    assert "RAG-Token does not follow the index (the same either way): 90% on matched index and questions against 90% " \
           "on mismatched ones" in same, same
    assert "does not follow the index (the same either way): 0% on matched" in _swap_sentence(0.004, 0.0, 0.0, 0.0)
    assert "RAG-Token follows the index: 97% on matched" in _swap_sentence(0.967, 0.0, 0.0, 0.971)  # the README's run
    assert "follows the index in part: 69% on matched index and questions against 8%" in _swap_sentence(0.7, 0.12, 0.04, 0.68)
    assert "RAG-Token does not follow the index: 10% on matched" in _swap_sentence(0.1, 0.6, 0.6, 0.1)
    assert "没有跟着索引走（匹配与否都一样）：索引和问题匹配时 90%，错配时 90%" in _swap_sentence(0.9, 0.9, 0.9, 0.902, "zh")
    assert "部分跟着索引走" in _swap_sentence(0.7, 0.12, 0.04, 0.68, "zh")


# --- 4.-6. the compare findings, as printed -------------------------------------------------------


def test_exact_match_ties_are_decided_as_printed():
    """0.9614 and 0.9606 both print 0.961: "`rag_token` is best with 0.961" beside Table 1's shared highest."""
    first = C.findings(_card({"rag_token": 0.9614, "rag_sequence": 0.9606, "stitched": 0.93}))[0]
    assert first.endswith("`rag_token`, `rag_sequence` tie at 0.961."), first
    first = C.findings(_card({"rag_token": 0.9614, "rag_sequence": 0.9596, "stitched": 0.93}))[0]
    assert first.endswith("`rag_token` is best with 0.961."), first


@pytest.mark.parametrize(("lewis_em", "stitched_em", "close"), [
    (1.0, 0.95, True),  # 20/20 against 19/20: -0.05000000000000004 unrounded
    (0.9, 0.85, True),
    (0.9614, 0.9110, True),  # -0.0504 prints -0.050
    (0.9614, 0.9105, False),  # -0.0509 prints -0.051
    (0.5, 0.56, False),
])
def test_the_stitched_gap_is_judged_as_printed(lewis_em, stitched_em, close):
    gap = C.findings(_card({"rag_token": lewis_em, "stitched": stitched_em}))[1]
    assert gap.endswith("within 0.05.") == close and gap.endswith("apart; see the layers below for where they differ.") != close, gap


def _position(name: str, ems: list) -> str:
    curve = {name: {"positions": list(range(1, len(ems) + 1)), "exact_match": ems, "n": 20}}
    return next(line for line in C.findings(_card({name: 0.5}, position=curve)) if "Position probe" in line)


def test_the_position_shape_comes_from_each_curve_not_the_systems_name():
    """Any system not named `stitched` was "flat: the marginal over documents ignores their order",
    whatever its curve."""
    assert _position("rag_token", [0.95, 0.95, 0.95]).endswith("3: 0.950 (flat: the marginal over documents ignores their order).")
    uneven = _position("rag_token", [0.95, 0.4, 0.1])
    assert "flat" not in uneven and "it answers from whatever passage comes first" in uneven, uneven
    assert _position("rag_sequence", [0.8, 0.6, 0.8]).endswith("lost in the middle.")
    assert _position("rag_sequence", [0.8, 0.75, 0.8]).endswith("3: 0.800.")
    flat = _position("stitched", [0.5, 0.5, 0.5])
    assert flat.endswith("(flat: the same wherever the gold passage is).") and "marginal" not in flat, flat
    assert _position("stitched", [0.9, 0.4, 0.1]).endswith("not on choosing among the passages.")  # as before


def test_a_position_with_no_answer_scored_says_so():
    """Every answer at a position failed (an outside generator): its EM is NaN (null once in JSON), printed "nan"."""
    line = _position("stitched", [0.9, math.nan, 0.0])
    assert "1: 0.900, 2: no answer scored, 3: 0.000 — it answers from whatever passage comes first" in line, line
    assert "2: no answer scored, 3: 0.000 (flat" in _position("stitched", [0.0, None, 0.0])
    assert _position("stitched", [math.nan, math.nan]).endswith("1: no answer scored, 2: no answer scored.")
    assert "2: 没有可计分的回答" in next(line for line in C.findings(
        _card({"stitched": 0.5}, position={"stitched": {"positions": [1, 2], "exact_match": [0.9, math.nan], "n": 2}}), "zh")
        if "位置探针" in line)


# --- 7. question sets with unchanged answers ------------------------------------------------------


def _sets(answers_b: list[str]) -> list[list]:
    qa = [QAExample(f"q{i}", f"Who leads X{i}?", [f"Leader {i}"]) for i in range(10)]
    qb = [QAExample(f"q{i}", f"Who leads X{i}?", [a]) for i, a in enumerate(answers_b)]
    return [qa, qb]


def test_question_sets_whose_answers_did_not_change_are_counted():
    """Only two sets identical to the character were noted: 9 of 10 unchanged answers, or the same answers
    written in another case, inflated the mismatched cells in silence."""
    notes = S.overlap_notes([], [], ["questions_a", "questions_b"], _sets(["New Leader"] + [f"Leader {i}" for i in range(1, 10)]))
    assert notes == ["question sets questions_a and questions_b: 9 of the 10 questions of questions_a are asked in "
                     "questions_b with an answer exact match counts as the same in both (an unchanged fact, or one "
                     "written otherwise: case, punctuation, articles): they score alike whichever index the model "
                     "reads, and raise the mismatched cells"]
    notes = S.overlap_notes([], [], ["a", "b"], _sets([f"the leader {i}." for i in range(10)]))
    assert len(notes) == 1 and ": 10 of the 10 questions of a are asked in b" in notes[0]
    identical = S.overlap_notes([], [], ["a", "b"], _sets([f"Leader {i}" for i in range(10)]))
    assert len(identical) == 1 and identical[0].startswith("question sets a and b ask the same 10 questions")
    assert S.overlap_notes([], [], ["a", "b"], _sets([f"New {i}" for i in range(10)])) == []


def test_unchanged_answers_pairs_questions_by_text_and_reads_patterns_as_exact_match_does():
    a = [QAExample("1", "Who leads X?", ["Ana Kel"]), QAExample("2", "Who leads Y?", ["Bo Ren"])]
    assert S.unchanged_answers(a, [QAExample("9", "Who leads X?", ["ana kel"])]) == 1  # ids need not agree
    assert S.unchanged_answers(a, [QAExample("1", "Who led X?", ["Ana Kel"])]) == 0  # another question
    pattern = QAExample("1", "Who leads X?", ["(A|a)na Kel"], answer_match="regex")
    assert S.unchanged_answers(a, [pattern]) == 1 and S.unchanged_answers([pattern], a) == 1
    assert S.unchanged_answers([pattern], [QAExample("1", "Who leads X?", ["Cy Lo"])]) == 0
