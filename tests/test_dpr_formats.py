"""DPR's own data files: the passages TSV (psgs_w100.tsv), the QA files (nq-test.qa.csv, ...) and the
retriever training JSON (biencoder-nq-train.json), written here in DPR's layouts (quoting included),
with bad rows named by file, line and field."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from conftest import run_main, write_jsonl
from lewisrag.data.io import InputError, derived_id
from lewisrag.data.passages import PassageTable, is_table_source, open_passages
from lewisrag.data.qa_formats import detect_qa_schema
from lewisrag.data.records import Passage, read_passages, read_qa, read_questions

HEADER = "id\ttext\ttitle\n"


def psgs_line(pid: str, text: str, title: str) -> str:
    """One line of psgs_w100.tsv: the text always quoted, a quote inside doubled, as DPR's file has it
    (`1<TAB>"Aaron Aaron ( or ; ""Ahärôn"") is a prophet, ..."<TAB>Aaron`)."""
    return f'{pid}\t"{text.replace(chr(34), 2 * chr(34))}"\t{title}\n'


def write_psgs(path: Path, rows) -> Path:
    path.write_text(HEADER + "".join(psgs_line(*r) for r in rows), encoding="utf-8")
    return path


def biencoder_record(question: str, answers: list[str], positives: list[dict], **extra) -> dict:
    """A record of DPR's biencoder-*.json, every field DPR writes."""
    ctx = lambda c: {"title": c.get("title", "T"), "text": c.get("text", "some text"), "score": 1000, "title_score": 1,
                     **({"passage_id": c["passage_id"]} if "passage_id" in c else {})}
    return {"dataset": "nq_train_psgs_w100", "question": question, "answers": answers,
            "positive_ctxs": [ctx(c) for c in positives],
            "negative_ctxs": [ctx({"passage_id": "999", "text": "a random passage"})],
            "hard_negative_ctxs": [ctx({"passage_id": "998", "text": "a BM25 passage"})], **extra}


def write_json(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj, indent=4, ensure_ascii=False), encoding="utf-8")  # DPR's files are indented
    return path


# --- passages: psgs_w100.tsv -----------------------------------------------------------------


def test_psgs_tsv_reads_as_dprs_csv_reader_reads_it(tmp_path):
    """Quoted text with doubled quotes, a tab inside quotes, values a CSV reader might take for missing
    ("NA", "null", an empty title): every row as DPR's csv.reader(delimiter="\\t") reads it, all strings."""
    rows = [("1", 'Aaron Aaron ( or ; "Ahärôn") is a prophet', "Aaron"), ("2", "NA", "null"),
            ("3", "a tab\tinside quotes", ""), ("10", '"quoted at both ends"', 'Title "with" quotes'), ("007", "x", "N/A")]
    path = write_psgs(tmp_path / "psgs_w100.tsv", rows)
    with open(path, newline="", encoding="utf-8") as f:
        dpr = [Passage(r[0], r[2], r[1]) for r in csv.reader(f, delimiter="\t") if r[0] != "id"]
    table = open_passages(path)
    assert isinstance(table, PassageTable) and is_table_source(path)
    assert list(table) == dpr and [p.id for p in table] == ["1", "2", "3", "10", "007"]
    assert table[0].text == 'Aaron Aaron ( or ; "Ahärôn") is a prophet' and table[3].title == 'Title "with" quotes'
    assert len(open_passages(path, limit=2)) == 2


def test_psgs_tsv_limit_reads_and_checks_only_the_head(tmp_path, monkeypatch):
    """--max-passages of the 13 GB file parses its first blocks only: a bad row past the limit is not met."""
    from lewisrag.data import passages as P

    monkeypatch.setattr(P.tsv, "TSV_BLOCK", 4096)  # many small blocks
    rows = [(str(i), f"passage number {i} " * 5, f"T{i}") for i in range(1, 2001)]
    path = tmp_path / "psgs.tsv"
    path.write_text(HEADER + "".join(psgs_line(*r) for r in rows) + "2001\tbroken\n", encoding="utf-8")
    assert [p.id for p in open_passages(path, limit=50)] == [str(i) for i in range(1, 51)]
    with pytest.raises(InputError, match=r"psgs.tsv:2002: expected 3 tab-separated fields \(id, text, title\), got 2"):
        open_passages(path)


