"""Faults of the chat endpoint and of what names it, beyond test_endpoint_faults.py: an error body
that trickles forever, a body cut short of its Content-Length, a reply the endpoint cut off
(finish_reason "length"), lone surrogates in a reply, a base URL or an API key that urllib cannot
send, and an hf: folder whose tokenizer cannot make the prompts. Each once ended as a hang, a
traceback (the key in it), a misnamed failure or a truncated answer scored as the model's."""

from __future__ import annotations

import json
import socket
import time
from http.server import BaseHTTPRequestHandler

import pytest
from conftest import endpoint_root, local_server, run_main
from test_compare import run_dir  # noqa: F401  (the tiny reproduce-like run: world, DPR, index A, both Lewis models)

from lewisrag.chat_client import ChatClient, ChatError
from lewisrag.data.io import InputError
from lewisrag.eval.judges.base import DiskCache
from lewisrag.eval.judges.llm import LLMJudge
from lewisrag.experiments import stitched_llm

KEY = "sk-faults-SECRET-41d9e2"


def completion(content, finish_reason: str = "stop") -> str:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}],
                       "usage": {"prompt_tokens": 7, "completion_tokens": 3}})


# a lone high surrogate, as a JSON escape: what an endpoint that cuts "😀" (\ud83d\ude00) in half sends
SURROGATE = '{"choices": [{"message": {"content": "Ana \\ud83d Kel [1]"}, "finish_reason": "stop"}]}'
REPLIES = {  # path -> the 200 reply's body
    "stop": completion("Ana Kel [1]"),
    "length": completion("Ana K", "length"),
    "filter": completion("Ana", "content_filter"),
    "surrogate": SURROGATE,
    "verdict": completion(json.dumps({"verdicts": [{"id": 1, "label": "entailment", "reason": "says \ud83d so"}]})),
}


class Faulty(BaseHTTPRequestHandler):
    """POST /MODE/v1/chat/completions: a REPLIES body, "trickle" (503 whose body comes a byte every
    0.05 s, for 6 s at most) or "cut" (a body that stops at 19 of its 500 announced bytes)."""

    protocol_version = "HTTP/1.1"
    seen: list[str] = []

    def do_POST(self):  # noqa: N802 (http.server's naming)
        self.close_connection = True
        self.rfile.read(int(self.headers["Content-Length"]))
        mode = self.path.split("/")[1]
        Faulty.seen.append(mode)
        if mode == "trickle":
            self.send_response(503)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            end = time.monotonic() + 6
            try:
                while time.monotonic() < end:
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:
                pass  # the client gave up: the point
            return
        if mode == "cut":
            self.send_response(200)
            self.send_header("Content-Length", "500")
            self.end_headers()
            self.wfile.write(b'{"choices": [{"mess')
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        data = REPLIES[mode].encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def base():
    """The fake endpoint's root: f"{base}/MODE/v1" is a base URL."""
    with endpoint_root(Faulty) as root:
        yield root


def client(url: str, **kw) -> ChatClient:
    return ChatClient(url, "m", KEY, **{"max_retries": 1, "backoff": 0.001, "timeout": 0.5, "seed": 0, **kw})


# ---------------------------------------------------------------------------------------------
# the client


def test_an_error_body_that_trickles_forever_is_bounded_by_the_timeout(base):
    """The 503's body was read whole, outside the attempt's deadline: an endpoint that trickles it held the request forever."""
    start = time.monotonic()
    with pytest.raises(ChatError, match=r"^HTTP 503 \(1 attempt\)"):
        client(f"{base}/trickle/v1", max_retries=0).complete("s", "u")
    assert time.monotonic() - start < 3  # 0.5 s of timeout, not the 6 s the endpoint trickles


def test_a_body_cut_short_of_its_content_length_is_an_incomplete_read(base):
    """read1 ends quietly where the connection closes: the cut body was reported as "body is not JSON"."""
    with pytest.raises(ChatError) as e:
        client(f"{base}/cut/v1").complete("s", "u")
    assert str(e.value).startswith("connection failed (2 attempts): IncompleteRead"), e.value
    assert Faulty.seen == ["cut", "cut"]  # retried: the next reply may come whole


