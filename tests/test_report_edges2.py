"""The reports' sentences say what their tables print: a tie among the systems with a score is not "every
system" when another has none (n/a), and one system with a score has nothing to tie with; where wrong claims
come from is decided on the numbers as printed; the eval report's highest and lowest are tested on the
per-question records as the reproduce report's are; the base preset's skip reason and its count of questions
whose gold passages were not indexed reach a Chinese report; a system named "all" keeps its name beside
others, and records naming no system are `(no system)` in every section; plots of the Chinese world's text
under an English report are drawn with a CJK font."""

from __future__ import annotations

import json
import warnings

import pytest
from typer.testing import CliRunner

from conftest import write_jsonl
from lewisrag.cli import app
from lewisrag.eval.reports import i18n
from lewisrag.eval.reports.claims import claim_sentences, claims_markdown
from lewisrag.eval.reports.markdown import render_results
from lewisrag.experiments import report

CONFIG = {"preset": {"name": "tiny"}, "seed": 0}


def _results(lang: str = "en", **parts) -> dict:
    return {"config": {**CONFIG, **({"lang": lang} if lang != "en" else {})},
            "retrieval": {"skipped": "no test question has gold_passage_ids (the hub's QA sets and DPR's .qa.csv have none)"},
            **parts}


def _section(text: str, head: str) -> str:
    start = text.index(head)
    return text[start:text.index("\n## ", start + 1)]


# --- 1. a tie among the systems with a score, one system with a score -------------------------------

def _layers(**faithfulness) -> dict:
    cols = ("faithfulness", "context_recall", "answer_completeness", "citation_recall", "citation_precision")
    return {s: {c: 0.5 for c in cols} | {"faithfulness": v} for s, v in faithfulness.items()}


@pytest.mark.parametrize("lang,one,tie", [
    ("en", "RAG-Token has a faithfulness of 0.400.",
     "Every system with a faithfulness has the same one (0.400); not measured for prompt-stitching RAG."),
    ("zh", "RAG-Token 的忠实度为 0.400。", "有忠实度的系统都一样（0.400）；未测量：提示拼接 RAG。"),
])
def test_the_layers_sentence_counts_only_the_systems_with_a_faithfulness(lang, one, tie):
    text = report.render_report(_results(lang, layers=_layers(rag_token=0.4, rag_sequence=None, stitched=None)))
    section = _section(text, i18n.messages(lang)("rep.layers.h"))
    assert one in section and i18n.MESSAGES["rep.layers.same"][lang == "zh"][:8] not in section, section
    text = report.render_report(_results(lang, layers=_layers(rag_token=0.4, rag_sequence=0.4, stitched=None)))
    assert tie in text, text
    text = report.render_report(_results(lang, layers=_layers(rag_token=0.4, rag_sequence=0.4, stitched=0.4)))
    assert i18n.messages(lang)("rep.layers.same", v="0.400") in text  # every system has one: as it was


def _qa(em: dict, rouge: dict) -> dict:
    return {s: {"exact_match": v, "f1": 0.0, "rougeL": 0.0, "n": 4,
                "long": {"n": 6, "rougeL": rouge.get(s), "bleu1": 0.0}} for s, v in em.items()}


@pytest.mark.parametrize("lang,t1,long", [
    ("en", "Every system with an exact match scores the same (0%): no system stands out; not measured for "
           "BART (closed book).",
     "On 6 long-form questions every system with a ROUGE-L scores the same (0.000); not measured for BART (closed book)."),
    ("zh", "有精确匹配（EM）的系统都一样（0%）：没有哪个系统更突出；未测量：BART（闭卷）。",
     "在 6 道长答案题上，有 ROUGE-L 的系统都一样（0.000）；未测量：BART（闭卷）。"),
])
def test_table_1_and_the_long_form_tie_leave_out_the_system_without_a_score(lang, t1, long):
    qa = _qa({"rag_token": 0.0, "rag_sequence": 0.0, "closed_book": None}, {"rag_token": 0.0, "rag_sequence": 0.0})
    text = report.render_report(_results(lang, qa=qa))
    assert t1 in text and long in text, text
    full = _qa({"rag_token": 0.0, "rag_sequence": 0.0}, {"rag_token": 0.0, "rag_sequence": 0.0})
    assert "Every system scores the same exact match (0%): no system stands out." in report.render_report(_results(qa=full))


