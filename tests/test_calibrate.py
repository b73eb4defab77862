"""lewisrag calibrate: a judge against human labels, misses and false kills apart."""

import json

import pytest
from typer.testing import CliRunner

from conftest import run_cli, write_jsonl
from lewisrag.cli import app
from lewisrag.data.io import InputError
from lewisrag.eval.judges import Label, read_labels
from lewisrag.eval.stats import calibrate
from lewisrag.eval.judges import Verdict

LABELS = [
    {"id": "s1", "premise": "The login endpoint returns 422.", "hypothesis": "Login returns 422.", "supported": True},
    {"id": "s2", "premise": "The login endpoint returns 422.", "hypothesis": "A toast shows for 3 seconds.", "supported": False},
    {"id": "s3", "premise": "接口返回 422。", "hypothesis": "接口返回 422。", "supported": True},
    {"id": "s4", "premise": "Errors are listed above the form.", "hypothesis": "The account locks after 5 tries.", "supported": False},
    {"id": "s5", "premise": "Errors are listed above the form.", "hypothesis": "Errors appear above the form.", "supported": True},
]


class ScriptedJudge:
    """Answers from a fixed list, in order; records the batch sizes it was called with."""

    name = "scripted"
    fingerprint = "f" * 64

    def __init__(self, answers):
        self.answers, self.batches = list(answers), []

    def judge(self, pairs):
        self.batches.append(len(pairs))
        return [Verdict(self.answers.pop(0), "scripted") for _ in pairs]


def _labels():
    return [Label(r["id"], r["premise"], r["hypothesis"], r["supported"]) for r in LABELS]


def test_misses_false_kills_and_undecided_are_separated():
    judge = ScriptedJudge([True, True, False, False, None])  # s2 missed, s3 killed, s5 undecided
    seen = []
    r = calibrate(judge, _labels(), batch_size=2, on_batch=seen.append)
    assert judge.batches == [2, 2, 1] and seen == [2, 2, 1]
    assert (r["misses"], r["false_kills"], r["undecided"], r["n"]) == (1, 1, 1, 4)
    assert r["miss_rate"] == 0.5 and r["false_kill_rate"] == 0.5
    assert r["judge"] == {"name": "scripted", "fingerprint": "f" * 64}
    assert [(d["id"], d["kind"]) for d in r["disagreements"]] == [("s2", "miss"), ("s3", "false_kill"), ("s5", "undecided")]
    low, high = r["miss_rate_interval"]
    assert low < 0.5 < high


def test_a_judge_returning_the_wrong_number_of_verdicts_is_an_error():
    class Short(ScriptedJudge):
        def judge(self, pairs):
            return super().judge(pairs)[:-1]

    with pytest.raises(ValueError, match="verdicts"):
        calibrate(Short([True] * 5), _labels())


def test_read_labels_names_line_and_field(tmp_path):
    good = write_jsonl(tmp_path / "good.jsonl", LABELS)
    assert [lab.id for lab in read_labels(good)] == ["s1", "s2", "s3", "s4", "s5"]
    bad = write_jsonl(tmp_path / "bad.jsonl", [LABELS[0], {**LABELS[1], "supported": "yes"}])
    with pytest.raises(InputError) as e:
        read_labels(bad)
    assert (e.value.line, e.value.field) == (2, "supported")
    dup = write_jsonl(tmp_path / "dup.jsonl", [LABELS[0], LABELS[0]])
    with pytest.raises(InputError, match="duplicate"):
        read_labels(dup)


def test_cli_labels_judge_agrees_with_itself(tmp_path):
    labels = write_jsonl(tmp_path / "labels.jsonl", LABELS)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["calibrate", "--judge", f"labels:{labels}", "--labels", str(labels),
                                   "--json", "--out", str(out)])
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    assert r["kappa"] == pytest.approx(1.0) and r["disagreements"] == [] and r["judge"]["name"] == "labels"
    assert json.loads((out / "calibration.json").read_text(encoding="utf-8"))["n"] == 5


