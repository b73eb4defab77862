"""`lewisrag reproduce`: the tiny preset end to end (every results key, resume, determinism, the
report), the same in Chinese (`--lang zh`), the BM25 adapter, the closed-book labels, the base
preset's offline check; the small preset in both languages (slow)."""

from __future__ import annotations

import doctest
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest

from conftest import run_cli
from lewisrag.data.io import InputError, LewisragWarning
from lewisrag.eval.results import CLAIM_METRICS
from lewisrag.experiments.presets import PRESETS
from lewisrag.experiments.reproduce import check_hub_assets, reproduce

STAGES = ("world", "dpr", "index_a", "index_b", "bm25_a", "retrieval", "generator", "rag_token", "rag_sequence",
          "rag_token_frozen", "closed_book", "evaluate", "ablations", "knowledge_update", "stitched", "compare",
          "tasks_dpr", "tasks_index_a", "tasks_index_b",
          *(f"jeopardy_{s}" for s in ("rag_token", "rag_sequence", "closed_book", "evaluate")),
          *(f"fever_{s}" for s in ("verifier", "rag_token", "rag_sequence", "closed_book", "evaluate")))
TASKS = ("qa", "jeopardy", "fever")  # the tiny run trains every task, so every stage is covered once


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny") / "run"
    events = []
    reproduce(PRESETS["tiny"], out, seed=0, on_stage=lambda name, event, _: events.append((name, event)), tasks=TASKS)
    return out, events


