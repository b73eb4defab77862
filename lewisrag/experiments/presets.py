"""Presets of `lewisrag reproduce`: sizes and schedules, each field with its reason."""

from __future__ import annotations

import json
import os
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass, replace
from pathlib import Path

from lewisrag.data.io import InputError, expect, given_once, is_count, read_json
# TASKS: the --tasks values, those the training runs know; qa is the reproduction every other task builds on
from lewisrag.training.configs import TASKS, ClosedBookConfig, DPRTrainConfig, RagTrainConfig


def parse_tasks(text: str) -> tuple[str, ...]:
    """The comma-separated --tasks value, in TASKS order; qa must be among them.

    >>> parse_tasks("fever,qa")
    ('qa', 'fever')
    """
    asked = [t.strip() for t in text.split(",") if t.strip()]
    given_once("--tasks", asked)
    unknown = [t for t in asked if t not in TASKS]
    if unknown:
        raise InputError("--tasks", f"unknown task '{unknown[0]}' (one of {', '.join(TASKS)})")
    if "qa" not in asked:
        raise InputError("--tasks", "must include qa: the other tasks use its world, retriever, indexes and generator")
    return tuple(t for t in TASKS if t in asked)


@dataclass(frozen=True)
class TaskSchedule:
    """How `reproduce --tasks` trains one of the paper's other tasks (experiments.tasks): both RAG
    variants start from the QA runs' generator and DPR (for FEVER, that generator after
    `verifier_steps` of training.verifier); the closed-book baseline from the same generator."""

    steps: int = 12  # RAG optimizer steps (batch and K as the QA runs')
    lr: float = 1e-3
    retriever_lr_scale: float = 1.0  # the question encoder's learning rate as a multiple of lr
    closed_book_steps: int = 12
    closed_book_lr: float = 1e-3
    max_target_length: int = 16  # output tokens with the start and end tokens: a whole clue for Jeopardy
    eval_questions: int = 16  # dev examples scored at the end of training
    verifier_steps: int = 0  # FEVER: fresh minimal-pair claims that teach the generator to compare first (0: none)


