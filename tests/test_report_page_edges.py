"""report.html and report.md at their edges: a sentence written twice, digits that round on a half, a primary
cause outside diagnose.CAUSES (compare's generator_failed), a not_in_kb answer that does not refuse, an
unnamed system on the Chinese page, a run of no questions, unbroken long text, double underscores in
report.md, and the Chinese report.md's note on plots that kept English labels.

The page data and report.md are checked here in Python; what the page's script does with them is checked
in Debian's chromium through Playwright, as tests/test_report_browser.py does (a skip without a browser,
a failure where .ci/run installed one).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lewisrag.cli import app
from lewisrag.eval.evaluator import NO_SYSTEM
from lewisrag.eval.reports.html import page_data_from_results, render_report_html
from lewisrag.eval.reports.i18n import MESSAGES, messages
from lewisrag.eval.reports.markdown import escape, render_results
from lewisrag.experiments.compare import mark_failed
from test_report_browser import CHROMIUM_ARGS, OVERFLOW_JS, _chromium

LOGIN = [{"id": "1", "title": "A", "text": "Login returns 422."}, {"id": "2", "title": "B", "text": "Signup errors are red."}]
# one supported statement of 16: faithfulness and the citation scores are 1/16 = 0.0625, which Python writes
# 0.062 (a half rounds to the even digit) and JS's toFixed(3) wrote 0.063; one gold passage of two: recall@k 0.5
SIXTEEN = "Login returns 422 [1]. " + " ".join(f"Zebra number {i} flies over mountain {i} [1]." for i in range(2, 17))
LONG = "https://example.com/" + "a" * 600
ANSWERS = [
    {"id": "dup", "user_input": "What does login return?", "response": "Login returns 422 [2]. Login returns 422 [1].",
     "retrieved_contexts": LOGIN, "reference_statements": ["Login returns 422"]},
    {"id": "half", "user_input": "What does login return?", "response": SIXTEEN, "retrieved_contexts": LOGIN[:1],
     "gold_passage_ids": ["1", "9"], "reference_statements": ["Login returns 422"]},
    {"id": "nik", "user_input": "Who founded the company?", "response": "Ana Kel founded it in 2010.", "retrieved_contexts": [],
     "category": "not_in_kb"},
    {"id": "long", "user_input": "What is at " + LONG + "?", "response": "The page " + LONG + " returns 422 [1].",
     "retrieved_contexts": LOGIN[:1], "reference_statements": ["Login returns 422"]},
]
QUESTIONS = [a["id"] for a in ANSWERS] + ["failed"]  # the page's questions, in order


def _eval(tmp_path: Path, rows: list[dict], *args: str) -> Path:
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    r = CliRunner().invoke(app, ["eval", "answers", "--answers", str(answers), "--out", str(tmp_path / "run"), *args])
    assert r.exit_code == 0, r.output
    return tmp_path / "run"


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    """The run of ANSWERS (one unnamed system), with one more question whose generator failed (compare.mark_failed)."""
    run = _eval(tmp_path_factory.mktemp("edges"), ANSWERS)
    data = json.loads((run / "results.json").read_text(encoding="utf-8"))
    failed = copy.deepcopy(data["records"][0])
    failed.update(id="failed", response="")
    mark_failed(failed, "timeout after 5s (3 attempts)")
    data["records"].append(failed)
    return data


def _answer(data: dict, qid: str) -> dict:
    return next(q for q in data["questions"] if q["id"] == qid)["answers"][0]


def test_the_page_prints_the_digits_report_md_prints(results):
    page = page_data_from_results(results)
    half = _answer(page, "half")["shown"]
    assert half["faithfulness"] == half["citation_recall"] == half["citation_precision"] == "0.062"
    assert half["recall_at_k"] == "@1 0.500, @5 0.500, @10 0.500"
    row = next(line for line in render_results(results).splitlines() if line.startswith("| half |"))
    assert "0.062" in row and "@1 0.500, @5 0.500, @10 0.500" in row and "0.063" not in row
    assert _answer(page, "dup")["shown"]["answer_relevancy"] == "–"  # null: as report.md's cells


def test_a_primary_cause_outside_the_causes_is_named_in_the_pages_language(results):
    for lang in ("en", "zh"):
        causes = {c["key"]: c for c in page_data_from_results(results, lang=lang)["causes"]}
        assert causes["generator_failed"] == {"key": "generator_failed", "label": messages(lang).word("layer", "generator_failed"),
                                              "layers": []}
    assert causes["generator_failed"]["label"] == "生成器失败"


def test_an_unnamed_system_is_named_in_the_pages_language_or_as_report_md_groups_it(results):
    zh = page_data_from_results(results, lang="zh")
    assert {a["label"] for q in zh["questions"] for a in q["answers"]} == {"回答"}
    mixed = copy.deepcopy(results)
    mixed["records"][0]["system"] = "sysA"
    answers = page_data_from_results(mixed, lang="zh")["questions"][1]["answers"]
    assert answers[0]["system"] == NO_SYSTEM == "(no system)" and "label" not in answers[0]


def test_the_no_questions_message_is_in_both_languages():
    en, zh = MESSAGES["js.no_questions"]
    assert en and zh and messages("zh").js()["no_questions"] == zh


def test_report_md_escapes_double_underscores_and_keeps_snake_case():
    assert escape("Call obj.__init__ here") == r"Call obj.\_\_init\_\_ here"
    assert escape("snake_case a_b_c 中_文") == "snake_case a_b_c 中_文"
    markdown_it = pytest.importorskip("markdown_it")
    assert markdown_it.MarkdownIt().renderInline(escape("Call obj.__init__ or __x__ here")) == "Call obj.__init__ or __x__ here"


def test_the_chinese_report_md_says_its_plots_kept_english_labels(tmp_path, monkeypatch):
    from lewisrag.eval.reports import i18n

    note = MESSAGES["rep.plots.no_cjk"][1]
    monkeypatch.setattr(i18n, "cjk_font", lambda: None)  # no CJK font: the plots fall back to English
    run = _eval(tmp_path, ANSWERS[:1], "--lang", "zh")
    assert note in (run / "report.md").read_text(encoding="utf-8") and (run / "distributions.png").exists()
    (tmp_path / "en").mkdir()
    en = _eval(tmp_path / "en", ANSWERS[:1])
    assert note not in (en / "report.md").read_text(encoding="utf-8")
    data = json.loads((run / "results.json").read_text(encoding="utf-8"))
    assert note not in render_results(data, "zh", plots_in_english=False)


# ------------------------------------------------------------------------------------------------
# the page's script, in chromium


def _open(browser, path: Path):
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route("http*://**/*", lambda route: route.abort())
    page.goto(path.as_uri())
    return page, errors


def _overflow(page) -> list[str]:
    """OVERFLOW_JS's boxes wider than their content allows, but the question picker: a select cuts its own long option."""
    return [box for box in page.evaluate(OVERFLOW_JS) if not box.startswith("select.")]


