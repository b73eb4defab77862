"""`lewisrag eval retrieval`: hit@k and recall@k of an index against gold passage ids."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from lewisrag.commands import _ui


def retrieval(
    ctx: typer.Context,
    index: list[Path] = typer.Option(..., "--index", help="Index directory; repeat to compare several (e.g. dense and BM25)."),
    questions: Path = typer.Option(None, "--questions", help="Questions with gold_passage_ids (a QA file; answers are not "
                                   "needed). Required."),
    old_data: Path = typer.Option(None, "--data", hidden=True, help="Deprecated: --questions."),
    qa_fields: str = typer.Option(None, "--qa-fields", help=_ui.QA_FIELDS_HELP),
    encoder: str = typer.Option(None, "--encoder", help="DPR checkpoint, transformers DPRQuestionEncoder folder or trained "
                                "RAG model (RUN/best: the question encoder RAG training left) for dense indexes (default: the "
                                "checkpoint that built each index)."),
    context_encoder: str = typer.Option(None, "--context-encoder", help="With a DPRQuestionEncoder folder as --encoder: the "
                                        "DPRContextEncoder folder of its pair; it must be the one that built each dense index."),
    recall_at: list[int] = typer.Option([1, 5, 20], "--recall-at", help="hit@k and recall@k cut-offs; repeat the flag "
                                        "for several. Unless given, those past the smallest index's passages are left out, "
                                        "with a note."),
    old_k: list[int] = typer.Option(None, "-k", hidden=True, help="Deprecated: --recall-at."),
    swap: bool = typer.Option(False, "--swap", help="Allow a question encoder trained against another context encoder "
                              "(or an unpaired DPRQuestionEncoder folder)."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as one JSON object instead of a table."),
) -> None:
    """Print hit@k (a gold passage among the top k) and recall@k (the share of
    each question's gold passages among the top k) for each index; they differ only on questions with
    several gold passages. Questions whose search found fewer passages than the largest cut-off (a
    compressed index's, or BM25's passages sharing no word) are counted in a note and as fewer_hits."""
    from lewisrag.data.records import check_gold_ids, read_questions
    from lewisrag.index import open_retriever, retrieval_recall
    from lewisrag.data.io import InputError, given_once
    from lewisrag.index.store import read_manifest
    from lewisrag.index.tuning import search_knob

    data = _ui.renamed(ctx, "questions", "old_data", "--questions", "--data")
    if data is None:
        raise _ui.UsageError("Missing option '--questions'.", ctx=ctx)
    k = _ui.renamed(ctx, "recall_at", "old_k", "--recall-at", "-k")
    k_flag = "-k" if ctx.params.get("old_k") else "--recall-at"  # errors name the flag the user typed
    if any(x < 1 for x in k):
        raise InputError(k_flag, "cut-offs must be at least 1")
    given_once(k_flag, k)  # a repeat was scored twice into one count: hit@5 2.000
    given_once("--index", map(str, index), key=os.path.realpath)  # a repeat folded into one row
    fields = _ui.qa_fields(qa_fields)
    gold_field = (fields or {}).get("gold_passage_ids", "gold_passage_ids")  # the file's name for them
    examples = read_questions(data, fields)
    gold = {g for ex in examples for g in ex.gold_passage_ids}
    if not gold:  # recall would be NaN over zero questions, reported as a result
        raise InputError(data, "no question has gold passage ids, so recall cannot be measured", field=gold_field)
    manifests = [read_manifest(path) for path in index]  # every index checked before any is searched
    kinds = [m["kind"] for m in manifests]
    smallest = min(m["n_passages"] for m in manifests)
    given = ctx.get_parameter_source("recall_at").name in ("COMMANDLINE", "ENVIRONMENT") or bool(ctx.params.get("old_k"))
    kept = [x for x in k if x <= smallest]
    if not given and kept and len(kept) < len(k):  # the defaults lowered, as `index search` lowers its --n-docs
        name = next(path for path, m in zip(index, manifests) if m["n_passages"] == smallest)
        typer.echo(f"note: {name} holds {smallest} passages: hit@k and recall@k at {' and '.join(map(str, kept))}, not "
                   f"at {' and '.join(str(x) for x in k if x > smallest)} (default cut-offs past its passages)", err=True)
        k = kept
    if max(k) > smallest:  # a cut-off past the passages measures nothing and allocates k results a question
        raise InputError(k_flag, f"cut-offs must be at most the smallest index's {smallest} passages, got {max(k)}")
    if "dense" not in kinds:  # never ignored in silence
        _ui.refuse_given(ctx, ("encoder", "context_encoder", "swap"), "applies to dense indexes; "
                         f"{', '.join(map(str, index))} {'is' if len(index) == 1 else 'are'} BM25")
    retrievers = [open_retriever(path, encoder if kind == "dense" else None, swap=swap,
                                 context_encoder=context_encoder if kind == "dense" else None)
                  for path, kind in zip(index, kinds)]
    for path, retriever in zip(index, retrievers):
        check_gold_ids(examples, retriever.index.passages, data, f"the index {path}", fields)
    scored = sum(1 for ex in examples if ex.gold_passage_ids)  # only these are searched: the bar ends full
    results = {}
    with _ui.progress() as p:
        for path, kind, retriever in zip(index, kinds, retrievers):
            task = p.add_task(f"{path.name} ({kind})", total=scored, info="")
            results[str(path)] = {"kind": kind, **retrieval_recall(retriever, examples, sorted(k), on_batch=lambda n, t=task: p.advance(t, n))}
    for path, kind, retriever in zip(index, kinds, retrievers):  # said, as `index search` and `targets` say it
        if not (short := results[str(path)]["fewer_hits"]):
            continue
        if kind == "bm25":
            typer.echo(f"note: {short} of {scored} questions have fewer than {max(k)} passages holding a word of "
                       f"them in {path}: their hit@k and recall@k count those (BM25's zero-score hits rank nothing)",
                       err=True)
            continue
        knob = search_knob(retriever.index.faiss_index)
        at = f" at {knob[0]} {retriever.index.manifest.get('search_params', {}).get(knob[0])}" if knob else ""
        typer.echo(f"note: {short} of {scored} questions found fewer than {max(k)} passages in {path}, and their "
                   f"hit@k and recall@k count those: it is a compressed index, whose search{at} reaches no more; "
                   "`lewisrag index tune` chooses settings for a recall target", err=True)
    if as_json:
        _ui.print_json(results)
        return
    cols = [f"{score}@{c}" for c in sorted(k) for score in ("hit", "recall")]
    rows = [[name, r["kind"], r["n"], *[r[c] for c in cols]] for name, r in results.items()]
    _ui.out.print(_ui.table(f"retrieval on {data}", ["index", "kind", "questions", *cols], rows))
    skipped = next(iter(results.values()))["skipped"]
    if skipped:  # the same questions for every index
        _ui.out.print(f"{skipped} of {len(examples)} questions have no {gold_field}: not scored")
