"""The gate's second review: labels paired by the reference a record gave (not by what a splitter version
made of it), the refusal of runs that are not comparable naming both runs, a system lost whole under
require_all_baseline = false, a ceiling given twice, and scripts/ci_gate.sh's refusals, kept run and --help."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path

import pytest

from lewisrag.data.io import InputError
from lewisrag.eval import gate
from lewisrag.eval.evaluator import evaluate_answers
from lewisrag.eval.judges import LexicalJudge
from lewisrag.eval.records import parse_answer
from lewisrag.eval.results import read_results
from test_ci_gate_script import _env as ci_env
from test_gate import _write, fixtures

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "ci_gate.sh"


def _check(report, name: str):
    return next((c for c in report.checks if c.name == name), None)


def _failed(report) -> set[str]:
    return {c.name for c in report.checks if c.verdict == "fail"}


# ---------------------------------------------------------------------------------------------
# labels: the reference a record gave, not its splitter's statements


def _answers(reference: str = "结论：\n城市{i}的人口是{n}人。", **extra) -> list[dict]:
    return [{"id": f"q{i:02d}", "user_input": f"城市{i}的人口是多少？",
             "response": f"城市{i}的人口是{1000 + i}人 [1]。",
             "retrieved_contexts": [{"id": "1", "title": "文档", "text": f"城市{i}的人口是{1000 + i}人。"}],
             "reference": reference.format(i=i, n=1000 + i), "gold_passage_ids": ["1"], "category": "single_doc",
             **extra} for i in range(6)]


def _evaluated(answers: list[dict]) -> dict:
    records = [parse_answer(r, "answers.jsonl", i, {}) for i, r in enumerate(answers, 1)]
    return evaluate_answers(records, LexicalJudge()).to_json()


def _as_splitter_14(run: dict) -> dict:
    """The run as splitter version 14 wrote it: it kept the heading "结论：" as a reference statement."""
    old = copy.deepcopy(run)
    old["splitter"]["version"] = "14"
    for rec in old["records"]:
        rec["reference_statements"].insert(0, {**rec["reference_statements"][0], "text": "结论："})
    return old


def test_a_new_splitter_version_is_no_relabelled_question(tmp_path):
    """--allow-judge-change across splitter 14 -> 15 failed "labels" on unchanged data: the reference
    statements the splitter made of the same `reference` text differ between the versions."""
    run = _evaluated(_answers())
    assert run["records"][0]["reference"] == "结论：\n城市0的人口是1000人。"
    assert run["records"][0]["reference_statements_split"] is True
    base, cand = _write(tmp_path, "v14", _as_splitter_14(run)), _write(tmp_path, "v15", run)
    report = gate.gate(base, cand, allow_judge_change=True)
    assert _check(report, "labels") is None and report.passed, _failed(report)
    assert _check(report, "judge").verdict == "warn"


def test_a_changed_reference_still_fails_labels(tmp_path):
    run = _evaluated(_answers())
    changed = _evaluated(_answers("结论：\n城市{i}的人口是{n}0人。"))
    report = gate.gate(_write(tmp_path, "b", run), _write(tmp_path, "c", changed))
    check = _check(report, "labels")
    assert check.verdict == "fail" and "reference" in check.evidence and check.evidence.startswith("6 paired")
    assert check.details["changed"][0]["reference"] == {"baseline": "结论： 城市0的人口是1000人。",
                                                        "candidate": "结论： 城市0的人口是10000人。"}


def test_given_reference_statements_are_compared_as_before(tmp_path):
    """Statements a record gives are its labels; one run's given against the other's split from the same
    reference are other labels too; runs written before `reference` was recorded compare statements."""
    given = _evaluated(_answers(reference_statements=["城市的人口是1000人。"]))
    assert given["records"][0]["reference_statements_split"] is False
    other = _evaluated(_answers(reference_statements=["城市的人口是2000人。"]))
    split = _evaluated(_answers())
    for cand in (other, split):
        report = gate.gate(_write(tmp_path, "b", given), _write(tmp_path, "c", cand))
        assert "reference_statements" in _check(report, "labels").evidence
    old = _as_splitter_14(split)
    for rec in old["records"] + split["records"]:  # as written before the fields existed
        del rec["reference"], rec["reference_statements_split"]
    report = gate.gate(_write(tmp_path, "old14", old), _write(tmp_path, "old15", split), allow_judge_change=True)
    assert _check(report, "labels").verdict == "fail"


def test_a_reference_that_is_not_text_is_refused(tmp_path):
    run = _evaluated(_answers())
    run["records"][1]["reference"] = 3
    with pytest.raises(InputError, match=r"field 'records\[1\]\.reference': expected a string"):
        read_results(_write(tmp_path, "bad", run))
    run["records"][1]["reference"] = "x"
    run["records"][2]["reference_statements_split"] = "yes"
    with pytest.raises(InputError, match=r"field 'records\[2\]\.reference_statements_split': expected true or false"):
        read_results(_write(tmp_path, "bad2", run))


# ---------------------------------------------------------------------------------------------
# runs that are not comparable


def test_a_splitter_change_names_both_runs_and_the_baseline_to_rerun(tmp_path):
    """In CI the candidate is a fresh run: the refusal named only it and "re-run the baseline the same way"."""
    run = _evaluated(_answers())
    base, cand = _write(tmp_path, "base", _as_splitter_14(run)), _write(tmp_path, "cand", run)
    with pytest.raises(InputError) as e:
        gate.gate(base, cand)
    message = str(e.value)
    assert e.value.field == "splitter" and f"baseline {base}" in message and f"candidate {cand}" in message
    assert "re-run the baseline the way the candidate was, or make the candidate the new baseline" in message


# ---------------------------------------------------------------------------------------------
# require_all_baseline = false, per system


def _two_systems() -> dict:
    run = copy.deepcopy(fixtures.build()["clean"])
    run["records"] += [{**copy.deepcopy(r), "system": "b"} for r in run["records"]]
    return run


def test_a_system_missing_from_the_candidate_fails_without_require_all_baseline(tmp_path):
    cfg = tmp_path / "gate.toml"
    cfg.write_text("require_all_baseline = false\n", encoding="utf-8")
    base = _two_systems()
    b = _write(tmp_path, "b", base)
    assert gate.gate(b, b, cfg).passed
    some = copy.deepcopy(base)
    some["records"] = [r for i, r in enumerate(base["records"]) if r["system"] == "stitched" or i % 2]
    assert gate.gate(b, _write(tmp_path, "some", some), cfg).passed  # missing questions are tolerated
    nob = copy.deepcopy(base)
    nob["records"] = [r for r in base["records"] if r["system"] == "stitched"]
    report = gate.gate(b, _write(tmp_path, "nob", nob), cfg)
    check = _check(report, "questions")
    assert _failed(report) == {"questions"} and check.details["unpaired_systems"] == ["b"]
    assert check.evidence.startswith("no answerable question of b paired")
    only_refusals = copy.deepcopy(base)  # b's not_in_kb questions pair, none of its answerable ones
    only_refusals["records"] = [r for r in base["records"] if r["system"] == "stitched" or r["category"] == "not_in_kb"]
    report = gate.gate(b, _write(tmp_path, "refusals", only_refusals), cfg)
    assert _check(report, "questions").details["unpaired_systems"] == ["b"]


# ---------------------------------------------------------------------------------------------
# a ceiling given twice


def test_a_ceiling_given_twice_is_refused(tmp_path):
    cfg = tmp_path / "gate.toml"
    cfg.write_text('[tier3]\nceilings = [\n  { metric = "faithfulness", below = 1.0, max_share = 0.05 },\n'
                   '  { metric = "faithfulness", below = 1.0, max_share = 0.1 },\n]\n', encoding="utf-8")
    with pytest.raises(InputError) as e:
        gate.load_config(cfg)
    assert str(e.value) == (f"{cfg}:2: field 'tier3.ceilings': the ceiling of faithfulness below 1 is given twice")
    cfg.write_text('[tier3]\nceilings = [{ metric = "faithfulness", below = 1.0, max_share = 0.05 },\n'
                   '  { metric = "faithfulness", below = 0.5, max_share = 0.05 }]\n', encoding="utf-8")
    assert len(gate.load_config(cfg).ceilings) == 2  # two cuts of one metric are two ceilings


# ---------------------------------------------------------------------------------------------
# scripts/ci_gate.sh

FAKE = """#!/usr/bin/env bash
case "$1" in
  eval|reproduce) mkdir -p "${@: -1}"; exit 0 ;;  # the run folder, --out's (the last argument)
  gate) echo "error: the gate refused it" >&2; exit "${GATE_RC:-0}" ;;
