"""What `lewisrag gate` reads: a score is a finite number in its range or null with a reason, else exit 2."""

import importlib.util
import json
from pathlib import Path

import pytest

from conftest import run_cli
from lewisrag.data.io import InputError
from lewisrag.eval import gate
from lewisrag.eval.gate.inputs import METRIC_RANGES, load_config, load_run, toml_line

RUNS = Path(__file__).parent / "data" / "gate_runs"
_spec = importlib.util.spec_from_file_location("make_fixtures", RUNS / "make_fixtures.py")
fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fixtures)
HOLE = "__value__"


def _candidate(tmp_path: Path, token: str, place=lambda run, v: run["records"][2]["metrics"].update(faithfulness=v)) -> Path:
    """The clean run with one value written exactly as `token` (raw JSON text, bare NaN included)."""
    run = fixtures.build()["clean"]
    place(run, HOLE)
    path = tmp_path / "cand" / "results.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(run, indent=1).replace(json.dumps(HOLE), token), encoding="utf-8")
    return path


def record_line(path: Path, i: int) -> int:
    """The line on which record i of an indent=1 results.json opens: errors name it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = lines.index(' "records": [')
    return [n for n, ln in enumerate(lines, start=1) if n > start and ln == "  {"][i]


@pytest.mark.parametrize(("token", "message"), [
    ("NaN", "NaN is not JSON"),
    ("Infinity", "Infinity is not JSON"),
    ("-Infinity", "-Infinity is not JSON"),
    ("1e400", "Infinity is not JSON (or a number too large for a float)"),
    ("1.5", "1.5 is outside faithfulness's range [0, 1]"),
    ("-0.1", "-0.1 is outside faithfulness's range [0, 1]"),
    ("true", "expected a number or null, got bool"),
    ('"0.9"', "expected a number or null, got str"),
])
def test_a_score_that_is_not_a_score_exits_2_naming_file_line_and_field(tmp_path, token, message):
    path = _candidate(tmp_path, token)
    res = run_cli("gate", "--baseline", str(RUNS / "baseline"), "--candidate", str(path.parent))
    assert res.returncode == 2, res.stdout
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    line = record_line(path, 2)
    assert line > 3 and res.stderr.startswith(f"error: {path}:{line}: field 'records[2].metrics.faithfulness': {message}")


@pytest.mark.parametrize(("token", "field", "message"), [
    ("5", "gold_passage_ids", "expected a list of passage ids"),  # a traceback (exit 3) where the labels compared
    ('"ab"', "gold_passage_ids", "expected a list of passage ids"),  # read as the ids 'a' and 'b'
    ("[true]", "gold_passage_ids", "expected a list of passage ids"),
    ("5", "reference_statements", "expected a list of statements"),
    ('{"R1": "the API returns 500"}', "reference_statements", "expected a list of statements"),  # compared by its keys
    ('[{"text": 5}]', "reference_statements", "expected a list of statements"),
])
def test_labels_of_the_wrong_shape_exit_2_naming_the_field(tmp_path, token, field, message):
    path = _candidate(tmp_path, token, place=lambda run, v: run["records"][1].update({field: v}))
    res = run_cli("gate", "--baseline", str(RUNS / "baseline"), "--candidate", str(path.parent))
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith(f"error: {path}:{record_line(path, 1)}: field 'records[1].{field}': {message}"), res.stderr


@pytest.mark.parametrize(("token", "place", "field", "record"), [
    ("Infinity", lambda run, v: run["records"][4]["metrics"]["recall_at_k"].update({"5": v}),
     "records[4].metrics.recall_at_k.5", 4),
    ("1.01", lambda run, v: run["records"][4]["metrics"]["recall_at_k"].update({"5": v}),
     "records[4].metrics.recall_at_k.5", 4),
    ("NaN", lambda run, v: run["records"][0]["statements"].append({"text": "x", "score": v}),
     "records[0].statements[0].score", 0),  # a field the gate does not read: still not JSON
    ("-Infinity", lambda run, v: run["aggregates"].update(faithfulness={"mean": v}), "aggregates.faithfulness.mean", None),
])
def test_non_finite_and_out_of_range_values_anywhere(tmp_path, token, place, field, record):
    path = _candidate(tmp_path, token, place)
    with pytest.raises(InputError) as e:
        load_run(path, ("faithfulness",))
    assert (e.value.field, e.value.line) == (field, None if record is None else record_line(path, record))


def test_answer_relevancy_a_mean_cosine_may_be_below_zero_but_not_below_minus_one(tmp_path):
    def place(run, v):
        run["records"][2]["metrics"]["answer_relevancy"] = v
    run = load_run(_candidate(tmp_path / "a", "-0.4", place), ("answer_relevancy",))
    assert run.records["q003", "stitched"]["metrics"]["answer_relevancy"] == -0.4
    path = _candidate(tmp_path / "b", "-1.5", place)
    with pytest.raises(InputError, match=r"-1\.5 is outside answer_relevancy's range \[-1, 1\]") as e:
        load_run(path, ("answer_relevancy",))
    assert (e.value.line, e.value.field) == (record_line(path, 2), "records[2].metrics.answer_relevancy")


def test_null_is_not_measurable_only_with_its_reason(tmp_path):
    def place(run, v):
        run["records"][2]["metrics"]["faithfulness"] = v
        run["records"][2]["nan_reasons"]["faithfulness"] = "no statements in the answer"
    assert load_run(_candidate(tmp_path / "a", "null", place), ("faithfulness",)).records["q003", "stitched"][
        "metrics"]["faithfulness"] is None
    path = _candidate(tmp_path / "b", "null")
    with pytest.raises(InputError, match=rf":{record_line(path, 2)}: field 'records\[2\]\.metrics\.faithfulness': null without"):
        load_run(path, ("faithfulness",))
    # absent: a metric this record's system does not produce (reproduce's retrieval-only systems); the
    # gate counts it with the nulls, so dropping the key is no way around the reason
    absent = _candidate(tmp_path / "c", "null", lambda run, v: run["records"][2]["metrics"].pop("faithfulness"))
    check = next(c for c in gate.gate(RUNS / "baseline", absent).checks if c.name == "unmeasurable faithfulness")
    assert check.verdict == "fail" and "q003@stitched" in check.evidence


def test_ceiling_metrics_are_read_and_checked(tmp_path):
    cfg = tmp_path / "gate.toml"
    cfg.write_text('[tier3]\nceilings = [{metric = "exact_match", below = 1.0, max_share = 0.05}]\n', encoding="utf-8")
    cand = _candidate(tmp_path, "2", lambda run, v: run["records"][6]["metrics"].update(exact_match=v))
    with pytest.raises(InputError, match=r"2 is outside exact_match's range") as e:  # not a tier 3 metric, still read
        gate.gate(RUNS / "baseline", cand, cfg)
    assert (e.value.line, e.value.field) == (record_line(cand, 6), "records[6].metrics.exact_match")


def _config(tmp_path, toml: str):
    path = tmp_path / "gate.toml"
    path.write_text(toml, encoding="utf-8")
    return path


@pytest.mark.parametrize(("toml", "field"), [
    ('[tier3]\nmetrics = ["faithfulnes"]\n', "tier3.metrics"),
    ('[tier3]\nmetrics = ["recall_at_k"]\n', "tier3.metrics"),
    ('[tier3]\nceilings = [{metric = "bleu", below = 1.0, max_share = 0.05}]\n', "tier3.ceilings[0].metric"),
    ("[tier1]\nmax_new_unmeasurable = -2\n", "tier1.max_new_unmeasurable"),
    ("[tier1]\nmax_new_unmeasurable = 0.5\n", "tier1.max_new_unmeasurable"),
])
def test_config_names_only_metrics_with_a_declared_range(tmp_path, toml, field):
    with pytest.raises(InputError) as e:
        load_config(_config(tmp_path, toml))
    assert e.value.field == field


def test_every_metric_the_packaged_gate_reads_has_a_range():
    cfg = load_config()
    assert cfg.max_new_unmeasurable == 0
    assert set(cfg.gated_metrics) <= set(METRIC_RANGES)
    assert all(r == (0.0, 1.0) for m, r in METRIC_RANGES.items() if m != "answer_relevancy")  # shares
    assert METRIC_RANGES["answer_relevancy"] == (-1.0, 1.0)  # a mean cosine


@pytest.mark.parametrize(("toml", "field"), [
    # every comparison with NaN is false: these used to pass the hidden regression below
    ("[tier3]\nmax_mean_drop = nan\n", "tier3.max_mean_drop"),
    ("[tier3]\ncuts = [{ below = nan, max_regressions = 0 }]\n", "tier3.cuts[0].below"),
    ("[tier2]\nhit_at = nan\n", "tier2.hit_at"),
    ("[tier2]\nmax_mean_drop = -0.5\n", "tier2.max_mean_drop"),
    ("[tier2]\nhit_at = 0\n", "tier2.hit_at"),  # every question a hit
    ('[tier1]\nzero_statuses = ["BAD_IDX"]\n', "tier1.zero_statuses[0]"),  # a typo switched the check off
    # these crashed with a traceback (exit 1) instead of exit 2
    ('[tier3]\ncuts = [{ below = 0.5, max_regressions = "x" }]\n', "tier3.cuts[0].max_regressions"),
    ("[tier3]\ncuts = [{ below = 0.5, max_regressions = -2 }]\n", "tier3.cuts[0].max_regressions"),
    ('[tier3]\nceilings = [{ metric = "faithfulness", below = 1.0, max_share = 1.5 }]\n', "tier3.ceilings[0].max_share"),
    ('[tier3]\nceilings = [{ metric = "faithfulness", below = 1.0, max_share = nan }]\n', "tier3.ceilings[0].max_share"),
    ('[tier3]\nceilings = [{ metric = ["faithfulness"], below = 1.0, max_share = 0.05 }]\n', "tier3.ceilings[0].metric"),
    ("[tier3]\nceilings = [1]\n", "tier3.ceilings[0]"),
    ("n_resamples = 0\n", "n_resamples"),
    ("n_resamples = 9223372036854775807\n", "n_resamples"),  # accepted, it ran until killed
    ("seed = -1\n", "seed"),
])
def test_a_threshold_out_of_its_range_exits_2_naming_it(tmp_path, toml, field):
    path = _config(tmp_path, toml)
    res = run_cli("gate", "--baseline", str(RUNS / "baseline"), "--candidate", str(RUNS / "hidden_regression"),
                  "--config", str(path))
    assert res.returncode == 2, res.stdout
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    line = toml.count("\n")  # each case sets one value, on its last line
    assert res.stderr.startswith(f"error: {path}:{line}: field '{field}': "), res.stderr


def test_a_config_with_a_byte_order_mark_is_read(tmp_path):
    """Windows editors save UTF-8 with a BOM; the JSON and JSONL readers accept one, and so does the gate's TOML."""
    cfg = tmp_path / "gate.toml"
    cfg.write_text("\ufeff[tier1]\nallow_baseline_violations = true\n", encoding="utf-8")
    assert load_config(cfg).allow_baseline_violations is True