@dataclass(frozen=True)
class Preset:
    name: str
    entities: int  # world size: entities (about two passages each)
    dpr: DPRTrainConfig  # retriever schedule
    index_factory: str = "Flat"  # FAISS factory of the dense indexes (exact search at these sizes)
    eval_split: str = "test"  # recall and QA are measured on this split: its entities never appear in training questions
    ks: tuple[int, ...] = (1, 5, 20)  # recall cut-offs
    generator: str = "pretrain:tiny"  # "pretrain:<pretrain preset>" trains one here; "shipped:<name>" copies lewisrag/pretrained/<name>
    rag: RagTrainConfig = field(default_factory=RagTrainConfig)  # RAG schedule and K (paths are filled in by the run)
    closed_book: ClosedBookConfig = field(default_factory=ClosedBookConfig)  # the no-retrieval baseline's schedule
    test_ks: tuple[int, ...] = (1, 2, 5, 10)  # test-time K of the ablations (Figure 3), capped at the index size
    ablation_questions: int | None = None  # first N short test questions per ablation cell (None: all); 16 cells each
    stitched_steps: int = 200  # prompt-stitching generator's schedule (the compare stage)
    stitched_lr: float = 1e-4
    stitched_batch_size: int = 8
    stitched_k: int = 5  # passages stitched into one input
    stitched_gold_position: str = "random"  # where training puts the gold passage: "random", or "retrieved" (its rank)
    stitched_cite_first: bool = False  # targets cite the gold passage before the answer ("[3] answer"), not after
    position_questions: int = 200  # short test questions of the position probe (x k positions each)
    long_max_length: int = 64  # decoded tokens for long-form answers (short ones use rag.max_target_length)
    threads: int | None = None  # torch CPU threads (None: torch's default; 0: the CPUs idle when the run starts,
    # recorded in config.json); float results depend on the count
    device: str = "auto"  # where DPR, pretraining, FEVER's verifier, the RAG, closed-book and stitched runs train and every
    # system answers: "auto" (a GPU when one is visible), "cpu" or "cuda"
    tasks: dict = field(default_factory=lambda: {"jeopardy": TaskSchedule(max_target_length=40), "fever": TaskSchedule(verifier_steps=4)})
    # the schedules of `--tasks jeopardy,fever`, by task
    tasks_dpr: DPRTrainConfig | None = None  # the tasks' retriever's schedule (experiments.tasks); None: `dpr`'s
    hub: tuple[str, ...] = ()  # "model:<repo>"/"dataset:<repo>" the recipe names; non-empty: runs on the user's local
    # assets (experiments.base), or with only --hub-dir checks that these resolve locally
    notes: str = ""
    lang: str = "en"  # the world's language ("zh": `reproduce --lang zh`, see in_language)
    lang_overrides: dict = field(default_factory=dict)  # language -> fields that differ on that world (a dict of
    # changes for a config field), where the same schedule costs more time there

    def in_language(self, lang: str) -> Preset:
        """This (English) preset on the world in `lang`: a shipped generator `shipped:<name>` becomes
        `shipped:<name>-zh` (`lewisrag pretrain --lang zh` built it), a generator pretrained here is
        pretrained in `lang`, and `lang_overrides[lang]` applies. Jeopardy and FEVER have English
        templates only (experiments.tasks)."""
        if lang not in ("en", "zh"):
            raise InputError("--lang", f"must be en or zh, got {lang!r}")
        if lang == self.lang:
            return self
        if self.lang != "en":
            raise ValueError(f"the {self.name} preset is already in {self.lang}: change language from the English one")
        if self.hub:
            raise InputError("--lang", f"the {self.name} preset runs on your own data; --lang sets the built-in world's language")
        kind, _, name = self.generator.partition(":")
        generator = f"shipped:{name}-{lang}" if kind == "shipped" else self.generator
        changes = {k: replace(getattr(self, k), **v) if isinstance(v, dict) else v
                   for k, v in self.lang_overrides.get(lang, {}).items()}
        return replace(self, lang=lang, generator=generator, **changes)


# The small preset's retriever schedule. 800 DPR steps: recall@1 0.979 when chosen (900: 0.972, one run each).
_SMALL_DPR = DPRTrainConfig(steps=800, self_negatives_at=0.5)

