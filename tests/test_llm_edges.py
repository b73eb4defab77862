"""Edges of the LLM paths a review found against a fake endpoint:

- a local `hf:` generator's prompt longer than the model reads was cut from the left: the instruction
  and passage [1] went first, in silence (a 256-position GPT-2 with five passages kept neither);
- two processes sharing a --cache-dir met "database is locked", reported as a cache to delete;
- a streamed reply that begins with a comment line (": OPENROUTER PROCESSING") was not read as a stream;
- OpenAI's structured refusal (content null, "refusal": "...") was retried as malformed and never said so;
- a base URL with a ?query or #fragment was accepted, and the query swallowed "/chat/completions".
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time

import pytest
from conftest import canned_endpoint, endpoint_root

from lewisrag.chat_client import ChatClient, ChatError, url_problem
from lewisrag.data.io import InputError
from lewisrag.data.records import Passage
from lewisrag.eval.judges import base as judge_base
from lewisrag.eval.judges.base import DiskCache
from lewisrag.eval.judges.llm import LLMJudge
from lewisrag.experiments import stitched_llm

KEY = "sk-edges-SECRET-5c2a91"


def _chunk(delta: dict, finish: str | None = "stop") -> str:
    return "data: " + json.dumps({"choices": [{"delta": delta, "finish_reason": finish}]}) + "\n\n"


VERDICT = json.dumps({"verdicts": [{"id": 1, "label": "entailment", "reason": "stated"}]})
REFUSAL = "I can't help with that."
REPLIES = {  # mode -> (the 200 reply's body, its Content-Type)
    "sse_comment": (": OPENROUTER PROCESSING\n\n: OPENROUTER PROCESSING\r\n\r\n" + _chunk({"content": VERDICT})
                    + "data: [DONE]\n\n", "text/event-stream"),
    "sse_fields": ("id: 1\nretry: 3000\n" + _chunk({"content": VERDICT}) + "data: [DONE]\n\n", "text/event-stream"),
    "refusal": (json.dumps({"choices": [{"message": {"role": "assistant", "content": None, "refusal": REFUSAL},
                                         "finish_reason": "stop"}]}), "application/json"),
    "refusal_no_content": (json.dumps({"choices": [{"message": {"role": "assistant", "refusal": REFUSAL},
                                                    "finish_reason": "stop"}]}), "application/json"),
    "sse_refusal": (_chunk({"refusal": "I can't "}, None) + _chunk({"refusal": "help with that."}) + "data: [DONE]\n\n",
                    "text/event-stream"),
}


# POST /MODE/v1/chat/completions answers 200 with REPLIES[MODE]
Endpoint = canned_endpoint(REPLIES)


@pytest.fixture
def base():
    with endpoint_root(Endpoint) as root:
        yield root


def client(url: str, **kw) -> ChatClient:
    return ChatClient(url, "m", KEY, **{"max_retries": 2, "backoff": 0.001, "max_backoff": 0.01, "timeout": 5.0, "seed": 0, **kw})


# ---------------------------------------------------------------------------------------------
# 1. a local generator's prompt is shortened by whole passages, never by its instruction


@pytest.fixture(scope="module")
def small_gpt():
    """A random GPT-2 of 400 positions and a 300-word tokenizer, on which the answer instruction alone
    takes about 250 tokens and each passage about 57: two of five passages fit (16 tokens kept for the answer)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from lewisrag.training.pretrain_data import train_generator_tokenizer

    passages = [Passage(f"p{i}", f"Land{i}", f"Land{i} is led by Person{i}. " * 6) for i in range(1, 6)]
    tok = train_generator_tokenizer([p.text for p in passages] + [stitched_llm.ANSWER_INSTRUCTION] * 5
                                    + ["Question: Who leads Land1? Answer:"], 300)
    torch.manual_seed(0)
    gpt = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=400))
    return gpt, tok, passages


