"""The model stages of `lewisrag reproduce`, after retrieval: the generator, the RAG-Token and
RAG-Sequence runs, the closed-book baseline, their evaluation, the paper's ablations (Table 6,
Figure 3), the hot-swap test (§4.5) and the comparison with prompt-stitching RAG.

Each function runs one stage into the run folder and returns what `reproduce._run_stage` records:
small numbers at the top level, the results it contributes under "out", per-question records under
"records".
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import torch

from lewisrag.data.cpu_linear import current_kind
from lewisrag.data.io import InputError, expect, is_finite_number, read_json, read_json_list_lines, write_json, write_text
from lewisrag.data.outputs import (check_out_dir, check_part, discard_output, made_by, mark, note_writing, note_written,
                                   staged_dir, wrote)
from lewisrag.data.pretrained import check_recipe, load_generator, model_files
from lewisrag.data.records import read_qa
from lewisrag.data.threads import resolve_device
from lewisrag.eval.results import QuestionRecord
from lewisrag.experiments.ask import ask
from lewisrag.rag_model.decoding import check_generation_config, generation_file
from lewisrag.rag_model.implicit_citations import pieces_of
from lewisrag.training import checkpoint as C
from lewisrag.training.checkpoint import load_trained
from lewisrag.experiments.compare import compare_stage, train_stitched_stage
from lewisrag.experiments.presets import LINEAR_KEY, Preset, linear_difference, read_run_config
from lewisrag.experiments.swap import swap_matrix
from lewisrag.index import store
from lewisrag.index.bm25 import BM25Index
from lewisrag.index.dense import DenseIndex
from lewisrag.rag_model.answering import answer_questions
from lewisrag.scoring.aggregate import mean
from lewisrag.scoring.qa import answer_exact_match, is_regex_answered, msmarco_bleu_1, msmarco_rouge_l, rouge_l, token_f1
from lewisrag.training.closed_book import KIND as CLOSED_BOOK_KIND
from lewisrag.training.closed_book import LAYOUT as CLOSED_BOOK_LAYOUT
from lewisrag.training.closed_book import answer_closed_book, train_closed_book
from lewisrag.training.configs import pretrain_preset
from lewisrag.training.dpr import KIND as DPR_KIND
from lewisrag.training.pretrain import KIND as GENERATOR_KIND
from lewisrag.training.pretrain import SHIPPED_DIR, pretrain
from lewisrag.training.rag import KIND as RAG_KIND
from lewisrag.training.rag_run import LAYOUT as RAG_LAYOUT
from lewisrag.training.rag_run import REPLACED as RAG_REPLACED
from lewisrag.training.rag import train_rag
from lewisrag.training.stitched_train import KIND as STITCHED_KIND
from lewisrag.training.rag_data import place_search

Progress = Callable[[str, int, int, str], None]  # (task, done, total, info)
SYSTEMS = ("rag_token", "rag_sequence", "closed_book")  # Table 1's rows that this run trains
# what a run writes once every stage is done, and what stages write at the top of RUN: a run begun afresh
# removes them all (a base run in a former small run's folder kept its plots and predictions beside its own)
FINISHED = ("results.json", "timings.json", "report.md", "report.html", "predictions.json", "evidence.json",
            "knowledge_update.json", "training_curves.png", "em_vs_k.png", "swap_matrix.png", "token_posteriors.png",
            "position.png", "jeopardy_posteriors.png")
# those the end of every run, --resume too, writes: the results and the report with the plots every report draws
# (`report.report_files`; em_vs_k.png, swap_matrix.png and jeopardy_posteriors.png only with their sections)
REWRITTEN = ("results.json", "timings.json", "report.md", "training_curves.png", "token_posteriors.png")


# The folders stages replace whole, by stage name: (its path in RUN, its marker kind). `check_rerun` checks
# them before a run starts; a stage not here writes files only (results, predictions, RUN/data's JSONL).
STAGE_FOLDERS = {
    "world": ("world", "world"),  # `data.world.write_world`'s kind
    "dpr": ("dpr", DPR_KIND), "index_a": ("index_a", store.KIND), "index_b": ("index_b", store.KIND),
    "bm25_a": ("bm25_a", store.KIND), "generator": ("generator", GENERATOR_KIND),
    **{name: (name, RAG_KIND) for name in ("rag_token", "rag_sequence", "rag_token_frozen")},
    "closed_book": ("closed_book", CLOSED_BOOK_KIND), "stitched": ("stitched", STITCHED_KIND),
    "tasks_dpr": ("tasks/dpr", DPR_KIND), "tasks_index_a": ("tasks/index_a", store.KIND),
    "tasks_index_b": ("tasks/index_b", store.KIND),
    **{f"{task}_{part}": (f"{task}/{folder}", kind) for task in ("jeopardy", "fever")
       for part, folder, kind in (("verifier", "generator", GENERATOR_KIND), ("rag_token", "rag_token", RAG_KIND),
                                  ("rag_sequence", "rag_sequence", RAG_KIND), ("closed_book", "closed_book", CLOSED_BOOK_KIND))},
}
# what a folder written before its marker listed its files holds (a closed book's had no marker): the test of
# what the user added there
LEGACY = {RAG_KIND: (*RAG_LAYOUT, *(f"checkpoint/{n}" for n in (C.WEIGHTS, C.STATE_TENSORS, C.STATE_JSON, C.LOG, C.LIVE_VECTORS)),
                     *(f"{d}/{n}" for d in ("best", "final") for n in ("rag.json", "question_encoder", "generator",
                       "context_encoder", "question_tokenizer", "generator_tokenizer", "train_config.json", "index"))),
          CLOSED_BOOK_KIND: CLOSED_BOOK_LAYOUT}
# the kinds lewisrag once wrote without a marker (the closed book): a folder of LEGACY's names without one
# is taken for such an output. A RAG run always had its marker (as RUN/dpr, RUN/index_a, ...): a run
# folder without one is refused before any stage runs, as `discard_output` would refuse it after
UNMARKED = frozenset({CLOSED_BOOK_KIND})
# the kinds of folder a stage rewrites through `outputs.output_dir`, which carries the files the user added to the
# earlier one over into the new one (`rewritten_dir`): `check_rerun` refuses there only what no rerun replaces
CARRIED = frozenset({"world"})
# the kinds of folder a stage resumes into rather than redoes (`rag`: train_rag goes on from the checkpoint or
# final model it finds there): a run begun afresh discards those of its stages before any stage runs (`start_run`)
RESUMED = frozenset({RAG_KIND})
# every stage that records itself in RUN/stages (a run begun afresh removes these records, and nothing else there)
STAGE_NAMES = frozenset(STAGE_FOLDERS) | {"world", "retrieval", "evaluate", "ablations", "knowledge_update",
                                          "compare", "data", "jeopardy_evaluate", "fever_evaluate"}


def check_rerun(run: Path, names: Sequence[str], resume: bool, overwrite: bool = False) -> None:
    """Before a run starts in `run`, and before anything there is removed: each folder that a stage of
    `names` will replace (every one, or with `resume` those not finished) must hold nothing of the
    user's (`outputs.check_part`): a file the user added to it is refused by name (exit 2), not lost
    once the stages before it were redone, unless `overwrite`. A resumed RAG run replaces only its
    checkpoint/, best/ and final/ folders; a plain rerun removes it whole (`rag`). A resume also checks
    the files it will write at RUN's top beside those its end always rewrites (`start_run`): each
    unfinished stage's own (`STAGE_FILES`, compare's position.png) and the plot of each section the
    run has (em_vs_k.png with ablations, ...): a user's file of such a name was replaced in silence. A
    resume's refusal advises what `reproduce --resume` accepts: --overwrite only with --resume dropped.
    The world's folder (`CARRIED`) keeps the user's files; a link, a file, or a folder without a marker or
    of another kind in its place is refused all the same: found by the world stage itself, only after
    `start_run` had removed the earlier run's results, reports and stage records."""
    if resume:
        files = [f for n in names if not stage_record(run, n).exists() for f in STAGE_FILES.get(n, ()) + STAGE_PLOTS.get(n, ())]
        finished_files(run, overwrite, [f for f in files + [SECTION_PLOTS[n] for n in names if n in SECTION_PLOTS]
                                        if "/" not in f], resume=True)  # RUN's top: finished_files checks those
    for name in names:
        if name not in STAGE_FOLDERS or (resume and stage_record(run, name).exists()):
            continue
        rel, kind = STAGE_FOLDERS[name]
        within = RAG_REPLACED if resume and kind == RAG_KIND else ()
        check_part(run / rel, kind, overwrite=overwrite or kind in CARRIED, what=f"the {name} stage",
                   legacy=LEGACY.get(kind, ()), unmarked=kind in UNMARKED, within=within, resume=resume)


