"""Values the commands took in silence, or answered with a wrong result: each is now one line, exit 2.

A repeated value was scored twice (`eval retrieval --recall-at 5 --recall-at 5` printed hit@5 2.000),
checked twice or folded into one result; flags that cannot apply together were accepted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_main, write_jsonl
from lewisrag.data.io import InputError, given_once
from test_cli_flags import ANSWERS, bm25  # noqa: F401  (module fixture)
from test_faults import assert_one_line_error

RUNS = Path(__file__).parent / "data" / "gate_runs"


def test_given_once_names_the_flag_and_both_spellings():
    given_once("--x", [1, 2, 3])
    with pytest.raises(InputError, match=r"^--index: b/ is given twice \(as b too\)$"):
        given_once("--index", ["a", "b", "b/"], key=lambda p: p.rstrip("/"))


def test_eval_retrieval_refuses_a_repeated_cut_off_or_index(bm25, tiny_corpus, monkeypatch, capsys):  # noqa: F811
    base = ["eval", "retrieval", "--questions", tiny_corpus["qa"], "--json"]
    code, _, err = run_main(monkeypatch, capsys, *base, "--index", bm25, "--recall-at", 5, "--recall-at", 5)
    assert_one_line_error(code, err, "--recall-at", "5 is given twice")
    code, _, err = run_main(monkeypatch, capsys, *base, "--index", bm25, "--index", f"{bm25}/")
    assert_one_line_error(code, err, "--index", "is given twice")
    code, out, err = run_main(monkeypatch, capsys, *base, "--index", bm25, "--recall-at", 5)
    assert code == 0 and 0 <= json.loads(out)[str(bm25)]["hit@5"] <= 1, err
    code, _, err = run_main(monkeypatch, capsys, *base, "--index", bm25, "-k", 5, "-k", 5)  # the deprecated spelling
    lines = err.splitlines()
    assert code == 2 and "-k is deprecated" in lines[0], err
    assert_one_line_error(code, "\n".join(lines[1:]), "error: -k: 5 is given twice")


def test_eval_answers_refuses_a_repeated_cut_off(tmp_path, monkeypatch, capsys):
    """eval retrieval refused a repeated --recall-at; eval answers folded it into one column in silence."""
    answers = write_jsonl(tmp_path / "a.jsonl", [{"user_input": "q", "response": "a [1]", "retrieved_contexts": ["a"]}])
    code, _, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", answers, "--recall-at", 5,
                            "--recall-at", 5, "--out", tmp_path / "e")
    assert_one_line_error(code, err, "--recall-at", "5 is given twice")
    assert not (tmp_path / "e").exists()


def test_an_argument_that_is_not_utf8_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    """A file name in another encoding (lone surrogates to Python) failed only when the run recorded
    its inputs in UTF-8 JSON: a traceback, and `train rag` left its run folder behind."""
    name = str(tmp_path / "caf\udce9.jsonl")
    code, _, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", name, "--out", tmp_path / "e")
    assert_one_line_error(code, err, "caf\\xe9.jsonl: field '--answers'", "not valid UTF-8")
    assert not (tmp_path / "e").exists()


def test_retrieval_recall_counts_a_repeated_cut_off_once(bm25, tiny_corpus):  # noqa: F811
    from lewisrag.data.records import read_qa
    from lewisrag.index import open_retriever, retrieval_recall

    examples = read_qa(tiny_corpus["qa"])
    r = retrieval_recall(open_retriever(bm25), examples, (5, 1, 5))
    assert r == retrieval_recall(open_retriever(bm25), examples, (1, 5)) and r["hit@5"] <= 1


@pytest.mark.parametrize("args, flag", [
    (["compare", "--run", "RUN", "--systems", "rag_token,stitched,rag_token"], "--systems"),
    (["reproduce", "--preset", "tiny", "--out", "OUT", "--tasks", "qa,fever,qa"], "--tasks"),
    (["pretrain", "--out", "OUT", "--preset", "tiny", "--set", "lr=0.1", "--set", "lr=0.2"], "--set"),
])
def test_a_repeated_list_item_is_one_line(args, flag, tmp_path, monkeypatch, capsys):
    args = [str(tmp_path / a) if a in ("RUN", "OUT") else a for a in args]
    code, _, err = run_main(monkeypatch, capsys, *args)
    assert_one_line_error(code, err, flag, "given twice")
    assert list(tmp_path.iterdir()) == []


def test_reproduce_refuses_resume_with_overwrite_and_seeds_out_of_range(tmp_path, monkeypatch, capsys):
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", tmp_path / "r", "--resume", "--overwrite")
    assert_one_line_error(code, err, "--overwrite", "--resume")
    for command in (["reproduce", "--preset", "tiny"], ["world"]):
        code, _, err = run_main(monkeypatch, capsys, *command, "--out", tmp_path / "w", "--seed", -1)
        assert code == 2 and "--seed" in err, err
    assert list(tmp_path.iterdir()) == []


def test_gate_refuses_a_repeated_tier3_metric(tmp_path, monkeypatch, capsys):
    config = tmp_path / "gate.toml"
    config.write_text('[tier3]\nmetrics = ["faithfulness", "citation_recall", "faithfulness"]\n')
    code, _, err = run_main(monkeypatch, capsys, "gate", "--baseline", RUNS / "baseline", "--candidate", RUNS / "clean",
                            "--config", config)
    assert_one_line_error(code, err, str(config), "field 'tier3.metrics'", "faithfulness is given twice")


def test_gate_refuses_judged_scores_without_a_judge(tmp_path, monkeypatch, capsys):
    """Two runs without a judge block compared their judged scores as if one judge had made both: PASS."""
    data = json.loads((RUNS / "clean" / "results.json").read_text())
    del data["judge"]
    (tmp_path / "results.json").write_text(json.dumps(data))
    code, _, err = run_main(monkeypatch, capsys, "gate", "--baseline", tmp_path, "--candidate", tmp_path)
    assert_one_line_error(code, err, "field 'judge'", "missing", "judged scores")


def test_gate_table_shows_verdicts_not_markup(monkeypatch, capsys):
    code, out, err = run_main(monkeypatch, capsys, "gate", "--baseline", RUNS / "baseline", "--candidate", RUNS / "clean")
    assert code == 0 and "pass" in out and "[green]" not in out and "[/" not in out, out + err


def test_calibrate_that_decided_nothing_is_an_error(tmp_path, monkeypatch, capsys):
    """A judge that decided none of the labels wrote calibration.json with kappa null, and exit 0."""
    labels = write_jsonl(tmp_path / "labels.jsonl", [
        {"id": f"s{i}", "premise": f"p{i}", "hypothesis": f"h{i}", "supported": i % 2 == 0} for i in range(4)])
    other = write_jsonl(tmp_path / "other.jsonl", [{"id": "x", "premise": "a", "hypothesis": "b", "supported": True}])
    code, _, err = run_main(monkeypatch, capsys, "calibrate", "--judge", f"labels:{other}", "--labels", labels,
                            "--out", tmp_path / "cal")
    assert_one_line_error(code, err, "--judge", "decided none of the 4 labels", "no label")
    assert not (tmp_path / "cal").exists()


def test_the_llm_judge_without_a_url_names_only_what_the_command_takes(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("LEWISRAG_LLM_BASE_URL", raising=False)
    labels = write_jsonl(tmp_path / "labels.jsonl", [{"id": "s", "premise": "p", "hypothesis": "h", "supported": True}])
    code, _, err = run_main(monkeypatch, capsys, "calibrate", "--judge", "llm:m", "--labels", labels)
    assert_one_line_error(code, err, "LEWISRAG_LLM_BASE_URL")
    assert "pass --llm-base-url" not in err
    monkeypatch.setenv("LEWISRAG_LLM_BASE_URL", "localhost:8000")
    code, _, err = run_main(monkeypatch, capsys, "calibrate", "--judge", "llm:m", "--labels", labels)
    assert_one_line_error(code, err, "$LEWISRAG_LLM_BASE_URL", "http://")


def test_eval_answers_refuses_recall_at_without_gold_ids(tmp_path, monkeypatch, capsys):
    src = write_jsonl(tmp_path / "answers.jsonl", [{k: v for k, v in a.items() if k != "gold_passage_ids"} for a in ANSWERS])
    code, _, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", src, "--out", tmp_path / "run", "--recall-at", 3)
    assert_one_line_error(code, err, "--recall-at", "gold_passage_ids")
    assert not (tmp_path / "run").exists()
    code, _, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", src, "--out", tmp_path / "run")
    assert code == 0, err


def test_train_dpr_no_hard_negatives_means_in_batch_only(tiny_corpus, tmp_path, monkeypatch, capsys):
    """--no-hard-negatives still mined a self-negative from half the steps on (--self-negatives-at 0.5)."""
    base = ["train", "dpr", "--train", tiny_corpus["qa"], "--passages", tiny_corpus["passages"], "--steps", 2,
            "--batch-size", 4, "--hidden-size", 32, "--layers", 1, "--vocab-size", 300, "--no-hard-negatives"]
    code, _, err = run_main(monkeypatch, capsys, *base, "--self-negatives-at", 0.3, "--out", tmp_path / "a")
    assert_one_line_error(code, err, "--self-negatives-at", "--no-hard-negatives")
    code, _, err = run_main(monkeypatch, capsys, *base, "--out", tmp_path / "b")
    assert code == 0, err
    cfg = json.loads((tmp_path / "b" / "lewisrag_dpr.json").read_text())["config"]
    assert cfg["hard_negatives"] is False and cfg["self_negatives_at"] == 0


@pytest.mark.parametrize("field, flag", [("steps", "--steps"), ("grad_accum", "--grad-accum"), ("n_docs", "--n-docs"),
                                         ("save_every", "--save-every")])
def test_train_rag_names_the_one_flag_below_its_minimum(field, flag):
    from dataclasses import replace

    from lewisrag.training.rag import RagTrainConfig
    from lewisrag.training.rag_data import check_config

    with pytest.raises(InputError, match=f"^{flag}: must be at least 1, got 0$"):
        check_config(replace(RagTrainConfig(), **{field: 0}), 1)



def test_a_bug_exits_3_with_its_traceback_not_1_as_a_failed_gate(monkeypatch, capsys):
    """Python's own exit code for an uncaught exception is 1, the gate's for a regression: CI read a
    crash as a failed check."""
    import lewisrag.eval.gate as gate_module

    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(gate_module, "gate", broken)
    code, _, err = run_main(monkeypatch, capsys, "gate", "--baseline", RUNS / "baseline", "--candidate", RUNS / "clean")
    assert code == 3 and "Traceback" in err and "ZeroDivisionError: division by zero" in err


@pytest.mark.parametrize("args, flag", [
    (["ask", "--model", "m", "--index", "A", "--index", "B", "q"], "--index: given twice:"),
    (["gate", "--baseline", "A", "--baseline=B", "--candidate", "C"], "--baseline: given twice:"),
    (["index", "search", "--index", "A", "--query", "x", "-q", "y"], "-q: given twice (as --query and -q):"),
])
def test_a_single_value_flag_given_twice_is_refused(args, flag, monkeypatch, capsys):
    """click keeps the last value in silence: `ask --index A --index B` searched B alone."""
    code, _, err = run_main(monkeypatch, capsys, *args)
    assert code == 2 and err.strip().splitlines() == [f"error: {flag} it takes one value, and only the last would count"]


def test_flags_that_take_several_values_and_switches_may_repeat(monkeypatch, capsys, tmp_path):
    code, _, err = run_main(monkeypatch, capsys, "eval", "retrieval", "--index", tmp_path / "A", "--index", tmp_path / "B",
                            "--questions", tmp_path / "q.jsonl", "--json", "--json")
    assert code == 2 and "given twice" not in err, err  # refused for the missing files, not the repeats


def test_a_cache_folder_inside_a_new_out_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    """`--cache-dir OUT/cache` (or OUT itself) was filled by every request, then found in the way of the
    output: the run refused at its end, and again at once on a rerun (OUT now held the cache)."""
    answers = write_jsonl(tmp_path / "a.jsonl", [{"user_input": "q", "response": "a [1]", "retrieved_contexts": ["a"]}])
    for cache in (tmp_path / "e" / "cache", tmp_path / "e"):
        code, _, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", answers, "--judge", "llm:m",
                                "--llm-base-url", "http://127.0.0.1:9/v1", "--cache-dir", cache, "--out", tmp_path / "e")
        assert_one_line_error(code, err, f"{tmp_path / 'e'}: field '--out': holds --cache-dir {cache}, which writing here "
                              "would destroy")
        assert not (tmp_path / "e").exists()
