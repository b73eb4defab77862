"""The evaluator's public functions refuse what their contract does not take, naming the argument,
instead of casting it into a plausible number (a str read as a list of its characters, NaN read as
a right answer, "no" read as supported); the inputs they do take give the numbers they always gave."""

import math

import numpy as np
import pytest

from lewisrag.eval import metrics, stats
from lewisrag.eval.judges import FunctionJudge
from lewisrag.scoring import qa

CONTAINS = FunctionJudge(lambda premise, hypothesis: hypothesis in premise)


# --- stats.mcnemar: every entry a right/wrong mark -------------------------------------------------

@pytest.mark.parametrize("bad", [math.nan, "False", None, 0.4, 2])
def test_mcnemar_refuses_entries_that_are_no_mark(bad):
    # NaN counted as right: [nan] * 6 against [False] * 6 was "significant", p = 0.03125
    with pytest.raises(ValueError, match=r"a_correct\[0\]: expected True or False, got"):
        stats.mcnemar([bad] * 6, [False] * 6)
    with pytest.raises(ValueError, match=r"b_correct\[5\]"):
        stats.mcnemar([True] * 6, [False] * 5 + [bad])


def test_mcnemar_refuses_a_string():
    with pytest.raises(ValueError, match="a_correct: expected a list of True or False, got the string 'TF'"):
        stats.mcnemar("TF", "FF")


@pytest.mark.parametrize("fn", [stats.mcnemar, stats.paired_bootstrap, stats.cohen_kappa])
def test_paired_statistics_refuse_a_generator_naming_it(fn):
    # a generator failed inside len() with "object of type 'generator' has no len()", naming no argument
    with pytest.raises(ValueError, match=r"the first input must be a list or array, got generator \(wrap it in list\(\)\)"):
        fn((x for x in [True, False]), [True, False])


def test_mcnemar_takes_bools_numpy_bools_and_ones_and_zeros():
    a, b = [True] * 5 + [False] * 5, [False] * 10
    want = stats.mcnemar(a, b)
    assert (want["b"], want["c"], want["pvalue"]) == (5, 0, 0.0625)
    assert stats.mcnemar(np.array(a), np.array(b)) == want
    assert stats.mcnemar([int(x) for x in a], [int(x) for x in b]) == want
    assert stats.mcnemar(np.array(a, dtype=int), np.array(b, dtype=int)) == want


# --- stats.proportion_interval: whole counts -------------------------------------------------------

@pytest.mark.parametrize("k, n, name", [(1.5, 3, "k"), (1, math.inf, "n"), (math.nan, 3, "k"), (True, 3, "k"),
                                        (1, 3.0, "n"), ("1", 3, "k")])
def test_proportion_interval_refuses_counts_that_are_not_integers(k, n, name):
    # (1, inf) gave (0.0, 0.0) and (1.5, 3) an interval
    with pytest.raises(ValueError, match=rf"^{name}: expected an integer count"):
        stats.proportion_interval(k, n)


def test_proportion_interval_takes_numpy_integers():
    assert stats.proportion_interval(np.int64(3), np.int64(100)) == stats.proportion_interval(3, 100)


# --- stats.score_distribution: ±inf is no score ----------------------------------------------------

@pytest.mark.parametrize("bad", [math.inf, -math.inf])
def test_score_distribution_refuses_infinite_scores(bad):
    # it failed inside np.histogram: "supplied range of [0.0, inf] is not finite"
    with pytest.raises(ValueError, match=r"^scores\[1\]: expected a finite number, None or NaN"):
        stats.score_distribution([0.5, bad])


def test_score_distribution_still_counts_nan_and_none_apart():
    d = stats.score_distribution([1.0, None, math.nan, 0.0])
    assert (d["n"], d["nan"], d["mean"]) == (2, 2, 0.5)


# --- scoring.qa: answers as a list, never used up --------------------------------------------------

@pytest.mark.parametrize("metric", [qa.exact_match, qa.token_f1, qa.rouge_l, qa.bleu_1, qa.regex_match])
def test_qa_metrics_refuse_an_iterator_of_answers(metric):
    # exact_match("Paris", a generator) was 0.0 where the list gives 1.0: the check used the generator up
    with pytest.raises(ValueError, match="must be a non-empty list of strings"):
        metric("Paris", (a for a in ["Paris"]))
    with pytest.raises(ValueError, match="must be a non-empty list of strings"):
        metric("Paris", iter(["Paris"]))


def test_qa_metrics_take_lists_and_tuples_alike():
    for metric in (qa.exact_match, qa.token_f1, qa.rouge_l):
        assert metric("Paris", ["Paris"]) == metric("Paris", ("Paris",)) == 1.0


