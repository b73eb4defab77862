"""`compare`: the stitched system learns cited targets; one scorecard scores RAG-Token, RAG-Sequence and
stitched RAG alike; its records load in the gate; report.html carries RAG-Token's heatmap; the CLI prints it."""

from __future__ import annotations

import doctest
import json
import math
import random
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import run_cli, run_main
from lewisrag.experiments.presets import PRESETS
from test_rag_train import build_rag_inputs, make_config

PRESET = replace(PRESETS["tiny"], stitched_steps=3, stitched_k=2, stitched_batch_size=4, stitched_lr=1e-4, position_questions=4)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A reproduce-like run folder: world, DPR, index A, starting generator, and both Lewis variants trained briefly."""
    from lewisrag.data.records import read_passages
    from lewisrag.index.bm25 import build_bm25_index
    from lewisrag.training.rag import train_rag

    inputs = build_rag_inputs(tmp_path_factory.getbasetemp() / "rag_inputs")
    run = tmp_path_factory.mktemp("compare_run")
    for name, src in (("world", "world"), ("dpr", "dpr"), ("index_a", "index")):
        (run / name).symlink_to(inputs[src])
    talking_generator(inputs["gen"], run / "generator", inputs["world"] / "train.jsonl")
    build_bm25_index(read_passages(inputs["world"] / "passages_a.jsonl"), run / "bm25_a")
    for variant in ("token", "sequence"):
        cfg = make_config(inputs, generator=str(run / "generator"), variant=variant, steps=2, lr=1e-4, eval_every=0, save_every=2)
        train_rag(cfg, run / f"rag_{variant}")
    return run


def talking_generator(src: Path, dst: Path, train: Path, steps: int = 200) -> None:
    """The tiny random BART, taught for a moment to answer questions without passages.

    Freshly initialized it ends every answer at once; then no statement, citation or heatmap
    column would exist to score. A couple of hundred steps make it emit answer-like words."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from lewisrag.data.records import read_qa

    g, tok = AutoModelForSeq2SeqLM.from_pretrained(src), AutoTokenizer.from_pretrained(src)
    pairs = [(ex.question, ex.answers[0]) for ex in read_qa(train) if ex.answers and ex.kind == "short"]
    rng, opt = random.Random(0), torch.optim.AdamW(g.parameters(), lr=3e-3)
    torch.manual_seed(0)
    for _ in range(steps):
        batch = rng.sample(pairs, 16)
        enc = tok([q for q, _ in batch], return_tensors="pt", padding=True)
        labels = tok([a for _, a in batch], return_tensors="pt", padding=True)["input_ids"]
        g(**enc, labels=labels.masked_fill(labels == tok.pad_token_id, -100)).loss.backward()
        opt.step()
        opt.zero_grad()
    g.save_pretrained(dst)
    tok.save_pretrained(dst)


@pytest.fixture(scope="module")
def stage(run_dir) -> dict:
    from lewisrag.experiments.compare import compare_stage, train_stitched_stage

    trained = train_stitched_stage(run_dir, PRESET, seed=0)
    return {**compare_stage(run_dir, PRESET, seed=0), "stitched_training": trained}


def test_doctests():
    import lewisrag.experiments.compare as C
    import lewisrag.training.stitched_train as S

    for module in (C, S):
        assert doctest.testmod(module).failed == 0


