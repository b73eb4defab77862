"""`lewisrag reproduce --preset base` on the user's own assets: a DPR pair, a BART folder, QA files
in any format `read_qa` takes but FEVER's (`_check_sets`) and passages in wiki_dpr's schema or DPR's
.tsv, all local. The stages are a subset of the small preset's, through the same stage functions where they fit:

    data            RUN/data/{train,dev,test}.jsonl: the QA files read once (--max-train keeps the first N;
                    train and dev keep the gold ids index A holds; without --max-passages a gold id that
                    --passages lacks is refused before any stage); test questions also asked in --train or
                    --dev (one file given twice) are warned of before the first stage and counted (`test_overlap`)
    index_a         dense index over --passages (the first --max-passages) with --context-encoder; on a
                    GPU in the RAG runs' mixed precision, 256 passages a batch (as the H200 was measured);
                    passages with stored vectors (wiki_dpr's, an `index cut`'s) that --context-encoder
                    made, by the 8-row spot check, are not encoded again: their vectors are copied
    index_b         the same over --passages-b, when given
    retrieval       over index A on --test: DPR's top-k accuracy (`answer_recall`: an answer string in a
                    top-k passage) for the short-answer questions, and the share of questions with a gold
                    passage id in the top k (`recall_at_k`) for those that carry gold_passage_ids
                    (nq_open's do not: recorded as skipped, with why); k = 1, 5, 20, those past the
                    passages indexed left out
    generator       RUN/generator: --generator checked before any stage (weights and tokenizer load, and the
                    tokenizer fits the model: `check_generator_tokenizer`) and copied
    rag_token, rag_sequence   train_rag with the preset's settings, --question-encoder paired with --context-encoder
    closed_book     the generator fine-tuned without retrieval
    evaluate        EM/F1/ROUGE-L on --test, under results.json's qa.<system> as the small preset writes them
    knowledge_update  the swap matrix, when --passages-b, --questions-a and --questions-b are given

The stages that need the built-in world (world, the DPR trained on it, BM25, the ablations, the
stitched system and its comparison) are not run: results.json lists them under "skipped" with why.

config.json names the assets by path (`assets`) and records their content beside them (FINGERPRINTS:
`asset_fingerprints`, of the files loading reads, RULE_KEY); `--resume` refuses an asset whose content
changed since, before any stage runs (RUN/data holds the QA files as the `data` stage read them, and the
later stages train on that copy). results.json's config repeats the digests of the assets read whole
(CONTENT: `assets_sha256`). A run begun afresh without --passages-b removes the index B and question
sets an earlier run in its folder wrote (`_former_swap_parts`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForSeq2SeqLM, DPRContextEncoder, DPRQuestionEncoder

from lewisrag import __version__
from lewisrag.data.io import InputError, LewisragWarning, expect, first_line, read_json, write_json, write_jsonl
from lewisrag.data.outputs import check_part, discard_output, is_ours
from lewisrag.data.passages import open_passages
from lewisrag.data.passages.saved import _check_state
from lewisrag.data.pretrained import (SHARDED, as_input_error, check_generator_folder, check_weights, generator_tokenizer,
                                     load_config, model_files)
from lewisrag.data.qa_formats import fields_unmapped
from lewisrag.data.records import ids_present, missing_passage_id, read_qa, refuse_regex_targets
from lewisrag.data.tasks import LABELS
from lewisrag.data.threads import environment, resolve_device
from lewisrag.eval.results import FORMAT
from lewisrag.experiments import stages as S
from lewisrag.experiments.presets import Preset, comparable, read_run_config, resume_differences
from lewisrag.experiments.swap import swap_matrix
from lewisrag.index import open_retriever, retrieval_recall
from lewisrag.index.dense import DenseBuildConfig, build_dense_index
from lewisrag.index.encoders import DPR_POOLER, check_transformers_encoder, dpr_layout
from lewisrag.scoring.qa import has_answer, normalize_answer
from lewisrag.scoring.retrieval import answer_recall
from lewisrag.training.rag_data import fever_claims

Progress = Callable[[str, int, int, str], None]

REQUIRED = ("question_encoder", "context_encoder", "generator", "train", "dev", "test", "passages")

NOT_RUN = {
    "world": "needs the built-in world; the base preset reads --train/--dev/--test and --passages instead",
    "dpr": "not trained: the given DPR pair (--question-encoder, --context-encoder) is the retriever",
    "bm25_a": "BM25 is only Table 6's ablation row, which needs the built-in world's splits",
    "rag_token_frozen": "used only by the ablations",
    "ablations": "Table 6 and Figure 3 need BM25 and the frozen-retriever run over the built-in world",
    "stitched": "the prompt-stitching comparison is built on the built-in world's evaluation set",
    "compare": "the prompt-stitching comparison is built on the built-in world's evaluation set",
}


@dataclass(frozen=True)
class BaseAssets:
    """What `reproduce --preset base` runs on (every path local; QA files may also be `hf:` specs)."""

    question_encoder: str | None = None  # transformers DPRQuestionEncoder folder (or a lewisrag DPR checkpoint)
    context_encoder: str | None = None  # the DPRContextEncoder folder of its pair: it builds the indexes
    generator: str | None = None  # transformers BART folder
    train: str | None = None  # QA files: the hub's schemas, DPR's or lewisrag's own (not FEVER's)
    dev: str | None = None
    test: str | None = None
    passages: str | None = None  # snapshot A: save_to_disk folder, .parquet (shards), DPR's .tsv, .jsonl or hf: spec
    passages_b: str | None = None  # snapshot B (optional): index_b and the knowledge-update test
    questions_a: str | None = None  # questions about snapshot A / B (optional): the knowledge-update test
    questions_b: str | None = None
    steps: int | None = None  # RAG and closed-book steps (default: the preset's)
    max_passages: int | None = None  # index only the first N passages of each snapshot
    max_train: int | None = None  # train on the first N training questions

    def missing(self) -> list[str]:
        """The required flags not given, as the CLI spells them."""
        return ["--" + name.replace("_", "-") for name in REQUIRED if not getattr(self, name)]

    def given(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))


def _where(x: str | None) -> str | None:
    """An absolute path for something on disk, else the spec as given (hf:...)."""
    return None if x is None else (str(Path(x).resolve()) if Path(x).exists() else x)


def prepare(assets: BaseAssets, hub: tuple[str, ...] = ()) -> dict:
    """Every required flag is given, every path exists and the QA files and passages read, before
    anything is written; returns what was read ({"train", "dev", "test", "passages": {snap: table}})."""
    missing = assets.missing()
    if missing:
        names = f" ({', '.join(a.partition(':')[2] for a in hub)})" if hub else ""
        raise InputError("--preset base", f"needs {', '.join(missing)}: local copies of the recipe's checkpoints and "
                         f"data{names}; or only --hub-dir DIR to check that the hub's are on this machine")
    for f in ("question_encoder", "context_encoder", "generator"):  # read from folders: a hub name failed after index A
        value = str(getattr(assets, f))
        if value.startswith("hf:"):
            raise InputError(value, f"--{f.replace('_', '-')}: a local folder is needed, not a hub name: download it "
                             f"first (hf download {value[3:]} --local-dir DIR) and give DIR")
    for f in ("question_encoder", "context_encoder", "generator", "passages_b", "questions_a", "questions_b",
              "train", "dev", "test", "passages"):
        value = getattr(assets, f)
        if value and not str(value).startswith("hf:") and not Path(value).exists():
            raise InputError(value, f"--{f.replace('_', '-')}: not found")
    swap = [f"--{f.replace('_', '-')}" for f in ("passages_b", "questions_a", "questions_b") if getattr(assets, f)]
    if 0 < len(swap) < 3:  # index B built, or question sets read, for a knowledge-update matrix that cannot run
        raise InputError(swap[0], "--passages-b, --questions-a and --questions-b make the knowledge-update matrix "
                         f"together: give all three or none (given: {', '.join(swap)})")
    for f in ("steps", "max_passages", "max_train"):
        value = getattr(assets, f)
        if value is not None and value < 1:
            raise InputError(f"--{f.replace('_', '-')}", f"must be at least 1, not {value}")
    _check_model_folders(assets)
    with fields_unmapped():  # reproduce has no --qa-fields: an unknown format is not advised one
        train, dev, test = (read_qa(getattr(assets, f)) for f in ("train", "dev", "test"))
        swap = {f: read_qa(getattr(assets, f)) for f in ("questions_a", "questions_b") if getattr(assets, f)}
    _check_sets({"train": train[: assets.max_train], "dev": dev, "test": test, **swap}, assets)
    passages = {"a": open_passages(assets.passages, assets.max_passages)}  # only the rows indexed are checked
    if assets.passages_b:
        passages["b"] = open_passages(assets.passages_b, assets.max_passages)
    for table in passages.values():  # stored vectors too: a damaged one found at index_a would leave a run half begun
        if getattr(table, "has_embeddings", False):
            table.embedding_dim()
    if assets.max_passages is None:
        _check_gold_ids({"train": train[: assets.max_train], "dev": dev, "test": test}, passages["a"], assets)
    return {"train": train[: assets.max_train], "dev": dev, "test": test, "passages": passages, **swap,
            "test_overlap": shared_questions(train[: assets.max_train], dev, test)}


def _check_gold_ids(sets: dict, passages, assets: BaseAssets) -> None:
    """Without --max-passages every passage of --passages is indexed: a gold id of --train, --dev or --test
    that it lacks is mistyped or another corpus's, bad input named by file, line and field (as
    `records.check_gold_ids` names it), not a question dropped from training and recall as if a cut
    had left its passage out. One scan of the passages' ids for the three files."""
    present = ids_present(passages, {g for examples in sets.values() for ex in examples for g in ex.gold_passage_ids})
    for name, examples in sets.items():
        error = missing_passage_id(examples, "gold_passage_ids", present, getattr(assets, name),
                                   f"--passages {assets.passages}")
        if error is not None:
            raise error