@pytest.mark.parametrize("mode, finish", [("length", "length"), ("filter", "content_filter")])
def test_a_reply_the_endpoint_cut_off_fails_and_is_not_scored(base, tmp_path, mode, finish):
    """"Ana K" (finish_reason "length") was the answer, scored as if the model had given it."""
    c = client(f"{base}/{mode}/v1", max_retries=3)
    with pytest.raises(ChatError, match=rf"^reply cut off by the endpoint \(finish_reason '{finish}'\) \(1 attempt\)"):
        c.complete("s", "u")
    assert Faulty.seen == [mode] and c.usage["completion_tokens"] == 3  # not retried (it would be cut again); paid for
    answers = stitched_llm.ChatAnswers(c, DiskCache(tmp_path, "answers"))
    (reply,) = answers(["Question: Who leads Valdoria?"])
    assert reply.answer == "" and reply.failure.startswith("reply cut off"), reply  # a null score with its reason
    assert answers.cache.get(answers.key("Question: Who leads Valdoria?")) is None
    assert client(f"{base}/stop/v1").complete("s", "u") == "Ana Kel [1]"  # finish_reason "stop": the answer


def test_lone_surrogates_in_a_reply_reach_no_cache_as_an_encoding_error(base, tmp_path):
    """A lone "\\ud83d" went into the answer cache and results.json, whose UTF-8 cannot hold it: a UnicodeEncodeError."""
    answers = stitched_llm.ChatAnswers(client(f"{base}/surrogate/v1"), DiskCache(tmp_path, "answers"))
    (reply,) = answers(["Question: Who leads Valdoria?"])
    assert reply.answer == "Ana \ufffd Kel [1]" and reply.failure is None
    json.dumps(reply.answer, ensure_ascii=False).encode("utf-8")  # what results.json does
    judge = LLMJudge(f"{base}/verdict/v1", "m", KEY, cache_dir=tmp_path, max_retries=0, timeout=5.0)
    (verdict,) = judge.judge([("Ana Kel leads Valdoria.", "Ana Kel leads")])  # the reason decoded from the content's JSON
    assert verdict.supported is True and verdict.reason == "says \ufffd so"


@pytest.mark.parametrize("url, key", [("http://127.0.0.1:9/v1", "sk-faults-SECRET-41d9e2\r"),  # a key file's CRLF
                                      ("http://127.0.0.1:9/v1", "sk-faults-SECRET-ключ"),
                                      ("http://127.0.0.1:abc/v1", KEY)])
def test_what_urllib_cannot_send_fails_once_without_a_traceback_or_the_key(url, key):
    """A key with a line break raised ValueError('Invalid header value b"Bearer <the key>"'), a non-ASCII one
    UnicodeEncodeError; a non-numeric port was a connection failure, retried with backoff."""
    c = ChatClient(url, "m", key, max_retries=3, backoff=0.5, seed=0)
    start = time.monotonic()
    with pytest.raises(ChatError, match=r"^request failed \(1 attempt\)") as e:
        c.complete("s", "u")
    assert "SECRET" not in str(e.value) and time.monotonic() - start < 0.5


# ---------------------------------------------------------------------------------------------
# the commands: refused up front, in one line


def _answers(tmp_path):
    src = tmp_path / "answers.jsonl"
    src.write_text(json.dumps({"id": "q1", "user_input": "Who leads?", "response": "Ana Kel leads [1].",
                               "retrieved_contexts": ["Ana Kel leads Veloria."], "reference": "Ana Kel"}) + "\n")
    return src


