"""The paper's other QA data as the hub holds them: FEVER v1.0 (`fever`, a row per evidence sentence),
KILT (`facebook/kilt_tasks`: nq, triviaqa_support_only, fever) and MS MARCO v2.1 (`microsoft/ms_marco`),
read by `read_qa` and `read_questions` without a field mapping, and FEVER's labels trained on by
`train rag --task fever`.

Every fixture is written by `datasets` itself (`Dataset.from_list(rows, features=...)`, then
`to_parquet` or `to_json`) with the features of each dataset's card and loading script: KILT's
`output` a list of objects with nested `provenance` lists, MS MARCO's `passages` a sequence of objects
(which `datasets` stores as an object of lists), ids as int32 where the hub has them so. No machine
here reaches the hub: the schemas are from the cards, not checked against downloaded files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_main, write_jsonl
from lewisrag.data.io import InputError
from lewisrag.data.records import answer_sources, read_qa, read_questions
from test_faults import assert_one_line_error
from test_rag_train import rag_inputs  # noqa: F401  (session fixture)


def _features(name: str):
    from datasets import Features, Sequence, Value

    text, i32 = Value("string"), Value("int32")
    if name == "fever":  # fever, config v1.0 (v2.0 alike)
        return Features({"id": i32, "label": text, "claim": text, "evidence_annotation_id": i32, "evidence_id": i32,
                         "evidence_wiki_url": text, "evidence_sentence_id": i32})
    if name == "ms_marco":  # microsoft/ms_marco, config v2.1
        return Features({"answers": Sequence(text), "passages": Sequence({"is_selected": i32, "passage_text": text, "url": text}),
                         "query": text, "query_id": i32, "query_type": text, "wellFormedAnswers": Sequence(text)})
    provenance = {"bleu_score": Value("float32"), "start_character": i32, "start_paragraph_id": i32, "end_character": i32,
                  "end_paragraph_id": i32,
                  "meta": {"fever_page_id": text, "fever_sentence_id": i32, "annotation_id": text, "yes_no_answer": text,
                           "evidence_span": [text]},
                  "section": text, "title": text, "wikipedia_id": text}
    return Features({  # facebook/kilt_tasks, every config
        "id": text, "input": text,
        "meta": {"left_context": text, "mention": text, "right_context": text,
                 "partial_evidence": [{"start_paragraph_id": i32, "end_paragraph_id": i32, "title": text, "section": text,
                                       "wikipedia_id": text, "meta": {"evidence_span": [text]}}],
                 "obj_surface": [text], "sub_surface": [text], "subj_aliases": [text], "template_questions": [text]},
        "output": [{"answer": text, "meta": {"score": i32}, "provenance": [provenance]}]})


def write(path: Path, name: str, rows: list[dict]) -> Path:
    """`rows` as `datasets` writes them: Parquet, or JSON Lines for a `.jsonl` path."""
    import datasets

    ds = datasets.Dataset.from_list(rows, features=_features(name))
    ds.to_parquet(str(path)) if path.suffix == ".parquet" else ds.to_json(str(path))
    return path


def fever_row(id_: int, claim: str, label: str, page: str = "", sentence: int = -1, annotation: int = -1) -> dict:
    return {"id": id_, "label": label, "claim": claim, "evidence_annotation_id": annotation,
            "evidence_id": -1 if annotation == -1 else annotation + 1, "evidence_wiki_url": page, "evidence_sentence_id": sentence}


FEVER = [  # the loading script's rows: one per evidence sentence of each evidence set; NOT ENOUGH INFO has one, empty
    fever_row(75397, "Nikolaj Coster-Waldau worked with the Fox Broadcasting Company.", "SUPPORTS", "Fox_Broadcasting_Company", 0, 92206),
    fever_row(75397, "Nikolaj Coster-Waldau worked with the Fox Broadcasting Company.", "SUPPORTS", "Nikolaj_Coster-Waldau", 7, 92206),
    fever_row(150448, "Roman Atwood is a content creator.", "SUPPORTS", "Roman_Atwood", 1, 174271),
    fever_row(150448, "Roman Atwood is a content creator.", "SUPPORTS", "Roman_Atwood", 3, 174271),
    fever_row(214861, "History of art includes architecture, dance, sculpture, music, painting, poetry.", "NOT ENOUGH INFO"),
    fever_row(156709, "Adrienne Bailon is an accountant.", "REFUTES", "Adrienne_Bailon", 0, 180804),
]


def provenance(title: str, paragraph: int = 1) -> dict:
    return {"bleu_score": 1.0, "start_character": 0, "start_paragraph_id": paragraph, "end_character": 40,
            "end_paragraph_id": paragraph,
            "meta": {"fever_page_id": "", "fever_sentence_id": -1, "annotation_id": "-1", "yes_no_answer": "", "evidence_span": []},
            "section": "Section::::Abstract.", "title": title, "wikipedia_id": "1234"}


def kilt(id_: str, question: str, answers: list[str], provenance_only: int = 0) -> dict:
    """A KILT record: an output entry per answer, then `provenance_only` entries the hub writes with answer ""."""
    meta = {"left_context": "", "mention": "", "right_context": "", "partial_evidence": [], "obj_surface": [],
            "sub_surface": [], "subj_aliases": [], "template_questions": []}
    outputs = [{"answer": a, "meta": {"score": 0}, "provenance": [provenance("Valdoria")]} for a in answers]
    outputs += [{"answer": "", "meta": {"score": 0}, "provenance": [provenance("Veldoria", 2)]}] * provenance_only
    return {"id": id_, "input": question, "meta": meta, "output": outputs}


def marco(query_id: int, query: str, answers: list[str], well_formed: list[str]) -> dict:
    passages = {"is_selected": [1, 0], "passage_text": ["Ana Kel leads Valdoria.", "Mirentus is a city."],
                "url": ["http://a.example/1", "http://a.example/2"]}
    return {"answers": answers, "passages": passages, "query": query, "query_id": query_id, "query_type": "PERSON",
            "wellFormedAnswers": well_formed}


def summary(examples) -> list[tuple]:
    return [(ex.id, ex.question, ex.answers, ex.gold_passage_ids, ex.kind) for ex in examples]


# --- FEVER v1.0 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_fever_rows_of_one_claim_are_one_example_with_its_label(tmp_path, suffix):
    path = write(tmp_path / f"fever{suffix}", "fever", FEVER)
    assert summary(read_qa(path)) == [
        ("75397", FEVER[0]["claim"], ["SUPPORTS"], [], "short"), ("150448", FEVER[2]["claim"], ["SUPPORTS"], [], "short"),
        ("214861", FEVER[4]["claim"], ["NOT ENOUGH INFO"], [], "short"), ("156709", FEVER[5]["claim"], ["REFUTES"], [], "short")]
    assert [(ex.id, ex.question) for ex in read_questions(path)] == [(ex.id, ex.question) for ex in read_qa(path)]
    assert answer_sources(path) == [(1, ["label"]), (3, ["label"]), (5, ["label"]), (6, ["label"])]


def test_fever_rows_of_one_claim_fold_wherever_they_stand(tmp_path):
    """A shuffled copy (a train/dev split drawn with `datasets`) keeps a claim's rows apart: they are
    still one example, where its first row stood."""
    rows = [FEVER[0], FEVER[2], FEVER[1], FEVER[5], FEVER[3]]
    assert [ex.id for ex in read_qa(write(tmp_path / "fever.parquet", "fever", rows))] == ["75397", "150448", "156709"]


@pytest.mark.parametrize("column, value", [("label", "REFUTES"), ("claim", "Nikolaj Coster-Waldau worked with Fox.")])
def test_fever_rows_of_one_id_that_disagree_are_refused_naming_both_lines(tmp_path, column, value):
    rows = [*FEVER[:3], {**FEVER[1], column: value}]
    path = write(tmp_path / "fever.parquet", "fever", rows)
    for read in (read_qa, read_questions):
        with pytest.raises(InputError) as e:
            read(path)
        assert (e.value.line, e.value.field) == (4, column) and "line 1 of the same id 75397" in e.value.message
        assert repr(value) in e.value.message and repr(FEVER[1][column]) in e.value.message


def test_fevers_unlabelled_splits_give_questions_and_no_examples(tmp_path):
    rows = [{**r, "label": ""} for r in FEVER]  # the loading script's label where the file has none
    path = write(tmp_path / "fever_unlabelled.parquet", "fever", rows)
    with pytest.raises(InputError) as e:
        read_qa(path)
    assert (e.value.line, e.value.field) == (1, "label") and "unlabelled splits hold none" in str(e.value)
    assert [q.id for q in read_questions(path)] == ["75397", "150448", "214861", "156709"]


def test_a_field_mapping_still_reads_fever_row_by_row(tmp_path):
    """`--qa-fields question=claim,answers=label` (the only way before) reads each row as an example:
    the claim's second row is a repeated id. The schema, told from the fields, needs no mapping."""
    path = write(tmp_path / "fever.parquet", "fever", FEVER)
    with pytest.raises(InputError) as e:
        read_qa(path, {"question": "claim", "answers": "label"})
    assert (e.value.line, e.value.field) == (2, "id") and "duplicate id '75397' (first on line 1)" in str(e.value)


