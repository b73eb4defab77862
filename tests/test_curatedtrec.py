"""CuratedTrec: DPR's files whose answers are regular expressions (`curatedtrec-test.qa.csv`,
`biencoder-curatedtrec-train.json`), read as patterns, scored as DrQA scores them (`regex_match`:
the prediction matched from its start, case ignored) and refused as training targets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import one_thread, run_main, write_jsonl
from lewisrag.data.io import InputError, derived_id
from lewisrag.data.qa_formats import PATTERN_FLAGS
from lewisrag.data.records import QAExample, read_qa, read_questions, refuse_regex_targets
from lewisrag.scoring.qa import REGEX_FLAGS, answer_exact_match, exact_match, regex_match, regex_search
from test_dpr_formats import biencoder_record, write_json
from test_reproduce_base import _flags, assets  # noqa: F401  (module fixture: the tiny DPR pair, BART, nq_open files)

# as DPR's curatedtrec-test.qa.csv holds them: a Python list literal, a backslash written once
CT_LINES = ("who sang lead vocals for black sabbath\t['Ozzie (Ozzy )?Osbourne', 'Osbourne']\n"
            "who was britain's prime minister in 1940\t['(C|c)hurchill', 'Winston\\s+Churchill']\n")


def write_ct(path: Path, text: str = CT_LINES) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- reading ----------------------------------------------------------------------------------


def test_qa_csv_reads_patterns_as_regex_answers(tmp_path):
    path = write_ct(tmp_path / "curatedtrec-test.qa.csv")
    examples = read_qa(path)
    assert [(e.answers, e.answer_match) for e in examples] == [
        (["Ozzie (Ozzy )?Osbourne", "Osbourne"], "regex"), (["(C|c)hurchill", r"Winston\s+Churchill"], "regex")]
    assert [e.id for e in examples] == [derived_id(e.question, {}) for e in examples]
    # the same layout under another name is DPR's NQ-style file: answer strings
    assert {e.answer_match for e in read_qa(write_ct(tmp_path / "nq-test.qa.csv"))} == {"text"}


def test_biencoder_json_reads_patterns_and_gold_ids(tmp_path):
    records = [biencoder_record("who was britain's prime minister in 1940", ["(C|c)hurchill"], [{"passage_id": "11"}])]
    path = write_json(tmp_path / "biencoder-curatedtrec-train.json", records)
    (ex,) = read_qa(path)
    assert (ex.answers, ex.gold_passage_ids, ex.answer_match) == (["(C|c)hurchill"], ["11"], "regex")
    assert read_questions(path)[0].gold_passage_ids == ["11"]


def test_lewisrag_jsonl_keeps_answer_match_and_text_files_stay_as_they_were(tmp_path):
    """A CuratedTrec set lewisrag writes (reproduce's data/test.jsonl) reads back as regex; a text
    example's record has no answer_match, so every file written before stays byte for byte."""
    ct = read_qa(write_ct(tmp_path / "curatedtrec-test.qa.csv"))
    text = QAExample("q1", "who?", ["Ana"])
    assert "answer_match" not in text.to_dict() and ct[0].to_dict()["answer_match"] == "regex"
    back = read_qa(write_jsonl(tmp_path / "test.jsonl", [ex.to_dict() for ex in [*ct, text]]))
    assert back == [*ct, text]


def test_a_bad_pattern_is_named_by_file_line_and_field(tmp_path):
    assert PATTERN_FLAGS == REGEX_FLAGS  # the readers refuse what scoring could not compile
    path = write_ct(tmp_path / "curatedtrec-test.qa.csv", CT_LINES + "who wrote hamlet\t['Shakespeare', '(unclosed']\n")
    with pytest.raises(InputError, match=r"curatedtrec-test.qa.csv:3: field 'answers\[1\]': not a regular expression") as e:
        read_qa(path)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(("record", "words"), [
    ({"question": "q", "answers": ["a"], "answer_match": "glob"}, "unknown answer_match 'glob'"),
    ({"question": "q", "answers": ["a"], "answer_match": "regex", "kind": "long"}, "a long-form answer cannot be a regular"),
    ({"question": "q", "answers": ["ok", "(C|c"], "answer_match": "regex"}, "answers[1]': not a regular expression"),
])
def test_lewisrag_jsonl_answer_match_is_checked(tmp_path, record, words):
    with pytest.raises(InputError, match=r"qa.jsonl:1: ") as e:
        read_qa(write_jsonl(tmp_path / "qa.jsonl", [record]))
    assert words in str(e.value)


# --- scoring ----------------------------------------------------------------------------------


def test_regex_match_matches_from_the_start_ignoring_case():
    patterns = ["Ozzie (Ozzy )?Osbourne", "(C|c)hurchill"]
    assert regex_match("churchill", patterns) == 1.0  # case by the flag
    assert regex_match("CHURCHILL", patterns) == 1.0
    assert regex_match("Churchill, Winston", patterns) == 1.0  # may run on past the pattern (match, not fullmatch)
    assert regex_match("Winston Churchill", patterns) == 0.0  # may not begin before it (match, not search)
    assert regex_search("Winston Churchill", patterns)  # what DPR's retrieval check (a search) finds
    assert regex_match("Ozzie Ozzy Osbourne", patterns) == regex_match("Ozzie Osbourne", patterns) == 1.0
    assert regex_match(" Churchill", patterns) == 0.0  # no other normalization: answers come stripped
    assert regex_match("Pele\u0301", ["Pel\u00e9"]) == 1.0  # NFD on both sides, as DrQA's pipeline evaluation
    assert exact_match("Churchill", patterns) == 0.0  # the pattern as text: the measure this replaces
    with pytest.raises(ValueError, match="patterns must be a non-empty list"):
        regex_match("Churchill", [])


def test_answer_exact_match_dispatches_on_the_example():
    ct = QAExample("1", "who?", ["(C|c)hurchill"], answer_match="regex")
    text = QAExample("2", "who?", ["(C|c)hurchill"])
    assert answer_exact_match("Churchill", ct) == 1.0 and answer_exact_match("Churchill", text) == 0.0
    assert answer_exact_match("cchurchill", text) == exact_match("cchurchill", ["(C|c)hurchill"]) == 1.0  # text EM
    assert answer_exact_match("(C|c)hurchill", ct) == 0.0  # a pattern is not its own match


# --- training refused, evaluation accepted ----------------------------------------------------


def test_training_targets_must_be_strings(tmp_path):
    examples = read_qa(write_ct(tmp_path / "curatedtrec-train.qa.csv"))
    with pytest.raises(InputError, match="2 training questions are answered by regular expressions") as e:
        refuse_regex_targets(examples, tmp_path / "curatedtrec-train.qa.csv")
    assert "make them with `lewisrag index targets`" in str(e.value) and "\n" not in str(e.value)
    assert (e.value.line, e.value.field) == (1, "answers")
    refuse_regex_targets([QAExample("1", "q", ["a"])], "train.jsonl")  # answer strings train
    # in a file that mixes them, the first regex-answered question's line is named (no line was)
    mixed = tmp_path / "mixed.jsonl"
    write_jsonl(mixed, [{"id": "a", "question": "Capital?", "answers": ["Paris"]},
                        {"id": "b", "question": "Who led?", "answers": ["(C|c)hurchill"], "answer_match": "regex"}])
    with pytest.raises(InputError) as e:
        refuse_regex_targets(read_qa(mixed), mixed)
    assert (e.value.line, e.value.field) == (2, "answers")


def test_closed_book_refuses_regex_targets(tmp_path):
    from lewisrag.training.closed_book import ClosedBookConfig, train_closed_book

    cfg = ClosedBookConfig(generator=str(tmp_path / "no_bart"), train=str(write_ct(tmp_path / "curatedtrec-train.qa.csv")))
    with pytest.raises(InputError, match="training targets must be answer strings"):  # before the generator loads
        train_closed_book(cfg, tmp_path / "out")


@pytest.mark.parametrize("command", ["rag", "stitched"])
def test_train_commands_refuse_regex_targets_in_one_line(assets, tiny_corpus, tmp_path, monkeypatch, capsys,  # noqa: F811
                                                         command):
    kind = {"rag": assets["context"], "stitched": "bm25"}[command]
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", tiny_corpus["passages"], "--encoder", kind,
                            "--out", tmp_path / "index")
    assert code == 0, err
    ct = write_ct(tmp_path / "curatedtrec-train.qa.csv")
    models = (["--encoder", assets["question"], "--context-encoder", assets["context"], "--dev", ct] if command == "rag" else [])
    code, _, err = run_main(monkeypatch, capsys, "train", command, "--index", tmp_path / "index", *models,
                            "--generator", assets["bart"], "--train", ct, "--out", tmp_path / "out")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "training targets must be answer strings" in lines[0], err