BAD_URLS = [("http://[::1/v1", "not a URL (Invalid IPv6 URL)"),  # a ValueError traceback
            ("http://127.0.0.1:abc/v1", "not a URL (Port could not be cast"),  # retried, then null for every question
            ("http://127.0.0.1:99999/v1", "not a URL (Port out of range"),
            ("http://:8000/v1", "no host name"),
            ("http://local host:8000/v1", "expected a URL without spaces or control characters"),
            ("http://127.0.0.1:9/vü", "expected a URL path without non-ASCII characters"),  # a UnicodeEncodeError traceback
            # urllib sends no user info: "u:sk-SECRET@127.0.0.1" was looked up as a host, retried as unknown
            ("http://u:sk-SECRET-url@127.0.0.1:9/v1", "expected a URL without user info"),
            # an e-mail user name: the mask stopped at its "@" and showed the password after it
            ("http://me@corp.example:sk-SECRET-url@127.0.0.1:9/v1", "expected a URL without user info"),
            # a "/" in the password: urllib's port error quoted the password's first part
            ("http://u:sk/SECRET-url@127.0.0.1:9/v1", "expected a URL without user info")]


@pytest.mark.parametrize("url, why", BAD_URLS)
def test_compare_refuses_a_base_url_that_is_not_one(monkeypatch, capsys, tmp_path, url, why):
    monkeypatch.delenv("LEWISRAG_LLM_BASE_URL", raising=False)
    code, _, err = run_main(monkeypatch, capsys, "compare", "--run", tmp_path, "--stitched-generator", "chat:m",
                            "--llm-base-url", url)
    assert code == 2 and err.startswith(f"error: --llm-base-url: {why}") and len(err.strip().splitlines()) == 1, err
    assert "SECRET" not in err and not (tmp_path / "compare").exists()
    monkeypatch.setenv("LEWISRAG_LLM_BASE_URL", url)  # the variable is named when it gave the URL
    code, _, err = run_main(monkeypatch, capsys, "compare", "--run", tmp_path, "--stitched-generator", "chat:m")
    assert code == 2 and err.startswith(f"error: $LEWISRAG_LLM_BASE_URL: {why}"), err


@pytest.mark.parametrize("url, why", BAD_URLS[:2] + BAD_URLS[-3:])
def test_eval_refuses_a_base_url_that_is_not_one(monkeypatch, capsys, tmp_path, url, why):
    code, _, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", _answers(tmp_path), "--judge", "llm:m",
                            "--llm-base-url", url, "--out", tmp_path / "out", "--cache-dir", tmp_path / "cache")
    assert code == 2 and err.startswith(f"error: --llm-base-url: {why}") and len(err.strip().splitlines()) == 1, err
    assert "SECRET" not in err and not (tmp_path / "out").exists()  # the URL is shown without its user info


@pytest.mark.parametrize("key", ["sk-faults-SECRET-41d9e2\r", "sk-faults-SECRET-41d9e2\n", "sk-faults-SECRET-ключ"])
def test_a_key_no_header_can_carry_exits_2_without_showing_it(monkeypatch, capsys, tmp_path, key):
    """The first request raised ValueError('Invalid header value ...'): a traceback that printed the key."""
    monkeypatch.setenv("MY_LLM_KEY", key)
    code, _, err = run_main(monkeypatch, capsys, "compare", "--run", tmp_path, "--stitched-generator", "chat:m",
                            "--llm-base-url", "http://127.0.0.1:9/v1", "--api-key-env", "MY_LLM_KEY")
    assert code == 2 and err.startswith("error: $MY_LLM_KEY: the API key holds a line break"), err
    assert "SECRET" not in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "compare").exists()
    monkeypatch.setenv("LEWISRAG_LLM_API_KEY", key)
    code, _, err = run_main(monkeypatch, capsys, "eval", "answers", "--answers", _answers(tmp_path), "--judge", "llm:m",
                            "--llm-base-url", "http://127.0.0.1:9/v1", "--out", tmp_path / "out", "--cache-dir", tmp_path / "c")
    assert code == 2 and err.startswith("error: $LEWISRAG_LLM_API_KEY: the API key holds a line break"), err
    assert "SECRET" not in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------
# hf:PATH: a tokenizer that cannot make the prompts is refused before any question


