"""Refusals read where a sentence states a number or names users, English refusals missed
whose Chinese translations were read (or neither), a reproduction's report left stale beside a new
results.json, and the claims table hiding its undefined (NaN) scores."""

from __future__ import annotations

import os

import pytest

from conftest import copy_run, run_main
from lewisrag.eval.evaluator import evaluate_answers
from lewisrag.eval.judges import LexicalJudge
from lewisrag.eval.records import parse_answer
from lewisrag.eval.refusals import declines_only, is_refusal
from lewisrag.eval.reports.claims import cell, claims_markdown
from lewisrag.experiments import stages as S

NUMBERED = [
    "Zorb was founded by Ana Kel in 1999, and the documents say nothing else.",
    "知识库里没有相关信息，账号会锁定 30 分钟。",
    "The documents do not mention it; the account locks for 30 minutes.",
    "I don't know; the API returns 422.",
    "Not found: the server returns 404 when the user is missing.",
]


@pytest.mark.parametrize("answer", NUMBERED)
def test_a_sentence_with_a_number_beside_a_refusal_phrase_is_an_answer(answer):
    """`is_refusal` read each of these as a refusal: it never checked a sentence for a number, as
    `declines_only` does (the module: a number inside a sentence turns a refusal into an answer)."""
    assert not is_refusal(answer) and not declines_only(answer)


@pytest.mark.parametrize("question,answer", [
    ("What was Zorb's revenue in 2019?", "I could not find the 2019 revenue."),
    ("2019 年 Zorb 的营收是多少？", "文档中没有 2019 年的营收数据。"),
    ("How long is the lockout after 5 failed attempts?", "The documents do not mention the lockout after 5 failed attempts."),
])
def test_a_refusal_that_repeats_the_questions_number_still_refuses(question, answer):
    """A number the question asked about is no claim of the answer's own: the refusal stays one (and
    need not cite), in the evaluator's records too; a number the question lacks still makes an answer."""
    assert is_refusal(answer, question) and declines_only(answer, question)
    assert not is_refusal(answer) and not is_refusal(answer.replace("2019", "2018").replace("5 ", "6 "), question)
    row = {"user_input": question, "response": answer, "category": "not_in_kb",
           "retrieved_contexts": [{"id": "1", "title": "", "text": "Login returns 422."}]}
    record = evaluate_answers([parse_answer(row, "answers.jsonl", 1, {})], LexicalJudge()).to_json()["records"][0]
    assert record["refused"] is True and record["citation_checks"] == []


def test_a_not_in_kb_answer_stating_a_year_is_not_counted_as_refused():
    """A not_in_kb question answered "founded in 1999, and the documents say nothing else" was counted
    as correctly refused (and its claim skipped the citation gate)."""
    row = {"user_input": "When was Zorb founded?", "response": NUMBERED[0], "category": "not_in_kb",
           "retrieved_contexts": [{"id": "1", "title": "", "text": "Login returns 422."}]}
    record = evaluate_answers([parse_answer(row, "answers.jsonl", 1, {})], LexicalJudge()).to_json()["records"][0]
    assert record["refused"] is False


@pytest.mark.parametrize("claim", [
    "I cannot stress enough how important X is.", "The answer is not in doubt: it is Paris.",
    "The token cannot be found with the documents API.", "The server cannot determine the user from the context.",
    "系统无法从上下文中确定用户。", "用户无从得知密码。", "他没有提到。", "Sorry, but the account locks.",
])
def test_the_wider_refusal_phrasings_leave_claims_alone(claim):
    """The wider refusal phrasings (a source-based passive, "n't in the", 无从得知, 无法从…得知,
    a bare "Not mentioned.", an apology's "but") must not turn these claims into refusals."""
    assert not is_refusal(claim) and not declines_only(claim)


@pytest.mark.parametrize("claim", ["Unknown users are rejected.", "Unknown error codes are logged.",
                                   "无法确定的用户会被锁定。", "没有找到的用户会被删除。"])
def test_unknown_or_a_bare_inability_before_a_noun_is_a_claim(claim):
    """A bare "Unknown" at a clause start, or a bare 无法确定 / 没有找到 before 的, counted as a refusal:
    these name users and error codes, they refuse nothing."""
    assert not is_refusal(claim) and not declines_only(claim)


@pytest.mark.parametrize("refusal", ["Unknown.", "Sorry, unknown.", "无法确定。", "没有找到。"])
def test_unknown_or_a_bare_inability_ending_its_clause_still_refuses(refusal):
    """The other side of the narrowed rules: the phrase alone still refuses."""
    assert is_refusal(refusal) and declines_only(refusal)


def test_a_damaged_log_leaves_no_new_results_beside_the_old_report(tiny_qa_run, tmp_path, monkeypatch, capsys):
    """`reproduce._finish` wrote results.json and timings.json before the report read the training logs:
    a damaged log.jsonl (a --resume redraws the plots) stopped it with exit 2 after a new results.json
    but before report.md, which stayed the last run's. Now every plot input is read first, and nothing
    of the run's results or report is touched."""
    run = copy_run(tiny_qa_run, tmp_path / "run")
    (run / "rag_token" / "log.jsonl").write_text('{"step": 1, "loss": "x"}\n', encoding="utf-8")
    outputs = [name for name in S.FINISHED if (run / name).exists()]
    assert {"results.json", "timings.json", "report.md"} <= set(outputs)

    def stamps():
        return {name: (os.lstat(run / name).st_ino, os.lstat(run / name).st_mtime_ns, (run / name).read_bytes())
                for name in outputs}

    before = stamps()
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", run, "--seed", "0", "--resume")
    assert code == 2 and "log.jsonl" in err and "Traceback" not in err
    assert stamps() == before


def test_the_claims_cell_counts_undefined_scores_apart():
    """`cell` printed only n=, hiding the NaN count `claim_summary` keeps: a metric undefined for one
    of two questions read "0.000 n=1", as if one question had been asked (the chapter: undefined
    scores are counted apart, never averaged in nor dropped unseen)."""
    assert cell({"n": 1, "nan": 1, "mean": 0.0}) == "0.000 n=1, NaN 1"
    assert cell({"n": 3, "nan": 0, "mean": 0.5}) == "0.500 n=3"
    column = {"claims.precision": {"n": 1, "nan": 1, "mean": 0.0, "interval": {"low": 0.0, "high": 0.0}}}
    assert any("0.000 [0.000, 0.000] n=1, NaN 1" in line for line in claims_markdown({"all": column}, str))
