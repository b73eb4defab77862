"""What the reproduce report's sentences claim is what its numbers bear out: a null exact match the
schema lets through renders (n/a, no gap) before anything is written; an interval has both ends;
Table 6's "flat" is decided on the printed values and its heading and the position probe say how many
questions they read; the hot swap "follows the index" only when each cell meets the README's target;
two-metric claim sentences rank each metric on its own (noise on the heading's own measure); and
"highest", "lowest", "best" name a column only where a paired test on the per-question records
sets it apart at p < 0.05, else the sentence says the lead is within noise."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import copy_run, run_main
from lewisrag.data.io import InputError
from lewisrag.eval.reports.claims import claim_sentences, claims_markdown, paired_pvalue
from lewisrag.eval.reports.i18n import Messages
from lewisrag.experiments import report as R
from lewisrag.experiments import reproduce as P
from lewisrag.experiments import stages as S
from lewisrag.experiments.record_schema import check_stage_record

EN, ZH = Messages("en"), Messages("zh")


# --- 1. a null exact match, results.json written last, an interval's two ends ---------------------


def _qa(closed_book_em):
    return {"rag_token": {"exact_match": 0.9, "f1": 0.9, "rougeL": 0.9},
            "rag_sequence": {"exact_match": 0.95, "f1": 0.95, "rougeL": 0.95},
            "closed_book": {"exact_match": closed_book_em, "f1": 0.05, "rougeL": 0.04}}


def test_a_null_closed_book_exact_match_is_printed_na_and_leaves_out_the_gap():
    """qa.closed_book.exact_match: null (NUMBER_OR_NULL in the schema) was a TypeError in `_table1`
    subtracting None: exit 3 with a traceback."""
    lines = R._table1({"qa": _qa(None)}, EN)
    assert "| BART (closed book) | n/a | 0.050 | 0.040 |" in lines, lines
    assert lines[-2].startswith("RAG-Sequence has the highest exact match (95%)") and "closed-book" not in lines[-2]
    assert "闭卷 BART" not in R._table1({"qa": _qa(None)}, ZH)[-2]
    assert "+94 points against the closed-book BART" in R._table1({"qa": _qa(0.01)}, EN)[-2]


def _stamps(run: Path) -> dict:
    names = [name for name in S.FINISHED if (run / name).exists()]
    return {name: (os.lstat(run / name).st_ino, os.lstat(run / name).st_mtime_ns, (run / name).read_bytes())
            for name in names}


def test_a_null_exact_match_in_a_stage_record_resumes_into_a_report(tiny_qa_run, tmp_path, monkeypatch, capsys):
    """The evaluate record with closed_book's exact match null passed the schema, then `reproduce --resume`
    rewrote results.json and crashed in the report (exit 3, a traceback, a new results.json beside the
    last run's report.md)."""
    run = copy_run(tiny_qa_run, tmp_path / "run")
    record = json.loads((run / "stages" / "evaluate.json").read_text(encoding="utf-8"))
    record["out"]["qa"]["closed_book"]["exact_match"] = None
    record["out"]["qa"]["rag_sequence"]["exact_match"] = 0.5  # a leader, whose gap to the closed book was computed
    (run / "stages" / "evaluate.json").write_text(json.dumps(record), encoding="utf-8")
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run, "--seed", "0", "--resume")
    assert code == 0 and "Traceback" not in err, err
    report = (run / "report.md").read_text(encoding="utf-8")
    assert "| BART (closed book) | n/a |" in report and "RAG-Sequence has the highest exact match (50%)" in report
    assert "points against the closed-book BART" not in report


def test_the_report_is_rendered_before_results_json_is_written(tiny_qa_run, tmp_path, monkeypatch, capsys):
    """`_finish` wrote results.json, timings.json and the plots, then rendered report.md: a report that
    could not be rendered left the run half rewritten. Now the text comes first, and nothing is touched."""
    run = copy_run(tiny_qa_run, tmp_path / "run")
    before = _stamps(run)
    assert {"results.json", "timings.json", "report.md"} <= set(before)

    def broken(results):
        raise RuntimeError("the report cannot describe these results")

    monkeypatch.setattr(R, "render_report", broken)
    monkeypatch.setattr(P, "render_report", broken, raising=False)
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run, "--seed", "0", "--resume")
    assert code == 3 and "the report cannot describe these results" in err
    assert _stamps(run) == before


def _compare_record(interval: dict) -> dict:
    claim = {"mean": 0.5, "n": 4, "nan": 0, "interval": interval}
    return {"seconds": 1.0, "out": {"qa": {"stitched": {"exact_match": 0.5}},
                                    "layers": {"rag_token": {"claims": {"claims.precision": claim}}}}}