def forget_stages(run: Path) -> None:
    """Remove the stage records in RUN/stages (`STAGE_NAMES`), not the folder: what else the user keeps there stays."""
    folder = run / "stages"
    if folder.is_dir() and not folder.is_symlink():
        for name in sorted(STAGE_NAMES):
            (folder / f"{name}.json").unlink(missing_ok=True)


def stage_record(run: Path, name: str) -> Path:
    """RUN/stages/<name>.json: what a finished stage returned; `--resume` skips the stages that have one."""
    return run / "stages" / f"{name}.json"


DAMAGED = "; the stage record is damaged (delete it, and --resume runs the stage again)"


def read_stage_record(path: Path, needs: dict[str, tuple[type, str]] | None = None) -> dict:
    """A finished stage's record, read back for `--resume` with what the run takes from it checked: an
    object with its `seconds` (timings.json), `out` an object of what it adds to results.json, `records`
    a list of evaluator records (`QuestionRecord.from_json`, each named by the line it opens on), and
    `needs`, field -> (type, what): the fields this stage's results are assembled from. A stage writes
    its record last and atomically, so a record that is there but wrong was damaged afterwards: an
    InputError naming the file and the field, not a traceback; a record that is not there (the run was
    killed before it) is the stage still to run."""
    record, lines = read_json_list_lines(path, "records")
    expect(isinstance(record, dict), path, "(top level)", "a JSON object", type(record).__name__, DAMAGED)
    for field, (kind, what) in {"seconds": (float, "a finite number >= 0"), **(needs or {})}.items():
        if field not in record:
            raise InputError(path, "missing" + DAMAGED, field=field)
        value = record[field]
        ok = is_finite_number(value) and value >= 0 if kind is float else isinstance(value, kind)
        expect(ok, path, field, what, value, DAMAGED)
    out = record.get("out", {})
    expect(isinstance(out, dict), path, "out", "an object", out, DAMAGED)
    expect(isinstance(out.get("qa", {}), dict), path, "out.qa", "an object", out.get("qa"), DAMAGED)  # merged by system
    records = record.get("records", [])
    expect(isinstance(records, list), path, "records", "a list of records", records, DAMAGED)
    for i, rec in enumerate(records):
        QuestionRecord.from_json(rec, path, i, lines[i])
    return record