PRESETS: dict[str, Preset] = {
    # The smoke test: every stage runs, on a world small enough for the default test suite.
    "tiny": Preset(
        name="tiny",
        entities=60,
        dpr=DPRTrainConfig(vocab_size=1000, hidden_size=32, layers=1, heads=2, batch_size=16, steps=30),
        rag=RagTrainConfig(n_docs=3, steps=12, batch_size=8, lr=1e-3, eval_every=6, eval_questions=16,
                           save_every=12, max_combined_length=128, max_target_length=16),
        closed_book=ClosedBookConfig(steps=12, batch_size=8, lr=1e-3, max_target_length=16),
        stitched_steps=12, stitched_lr=1e-3, stitched_k=3,
        long_max_length=24,
        threads=1,  # models this small run faster on one thread, and the same on every machine
        notes="smoke test: numbers are not meaningful",
    ),
    # The demo: the default world, a small DPR trained from scratch, the shipped pretrained generator.
    # Measured on this world (docs/recipe.md, "Fine-tuning"): the shipped generator already reads a
    # gold passage, so what decides exact match is the retriever's first hit. Self-mined negatives
    # from halfway through DPR training lift test recall@1 from 0.87 to 0.97; RAG fine-tuning then
    # keeps the reader (a gentle lr, short-answer questions: the long-form targets, 5x longer,
    # dominate the summed NLL and overwrite the short-answer reader).
    "small": Preset(
        name="small",
        entities=2000,
        # No dropout of attention probabilities: with it the CPU's attention leaves its fused kernel for
        # the plain one plus a dropout mask, 84 ms against 25 ms forward and backward for one layer at
        # batch 96 on 2 cores. In the whole demo on seed 0 (README): DPR's stage 236 s -> 165 s, test
        # recall@1 0.967 -> 0.989.
        dpr=replace(_SMALL_DPR, attention_dropout=0.0),
        generator="shipped:generator-small",
        # about 0.14 s per RAG step at batch 8, K=5 on 2 cores
        rag=RagTrainConfig(n_docs=5, steps=300, batch_size=8, lr=5e-5, train_kinds="short", eval_every=100,
                           eval_questions=100, save_every=100, max_combined_length=192, max_target_length=48),
        closed_book=ClosedBookConfig(steps=500, batch_size=8, lr=3e-4, max_target_length=48),
        # in retrieval order, so the reader learns the ranks it will see; at random positions a reader
        # this small blends passages instead of choosing one (docs/recipe.md). 3 passages cost 84 ms
        # a step against 130 ms for 5 (it answers from passage [1] either way); test EM on one run's
        # index by lr (3,000 steps): 2.5e-4 0.889, 5e-4 0.902, 1e-3 0.895, 1.5e-3 0.877. On another
        # run's index at 5e-4, citing after the answer: 3,000 steps 0.897, 4,500 0.903-0.909, 6,000
        # 0.898, batch 16 0.891, 2 passages 0.896; citing first ("[1] answer"): 0.914 at 4,500 steps
        # with seeds 0 and 1, 0.903 at 3,000 (fewer copy errors of names read from passage [1])
        stitched_steps=4500, stitched_cite_first=True, stitched_lr=5e-4, stitched_gold_position="retrieved", stitched_k=3,
        ablation_questions=200,  # 16 cells (4 variants x 4 K) of decoding, up to K=10: bounded on a CPU
        # --tasks (docs/recipe.md, "The paper's other tasks"): a livelier lr than QA's, since a clue or a
        # label is a new output for the QA reader; the question encoder at a tenth of it (at the full lr the
        # FEVER runs' retrieval collapsed within 50 steps: recall of the evidence 0.64 -> 0.03)
        tasks={"jeopardy": TaskSchedule(steps=600, lr=3e-4, retriever_lr_scale=0.1, closed_book_steps=600,
                                        closed_book_lr=3e-4, max_target_length=40, eval_questions=100),
               # FEVER starts from the generator taught to compare on fresh minimal pairs (training.verifier:
               # 0.957 of the dev claims read with their gold passage after 3,500 steps); then 3e-4, where 1e-3
               # and 3e-4 from the plain reader both stayed at chance between SUPPORTS and REFUTES
               "fever": TaskSchedule(steps=600, lr=3e-4, retriever_lr_scale=0.1, closed_book_steps=600,
                                     closed_book_lr=1e-3, max_target_length=8, eval_questions=200,
                                     verifier_steps=3500)},
        # the tasks' retriever keeps BERT's attention dropout: without it (one run, AdamW fused) FEVER's
        # evidence in the top 1 fell from 0.82 to 0.74 and its 3-way accuracy from 0.867 to 0.803 (target 0.85)
        tasks_dpr=_SMALL_DPR,
        threads=0,  # the idle CPUs: 2 threads for DPR on an idle 2-core machine, 1 when another job holds a core
        # The Chinese world (--lang zh) costs more per step (DPR 0.40 s against 0.28, RAG 0.22 s against 0.12,
        # the stitched reader likewise): with this schedule it took 18.5 minutes. Shorter there, within 15: its
        # RAG runs' best dev EM came at step 100 (0.94 / 0.95) and DPR's test recall@1 was 0.973 at 800 steps.
        # The stitched reader keeps the English schedule: citing first, 4,500 steps gave 0.885 on one Chinese
        # run's index against 0.863 at 2,000 (RAG-Sequence 0.935).
        lang_overrides={"zh": {"dpr": {"steps": 600}, "rag": {"steps": 200}}},
        notes="the demo: a scratch DPR with self-mined negatives, the shipped generator, gentle RAG fine-tuning",
    ),
    # The paper's recipe on GPUs: real checkpoints and data, local copies passed as flags
    # (--question-encoder ... --passages; experiments/base.py); --steps, --max-train and
    # --max-passages make a small reproduction of it. The hub names are what the recipe means.
    "base": Preset(
        name="base",
        entities=2000,
        dpr=DPRTrainConfig(init="facebook/dpr-question_encoder-single-nq-base"),
        # Exact search, as `train rag --search-device auto` runs it on the training GPU (3x faster steps than
        # FAISS on the CPU at 1M passages on an H200; float16 vectors at 21M: 32 GB). The paper's HNSW
        # approximation is `index build --faiss HNSW32` for CPU-only machines (docs/scale.md: HNSW loses
        # recall at scale on 8-bit codes; Flat on the CPU is seconds per step at 21M).
        index_factory="Flat",
        generator="hub:facebook/bart-large",
        rag=RagTrainConfig(n_docs=10, steps=30000, batch_size=128, lr=3e-5, eval_every=2000, save_every=2000,
                           mixed_precision="bf16", max_combined_length=300, max_target_length=32),
        closed_book=ClosedBookConfig(steps=30000, batch_size=128, lr=3e-5, mixed_precision="bf16"),
        stitched_steps=30000, stitched_lr=3e-5, stitched_batch_size=128, stitched_k=10,
        hub=("model:facebook/dpr-question_encoder-single-nq-base", "model:facebook/dpr-ctx_encoder-single-nq-base",
             "model:facebook/bart-large", "dataset:nq_open", "dataset:facebook/wiki_dpr"),
        notes="GPU recipe (Lewis et al. 2020 settings) on local checkpoints and data; --steps/--max-train/--max-passages shorten it",
    ),
}