@pytest.mark.parametrize(("interval", "field", "says"), [
    ({"low": 0.25}, "high", "missing, though low is there"),
    ({"high": 0.75}, "low", "missing, though high is there"),
    ({"low": 0.25, "high": None}, "high", "null, though low is a number"),
])
def test_a_claim_interval_needs_both_ends(interval, field, says):
    """An interval with a low and no high passed the schema, then `claims.cell` raised KeyError 'high'."""
    with pytest.raises(InputError) as e:
        check_stage_record(Path("compare.json"), "compare", _compare_record(interval))
    assert f"out.layers.rag_token.claims.claims.precision.interval.{field}" in str(e.value) and says in str(e.value)
    check_stage_record(Path("compare.json"), "compare", _compare_record({"low": 0.25, "high": 0.75}))
    check_stage_record(Path("compare.json"), "compare", _compare_record({"low": None, "high": None}))


# --- 2 and 6. Table 6: the spread as printed, and how many questions ------------------------------


def _ablations(by_k: dict, n: int | None = 200) -> dict:
    ab = {"ks": [int(k) for k in by_k], "trained_k": 5, "n_docs": {"rag_token": by_k, "rag_sequence": by_k},
          "frozen_retriever": {"by_k": by_k, "exact_match": 0.9}, "bm25_retriever": {"by_k": by_k, "exact_match": 0.7}}
    return ab | ({"n": n} if n is not None else {})


def test_table6_decides_flat_on_the_printed_values():
    """191/200 - 187/200 is 0.019999999999999907 in floats: 0.955 against 0.935 read "hardly changes"."""
    by_k = {"1": 187 / 200, "2": 191 / 200, "5": 191 / 200, "10": 189 / 200}
    assert by_k["2"] - by_k["1"] < 0.02
    sentence = R._table6({"ablations": _ablations(by_k)}, EN)[-2]
    assert sentence.endswith("RAG-Token does best at K=2 and K=5."), sentence
    by_k["2"] = by_k["5"] = 190 / 200
    assert "hardly changes with K (0.935-0.950)" in R._table6({"ablations": _ablations(by_k)}, EN)[-2]


def test_table6_and_the_position_probe_say_how_many_questions_they_read():
    by_k = {"1": 0.9, "5": 0.9}
    assert R._table6({"ablations": _ablations(by_k)}, EN)[0] == (
        "## Ablations (Table 6 style: test EM by test-time K on the first 200 short-answer test questions; "
        "trained with K=5)")
    assert "在前 200 道短答案测试题上的 EM" in R._table6({"ablations": _ablations(by_k)}, ZH)[0]
    assert R._table6({"ablations": _ablations(by_k, None)}, EN)[0] == (
        "## Ablations (Table 6 style: test EM by test-time K; trained with K=5)")
    layers = {s: {"faithfulness": 0.9} for s in ("rag_token", "stitched")}
    results = {"layers": layers, "stages": {"compare": {"findings": ["- Position probe, `rag_token`: ..."]}},
               "position": {s: {"positions": [1, 2], "exact_match": [0.9, 0.9], "n": 200} for s in layers}}
    text = "\n".join(R._compare(results, EN))
    assert "- The position probe above reads the first 200 short-answer test questions at each position" in text
    assert "前 200 道短答案测试题" in "\n".join(R._compare(results, ZH))
    results["position"]["stitched"]["n"] = 150
    assert "`rag_token` 200, `stitched` 150" in "\n".join(R._compare(results, EN))


# --- 5. the hot swap, per cell ---------------------------------------------------------------------


def _swap(aa, ab, ba, bb, t=EN) -> str:
    ku = {"rag_token": {"index_a": {"questions_a": aa, "questions_b": ab}, "index_b": {"questions_a": ba, "questions_b": bb}}}
    return R._swap({"knowledge_update": ku}, t)[-2]


