"""An audit of `lewisrag chunk`, `world`, `index search` and `index cut` from the user's side: each
test is an input that once gave wrong numbers, a misleading message or a result that looked like a
ranking and was none. (What these commands already refused well is covered by test_data_cli.py,
test_chunking.py, test_world.py, test_index_cut.py and test_index_verify.py.)"""

from __future__ import annotations

import json

from conftest import run_main
from test_index import dpr_ckpt  # noqa: F401  (a module fixture: the tiny DPR checkpoint)
from test_index_cut import corpus  # noqa: F401  (a module fixture: wiki_dpr-like shards and their DPR)


def _one_line(code, err, *needles):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and "Traceback" not in err and len(lines) == 1 and lines[0].startswith("error: "), err
    assert all(n in lines[0] for n in needles), (needles, lines[0])


def _cut(monkeypatch, capsys, corpus, out, *questions):  # noqa: F811
    flags = [f for q in questions for f in ("--questions", q)]
    return run_main(monkeypatch, capsys, "index", "cut", "--passages", corpus["shards"], "--encoder", corpus["dpr"],
                    "--max-passages", 20, "--top", 3, "--no-gold", "--device", "cpu", "--out", out, *flags, "--json")


def test_a_questions_file_given_twice_is_refused(corpus, tmp_path, monkeypatch, capsys):  # noqa: F811
    """The same --questions file twice was read twice: cut.json counted its questions twice and
    weighed them twice in the answer recall, with no word said."""
    code, out, _ = _cut(monkeypatch, capsys, corpus, tmp_path / "once", corpus["qa"])
    assert code == 0 and json.loads(out)["questions"] == len(corpus["examples"])
    other_spelling = corpus["qa"].parent / ".." / corpus["qa"].parent.name / corpus["qa"].name
    for second in (corpus["qa"], other_spelling):
        code, _, err = _cut(monkeypatch, capsys, corpus, tmp_path / "twice", corpus["qa"], second)
        _one_line(code, err, "--questions", f"{second} is given twice")
        assert not (tmp_path / "twice").exists()


def test_a_questions_file_inside_out_is_named_once(corpus, tmp_path, monkeypatch, capsys):  # noqa: F811
    """The refusal of an --out that holds a --questions file named the file twice ("holds --questions
    q.jsonl q.jsonl"), as if two files were at fault."""
    out = tmp_path / "out"
    out.mkdir()
    inside = out / "qa.jsonl"
    inside.write_bytes(corpus["qa"].read_bytes())
    code, _, err = _cut(monkeypatch, capsys, corpus, out, inside)
    _one_line(code, err, f"holds --questions {inside}, which")
    code, _, err = _cut(monkeypatch, capsys, corpus, out, corpus["qa"], inside)
    _one_line(code, err, f"holds --questions #2 {inside}, which")


def _search(monkeypatch, capsys, index, query):
    return run_main(monkeypatch, capsys, "index", "search", "--index", index, "-q", query, "--json")


def test_a_bm25_query_no_passage_holds_is_said(tiny_corpus, tmp_path, monkeypatch, capsys):
    """A query of words no passage holds (or stop words only) listed five passages scored 0, in the
    index's order, as if they were its best matches."""
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", tiny_corpus["passages"], "--encoder",
                            "bm25", "--out", tmp_path / "bm25")
    assert code == 0, err
    for query in ("zzqxv wwkrt", "the of and", "???"):
        code, out, err = _search(monkeypatch, capsys, tmp_path / "bm25", query)
        assert code == 0 and [h["score"] for h in json.loads(out)] == [0.0] * 5, err
        assert err.startswith("note: no passage holds a word of the query") and "not ranked" in err, err
        # nor in the index's order, as the note once said: BM25 lists score ties last row first
        assert "index's order" not in err and "order means nothing" in err, err
    code, out, err = _search(monkeypatch, capsys, tmp_path / "bm25", "Who is the leader?")
    assert code == 0 and json.loads(out)[0]["score"] > 0 and "note" not in err, err


def test_a_dense_query_of_words_the_encoder_does_not_know_is_said(tiny_corpus, dpr_ckpt, tmp_path,  # noqa: F811
                                                                  monkeypatch, capsys):
    """A query whose every word is the question encoder's unknown token (a Chinese query to an English
    encoder) got the hits of an empty query, with nothing said; `ask` says it of such a question."""
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", tiny_corpus["passages"], "--encoder",
                            dpr_ckpt, "--device", "cpu", "--out", tmp_path / "dense")
    assert code == 0, err
    code, out, err = _search(monkeypatch, capsys, tmp_path / "dense", "检索 模型")
    assert code == 0 and len(json.loads(out)) == 5, err
    assert "note: the question encoder's vocabulary knows no word of the query" in err, err
    code, out, err = _search(monkeypatch, capsys, tmp_path / "dense", "Who is the leader?")
    assert code == 0 and "note" not in err, err