def _system(small_gpt):
    """The stitched system over `small_gpt` (five passages per prompt) and the texts its generator was given."""
    from lewisrag.rag_model.stitched import HFGenerator

    class Recording(HFGenerator):
        seen: list[str] = []

        def __call__(self, prompts):
            self.seen = self.seen + list(prompts)
            return super().__call__(prompts)

    gpt, tok, _ = small_gpt
    answers = stitched_llm.HFAnswers(Recording(gpt, tok, max_new_tokens=16), path="/models/gpt")
    system = stitched_llm.LLMStitchedSystem(None, answers, stitched_llm.prompt_settings(5), {"generator": "hf:/models/gpt"})
    return system, answers


def test_a_long_hf_prompt_drops_its_worst_passages_whole_and_keeps_the_instruction(small_gpt):
    """Cut from the left, the prompt lost the instruction, passage [1] and [2]'s marker (probe5)."""
    system, answers = _system(small_gpt)
    passages = small_gpt[2]
    limit = answers.generator.max_input_tokens
    assert limit == 400 - 16
    (answered,) = system.answer_from(["Who leads Land1?"], [passages])
    (text,) = answers.generator.seen
    # the best two passages, whole, with the instruction before them and the question after
    assert [p.id for p in answered.passages] == ["p1", "p2"]
    assert text.startswith(stitched_llm.ANSWER_INSTRUCTION + "\n\n[1] Land1 / " + passages[0].text)
    assert f"[2] Land2 / {passages[1].text}\n\nQuestion: Who leads Land1?\nAnswer:" in text and "[3]" not in text
    tokens = [answers.tokens(stitched_llm.stitch("Who leads Land1?", passages[:n], system.settings)) for n in (2, 3)]
    assert answered.input_tokens == tokens[0] <= limit < tokens[1]  # two fit whole, three did not
    described = system.describe()
    assert (described["shortened_prompts"], described["passages_dropped"], described["max_input_tokens"]) == (1, 3, limit)
    # a prompt that fits is left whole, and not counted
    (whole,) = system.answer_from(["Who leads Land1?"], [passages[:1]])
    assert [p.id for p in whole.passages] == ["p1"] and system.describe()["shortened_prompts"] == 1


def test_a_question_whose_prompt_does_not_fit_without_passages_is_one_line(small_gpt):
    system, answers = _system(small_gpt)
    with pytest.raises(InputError, match=r"takes \d+ tokens with no passage at all, more than the 384 this model reads") as e:
        system.answer_from(["Who leads " + "Land1 and " * 200 + "?"], [small_gpt[2]])
    assert e.value.source == "/models/gpt" and "\n" not in str(e.value) and len(str(e.value)) < 400
    assert answers.generator.seen == []  # nothing was generated


def test_a_prompt_that_holds_not_even_its_best_passage_is_refused(small_gpt):
    """An answer read from no passage is not retrieval-augmented: one line, nothing generated."""
    system, answers = _system(small_gpt)
    long = [Passage("big", "Land1", "Land1 is led by Person1. " * 80)] + list(small_gpt[2])
    with pytest.raises(InputError, match=r"does not hold even its best passage within the 384 tokens") as e:
        system.answer_from(["Who leads Land1?"], [long])
    assert e.value.source == "/models/gpt" and "\n" not in str(e.value)
    assert answers.generator.seen == []


# ---------------------------------------------------------------------------------------------
# 2. a cache two processes share: waits, and a lock is contention, not damage


def test_a_shared_cache_reads_past_a_writer_and_calls_a_lock_contention(tmp_path, monkeypatch):
    cache = DiskCache(tmp_path)
    cache.put("k", {"supported": True})
    other = sqlite3.connect(tmp_path / "judge.sqlite", isolation_level=None, check_same_thread=False)  # another process's
    other.execute("BEGIN EXCLUSIVE")
    other.execute("INSERT INTO cache VALUES ('x', '1')")
    try:
        monkeypatch.setattr(judge_base, "BUSY_TIMEOUT_S", 0.3, raising=False)
        start = time.monotonic()
        assert DiskCache(tmp_path).get("k") == {"supported": True}  # WAL: a writer does not hold readers up
        assert time.monotonic() - start < 2
        with pytest.raises(InputError) as e:
            DiskCache(tmp_path).put("k2", 1)  # two writers: the second waits, then says who holds the file
        assert "locked by another process" in str(e.value) and "delete" not in str(e.value)
        assert e.value.field == "--cache-dir" and e.value.source == str(tmp_path / "judge.sqlite")
        monkeypatch.setattr(judge_base, "BUSY_TIMEOUT_S", 30.0)
        threading.Timer(0.5, other.execute, ["COMMIT"]).start()  # the other process finishes its write: this one's goes through
        DiskCache(tmp_path).put("k3", 3)
    finally:
        other.close()
    assert DiskCache(tmp_path).get("k3") == 3 and DiskCache(tmp_path).get("x") == 1
    assert sqlite3.connect(tmp_path / "judge.sqlite").execute("PRAGMA journal_mode").fetchone() == ("wal",)