def test_the_swap_follows_the_index_only_when_every_cell_meets_its_target():
    """The verdict averaged the cells: A/A 99% and B/B 85% (mean 92%) "followed the index", which the
    README's targets (A/A >= 0.90, B/B >= 0.90, each mismatched <= 0.05) do not allow."""
    low_cell = _swap(0.99, 0.0, 0.0, 0.85)
    assert "RAG-Token follows the index in part: 92% on matched index and questions against 0% on mismatched ones" in low_cell
    assert "(index_b on questions about B 85% short of the README's targets" in low_cell, low_cell
    leaky = _swap(0.97, 0.08, 0.0, 0.97)  # a mismatched mean of 4%, one cell 8%
    assert "follows the index in part: 97% on matched index and questions against 4%" in leaky
    assert "index_a on questions about B 8%" in leaky
    assert "部分跟着索引走" in _swap(0.99, 0.0, 0.0, 0.85, ZH) and "未达到 README 的目标" in _swap(0.99, 0.0, 0.0, 0.85, ZH)
    assert "RAG-Token follows the index: 97% on matched index and questions against 0% on mismatched ones" in \
        _swap(0.967, 0.0, 0.0, 0.971)
    assert "short of" not in _swap(0.7, 0.12, 0.04, 0.68)  # in part on the means already: nothing more to say


# --- 3. each metric ranked on its own ---------------------------------------------------------------


def _col(**means: float) -> dict:
    return {f"claims.{m}": {"n": 146, "nan": 0, "mean": v} for m, v in means.items()}


def test_claim_recall_and_context_precision_are_each_ranked():
    """The sentence ranked on claim recall alone: the stitched system, highest on context precision
    (0.256 against 0.155), read "lowest"."""
    columns = {"RAG-Token": _col(claim_recall=0.719, context_precision=0.155),
               "RAG-Sequence": _col(claim_recall=0.719, context_precision=0.155),
               "stitched": _col(claim_recall=0.716, context_precision=0.256)}
    (sentence,) = [s for s in claim_sentences(columns, str) if s.startswith("Claim recall")]
    assert sentence.endswith("(claim recall: highest for RAG-Token and RAG-Sequence, lowest for stitched; "
                             "context precision: highest for stitched, lowest for RAG-Token and RAG-Sequence)."), sentence
    (zh,) = [s for s in claim_sentences(columns, str, "zh") if s.startswith("陈述召回率")]
    assert zh.endswith("（陈述召回率：最高：RAG-Token 和 RAG-Sequence，最低：stitched；"
                       "上下文精确率：最高：stitched，最低：RAG-Token 和 RAG-Sequence）。"), zh


def test_noise_sensitivity_is_ranked_on_what_its_heading_measures():
    """"a wrong claim copied from a retrieved passage" is relevant plus irrelevant noise; the ranking read
    relevant noise alone, calling the column that copies the least the one that copies the most."""
    columns = {"a": _col(noise_sensitivity_in_relevant=0.30, noise_sensitivity_in_irrelevant=0.0),
               "b": _col(noise_sensitivity_in_relevant=0.10, noise_sensitivity_in_irrelevant=0.35)}
    (sentence,) = [s for s in claim_sentences(columns, str) if s.startswith("Noise")]
    assert sentence.endswith("a 0.300 / 0.000, b 0.100 / 0.350 (relevant plus irrelevant: copies the most: b, the least: a)."), \
        sentence
    (zh,) = [s for s in claim_sentences(columns, str, "zh") if s.startswith("相关")]
    assert zh.endswith("（相关与无关合计：照搬最多：b，最少：a）。"), zh


# --- 4. a lead within noise is said to be one --------------------------------------------------------


def _ids(n: int) -> list[str]:
    return [f"q{i:03d}" for i in range(n)]


def _scores(values: list[float]) -> dict[str, float]:
    return dict(zip(_ids(len(values)), values))


def test_paired_pvalue_pairs_by_question_and_is_deterministic():
    a, b = _scores([1.0] * 10), _scores([0.0] * 10)
    assert paired_pvalue(a, b, binary=True) == {"p": 2 * 0.5 ** 10, "n": 10, "test": "mcnemar"}
    assert paired_pvalue(a, {"other": 1.0}) is None and paired_pvalue(a, None) is None
    noisy_a = _scores([0.1 * (i % 7) for i in range(60)])
    noisy_b = _scores([0.1 * ((i * 3) % 7) for i in range(60)])
    first = paired_pvalue(noisy_a, noisy_b)
    assert first["test"] == "sign_flip" and first == paired_pvalue(noisy_a, noisy_b)


def _claim_columns(means: dict[str, float]) -> dict:
    return {label: {"claims.faithfulness": {"n": 40, "nan": 0, "mean": m, "interval": {"low": m - 0.1, "high": m + 0.1}}}
            for label, m in means.items()}