# every file a stage writes outside the folders that are outputs of their own (its folder, when it has one, is
# its record's "dir"): listed in the run's marker (`record_stage`) and checked by --resume (`check_stage_outputs`).
# evaluate writes evidence.json when the test split has a short-answer question (`_evaluate`)
STAGE_PLOTS = {"compare": ("position.png",)}  # drawn by the stage itself
SECTION_PLOTS = {"ablations": "em_vs_k.png", "knowledge_update": "swap_matrix.png",  # drawn by every run's end
                 "jeopardy_evaluate": "jeopardy_posteriors.png"}                    # that has the section
STAGE_FILES = {"evaluate": ("predictions.json", "evidence.json"), "knowledge_update": ("knowledge_update.json",),
               "compare": ("report.html",),
               "jeopardy_evaluate": ("jeopardy/predictions.json", "jeopardy/evidence.json"),
               "fever_evaluate": ("fever/predictions.json",)}


def claimed(run: Path, path: Path) -> Path:
    """`path`, a file the run `run` writes outside its stages' folders (RUN/predictions.json,
    RUN/jeopardy/evidence.json), listed in the run's marker just before it is written
    (`outputs.note_writing`). Listed only once its stage finished, the file that a kill left in between
    was refused by the next rerun as the user's (`finished_files`)."""
    note_writing(run, [path.relative_to(run).as_posix()])
    return path


def record_stage(run: Path, name: str, record: dict, ran: bool) -> None:
    """List in the run's marker (`outputs.note_written`) what the stage `name` wrote outside the folders
    that are outputs of their own (its files each listed before it was written too: `claimed`): its
    record RUN/stages/<name>.json, its files (`STAGE_FILES`) and, when it `ran` now, the files of its
    folder (the record's "dir") if that has no marker of its own (the base preset's RUN/data). A file an
    output lists is its own: `swap --out RUN/config.json --overwrite` replaced a finished run's
    config.json (exit 0), and its `--resume` was then refused."""
    paths = [f"stages/{name}.json", *STAGE_FILES.get(name, ())]
    if ran and name == "compare" and isinstance(record.get("out"), dict) and record["out"].get("position"):
        paths.append("position.png")  # plotted when the stage probed positions (`compare_stage`), so not in STAGE_FILES
    folder = record.get("dir")
    if ran and isinstance(folder, str) and folder and (run / folder).is_dir() and made_by(run / folder) is None:
        paths += [p.relative_to(run).as_posix() for p in (run / folder).rglob("*") if not p.is_dir()]
    note_written(run, paths)


