"""report.html in a real browser: Playwright driving Debian's chromium (installed by .ci/run).

The BugHunt page is opened from a file, the hallucinated answer is judged statement by statement,
the live faithfulness and the agreement are read back, the reveal shows the failure chain with the
primary cause framed, and an injected passage full of markup stays text. A screenshot at 1280x800
goes to $LEWISRAG_SCREENSHOT_DIR (or the test's tmp dir).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from lewisrag.eval.bughunt import load_bughunt
from lewisrag.eval.reports.html import page_data_from_results, render_report_html
from lewisrag.eval.evaluator import evaluate_bughunt

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
EVIL = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">'
POSTERIORS = {"tokens": ["接口", "返回", "422"], "docs": ["[1] REQ-AUTH-03", "[2] BUG-1042", "[3] REQ-USER-02"],
              "matrix": [[0.7, 0.2, 0.1], [0.5, 0.3, 0.2], [0.9, 0.05, 0.05]]}


def _chromium() -> str:
    """The browser executable, or a skip that says what is missing (a failure where CI installed one:
    LEWISRAG_REQUIRE_BROWSER=1, set by .ci/run, turns a missing browser from a skip into an error)."""
    missing = pytest.fail if os.environ.get("LEWISRAG_REQUIRE_BROWSER") == "1" else pytest.skip
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing("playwright is not installed: pip install -e '.[test]'")
    exe = os.environ.get("LEWISRAG_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(exe).exists():
        missing(f"no chromium executable at {exe}: apt-get install chromium (as .ci/run does)")
    return exe


def _page_file(tmp_path: Path) -> Path:
    sample = load_bughunt()
    results = evaluate_bughunt(sample).to_json()
    hallucinated = next(r for r in results["records"] if r["name"] == "hallucinated")
    hallucinated["contexts"].append({"id": "evil", "title": EVIL, "text": "before " + EVIL + " after"})
    hallucinated["token_posteriors"] = POSTERIORS
    page = page_data_from_results(results, {d.id: d.to_dict() for d in sample.docs})
    path = tmp_path / "report.html"
    path.write_text(render_report_html(page), encoding="utf-8")
    return path


def test_bughunt_page_in_chromium(tmp_path):
    exe = _chromium()
    from playwright.sync_api import sync_playwright

    path = _page_file(tmp_path)
    shots = Path(os.environ.get("LEWISRAG_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            errors, outside = [], []
            page.on("pageerror", lambda e: errors.append(str(e)))

            def no_network(route) -> None:  # a self-contained page asks for nothing over the network
                outside.append(route.request.url)
                route.abort()

            page.route("http*://**/*", no_network)
            page.goto(path.as_uri())
            _judge_and_reveal(page)
            page.screenshot(path=str(shots / "report_bughunt.png"))
            _check_escaping(page)
            _check_heatmap(page)
            page.screenshot(path=str(shots / "report_bughunt_full.png"), full_page=True)
            assert errors == [] and outside == []
        finally:
            browser.close()
    assert (shots / "report_bughunt.png").stat().st_size > 10_000


def _judge_and_reveal(page) -> None:
    page.click("button[data-system='hallucinated']")
    assert page.get_attribute("button[data-system='hallucinated']", "aria-selected") == "true"
    statements = page.locator("#statements li.statement")
    assert statements.count() == 3
    statements.nth(0).locator("button.judge.yes").click()  # 422: supported by REQ-AUTH-03
    assert page.text_content("#your-faithfulness") == "100.0%"
    statements.nth(1).locator("button.judge.no").click()  # the toast is in no passage
    assert page.text_content("#your-faithfulness") == "50.0%"
    assert page.text_content("#agreement") == "after all 3 are judged"  # no verdict leaks early
    statements.nth(2).locator("button.judge.yes").click()  # a wrong call: the lockout is made up
    assert page.text_content("#your-faithfulness") == "66.7%"
    assert page.text_content("#agreement") == "2 / 3 agree"
    assert page.is_hidden("#revealed")
    page.click("#reveal")
    assert page.is_visible("#revealed")
    assert "you differ" in statements.nth(2).text_content()
    primary = page.locator(".layer.primary")
    assert primary.count() == 1 and primary.get_attribute("data-layer") == "generation_distorted"
    style = primary.evaluate("e => [getComputedStyle(e).borderTopColor, getComputedStyle(e).borderTopWidth]")
    assert style == ["rgb(192, 38, 45)", "3px"]
    assert sorted(page.locator(".layer.consequence").evaluate_all("es => es.map(e => e.dataset.layer)")) == [
        "citation", "generation_not_used"]
    assert "QUOTE_NOT_FOUND" in page.text_content("#citations")
    page.evaluate("window.scrollTo(0, 0)")


def _check_escaping(page) -> None:
    evil = page.locator("article.passage[data-id='evil']")
    assert evil.locator(".ptext").text_content() == "before " + EVIL + " after"
    assert evil.locator(".ptitle").text_content() == EVIL
    assert evil.locator("img, script").count() == 0
    assert page.evaluate("typeof window.__pwned") == "undefined"


def _check_heatmap(page) -> None:
    heat = page.locator("section.heatmap[data-key='0/3']")
    assert heat.is_visible() and heat.locator("td").count() == 9
    page.click("button[data-system='correct']")  # only the answer that has posteriors shows them
    assert heat.is_hidden()
    page.click("button[data-system='hallucinated']")
    assert heat.is_visible()
