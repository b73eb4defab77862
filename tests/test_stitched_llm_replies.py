"""Replies of `compare --stitched-generator` a review found misread:

- DeepSeek-R1's chat template opens "<think>" in the prompt, so the reply only closes it
  ("reasoning</think>answer"): the reasoning was kept as the answer, and the passages only it named
  were counted as cited;
- a footnote definition ("Ana Kel[^1]\\n\\n[^1]: Valdoria / ...") was joined onto the answer before it
  was hidden: "Ana Kel: Valdoria / ..." scored EM 0;
- an `hf:` model read at most 1024 tokens whatever its positions (an 8192-position GPT-2 was given one
  passage of five);
- a streamed reply's `event: error` whose data has no "error" key was skipped: with [DONE] after it the
  text before the error was scored and cached as the answer;
- a streamed reply was split at U+2028, U+2029 and U+0085 (str.splitlines), which servers send raw inside
  JSON strings, and each data: line was read as a whole chunk, not joined up to the blank line.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from conftest import canned_endpoint, endpoint_root

from lewisrag.chat_client import ChatClient, ChatError
from lewisrag.data.records import Passage
from lewisrag.eval.judges.base import DiskCache
from lewisrag.eval.statements import strip_citations
from lewisrag.experiments import stitched_llm
from lewisrag.experiments.stitched_llm import parse_reply
from lewisrag.rag_model.stitched import cited_ids

PASSAGES = [Passage("a", "Valdoria", "Valdoria is led by Ana Kel."), Passage("b", "Veldoria", "Veldoria is led by Bo Ren.")]


@pytest.mark.parametrize("reply", [
    "Passage [1] says Valdoria is led by Ana Kel; passage [2] is about Veldoria.\n</think>\n\nAna Kel [1]",
    "Passage [2] is about Veldoria.</THINK>Ana Kel [1]",  # any case, as a whole block's
    "<think>one</think> passage [2]?\n</think>\nAna Kel [1]",  # a whole block, then the prompt's opened one
])
def test_the_reasoning_before_a_lone_think_end_is_dropped(reply):
    answer = parse_reply(reply)
    assert answer == "Ana Kel [1]"
    assert cited_ids(answer, PASSAGES) == ["a"]  # not passage [2], which only the reasoning named


def test_a_footnote_definition_is_no_part_of_the_answer():
    answer = parse_reply("Ana Kel[^1]\n\n[^1]: Valdoria / Valdoria is led by Ana Kel.")
    assert (answer, strip_citations(answer), cited_ids(answer, PASSAGES)) == ("Ana Kel[1]", "Ana Kel", ["a"])
    # a reply that only cites a footnote keeps it: only a definition line goes
    assert parse_reply("Ana Kel [^1]. Bo Ren [2]") == "Ana Kel [1]. Bo Ren [2]"


def _passages(n: int, sentences: int) -> list[Passage]:
    return [Passage(f"p{i}", f"Land{i}", " ".join(f"Land{i} is led by Person{i} since year {j}." for j in range(sentences)))
            for i in range(1, n + 1)]


def test_an_hf_model_reads_its_own_positions(tmp_path):
    """What `build_system` loads (`HFGenerator.from_pretrained`, no max_input_tokens): a 2048-position
    GPT-2 read 1024 tokens, and a prompt of about 1500 kept 2 of its 3 passages."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from lewisrag.rag_model.stitched import HFGenerator
    from lewisrag.training.pretrain_data import train_generator_tokenizer

    passages = _passages(3, 40)
    tok = train_generator_tokenizer([p.text for p in passages] + [stitched_llm.ANSWER_INSTRUCTION] * 5, 300)
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=2048)).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    answers = stitched_llm.HFAnswers(HFGenerator.from_pretrained(str(tmp_path), max_new_tokens=8), path=str(tmp_path))
    assert answers.generator.max_input_tokens == 2048 - 8
    system = stitched_llm.LLMStitchedSystem(None, answers, stitched_llm.prompt_settings(3), {"generator": "hf:x"})
    prompt = stitched_llm.stitch("Who leads Land1?", passages, system.settings)
    assert 1024 < answers.tokens(prompt) <= 2048 - 8
    (answered,) = system.answer_from(["Who leads Land1?"], [passages])
    assert [p.id for p in answered.passages] == ["p1", "p2", "p3"]
    assert {k: system.describe()[k] for k in ("shortened_prompts", "passages_dropped")} == {"shortened_prompts": 0,
                                                                                          "passages_dropped": 0}