# --- KILT ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_kilt_answers_are_the_outputs_answers_once_each(tmp_path, suffix):
    rows = [kilt("-1381777614896530476", "who leads valdoria", ["Ana Kel", "A. Kel", "Ana Kel"], provenance_only=2),  # nq
            kilt("tc_33", "Which city is the capital of Veldoria?", ["Mirentus"]),  # triviaqa_support_only
            kilt("3", "Valdoria is led by Ana Kel.", ["SUPPORTS"], provenance_only=1)]  # fever
    path = write(tmp_path / f"kilt{suffix}", "kilt", rows)
    assert summary(read_qa(path)) == [
        ("-1381777614896530476", "who leads valdoria", ["Ana Kel", "A. Kel"], [], "short"),
        ("tc_33", "Which city is the capital of Veldoria?", ["Mirentus"], [], "short"),
        ("3", "Valdoria is led by Ana Kel.", ["SUPPORTS"], [], "short")]
    assert answer_sources(path)[0] == (1, ["output[0].answer", "output[1].answer"])


def test_a_kilt_test_split_gives_questions_and_says_it_has_no_answers(tmp_path):
    rows = [{**kilt("q1", "who leads valdoria", []), "output": []}, {**kilt("q2", "capital of veldoria", []), "output": []}]
    path = write(tmp_path / "kilt_test.parquet", "kilt", rows)
    with pytest.raises(InputError) as e:
        read_qa(path)
    assert (e.value.line, e.value.field) == (1, "output") and "a KILT test split holds none" in str(e.value)
    assert [(q.id, q.question, q.answers) for q in read_questions(path)] == [("q1", "who leads valdoria", []),
                                                                           ("q2", "capital of veldoria", [])]


