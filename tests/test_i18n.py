"""Reports in English and Chinese (`lewisrag.eval.reports.i18n`): the catalogue is whole, every message the
page, its script and the reports ask for exists, --lang zh writes Chinese report.md/report.html (with
`<html lang="zh-CN">` and none of the English headings), English stays the default, and an unknown
language is one line naming --lang (exit 2)."""

from __future__ import annotations

import doctest
import json
import os
import re
from importlib import resources

import pytest
from typer.testing import CliRunner

from conftest import run_main, write_jsonl
from lewisrag.cli import app
from lewisrag.eval.reports.i18n import Messages
from lewisrag.data.io import InputError
from lewisrag.eval.reports import i18n
from lewisrag.eval.reports.i18n import LANGS, MESSAGES, check_lang, messages, placeholders
from test_eval_cli import ANSWERS

# The English headings and labels of the pages and reports: none may be left on a Chinese one.
ENGLISH_PAGE = ("Judge each statement", "Retrieved passages", "Answer as written", "Reference verdicts and the layers",
                "Failure chain", "Reference statements", "Citations per sentence", "How the numbers are computed",
                "Claim-level diagnostics", "your faithfulness", "agreement with the reference",
                "Reveal reference verdicts and diagnosis", "judge the statements yourself", "Faithfulness moves with granularity",
                "in the passages", "rule checker", "primary cause", "Primary cause")
ENGLISH_EVAL_MD = ("# lewisrag evaluation", "## Score distributions", "## Layers per question", "## Primary causes",
                   "## Citation rule checks", "## not_in_kb questions", "## Unsupported statements", "## Same mean",
                   "## Claim-level diagnostics", "| metric |", "judge:", "splitter:", "records:", "share < 1",
                   "generation_distorted", "retrieval |")
ENGLISH_BUGHUNT_MD = ("# BugHunt sample", "Question:", "Judge:", "| answer |", "faithful", "primary cause", "consequences",
                      "## Faithfulness moves with granularity", "## Rule checker vs human citation labels", "caught", "passed",
                      "hallucinated", "| yes |", "| no |")


def test_doctests():
    assert doctest.testmod(i18n).failed == 0


def test_every_message_has_both_languages_with_the_same_placeholders():
    for key, texts in MESSAGES.items():
        assert len(texts) == len(LANGS), key
        en, zh = texts
        assert zh or key == "rep.plots.no_cjk", key  # only the note about a missing CJK font is Chinese-only
        assert placeholders(en) == placeholders(zh) or key == "rep.plots.no_cjk", key
        if key.endswith("_html"):
            continue
        assert not re.search(r"<[a-zA-Z/!]|&\w+;", en + zh), key  # escaped text: markup belongs in *_html messages


def test_the_page_and_its_script_ask_only_for_known_messages():
    page = resources.files("lewisrag.eval.reports.assets").joinpath("page.html").read_text(encoding="utf-8")
    script = resources.files("lewisrag.eval.reports.assets").joinpath("report.js").read_text(encoding="utf-8")
    asked = re.findall(r"\{\{t:([\w.]+)\}\}", page)
    assert asked and all(k in MESSAGES for k in asked), [k for k in asked if k not in MESSAGES]
    js = messages("zh").js()
    called = set(re.findall(r'\bt\("([\w.]+)"[,)]', script)) | {k for a, b in re.findall(r't\(a\.refused \? "(\w+)" : "(\w+)"\)', script)
                                                           for k in (a, b)}
    called |= {"card." + m for m in ("faithfulness", "context_recall", "answer_completeness", "citation_recall",
                                     "citation_precision", "recall_at_k", "on_topic_rate")}
    assert len(called) > 30 and not called - set(js), called - set(js)
    assert set(messages("en").js()) <= set(js)