def test_targets_cite_the_gold_passage_at_a_seeded_random_position():
    from lewisrag.data.records import Passage
    from lewisrag.rag_model.stitched import CITATION, StitchSettings
    from lewisrag.training.stitched_train import _Example, make_batch

    gold = Passage("g", "Sepom", "The capital of Sepom is Tomgasze.")
    others = [Passage(f"p{i}", f"T{i}", f"text {i}") for i in range(4)]
    items = [_Example("Capital of Sepom?", "Tomgasze", gold, others if i % 2 else [others[0], gold, others[1]]) for i in range(40)]
    inputs, targets = make_batch(items, 3, StitchSettings(k=3), random.Random(0))
    positions = set()
    for text, target in zip(inputs, targets):
        n = int(CITATION.findall(target)[-1])
        assert target.startswith("Tomgasze [") and f"[{n}] Sepom / The capital" in text  # [n] is the gold passage
        assert text.count("Sepom / The capital") == 1 and len(CITATION.findall(text)) == 3  # k passages, gold once
        positions.add(n)
    assert positions == {1, 2, 3}  # every position is used
    assert make_batch(items, 3, StitchSettings(k=3), random.Random(0)) == (inputs, targets)  # seeded
    # the curriculum: 1..k passages per input, the gold one always among them and cited; question last
    inputs, targets = make_batch(items, 3, StitchSettings(k=3, question_last=True), random.Random(1), mixed_k=True)
    counts = {len(CITATION.findall(text)) for text in inputs}
    assert counts == {1, 2, 3}
    for text, target in zip(inputs, targets):
        n = int(CITATION.findall(target)[-1])
        assert f"[{n}] Sepom / The capital" in text and text.endswith(" // Capital of Sepom?")
    # in retrieval order the gold passage keeps its rank (2 when retrieved second), else it takes the last slot
    inputs, targets = make_batch(items[:2], 3, StitchSettings(k=3), random.Random(0), gold_position="retrieved")
    assert targets == ["Tomgasze [2]", "Tomgasze [3]"] and inputs[0].startswith("Capital of Sepom? // [1] T0 / text 0 [2] Sepom")
    # citing first names the same passage before the answer; the inputs do not change
    first = make_batch(items[:2], 3, StitchSettings(k=3), random.Random(0), gold_position="retrieved", cite_first=True)
    assert first == (inputs, ["[2] Tomgasze", "[3] Tomgasze"])


def test_extended_positions_read_short_inputs_as_before_and_long_ones_at_all():
    import torch
    from transformers import BartConfig, BartForConditionalGeneration

    from lewisrag.training.stitched_train import extend_positions

    torch.manual_seed(0)
    model = BartForConditionalGeneration(BartConfig(vocab_size=50, d_model=8, encoder_layers=1, decoder_layers=1,
                                                    encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16,
                                                    decoder_ffn_dim=16, max_position_embeddings=16)).eval()
    short, dec = torch.randint(3, 50, (2, 12)), torch.randint(3, 50, (2, 5))
    before = model(input_ids=short, decoder_input_ids=dec).logits
    assert extend_positions(model, 40) and not extend_positions(model, 30)
    assert torch.allclose(model(input_ids=short, decoder_input_ids=dec).logits, before)
    assert model(input_ids=torch.randint(3, 50, (1, 40)), decoder_input_ids=dec[:1]).logits.shape == (1, 5, 50)
    assert model.config.max_position_embeddings == 40


def test_stitched_training_saves_a_loadable_generator(run_dir, stage):
    from lewisrag.training.stitched_train import load_stitched

    trained = stage["stitched_training"]
    assert trained["steps"] == 3 and trained["n_train"] > 0 and math.isfinite(trained["final_loss"])
    model, tokenizer, settings = load_stitched(run_dir / "stitched")
    assert settings.k == 2 and not model.training


def test_stitched_generator_learns_to_cite(run_dir, tmp_path):
    from lewisrag.data.records import read_qa
    from lewisrag.experiments.compare import answer_all
    from lewisrag.experiments.systems import StitchedSystem
    from lewisrag.index import open_retriever
    from lewisrag.rag_model.stitched import CITATION
    from lewisrag.training.stitched_train import StitchedTrainConfig, load_stitched, train_stitched

    cfg = StitchedTrainConfig(index=str(run_dir / "index_a"), encoder=str(run_dir / "dpr"), generator=str(run_dir / "generator"),
                              train=str(run_dir / "world" / "train.jsonl"), k=2, steps=120, batch_size=16, lr=3e-3)
    summary = train_stitched(cfg, tmp_path / "stitched")
    assert summary["final_loss"] < 0.75 * summary["first_loss"]
    system = StitchedSystem(open_retriever(run_dir / "index_a", run_dir / "dpr"), *load_stitched(tmp_path / "stitched"))
    test = [ex for ex in read_qa(run_dir / "world" / "test.jsonl") if ex.kind == "short"]
    cited = [CITATION.findall(a.response) for a in answer_all(system, [ex.question for ex in test])]
    assert sum(bool(c) for c in cited) >= len(test) / 2  # most answers end with a citation ...
    assert all(n in ("1", "2") for c in cited for n in c)  # ... of one of the k=2 stitched passages


def _unit(v) -> bool:
    return v is None or (isinstance(v, (int, float)) and 0.0 <= v <= 1.0)


