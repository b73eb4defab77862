"""citation_quality(convention="alce") against ALCE's eval.py (princeton-nlp/ALCE, `compute_autoais`).

ALCE, per answer: each sentence's citations are read in order with repeats kept; a sentence with
none, or with any id past the document list, is not entailed and adds no citation; otherwise the
first three are kept, counted, and their documents joined must entail the sentence (recall). Among
a supported sentence's several citations, one is irrelevant iff its document alone does not entail
the sentence and the list less its first copy still does; every other citation of a supported
sentence is precise. recall = entailed sentences / sentences; precision = precise / counted
citations, 0 when none was counted; an answer without sentences is skipped.

Cases, each with ALCE's numbers worked out in a comment: a sentence without citation, nothing cited
at all (precision 0 against lewisrag's NaN), four and more citations (the cap of three), repeated
ids (three ways), out-of-range ids (alone and past the cap), a needed vs an unneeded citation, two
jointly needed ones, an undecided verdict, an answer without statements, an unknown convention.
Both conventions agree on the one-to-three-distinct-in-range cases and differ on the others; two
property tests check "alce" against a line-by-line transcription of ALCE's loop and the agreement
of the conventions where they should agree.

The judge is deterministic: a premise supports a statement iff it contains every word of it, and
the documents are single letters, so every verdict can be checked by hand.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lewisrag.eval.judges import FunctionJudge
from lewisrag.eval.metrics import citation_quality, citation_quality_detail

DOCS = {"1": "A", "2": "B", "3": "C", "4": "D", "5": "A B"}


def words_in(premise: str, hypothesis: str) -> bool:
    return set(hypothesis.split()) <= set(premise.split())


JUDGE = FunctionJudge(words_in)


def both(statements, docs=DOCS, judge=JUDGE) -> tuple[dict, dict]:
    return (citation_quality(statements, docs, judge, convention="alce"),
            citation_quality(statements, docs, judge, convention="lewisrag"))


def same(a: dict, b: dict) -> bool:
    return all(a[k] == pytest.approx(b[k], nan_ok=True) for k in ("recall", "precision"))


def test_sentence_without_citation_agree():
    # ALCE: "A"[1] entailed, 1 citation precise; "B" has no citation: not entailed, counts nothing.
    # recall 1/2, precision 1/1.
    alce, ours = both([("A", ["1"]), ("B", [])])
    assert alce == {"recall": 0.5, "precision": 1.0} and same(alce, ours)


def test_nothing_cited_precision_is_0_in_alce_nan_in_lewisrag():
    # ALCE: no sentence cites anything: recall 0/2, total_citations 0 -> precision 0 (not NaN).
    alce, ours = both([("A", []), ("B", [])])
    assert alce == {"recall": 0.0, "precision": 0.0}
    assert ours["recall"] == 0.0 and math.isnan(ours["precision"])


def test_only_out_of_range_citations_precision_0_in_both():
    # ALCE: [9] past the list: not entailed, no citation counted -> recall 0, precision 0 (none counted).
    # lewisrag: [9] counts as one wrong citation -> 0/1: the same numbers for another reason.
    alce, ours = both([("A", ["9"])])
    assert alce == ours == {"recall": 0.0, "precision": 0.0}


def test_fourth_citation_is_not_read():
    # ALCE reads [1][2][3] of [1][2][3][4]: "A\nB\nC" does not entail D -> recall 0; 3 citations
    # counted, none precise -> precision 0/3.
    # lewisrag judges all four: supported; 1, 2, 3 each fail alone while the rest still entails
    # -> irrelevant; 4 alone entails -> precise: recall 1, precision 1/4.
    alce, ours = both([("D", ["1", "2", "3", "4"])])
    assert alce == {"recall": 0.0, "precision": 0.0}
    assert ours == {"recall": 1.0, "precision": 0.25}
    assert citation_quality_detail([("D", ["1", "2", "3", "4"])], DOCS, JUDGE, "alce")["statements"][0]["read"] == ["1", "2", "3"]


def test_citations_past_the_third_are_in_no_score():
    # ALCE reads [1][2][3] of [1][2][3][4][5]: "A\nB\nC" entails A; 1 alone entails: precise; 2 and 3
    # fail alone and [1][3] / [1][2] still entail: irrelevant. recall 1, precision 1/3.
    # lewisrag: all five; 1 and 5 entail alone, 2, 3, 4 irrelevant: precision 2/5.
    alce, ours = both([("A", ["1", "2", "3", "4", "5"])])
    assert alce == {"recall": 1.0, "precision": pytest.approx(1 / 3)}
    assert ours == {"recall": 1.0, "precision": pytest.approx(2 / 5)}


def test_out_of_range_id_past_the_cap_still_rejects():
    # ALCE checks the range over every citation before it keeps three: [9] in fourth place rejects
    # the sentence unjudged; nothing counted -> recall 0, precision 0. lewisrag: 0 and 0/4.
    alce, ours = both([("A", ["1", "2", "3", "9"])])
    assert alce == ours == {"recall": 0.0, "precision": 0.0}
    detail = citation_quality_detail([("A", ["1", "2", "3", "9"])], DOCS, JUDGE, "alce")["statements"][0]
    assert detail["read"] == [] and detail["supported"] is False and "9" in detail["reason"]


def test_out_of_range_citations_leave_precision_in_alce_only():
    # ALCE: "A"[1] entailed and precise; "B"[2][9] rejected, its citations not counted.
    # recall 1/2, precision 1/1. lewisrag counts [2] and [9] as wrong: precision 1/3.
    alce, ours = both([("A", ["1"]), ("B", ["2", "9"])])
    assert alce == {"recall": 0.5, "precision": 1.0}
    assert ours == {"recall": 0.5, "precision": pytest.approx(1 / 3)}


def test_repeated_needed_id_is_irrelevant_in_alce():
    # ALCE reads [1][1][2] for "A B": "A\nA\nB" entails. First [1]: "A" alone does not entail "A B";
    # less its first copy, [1][2] = "A\nB" still entails -> irrelevant. Second [1]: the same. [2]:
    # "B" alone does not; [1][1] = "A\nA" does not -> precise. recall 1, precision 1/3.
    # lewisrag counts [1] once: [1][2], each needed -> precision 2/2.
    statements = [("A B", ["1", "1", "2"])]
    alce, ours = both(statements)
    assert alce == {"recall": 1.0, "precision": pytest.approx(1 / 3)}
    assert ours == {"recall": 1.0, "precision": 1.0}
    assert citation_quality_detail(statements, DOCS, JUDGE, "alce")["statements"][0]["irrelevant"] == ["1", "1"]


def test_repeated_unneeded_id_counts_twice():
    # ALCE reads [1][2][1] for "A": "A\nB\nA" entails. [1] alone entails: precise (twice). [2] alone
    # does not; [1][1] still entails -> irrelevant. recall 1, precision 2/3.
    # lewisrag: [1][2], [2] irrelevant -> precision 1/2.
    alce, ours = both([("A", ["1", "2", "1"])])
    assert alce == {"recall": 1.0, "precision": pytest.approx(2 / 3)}
    assert ours == {"recall": 1.0, "precision": 0.5}


def test_repeated_sufficient_id_agrees():
    # ALCE reads [1][1] for "A": joint entails, each copy entails alone -> 2/2. lewisrag: [1] -> 1/1.
    alce, ours = both([("A", ["1", "1"])])
    assert alce == {"recall": 1.0, "precision": 1.0} and same(alce, ours)


def test_needed_and_unneeded_citation_agree():
    # ALCE: "A"[1][2] entailed; [1] alone entails: precise; [2] alone does not and [1] still
    # entails: irrelevant. recall 1, precision 1/2.
    alce, ours = both([("A", ["1", "2"])])
    assert alce == {"recall": 1.0, "precision": 0.5} and same(alce, ours)
    assert citation_quality_detail([("A", ["1", "2"])], DOCS, JUDGE, "alce")["statements"][0]["irrelevant"] == ["2"]


def test_jointly_needed_citations_agree():
    # ALCE: "A B"[1][2] entailed; neither alone entails, neither without the other does: both
    # precise. "C"[3] entailed, precise. "D"[1] not entailed: 1 citation counted, not precise.
    # recall 2/3, precision 3/4.
    alce, ours = both([("A B", ["1", "2"]), ("C", ["3"]), ("D", ["1"])])
    assert alce == {"recall": pytest.approx(2 / 3), "precision": 0.75} and same(alce, ours)


def test_undecided_verdict_is_not_entailed_in_alce():
    # ALCE's NLI answers 1 only on the output "1": an undecided verdict is "not entailed". "A"[1]:
    # the judge gives None -> recall 0, 1 citation counted, not precise -> precision 0.
    # lewisrag leaves the verdict out: both NaN.
    undecided = FunctionJudge(lambda p, h: None)
    alce, ours = both([("A", ["1"])], judge=undecided)
    assert alce == {"recall": 0.0, "precision": 0.0}
    assert math.isnan(ours["recall"]) and math.isnan(ours["precision"])
    assert citation_quality_detail([("A", ["1"])], DOCS, undecided, "alce")["statements"][0]["undecided"] == 1


def test_no_statements_is_nan_in_both():
    # ALCE skips an answer without sentences (`continue`): it enters neither mean; NaN enters none here.
    alce, ours = both([])
    assert all(math.isnan(v) for v in (*alce.values(), *ours.values()))


def test_unknown_convention_is_an_error():
    with pytest.raises(ValueError, match="convention"):
        citation_quality([("A", ["1"])], DOCS, JUDGE, convention="ragas")


class Counting:
    def __init__(self):
        self.calls = 0

    def judge(self, pairs):
        self.calls += 1
        return JUDGE.judge(pairs)


def test_alce_batches_judge_calls():
    judge = Counting()
    citation_quality([("A", ["1", "2"]), ("A B", ["1", "1", "2"]), ("D", ["4"])], DOCS, judge, convention="alce")
    assert judge.calls == 3  # joint, each citation alone, leave-one-out


def compute_autoais_one_answer(statements, docs, entails, at_most_citations=3):
    """ALCE's compute_autoais loop for one answer, transcribed line by line (ids are docs' keys, so
    "past the document list" is "not a key"); the oracle for convention="alce"."""
    if not statements:
        return math.nan, math.nan
    entail = entail_prec = total_citations = 0
    for text, cited in statements:
        ref = list(cited)
        if len(ref) == 0:
            joint_entail = 0
        elif any(r not in docs for r in ref):
            joint_entail = 0
        else:
            ref = ref[:at_most_citations]
            total_citations += len(ref)
            joint_entail = int(entails("\n".join(docs[r] for r in ref), text))
        entail += joint_entail
        if joint_entail and len(ref) > 1:
            for psgs_id in ref:
                if entails(docs[psgs_id], text):
                    entail_prec += 1
                else:
                    subset_exclude = list(ref)
                    subset_exclude.remove(psgs_id)
                    if not entails("\n".join(docs[p] for p in subset_exclude), text):
                        entail_prec += 1
        else:
            entail_prec += joint_entail
    return entail / len(statements), (entail_prec / total_citations if total_citations > 0 else 0)


STATEMENTS = st.lists(
    st.tuples(st.sampled_from(["A", "B", "D", "A B", "A C"]),
              st.lists(st.sampled_from(["1", "2", "3", "4", "5", "9"]), max_size=5)),
    max_size=4)


@settings(max_examples=300, deadline=None)
@given(STATEMENTS)
def test_alce_equals_the_transcribed_loop(statements):
    got = citation_quality(statements, DOCS, JUDGE, convention="alce")
    want = compute_autoais_one_answer(statements, DOCS, words_in)
    assert got["recall"] == pytest.approx(want[0], nan_ok=True)
    assert got["precision"] == pytest.approx(want[1], nan_ok=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["A", "B", "D", "A B", "A C"]),
                          st.lists(st.sampled_from(["1", "2", "3", "4", "5"]), min_size=1, max_size=3, unique=True)),
                min_size=1, max_size=4))
def test_conventions_agree_on_one_to_three_distinct_in_range_citations(statements):
    alce, ours = both(statements)
    assert same(alce, ours)