LINEAR_KEY = "cpu_linear"  # config.json: the library of float32 linear layers on the CPU (`reproduce --cpu-linear`)


def comparable(config: dict) -> dict:
    """What a resumed run's config.json must repeat: all but the reports' language and the device (a
    run killed on one machine may go on on another; the stages it ran there keep their numbers), and
    the CPU's linear library, which `stages.start_run` records and compares itself (`linear_difference`).

    >>> comparable({"preset": {"name": "small", "device": "cuda"}, "seed": 0, "lang": "zh", "cpu_linear": "blas"})
    {'preset': {'name': 'small'}, 'seed': 0}
    """
    out = {k: v for k, v in config.items() if k not in ("lang", LINEAR_KEY)}
    if isinstance(out.get("preset"), dict):
        preset = {k: v for k, v in out["preset"].items() if k != "device"}
        # name, language and threads stay whatever their values: resume_differences names them as flags
        out["preset"] = without_defaults(preset, Preset) | {k: preset[k] for k in ("name", "lang", "threads") if k in preset}
    return out


def without_defaults(values: dict, cls: type) -> dict:
    """`values` (the dataclass `cls` as config.json holds it) without the fields at their defaults, and
    nested configs likewise. A field added later with a default that keeps the old behaviour then
    makes no difference from a config.json written before it existed, whose run could not resume
    otherwise; a field away from its default, or one this version does not know, is still compared.

    >>> without_defaults({"name": "tiny", "dpr": {"steps": 30, "hard_negatives_from": "auto"}, "stitched_k": 5}, Preset)
    {'name': 'tiny', 'dpr': {'steps': 30}}
    """
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}
    out = {}
    for key, value in values.items():
        f = known.get(key)
        nested = _config_class(hints[key]) if f is not None else None
        if nested is not None and isinstance(value, dict):
            out[key] = without_defaults(value, nested)
        elif f is None or value != _default(f):
            out[key] = value
    return out