def test_compare_stage_returns_every_key(run_dir, stage):
    assert stage["judge"]["name"] == "lexical" and stage["splitter"]["name"]
    assert set(stage["qa"]) == {"stitched"} and set(stage["qa"]["stitched"]) >= {"exact_match", "f1", "rougeL"}
    assert all(_unit(v) for k, v in stage["qa"]["stitched"].items() if k not in ("n", "answered"))
    assert stage["qa"]["stitched"]["answered"] == stage["qa"]["stitched"]["n"]  # the trained reader answers every question
    for system in ("rag_token", "rag_sequence", "stitched"):
        layer = stage["layers"][system]
        for m in ("faithfulness", "context_recall", "answer_completeness", "citation_recall", "citation_precision"):
            assert m in layer and _unit(layer[m]), (system, m, layer.get(m))
        assert sum(layer["failure_layers"].values()) == layer["n"] == 37  # every eval.jsonl question, once
        assert "latency_s" not in layer and stage["timings"][system]["latency_s"] > 0
        assert layer["tokens_per_answer"] > 0
        curve = stage["position"][system]
        assert curve["positions"] == [1, 2] and all(_unit(v) for v in curve["exact_match"])
    # a Lewis model reads K=2 inputs: 2 encoder passes, 2 decoder passes per token (RAG-Sequence: each document's
    # search) and its rescoring, one teacher-forced pass per candidate and input (RAG-Token's 1, RAG-Sequence's 1 or 2)
    assert 2 + 2 + 2 <= stage["layers"]["rag_token"]["forward_passes_per_answer"] <= 2 + 2 * 31 + 2  # at most 31 new tokens
    assert 2 + 2 + 2 <= stage["layers"]["rag_sequence"]["forward_passes_per_answer"] <= 2 + 2 * 31 + 2 * 2
    assert 1 + 1 <= stage["layers"]["stitched"]["forward_passes_per_answer"] <= 1 + 40  # 8 more for its citation
    for system in ("rag_token", "rag_sequence"):  # order cannot change a marginal over documents
        assert len(set(stage["position"][system]["exact_match"])) == 1
    assert (run_dir / "position.png").read_bytes()[:4] == b"\x89PNG"


def test_records_load_in_the_gate(stage, tmp_path):
    from lewisrag.eval.gate.inputs import load_run

    (tmp_path / "results.json").write_text(json.dumps({"records": stage["records"], "judge": {}}), encoding="utf-8")
    run = load_run(tmp_path, ("faithfulness", "citation_recall"))
    assert len(run.records) == 3 * 37
    assert {s for _, s in run.records} == {"rag_token", "rag_sequence", "stitched"}
    cited = [r for r in stage["records"] if r["system"] == "rag_sequence" and r["category"] != "not_in_kb" and not r["refused"]]
    assert cited and all(r["statements"] and r["statements"][0]["citations"] for r in cited if r["response"])  # implicit [n]


def test_report_html_is_self_contained_with_the_token_heatmap(stage):
    page = stage["report_html"]
    assert page.startswith("<!") or page.lstrip().lower().startswith("<!doctype")
    assert "Document posteriors per generated token" in page  # RAG-Token's heatmap
    assert "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page and "<script src" not in page
    token = [r for r in stage["records"] if r["system"] == "rag_token" and r.get("token_posteriors")]
    assert token and all(math.isclose(sum(row), 1, abs_tol=1e-3) for r in token for row in r["token_posteriors"]["matrix"])


def test_cli_prints_the_scorecard(run_dir, stage, tmp_path):
    from lewisrag.cli import app
    from lewisrag.eval.gate.inputs import load_run

    out = tmp_path / "cmp"
    r = CliRunner().invoke(app, ["compare", "--run", str(run_dir), "--systems", "rag_token,stitched", "--out", str(out),
                                 "--position-questions", "3"])
    assert r.exit_code == 0, r.output
    for label in ("EM", "ROUGE-L", "recall@2", "not_in_kb refused", "faithfulness", "citation precision", "forward passes", "latency", "rag_token", "stitched"):
        assert label in r.output, label
    assert load_run(out, ("faithfulness",)).records
    assert "latency_s" not in (out / "results.json").read_text() and (out / "report.html").exists()
    report = (out / "report.md").read_text()
    assert "| metric | rag_token | stitched |" in report and "Position probe, `stitched`" in report
    assert (out / "position.png").exists()


