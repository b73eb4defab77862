"""`lewisrag index targets`: answer strings for CuratedTrec's regex-answered training questions, as
the RAG paper made them (the patterns' most frequent match in the top retrieved passages, else a
string spelled out of the pattern), so that `train rag` trains on them."""

from __future__ import annotations

import json
import unicodedata

import pytest

from conftest import run_main, write_jsonl
from lewisrag.data.records import QAExample, read_qa, refuse_regex_targets
from lewisrag.index.targets import matches_in, most_frequent_match, spell, spell_best, target_for
from lewisrag.scoring.qa import compile_answer_pattern, regex_match
from test_curatedtrec import write_ct

# --- spell ------------------------------------------------------------------------------------


@pytest.mark.parametrize("pattern, spelled", [
    ("Ozzie (Ozzy )?Osbourne", "Ozzie Osbourne"),  # `?`: none
    ("(C|c)hurchill", "Churchill"),  # the first branch (the parser makes it a class: its first member)
    (r"\d+ years?", "0 year"),  # `+` once, \d "0"
    (r"[Ss]ix\s+feet", "Six feet"),  # \s a space
    (r"^Winston\s*Churchill$", "WinstonChurchill"),  # anchors dropped, `*` none
    (r"(?:Mount|Mt\.?) Everest", "Mount Everest"),
    (r"x{2,3}", "xx"),
    (r"\bHoover [A-Z]am\b", "Hoover Aam"),  # a range: its first character
    (r"Pel(é|e).*", "Pelé"),  # what repeats no times need not be spellable (`.`)
])
def test_spell_writes_a_string_the_pattern_matches(pattern, spelled):
    assert spell(pattern) == spelled
    # the target is an answer to its own pattern, read as scoring reads it (NFD)
    assert compile_answer_pattern(pattern).fullmatch(unicodedata.normalize("NFD", spelled))


@pytest.mark.parametrize("pattern", [r"(a)\1", r"(?<=Sir )Winston", r"(?!x)y", r"[^a]bc", r"Ab.", r"(Ozzy )?", r"\s+"])
def test_spell_refuses_what_has_no_one_string(pattern):
    """Backreferences, lookarounds, negated classes and `.` name no one string; a pattern that spells
    to nothing (or spaces) gives no target either."""
    assert spell(pattern) is None


@pytest.mark.parametrize("patterns, best", [
    ([r"\d+ years?", "(about )?forty years"], "forty years"),  # the first guesses a digit; the second writes its answer
    ([r"(a)\1", "Osbourne"], "Osbourne"),  # the first cannot be spelled: it left the question out
    (["Ozzie (Ozzy )?Osbourne", "Osbourne"], "Ozzie Osbourne"),  # no guess in either: the file's order
    ([r"[A-Z]\w\w years", r"\d+ years", r"[0-9]{3}"], "0 years"),  # fewest guesses (1 of 3, 1, 3), then ...
    ([r"\d+ years old", r"\d+ years", r"[a-z]{9}"], "0 years"),  # ... of equals (1 each) the shortest
    ([" Churchill", r"Winston\s+Churchill"], "Winston Churchill"),  # "Churchill" does not match " Churchill" from its start
    ([r"(a)\1", r"(?<=x)y"], None),
])
def test_the_fallback_spells_every_pattern_and_keeps_the_best(patterns, best):
    """Where no passage matches ("(--)" holds no word), only the first pattern was spelled: "0 year"
    beside a pattern that writes "forty years" out, and a question whose first pattern has a
    backreference was left out although its second spells."""
    assert spell_best(patterns) == best
    assert target_for(patterns, ["(--)"]) == ((best, "pattern") if best else (None, None))
    if best is not None:  # what dev scoring will accept: a target its own patterns match
        assert regex_match(best, patterns) == 1.0


# --- target_for -------------------------------------------------------------------------------


def test_the_most_frequent_match_counts_spellings_as_one_answer():
    """Case-sensitive, Attlee (2) would beat each spelling of Churchill (1 each); the patterns ignore
    case, so Churchill counts 3 and is written as first found."""
    texts = ["Attlee and Attlee", "CHURCHILL spoke", "then churchill", "Churchill again"]
    assert most_frequent_match(["(C|c)hurchill", "Attlee"], texts) == "CHURCHILL"
    texts = ["Attlee and Attlee", "CHURCHILL spoke", "Churchill", "Churchill again"]  # the frequent spelling wins
    assert target_for(["(C|c)hurchill", "Attlee"], texts) == ("Churchill", "retrieved")