def check_stage_outputs(run: Path, name: str, record: dict, path: Path) -> None:
    """What a finished stage wrote is still in `run` before `--resume` skips it (`path`: its record): its
    folder, the record's "dir", and its `STAGE_FILES`. A folder deleted since (to save space, or by
    hand) failed later stages with their own errors, or was drawn as an empty plot in silence (a deleted
    evidence.json: token_posteriors.png with no tokens)."""
    folder = record.get("dir")
    if folder is not None:
        expect(isinstance(folder, str) and folder != "", path, "dir", "a folder of the run", folder, DAMAGED)
    files = list(STAGE_FILES.get(name, ()))
    if name == "evaluate" and not any(r.get("kind") != "long" for r in record.get("records", [])):
        files.remove("evidence.json")  # no short-answer question: none was written
    for rel in ([folder] if folder else []) + files:
        if not (run / rel).exists():
            raise InputError(run / rel, f"missing, though {path} records the {name} stage as finished "
                             "(delete that record, and --resume runs the stage again)")


def start_run(run: Path, config: dict, resume: bool, overwrite: bool = False, names: Sequence[str] = (),
              forget: Sequence[str] = ()) -> None:
    """Mark `run` a reproduction and write its config.json. A run begun afresh (not `resume`) first
    forgets what an earlier run in the folder finished: its stage records, which a later `--resume`
    would otherwise take for this run's stages though that run's preset or seed may have differed,
    the folders of its stages `names` that a stage resumes into (`RESUMED`: RUN/rag_token, ...; a
    fresh run killed before its RAG stages left the former run's there, and the next `--resume` took
    that run's final model for its own, "done" at once), and its results and reports (`FINISHED`),
    which would stand beside this run's config until it ends. Only those the run's marker says it
    wrote (`outputs.wrote`): a user's file of such a name (RUN/jeopardy_posteriors.png beside a QA
    run, which writes none) is refused by name before anything is removed, unless `overwrite`; a
    folder of such a name is refused whatever `overwrite`. A `resume` removes only the stage records
    of `forget` (`reproduce.check_resumed_config`: another report language), once every check here
    passed (a refused resume changed the run), and checks those its end always rewrites
    (`REWRITTEN`) alike (a user's training_curves.png was replaced in silence); a user's file of a
    name the run may not write (jeopardy_posteriors.png beside a QA run) is left alone.

    config.json also records the library multiplying float32 linear layers on the CPU, the one in
    force now (`reproduce --cpu-linear`, LINEAR_KEY), and a resume with another is refused: it
    changes the digits as the thread count does (`presets.linear_difference` says why it is refused,
    not recorded per stage). A run begun before config.json recorded it goes on unchecked, and
    without the record, which would claim its earlier stages for a library they may not have used."""
    kind = current_kind()
    saved = read_run_config(run) if resume else {}
    if why := linear_difference(saved, kind):
        raise InputError(run / "config.json", f"was written with another library for float32 linear layers on the "
                         f"CPU: {why}; resume with --cpu-linear {saved[LINEAR_KEY]}, or use a new --out or drop --resume")
    # all checked before anything is removed; on --resume, those its end rewrites whatever the stages (REWRITTEN)
    doomed = finished_files(run, overwrite, REWRITTEN if resume else FINISHED, resume)
    for name in forget:
        stage_record(run, name).unlink(missing_ok=True)
    if not resume:
        for name in names:  # before the records go: a kill in between leaves records whose folder is missing, refused
            rel, made = STAGE_FOLDERS.get(name, ("", ""))
            if made in RESUMED:  # `check_rerun` found nothing of the user's in it; checked again (`discard_output`)
                discard_output(run / rel, made, LEGACY.get(made, ()), unmarked=made in UNMARKED, overwrite=overwrite,
                               what=f"the {name} stage")
        forget_stages(run)
        for path in doomed:
            path.unlink(missing_ok=True)
    mark(run, "reproduction")  # reproduce.KIND
    recorded = {LINEAR_KEY: kind} if not saved or LINEAR_KEY in saved else {}
    write_json(run / "config.json", config | recorded)
    note_written(run, ["config.json"])  # the run's own, which `swap --out RUN/config.json --overwrite` is refused


