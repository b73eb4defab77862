"""lewisrag layered metrics as an evaluate module: faithfulness and ALCE citation quality.

Inputs: `predictions` (answers, with [n] citations naming the n-th context) and `contexts` (the
retrieved passages of each answer). Optional compute arguments: `judge` (a judge spec such as
"lexical", "nli:PATH", "labels:FILE", or a judge object; default "lexical"),
`reference_statements` (one list per answer) for context recall and answer completeness, and
`questions` (one string per answer).
Answers are split with lewisrag's sentence splitter. NaN scores (faithfulness of an answer without
statements, citation precision of one that cites nothing; an uncited answer's citation recall is 0)
are left out of the means and counted in `<metric>_nan`. A verdict the judge could not give (a
labels file lacking the pair, an LLM reply it cannot read) is left out of its score, as in
`lewisrag eval answers`, and counted in `<metric>_undecided`: statements for faithfulness, context
recall, completeness and citation recall, citations for citation precision. A sentence that only declines and cites
nothing ("The documents do not say.") is excused from citing, as in `lewisrag eval answers`: it is
no uncited statement, and an answer of such sentences alone has NaN citation quality. An answer
that refuses as a whole has NaN faithfulness (counted in `faithfulness_nan`), as there: it asserts
nothing, so neither a 0 nor a 1 may enter the mean. A number the
question states is no claim of the sentence's own ("文档没有说明 422 的含义。" asked "登录返回 422
是什么意思？" only declines): pass `questions` for the numbers `lewisrag eval answers` gives, which
reads each record's question; without them such a sentence must cite.
"""

import math

import datasets
import evaluate

from lewisrag.eval import judges, metrics
from lewisrag.eval.refusals import asserts_nothing, is_refusal
from lewisrag.eval.evaluator import answer_text
from lewisrag.eval.statements import split_sentences
from lewisrag.scoring.aggregate import mean

_DESCRIPTION = "Faithfulness (ragas), citation recall and precision (ALCE), context recall and completeness."
_KWARGS_DESCRIPTION = """
Args:
    predictions: list of answers with [n] citations.
    contexts: list of lists of retrieved passages, one list per answer ([1] is the first passage).
    judge: "lexical" (default), "nli:PATH", "labels:FILE" or a judge object.
    reference_statements: optional list of lists of reference statements, one list per answer
        (a length or entry that does not fit is a ValueError, as is a contexts entry that is not a list).
    questions: optional list of the question of each answer, one string per prediction (a length or
        entry that does not fit is a ValueError). A sentence that declines and repeats a number its
        question states ("The documents do not say what 422 means.") need not cite, as in
        `lewisrag eval answers`; without questions such a sentence must.
Returns:
    faithfulness, citation_recall, citation_precision (and context_recall, answer_completeness with
    reference_statements): means over answers where defined; `<metric>_nan` counts the others,
    `<metric>_undecided` the verdicts the judge could not give (left out of the scores);
    judge_fingerprint names the judge.
"""


def _mean_and_unmeasured(values):
    """(mean of the measured values, NaN if none; how many were NaN): evaluate's metrics return floats."""
    m = mean(values)
    return (float("nan") if m is None else m), sum(math.isnan(v) for v in values)


def _check_lists(lists, n, name):
    """One list of strings per prediction: zip would drop the answers past a shorter list, and a string
    would be read as its characters, each one a statement."""
    if not isinstance(lists, list | tuple) or len(lists) != n:
        got = f"{len(lists)} lists" if isinstance(lists, list | tuple) else repr(lists)
        raise ValueError(f"{name} must hold one list per prediction: {n} predictions, got {got}")
    for i, texts in enumerate(lists):
        if not isinstance(texts, list | tuple) or not all(isinstance(t, str) for t in texts):
            raise ValueError(f"{name}[{i}] must be a list of strings, got {texts!r}")


def _check_questions(questions, n):
    """One question string per prediction, as `reference_statements` holds one list per prediction."""
    if not isinstance(questions, list | tuple) or len(questions) != n:
        got = f"{len(questions)} questions" if isinstance(questions, list | tuple) else repr(questions)
        raise ValueError(f"questions must hold one string per prediction: {n} predictions, got {got}")
    for i, q in enumerate(questions):
        if not isinstance(q, str):
            raise ValueError(f"questions[{i}] must be a string, got {q!r}")


class LewisragFaithfulness(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value("string"),
                                        "contexts": datasets.Sequence(datasets.Value("string"))}),
        )

    def _compute(self, predictions, contexts, judge="lexical", reference_statements=None, questions=None, **unused):
        # `unused`: evaluate.combine passes every module all inputs (e.g. `references` for QA)
        _check_lists(contexts, len(predictions), "contexts")
        if reference_statements is not None:  # not a feature: evaluate checks neither its length nor its type
            _check_lists(reference_statements, len(predictions), "reference_statements")
        if questions is not None:  # not a feature either, so that it stays optional
            _check_questions(questions, len(predictions))
        judge = judges.from_spec(judge) if isinstance(judge, str) else judge
        scores = {"faithfulness": [], "citation_recall": [], "citation_precision": []}
        undecided = dict.fromkeys(scores, 0)
        for answer, ctx, question in zip(predictions, contexts, questions or [""] * len(predictions)):
            sentences = split_sentences(answer)
            # a sentence that only declines or is a pleasantry asserts nothing: judged, it scored a supported
            # answer's "Hope this helps!" unfaithful (`refusals.asserts_nothing`, as in `lewisrag eval answers`)
            said = [s.text for s in sentences if not asserts_nothing(s.text, question)]
            faithful = metrics.count_support(metrics.join_contexts(list(ctx)), said, judge, "statements")
            # a refusal asserts nothing: its 0 (or NaN) enters no mean, as in `lewisrag eval answers`
            scores["faithfulness"].append(math.nan if is_refusal(answer, question) else faithful.score)
            undecided["faithfulness"] += faithful.undecided
            docs = {str(i): c for i, c in enumerate(ctx, start=1)}
            cited = [(s.text, list(s.citations)) for s in sentences
                     if s.citations or not asserts_nothing(s.text, question)]
            cq = metrics.citation_quality_detail(cited, docs, judge)
            scores["citation_recall"].append(cq["recall"])
            scores["citation_precision"].append(cq["precision"])
            undecided["citation_recall"] += sum(st["supported"] is None for st in cq["statements"])
            undecided["citation_precision"] += sum(st["undecided_citations"] for st in cq["statements"])
        if reference_statements is not None:
            recall = [metrics.count_support(metrics.join_contexts(list(c)), list(r), judge, "reference_statements")
                      for r, c in zip(reference_statements, contexts)]
            covered = [metrics.count_support(answer_text(a), list(r), judge, "reference_statements")
                       for r, a in zip(reference_statements, predictions)]
            for name, support in (("context_recall", recall), ("answer_completeness", covered)):
                scores[name] = [s.score for s in support]
                undecided[name] = sum(s.undecided for s in support)
        out = {"judge_fingerprint": judge.fingerprint}
        for name, values in scores.items():
            out[name], out[f"{name}_nan"] = _mean_and_unmeasured(values)
            out[f"{name}_undecided"] = undecided[name]
        return out