def test_a_tie_goes_to_the_match_found_first_in_rank_order():
    assert most_frequent_match(["Attlee|Churchill"], ["Churchill and Attlee", "Attlee and Churchill"]) == "Churchill"
    assert most_frequent_match(["Attlee|Churchill"], ["x", "Attlee", "Churchill", "Churchill Attlee"]) == "Attlee"
    assert most_frequent_match(["Churchill", "Attlee"], ["Attlee, Churchill"]) == "Churchill"  # then pattern order


def test_matches_are_read_from_nfd_text_and_given_back_composed():
    decomposed = unicodedata.normalize("NFD", "Pelé")
    assert target_for(["Pel(é|e)"], [f"{decomposed} scored.", "Pelé again"]) == ("Pelé", "retrieved")


def test_empty_matches_are_no_answer_and_no_match_falls_back_to_the_pattern():
    assert matches_in(["(Ozzy )?"], "nothing here") == []
    assert target_for(["Ozzie (Ozzy )?Osbourne", "Osbourne"], ["nothing here"]) == ("Ozzie Osbourne", "pattern")
    assert target_for([r"(a)\1"], ["nothing here"]) == (None, None)


# --- the command ------------------------------------------------------------------------------

PASSAGES = [
    {"id": "p1", "title": "Britain 1940", "text": "In 1940 Britain's prime minister was Winston Churchill; CHURCHILL "
                                                  "succeeded Chamberlain."},
    {"id": "p2", "title": "Chamberlain", "text": "Neville Chamberlain was prime minister before Churchill."},
    {"id": "p3", "title": "Sabbath", "text": "Black Sabbath formed in Birmingham in 1968."},
    {"id": "p4", "title": "Repeats", "text": "Nothing repeats in this passage."},
]
CT = ("who was britain's prime minister in 1940\t['(C|c)hurchill', 'Winston\\\\s+Churchill']\n"
      "who sang lead vocals for black sabbath\t['Ozzie (Ozzy )?Osbourne']\n"
      "what repeats twice\t['(a)\\\\1']\n")


@pytest.fixture
def inputs(tmp_path, monkeypatch, capsys):
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", write_jsonl(tmp_path / "p.jsonl", PASSAGES),
                            "--encoder", "bm25", "--out", tmp_path / "idx")
    assert code == 0, err
    return tmp_path / "idx", write_ct(tmp_path / "curatedtrec-train.qa.csv", CT)


def test_targets_end_to_end_and_the_file_trains(inputs, tmp_path, monkeypatch, capsys):
    index, ct = inputs
    out = tmp_path / "curatedtrec-train.targets.jsonl"  # named as DPR's CuratedTrec files: its records say "text"
    code, stdout, err = run_main(monkeypatch, capsys, "index", "targets", "--index", index, "--questions", ct, "--out", out, "--json")
    assert code == 0, err
    summary = json.loads(stdout)
    assert {k: summary[k] for k in ("questions", "retrieved", "pattern", "left_out", "n_docs", "matched_share")} == {
        "questions": 3, "retrieved": 1, "pattern": 1, "left_out": 1, "n_docs": 4, "matched_share": 0.3333}
    original = read_qa(ct)
    assert summary["first_left_out"] == {"id": original[2].id, "pattern": r"(a)\1"}
    warning = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "1 questions left out" in warning[0] and original[2].id in warning[0], err
    assert "holds 4 passages" in err  # --n-docs 1000 on a 4-passage index: said, not refused

    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(r["id"], r["question"], r["answers"], r["target_source"]) for r in records] == [
        (original[0].id, original[0].question, ["Churchill"], "retrieved"),
        (original[1].id, original[1].question, ["Ozzie Osbourne"], "pattern")]
    trained = read_qa(out)  # the extra target_source field is read past
    assert [(e.answers, e.answer_match) for e in trained] == [(["Churchill"], "text"), (["Ozzie Osbourne"], "text")]
    refuse_regex_targets(trained, out)  # what train rag checks first: answer strings pass


