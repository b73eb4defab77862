"""Scores that training, the experiments and the evaluator all compute, defined once.

`qa`: answer strings (exact match, token F1, ROUGE-L, BLEU-1) for English and Chinese.
`retrieval`: recall@k and its relatives from passage ids. `aggregate`: the mean that leaves
unmeasured values out. This package sits at the bottom of the one-way order beside `data`
(docs/architecture.md): it imports nothing else of lewisrag.
"""