def _config_class(hint) -> type | None:
    """The dataclass a field's type names (`DPRTrainConfig | None` too), else None."""
    return next((t for t in (hint, *typing.get_args(hint)) if is_dataclass(t)), None)


def _default(f) -> object:
    """A field's default as config.json would hold it (tuples as lists), or MISSING."""
    value = f.default if f.default is not MISSING else f.default_factory() if f.default_factory is not MISSING else MISSING
    if value is MISSING:
        return MISSING
    return json.loads(json.dumps(value, default=lambda o: asdict(o) if is_dataclass(o) else str(o)))


def resume_differences(saved: dict, config: dict) -> list[str]:
    """What keeps a run from resuming, as the flags that made each difference: "FLAG VALUE (the run's:
    VALUE)"; `comparable` sets aside what may change. A refusal that named no flag left the user
    guessing which of --seed, --lang, --threads or --tasks differed.

    >>> run = {"preset": {"name": "tiny", "lang": "en", "threads": 1, "rag": {"steps": 12}}, "seed": 0, "threads": 1}
    >>> resume_differences(run, {**run, "seed": 2, "tasks": ["qa", "fever"]})
    ["--seed 2 (the run's: 0)", "--tasks qa,fever (the run's: qa)"]
    >>> resume_differences(run, {**run, "preset": {**run["preset"], "lang": "zh", "rag": {"steps": 8}}})
    ["--lang zh (the run's: en)"]
    >>> resume_differences(run, {**run, "preset": {**run["preset"], "rag": {"steps": 8}}})
    ["the preset's rag (another lewisrag version's preset began the run)"]
    >>> resume_differences({**run, "assets": {"steps": 1}}, {**run, "assets": {"steps": None, "passages_b": "b.jsonl"}})
    ["--passages-b b.jsonl (the run's: not given)", "--steps not given (the run's: 1)"]
    """
    saved, config = comparable(saved), comparable(config)
    was, now = saved.get("preset") or {}, config.get("preset") or {}
    out = [f"{flag} {now.get(key)} (the run's: {was.get(key)})" for key, flag in (("name", "--preset"), ("lang", "--lang"))
           if was.get(key) != now.get(key)]
    if not out:  # the preset's other fields follow from its name and language: what differs else is the preset itself
        if (was.get("threads"), saved.get("threads")) != (now.get("threads"), config.get("threads")):
            out.append(f"--threads {_threads(now, config)} (the run's: {_threads(was, saved)})")
        changed = sorted(k for k in was.keys() | now.keys() if k != "threads" and was.get(k) != now.get(k))
        if changed:
            out.append(f"the preset's {', '.join(changed)} (another lewisrag version's preset began the run)")
    if saved.get("seed") != config.get("seed"):
        out.append(f"--seed {config.get('seed')} (the run's: {saved.get('seed')})")
    tasks = [",".join(c.get("tasks", ["qa"])) for c in (config, saved)]
    if tasks[0] != tasks[1]:
        out.append(f"--tasks {tasks[0]} (the run's: {tasks[1]})")
    was_assets, now_assets = saved.get("assets") or {}, config.get("assets") or {}
    out += [f"--{k.replace('_', '-')} {_given(now_assets.get(k))} (the run's: {_given(was_assets.get(k))})"
            for k in sorted(was_assets.keys() | now_assets.keys()) if was_assets.get(k) != now_assets.get(k)]
    if was_assets == now_assets and saved.get("settings") != config.get("settings"):
        out.append("the training settings the data's size caps (--train or the passages hold another number of records)")
    known = {"preset", "seed", "threads", "tasks", "assets", "settings"}
    out += [f"config.json's {k}" for k in sorted(saved.keys() | config.keys())
            if k not in known and saved.get(k) != config.get(k)]
    return out


def _given(value) -> str:
    """A flag's value as `resume_differences` names it: a flag left out is "not given", not Python's None.

    >>> _given(None), _given(1), _given("a.jsonl")
    ('not given', '1', 'a.jsonl')
    """
    return "not given" if value is None else str(value)