def test_cli_writes_the_reports_in_chinese(run_dir, stage, tmp_path):
    from lewisrag.cli import app

    out = tmp_path / "cmp_zh"
    r = CliRunner().invoke(app, ["compare", "--run", str(run_dir), "--systems", "rag_token,stitched", "--out", str(out),
                                 "--position-questions", "3", "--lang", "zh"])
    assert r.exit_code == 0, r.output
    assert "知识库里没有：拒答数" in r.output and "not_in_kb refused" not in r.output  # the console table follows --lang
    report = (out / "report.md").read_text(encoding="utf-8")
    for heading in ("# 原始 RAG 与提示拼接 RAG", "| 指标 | rag_token | stitched |", "| 忠实度 |", "| 引用精确率 |",
                    "| 每个回答的前向次数 |", "| 知识库里没有：拒答数 |", "- 位置探针，`stitched`：", "- 每个回答的生成器前向次数：",
                    "## 陈述级诊断", "| 陈述级：幻觉 |"):
        assert heading in report, heading
    for english in ("# Original versus", "| metric |", "Position probe", "forward passes", "## Claim-level", "refused |"):
        assert english not in report, english
    page = (out / "report.html").read_text(encoding="utf-8")
    assert '<html lang="zh-CN">' in page and "每个生成 token 的文档后验" in page and "Document posteriors" not in page
    assert json.loads((out / "results.json").read_text())["config"]["lang"] == "zh"


def test_scorecard_shows_the_three_systems_claim_diagnostics(stage):
    from lewisrag.eval.results import CLAIM_METRICS
    from lewisrag.experiments.compare import SYSTEMS, render_markdown, scorecard_rows

    for system in SYSTEMS:
        summaries = stage["layers"][system]["claims"]
        assert set(summaries) == set(CLAIM_METRICS)
        for m, s in summaries.items():
            assert s["n"] + s["nan"] == 37 - stage["layers"][system]["not_in_kb"]["n"], (system, m)
            assert s["mean"] is None or s["interval"]["low"] <= s["mean"] <= s["interval"]["high"], (system, m)
    card = {**stage["scorecard"], "layers": stage["layers"], "timings": stage["timings"], "position": stage["position"]}
    names, rows = scorecard_rows(card)
    hal = next(r for r in rows if r[0] == "claims: hallucination")
    assert hal[1:] == [stage["layers"][n]["claims"]["claims.hallucination"]["mean"] for n in names]
    report = render_markdown(card)
    section = report[report.index("## Claim-level diagnostics"):]
    assert "| metric | `rag_token` | `rag_sequence` | `stitched` |" in section
    sentence = next(line for line in section.splitlines() if line.startswith("- Hallucination"))
    for n in SYSTEMS:  # where each system's wrong claims come from, as its own numbers say
        c = {m: stage["layers"][n]["claims"][f"claims.{m}"]["mean"] for m in
             ("noise_sensitivity_in_relevant", "noise_sensitivity_in_irrelevant", "hallucination")}
        noise, nowhere = c["noise_sensitivity_in_relevant"] + c["noise_sensitivity_in_irrelevant"], c["hallucination"]
        where = ("more from the passages than from nowhere" if noise > nowhere else "more from nowhere than from the passages"
                 if nowhere > noise else "as much from the passages as from nowhere")
        group = next(g for g in sentence.split("wrong claims come ")[1].split("; ") if f"`{n}` (" in g)
        assert group.startswith(where) and f"`{n}` ({noise:.3f} against {nowhere:.3f})" in group, sentence
    # a judge with three-way labels adds the contradicted claims: a row in the scorecard and in the section
    counts = {"by_reference": 1, "labelled": 4, "by_reference_rate": 0.25, "by_a_context": 2, "answers": 3,
              "answers_contradicted": 2}
    layers = {n: {**v, "claims": {**v["claims"], "claims.contradictions": counts}} if n == "stitched" else v
              for n, v in stage["layers"].items()}
    names, rows = scorecard_rows({**card, "layers": layers})
    assert next(r for r in rows if r[0] == "claims: contradicted claims")[1:] == [0.25 if n == "stitched" else None
                                                                                 for n in names]
    assert not any(r[0] == "claims: contradicted claims" for r in scorecard_rows(card)[1])
    row = "| contradicted claims | – | – | 1 of 4 (0.250) by the reference, 2 by a passage |"
    assert row in render_markdown({**card, "layers": layers}) and row not in report


