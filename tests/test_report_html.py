"""report.html without a browser: escaping, self-containment, page data shape, the heatmap."""

from __future__ import annotations

import doctest
import json
import re

import pytest
from typer.testing import CliRunner

from lewisrag.cli import app
from lewisrag.eval.reports import html as report_html
from lewisrag.eval.bughunt import load_bughunt
from lewisrag.eval.reports.html import check_token_posteriors, embed_json, heatmap_html, page_data_from_results, render_report_html
from lewisrag.eval.evaluator import evaluate_bughunt

EVIL = '</script><script>alert(1)</script><img src=x onerror="alert(2)">&amp;\u2028'
POSTERIORS = {"tokens": ["接口", "<b>", "422"], "docs": ["[1]", "[3]"], "matrix": [[0.75, 0.25], [0.5, 0.5], [1.0, 0.0]]}


@pytest.fixture(scope="module")
def bughunt():
    sample = load_bughunt()
    return sample, evaluate_bughunt(sample).to_json()


def _page(bughunt, **extra) -> tuple[dict, str]:
    sample, results = bughunt
    results = json.loads(json.dumps(results))  # a copy the test may change
    results["records"][0]["contexts"].append({"id": "evil", "title": EVIL, "text": EVIL})
    results["records"][0].update(extra)
    data = page_data_from_results(results, {d.id: d.to_dict() for d in sample.docs})
    return data, render_report_html(data)


def test_doctests():
    assert doctest.testmod(report_html).failed == 0


def test_dangerous_text_never_appears_unescaped(bughunt):
    data, page = _page(bughunt)
    for raw in ("</script><script>alert(1)", "<img src=x", "\u2028"):
        assert raw not in page
    assert page.count("</script>") == 2  # the data block's and the code's own
    block = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S).group(1)
    assert not set(block) & set("<>&")
    assert json.loads(block) == data  # what the JS parses is the data, unchanged
    assert EVIL in [c["text"] for c in json.loads(block)["questions"][0]["answers"][0]["contexts"]]
    assert embed_json("\u2029") == '"\\u2029"'


def test_page_is_self_contained(bughunt):
    _, page = _page(bughunt)
    assert not re.search(r'(src|href)\s*=\s*["\']?\s*(https?:)?//', page, re.I)
    assert not re.search(r"<link[^>]+stylesheet", page, re.I) and "@import" not in page and "url(" not in page
    assert "katex" not in page.lower() and "mathjax" not in page.lower()
    assert "<style>" in page and "textContent" in page and "innerHTML" not in page
    assert "{{" not in page  # every placeholder filled


def test_page_data_shape(bughunt):
    data, _ = _page(bughunt)
    assert data["kind"] == "bughunt" and [l["key"] for l in data["layers"]][0] == "retrieval"
    (q,) = data["questions"]
    assert q["question"].startswith("登录时密码输错了") and len(q["answers"]) == 6
    by = {a["system"]: a for a in q["answers"]}
    hal = by["hallucinated"]
    assert [s["supported"] for s in hal["statements"]] == [True, False, False]
    assert hal["diagnosis"]["primary"] == "generation_distorted" and hal["granularity"]["atomic"]["statements"] == 6
    assert [r["id"] for r in hal["reference_statements"]] == ["R1", "R2", "R3"]
    assert [(r["in_contexts"], r["in_answer"]) for r in hal["reference_statements"]] == [(True, True), (True, False), (True, False)]
    assert [c["status"] for c in hal["citation_checks"]] == ["PASS", "TOKEN_NOT_FOUND", "TOKEN_NOT_FOUND"]
    assert [v["supported"] for v in hal["citation_verdicts"]] == [True, False, False]
    # REQ-AUTH-03 is gold: marked where retrieved, listed with its text where not
    assert [c["gold"] for c in hal["contexts"]] == [True, False, False] and hal["missing_gold"] == []
    (missing,) = by["not_retrieved"]["missing_gold"]
    assert missing["id"] == "1" and missing["title"].startswith("REQ-AUTH-03") and "422" in missing["text"]