def shared_questions(train, dev, test) -> dict[str, int]:
    """How many of the `test` questions are also asked in `train` (those trained on, after --max-train), in
    `dev` (which picks the best checkpoint) and in either, questions compared as exact match compares
    answers (`normalize_answer`: case, punctuation, articles and spacing aside); the data stage records it.

    >>> from lewisrag.data.records import QAExample
    >>> q = lambda text: QAExample(id=text, question=text, answers=["x"])
    >>> shared_questions([q("Who leads A?")], [q("who leads the B")], [q("who leads a"), q("Who leads B?"), q("Who leads C?")])
    {'train': 1, 'dev': 1, 'either': 2}
    """
    seen = {name: {normalize_answer(ex.question) for ex in examples} - {""} for name, examples in (("train", train), ("dev", dev))}
    asked = [normalize_answer(ex.question) for ex in test]
    return {"train": sum(q in seen["train"] for q in asked), "dev": sum(q in seen["dev"] for q in asked),
            "either": sum(q in seen["train"] or q in seen["dev"] for q in asked)}


def _check_sets(sets: dict, assets: BaseAssets) -> None:
    """Each QA set holds what its stages score, else an InputError naming the flag before any stage
    runs: `train rag` and the swap matrix refuse these only once the indexes are built, and FEVER's
    labels would be trained and scored as free-text answers (exit 0, numbers that are not FEVER's)."""
    for name, examples in sets.items():
        flag, path = "--" + name.replace("_", "-"), getattr(assets, name)
        answered = [ex for ex in examples if ex.answers]
        if fever_claims(examples):  # `train rag` refuses them too, without --task fever
            raise InputError(path, f"{flag}: FEVER claims (every answer is one of {', '.join(LABELS)}); the base preset "
                             "trains and scores QA by exact match: train them with `lewisrag train rag --task fever`")
        if name == "train":  # CuratedTrec's patterns: refused here, not by train rag after the indexes are built
            refuse_regex_targets(examples, path)
        if name == "train" and not answered:
            raise InputError(path, f"{flag}: none of the {len(examples)} questions trained on has an answer")
        if name == "test" and not answered:  # the test stage scores only questions with an answer: else all null, hours later
            raise InputError(path, f"{flag}: none of its {len(examples)} questions has an answer to score")
        # the RAG runs pick their best model by dev exact match, and the swap matrix scores by it: long-form
        # answers (MS MARCO's) have none
        if name in ("dev", "questions_a", "questions_b") and not any(ex.kind == "short" for ex in answered):
            why = "the RAG runs' dev evaluations" if name == "dev" else "the knowledge-update matrix"
            raise InputError(path, f"{flag}: no short-answer question with an answer to score {why} by exact match "
                             "(long-form ones, MS MARCO's, are scored on --test only)")