def _claims(**means) -> dict:
    return {label: {"claims.faithfulness": {"n": 2, "nan": 0, "mean": v, "interval": {"low": v, "high": v}}}
            for label, v in means.items()}


def test_a_claim_metric_tied_among_the_columns_with_a_value_says_so():
    columns = _claims(a=0.5, b=0.5, c=None)
    assert "(the same for every column with a value)" in claim_sentences(columns, str)[6]
    assert "（有数值的各列都一样）" in claim_sentences(columns, str, "zh")[6]
    assert "(the same for every one)" in claim_sentences(_claims(a=0.5, b=0.5), str)[6]


def test_two_metrics_tied_among_the_columns_with_a_value_are_said_once():
    col = lambda cr, cp: {f"claims.{m}": {"n": 2, "nan": 0, "mean": v, "interval": {}}  # noqa: E731
                          for m, v in (("claim_recall", cr), ("context_precision", cp))}
    sentence = claim_sentences({"a": col(0.5, 0.5), "b": col(0.5, 0.5), "c": col(None, None)}, str)[1]
    assert sentence.endswith("(the same for every column with a value)."), sentence


# --- 2. where wrong claims come from, as printed ----------------------------------------------------

@pytest.mark.parametrize("lang,even", [("en", "as much from the passages as from nowhere (0.300 against 0.300)"),
                                       ("zh", "来自段落和凭空编出的一样多（0.300 对 0.300）")])
def test_where_wrong_claims_come_from_follows_the_printed_numbers(lang, even):
    means = {"noise_sensitivity_in_relevant": 0.1, "noise_sensitivity_in_irrelevant": 0.2, "hallucination": 0.3}
    col = {f"claims.{m}": {"n": 2, "nan": 0, "mean": v, "interval": {}} for m, v in means.items()}
    assert 0.1 + 0.2 > 0.3  # in floats: what the sentence was decided on
    assert even in claim_sentences({"all": col}, str, lang)[4]


# --- 4. the eval report's highest and lowest, tested on the records ---------------------------------

CTX = [{"id": "p1", "title": "Paris", "text": "Paris is the capital of France. It has 2 million people."},
       {"id": "p2", "title": "Berlin", "text": "Berlin is the capital of Germany."},
       {"id": "p3", "title": "Rome", "text": "Rome is the capital of Italy."}]
QUESTIONS = [("q1", "Paris is the capital of France.", "Paris is the capital of France [1].", "Lyon is the capital [1]."),
             ("q2", "Berlin is the capital of Germany.", "Berlin is the capital of Germany [2].", "Munich is the capital [2]."),
             ("q3", "Rome is the capital of Italy.", "Rome is the capital of Italy [3].", "Milan is the capital [3]."),
             ("q4", "Paris has 2 million people.", "It has 2 million people [1].", "Paris has 5 million people [1].")]


def _eval(tmp_path, systems: tuple, lang: str = "en") -> tuple[dict, str]:
    rows = [{"id": q, "user_input": f"{q}?", "response": answer, "retrieved_contexts": CTX, "reference": ref,
             "category": "single_doc", **({"system": s} if s is not None else {})}
            for s, bad in zip(systems, (False, True)) for q, ref, good, wrong in QUESTIONS
            for answer in [wrong if bad else good]]
    src = write_jsonl(tmp_path / "answers.jsonl", rows)
    out = tmp_path / f"run_{lang}"
    r = CliRunner().invoke(app, ["eval", "answers", "--answers", str(src), "--judge", "lexical", "--out", str(out),
                                 *(["--lang", lang] if lang != "en" else [])])
    assert r.exit_code == 0, r.output
    return json.loads((out / "results.json").read_text(encoding="utf-8")), (out / "report.md").read_text(encoding="utf-8")