def test_eval_records_group_by_question_and_system():
    rec = {"question": "q?", "response": "a [1].", "contexts": [{"id": "1", "title": "", "text": "a"}], "gold_passage_ids": ["1", "9"],
           "statements": [], "citation_checks": [], "metrics": {}, "diagnosis": {"layers": {}, "primary": None, "consequences": []}}
    results = {"lewisrag": {"kind": "eval"}, "judge": {"name": "lexical", "fingerprint": "ab" * 32},
               "records": [{**rec, "id": "q1", "system": "rag_token"}, {**rec, "id": "q2", "system": "rag_token"},
                           {**rec, "id": "q1", "system": "stitched"}]}
    data = page_data_from_results(results)
    assert [(q["id"], [a["system"] for a in q["answers"]]) for q in data["questions"]] == [("q1", ["rag_token", "stitched"]), ("q2", ["rag_token"])]
    assert data["questions"][0]["answers"][0]["missing_gold"] == [{"id": "9", "title": "", "text": None}]
    with pytest.raises(ValueError, match="'q1' has no 'contexts'"):
        page_data_from_results({**results, "records": [{k: v for k, v in results["records"][0].items() if k != "contexts"}]})


def test_contexts_carry_the_label_they_are_cited_by():
    """[2] names the second context when no context id is a number (records.AnswerRecord.docs); the page
    pairs each citation with its passage by that label, not by id."""
    rec = {"question": "q?", "response": "b [2].", "gold_passage_ids": [], "statements": [], "citation_checks": [], "metrics": {},
           "diagnosis": {"layers": {}, "primary": None, "consequences": []}}
    named = [{"id": "REQ-A", "title": "", "text": "a"}, {"id": "REQ-B", "title": "", "text": "b"}]
    numbered = [{"id": "07", "title": "", "text": "a"}, {"id": "REQ-B", "title": "", "text": "b"}]
    for contexts, labels in ((named, ["1", "2"]), (numbered, ["7", "REQ-B"])):
        results = {"lewisrag": {"kind": "eval"}, "records": [{**rec, "id": "q", "contexts": contexts}]}
        (answer,) = page_data_from_results(results)["questions"][0]["answers"]
        assert [c["cite"] for c in answer["contexts"]] == labels


def test_heatmap_from_crafted_posteriors(bughunt):
    data, page = _page(bughunt, token_posteriors=POSTERIORS)
    assert data["questions"][0]["answers"][0]["token_posteriors"]["matrix"][2] == [1.0, 0.0]
    (section,) = re.findall(r'<section class="heatmap card" data-key="0/0" hidden>.*?</section>', page, re.S)
    assert section.count("<td") == 6 and section.count('<th scope="col"') == 3 and "&lt;b&gt;" in section
    opacities = [float(x) for x in re.findall(r"rgba\(200, 40, 40, ([0-9.]+)\)", section)]
    assert opacities == [0.75, 0.5, 1.0, 0.25, 0.5, 0.0]  # row [1] across the tokens, then row [3]
    assert "heatmap card" not in _page(bughunt)[1]  # no posteriors, no heatmap


def test_heatmap_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"must be \(T=2, K=2\) = tokens x docs"):
        check_token_posteriors({"tokens": ["a", "b"], "docs": ["1", "2"], "matrix": [[0.5, 0.5]]})
    with pytest.raises(ValueError, match="row 0 .* not a distribution"):
        heatmap_html({"tokens": ["a"], "docs": ["1", "2"], "matrix": [[0.5, 0.6]]}, "0/0")


def test_eval_bughunt_writes_the_page_and_plots(tmp_path):
    out = tmp_path / "bh"
    r = CliRunner().invoke(app, ["eval", "bughunt", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == [".lewisrag", "config.json", "distributions.png", "report.html", "report.md", "results.json"]
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "misplaced_citations" in page
    assert (out / "distributions.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
