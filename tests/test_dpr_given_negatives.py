"""`train dpr` with the hard negatives a training file gives (DPR's `hard_negative_ctxs`, lewisrag's
`hard_negative_ids`): read, chosen by `--hard-negatives-from`, drawn as DPR draws them, checked against
the passages; and the built-in world, which gives none, trains exactly as before."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from conftest import run_main, write_jsonl
from lewisrag.commands import _ui
from lewisrag.data.io import InputError, LewisragWarning
from lewisrag.data.records import QAExample, read_passages, read_qa
from lewisrag.data.world import build_world, write_world
from lewisrag.index.bm25 import BM25Index
from lewisrag.index.encoders import DPRCheckpoint
from lewisrag.training import dpr as dpr_module
from lewisrag.training.dpr import DPRTrainConfig, train_dpr
from lewisrag.training.negatives import mine_hard_negatives

TINY = dict(vocab_size=300, hidden_size=16, layers=1, heads=2, batch_size=4, steps=3, self_negatives_at=0.0, device="cpu")


def context(pid: str) -> dict:
    return {"title": "T", "text": "some text", "score": 10, "title_score": 0, "passage_id": pid}


def biencoder(tiny_corpus, negatives=lambda i: [f"c{i}-1", f"c{(i + 1) % 30}-0"]) -> list[dict]:
    """The tiny corpus's questions as DPR's biencoder JSON records: question i's gold c{i}-0, its hard
    negatives `negatives(i)`, and a random negative that is in no passage (never read)."""
    return [{"dataset": "nq_train_psgs_w100", "question": ex.question, "answers": ex.answers,
             "positive_ctxs": [context(g) for g in ex.gold_passage_ids], "negative_ctxs": [context("not-a-passage")],
             "hard_negative_ctxs": [context(pid) for pid in negatives(i)]}
            for i, ex in enumerate(read_qa(tiny_corpus["qa"]))]


def write_json(path: Path, records) -> Path:
    path.write_text(json.dumps(records, indent=4), encoding="utf-8")  # DPR's files are indented: a record opens on its own line
    return path


@pytest.fixture
def picks(monkeypatch) -> list[tuple[list[int], int | None]]:
    """Every (candidates, picked row) of training's per-step choice of a hard negative."""
    seen = []
    real = dpr_module.pick_negative

    def spy(candidates, rng):
        seen.append((list(candidates), real(candidates, rng)))
        return seen[-1][1]

    monkeypatch.setattr(dpr_module, "pick_negative", spy)
    return seen


def test_given_negatives_are_read_from_dpr_json_and_lewisrag_jsonl(tiny_corpus, tmp_path):
    records = biencoder(tiny_corpus, lambda i: [f"c{i}-1", f"c{i}-1", str(i)])  # repeated, and a number as DPR may write it
    records[1]["hard_negative_ctxs"][2]["passage_id"] = 1
    del records[2]["hard_negative_ctxs"]  # absent: none
    qa = read_qa(write_json(tmp_path / "biencoder-nq-train.json", records))
    assert qa[0].hard_negative_ids == ["c0-1", "0"] and qa[1].hard_negative_ids == ["c1-1", "1"]
    assert qa[2].hard_negative_ids == [] and qa[0].gold_passage_ids == ["c0-0"]  # negative_ctxs are not read
    rec = {"question": "q?", "answers": ["a"], "gold_passage_ids": ["p1"], "hard_negative_ids": ["p2", "p3"]}
    (ex,) = read_qa(write_jsonl(tmp_path / "qa.jsonl", [rec]))
    assert ex.hard_negative_ids == ["p2", "p3"] and ex.to_dict()["hard_negative_ids"] == ["p2", "p3"]
    (mapped,) = read_qa(write_jsonl(tmp_path / "m.jsonl", [{"q": "q?", "a": ["a"], "negs": ["p9"]}]),
                        {"question": "q", "answers": "a", "hard_negative_ids": "negs"})
    assert mapped.hard_negative_ids == ["p9"]
    assert "hard_negative_ids" not in QAExample("1", "q?", ["a"], ["p1"]).to_dict()  # files written today stay as they are
    with pytest.raises(InputError, match="field 'hard_negative_ids': expected a list of strings"):
        read_qa(write_jsonl(tmp_path / "bad.jsonl", [{**rec, "hard_negative_ids": "p2"}]))
    records[3]["hard_negative_ctxs"][1] = {"title": "T", "text": "no id"}
    with pytest.raises(InputError, match=r"field 'hard_negative_ctxs\[1\].passage_id': missing, where hard_negative_ctxs\[0\] has one"):
        read_qa(write_json(tmp_path / "biencoder-bad.json", records))