def test_an_unknown_language_is_an_input_error_naming_the_flag():
    assert check_lang("en") == "en"
    with pytest.raises(InputError, match=r"^--lang: unknown language 'fr': use en or zh$"):
        check_lang("fr")
    with pytest.raises(InputError, match="--lang"):
        messages("de")


@pytest.mark.parametrize("args", [["eval", "bughunt"], ["eval", "answers", "--answers", "a.jsonl", "--out", "o"],
                                  ["compare", "--run", "r"], ["reproduce", "--preset", "tiny", "--out", "o"],
                                  ["world", "--out", "o"], ["pretrain", "--out", "o"]])
def test_cli_unknown_lang_exits_2_before_doing_anything(monkeypatch, capsys, tmp_path, args):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(monkeypatch, capsys, *args, "--lang", "fr")
    assert code == 2 and err.strip().splitlines()[-1] == "error: --lang: unknown language 'fr': use en or zh", err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written


def test_known_run_texts_are_translated_and_others_kept():
    t = messages("zh")
    assert t.text("smoke test: numbers are not meaningful") == "冒烟测试：数字没有意义"
    assert t.text("quote not in the cited documents: '红色'") == "引文不在被引文档里：'红色'"
    assert t.text("2/3 content tokens in premise (0.67 < 0.75); missing: returns") == "前提里有 2/3 个内容词（0.67 < 0.75）；缺少：returns"
    assert t.text("something the catalogue does not know") == "something the catalogue does not know"
    assert messages("en").text("the answer cites nothing") == "the answer cites nothing"


def _visible(page: str) -> str:
    """The page's text a reader sees before its script runs: no style, no script, no tags."""
    body = re.sub(r"<(style|script)\b.*?</\1>", " ", page, flags=re.DOTALL)
    return re.sub(r"<[^>]+>", " ", body)


@pytest.fixture(scope="module")
def eval_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("i18n")
    src = write_jsonl(root / "answers.jsonl", ANSWERS + [{**a, "system": "b"} for a in ANSWERS])
    for lang in ("en", "zh"):
        args = ["eval", "answers", "--answers", str(src), "--judge", "lexical", "--out", str(root / lang)]
        r = CliRunner().invoke(app, args + (["--lang", lang] if lang != "en" else []))
        assert r.exit_code == 0, r.output
    return root


def test_eval_answers_in_chinese(eval_runs):
    md = (eval_runs / "zh" / "report.md").read_text(encoding="utf-8")
    for heading in ("# lewisrag 评测报告", "## 得分分布（题目级）", "## 陈述级诊断", "## 逐题分层", "## 主因", "## 引用规则核对",
                    "## 知识库里没有的题目（必须拒答）", "## 没有支持的陈述", "## 平均值相同，失败的样子不同",
                    "| 指标 | n | NaN | 均值 |", "| 忠实度 |", "| 上下文召回 |", "| id | 系统 | 检索 | 生成：没用上 | 生成：用歪了 |",
                    "硬门禁", "**失败**", "前提里有"):
        assert heading in md, heading
    for english in ENGLISH_EVAL_MD:
        assert english not in md, english
    page = (eval_runs / "zh" / "report.html").read_text(encoding="utf-8")
    assert page.startswith('<!DOCTYPE html>\n<html lang="zh-CN">')
    visible = _visible(page)
    for heading in ("逐条判定陈述", "检索到的段落", "参考判定与各层", "失败落在哪一层", "这些数字怎么算", "陈述级诊断", "忠实度", "主因"):
        assert heading in visible, heading
    for english in ENGLISH_PAGE:
        assert english not in visible, english
    data = json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.DOTALL).group(1))
    assert data["lang"] == "zh" and data["messages"]["reveal"] == "揭晓参考判定和诊断"
    assert [layer["label"] for layer in data["layers"]] == ["检索", "生成：答非所问", "生成：用歪了", "生成：没用上", "引用"]
    assert json.loads((eval_runs / "zh" / "config.json").read_text())["lang"] == "zh"
    # the numbers are the run's, whatever the language
    assert json.loads((eval_runs / "zh" / "results.json").read_text())["aggregates"] == \
        json.loads((eval_runs / "en" / "results.json").read_text())["aggregates"]


