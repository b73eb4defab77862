"""`compare --stitched-generator`: a real LLM (or local LM) as the stitched system beside the trained Lewis models.

A local OpenAI-compatible stub answers from the prompt's numbered passages; faults by question
(a malformed body that echoes the key, a reply slower than the timeout, a 500 before a good reply)
show bounded retries, null (NaN) scores with their reasons, and a key written nowhere; reruns read
the answer cache instead of the endpoint. A tiny local GPT-2 folder runs as hf:PATH end to end."""

from __future__ import annotations

import doctest
import json
import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from conftest import local_server, run_main, send_json
from test_compare import run_dir  # noqa: F401  (the tiny reproduce-like run: world, DPR, index A, both Lewis models)
from typer.testing import CliRunner

from lewisrag.eval.reports.html import page_data_from_results
from lewisrag.experiments import stitched_llm

KEY = "sk-stub-SECRET-5b1f0c7e93"
KEY_ENV = "LEWISRAG_TEST_STUB_KEY"
PASSAGE = re.compile(r"^\[(\d+)\] (.*)$")


class Stub:
    """The endpoint's state: the answer it knows per question (an oracle, so the stitched answers are
    recognizably the stub's), faults per question, and every request it got."""

    def __init__(self, oracle: dict[str, str]):
        self.oracle, self.faults = oracle, {}
        self.questions: list[str] = []
        self.auth: list[str] = []
        self.lock = threading.Lock()
        self.url = ""

    @property
    def calls(self) -> int:
        return len(self.questions)

    def seen(self, question: str, auth: str) -> int:
        """Record a request; how many times this question was asked before."""
        with self.lock:
            before = self.questions.count(question)
            self.questions.append(question)
            self.auth.append(auth)
            return before

    def answer(self, user: str) -> str:
        """The known answer cited as the first passage that holds it, else the instruction's refusal."""
        question = user.rsplit("\nQuestion: ", 1)[1]
        answer = self.oracle.get(question)
        if not answer:
            return "not found in the provided passages."
        n = next((m.group(1) for line in user.splitlines() if (m := PASSAGE.match(line)) and answer in m.group(2)), "1")
        return f"Answer: {answer} [{n}]\n"


@pytest.fixture(scope="module")
def stub(run_dir):  # noqa: F811
    from lewisrag.data.records import read_qa

    oracle = {ex.question: ex.answers[0] for f in ("test.jsonl", "eval.jsonl") for ex in read_qa(run_dir / "world" / f)
              if ex.answers}
    state = Stub(oracle)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.close_connection = True
            auth = self.headers.get("Authorization", "")
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            system, user = body["messages"][0]["content"], body["messages"][1]["content"]
            assert system == stitched_llm.ANSWER_INSTRUCTION and body["model"] == "stub"
            question = user.rsplit("\nQuestion: ", 1)[1]
            before = state.seen(question, auth)
            fault = state.faults.get(question)
            if fault == "malformed":  # and it echoes the header: the reason must not carry the key
                return self.reply(200, f"<html>upstream error; you sent Authorization: {auth}</html>")
            if fault == "timeout":
                time.sleep(2.5)
            if fault == "flaky" and before == 0:
                return self.reply(500, json.dumps({"error": {"message": "overloaded"}}))
            reply = {"choices": [{"message": {"role": "assistant", "content": state.answer(user)}}],
                     "usage": {"prompt_tokens": len(user.split()), "completion_tokens": 4}}
            self.reply(200, json.dumps(reply))

        def reply(self, code: int, payload: str) -> None:
            send_json(self, code, payload)

        def log_message(self, *args):
            pass

    with local_server(Handler) as url:
        state.url = url
        yield state


def compare(run: Path, out: Path, url: str, cache: Path, *extra: str, url_flag: str = "--llm-base-url"):
    from lewisrag.cli import app

    args = ["compare", "--run", str(run), "--out", str(out), "--stitched-generator", "chat:stub", url_flag, url,
            "--api-key-env", KEY_ENV, "--cache-dir", str(cache), "--timeout", "1", "--max-retries", "1", *extra]
    r = CliRunner().invoke(app, args, env={KEY_ENV: KEY})
    assert r.exit_code == 0, r.output
    return r, json.loads((out / "results.json").read_text())