def _ct_file(path: Path, examples, match_all: int) -> Path:
    """The questions with a pattern of their leader's name (first and last name, either case), the
    first `match_all` with `.*` instead, which every prediction matches from its start."""
    def patterns(ex) -> list[str]:
        first, last = ex.answers[0].split()
        return [".*"] if examples.index(ex) < match_all else [f"{first}\\s+{last}", f"({last[0]}|{last[0].lower()}){last[1:]}"]
    return write_ct(path, "".join(f"{ex.question}\t{patterns(ex)!r}\n" for ex in examples))


def test_base_preset_scores_a_curatedtrec_test_set_by_regex_match(assets, tiny_corpus, tmp_path, monkeypatch, capsys):  # noqa: F811
    """`reproduce --preset base --dev/--test curatedtrec-*.qa.csv`: the test stage reads the patterns
    back from data/test.jsonl and scores each answer by regex match; F1 and ROUGE-L are null."""
    qa = read_qa(tiny_corpus["qa"])
    test, dev = _ct_file(tmp_path / "curatedtrec-test.qa.csv", qa, 10), _ct_file(tmp_path / "curatedtrec-dev.qa.csv", qa[:6], 0)
    out = tmp_path / "run"
    flags = _flags(assets, out)
    flags[flags.index("--test") + 1], flags[flags.index("--dev") + 1] = test, dev
    with one_thread():
        code, _, err = run_main(monkeypatch, capsys, *flags)
    assert code == 0, err
    written = [json.loads(line) for line in (out / "data" / "test.jsonl").read_text().splitlines()]
    assert {w["answer_match"] for w in written} == {"regex"}
    r = json.loads((out / "results.json").read_text())
    predictions = json.loads((out / "predictions.json").read_text())
    examples = read_qa(test)
    for system in ("rag_token", "rag_sequence", "closed_book"):
        scores = [regex_match(predictions[system][ex.id], ex.answers) for ex in examples]
        assert scores[:10] == [1.0] * 10  # `.*`: scored as a pattern, never as the text ".*"
        assert r["qa"][system]["exact_match"] == pytest.approx(sum(scores) / len(scores))
        assert r["qa"][system]["n"] == 30 and r["qa"][system]["f1"] is None and r["qa"][system]["rougeL"] is None


