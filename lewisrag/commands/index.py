"""`lewisrag index build`, `search`, `tune`, `verify`, `cut` and `targets`."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from lewisrag.commands import _ui


def build(
    ctx: typer.Context,
    passages: Path = typer.Option(..., "--passages", help="Passages: .jsonl, .json, .parquet, a folder of .parquet "
                                  "shards (the hub's wiki_dpr files), DPR's psgs_w100 .tsv, a datasets save_to_disk folder or "
                                  "hf:NAME[:CONFIG]:SPLIT (wiki_dpr's schema: id, text, title, embeddings?)."),
    encoder: str = typer.Option(..., "--encoder", help="'bm25', a DPR checkpoint directory (`lewisrag train dpr`), a "
                                "transformers DPRContextEncoder folder (e.g. facebook/dpr-ctx_encoder-single-nq-base) or a RAG "
                                "model trained with --train-context-encoder (RUN/best): its "
                                "context encoder embeds the passages, and the manifest records its weights' fingerprint."),
    out: Path = typer.Option(..., "--out", help="Index directory to write (built in OUT.partial, then renamed)."),
    faiss: str = typer.Option("Flat", "--faiss", help="FAISS index_factory string for dense indexes, e.g. Flat, HNSW32, IVF256,PQ16, "
                              "OPQ64_256,IVF18000,PQ64 (21M; docs/scale.md), or OPQ128_256,IVF18000,PQ128x4fs (faster, "
                              "each process holds its own copy: for one search a node); IVF{n}_HNSW32 assigns to many lists "
                              "through a graph. From 10,000 IVF lists on, the centroids "
                              "train by two-level spherical k-means."),
    shard_size: int = typer.Option(4096, "--shard-size", help="Passages per encoded shard; a killed build rerun with the same plan (this too) resumes "
                                    "from the last finished shard, and a changed plan encodes every passage again, with a warning."),
    batch_size: int = typer.Option(64, "--batch-size", help="Passages per encoder forward pass."),
    device: str = typer.Option("auto", "--device", help="Where the context encoder runs: auto (a GPU when one is visible), "
                               "cpu or cuda[:N]."),
    mixed_precision: str = typer.Option("no", "--mixed-precision", help="no, bf16 or fp16 (fp16 on a GPU only): "
                                        "autocast the encoder; several times faster on a GPU, vectors shift in the third digit."),
    vector_dtype: str = typer.Option("float32", "--vector-dtype", help="float32 or float16: how the passage vectors "
                                     "are stored beside the FAISS index (float16 halves their disk and page cache)."),
    reuse_embeddings: bool = typer.Option(False, "--reuse-embeddings", help="Use the passages' embeddings column (wiki_dpr's) "
                                          "instead of encoding, once 8 of them match fresh encodings by --encoder (on --device, in "
                                          "--mixed-precision: the only encoding those two then steer). A killed build rerun keeps a "
                                          "finished copy of them; an unfinished one starts over."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even if it holds files lewisrag did not write "
                                   "there as an index (replaced only when the new index is complete); never a folder lewisrag did not "
                                   "make."),
    as_json: bool = typer.Option(False, "--json", help="Print the index manifest as one JSON object instead of a table."),
) -> None:
    """Build a BM25 or dense (DPR + FAISS, inner product) index over passages."""
    from lewisrag.data.outputs import check_out_dir, made_by
    from lewisrag.data.passages import open_passages
    from lewisrag.index.store import KIND, MANIFEST

    if encoder == "bm25":  # not ignored in silence: the user meant a dense index
        _ui.refuse_given(ctx, ("faiss", "shard_size", "batch_size", "device", "mixed_precision", "vector_dtype",
                               "reuse_embeddings"),
                         "applies to dense indexes: give a DPR checkpoint or DPRContextEncoder folder as --encoder")
    if reuse_embeddings:
        _ui.refuse_given(ctx, ("batch_size",), "sizes the encoder's batches; --reuse-embeddings copies the passages' vectors")
    check_out_dir(out, KIND, overwrite=overwrite, replaces=True,  # before the passages are read
                  inputs={"--passages": passages, "--encoder": None if encoder == "bm25" else encoder}, alone=True)
    if encoder != "bm25":
        from lewisrag.index.dense import DenseBuildConfig, build_dense_index, check_build_config
        from lewisrag.index.encoders import context_encoder_layout

        context_encoder_layout(encoder)  # a wrong folder is one line, before any note or reading
        cfg = DenseBuildConfig(factory=faiss, shard_size=shard_size, batch_size=batch_size, reuse_embeddings=reuse_embeddings,
                               device=device, mixed_precision=mixed_precision, vector_dtype=vector_dtype)
        check_build_config(cfg)  # and its flags, before torch loads (a GPU named: to see it)
    if made_by(out) == KIND and (Path(out) / MANIFEST).is_file() and not overwrite:  # a slip costs the build's time
        typer.echo(f"note: {out} holds an index; the new one replaces it once it is complete", err=True)
    with _ui.status(f"reading {passages}"):
        docs = open_passages(passages)
    if encoder != "bm25" and not reuse_embeddings and getattr(docs, "has_embeddings", False):
        typer.echo("note: the passages carry an embeddings column; --reuse-embeddings would use it instead of encoding", err=True)
    if encoder == "bm25":
        from lewisrag.index.bm25 import build_bm25_index

        with _ui.status("indexing with BM25"):
            manifest = build_bm25_index(docs, out, overwrite=overwrite)
    else:
        labels = {"encode": "encoding passages", "copy": "copying stored embeddings", "faiss": "building FAISS"}
        with _ui.progress() as p:
            manifest = build_dense_index(docs, encoder, out, cfg, _ui.Bars(p, labels), overwrite=overwrite)
    if as_json:
        _ui.print_json({"out": str(out), **manifest})
        return
    rows = [[k, json.dumps(v) if isinstance(v, dict) else v] for k, v in manifest.items()]
    _ui.out.print(_ui.table(f"index written to {out}", ["field", "value"], rows))


def search(
    ctx: typer.Context,
    index: Path = typer.Option(..., "--index", help="Index directory."),
    query: str = typer.Option(..., "--query", "-q", help="The question to search for."),
    n_docs: int = typer.Option(5, "--n-docs",
                               help="Passages retrieved (K): the number of hits (unless given, at most the index's passages)."),
    old_k: int = typer.Option(None, "-k", hidden=True, help="Deprecated: --n-docs."),
    encoder: str = typer.Option(None, "--encoder", help="DPR checkpoint, transformers DPRQuestionEncoder folder or trained "
                                "RAG model (RUN/best: its question encoder) for the question (dense indexes; default: the "
                                "checkpoint that built the index)."),
    context_encoder: str = typer.Option(None, "--context-encoder", help="With a DPRQuestionEncoder folder as --encoder: the "
                                        "DPRContextEncoder folder of its pair; it must be the one that built the index."),
    swap: bool = typer.Option(False, "--swap", help="Allow a question encoder trained against another context encoder "
                              "(or an unpaired DPRQuestionEncoder folder)."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON list of hits (id, title, text, score)."),
) -> None:
    """Search an index and print the top --n-docs passages."""
    from lewisrag.data.io import InputError
    from lewisrag.index import open_retriever
    from lewisrag.index.store import check_depth, read_manifest
    from lewisrag.index.tuning import search_knob

    k = _ui.renamed(ctx, "n_docs", "old_k", "--n-docs", "-k")
    if k < 1:
        raise InputError("--n-docs", f"must be at least 1, got {k}")
    bm25 = read_manifest(index)["kind"] == "bm25"
    if bm25:  # never ignored in silence
        _ui.refuse_given(ctx, ("encoder", "context_encoder", "swap"), f"applies to dense indexes; {index} is BM25")
    retriever = open_retriever(index, encoder, swap=swap, context_encoder=context_encoder)
    n = len(retriever.index.passages)
    given = ctx.get_parameter_source("n_docs").name in ("COMMANDLINE", "ENVIRONMENT") or ctx.params.get("old_k") is not None
    if not given and k > n:  # the default 5 on a smaller index: all of it, as `index targets` lowers its --n-docs
        typer.echo(f"note: {index} holds {n} passages: all {n} are shown, not {k}", err=True)
        k = n
    check_depth(k, n)
    hits = retriever.search([query], k)[0]
    if len(hits) < k:  # FAISS's "no result" rows, left out of the hits: said, not shown as a shorter list in silence
        knob = search_knob(retriever.index.faiss_index)
        how = f" at {knob[0]} {retriever.index.manifest.get('search_params', {}).get(knob[0])}" if knob else ""
        typer.echo(f"note: the search found {len(hits)} of the {k} passages asked for: {index} is a compressed index, "
                   f"whose search{how} reaches no more; `lewisrag index tune` chooses settings for a recall target", err=True)
    if note := _no_word_note(retriever, query, hits):
        typer.echo(f"note: {note}", err=True)
    if as_json:
        _ui.print_json([{key: v for key, v in h.to_dict().items() if key != "row"} for h in hits])
        return
    rows = [[i + 1, f"{h.score:.3f}", h.id, h.title, h.text[:100] + ("…" if len(h.text) > 100 else "")] for i, h in enumerate(hits)]
    _ui.out.print(_ui.table(query, ["#", "score", "id", "title", "text"], rows))


def _no_word_note(retriever, query: str, hits) -> str | None:
    """What to tell the user when nothing of the query reached the search, so that the hits rank nothing
    (as `ask` says it of a question encoder's unknown words), or, of BM25, when only some hits hold a
    word of it: BM25 fills its top k with passages that hold none, scored 0 in no order that means
    anything, which `eval retrieval`, `index targets` and fusion count as not retrieved (`index.search`)."""
    from lewisrag.index.search import BM25Retriever

    if isinstance(retriever, BM25Retriever):
        # BM25 scores are never negative: a score of 0 means the passage holds no word of the query
        zero = sum(h.score == 0 for h in hits)
        if hits and zero == len(hits):
            return ("no passage holds a word of the query (stop words aside): the hits all score 0, so they "
                    "are not ranked and their order means nothing")
        if zero:
            return (f"only {len(hits) - zero} of the {len(hits)} hits hold a word of the query (stop words aside): "
                    f"the last {zero} score 0, so they are not ranked, their order means nothing, and `eval retrieval` "
                    "counts them as not retrieved")
        return None
    from lewisrag.experiments.ask import knows_no_word

    if knows_no_word(retriever.checkpoint.tokenizer, query):
        return (f"the question encoder's vocabulary knows no word of the query (each is its unknown token, "
                f"{retriever.checkpoint.tokenizer.unk_token}): the hits are those of a query without words, the "
                "same for every such query (a query in another language than the encoder's?)")
    return None


def tune(
    index: Path = typer.Option(..., "--index", help="A dense index directory (IVF or HNSW; a Flat index has nothing to "
                               "tune and is refused; a Refine(...) index's k_factor is kept and recorded with the setting)."),
    questions: Path = typer.Option(..., "--questions", help="The questions the searches are measured on: a QA file, whose "
                                   "answers and gold passage ids are not needed (recall is against exact search). "
                                   "--held-out of them are set apart, the rest tune."),
    qa_fields: str = typer.Option(None, "--qa-fields", help="The file's own field names, e.g. question=query."),
    target_recall: float = typer.Option(0.95, "--target-recall", help="Recall@K against exact search to reach, in (0, 1]."),
    n_docs: int = typer.Option(5, "--n-docs", help="K: the depth recall is measured at (the K training and answering read)."),
    rerank_depth: int = typer.Option(None, "--rerank-depth", help="Candidates per search re-ranked exactly from the stored "
                                     "vectors (recorded: later searches re-rank too); none by default. Compressed "
                                     "indexes only: a Flat index's search is exact."),
    held_out: float = typer.Option(0.2, "--held-out", help="The share of the questions set apart (drawn with --seed): "
                                   "the setting is chosen on the others, and the recall recorded beside theirs is "
                                   "measured on these, which the choice never saw (the tuning questions' recall crosses "
                                   "the target by construction). Each side needs 5 questions at least; 0 tunes on every "
                                   "question and records their recall alone, biased upward."),
    seed: int = typer.Option(0, "--seed", min=0, max=2**32 - 1, help="Which questions --held-out sets apart."),
    max_questions: int = typer.Option(1000, "--max-questions", help="Use at most this many questions (the first ones), "
                                      "held-out ones included."),
    encoder: str = typer.Option(None, "--encoder", help="DPR checkpoint, DPRQuestionEncoder folder or trained RAG model (default: "
                                "the index's)."),
    context_encoder: str = typer.Option(None, "--context-encoder", help="With a DPRQuestionEncoder folder: its DPRContextEncoder pair."),
    swap: bool = typer.Option(False, "--swap", help="Allow a question encoder trained against another context encoder."),
    as_json: bool = typer.Option(False, "--json", help="Print what was recorded as one JSON object."),
) -> None:
    """Choose a compressed index's nprobe/efSearch for a recall target on the tuning questions and record it
    in the manifest (every later search uses it), with the recall it reached on them and the recall it gets
    on the --held-out questions, which the choice never saw; say so when no setting reaches the target on
    the tuning questions, or when the held-out ones fall below it."""
    from lewisrag.data.io import InputError
    from lewisrag.data.records import read_questions
    from lewisrag.index.search import tune_dense
    from lewisrag.index.store import read_manifest

    if not 0 < target_recall <= 1:
        raise InputError("--target-recall", f"must be in (0, 1], got {target_recall}")
    for flag, value in (("--n-docs", n_docs), ("--max-questions", max_questions)):
        if value < 1:  # the one flag at fault, as every other command names it
            raise InputError(flag, f"must be at least 1, got {value}")
    if not 0 <= held_out < 1:  # before the questions are read (tune_dense checks the split's sizes)
        raise InputError("--held-out", f"must be at least 0 and below 1, got {held_out}")
    manifest = read_manifest(index)
    qs = [ex.question for ex in read_questions(questions, _ui.qa_fields(qa_fields))][:max_questions]
    with _ui.status(f"tuning {index} on {len(qs)} questions"):
        record = tune_dense(index, qs, encoder, context_encoder, swap, n_docs, target_recall, rerank_depth, held_out, seed)
    if record["knob"] is None:
        typer.echo(f"note: {index} ('{manifest.get('faiss_factory')}') has no nprobe or efSearch to tune: its recall and "
                   "speed are recorded as measured", err=True)
    knob = record["knob"]
    at = f"at {knob} {record['search_params'][knob]}" if knob else "as it searches"
    tuned = f"on the {record['tuning_questions']} tuning questions"
    held = (f"; {record['held_out_recall_at_k']} on the {record['held_out_questions']} held-out ones"
            if record["held_out_questions"] else "")
    if not record["reached"]:
        if knob is None:
            where = "as it searches (no nprobe or efSearch to tune)"
        else:  # the best of the settings tried, which need not be the largest (`tuning.best_tried`)
            where = (f"{at}, recorded as the setting tried with the best recall "
                     f"(ties: the smallest) of the {len(record['trials'])} in the record's trials")
        typer.echo(f"warning: recall@{n_docs} {record['tuned_recall_at_k']} {where}, below the target {target_recall} "
                   f"{tuned}{held}: the index's codes, not its search, limit it (use finer codes, --rerank-depth or Flat)",
                   err=True)
    elif record["held_out_found_k"] is False:  # recall aside: a search that comes back short is refused
        typer.echo(f"warning: some held-out question finds fewer than {n_docs} passages {at}; training and answering "
                   f"refuse such a search (recall@{n_docs} {record['held_out_recall_at_k']} on the "
                   f"{record['held_out_questions']} held-out questions, {record['tuned_recall_at_k']} {tuned}, which "
                   "all found them): tune on more questions, or ask a higher --target-recall", err=True)
    elif record["held_out_reached"] is False:  # met on the questions it was chosen on, not on the others
        typer.echo(f"warning: recall@{n_docs} {record['held_out_recall_at_k']} on the {record['held_out_questions']} "
                   f"held-out questions {at}, below the target {target_recall} that {record['tuned_recall_at_k']} "
                   f"{tuned} reached: unseen questions may fall short too (tune on more questions, or ask a higher "
                   "--target-recall)", err=True)
    if as_json:
        _ui.print_json(record)
        return
    rows = [[key, json.dumps(v) if isinstance(v, dict) else v] for key, v in record.items()]
    _ui.out.print(_ui.table(f"search parameters recorded in {index}", ["field", "value"], rows))
    _ui.out.print(_tune_summary(record))


def _tune_summary(record: dict) -> str:
    """The printed line under `index tune`'s table: the recall on each side of the split, and whether
    each met the target (or, where some held-out question found fewer than K passages, that).

    >>> _tune_summary({"k": 5, "target_recall": 0.9, "reached": True, "tuned_recall_at_k": 0.95, "tuning_questions": 80,
    ...                "held_out_recall_at_k": 0.88, "held_out_reached": False, "held_out_questions": 20, "seed": 0})
    'recall@5: 0.95 on the 80 tuning questions (target 0.9 reached); 0.88 on the 20 held-out ones (seed 0), below the target'
    >>> _tune_summary({"k": 5, "target_recall": 0.9, "reached": True, "tuned_recall_at_k": 0.95, "tuning_questions": 100,
    ...                "held_out_recall_at_k": None, "held_out_reached": None, "held_out_questions": 0, "seed": None})
    'recall@5: 0.95 on the 100 tuning questions (target 0.9 reached); none held out (--held-out 0): biased upward'
    >>> _tune_summary({"k": 5, "target_recall": 0.5, "reached": True, "tuned_recall_at_k": 0.6, "tuning_questions": 80,
    ...                "held_out_recall_at_k": 0.57, "held_out_reached": False, "held_out_found_k": False,
    ...                "held_out_questions": 20, "seed": 0, "knob": "nprobe", "search_params": {"nprobe": 2}})
    'recall@5: 0.6 on the 80 tuning questions (target 0.5 reached); 0.57 on the 20 held-out ones (seed 0), but some held-out question finds fewer than 5 passages at nprobe 2; training and answering refuse such a search'
    """
    tuned = (f"recall@{record['k']}: {record['tuned_recall_at_k']} on the {record['tuning_questions']} tuning questions "
             f"(target {record['target_recall']} {'reached' if record['reached'] else 'not reached'})")
    if not record["held_out_questions"]:
        return f"{tuned}; none held out (--held-out 0): biased upward"
    if record.get("held_out_found_k") is False:  # not the recall: a short search is refused whatever it is
        knob = record.get("knob")
        at = f" at {knob} {record['search_params'][knob]}" if knob and "search_params" in record else ""
        met = (f"but some held-out question finds fewer than {record['k']} passages{at}; training and answering "
               "refuse such a search")
    else:
        met = "meets the target" if record["held_out_reached"] else "below the target"
    return (f"{tuned}; {record['held_out_recall_at_k']} on the {record['held_out_questions']} held-out ones "
            f"(seed {record['seed']}), {met}")


def verify(
    index: Path = typer.Option(..., "--index", help="Index directory (dense or BM25)."),
    encoder: str = typer.Option(None, "--encoder", help="Dense indexes: the context encoder that built the index (DPR "
                                "checkpoint, DPRContextEncoder folder or RAG_RUN/best), where it is not at the path its "
                                "manifest records; it encodes 8 passages afresh to match their stored vectors."),
    as_json: bool = typer.Option(False, "--json", help="Print what was checked as one JSON object."),
) -> None:
    """Read a whole index and compare it with its manifest: every passage against the content hash (and
    block hashes), the FAISS index against the manifest's factory string and the stored vectors' type
    against its vector_dtype, every stored vector finite, a Flat or HNSW FAISS index's vectors equal to
    the stored ones (an IVF index's row numbers: each in one list; PQ, SQ and IVF-Flat codes: each as
    close to its stored vector as a fresh encoding; a Refine(...) index's base and refine indexes
    each), and 8 passages encoded afresh by the index's encoder against their stored vectors (a BM25
    index: its document count, every score entry's document one of them, and 8 passages each
    indexed under exactly its own words). Minutes at Wikipedia scale, where every load samples 64
    rows; exit 2 names the first damage."""
    from lewisrag.index.verify import verify_index

    labels = {"passages": "hashing passages", "vectors": "scanning stored vectors"}
    with _ui.progress() as p:
        report = verify_index(index, _ui.Bars(p, labels), encoder)
    if as_json:
        _ui.print_json(report)
        return
    rows = [[c["check"], c["result"]] for c in report["checks"]]
    _ui.out.print(_ui.table(f"{index}: no damage found", ["check", "result"], rows))


def cut(
    passages: str = typer.Option(..., "--passages", help="Passages with their stored vectors (wiki_dpr's embeddings column): "
                                 "a folder of .parquet shards (the hub's data/psgs_w100/nq), .parquet, a datasets "
                                 "save_to_disk folder or hf:NAME[:CONFIG]:SPLIT."),
    encoder: str = typer.Option(..., "--encoder", help="DPR checkpoint (`lewisrag train dpr`), transformers "
                                "DPRQuestionEncoder folder (e.g. facebook/dpr-question_encoder-single-nq-base) or "
                                "trained RAG model (RUN/best) whose question encoder searches the stored vectors."),
    context_encoder: str = typer.Option(None, "--context-encoder", help="With a DPRQuestionEncoder folder or a RAG "
                                        "model (needed with both): the DPRContextEncoder folder or DPR checkpoint that "
                                        "made the stored vectors (8 of them are encoded afresh and must match, as index "
                                        "build --reuse-embeddings checks); for a RAG model, the one that built the index "
                                        "it trained against (its fingerprint is checked)."),
    questions: list[Path] = typer.Option(..., "--questions", metavar="FILE", help="QA file whose questions choose the passages kept; "
                                         "repeat it for each (train, dev, test)."),
    qa_fields: str = typer.Option(None, "--qa-fields", help=_ui.QA_FIELDS_HELP),
    max_questions: int = typer.Option(None, "--max-questions", min=1, help="The first N questions of each --questions "
                                      "file (as `reproduce --max-train N` trains on the first N); default: all."),
    top: int = typer.Option(100, "--top", help="Passages kept per question: its best by inner product over every "
                            "stored vector, so that searching the cut with this encoder finds what searching the "
                            "whole corpus does, to this depth."),
    max_passages: int = typer.Option(..., "--max-passages", help="Passages in the cut: the questions' gold passages and "
                                     "--hard-negatives (kept whole, or the cut is refused before the search), then the "
                                     "retrieved ones (the deepest ranks dropped first if they are more), then a random "
                                     "sample of the rest."),
    no_gold: bool = typer.Option(False, "--no-gold", help="Do not keep the questions' gold passages (gold_passage_ids; "
                                 "DPR's positive_ctxs[].passage_id), which are kept by default, first, so that `train dpr "
                                 "--passages CUT --train FILE` finds each question's positive; a gold id the corpus lacks "
                                 "is refused unless this is given."),
    hard_negatives: int = typer.Option(0, "--hard-negatives", metavar="N", min=0, help="Also keep each question's first N "
                                       "given hard negatives that are not its gold (DPR's hard_negative_ctxs[].passage_id, "
                                       "lewisrag's hard_negative_ids; those the corpus lacks are counted and skipped), "
                                       "after the gold passages and before the retrieved ones. Default 0: DPR gives up to "
                                       "~30 a question, which at NQ's 58,880 training questions is of the order of a "
                                       "million passages; `train dpr --hard-negatives-from given` draws one of those kept."),
    seed: int = typer.Option(0, "--seed", min=0, max=2**32 - 1, help="Which random passages fill the cut."),
    device: str = typer.Option("auto", "--device", help="Where questions are encoded and the search's products run: "
                               "auto (a GPU when one is visible), cpu or cuda[:N]."),
    out: Path = typer.Option(..., "--out", help="Folder to write: passages.parquet (what --passages reads) and "
                             "cut.json (written beside it, then renamed in)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even if it holds another kind of lewisrag "
                                   "output (replaced once the cut is complete); never a folder lewisrag did not make."),
    as_json: bool = typer.Option(False, "--json", help="Print what cut.json records as one JSON object."),
) -> None:
    """Cut a corpus with stored vectors to --max-passages, keeping every question's gold and --top retrieved passages.

    Every question's gold passages are kept (unless --no-gold), then its first --hard-negatives
    given hard negatives, then the --top passages a DPR question encoder retrieves from the whole
    corpus by its stored vectors (deepest ranks dropped first when they do not fit), then random
    ones up to --max-passages, in the corpus's order, with their vectors. Searching the cut with
    this encoder finds for these questions what searching the whole corpus does; cut.json records
    the counts for each reason and the whole corpus's answer recall@k. The search is exact: minutes
    on a GPU at 21M passages, hours on a few CPU cores."""
    from lewisrag.data.outputs import check_out_dir, output_dir
    from lewisrag.data.passages import open_passages
    from lewisrag.data.records import read_qa
    from lewisrag.data.threads import resolve_device
    from lewisrag.index.cut import (KIND, CutConfig, check_config, check_named_ids, check_passages, check_questions_files,
                                    cut_passages, kept_first, passage_rows, wanted_ids, write_manifest)
    from lewisrag.index.dense import check_stored_embeddings
    from lewisrag.index.encoders import load_encoder_pair

    fields = _ui.qa_fields(qa_fields)
    cfg = CutConfig(top=top, max_passages=max_passages, seed=seed, device=resolve_device(device), gold=not no_gold,
                    hard_negatives=hard_negatives)
    check_config(cfg)  # before any file is read
    check_questions_files(questions)
    check_out_dir(out, KIND, overwrite=overwrite, replaces=True,  # before anything is read
                  inputs={"--passages": passages, "--encoder": encoder, "--context-encoder": context_encoder,
                          **{"--questions" + (f" #{i + 1}" if i else ""): q for i, q in enumerate(questions)}}, alone=True)
    ckpt, ctx = load_encoder_pair(encoder, context_encoder)
    files = [(q, read_qa(q, fields)[:max_questions]) for q in questions]  # each file checked whole first
    examples = [ex for _, part in files for ex in part]
    check_config(cfg, examples)
    with _ui.status(f"reading {passages}"):
        docs = open_passages(passages)
    with _ui.status("checking 8 stored vectors against fresh encodings (the rest as the search reads them)"):
        check_passages(docs, ckpt, cfg, source=passages)
        spot_check = check_stored_embeddings(docs, ctx, int(ctx.meta.get("max_length", 256)))
    with _ui.status("finding the questions' gold passages and hard negatives in the corpus"):  # before the search
        rows_of = passage_rows(docs, wanted_ids(examples, cfg))
        check_named_ids(files, rows_of, cfg, f"--passages {passages}", fields)
        kept_first(examples, rows_of, cfg)  # a cut too small to hold them is refused here
    labels = {"questions": "encoding questions", "search": "searching the stored vectors",
              "answers": "reading retrieved passages", "write": "writing the cut"}
    with output_dir(out, KIND, overwrite=overwrite) as tmp, _ui.progress() as p:
        record = cut_passages(docs, examples, ckpt, tmp, cfg, _ui.Bars(p, labels), rows_of)
        record = {**record, "questions_files": [str(q) for q in questions], "max_questions": max_questions, "encoder": str(encoder),
                  "context_encoder": str(context_encoder) if context_encoder else None, "spot_check": spot_check}
        write_manifest(tmp, record)
    if as_json:
        _ui.print_json({"out": str(out), **record})
        return
    recall = ", ".join(f"@{k} {v:.3f}" for k, v in record["answer_recall"].items() if v is not None) or "no answers"
    columns = ["source", "kept", "gold", "retrieved", "random", "every top-k kept to k", "answer recall (whole corpus)"]
    row = [record["source_passages"], record["passages"], record["gold"], record["retrieved"], record["random"],
           record["full_depth"], recall]
    if record["hard_negatives_per_question"]:
        columns[3:3] = ["hard negatives", "given ones not in the corpus"]
        row[3:3] = [record["hard_negatives"], record["hard_negatives_missing"]]
    _ui.out.print(_ui.table(f"cut written to {out}", columns, [row]))
    if not record["keep_gold"] and record["gold_passages"]:
        _ui.out.print(f"--no-gold: {record['gold_in_cut']} of the {record['gold_passages']} gold passages the questions "
                      "name are in the cut (retrieved or drawn)")


def targets(
    ctx: typer.Context,
    index: Path = typer.Option(..., "--index", help="Index directory (BM25 or dense) whose passages the questions' "
                               "patterns are matched in."),
    questions: Path = typer.Option(..., "--questions", help="Regex-answered training questions: DPR's "
                                   "curatedtrec-train.qa.csv or biencoder-curatedtrec-train.json, or a lewisrag file with "
                                   "\"answer_match\": \"regex\"."),
    qa_fields: str = typer.Option(None, "--qa-fields", help=_ui.QA_FIELDS_HELP),
    n_docs: int = typer.Option(1000, "--n-docs", help="Passages retrieved per question whose matches are counted (the "
                               "paper's 1,000; at most the index's passages)."),
    encoder: str = typer.Option(None, "--encoder", help="Dense indexes: DPR checkpoint, DPRQuestionEncoder folder or "
                                "trained RAG model (RUN/best) for the questions (default: the index's)."),
    context_encoder: str = typer.Option(None, "--context-encoder", help="With a DPRQuestionEncoder folder: its DPRContextEncoder pair."),
    swap: bool = typer.Option(False, "--swap", help="Allow a question encoder trained against another context encoder."),
    out: Path = typer.Option(..., "--out", help="QA file to write (.jsonl, lewisrag's format; written beside, then renamed): "
                             "each question with its target as its one answer and its target_source."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out if it exists."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object instead of a table."),
) -> None:
    """Turn regex-answered training questions (CuratedTrec's) into answer strings, as the RAG paper did.

    Each question's target is the most frequent match of its patterns in its top --n-docs retrieved
    passages (counted after normalize_answer, written in its most frequent spelling; ties go to the
    one found first by rank), else a string spelled out of its patterns (literals, the first
    branch, the fewest repeats; of its patterns' spellings, each one its own pattern accepts, one
    that guesses no character, else the fewest guesses, then the shortest); a question none of whose patterns can be spelled (a backreference, a lookaround) is
    left out and counted. --out trains with `train rag --train` on the same index, so a gold passage id
    the index lacks is refused here as there."""
    from lewisrag.data.io import InputError, write_jsonl
    from lewisrag.data.outputs import check_out_file
    from lewisrag.data.records import check_gold_ids, read_qa
    from lewisrag.index import open_retriever
    from lewisrag.index.store import read_manifest
    from lewisrag.index.targets import make_targets
    from lewisrag.index.tuning import search_knob
    from lewisrag.scoring.qa import is_regex_answered

    if out.suffix.lower() != ".jsonl":  # the file is JSON Lines whatever its name says: .json or .parquet read back as neither
        raise InputError(out, "the output must be a .jsonl file", field="--out")
    if n_docs < 1:
        raise InputError("--n-docs", f"must be at least 1, got {n_docs}")
    bm25 = read_manifest(index)["kind"] == "bm25"
    if bm25:  # never ignored in silence
        _ui.refuse_given(ctx, ("encoder", "context_encoder", "swap"), f"applies to dense indexes; {index} is BM25")
    check_out_file(out, overwrite=overwrite, inputs=[("--questions", questions), ("--index", index)])
    examples = read_qa(questions, _ui.qa_fields(qa_fields))
    if not any(is_regex_answered(ex) and ex.answers for ex in examples):
        # a renamed CuratedTrec file reads as plain answers: the advice must not be to train on its patterns
        raise InputError(questions, "no question is answered by regular expressions: answers are read as CuratedTrec's "
                         "patterns from a file named curatedtrec-* or biencoder-curatedtrec-* (DPR's names) or a lewisrag "
                         "record with \"answer_match\": \"regex\"; any other file's answers are strings already, to "
                         "train on as they are", field="answers")
    retriever = open_retriever(index, encoder, swap=swap, context_encoder=context_encoder)
    # the output trains `train rag` on this index, which refuses a gold id it lacks: refused here, before the search
    check_gold_ids(examples, retriever.index.passages, questions, f"the index {index}", _ui.qa_fields(qa_fields))
    k = min(n_docs, len(retriever.index.passages))
    if k < n_docs:
        typer.echo(f"note: {index} holds {k} passages: each question's {k} are searched for matches, not {n_docs}", err=True)
    with _ui.progress() as p:
        records, summary = make_targets(examples, retriever.search, k, _ui.Bars(p, {"search": "searching and matching"}),
                                        scored_only=bm25)
    if not records:
        raise InputError(questions, "no question got a target: no passage matches their patterns and none can be spelled")
    write_jsonl(out, records)
    short = summary["fewer_hits"]
    if short and bm25:
        typer.echo(f"note: {short} questions have fewer than {k} passages holding a word of them: "
                   "their matches are counted in those (BM25's zero-score hits rank nothing)", err=True)
    elif short:  # said, as `index search` and `eval retrieval` say it
        knob = search_knob(retriever.index.faiss_index)
        at = f" at {knob[0]} {retriever.index.manifest.get('search_params', {}).get(knob[0])}" if knob else ""
        typer.echo(f"note: {short} questions found fewer than {k} passages, and their matches are counted in those: "
                   f"{index} is a compressed index, whose search{at} reaches no more; `lewisrag index tune` chooses "
                   "settings for a recall target", err=True)
    if summary["left_out"]:
        first = summary["first_left_out"]
        typer.echo(f"warning: {summary['left_out']} questions left out of {out}: no retrieved passage matches their patterns "
                   f"and none of their patterns can be spelled out (a backreference or lookaround); the first: {first['id']} "
                   f"{first['pattern']!r}", err=True)
    if as_json:
        _ui.print_json({"out": str(out), **summary})
        return
    share = "-" if summary["matched_share"] is None else f"{summary['matched_share']:.1%}"
    rows = [[summary["questions"], summary["retrieved"], summary["pattern"], summary["left_out"], summary["given"], share]]
    searched = f"top {k} passages" + (f"; {short} questions found fewer" if short else "")
    _ui.out.print(_ui.table(f"targets written to {out} ({searched})", ["questions", "from retrieved passages",
                                                                              "from the pattern", "left out", "given as text",
                                                                              "matched share"], rows))