def _check_model_folders(assets: BaseAssets) -> None:
    """What each model folder holds, read from its config.json, and what its loader reads (the
    safetensors headers, the tokenizer, and the generator's tokenizer against its config.json's
    vocab_size and pad_token_id), before any stage runs: a wrong or damaged folder found after
    the index is built would leave a run that --resume refuses (its config differs)."""
    sizes = {}
    for flag, value, side in (("--question-encoder", assets.question_encoder, "question"),
                              ("--context-encoder", assets.context_encoder, "context")):
        with _flagged(flag):
            layout = dpr_layout(value)
        if layout != side:
            what = {"question": "a DPRQuestionEncoder folder", "context": "a DPRContextEncoder folder",
                    "lewisrag": "a `lewisrag train dpr` checkpoint", "rag": "a trained RAG model"}[layout]
            raise InputError(value, f"{flag}: {what}; the base recipe needs the transformers DPR{side.capitalize()}Encoder "
                             "folder of the pair")
        with _flagged(flag):
            cls = DPRQuestionEncoder if side == "question" else DPRContextEncoder
            _check_config_fits(Path(value), cls, cls.__name__, ignore_unexpected=DPR_POOLER)
            check_transformers_encoder(value, side)
        config = read_json(Path(value) / "config.json")
        sizes[flag] = config.get("projection_dim") or config.get("hidden_size")  # DPR's vector: projected, else pooled
    if len(set(sizes.values())) > 1:  # else found by index A's first search, naming the run's own index
        raise InputError(assets.question_encoder, "--question-encoder gives {}-d vectors and --context-encoder {}-d: "
                         "not a pair".format(*sizes.values()), field="hidden_size")
    check_generator_folder(assets.generator)
    with _flagged("--generator"):
        _check_config_fits(Path(assets.generator), AutoModelForSeq2SeqLM.from_config, "generator")
        generator_tokenizer(assets.generator)
    _check_generation(Path(assets.generator))


# transformers' old names of LayerNorm weights, which it renames on loading (its "legacy" conversion)
LEGACY_NAMES = (("LayerNorm.gamma", "LayerNorm.weight"), ("LayerNorm.beta", "LayerNorm.bias"))


def _check_config_fits(folder: Path, build: Callable, what: str, ignore_unexpected: str | None = None) -> None:
    """The tensors the safetensors headers list (names and shapes; no weight read) against the model
    `build` makes of config.json on the meta device (no memory either): a config.json that disagrees
    with its weights (another d_model, layer count or vocab_size) failed only when a stage loaded the
    model, after index_a was built, and the run's recorded asset fingerprints then held --resume to it.

    What `data.pretrained.load_model` lets pass passes: a weight tied to another that is there (BART's
    token embeddings and lm_head share model.shared.weight), those the class lets be missing
    (final_logits_bias) or unused, a buffer found in the file (BERT's position_ids), unused weights
    matching `ignore_unexpected` (DPR's BERT pooler), a base model's weights without the head's prefix
    (a BartModel's), LayerNorm's legacy gamma/beta. The first tensor that differs is named, in the
    model's order, with the count of the others.
    """
    files = check_weights(folder, what)
    config = load_config(AutoConfig.from_pretrained, folder, f"{what} config")
    with as_input_error(folder, what), torch.device("meta"):
        model = build(config)
    saved: dict[str, tuple[Path, tuple[int, ...]]] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as st:
            for key in st.keys():
                saved[_as_loaded(key)] = (f, tuple(st.get_slice(key).get_shape()))
    state = model.state_dict(keep_vars=True)  # tied weights: one tensor under several names
    prefix = model.base_model_prefix
    if prefix and any(k.startswith(f"{prefix}.") for k in state) and not any(k.startswith(f"{prefix}.") for k in saved):
        saved = {f"{prefix}.{k}": v for k, v in saved.items()}  # transformers adds the prefix too
    may_miss = [*(model._keys_to_ignore_on_load_missing or ())]
    may_add = [*(model._keys_to_ignore_on_load_unexpected or ()), *([ignore_unexpected] if ignore_unexpected else [])]
    names: dict[int, list[str]] = {}
    for name, tensor in state.items():
        names.setdefault(id(tensor), []).append(name)
    weights = files[0] if len(files) == 1 else folder / SHARDED
    described = f"the {type(model).__name__} config.json describes"
    problems = []
    for tied in names.values():
        there = [n for n in tied if n in saved]
        if not there and not any(re.search(p, n) for p in may_miss for n in tied):
            problems.append((weights, tied[0], f"missing from the weights, where {described} has "
                                               f"{tuple(state[tied[0]].shape)}"))
        for n in there:
            f, shape = saved[n]
            if shape != tuple(state[n].shape):
                problems.append((f, n, f"{shape} in the weights, {tuple(state[n].shape)} in {described}"))
    buffers = {n for n, _ in model.named_buffers()}  # non-persistent ones (position_ids) too, which old files hold
    problems += [(f, n, f"{shape} in the weights, where {described} has no such tensor") for n, (f, shape) in saved.items()
                 if n not in state and n not in buffers and not any(re.search(p, n) for p in may_add)]
    if problems:
        f, name, why = problems[0]
        others = f" (and {len(problems) - 1} more tensors)" if len(problems) > 1 else ""
        raise InputError(f, f"{why}{others}: its config.json does not match its weights", field=name)