def test_the_eval_report_names_no_highest_column_its_paired_test_does_not_set_apart(tmp_path):
    results, text = _eval(tmp_path, ("good", "bad"))
    faith = {s: results["aggregates"]["by_system"][s]["claims.faithfulness"]["mean"] for s in ("good", "bad")}
    assert faith["good"] > faith["bad"]  # the means differ: the point estimates alone named good the highest
    line = next(x for x in text.splitlines() if x.startswith("- Faithfulness"))
    assert "no two columns differ beyond noise" in line and "highest for" not in line, line  # 4 pairs: p >= 0.125
    assert "- Highest and lowest are named only where a paired test sets the column apart" in text


# --- 6. a system named "all"; records naming no system -------------------------------------------------

def test_a_system_named_all_keeps_its_name_and_records_without_one_are_no_system(tmp_path):
    _, text = _eval(tmp_path, ("all", None), "zh")
    claims = _section(text, "## 陈述级诊断")
    assert claims.splitlines()[4] == "| 指标 | (no system) | all |", claims  # not 全部: that is a run of one column
    layers = _section(text, i18n.messages("zh")("md.layers.h"))
    rows = [r for r in layers.splitlines() if r.startswith("| q")]
    assert len(rows) == 8 and sum("| (no system) |" in r for r in rows) == 4 and not any("| – |" in r for r in rows), rows
    assert claims_markdown(_claims(all=0.5), str, lang="zh")[4] == "| 指标 | 全部 |"  # a run of one column: "all" translated


# --- 5. the base preset's retrieval skipped: its reason and count in Chinese ---------------------------

def test_the_base_presets_gold_not_indexed_reason_and_count_reach_a_chinese_report():
    retrieval = {"split": "test", "gold_not_indexed": 12,
                 "skipped": "no test question's gold passage is among the indexed passages"}
    text = report.render_report({**_results("zh"), "retrieval": retrieval})
    section = _section(text, "## 检索")
    assert "未测量：没有哪道测试题的金标段落在已建索引的段落里。" in section, section
    assert "标注了金标段落 id 的 12 个测试问题，金标段落全都不在已建索引的段落里" in section, section
    english = report.render_report({**_results(), "retrieval": retrieval})
    assert "The gold passages of all 12 test questions with gold passage ids lie outside the indexed passages" in english


# --- 3. the Chinese world's text plotted under an English report ---------------------------------------

def test_plots_of_chinese_text_under_an_english_report_use_a_cjk_font(tmp_path):
    if i18n.cjk_font() is None:
        pytest.skip("no CJK font installed (fonts-wqy-microhei or fonts-noto-cjk)")
    evidence = {"question": "瓦吉芬科学理事会的成立年份是哪一年？", "tokens": ["瓦吉", "芬", "成立"],
                "passages": [{"rank": 1, "title": "托蒙克贸易联盟"}, {"rank": 2, "title": "亚依科学理事会"}],
                "posterior": [[0.9, 0.1], [0.5, 0.5], [0.2, 0.8]]}
    inputs = {name: [] for name in report.TRAINED} | {"evidence.json": evidence}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report.write_plots(tmp_path, {"config": {**CONFIG, "preset": {"name": "tiny", "lang": "zh"}}}, inputs)
    glyphs = [str(w.message) for w in caught if "Glyph" in str(w.message)]
    assert not glyphs, glyphs[:3]  # matplotlib warns "Glyph ... missing from font(s)" for a box it drew
    assert (tmp_path / "token_posteriors.png").read_bytes()[:4] == b"\x89PNG"
