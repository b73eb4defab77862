"""Data shipped with the evaluator (a package so that installed builds include it)."""
