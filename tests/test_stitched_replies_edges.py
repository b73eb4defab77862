"""Edges of the stitched systems' prompts and replies a review found mishandled:

- an `hf:` model with a chat template read its start token twice: the template's text holds it (Llama 3's
  "{{ bos_token }}"), and it was encoded with special tokens added, in `fit`'s counts and in generation;
- an `hf:` answer that ran into max_new_tokens with no end token was scored as the model's answer, where
  the chat path refuses finish_reason "length";
- the run's own stitched system dropped its answers' cited passage ids, so its records had no
  `cited_passage_ids` (the Lewis models' implicit [n] markers had none either);
- a reply of nothing but a citation ("[1]") was an answer with empty text (EM 0, not failed), and a
  generator that only ever wrote one was never stopped by `check_answered`;
- "**Answer:** Ana Kel [2]" kept its label, and "Answer: Ana Kel\\nSource: [2]" was scored as
  "Ana Kel Source:";
- a chat answer's seconds were its own request's, not its batch's wall time shared among the batch's
  answers as the other systems' are: with --concurrency 4 the chat system read 4 times slower.
"""

from __future__ import annotations

import threading
import time
import types

import pytest
import torch

from lewisrag.data.io import InputError
from lewisrag.data.records import Passage
from lewisrag.eval.judges.base import DiskCache
from lewisrag.experiments import stitched_llm
from lewisrag.experiments.stitched_llm import EMPTY_REPLY, parse_reply
from lewisrag.rag_model.stitched import HFGenerator, cited_ids

PROMPT = "[1] Valdoria / Ana Kel leads it.\n\nQuestion: Who leads Valdoria ?"
PASSAGES = [Passage("a", "Valdoria", "Valdoria is led by Ana Kel."), Passage("b", "Veldoria", "Veldoria is led by Bo Ren.")]


def _llama_like(chat_template: bool):
    """A word-level tokenizer whose post-processor adds <s>, as Llama 3's does, with (or without) a chat
    template that writes "{{ bos_token }}" itself, and a tiny GPT-2 over it."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    words = ("<s> </s> <pad> <unk> [1] Valdoria / Ana Kel leads it. Question: Who ? system user assistant : Answer the "
             + stitched_llm.ANSWER_INSTRUCTION).split()
    t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(dict.fromkeys(words))}, unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    t.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    tok = PreTrainedTokenizerFast(tokenizer_object=t, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
    if chat_template:
        tok.chat_template = ("{{ bos_token }}{% for m in messages %}{{ m.role }} : {{ m.content }} {% endfor %}"
                             "{% if add_generation_prompt %}assistant :{% endif %}")
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=256)), tok


def _read_ids(gen: HFGenerator) -> list:
    """The input ids `gen`'s model is given, call by call."""
    seen, generate = [], gen.model.generate

    def recorded(**kw):
        seen.append(kw["input_ids"][0].tolist())
        return generate(**kw)

    gen.model.generate = recorded
    return seen


@pytest.mark.parametrize("chat_template", [True, False])
def test_the_model_reads_its_start_token_once(chat_template):
    gpt, tok = _llama_like(chat_template)
    answers = stitched_llm.HFAnswers(HFGenerator(gpt, tok, max_new_tokens=4))
    seen = _read_ids(answers.generator)
    answers([PROMPT])
    (ids,) = seen
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1, ids[:4]
    # fit counts what generation reads: the template's text as apply_chat_template(tokenize=True) encodes it
    assert answers.tokens(PROMPT) == len(ids) == answers.generator.last_input_tokens[0]
    if chat_template:
        messages = [{"role": "system", "content": answers.system}, {"role": "user", "content": PROMPT}]
        encoded = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
        assert encoded["input_ids"] == ids


class _Scripted:
    """A causal LM whose `generate` writes given continuations, each row padded after its end token (or
    running to max_new_tokens), as transformers' generate does."""

    config = types.SimpleNamespace(is_encoder_decoder=False)
    device = torch.device("cpu")

    def __init__(self, rows: list[list[int]], eos):
        self.rows, self.generation_config = rows, types.SimpleNamespace(eos_token_id=eos)

    def eval(self):
        return self

    def generate(self, input_ids, attention_mask, max_new_tokens, pad_token_id, **kw):
        rows = [r[:max_new_tokens] for r in self.rows]
        width = max(map(len, rows))
        return torch.cat([input_ids, torch.tensor([r + [pad_token_id] * (width - len(r)) for r in rows])], 1)


def _tokenizer():
    from lewisrag.training.pretrain_data import train_generator_tokenizer

    return train_generator_tokenizer(["Ana Kel leads Valdoria [1]. Bo Ren leads Veldoria [2]."] * 20, 300)