def test_english_stays_the_default(eval_runs):
    md = (eval_runs / "en" / "report.md").read_text(encoding="utf-8")
    for english in ENGLISH_EVAL_MD:
        assert english in md, english
    assert not re.search(r"[\u4e00-\u9fff]", md.replace(md[md.index("## Unsupported"):md.index("## Same mean")], ""))
    page = (eval_runs / "en" / "report.html").read_text(encoding="utf-8")
    assert page.startswith('<!DOCTYPE html>\n<html lang="en">')
    for english in ENGLISH_PAGE[:8]:
        assert english in _visible(page), english
    assert "lang" not in json.loads((eval_runs / "en" / "config.json").read_text())


def test_eval_bughunt_in_chinese(tmp_path):
    r = CliRunner().invoke(app, ["eval", "bughunt", "--out", str(tmp_path / "bh"), "--lang", "zh"])
    assert r.exit_code == 0, r.output
    md = (tmp_path / "bh" / "report.md").read_text(encoding="utf-8")
    for heading in ("# BugHunt 样例", "问题：登录时密码输错了", "## 忠实度随拆分粒度变化", "## 规则核对器对照人工引用标注",
                    "| 拦对 | 放对 | 误拦 | 漏放 | 无法核对 |", "| 用上了但歪曲（幻觉） | 拆成原子陈述 | 6 | 1 | 0.167 |",
                    "| 引用错位 | 1.000 | 1.000 | 1.000 | 1.000 | 0.000 | 0.000 | 引用 | – |"):
        assert heading in md, heading
    for english in ENGLISH_BUGHUNT_MD:
        assert english not in md, english
    page = (tmp_path / "bh" / "report.html").read_text(encoding="utf-8")
    assert '<html lang="zh-CN">' in page and "<title>BugHunt 样例：自己来判定每条陈述</title>" in page
    for english in ENGLISH_PAGE:
        assert english not in _visible(page), english


def test_claim_sentences_in_chinese():
    from lewisrag.eval.reports.claims import claim_sentences

    col = {f"claims.{m}": {"mean": v, "n": 4} for m, v in (("precision", 0.5), ("recall", 0.25), ("f1", 0.3),
                                                             ("noise_sensitivity_in_relevant", 0.1),
                                                             ("noise_sensitivity_in_irrelevant", 0.1), ("hallucination", 0.4))}
    other = {**col, "claims.hallucination": {"mean": 0.1, "n": 4}}
    zh = claim_sentences({"a": col, "b": other}, str, "zh")
    assert zh[0] == "精确率 / 召回率 / F1（回答的陈述中正确的比例；参考陈述中被回答说出的比例）：a 0.500 / 0.250 / 0.300，b 0.500 / 0.250 / 0.300（各列都一样）。"
    assert zh[4] == ("幻觉（哪篇段落里都没有的错误陈述）：a 0.400，b 0.100（最高：a，最低：b）；错误陈述更多是凭空编出，而不是来自段落："
                     "a（0.200 对 0.400）；更多来自段落，而不是凭空编出：b（0.200 对 0.100）。"), zh[4]
    en = claim_sentences({"a": col, "b": other}, str)
    assert en[4].startswith("Hallucination (a wrong claim in no passage): a 0.400, b 0.100 (highest for a, lowest for b); wrong claims come ")