def _as_loaded(key: str) -> str:
    """A safetensors key under the name transformers loads it as (`LEGACY_NAMES`).

    >>> _as_loaded("bert.embeddings.LayerNorm.gamma")
    'bert.embeddings.LayerNorm.weight'
    """
    for old, new in LEGACY_NAMES:
        key = key.replace(old, new)
    return key


@contextlib.contextmanager
def _flagged(flag: str) -> Iterator[None]:
    """An InputError raised inside the block names the flag that gave the folder."""
    try:
        yield
    except InputError as e:
        raise InputError(e.source, f"{flag}: {e.message}", line=e.line, field=e.field) from None


def _check_generation(folder: Path) -> None:
    """The generator's generation settings, which the RAG stages decode with, checked before the first
    stage (`decoding.check_generation_config`): a do_sample in them failed at rag_token, indexes built."""
    from transformers import AutoConfig, GenerationConfig

    from lewisrag.rag_model.decoding import check_generation_config, generation_file

    try:
        config = AutoConfig.from_pretrained(folder)
        has_file = (folder / "generation_config.json").is_file()
        gc = GenerationConfig.from_pretrained(folder) if has_file else GenerationConfig.from_model_config(config)
    except (OSError, ValueError, TypeError) as e:  # the model's own load names it in detail, at the generator stage
        why = first_line(e)
        raise InputError(generation_file(folder), f"--generator: cannot be read ({why})") from None
    check_generation_config(gc, config.vocab_size, generation_file(folder))


# The assets' content, recorded in config.json beside "assets" (which names them by path): a --train
# edited at the same path between a kill and a --resume left RUN/data/train.jsonl the old copy, and the
# RAG and closed-book stages trained on it while results.json named the edited file. Per asset, one of
#   {"sha256": HEX}  every file it is read from, read whole: a single file's own sha256 (`sha256sum`'s),
#                    else the sha256 of "NAME\0sha256 HEX\n" per file, in name order
#   {"files": HEX}   an asset over WHOLE_BYTES (wiki_dpr's 21 M passages, psgs_w100.tsv, a model's
#                    weights), which is not read: the sha256 of "NAME\0sha256 HEX\n" for its files of up
#                    to SMALL_BYTES (a model's config and tokenizer, a save_to_disk folder's state.json,
#                    WHOLE_BYTES of them at most) and "NAME\0bytes SIZE\0mtime NS\n" for the others. A
#                    file rewritten in place with its size and modification time kept is not told apart;
#                    one copied or touched again is refused, though it may hold the same bytes.
#   null             an hf: spec: what the hub serves is no file here to hash
# The QA files are read whole by `prepare` anyway, and are hashed whole whatever their size.
FINGERPRINTS = "asset_fingerprints"
# config.json: the rule of the folders' files FINGERPRINTS covers (`_asset_files`), RULE. 2: what loading reads
# (a passages folder's `_passage_files`). 1, a run recorded before this key: every FOLDER_DATA file below a
# passages folder, so that the cache-*.arrow `datasets` writes beside a saved dataset's own, or a run's files
# (its --out inside the folder), were other content; such a run is checked by its own rule, then recorded by RULE
RULE_KEY = "asset_fingerprints_rule"
RULE = 2
CONTENT = "assets_sha256"  # results.json's config: the digests of the assets read whole (no sizes or times)
WHOLE_BYTES = 256 << 20
SMALL_BYTES = 16 << 20
MODELS = ("question_encoder", "context_encoder", "generator")
QA_FILES = ("train", "dev", "test", "questions_a", "questions_b")
PASSAGES = ("passages", "passages_b")
FOLDER_DATA = (".parquet", ".arrow", ".json", ".jsonl", ".tsv")  # a passages folder's files by rule 1


def asset_fingerprints(assets: BaseAssets, names: tuple[str, ...] = MODELS + QA_FILES + PASSAGES,
                       rule: int = RULE) -> dict[str, dict | None]:
    """FINGERPRINTS of each input file or folder of `names` that `assets` gives (those not given are left
    out), its folders' files chosen by `rule` (RULE_KEY)."""
    out = {}
    for name in names:
        spec = getattr(assets, name)
        if not spec:
            continue
        if str(spec).startswith("hf:"):
            out[name] = None
            continue
        try:
            out[name] = _fingerprint(_asset_files(name, Path(spec), rule), whole=name in QA_FILES)
        except OSError as e:  # `prepare` read it a moment ago
            raise InputError(spec, f"--{name.replace('_', '-')}: cannot be read ({e.strerror or e})") from None
    return out


