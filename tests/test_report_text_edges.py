"""Text from a run stays on its table row whatever line ending it holds (CommonMark ends a line at \\n, \\r
and \\r\\n), and every Chinese report.md whose plots kept English labels (no CJK font) says so: compare's
beside position.png and `eval bughunt`'s beside distributions.png, as the evaluation's report already did."""

from __future__ import annotations

import doctest

import pytest
from typer.testing import CliRunner

from lewisrag.eval.reports import i18n
from lewisrag.eval.reports import markdown as M
from lewisrag.eval.reports.i18n import MESSAGES

NOTE = MESSAGES["rep.plots.no_cjk"][1]
SYSTEMS = ("rag_token", "rag_sequence", "stitched")


def test_doctests():
    assert doctest.testmod(M).failed == 0


@pytest.mark.parametrize("ending", ["\n", "\r", "\r\n"], ids=["LF", "CR", "CRLF"])
def test_a_line_ending_in_a_cell_keeps_the_table_row_whole(ending):
    text = f"first{ending}| second"
    assert M.escape(text) == r"first \| second" and M.code(text) == "`first | second`"
    rows = M.table(["id", "answer"], [["q1", text], [M.Markdown(M.code(text)), "x"]])
    assert "\r" not in "\n".join(rows) and all(len(row.splitlines()) == 1 for row in rows), rows
    markdown_it = pytest.importorskip("markdown_it")
    html = markdown_it.MarkdownIt().enable("table").render("\n".join(rows) + "\n")
    assert html.count("<tr>") == 3 and "second" in html, html  # the header and both rows, no row split off


def _card(position: dict) -> dict:
    """A compare scorecard as `compare.scorecard` returns it, enough for `render_markdown`."""
    return {"qa": {n: {"exact_match": 0.5, "f1": 0.5, "rougeL": 0.5, "n": 20, "answered": 20} for n in SYSTEMS},
            "retrieval": {n: {"recall_at_k": 0.9, "k": 3} for n in SYSTEMS},
            "layers": {n: {"citation_precision": None, "forward_passes_per_answer": 4.0, "tokens_per_answer": 40.0,
                           "failure_layers": {"none": 1}, "not_in_kb": {"n": 0, "refused": 0}} for n in SYSTEMS},
            "timings": {n: {"latency_s": 0.1} for n in SYSTEMS}, "position": position}


def test_compare_report_says_when_position_png_kept_english_labels():
    from lewisrag.experiments.compare import render_markdown

    card = _card({n: {"positions": [1, 2, 3], "exact_match": [0.5, 0.5, 0.5]} for n in SYSTEMS})
    assert NOTE in render_markdown(card, "zh", plots_in_english=True)
    assert NOTE not in render_markdown(card, "zh") and NOTE not in render_markdown(card, "en", plots_in_english=True)


def test_bughunt_report_md_says_when_distributions_png_kept_english_labels(tmp_path, monkeypatch):
    from lewisrag.cli import app

    def bughunt(name: str, *args: str) -> str:
        r = CliRunner().invoke(app, ["eval", "bughunt", "--out", str(tmp_path / name), *args])
        assert r.exit_code == 0 and (tmp_path / name / "distributions.png").is_file(), r.output
        return (tmp_path / name / "report.md").read_text(encoding="utf-8")

    if i18n.cjk_font() is not None:  # a font: the labels are Chinese, nothing to say
        assert NOTE not in bughunt("zh_font", "--lang", "zh")
    monkeypatch.setattr(i18n, "cjk_font", lambda: None)  # no CJK font: the plots fall back to English
    assert NOTE in bughunt("zh", "--lang", "zh")
    assert NOTE not in bughunt("en")