def _show(page, qid: str) -> None:
    page.select_option("#question-select", str(QUESTIONS.index(qid)))
    if page.is_hidden("#revealed"):
        page.click("#reveal")


def test_the_page_at_its_edges_in_chromium(results, tmp_path):
    exe = _chromium()
    from playwright.sync_api import sync_playwright

    paths = {}
    for lang in ("en", "zh"):
        paths[lang] = tmp_path / f"report_{lang}.html"
        paths[lang].write_text(render_report_html(page_data_from_results(results, lang=lang)), encoding="utf-8")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
        try:
            page, errors = _open(browser, paths["en"])
            _show(page, "dup")  # each copy of a sentence written twice has its own verdict
            rows = page.locator("#citations tr").evaluate_all("rs => rs.map(r => [...r.cells].map(c => c.textContent))")
            assert [[r[0], r[1], r[2].split(":")[0], r[3]] for r in rows] == [
                ["Login returns 422.", "[2]", "TOKEN_NOT_FOUND", "no"], ["Login returns 422.", "[1]", "PASS", "yes"]]
            _show(page, "half")  # report.md's digits
            cards = dict(page.locator("#metric-cards .mcard").evaluate_all(
                "cs => cs.map(c => [c.querySelector('.label').textContent, c.querySelector('.value').textContent])"))
            assert cards["reference faithfulness"] == cards["citation recall"] == "0.062"
            assert cards["recall@k"] == "@1 0.500, @5 0.500, @10 0.500"
            assert "recall_at_k @1 0.500, @5 0.500, @10 0.500" in page.text_content(".layer[data-layer='retrieval']")
            _show(page, "nik")  # a not_in_kb answer that does not refuse: the refusal's note, not the primary's
            assert page.text_content("#chain-note") == "Not in the knowledge base: the answer had to refuse."
            _show(page, "failed")
            assert page.text_content("#chain-note") == "Fix generator failed first."
            page.select_option("#question-select", str(QUESTIONS.index("long")))
            assert _overflow(page) == []  # the long question, answer and statement wrap ...
            page.click("#reveal")
            assert _overflow(page) == []  # ... and so does the reference verdict's reason that quotes them
            assert errors == []

            page, errors = _open(browser, paths["zh"])
            assert page.text_content("#system-buttons button") == "回答"
            _show(page, "failed")
            assert page.text_content("#chain-note") == "先修“生成器失败”这一层。"
            _show(page, "nik")
            assert page.text_content("#chain-note") == "知识库里没有：回答本该拒答。"
            assert errors == []

            for lang, text in (("en", "This run has no questions."), ("zh", "这次运行里没有题目。")):
                empty = {**copy.deepcopy(results), "records": [], "aggregates": {}}
                path = tmp_path / f"empty_{lang}.html"
                path.write_text(render_report_html(page_data_from_results(empty, lang=lang)), encoding="utf-8")
                page, errors = _open(browser, path)
                assert page.text_content("#question-text") == text and page.is_hidden("#reveal") and errors == []
        finally:
            browser.close()