def _asset_files(name: str, path: Path, rule: int = RULE) -> list[tuple[str, Path]]:
    """(name inside the asset, file) of what loading `path` reads: a model folder's `model_files`, a
    passages folder's `_passage_files` (by `rule` 1, every FOLDER_DATA file below it but the hidden
    ones, the hub's .cache/), a file itself."""
    if path.is_file():
        return [(path.name, path)]
    if name in MODELS:
        files = model_files(path)
    elif rule == 1:
        files = [f for f in path.rglob("*") if f.suffix.lower() in FOLDER_DATA and f.is_file()
                 and not any(part.startswith(".") for part in f.relative_to(path).parts)]
    else:
        files = _passage_files(path)
    return sorted((f.relative_to(path).as_posix(), f) for f in files)


def _passage_files(folder: Path) -> list[Path]:
    """What `open_table` reads of a passages folder that `prepare` opened: a save_to_disk folder's
    state.json, dataset_info.json and the Arrow files its state lists, else the .parquet shards at
    its top. Not the other files there, which no stage reads: the cache-*.arrow `datasets` writes
    beside a saved dataset's own files, a README, a run whose --out lies inside the folder."""
    if (folder / "state.json").is_file():
        files, _ = _check_state(folder, folder / "state.json")
        return [folder / "state.json", folder / "dataset_info.json", *files]
    return [f for f in folder.iterdir() if f.suffix.lower() == ".parquet"]


def _fingerprint(files: list[tuple[str, Path]], whole: bool) -> dict:
    sizes = [f.stat().st_size for _, f in files]
    if whole or sum(sizes) <= WHOLE_BYTES:
        if len(files) == 1:
            return {"sha256": _file_sha256(files[0][1])}
        return {"sha256": _sha256("".join(f"{name}\0sha256 {_file_sha256(f)}\n" for name, f in files))}
    lines, budget = [], WHOLE_BYTES
    for (name, f), size in zip(files, sizes):
        if size <= min(SMALL_BYTES, budget):
            lines.append(f"{name}\0sha256 {_file_sha256(f)}\n")
            budget -= size
        else:
            lines.append(f"{name}\0bytes {size}\0mtime {f.stat().st_mtime_ns}\n")
    return {"files": _sha256("".join(lines))}


def _file_sha256(path: Path) -> str:
    with open(path, "rb") as f:  # in blocks: a file is never in memory whole
        return hashlib.file_digest(f, "sha256").hexdigest()


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def check_same_content(saved: dict, config: dict, fingerprints: dict, file: Path, assets: BaseAssets) -> None:
    """Refuse a --resume whose assets, at the paths the run recorded (`saved`: its config.json, `file`),
    hold other content than FINGERPRINTS recorded, naming each flag and path. An asset at another path
    is `resume_differences`' to name; a run recorded before FINGERPRINTS existed resumes unchecked.
    `fingerprints` are RULE's; a run recorded by rule 1 (no RULE_KEY) has its passages (`assets`')
    fingerprinted again by it: an unchanged run is not told its data changed because the rule did."""
    if FINGERPRINTS not in saved:
        return
    record, damaged = saved[FINGERPRINTS], "; the run's config.json is damaged"
    expect(isinstance(record, dict), file, FINGERPRINTS, "an object of the assets' fingerprints", record, damaged)
    for name, was in record.items():
        expect(was is None or (isinstance(was, dict) and len(was) == 1 and next(iter(was)) in ("sha256", "files")
                               and _is_hex(next(iter(was.values())))),
               file, f"{FINGERPRINTS}.{name}", 'null or {"sha256" or "files": a sha256 in hex}', was, damaged)
    rule = saved.get(RULE_KEY, 1)
    expect(RULE_KEY not in saved or (type(rule) is int and rule == RULE), file, RULE_KEY, str(RULE), rule, damaged)
    if rule == 1:
        fingerprints = fingerprints | asset_fingerprints(assets, PASSAGES, rule=1)
    was_paths, now_paths = saved.get("assets") or {}, config["assets"]
    changed = []
    for name, now in fingerprints.items():
        was = record.get(name)
        if was is None or now is None or was == now or was_paths.get(name) != now_paths.get(name):
            continue
        flag = f"--{name.replace('_', '-')} {now_paths[name]}"
        if "sha256" in was and "sha256" in now:
            changed.append(f"{flag} (sha256 {now['sha256'][:12]}..., the run's {was['sha256'][:12]}...)")
        else:  # by size and time: a large asset, not read
            changed.append(f"{flag} (its files' names, sizes or modification times differ from the run's: an asset "
                           "this large is fingerprinted by them, not read; a copy that kept them, cp -p or rsync -a, resumes)")
        if rule == 1 and name in PASSAGES and Path(now_paths[name]).is_dir():  # the files no stage reads count too
            changed[-1] += (f", by the rule of the lewisrag that began the run: every {', '.join(FOLDER_DATA)} file "
                            "below the folder, one added since too (datasets' cache-*.arrow, a run's own files: moved "
                            "away, the run resumes)")
    if changed:
        raise InputError(file, f"--resume with other data than the run's, the same path holding other content: "
                         f"{'; '.join(changed)}. Resume with the files the run was made from, or start a new run "
                         "(another --out, or drop --resume to run every stage again)", field=FINGERPRINTS)