def test_auto_takes_the_given_ones_without_a_bm25_index(tiny_corpus, tmp_path, picks, monkeypatch):
    passages = read_passages(tiny_corpus["passages"])
    qa = read_qa(write_json(tmp_path / "biencoder-nq-train.json", biencoder(tiny_corpus)))

    def no_bm25(*args, **kwargs):
        raise AssertionError("a BM25 index was built")

    monkeypatch.setattr(BM25Index, "in_memory", no_bm25)
    meta = train_dpr(DPRTrainConfig(**TINY), qa, passages, tmp_path / "dpr")
    assert meta["config"]["hard_negatives_from"] == "given" and meta["n_no_hard_negative"] == meta["n_hard_negatives_gold"] == 0
    assert DPRCheckpoint.load(tmp_path / "dpr").meta["config"]["hard_negatives_from"] == "given"
    assert len(picks) == TINY["steps"] * TINY["batch_size"]
    row_of = {p.id: i for i, p in enumerate(passages)}
    given = [[row_of[pid] for pid in ex.hard_negative_ids] for ex in qa]
    for candidates, row in picks:  # one of the question's two given ones, drawn at random (DPR shuffles and takes the first)
        assert candidates in given and row in candidates
    assert len({row for _, row in picks}) > len({tuple(c) for c, _ in picks}) / 2  # not always the first
    # the draw is seeded: a second run picks the same
    again = len(picks)
    train_dpr(DPRTrainConfig(**TINY), qa, passages, tmp_path / "dpr2")
    assert picks[again:] == picks[:again]


def test_bm25_forced_and_none(tiny_corpus, tmp_path, picks):
    passages = read_passages(tiny_corpus["passages"])
    qa = read_qa(write_json(tmp_path / "biencoder-nq-train.json", biencoder(tiny_corpus)))
    mined = set(mine_hard_negatives(qa, passages))
    meta = train_dpr(DPRTrainConfig(hard_negatives_from="bm25", **TINY), qa, passages, tmp_path / "bm25")
    assert meta["config"]["hard_negatives_from"] == "bm25" and "n_no_hard_negative" not in meta
    assert {row for _, row in picks} <= mined and all(c == [row] for c, row in picks)  # BM25's one each
    del picks[:]
    meta = train_dpr(DPRTrainConfig(hard_negatives=False, **TINY), qa, passages, tmp_path / "none")
    assert meta["config"]["hard_negatives_from"] == "none" and meta["config"]["hard_negatives"] is False
    assert all(row is None for _, row in picks)
    with pytest.raises(InputError, match="--hard-negatives-from"):
        train_dpr(DPRTrainConfig(hard_negatives_from="random", **TINY), qa, passages, tmp_path / "bad")


def test_a_given_negative_that_is_gold_is_dropped(tiny_corpus, tmp_path, picks):
    passages = read_passages(tiny_corpus["passages"])
    # question 0's one given negative is its gold passage; question 1's first of two is
    records = biencoder(tiny_corpus, lambda i: {0: ["c0-0"], 1: ["c1-0", "c1-1"]}.get(i, [f"c{i}-1"]))
    qa = read_qa(write_json(tmp_path / "biencoder-nq-train.json", records))
    meta = train_dpr(DPRTrainConfig(**TINY), qa, passages, tmp_path / "auto")
    assert meta["config"]["hard_negatives_from"] == "bm25"  # auto: question 0 has no given negative left
    del picks[:]
    meta = train_dpr(DPRTrainConfig(hard_negatives_from="given", **TINY), qa, passages, tmp_path / "given")
    assert meta["n_hard_negatives_gold"] == 2 and meta["n_no_hard_negative"] == 1
    gold = {i for i, p in enumerate(passages) if p.id.endswith("-0")}  # every question's gold
    assert picks and all(not set(c) & gold and row not in gold for c, row in picks)
    records = biencoder(tiny_corpus, lambda i: [f"c{i}-0"])  # every given negative is gold
    with pytest.raises(InputError, match="no training question has a hard negative"):
        train_dpr(DPRTrainConfig(hard_negatives_from="given", **TINY), read_qa(write_json(tmp_path / "b.json", records)),
                  passages, tmp_path / "none")