def finished_files(run: Path, overwrite: bool = False, names: Sequence[str] = FINISHED, resume: bool = False) -> list[Path]:
    """The files of `names` in `run` (`FINISHED`; a path below it too, the base preset's data/questions_a.jsonl),
    each one the run's marker says it wrote (`outputs.wrote`), or, with `overwrite`, any file; a user's file of
    such a name is refused by name otherwise (saying what would replace it: a run begun afresh, or the end of a
    `resume`, whose advice drops --resume before passing --overwrite: the command refuses the two together), and
    a folder always."""
    found = [run / name for name in names if (run / name).exists() or (run / name).is_symlink()]
    for path in found:
        if path.is_dir() and not path.is_symlink():
            raise InputError(path, "is a folder where a reproduction writes a file, which no command removes, "
                             "--overwrite or not; move it away")
        if not overwrite and not wrote(run, path.relative_to(run).as_posix()):
            fate = ("a resumed run rewrites the file of this name" if resume else
                    "a run begun afresh removes the file of this name that an earlier run wrote")
            how = "drop --resume and pass --overwrite to replace" if resume else "pass --overwrite to remove"
            raise InputError(path, f"was not written by lewisrag, and {fate}; move it away, or {how} it")
    return found


def generator(run: Path, preset: Preset, seed: int, on_progress: Progress, overwrite: bool = False) -> dict:
    """RUN/generator: pretrained here (`pretrain:<preset>`) or copied from the package (`shipped:<name>`)."""
    kind, _, name = preset.generator.partition(":")
    out = run / "generator"
    if kind == "pretrain":
        cfg = pretrain_preset(name, seed=seed, lang=preset.lang, device=preset.device)
        recipe = pretrain(cfg, out, on_step=lambda s, p, loss, em: on_progress("generator", s, cfg.steps, f"loss {loss:.3f}"),
                          overwrite=overwrite)
        return {"dir": "generator", "source": preset.generator, "final_loss": recipe["final_loss"]}

    copy_generator(shipped_generator(preset), out, require_recipe=True, overwrite=overwrite)
    return {"dir": "generator", "source": preset.generator}


def merge_stage_outputs(results: dict, stages: dict, skip_records: dict | None = None) -> dict:
    """Add what every stage contributed under "out" to `results` (a stage's "qa" adds systems beside
    the others'), its "records" (except `skip_records`'s, already there) and each stage's summary."""
    for s in stages.values():
        for key, value in s.get("out", {}).items():
            if key == "qa":
                results.setdefault("qa", {}).update(value)  # compare adds "stitched" beside the trained systems
            else:
                results[key] = value
        if s is not skip_records:
            results["records"] += s.get("records", [])
    results["stages"] = {name: {k: v for k, v in s.items() if k not in STAGE_DETAIL} for name, s in stages.items()}
    return results


STAGE_DETAIL = ("records", "out", "split", "dense", "bm25")  # in results already, under their own keys


def copy_generator(src: str | Path, out: Path, require_recipe: bool = False, overwrite: bool = False) -> None:
    """Copy what loading a generator folder reads (`model_files`: not a hub download's other weights,
    README or .cache/) to `out`, once it loads (and, with a recipe.json, its weights' sha256 matches).
    `out` is checked as `pretrain --out` is: a file the user added to an earlier generator there is
    refused, unless `overwrite`."""
    check_out_dir(out, GENERATOR_KIND, overwrite=overwrite, replaces=True)
    generator, _ = load_generator(src, require_recipe=require_recipe)  # before anything is copied
    # RAG decodes with its generation_config.json: refused here, not at the rag_token stage, naming the source
    check_generation_config(generator.generation_config, generator.config.vocab_size, generation_file(src))
    with staged_dir(out, GENERATOR_KIND) as tmp:
        for f in model_files(src):
            shutil.copy2(f, tmp / f.name)


def shipped_generator(preset: Preset) -> Path:
    """The package's generator that a `shipped:<name>` preset copies; an InputError when it is missing,
    damaged (`check_recipe`, and its recipe's config) or pretrained in another language than the preset's."""
    src = SHIPPED_DIR / preset.generator.partition(":")[2]
    lang = " --lang zh" if preset.lang == "zh" else ""
    if not (src / "recipe.json").is_file():
        raise InputError(src, f"no shipped generator here: run `lewisrag pretrain --preset small{lang} --out {src}` first")
    check_recipe(src, required=True)  # a recipe.json that is not an object, weights or tokenizer not its own
    config = read_json(src / "recipe.json").get("config")
    expect(isinstance(config, dict), src / "recipe.json", "config", "an object (the pretraining config)", config)
    made_in = config.get("lang", "en")  # recipes from before --lang were all English
    if made_in != preset.lang:
        raise InputError(src / "recipe.json", f"a generator pretrained on {made_in} text, the world is in {preset.lang}",
                         field="config.lang")
    return src


