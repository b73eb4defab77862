"""`ask`, the stitched generator and compare's questions, as a review found them:

- an `hf:` generator with forced_eos_token_id (every bart-large: BartConfig's default) never had an answer cut
  off at max_new_tokens: generate forces the end token at the last position, so every row held one;
- HFGenerator capped a seq2seq's max_new_tokens at its positions in silence (the "cut off" failure then said
  --max-new-tokens raises it) and floored a causal LM's prompt room at 16 (past the positions: an IndexError);
- compare scored a question of zero-width characters, which `ask` and `swap` refuse, and said nothing of
  questions the question encoder knows no word of, which they note;
- `ask` loaded the model (seconds to minutes) before it looked at --index;
- an empty RAG-Token answer showed the prior as its posterior, where RAG-Sequence's is p(z|x,"</s>");
- evidence.json decoded each token alone: a character split over two byte-level tokens was two U+FFFD.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
import torch

from conftest import run_main, write_jsonl
from lewisrag.data.io import InputError, LewisragWarning
from test_rag_train import rag_inputs, trained_rag  # noqa: F401  (session fixtures)

QUESTION = "Who is the leader of Valdoria?"


def _tokenizer():
    from lewisrag.training.pretrain_data import train_generator_tokenizer

    return train_generator_tokenizer(["Ana Kel leads Valdoria [1]. Bo Ren leads Veldoria [2]."] * 20, 300)


def _bart(tok, positions: int = 256, forced_eos: int | None = None):
    from transformers import BartConfig, BartForConditionalGeneration

    torch.manual_seed(0)
    model = BartForConditionalGeneration(BartConfig(
        vocab_size=len(tok), d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=positions,
        bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.eos_token_id, forced_eos_token_id=forced_eos))
    model.generation_config.update(forced_bos_token_id=None, forced_eos_token_id=forced_eos)
    return model


def _gpt(tok, positions: int = 256, forced_eos: int | None = None):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(1)  # (seed 0's greedy answer to the test's prompt ends at once)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=positions,
                                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id))
    model.generation_config.update(forced_eos_token_id=forced_eos)
    return model


@pytest.mark.parametrize("build", [_bart, _gpt], ids=["seq2seq", "causal"])
def test_an_answer_cut_off_under_a_forced_end_token_is_cut_off(build):
    from lewisrag.experiments import stitched_llm
    from lewisrag.rag_model.stitched import HFGenerator

    tok = _tokenizer()
    prompt = "Question: Who leads Valdoria?"
    free = HFGenerator(build(tok), tok, max_new_tokens=4)
    free([prompt])
    assert free.last_cut_off == [True] and free.last_new_tokens == [4]  # the case: the model itself never ends
    forced = HFGenerator(build(tok, forced_eos=tok.eos_token_id), tok, max_new_tokens=4)
    (reply,) = stitched_llm.HFAnswers(forced)([prompt])
    assert forced.last_cut_off == [True], "the forced end token was read as the model's own"
    assert reply.answer == "" and reply.failure.startswith("reply cut off at max_new_tokens (4 tokens"), reply
    first = free.model.generate(**tok([prompt], return_tensors="pt"), max_new_tokens=1, do_sample=False,
                                pad_token_id=tok.pad_token_id)[0, -1].item()
    ends = HFGenerator(build(tok, forced_eos=tok.eos_token_id), tok, max_new_tokens=4)
    ends.model.generation_config.eos_token_id = [tok.eos_token_id, first]  # the model's first token ends its answer
    ends([prompt])
    assert ends.last_cut_off == [False] and ends.last_new_tokens == [1]


def test_a_max_new_tokens_the_positions_cannot_hold_is_refused_by_flag():
    from lewisrag.rag_model.stitched import HFGenerator

    tok = _tokenizer()
    bart = _bart(tok, positions=16)
    assert HFGenerator(bart, tok, max_new_tokens=15).max_new_tokens == 15  # after its start token: the 16th position
    with pytest.raises(InputError, match=r"^--max-new-tokens: 16 does not fit the model's 16 positions, .*at most 15$"):
        HFGenerator(bart, tok, max_new_tokens=16)  # was cut to 15 in silence; 1000 to 383 of bart-large's 1024
    from lewisrag.rag_model.stitched import MIN_PROMPT_TOKENS

    gpt = _gpt(tok, positions=32)
    assert HFGenerator(gpt, tok, max_new_tokens=32 - MIN_PROMPT_TOKENS).max_input_tokens == MIN_PROMPT_TOKENS
    with pytest.raises(InputError, match=r"^--max-new-tokens: 17 does not fit the model's 32 positions, .*at most 16$"):
        HFGenerator(gpt, tok, max_new_tokens=17)
    with pytest.raises(InputError, match=r"^--max-new-tokens: 24 does not fit the model's 16 positions, .*no prompt$"):
        HFGenerator(_gpt(tok, positions=16), tok, max_new_tokens=24)  # was an IndexError at the first answer


def test_from_pretrained_refuses_max_new_tokens_before_the_weights_load(tmp_path, monkeypatch):
    """A hub LLM's weights take minutes to load in float32: the flag was refused only after them."""
    from lewisrag.rag_model import stitched

    tok = _tokenizer()
    _bart(tok, positions=16).save_pretrained(tmp_path / "g")
    tok.save_pretrained(tmp_path / "g")
    loaded = []
    monkeypatch.setattr(stitched, "load_model", lambda *a, **kw: loaded.append(a) or 1 / 0)
    with pytest.raises(InputError, match=r"^--max-new-tokens: 400 does not fit the model's 16 positions"):
        stitched.HFGenerator.from_pretrained(str(tmp_path / "g"), max_new_tokens=400)
    assert loaded == []