def test_an_hf_answer_cut_off_at_max_new_tokens_is_a_failure_not_an_answer():
    tok = _tokenizer()
    eos, words = tok.eos_token_id, tok("Ana Kel", add_special_tokens=False)["input_ids"]
    assert len(words) == 2 and eos != tok.pad_token_id
    rows = [words + [eos],  # ended early
            words + words,  # four tokens, no end token: cut off
            words + words[:1] + [eos]]  # its end token the fourth and last: a whole answer
    gen = HFGenerator(_Scripted(rows, [eos, 999]), tok, max_new_tokens=4)
    ended, cut, whole = stitched_llm.HFAnswers(gen)(["Question: a", "Question: b", "Question: c"])
    assert (ended.answer, ended.failure) == ("Ana Kel", None) and whole.failure is None
    assert cut.answer == "" and cut.failure.startswith("reply cut off at max_new_tokens (4 tokens"), cut
    assert cut.new_tokens == 4 and cut.input_tokens > 0  # what it cost is still counted
    assert gen.last_cut_off == [False, True, False]
    system = stitched_llm.LLMStitchedSystem(None, stitched_llm.HFAnswers(HFGenerator(_Scripted([words * 3], [eos]), tok,
                                                                                      max_new_tokens=4)),
                                            stitched_llm.prompt_settings(1), {"generator": "hf:x"})
    (answered,) = system.answer_from(["Who leads Valdoria?"], [PASSAGES[:1]])
    assert answered.failure.startswith("reply cut off") and answered.text == ""
    with pytest.raises(InputError, match="gave no answer to any of the 1 question asked .*reply cut off"):
        system.check_answered()


def test_a_real_generate_is_cut_off_only_where_no_end_token_came():
    """The same through transformers' generate: a tiny GPT-2 whose end token is its first greedy token for
    one prompt stops there (an empty reply, not cut off); the other prompt runs to max_new_tokens."""
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = _tokenizer()
    torch.manual_seed(0)
    gpt = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=512))
    gen = HFGenerator(gpt, tok, max_new_tokens=5)
    answers = stitched_llm.HFAnswers(gen)
    prompts = ["Question: Who leads Valdoria?", "Question: Who leads Veldoria? Bo Ren leads Veldoria [2]."]
    replies = answers(prompts)
    assert all(r.failure and r.failure.startswith("reply cut off") for r in replies), replies
    assert gen.last_cut_off == [True, True]
    firsts = []
    for p in prompts:  # each prompt's greedy tokens, alone
        enc = tok(answers.text(p), return_tensors="pt")
        firsts.append(gpt.generate(**enc, max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id)
                      [0, enc["input_ids"].shape[1]:].tolist())
    assert firsts[0][0] not in firsts[1], firsts  # (the case this test needs: only the first prompt meets the end token)
    gpt.generation_config.eos_token_id = firsts[0][0]
    first, second = answers(prompts)
    assert gen.last_cut_off == [False, True]
    assert first.failure == EMPTY_REPLY and second.failure.startswith("reply cut off")


def test_the_run_s_own_stitched_and_the_lewis_systems_report_their_citations(tmp_path):
    from lewisrag.experiments import systems as Y
    from lewisrag.rag_model import RagModel
    from lewisrag.rag_model.stitched import PromptStitchingRAG, StitchSettings
    from lewisrag.rag_model.testing import tiny_batch, tiny_hf_rag

    class Generator:  # CountingSeq2Seq's surface
        last_input_tokens, last_steps = [7, 7], [3, 3]

        def __call__(self, prompts):
            return ["Ana Kel [2]", "Bo Ren"]

    class Retriever:
        def search(self, questions, k):
            return [PASSAGES[:k]] * len(questions)

    stitched = Y.StitchedSystem.__new__(Y.StitchedSystem)
    stitched.generator = Generator()
    stitched.rag = PromptStitchingRAG(Retriever(), stitched.generator, StitchSettings(k=2))
    first, second = stitched.answer(["Who leads Valdoria?", "Who leads Veldoria?"])
    assert (first.cited, second.cited) == (["b"], [])

    class Tokenizer:  # enough of a generator tokenizer for `LewisSystem._decode`: 0 <s>, 1 <pad>, 2 </s>
        all_special_ids, pad_token_id = [0, 1, 2], 1

        def decode(self, ids, skip_special_tokens=True):
            return " ".join(f"w{i}" for i in ids if i not in self.all_special_ids)

    tiny_hf_rag("sequence", seed=1, n_docs=3, eos_bias=2.0).save_pretrained(tmp_path)
    lewis = Y.LewisSystem(RagModel.from_hf_pretrained(tmp_path), types.SimpleNamespace(generator=Tokenizer()),
                          types.SimpleNamespace(passages=[]), max_length=10)
    ids, mask, scores, _ = tiny_batch(4, 3, 9, 4, 100, seed=5)
    answers = lewis._decode(ids, mask, scores, [[Passage(f"p{z}", "t", "x") for z in range(3)]] * 4)
    assert all(a.cited == cited_ids(a.response, a.passages) for a in answers)
    assert any(a.cited for a in answers)  # its implicit [n] markers, mapped to the passages they name


class _Client:
    """ChatClient's surface, without a server: each question's reply after `delay` seconds."""

    model, temperature, usage = "m", 0.0, {}

    def __init__(self, replies: dict, delay: float = 0.0, max_workers: int = 4):
        self.replies, self.delay, self.max_workers, self.asked = replies, delay, max_workers, []
        self._lock = threading.Lock()

    def reply(self, system, prompt, key_only=False):
        time.sleep(self.delay)
        with self._lock:
            self.asked.append(prompt)
        return self.replies[prompt.rpartition("Question: ")[2]], {"prompt_tokens": 9}  # by the question alone

    def scrub_key(self, text):
        return text