@pytest.mark.parametrize("body, needle", [
    ("id\ttitle\ttext\n1\tx\ty\n", ":1: expected DPR's passages header 'id<TAB>text<TAB>title' (psgs_w100.tsv's), got 'id\\ttitle\\ttext'"),
    ("1\tx\ty\n", ":1: expected DPR's passages header"),
    (HEADER + '1\t"a"\tT\n2\t"b"\n', ":3: expected 3 tab-separated fields (id, text, title), got 2"),
    (HEADER + '1\t"a"\tT\n2\t"b"\tT\textra\n', ":3: expected 3 tab-separated fields (id, text, title), got 4"),
    (HEADER + '1\t"a"\tT\n\t"b"\tT\n', ":3: field 'id': empty"),
    (HEADER + '1\t"a"\tT\n2\t""\tT\n', ":3: field 'text': empty"),
    (HEADER + '1\t"a"\tT\n2\t"   "\tT\n', ":3: field 'text': empty"),
    (HEADER + '1\t"a"\tT\n\n', ":3: a blank line (DPR's file holds one passage a line)"),
    (HEADER + '1\t"a"\tT\n1\t"b"\tT\n', ":3: field 'id': duplicate id '1' (first on line 2)"),
    (HEADER + '1\t"a"\tT\n2\t"two\nlines"\tT\n', ":3: field 'text': a line break inside a quoted field"),
    (HEADER, ": no passages"),
])
def test_psgs_tsv_bad_rows_are_named_by_line(tmp_path, body, needle):
    path = tmp_path / "psgs.tsv"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(InputError) as e:
        open_passages(path)
    assert str(e.value).startswith(str(path)) and needle in str(e.value) and "\n" not in str(e.value), e.value


def test_psgs_tsv_not_utf8_is_named(tmp_path):
    path = tmp_path / "psgs.tsv"
    path.write_bytes(HEADER.encode() + b'1\t"a"\tT\n2\t"caf\xe9"\tT\n')
    with pytest.raises(InputError, match=r"psgs.tsv:3: field 'text': not valid UTF-8 \(byte 3\)"):
        list(open_passages(path))


# --- QA: nq-test.qa.csv ---------------------------------------------------------------------


def test_dpr_qa_csv_reads_questions_and_answers_with_derived_ids(tmp_path):
    """DPR's layout, no header; a question with quotes is quoted by csv; answers a Python list literal
    in either quote style. Ids as for any id-less file: the same as its JSONL copy's."""
    lines = ["who sings does he love me with reba\t['Linda Davis']",
             '"who sang ""kiss from a rose"""\t["Seal", \'Seal (musician)\']',
             "",  # a blank line, skipped as JSONL's are
             "where is dunkin' donuts based\t[\"Dunkin' Donuts\", 'Canton, Massachusetts']"]
    path = tmp_path / "nq-test.qa.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    examples = read_qa(path)
    assert [(e.question, e.answers) for e in examples] == [
        ("who sings does he love me with reba", ["Linda Davis"]),
        ('who sang "kiss from a rose"', ["Seal", "Seal (musician)"]),
        ("where is dunkin' donuts based", ["Dunkin' Donuts", "Canton, Massachusetts"])]
    copy = write_jsonl(tmp_path / "copy.jsonl", [{"question": e.question, "answers": e.answers} for e in examples])
    assert [e.id for e in examples] == [e.id for e in read_qa(copy)] == [derived_id(e.question, {}) for e in examples]
    assert [(e.id, e.question, e.answers) for e in read_questions(path)] == [(e.id, e.question, []) for e in examples]
    tsv = tmp_path / "trivia-dev.tsv"  # .tsv reads the same
    tsv.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    assert read_qa(tsv) == examples