def _tiny_lm(path, template: str | None = None, specials: bool = True):
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from lewisrag.training.pretrain_data import train_generator_tokenizer

    texts = ["Valdoria is led by Ana Kel.", stitched_llm.ANSWER_INSTRUCTION] * 5
    if specials:
        tok = train_generator_tokenizer(texts, 300)
    else:  # no pad, no end token
        bpe = Tokenizer(models.BPE())
        bpe.pre_tokenizer, bpe.decoder = pre_tokenizers.ByteLevel(add_prefix_space=True), decoders.ByteLevel()
        bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                           show_progress=False))
        tok = PreTrainedTokenizerFast(tokenizer_object=bpe)
    if template:
        tok.chat_template = template
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=256)).save_pretrained(path)
    tok.save_pretrained(path)
    return path


GEMMA_LIKE = ("{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}"
              "{% endif %}<{{ m.role }}>{{ m.content }}{% endfor %}")


@pytest.mark.parametrize("template, specials, why", [
    (GEMMA_LIKE, True, "the tokenizer's chat template cannot take a system and a user message (System role not supported)"),
    ("{% for m in messages %}{{ m.content }", True, "the tokenizer's chat template cannot take a system and a user message"),
    (None, False, "the tokenizer has neither a pad token nor an end-of-sequence token"),
])
def test_an_hf_tokenizer_that_cannot_make_the_prompts_is_refused_naming_the_folder(tmp_path, template, specials, why):
    """A jinja2 TemplateError, or transformers' "Asking to pad but the tokenizer does not have a padding
    token", came at the first question: a traceback, after the run's other models had loaded."""
    lm = _tiny_lm(tmp_path / "lm", template, specials)
    o = stitched_llm.check_options(stitched_llm.GeneratorOptions(f"hf:{lm}", n_docs=2))
    with pytest.raises(InputError) as e:
        stitched_llm.build_system(tmp_path / "run", o, 8)
    assert str(e.value).startswith(f"{lm}: --stitched-generator hf:PATH: {why}"), e.value


def test_an_hf_tokenizer_with_a_working_template_passes_the_check(tmp_path):
    lm = _tiny_lm(tmp_path / "lm", "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}")
    o = stitched_llm.check_options(stitched_llm.GeneratorOptions(f"hf:{lm}", n_docs=2))
    with pytest.raises(InputError) as e:  # on to the run's retriever, which this run lacks
        stitched_llm.build_system(tmp_path / "run", o, 8)
    assert "hf:PATH" not in str(e.value) and "run" in str(e.value), e.value


# ---------------------------------------------------------------------------------------------
# compare, end to end


def test_compare_scores_a_cut_off_reply_null_and_prints_the_model_as_named(monkeypatch, capsys, run_dir, tmp_path):  # noqa: F811
    """A reply cut at the token limit was scored as the model's answer; and the summary line printed
    chat:ok as "chat🆗" (rich read ":ok:" as an emoji code)."""
    from lewisrag.data.records import read_qa

    cut = read_qa(run_dir / "world" / "eval.jsonl")[0]

    class Cutting(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            user = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["messages"][1]["content"]
            question = user.rsplit("\nQuestion: ", 1)[1]
            data = completion("Ana K", "length") if question == cut.question else completion("Ana Kel [1]")
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data.encode())

        def log_message(self, *args):
            pass

    with local_server(Cutting, deadline=120) as url:
        code, out, err = run_main(monkeypatch, capsys, "compare", "--run", run_dir, "--out", tmp_path / "out", "--systems",
                                  "stitched", "--stitched-generator", "chat:ok", "--llm-base-url", url, "--cache-dir",
                                  tmp_path / "cache", "--position-questions", "0", "--max-retries", "0")
    assert code == 0, err
    assert "stitched = chat:ok: " in out, out
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    mine = [r for r in results["records"] if r["id"] == cut.id]
    assert mine and all(r["generator_error"].startswith("reply cut off by the endpoint (finish_reason 'length')") for r in mine)
    assert all(r["metrics"]["exact_match"] is None for r in mine)
    assert results["generators"]["stitched"]["failed"] >= len(mine)