@pytest.fixture(scope="module")
def eval_line(tiny_qa_run):
    """One of the run's own eval questions, to keep a written question set valid around the one under test."""
    return json.loads((tiny_qa_run / "world" / "eval.jsonl").read_text(encoding="utf-8").splitlines()[0])


def test_compare_refuses_a_question_the_question_encoder_reads_nothing_of(tiny_qa_run, eval_line, tmp_path):
    from lewisrag.experiments.compare import compare_run

    questions = write_jsonl(tmp_path / "q.jsonl", [eval_line, {**eval_line, "id": "zw", "question": "\u200b\u00ad\u200b"}])
    with pytest.raises(InputError) as e:
        compare_run(tiny_qa_run, tmp_path / "out", ("rag_token",), questions, position_questions=0)
    assert (e.value.source, e.value.line, e.value.field) == (str(questions), 2, "question"), e.value
    assert "holds no character the question encoder reads" in str(e.value)
    assert not (tmp_path / "out" / "results.json").exists()


def test_compare_says_when_the_question_encoder_knows_no_word_of_questions(tiny_qa_run, eval_line, tmp_path):
    from lewisrag.experiments.compare import compare_run

    chinese = [{**eval_line, "id": f"zh{i}", "question": q}
               for i, q in enumerate(["罗尔比科学委员会有多少成员？", "谁领导瓦尔多利亚？"])]
    questions = write_jsonl(tmp_path / "q.jsonl", [eval_line, *chinese])
    with pytest.warns(LewisragWarning, match=r"the question encoder of rag_token, stitched knows no word of 2 of its 3 "):
        compare_run(tiny_qa_run, tmp_path / "out", ("rag_token", "stitched"), questions, position_questions=0)


def _foreign(model_dir, out):
    """A copy of `model_dir` whose rag.json names another context encoder than its index was built by."""
    shutil.copytree(model_dir, out)
    record = json.loads((out / "rag.json").read_text())
    record["settings"]["index_fingerprint"] = "0123456789abcdef"
    (out / "rag.json").write_text(json.dumps(record))
    return out


