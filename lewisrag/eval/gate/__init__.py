"""The regression gate: a candidate evaluation run against a baseline, in three tiers (see `checks`).

    inputs     the thresholds (gate.toml over the packaged defaults) and the two runs, validated
    checks     the tiers: rules, retrieval, judged metrics; `gate()` runs them all
    correction the levels a run's paired tests are decided at (gate.toml's `correction`: none, holm)
"""

from lewisrag.eval.gate.checks import GateCheck, GateReport, gate, run_gate
from lewisrag.eval.gate.inputs import METRIC_RANGES, GateConfig, Run, load_config, load_run

__all__ = ["METRIC_RANGES", "GateCheck", "GateConfig", "GateReport", "Run", "gate", "load_config", "load_run", "run_gate"]