def test_tiny_records_where_it_ran(tiny_run):
    """results.json and report.md say what the digits depend on: the CPU, torch, its threads, the
    library multiplying float32 linear layers (auto's choice for this CPU), the device."""
    import torch

    from lewisrag.data.cpu_linear import auto_kind, current_kind
    from lewisrag.data.threads import cpu_id

    out, _ = tiny_run
    env = json.loads((out / "results.json").read_text())["environment"]
    assert env["threads"] == 1 and env["torch"] == torch.__version__ and env["cpu"]  # the tiny preset runs on one thread
    assert env["cpu_id"] == cpu_id()
    assert env["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert env["cpu_linear"] == auto_kind() and current_kind() == "blas"  # the run's choice, torch's own again after it
    linear = "oneDNN" if env["cpu_linear"] == "onednn" else "BLAS"
    cpu = f"{env['cpu']} ({env['cpu_id']})" if env["cpu_id"] else env["cpu"]  # "AMD EPYC" alone is Zen 4 or Zen 5
    assert (f"Run on {cpu} with torch {env['torch']}, 1 CPU thread(s), float32 linear layers on the CPU through "
            f"{linear}, device") in (out / "report.md").read_text()


def _in_unit(x) -> bool:
    return isinstance(x, (int, float)) and 0.0 <= x <= 1.0


def test_tiny_runs_every_stage_then_the_report(tiny_run):
    out, events = tiny_run
    assert [n for n, e in events if e == "done"] == [*STAGES, "report"]
    for d in ("index_a", "index_b", "rag_token/best", "rag_sequence/best", "rag_token_frozen/final", "closed_book/final"):
        assert (out / d).is_dir(), d
    assert not list(out.glob("*.partial")) and not list(out.glob("*.tmp"))


def test_tiny_results_have_every_design_key_in_unit_range(tiny_run):
    out, _ = tiny_run
    r = json.loads((out / "results.json").read_text())
    assert _in_unit(r["retrieval"]["recall_at_k"])
    for s in ("rag_token", "rag_sequence", "closed_book", "stitched"):
        assert all(_in_unit(r["qa"][s][m]) for m in ("exact_match", "f1", "rougeL")), s
    for s in ("rag_token", "rag_sequence", "closed_book"):
        assert r["qa"][s]["long"]["n"] > 0 and all(_in_unit(r["qa"][s]["long"][m]) for m in ("rougeL", "bleu1"))
    for s in ("rag_token", "rag_sequence"):
        for i in ("index_a", "index_b"):
            assert all(_in_unit(r["knowledge_update"][s][i][q]) for q in ("questions_a", "questions_b"))
    ab = r["ablations"]
    assert ab["ks"] == [1, 2, 5, 10]
    assert _in_unit(ab["frozen_retriever"]["exact_match"]) and _in_unit(ab["bm25_retriever"]["exact_match"])
    assert all(_in_unit(ab["n_docs"][v][str(k)]) for v in ("rag_token", "rag_sequence") for k in ab["ks"])
    for s in ("rag_token", "rag_sequence", "stitched"):
        assert set(r["layers"][s]) >= {"faithfulness", "context_recall", "answer_completeness"}
        claims = r["layers"][s]["claims"]  # RAGChecker's diagnostics, each a mean with its interval
        assert set(claims) == set(CLAIM_METRICS) and all(c["mean"] is None or _in_unit(c["mean"]) for c in claims.values())
    assert r["stages"]["compare"]["findings"]  # the scorecard's sentences, which report.md prints
    for s in ("rag_token", "rag_sequence", "closed_book"):
        assert _in_unit(r["jeopardy"][s]["q_bleu1"]) and _in_unit(r["jeopardy"][s]["bleu1"]), s
        assert _in_unit(r["fever"][s]["acc3"]) and _in_unit(r["fever"][s]["acc2"]), s
    diff = r["jeopardy"]["differences"]["rag_token_minus_rag_sequence"]
    assert diff["low"] <= diff["mean_diff"] <= diff["high"] and diff["n"] == r["jeopardy"]["rag_token"]["n"]
    assert all(_in_unit(r["fever"]["retrieval"][k]) for k in ("top1_overlap", "top10_overlap"))
    assert r["fever"]["retrieval"]["top1_overlap"] <= r["fever"]["retrieval"]["top10_overlap"]
    swap = r["fever"]["swap"]
    assert swap["n"] > 0 and all(_in_unit(swap[v][i][lab]) for v in ("rag_token", "rag_sequence")
                                 for i in ("index_a", "index_b") for lab in ("labels_a", "labels_b"))


def test_tiny_records_pair_for_the_gate(tiny_run):
    out, _ = tiny_run
    r = json.loads((out / "results.json").read_text())
    keys = [(rec["id"], rec["system"]) for rec in r["records"]]
    assert len(keys) == len(set(keys))
    qa = [rec for rec in r["records"] if rec["system"] in ("rag_token", "rag_sequence", "closed_book")
          and rec.get("kind") == "short"]
    assert {rec["system"] for rec in qa} == {"rag_token", "rag_sequence", "closed_book"}
    assert all(set(rec["metrics"]) == {"exact_match", "f1", "rougeL"} for rec in qa)
    n_short = r["qa"]["rag_token"]["n"]
    assert sum(rec["system"] == "closed_book" and rec["kind"] == "short" for rec in r["records"]) == n_short


def test_tiny_results_name_the_judge_and_splitter_the_gate_compares(tiny_run, tmp_path):
    """results.json held judged scores but no judge or splitter block: runs scored by different
    splitters passed the gate as comparable."""
    from lewisrag.eval import gate
    from lewisrag.eval.statements import SPLITTER_NAME, SPLITTER_VERSION
    from lewisrag.data.io import InputError

    out, _ = tiny_run
    r = json.loads((out / "results.json").read_text())
    assert r["judge"]["name"] == "lexical" and len(r["judge"]["fingerprint"]) == 64
    assert r["splitter"] == {"name": SPLITTER_NAME, "version": SPLITTER_VERSION}
    (tmp_path / "results.json").write_text(json.dumps({**r, "splitter": {"name": SPLITTER_NAME, "version": "0"}}))
    with pytest.raises(InputError, match="not comparable.*splitter"):
        gate.gate(out, tmp_path)


def test_report_has_every_table_and_plot(tiny_run):
    out, _ = tiny_run
    report = (out / "report.md").read_text()
    assert report.startswith("# lewisrag reproduce")
    for heading in ("## Retrieval", "Table 1 style", "MS MARCO", "Knowledge update", "70%", "Table 6 style",
                    "What the scorecard shows", "Generator forward passes per answer",
                    "## Claim-level diagnostics (RAGChecker", "| metric | RAG-Token | RAG-Sequence | prompt-stitching RAG |",
                    "- Hallucination (a wrong claim in no passage): RAG-Token "):
        assert heading in report, heading
    assert "Jeopardy question generation and FEVER (Table 2 style" in report and "paired bootstrap" in report
    for png in ("training_curves.png", "em_vs_k.png", "swap_matrix.png", "token_posteriors.png", "position.png",
                "jeopardy_posteriors.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG" and f"]({png})" in report
    evidence = json.loads((out / "evidence.json").read_text())
    assert len(evidence["tokens"]) == len(evidence["posterior"])
    assert all(abs(sum(row) - 1) < 1e-4 for row in evidence["posterior"])  # p(z|x,y_t) sums to one over K
    clue = json.loads((out / "jeopardy" / "evidence.json").read_text())  # Figure 2's clue
    assert len(clue["tokens"]) == len(clue["posterior"]) and all(abs(sum(row) - 1) < 1e-4 for row in clue["posterior"])


def test_resume_skips_finished_stages_and_gives_the_same_results(tiny_run):
    out, _ = tiny_run
    before = (out / "results.json").read_bytes()
    (out / "stages" / "knowledge_update.json").unlink()  # as if killed during that stage
    events = []
    reproduce(PRESETS["tiny"], out, seed=0, resume=True, on_stage=lambda name, event, _: events.append((name, event)),
              tasks=TASKS)
    assert [n for n, e in events if e == "skipped"] == [s for s in STAGES if s != "knowledge_update"]
    assert [n for n, e in events if e == "done"] == ["knowledge_update", "report"]
    assert (out / "results.json").read_bytes() == before


def test_an_overwrite_run_killed_before_it_replaced_out_goes_on_with_the_same_command(tiny_run, tmp_path):
    """`reproduce --overwrite` runs in `.NAME.overwrite`; killed there, neither the same command (a
    fresh run into a folder with stages) nor --resume (refused with --overwrite) went on with it."""
    out, _ = tiny_run
    from lewisrag.data.outputs import mark

    users = tmp_path / "U"
    mark(users, "world")  # another kind of lewisrag output, which --overwrite replaces
    (users / "passages_a.jsonl").write_text("replaced, as --overwrite says")
    shutil.copytree(out, tmp_path / ".U.overwrite", symlinks=True)
    (tmp_path / ".U.overwrite" / "stages" / "knowledge_update.json").unlink()  # as if killed during that stage
    events = []
    with pytest.warns(LewisragWarning, match=r"resuming the killed --overwrite run in .*\.U\.overwrite: its finished stages"):
        reproduce(PRESETS["tiny"], users, seed=0, overwrite=True, tasks=TASKS,
                  on_stage=lambda name, event, _: events.append((name, event)))
    assert [n for n, e in events if e == "done"] == ["knowledge_update", "report"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["U"] and not (users / "passages_a.jsonl").exists()
    assert (users / "results.json").read_bytes() == (out / "results.json").read_bytes()


def test_a_fresh_run_in_a_finished_one_forgets_its_stages_so_resume_cannot_mix_them(tiny_run, tmp_path, monkeypatch):
    """A plain rerun with another seed, killed after its first stage: the earlier run's stage records
    and results are gone, so a `--resume` with the new seed redoes every later stage rather than
    taking the seed-0 run's for its own."""
    import lewisrag.experiments.reproduce as R

    out, _ = tiny_run
    run = tmp_path / "run"
    shutil.copytree(out, run, symlinks=True)

    def killed(*a, **kw):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(R, "train_world_dpr", killed)
        with pytest.raises(KeyboardInterrupt):
            reproduce(PRESETS["tiny"], run, seed=1, tasks=TASKS)
    assert sorted(p.name for p in (run / "stages").iterdir()) == ["world.json"]
    assert not any((run / name).exists() for name in ("results.json", "timings.json", "report.md", "report.html"))
    # nor the stages' own files at the top of RUN (plots, predictions), which stood beside the new run's
    assert [(out / p).exists() for p in ("predictions.json", "training_curves.png")] == [True, True]
    assert not list(run.glob("*.png")) and not (run / "predictions.json").exists() and not (run / "evidence.json").exists()
    assert json.loads((run / "config.json").read_text())["seed"] == 1
    with pytest.raises(InputError, match="another preset, seed or --tasks"):  # the seed-0 run is not resumable as such
        reproduce(PRESETS["tiny"], run, seed=0, resume=True, tasks=TASKS)


def test_resume_in_chinese_redoes_only_the_comparison_and_the_report(tiny_run, tmp_path):
    out, _ = tiny_run
    run = tmp_path / "run"
    shutil.copytree(out, run, symlinks=True)
    before, config = (run / "results.json").read_bytes(), (run / "config.json").read_bytes()

    def resume(lang: str) -> list[str]:
        events = []
        reproduce(PRESETS["tiny"], run, seed=0, resume=True, on_stage=lambda name, event, _: events.append((name, event)),
                  tasks=TASKS, lang=lang)
        return [n for n, e in events if e == "done"]

    assert resume("zh") == ["compare", "report"]  # report.html and the findings are the only text a stage writes
    assert json.loads((run / "config.json").read_text())["lang"] == "zh"
    report = (run / "report.md").read_text(encoding="utf-8")
    for heading in ("# lewisrag reproduce 复现报告 — 预设 `tiny`", "## 检索（测试集", "## 开放域问答（仿论文表 1", "## 长答案",
                    "## 知识更新：换索引（§4.5）", "## 消融实验（仿论文表 6", "## Jeopardy 问题生成与 FEVER 事实核查（仿论文表 2",
                    "## 回答分层", "评分卡说明了什么：", "每个回答的生成器前向次数：", "## 陈述级诊断（RAGChecker，评测问题）",
                    "| 指标 | RAG-Token | RAG-Sequence | 提示拼接 RAG |", "| BART（闭卷） |", "## 图", "_冒烟测试：数字没有意义_"):
        assert heading in report, heading
    for english in ("## Retrieval", "Table 1 style", "Knowledge update", "Table 6 style", "What the scorecard shows",
                    "Generator forward passes", "## Claim-level diagnostics", "prompt-stitching RAG", "closed book", "## Plots"):
        assert english not in report, english
    page = (run / "report.html").read_text(encoding="utf-8")
    assert '<html lang="zh-CN">' in page and "原始 RAG 与提示拼接 RAG：自己来判定每条陈述" in page
    assert resume("en") == ["compare", "report"]  # and back: the run is as it was
    assert (run / "results.json").read_bytes() == before and (run / "config.json").read_bytes() == config
    assert (run / "report.md").read_text().startswith("# lewisrag reproduce — preset `tiny`")


@pytest.mark.parametrize("deleted", ["evidence.json", "jeopardy/evidence.json", "fever/predictions.json"])
def test_resume_refuses_a_finished_stages_deleted_file(tiny_run, tmp_path, deleted):
    """A deleted evidence.json was resumed over in silence: token_posteriors.png drew no tokens, exit 0."""
    out, _ = tiny_run
    run = tmp_path / "run"
    shutil.copytree(out, run, symlinks=True)
    (run / deleted).unlink()
    with pytest.raises(InputError, match=rf"{re.escape(deleted)}: missing, though .*stages.* as finished"):
        reproduce(PRESETS["tiny"], run, seed=0, resume=True, tasks=TASKS)


def test_same_seed_same_results(tiny_run, tmp_path):
    out, _ = tiny_run
    reproduce(PRESETS["tiny"], tmp_path / "again", seed=0, tasks=TASKS)
    a, b = (json.loads((d / "results.json").read_text()) for d in (out, tmp_path / "again"))
    assert _differences(a, b) == []  # where they differ, named first: a byte compare of 28,000 lines hides it
    assert (tmp_path / "again" / "results.json").read_bytes() == (out / "results.json").read_bytes()


def test_results_hold_no_wall_clock_number(tiny_run):
    """The FEVER verifier's stage put its training minutes into results.json: 0.0 on an idle machine,
    0.01 under load, so the same seed's file differed now and then."""
    out, _ = tiny_run
    keys = set()
    json.loads((out / "results.json").read_text(), object_hook=lambda d: keys.update(d) or d)  # every object's keys
    assert not {k for k in keys if k in ("seconds", "minutes", "elapsed") or k.endswith(("_s", "_seconds", "_minutes"))}
    assert "fever_verifier" in json.loads((out / "timings.json").read_text())  # its time is kept there


def _differences(a, b, path: str = "") -> list[str]:
    """The paths at which two JSON values differ (the first 20)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in (_differences(a.get(k), b.get(k), f"{path}.{k}") if k in a and k in b else [f"{path}.{k}"])][:20]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{path}[{i}]")][:20]
    return [] if a == b else [path or "."]


def test_bm25_adapter_gives_the_model_bm25_documents_and_scores(tiny_run):
    import torch

    from lewisrag.training.checkpoint import load_trained
    from lewisrag.index.bm25 import BM25Index
    from lewisrag.rag_model.bm25_adapter import bm25_retrieve

    out, _ = tiny_run
    model, tokenizers = load_trained(out / "rag_token")
    bm25 = BM25Index.load(out / "bm25_a")
    questions = [json.loads(line)["question"] for line in (out / "world" / "test.jsonl").read_text().splitlines()[:3]]
    scores, rows = bm25.search(questions, 4)
    r = bm25_retrieve(model, questions, bm25, tokenizers, 4)
    assert r.context_input_ids.shape[0] == 3 * 4 and r.doc_scores.shape == (3, 4)
    assert torch.allclose(r.doc_scores, torch.as_tensor(scores)) and not r.doc_scores.requires_grad
    assert [[p.id for p in ps] for ps in r.passages] == [[bm25.passages[i].id for i in row] for row in rows]
    first = tokenizers.generator.decode(r.context_input_ids[0], skip_special_tokens=True).strip()
    assert first.startswith(bm25.passages[rows[0][0]].title) and first.endswith(questions[0])
    ids = model.generate(r.context_input_ids, r.context_attention_mask, r.doc_scores, n_docs=4, max_length=8)
    assert ids.shape[0] == 3
    with pytest.raises(ValueError, match="n_docs"):
        bm25_retrieve(model, questions, bm25, tokenizers, 0)


def test_closed_book_doctests():
    from lewisrag.training import closed_book

    assert doctest.testmod(closed_book).failed == 0


def test_closed_book_trains_from_the_question_alone(tiny_run, tmp_path, monkeypatch):
    from lewisrag.data.io import InputError
    from lewisrag.data.records import read_qa
    from lewisrag.training import closed_book as CB
    from lewisrag.training.closed_book import ClosedBookConfig, answer_closed_book, train_closed_book
    from lewisrag.data.pretrained import load_generator

    out, _ = tiny_run
    cfg = ClosedBookConfig(generator=str(out / "generator"), train=str(out / "world" / "train.jsonl"), steps=3,
                           batch_size=4, lr=1e-3)
    read = []  # what the encoder read at each training step, decoded

    def load(path, *a, **kw):
        model, tok = load_generator(path, *a, **kw)
        model.get_encoder().register_forward_pre_hook(
            lambda m, args, kwargs: read.extend(tok.batch_decode(kwargs["input_ids"], skip_special_tokens=True)),
            with_kwargs=True)
        return model, tok

    monkeypatch.setattr(CB, "load_generator", load)
    s = train_closed_book(cfg, tmp_path / "cb")
    monkeypatch.undo()
    questions = {" ".join(ex.question.split()) for ex in read_qa(cfg.train)}
    assert len(read) == 3 * 4 and all(" ".join(text.split()) in questions for text in read)  # no passage, nothing else
    log = [json.loads(line) for line in (tmp_path / "cb" / "log.jsonl").read_text().splitlines()]
    assert s["steps"] == 3 and [r["step"] for r in log] == [1, 2, 3]
    assert all(r["answer_nll"] >= r["loss"] > 0 for r in log)  # a sum over an answer's tokens >= their mean
    gen, tok = load_generator(tmp_path / "cb" / "final")
    answers = answer_closed_book(gen, tok, ["Who leads Valdoria?", "When was it founded?"], max_length=4)
    assert len(answers) == 2 and all(isinstance(a, str) for a in answers)
    with pytest.raises(InputError, match="not empty"):
        train_closed_book(cfg, tmp_path / "cb")


def test_the_tasks_retriever_trains_on_its_own_schedule(tiny_run, tmp_path, monkeypatch):
    """`Preset.tasks_dpr`, when set, is the tasks' retriever's schedule (the QA retriever keeps `dpr`);
    the run's seed and device apply to both."""
    from lewisrag.experiments import reproduce as R
    from lewisrag.training.dpr import DPRTrainConfig

    out, _ = tiny_run
    shutil.copytree(out / "world", tmp_path / "world")
    seen = {}

    def fake_train(cfg, queries, passages, path, on_step=None, overwrite=False):
        seen[path.name] = (cfg, len(queries))
        return {"final_loss": 0.0, "ctx_fingerprint": "x"}

    monkeypatch.setattr(R, "train_dpr", fake_train)
    preset = replace(PRESETS["tiny"], device="cpu", tasks_dpr=DPRTrainConfig(steps=7, attention_dropout=0.05))
    R.train_world_dpr(tmp_path, preset, 3, lambda *a: None)
    R.train_world_dpr(tmp_path, preset, 3, lambda *a: None, out="tasks_dpr", statements=True)
    assert seen["dpr"][0] == replace(PRESETS["tiny"].dpr, seed=3, device="cpu")
    assert seen["tasks_dpr"][0] == replace(preset.tasks_dpr, seed=3, device="cpu")
    assert seen["tasks_dpr"][1] > seen["dpr"][1]  # the statements too
    R.train_world_dpr(tmp_path, replace(preset, tasks_dpr=None), 3, lambda *a: None, out="tasks_dpr", statements=True)
    assert seen["tasks_dpr"][0] == seen["dpr"][0]  # None: the QA retriever's schedule
    assert PRESETS["small"].tasks_dpr.attention_dropout == 0.1 and PRESETS["small"].dpr.attention_dropout == 0.0


def test_base_preset_is_validated_offline_and_names_what_is_missing(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("LEWISRAG_HUB_DIR", "HF_HUB_CACHE")}
    env["HF_HOME"] = str(tmp_path / "empty_hf_home")
    r = subprocess.run([sys.executable, "-m", "lewisrag.cli", "reproduce", "--preset", "base", "--out", str(tmp_path / "x")],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and "facebook/bart-large" in r.stderr and "nq_open" in r.stderr
    assert not (tmp_path / "x").exists()


def test_base_assets_resolve_from_a_hub_dir_or_the_cache(tmp_path, monkeypatch):
    from lewisrag.data.io import InputError

    monkeypatch.delenv("LEWISRAG_HUB_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    bart = tmp_path / "hub" / "facebook" / "bart-large"
    bart.mkdir(parents=True)
    (bart / "config.json").write_text("{}")
    snapshot = tmp_path / "cache" / "datasets--nq_open" / "snapshots" / "abc" / "nq_open"
    snapshot.mkdir(parents=True)
    (snapshot / "README.md").write_text("an interrupted download")
    assets = ("model:facebook/bart-large", "dataset:nq_open")
    with pytest.raises(InputError) as e:  # folders that hold only part of what loading reads
        check_hub_assets(assets, tmp_path / "hub")
    assert f"model facebook/bart-large ({bart} holds no config.json and model.safetensors)" in str(e.value)
    assert "dataset nq_open (" in str(e.value) and "holds no .parquet or .arrow data files)" in str(e.value)
    (bart / "model.safetensors").write_bytes(b"")
    (snapshot / "validation-00000-of-00001.parquet").write_bytes(b"")
    found = check_hub_assets(assets, tmp_path / "hub")
    assert found["model:facebook/bart-large"].endswith("bart-large") and "datasets--nq_open" in found["dataset:nq_open"]
    with pytest.raises(InputError, match="model facebook/dpr-ctx_encoder-single-nq-base"):
        check_hub_assets(("model:facebook/dpr-ctx_encoder-single-nq-base",), tmp_path / "hub")


def test_a_missing_shipped_generator_is_named_before_anything_runs(tmp_path):
    from dataclasses import replace

    from lewisrag.data.io import InputError

    with pytest.raises(InputError, match="lewisrag pretrain"):
        reproduce(replace(PRESETS["tiny"], generator="shipped:no-such-generator"), tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_the_shipped_generator_is_verified_and_copied(tiny_run, tmp_path, monkeypatch):
    import shutil
    from dataclasses import replace

    from lewisrag.data.io import InputError
    from lewisrag.experiments import stages

    out, _ = tiny_run
    shutil.copytree(out / "generator", tmp_path / "shipped" / "g")
    monkeypatch.setattr(stages, "SHIPPED_DIR", tmp_path / "shipped")  # as stages.py imports it from training.pretrain
    preset = replace(PRESETS["tiny"], generator="shipped:g")
    assert stages.generator(tmp_path / "run", preset, 0, lambda *a: None)["source"] == "shipped:g"
    assert (tmp_path / "run" / "generator" / "model.safetensors").read_bytes() == (out / "generator" / "model.safetensors").read_bytes()
    (tmp_path / "shipped" / "g" / "model.safetensors").write_bytes(b"damaged")
    with pytest.raises(InputError, match="sha256"):
        stages.generator(tmp_path / "run2", preset, 0, lambda *a: None)


def test_a_shipped_generator_of_another_language_is_refused(tiny_run, tmp_path, monkeypatch):
    from lewisrag.data.io import InputError
    from lewisrag.experiments import stages

    out, _ = tiny_run
    shutil.copytree(out / "generator", tmp_path / "shipped" / "g-zh")  # pretrained on English text
    monkeypatch.setattr(stages, "SHIPPED_DIR", tmp_path / "shipped")
    preset = PRESETS["small"].in_language("zh")
    with pytest.raises(InputError, match="pretrained on en text, the world is in zh"):
        stages.shipped_generator(replace(preset, generator="shipped:g-zh"))


def test_in_language_picks_the_generator_of_the_language():
    small = PRESETS["small"]
    zh = small.in_language("zh")
    assert (zh.lang, zh.generator) == ("zh", "shipped:generator-small-zh") and zh.in_language("zh") is zh
    # the Chinese world's shorter schedule (lang_overrides), the rest as in English
    assert (zh.dpr.steps, zh.rag.steps, zh.stitched_steps) == (600, 200, small.stitched_steps)
    assert replace(zh, lang="en", generator=small.generator, dpr=small.dpr, rag=small.rag) == small
    assert zh.dpr.self_negatives_at == small.dpr.self_negatives_at and zh.rag.lr == small.rag.lr
    with pytest.raises(ValueError, match="from the English one"):
        zh.in_language("en")
    assert PRESETS["tiny"].in_language("zh").generator == "pretrain:tiny"  # pretrained here, in Chinese
    with pytest.raises(InputError, match="--lang"):
        PRESETS["base"].in_language("zh")


@pytest.fixture(scope="module")
def tiny_zh(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_zh") / "run"
    r = run_cli("reproduce", "--preset", "tiny", "--lang", "zh", "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    return out


def test_chinese_reproduction_runs_on_a_chinese_world_and_reports_in_chinese(tiny_zh, tmp_path):
    """`reproduce --lang zh`: the world, the generator pretrained here and the report are Chinese;
    `--report-lang en` on resume rewrites only the reports, in English, on the same Chinese run."""
    config = json.loads((tiny_zh / "config.json").read_text())
    assert config["preset"]["lang"] == "zh" and config["lang"] == "zh"
    assert json.loads((tiny_zh / "world" / "world.json").read_text())["lang"] == "zh"
    assert json.loads((tiny_zh / "generator" / "recipe.json").read_text())["config"]["lang"] == "zh"
    question = json.loads((tiny_zh / "world" / "test.jsonl").read_text(encoding="utf-8").splitlines()[0])["question"]
    assert any("\u4e00" <= ch <= "\u9fff" for ch in question)
    assert (tiny_zh / "report.md").read_text(encoding="utf-8").startswith("# lewisrag reproduce 复现报告 — 预设 `tiny`")
    results = json.loads((tiny_zh / "results.json").read_text())
    assert _in_unit(results["qa"]["rag_token"]["exact_match"]) and _in_unit(results["retrieval"]["bm25"]["recall_at_5"])
    run = tmp_path / "run"
    shutil.copytree(tiny_zh, run, symlinks=True)
    r = run_cli("reproduce", "--preset", "tiny", "--lang", "zh", "--report-lang", "en", "--out", str(run), "--resume")
    assert r.returncode == 0, r.stderr
    assert (run / "report.md").read_text().startswith("# lewisrag reproduce — preset `tiny`")
    again = json.loads((run / "results.json").read_text())
    assert again["config"].get("lang", "en") == "en"
    for key in ("retrieval", "qa", "knowledge_update", "ablations", "records"):  # the same numbers: only the reports changed
        assert again[key] == results[key], key
    r = run_cli("reproduce", "--preset", "tiny", "--out", str(run), "--resume")  # an English world is another run
    assert r.returncode == 2 and "config.json" in r.stderr and "Traceback" not in r.stderr


def test_chinese_world_has_no_task_templates(tmp_path):
    r = run_cli("reproduce", "--preset", "tiny", "--lang", "zh", "--tasks", "qa,fever", "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "English only" in r.stderr and "Traceback" not in r.stderr and not (tmp_path / "x").exists()


def test_resume_refuses_another_preset(tiny_run):
    out, _ = tiny_run
    r = run_cli("reproduce", "--preset", "tiny", "--seed", "3", "--out", str(out), "--resume")
    assert r.returncode == 2 and "config.json" in r.stderr and "Traceback" not in r.stderr


def test_tasks_must_be_known_and_include_qa(tmp_path):
    for tasks, message in (("qa,trivia", "unknown task 'trivia'"), ("fever", "must include qa")):
        r = run_cli("reproduce", "--preset", "tiny", "--tasks", tasks, "--out", str(tmp_path / "x"))
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr and not (tmp_path / "x").exists()


def test_a_seed_numpy_cannot_take_is_bad_input_before_any_stage(tmp_path):
    for seed in ("-1", str(2**32)):
        r = run_cli("reproduce", "--preset", "tiny", "--seed", seed, "--out", str(tmp_path / "x"))
        assert r.returncode == 2 and "--seed" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.splitlines()) == 1 and not (tmp_path / "x").exists()


def test_unknown_preset_is_bad_input(tmp_path):
    r = run_cli("reproduce", "--preset", "huge", "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "unknown preset 'huge'" in r.stderr and not (tmp_path / "x").exists()


@pytest.mark.parametrize("flags", [["--preset", "huge"], ["--tasks", "fever"], ["--lang", "xx"]])
def test_a_bad_flag_is_refused_before_torch_and_transformers_load(tmp_path, flags):
    """Presets and their training settings load neither, so a typo costs a moment, not ten seconds."""
    code = ("import sys\nfrom lewisrag.cli import main\nsys.argv = ['lewisrag', 'reproduce', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    print(e.code, sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code, *flags, "--out", str(tmp_path / "x")], capture_output=True, text=True)
    assert r.stdout.strip() == "2 []" and r.stderr.startswith("error: "), (r.stdout, r.stderr)


@pytest.mark.slow
def test_small_preset_targets(tmp_path):
    """The demo's acceptance numbers (about 12 minutes on 2 cores): DPR recall@5 >= 0.95; both RAG
    variants >= 0.90 EM, the closed book <= 0.10 and prompt-stitching RAG within 0.05 of the better
    Lewis variant on the test split; the matched index >= 0.90 and the mismatched one <= 0.05 for both
    variants."""
    results = reproduce(PRESETS["small"], tmp_path / "small", seed=0)
    assert results["retrieval"]["recall_at_5"] >= 0.95
    assert results["retrieval"]["bm25"]["recall_at_5"] >= 0.9
    qa = results["qa"]
    assert qa["rag_token"]["exact_match"] >= 0.9 and qa["rag_sequence"]["exact_match"] >= 0.9
    assert qa["closed_book"]["exact_match"] <= 0.1
    assert qa["stitched"]["exact_match"] >= max(qa["rag_token"]["exact_match"], qa["rag_sequence"]["exact_match"]) - 0.05
    for variant in ("rag_token", "rag_sequence"):
        m = results["knowledge_update"][variant]
        assert m["index_a"]["questions_a"] >= 0.9 and m["index_b"]["questions_b"] >= 0.9
        assert m["index_a"]["questions_b"] <= 0.05 and m["index_b"]["questions_a"] <= 0.05


@pytest.mark.slow
def test_small_chinese_preset_targets(tmp_path):
    """The Chinese demo (`reproduce --preset small --lang zh`, the shipped generator-small-zh) meets the
    English demo's targets but the stitched system's, which is not asserted here: 0.057 behind
    RAG-Sequence in the run of 2026-12-01 (target 0.05; README)."""
    results = reproduce(PRESETS["small"].in_language("zh"), tmp_path / "small_zh", seed=0, lang="zh")
    assert results["retrieval"]["recall_at_5"] >= 0.95
    qa = results["qa"]
    assert qa["rag_token"]["exact_match"] >= 0.9 and qa["rag_sequence"]["exact_match"] >= 0.9
    assert qa["closed_book"]["exact_match"] <= 0.1
    for variant in ("rag_token", "rag_sequence"):
        m = results["knowledge_update"][variant]
        assert m["index_a"]["questions_a"] >= 0.9 and m["index_b"]["questions_b"] >= 0.9
        assert m["index_a"]["questions_b"] <= 0.05 and m["index_b"]["questions_a"] <= 0.05


@pytest.fixture(scope="module")
def small_tasks(tmp_path_factory):
    """The small preset with every task (about 24 minutes on 2 cores: the QA demo, then 12 more)."""
    return reproduce(PRESETS["small"], tmp_path_factory.mktemp("small") / "run", seed=0, tasks=TASKS)


@pytest.mark.slow
def test_small_preset_task_targets(small_tasks):
    """Jeopardy in the paper's order with paired intervals clear of 0; FEVER's closed book no better
    than the majority label + 0.05 and its evidence in RAG-Token's top 10 for most claims; the QA
    targets unchanged."""
    jp, fv = small_tasks["jeopardy"], small_tasks["fever"]
    assert jp["rag_token"]["q_bleu1"] > jp["rag_sequence"]["q_bleu1"] > jp["closed_book"]["q_bleu1"]
    assert jp["differences"]["rag_token_minus_rag_sequence"]["low"] > 0
    assert jp["differences"]["rag_sequence_minus_closed_book"]["low"] > 0
    assert fv["closed_book"]["acc3"] <= fv["majority_rate"] + 0.05
    assert fv["retrieval"]["top10_overlap"] >= 0.8
    qa = small_tasks["qa"]
    assert qa["rag_token"]["exact_match"] >= 0.9 and qa["rag_sequence"]["exact_match"] >= 0.9


@pytest.mark.slow
def test_small_preset_fever_accuracy_target(small_tasks):
    """Met in the full run of 2026-12-01 (3-way 0.867 / 0.869, swap matched 0.856 / 0.875); a run of
    the FEVER stages alone on another world build gave RAG-Sequence's swap 0.846, so it sits near
    the edge (docs/recipe.md, 'The paper's other tasks')."""
    fv = small_tasks["fever"]
    assert fv["rag_token"]["acc3"] >= 0.85 and fv["rag_sequence"]["acc3"] >= 0.85
    for v in ("rag_token", "rag_sequence"):
        assert fv["swap"][v]["index_b"]["labels_b"] >= 0.85


def test_threads_auto_counts_idle_cpus_and_a_resumed_run_keeps_its_count(tmp_path):
    from dataclasses import replace

    from lewisrag.experiments.reproduce import _cpus, idle_cpus, run_threads

    assert 1 <= idle_cpus(0.1) <= _cpus()
    with pytest.MonkeyPatch.context() as m:  # a busy loop holds one core; a moment's activity holds none
        m.setattr("psutil.cpu_count", lambda: 2)
        m.setattr("os.sched_getaffinity", lambda pid: {0, 1})
        m.setattr("psutil.cpu_percent", lambda interval, percpu: [100.0, 3.0])
        assert idle_cpus(0.1) == 1
        m.setattr("psutil.cpu_percent", lambda interval, percpu: [55.0, 5.0])
        assert idle_cpus(0.1) == 2
    auto = replace(PRESETS["tiny"], threads=0)
    assert 1 <= run_threads(auto, tmp_path, resume=False) <= _cpus()
    (tmp_path / "config.json").write_text(json.dumps({"threads": 7}))
    assert run_threads(auto, tmp_path, resume=True) == 7  # recorded at the start, kept on resume
    assert run_threads(PRESETS["tiny"], tmp_path, resume=True) == 1  # a preset's fixed count wins


def test_a_second_run_into_the_same_folder_is_refused(tmp_path):
    """Two reproductions writing one folder would mix their stages' files: the second is refused
    while the first holds it (a kernel lock on the folder: a killed run leaves nothing behind)."""
    from lewisrag.data.outputs import exclusive

    out = tmp_path / "run"
    with exclusive(out):
        with pytest.raises(InputError, match="another lewisrag process is writing here") as e:
            reproduce(PRESETS["tiny"], out)
    assert e.value.source == str(out) and list(out.iterdir()) == []
    with exclusive(out):  # released with the first holder
        pass


def test_a_plain_rerun_into_a_run_folder_says_it_recomputes(tmp_path, monkeypatch, capsys):
    import lewisrag.experiments.reproduce as R
    from conftest import run_main
    from lewisrag.data.outputs import mark

    mark(tmp_path / "run", R.KIND)
    seen = []

    def stop(*a, **kw):
        seen.append(kw.get("resume"))
        if len(seen) > 1:  # the second call gets as far as its first stage
            kw["on_stage"]("world", "started", {})
        raise InputError("stand-in", "stopped here")

    monkeypatch.setattr(R, "reproduce", stop)
    # a bad input found before any stage runs is the one line on stderr: the note waits for a stage
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", tmp_path / "run")
    assert code == 2 and err.strip().splitlines() == ["error: stand-in: stopped here"] and seen
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", tmp_path / "run")
    assert code == 2 and "every stage runs again (--resume keeps the finished ones)" in err
    code, _, err = run_main(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", tmp_path / "run", "--resume")
    assert code == 2 and "every stage runs again" not in err


def test_the_summary_leaves_out_a_knowledge_update_that_did_not_run(tiny_run, capsys):
    """`reproduce --preset base` without --passages-b printed the swap table with no rows under the
    line saying it did not run."""
    from lewisrag.commands.experiments import _print_notes, _render

    out, _ = tiny_run
    results = json.loads((out / "results.json").read_text())
    _render(results, out)
    assert "knowledge update: EM by index" in capsys.readouterr().out
    results = {**results, "knowledge_update": {}, "skipped": {**(results.get("skipped") or {}), "knowledge_update": "no --passages-b"}}
    _render(results, out)
    printed = capsys.readouterr().out
    assert "not run: knowledge_update (no --passages-b)" in printed and "knowledge update: EM by index" not in printed


def test_the_swaps_notes_reach_results_the_summary_and_the_report(tiny_run, capsys):
    """What the swap noticed about its inputs (two indexes holding the same passages, questions it left
    out) was kept in knowledge_update.json alone: results.json, the printed summary and report.md said
    nothing of it."""
    from lewisrag.commands.experiments import _print_notes, _render
    from lewisrag.experiments.report import render_report

    out, _ = tiny_run
    results = json.loads((out / "results.json").read_text())
    swap = json.loads((out / "knowledge_update.json").read_text())
    stage = results["stages"]["knowledge_update"]
    assert (stage["n_questions"], stage["left_out"], stage["notes"]) == (swap["n_questions"], swap["left_out"], swap["notes"])
    assert "noted" not in render_report(results)  # the built-in world's two snapshots: nothing to note
    note = "indexes index_a and index_b hold the same 60 passages (by id and text): the swap cannot show knowledge updating"
    results["stages"]["knowledge_update"]["notes"] = [note]
    assert f"- {note}" in render_report(results).splitlines()
    _print_notes(results)
    _render(results, out)
    printed = capsys.readouterr()  # a note on stderr, one unwrapped line; the tables on stdout
    assert f"note: {note}" in printed.err.splitlines() and "note:" not in printed.out  # tests/test_notes_on_stderr.py


def test_damaged_logs_and_evidence_are_one_line_when_the_report_redraws_them(tmp_path):
    """A run's log.jsonl or evidence.json damaged since it was written (the report stage reads them
    again on --resume) ended in a KeyError or TypeError traceback (exit 3)."""
    from lewisrag.data.io import InputError
    from lewisrag.experiments.report import _evidence, _log

    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1, "loss": 2.5}\n{"step": 2, "loss": 2.1, "dev_em": 0.5}\n', encoding="utf-8")
    assert [r["step"] for r in _log(log)] == [1, 2]
    log.write_text('{"step": 1, "loss": 2.5}\n{"step": "2", "loss": 2.1}\n', encoding="utf-8")
    with pytest.raises(InputError) as e:
        _log(log)
    assert (e.value.line, e.value.field) == (2, "step")
    log.write_text('{"step": 1, "dev_em": 0.5}\n', encoding="utf-8")
    with pytest.raises(InputError, match="log is damaged"):
        _log(log)
    ev = {"question": "q", "answer": "a", "tokens": ["A", "b"], "posterior": [[0.9, 0.1], [0.2, 0.8]],
          "passages": [{"rank": 1, "id": "x", "title": "X", "prior": 0.6}, {"rank": 2, "id": "y", "title": "Y", "prior": 0.4}]}
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(ev), encoding="utf-8")
    assert _evidence(path) == ev
    for damage, field in (({"tokens": None}, "tokens"), ({"posterior": [[0.9], [0.2, 0.8]]}, "posterior[0]"),
                          ({"posterior": [[0.9, 0.1]]}, "posterior"), ({"passages": [{"rank": 1}, {}]}, "passages[0]")):
        path.write_text(json.dumps({**ev, **damage}), encoding="utf-8")
        with pytest.raises(InputError) as e:
            _evidence(path)
        assert e.value.field == field


def test_the_summary_shows_the_tasks_scores(tiny_run, capsys):
    """reproduce --tasks printed, and gave --json, only retrieval, QA and the swap: Table 2 was in results.json alone."""
    from lewisrag.commands import experiments as E

    out, _ = tiny_run
    results = json.loads((out / "results.json").read_text())
    got = E.summary(results, out)
    assert got["jeopardy"]["rag_token"] == {k: results["jeopardy"]["rag_token"][k] for k in ("q_bleu1", "bleu1")}
    assert got["fever"]["closed_book"] == {k: results["fever"]["closed_book"][k] for k in ("acc3", "acc2")}
    E._render(results, out)
    printed = capsys.readouterr().out
    assert "Jeopardy question generation and FEVER" in printed and "FEVER 3-way" in printed
    qa_only = {k: v for k, v in results.items() if k not in ("jeopardy", "fever")}
    assert "jeopardy" not in E.summary(qa_only, out)