def test_cli_trains_a_stitched_generator(run_dir, tmp_path):
    from lewisrag.cli import app

    r = CliRunner().invoke(app, ["train", "stitched", "--index", str(run_dir / "index_a"), "--generator", str(run_dir / "generator"),
                                 "--train", str(run_dir / "world" / "train.jsonl"), "--out", str(tmp_path / "s"), "--n-docs", "2",
                                 "--steps", "1", "--batch-size", "2"])
    assert r.exit_code == 0, r.output
    assert "final loss" in r.output and json.loads((tmp_path / "s" / "stitched.json").read_text())["settings"]["k"] == 2
    r = CliRunner().invoke(app, ["train", "stitched", "--index", str(run_dir / "index_a"), "--generator", str(run_dir / "generator"),
                                 "--train", str(run_dir / "world" / "train.jsonl"), "--out", str(tmp_path / "bf16"), "--n-docs", "2",
                                 "--steps", "2", "--batch-size", "2", "--device", "cpu", "--mixed-precision", "bf16", "--json"])
    assert r.exit_code == 0, r.output
    config = json.loads((tmp_path / "bf16" / "stitched.json").read_text())["config"]
    assert config["mixed_precision"] == "bf16" and config["device"] == "cpu" and math.isfinite(json.loads(r.stdout)["final_loss"])


def test_gold_ids_outside_the_runs_passages_are_named_not_scored_as_misses(run_dir, tmp_path, monkeypatch, capsys):
    """compare --questions and train stitched --train read gold passage ids as `eval retrieval` does:
    one the index does not hold is bad input (it scored recall 0 at every k), and a question with
    none is left out of stitched training in the open."""
    lines = (run_dir / "world" / "eval.jsonl").read_text().splitlines()[:3]
    recs = [json.loads(line) for line in lines]
    recs[2]["gold_passage_ids"] = ["nope-1"]
    bad = tmp_path / "questions.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in recs))
    code, _, err = run_main(monkeypatch, capsys, "compare", "--run", run_dir, "--systems", "rag_token", "--questions", bad,
                            "--position-questions", 0, "--out", tmp_path / "cmp")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{bad}:3: field 'gold_passage_ids': gold passage id 'nope-1' is not in the run's passages" in err
    assert not (tmp_path / "cmp").exists()
    train = [json.loads(line) for line in (run_dir / "world" / "train.jsonl").read_text().splitlines()[:6]]
    train[4]["gold_passage_ids"] = ["nope-1"]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
    args = ["train", "stitched", "--index", run_dir / "index_a", "--generator", run_dir / "generator", "--n-docs", 2,
            "--steps", 1, "--batch-size", 2, "--train", tmp_path / "train.jsonl"]
    code, _, err = run_main(monkeypatch, capsys, *args, "--out", tmp_path / "s")
    assert code == 2 and "train.jsonl:5: field 'gold_passage_ids'" in err and not (tmp_path / "s").exists(), err
    train[4]["gold_passage_ids"] = []
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
    code, out, err = run_main(monkeypatch, capsys, *args, "--out", tmp_path / "s", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["n_train"] + summary["n_left_out"] == 6 and summary["n_left_out"] >= 1


def test_cli_missing_system_exits_2(tmp_path):
    (tmp_path / "empty").mkdir()
    r = run_cli("compare", "--run", str(tmp_path / "empty"), "--systems", "stitched")
    assert r.returncode == 2 and "error:" in r.stderr and "stitched" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize(("run", "args", "message"), [
    ("missing", [], "field '--run': run folder not found"),  # not blamed on --out, which defaults to RUN/compare
    ("a-file", [], "field '--run': is not a folder"),
    ("empty", ["--stitched-generator", "chat:m", "--llm-base-url", "http://127.0.0.1:9/v1", "--timeout", "nan"],
     "--timeout: must be between 0 and 86400 seconds"),  # NaN and inf too
])
def test_cli_bad_run_or_timeout_exits_2_in_one_line(tmp_path, run, args, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    r = run_cli("compare", "--run", str(tmp_path / run), *args)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "empty" / "compare").exists()


def test_findings_say_when_exact_match_left_failed_answers_out():
    """EM is averaged over the answered questions: a system whose generator failed on some is measured on fewer."""
    from lewisrag.experiments.compare import findings

    layers = {"forward_passes_per_answer": 1.0}
    card = {"qa": {"rag_token": {"exact_match": 0.9, "n": 10, "answered": 10},
                   "stitched": {"exact_match": 0.95, "n": 10, "answered": 8}},
            "layers": {"rag_token": layers, "stitched": layers}}
    first = findings(card)[0]
    assert "`stitched` is best with 0.950" in first and "`stitched` 8/10" in first and "rag_token` 10" not in first
    assert "`stitched` 8/10" in findings(card, "zh")[0]
    card["qa"]["stitched"]["answered"] = 10
    assert "answered questions only" not in findings(card)[0]