def test_reproduce_report_in_chinese_says_when_plots_keep_english_labels(monkeypatch):
    from lewisrag.experiments import report

    results = {"config": {"preset": {"name": "tiny", "notes": "smoke test: numbers are not meaningful"}, "seed": 0, "lang": "zh"},
               "retrieval": {"skipped": "no test question has gold_passage_ids (the hub's QA sets and DPR's .qa.csv have none)"},
               "skipped": {"dpr": "not trained: the given DPR pair (--question-encoder, --context-encoder) is the retriever"}}
    text = report.render_report(results)
    assert text.startswith("# lewisrag reproduce 复现报告 — 预设 `tiny`，随机种子 0\n\n_冒烟测试：数字没有意义_")
    assert "未测量：没有哪道测试题带 gold_passage_ids（hub 上的问答数据集和 DPR 的 .qa.csv 都没有）。" in text and "- `dpr`：不训练：给定的 DPR 编码器对" in text
    if i18n.cjk_font() is not None:
        assert "没有找到中文字体" not in text
    monkeypatch.setattr(report, "cjk_font", lambda: None)
    monkeypatch.setattr(i18n, "cjk_font", lambda: None)
    assert "_没有找到中文字体，图里的标签保留英文" in report.render_report(results)
    with i18n.plot_messages("zh") as t:
        assert t.lang == "en"  # English labels rather than boxes
    assert "没有找到中文字体" not in report.render_report({**results, "config": {**results["config"], "lang": "en"}})


def test_chinese_plot_labels_are_drawn_with_a_cjk_font(tmp_path):
    import warnings

    from lewisrag.eval import stats
    from lewisrag.eval.reports.distributions import histogram_figure

    if i18n.cjk_font() is None:  # .ci/run installs fonts-wqy-microhei with chromium and sets LEWISRAG_REQUIRE_BROWSER
        missing = pytest.fail if os.environ.get("LEWISRAG_REQUIRE_BROWSER") == "1" else pytest.skip
        missing("no CJK font installed (fonts-wqy-microhei or fonts-noto-cjk): Chinese plots keep English labels")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns "Glyph ... missing from font(s)" for a character it draws as a box
        histogram_figure({"faithfulness": stats.score_distribution([1.0, 0.5, 0.0, 1.0])}, tmp_path / "h.png", "zh")
    assert (tmp_path / "h.png").read_bytes()[:4] == b"\x89PNG"


# --- the tables the commands print follow --lang; --json does not ----------------------------------

CJK = re.compile(r"[\u4e00-\u9fff]")


def _stdout(*args) -> str:
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r.stdout


def test_the_printed_column_names_are_the_reports():
    for lang in LANGS:  # the distribution table of report.md has the same columns, in the same words
        t = messages(lang)
        cols = [c.strip() for c in t("dist.cols").strip("| ").split("|")]
        assert [t("col.metric"), t("cli.col.mean"), t("cli.col.share_below_1"), t("cli.col.share_below_0.5")] == \
            [cols[0], cols[3], cols[5], cols[6]]


def test_eval_answers_prints_its_tables_in_chinese(eval_runs):
    src = eval_runs / "answers.jsonl"
    zh = _stdout("eval", "answers", "--answers", src, "--out", eval_runs / "zh_tables", "--lang", "zh")
    for label in ("分层指标（题目级）", "指标", "无法计算", "均值", "得分 < 1 的比例", "得分 < 0.5 的比例", "忠实度", "上下文召回",
                  "答案完整度", "引用精确率", "recall@5", "陈述级诊断（均值 [95% 区间] n）", "噪声敏感度（相关段落）", "幻觉",
                  "主因", "层", "题目数", "生成：用歪了", "无（没有层失败）", "引用规则核对", "状态", "句数", "TOKEN_NOT_FOUND",
                  "知识库里没有的题目：2 道中 2 道拒答"):
        assert label in zh, label
    for english in ("layered metrics", "metric", "null", "mean", "share", "context_recall", "recall_at_k", "claim-level",
                    "hallucination", "primary cause", "layer", "questions", "generation_distorted", "citation rule checks",
                    "status", "sentences", "not_in_kb", "refused"):
        assert english not in zh, english
    en = _stdout("eval", "answers", "--answers", src, "--out", eval_runs / "en_tables")
    for label in ("layered metrics (question level)", "context_recall", "recall_at_k@5", "primary cause", "generation_distorted",
                  "citation rule checks", "not_in_kb: 2/2 refused"):
        assert label in en, label
    assert not CJK.search(en)
    as_json = {lang: json.loads(_stdout("eval", "answers", "--answers", src, "--out", eval_runs / f"{lang}_json", "--json",
                                        "--lang", lang)) for lang in LANGS}
    assert as_json["zh"] == as_json["en"] and "recall_at_k@5" in as_json["zh"] and "faithfulness" in as_json["zh"]