def test_targets_refuses_an_existing_file_text_answers_and_a_dense_flag_on_bm25(inputs, tmp_path, monkeypatch, capsys):
    index, ct = inputs
    out = tmp_path / "t.jsonl"
    out.write_text("keep\n", encoding="utf-8")
    code, _, err = run_main(monkeypatch, capsys, "index", "targets", "--index", index, "--questions", ct, "--out", out)
    assert code == 2 and "--overwrite" in err and out.read_text(encoding="utf-8") == "keep\n", err
    code, _, err = run_main(monkeypatch, capsys, "index", "targets", "--index", index, "--questions", ct, "--out", out,
                            "--overwrite", "--n-docs", "2")
    assert code == 0 and read_qa(out)[0].answers == ["Churchill"], err

    text = write_ct(tmp_path / "nq-train.qa.csv", CT)  # the same layout under another name: answer strings
    code, _, err = run_main(monkeypatch, capsys, "index", "targets", "--index", index, "--questions", text, "--out", tmp_path / "n.jsonl")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no question is answered by regular expressions" in err, err
    assert "named curatedtrec-*" in err  # a renamed CuratedTrec file is told how its patterns would be read
    code, _, err = run_main(monkeypatch, capsys, "index", "targets", "--index", index, "--questions", ct, "--encoder", "x",
                            "--out", tmp_path / "e.jsonl")
    assert code == 2 and "--encoder" in err and "BM25" in err, err
    assert not (tmp_path / "n.jsonl").exists() and not (tmp_path / "e.jsonl").exists()


def test_targets_refuses_a_gold_id_the_index_lacks(inputs, tmp_path, monkeypatch, capsys):
    """The output was written with it, and `train rag` on the same index refused the file `index targets` wrote."""
    index, _ = inputs
    questions = write_jsonl(tmp_path / "q.jsonl", [
        {"id": "a", "question": "who was prime minister in 1940", "answers": ["(C|c)hurchill"], "answer_match": "regex",
         "gold_passage_ids": ["p1"]},
        {"id": "b", "question": "who sang for black sabbath", "answers": ["Ozzie"], "answer_match": "regex",
         "gold_passage_ids": ["p3", "p9"]}])
    out = tmp_path / "t.jsonl"
    code, _, err = run_main(monkeypatch, capsys, "index", "targets", "--index", index, "--questions", questions, "--out", out)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{questions}:2: field 'gold_passage_ids'" in err and "p9" in err, err
    assert not out.exists()


def test_bm25_hits_that_score_nothing_cast_no_vote():
    """BM25 fills its top k with zero-score passages in the index's order: a match in one of those
    ('1980' twice) outvoted the one passage that ranked ('1945') and became the training target."""
    from types import SimpleNamespace as Hit

    from lewisrag.index.targets import make_targets

    hits = [Hit(text="The war ended in 1945.", score=1.8), Hit(text="Gold rose in 1980 and fell in 1980.", score=0.0)]
    ex = [QAExample("q", "When did the war end?", ["19[0-9][0-9]"], answer_match="regex")]
    records, summary = make_targets(ex, lambda questions, k: [hits for _ in questions], 2, scored_only=True)
    assert records[0]["answers"] == ["1945"] and summary["fewer_hits"] == 1
    records, _ = make_targets(ex, lambda questions, k: [hits for _ in questions], 2)  # dense scores may be negative: all vote
    assert records[0]["answers"] == ["1980"]


def test_a_question_passed_through_keeps_its_text_answers_in_a_curatedtrec_named_file(tmp_path):
    """A text-answered question copied through lost `answer_match`, so an output named curatedtrec-*
    read it back as a pattern, and training refused the very file `index targets` wrote."""
    from types import SimpleNamespace as Hit

    from lewisrag.data.io import write_jsonl
    from lewisrag.index.targets import make_targets

    ex = [QAExample("a", "Who led Britain?", ["(C|c)hurchill"], answer_match="regex"), QAExample("b", "Capital?", ["Paris"])]
    records, summary = make_targets(ex, lambda qs, k: [[Hit(text="Churchill led.", score=1.0)] for _ in qs], 1)
    write_jsonl(tmp_path / "curatedtrec-train-targets.jsonl", records)
    back = read_qa(tmp_path / "curatedtrec-train-targets.jsonl")
    assert [e.answer_match for e in back] == ["text", "text"] and summary["given"] == 1
    refuse_regex_targets(back, tmp_path / "curatedtrec-train-targets.jsonl")