def files_hold(root: Path, text: str) -> list[Path]:
    return [f for f in root.rglob("*") if f.is_file() and text.encode() in f.read_bytes()]


def test_doctests():
    assert doctest.testmod(stitched_llm).failed == 0


@pytest.fixture(scope="module")
def chat_run(run_dir, stub, tmp_path_factory):  # noqa: F811
    """The three systems with the stub as the stitched generator; three eval questions carry faults."""
    from lewisrag.data.records import read_qa

    test, evals = read_qa(run_dir / "world" / "test.jsonl"), read_qa(run_dir / "world" / "eval.jsonl")
    once = Counter(ex.question for ex in test + evals)  # the tiny world asks some questions many times
    answerable = [ex for ex in evals if ex.answers and once[ex.question] == 1]
    assert len(answerable) >= 3
    faulty = {"malformed": answerable[0], "timeout": answerable[1], "flaky": answerable[2]}
    stub.faults = {ex.question: fault for fault, ex in faulty.items()}
    root = tmp_path_factory.mktemp("chat")
    r, results = compare(run_dir, root / "out", stub.url, root / "cache", "--position-questions", "3")
    stub.faults = {}
    return {"output": r.output, "results": results, "root": root, "faulty": faulty, "calls": stub.calls}


def test_chat_scorecard_has_the_three_systems_with_the_stubs_answers(chat_run, run_dir):  # noqa: F811
    results, out = chat_run["results"], chat_run["root"] / "out"
    assert set(results["qa"]) == {"rag_token", "rag_sequence", "stitched"}
    assert "stitched (chat:stub)" in chat_run["output"] and "rag_sequence" in chat_run["output"]
    assert "| metric | rag_token | rag_sequence | stitched (chat:stub) |" in (out / "report.md").read_text()
    assert results["config"]["stitched_generator"] == "chat:stub"
    g = results["generators"]["stitched"]
    assert g["generator"] == "chat:stub" and g["model"] == "stub" and g["prompt_version"] == stitched_llm.PROMPT_VERSION
    assert results["qa"]["stitched"]["exact_match"] == 1.0  # the oracle's answers, parsed out of "Answer: X [n]\n"
    mine = {r["id"]: r for r in results["records"] if r["system"] == "stitched"}
    flaky = mine[chat_run["faulty"]["flaky"].id]  # a 500, then the retry answered
    assert flaky["response"].startswith(chat_run["faulty"]["flaky"].answers[0] + " [") and "generator_error" not in flaky
    cited = [r for r in mine.values() if r.get("cited_passage_ids")]
    assert cited and all(r["cited_passage_ids"][0] == r["passage_ids"][int(r["response"][-2]) - 1] for r in cited)
    assert results["position"]["stitched"]["positions"] == list(range(1, g["n_docs"] + 1))


def test_failures_are_null_with_their_reason_after_bounded_retries(chat_run, stub):
    results, faulty = chat_run["results"], chat_run["faulty"]
    mine = {r["id"]: r for r in results["records"] if r["system"] == "stitched"}
    for fault, why in (("malformed", "malformed reply: body is not JSON (2 attempts)"),
                       ("timeout", "timeout after 1s (2 attempts)")):
        rec = mine[faulty[fault].id]
        assert rec["generator_error"].startswith(why), rec["generator_error"]
        assert rec["metrics"]["faithfulness"] is None and rec["metrics"]["exact_match"] is None
        assert rec["nan_reasons"]["faithfulness"].startswith("no answer: the generator failed: " + why)
        assert rec["diagnosis"]["primary"] == "generator_failed" and rec["metrics"]["recall_at_k"] is not None  # retrieval stands
        assert stub.questions.count(faulty[fault].question) == 2  # asked once and retried once: bounded
    assert results["generators"]["stitched"]["failed"] == 2 and results["layers"]["stitched"]["generator_failed"] == 2
    assert "answers failed (null)" in chat_run["output"] and "2 failed" in chat_run["output"]
    assert "[redacted]" in mine[faulty["malformed"].id]["generator_error"]  # the echoed header, scrubbed
    # report.html's claim scores leave the failed answers out too (they were scored as empty answers)
    html = (chat_run["root"] / "out" / "report.html").read_text(encoding="utf-8")
    page = json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S).group(1))
    assert page["claims"] and page["claims"] == page_data_from_results(results)["claims"]