def test_eval_bughunt_prints_its_tables_in_chinese(tmp_path):
    zh = _stdout("eval", "bughunt", "--lang", "zh")
    for label in ("裁判：labels", "预设回答", "回答", "忠实度", "主因", "正确", "引用错位", "每句话只引用一篇文档",
                  "忠实度随拆分粒度变化", "拆法", "陈述数", "被支持", "用上了但歪曲（幻觉）", "拆成原子陈述",
                  "规则核对器对照人工引用标注", "拦对", "放对", "误拦", "漏放", "无法核对"):
        assert label in zh, label
    for english in ("judge:", "preset answers", "answer", "Each sentence", "granularity", "statements", "supported",
                    "hallucinated", "atomic", "rule checker", "caught", "passed", "false_block", "missed"):
        assert english not in zh, english
    en = _stdout("eval", "bughunt")
    assert "preset answers" in en and "faithfulness by granularity" in en and "caught" in en and "hallucinated" in en
    # --lang sets --out's reports here; the JSON printed is the same (alone, --json --lang is refused: it would change nothing)
    as_json = json.loads(_stdout("eval", "bughunt", "--json", "--lang", "zh", "--out", tmp_path / "zh"))
    assert as_json == json.loads(_stdout("eval", "bughunt", "--json")) and "忠实度" in (tmp_path / "zh" / "report.md").read_text()


def _card() -> dict:
    """A stand-in scorecard (tests/test_compare.py scores trained systems for real)."""
    from lewisrag.eval.results import CLAIM_METRICS
    from lewisrag.experiments.compare import LAYER_METRICS

    names = ["rag_token", "stitched"]
    return {"qa": {n: {"exact_match": 0.5, "f1": 0.6, "rougeL": 0.6} for n in names},
            "retrieval": {n: {"k": 2, "recall_at_k": 0.9} for n in names},
            "layers": {n: {**{m: 0.7 for m in LAYER_METRICS}, "forward_passes_per_answer": 3.0, "tokens_per_answer": 40.0,
                           "not_in_kb": {"refused": 1, "n": 2}, "failure_layers": {"retrieval": 1, "citation": 2},
                           "claims": {m: {"mean": 0.25, "n": 3} for m in CLAIM_METRICS}} for n in names},
            "timings": {n: {"latency_s": 0.01} for n in names}}


def test_compare_prints_its_scorecard_in_chinese(tmp_path, monkeypatch):
    import lewisrag.experiments.compare as C

    monkeypatch.setattr(C, "compare_run", lambda *a, **kw: _card())
    (tmp_path / "run").mkdir()
    args = ("compare", "--run", tmp_path / "run", "--systems", "rag_token,stitched")
    zh = _stdout(*args, "--lang", "zh")
    for label in ("原始 RAG 与提示拼接 RAG", "指标", "rag_token", "stitched", "EM", "recall@2", "忠实度", "引用精确率",
                  "每个回答的前向次数", "每个回答的延迟（秒）", "知识库里没有：拒答数", "主因（检索）", "主因（引用）", "陈述级：幻觉"):
        assert label in zh, label
    for english in ("original versus", "metric", "faithfulness", "forward passes", "latency", "not_in_kb refused",
                    "primary failure", "claims:", "hallucination"):
        assert english not in zh, english
    en = _stdout(*args)
    assert "original versus prompt-stitching RAG" in en and "not_in_kb refused" in en and "claims: hallucination" in en
    as_json = {lang: json.loads(_stdout(*args, "--json", "--lang", lang)) for lang in LANGS}
    assert as_json["zh"] == as_json["en"]  # English row labels for programs, whatever --lang
    assert as_json["zh"]["scorecard"]["not_in_kb refused"]["rag_token"] == "1/2" and "claims: hallucination" in as_json["zh"]["scorecard"]


