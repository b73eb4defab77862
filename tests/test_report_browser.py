"""report.html in a real browser: Playwright driving Debian's chromium (installed by .ci/run).

The BugHunt page is opened from a file, the hallucinated answer is judged statement by statement,
the live faithfulness and the agreement are read back, the reveal shows the failure chain with the
primary cause framed, and an injected passage full of markup stays text. A screenshot at 1280x800
goes to $LEWISRAG_SCREENSHOT_DIR (or the test's tmp dir).

The same page in Chinese (`lang="zh"`): the same walk-through in Chinese words, no English label left,
nothing wider than the 1280x800 window, and its Chinese headings drawn with a CJK font (asked of the
browser itself through the DevTools protocol, CSS.getPlatformFontsForNode), not as boxes. The CJK font
is fonts-wqy-microhei, which .ci/run installs beside chromium.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from lewisrag.eval.bughunt import load_bughunt
from lewisrag.eval.reports.html import page_data_from_results, render_report_html
from lewisrag.eval.evaluator import evaluate_bughunt
from test_i18n import ENGLISH_PAGE

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
EVIL = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">'
POSTERIORS = {"tokens": ["接口", "返回", "422"], "docs": ["[1] REQ-AUTH-03", "[2] BUG-1042", "[3] REQ-USER-02"],
              "matrix": [[0.7, 0.2, 0.1], [0.5, 0.3, 0.2], [0.9, 0.05, 0.05]]}
CJK_FAMILIES = ("WenQuanYi", "Noto Sans CJK", "Noto Serif CJK", "Source Han", "Droid Sans Fallback", "AR PL")


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


def _page_file(tmp_path: Path, lang: str = "en") -> Path:
    sample = load_bughunt()
    results = evaluate_bughunt(sample).to_json()
    hallucinated = next(r for r in results["records"] if r["name"] == "hallucinated")
    hallucinated["contexts"].append({"id": "evil", "title": EVIL, "text": "before " + EVIL + " after"})
    hallucinated["token_posteriors"] = POSTERIORS
    page = page_data_from_results(results, {d.id: d.to_dict() for d in sample.docs}, lang=lang)
    path = tmp_path / f"report_{lang}.html"
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


def test_citations_of_position_numbered_contexts_in_chromium(tmp_path):
    """Contexts with ids that are not numbers are cited by position: the page's [2] points at the
    second passage ("REQ-B"), in its tooltip and in the passage's heading."""
    exe = _chromium()
    from playwright.sync_api import sync_playwright
    from typer.testing import CliRunner

    from lewisrag.cli import app

    answers = tmp_path / "answers.jsonl"
    answers.write_text(json.dumps({"user_input": "Which code does a wrong password get?", "response": "It gets 422 [2]. Or 9 [5].",
                                   "retrieved_contexts": [{"id": "REQ-A", "title": "A", "text": "Logins are logged."},
                                                          {"id": "REQ-B", "title": "B", "text": "A wrong password gets 422."}]}) + "\n")
    r = CliRunner().invoke(app, ["eval", "answers", "--answers", str(answers), "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto((tmp_path / "run" / "report.html").as_uri())
            cites = page.locator("#statements .cite")
            assert cites.evaluate_all("es => es.map(e => [e.textContent, e.title])") == [
                ["[2]", "cites passage REQ-B"], ["[5]", "cites [5]: no retrieved passage has that label"]]
            assert page.locator("article.passage[data-id='REQ-B'] .pid").text_content() == "#2  [2]  REQ-B"
        finally:
            browser.close()


def _judge_and_reveal(page, words: dict | None = None) -> None:
    """The hallucinated answer judged by hand, then revealed; `words` are the page's texts (English by default)."""
    w = {"after_all": "after all 3 are judged", "agree": "2 / 3 agree", "differ": "you differ", **(words or {})}
    page.click("button[data-system='hallucinated']")
    assert page.get_attribute("button[data-system='hallucinated']", "aria-selected") == "true"
    statements = page.locator("#statements li.statement")
    assert statements.count() == 3
    statements.nth(0).locator("button.judge.yes").click()  # 422: supported by REQ-AUTH-03
    assert page.text_content("#your-faithfulness") == "100.0%"
    statements.nth(1).locator("button.judge.no").click()  # the toast is in no passage
    assert page.text_content("#your-faithfulness") == "50.0%"
    assert page.text_content("#agreement") == w["after_all"]  # no verdict leaks early
    statements.nth(2).locator("button.judge.yes").click()  # a wrong call: the lockout is made up
    assert page.text_content("#your-faithfulness") == "66.7%"
    assert page.text_content("#agreement") == w["agree"]
    assert page.is_hidden("#revealed")
    page.click("#reveal")
    assert page.is_visible("#revealed")
    assert w["differ"] in statements.nth(2).text_content()
    primary = page.locator(".layer.primary")
    assert primary.count() == 1 and primary.get_attribute("data-layer") == "generation_distorted"
    style = primary.evaluate("e => [getComputedStyle(e).borderTopColor, getComputedStyle(e).borderTopWidth]")
    assert style == ["rgb(192, 38, 45)", "3px"]
    assert sorted(page.locator(".layer.consequence").evaluate_all("es => es.map(e => e.dataset.layer)")) == [
        "citation", "generation_not_used"]
    citations = page.text_content("#citations")
    assert "TOKEN_NOT_FOUND" in citations and "3, toast" in citations
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


def _shots(tmp_path: Path) -> Path:
    shots = Path(os.environ.get("LEWISRAG_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    return shots


def _cjk_font_installed() -> None:
    """A skip (a failure where CI installed one) naming the missing font package when fontconfig knows no Chinese font."""
    missing = pytest.fail if os.environ.get("LEWISRAG_REQUIRE_BROWSER") == "1" else pytest.skip
    fc = shutil.which("fc-list")
    if fc is None or not subprocess.run([fc, ":lang=zh", "family"], capture_output=True, text=True, check=False).stdout.strip():
        missing("no Chinese font for chromium: apt-get install fonts-wqy-microhei (as .ci/run does) or fonts-noto-cjk")


# Block-level boxes whose content is wider than they are, or whose right edge is past the window; a box inside a
# horizontally scrolling container (.scroll: the heatmap, the claims table) may be wider, by design.
OVERFLOW_JS = """() => {
  const out = [], width = document.documentElement.clientWidth;
  for (const el of document.body.querySelectorAll("*")) {
    const style = getComputedStyle(el);
    if (style.display === "none" || style.display === "inline" || el.closest(".scroll") || !el.getClientRects().length) continue;
    const box = el.getBoundingClientRect();
    const clipped = ["auto", "scroll", "hidden"].includes(style.overflowX);
    if (box.right > width + 1 || (!clipped && el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1))
      out.push(el.tagName.toLowerCase() + "." + el.className + ": " + (el.textContent || "").slice(0, 40));
  }
  return out;
}"""


def _platform_fonts(page, selector: str) -> dict[str, int]:
    """{font family: glyphs drawn with it} for the text of the first element matching `selector`, as chromium drew it."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("DOM.enable")
    cdp.send("CSS.enable")
    root = cdp.send("DOM.getDocument")["root"]["nodeId"]
    node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
    fonts = cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
    return {f["familyName"]: f["glyphCount"] for f in fonts}


def test_chinese_page_in_chromium(tmp_path):
    exe = _chromium()
    _cjk_font_installed()
    from playwright.sync_api import sync_playwright

    path = _page_file(tmp_path, "zh")
    shots = _shots(tmp_path)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.route("http*://**/*", lambda route: route.abort())
            page.goto(path.as_uri())
            assert page.evaluate("document.documentElement.lang") == "zh-CN"
            assert page.evaluate(OVERFLOW_JS) == []  # before the reveal ...
            assert page.text_content("button[data-system='hallucinated']") == "用上了但歪曲（幻觉）"
            _judge_and_reveal(page, {"after_all": "全部 3 条判完后显示", "agree": "2 / 3 一致", "differ": "你的判定不同"})
            assert page.text_content("#reveal") == "隐藏参考判定"
            assert page.text_content(".layer.primary .lverdict") == "失败" and page.text_content(".layer.primary .lrole") == "主因"
            assert page.text_content("#chain-note") == "先修“生成：用歪了”这一层。这个预设回答是特意写成在“生成：用歪了”这一层失败的。"
            assert page.evaluate(OVERFLOW_JS) == []  # ... and after it
            assert page.evaluate("document.documentElement.scrollWidth") <= 1280
            visible = page.evaluate("document.body.innerText")
            assert [e for e in ENGLISH_PAGE if e in visible] == []
            for heading in ("逐条判定陈述", "检索到的段落", "参考判定与各层", "这些数字怎么算", "陈述级诊断"):
                assert heading in visible, heading
            fonts = _platform_fonts(page, ".col-left .card:nth-of-type(2) h2")  # 逐条判定陈述: six CJK glyphs
            cjk = {f: n for f, n in fonts.items() if any(f.startswith(c) for c in CJK_FAMILIES)}
            assert sum(cjk.values()) == len("逐条判定陈述"), fonts
            page.screenshot(path=str(shots / "report_bughunt_zh.png"))
            page.screenshot(path=str(shots / "report_bughunt_zh_full.png"), full_page=True)
            assert errors == []
        finally:
            browser.close()
    assert (shots / "report_bughunt_zh.png").stat().st_size > 10_000