# --- metrics: a str is no list ---------------------------------------------------------------------

def test_faithfulness_refuses_a_string_of_statements_or_contexts():
    with pytest.raises(TypeError, match="^statements: expected a list of strings, got 'xyz'"):
        metrics.faithfulness("xyz", ["x"], CONTAINS)  # was 1/3: the letters x, y, z
    with pytest.raises(TypeError, match="^contexts: expected a list of strings, got 'x y'"):
        metrics.faithfulness(["x y"], "x y", CONTAINS)  # was 0.0: the contexts "x", " ", "y"
    with pytest.raises(TypeError, match=r"^statements\[1\]: expected a string, got 3"):
        metrics.faithfulness(["x", 3], ["x"], CONTAINS)


def test_context_recall_and_completeness_name_their_arguments():
    with pytest.raises(TypeError, match="^reference_statements: expected a list"):
        metrics.context_recall("ab", ["ab"], CONTAINS)
    with pytest.raises(TypeError, match="^answer: expected a string"):
        metrics.answer_completeness(["a"], ["a"], CONTAINS)


def test_citation_quality_refuses_strings_where_lists_go():
    with pytest.raises(TypeError, match=r"^statements\[0\]: expected a \(text, cited ids\) pair, got 'a1'"):
        metrics.citation_quality(["a1"], {"1": "a"}, CONTAINS)  # was recall 1, precision 1: "a" citing "1"
    with pytest.raises(TypeError, match=r"^statements\[0\]\[1\]: expected a list of strings, got '12'"):
        metrics.citation_quality([("a", "12")], {"1": "a", "2": "a"}, CONTAINS)  # cited "1" and "2"
    with pytest.raises(TypeError, match="^statements: expected a list"):
        metrics.citation_quality(("a", ["1"]).__iter__(), {"1": "a"}, CONTAINS)


def test_claim_diagnostics_refuses_a_string_of_claims():
    # "ab" was two response claims, "a" and "b"
    with pytest.raises(TypeError, match="^response_claims: expected a list of strings, got 'ab'"):
        metrics.claim_diagnostics("ab", ["a"], "ab", "a", ["ab"], CONTAINS)
    with pytest.raises(TypeError, match="^contexts: expected a list of strings, got 'abc'"):
        metrics.claim_diagnostics(["a"], ["a"], "a", "a", "abc", CONTAINS)


def test_metrics_take_lists_and_tuples_alike():
    assert metrics.faithfulness(("x", "z"), ("x y",), CONTAINS) == 0.5
    assert metrics.faithfulness(["x", "z"], ["x y"], CONTAINS) == 0.5
    docs = {"1": "login returns 422", "3": "signup returns 422"}
    for convention in metrics.CONVENTIONS:
        got = metrics.citation_quality([("login returns 422", ("1", "3"))], docs, CONTAINS, convention)
        assert got == metrics.citation_quality([["login returns 422", ["1", "3"]]], docs, CONTAINS, convention)
        assert got == {"recall": 1.0, "precision": 0.5}


# --- citation ids and documents are strings --------------------------------------------------------

@pytest.mark.parametrize("convention", metrics.CONVENTIONS)
def test_citation_quality_refuses_ids_and_documents_that_are_not_strings(convention):
    # an int id failed in a join: "sequence item 0: expected str instance, int found"
    with pytest.raises(TypeError, match=r"^statements\[0\]\[1\]\[0\]: expected a string, got 1"):
        metrics.citation_quality([("a", [1])], {"1": "a"}, CONTAINS, convention)
    with pytest.raises(TypeError, match=r"^docs\['1'\]: expected a string, got None"):
        metrics.citation_quality([("a", ["1"])], {"1": None}, CONTAINS, convention)


# --- FunctionJudge: True, False or None ------------------------------------------------------------

@pytest.mark.parametrize("bad", ["no", 0.3, 2, [False]])
def test_function_judge_refuses_a_verdict_that_is_no_bool(bad):
    # bool("no") is True: faithfulness was 1.0
    with pytest.raises(TypeError, match=r"fn must return True, False or None, got"):
        metrics.faithfulness(["x"], ["y"], FunctionJudge(lambda p, h: bad))


def test_function_judge_takes_bools_numpy_bools_ones_zeros_and_none():
    pairs = [("ab", "a"), ("ab", "c")]
    assert [v.supported for v in FunctionJudge(lambda p, h: np.bool_(h in p)).judge(pairs)] == [True, False]
    assert [v.supported for v in FunctionJudge(lambda p, h: int(h in p)).judge(pairs)] == [True, False]  # ALCE's 1/0
    assert FunctionJudge(lambda p, h: None).judge([("a", "b")])[0].supported is None
