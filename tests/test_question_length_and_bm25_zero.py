"""One retriever measured and searched: a question is cut at the DPR checkpoint's q_max_length by
`eval retrieval`'s retriever and by a RAG model built on the checkpoint, saved and reloaded alike; BM25's
zero-score padding is said by `index search`; `eval retrieval`'s default cut-offs fit a small index."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import one_thread, run_main, write_jsonl
from hf_layouts import bart
from lewisrag.data.records import read_passages, read_qa
from lewisrag.index import open_retriever
from lewisrag.index.dense import DenseBuildConfig, DenseIndex, build_dense_index
from lewisrag.index.encoders import DPRCheckpoint, load_rag_question_encoder
from lewisrag.training.dpr import DPRTrainConfig, train_dpr

Q_MAX = 6  # the question tokens DPR trains on here; the scratch encoder has 128 positions
TINY = dict(vocab_size=300, hidden_size=32, layers=1, heads=2, batch_size=8, q_max_length=Q_MAX)


@pytest.fixture(scope="module")
def dense(tiny_corpus, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("qlen")
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    with one_thread():
        train_dpr(DPRTrainConfig(steps=3, **TINY), qa, passages, root / "dpr")
        build_dense_index(passages, root / "dpr", root / "index", DenseBuildConfig(device="cpu"))
    names = [p.title for p in passages][::2]
    # long questions, cut at Q_MAX tokens by the retriever DPR trained, at 128 where the positions alone cut
    questions = [f"{q.question} In the year its capital was founded, when its rivers ran north and its people "
                 f"were many, who led {name} and {names[(i + 1) % len(names)]}?" for i, (q, name) in enumerate(zip(qa, names))]
    return {"root": root, "dpr": root / "dpr", "index": root / "index", "questions": questions[:8],
            "generator": bart(root, [p.text for p in passages])}


def test_rag_searches_with_the_question_cut_eval_retrieval_measures(dense, tmp_path):
    """RAG built on a DPR checkpoint cut its questions at the encoder's 128 positions (its scratch tokenizer
    knows no limit) where `eval retrieval`, `index search`, `tune` and `cut` cut them at q_max_length: the
    model searched with another retriever than the one measured. Now the checkpoint's tokenizer carries
    q_max_length, and a saved RAG model (RUN/best), reloaded or read by `eval retrieval`, keeps it."""
    from transformers import BartForConditionalGeneration, BartTokenizerFast

    from lewisrag.experiments.export import within_positions
    from lewisrag.rag_model import RagModel, RagSettings, Tokenizers
    from lewisrag.training.checkpoint import load_trained, save_model

    dpr = DPRCheckpoint.load(dense["dpr"])
    assert dpr.meta["q_max_length"] == Q_MAX and dpr.question_encoder.config.max_position_embeddings == 128
    questions = dense["questions"]
    assert min(len(ids) for ids in dpr.tokenizer(questions)["input_ids"]) > 2 * Q_MAX  # every one is cut
    with one_thread():
        measured = open_retriever(dense["index"]).search(questions, 3)  # eval retrieval's, index search's retriever
        generator = BartForConditionalGeneration.from_pretrained(dense["generator"]).eval()
        model = RagModel(dpr.question_encoder, generator, "token", 3,
                         RagSettings(n_docs=3, index_path=str(dense["index"]), index_fingerprint=dpr.ctx_fingerprint))
        tokenizers = Tokenizers(dpr.tokenizer, BartTokenizerFast.from_pretrained(dense["generator"]))
        index = DenseIndex.load(dense["index"])
        found = model.retrieve(questions, index, tokenizers)
        save_model(model, tokenizers, tmp_path / "best")
        reloaded, reloaded_tokenizers = load_trained(tmp_path / "best")
        again = reloaded.retrieve(questions, index, reloaded_tokenizers)
        from_best = open_retriever(dense["index"], tmp_path / "best").search(questions, 3)  # eval retrieval --encoder RUN/best
    for hits in (measured, from_best):
        expected = np.array([[h.score for h in row] for row in hits])
        for got in (found, again):
            assert got.rows.tolist() == [[h.row for h in row] for row in hits]
            np.testing.assert_allclose(got.doc_scores.detach().numpy(), expected, rtol=1e-5, atol=1e-4)
    assert reloaded_tokenizers.question.model_max_length == Q_MAX
    assert load_rag_question_encoder(tmp_path / "best").meta["q_max_length"] == Q_MAX
    # `lewisrag export`'s question_encoder_tokenizer: transformers' truncation=True cuts there too
    assert within_positions(reloaded_tokenizers.question, reloaded.question_encoder.config).model_max_length == Q_MAX


@pytest.fixture(scope="module")
def bm25(tiny_corpus, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("bm25zero")
    passages = [json.loads(line) for line in tiny_corpus["passages"].read_text().splitlines()]
    small = write_jsonl(root / "two.jsonl", passages[:2])
    return {"root": root, "passages": tiny_corpus["passages"], "name": passages[0]["title"], "small": small,
            "qa": write_jsonl(root / "qa.jsonl", [{"id": "q", "question": f"Who is the leader of {passages[0]['title']}?",
                                                   "gold_passage_ids": [passages[0]["id"]]}])}


def test_bm25_search_says_which_hits_score_zero(bm25, monkeypatch, capsys):
    """A query only 2 passages share a word with, asked for 4: ranks 3-4 were listed at score 0.000 (BM25's
    padding, in no meaningful order) with nothing said, where `eval retrieval`, `index targets` and fusion
    count them as not retrieved (only a list all of zeros had a note). The table and --json now say it alike."""
    out = bm25["root"] / "full"
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", bm25["passages"], "--encoder", "bm25",
                            "--out", out)
    assert code == 0, err
    query = f"Who leads {bm25['name']}?"  # "leads": in no passage; the name in its two
    note = ("note: only 2 of the 4 hits hold a word of the query (stop words aside): the last 2 score 0, so they are "
            "not ranked, their order means nothing, and `eval retrieval` counts them as not retrieved")
    code, stdout, err = run_main(monkeypatch, capsys, "index", "search", "--index", out, "-q", query, "--n-docs", 4,
                                 "--json")
    hits = json.loads(stdout)
    assert code == 0 and [h["score"] > 0 for h in hits] == [True, True, False, False], stdout
    assert {h["title"] for h in hits[:2]} == {bm25["name"]} and err.strip() == note, err
    code, stdout, err = run_main(monkeypatch, capsys, "index", "search", "--index", out, "-q", query, "--n-docs", 4)
    assert code == 0 and stdout.count("0.000") == 2 and err.strip() == note, stdout + err
    # every hit holding a word: nothing to say
    code, stdout, err = run_main(monkeypatch, capsys, "index", "search", "--index", out, "-q", query, "--n-docs", 2,
                                 "--json")
    assert code == 0 and all(h["score"] > 0 for h in json.loads(stdout)) and not err, err


def test_eval_retrieval_lowers_its_default_cut_offs_to_a_small_index(bm25, monkeypatch, capsys):
    """Without --recall-at, a 2-passage index was refused naming a flag never typed ("--recall-at: cut-offs
    must be at most the smallest index's 2 passages, got 20"). The defaults past its passages are now left
    out with a note, as `index search` lowers its --n-docs; a cut-off the user gives is still refused."""
    out = bm25["root"] / "two"
    code, _, err = run_main(monkeypatch, capsys, "index", "build", "--passages", bm25["small"], "--encoder", "bm25",
                            "--out", out)
    assert code == 0, err
    code, stdout, err = run_main(monkeypatch, capsys, "eval", "retrieval", "--index", out, "--questions", bm25["qa"],
                                 "--json")
    assert code == 0, err
    result = json.loads(stdout)[str(out)]
    assert (result["hit@1"], result["n"]) == (1.0, 1) and "hit@5" not in result and "hit@20" not in result, stdout
    assert f"note: {out} holds 2 passages: hit@k and recall@k at 1, not at 5 and 20" in err, err
    for flag in ("--recall-at", "-k"):
        code, _, err = run_main(monkeypatch, capsys, "eval", "retrieval", "--index", out, "--questions", bm25["qa"],
                                flag, 5)
        assert code == 2 and f"{flag}: cut-offs must be at most the smallest index's 2 passages, got 5" in err, err
