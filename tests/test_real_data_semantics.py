"""What real data means once read: trivia_qa's configs (rc's repeated rows, the test split's "<unk>"),
DPR's TriviaQA biencoder files (`psg_id`), the base preset's retrieval measures (DPR's top-k accuracy
by answer strings beside the gold-id hit rate) and answers that normalize to nothing.

trivia_qa fixtures are written by `datasets` itself with the features of the hub's loading script
(trivia_qa.py: `answer` an object of value, aliases and normalized forms; the test split's answer
`{"value": "<unk>", "aliases": [], ...}`); DPR's biencoder JSON as its TriviaQA files hold it, each
context naming its passage `psg_id`.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import run_main, write_jsonl
from lewisrag.data.io import InputError, LewisragWarning
from lewisrag.data.passages import PassageTable
from lewisrag.data.records import Passage, QAExample, answer_sources, check_gold_ids, read_qa, read_questions
from lewisrag.scoring.qa import exact_match, normalize_answer, token_f1


def _trivia_features():
    from datasets import Features, Sequence, Value

    text = Value("string")
    return Features({
        "question": text, "question_id": text, "question_source": text,
        "entity_pages": Sequence({"doc_source": text, "filename": text, "title": text, "wiki_context": text}),
        "search_results": Sequence({"description": text, "filename": text, "rank": Value("int32"), "title": text,
                                    "url": text, "search_context": text}),
        "answer": {"aliases": Sequence(text), "normalized_aliases": Sequence(text), "matched_wiki_entity_name": text,
                   "normalized_matched_wiki_entity_name": text, "normalized_value": text, "type": text, "value": text}})


def trivia_row(qid: str, question: str, value: str, aliases: list[str], source: str = "web") -> dict:
    """A row as the hub's script writes it; `source` tells rc's web and wikipedia copies of a question apart."""
    pages = {"doc_source": [source], "filename": [f"{qid}.txt"], "title": [question], "wiki_context": [""]}
    search = {"description": [], "filename": [], "rank": [], "title": [], "url": [], "search_context": []}
    return {"question": question, "question_id": qid, "question_source": "http://www.triviaquiz.example/",
            "entity_pages": pages, "search_results": search,
            "answer": {"aliases": aliases, "normalized_aliases": [a.lower() for a in aliases],
                       "matched_wiki_entity_name": "", "normalized_matched_wiki_entity_name": "",
                       "normalized_value": value.lower(), "type": "WikipediaEntity", "value": value}}


def write_trivia(path: Path, rows: list[dict]) -> Path:
    import datasets

    datasets.Dataset.from_list(rows, features=_trivia_features()).to_parquet(str(path))
    return path


SARTRE = ("tc_1", "Which French philosopher wrote Being and Nothingness?", "Jean-Paul Sartre", ["Jean-Paul Sartre", "Sartre"])
THE_THE = ("tc_2", "Which band recorded Soul Mining?", "The The", ["The The", "The the"])


# --- trivia_qa ----------------------------------------------------------------------------------------


def test_trivia_rc_rows_repeating_a_question_are_one_question_and_counted(tmp_path):
    """rc.nocontext holds a question once per evidence source: its web and wikipedia rows share the
    question_id. They were refused as a duplicate id; now each question is read once, and a warning
    says how many rows were merged."""
    rows = [trivia_row(*SARTRE), trivia_row(*THE_THE), trivia_row(*SARTRE, source="wikipedia"),
            trivia_row(*THE_THE, source="wikipedia")]
    path = write_trivia(tmp_path / "trivia_rc_train.parquet", rows)
    with pytest.warns(LewisragWarning, match=r"2 in all.*unfiltered\.nocontext") as caught:
        examples = read_qa(path)
    assert str(path) in str(caught[0].message)
    assert [(ex.id, ex.answers) for ex in examples] == [("tc_1", ["Jean-Paul Sartre", "Sartre"]), ("tc_2", ["The The", "The the"])]
    with pytest.warns(LewisragWarning, match="2 in all"):
        assert [line for line, _ in answer_sources(path)] == [1, 2]
        assert [q.id for q in read_questions(path)] == ["tc_1", "tc_2"]


def test_a_missing_gold_id_is_named_on_its_line_past_merged_rows(tmp_path):
    """An error about an example names the row it was read from: merged rows are skipped there too
    (a user's JSONL copy of rc with a gold_passage_ids column)."""
    rows = [{**trivia_row(*SARTRE), "gold_passage_ids": ["p1"]}, {**trivia_row(*SARTRE, source="wikipedia"), "gold_passage_ids": ["p1"]},
            {**trivia_row(*THE_THE), "gold_passage_ids": ["p9"]}]
    path = write_jsonl(tmp_path / "trivia_gold.jsonl", rows)
    with pytest.warns(LewisragWarning, match="1 in all"):
        examples = read_qa(path)
        with pytest.raises(InputError) as e:
            check_gold_ids(examples, [Passage("p1", "t", "x")], path, "the index I")
    assert (e.value.line, e.value.field) == (3, "gold_passage_ids") and "'p9' is not in the index I" in e.value.message


@pytest.mark.parametrize("change, field", [({"answer": {**trivia_row(*SARTRE)["answer"], "aliases": ["Sartre"]}}, "answer.aliases"),
                                          ({"answer": {**trivia_row(*SARTRE)["answer"], "value": "Sartre"}}, "answer.value"),
                                          ({"question": "Who wrote Nausea?"}, "question")])
def test_trivia_rows_of_one_id_that_say_otherwise_are_refused_naming_line_and_field(tmp_path, change, field):
    rows = [trivia_row(*SARTRE), trivia_row(*THE_THE), {**trivia_row(*SARTRE, source="wikipedia"), **change}]
    path = write_trivia(tmp_path / "trivia.parquet", rows)
    for read in (read_qa, read_questions):
        with pytest.raises(InputError) as e:
            read(path)
        assert (e.value.source, e.value.line, e.value.field) == (str(path), 3, field)
        assert "where line 1 of the same id 'tc_1'" in e.value.message


def test_trivia_test_split_has_no_answers_and_is_refused_as_a_qa_set(tmp_path, monkeypatch, capsys):
    """The hub's test split writes `{"value": "<unk>", "aliases": []}` for the answer it does not have:
    read as the answer "<unk>", it scored EM 0 as --test and trained the generator to say "<unk>"."""
    unk = trivia_row("tc_t1", "Who wrote Ulysses?", "<unk>", [])
    unk["answer"] |= {"normalized_value": "<unk>", "matched_wiki_entity_name": "<unk>",
                      "normalized_matched_wiki_entity_name": "<unk>", "type": ""}
    path = write_trivia(tmp_path / "trivia_test.parquet", [unk, {**unk, "question_id": "tc_t2", "question": "Who wrote Dubliners?"}])
    with pytest.raises(InputError) as e:
        read_qa(path)
    assert (e.value.source, e.value.line, e.value.field) == (str(path), 1, "answer.value")
    assert "trivia_qa's test split holds none" in str(e.value) and "\n" not in str(e.value)
    assert [(q.id, q.answers) for q in read_questions(path)] == [("tc_t1", []), ("tc_t2", [])]  # index tune, eval retrieval
    passages = write_jsonl(tmp_path / "passages.jsonl", [{"id": "p1", "title": "Ulysses", "text": "Ulysses is a novel."}])
    capsys.readouterr()  # datasets' progress bar, when it wrote the file
    code, _, err = run_main(monkeypatch, capsys, "train", "dpr", "--train", path, "--passages", passages, "--out", tmp_path / "dpr")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {path}:1: field 'answer.value'"), err
    assert "test split holds none" in lines[0] and not (tmp_path / "dpr").exists()
    # "<unk>" with aliases is not the placeholder: read as it stands
    ok = write_trivia(tmp_path / "ok.parquet", [trivia_row("tc_3", "Who?", "<unk>", ["Unknown"])])
    assert read_qa(ok)[0].answers == ["<unk>", "Unknown"]


# --- DPR's TriviaQA biencoder files ---------------------------------------------------------------------


def dpr_context(title: str, pid: str, key: str) -> dict:
    return {"title": title, "text": "...", "score": 10.2, "title_score": 0, key: pid}


def test_dpr_trivia_contexts_name_their_passages_psg_id(tmp_path):
    """DPR's biencoder-trivia-*.json name each context's passage `psg_id`, its NQ files `passage_id`:
    read by `passage_id` alone, every TriviaQA question had no gold id, and nothing said so."""
    records = [{"dataset": "trivia_dev", "question": "Who wrote Being and Nothingness?", "answers": ["Jean-Paul Sartre"],
                "positive_ctxs": [dpr_context("Jean-Paul Sartre", "2", "psg_id"), dpr_context("Sartre", "5", "psg_id")],
                "negative_ctxs": [dpr_context("Aaron", "9", "psg_id")],
                "hard_negative_ctxs": [dpr_context("Simone de Beauvoir", "1", "psg_id")]},
               {"dataset": "trivia_dev", "question": "Which band recorded Soul Mining?", "answers": ["The The"],
                "positive_ctxs": [dpr_context("The The", "7", "psg_id")], "negative_ctxs": [], "hard_negative_ctxs": []}]
    path = tmp_path / "biencoder-trivia-dev.json"
    path.write_text(json.dumps(records, indent=1))
    examples = read_qa(path)
    assert [(ex.gold_passage_ids, ex.hard_negative_ids) for ex in examples] == [(["2", "5"], ["1"]), (["7"], [])]
    assert [q.gold_passage_ids for q in read_questions(path)] == [["2", "5"], ["7"]]
    passages = [Passage(pid, "t", "x") for pid in ("1", "2", "7")]
    with pytest.raises(InputError) as e:  # a gold id the passages lack is named at its context
        check_gold_ids(examples, passages, path, "the index I")
    assert (e.value.line, e.value.field) == (2, "positive_ctxs[1].psg_id") and "'5' is not in the index I" in e.value.message
    mixed = [{**records[1], "positive_ctxs": [dpr_context("The The", "7", "psg_id"), {"title": "x", "text": "..."}]}]
    (tmp_path / "mixed.json").write_text(json.dumps(mixed))
    with pytest.raises(InputError) as e:  # all or none, as for passage_id
        read_qa(tmp_path / "mixed.json")
    assert e.value.field == "positive_ctxs[1].psg_id" and "positive_ctxs[0] has one" in e.value.message


# --- the base preset's retrieval measures --------------------------------------------------------------


PASSAGES = [Passage("31", "France", "What is the capital of France? The capital of France is Paris."),
            Passage("7", "Paris", "Paris hosts the government of the French Republic."),
            Passage("3", "Germany", "Berlin is the capital of Germany."),
            Passage("4", "Rivers", "The Seine flows through the north of the country."),
            Passage("5", "Bands", "Soul Mining is an album by The The.")]


def _base_retrieval(tmp_path: Path, test: list[QAExample]) -> dict:
    from lewisrag.experiments.base import _retrieval
    from lewisrag.index.bm25 import build_bm25_index

    build_bm25_index(PASSAGES, tmp_path / "run" / "index_a")
    return _retrieval(tmp_path / "run", test, {"encoder": None, "context_encoder": None}, lambda *a: None)["out"]["retrieval"]


def test_base_retrieval_records_dprs_answer_top_k_beside_the_gold_id_hit_rate(tmp_path):
    """The base preset labelled the share of questions with a gold passage id in the top k "DPR's
    top-k accuracy"; DPR's counts a top-k passage holding an answer string. Passage 31 holds "Paris"
    and ranks first; the gold passage 7 does not rank first."""
    test = [QAExample("q1", "what is the capital of france", ["Paris"], gold_passage_ids=["7"]),
            QAExample("q2", "which capital is Berlin", ["Berlin"], gold_passage_ids=["3"]),
            QAExample("q3", "describe the capital", ["A long written answer."], kind="long")]
    r = _base_retrieval(tmp_path, test)
    assert r["recall_at_1"] == 0.5 and r["n"] == 2  # q1's gold passage is not first
    assert r["answer_recall"]["1"] == 1.0 and r["answerable_questions"] == 2  # an answer in both first passages; q3 is long


def test_base_retrieval_measures_answer_top_k_on_questions_without_gold_ids(tmp_path):
    """nq_open's and DPR's .qa.csv test sets name no gold passage: retrieval was "not measured"; DPR
    measures them by answer strings, and so does the base preset now."""
    test = [QAExample("q1", "what is the capital of france", ["Paris"]),
            QAExample("q2", "who recorded soul mining", ["The The"]),
            QAExample("q3", "which river flows north", ["Loire"])]
    r = _base_retrieval(tmp_path, test)
    assert "gold_passage_ids" in r["skipped"] and "recall_at_1" not in r
    # a 5-passage index: no top-20 (it would be the top 5's)
    assert r["answer_recall"] == {"1": 2 / 3, "5": 2 / 3} and r["answerable_questions"] == 3


def test_report_shows_dprs_answer_top_k_beside_the_gold_id_hit_rate(tmp_path):
    """report.md showed only the gold-id measure, and for nq_open "Not measured" though the stage
    recorded DPR's own; each in its table, named for what it counts, in both languages."""
    from lewisrag.eval.reports.i18n import Messages
    from lewisrag.experiments.record_schema import check_stage_record
    from lewisrag.experiments.report import _retrieval

    nq = _base_retrieval(tmp_path / "nq", [QAExample("q1", "what is the capital of france", ["Paris"]),
                                           QAExample("q2", "which river flows north", ["Loire"])])
    gold = _base_retrieval(tmp_path / "gold", [QAExample("q1", "what is the capital of france", ["Paris"],
                                                         gold_passage_ids=["7"])])
    for r in (nq, gold):  # what --resume reads back holds the new fields as the stage wrote them
        check_stage_record(tmp_path / "retrieval.json", "retrieval", {"out": {"retrieval": r}})
    md = "\n".join(_retrieval({"retrieval": nq}, Messages("en")))
    assert "## Retrieval: DPR's top-k accuracy (a top-k passage holds an answer string; 2 short-answer test questions" in md
    assert "| DPR (given pair) | 0.500 | 0.500 |\n" in md and "top-20" not in md and "Not measured: no test question has gold_passage_ids" in md
    md = "\n".join(_retrieval({"retrieval": gold}, Messages("zh")))
    assert "DPR 的 top-k 准确率" in md and "## 检索：前 k 个段落里有金标段落 id" in md


# --- answers that normalize to nothing -----------------------------------------------------------------


@pytest.mark.parametrize("answers", [["€"], ["."], ["The The", "The the"]])
def test_an_answer_that_normalizes_to_nothing_is_not_matched_by_an_empty_prediction(answers):
    """readers refuse a blank answer so that an empty output cannot match it; one that normalizes to ""
    did match: EM and F1 1.0 for saying nothing (or "the")."""
    assert normalize_answer(answers[0]) == ""
    for prediction in ("", " ", "the", "."):
        if prediction.strip().casefold() != answers[0].casefold():
            assert exact_match(prediction, answers) == 0.0 and token_f1(prediction, answers) == 0.0, prediction
    assert exact_match(answers[0].upper(), answers) == token_f1(f" {answers[0].lower()} ", answers) == 1.0  # as written


def test_index_cuts_answer_recall_finds_them_as_exact_match_compares_them():
    """`index cut` skipped such answers (EM matched them, its answer recall never found them), and
    looked for a Chinese answer between spaces, which Chinese text does not have."""
    from lewisrag.index.cut import _answer_hits

    table = PassageTable(pa.table({"id": [p.id for p in PASSAGES] + ["8", "9"], "title": [p.title for p in PASSAGES] + ["", ""],
                                   "text": [p.text for p in PASSAGES] + ["The euro sign is €.", "法国的首都是巴黎。"]}), "mem")
    questions = [QAExample("b", "band?", ["The The"]), QAExample("e", "euro?", ["€"]), QAExample("z", "首都?", ["巴黎"])]
    rows = np.array([[2, 4], [0, 5], [6, 0]])  # each question's retrieved rows, best first
    assert _answer_hits(table, questions, rows, None).tolist() == [[False, True], [False, True], [True, False]]


WORDS = ["the", "Eiffel", "tower", "Paris", "1,000", "U.S.", "don't", "a", "towers", "is", "in", "x"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join), st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join))
def test_has_answer_on_ascii_text_is_whole_words_with_every_mark_a_space(text, answer):
    """On ASCII text a non-empty normalized answer is found between spaces of the normalized text,
    both normalized with every punctuation mark a space (`normalize_passage`), as DPR's tokenizer
    makes each mark a token: deleted, as the cut's earlier rule deleted them, "don't" held no "don"."""
    from lewisrag.scoring.qa import has_answer, normalize_passage

    gold = normalize_passage(answer)
    if gold:
        assert has_answer(text, SimpleNamespace(answers=[answer])) == (f" {gold} " in f" {normalize_passage(text)} ")


def test_non_ascii_english_is_folded_as_the_module_says():
    """scoring.qa's docstring: ASCII text as SQuAD; any non-ASCII text, English too, folded further."""
    assert exact_match("don't", ["don’t"]) == exact_match("Hello", ["“Hello”"]) == exact_match("fi", ["ﬁ"]) == 1.0
    assert exact_match("100", ["£100"]) == exact_match("x2", ["x²"]) == exact_match("Jean-Paul", ["Jean–Paul"]) == 1.0
    assert exact_match("abc", ["abc\u200b"]) == 1.0 and exact_match("Don t", ["Don't"]) == 0.0  # ASCII: SQuAD's
