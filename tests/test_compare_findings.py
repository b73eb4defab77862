"""What `compare` and the reproduction's report say, and what they accept, on the edges a review found:
a run config whose decoding length leaves no token to generate; the findings of one system, or of one
Lewis variant; a regex-answered question's F1 and ROUGE-L reason; the prompt-too-long error of a
seq2seq generator; the position probe's sentence when it read every test question; and the closed
book at a length RAG's decoding refuses."""

from __future__ import annotations

import json

import pytest

from lewisrag.data.io import InputError
from lewisrag.data.records import Passage, QAExample
from lewisrag.experiments import compare as C
from lewisrag.experiments import report as R
from lewisrag.experiments.systems import Answered
from lewisrag.eval.reports.i18n import messages

EN, ZH = messages("en"), messages("zh")
QUESTION = "Who leads Land1?"


# --- 1. a run config's max_target_length of 1 ------------------------------------------------------


def test_a_run_config_decoding_one_token_is_refused_naming_the_field(tmp_path):
    """max_target_length 1 is the start token alone: accepted here, RAG's generate raised a ValueError
    once the models had loaded (rc 3, a traceback). Training refuses it; so does reading the run back."""
    from lewisrag.experiments.presets import read_run_config

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"preset": {"rag": {"max_target_length": 1}}}))
    with pytest.raises(InputError) as e:
        read_run_config(tmp_path)
    assert e.value.field == "preset.rag.max_target_length" and e.value.source == str(config)
    assert "expected a whole number >= 2, got 1" in str(e.value) and "\n" not in str(e.value)
    config.write_text(json.dumps({"preset": {"rag": {"max_target_length": 2}, "stitched_k": 1}}))
    assert read_run_config(tmp_path)["preset"]["rag"]["max_target_length"] == 2  # the least that decodes a token


# --- 2. the findings of one system, or of one Lewis variant ----------------------------------------


def _card(em: dict) -> dict:
    return {"qa": {n: {"exact_match": v, "f1": v, "rougeL": v, "n": 20, "answered": 20} for n, v in em.items()},
            "layers": {n: {"citation_precision": None, "forward_passes_per_answer": 4.0} for n in em}}


def test_one_system_is_stated_not_ranked():
    """`compare --systems stitched` said "`stitched` is best with 0.000", best of one."""
    for lang, says in (("en", "- Exact match on 20 short-answer test questions: `stitched` scores 0.250."),
                       ("zh", "`stitched` 的得分为 0.250。")):
        first = C.findings(_card({"stitched": 0.25}), lang)[0]
        assert first.endswith(says) and "best" not in first and "最好" not in first, first
    assert C.findings(_card({"rag_token": 0.5, "stitched": 0.25}))[0].endswith("`rag_token` is best with 0.500.")


def test_the_gap_to_one_lewis_variant_names_no_better_one():
    """`--systems rag_token,stitched` said "the better Lewis variant (`rag_token`)" with one variant compared."""
    gap = C.findings(_card({"rag_token": 0.5, "stitched": 0.25}))[1]
    assert gap.startswith("- The stitched system's EM is -0.250 from the Lewis variant (`rag_token`): "), gap
    zh = C.findings(_card({"rag_token": 0.5, "stitched": 0.25}), "zh")[1]
    assert zh.startswith("- 提示拼接系统的 EM 与 Lewis 变体（`rag_token`）相差 -0.250：") and "较好" not in zh, zh
    both = C.findings(_card({"rag_token": 0.5, "rag_sequence": 0.4, "stitched": 0.25}))[1]
    assert "from the better Lewis variant (`rag_token`)" in both  # two variants: one is the better


# --- 3. a pattern's F1 and ROUGE-L -----------------------------------------------------------------


GOLD = Passage("p-gold", "Sepom", "The capital of Sepom is Tomgasze.")


class Fake:
    """A system answering every question "Tomgasze [1]" from the gold passage."""

    def answer(self, questions: list[str]) -> list[Answered]:
        return [Answered("Tomgasze", "Tomgasze [1]", [GOLD], 1, 10, 0.0) for _ in questions]


def test_a_patterns_f1_and_rouge_l_say_the_reference_is_a_pattern():
    """A CuratedTrec question's F1 and ROUGE-L were null for "no reference answer", though it has one, a
    pattern, that its EM was scored by."""
    pattern = QAExample("q2", "Which city is Sepom's capital?", ["Tom(gasze)?"], [GOLD.id],
                        reference_statements=["The capital of Sepom is Tomgasze."], answer_match="regex")
    (rec,) = C.scorecard({"rag_token": Fake()}, [], [pattern])["results"]["records"]
    assert rec["metrics"]["exact_match"] == 1.0 and rec["metrics"]["f1"] is None and rec["metrics"]["rougeL"] is None
    reason = "the reference is a pattern (regex_match): F1 and ROUGE-L against it measure nothing"
    assert rec["nan_reasons"]["f1"] == rec["nan_reasons"]["rougeL"] == reason, rec["nan_reasons"]
    assert ZH.text(reason) != reason  # the Chinese report translates it
    text = QAExample("q1", "What is the capital of Sepom?", ["Tomgasze"], [GOLD.id], reference_statements=["x"])
    (rec,) = C.scorecard({"rag_token": Fake()}, [], [text])["results"]["records"]
    assert rec["metrics"]["f1"] == 1.0 and "f1" not in rec["nan_reasons"]