def test_the_key_is_sent_but_written_nowhere(chat_run, stub):
    assert f"Bearer {KEY}" in stub.auth
    assert files_hold(chat_run["root"], KEY) == []  # results.json, reports, timings, the answer cache
    assert KEY not in chat_run["output"] and KEY_ENV not in json.dumps(chat_run["results"])


def test_reruns_read_the_cache(chat_run, run_dir, stub):  # noqa: F811
    root = chat_run["root"]
    calls = stub.calls
    _, second = compare(run_dir, root / "second", stub.url, root / "cache", "--systems", "stitched", "--position-questions", "0")
    g = second["generators"]["stitched"]
    assert stub.calls - calls == 2 == g["usage"]["calls"]  # only the two failures are asked again (they were not cached)
    assert g["failed"] == 0 and g["usage"]["cache_hits"] == g["answers"] - 2
    assert all("generator_error" not in r for r in second["records"])
    calls = stub.calls
    r, third = compare(run_dir, root / "third", stub.url, root / "cache", "--systems", "stitched", "--position-questions", "0",
                       url_flag="--base-url")  # the old spelling: the same run, and a warning
    assert "warning: --base-url is deprecated here, use --llm-base-url" in r.output
    g = third["generators"]["stitched"]
    assert stub.calls == calls and g["usage"]["cache_hits"] == g["answers"] and g["usage"]["calls"] == 0
    assert [r["response"] for r in third["records"]] == [r["response"] for r in second["records"]]


def test_hf_causal_lm_folder_runs_end_to_end(run_dir, tmp_path):  # noqa: F811
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from lewisrag.cli import app
    from lewisrag.data.records import read_passages
    from lewisrag.training.pretrain_data import train_generator_tokenizer

    texts = [f"{p.title} {p.text}" for p in read_passages(run_dir / "world" / "passages_a.jsonl")]
    tok = train_generator_tokenizer(texts + [stitched_llm.ANSWER_INSTRUCTION] * 5, 300)
    torch.manual_seed(0)
    gpt = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=1024))
    # A random model's answers must end, or each is cut off at max_new_tokens and fails: every token but 20
    # ends one, and min_new_tokens holds the end tokens back for two, so each answer is two words or more.
    gpt.generation_config.eos_token_id = [i for i in range(len(tok)) if not 10 <= i < 30]
    gpt.generation_config.min_new_tokens = 2
    gpt.save_pretrained(tmp_path / "gpt")
    tok.save_pretrained(tmp_path / "gpt")
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["compare", "--run", str(run_dir), "--out", str(out), "--stitched-generator",
                                 f"hf:{tmp_path / 'gpt'}", "--n-docs", "2", "--position-questions", "2",
                                 "--max-new-tokens", "30"])
    assert r.exit_code == 0, r.output
    results = json.loads((out / "results.json").read_text())
    assert set(results["qa"]) == {"rag_token", "rag_sequence", "stitched"} and "answers failed (null)" in r.output
    assert f"| metric | rag_token | rag_sequence | stitched (hf:{tmp_path / 'gpt'}) |" in (out / "report.md").read_text()
    g = results["generators"]["stitched"]
    assert g["kind"] == "hf" and g["n_docs"] == 2 and 0 <= g["failed"] < g["answers"]  # the model's own words came back
    assert (g["max_input_tokens"], g["shortened_prompts"]) == (1024 - 30, 0)  # every prompt held both passages whole
    assert g["max_new_tokens"] == 30  # --max-new-tokens, not the run's answer length + 8 (40)
    mine = [rec for rec in results["records"] if rec["system"] == "stitched"]
    assert len(mine) == results["layers"]["stitched"]["n"] and all(len(rec["passage_ids"]) == 2 for rec in mine)
    assert all(rec["response"] or rec["generator_error"] for rec in mine)  # never silently empty: a failure says why
    assert Counter(bool(rec.get("generator_error")) for rec in mine)[True] <= g["failed"]
    assert results["layers"]["stitched"]["tokens_per_answer"] > 0


