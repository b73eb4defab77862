"""Reports of an evaluation run, pure functions from its results.json object to text.

    markdown        report.md: per-layer tables, score distributions, the questions to read
    html            report.html: one self-contained offline teaching page (assets/ holds its CSS and JS)
    distributions   the question-level distribution sections and figures both reports share
    claims          the claim-level diagnostics section (RAGChecker's metrics side by side) every report shares
"""