REPRODUCED = {"retrieval": {"split": "test", "recall_at_1": 0.5, "recall_at_5": 0.75, "recall_at_20": 1.0,
                            "bm25": {"recall_at_1": 0.4, "recall_at_5": 0.6, "recall_at_20": 0.9}},
              "qa": {"rag_token": {"exact_match": 0.5, "f1": 0.6, "rougeL": 0.6, "long": {"rougeL": 0.2}},
                     "closed_book": {"exact_match": 0.1, "f1": 0.2, "rougeL": 0.2}},
              "knowledge_update": {"rag_token": {"index_a": {"questions_a": 0.7, "questions_b": 0.1},
                                                 "index_b": {"questions_a": 0.1, "questions_b": 0.6}}},
              "skipped": {"dpr": "not trained: the given DPR pair (--question-encoder, --context-encoder) is the retriever"}}


@pytest.mark.parametrize("langs, chinese", [([], False), (["--report-lang", "zh"], True), (["--lang", "zh"], True),
                                            (["--lang", "zh", "--report-lang", "en"], False)])
def test_reproduce_prints_its_summary_in_the_report_language(tmp_path, monkeypatch, langs, chinese):
    import lewisrag.experiments.reproduce as R

    seen = {}
    monkeypatch.setattr(R, "reproduce", lambda *a, **kw: seen.update(kw) or REPRODUCED)  # a stand-in run
    args = ("reproduce", "--preset", "tiny", "--out", tmp_path / "run", *langs)
    printed = _stdout(*args)
    assert seen["lang"] == ("zh" if chinese else "en")  # the report's language is the tables'
    chinese_labels = ("检索（测试集，快照 A）", "检索器", "recall@5", "测试集问答", "系统", "RAG-Token", "BART（闭卷）",
                      "长答案 ROUGE-L", "没有运行：dpr（不训练", "知识更新：各索引上的 EM", "模型", "索引 A", "问题 B")
    english_labels = ("retrieval on the test split (snapshot A)", "retriever", "recall_at_5", "test QA", "system", "rag_token",
                      "closed_book", "long ROUGE-L", "not run: dpr (not trained", "knowledge update: EM by index", "model",
                      "index_a", "questions B")
    for label in chinese_labels if chinese else english_labels:
        assert label in printed, label
    for label in english_labels if chinese else chinese_labels:
        assert label not in printed, label
    assert json.loads(_stdout(*args, "--json")) == {
        "out": str(tmp_path / "run"), "results": str(tmp_path / "run" / "results.json"),
        "report": str(tmp_path / "run" / "report.md"), **{k: REPRODUCED[k] for k in ("retrieval", "qa", "knowledge_update")}}


def test_claim_sentences_name_every_column_tied_at_an_end():
    """Two columns with the same printed mean: a first-found maximum called one of them the highest
    (RAG-Token 0.689, RAG-Sequence 0.689, stitched 0.683 read "highest for RAG-Token")."""
    from lewisrag.eval.reports.claims import claim_sentences

    def col(hal):
        return {"claims.hallucination": {"mean": hal, "n": 4}}

    columns = {"a": col(0.6891), "b": col(0.6889), "c": col(0.683), "d": col(0.5)}
    assert claim_sentences(columns, str)[4].endswith("(highest for a and b, lowest for d).")
    columns["d"] = col(0.689)
    assert "(highest for a, b and d, lowest for c)" in claim_sentences(columns, str)[4]
    assert "（最高：a、b 和 d，最低：c）" in claim_sentences(columns, str, "zh")[4]


