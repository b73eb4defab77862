"""Edges of `lewisrag reproduce --preset base` (experiments/base.py) found on hub-layout fixtures:

- a generator whose tokenizer does not fit its model (more tokens than config.json's vocab_size, another
  padding id) is refused before any stage, and by `load_generator` (`train rag --generator`): it was an
  IndexError traceback once the index was built, the run folder half written;
- test questions also asked in --train or --dev (one file given twice) are warned of and recorded
  (`stages.data.test_overlap`): the run reported test EM on trained questions without a word;
- report.md names the run's models, data and sizes, and says when --steps, --max-train or
  --max-passages shortened it; the terminal summary shows DPR's top-k accuracy (answer_recall), the
  preset's main retrieval measure, and names the recall it did not measure "gold-passage recall".
"""

from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import asdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import one_thread, run_main
from hf_layouts import bart, dpr_pair
from lewisrag.data.io import InputError, LewisragWarning
from lewisrag.data.pretrained import load_generator
from lewisrag.data.records import read_passages
from lewisrag.experiments.base import BaseAssets, _check_model_folders
from lewisrag.experiments.presets import get_preset
from lewisrag.experiments.report import render_report
from test_reproduce_base import _flags, assets  # noqa: F401  (assets: the module fixture of hub-layout folders and files)


@pytest.fixture(scope="module")
def folders(tiny_corpus, tmp_path_factory) -> dict:
    """A DPR pair, a BART folder and one whose embeddings have 6 rows fewer than its tokenizer has tokens."""
    root = tmp_path_factory.mktemp("edges")
    texts = [f"{p.title} {p.text}" for p in read_passages(tiny_corpus["passages"])]
    with one_thread():
        pair, fits = dpr_pair(root, texts), bart(root, texts)
        n = len(json.loads((fits / "vocab.json").read_text()))
        small = bart(root / "small", texts, model_vocab=n - 6)
    assert len(json.loads((small / "vocab.json").read_text())) == n  # the same tokenizer, fewer embedding rows
    return {**pair, "bart": fits, "small": small, "n": n}


def _other_pad(bart_folder: Path, to: Path) -> Path:
    folder = shutil.copytree(bart_folder, to)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "pad_token_id": 0}))  # the tokenizer pads with <pad>, id 1
    return folder


def _model_assets(folders: dict, generator: Path) -> BaseAssets:
    return BaseAssets(question_encoder=str(folders["question"]), context_encoder=str(folders["context"]),
                      generator=str(generator))


def test_a_generator_tokenizer_past_its_embeddings_is_refused_before_any_stage(folders):
    """The reviewer's bart_bigtok: 1000 tokens, vocab_size 400, an IndexError at rag_token with the index built."""
    with pytest.raises(InputError) as e:
        _check_model_folders(_model_assets(folders, folders["small"]))
    assert str(e.value) == (f"{folders['small'] / 'config.json'}: field 'vocab_size': --generator: the generator tokenizer "
                            f"has {folders['n']} tokens, the generator's embeddings {folders['n'] - 6} rows: the tokenizer "
                            "of another model")
    _check_model_folders(_model_assets(folders, folders["bart"]))  # the fitting one passes


def test_a_generator_tokenizer_with_another_padding_id_is_refused(folders, tmp_path):
    folder = _other_pad(folders["bart"], tmp_path / "pad0")
    with pytest.raises(InputError) as e:
        _check_model_folders(_model_assets(folders, folder))
    assert e.value.field == "pad_token_id" and e.value.source == str(folder / "config.json")
    assert "pads with id 1, the generator's config with 0" in e.value.message


def test_train_rag_generator_refuses_a_tokenizer_past_its_embeddings(folders, tmp_path):
    """`train rag --generator` (load_generator) had the same gap; a fitting generator still loads."""
    with pytest.raises(InputError) as e:
        load_generator(folders["small"])
    assert e.value.field == "vocab_size" and e.value.source == str(folders["small"] / "config.json")
    with pytest.raises(InputError) as e:
        load_generator(_other_pad(folders["bart"], tmp_path / "pad0"))
    assert e.value.field == "pad_token_id"
    model, tokenizer = load_generator(folders["bart"])
    assert len(tokenizer) <= model.config.vocab_size