def test_ask_refuses_its_index_before_the_model_loads(rag_inputs, trained_rag, tmp_path, monkeypatch, capsys):  # noqa: F811
    from lewisrag.training import checkpoint

    def unwanted(*a, **kw):
        raise AssertionError("the model was loaded before --index was checked")

    monkeypatch.setattr(checkpoint, "load_trained", unwanted)
    missing = tmp_path / "no_index"
    code, _, err = run_main(monkeypatch, capsys, "ask", "--model", trained_rag, "--index", missing, QUESTION)
    assert code == 2 and str(missing) in err and "Traceback" not in err, err
    foreign = _foreign(trained_rag / "final", tmp_path / "foreign")
    code, _, err = run_main(monkeypatch, capsys, "ask", "--model", foreign, "--index", rag_inputs["index"], QUESTION)
    assert code == 2 and "encoder.ctx_fingerprint" in err and "0123456789abcdef" in err and "--swap" in err, err


def test_an_empty_rag_token_answer_shows_its_end_tokens_posterior(rag_inputs, trained_rag):  # noqa: F811
    from lewisrag.experiments.ask import ask
    from lewisrag.index.dense import DenseIndex
    from lewisrag.training.checkpoint import load_trained

    model, tokenizers = load_trained(trained_rag / "final")
    with torch.no_grad():  # its end token a little likelier, by how much depending on the passage: it ends at once
        model.generator.final_logits_bias[0, model.generation_config.eos_token_id] = 2.0
    index = DenseIndex.load(rag_inputs["index"])
    a = ask(model, tokenizers, index, QUESTION, max_length=8)
    assert model.variant == "token" and a.answer == "" and a.tokens == []  # (the case: an empty answer)
    with torch.no_grad():
        r = model.retrieve([QUESTION], index, tokenizers)
        out = model.generate(r.context_input_ids, r.context_attention_mask, r.doc_scores, max_length=8, return_evidence=True)
    seq = out.sequences[0].tolist()
    end = seq.index(model.generation_config.eos_token_id, 1) - 1  # row t is the posterior for seq[t+1]
    expected = out.doc_posterior[0][end].tolist()
    posterior, prior = [p.posterior for p in a.passages], [p.prior for p in a.passages]
    assert posterior == pytest.approx(expected, abs=1e-7) and sum(posterior) == pytest.approx(1)
    assert posterior != pytest.approx(prior, abs=1e-6), "the prior, shown as the posterior"


def test_evidence_tokens_are_the_answers_pieces(rag_inputs, trained_rag, tmp_path, monkeypatch):  # noqa: F811
    """A character split over two byte-level tokens ("·": 0xC2 0xB7) is one piece, as `ask` shows it."""
    from lewisrag.experiments.stages import write_evidence
    from lewisrag.index.dense import DenseIndex
    from lewisrag.rag_model import RagModel

    from transformers import AutoTokenizer

    generator_tok = AutoTokenizer.from_pretrained(trained_rag / "final" / "generator_tokenizer")
    ids = generator_tok(" Ana·", add_special_tokens=False)["input_ids"]
    assert [generator_tok.decode([i]) for i in ids].count("\ufffd") == 2  # (the case: "·" is two byte tokens)
    generate = RagModel.generate

    def scripted(self, *args, **kw):
        out = generate(self, *args, **kw)
        seq = torch.tensor([[self.generation_config.decoder_start_token_id, *ids, self.generation_config.eos_token_id]])
        k = out.doc_posterior.shape[-1]
        return replace(out, sequences=seq, doc_posterior=torch.softmax(torch.randn(1, seq.shape[1], k), -1))

    monkeypatch.setattr(RagModel, "generate", scripted)
    path = tmp_path / "evidence.json"
    write_evidence(trained_rag / "final", DenseIndex.load(rag_inputs["index"]), QUESTION, 16, path)
    evidence = json.loads(path.read_text(encoding="utf-8"))
    assert "\ufffd" not in "".join(evidence["tokens"]), evidence["tokens"]
    assert "".join(evidence["tokens"]).strip() == evidence["answer"] == "Ana·"
    assert len(evidence["tokens"]) == len(evidence["posterior"]) == len(ids)