def rag(run: Path, preset: Preset, seed: int, name: str, variant: str, freeze: bool, resume: bool,
        on_progress: Progress, overwrite: bool = False, **overrides) -> dict:
    """RUN/<name>: `train_rag` on snapshot A's index with the world's train/dev splits.

    `overrides` replace RagTrainConfig fields (the base preset: its encoders, data files and steps).
    `overwrite`: a file the user added to RUN/<name> since `check_rerun` is removed with it, not refused."""
    world, out = run / "world", run / name
    cfg = replace(preset.rag, variant=variant, freeze_retriever=freeze, seed=seed, index=str(run / "index_a"),
                  encoder=str(run / "dpr"), generator=str(run / "generator"), train=str(world / "train.jsonl"),
                  dev=str(world / "dev.jsonl"), cpu=preset.rag.cpu or preset.device == "cpu")
    cfg = replace(cfg, **overrides)
    if not resume:  # `check_rerun` found nothing of the user's in it (and refused it without a marker, as this does);
        # checked again now: the stages before it ran meanwhile, and the user may have put a file there since
        discard_output(out, RAG_KIND, LEGACY[RAG_KIND], unmarked=False, overwrite=overwrite, what=f"the {name} stage")
    # resume=True continues this stage's own checkpoint, if any; root=run: the run folder may have moved since
    # (`mv RUN RUN2`), and its own index, encoder, generator and world are then the same files at their new place
    s = train_rag(cfg, out, resume=True, root=run,
                  on_progress=lambda step, steps, rec: on_progress(name, step, steps, f"loss {rec['loss']:.3f}"))
    return {"dir": name, "steps": s["steps"], "best_dev_em": s["best_em"], "n_train": s["n_train"]}


def closed_book(run: Path, preset: Preset, seed: int, on_progress: Progress, overwrite: bool = False, **overrides) -> dict:
    """RUN/closed_book: the same generator fine-tuned on the same questions without retrieval
    (`overrides` replace ClosedBookConfig fields, as `rag`'s do; `overwrite` as `rag`'s)."""
    cfg = replace(preset.closed_book, generator=str(run / "generator"), train=str(run / "world" / "train.jsonl"),
                  train_kinds=preset.rag.train_kinds, seed=seed, device=preset.device)
    cfg = replace(cfg, **overrides)
    # cheap enough to redo rather than checkpoint (`check_rerun` found nothing of the user's in it; checked again now)
    discard_output(run / "closed_book", CLOSED_BOOK_KIND, legacy=CLOSED_BOOK_LAYOUT, overwrite=overwrite,
                   what="the closed_book stage")
    s = train_closed_book(cfg, run / "closed_book",
                          lambda step, steps, rec: on_progress("closed_book", step, steps, f"loss {rec['loss']:.3f}"))
    return {"dir": "closed_book", "steps": s["steps"], "final_loss": s["final_loss"], "n_train": s["n_train"]}


# --- answering --------------------------------------------------------------------------------


def _answers(run: Path, preset: Preset, system: str, questions: Sequence[str], max_length: int,
             on_batch: Callable[[int], None], index: DenseIndex) -> list[str]:
    if system == "closed_book":
        gen, tok = load_generator(run / "closed_book" / "final", device=preset.device)
        return answer_closed_book(gen, tok, questions, max_length=max_length,
                                  max_source_length=preset.closed_book.max_source_length, on_batch=on_batch)

    model, tokenizers = load_trained(run / system, device=preset.device)
    # the K the model trained with (rag.json): the base preset caps it at the passages indexed, below the preset's
    return answer_questions(model, tokenizers, index, questions, n_docs=None, max_length=max_length, on_batch=on_batch)


