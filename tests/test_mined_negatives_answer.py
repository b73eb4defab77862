"""Mined hard negatives (BM25's and the model's own) are negatives as DPR defines them: not gold, holding
no answer of the question ("BM25 negatives ... top passages returned by BM25 which don't contain the
answer", Karpukhin et al. 2020, §3.2), and no copy of the gold passage under another id."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lewisrag.data import passages as P
from lewisrag.data.records import Passage, QAExample
from lewisrag.index.bm25 import BM25Index
from lewisrag.training import negatives
from lewisrag.training.dpr import DPRTrainConfig, init_encoders

HAMLET = [Passage("gold", "Hamlet", "Hamlet is a tragedy by William Shakespeare, set in Denmark."),
          Passage("holder", "Playwrights", "William Shakespeare wrote the play Hamlet and the play Macbeth."),
          Passage("clean", "Hamlet (1948 film)", "The play Hamlet was filmed by Laurence Olivier in 1948."),
          Passage("f1", "Macbeth", "Macbeth is a tragedy set in Scotland."),
          Passage("f2", "Denmark", "Denmark is a country in northern Europe.")]
ELSINORE = [Passage("copy", "Elsinore", "Elsinore castle stands in Helsingor."),
            Passage("other", "Kronborg", "Kronborg castle is a castle in Denmark."),
            Passage("f1", "Macbeth", "Macbeth is a tragedy set in Scotland."),
            Passage("gold", "Elsinore", "Elsinore castle stands in Helsingor.")]


def _rows(passages, question: str) -> list[int]:
    return BM25Index.in_memory(passages).search([question], len(passages))[1][0].tolist()


def test_bm25_negative_holding_the_answer_is_skipped():
    """The top BM25 hit that was not gold became the negative though it held the answer ("William
    Shakespeare wrote the play Hamlet" for "who wrote the play hamlet"): a false negative."""
    assert _rows(HAMLET, "who wrote the play hamlet")[0] == 1  # the passage holding the answer ranks first
    ex = QAExample("q", "who wrote the play hamlet", ["William Shakespeare"], ["gold"])
    assert negatives.mine_hard_negatives([ex], HAMLET) == [2]


def test_bm25_negative_holding_a_pattern_answer_is_skipped():
    """A regex-answered question (CuratedTrec's) took a negative its pattern matches."""
    ex = QAExample("q", "who wrote the play hamlet", ["(W|w)illiam (S|s)hakespeare"], ["gold"], answer_match="regex")
    assert negatives.mine_hard_negatives([ex], HAMLET) == [2]


def test_bm25_negative_that_copies_the_gold_passage_is_skipped():
    """A passage with the gold one's title and text under another id (a corpus holding a passage twice)
    became the negative: the positive's own words, trained away from the question."""
    assert _rows(ELSINORE, "where is elsinore castle")[:2] == [3, 0]  # the gold one, then its copy
    ex = QAExample("q", "where is elsinore castle", ["Zealand"], ["gold"])  # an answer the passages do not spell out
    assert negatives.mine_hard_negatives([ex], ELSINORE) == [1]


@pytest.mark.parametrize("table", [False, True])
def test_copy_of_a_gold_passage_that_is_no_hit_is_skipped(tmp_path, monkeypatch, table):
    """The gold passage below the mined depth, its copy above it: ids alone could not tell the copy, and
    it became the negative. The gold one's text is read by its id, of a list or of a Parquet table."""
    passages = ELSINORE
    if table:
        path = tmp_path / "p.parquet"
        pq.write_table(pa.table({k: [getattr(p, k) for p in ELSINORE] for k in ("id", "title", "text")}), path,
                       row_group_size=2)
        passages = P.open_table(path)
    monkeypatch.setattr(BM25Index, "search", lambda self, questions, k: (None, [[0, 1]] * len(questions)))
    ex = QAExample("q", "where is elsinore castle", ["Zealand"], ["gold"])
    assert negatives.mine_hard_negatives([ex], passages, depth=2) == [1]


def test_self_mined_negative_holds_no_answer_and_copies_no_gold_passage():
    """The model's best-ranked passage that was not gold became the second negative even when it held
    the answer or copied the gold passage (whose vector it shares): with no other passage there is none."""
    passages = [ELSINORE[3], ELSINORE[0], Passage("holder", "Kronborg", "Elsinore castle stands on Zealand.")]
    ex = QAExample("q", "where is elsinore castle", ["Zealand"], ["gold"])
    cfg = DPRTrainConfig(vocab_size=300, hidden_size=32, layers=1, heads=2, batch_size=8)
    q_enc, c_enc, tok = init_encoders(cfg, [f"{p.title} {p.text}" for p in passages] + [ex.question])
    assert negatives.mine_self_negatives(q_enc, c_enc, tok, cfg, [ex], passages) == [None]
    other = QAExample("q2", "where is elsinore castle", ["Denmark"], ["gold"])  # its answer is in none of them
    assert negatives.mine_self_negatives(q_enc, c_enc, tok, cfg, [ex, other], passages) == [None, 2]
