"""`lewisrag train dpr`, `lewisrag train rag` and `lewisrag train stitched` (the prompt-stitching system's generator)."""

from __future__ import annotations

from pathlib import Path

import typer

from lewisrag.commands import _ui


def dpr(
    ctx: typer.Context,
    train: Path = typer.Option(None, "--train", help="QA examples with gold_passage_ids. Required unless --steps 0 converts "
                               "a starting pair."),
    passages: Path = typer.Option(None, "--passages", help="The passages the gold ids refer to (a file, DPR's .tsv "
                                  "included, a folder of .parquet shards, a datasets save_to_disk folder or hf:...). Required with --train."),
    qa_fields: str = typer.Option(None, "--qa-fields", help=_ui.QA_FIELDS_HELP),
    out: Path = typer.Option(..., "--out", help="Checkpoint directory (question_encoder/, ctx_encoder/, tokenizer/)."),
    init: str = typer.Option(None, "--init", help="Local BERT-like checkpoint, or one transformers DPR encoder folder, to start "
                             "both encoders from, or a `train dpr` checkpoint to train on (default: a small model "
                             "from scratch)."),
    init_question: str = typer.Option(None, "--init-question", help="Transformers DPRQuestionEncoder folder (e.g. "
                                      "facebook/dpr-question_encoder-single-nq-base) or BERT-like checkpoint starting the "
                                      "question encoder; with --init-context. The pair trains as two networks; a weight "
                                      "missing or left unused (BERT's pooler excepted) is an error naming it."),
    init_context: str = typer.Option(None, "--init-context", help="Transformers DPRContextEncoder folder (e.g. "
                                     "facebook/dpr-ctx_encoder-single-nq-base) or BERT-like checkpoint starting the context "
                                     "encoder; with --init-question, whose tokenizer both sides use."),
    steps: int = typer.Option(600, "--steps", help="Optimizer steps (0: save the starting encoders as a checkpoint, "
                              "e.g. a transformers DPR pair in lewisrag's layout, same weights and token limits). "
                              "Token limits: a DPR start keeps its own (a DPR folder's positions or tokenizer "
                              "model_max_length if smaller; a checkpoint's); a scratch or BERT-like start reads "
                              "128 passage and 32 question tokens."),
    batch_size: int = typer.Option(32, "--batch-size", help="Questions per step (each brings its gold passage, one hard negative and, later, a self-mined one)."),
    lr: float = typer.Option(1e-3, "--lr", help="Peak learning rate."),
    hidden_size: int = typer.Option(128, "--hidden-size", help="Width of a model trained from scratch."),
    layers: int = typer.Option(2, "--layers", help="Depth of a model trained from scratch."),
    vocab_size: int = typer.Option(2000, "--vocab-size", help="WordPiece vocabulary of a model trained from scratch."),
    dropout: float = typer.Option(0.1, "--dropout", help="Hidden dropout of a model trained from scratch (BERT's 0.1)."),
    attention_dropout: float = typer.Option(0.1, "--attention-dropout", help="Dropout of attention probabilities of a "
                                            "model trained from scratch (BERT's 0.1); 0 lets the CPU use its fused "
                                            "attention kernel, about 30% less time a step at the small preset's size."),
    hard_negatives_from: str = typer.Option("auto", "--hard-negatives-from", help="Where each question's hard negative "
                                            "comes from: given (--train's own: DPR's hard_negative_ctxs, lewisrag's "
                                            "hard_negative_ids; one drawn at random each step, as DPR does; those --passages "
                                            "lacks are dropped with a warning, and BM25 mines one only for a question left "
                                            "without any; else no BM25 index is built), bm25 (the top BM25 hit over --passages "
                                            "not gold and holding no answer, nor a copy of the gold passage) or auto "
                                            "(given when every training question has one and --passages holds them all, else bm25)."),
    no_hard_negatives: bool = typer.Option(False, "--no-hard-negatives", help="In-batch negatives only: neither given or "
                                           "BM25 hard negatives nor self-mined ones."),
    self_negatives_at: float = typer.Option(0.5, "--self-negatives-at", help="From this share of the steps on, add each question's best-ranked passage under the model itself that is not gold and holds no answer as a second hard negative (0 = never)."),
    separate: bool = typer.Option(False, "--separate-encoders", help="Train question and passage encoders apart from the start (default: one shared network while training, saved as two)."),
    seed: int = typer.Option(0, "--seed", min=0, max=2**32 - 1, help="Random seed."),
    device: str = typer.Option("auto", "--device", help="Where it trains and mines its negatives: auto (a GPU when one is "
                               "visible), cpu or cuda[:N]. The checkpoint is the same layout wherever it trained."),
    mixed_precision: str = typer.Option("no", "--mixed-precision", help="no, bf16 (CPU or GPU) or fp16 (GPU; a loss "
                                        "scaler): autocast of the encoders' forward passes; scores and loss stay float32."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even if it holds files lewisrag did not write "
                                   "there as a DPR checkpoint (replaced only when training has finished); never a folder lewisrag did "
                                   "not make."),
    as_json: bool = typer.Option(False, "--json", help="Print the training summary as one JSON object instead of a "
                                 "table (final_loss: the mean loss of the last 20 steps, as lewisrag_dpr.json records it)."),
) -> None:
    """Train a DPR bi-encoder with in-batch, BM25 and self-mined hard negatives."""
    # the flags and --out are checked before torch and transformers load (the settings and their checks need
    # neither): a typo is refused in a moment, not after ten seconds of imports
    from lewisrag.data.io import InputError
    from lewisrag.data.outputs import check_out_dir
    from lewisrag.data.threads import check_device_flag
    from lewisrag.training.configs import (DPR_KIND, HARD_NEGATIVE_SOURCES, DPRTrainConfig, check_init, check_precision,
                                           lr_problem)

    if no_hard_negatives:  # in-batch negatives only: no BM25 or given negatives, and no self-mined ones either
        _ui.refuse_given(ctx, ("self_negatives_at", "hard_negatives_from"), "adds hard negatives; --no-hard-negatives "
                         "trains on in-batch negatives only")
        self_negatives_at = 0.0
    if hard_negatives_from not in HARD_NEGATIVE_SOURCES:
        raise InputError("--hard-negatives-from", f"must be {', '.join(HARD_NEGATIVE_SOURCES[:-1])} or "
                         f"{HARD_NEGATIVE_SOURCES[-1]}, got {hard_negatives_from!r}")
    cfg = DPRTrainConfig(init=init, init_question=init_question, init_context=init_context, steps=steps,
                         batch_size=batch_size, lr=lr, hidden_size=hidden_size, layers=layers, vocab_size=vocab_size,
                         dropout=dropout, attention_dropout=attention_dropout,
                         hard_negatives=not no_hard_negatives, hard_negatives_from=hard_negatives_from,
                         self_negatives_at=self_negatives_at, shared=not separate, seed=seed, device=device,
                         mixed_precision=mixed_precision)
    if not 0 <= self_negatives_at < 1:
        raise InputError("--self-negatives-at", "must be in [0, 1)")
    if steps < 0:
        raise InputError("--steps", f"must be at least 0, got {steps}")
    for flag, value in (("--dropout", dropout), ("--attention-dropout", attention_dropout)):
        if not 0 <= value < 1:
            raise InputError(flag, f"must be in [0, 1), got {value}")
    for flag, value in (("--batch-size", batch_size), ("--hidden-size", hidden_size),
                        ("--layers", layers), ("--vocab-size", vocab_size)):
        if value < 1:
            raise InputError(flag, f"must be at least 1, got {value}")
    # a scratch model (BERT-large is 1024 wide, 24 deep): a size past these ran out of memory or never finished
    for flag, value, most in (("--hidden-size", hidden_size, 4096), ("--layers", layers, 96)):
        if value > most:
            raise InputError(flag, f"must be at most {most} for a model trained from scratch, got {value}")
    if hidden_size % cfg.heads:  # a traceback from the model's config else
        raise InputError("--hidden-size", f"must be a multiple of the {cfg.heads} attention heads, got {hidden_size}")
    if (why := lr_problem(lr)) is not None:
        raise InputError("--lr", why)
    if init or init_question:  # never ignored in silence
        _ui.refuse_given(ctx, ("hidden_size", "layers", "vocab_size", "dropout", "attention_dropout"),
                         "shapes a model trained from scratch; the starting checkpoint (--init*) has its own")
    if steps == 0:
        _ui.refuse_given(ctx, ("batch_size", "lr", "no_hard_negatives", "hard_negatives_from", "self_negatives_at",
                               "mixed_precision", "device", "separate"), "shapes training, which --steps 0 skips (it saves the starting encoders)")
    if steps == 0 and (init or init_question):  # at --steps 0 only a scratch model's first weights draw from it
        _ui.refuse_given(ctx, ("seed",), "seeds the batch order and a scratch model's first weights; --steps 0 with "
                         "--init* saves the starting encoders as they are")
    check_init(cfg)
    check_precision(mixed_precision, check_device_flag(device))  # before anything is read
    converting = steps == 0 and train is None and passages is None  # the starting encoders saved as they are
    if converting and not (init or init_question):
        raise InputError("--steps", "0 without --train saves the starting encoders: give --init or --init-question and "
                         "--init-context")
    if not converting and (train is None or passages is None):
        raise InputError("--train" if train is None else "--passages", "needed to train (with --train, --passages names the "
                         "passages its gold ids refer to); only --steps 0 with --init* converts a checkpoint without data")
    if converting:
        _ui.refuse_given(ctx, ("qa_fields",), "names --train's fields; --steps 0 without --train reads no data (it "
                         "saves the starting encoders)")
    fields = _ui.qa_fields(qa_fields)
    inputs = {"--train": train, "--passages": passages, "--init": init, "--init-question": init_question,
              "--init-context": init_context}
    check_out_dir(out, DPR_KIND, overwrite=overwrite, inputs=inputs, replaces=True, alone=True)  # before anything is read or trained
    from lewisrag.data.passages import open_passages
    from lewisrag.data.records import check_gold_ids, read_qa
    from lewisrag.training.dpr import FINAL_LOSS_STEPS, train_dpr
    from lewisrag.training.negatives import check_hard_negative_ids

    examples, docs = ([], []) if converting else (read_qa(train, fields), open_passages(passages))
    if not converting:  # as eval retrieval and train stitched: a mistyped id was dropped, its question counted or not
        _refuse_no_gold_ids(examples, train, fields)
        check_gold_ids(examples, docs, train, f"--passages {passages}", fields)
        if hard_negatives_from == "given" and not no_hard_negatives:  # none there: a file for another corpus
            check_hard_negative_ids(examples, docs, train, f"--passages {passages}", fields)
    with _ui.progress() as p:
        task = p.add_task("training DPR", total=steps, info="")
        meta = train_dpr(cfg, examples, docs, out, lambda s, loss: p.update(task, completed=s, info=f"loss {loss:.3f}"),
                         overwrite=overwrite)
    source = meta["config"]["hard_negatives_from"]
    counts = {k: meta[k] for k in ("n_no_hard_negative", "n_hard_negatives_gold", "n_hard_negatives_missing",
                                  "n_bm25_hard_negative", "n_no_bm25_negative", "n_no_self_negative",
                                  "n_steps_no_negative") if k in meta}
    if as_json:
        _ui.print_json({"out": str(out), "n_train": meta["n_train"], "n_no_gold": meta["n_no_gold"], "final_loss": meta["final_loss"],
                        "hard_negatives_from": source, **counts, "dim": meta["dim"], "ctx_fingerprint": meta["ctx_fingerprint"]})
        return
    said = {"given": "given by --train", "bm25": "BM25 over --passages", "none": "none"}[source]
    if hard_negatives_from == "auto" and source != "none":
        said += " (auto: every question has given ones)" if source == "given" else " (auto: not every question has given ones in --passages)"
    rows = [["train questions", meta["n_train"]], ["left out (no gold id)", meta["n_no_gold"]], ["hard negatives", said]]
    rows += [["without a hard negative", counts["n_no_hard_negative"]]] if counts.get("n_no_hard_negative") else []
    rows += [["given negatives dropped (gold)", counts["n_hard_negatives_gold"]]] if counts.get("n_hard_negatives_gold") else []
    rows += [["given negatives dropped (not in --passages)", counts["n_hard_negatives_missing"]]] if counts.get("n_hard_negatives_missing") else []
    rows += [["BM25 negative (none given left)", counts["n_bm25_hard_negative"]]] if counts.get("n_bm25_hard_negative") else []
    rows += [["without a BM25 negative", counts["n_no_bm25_negative"]]] if counts.get("n_no_bm25_negative") else []
    rows += [["without a self-mined negative", counts["n_no_self_negative"]]] if counts.get("n_no_self_negative") else []
    rows += [["steps without a negative (loss 0)", counts["n_steps_no_negative"]]] if counts.get("n_steps_no_negative") else []
    _ui.out.print(_ui.table(f"DPR checkpoint written to {out}", ["field", "value"],
                            rows + [[f"final loss (mean of last {FINAL_LOSS_STEPS} steps)", meta["final_loss"]],
                                    ["dim", meta["dim"]],
                                    ["context fingerprint", meta["ctx_fingerprint"]]]))