def evaluate(run: Path, preset: Preset, on_progress: Progress, test_file: Path | None = None) -> dict:
    """Test split: EM, F1, ROUGE-L on short answers and ROUGE-L, BLEU-1 on long-form ones, per system
    (`test_file`: another QA file than the world's split, as the base preset's --test)."""
    asked = read_qa(test_file or run / "world" / f"{preset.eval_split}.jsonl")
    test = [ex for ex in asked if ex.answers]  # a question without an answer has nothing to score (counted below)
    short, long = [ex for ex in test if ex.kind != "long"], [ex for ex in test if ex.kind == "long"]
    qa, records, predictions = {}, [], {}
    index = DenseIndex.load(run / "index_a", mmap=True)
    place_search(index, "auto", resolve_device(preset.device))  # a Flat index is searched on the GPU where it fits, as in training
    for system in SYSTEMS:
        done = [0]

        def tick(n: int, system=system, done=done) -> None:
            done[0] += n
            on_progress(f"evaluate {system}", done[0], len(test), "")

        s_pred = _answers(run, preset, system, [ex.question for ex in short], preset.rag.max_target_length, tick, index)
        l_pred = _answers(run, preset, system, [ex.question for ex in long], preset.long_max_length, tick, index)
        # against a regular expression (CuratedTrec's) F1 and ROUGE-L measure nothing: None, left out of the means
        s_scores = [{"exact_match": answer_exact_match(p, ex), "f1": None if is_regex_answered(ex) else token_f1(p, ex.answers),
                     "rougeL": None if is_regex_answered(ex) else rouge_l(p, ex.answers)} for p, ex in zip(s_pred, short)]
        # long answers as MS MARCO's evaluation scores them: ROUGE-L (beta 1.2, P and R each the best over the
        # references) a mean over questions, BLEU-1 over the corpus; a record's bleu1 is its question's alone
        l_scores = [{"rougeL": msmarco_rouge_l(p, ex.answers), "bleu1": msmarco_bleu_1([p], [ex.answers])}
                    for p, ex in zip(l_pred, long)]
        l_bleu = msmarco_bleu_1(l_pred, [ex.answers for ex in long]) if long else None
        qa[system] = {**{m: mean([s[m] for s in s_scores]) for m in ("exact_match", "f1", "rougeL")}, "n": len(short),
                      "long": {"rougeL": mean([s["rougeL"] for s in l_scores]), "bleu1": l_bleu, "n": len(long)}}
        for ex, m in [*zip(short, s_scores), *zip(long, l_scores)]:
            records.append({"id": ex.id, "system": system, "category": ex.category, "kind": ex.kind, "metrics": m})
        predictions[system] = dict(zip([ex.id for ex in short + long], s_pred + l_pred))
    write_json(claimed(run, run / "predictions.json"), predictions)
    if short:
        write_evidence(run / "rag_token", index, short[0].question, preset.rag.max_target_length, run / "evidence.json",
                       device=preset.device, run=run)
    return {"split": preset.eval_split, "out": {"qa": qa, "test_unscored": len(asked) - len(test)}, "records": records}


def write_evidence(model_dir: Path, index, question: str, max_length: int, path: Path, device: str = "cpu",
                   run: Path | None = None) -> None:
    """`path` (RUN/evidence.json, RUN/jeopardy/evidence.json): one input's greedy output under the
    RAG-Token model in `model_dir`, with p(z | x, y_<t) per generated token (for a plot: Figure 2);
    listed in the marker of the reproduction `run`, when given, before it is written (`claimed`)."""
    model, tokenizers = load_trained(model_dir, device=device)
    answer = ask(model, tokenizers, index, question, max_length=max_length)
    with torch.no_grad():  # the full (T, K) matrix behind ask's per-token argmax
        r = model.retrieve([question], index, tokenizers)
        out = model.generate(r.context_input_ids, r.context_attention_mask, r.doc_scores, num_beams=1,
                             max_length=max_length, return_evidence=True)
    seq = out.sequences[0]
    special = set(tokenizers.generator.all_special_ids)
    shown = [t for t in range(len(seq) - 1) if int(seq[t + 1]) not in special]
    write_json(path if run is None else claimed(run, path), {
        "question": question, "answer": answer.answer,
        "passages": [{"rank": p.rank, "id": p.id, "title": p.title, "prior": p.prior} for p in answer.passages],
        # each token's piece of the answer, as `ask` shows them: decoded alone, a character split over two byte-level
        # tokens was two U+FFFD; the pieces join to the answer, one per posterior row ("" for a character's first bytes)
        "tokens": pieces_of(tokenizers.generator, [int(seq[t + 1]) for t in shown]),
        "posterior": [[round(float(x), 6) for x in out.doc_posterior[0][t]] for t in shown],  # (T', K)
    })