def test_claim_extremes_are_named_only_where_a_paired_test_sets_them_apart():
    n = 40
    # a and b differ on 2 of 40 questions (p = 0.5), c is wrong on every question
    per_question = {"a": [1.0] * n, "b": [1.0] * (n - 2) + [0.0, 0.0], "c": [0.0] * n}
    scores = {label: {"claims.faithfulness": _scores(v)} for label, v in per_question.items()}
    columns = _claim_columns({label: sum(v) / n for label, v in per_question.items()})
    faithfulness = [s for s in claim_sentences(columns, str, scores=scores) if s.startswith("Faithfulness")][0]
    assert faithfulness.endswith("a 1.000, b 0.950, c 0.000 (highest for a, within noise of b; lowest for c)."), faithfulness
    assert faithfulness == [s for s in claim_sentences(columns, str, scores=scores) if s.startswith("Faithfulness")][0]
    zh = [s for s in claim_sentences(columns, str, "zh", scores) if s.startswith("忠实度")][0]
    assert zh.endswith("（最高：a，与 b 的差别在噪声之内；最低：c）。"), zh
    # without per-question values the old point-estimate ranking stands (report.html, compare's report.md)
    assert claim_sentences(columns, str)[-1].endswith("(highest for a, lowest for c).")
    # only two columns, two questions apart: no pair differs
    two = {k: columns[k] for k in ("a", "b")}
    assert claim_sentences(two, str, scores=scores)[-1].endswith("(no two columns differ beyond noise).")
    # a column without per-question values is not tested, not taken for noise
    untested = {**scores, "c": {}}
    assert "lowest for c, not tested against a and b" in claim_sentences(columns, str, scores=untested)[-1]
    lines = claims_markdown(columns, str, scores=scores)
    assert lines[-1].startswith("- Highest and lowest are named only where a paired test sets the column apart")


def _em_records(per_system: dict[str, list[float]]) -> list[dict]:
    return [{"id": q, "system": s, "kind": "short", "metrics": {"exact_match": v}}
            for s, values in per_system.items() for q, v in zip(_ids(len(values)), values)]


def test_the_best_exact_match_is_named_only_beyond_noise():
    """"RAG-Sequence has the highest exact match (95%)" over RAG-Token's 95% on 1,046 questions said
    nothing of whether 4 questions apart is a difference; McNemar's test on the records now decides."""
    n = 40
    per_system = {"rag_token": [1.0] * (n - 2) + [0.0, 0.0], "rag_sequence": [1.0] * n, "closed_book": [0.0] * n}
    qa = {s: {"exact_match": sum(v) / n, "f1": 0.0, "rougeL": 0.0} for s, v in per_system.items()}
    results = {"qa": qa, "records": _em_records(per_system)}
    sentence = R._table1(results, EN)[-2]
    assert sentence == ("RAG-Sequence has the highest exact match (100%), +100 points against the closed-book BART that "
                        "reads no documents; the lead over RAG-Token (p = 0.500) is within noise (McNemar's exact test, "
                        "two-sided, over the questions both systems answered; a lead counts at p < 0.05)."), sentence
    assert "领先 RAG-Token（p = 0.500）的幅度在噪声之内（McNemar 精确检验" in R._table1(results, ZH)[-2]
    per_system["rag_token"] = [1.0] * (n - 12) + [0.0] * 12  # 12 questions apart: p = 0.5**11
    results = {"qa": qa | {"rag_token": {"exact_match": (n - 12) / n}}, "records": _em_records(per_system)}
    assert R._table1(results, EN)[-2] == ("RAG-Sequence has the highest exact match (100%), +100 points against the "
                                          "closed-book BART that reads no documents.")
    stitched = {"qa": {**results["qa"], "stitched": {"exact_match": 0.9}}, "records": results["records"]}
    assert R._table1(stitched, EN)[-2].endswith("; the lead over prompt-stitching RAG is not tested (results.json holds "
                                                "no per-question scores to pair).")


def test_the_most_faithful_system_is_named_only_beyond_noise():
    n = 40
    per_system = {"rag_token": [0.9] * n, "rag_sequence": [0.9] * (n - 1) + [1.0]}
    results = {"layers": {s: {"faithfulness": sum(v) / n} for s, v in per_system.items()},
               "records": [{"id": q, "system": s, "metrics": {"faithfulness": v}}
                           for s, values in per_system.items() for q, v in zip(_ids(n), values)]}
    sentence = R._compare(results, EN)[-2]
    assert sentence.startswith("RAG-Sequence has the most faithful answers (0.902 of their statements supported by the "
                               "passages they read); the lead over RAG-Token (p = 1.000) is within noise (the paired "
                               "sign-flip test"), sentence
    assert sentence.endswith("a lead counts at p < 0.05).")
