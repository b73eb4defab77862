"""Prompt-stitching RAG: the stitched input, citations, fusion, and the three kinds of generator."""

from __future__ import annotations

import doctest
import json

import pytest

from lewisrag.chat_client import ChatClient
from lewisrag.data.records import Passage, read_passages, read_qa
from lewisrag.index import FusedRetriever, Hit
from lewisrag.index.bm25 import BM25Index
from lewisrag.index.search import BM25Retriever
from lewisrag.rag_model import stitched
from lewisrag.rag_model.stitched import ChatGenerator, HFGenerator, PromptStitchingRAG, StitchSettings, stitch
from test_judges import server  # noqa: F401  (the local chat-completions server fixture)

PASSAGES = [Passage("p1", "Valdoria", "Valdoria is led by Ana Kel."), Passage("p2", "Veldoria", "Veldoria is led by Bo Ren.")]


def test_doctests():
    assert doctest.testmod(stitched).failed == 0


def test_instruction_goes_first():
    prompt = stitch("Who leads Valdoria?", PASSAGES, StitchSettings(instruction="Cite as [n]."))
    assert prompt.startswith("Cite as [n].\n\nWho leads Valdoria? // [1] Valdoria / ")


def test_answers_become_evaluator_records_numbered_as_the_generator_saw_them():
    rag = PromptStitchingRAG(None, lambda prompts: ["Ana Kel leads it [1]. Not Bo Ren [2]." for _ in prompts])
    (a,) = rag.answer_with(["Who leads Valdoria?"], [PASSAGES], ids=["q1"])
    assert a.cited == ["p1", "p2"]
    rec = a.to_record(gold_passage_ids=["p2"])
    assert rec["response"] == "Ana Kel leads it [1]. Not Bo Ren [2]."
    assert [c["id"] for c in rec["retrieved_contexts"]] == ["1", "2"] and rec["passage_ids"] == ["p1", "p2"]
    assert rec["gold_passage_ids"] == ["2"] and rec["user_input"] == "Who leads Valdoria?"


def test_a_citation_before_the_answer_is_read_like_one_after_it():
    from lewisrag.eval.statements import strip_citations

    rag = PromptStitchingRAG(None, lambda prompts: ["[2] Bo Ren" for _ in prompts])
    (a,) = rag.answer_with(["Who leads Veldoria?"], [PASSAGES], ids=["q1"])
    assert a.cited == ["p2"] and strip_citations(a.answer) == "Bo Ren" == strip_citations("Bo Ren [2]")


def test_retrieves_top_k(tiny_corpus):
    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    seen = []
    rag = PromptStitchingRAG(BM25Retriever(BM25Index.in_memory(passages)), lambda ps: seen.extend(ps) or ["x"] * len(ps),
                             StitchSettings(k=3))
    answers = rag.answer([qa[0].question])
    assert len(answers[0].passages) == 3 and answers[0].passages[0].id in qa[0].gold_passage_ids
    assert seen[0].count("[") == 3


def test_reciprocal_rank_fusion():
    class Fixed:
        def __init__(self, ids):
            self.ids = ids

        def search(self, questions, k):
            return [[Hit(i, "", "", 0.0, n) for n, i in enumerate(self.ids[:k])] for _ in questions]

    fused = FusedRetriever([Fixed(["a", "b", "c"]), Fixed(["b", "d", "a"])], rrf_k=60).search(["q"], 3)[0]
    # b = 1/62 + 1/61 > a = 1/61 + 1/63 > d = 1/62 > c = 1/63
    assert [h.id for h in fused] == ["b", "a", "d"]
    assert fused[0].score == pytest.approx(1 / 62 + 1 / 61)


def test_fusion_leaves_out_bm25_padding():
    """BM25 pads its top k with passages sharing no word with the question (score 0, index order):
    they earn no fused score, so a passage found by the other retriever alone outranks them."""
    passages = [Passage("p1", "Alpha", "apples grow here."), Passage("p2", "Beta", "pears grow there."),
                Passage("p3", "Gamma", "plums ripen late.")]

    class Fixed:
        def search(self, questions, k):
            return [[Hit("p3", "", "", 0.9, 2)] for _ in questions]

    bm25 = BM25Retriever(BM25Index.in_memory(passages))
    assert [h.score > 0 for h in bm25.search(["apples"], 3)[0]] == [True, False, False]
    fused = FusedRetriever([bm25, Fixed()], rrf_k=60).search(["apples"], 3)[0]
    assert [h.id for h in fused] == ["p1", "p3"]  # p1: 1/61 from BM25, p3: 1/61 from the other; p2 padding
    assert all(h.score == pytest.approx(1 / 61) for h in fused)


