"""The layered evaluator: judge a RAG system's answers by retrieval, generation and citations.

The evaluator (docs/evaluator.md) follows the reference course chapter on evaluating RAG: its
metric definitions, failure layers, rule-based citation checker and gate tiers.

    records       answer records to evaluate (ragas' SingleTurnSample fields), read and validated
    statements    the sentence splitter that turns an answer into statements
    judges/       does a premise support a statement? one module per judge, one protocol
    metrics       layered metrics over statements, contexts and a judge
    citations     the rule-based citation checker
    diagnose      which layer failed first, per question
    evaluator     answer records -> results.json (`evaluate_answers`, `evaluate_bughunt`)
    stats/        intervals, paired tests, distributions, judge agreement and calibration, PPI
    gate/         the regression gate over two results.json files
    reports/      report.md and report.html of a run
    bughunt/      the BugHunt teaching sample: six answers, one correct and five each failing in one layer
    hf_metrics/   the metrics as `evaluate` scripts

Nothing here imports a model or training code. `qa` (answer-string metrics) lives in
`lewisrag.scoring`, shared with training and the experiments; it stays importable as
`lewisrag.eval.qa` (both `from lewisrag.eval import qa` and `from lewisrag.eval.qa import ...`).
"""

import sys

from lewisrag.scoring import qa

sys.modules[__name__ + ".qa"] = qa  # the module's old path keeps working
