"""The layered evaluator: judge a RAG system's answers by retrieval, generation and citations.

See docs/architecture.md for the map of this package. `qa` (answer-string metrics) lives in
`lewisrag.scoring`, shared with training and the experiments; it stays reachable here as
`lewisrag.eval.qa` for code written against the evaluator.
"""

from lewisrag.scoring import qa  # noqa: F401