@pytest.mark.parametrize("frozen,word", [(0.925, "above"), (0.9204, "level with"), (0.915, "below")])
def test_the_ablation_sentence_compares_what_it_prints(frozen, word):
    """0.925 against 0.920 read "the frozen retriever is above the jointly trained one (92% vs 92%)"."""
    from lewisrag.experiments.report import _table6

    by_k = {"1": 0.925, "2": 0.925, "5": 0.920, "10": 0.920}
    ab = {"ks": [1, 2, 5, 10], "trained_k": 5, "n_docs": {"rag_token": by_k, "rag_sequence": by_k},
          "frozen_retriever": {"by_k": by_k, "exact_match": frozen}, "bm25_retriever": {"by_k": by_k, "exact_match": 0.77}}
    sentence = _table6({"ablations": ab}, Messages("en"))[-2]
    assert sentence.startswith(f"At K=5 the frozen retriever is {word} the jointly trained one ({frozen:.3f} vs 0.920) "
                               "and BM25 is below it (0.770)"), sentence


def test_the_report_names_every_system_tied_for_the_best():
    """RAG-Token and RAG-Sequence with the same exact match: the first found was called the best."""
    from lewisrag.experiments.report import _long_form, _table1

    qa = {s: {"exact_match": em, "f1": em, "rougeL": em, "long": {"n": 9, "rougeL": em / 10, "bleu1": 0.0}}
          for s, em in (("rag_token", 0.962), ("rag_sequence", 0.9621), ("closed_book", 0.001))}
    for lang, best, long in (("en", "RAG-Token and RAG-Sequence share the highest exact match (96%), +96 points",
                              "On 9 long-form questions RAG-Token and RAG-Sequence share the highest ROUGE-L (0.096)"),
                             ("zh", "RAG-Token 和 RAG-Sequence 的精确匹配（EM）并列最高（96%）",
                              "在 9 道长答案题上，RAG-Token 和 RAG-Sequence 的 ROUGE-L 并列最高（0.096）")):
        t = Messages(lang)
        assert _table1({"qa": qa}, t)[-2].startswith(best), _table1({"qa": qa}, t)[-2]
        assert _long_form({"qa": qa}, t)[-2].startswith(long), _long_form({"qa": qa}, t)[-2]
    qa["rag_sequence"]["exact_match"] = 0.966
    assert _table1({"qa": qa}, Messages("en"))[-2].startswith("RAG-Sequence has the highest exact match (97%)")
    for s in qa:
        qa[s]["long"]["rougeL"] = 0.0
    assert _long_form({"qa": qa}, Messages("en"))[-2].startswith("On 9 long-form questions every system scores the same "
                                                                "ROUGE-L (0.000)")


def test_the_ablation_sentence_names_every_k_tied_for_the_best():
    """K=2 and K=5 with the same printed exact match: the first found was called RAG-Token's best K."""
    from lewisrag.experiments.report import _table6

    by_k = {"1": 0.80, "2": 0.9251, "5": 0.9249, "10": 0.90}
    ab = {"ks": [1, 2, 5, 10], "trained_k": 5, "n_docs": {"rag_token": by_k, "rag_sequence": by_k},
          "frozen_retriever": {"by_k": by_k, "exact_match": 0.9}, "bm25_retriever": {"by_k": by_k, "exact_match": 0.7}}
    assert _table6({"ablations": ab}, Messages("en"))[-2].endswith("RAG-Token does best at K=2 and K=5.")
    assert "RAG-Token 在 K=2 和 K=5 时最好" in _table6({"ablations": ab}, Messages("zh"))[-2]
    by_k["5"] = 0.92
    assert _table6({"ablations": ab}, Messages("en"))[-2].endswith("RAG-Token does best at K=2.")