def test_a_kilt_record_with_provenance_only_has_no_answer(tmp_path):
    path = write(tmp_path / "kilt.parquet", "kilt", [kilt("q1", "a?", ["x"]), kilt("q2", "b?", [], provenance_only=2)])
    with pytest.raises(InputError) as e:
        read_qa(path)
    assert (e.value.line, e.value.field) == (2, "output") and "entries with provenance only" in str(e.value)


# --- MS MARCO v2.1 ------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_ms_marco_reads_well_formed_answers_first_as_long_answers(tmp_path, suffix):
    rows = [marco(1102432, "who leads valdoria", ["Ana Kel"], ["Ana Kel leads Valdoria.", "Ana Kel leads Valdoria."]),
            marco(1102433, "what is the capital of veldoria", ["Mirentus", "Mirentus is the capital."], []),
            marco(1102434, "how tall is the tess bridge", ["No Answer Present."], [])]
    path = write(tmp_path / f"marco{suffix}", "ms_marco", rows)
    assert summary(read_qa(path)) == [
        ("1102432", "who leads valdoria", ["Ana Kel leads Valdoria."], [], "long"),
        ("1102433", "what is the capital of veldoria", ["Mirentus", "Mirentus is the capital."], [], "long"),
        ("1102434", "how tall is the tess bridge", [], [], "long")]  # kept without an answer, as not_in_kb is
    assert [(line, where) for line, where in answer_sources(path)] == [
        (1, ["wellFormedAnswers[0]"]), (2, ["answers[0]", "answers[1]"]), (3, [])]
    assert [q.id for q in read_questions(path)] == ["1102432", "1102433", "1102434"]