def _refuse_no_gold_ids(examples, path, fields) -> None:
    """Refuse a --train file none of whose questions names a gold passage id, at its first question's line: DPR's
    older biencoder JSON carries contexts of title and text alone, which no passage is matched by (and
    `train_dpr`'s own refusal, which has no file to name, blamed no line)."""
    if not examples or any(ex.gold_passage_ids for ex in examples):
        return
    from lewisrag.data.io import InputError
    from lewisrag.data.qa_formats import qa_records
    from lewisrag.data.records import answer_sources

    line = answer_sources(path, fields)[0][0]
    first = next((rec for n, rec in qa_records(path) if n == line), {})
    dpr = isinstance(first, dict) and "positive_ctxs" in first and not (fields or {}).get("gold_passage_ids")
    raise InputError(path, "no training question names a gold passage id: "
                     + ("DPR's contexts here carry title and text alone, which are not matched to --passages; give "
                        "them passage_id" if dpr else "each needs the ids of its gold passages in --passages"),
                     line=line, field="positive_ctxs[0].passage_id" if dpr else "gold_passage_ids")


def rag(
    ctx: typer.Context,
    variant: str = typer.Option("token", "--variant", help="Marginalization: token (RAG-Token) or sequence (RAG-Sequence)."),
    task: str = typer.Option("qa", "--task", help="qa (dev exact match), jeopardy (question generation: dev Q-BLEU-1) or "
                             "fever (claim -> SUPPORTS/REFUTES/NOT ENOUGH INFO as single tokens added to the generator's "
                             "vocabulary: dev label accuracy). The files are in the QA format either way."),
    index: Path = typer.Option(..., "--index", help="Dense index directory; opened memory-mapped by every process."),
    encoder: Path = typer.Option(..., "--encoder", help="DPR checkpoint (`lewisrag train dpr`) or transformers DPRQuestionEncoder "
                                 "folder whose question encoder and tokenizer start the retriever."),
    context_encoder: Path = typer.Option(None, "--context-encoder", help="With a DPRQuestionEncoder folder as --encoder: the "
                                         "DPRContextEncoder folder of its pair; it must be the one that built --index "
                                         "(same weights fingerprint). Without it, only --swap accepts the index."),
    generator: Path = typer.Option(..., "--generator", help="Local BART directory with its tokenizer (a transformers "
                                   "BartForConditionalGeneration folder such as facebook/bart-base, or a `lewisrag pretrain` output)."),
    train: str = typer.Option(..., "--train", help="Training QA examples (.jsonl/.json/.parquet/hf:NAME:SPLIT); the first answer is the target."),
    dev: str = typer.Option(..., "--dev", help="Dev examples scored at intervals by the task's metric (see --task); the best model is kept."),
    qa_fields: str = typer.Option(None, "--qa-fields", help=_ui.QA_FIELDS_HELP + " Applies to --train and --dev."),
    train_kinds: str = typer.Option("", "--train-kinds", help="Comma-separated question kinds to train on, e.g. short (default: all)."),
    out: Path = typer.Option(..., "--out", help="Run directory: config.json, log.jsonl, checkpoint/, best/, final/."),
    n_docs: int = typer.Option(5, "--n-docs", help="Documents retrieved and marginalized per question (K)."),
    freeze_retriever: bool = typer.Option(False, "--freeze-retriever", help="Keep the question encoder fixed (the paper's ablation)."),
    retriever_lr_scale: float = typer.Option(1.0, "--retriever-lr-scale", help="The question encoder's (and with "
                                             "--train-context-encoder the context encoder's) learning rate as a multiple of --lr."),
    train_context_encoder: bool = typer.Option(False, "--train-context-encoder", help="Train the DPR context encoder too "
                                               "(RAG-end2end): the K passages retrieved from --index are re-encoded in each "
                                               "step, so the loss reaches the document encoder. best/ and final/ then hold "
                                               "context_encoder/ and index/ (the passages re-encoded by it): ask or export "
                                               "with --index RUN/best/index. Needs the checkpoint's context encoder (or "
                                               "--context-encoder with a DPRQuestionEncoder folder)."),
    reindex_every: int = typer.Option(0, "--reindex-every", help="With --train-context-encoder: re-encode every passage "
                                      "of the index with the current context encoder every N optimizer steps, between "
                                      "steps, and search those vectors (an exact Flat index in memory; the seconds are "
                                      "logged as reindex_s). 0: keep searching --index's vectors."),
    swap: bool = typer.Option(False, "--swap", help="Accept an index built by another context encoder than the DPR checkpoint's "
                              "(or an unpaired DPRQuestionEncoder folder)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its last checkpoint, with the same settings (only --device, --search-device, --compile, --gradient-checkpointing and --shared-retrieval may change)."),
    steps: int = typer.Option(200, "--steps", help="Optimizer steps."),
    batch_size: int = typer.Option(8, "--batch-size", help="Questions per micro-batch over all processes (must split evenly)."),
    grad_accum: int = typer.Option(1, "--grad-accum", help="Micro-batches accumulated per optimizer step."),
    lr: float = typer.Option(1e-4, "--lr", help="Peak AdamW learning rate (linear warmup, then linear decay)."),
    warmup: float = typer.Option(0.1, "--warmup", help="Share of the steps spent warming up."),
    weight_decay: float = typer.Option(0.01, "--weight-decay", help="AdamW weight decay, on every parameter (biases and LayerNorm weights too)."),
    max_grad_norm: float = typer.Option(1.0, "--max-grad-norm", help="Gradient-norm clip (0 = none)."),
    label_smoothing: float = typer.Option(0.0, "--label-smoothing", help="Label smoothing of the RAG loss, as transformers applies it."),
    max_combined_length: int = typer.Option(300, "--max-combined-length", help="Generator input tokens per (question, document); capped at the generator's max_position_embeddings (with a note)."),
    max_target_length: int = typer.Option(32, "--max-target-length", help="Answer tokens, start and end tokens included."),
    eval_every: int = typer.Option(50, "--eval-every", help="Steps between dev evaluations (0 = never); the best model is kept in best/."),
    eval_questions: int = typer.Option(200, "--eval-questions", help="Dev questions evaluated (the first ones)."),
    eval_beams: int = typer.Option(1, "--eval-beams", help="Beams when decoding dev answers (1 = greedy)."),
    eval_batch_size: int = typer.Option(16, "--eval-batch-size", help="Dev questions decoded at once."),
    save_every: int = typer.Option(50, "--save-every", help="Steps between resumable checkpoints (each new best dev score also writes one, before best/)."),
    seed: int = typer.Option(0, "--seed", min=0, max=2**32 - 1, help="Random seed (data order, dropout)."),
    mixed_precision: str = typer.Option("no", "--mixed-precision", help="no, bf16 (CPU or GPU) or fp16 (GPU; a loss "
                                        "scaler skips the steps whose gradients overflow, logged as skipped_inf)."),
    gradient_checkpointing: bool = typer.Option(False, "--gradient-checkpointing", help="Recompute BART's and the "
                                                "encoders' activations in the backward pass: less memory, slower steps."),
    compile_models: bool = typer.Option(False, "--compile", help="torch.compile the generator and the encoders (on "
                                        "the first step, and once more at the first evaluation; needs a C compiler). On two "
                                        "CPU cores: 1.03-1.09x faster in bf16, 0.97-0.99x in fp32; for GPU steps."),
    device: str = typer.Option("auto", "--device", help="Where it trains: auto (a GPU when one is visible), cpu or cuda "
                               "(accelerate takes the first visible GPU: pick it with CUDA_VISIBLE_DEVICES, or run several "
                               "with `accelerate launch`)."),
    cpu: bool = typer.Option(False, "--cpu", hidden=True, help="Deprecated: --device cpu."),
    search_device: str = typer.Option("auto", "--search-device", help="auto: on a GPU, search a Flat index there by "
                                      "an exact matrix product when its vectors fit in half the free memory, as float32 "
                                      "or else float16 with the top candidates re-scored in float32 (same top-K as "
                                      "FAISS, far faster at a million passages); cpu: FAISS; gpu: insist."),
    shared_retrieval: bool = typer.Option(False, "--shared-retrieval", help="With several processes (accelerate launch): "
                                          "each node's first process holds the FAISS index and searches for all of them "
                                          "in one batch; the others never read it."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty --out with the new run once it has "
                                   "finished (the old folder stays until then); never a folder lewisrag did not make."),
    as_json: bool = typer.Option(False, "--json", help="Print the run summary as one JSON object instead of a table (main process only)."),
) -> None:
    """Fine-tune a RAG model (question encoder + BART) end to end; resumable, multi-process under `accelerate launch`."""
    # as `train dpr`: the flags are checked before torch and transformers load
    from lewisrag.data.io import InputError
    from lewisrag.data.outputs import check_on_its_own
    from lewisrag.data.threads import check_device
    from lewisrag.training.configs import RAG_KIND, RagTrainConfig, check_rag_flags, check_task

    check_task(task)
    device = check_device(_ui.renamed_switch(ctx, "device", "cpu", "--device", "--cpu", "cpu"))
    if resume and overwrite:
        raise InputError("--overwrite", "does not apply with --resume, which continues the run in --out")
    check_on_its_own(out, RAG_KIND)  # RUN/rag_token: the reproduction's later stages read it
    if eval_every == 0:  # never ignored in silence
        _ui.refuse_given(ctx, ("eval_questions", "eval_beams", "eval_batch_size"),
                         "shapes the dev evaluations, which --eval-every 0 turns off")

    cfg = RagTrainConfig(
        variant=variant, task=task, index=str(index), encoder=str(encoder),
        context_encoder=str(context_encoder) if context_encoder else None, generator=str(generator), train=str(train), dev=str(dev),
        qa_fields=_ui.qa_fields(qa_fields), train_kinds=train_kinds, n_docs=n_docs, freeze_retriever=freeze_retriever,
        retriever_lr_scale=retriever_lr_scale, train_context_encoder=train_context_encoder, reindex_every=reindex_every,
        swap=swap, steps=steps, batch_size=batch_size, grad_accum=grad_accum, lr=lr, warmup=warmup, weight_decay=weight_decay, max_grad_norm=max_grad_norm,
        label_smoothing=label_smoothing, max_combined_length=max_combined_length, max_target_length=max_target_length,
        eval_every=eval_every, eval_questions=eval_questions, eval_beams=eval_beams, eval_batch_size=eval_batch_size,
        save_every=save_every, seed=seed, mixed_precision=mixed_precision, gradient_checkpointing=gradient_checkpointing,
        compile=compile_models, cpu=device == "cpu", search_device=search_device,
        shared_retrieval=shared_retrieval,
    )
    check_rag_flags(cfg)  # their values, before accelerate counts the processes (train_rag checks them again with it)
    from lewisrag.training.rag import combined_length_note, train_rag
    from lewisrag.training.tasks import DEV_METRIC

    note = combined_length_note(cfg)  # capped, not refused: see combined_length_note
    with _ui.progress() as p:
        bar, dev, metric = None, "-", DEV_METRIC[cfg.task]

        def on_progress(step: int, total: int, record: dict) -> None:
            nonlocal bar, dev
            if bar is None:  # created on the first report: only the main process reports
                if note:  # once training runs: a bad input found while loading stays the one line on stderr
                    typer.echo(note, err=True)
                bar = p.add_task(f"training RAG-{cfg.variant}", total=total, info="")
            if f"dev_{metric}" in record:
                dev = f"{record[f'dev_{metric}']:.3f}"
            p.update(bar, completed=step, info=f"loss {record['loss']:.3f}  dev {metric} {dev}")

        summary = train_rag(cfg, out, resume=resume, on_progress=on_progress, overwrite=overwrite)
    best = out / "best" if (out / "best").is_dir() else None  # none without a dev evaluation (--eval-every 0)
    if summary["main"] and as_json:
        _ui.print_json({"out": str(out), "variant": cfg.variant, "task": cfg.task, "steps": summary["steps"],
                        "best_em": summary["best_em"], "best_dev": summary["best_dev"], "dev_metric": summary["dev_metric"],
                        "n_train": summary["n_train"], "skipped_no_answer": summary["skipped_no_answer"],
                        "processes": summary["processes"], "search": summary["search"], "best_model": best and str(best),
                        "final_model": str(out / "final")})
    elif summary["main"]:
        _ui.out.print(_ui.table(f"RAG-{cfg.variant} written to {out}", ["field", "value"], [
            ["steps", summary["steps"]], [f"best dev {summary['dev_metric']}", summary["best_dev"]],
            ["training questions", summary["n_train"]],
            ["left out (no answer)", summary["skipped_no_answer"]], ["processes", summary["processes"]],
            ["search", summary["search"]], ["best model", best or "none (no dev evaluation)"], ["final model", out / "final"]]))


