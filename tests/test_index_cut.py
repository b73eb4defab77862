"""`lewisrag index cut`: a corpus cut to every question's top passages by the stored vectors, then a
random fill, in the corpus's order.

The corpus is the tiny one in wiki_dpr's schema as the hub holds it (Parquet shards with an
`embeddings` column), its vectors made by a tiny DPR checkpoint's context encoder; the expected
rankings are computed here with numpy from the same vectors.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from conftest import run_main, write_jsonl
from hf_layouts import dpr_pair
from lewisrag.data.io import LewisragWarning
from lewisrag.data.passages import open_passages
from lewisrag.data.records import read_passages, read_qa
from lewisrag.index.encoders import DPRCheckpoint, encode_texts, load_context_encoder, load_question_encoder
from lewisrag.scoring.qa import normalize_answer
from lewisrag.training.dpr import DPRTrainConfig, train_dpr

TINY = dict(vocab_size=300, hidden_size=32, layers=1, heads=2, batch_size=8)


def shards(folder: Path, passages, vectors: np.ndarray, n: int = 2) -> Path:
    """`passages` and their vectors as the hub's wiki_dpr files: `train-0000K-of-0000N.parquet`."""
    folder.mkdir(parents=True)
    rows = [{"id": p.id, "text": p.text, "title": p.title, "embeddings": v.tolist()} for p, v in zip(passages, vectors)]
    schema = pa.schema([("id", pa.string()), ("text", pa.string()), ("title", pa.string()),
                        ("embeddings", pa.list_(pa.float32()))])
    for k, part in enumerate(np.array_split(np.arange(len(rows)), n)):
        pq.write_table(pa.Table.from_pylist([rows[i] for i in part], schema=schema), folder / f"train-{k:05d}-of-{n:05d}.parquet")
    return folder