@pytest.mark.parametrize("toml", ["seed = " + "9" * 5000 + "\n", "x = " + "[" * 100_000 + "]" * 100_000 + "\n"])
def test_a_config_tomllib_cannot_read_is_one_line(tmp_path, toml):
    """An integer past int()'s digit limit and arrays nested past the stack were a traceback (exit 1)."""
    path = _config(tmp_path, toml)
    res = run_cli("gate", "--baseline", str(RUNS / "baseline"), "--candidate", str(RUNS / "baseline"), "--config", str(path))
    assert res.returncode == 2 and "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert res.stderr.startswith(f"error: {path}: malformed TOML"), res.stderr


def test_a_config_folder_is_named_as_one(tmp_path):
    with pytest.raises(InputError, match="is a folder; a file is needed"):
        load_config(tmp_path)


@pytest.mark.parametrize(("place", "field", "message"), [
    # the gate pairs recall@k by its key: "01" or "abc" read as a score lost at every k
    (lambda run, v: run["records"][4]["metrics"].update(recall_at_k={"01": 1.0}), "records[4].metrics.recall_at_k.01",
     "expected a cut-off k >= 1 as the key"),
    # a misspelt not_in_kb would leave the question out of the refusal check
    (lambda run, v: run["records"][4].update(category="not_in_KB"), "records[4].category", "unknown category"),
    # a misspelt citation status would count as no violation: MISSING_CITATION's rule checks nothing
    (lambda run, v: run["records"][4].update(citation_checks=[{"status": "PASS"}, {"status": "MISSING_CITATON"}]),
     "records[4].citation_checks[1].status", "unknown status 'MISSING_CITATON'"),
    # a misspelt metric went unread: the gate skipped faithfulness instead of failing its regression
    (lambda run, v: run["records"][4]["metrics"].update(faithfulnes=run["records"][4]["metrics"].pop("faithfulness")),
     "records[4].metrics.faithfulnes", "unknown metric"),
])
def test_a_record_the_gate_would_misread_exits_2(tmp_path, place, field, message):
    path = _candidate(tmp_path, "null", place)
    with pytest.raises(InputError, match=message) as e:
        load_run(path)
    assert (e.value.line, e.value.field) == (record_line(path, 4), field)