@pytest.mark.parametrize("line, needle", [
    ("only a question", ":2: expected 2 tab-separated fields (question, answers: DPR's .qa.csv layout), got 1"),
    ("q\t['a']\textra", ":2: expected 2 tab-separated fields (question, answers: DPR's .qa.csv layout), got 3"),
    ("q\tLinda Davis", ":2: field 'answers': expected a Python list literal of strings (DPR's layout: ['Linda Davis']), got 'Linda Davis'"),
    ("q\t'Linda Davis'", ":2: field 'answers': expected a Python list literal of strings"),
    ("q\t__import__('os').getcwd()", ":2: field 'answers': expected a Python list literal of strings"),  # never evaluated
    ("q\t[1, 2]", ":2: field 'answers': expected a list of strings"),
    ("q\t[]", ":2: field 'answers': empty list"),
    ("q\t['']", ":2: field 'answers[0]': empty answer"),
    ("\t['a']", ":2: field 'question': empty"),
])
def test_dpr_qa_csv_bad_rows_are_named(tmp_path, line, needle):
    path = tmp_path / "nq-dev.qa.csv"
    path.write_text(f"first question\t['an answer']\n{line}\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_qa(path)
    assert str(e.value).startswith(str(path)) and needle in str(e.value) and "\n" not in str(e.value), e.value


def test_dpr_qa_csv_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "nq.qa.csv"
    path.write_bytes(b"q\t['a']\nq2\t['caf\xe9']\n")
    with pytest.raises(InputError, match=r"nq.qa.csv:2: not valid UTF-8 \(byte 8\)"):
        read_qa(path)


@pytest.mark.parametrize("name", ["curatedtrec-test.qa.csv", "curatedtrec-train.qa.csv", "biencoder-curatedtrec-train.json"])
def test_curatedtrec_reads_its_answers_as_patterns(tmp_path, name):
    """CuratedTrec's answers are regular expressions: read_qa keeps them as patterns and marks the
    examples regex-answered (scored by regex match, tests/test_curatedtrec.py), told by the name."""
    path = tmp_path / name
    if name.endswith(".json"):
        write_json(path, [biencoder_record("what is the capital of france", ["Paris|paris", "Par\\s?is"], [{"passage_id": "1"}])])
    else:
        path.write_text("what is the capital of france\t['Paris|paris', 'Par\\s?is']\n", encoding="utf-8")
    (ex,) = read_qa(path)
    assert (ex.answers, ex.answer_match) == (["Paris|paris", "Par\\s?is"], "regex")
    assert [q.question for q in read_questions(path)] == ["what is the capital of france"]


# --- retriever training JSON: biencoder-nq-train.json ----------------------------------------


def test_biencoder_json_reads_gold_ids_from_positive_contexts(tmp_path):
    records = [biencoder_record("who is the leader of x", ["Ana"], [{"passage_id": "11"}, {"passage_id": "12"}, {"passage_id": "11"}]),
               biencoder_record("where is y", ["Z", "Zed"], [{"passage_id": 7}]),  # a number, read as the id string
               biencoder_record("no positives", ["A"], [])]  # DPR leaves these out of training: here, no gold ids
    path = write_json(tmp_path / "biencoder-nq-dev.json", records)
    assert detect_qa_schema(records[0], path, 1).name == "dpr"
    examples = read_qa(path)
    assert [(e.question, e.answers, e.gold_passage_ids) for e in examples] == [
        ("who is the leader of x", ["Ana"], ["11", "12"]), ("where is y", ["Z", "Zed"], ["7"]), ("no positives", ["A"], [])]
    assert [e.id for e in examples] == [derived_id(e.question, {}) for e in examples]
    assert [(e.id, e.gold_passage_ids) for e in read_questions(path)] == [(e.id, e.gold_passage_ids) for e in examples]


def test_biencoder_json_without_passage_ids_has_no_gold_ids(tmp_path):
    """Older releases carry no passage_id on contexts: the examples then have no gold ids, none guessed."""
    rec = biencoder_record("q?", ["a"], [{"title": "T"}, {"title": "U"}])
    path = write_json(tmp_path / "biencoder-trivia-dev.json", [rec])
    assert detect_qa_schema(rec, path, 1).name == "dpr"
    assert read_qa(path)[0].gold_passage_ids == [] and read_questions(path)[0].gold_passage_ids == []


def test_a_record_with_answers_and_no_positive_contexts_reads_as_lewisrags(tmp_path):
    """The DPR shape is told by `positive_ctxs`: any other record with `answers` reads as before."""
    rec = {"question": "q?", "answers": ["a"], "gold_passage_ids": ["p1"]}
    assert detect_qa_schema(rec, "f", 1).name == "lewisrag"
    assert read_qa(write_jsonl(tmp_path / "qa.jsonl", [rec]))[0].gold_passage_ids == ["p1"]


@pytest.mark.parametrize("positives, needle", [
    ([{"passage_id": "1"}, {}], ":3: field 'positive_ctxs[1].passage_id': missing, where positive_ctxs[0] has one"),
    ([{"passage_id": ""}], ":3: field 'positive_ctxs[0].passage_id': empty"),
    ([{"passage_id": ["1"]}], ":3: field 'positive_ctxs[0].passage_id': expected a string, got list"),
    ("not a list", ":3: field 'positive_ctxs': expected a list of contexts, got str"),
    (["a string"], ":3: field 'positive_ctxs[0]': expected an object, got str"),
])
def test_biencoder_json_bad_contexts_are_named(tmp_path, positives, needle):
    bad = biencoder_record("q2?", ["a"], [])
    bad["positive_ctxs"] = [{"title": "T", "text": "t", **p} if isinstance(p, dict) else p for p in positives] \
        if isinstance(positives, list) else positives
    path = tmp_path / "biencoder-nq-train.json"
    path.write_text("[\n" + json.dumps(biencoder_record("q1?", ["a"], [{"passage_id": "1"}])) + ",\n" + json.dumps(bad) + "\n]\n")
    for read in (read_qa, read_questions):
        with pytest.raises(InputError) as e:
            read(path)
        assert str(e.value).startswith(str(path)) and needle in str(e.value), e.value


# --- end to end ------------------------------------------------------------------------------


def test_index_build_on_psgs_tsv_and_eval_retrieval_with_biencoder_gold_ids(tiny_corpus, tmp_path, monkeypatch, capsys):
    """The tiny corpus as psgs_w100.tsv and its questions as biencoder JSON: a BM25 index of the TSV
    scores as one of the JSONL, and a gold id the index lacks is named at its context."""
    passages = read_passages(tiny_corpus["passages"])
    qa = read_qa(tiny_corpus["qa"])
    tsv = write_psgs(tmp_path / "psgs_w100.tsv", [(p.id, p.text, p.title) for p in passages])
    bienc = write_json(tmp_path / "biencoder-nq-dev.json",
                       [biencoder_record(e.question, e.answers, [{"passage_id": g} for g in e.gold_passage_ids]) for e in qa])
    scores = []
    for source, questions in ((tsv, bienc), (tiny_corpus["passages"], tiny_corpus["qa"])):
        out = tmp_path / f"bm25-{source.suffix[1:]}"
        code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", source, "--encoder", "bm25", "--out", out)
        assert code == 0, err
        code, stdout, err = run_main(monkeypatch, capsys, "eval", "retrieval", "--index", out, "--questions", questions,
                                     "--recall-at", "1", "--recall-at", "5", "--json")
        assert code == 0, err
        result = json.loads(stdout)[str(out)]
        # per question, keyed by id: ids derived from the questions for DPR's file, which holds none
        keyed = {k: list(result.pop(k).values()) for k in ("per_question", "first_gold")}
        scores.append((result, keyed))
    assert scores[0] == scores[1] and scores[0][0]["n"] == len(qa)

    records = json.loads(bienc.read_text())
    records[3]["positive_ctxs"][0]["passage_id"] = "not-in-psgs"
    code, _, err = run_main(monkeypatch, capsys, "eval", "retrieval", "--index", tmp_path / "bm25-tsv", "--questions",
                            write_json(tmp_path / "biencoder-bad.json", records), "--json")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "biencoder-bad.json:" in err and "field 'positive_ctxs[0].passage_id': gold passage id 'not-in-psgs' is not in" in err


def test_train_dpr_takes_psgs_tsv_and_biencoder_json(tiny_corpus, tmp_path, monkeypatch, capsys):
    passages = read_passages(tiny_corpus["passages"])
    tsv = write_psgs(tmp_path / "psgs_w100.tsv", [(p.id, p.text, p.title) for p in passages])
    bienc = write_json(tmp_path / "biencoder-nq-train.json",
                       [biencoder_record(e.question, e.answers, [{"passage_id": g} for g in e.gold_passage_ids])
                        for e in read_qa(tiny_corpus["qa"])])
    code, _, err = run_main(monkeypatch, capsys, "train", "dpr", "--train", bienc, "--passages", tsv, "--out", tmp_path / "dpr",
                            "--steps", 1, "--batch-size", 4, "--vocab-size", 300, "--hidden-size", 16, "--layers", 1,
                            "--device", "cpu")
    assert code == 0, err
    assert (tmp_path / "dpr").is_dir()
