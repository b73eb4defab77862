"""One flag name per concept across commands (README "CLI conventions"), `--json` on every command
that prints results, and the old spellings kept for one release: they warn once on stderr and
behave the same; an old and a new spelling given different values is a usage error (one line, exit 2).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import run_main, write_jsonl
from lewisrag.cli import app
from test_rag_train import TRAIN_FLAGS, cli_flags, make_config, rag_inputs  # noqa: F401  (session fixture)

# the deprecated spellings, each with its canonical name (kept hidden for one release)
DEPRECATED = {"-k", "--k", "--data", "--mixed-k", "--cpu", "--base-url"}

# the canonical names each command must list in --help
CANONICAL = {
    ("world",): ["--out", "--seed", "--overwrite", "--json"],
    ("chunk",): ["--docs", "--out", "--overwrite", "--json"],
    ("shard",): ["--passages", "--out", "--rows-per-shard", "--max-passages", "--overwrite", "--json"],
    ("index", "build"): ["--passages", "--encoder", "--out", "--batch-size", "--device", "--overwrite", "--json"],
    ("index", "search"): ["--index", "--query", "--n-docs", "--encoder", "--context-encoder", "--swap", "--json"],
    ("index", "tune"): ["--index", "--questions", "--qa-fields", "--n-docs", "--encoder", "--context-encoder", "--swap", "--seed",
                       "--json"],
    ("index", "verify"): ["--index", "--json"],
    ("index", "cut"): ["--passages", "--encoder", "--context-encoder", "--questions", "--qa-fields", "--seed", "--device",
                       "--out", "--overwrite", "--json"],
    ("index", "targets"): ["--index", "--questions", "--qa-fields", "--n-docs", "--encoder", "--context-encoder", "--swap",
                           "--out", "--overwrite", "--json"],
    ("train", "dpr"): ["--train", "--passages", "--out", "--init", "--init-question", "--init-context", "--steps", "--batch-size",
                       "--lr", "--seed", "--device", "--mixed-precision", "--overwrite", "--json"],
    ("train", "rag"): ["--index", "--encoder", "--context-encoder", "--generator", "--train", "--dev", "--train-kinds", "--out",
                       "--n-docs", "--swap", "--resume", "--steps", "--batch-size", "--lr", "--seed", "--device",
                       "--mixed-precision", "--overwrite", "--json"],
    ("train", "stitched"): ["--index", "--encoder", "--context-encoder", "--generator", "--train", "--train-kinds", "--out",
                            "--n-docs", "--mixed-n-docs", "--steps", "--batch-size", "--lr", "--seed", "--device",
                            "--mixed-precision", "--overwrite", "--json"],
    ("eval", "retrieval"): ["--index", "--questions", "--encoder", "--context-encoder", "--recall-at", "--swap", "--json"],
    ("eval", "answers"): ["--answers", "--judge", "--out", "--recall-at", "--llm-temperature", "--llm-json-mode",
                          "--no-llm-json-mode", "--overwrite", "--json"],
    ("eval", "bughunt"): ["--out", "--judge", "--llm-temperature", "--llm-json-mode", "--no-llm-json-mode", "--overwrite", "--json"],
    ("gate",): ["--baseline", "--candidate", "--json"],
    ("calibrate",): ["--judge", "--labels", "--out", "--batch-size", "--llm-temperature", "--llm-json-mode", "--no-llm-json-mode",
                     "--overwrite", "--json"],
    ("reproduce",): ["--out", "--preset", "--seed", "--resume", "--threads", "--device", "--overwrite", "--json"],
    ("ask",): ["--model", "--index", "--n-docs", "--num-beams", "--max-length", "--swap", "--json"],
    ("export",): ["--model", "--index", "--out", "--swap", "--overwrite", "--json"],
    ("swap",): ["--model", "--index", "--questions", "--swap", "--num-beams", "--max-length", "--batch-size", "--device", "--out",
                "--overwrite", "--json"],
    ("compare",): ["--run", "--questions", "--out", "--device", "--overwrite", "--json"],
    ("pretrain",): ["--out", "--preset", "--steps", "--seed", "--device", "--overwrite", "--json"],
}


def _commands():
    """(path, click command) for every leaf command of `lewisrag`."""
    import typer

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                yield from walk(sub, (*path, name))
        else:
            yield path, cmd

    return list(walk(typer.main.get_command(app), ()))


def test_every_command_is_covered():
    assert {path for path, _ in _commands()} == set(CANONICAL)


@pytest.mark.parametrize("path", list(CANONICAL), ids=" ".join)
def test_help_lists_the_canonical_names_and_hides_the_old_ones(path):
    r = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    for flag in CANONICAL[path]:
        assert flag in r.stdout, (path, flag)
    cmd = dict(_commands())[path]
    visible = {o for p in cmd.params if not getattr(p, "hidden", False) for o in (*p.opts, *p.secondary_opts)}
    hidden = {o for p in cmd.params if getattr(p, "hidden", False) for o in p.opts}
    assert set(CANONICAL[path]) <= visible, (path, set(CANONICAL[path]) - visible)  # "--init" in the help is also "--init-question"
    assert not visible & DEPRECATED, (path, visible & DEPRECATED)
    assert hidden <= DEPRECATED | {"old_file"}, (path, hidden)  # old_file: eval answers' positional FILE


@pytest.mark.parametrize("group", [(), ("index",), ("train",), ("eval",)], ids=lambda g: " ".join(g) or "lewisrag")
def test_the_command_lists_show_each_summary_as_one_paragraph(group):
    """typer's rich command list kept the docstrings' line breaks, cutting summaries mid-sentence
    ("the knowledge-update" / "questions and the evaluation set.")."""
    r = CliRunner().invoke(app, [*group, "--help"], env={"COLUMNS": "1000"})
    assert r.exit_code == 0, r.output
    rows = [line.strip("│ ") for line in r.stdout.splitlines() if line.startswith("│")]
    commands = {path[len(group)] for path in CANONICAL if path[:len(group)] == group and len(path) > len(group)}
    listed = [row for row in rows if row.split(" ", 1)[0] in commands]
    assert {row.split(" ", 1)[0] for row in listed} == commands, rows
    for row in listed:
        assert row.rstrip().endswith((".", ")")), row  # the whole summary on the command's own line


@pytest.mark.parametrize("path", list(CANONICAL), ids=" ".join)
def test_an_empty_value_is_refused_for_every_flag(path, tmp_path, monkeypatch, capsys):
    """`--judge ""` used to be read as "not given" and `--out ""` as the current folder: no flag takes
    an empty or blank value, so each is one line naming the flag, exit 2, before anything runs."""
    monkeypatch.chdir(tmp_path)
    cmd = dict(_commands())[path]
    takes_value = [p for p in cmd.params if p.param_type_name == "option" and not p.is_flag and not p.hidden]
    assert takes_value, path
    for param in takes_value:
        for empty in ("", "  "):
            code, out, err = run_main(monkeypatch, capsys, *path, param.opts[0], empty)
            assert code == 2 and f"'{param.opts[0]}'" in err and "is empty" in err and len(err.strip().splitlines()) == 1, (param.opts, err)
            assert ("for its default" in err) is (not param.required), (param.opts, err)  # a required flag has none
            assert not out and not list(tmp_path.iterdir()), (param.opts, out)


def _warned(err: str, old: str, new: str) -> bool:
    return f"warning: {old} is deprecated here, use {new} (it will be removed in the next release)" in err.splitlines()


# ---------------------------------------------------------------------------------------------
# old spellings: same behaviour, one warning line


@pytest.fixture(scope="module")
def bm25(tiny_corpus, tmp_path_factory):
    from lewisrag.data.records import read_passages
    from lewisrag.index.bm25 import build_bm25_index

    out = tmp_path_factory.mktemp("flags") / "bm25"
    build_bm25_index(read_passages(tiny_corpus["passages"]), out)
    return out


def test_index_search_k_is_n_docs(bm25, monkeypatch, capsys):
    base = ["index", "search", "--index", bm25, "-q", "capital founded 1805", "--json"]
    code, new, err = run_main(monkeypatch, capsys, *base, "--n-docs", 3)
    assert code == 0 and "warning" not in err, err
    code, old, err = run_main(monkeypatch, capsys, *base, "-k", 3)
    assert code == 0 and _warned(err, "-k", "--n-docs"), err
    assert json.loads(old) == json.loads(new) and len(json.loads(new)) == 3
    code, _, err = run_main(monkeypatch, capsys, *base, "-k", 3, "--n-docs", 3)  # the same value twice: fine
    assert code == 0 and _warned(err, "-k", "--n-docs")


def test_eval_retrieval_data_and_k_are_questions_and_recall_at(bm25, tiny_corpus, monkeypatch, capsys):
    base = ["eval", "retrieval", "--index", bm25, "--json"]
    code, new, err = run_main(monkeypatch, capsys, *base, "--questions", tiny_corpus["qa"], "--recall-at", 1, "--recall-at", 2)
    assert code == 0 and "warning" not in err, err
    code, old, err = run_main(monkeypatch, capsys, *base, "--data", tiny_corpus["qa"], "-k", 1, "-k", 2)
    assert code == 0 and _warned(err, "--data", "--questions") and _warned(err, "-k", "--recall-at"), err
    assert json.loads(old) == json.loads(new)
    assert {"recall@1", "recall@2", "hit@1", "hit@2"} <= set(json.loads(new)[str(bm25)])


def test_eval_retrieval_table_says_how_many_questions_were_not_scored(bm25, tiny_corpus, tmp_path, monkeypatch, capsys):
    rows = [json.loads(line) for line in Path(tiny_corpus["qa"]).read_text().splitlines()]
    half = [r if i % 2 else {**r, "gold_passage_ids": []} for i, r in enumerate(rows)]
    qa = tmp_path / "half.jsonl"
    qa.write_text("".join(json.dumps(r) + "\n" for r in half))
    code, out, err = run_main(monkeypatch, capsys, "eval", "retrieval", "--index", bm25, "--questions", qa)
    assert code == 0, err
    assert f"{(len(rows) + 1) // 2} of {len(rows)} questions have no gold_passage_ids: not scored" in out


ANSWERS = [{"id": "q1", "user_input": "Who leads Valdoria?", "response": "Ana Bel leads Valdoria.", "reference": "Ana Bel",
            "retrieved_contexts": [{"id": "p2", "text": "Lenz is a city."}, {"id": "p1", "text": "Valdoria is led by Ana Bel."}],
            "gold_passage_ids": ["p1"]},
           {"id": "q2", "user_input": "What is the capital?", "response": "Mora.", "reference": "Lenz",
            "retrieved_contexts": [{"id": "p2", "text": "The capital is Lenz."}], "gold_passage_ids": ["p3"]}]


def test_eval_answers_positional_file_and_k_still_work(tmp_path, monkeypatch, capsys):
    src = write_jsonl(tmp_path / "answers.jsonl", ANSWERS)
    code, new, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", src, "--out", tmp_path / "new",
                              "--recall-at", 1, "--recall-at", 2, "--json")
    assert code == 0 and "warning" not in err, err
    code, old, err = run_main(monkeypatch, capsys, "eval", "answers", src, "--out", tmp_path / "old", "-k", 1, "-k", 2, "--json")
    assert code == 0 and _warned(err, "the positional FILE", "--answers FILE") and _warned(err, "-k", "--recall-at"), err
    assert json.loads(old) == json.loads(new)
    assert json.loads(new)["recall_at_k@1"]["mean"] == 0 and json.loads(new)["recall_at_k@2"]["mean"] == 0.5
    assert json.loads((tmp_path / "old" / "config.json").read_text())["ks"] == [1, 2]


def test_eval_answers_needs_an_answers_file(tmp_path, monkeypatch, capsys):
    code, out, err = run_main(monkeypatch, capsys, "eval", "answers", "--out", tmp_path / "run")
    assert code == 2 and out == "" and err.splitlines() == [
        "error: Missing option '--answers'. (see `lewisrag eval answers --help`)"]
    assert not (tmp_path / "run").exists()


def test_ask_k_is_n_docs(tmp_path, monkeypatch, capsys):
    code, _, err = run_main(monkeypatch, capsys, "ask", "--model", tmp_path, "--index", tmp_path, "-k", 0, "who?")
    assert code == 2 and _warned(err, "-k", "--n-docs"), err
    assert err.splitlines()[-1].startswith("error: --n-docs: must be at least 1")  # checked as --n-docs would be


def test_train_stitched_k_and_mixed_k_still_work_and_json(rag_inputs, tmp_path, monkeypatch, capsys):  # noqa: F811
    w = rag_inputs["world"]
    code, out, err = run_main(monkeypatch, capsys, "train", "stitched", "--index", rag_inputs["index"], "--generator",
                              rag_inputs["gen"], "--train", w / "train.jsonl", "--out", tmp_path / "s", "--k", 2, "--mixed-k",
                              "--steps", 1, "--batch-size", 2, "--json")
    assert code == 0, err
    assert _warned(err, "--k", "--n-docs") and _warned(err, "--mixed-k", "--mixed-n-docs"), err
    summary = json.loads(out)
    assert summary["steps"] == 1 and summary["out"] == str(tmp_path / "s") and "final_loss" in summary
    config = json.loads((tmp_path / "s" / "stitched.json").read_text())["config"]
    assert config["k"] == 2 and config["mixed_k"] is True


# ---------------------------------------------------------------------------------------------
# an old and a new spelling that disagree: one line, exit 2, nothing done

CONFLICTS = {
    "index search": (lambda t: ["index", "search", "--index", t / "i", "-q", "x", "-k", 2, "--n-docs", 3],
                     "-k 2 and --n-docs 3 disagree: give only --n-docs"),
    "ask": (lambda t: ["ask", "--model", t / "m", "--index", t / "i", "-k", 2, "--n-docs", 3, "who?"],
            "-k 2 and --n-docs 3 disagree"),
    "train stitched --k": (lambda t: ["train", "stitched", "--index", t / "i", "--generator", t / "g", "--train", t / "t.jsonl",
                                      "--out", t / "o", "--k", 2, "--n-docs", 3], "--k 2 and --n-docs 3 disagree"),
    "eval retrieval -k": (lambda t: ["eval", "retrieval", "--index", t / "i", "--questions", t / "q.jsonl", "-k", 1,
                                     "--recall-at", 5], "-k 1 and --recall-at 5 disagree: give only --recall-at"),
    "eval retrieval --data": (lambda t: ["eval", "retrieval", "--index", t / "i", "--questions", t / "q.jsonl", "--data",
                                         t / "other.jsonl"], "--data"),
    "eval answers -k": (lambda t: ["eval", "answers", "--answers", t / "a.jsonl", "--out", t / "o", "-k", 1, "-k", 5,
                                   "--recall-at", 5], "-k 1,5 and --recall-at 5 disagree"),
    "eval answers FILE": (lambda t: ["eval", "answers", t / "a.jsonl", "--answers", t / "b.jsonl", "--out", t / "o"],
                          "give only --answers FILE"),
    "compare": (lambda t: ["compare", "--run", t / "r", "--data", t / "a.jsonl", "--questions", t / "b.jsonl"],
                "give only --questions"),
    "compare --base-url": (lambda t: ["compare", "--run", t / "r", "--stitched-generator", "chat:m", "--base-url",
                                      "http://a/v1", "--llm-base-url", "http://b/v1"], "give only --llm-base-url"),
    "train rag --cpu": (lambda t: ["train", "rag", "--index", t / "i", "--encoder", t / "e", "--generator", t / "g", "--train",
                                   t / "t.jsonl", "--dev", t / "d.jsonl", "--out", t / "o", "--cpu", "--device", "cuda"],
                        "--cpu and --device cuda disagree: give only --device"),
}


@pytest.mark.parametrize("case", list(CONFLICTS))
def test_old_and_new_spellings_that_disagree_are_one_line_exit_2(case, tmp_path, monkeypatch, capsys):
    make, needle = CONFLICTS[case]
    code, out, err = run_main(monkeypatch, capsys, *make(tmp_path))
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith("error: ") and needle in lines[0] and "--help" in lines[0], lines
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_the_same_list_in_another_order_agrees(bm25, tiny_corpus, monkeypatch, capsys):
    code, out, err = run_main(monkeypatch, capsys, "eval", "retrieval", "--index", bm25, "--questions", tiny_corpus["qa"],
                              "-k", 2, "-k", 1, "--recall-at", 1, "--recall-at", 2, "--json")
    assert code == 0 and _warned(err, "-k", "--recall-at"), err
    assert {"recall@1", "recall@2"} <= set(json.loads(out)[str(bm25)])


# ---------------------------------------------------------------------------------------------
# --json: one JSON object on stdout, nothing else there


def _json_run(monkeypatch, capsys, *args) -> dict:
    code, out, err = run_main(monkeypatch, capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)  # the whole of stdout


def test_world_chunk_index_build_json(tmp_path, monkeypatch, capsys):
    w = _json_run(monkeypatch, capsys, "world", "--out", tmp_path / "w", "--entities", 40)
    assert w["out"] == str(tmp_path / "w") and w["seed"] == 0 and w["files"]["passages_a.jsonl"] > 0
    docs = write_jsonl(tmp_path / "docs.jsonl", [{"id": "d", "title": "T", "text": " ".join(["word"] * 250)}])
    c = _json_run(monkeypatch, capsys, "chunk", "--docs", docs, "--out", tmp_path / "p.jsonl")
    assert c["documents"] == 1 and c["passages"] == 3 and c["words"] == 100
    i = _json_run(monkeypatch, capsys, "index", "build", "--passages", tmp_path / "p.jsonl", "--encoder", "bm25", "--out", tmp_path / "i")
    assert i["kind"] == "bm25" and i["n_passages"] == 3 and i["out"] == str(tmp_path / "i")


def test_train_dpr_json(tiny_corpus, tmp_path, monkeypatch, capsys):
    s = _json_run(monkeypatch, capsys, "train", "dpr", "--train", tiny_corpus["qa"], "--passages", tiny_corpus["passages"],
                  "--out", tmp_path / "dpr", "--steps", 2, "--batch-size", 4, "--hidden-size", 32, "--layers", 1,
                  "--vocab-size", 300)
    assert s["out"] == str(tmp_path / "dpr") and s["n_train"] == 30 and s["dim"] == 32
    assert {"final_loss", "n_no_gold", "ctx_fingerprint"} <= set(s)


def test_train_rag_json(rag_inputs, tmp_path, monkeypatch, capsys):  # noqa: F811
    cfg = make_config(rag_inputs, steps=1, eval_every=0, save_every=1)
    s = _json_run(monkeypatch, capsys, "train", "rag", *cli_flags(cfg), "--out", tmp_path / "run")
    assert s["steps"] == 1 and s["variant"] == "token" and s["processes"] == 1 and s["final_model"] == str(tmp_path / "run" / "final")
    assert s["best_model"] is None and not (tmp_path / "run" / "best").exists()  # no dev evaluation: no best model
    assert TRAIN_FLAGS["n_docs"] == json.loads((tmp_path / "run" / "config.json").read_text())["n_docs"]


def test_train_rag_cpu_is_device_cpu(rag_inputs, tmp_path, monkeypatch, capsys):  # noqa: F811
    cfg = make_config(rag_inputs, steps=1, eval_every=0, save_every=1)
    code, out, err = run_main(monkeypatch, capsys, "train", "rag", *cli_flags(cfg), "--cpu", "--out", tmp_path / "run", "--json")
    assert code == 0 and _warned(err, "--cpu", "--device cpu"), err
    assert json.loads((tmp_path / "run" / "config.json").read_text())["cpu"] is True
    code, _, err = run_main(monkeypatch, capsys, "train", "rag", *cli_flags(cfg), "--device", "cuda:1", "--out", tmp_path / "r2")
    assert code == 2 and "choose it with CUDA_VISIBLE_DEVICES and pass cuda" in err and not (tmp_path / "r2").exists()


def test_reproduce_json(tmp_path, monkeypatch, capsys):
    """The tiny preset takes minutes: the command's --json path runs on a stand-in for the pipeline's results."""
    import lewisrag.experiments.reproduce as R

    results = {"retrieval": {"split": "test", "recall_at_1": 0.5, "bm25": {"recall_at_1": 0.25}},
               "qa": {"rag_token": {"exact_match": 0.75, "f1": 0.8, "rougeL": 0.8}},
               "knowledge_update": {"rag_token": {"index_a": {"questions_a": 0.9, "questions_b": 0.1}}}, "ablations": {}}
    seen = {}

    def fake(preset, out, **kw):
        seen.update(preset=preset.name, out=out, **kw)
        return results

    monkeypatch.setattr(R, "reproduce", fake)
    s = _json_run(monkeypatch, capsys, "reproduce", "--preset", "tiny", "--out", tmp_path / "run", "--seed", 3)
    assert seen["preset"] == "tiny" and seen["seed"] == 3
    assert s == {"out": str(tmp_path / "run"), "results": str(tmp_path / "run" / "results.json"),
                 "report": str(tmp_path / "run" / "report.md"), "retrieval": results["retrieval"], "qa": results["qa"],
                 "knowledge_update": results["knowledge_update"]}


def test_reproduce_base_preset_json(tmp_path, monkeypatch, capsys):
    """The base preset only checks its assets: with every one on this machine, --json names where (an
    empty weights file or a `{}` config.json is not one: tests/test_reproduce_hub_check_only.py)."""
    from lewisrag.experiments.presets import get_preset
    from test_reproduce_hub_check_only import make_hub

    monkeypatch.delenv("LEWISRAG_HUB_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    make_hub(tmp_path / "hub")
    s = _json_run(monkeypatch, capsys, "reproduce", "--preset", "base", "--out", tmp_path / "x", "--hub-dir", tmp_path / "hub")
    assert s["preset"] == "base" and s["written"] is False and set(s["validated"]) == set(get_preset("base").hub)
    assert not (tmp_path / "x").exists()


def test_compare_json(tmp_path, monkeypatch, capsys):
    """compare needs trained systems (tests/test_compare.py runs it for real): here a stand-in scorecard."""
    import lewisrag.experiments.compare as C

    names = ["rag_token", "stitched"]
    card = {"qa": {n: {"exact_match": 0.5, "f1": 0.6, "rougeL": 0.6} for n in names},
            "retrieval": {n: {"k": 2, "recall_at_k": 0.9} for n in names},
            "layers": {n: {**{m: 0.7 for m in C.LAYER_METRICS}, "forward_passes_per_answer": 3.0, "tokens_per_answer": 40.0,
                           "not_in_kb": {"refused": 1, "n": 2}, "failure_layers": {"retrieval": 1}} for n in names},
            "timings": {n: {"latency_s": 0.01} for n in names}}
    seen = {}

    def fake(run, out, names, data, position_questions, on_progress=None, overwrite=False, qa_fields=None, generator=None,
             lang="en", device="cpu"):
        seen.update(run=run, out=out, names=names, data=data, qa_fields=qa_fields, generator=generator, lang=lang,
                    device=device)
        return card

    monkeypatch.setattr(C, "compare_run", fake)
    (tmp_path / "run").mkdir()  # compare checks that --run is a folder before anything else
    s = _json_run(monkeypatch, capsys, "compare", "--run", tmp_path / "run", "--systems", "rag_token,stitched",
                  "--questions", tmp_path / "q.jsonl", "--qa-fields", "question=query,answers=golds")
    assert seen["data"] == tmp_path / "q.jsonl" and seen["out"] == tmp_path / "run" / "compare"
    assert seen["qa_fields"] == {"question": "query", "answers": "golds"} and seen["generator"] is None  # the run's own
    assert seen["lang"] == "en" and seen["device"] == "auto"  # the reports' language, English unless --lang; a visible GPU unless --device
    assert s["systems"] == names and s["out"] == str(tmp_path / "run" / "compare")
    assert s["scorecard"]["EM"] == {"rag_token": 0.5, "stitched": 0.5} and s["scorecard"]["recall@2"]["stitched"] == 0.9
    assert s["scorecard"]["not_in_kb refused"]["rag_token"] == "1/2"


def test_swap_json(tmp_path, monkeypatch, capsys):
    """The swap matrix on a stand-in (tests/test_swap.py answers for real); --out still gets every prediction."""
    import lewisrag.experiments.swap as S

    result = {"models": ["m"], "indexes": ["a", "b"], "questions": ["qa"], "n_questions": {"qa": 3},
              "left_out": {"qa": {"long": 1, "no_answer": 0}}, "notes": ["qa: 1 long-form question left out"],
              "em": {"m": {"a": {"qa": 1.0}, "b": {"qa": 0.0}}}, "predictions": {"m": {"a": {"qa": ["x"]}, "b": {"qa": ["y"]}}}}
    monkeypatch.setattr(S, "swap_matrix", lambda *a, **kw: result)
    s = _json_run(monkeypatch, capsys, "swap", "--model", tmp_path / "m", "--index", tmp_path / "a", "--index", tmp_path / "b",
                  "--questions", tmp_path / "qa.jsonl", "--out", tmp_path / "swap.json")
    shown = ("models", "indexes", "questions", "n_questions", "left_out", "notes", "em")
    assert s == {k: result[k] for k in shown} | {"out": str(tmp_path / "swap.json")}
    assert json.loads((tmp_path / "swap.json").read_text())["predictions"] == result["predictions"]


def test_pretrain_json(tmp_path, monkeypatch, capsys):
    """Pretraining even the tiny preset trains a tokenizer and a model (tests/test_pretrain.py): a stand-in here."""
    import lewisrag.training.pretrain as P

    recipe = {"steps": 3, "minutes": 0.1, "parameters": 1000, "weights_bytes": 4000,
              "final": {"em": 0.5, "n": 10, "by_attribute": {"leader": 0.5}}}
    monkeypatch.setattr(P, "pretrain", lambda cfg, out, on_step, command, overwrite: recipe)
    s = _json_run(monkeypatch, capsys, "pretrain", "--preset", "tiny", "--steps", 3, "--out", tmp_path / "g")
    assert s == {"out": str(tmp_path / "g"), "steps": 3, "minutes": 0.1, "parameters": 1000, "weights_bytes": 4000,
                 "test_em": 0.5, "test_em_by_attribute": {"leader": 0.5}}


def test_print_json_writes_paths_as_strings(capsys):
    from lewisrag.commands import _ui

    _ui.print_json({"out": Path("/a/b"), "x": [1, 2.5, None], "name": "Bärn"})
    assert json.loads(capsys.readouterr().out) == {"out": "/a/b", "x": [1, 2.5, None], "name": "Bärn"}