def _is_hex(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def run_base(preset: Preset, run: Path, seed: int, resume: bool, threads: int | None, assets: BaseAssets,
             read: dict, run_stage, on_stage, on_progress: Progress, lang: str = "en",
             overwrite: bool = False) -> tuple[dict, dict]:
    """Every stage of the base preset into `run` (`read`: what `prepare` read; `run_stage`:
    `reproduce._run_stage`); returns results.json's content and each stage's record, for
    `reproduce` to write. `lang`, the reports' language, is recorded in config.json when it is not
    English; no stage of this preset writes text, so a resumed run may change it. A resumed run's
    assets must hold the content its config.json recorded (`check_same_content`). The folders its
    stages replace are checked first (`stages.check_rerun`; `overwrite`: reproduce's), and so, in a run
    begun afresh without --passages-b, are an earlier run's index B and question sets, which it removes
    (`_former_swap_parts`)."""
    train, dev, test, passages = read["train"], read["dev"], read["test"], read["passages"]
    swap_sets = bool(assets.passages_b and assets.questions_a and assets.questions_b)
    overlap = read.get("test_overlap")
    # the questions trained on: `train rag` and the closed book leave out those without an answer
    settings = _settings(preset, assets, sum(bool(ex.answers) for ex in train), min(len(p) for p in passages.values()))
    config = json.loads(json.dumps({"preset": asdict(preset), "seed": seed, "threads": threads,
                                    "assets": {k: _where(v) if isinstance(v, str) else v for k, v in asdict(assets).items()},
                                    "settings": settings} | ({"lang": lang} if lang != "en" else {})))
    fingerprints = asset_fingerprints(assets)
    saved = read_run_config(run) if resume and (run / "config.json").exists() else None
    # a run begun before config.json recorded its assets' content resumes unchecked, and without the
    # record, which would claim its finished stages for content they may not have read (as `cpu_linear`)
    legacy = saved is not None and FINGERPRINTS not in saved
    if saved is not None:
        # the content first: an edited --train that holds another number of questions changes the
        # settings too, and "the training settings the data's size caps" would not name the file
        check_same_content(saved, config, fingerprints, run / "config.json", assets)
        saved = {k: v for k, v in saved.items() if k not in (FINGERPRINTS, RULE_KEY)}
        if comparable(saved) != comparable(config):
            raise InputError(run / "config.json", "was written by another preset, seed or assets: "
                             f"{'; '.join(resume_differences(saved, config))}; use a new --out or drop --resume")
    # before anything is removed: a file the user added to a stage's folder is refused now, not lost
    names = [f"index_{snap}" for snap in passages] + ["generator", "rag_token", "rag_sequence", "closed_book"]
    S.check_rerun(run, names, resume, overwrite)
    former = [] if resume or swap_sets else _former_swap_parts(run, overwrite)
    recorded = {} if legacy else {FINGERPRINTS: fingerprints, RULE_KEY: RULE}
    S.start_run(run, config | recorded, resume, overwrite, names=names)
    _discard_parts(former, overwrite)
    if overlap and overlap["either"]:  # the same file as --train and --test: test EM on trained questions, said
        # before any stage runs, and after the resume checks, so that a refused --resume is its one line
        warnings.warn(LewisragWarning(
            f"{overlap['either']} of the {len(test)} --test questions are also --train ({overlap['train']}) or --dev "
            f"({overlap['dev']}) questions, compared normalized: their test scores are on questions the models were "
            "trained or chosen on, not open-domain QA (results.json stages.data.test_overlap)"))
    if not legacy:  # results.json: content digests only (no sizes or times of files not read: the same data, the same file)
        config = config | {CONTENT: {k: f["sha256"] for k, f in fingerprints.items() if f and "sha256" in f}}
    stages: dict[str, dict] = {}

    def stage(name: str, fn: Callable[[], dict]) -> None:
        stages[name] = run_stage(run, name, resume, fn, on_stage)

    data = run / "data"
    pair = {"encoder": _where(assets.question_encoder), "context_encoder": _where(assets.context_encoder)}
    stage("data", lambda: _data(run, {"train": train, "dev": dev, "test": test,
                                       **{k: read[k] for k in ("questions_a", "questions_b") if k in read}}, passages["a"],
                                overlap))
    for snap, table in passages.items():
        stage(f"index_{snap}", lambda s=snap, t=table: _dense(run, preset, s, t, assets, on_progress, overwrite))
    stage("retrieval", lambda: _retrieval(run, test, pair, on_progress))
    stage("generator", lambda: _generator(run, assets.generator, overwrite))
    files = {"train": str(data / "train.jsonl"), "dev": str(data / "dev.jsonl")}
    for name, variant in (("rag_token", "token"), ("rag_sequence", "sequence")):
        stage(name, lambda n=name, v=variant: S.rag(run, preset, seed, n, v, False, resume, on_progress, overwrite, **pair, **files,
                                                     **settings["rag"]))
    stage("closed_book", lambda: S.closed_book(run, preset, seed, on_progress, overwrite, train=files["train"], **settings["closed_book"]))
    stage("evaluate", lambda: S.evaluate(run, preset, on_progress, test_file=data / "test.jsonl"))
    if swap_sets:
        stage("knowledge_update", lambda: _knowledge_update(run, preset, on_progress))

    skipped = dict(NOT_RUN)
    if not assets.passages_b:
        skipped["index_b"] = "no --passages-b"
    if not swap_sets:
        skipped["knowledge_update"] = ("needs --passages-b, --questions-a and --questions-b (questions about each snapshot)"
                                       if assets.passages_b else "no --passages-b")
    return _assemble(config, stages, skipped), stages


# what a base run writes only with --passages-b, --questions-a and --questions-b, beside knowledge_update.json and
# swap_matrix.png (`stages.FINISHED`, which every run begun afresh removes): index B and the question sets
SWAP_FOLDER = "index_b"
SWAP_FILES = ("data/questions_a.jsonl", "data/questions_b.jsonl")
AFRESH = "a run begun afresh without --passages-b"


def _former_swap_parts(run: Path, overwrite: bool) -> list[Path]:
    """Of a run begun afresh in `run` without --passages-b, before anything is removed: the parts that
    an earlier run with it wrote there (SWAP_FOLDER, SWAP_FILES), which this run would otherwise keep
    beside its own, listed in its marker as its own, until `_discard_parts` removes them. A file the
    user added to that index B is refused by name, as `stages.check_rerun` refuses one in a stage's
    folder, and so is a question set the marker does not list, as `stages.finished_files` refuses a
    user's results.json, unless `overwrite`. A folder there that is no index lewisrag wrote is not
    this run's to remove (a link to one elsewhere neither): it is left as it is."""
    rel, kind = S.STAGE_FOLDERS[SWAP_FOLDER]
    index = [run / rel] if is_ours(run / rel, kind) and not (run / rel).is_symlink() else []
    for folder in index:
        check_part(folder, kind, overwrite=overwrite, what=AFRESH)
    return index + S.finished_files(run, overwrite, SWAP_FILES)


def _discard_parts(parts: list[Path], overwrite: bool) -> None:
    """Remove `parts` (`_former_swap_parts`), once `stages.start_run` passed its own checks: a refused
    run changes nothing. A folder is checked again as it goes (`outputs.discard_output`)."""
    for path in parts:
        if path.is_dir():  # index B (finished_files refused a folder of a question set's name)
            discard_output(path, S.STAGE_FOLDERS[SWAP_FOLDER][1], overwrite=overwrite, what=AFRESH)
        else:
            path.unlink(missing_ok=True)


def _settings(preset: Preset, assets: BaseAssets, n_train: int, n_passages: int) -> dict:
    """The preset's schedules with the run's overrides: --steps, and what the data's size caps
    (a batch cannot exceed the training questions, K the passages indexed, already cut to --max-passages)."""
    steps = assets.steps or preset.rag.steps
    # about ten checkpoints and dev evaluations whatever --steps is: at the preset's intervals a
    # shortened run (--steps 2000) was saved only at its last step, so a kill lost it all
    every = max(1, steps // 10)
    rag = {"steps": steps, "batch_size": min(preset.rag.batch_size, n_train), "n_docs": min(preset.rag.n_docs, n_passages),
           "eval_every": min(preset.rag.eval_every, every), "save_every": min(preset.rag.save_every, every)}
    closed = {"steps": assets.steps or preset.closed_book.steps, "batch_size": min(preset.closed_book.batch_size, n_train)}
    return {"rag": rag, "closed_book": closed}


def _data(run: Path, sets: dict, passages, overlap: dict | None = None) -> dict:
    """RUN/data/<set>.jsonl in lewisrag's schema (the swap matrix names question sets by their file names),
    each listed in the run's marker before it is written (`stages.claimed`): listed only once the stage
    finished, the question sets a kill left in between were refused by the next run begun afresh as the user's.

    Training and dev questions keep only the gold ids index A holds (`passages`): `train rag` refuses
    any other, and --max-passages cuts most of a corpus's away (without it, `prepare` refused an id
    --passages lacks). A question left with none is counted (`gold_not_indexed`) and out of the hit
    rates, as the retrieval stage leaves such test questions out.
    A question without an answer (MS MARCO's "No Answer Present.") is written as not_in_kb, the one
    category lewisrag's schema reads without an answer. `overlap`: `shared_questions`'s counts (`run_base`
    warned of them), recorded as `test_overlap`."""
    gold = {g for name in ("train", "dev") for ex in sets[name] for g in ex.gold_passage_ids}
    present = ids_present(passages, gold) if gold else set()
    outside = {}
    for name in ("train", "dev"):
        kept = [replace(ex, gold_passage_ids=[g for g in ex.gold_passage_ids if g in present]) for ex in sets[name]]
        outside[name] = sum(bool(ex.gold_passage_ids) and not k.gold_passage_ids for ex, k in zip(sets[name], kept))
        sets = {**sets, name: kept}
    if any(outside.values()):  # said now: report.md shows only the test split's count
        warnings.warn(LewisragWarning(f"{outside['train']} training and {outside['dev']} dev questions have no gold "
                                      "passage in index A (--max-passages, or not in --passages): they train and are "
                                      "scored without one (data/*.jsonl; results.json stages.data.gold_not_indexed)"))
    for name, examples in sets.items():
        write_jsonl(S.claimed(run, run / "data" / f"{name}.jsonl"),
                    (ex.to_dict() if ex.answers else {**ex.to_dict(), "category": "not_in_kb"} for ex in examples))
    return {"dir": "data", **{f"n_{name}": len(examples) for name, examples in sets.items()},
            **({"gold_not_indexed": outside} if gold else {}), **({"test_overlap": overlap} if overlap is not None else {})}


def _dense(run: Path, preset: Preset, snap: str, passages, assets: BaseAssets, on_progress: Progress,
           overwrite: bool = False) -> dict:
    """RUN/index_<snap> over `passages`, already cut to --max-passages (`prepare`)."""
    on_gpu = resolve_device(preset.device) != "cpu"  # the CPU encodes in float32, 64 passages a batch (the defaults)
    reuse, why = _stored_vectors(passages, assets.context_encoder)
    build = DenseBuildConfig(factory=preset.index_factory, device=preset.device, reuse_embeddings=reuse,
                             mixed_precision=preset.rag.mixed_precision if on_gpu else "no", batch_size=256 if on_gpu else 64)
    manifest = build_dense_index(passages, assets.context_encoder, run / f"index_{snap}", build,
                                 lambda stage, d, t: on_progress(f"index_{snap} {stage}", d, t, ""), overwrite=overwrite)
    return {"dir": f"index_{snap}", "n_passages": manifest["n_passages"], "content_hash": manifest["content_hash"],
            "embeddings": "reused" if reuse else "encoded", **({"why_encoded": why} if why else {})}


def _stored_vectors(passages, context_encoder: str) -> tuple[bool, str | None]:
    """Whether the passages' stored vectors can stand for encoding them: there are some, and
    `context_encoder` made them (`index build --reuse-embeddings`' spot check of 8 rows). Encoding a
    million passages takes minutes on a GPU and hours on a few CPU cores; the stored ones are the
    vectors an `index cut` chose its passages by. (False, why) when there are some but another encoder made them."""
    if not getattr(passages, "has_embeddings", False):
        return False, None
    from lewisrag.index.dense import check_stored_embeddings
    from lewisrag.index.encoders import load_context_encoder

    passages.embedding_dim()  # a damaged column (a missing vector, NaN) is bad input, not another encoder's vectors
    ctx = load_context_encoder(context_encoder)
    try:
        check_stored_embeddings(passages, ctx, int(ctx.meta.get("max_length", 256)))
    except InputError as e:
        return False, f"the stored vectors were not made by --context-encoder ({e.message})"
    return True, None


def _retrieval(run: Path, test, pair: dict, on_progress: Progress) -> dict:
    """Index A searched with --test's questions, two measures, each where the questions allow it:

    - `answer_recall` {k: share}: DPR's top-k accuracy, the measure of the DPR and RAG papers' retrieval
      tables: a question counts at k when one of its top k passages holds an answer string
      (`scoring.qa.has_answer`, as `index cut` records it), over the `answerable_questions`, those with a
      short answer (nq_open's and DPR's .qa.csv test sets, which name no gold passage, included).
    - `recall_at_{k}`: the share of the questions with gold passage ids (DPR's biencoder JSON) that
      have one of them in the top k (hit@k). On Wikipedia it is usually the lower of the two: many
      passages besides the annotated one hold an answer.
    """
    with_gold = [ex for ex in test if ex.gold_passage_ids]
    answerable = [ex for ex in test if ex.answers and ex.kind == "short"]  # a long answer is no string to find
    skipped = {"skipped": "no test question has gold_passage_ids (the hub's QA sets and DPR's .qa.csv have none)"}
    if not with_gold and not answerable:
        return {"out": {"retrieval": {"split": "test", **skipped}}}
    retriever = open_retriever(run / "index_a", pair["encoder"], context_encoder=pair["context_encoder"])
    ks = retrieval_ks(len(retriever.index.passages))
    out = {"split": "test"}
    if answerable:
        holds = _holds_answer(retriever, answerable, max(ks), lambda n: on_progress("answer recall", n, len(answerable), ""))
        out |= {"answer_recall": answer_recall(holds, ks), "answerable_questions": len(answerable)}
    if not with_gold:
        return {"out": {"retrieval": out | skipped}}
    # --max-passages may keep a corpus's first N passages only: a question whose gold passages all lie
    # beyond them cannot be found by any retriever, so it is left out of recall and counted, not scored 0
    present = ids_present(retriever.index.passages, {g for ex in with_gold for g in ex.gold_passage_ids})
    scored = [ex for ex in with_gold if present & set(ex.gold_passage_ids)]
    outside = len(with_gold) - len(scored)
    if not scored:
        return {"out": {"retrieval": out | {"gold_not_indexed": outside, "skipped":
                                            "no test question's gold passage is among the indexed passages"}}}
    done = [0]

    def tick(n: int) -> None:  # retrieval_recall reports each batch's size; the bar takes the count so far
        done[0] += n
        on_progress("recall", done[0], len(scored), "")

    r = retrieval_recall(retriever, scored, ks, on_batch=tick)
    hits = {f"recall_at_{k}": r[f"hit@{k}"] for k in ks}  # a gold passage id in the top k: not DPR's top-k accuracy
    return {"out": {"retrieval": out | {"n": r["n"], "gold_not_indexed": outside, **hits}}}


def retrieval_ks(n_passages: int) -> tuple[int, ...]:
    """The retrieval stage's cut-offs, 1, 5 and 20, those past the index's passages left out (with
    --max-passages 8, recall@20 was 1.0 over the 8 passages there were, and top-20 accuracy the top 8's).

    >>> retrieval_ks(21_015_324), retrieval_ks(8), retrieval_ks(1)
    ((1, 5, 20), (1, 5), (1,))
    """
    return tuple(k for k in (1, 5, 20) if k <= n_passages) or (1,)


def _holds_answer(retriever, examples, k: int, on_done: Callable[[int], None], batch_size: int = 64) -> list[list[bool]]:
    """For each of `examples`, whether each of its top `k` passages, best first, holds an answer
    (`on_done`: the questions searched so far)."""
    out = []
    for i in range(0, len(examples), batch_size):
        batch = examples[i:i + batch_size]
        hits = retriever.search([ex.question for ex in batch], k)
        out += [[has_answer(h.text, ex) for h in found] for ex, found in zip(batch, hits)]
        on_done(len(out))
    return out


def _generator(run: Path, source: str, overwrite: bool = False) -> dict:
    S.copy_generator(source, run / "generator", overwrite=overwrite)
    return {"dir": "generator", "source": _where(source)}


def _knowledge_update(run: Path, preset: Preset, on_progress: Progress) -> dict:
    m = swap_matrix([run / "rag_token", run / "rag_sequence"], [run / "index_a", run / "index_b"],
                    [run / "data" / "questions_a.jsonl", run / "data" / "questions_b.jsonl"], max_length=preset.rag.max_target_length,
                    on_progress=lambda _, d, t: on_progress("knowledge update", d, t, ""), device=preset.device)
    write_json(S.claimed(run, run / "knowledge_update.json"), m)
    return S.swap_summary(m)


def _assemble(config: dict, stages: dict, skipped: dict) -> dict:
    results = {
        "lewisrag": {"kind": "reproduce", "version": __version__, "format": FORMAT},
        "config": config,
        "environment": environment(config["preset"]["device"]),
        "records": [],
    }
    S.merge_stage_outputs(results, stages)
    results["skipped"] = skipped
    return results