def test_ms_marcos_test_split_gives_questions_and_says_it_has_no_answers(tmp_path):
    path = write(tmp_path / "marco_test.parquet", "ms_marco", [marco(9652, "who leads valdoria", [], [])])
    with pytest.raises(InputError) as e:
        read_qa(path)
    assert (e.value.line, e.value.field) == (1, "answers") and "test split holds no answers" in str(e.value)
    assert [(q.id, q.question) for q in read_questions(path)] == [("9652", "who leads valdoria")]


# --- bad records: one line naming file, line and field --------------------------------------------------


BAD = {  # (schema, rows with the bad one second, line, field, words)
    "fever: an empty claim": ("fever", [FEVER[0], {**FEVER[2], "claim": " "}], 2, "claim", "empty"),
    "kilt: an empty input": ("kilt", [kilt("a", "q?", ["x"]), kilt("b", "", ["y"])], 2, "input", "empty"),
    "kilt: a repeated id": ("kilt", [kilt("a", "q?", ["x"]), kilt("a", "r?", ["y"])], 2, "id", "duplicate id 'a'"),
    "ms_marco: an empty answer": ("ms_marco", [marco(1, "q?", ["x"], []), marco(2, "r?", [""], [])], 2, "answers[0]",
                                  "empty answer"),
    "ms_marco: an empty query": ("ms_marco", [marco(1, "q?", ["x"], []), marco(2, "", ["y"], [])], 2, "query", "empty"),
}
BAD_JSONL = {  # what a typed column cannot hold, in hand-edited JSON Lines
    "kilt: an output entry that is no object": (
        [kilt("a", "q?", ["x"]), {**kilt("b", "r?", ["y"]), "output": [{"answer": "y"}, "z"]}], 2, "output[1]", "expected an object"),
    "kilt: an answer that is no string": (
        [kilt("a", "q?", ["x"]), {**kilt("b", "r?", ["y"]), "output": [{"answer": 7}]}], 2, "output[0].answer", "expected a string"),
    "ms_marco: wellFormedAnswers not a list": (
        [marco(1, "q?", ["x"], []), marco(2, "r?", ["y"], "y")], 2, "wellFormedAnswers", "expected a list of strings"),
    "fever: a label that is no string": ([FEVER[0], {**FEVER[2], "label": 1}], 2, "label", "expected a string"),
}


def _refused(path: Path, line: int, field: str, words: str) -> None:
    with pytest.raises(InputError) as e:
        read_qa(path)
    assert (e.value.line, e.value.field) == (line, field) and words in str(e.value), str(e.value)
    assert str(e.value).startswith(f"{path}:{line}: field '{field}': ") and "\n" not in str(e.value)
    assert "told by line 1" in str(e.value)


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_hub_record_is_one_line_naming_file_line_and_field(tmp_path, case):
    name, rows, line, field, words = BAD[case]
    _refused(write(tmp_path / "qa.parquet", name, rows), line, field, words)


@pytest.mark.parametrize("case", sorted(BAD_JSONL))
def test_a_bad_hand_edited_record_is_one_line_naming_file_line_and_field(tmp_path, case):
    rows, line, field, words = BAD_JSONL[case]
    _refused(write_jsonl(tmp_path / "qa.jsonl", rows), line, field, words)