def test_runs_without_records_are_not_gated(tmp_path):
    path = _candidate(tmp_path, "[]", lambda run, v: run.update(records=v))
    res = run_cli("gate", "--baseline", str(path), "--candidate", str(path))  # used to PASS, every check skipped
    assert res.returncode == 2 and res.stderr.startswith(f"error: {path}: field 'records': no records"), res.stderr


def test_a_splitter_change_names_the_splitter(tmp_path):
    path = _candidate(tmp_path, '{"name": "atomic", "version": "1"}', lambda run, v: run.update(splitter=v))
    with pytest.raises(InputError, match="splitter") as e:
        gate.gate(RUNS / "clean", path)
    assert e.value.field == "splitter"



_LINED = """# a gate config with comments [not a table]
seed = 0
tier2.max_mean_drop = 0.01
[tier1]
zero_statuses = [
  "BAD_ID",
  "MISSING_CITATION",
]
[tier3]
metrics = ["faithfulness"]
cuts = [
  { below = 1.0, max_regressions = -1 },
  { below = 0.5, max_regressions = 0 },
]
[[tier3.ceilings]]
metric = "faithfulness"
below = 1.0
max_share = 0.05
[[tier3.ceilings]]
metric = "faithfulness"
below = 0.9
max_share = 0.05
method = "wilson"
"""