# --- ablations, hot swap, comparison ----------------------------------------------------------


def ablations(run: Path, preset: Preset, on_progress: Progress) -> dict:
    """Table 6 and Figure 3: test EM at test-time K for RAG-Token and RAG-Sequence, the frozen-retriever
    RAG-Token, and the trained RAG-Token reading BM25's documents instead of DPR's."""
    short = [ex for ex in read_qa(run / "world" / f"{preset.eval_split}.jsonl") if ex.answers and ex.kind != "long"]
    short = short[: preset.ablation_questions]  # the first ones, so every cell scores the same questions
    index, bm25 = DenseIndex.load(run / "index_a", mmap=True), BM25Index.load(run / "bm25_a")
    ks = [k for k in preset.test_ks if k <= len(index.passages)]
    variants = {"rag_token": ("rag_token", None), "rag_sequence": ("rag_sequence", None),
                "frozen_retriever": ("rag_token_frozen", None), "bm25_retriever": ("rag_token", bm25)}
    total, done = len(variants) * len(ks) * len(short), [0]
    em: dict[str, dict[str, float]] = {}
    for name, (model_dir, sparse) in variants.items():
        model, tokenizers = load_trained(run / model_dir, device=preset.device)
        for k in ks:
            def tick(n: int) -> None:
                done[0] += n
                on_progress("ablations", done[0], total, f"{name} K={k}")

            preds = answer_questions(model, tokenizers, index, [ex.question for ex in short], n_docs=k,
                                     max_length=preset.rag.max_target_length, bm25=sparse, on_batch=tick)
            em.setdefault(name, {})[str(k)] = mean([answer_exact_match(p, ex) for p, ex in zip(preds, short)])
    at = str(preset.rag.n_docs) if str(preset.rag.n_docs) in em["rag_token"] else str(ks[-1])
    out = {"ks": ks, "trained_k": preset.rag.n_docs, "n": len(short),
           "n_docs": {"rag_token": em["rag_token"], "rag_sequence": em["rag_sequence"]},
           **{name: {"exact_match": em[name][at], "by_k": em[name]} for name in ("frozen_retriever", "bm25_retriever")}}
    return {"out": {"ablations": out}}


def knowledge_update(run: Path, preset: Preset, on_progress: Progress) -> dict:
    """§4.5: both RAG models × indexes A and B × questions about snapshot A and snapshot B, by EM."""
    world = run / "world"
    m = swap_matrix([run / "rag_token", run / "rag_sequence"], [run / "index_a", run / "index_b"],
                    [world / "questions_a.jsonl", world / "questions_b.jsonl"], max_length=preset.rag.max_target_length,
                    on_progress=lambda _, d, t: on_progress("knowledge update", d, t, ""), device=preset.device)
    write_json(claimed(run, run / "knowledge_update.json"), m)  # with every cell's predictions
    return swap_summary(m)


def swap_summary(m: dict) -> dict:
    """The knowledge_update stage's summary of a `swap_matrix` result: its EM matrix goes to results.json's
    "knowledge_update", the questions it scored and left out, and its notes (two indexes holding the same
    passages, a model not paired with index A, ...) to the stage's summary, so that results.json and the
    report say them too, not knowledge_update.json alone."""
    return {"n_questions": m["n_questions"], "left_out": m["left_out"], "notes": m["notes"],
            "out": {"knowledge_update": m["em"]}}


def stitched(run: Path, preset: Preset, seed: int, on_progress: Progress, overwrite: bool = False) -> dict:
    """RUN/stitched: the prompt-stitching system's generator, trained on snapshot A's retrievals."""
    summary = train_stitched_stage(run, preset, seed, on_progress, overwrite=overwrite)
    return {"dir": "stitched", **{k: v for k, v in summary.items() if k != "out"}}  # "out" means results here


def compare(run: Path, preset: Preset, seed: int, on_progress: Progress, lang: str = "en") -> dict:
    """Prompt-stitching RAG beside the trained models, and every system's answer layers (report.html
    and the findings in `lang`)."""
    got = dict(compare_stage(run, preset, seed, on_progress, lang))
    html = got.pop("report_html", None)
    if html:
        write_text(claimed(run, run / "report.html"), html)
    # the judge and the splitter go into results.json's own blocks: the gate compares runs only when both match
    return {"available": True, "out": {k: got[k] for k in ("qa", "layers", "position", "judge", "splitter") if k in got},
            "records": got.get("records", []), "findings": got.get("findings", [])}