esac
"""


def _env(tmp_path: Path, **extra) -> dict:
    return ci_env(tmp_path, FAKE, **extra)


def _script(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env)


def test_a_refused_fresh_run_is_kept_with_the_command_that_makes_it_the_baseline(tmp_path):
    """A judge or splitter change stopped CI naming a temporary run the script then deleted, and never
    said --update-baseline."""
    for mode, prefix in (("--bughunt", ""), ("--tiny", f"GATE_BASELINE={ROOT}/tests/data/gate_baseline_tiny ")):
        r = _script(mode, env=_env(tmp_path, GATE_RC="2"))
        assert r.returncode == 2, r.stderr
        assert "the gate refused it" in r.stderr
        command = r.stderr.strip().splitlines()[-1].split("make it the baseline: ", 1)[1]
        assert command.startswith(f"{prefix}scripts/ci_gate.sh --update-baseline ")
        assert Path(command.split()[-1]).is_dir()
    for rc in ("0", "1"):  # a verdict: the fresh run goes
        before = set(tmp_path.iterdir())
        r = _script("--bughunt", env=_env(tmp_path, GATE_RC=rc))
        assert r.returncode == int(rc) and "--update-baseline" not in r.stderr and set(tmp_path.iterdir()) == before


def _results(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(text, encoding="utf-8")
    return folder


def test_update_baseline_names_what_is_wrong_with_the_run_before_its_kind(tmp_path):
    """A malformed run was refused as "field 'lewisrag.kind': ''", a results.json without a lewisrag block
    (which the gate reads) the same way."""
    baseline = _results(tmp_path / "baseline", '{"lewisrag": {"kind": "bughunt"}}\n')
    env = {**os.environ, "GATE_BASELINE": str(baseline), "LEWISRAG": str(ROOT / ".venv" / "bin" / "lewisrag")}
    broken = _results(tmp_path / "broken", '{"records": [\n')
    r = _script("--update-baseline", str(broken), env=env)
    assert r.returncode == 2 and "lewisrag.kind" not in r.stderr and f"{broken}/results.json:" in r.stderr, r.stderr
    unnamed = fixtures.build()["clean"]
    del unnamed["lewisrag"]
    run = _results(tmp_path / "unnamed", json.dumps(unnamed))
    r = _script("--update-baseline", str(run), env=env)
    assert r.returncode == 0 and "baseline updated" in r.stdout, r.stderr
    assert json.loads((baseline / "results.json").read_text()) == unnamed


def test_help_prints_the_usage(tmp_path):
    for flag in ("--help", "-h"):
        r = _script(flag, env=_env(tmp_path))
        assert r.returncode == 0 and not r.stderr, r.stderr
        assert r.stdout.startswith("Gate an evaluation run") and "--update-baseline RUN_DIR" in r.stdout
        assert "set -euo" not in r.stdout and "#" not in r.stdout.splitlines()[0]