def test_the_cli_refuses_it_in_one_line_with_nothing_written(assets, folders, tmp_path, monkeypatch, capsys):  # noqa: F811
    out = tmp_path / "run"
    code, _, err = run_main(monkeypatch, capsys, *_flags({**assets, "bart": folders["small"]}, out))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "field 'vocab_size'" in err and "Traceback" not in err, err
    assert not out.exists()


def test_a_base_run_warns_of_test_questions_it_trained_on_and_reports_its_sizes(assets, tmp_path, monkeypatch, capsys):  # noqa: F811
    """The fixture's --test is the first 6 of --train's questions and --dev is the same 6: one warning line,
    the counts in results.json; report.md's Run section; the terminal's answer-recall table."""
    out = tmp_path / "run"
    with one_thread(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, stdout, err = run_main(monkeypatch, capsys, *_flags(assets, out))
    assert code == 0, err
    warned = [str(w.message) for w in caught if issubclass(w.category, LewisragWarning) and "--test questions" in str(w.message)]
    assert warned == ["6 of the 6 --test questions are also --train (6) or --dev (6) questions, compared normalized: their "
                      "test scores are on questions the models were trained or chosen on, not open-domain QA (results.json "
                      "stages.data.test_overlap)"]  # once (the run prepares its inputs once)
    r = json.loads((out / "results.json").read_text())
    assert r["stages"]["data"]["test_overlap"] == {"train": 6, "dev": 6, "either": 6}
    report = (out / "report.md").read_text()
    run = report[report.index("## Run: models, data and sizes"):report.index("## Retrieval")]
    for line in (f"- question encoder: `{assets['question']}`", f"- context encoder (it built the index): `{assets['context']}`",
                 f"- generator: `{assets['bart']}`", f"- training questions: `{assets['train']}`, 16 questions",
                 f"- dev questions (they pick the best checkpoint): `{assets['dev']}`, 6 questions",
                 f"- test questions: `{assets['test']}`, 6 questions",
                 f"- passages of index A: `{assets['passages']}`, 24 indexed",
                 "- RAG-Token and RAG-Sequence: 2 steps, batch size 16, K=10 passages per question (in training and at "
                 "test); closed-book BART: 2 steps, batch size 16",
                 "A shortened run (--steps 2 of the preset's 30000, --max-train 16, --max-passages 24): compare its numbers "
                 "with runs of the same cut, not with the paper's Table 1."):
        assert line in run, (line, run)
    # the terminal: DPR's top-k accuracy as report.md shows it, and the measure not taken named for what it is
    assert "DPR's top-k accuracy" in stdout and "top-20" in stdout
    assert "gold-passage recall not measured" in stdout and "retrieval recall not measured" not in stdout


def test_prepare_counts_the_test_questions_train_and_dev_share(assets, tmp_path):  # noqa: F811
    """Counted on what is trained on (--max-train's first N) and chosen on (--dev), questions normalized."""
    from lewisrag.data.records import read_qa
    from lewisrag.experiments.base import prepare
    from test_reproduce_base import _nq_open

    given = BaseAssets(question_encoder=str(assets["question"]), context_encoder=str(assets["context"]),
                       generator=str(assets["bart"]), train=str(assets["train"]), dev=str(assets["dev"]),
                       test=str(assets["test"]), passages=str(assets["passages"]), max_train=16)
    assert prepare(given)["test_overlap"] == {"train": 6, "dev": 6, "either": 6}
    qa = read_qa(assets["train"])
    shouted = [type(ex)(id=ex.id, question=ex.question.upper().rstrip("?"), answers=ex.answers) for ex in qa]
    _nq_open(tmp_path / "rest.parquet", qa[6:])  # none of the test questions
    _nq_open(tmp_path / "shouted.parquet", shouted[3:])  # test questions 4 to 6, written otherwise
    apart = BaseAssets(**{**given.__dict__, "train": str(tmp_path / "rest.parquet"), "dev": str(tmp_path / "rest.parquet")})
    assert prepare(apart)["test_overlap"] == {"train": 0, "dev": 0, "either": 0}
    some = BaseAssets(**{**given.__dict__, "train": str(tmp_path / "rest.parquet"), "dev": str(tmp_path / "shouted.parquet")})
    assert prepare(some)["test_overlap"] == {"train": 0, "dev": 3, "either": 3}


# --- report.md's Run section and the terminal summary, on a base run's results as results.json holds them ---


def _results(lang: str = "en", preset: str = "base", **flags) -> dict:
    assets = {"question_encoder": "/a/q", "context_encoder": "/a/c", "generator": "/a/bart", "train": "/a/train.parquet",
              "dev": "/a/dev.parquet", "test": "/a/test.parquet", "passages": "/a/psgs", "passages_b": None,
              "questions_a": None, "questions_b": None, "steps": None, "max_passages": None, "max_train": None, **flags}
    steps = flags.get("steps") or 30000
    return {"config": {"preset": asdict(get_preset(preset)), "seed": 0, "assets": assets,
                       "settings": {"rag": {"steps": steps, "batch_size": 128, "n_docs": 10},
                                    "closed_book": {"steps": steps, "batch_size": 128}}} | ({"lang": lang} if lang != "en" else {}),
            "retrieval": {"split": "test", "answer_recall": {"1": 0.25, "5": 0.5, "20": 0.75}, "answerable_questions": 4,
                          "skipped": "no test question has gold_passage_ids (the hub's QA sets and DPR's .qa.csv have none)"},
            "qa": {"rag_token": {"exact_match": 0.5, "f1": 0.5, "rougeL": 0.5}},
            "stages": {"data": {"n_train": 50, "n_dev": 20, "n_test": 30}, "index_a": {"n_passages": 1000}},
            "skipped": {}}


def test_a_full_size_run_names_its_sizes_without_the_shortened_sentence():
    report = render_report(_results())
    assert "## Run: models, data and sizes" in report and "- training questions: `/a/train.parquet`, 50 questions" in report
    assert "- passages of index A: `/a/psgs`, 1000 indexed" in report and "A shortened run" not in report
    # a cap the data stayed under cut nothing
    assert "A shortened run" not in render_report(_results(max_train=100, max_passages=5000))


@pytest.mark.parametrize(("flags", "cut"), [({"steps": 2}, "--steps 2 of the preset's 30000"),
                                            ({"max_train": 50}, "--max-train 50"),
                                            ({"max_passages": 1000}, "--max-passages 1000")])
def test_each_cut_is_named(flags, cut):
    assert f"A shortened run ({cut}): compare its numbers with runs of the same cut" in render_report(_results(**flags))


def test_the_run_section_in_chinese_and_only_for_the_hub_preset():
    report = render_report(_results("zh", steps=2))
    assert "## 本次运行：模型、数据和规模" in report and "- 训练问题：`/a/train.parquet`，50 道题" in report
    assert "这是缩短了的运行（--steps 2（预设为 30000））" in report and "A shortened run" not in report
    small = _results(preset="small")
    del small["config"]["assets"], small["config"]["settings"]
    assert "## Run" not in render_report(small)


def test_a_damaged_count_reads_na_not_a_traceback():
    results = _results()
    results["stages"]["data"]["n_train"] = "many"
    assert "- training questions: `/a/train.parquet`, n/a questions" in render_report(results)


def test_the_terminal_summary_shows_answer_recall(tmp_path, monkeypatch):
    import lewisrag.experiments.reproduce as R
    from lewisrag.cli import app

    monkeypatch.setattr(R, "reproduce", lambda *a, **kw: _results())  # a stand-in run
    r = CliRunner().invoke(app, ["reproduce", "--preset", "tiny", "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    assert "DPR's top-k accuracy" in r.stdout and "0.250" in r.stdout and "0.750" in r.stdout and "top-20" in r.stdout
    assert "gold-passage recall not measured: no test question has gold_passage_ids" in " ".join(r.stdout.split())