def test_base_preset_refuses_a_curatedtrec_training_set_before_any_stage(assets, tiny_corpus, tmp_path, monkeypatch, capsys):  # noqa: F811
    out = tmp_path / "run"
    flags = _flags(assets, out)
    flags[flags.index("--train") + 1] = _ct_file(tmp_path / "curatedtrec-train.qa.csv", read_qa(tiny_corpus["qa"]), 0)
    code, _, err = run_main(monkeypatch, capsys, *flags)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "make them with `lewisrag index targets`" in lines[0], err
    assert not out.exists()


def test_index_cut_finds_a_regex_answer_in_a_passage_as_dpr_does(tmp_path):
    """`index cut`'s answer recall: a CuratedTrec question's pattern is searched in the raw passage
    text (DPR's has_answer); read as text, '(C|c)hurchill' was looked for word for word and never found."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lewisrag.data.passages import open_passages
    from lewisrag.index.cut import _answer_hits

    texts = ["Winston Churchill led Britain.", "Attlee won in 1945.", "The war ended in 1945."]
    pq.write_table(pa.table({"id": ["0", "1", "2"], "title": ["a", "b", "c"], "text": texts}), tmp_path / "p.parquet")
    questions = [QAExample("q1", "Who led Britain?", ["(C|c)hurchill"], answer_match="regex"),
                 QAExample("q2", "When did the war end?", ["1945"])]
    hits = _answer_hits(open_passages(tmp_path / "p.parquet"), questions, np.array([[1, 0], [2, 0]]), None)
    assert hits.tolist() == [[False, True], [True, False]]


def test_index_targets_output_trains_and_dev_is_scored_by_the_original_patterns(assets, tiny_corpus, tmp_path,  # noqa: F811
                                                                               monkeypatch, capsys):
    """The way the RAG paper trained on CuratedTrec, end to end: `index targets` turns the training
    questions' patterns into strings over a dense index, `train rag` trains on that file, and its dev
    evaluation scores the answers against the dev file's own patterns (`regex_match`), not as text."""
    from lewisrag.training import rag as rag_module

    qa = read_qa(tiny_corpus["qa"])
    index, targets = tmp_path / "index", tmp_path / "curatedtrec-train.targets.jsonl"
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", tiny_corpus["passages"], "--encoder",
                            assets["context"], "--out", index)
    assert code == 0, err
    train = _ct_file(tmp_path / "curatedtrec-train.qa.csv", qa[:8], 0)
    encoders = ["--encoder", assets["question"], "--context-encoder", assets["context"]]
    code, out, err = run_main(monkeypatch, capsys, "index", "targets", "--index", index, "--questions", train, *encoders,
                              "--out", targets, "--json")
    assert code == 0, err
    assert json.loads(out)["left_out"] == 0
    patterns = {ex.id: ex.answers for ex in read_qa(train)}
    trained = read_qa(targets)
    assert [ex.id for ex in trained] == list(patterns) and {ex.answer_match for ex in trained} == {"text"}
    assert all(regex_match(ex.answers[0], patterns[ex.id]) == 1.0 for ex in trained)  # each target answers its patterns

    dev = _ct_file(tmp_path / "curatedtrec-dev.qa.csv", qa[:6], 3)  # the first 3 `.*`: any answer matches them
    scored = []
    real = rag_module.answer_exact_match
    monkeypatch.setattr(rag_module, "answer_exact_match", lambda p, ex: scored.append((p, ex)) or real(p, ex))
    with one_thread():
        code, out, err = run_main(monkeypatch, capsys, "train", "rag", "--index", index, *encoders, "--generator",
                                  assets["bart"], "--train", targets, "--dev", dev, "--out", tmp_path / "run", "--steps", 2,
                                  "--n-docs", 2, "--batch-size", 4, "--max-combined-length", 64, "--max-target-length", 16,
                                  "--eval-every", 2, "--eval-questions", 6, "--json")
    assert code == 0, err
    assert json.loads(out)["steps"] == 2
    dev_patterns = [ex.answers for ex in read_qa(dev)]
    assert [ex.answers for _, ex in scored] == dev_patterns and {ex.answer_match for _, ex in scored} == {"regex"}
    (log,) = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines() if "dev_em" in line]
    em = [regex_match(p, ex.answers) for p, ex in scored]
    assert em[:3] == [1.0] * 3 and log["dev_em"] == pytest.approx(sum(em) / 6)  # the patterns' score, whatever was learnt
    assert (tmp_path / "run" / "best" / "rag.json").exists()
