"""`lewisrag reproduce`: the stages of the small reproduction, resumable, into one run folder.

    RUN/config.json             the preset (its "lang" is the world's language) and seed that made the run
                                (and the reports' language, "lang", when it is not English), and
                                the CPU's linear library ("cpu_linear", which a resume keeps)
    RUN/world/                  the built-in world (snapshots A and B, splits), in English or Chinese
    RUN/dpr/                    the trained DPR retriever
    RUN/index_a, RUN/index_b    dense indexes over snapshots A and B (same frozen doc encoder)
    RUN/bm25_a                  BM25 over snapshot A
    RUN/generator/              the starting BART generator (pretrained here, or the shipped one)
    RUN/rag_token, rag_sequence RAG runs on index A (train_rag's folders: log.jsonl, best/, final/)
    RUN/rag_token_frozen        RAG-Token with a frozen question encoder (Table 6's ablation)
    RUN/closed_book/            the same generator fine-tuned without retrieval (Table 1's BART row)
    RUN/stitched/               the prompt-stitching system's generator
    RUN/predictions.json        every system's test answers; RUN/evidence.json one answer's p(z|x,y_t)
    RUN/knowledge_update.json   the hot-swap matrix with every cell's predictions
    RUN/stages/<name>.json      what each finished stage produced; `--resume` skips those stages
    RUN/results.json            every number (no timings: RUN/timings.json), RUN/report.md the same
                                in words and tables, the PNG plots beside it, report.html (compare)
    RUN/.lewisrag               the marker (kind "reproduction"), listing the files above that the run wrote
                                outside its stages' folders (`stages.record_stage`): `swap --out` or `chunk --out`
                                never replaces one, --overwrite or not (`outputs.check_out_file`)

Each stage writes its outputs atomically and records itself last, so a run killed anywhere
resumes at the first unfinished stage. A run resumed with another report `lang` redoes only the stage
whose outputs hold text (`compare`: report.html and its findings), then the report; the world's
language is the preset's (`Preset.in_language`), part of what the run is. A run begun without
`--resume` in a folder that holds one first forgets that run's stage records and results, and
removes the RAG runs its stages would go on from (`stages.start_run`), so no later `--resume` mixes the two.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, fields, replace
from pathlib import Path

import psutil

from lewisrag import __version__
from lewisrag.data.cpu_linear import cpu_linear as use_cpu_linear
from lewisrag.data.cpu_linear import resolve_kind
from lewisrag.data.io import InputError, LewisragWarning, read_json, write_json
from lewisrag.data.outputs import (check_out_dir, exclusive, is_free, is_ours, note_writing, note_written, replace_dir,
                                   wrote)
from lewisrag.data.passages import SHARD_NAME, check_numbered_shards
from lewisrag.data.records import read_passages, read_qa
from lewisrag.data.tasks import statement_queries
from lewisrag.data.threads import environment, torch_threads
from lewisrag.data.world import build_world, write_world
from lewisrag.eval.reports.i18n import check_lang
from lewisrag.eval.results import FORMAT, Producer, QuestionRecord, Results, write_results
from lewisrag.experiments import stages as S
from lewisrag.experiments.base import prepare, run_base
from lewisrag.experiments.presets import Preset, comparable, read_run_config, resume_differences
from lewisrag.experiments.record_schema import check_stage_record
from lewisrag.experiments.report import plot_inputs, render_report, report_files, write_report
from lewisrag.experiments.tasks import stages as task_stages
from lewisrag.index import open_retriever, retrieval_recall
from lewisrag.index.bm25 import build_bm25_index
from lewisrag.index.dense import DenseBuildConfig, build_dense_index
from lewisrag.training.dpr import train_dpr

Progress = Callable[[str, int, int, str], None]  # (task, done, total, info)


def _run_stage(run: Path, name: str, resume: bool, fn: Callable[[], dict], on_stage,
               needs: dict[str, tuple[type, str]] | None = None) -> dict:
    """Run `fn` unless `resume` and the stage finished before; record what it returned. A record read
    back is checked (`stages.read_stage_record`, with `needs`: the fields the results take from it; then
    `record_schema.check_stage_record`: what results.json and the report read from it), and so are the
    outputs it names (`stages.check_stage_outputs`), before any stage runs or results.json is written."""
    path = S.stage_record(run, name)
    if resume and path.exists():
        result = S.read_stage_record(path, needs)
        check_stage_record(path, name, result)
        S.check_stage_outputs(run, name, result, path)
        S.record_stage(run, name, result, ran=False)  # a run begun before markers listed files lists them now
        on_stage(name, "skipped", result)
        return result
    on_stage(name, "started", {})
    t = time.perf_counter()
    result = {**fn(), "seconds": round(time.perf_counter() - t, 2)}
    write_json(path, result)
    S.record_stage(run, name, result, ran=True)  # its record and files are the run's: `swap --out` never replaces them
    on_stage(name, "done", result)
    return result


KIND = "reproduction"  # the marker kind of `lewisrag reproduce` run folders (lewisrag.data.outputs)


def reproduce(
    preset: Preset,
    out: str | os.PathLike,
    seed: int = 0,
    resume: bool = False,
    on_stage: Callable[[str, str, dict], None] = lambda *a: None,
    on_progress: Progress = lambda *a: None,
    hub_dir: str | os.PathLike | None = None,
    overwrite: bool = False,
    assets=None,
    read: dict | None = None,
    tasks: Sequence[str] = ("qa",),
    lang: str = "en",
    cpu_linear: str | None = None,
) -> dict:
    """Run every stage of the reproduction into `out` and return the results.

    A preset with hub assets (base) runs on `assets` (`experiments.base.BaseAssets`: the user's local
    checkpoints and data; `experiments.base` lists its stages). Without them it is only checked:
    every hub asset must resolve on this machine, else an InputError names the missing ones; nothing
    is written either way. `read`: what `experiments.base.prepare(assets)` returned, when the caller
    has checked the assets already (the CLI, before its progress display opens); None: they are
    prepared here. `out` must be
    missing, empty or a reproduction run, unless `overwrite`: then the run happens in a hidden
    sibling folder (`.NAME.overwrite`, where the same command resumes a killed run; one there that is
    not empty and not a reproduction is the user's, refused before anything is removed) that replaces
    `out` when every stage is done; never a folder inside another lewisrag output (`--out RUN/world`,
    `--out RUN/dpr/sub`: refused, `check_out_dir(nested=False)`), nor the shipped generator a `shipped:`
    preset copies or a folder holding it (an input of the run, `--preset` in the refusal). A resume of
    that killed run refused (other flags) advises its flags or deleting `.NAME.overwrite`, not dropping a
    --resume it was not given; a `.NAME.overwrite` another process is writing is refused by its lock
    (`exclusive`), not resumed.
    A resume of a run whose config.json is gone while its stage records remain is refused
    (`check_config_kept`). A refused `resume` never advises --overwrite alone, which the CLI refuses
    beside --resume (`check_out_dir(resume=True)`, `stages.check_rerun`).
    In a reproduction run, the folders its stages replace (RUN/dpr, RUN/rag_token, ...: all of them, or
    with `resume` those of the stages still to run) are checked before anything is removed
    (`stages.check_rerun`): a file the user added to one is refused by name, unless `overwrite`.
    `tasks` beyond "qa" add the stages of `experiments.tasks` (Jeopardy, FEVER) after the QA ones.
    `lang` ("en" or "zh") is the language of report.md, report.html and the plots' labels; config.json
    records it when it is not English. `cpu_linear` ("auto", "blas", "onednn"; None: $LEWISRAG_CPU_LINEAR,
    else auto) is the library that multiplies float32 linear layers on the CPU (`data.cpu_linear`:
    oneDNN where torch's MKL runs at half speed); results.json's `environment` and config.json record it,
    and a resume with another is refused (`stages.start_run`).
    """
    check_lang(lang)
    linear = resolve_kind(cpu_linear)
    if preset.hub and assets is None:
        return {"validated": check_hub_assets(preset.hub, hub_dir)}
    if preset.hub and read is None:
        read = prepare(assets, preset.hub)  # every flag, path and file, before the run folder is made

    if not 0 <= seed < 2**32:  # numpy's seed range; else a traceback after the first stages
        raise InputError("--seed", f"must be between 0 and 2**32 - 1, got {seed}")
    given = {} if assets is None or resume else {"--" + f.name.replace("_", "-"): getattr(assets, f.name)
                                                 for f in fields(assets) if isinstance(getattr(assets, f.name), str)}
    if preset.generator.startswith("shipped:"):  # the package's generator the run copies (`stages.shipped_generator`):
        # --out there, --overwrite, replaced it with the finished run, and every later run of the preset was refused
        given["--preset"] = S.SHIPPED_DIR / preset.generator.partition(":")[2]
    out = check_out_dir(out, KIND, overwrite=overwrite, inputs=given, nested=False, resume=resume)
    run = out if is_free(out, KIND) else out.with_name(f".{out.name}.overwrite")
    if not is_free(run, KIND):  # the staging folder (`out` itself is free) is the user's: taken over, it lost
        # its files of the run's names (results.json, ...) before the world stage refused it
        raise InputError(run, "is where --overwrite stages its run beside --out, and is not empty and not a "
                         "reproduction a killed --overwrite run left there; lewisrag never takes it over: move it away",
                         field="--out")
    # held before the staging folder is taken for a killed run's: one that another process was writing was
    # called killed, and the advice to delete it, followed, destroyed a live run
    with exclusive(run):  # two runs into one folder would mix their stages' files
        staged = run != out and is_ours(run, KIND)
        if staged:         # an --overwrite run killed before it replaced `out`: the same command
            resume = True  # goes on with its finished stages, as `train rag --overwrite` does
            # said, since a refusal of that run (other settings, inputs changed) would advise dropping a --resume
            # this call was not given (`_staged_advice` rewrites that advice)
            warnings.warn(LewisragWarning(f"resuming the killed --overwrite run in {run}: its finished stages are kept "
                                          "(delete that folder to start afresh)"))
        try:
            check_config_kept(run, resume)
            threads = run_threads(preset, run, resume)
            with torch_threads(threads), use_cpu_linear(linear):
                found = _stamps(run)  # the results and plots there before the run: one it leaves untouched is not its own
                if preset.hub:
                    results = _finish(run, *run_base(preset, run, seed, resume, threads, assets, read, _run_stage,
                                                     on_stage, on_progress, lang, overwrite=overwrite), on_stage, found)
                else:
                    results = _reproduce(preset, run, seed, resume, threads, on_stage, on_progress, tuple(tasks), lang,
                                         overwrite, found)
        except InputError as e:
            if staged and DROP_RESUME.search(e.message):
                raise _staged_advice(e, run) from None
            raise
    if run != out:
        replace_dir(run, out, record=False)  # its marker lists what the run wrote (`stages.record_stage`), not its stages' folders
    return results


# the advice of a refused resume (another seed, preset, --cpu-linear, changed assets: `check_resumed_config`,
# `stages.start_run`, `base.run_base`), which does not apply to a killed --overwrite run the command resumed by itself
DROP_RESUME = re.compile(r"drop --resume(?: to run every stage again)?")


def _staged_advice(error: InputError, run: Path) -> InputError:
    """`error`, a refused resume of the killed --overwrite run in `run` (`.NAME.overwrite`), which `reproduce`
    resumes without --resume: "drop --resume" would change nothing (the run is resumed all the same), so it
    says what does: the killed run's flags finish it, and deleting `run` starts afresh (the next --overwrite
    run begins a new one there)."""
    advice = (f"delete {run} to start afresh (the --overwrite run killed there, which this command resumes without "
              "--resume: rerun with that run's flags to finish it)")
    return InputError(error.source, DROP_RESUME.sub(lambda _: advice, error.message), error.line, error.field)


def check_config_kept(run: Path, resume: bool) -> None:
    """On `resume`, a run with stage records must still have its config.json: the preset, seed and
    settings those records were made with, which a resume compares with its own (`check_resumed_config`,
    `base.run_base`). Without it nothing was compared: every finished stage was skipped and the new
    flags' config.json written over records made with others (`--resume --seed 5` on a seed-0 run, exit 0)."""
    if not resume or (run / "config.json").exists():
        return
    records = sorted(name for name in S.STAGE_NAMES if S.stage_record(run, name).exists())
    if records:
        raise InputError(run / "config.json", f"missing, though {run / 'stages'} holds records of finished "
                         f"stages (such as {records[0]}.json): a resume cannot tell which preset and seed made them; "
                         "use a new --out or drop --resume to run every stage again")


def run_threads(preset: Preset, run: Path, resume: bool) -> int | None:
    """torch's CPU threads for the run: the preset's, or (threads=0) the CPUs idle when it starts.

    Decided once and recorded in RUN/config.json, since float results depend on the thread count:
    a resumed run keeps the count it started with. Counting idle CPUs, not all of them, is what
    keeps a loaded machine from slowing down badly: OpenMP threads that share a busy core wait on
    each other (measured with DPR training and a busy loop on one of two cores: 2 threads 36 s,
    1 thread 23 s; idle, 14 s and 21 s). Two processes of one thread each were tried for the
    stages that could run side by side, and lost: on two idle cores the stitched generator trained
    in 725 s beside the RAG stages against about 310 s alone on two threads.
    """
    if preset.threads != 0:
        return preset.threads
    saved = run / "config.json"
    if resume and saved.is_file():
        threads = read_run_config(run).get("threads")
        if isinstance(threads, int) and threads > 0:
            return threads
    return idle_cpus()


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def idle_cpus(seconds: float = 2.0) -> int:
    """How many of this process's CPUs are idle, measured over `seconds` (at least 1; `free_cpus`)."""
    busy = sum(psutil.cpu_percent(interval=seconds, percpu=True)) / 100  # in CPUs, over the whole machine
    usable = _cpus()
    return free_cpus(busy, psutil.cpu_count() or usable, usable)


def free_cpus(busy: float, total: int, usable: int) -> int:
    """The CPUs left to this process when other work keeps `busy` of the machine's `total` busy: a CPU
    counts as taken only when other work holds three quarters of one (a busy loop holds all of it),
    so that a moment's activity — a shell, the OS — does not halve a run's threads (an idle 2-core
    machine once measured 0.6 busy over half a second, and its demo ran on one thread).

    >>> free_cpus(0.6, 2, 2), free_cpus(0.8, 2, 2), free_cpus(1.02, 2, 2), free_cpus(2.0, 2, 2), free_cpus(0.0, 16, 4)
    (2, 1, 1, 1, 4)
    """
    taken = math.floor(busy + 0.25)
    return max(1, min(usable, total - taken))


def check_resumed_config(run: Path, config: dict, resume: bool, what: str, text_stages: Sequence[str] = ()) -> tuple[str, ...]:
    """On `resume`, the run's config.json must be `config` (`what` says which flags make it), the language
    and the device aside (`comparable`): a run resumed in another language forgets its `text_stages`,
    which are redone in the new one. Returns those stages, for `stages.start_run` to forget once its own
    checks passed too: removed here, a resume it then refused (another --cpu-linear) had changed the run."""
    saved = read_run_config(run) if resume and (run / "config.json").exists() else None
    if saved is None:
        return ()
    if comparable(saved) != comparable(config):
        raise InputError(run / "config.json", f"was written by another {what}: "
                         f"{'; '.join(resume_differences(saved, config))}; use a new --out or drop --resume")
    return tuple(text_stages) if saved.get("lang", "en") != config.get("lang", "en") else ()


def with_lang(config: dict, lang: str) -> dict:
    """`config` with the reports' language, recorded only when it is not English (older runs' configs stay as they were)."""
    return config | ({"lang": lang} if lang != "en" else {})


def _reproduce(preset: Preset, run: Path, seed: int, resume: bool, threads: int | None, on_stage,
               on_progress: Progress, tasks: tuple[str, ...] = ("qa",), lang: str = "en", overwrite: bool = False,
               found: dict | None = None) -> dict:
    if preset.generator.startswith("shipped:"):
        S.shipped_generator(preset)  # missing: say so now, not after the retriever stages
    if preset.lang != "en" and tasks[1:]:
        raise InputError("--tasks", f"{', '.join(tasks[1:])}: the tasks' templates are English only; run them with --lang en")
    config = {"preset": asdict(preset), "seed": seed, "threads": threads} | ({"tasks": list(tasks)} if tasks != ("qa",) else {})
    config = json.loads(json.dumps(with_lang(config, lang)))  # as read back
    ow = overwrite
    plan: list[tuple[str, Callable[[], dict], dict | None]] = [  # (stage, what it runs, the fields its record needs)
        ("world", lambda: _world(run, preset, seed), None),
        ("dpr", lambda: train_world_dpr(run, preset, seed, on_progress, overwrite=ow), None),
        *((f"index_{snap}", lambda s=snap: world_index(run, preset, s, on_progress, overwrite=ow), None) for snap in "ab"),
        ("bm25_a", lambda: _bm25(run, ow), None),
        ("retrieval", lambda: _retrieval(run, preset, on_progress), RETRIEVAL_NEEDS),
        ("generator", lambda: S.generator(run, preset, seed, on_progress, ow), None),
        *((name, lambda n=name, v=variant, f=frozen: S.rag(run, preset, seed, n, v, f, resume, on_progress, ow), None)
          for name, variant, frozen in (("rag_token", "token", False), ("rag_sequence", "sequence", False),
                                        ("rag_token_frozen", "token", True))),
        ("closed_book", lambda: S.closed_book(run, preset, seed, on_progress, ow), None),
        ("evaluate", lambda: S.evaluate(run, preset, on_progress), None),
        ("ablations", lambda: S.ablations(run, preset, on_progress), None),
        ("knowledge_update", lambda: S.knowledge_update(run, preset, on_progress), None),
        ("stitched", lambda: S.stitched(run, preset, seed, on_progress, ow), None),
        ("compare", lambda: S.compare(run, preset, seed, on_progress, lang), None),
    ]
    if tasks[1:]:  # the tasks' retriever (experiments.tasks explains why they have their own), then each task
        plan.append(("tasks_dpr", lambda: train_world_dpr(run, preset, seed, on_progress, out="tasks/dpr", statements=True,
                                                          overwrite=ow), None))
        plan += [(f"tasks_index_{snap}", lambda s=snap: world_index(run, preset, s, on_progress, "tasks/dpr",
                                                                   f"tasks/index_{s}", overwrite=ow), None) for snap in "ab"]
    for task in tasks[1:]:
        plan += [(name, fn, None) for name, fn in task_stages(run, preset, seed, task, resume, on_progress, ow)]
    # every folder a stage will replace, before anything is removed: a file the user added to the last of
    # them is refused now, not once the stages before it were redone (and their folders' files lost)
    names = [name for name, _, _ in plan]
    S.check_rerun(run, names, resume, overwrite)
    forget = check_resumed_config(run, config, resume, "preset, seed or --tasks", text_stages=("compare",))
    S.start_run(run, config, resume, overwrite, names=names, forget=forget)
    stages = {}
    for name, fn, needs in plan:
        stages[name] = _run_stage(run, name, resume, fn, on_stage, needs)

    return _finish(run, _assemble(config, stages), stages, on_stage, found)


def _finish(run: Path, results: dict, stages: dict, on_stage, found: dict | None = None) -> dict:
    """results.json, timings.json and the report (always redone: cheap, and it must describe these results).
    `found` (`_stamps`): the run's results and plots as it found them; by default, as they are now."""
    before = _stamps(run) if found is None else found
    # the plots' inputs read and the report's text rendered first: a damaged log.jsonl, or results the
    # report cannot describe, stop the run before anything is written, not once a new results.json lies
    # beside the last run's report.md
    inputs = plot_inputs(run, results)
    text = render_report(results)
    # listed before they are written (those not there, or the run's already): listed only at the end, the
    # results.json a kill had left before it was refused by the next rerun, --resume or not, as the user's
    note_writing(run, ["results.json", "timings.json", *report_files(results)])
    write_results(run / "results.json", _as_results(_without_timings(results)))
    write_json(run / "timings.json", {name: s["seconds"] for name, s in stages.items()})
    on_stage("report", "started", {})
    t = time.perf_counter()
    write_report(run, results, inputs, text)
    # the run's own (`check_out_file`): those written since it began (RUN/position.png by the compare stage too), and
    # those its marker lists already; not a user's file of such a name it did not write (the user's
    # jeopardy_posteriors.png beside a QA run, kept on --resume)
    note_written(run, [name for name in S.FINISHED
                       if (now := _stamp(run / name)) is not None and (now != before[name] or wrote(run, name))])
    on_stage("report", "done", {"seconds": round(time.perf_counter() - t, 2)})
    return results


def _stamps(run: Path) -> dict:
    """`_stamp` of each of the run's results and plots (`stages.FINISHED`)."""
    return {name: _stamp(run / name) for name in S.FINISHED}


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """What tells a file rewritten since from the same file untouched (a write replaces it, a new inode)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _assemble(config: dict, stages: dict) -> dict:
    """results.json: what every stage contributed under "out", the records, and each stage's summary."""
    r = stages["retrieval"]
    results = {
        "lewisrag": {"kind": "reproduce", "version": _version(), "format": FORMAT},
        "config": config,
        "environment": environment(config["preset"]["device"]),
        "retrieval": {"split": r["split"], **r["dense"], "bm25": r["bm25"]},
        "records": list(r["records"]),  # per question and system, for `lewisrag gate`
    }
    return S.merge_stage_outputs(results, stages, skip_records=r)


def check_hub_assets(hub: Sequence[str], hub_dir: str | os.PathLike | None = None) -> dict[str, str]:
    """Where each "model:<repo>" / "dataset:<repo>" lives locally: `hub_dir/<repo>` (or $LEWISRAG_HUB_DIR),
    else the Hugging Face cache, holding what its loader reads first (`_holds`). Raises one InputError
    naming every missing asset."""
    roots = [Path(d) for d in (hub_dir, os.environ.get("LEWISRAG_HUB_DIR")) if d]
    hf_home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    cache = Path(os.environ.get("HF_HUB_CACHE", hf_home / "hub"))
    found, missing = {}, []
    for asset in hub:
        kind, _, repo = asset.partition(":")
        local = [root / repo for root in roots]
        cached = cache / f"{kind}s--{repo.replace('/', '--')}" / "snapshots"
        hit = next((p for p in local if _holds(kind, p)), None)
        if hit is None and cached.is_dir() and any(_holds(kind, s) for s in cached.iterdir()):
            hit = cached
        if hit is None:
            partial = next((p for p in local + [cached] if p.is_dir() and any(p.iterdir())), None)
            what = "config.json and model.safetensors" if kind == "model" else ".parquet or .arrow data files"
            missing.append(f"{kind} {repo}" + (f" ({partial} holds no {what})" if partial else ""))
        else:
            found[asset] = str(hit)
    if missing:
        where = ", ".join([str(r) for r in roots] + [str(cache)])
        raise InputError("--preset base", f"missing locally: {'; '.join(missing)} (looked in {where}; "
                         "download them where the hub is reachable, or pass --hub-dir DIR holding DIR/<repo>)")
    return found


def _holds(kind: str, folder: Path) -> bool:
    """Whether `folder` holds what loading an asset of `kind` reads first: a model's config.json and
    safetensors weights (one file or an index of shards), a data set's Parquet or Arrow files (a
    folder with only a README, an interrupted download, passes no more)."""
    if not folder.is_dir():
        return False
    if kind == "model":
        return (folder / "config.json").is_file() and any(
            (folder / f).is_file() for f in ("model.safetensors", "model.safetensors.index.json"))
    return any(f.suffix in (".parquet", ".arrow") for f in folder.rglob("*"))


def check_asset_files(asset: str, where: Path) -> None:
    """What loading reads first from a hub asset `check_hub_assets` found at `where` (DIR/<repo>, or
    the cache's snapshots folder: one snapshot must pass), checked without loading it: a model's
    config.json names its model_type and its safetensors headers parse, covering every tensor they
    list (`data.pretrained.check_weights`); a data set's files are not empty, its Parquet files
    framed by their magic bytes. `check_hub_assets` finds an asset by its files' names alone, so a
    0-byte model.safetensors or a `{}` config.json reads as found there; `reproduce --preset base
    --hub-dir DIR` (the check alone) runs this on each asset it found."""
    folders = sorted(d for d in where.iterdir() if d.is_dir()) if where.name == "snapshots" else [where]
    first = None
    for folder in folders:
        try:
            (_check_model if asset.startswith("model:") else _check_dataset)(asset, folder)
            return
        except InputError as e:
            first = first or e
    if first is None:
        raise InputError(where, f"{asset}: no snapshot folder in the Hugging Face cache")
    raise first


def _check_model(asset: str, folder: Path) -> None:
    from lewisrag.data.pretrained import check_weights, load_tokenizer

    what = asset.replace(":", " ", 1)
    check_weights(folder, what)  # config.json a JSON object, every safetensors header read; no tensor loaded
    model_type = read_json(folder / "config.json").get("model_type")
    if not isinstance(model_type, str) or not model_type.strip():
        raise InputError(folder / "config.json", f"{what}: no model_type, which loading reads first: not a transformers "
                         "model's config.json (a download cut short?)", field="model_type")
    # the tokenizer files a run refuses the folder without (tokenizer.json, or a vocabulary), loading none:
    # `--include "*.safetensors"` downloads leave them out
    load_tokenizer(lambda _: None, folder, f"{what} tokenizer")


def _check_dataset(asset: str, folder: Path) -> None:
    what = asset.replace(":", " ", 1)
    files = sorted(f for f in folder.rglob("*") if f.suffix in (".parquet", ".arrow") and f.is_file())
    if not files:
        raise InputError(folder, f"{what}: holds no .parquet or .arrow data files")
    # each set of numbered shards whole (a run refuses wiki_dpr's folder without one), a set at a time: the
    # hub keeps a data set's splits side by side (nq_open's train-... and validation-...)
    sets: dict[tuple[Path, str], list[Path]] = {}
    for f in files:
        if f.suffix == ".parquet" and (m := SHARD_NAME.match(f.stem)) is not None:
            sets.setdefault((f.parent, m["stem"]), []).append(f)
    for shards in sets.values():
        try:
            check_numbered_shards(shards)
        except InputError as e:
            raise InputError(e.source, f"{what}: {e.message}") from None
    for f in files:
        size = f.stat().st_size
        if size == 0:
            raise InputError(f, f"{what}: empty file (a download cut short?)")
        if f.suffix == ".parquet":
            with open(f, "rb") as fh:
                head = fh.read(4)
                fh.seek(max(size - 4, 0))
                tail = fh.read(4)
            if size < 12 or head != b"PAR1" or tail != b"PAR1":
                raise InputError(f, f"{what}: not a Parquet file (no PAR1 magic bytes at both ends): truncated or damaged")


def _world(run: Path, preset: Preset, seed: int) -> dict:
    world = build_world(seed=seed, entities=preset.entities, lang=preset.lang)
    write_world(world, run / "world")
    return {"dir": "world", "summary": read_json(run / "world" / "world.json")["passages"]}


def train_world_dpr(run: Path, preset: Preset, seed: int, on_progress: Progress, out: str = "dpr",
                    statements: bool = False, overwrite: bool = False) -> dict:
    """RUN/<out>: DPR trained on the world's training questions (and, with `statements`, their
    reference statements too: the retriever of `--tasks`, experiments.tasks)."""
    cfg = replace(preset.tasks_dpr if statements and preset.tasks_dpr else preset.dpr, seed=seed, device=preset.device)
    passages, train = read_passages(run / "world" / "passages_a.jsonl"), read_qa(run / "world" / "train.jsonl")
    queries = train + statement_queries(train) if statements else train
    meta = train_dpr(cfg, queries, passages, run / out, lambda s, loss: on_progress(out, s, cfg.steps, f"loss {loss:.3f}"),
                     overwrite=overwrite)
    return {"dir": out, "final_loss": meta["final_loss"], "ctx_fingerprint": meta["ctx_fingerprint"]} | (
        {"n_queries": len(queries)} if statements else {})


def world_index(run: Path, preset: Preset, snap: str, on_progress: Progress, encoder: str = "dpr", out: str = "",
                overwrite: bool = False) -> dict:
    """RUN/<out> (default index_<snap>): snapshot `snap`'s passages encoded by RUN/<encoder>'s context encoder."""
    out = out or f"index_{snap}"
    passages = read_passages(run / "world" / f"passages_{snap}.jsonl")
    manifest = build_dense_index(passages, run / encoder, run / out, DenseBuildConfig(factory=preset.index_factory,
                                                                                     device=preset.device),
                                 lambda stage, d, t: on_progress(f"{out} {stage}", d, t, ""), overwrite=overwrite)
    return {"dir": out, "n_passages": manifest["n_passages"], "content_hash": manifest["content_hash"]}


def _bm25(run: Path, overwrite: bool = False) -> dict:
    manifest = build_bm25_index(read_passages(run / "world" / "passages_a.jsonl"), run / "bm25_a", overwrite=overwrite)
    return {"dir": "bm25_a", "n_passages": manifest["n_passages"]}


# what `_assemble` takes from the retrieval stage's record (its records are checked with every stage's)
RETRIEVAL_NEEDS = {"split": (str, "a split name"), "dense": (dict, "an object of recall@k"),
                   "bm25": (dict, "an object of recall@k"), "records": (list, "a list of records")}


def _retrieval(run: Path, preset: Preset, on_progress: Progress) -> dict:
    examples = read_qa(run / "world" / f"{preset.eval_split}.jsonl")
    out = {"split": preset.eval_split, "records": []}
    for name, path in (("dense", run / "index_a"), ("bm25", run / "bm25_a")):
        done = [0]

        def tick(n: int, name=name, done=done) -> None:
            done[0] += n
            on_progress(f"recall ({name})", done[0], len(examples), "")

        r = retrieval_recall(open_retriever(path), examples, preset.ks, on_batch=tick)
        # The table is hit@k, a gold passage among the top k (DPR's top-k accuracy counts an answer string:
        # scoring.retrieval.answer_recall); the per-question records the gate compares hold plain recall, as every evaluator record does (lewisrag.scoring.retrieval).
        out[name] = {"n": r["n"], **{f"recall_at_{k}": r[f"hit@{k}"] for k in preset.ks}}
        category = {ex.id: ex.category for ex in examples}
        for qid, recall in r["per_question"].items():
            out["records"].append({"id": qid, "system": name, "category": category[qid], "metrics": {"recall_at_k": recall}})
    out["dense"]["recall_at_k"] = out["dense"][f"recall_at_{max(k for k in preset.ks if k <= 5)}"]
    return out


def _as_results(results: dict) -> Results:
    """The assembled dict as `Results` (`lewisrag.eval.results`), the one way a results.json is written."""
    sections = {k: v for k, v in results.items() if k not in ("lewisrag", "config", "records", "judge", "splitter")}
    return Results(Producer("reproduce", _version()), results["config"], [QuestionRecord.of(r) for r in results["records"]],
                   results.get("judge"), results.get("splitter"), sections=sections)


def _without_timings(results: dict) -> dict:
    """results.json holds no wall-clock numbers, so the same seed gives the same file."""
    return {**results, "stages": {n: {k: v for k, v in s.items() if k != "seconds"} for n, s in results["stages"].items()}}


def _version() -> str:
    return __version__