@pytest.mark.parametrize("config, limit", [
    (SimpleNamespace(max_seq_len=4096, is_encoder_decoder=False), 4096 - 64),  # MPT's name for its positions
    (SimpleNamespace(n_positions=512, is_encoder_decoder=True), 512),  # a T5 whose config.json names them
    (SimpleNamespace(is_encoder_decoder=True), 1024),  # no positions named: the documented default
])
def test_the_default_input_limit_follows_the_config(config, limit):
    from lewisrag.rag_model.stitched import HFGenerator

    model = SimpleNamespace(config=config, eval=lambda: model)
    assert HFGenerator(model, tokenizer=None).max_input_tokens == limit
    assert HFGenerator(model, tokenizer=None, max_input_tokens=300).max_input_tokens == 300  # asked for: kept


def _chunk(content: str | None = None, finish: str | None = None) -> str:
    delta = {} if content is None else {"content": content}
    return json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}, ensure_ascii=False)


def _sse(*chunks: str) -> str:
    return "".join(f"data: {c}\n\n" for c in chunks) + "data: [DONE]\n\n"


SSE = "text/event-stream"
REPLIES = {
    "u2028": (_sse(_chunk("Ana\u2028Kel [1]"), _chunk(None, "stop")), SSE),
    "u2029": (_sse(_chunk("Ana\u2029Kel [1]"), _chunk(None, "stop")), SSE),
    "nel": (_sse(_chunk("Ana\x85Kel [1]"), _chunk(None, "stop")), SSE),
    # one event's chunk over two data: lines, joined with "\n" (JSON whitespace) up to the blank line
    "multiline": ('data: {"choices":[{"index":0,\ndata: "delta":{"content":"Ana Kel [1]"},"finish_reason":"stop"}]}\n\n'
                  "data: [DONE]\n\n", SSE),
    # lines that end with CR alone, and a field value without the space after its colon
    "cr": ("data:" + _chunk("Ana Kel [1]", "stop") + "\r\rdata: [DONE]\r\r", SSE),
    "error_event": ("data: " + _chunk("Ana") + '\n\nevent: error\ndata: {"message": "upstream overloaded", "code": 529}\n\n'
                    "data: [DONE]\n\n", SSE),
    "error_event_text": ("data: " + _chunk("Ana") + "\n\nevent: error\ndata: overloaded\n\ndata: [DONE]\n\n", SSE),
}


@pytest.mark.parametrize("mode, content", [
    ("u2028", "Ana\u2028Kel [1]"), ("u2029", "Ana\u2029Kel [1]"), ("nel", "Ana\x85Kel [1]"),
    ("multiline", "Ana Kel [1]"), ("cr", "Ana Kel [1]"),
])
def test_a_stream_is_read_by_the_event_stream_rules(mode, content):
    with endpoint_root(canned_endpoint(REPLIES)) as root:
        client = ChatClient(f"{root}/{mode}/v1", "m", "", max_retries=0, backoff=0.01, timeout=5)
        assert client.reply("s", "u")[0] == content
    assert parse_reply(content) == "Ana Kel [1]"


@pytest.mark.parametrize("mode, detail", [("error_event", "upstream overloaded"), ("error_event_text", "overloaded")])
def test_an_error_event_is_an_error_not_the_text_before_it(tmp_path, mode, detail):
    with endpoint_root(canned_endpoint(REPLIES)) as root:
        client = ChatClient(f"{root}/{mode}/v1", "m", "", max_retries=0, backoff=0.01, timeout=5)
        with pytest.raises(ChatError, match="the endpoint sent an error") as e:
            client.reply("s", "u")
        assert detail in str(e.value)
        answers = stitched_llm.ChatAnswers(client, DiskCache(tmp_path, "answers"))
        (reply,) = answers(["Question: Who leads Valdoria?"])
    assert reply.answer == "" and "the endpoint sent an error" in reply.failure
    assert answers.cache.get(answers.key("Question: Who leads Valdoria?")) is None  # a failure is not cached