def test_cli_table_lists_disagreements(tmp_path):
    labels = write_jsonl(tmp_path / "labels.jsonl", LABELS)
    res = CliRunner().invoke(app, ["calibrate", "--judge", "lexical", "--labels", str(labels)])
    assert res.exit_code == 0, res.output
    assert "miss rate" in res.stdout and "false-kill rate" in res.stdout and "disagreements" in res.stdout


def test_cli_table_lists_the_first_disagreements_and_says_where_all_are(tmp_path, monkeypatch):
    """17k disagreements took longer to render than to judge; the table lists --show of them."""
    human = [{"id": f"x{i:02d}", "premise": "p", "hypothesis": f"h{i}", "supported": i % 2 == 0} for i in range(40)]
    labels = write_jsonl(tmp_path / "human.jsonl", human)
    flipped = write_jsonl(tmp_path / "judge.jsonl", [{**h, "supported": not h["supported"]} for h in human])
    monkeypatch.chdir(tmp_path)  # a short --out: rich folds a title longer than the table
    args = ["calibrate", "--judge", f"labels:{flipped}", "--labels", str(labels), "--out", "out"]
    for extra, listed in (([], 30), (["--show", "5"], 5), (["--show", "0"], 40)):
        res = CliRunner().invoke(app, [*args, *extra], terminal_width=200)
        assert res.exit_code == 0, res.output
        shown = [h["id"] for h in human if f" {h['id']} " in res.stdout]
        assert shown == [h["id"] for h in human[:listed]], (extra, shown)
        assert ("40 disagreements, the first" in res.stdout) == (listed < 40)
        if listed < 40:  # the title wraps at the table's width
            assert f"the first {listed} (all: --show 0, --json, out/calibration.json)" in " ".join(res.stdout.split())
    assert len(json.loads((tmp_path / "out" / "calibration.json").read_text())["disagreements"]) == 40


def test_cli_bad_labels_exit_2(tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"id": "s1", "premise": "p", "supported": True}])
    res = run_cli("calibrate", "--judge", "lexical", "--labels", str(bad))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "bad.jsonl:1: field 'hypothesis': missing" in res.stderr
    # two labels for one pair that disagree: a judge cannot be measured against both
    bad = write_jsonl(tmp_path / "contra.jsonl", [{"id": "s1", "premise": "p", "hypothesis": "h", "supported": True},
                                                  {"id": "s2", "premise": "p ", "hypothesis": "h", "supported": False}])
    res = run_cli("calibrate", "--judge", "lexical", "--labels", str(bad))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "contra.jsonl:2: field 'supported': contradicts the label on line 1" in res.stderr


def test_three_way_labels_are_measured_where_both_give_them(tmp_path):
    """A judge that swapped neutral and contradiction agreed on `supported` everywhere and was reported
    perfect (κ 1.0, no disagreement), though the results' contradiction counts rest on that distinction."""
    rows = [("a", "contradiction", "neutral"), ("b", "neutral", "contradiction"), ("c", "entailment", "entailment")]

    def labels(which: int):
        return [{"id": i, "premise": "The login returns 422.", "hypothesis": f"Statement {i}.",
                 "supported": r[which] == "entailment", "label": r[which]} for i, *r in rows]

    human, judge = write_jsonl(tmp_path / "h.jsonl", labels(0)), write_jsonl(tmp_path / "j.jsonl", labels(1))
    r = run_cli("calibrate", "--judge", f"labels:{judge}", "--labels", str(human), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["kappa"] == 1.0 and out["three_way"]["n"] == 3 and out["three_way"]["agreement"] == 1 / 3
    assert [(d["id"], d["kind"], d["human_label"], d["judge_label"]) for d in out["disagreements"]] == [
        ("a", "label", "contradiction", "neutral"), ("b", "label", "neutral", "contradiction")]
    r = run_cli("calibrate", "--judge", f"labels:{judge}", "--labels", str(human))
    assert r.returncode == 0 and "three-way labels" in r.stdout, r.stderr