def test_hf_generator_seq2seq_and_causal(tmp_path):
    import torch
    from transformers import BartConfig, BartForConditionalGeneration, GPT2Config, GPT2LMHeadModel

    from lewisrag.training.pretrain_data import train_generator_tokenizer

    tok = train_generator_tokenizer([p.text for p in PASSAGES] * 20, 300)
    torch.manual_seed(0)
    bart = BartForConditionalGeneration(BartConfig(vocab_size=len(tok), d_model=16, encoder_layers=1, decoder_layers=1,
                                                   encoder_attention_heads=2, decoder_attention_heads=2,
                                                   encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=256))
    bart.save_pretrained(tmp_path / "bart")
    tok.save_pretrained(tmp_path / "bart")
    gen = HFGenerator.from_pretrained(str(tmp_path / "bart"), max_new_tokens=5)
    outs = gen([stitch("Who leads Valdoria?", PASSAGES), "short"])
    assert len(outs) == 2 and all(isinstance(o, str) for o in outs) and gen.last_input_tokens[0] > gen.last_input_tokens[1]
    gpt = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=256))
    causal = HFGenerator(gpt, tok, max_new_tokens=4)
    prompt = stitch("Who leads Valdoria?", PASSAGES)
    (out,) = causal([prompt])
    assert prompt not in out  # only the continuation comes back


def test_chat_generator(server):  # noqa: F811
    server.script = [{"content": "Ana Kel [1]."}]
    client = ChatClient(server.url, "m", api_key="sk-test", max_retries=0)
    rag = PromptStitchingRAG(None, ChatGenerator(client))
    (a,) = rag.answer_with(["Who leads Valdoria?"], [PASSAGES])
    assert a.answer == "Ana Kel [1]." and a.cited == ["p1"]
    body = server.requests[0]
    assert body["messages"][0]["content"] == stitched.DEFAULT_INSTRUCTION
    assert "[2] Veldoria / Veldoria is led by Bo Ren." in body["messages"][1]["content"]
    assert json.dumps(body).count("sk-test") == 0


def test_chat_generator_survives_a_request_that_fails_for_good():
    from lewisrag.chat_client import ChatError

    class Flaky:
        max_workers = 2

        def complete(self, system, prompt):
            if "Veldoria" in prompt:
                raise ChatError("HTTP 503 (3 attempts): try later")
            return " Ana Kel [1]. "

    gen = ChatGenerator(Flaky())
    assert gen(["Who leads Valdoria?", "Who leads Veldoria?"]) == ["Ana Kel [1].", ""]
    assert gen.failures == [("Who leads Veldoria?", "HTTP 503 (3 attempts): try later")]


@pytest.mark.parametrize("flags, named", [(["--gold-position", "middle"], "--gold-position"),
                                          (["--lr", "-1"], "--lr"),  # AdamW's ValueError: a traceback
                                          (["--lr", "inf"], "--lr"),
                                          (["--lr", "1e40"], "--lr: must be at most 3.4e+37")])  # float32 overflowed mid-step
def test_cli_bad_settings_are_bad_input(tmp_path, flags, named):
    from conftest import run_cli

    r = run_cli("train", "stitched", "--index", str(tmp_path), "--generator", str(tmp_path), "--train", str(tmp_path / "t.jsonl"),
                "--out", str(tmp_path / "o"), *flags)
    assert r.returncode == 2 and r.stderr.startswith(f"error: {named}") and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("answer,cited", [
    ("Ana Kel【2】.", ["p2"]), ("Ana Kel［2］.", ["p2"]), ("Ana Kel [1, 2].", ["p1", "p2"]), ("Ana Kel [1-3].", ["p1", "p2", "p3"]),
    ("Ana Kel [^2].", ["p2"]), ("Ana Kel [02].", ["p2"]), ("Ana Kel [٢].", []),  # Arabic-Indic digits are no citation
    ("Use `arr[1]` here [3].", ["p3"]), ("Ana Kel [2][2][9].", ["p2", "?9"]), ("Ana Kel [" + "9" * 5000 + "].", ["?" + "9" * 5000]),
])
def test_cited_ids_read_markers_as_the_evaluator_does(answer, cited):
    """cited_ids read only [\\d+]: 【2】, ［2］, [1, 2], [1-3] and [^2] cited nothing there while the
    evaluator's checker read ids in them, and [٢] (\\d takes any script's digits) the reverse."""
    from lewisrag.eval.statements import citation_ids

    passages = [*PASSAGES, Passage("p3", "Vaal", "Vaal is led by Cy Oh.")]
    assert stitched.cited_ids(answer, passages) == cited
    by_number = {str(i): p.id for i, p in enumerate(passages, start=1)}
    assert [by_number.get(n, f"?{n}") for n in citation_ids(answer)] == cited  # the evaluator's reading, the same ids
