"""scripts/bench_scale.py --index on an index built from a transformers DPRContextEncoder folder (as
every base-preset and wiki_dpr index is): its question encoder given as `lewisrag index tune` takes
it (--encoder, --context-encoder, --swap); a --workdir that is not a folder is argparse's one line."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import one_thread
from hf_layouts import dpr_pair
from lewisrag.data.records import read_passages
from lewisrag.index.dense import DenseBuildConfig, build_dense_index

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench_scale.py"


def _bench_scale():
    spec = importlib.util.spec_from_file_location("bench_scale", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hf_index(tiny_corpus, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("bench_hf")
    passages = read_passages(tiny_corpus["passages"])
    pair = dpr_pair(root / "hub", [p.title + " " + p.text for p in passages])
    with one_thread():
        manifest = build_dense_index(passages, pair["context"], root / "index", DenseBuildConfig(device="cpu"))
    assert manifest["encoder"]["format"] == "transformers"
    return {**pair, "index": root / "index", "qa": tiny_corpus["qa"], "n": len(passages)}


def bench(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *flags], check=False, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600)


def test_an_index_of_a_transformers_dpr_folder_benches_with_its_pair(hf_index):
    base = ["--index", str(hf_index["index"]), "--questions", str(hf_index["qa"]), "--kinds", "flat"]
    r = bench(*base, "--encoder", str(hf_index["question"]), "--context-encoder", str(hf_index["context"]), "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert [(row["n"], row["dim"], row["kind"]) for row in rows] == [(hf_index["n"], 32, "flat")]
    assert rows[0]["recall_at_5"] == 1.0 and rows[0]["tuning_queries"] == rows[0]["queries"] == 15  # 30 questions halved


def test_without_its_pair_the_refusal_advises_flags_the_script_has(hf_index, monkeypatch, capsys):
    """open_retriever's advice names --encoder, --context-encoder and --swap: each is taken here (the
    measuring itself, run above, is left out)."""
    scale = _bench_scale()
    benched = []
    monkeypatch.setattr(scale, "bench_corpus", lambda vectors, queries, *rest: benched.append(queries.shape) or iter(()))
    base = ["--index", str(hf_index["index"]), "--questions", str(hf_index["qa"]), "--kinds", "flat"]
    for flags, says in (([], "pass --encoder with the DPRQuestionEncoder folder of its pair and --context-encoder"),
                        (["--encoder", str(hf_index["question"])], "--swap")):  # the question encoder alone is unpaired
        with pytest.raises(SystemExit) as stop:
            scale.main(base + flags)
        err = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and len(err.splitlines()) == 1 and says in err, (flags, err)
    scale.main(base + ["--encoder", str(hf_index["question"]), "--swap"])
    assert benched == [(15, 32)]


def test_encoder_flags_without_index_and_a_missing_workdir_are_one_line(tmp_path, capsys):
    scale = _bench_scale()
    cases = [(["--workdir", str(tmp_path / "missing")], "--workdir:"),
             (["--workdir", str(tmp_path / "missing"), "--quick"], "folder not found"),
             (["--encoder", str(tmp_path)], "--encoder goes with --index"),
             (["--context-encoder", str(tmp_path)], "--context-encoder goes with --index"),
             (["--swap"], "--swap goes with --index")]
    for flags, says in cases:
        with pytest.raises(SystemExit) as stop:
            scale.parse_args(flags)
        err = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and says in err.splitlines()[-1] and "Traceback" not in err, (flags, err)
    assert scale.parse_args(["--workdir", str(tmp_path)]).workdir == str(tmp_path)  # an existing folder is taken


def test_fit_takes_the_rows_the_script_writes(tmp_path):
    """`--fit` refused every row `--json` writes ("field 'bytes': missing": the fit computes the bytes from
    bytes_per_passage). One measured row at a toy size, and the same row at twice the size, fitted."""
    scale = _bench_scale()
    r = bench("--sizes", "50", "--kinds", "flat", "--queries", "2", "--block-rows", "64", "--workdir", str(tmp_path),
              "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    row = json.loads(r.stdout)
    assert [f for f in scale.FIT_FIELDS if f not in row] == []
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(row) + "\n" + json.dumps({**row, "n": 2 * row["n"]}) + "\n")
    fit = bench("--fit", str(rows))
    assert fit.returncode == 0 and fit.stderr == "", fit.stderr[-3000:]
    assert fit.stdout.startswith(f"2 synthetic rows from {rows}")
    assert [line.split(" | ")[1] for line in fit.stdout.splitlines() if line.startswith("| flat |")] == ["21M", "100M"]


def test_too_few_vectors_for_an_ivfpq_kind_and_no_kind_are_refused_before_measuring(hf_index, monkeypatch, capsys):
    """FAISS's k-means refusal (fewer training vectors than a PQ sub-quantizer's 256 centroids, or than the IVF
    lists) was a 39-line traceback after the corpus and the kinds before it, whose table went with it; `--kinds ,`
    measured nothing and exited 0. Both are one line and exit 2 now; --index once its N is known."""
    scale = _bench_scale()
    cases = [(["--sizes", "1000,200", "--kinds", "flat,ivfpq_rerank"],
              "--sizes: 200 vectors are fewer than the 256 centroids an IVF-PQ kind trains on them"),
             (["--sizes", "1000", "--kinds", "ivfpq4fs_rerank", "--nlist-factor", "50"], "fewer than the 1,581 centroids"),
             (["--kinds", ","], "--kinds: name at least one index kind")]
    for flags, says in cases:
        with pytest.raises(SystemExit) as stop:
            scale.parse_args(flags)
        err = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and says in err.splitlines()[-1] and "Traceback" not in err, (flags, err)
    assert scale.parse_args(["--sizes", "200", "--kinds", "flat,hnsw_sq8"]).sizes == [200]  # no PQ centroids to train
    benched = []
    monkeypatch.setattr(scale, "bench_corpus", lambda *args: benched.append(args) or iter(()))
    with pytest.raises(SystemExit) as stop:
        scale.main(["--index", str(hf_index["index"]), "--questions", str(hf_index["qa"]), "--encoder",
                    str(hf_index["question"]), "--context-encoder", str(hf_index["context"]), "--kinds", "flat,ivfpq4fs_rerank"])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and benched == [], err
    assert err.startswith(f"error: {hf_index['index']}: field '--kinds': {hf_index['n']} vectors are fewer than the 256 "
                          "centroids") and err.endswith("leave ivfpq4fs_rerank out"), err