def test_a_file_with_a_question_field_reads_as_it_always_did(tmp_path):
    """FEVER's or MS MARCO's telling fields beside `question` and `answers` (a file already converted to
    lewisrag's format that kept them) leave it lewisrag's."""
    rows = [{"id": "1", "question": "q?", "answers": ["x"], "claim": "c", "label": "SUPPORTS", "evidence_wiki_url": "",
             "query": "q", "wellFormedAnswers": []}]
    assert summary(read_qa(write_jsonl(tmp_path / "qa.jsonl", rows))) == [("1", "q?", ["x"], [], "short")]


# --- train rag --task fever on the hub's files ----------------------------------------------------------


def _hub_fever(world: Path, out: Path) -> tuple[Path, Path]:
    """The world's FEVER claims in the hub's schemas: train as FEVER v1.0 Parquet (a row per evidence
    sentence: two for SUPPORTS and REFUTES, one empty for NOT ENOUGH INFO), dev as KILT FEVER JSON
    Lines (which has no NOT ENOUGH INFO claims)."""
    rows = []
    for i, rec in enumerate(json.loads(line) for line in (world / "fever_train.jsonl").open()):
        label = rec["answers"][0]
        evidence = [] if label == "NOT ENOUGH INFO" else [("Page_%d" % i, 0), ("Page_%d" % i, 2)]
        rows += [fever_row(1000 + i, rec["question"], label, page, s, 500 + i) for page, s in evidence] or \
                [fever_row(1000 + i, rec["question"], label)]
    dev = [kilt(str(i), r["question"], r["answers"]) for i, r in
           enumerate(json.loads(line) for line in (world / "fever_dev.jsonl").open()) if r["answers"][0] != "NOT ENOUGH INFO"]
    return write(out / "fever_train.parquet", "fever", rows), write(out / "kilt_fever_dev.jsonl", "kilt", dev)


def _train_fever(inputs: dict, monkeypatch, capsys, train: Path, dev: Path, out: Path) -> tuple[int, str, str]:
    capsys.readouterr()  # the progress bars of the fixtures' writes
    return run_main(monkeypatch, capsys, "train", "rag", "--task", "fever", "--index", inputs["index"],
                    "--encoder", inputs["dpr"], "--generator", inputs["gen"], "--train", train, "--dev", dev,
                    "--out", out, "--steps", 2, "--batch-size", 4, "--n-docs", 2, "--max-combined-length", 128,
                    "--max-target-length", 16, "--eval-every", 2, "--save-every", 2, "--eval-questions", 4,
                    "--device", "cpu", "--json")


def test_train_rag_fever_on_fever_v1_and_kilt_fever_files(rag_inputs, tmp_path, monkeypatch, capsys):  # noqa: F811
    train, dev = _hub_fever(rag_inputs["world"], tmp_path)
    claims = len((rag_inputs["world"] / "fever_train.jsonl").read_text().splitlines())
    code, out, err = _train_fever(rag_inputs, monkeypatch, capsys, train, dev, tmp_path / "run")
    assert code == 0, err
    result = json.loads(out)
    assert (result["n_train"], result["skipped_no_answer"], result["dev_metric"]) == (claims, 0, "acc3")  # a claim, not a row
    assert (tmp_path / "run" / "best").is_dir() and (tmp_path / "run" / "final").is_dir()


def test_train_rag_fever_names_the_first_row_of_a_claim_with_a_bad_label(rag_inputs, tmp_path, monkeypatch,
                                                                          capsys):  # noqa: F811
    """The label check walked the file's rows beside the examples: with a claim on several rows it
    named the wrong line (or none)."""
    import pyarrow.parquet as pq

    train, dev = _hub_fever(rag_inputs["world"], tmp_path)
    rows = pq.read_table(train).to_pylist()
    last = rows[-1]["id"]
    rows = [{**r, "label": "supports"} if r["id"] == last else r for r in rows]
    line = next(i for i, r in enumerate(rows, start=1) if r["id"] == last)
    bad = write(tmp_path / "fever_bad.parquet", "fever", rows)
    code, _, err = _train_fever(rag_inputs, monkeypatch, capsys, bad, dev, tmp_path / "run")
    assert_one_line_error(code, err, f"fever_bad.parquet:{line}", "field 'label'", "'supports' is no FEVER label")
    assert not (tmp_path / "run").exists()