@pytest.mark.parametrize("args, needle", [
    (["--stitched-generator", "chat:stub"], "needs --llm-base-url URL"),
    (["--stitched-generator", "hf:{tmp}/no-such-model"], "no-such-model"),
    (["--stitched-generator", "gpt-4o"], "expected chat:MODEL or hf:PATH"),
    (["--stitched-generator", "chat:stub", "--llm-base-url", "http://127.0.0.1:9/v1", "--api-key-env", "sk-pasted-KEY-123"],
     "--api-key-env"),
    (["--llm-base-url", "http://127.0.0.1:9/v1"], "only applies with --stitched-generator"),
    (["--base-url", "http://127.0.0.1:9/v1"], "--base-url: only applies with --stitched-generator"),  # the old spelling too
    (["--timeout", "5"], "--timeout: only applies with --stitched-generator"),  # used to be ignored in silence
    (["--max-new-tokens", "64"], "--max-new-tokens: only applies with --stitched-generator"),
    (["--stitched-generator", "chat:stub", "--llm-base-url", "http://127.0.0.1:9/v1", "--max-new-tokens", "64"],
     "--max-new-tokens: only applies with --stitched-generator hf:PATH"),
    (["--stitched-generator", "hf:{tmp}", "--concurrency", "8"], "--concurrency: only applies with --stitched-generator chat:"),
    (["--stitched-generator", "chat:stub", "--llm-base-url", "http://127.0.0.1:9/v1", "--systems", "stitched", "--device", "cpu"],
     "--device: places the run's trained models"),
])
def test_bad_generator_flags_exit_2_in_one_line(monkeypatch, capsys, tmp_path, args, needle):
    monkeypatch.delenv("LEWISRAG_LLM_BASE_URL", raising=False)
    code, _, err = run_main(monkeypatch, capsys, "compare", "--run", tmp_path, *(a.format(tmp=tmp_path) for a in args))
    assert code == 2 and needle in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and "sk-pasted" not in err
    assert not (tmp_path / "compare").exists()


def test_an_hf_folder_that_does_not_load_exits_2_naming_it(monkeypatch, capsys, run_dir, tmp_path):  # noqa: F811
    (tmp_path / "not-a-model").mkdir()
    (tmp_path / "not-a-model" / "weights.bin").write_bytes(b"x")
    code, _, err = run_main(monkeypatch, capsys, "compare", "--run", run_dir, "--out", tmp_path / "out",
                            "--stitched-generator", f"hf:{tmp_path / 'not-a-model'}")
    assert code == 2 and str(tmp_path / "not-a-model") in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_chat_answers_parse_cache_and_refuse_empty_replies(tmp_path):
    from lewisrag.eval.judges.base import DiskCache

    class Client:  # ChatClient's surface, without a server
        model, temperature, max_workers, usage = "m", 0.0, 2, {}

        def __init__(self):
            self.asked = []

        def reply(self, system, prompt, key_only=False):
            self.asked.append(prompt)
            return ("<think>[2] says it</think>\n Ana Kel [2]." if "Valdoria" in prompt else " \n "), {"prompt_tokens": 9}

        def scrub_key(self, text):
            return text

    client = Client()
    answers = stitched_llm.ChatAnswers(client, DiskCache(tmp_path, "answers"))
    good, empty = answers(["Question: Who leads Valdoria?", "Question: Who leads Veldoria?"])
    assert (good.answer, good.failure, good.input_tokens) == ("Ana Kel [2].", None, 9)
    assert (empty.answer, empty.failure) == ("", stitched_llm.EMPTY_REPLY)  # no answer text: a failure, not ""
    again = answers(["Question: Who leads Valdoria?", "Question: Who leads Veldoria?"])
    assert again[0] == good and again[1].failure == stitched_llm.EMPTY_REPLY
    assert client.asked.count("Question: Who leads Valdoria?") == 1 and answers.cache_hits == 1  # failures are asked again
    assert (tmp_path / "answers.sqlite").is_file()