# ---------------------------------------------------------------------------------------------
# 3. a stream that begins with comments


@pytest.mark.parametrize("mode", ["sse_comment", "sse_fields"])
def test_a_stream_that_begins_with_comments_or_an_id_is_read_as_one(base, mode):
    c = client(f"{base}/{mode}/v1")
    assert c.complete("s", "u", json_mode=True) == VERDICT
    assert Endpoint.seen == [mode] and c.usage["retries"] == 0


# ---------------------------------------------------------------------------------------------
# 4. a structured refusal


@pytest.mark.parametrize("mode", ["refusal", "refusal_no_content", "sse_refusal"])
def test_a_structured_refusal_fails_at_once_saying_so(base, mode):
    c = client(f"{base}/{mode}/v1")
    with pytest.raises(ChatError, match=r"^the model refused: I can't help with that\. \(1 attempt\)$"):
        c.complete("s", "u")
    assert Endpoint.seen == [mode] and c.usage["retries"] == 0 and c.broken is None  # not retried, and not the endpoint's fault


def test_a_refusal_is_a_judge_verdict_and_a_generator_failure_not_a_crash(base, tmp_path):
    judge = LLMJudge(base_url=f"{base}/refusal/v1", model="m", api_key=KEY, cache_dir=tmp_path / "judge",
                     max_retries=2, backoff=0.001, timeout=5.0)
    (verdict,) = judge.judge([("Ana Kel leads Valdoria.", "Ana Kel leads Valdoria.")])
    assert verdict.supported is None and verdict.reason.startswith("the model refused: I can't help with that.")
    answers = stitched_llm.ChatAnswers(client(f"{base}/refusal/v1"), DiskCache(tmp_path / "answers", "answers"))
    (reply,) = answers(["[1] Valdoria / Ana Kel leads Valdoria.\n\nQuestion: Who leads Valdoria?"])
    assert (reply.answer, reply.failure) == ("", "the model refused: I can't help with that. (1 attempt)")
    assert answers.cache.get(answers.key("[1] Valdoria / Ana Kel leads Valdoria.\n\nQuestion: Who leads Valdoria?")) is None
    assert Endpoint.seen == ["refusal", "refusal"]  # one request each


# ---------------------------------------------------------------------------------------------
# 6. a base URL with a query or fragment


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/v1?api-version=2024-02-01", "http://127.0.0.1:9/v1#frag",
                                 "http://127.0.0.1:9/v1?"])
def test_a_base_url_with_a_query_or_fragment_is_refused_in_one_line(url, monkeypatch):
    assert url_problem(url).startswith("expected a base URL without a query (?...) or fragment (#...)")
    monkeypatch.delenv("LEWISRAG_LLM_API_KEY", raising=False)
    with pytest.raises(InputError, match=r"without a query") as e:
        stitched_llm.check_options(stitched_llm.GeneratorOptions("chat:m", base_url=url))
    assert e.value.source == "--llm-base-url" and "\n" not in str(e.value)
    with pytest.raises(InputError, match=r"without a query"):
        LLMJudge(base_url=url, model="m", api_key="")


def test_a_key_in_a_refused_base_urls_query_is_never_printed():
    """The judge's refusal shows the URL it refused: its query (where some services put a key) is hidden."""
    with pytest.raises(InputError) as e:
        LLMJudge(base_url="https://api.example.com/v1?api-key=sk-secret-123", model="m", api_key="")
    assert "sk-secret-123" not in str(e.value) and "https://api.example.com/v1?..." in str(e.value)