def stitched(
    ctx: typer.Context,
    index: Path = typer.Option(..., "--index", help="Index (dense or BM25) the passages are retrieved from."),
    generator: Path = typer.Option(..., "--generator", help="Starting seq2seq checkpoint (a BART directory with its tokenizer, "
                                   "e.g. a transformers BartForConditionalGeneration folder)."),
    train: Path = typer.Option(..., "--train", help="Training QA examples (with answers and gold_passage_ids)."),
    qa_fields: str = typer.Option(None, "--qa-fields", help=_ui.QA_FIELDS_HELP),
    out: Path = typer.Option(..., "--out", help="Output folder for the fine-tuned generator."),
    encoder: Path = typer.Option(None, "--encoder", help="DPR checkpoint or transformers DPRQuestionEncoder folder searching "
                                 "the index (default: the index's own)."),
    context_encoder: Path = typer.Option(None, "--context-encoder", help="With a DPRQuestionEncoder folder as --encoder: the "
                                         "DPRContextEncoder folder of its pair, the one that built --index."),
    n_docs: int = typer.Option(5, "--n-docs", help="Passages retrieved and stitched into each input (K); the gold one is always among them. Refused when a "
                        "question's K passages and question exceed the generator's input (1024 tokens, or its positions)."),
    old_k: int = typer.Option(None, "--k", hidden=True, help="Deprecated: --n-docs."),
    steps: int = typer.Option(200, "--steps", help="Optimizer steps."),
    batch_size: int = typer.Option(8, "--batch-size", help="Examples per step."),
    lr: float = typer.Option(1e-4, "--lr", help="Peak AdamW learning rate (linear warmup, then linear decay); a run "
                             "whose loss becomes NaN is refused and writes nothing."),
    max_target_length: int = typer.Option(None, "--max-target-length", help="Target tokens: the answer and its citation "
                                          "(default: the longest cited answer's). Refused when a cited answer is longer "
                                          "(its cut would drop the citation)."),
    train_kinds: str = typer.Option("", "--train-kinds", help="Comma-separated question kinds to train on, e.g. short (default: all)."),
    gold_position: str = typer.Option("random", "--gold-position", help="random: the gold passage at a random position; retrieved: at its retrieval rank (last if missed)."),
    question_last: bool = typer.Option(False, "--question-last", help="Stitch the question after the passages."),
    mixed_n_docs: bool = typer.Option(False, "--mixed-n-docs", help="Stitch 1..--n-docs passages per training input (a curriculum)."),
    cite_first: bool = typer.Option(False, "--cite-first", help="Targets cite the gold passage before the answer ('[3] answer') "
                                    "instead of after it ('answer [3]')."),
    old_mixed_k: bool = typer.Option(False, "--mixed-k", hidden=True, help="Deprecated: --mixed-n-docs."),
    seed: int = typer.Option(0, "--seed", min=0, max=2**32 - 1, help="Batch order and gold positions."),
    device: str = typer.Option("auto", "--device", help="Where it trains: auto (a GPU when one is visible), cpu or cuda[:N]."),
    mixed_precision: str = typer.Option("no", "--mixed-precision", help="no, bf16 (CPU or GPU) or fp16 (GPU; a loss scaler)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out even if it holds files that are not a "
                                   "stitched generator lewisrag wrote (replaced once training has finished); never a folder lewisrag did "
                                   "not make."),
    as_json: bool = typer.Option(False, "--json", help="Print the training summary as one JSON object instead of a table."),
) -> None:
    """Fine-tune a generator on stitched inputs whose targets cite the gold passage's number (after the answer, or first)."""
    # as `train dpr`: the flags are checked before torch and transformers load
    from lewisrag.data.io import InputError
    from lewisrag.data.outputs import check_on_its_own
    from lewisrag.training.configs import STITCHED_KIND, StitchedTrainConfig, check_stitched

    check_on_its_own(out, STITCHED_KIND)  # RUN/stitched: the reproduction's comparison read it
    k = _ui.renamed(ctx, "n_docs", "old_k", "--n-docs", "--k")
    mixed_k = _ui.renamed(ctx, "mixed_n_docs", "old_mixed_k", "--mixed-n-docs", "--mixed-k")
    for flag, value, least in (("--n-docs", k, 1), ("--steps", steps, 1), ("--batch-size", batch_size, 1),
                               ("--max-target-length", max_target_length, 3)):  # 3: the specials and one token
        if value is not None and value < least:
            raise InputError(flag, f"must be at least {least}, got {value}")
    if k == 1:
        _ui.refuse_given(ctx, ("mixed_n_docs", "old_mixed_k"), "stitches 1..--n-docs passages per input; with --n-docs 1 "
                         "every input holds one passage already")
    cfg = StitchedTrainConfig(index=str(index), encoder=str(encoder or ""), context_encoder=str(context_encoder or ""),
                              generator=str(generator), train=str(train),
                              qa_fields=_ui.qa_fields(qa_fields), train_kinds=train_kinds, k=k, steps=steps,
                              batch_size=batch_size, lr=lr, max_target_length=max_target_length,
                              gold_position=gold_position, question_last=question_last, mixed_k=mixed_k,
                              cite_first=cite_first, seed=seed, device=device, mixed_precision=mixed_precision)
    check_stitched(cfg)  # the rest of them (train_stitched checks them again, as the reproduction's stage calls it)
    from lewisrag.training.stitched_train import train_stitched

    with _ui.progress() as p:
        bars = _ui.Bars(p)
        summary = train_stitched(cfg, out, lambda s, t, loss: bars("training", s, t, f"loss {loss:.3f}"), overwrite=overwrite,
                                 check_lengths=True)
    if as_json:
        _ui.print_json(summary)
        return
    _ui.out.print(_ui.table("stitched generator", ["steps", "examples", "left out (no answer or gold id)", "first loss",
                                                   "final loss", "out"],
                            [[summary["steps"], summary["n_train"], summary["n_left_out"], summary["first_loss"],
                              summary["final_loss"], summary["out"]]]))