@pytest.mark.parametrize("reply", ["[1]", " [2]. ", "【1】", "**Answer:** [1]", "Answer: [1]\nSource: [1]"])
def test_a_reply_of_nothing_but_citations_is_a_failure(tmp_path, reply):
    answers = stitched_llm.ChatAnswers(_Client({"Q": reply}), DiskCache(tmp_path, "answers"))
    (r,) = answers(["Q"])
    assert r.failure == EMPTY_REPLY
    answers(["Q"])
    assert answers.client.asked == ["Q", "Q"]  # not cached: asked again
    system = stitched_llm.LLMStitchedSystem(None, answers, stitched_llm.prompt_settings(2), {"generator": "chat:m"})
    (answered,) = system.answer_from(["Q"], [PASSAGES])
    assert answered.failure == EMPTY_REPLY
    with pytest.raises(InputError, match="gave no answer to any of the 1 question asked"):
        system.check_answered()


@pytest.mark.parametrize("reply, answer", [
    ("**Answer:** Ana Kel [2]", "Ana Kel [2]"),
    ("**Answer**: Ana Kel [2]", "Ana Kel [2]"),
    ("*Answer*: Ana Kel [2]", "Ana Kel [2]"),
    ("__Final answer:__ Ana Kel [2]", "Ana Kel [2]"),
    ("Answer: *Ana Kel* [2]", "*Ana Kel* [2]"),  # the answer's own emphasis stays
    ("答案：安娜·凯尔【2】", "安娜·凯尔[2]"),
    ("**答案：** 安娜·凯尔【2】", "安娜·凯尔[2]"),
    ("Answer: Ana Kel\nSource: [2]", "Ana Kel [2]"),
    ("Ana Kel\n\n**Sources:** [1], [2]\n", "Ana Kel [1][2]"),
    ("Ana Kel.\nReferences: passages [1] and [2]", "Ana Kel. [1][2]"),
    ("安娜·凯尔\n来源：【2】", "安娜·凯尔 [2]"),
    ("Ana Kel\nSource: [2] Valdoria / Valdoria is led by Ana Kel.", "Ana Kel Source: [2] Valdoria / Valdoria is led by Ana Kel."),
    ("Ana Kel\nSource: the second passage", "Ana Kel Source: the second passage"),  # no marker: no source line to read
    ("The answer: Ana Kel [2]", "The answer: Ana Kel [2]"),  # not a label at the start
])
def test_labels_in_markdown_and_a_source_line_are_no_part_of_the_answer(reply, answer):
    assert parse_reply(reply) == answer


def test_chat_answers_share_their_batch_s_wall_time(tmp_path):
    """Four requests of 0.2 s each, four in flight: each answer took a quarter of the batch's 0.2 s, as
    the Lewis and hf: systems count theirs; reported as 0.2 s each, the chat system read four times slower."""
    prompts = [f"Q{i}" for i in range(4)]
    answers = stitched_llm.ChatAnswers(_Client({p: f"Ana Kel [{i}]" for i, p in enumerate(prompts, 1)}, delay=0.2),
                                       DiskCache(tmp_path, "answers"))
    start = time.perf_counter()
    replies = answers(prompts)
    wall = time.perf_counter() - start
    assert len({r.seconds for r in replies}) == 1 and 0 < sum(r.seconds for r in replies) <= wall
    again = answers(prompts)  # from the cache: the first run's shares
    assert answers.cache_hits == 4 and [r.seconds for r in again] == [r.seconds for r in replies]
    # a batch of cached answers and one request: the request took the batch's time, the cached keep theirs
    answers.client.replies["Q9"] = "Bo Ren [1]"
    start = time.perf_counter()
    *cached, fresh = answers(prompts + ["Q9"])
    assert [r.seconds for r in cached] == [r.seconds for r in replies] and 0.2 <= fresh.seconds <= time.perf_counter() - start


def test_errors_name_the_variable_the_base_url_came_from(monkeypatch):
    """A URL from $LEWISRAG_LLM_BASE_URL was blamed on --llm-base-url, a flag the user never gave."""
    monkeypatch.delenv(stitched_llm.BASE_URL_ENV, raising=False)
    with pytest.raises(InputError, match=r"needs --llm-base-url URL or \$LEWISRAG_LLM_BASE_URL"):
        stitched_llm.check_options(stitched_llm.GeneratorOptions("chat:m"))
    monkeypatch.setenv(stitched_llm.BASE_URL_ENV, "http://127.0.0.1:9/v1")
    assert stitched_llm.check_options(stitched_llm.GeneratorOptions("chat:m")).base_url_from == "$LEWISRAG_LLM_BASE_URL"
    given = stitched_llm.GeneratorOptions("chat:m", base_url="http://127.0.0.1:8/v1")
    assert stitched_llm.check_options(given).base_url_from == "--llm-base-url"