def test_hf_prompt_uses_the_chat_template_when_there_is_one():
    from types import SimpleNamespace

    from lewisrag.training.pretrain_data import train_generator_tokenizer

    tok = train_generator_tokenizer(["Ana Kel leads Valdoria."] * 20, 300)
    model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=128, is_encoder_decoder=False))
    gen = SimpleNamespace(tokenizer=tok, model=model, max_input_tokens=1024, max_new_tokens=40)
    plain = stitched_llm.HFAnswers(gen)
    assert plain.text("[1] V / x\n\nQuestion: q") == f"{stitched_llm.ANSWER_INSTRUCTION}\n\n[1] V / x\n\nQuestion: q\nAnswer:"
    assert tok.truncation_side == "left"  # (the cap at the model's positions is HFGenerator's: test_stitched_hf_fit)
    tok.chat_template = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                         "{% if add_generation_prompt %}<assistant>{% endif %}")
    templated = stitched_llm.HFAnswers(gen)
    assert templated.text("Question: q") == f"<system>{stitched_llm.ANSWER_INSTRUCTION}<user>Question: q<assistant>"


def test_a_small_seq2seq_model_gets_prompts_its_positions_hold():
    """The shipped generator has 192 positions: a stitched prompt of five passages is longer, and
    must be cut to fit (it once ran past the position table: IndexError)."""
    import lewisrag
    from lewisrag.rag_model.stitched import HFGenerator

    gen = HFGenerator.from_pretrained(str(Path(lewisrag.__file__).parent / "pretrained" / "generator-small"), max_new_tokens=191)
    answers = stitched_llm.HFAnswers(gen)
    longest = gen.model.config.max_position_embeddings
    assert gen.max_input_tokens == longest and gen.max_new_tokens == longest - 1  # a longer one is refused (test_ask_review74)
    passage = "Valdoria is a country whose leader is Ana Kel and whose population is large. " * 12
    (reply,) = answers([f"[1] Valdoria / {passage}\n\nQuestion: Who leads Valdoria?"])
    assert reply.input_tokens == longest


def test_a_reply_cites_with_every_marker_the_evaluator_reads():
    """Only [n] and [1, 2] were read: a Chinese reply's 【2】 gave no cited passage, though the
    evaluator counted it as a citation."""
    from lewisrag.data.records import Passage
    from lewisrag.rag_model.stitched import cited_ids

    passages = [Passage("a", "", "x"), Passage("b", "", "y"), Passage("c", "", "z")]
    for reply, cited in (("安娜·凯尔【2】。", ["b"]), ("Ana Kel [2、3].", ["b", "c"]), ("Ana ［３］ Kel [^1]", ["c", "a"]),
                         ("Ana Kel [ 2 ].", ["b"])):
        assert cited_ids(stitched_llm.parse_reply(reply), passages) == cited, reply


def test_the_generator_line_speaks_the_reports_language(chat_run, run_dir, stub):  # noqa: F811
    """compare --lang zh printed its outside generator's line in English beside a Chinese scorecard."""
    root = chat_run["root"]
    r, results = compare(run_dir, root / "zh", stub.url, root / "cache", "--systems", "stitched", "--position-questions", "0",
                         "--lang", "zh")
    g = results["generators"]["stitched"]
    line = r.output[r.output.index("stitched = chat:stub"):].replace("\n", "")  # the console wraps at 80 columns
    assert line.startswith(f"stitched = chat:stub：{g['answers']} 个回答，{g['failed']} 个失败（记为 null，原因见 results.json）")
    assert "缓存命中" in line and "answers" not in line and "cache hits" not in line and "calls" not in line