@pytest.mark.parametrize(("old", "new", "line", "field"), [
    ('"MISSING_CITATION"', '"NO_SUCH_STATUS"', 5, "tier1.zero_statuses[1]"),  # an element: its array's line
    ("below = 0.5", "below = nan", 11, "tier3.cuts[1].below"),
    ('"wilson"', '"clopper"', 23, "tier3.ceilings[1].method"),  # a key of the second [[array]] table
    ("seed = 0", 'seed = "0"', 2, "seed"),
    ("tier2.max_mean_drop = 0.01", "tier2.max_mean_drop = 2", 3, "tier2.max_mean_drop"),  # a dotted key
    ("tier2.max_mean_drop = 0.01", "tier2 = { max_mean_drop = 2 }", 3, "tier2.max_mean_drop"),  # an inline table
])
def test_config_errors_name_the_line_the_setting_is_on(tmp_path, old, new, line, field):
    # tomllib gives positions for syntax errors only: the line of a value it read but the gate
    # refuses is found again in the text
    assert load_config(_config(tmp_path, _LINED)).ceilings[1].method == "wilson"
    path = _config(tmp_path, _LINED.replace(old, new))
    with pytest.raises(InputError) as e:
        load_config(path)
    assert (e.value.line, e.value.field) == (line, field)
    assert str(e.value).startswith(f"{path}:{line}: field '{field}': ")


def test_a_config_error_in_a_packaged_setting_names_no_line(tmp_path):
    # "missing setting" is the one error that can name a setting the file does not make
    assert toml_line(_LINED, "tier3.max_mean_drop") is None and toml_line(_LINED, "alpha") is None
    assert toml_line('x = "tier3.cuts = [" # [[y]]\nalpha = 1\n', "alpha") == 2  # brackets in strings and comments