def cut_corpus(tiny_corpus, tmp_path) -> tuple[Path, Path]:
    """The tiny corpus cut as `index cut` cuts one (some passages DPR mined negatives from are gone),
    and its biencoder file: c0-1 .. c9-1 are cut; questions 0-2 are given c{i}-1 alone, so every given
    negative of theirs is gone; questions 3-9 keep one of their two, the rest both."""
    passages = [p.to_dict() for p in read_passages(tiny_corpus["passages"])
                if not (p.id.endswith("-1") and int(p.id[1:-2]) < 10)]
    records = biencoder(tiny_corpus, lambda i: [f"c{i}-1"] if i < 3 else [f"c{i}-1", f"c{(i + 1) % 30}-0"])
    return write_jsonl(tmp_path / "cut.jsonl", passages), write_json(tmp_path / "biencoder-nq-train.json", records)


def test_given_keeps_the_negatives_a_cut_corpus_holds_and_mines_bm25_only_for_questions_left_without(
        tiny_corpus, tmp_path, monkeypatch):
    """`given` on a cut corpus refused the whole file for one missing id, and `auto` mined BM25 for every
    question: the given negatives that are there are kept, the missing ones dropped and counted, and
    only a question left without any gets a BM25 one (DPR trained it on one of its BM25 negatives)."""
    from lewisrag.training import negatives

    cut, bienc = cut_corpus(tiny_corpus, tmp_path)
    passages, qa = read_passages(cut), read_qa(bienc)
    row_of = {p.id: i for i, p in enumerate(passages)}
    mined_for = []
    real = negatives.mine_hard_negatives
    monkeypatch.setattr(negatives, "mine_hard_negatives", lambda ex, ps: mined_for.append([e.id for e in ex]) or real(ex, ps))
    with pytest.warns(LewisragWarning) as caught:
        rows, counts = negatives.hard_negative_rows("given", qa, passages, row_of)
    assert counts == {"n_no_hard_negative": 0, "n_hard_negatives_gold": 0, "n_hard_negatives_missing": 10,
                      "n_bm25_hard_negative": 3}
    (warning,) = [str(w.message) for w in caught]
    assert warning == ("the passages lack 10 of the given hard negatives (the first: 'c0-1', of question "
                       f"{qa[0].id!r}): they are dropped and the others kept; 3 of 30 training questions are left "
                       "without any, and BM25 over the passages mines theirs")
    assert mined_for == [[ex.id for ex in qa[:3]]]  # BM25 for those three only
    assert rows[:3] == [[r] for r in real(qa[:3], passages)] and all(passages[r[0]].id != f"c{i}-0" for i, r in enumerate(rows[:3]))
    assert rows[3:10] == [[row_of[f"c{i + 1}-0"]] for i in range(3, 10)]  # the one of two still there
    assert rows[10:] == [[row_of[f"c{i}-1"], row_of[f"c{(i + 1) % 30}-0"]] for i in range(10, 30)]
    with pytest.warns(LewisragWarning, match="3 of 30 training questions are left without any"):
        meta = train_dpr(DPRTrainConfig(hard_negatives_from="given", **TINY), qa, passages, tmp_path / "given")
    assert meta["config"]["hard_negatives_from"] == "given" and meta["n_hard_negatives_missing"] == 10
    assert meta["n_bm25_hard_negative"] == 3
    # auto still takes given ones only when all are there; its warning counts what given would keep
    with pytest.warns(LewisragWarning, match="given keeps the 47 there and mines BM25 only for the 3 questions left"):
        meta = train_dpr(DPRTrainConfig(**TINY), qa, passages, tmp_path / "auto")
    assert meta["config"]["hard_negatives_from"] == "bm25"
    other = [replace_example(ex, hard_negative_ids=[f"gone-{i}"]) for i, ex in enumerate(qa)]  # a file for another corpus
    with pytest.raises(InputError, match=r"^--hard-negatives-from: given, but the passages hold none .*\(the first: 'gone-0'"):
        train_dpr(DPRTrainConfig(hard_negatives_from="given", **TINY), other, passages, tmp_path / "other")