# --- 4. and 6. a seq2seq generator's input limit; the closed book at max_length 1 ------------------


@pytest.fixture(scope="module")
def tiny_lms():
    """A random BART and GPT-2 of 64 positions over one small tokenizer, and two short passages."""
    import torch
    from transformers import BartConfig, BartForConditionalGeneration, GPT2Config, GPT2LMHeadModel

    from lewisrag.training.pretrain_data import train_generator_tokenizer

    passages = [Passage(f"p{i}", f"Land{i}", f"Land{i} is led by Person{i}.") for i in (1, 2)]
    tok = train_generator_tokenizer([p.text for p in passages] + [QUESTION] * 3, 300)
    torch.manual_seed(0)
    bart = BartForConditionalGeneration(BartConfig(
        vocab_size=len(tok), d_model=8, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16, max_position_embeddings=64,
        bos_token_id=0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2))
    gpt = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=8, n_layer=1, n_head=2, n_positions=64))
    return bart, gpt, tok, passages


def _too_long(model, tok, passages) -> str:
    from lewisrag.experiments import stitched_llm
    from lewisrag.rag_model.stitched import HFGenerator

    answers = stitched_llm.HFAnswers(HFGenerator(model, tok, max_new_tokens=8), path="/models/lm")
    with pytest.raises(InputError) as e:
        answers.fit("Who leads " + "Land1 and " * 40 + "Land2?", passages, stitched_llm.prompt_settings(2))
    return str(e.value)


def test_a_seq2seq_prompt_limit_is_not_said_to_lose_the_answers_positions(tiny_lms):
    """A BART reads its 64 positions whole (its answer has its own): "(its positions less the answer's)"
    is a causal LM's limit only (64 - 8 = 56 here)."""
    bart, gpt, tok, passages = tiny_lms
    seq2seq = _too_long(bart, tok, passages)
    assert seq2seq.endswith("more than the 64 this model reads"), seq2seq
    causal = _too_long(gpt, tok, passages)
    assert causal.endswith("more than the 56 this model reads (its positions less the answer's)"), causal


def test_the_closed_book_refuses_a_length_rag_decoding_refuses(tiny_lms):
    """answer_closed_book(max_length=1) decoded one token where RagModel.generate(max_length=1) raises: the
    same limit no longer decodes the same answer length in both."""
    from lewisrag.training.closed_book import answer_closed_book

    bart, _, tok, _ = tiny_lms
    with pytest.raises(ValueError, match="max_length: 1 leaves no token to generate after the start token; must be at least 2"):
        answer_closed_book(bart, tok, [QUESTION], max_length=1)
    (answer,) = answer_closed_book(bart, tok, [QUESTION], max_length=2)  # the start token and one more
    assert len(tok(answer, add_special_tokens=False)["input_ids"]) <= 1


# --- 5. the position probe's sentence in the reproduction's report ----------------------------------


def _results(probe_n: int, table_n: int) -> dict:
    systems = ("rag_token", "stitched")
    return {"layers": {s: {"faithfulness": 0.9} for s in systems},
            "qa": {s: {"exact_match": 0.5, "n": table_n} for s in systems},
            "stages": {"compare": {"findings": ["- Position probe, `rag_token`: ..."]}},
            "position": {s: {"positions": [1, 2], "exact_match": [0.9, 0.9], "n": probe_n} for s in systems}}


def test_a_probe_that_read_every_question_is_not_said_to_read_the_first_few():
    """"reads the first 34 short-answer test questions (Table 1 reads them all)" was printed with Table 1's
    n 34 too: the probe read them all, and its position 1 differs for another reason."""
    text = "\n".join(R._compare(_results(34, 34), EN))
    assert "reads the first" not in text, text
    assert ("- The position probe above reads every short-answer test question Table 1 reads, but with the gold passage "
            "put among each question's retrieved passages") in text
    zh = "\n".join(R._compare(_results(34, 34), ZH))
    assert "前 34 道" not in zh and "表 1 用到的全部短答案测试题" in zh
    fewer = "\n".join(R._compare(_results(20, 34), EN))  # the probe's first 20 of Table 1's 34: as before
    assert "- The position probe above reads the first 20 short-answer test questions at each position" in fewer