def linear_difference(saved: dict, kind: str) -> str | None:
    """"--cpu-linear KIND (the run's: KIND)" when the run's config.json (`saved`) recorded another
    library for float32 linear layers on the CPU than `kind`, else None (the same, or not recorded:
    a run begun before config.json held it).

    Refused, as --threads is, not recorded per stage: the library changes results.json's digits in the
    last bits (`data.cpu_linear`) as the thread count does, and results.json's `environment` names
    one library for the whole run. --device may change (`comparable`), since the GPU a run began on
    may be gone; the two libraries ship in the same torch wheel, so the run's own is at hand.

    >>> linear_difference({"cpu_linear": "blas"}, "onednn"), linear_difference({}, "onednn")
    ("--cpu-linear onednn (the run's: blas)", None)
    """
    was = saved.get(LINEAR_KEY)
    return None if was is None or was == kind else f"--cpu-linear {kind} (the run's: {was})"


def _threads(preset: dict, config: dict) -> str:
    """The --threads a config was made with, and the count it came to when that was 0 (the idle CPUs)."""
    asked = preset.get("threads")
    return f"0 (counted {config.get('threads')} idle CPUs)" if asked == 0 else "not given" if asked is None else str(asked)


def read_run_config(run: str | os.PathLike) -> dict:
    """RUN/config.json ({} when the run has none), read back with what later commands take from it
    checked: an object whose preset and RAG schedule are objects, the numbers `compare` decodes
    with whole numbers where present (preset.rag.max_target_length >= 2, the start token and one to
    generate, as training requires; preset.stitched_k >= 1), and the fields a resume compares and
    quotes (seed, threads, tasks, the preset's name, lang, threads). Each fault is an InputError
    naming the file and the field. Keys `Preset` no longer has are let be: a
    run made by an older lewisrag holds fields since removed (`parallel`), and compare reads none."""
    file = Path(run) / "config.json"
    if not file.is_file():
        return {}
    config = read_json(file)
    expect(isinstance(config, dict), file, "(top level)", "a JSON object", type(config).__name__)
    preset = config.get("preset", {})
    expect(isinstance(preset, dict), file, "preset", "an object", preset)
    rag = preset.get("rag", {})
    expect(isinstance(rag, dict), file, "preset.rag", "an object", rag)
    # a max_target_length of 1 leaves no token to decode after the start token: RAG's generate raised once
    # the models had loaded (training refuses it: training/configs.py)
    for name, holder, least in (("preset.rag.max_target_length", rag, 2), ("preset.stitched_k", preset, 1)):
        key = name.rpartition(".")[2]
        if key in holder:
            expect(is_count(holder[key]) and holder[key] >= least, file, name, f"a whole number >= {least}", holder[key])
    # what a resume compares and quotes (`resume_differences`): a damaged value is named as such, not
    # quoted as the run's (a "threads": "x" read as "--threads 1 (the run's: 1)", "tasks": "qa" as "q,a")
    for name, holder, ok, what in (
            ("seed", config, is_count, "a whole number >= 0"),
            ("threads", config, lambda v: v is None or is_count(v), "null or a whole number >= 0"),
            ("tasks", config, lambda v: isinstance(v, list) and all(isinstance(t, str) for t in v), "a list of task names"),
            ("preset.threads", preset, lambda v: v is None or is_count(v), "null or a whole number >= 0"),
            ("preset.name", preset, lambda v: isinstance(v, str), "a preset name"),
            ("preset.lang", preset, lambda v: isinstance(v, str), "a language code")):
        key = name.rpartition(".")[2]
        if key in holder:
            expect(ok(holder[key]), file, name, what, holder[key], "; the run's config.json is damaged")
    return config


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise InputError("--preset", f"unknown preset '{name}' (one of {', '.join(PRESETS)})")
    return PRESETS[name]