def replace_example(ex: QAExample, **changes) -> QAExample:
    from dataclasses import replace

    return replace(ex, **changes)


def test_a_given_id_missing_from_the_passages_is_counted_and_a_file_of_another_corpus_named(
        tiny_corpus, tmp_path, monkeypatch, capsys):
    args = ["train", "dpr", "--steps", 1, "--batch-size", 4, "--vocab-size", 300, "--hidden-size", 16, "--layers", 1,
            "--device", "cpu"]
    cut, bienc = cut_corpus(tiny_corpus, tmp_path)
    with pytest.warns(LewisragWarning, match="the passages lack 10 of the given hard negatives"):
        code, out, err = run_main(monkeypatch, capsys, *args, "--json", "--passages", cut, "--train", bienc, "--out", tmp_path / "cut",
                                  "--hard-negatives-from", "given")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["hard_negatives_from"] == "given" and summary["n_hard_negatives_missing"] == 10
    assert summary["n_bm25_hard_negative"] == 3 and summary["n_no_hard_negative"] == 0
    monkeypatch.setattr(_ui.out, "width", 200)
    with pytest.warns(LewisragWarning):
        code, out, err = run_main(monkeypatch, capsys, *args, "--passages", cut, "--train", bienc, "--out",
                                  tmp_path / "table", "--hard-negatives-from", "given")
    assert code == 0 and "given negatives dropped (not in --passages) │ 10" in out, out
    assert "BM25 negative (none given left)" in out, out

    # none of the given ids is there: a file written for another corpus, named at its first missing id
    records = biencoder(tiny_corpus, lambda i: [f"gone-{i}", f"c{i}-0"])  # the gold one does not count
    bienc = write_json(tmp_path / "biencoder-other.json", records)
    code, _, err = run_main(monkeypatch, capsys, *args, "--passages", tiny_corpus["passages"], "--train", bienc,
                            "--out", tmp_path / "given", "--hard-negatives-from", "given")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    line = [n for n, text in enumerate(bienc.read_text().splitlines(), start=1) if text == "    {"][0]  # where record 0 opens
    assert (f"biencoder-other.json:{line}: field 'hard_negative_ctxs[0].passage_id': hard negative id 'gone-0' "
            "is not in --passages") in err, err
    assert not (tmp_path / "given").exists()
    # auto mines BM25 then, saying why
    with pytest.warns(LewisragWarning, match=r"the passages lack 30 of their ids .the first: 'gone-0'.*none of them is there"):
        code, out, err = run_main(monkeypatch, capsys, *args, "--json", "--passages", tiny_corpus["passages"],
                                  "--train", bienc, "--out", tmp_path / "auto")
    assert code == 0 and json.loads(out)["hard_negatives_from"] == "bm25", err
    # lewisrag's JSONL names the list's entry
    rows = [{**ex.to_dict(), "hard_negative_ids": [f"c{i}-0", "nowhere"]} for i, ex in enumerate(read_qa(tiny_corpus["qa"]))]
    code, _, err = run_main(monkeypatch, capsys, *args, "--passages", tiny_corpus["passages"], "--out", tmp_path / "jsonl",
                            "--hard-negatives-from", "given", "--train", write_jsonl(tmp_path / "qa.jsonl", rows))
    assert code == 2 and "qa.jsonl:1: field 'hard_negative_ids[1]': hard negative id 'nowhere' is not in" in err, err


# sha256 of the ids of the BM25 negatives mined for build_world(seed=0, entities=40)'s training questions
# over its passages_a, as lewisrag mined them before given negatives existed
WORLD_MINED_SHA256 = "667d8b0c289cca073482a6502686a77b50459b1dc9cec276c40eddb3e7f35b57"