@pytest.fixture(scope="module")
def corpus(tiny_corpus, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("cut")
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    train_dpr(DPRTrainConfig(steps=5, **TINY), qa, passages, root / "dpr")
    ckpt = DPRCheckpoint.load(root / "dpr")
    vectors = encode_texts(ckpt.ctx_encoder, ckpt.tokenizer, [(p.title, p.text) for p in passages],
                           max_length=int(ckpt.meta["max_length"]))
    q = encode_texts(ckpt.question_encoder, ckpt.tokenizer, [ex.question for ex in qa],
                     max_length=int(ckpt.meta.get("q_max_length", 64)))
    # (30, 60): every question's rows, best first, from the product the cut makes (one block, in torch), so
    # that the tiny encoder's near ties round alike on any CPU
    ranked = np.argsort(-(torch.from_numpy(q) @ torch.from_numpy(vectors).T).numpy(), axis=1, kind="stable")
    return {"dpr": root / "dpr", "shards": shards(root / "nq", passages, vectors), "passages": passages,
            "vectors": vectors, "qa": tiny_corpus["qa"], "examples": qa, "ranked": ranked}


def _cut(monkeypatch, capsys, corpus, out, *flags):
    return run_main(monkeypatch, capsys, "index", "cut", "--passages", corpus["shards"], "--encoder", corpus["dpr"],
                    "--questions", corpus["qa"], "--out", out, "--device", "cpu", "--json", *flags)


@pytest.mark.parametrize("top, max_passages, gold", [(2, 50, False), (4, 40, False), (3, 50, True)])
def test_the_cut_keeps_what_the_whole_corpus_retrieves(corpus, tmp_path, monkeypatch, capsys, top, max_passages, gold):
    """Every question's top passages of the whole corpus, to `full_depth`, are in the cut, so a search
    of the cut finds them; the deeper ranks go first when they do not fit; random rows fill the rest.
    Small blocks make the search merge across blocks and the reads cross Parquet shards."""
    from lewisrag.index import cut

    monkeypatch.setattr(cut, "SEARCH_ROWS", 16)
    monkeypatch.setattr(cut, "QUESTION_ROWS", 8)
    monkeypatch.setattr(cut, "WRITE_ROWS", 7)
    out = tmp_path / "cut"
    flags = ("--top", top, "--max-passages", max_passages) + (() if gold else ("--no-gold",))
    code, stdout, err = _cut(monkeypatch, capsys, corpus, out, *flags)
    assert code == 0, err
    record = json.loads(stdout)
    assert json.loads((out / "cut.json").read_text()) == {k: v for k, v in record.items() if k != "out"}
    ranked, passages = corpus["ranked"], corpus["passages"]
    table = open_passages(out)  # a folder --passages reads
    rows = [int(p.id[1:].split("-")[0]) * 2 + int(p.id.split("-")[1]) for p in table]  # "c{i}-{j}" is row 2i + j
    assert rows == sorted(rows) and len(rows) == max_passages == record["passages"]  # the corpus's order
    assert [p.id for p in table] == [passages[r].id for r in rows]
    np.testing.assert_array_equal(table.embeddings(), corpus["vectors"][rows])  # the stored vectors, as they were
    depth, kept = record["full_depth"], set(rows)
    assert 1 <= depth <= top and all(set(r[:depth]) <= kept for r in ranked[:, :top].tolist())
    if depth < top:  # the next rank is missing for some question: the cut was full
        assert record["random"] == 0 and not all(set(r[:depth + 1]) <= kept for r in ranked.tolist())
    retrieved = set(ranked[:, :top].ravel().tolist())
    golds = set(range(0, 60, 2)) if gold else set()  # question i's gold is c{i}-0, row 2i
    assert golds <= kept and record["gold"] == len(golds) and record["keep_gold"] is gold
    assert record["retrieved"] == len((kept & retrieved) - golds) and record["random"] == len(kept - retrieved - golds)
    assert record["gold"] + record["hard_negatives"] + record["retrieved"] + record["random"] == max_passages
    assert record["gold_passages"] == 30 and record["gold_in_cut"] == len(kept & set(range(0, 60, 2)))
    # searching the cut with the same question vectors finds the whole corpus's top passages
    q = encode_texts(*[getattr(DPRCheckpoint.load(corpus["dpr"]), a) for a in ("question_encoder", "tokenizer")],
                     [ex.question for ex in corpus["examples"]], max_length=64)
    # (compared by score: the tiny encoder's near ties may order differently in another product's rounding)
    in_cut = -np.sort(-(q @ table.embeddings().T), axis=1)[:, :depth]
    whole = -np.sort(-(q @ corpus["vectors"].T), axis=1)[:, :depth]
    np.testing.assert_allclose(in_cut, whole, rtol=1e-6, atol=1e-6)
    # the answer recall of the whole corpus's top-k, as exact match normalizes answers and texts
    texts = [f" {normalize_answer(p.text)} " for p in passages]
    hit = [[any(f" {normalize_answer(a)} " in texts[r] for a in ex.answers) for r in row]
           for ex, row in zip(corpus["examples"], ranked[:, :top].tolist())]
    assert record["answer_recall"] == {str(k): round(float(np.mean([any(h[:k]) for h in hit])), 4)
                                       for k in (1, 5, 20, 100) if k <= top}
    # the same seed cuts the same passages; another seed fills with others
    again = tmp_path / "again"
    assert _cut(monkeypatch, capsys, corpus, again, *flags)[0] == 0
    assert (again / "passages.parquet").read_bytes() == (out / "passages.parquet").read_bytes()
    if record["random"]:
        other = tmp_path / "other"
        assert _cut(monkeypatch, capsys, corpus, other, *flags, "--seed", 1)[0] == 0
        assert list(open_passages(other)) != list(table)


def test_index_build_reuses_the_cuts_vectors(corpus, tmp_path, monkeypatch, capsys):
    out = tmp_path / "cut"
    assert _cut(monkeypatch, capsys, corpus, out, "--top", 1, "--max-passages", 50)[0] == 0
    (out / "notes.txt").write_text("mine")  # a rerun replaces its own cut, and refuses to lose a user's file
    code, _, err = _cut(monkeypatch, capsys, corpus, out, "--top", 1, "--max-passages", 45)
    assert code == 2 and "holds 'notes.txt', which lewisrag did not write there" in err and len(open_passages(out)) == 50
    (out / "notes.txt").unlink()
    second = tmp_path / "qa2.jsonl"  # another file of the same questions: one file given twice is refused
    second.write_bytes(corpus["qa"].read_bytes())
    code, stdout, _ = _cut(monkeypatch, capsys, corpus, out, "--top", 1, "--max-passages", 45, "--max-questions", 7,
                           "--questions", second)
    assert code == 0 and json.loads(stdout)["questions"] == 7 * 2  # the first 7 of each of the two files
    assert set(corpus["ranked"][:7, 0].tolist()) <= {[p.id for p in corpus["passages"]].index(p.id) for p in open_passages(out)}
    code, stdout, err = run_main(monkeypatch, capsys, "index", "build", "--passages", out, "--encoder", corpus["dpr"],
                                 "--out", tmp_path / "idx", "--reuse-embeddings", "--json")
    assert code == 0, err
    assert json.loads(stdout)["n_passages"] == 45
    kept = [p.id for p in open_passages(out)]
    np.testing.assert_array_equal(np.load(tmp_path / "idx" / "embeddings.npy"),
                                  corpus["vectors"][[[p.id for p in corpus["passages"]].index(i) for i in kept]])


def test_a_transformers_pair_searches_with_its_context_encoder_named(corpus, tiny_corpus, tmp_path, monkeypatch, capsys):
    """A DPRQuestionEncoder folder needs --context-encoder: the stored vectors are checked against
    fresh encodings by its pair before anything is searched."""
    passages = corpus["passages"]
    pair = dpr_pair(tmp_path, [f"{p.title} {p.text}" for p in passages] + [ex.question for ex in corpus["examples"]])
    ctx = load_context_encoder(pair["context"])
    vectors = encode_texts(ctx.ctx_encoder, ctx.tokenizer, [(p.title, p.text) for p in passages],
                           max_length=int(ctx.meta["max_length"]))
    folder = shards(tmp_path / "pair_nq", passages, vectors)
    flags = ["index", "cut", "--passages", folder, "--encoder", pair["question"], "--questions", corpus["qa"],
             "--top", 3, "--max-passages", 30, "--no-gold", "--device", "cpu", "--json"]  # the 30 gold would fill it
    code, _, err = run_main(monkeypatch, capsys, *flags, "--out", tmp_path / "a")
    assert code == 2 and err.count("\n") == 1 and "--context-encoder: needed with the DPRQuestionEncoder folder" in err
    code, stdout, err = run_main(monkeypatch, capsys, *flags, "--context-encoder", pair["context"], "--out", tmp_path / "b")
    assert code == 0, err
    q_ckpt = load_question_encoder(pair["question"])
    q = encode_texts(q_ckpt.question_encoder, q_ckpt.tokenizer, [ex.question for ex in corpus["examples"]],
                     max_length=int(q_ckpt.meta["q_max_length"]))
    depth = json.loads(stdout)["full_depth"]
    assert depth >= 1
    top = np.argsort(-(q @ vectors.T), axis=1, kind="stable")[:, :depth]
    assert {passages[r].id for r in top.ravel().tolist()} <= {p.id for p in open_passages(tmp_path / "b")}
    code, stdout, err = run_main(monkeypatch, capsys, *[f for f in flags if f != "--json"], "--context-encoder",
                                 pair["context"], "--out", tmp_path / "d")  # the table
    flat = "".join(stdout.split())  # the table's title wraps a long path (a test worker's tmp_path) at 80 columns
    assert code == 0 and f"cutwrittento{tmp_path / 'd'}" in flat and "answer recall" in stdout, err
    assert re.search(r"--no-gold: \d+ of the 30 gold passages the questions name are in the cut", stdout), stdout
    # the tiny checkpoint's vectors were not made by this pair: refused, nothing written
    code, _, err = run_main(monkeypatch, capsys, "index", "cut", "--passages", corpus["shards"], "--encoder",
                            pair["question"], "--context-encoder", pair["context"], "--questions", corpus["qa"],
                            "--max-passages", 30, "--device", "cpu", "--out", tmp_path / "c")
    assert code == 2 and err.count("\n") == 1 and "the embeddings were not made by this encoder" in err, err
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("flags, needle", [
    (["--max-passages", 60], "--max-passages: 60 keeps every one of the 60 passages: nothing to cut"),
    (["--max-passages", 0], "--max-passages: must be at least 1, got 0"),
    (["--max-passages", 10, "--top", 0], "--top: must be at least 1, got 0"),
])
def test_bad_settings_are_one_line(corpus, tmp_path, monkeypatch, capsys, flags, needle):
    if "must be at least" in needle:  # refused before the corpus is read (minutes at 21 M)
        monkeypatch.setattr("lewisrag.data.passages.open_passages", lambda *a: pytest.fail("the passages were read"))
    code, _, err = _cut(monkeypatch, capsys, corpus, tmp_path / "cut", *flags)
    assert code == 2 and err.count("\n") == 1 and needle in err, err
    assert not (tmp_path / "cut").exists()


def test_passages_without_vectors_and_bad_questions_are_named(corpus, tiny_corpus, tmp_path, monkeypatch, capsys):
    code, _, err = run_main(monkeypatch, capsys, "index", "cut", "--passages", tiny_corpus["passages"], "--encoder",
                            corpus["dpr"], "--questions", corpus["qa"], "--max-passages", 10, "--out", tmp_path / "a")
    assert code == 2 and err.count("\n") == 1 and "field 'embeddings': missing: the cut searches" in err, err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "Who?", "answers": ["x"]}\n{"question": 5, "answers": ["y"]}\n')
    code, _, err = _cut(monkeypatch, capsys, corpus, tmp_path / "b", "--max-passages", 10, "--questions", bad,
                        "--max-questions", 1)  # the file is checked whole, not only the questions it keeps
    assert code == 2 and err.count("\n") == 1 and f"{bad}:2: field 'question'" in err, err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_the_scale_benchmark_runs_the_command(tmp_path):
    """scripts/bench_cut.py (the README's memory table) writes a corpus in the hub's layout whose
    spot-checked rows the context encoder made, and measures the real command on it."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "bench_cut.py"
    r = subprocess.run([sys.executable, str(script), "--sizes", "3000", "--questions", "20", "--top", "5", "--json",
                        "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    row = json.loads(r.stdout.splitlines()[0])
    assert (row["passages"], row["questions"], row["top"], row["max_passages"]) == (3000, 20, 5, 300)
    assert row["kept"]["retrieved"] + row["kept"]["random"] == 300 and row["kept"]["full_depth"] == 5
    assert row["peak_rss_mb"] >= row["peak_anon_mb"] > 100 and row["wall_s"] > 0


# --- what the questions name: gold passages and given hard negatives ------------------------------

TRAIN = ["--steps", 1, "--vocab-size", 300, "--hidden-size", 16, "--layers", 1, "--batch-size", 4, "--device", "cpu",
         "--self-negatives-at", 0, "--json"]


def context(pid: str) -> dict:
    return {"title": "T", "text": "some text", "score": 10, "title_score": 0, "passage_id": pid}


def biencoder_file(path: Path, examples, gold, negatives=lambda i: []) -> Path:
    """`examples` as DPR's biencoder JSON (what `train dpr --train` takes): question i's gold ids
    `gold(i)` as positive_ctxs, its hard negatives `negatives(i)` as hard_negative_ctxs."""
    records = [{"dataset": "nq_train_psgs_w100", "question": ex.question, "answers": ex.answers,
                "positive_ctxs": [context(g) for g in gold(i)], "negative_ctxs": [],
                "hard_negative_ctxs": [context(pid) for pid in negatives(i)]} for i, ex in enumerate(examples)]
    path.write_text(json.dumps(records, indent=4), encoding="utf-8")
    return path


def _ids(folder: Path) -> set[str]:
    return {p.id for p in open_passages(folder)}


def test_gold_passages_the_top_misses_are_kept_and_train_dpr_takes_the_cut(corpus, tmp_path, monkeypatch, capsys):
    """A question's gold passage that its top retrieved ones miss is kept (first), so `train dpr
    --passages CUT --train FILE` finds every positive; --no-gold keeps none, and train dpr refuses it."""
    ranked = corpus["ranked"]
    missed = [i for i in range(30) if ranked[i, 0] != 2 * i]  # question i's gold, c{i}-0, is row 2i
    assert missed  # the tiny encoder's top 1 misses some gold passages: the case this is about
    out = tmp_path / "cut"
    code, stdout, err = _cut(monkeypatch, capsys, corpus, out, "--top", 1, "--max-passages", 45)
    assert code == 0, err
    record = json.loads(stdout)
    gold = {f"c{i}-0" for i in range(30)}
    assert gold <= _ids(out)
    assert (record["gold"], record["gold_passages"], record["gold_in_cut"], record["keep_gold"]) == (30, 30, 30, True)
    assert record["priority"] == ["gold", "retrieved", "random"] and record["hard_negatives"] == 0
    top1 = set(ranked[:, 0].tolist())
    assert record["retrieved"] == len(top1 - set(range(0, 60, 2))) and record["full_depth"] == 1
    assert record["gold"] + record["retrieved"] + record["random"] == record["passages"] == 45
    code, stdout, err = run_main(monkeypatch, capsys, "train", "dpr", "--passages", out, "--train", corpus["qa"],
                                 "--out", tmp_path / "dpr", *TRAIN)
    assert code == 0, err
    # the same cut without the gold passages: some are missing, and train dpr refuses the file
    code, stdout, err = _cut(monkeypatch, capsys, corpus, tmp_path / "no_gold", "--top", 1, "--max-passages", 45, "--no-gold")
    assert code == 0, err
    record = json.loads(stdout)
    held = gold & _ids(tmp_path / "no_gold")
    assert record["gold"] == 0 and record["keep_gold"] is False and record["gold_in_cut"] == len(held) < 30
    assert record["priority"] == ["retrieved", "random"] and record["gold_passages"] == 30
    code, _, err = run_main(monkeypatch, capsys, "train", "dpr", "--passages", tmp_path / "no_gold", "--train", corpus["qa"],
                            "--out", tmp_path / "dpr2", *TRAIN)
    assert code == 2 and "gold passage id" in err and "is not in --passages" in err, err


def test_gold_first_then_the_shallow_ranks_when_space_is_short(corpus, tmp_path, monkeypatch, capsys):
    """30 gold passages and room for 2 more: every gold passage is kept, then the retrieved ones rank by
    rank (every question's first before any second), nothing random, `full_depth` counting both; a
    cut that cannot hold the gold passages is refused before the search, naming the way out."""
    from lewisrag.index import cut

    ranked = corpus["ranked"]
    # the capital passages (odd rows) as gold, which the tiny encoder does not retrieve at the top
    qa = write_jsonl(tmp_path / "qa.jsonl", [{**ex.to_dict(), "gold_passage_ids": [f"c{i}-1"]}
                                              for i, ex in enumerate(corpus["examples"])])
    golds = set(range(1, 60, 2))
    by_rank = [r for r in dict.fromkeys(ranked[:, :4].T.ravel().tolist()) if r not in golds]  # rank-major, first seen
    assert len(by_rank) > 2  # more retrieved than the room left: the case this is about
    flags = ("--top", 4, "--questions", qa, "--device", "cpu", "--json")
    code, stdout, err = run_main(monkeypatch, capsys, "index", "cut", "--passages", corpus["shards"], "--encoder",
                                 corpus["dpr"], "--max-passages", 32, "--out", tmp_path / "cut", *flags)
    assert code == 0, err
    record = json.loads(stdout)
    rows = {int(p.id[1:].split("-")[0]) * 2 + int(p.id.split("-")[1]) for p in open_passages(tmp_path / "cut")}
    assert rows == golds | set(by_rank[:2])
    assert (record["gold"], record["retrieved"], record["random"], record["passages"]) == (30, 2, 0, 32)
    depth = record["full_depth"]
    assert depth < 4 and all(set(r[:depth]) <= rows for r in ranked.tolist())
    assert not all(set(r[:depth + 1]) <= rows for r in ranked.tolist())
    monkeypatch.setattr(cut, "top_rows", lambda *a: pytest.fail("searched a cut that cannot hold the gold passages"))
    code, _, err = run_main(monkeypatch, capsys, "index", "cut", "--passages", corpus["shards"], "--encoder",
                            corpus["dpr"], "--max-passages", 29, "--out", tmp_path / "small", *flags)
    assert code == 2 and err.count("\n") == 1, err
    assert ("--max-passages: 29 cannot hold the questions' 30 gold passages, which the cut keeps whole before the "
            "retrieved ones: raise it or give --no-gold") in err
    assert not (tmp_path / "small").exists()


def test_given_hard_negatives_are_kept_when_asked(corpus, tmp_path, monkeypatch, capsys):
    """--hard-negatives N keeps each question's first N given hard negatives that the corpus holds and
    that are not its gold, after the gold passages; those the corpus lacks are counted; by default none.
    `train dpr --hard-negatives-from given` on the cut then drops only those the whole corpus lacks."""
    examples = corpus["examples"][:10]
    train = biencoder_file(tmp_path / "biencoder-nq-train.json", examples, lambda i: [f"c{i}-0"],
                           lambda i: [f"c{i}-0", f"c{i + 1}-1", f"nowhere-{i}", f"c{i}-1"])  # gold, there, missing, there
    def run(out, *more, max_passages=40):
        return run_main(monkeypatch, capsys, "index", "cut", "--passages", corpus["shards"], "--encoder", corpus["dpr"],
                        "--questions", train, "--top", 1, "--max-passages", max_passages, "--out", tmp_path / out,
                        "--device", "cpu", *more)

    code, stdout, err = run("none", "--json")
    assert code == 0, err
    record = json.loads(stdout)
    assert record["hard_negatives"] == 0 and record["hard_negatives_per_question"] == 0
    assert "hard_negatives" not in record["priority"] and record["gold"] == 10
    golds = {f"c{i}-0" for i in range(10)}
    for n, negatives in ((1, {f"c{i + 1}-1" for i in range(10)}), (2, {f"c{i}-1" for i in range(11)})):
        code, stdout, err = run(f"n{n}", "--hard-negatives", n, "--json")
        assert code == 0, err
        record = json.loads(stdout)
        assert golds | negatives <= _ids(tmp_path / f"n{n}")
        assert record["priority"] == ["gold", "hard_negatives", "retrieved", "random"]
        assert (record["gold"], record["hard_negatives"], record["hard_negatives_missing"]) == (10, len(negatives), 10)
        assert record["gold"] + record["hard_negatives"] + record["retrieved"] + record["random"] == 40
    with pytest.warns(LewisragWarning, match="the passages lack 10 of the given hard negatives"):  # the nowhere-i ones
        code, stdout, err = run_main(monkeypatch, capsys, "train", "dpr", "--passages", tmp_path / "n2", "--train", train,
                                     "--hard-negatives-from", "given", "--out", tmp_path / "dpr", *TRAIN)
    assert code == 0, err
    summary = json.loads(stdout)
    assert (summary["n_hard_negatives_missing"], summary["n_hard_negatives_gold"], summary["n_no_hard_negative"]) == (10, 10, 0)
    code, stdout, err = run("table", "--hard-negatives", 2)  # the summary table
    assert code == 0 and "hard" in stdout and re.search(r"│ 60 +│ 40 +│ 10 +│ 11 +│ 10 +│", stdout), stdout + err
    # the gold passages and the hard negatives are kept whole, or the cut is refused
    code, _, err = run("small", "--hard-negatives", 2, max_passages=20)
    assert code == 2 and ("--max-passages: 20 cannot hold the questions' 10 gold passages and 11 given hard negatives, "
                          "which the cut keeps whole before the retrieved ones: raise it, lower --hard-negatives or give "
                          "--no-gold") in err, err
    # asked of questions that give none, or of a file none of whose negatives the corpus holds: refused
    code, _, err = run("a", "--hard-negatives", 1, "--questions", corpus["qa"], "--max-questions", 3)
    assert code == 0, err  # the first file gives them
    code, _, err = run_main(monkeypatch, capsys, "index", "cut", "--passages", corpus["shards"], "--encoder", corpus["dpr"],
                            "--questions", corpus["qa"], "--max-passages", 40, "--hard-negatives", 1, "--device", "cpu",
                            "--out", tmp_path / "b")
    assert code == 2 and err.count("\n") == 1 and "--hard-negatives: 1, but no question of --questions gives a hard negative" in err, err
    elsewhere = biencoder_file(tmp_path / "biencoder-other.json", examples, lambda i: [f"c{i}-0"], lambda i: [f"x{i}"])
    code, _, err = run("c", "--hard-negatives", 1, "--questions", elsewhere)
    assert code == 2 and err.count("\n") == 1, err
    assert (f"{elsewhere}:2: field 'hard_negative_ctxs[0].passage_id': hard negative id 'x0' is not in --passages "
            f"{corpus['shards']}, nor is any other of the file's given hard negatives") in err
    assert not any((tmp_path / d).exists() for d in ("small", "b", "c"))


def test_a_gold_id_the_whole_corpus_lacks_is_refused(corpus, tmp_path, monkeypatch, capsys):
    """As `train dpr` and `eval retrieval` refuse it: named by file, line and field, before the search,
    nothing written; with --no-gold the cut goes on, and the id counts among the gold passages named,
    not among those in the cut."""
    from lewisrag.index import cut

    examples = corpus["examples"]
    train = biencoder_file(tmp_path / "biencoder-nq-train.json", examples,
                           lambda i: ["not-in-the-corpus"] if i == 3 else [f"c{i}-0"])
    search = cut.top_rows
    monkeypatch.setattr(cut, "top_rows", lambda *a: pytest.fail("searched before refusing the gold id"))
    code, _, err = run_main(monkeypatch, capsys, "index", "cut", "--passages", corpus["shards"], "--encoder", corpus["dpr"],
                            "--questions", train, "--max-passages", 40, "--device", "cpu", "--out", tmp_path / "a")
    assert code == 2 and err.count("\n") == 1, err
    assert (f"{train}:" in err and "field 'positive_ctxs[0].passage_id': gold passage id 'not-in-the-corpus' is not in "
            f"--passages {corpus['shards']}: the cut keeps every question's gold passages, and the whole corpus lacks "
            "this one (--no-gold keeps none)") in err
    assert not (tmp_path / "a").exists()
    monkeypatch.setattr(cut, "top_rows", search)
    code, stdout, err = run_main(monkeypatch, capsys, "index", "cut", "--passages", corpus["shards"], "--encoder", corpus["dpr"],
                                 "--questions", train, "--max-passages", 40, "--device", "cpu", "--out", tmp_path / "b",
                                 "--no-gold", "--json")
    assert code == 0, err
    record = json.loads(stdout)
    held = {f"c{i}-0" for i in range(30) if i != 3} & _ids(tmp_path / "b")
    assert (record["gold"], record["gold_passages"], record["gold_in_cut"]) == (0, 30, len(held))


def test_the_scale_benchmark_refuses_a_folder_in_use_and_bad_numbers(tmp_path, capsys):
    """bench_cut.py writes and deletes its own files in --workdir: a folder holding anything is refused
    before a file is touched, and bad numbers are argparse's one-line errors (exit 2)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_cut", Path(__file__).resolve().parents[1] / "scripts" / "bench_cut.py")
    bench_cut = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_cut)
    used = tmp_path / "used"
    (used / "cut").mkdir(parents=True)
    (used / "cut" / "keep.txt").write_text("mine\n")
    (used / "questions.jsonl").write_text("mine\n")
    for args, says in ((["--workdir", str(used)], "not a new or empty folder"), (["--sizes", "abc"], "--sizes"),
                       (["--sizes", "100,0"], "--sizes"), (["--questions", "0"], "--questions"), (["--top", "-1"], "--top")):
        with pytest.raises(SystemExit) as stop:
            bench_cut.main(args)
        err = capsys.readouterr().err
        assert stop.value.code == 2 and says in err.splitlines()[-1], (args, err)
    assert (used / "cut" / "keep.txt").read_text() == "mine\n" and (used / "questions.jsonl").read_text() == "mine\n"