def test_the_world_trains_as_before(tmp_path, monkeypatch):
    """The world's files give no negatives, so `auto` mines BM25 as before: the same negatives, fed in
    the same batches (the batch order's draws untouched), and the same weights as `bm25` forced."""
    write_world(build_world(seed=0, entities=40), tmp_path / "w")
    passages, qa = read_passages(tmp_path / "w" / "passages_a.jsonl"), read_qa(tmp_path / "w" / "train.jsonl")
    assert not any(ex.hard_negative_ids for ex in qa)
    mined = mine_hard_negatives(qa, passages)
    ids = json.dumps([None if r is None else passages[r].id for r in mined])
    assert hashlib.sha256(ids.encode()).hexdigest() == WORLD_MINED_SHA256
    fed = []
    real = dpr_module.init_encoders

    class Spy:  # the tokenizer, recording the passage texts of every batch
        def __init__(self, tok):
            self.tok = tok

        def __call__(self, *args, **kwargs):
            if len(args) == 2:
                fed.append(list(args[1]))
            return self.tok(*args, **kwargs)

        def __len__(self):
            return len(self.tok)

        def __getattr__(self, name):
            return getattr(self.tok, name)

    def init_encoders(cfg, texts):
        q, c, tok = real(cfg, texts)
        return q, c, Spy(tok)

    cfg = DPRTrainConfig(**{**TINY, "batch_size": 8, "steps": 4})
    monkeypatch.setattr(dpr_module, "init_encoders", init_encoders)
    auto = train_dpr(cfg, qa, passages, tmp_path / "auto")
    # the batches the loop drew before: Random(seed) shuffles of all questions, each its gold then its BM25 negative
    rng, order, expected = random.Random(cfg.seed), [], []
    for _ in range(cfg.steps):
        if len(order) < cfg.batch_size:
            fresh = list(range(len(qa)))
            rng.shuffle(fresh)
            order += fresh
        batch, order = order[: cfg.batch_size], order[cfg.batch_size:]
        gold = [next(p.text for p in passages if p.id == qa[i].gold_passage_ids[0]) for i in batch]
        expected.append(gold + [passages[mined[i]].text for i in batch if mined[i] is not None])
    assert fed == expected
    monkeypatch.setattr(dpr_module, "init_encoders", real)
    forced = train_dpr(replace_cfg(cfg, hard_negatives_from="bm25"), qa, passages, tmp_path / "bm25")
    assert auto["config"]["hard_negatives_from"] == forced["config"]["hard_negatives_from"] == "bm25"
    assert auto["ctx_fingerprint"] == forced["ctx_fingerprint"] and auto["final_loss"] == forced["final_loss"]


def replace_cfg(cfg: DPRTrainConfig, **changes) -> DPRTrainConfig:
    from dataclasses import replace

    return replace(cfg, **changes)


def test_cli_end_to_end_with_given_negatives(tiny_corpus, tmp_path, monkeypatch, capsys):
    bienc = write_json(tmp_path / "biencoder-nq-train.json", biencoder(tiny_corpus))
    args = ["train", "dpr", "--train", bienc, "--passages", tiny_corpus["passages"], "--steps", 2, "--batch-size", 4,
            "--vocab-size", 300, "--hidden-size", 16, "--layers", 1, "--device", "cpu"]
    code, out, err = run_main(monkeypatch, capsys, *args, "--out", tmp_path / "a", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["hard_negatives_from"] == "given" and summary["n_hard_negatives_gold"] == 0
    assert DPRCheckpoint.load(tmp_path / "a").meta["config"]["hard_negatives_from"] == "given"
    monkeypatch.setattr(_ui.out, "width", 200)  # the summary's cells on one line each
    code, out, err = run_main(monkeypatch, capsys, *args, "--out", tmp_path / "b")
    assert code == 0 and "given by --train (auto: every question has given ones)" in out, err
    code, out, err = run_main(monkeypatch, capsys, *args, "--out", tmp_path / "c", "--hard-negatives-from", "bm25", "--json")
    assert code == 0 and json.loads(out)["hard_negatives_from"] == "bm25", err
    code, out, err = run_main(monkeypatch, capsys, *args, "--out", tmp_path / "d", "--no-hard-negatives", "--json")
    assert code == 0 and json.loads(out)["hard_negatives_from"] == "none", err
    code, _, err = run_main(monkeypatch, capsys, *args, "--out", tmp_path / "e", "--no-hard-negatives",
                            "--hard-negatives-from", "given")
    assert code == 2 and "--hard-negatives-from" in err and "--no-hard-negatives" in err, err
    code, _, err = run_main(monkeypatch, capsys, *args, "--out", tmp_path / "f", "--hard-negatives-from", "random")
    assert code == 2 and "--hard-negatives-from" in err and "auto, given or bm25" in err, err
