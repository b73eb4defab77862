"""Faults of a chat-completions endpoint: what may heal (resets, disconnects, incomplete reads,
timeouts, 429, 5xx, malformed bodies) is retried with bounded, jittered backoff; what does not
becomes a NaN verdict with its reason; nothing escapes as an exception; and the API key is written
nowhere, even by an endpoint that echoes the Authorization header back."""

from __future__ import annotations

import http.client
import io
import json
import random
import re
import socket
import struct
import threading
import time
import urllib.error
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from lewisrag import chat_client as chat
from conftest import local_server, send_json
from lewisrag.chat_client import ChatClient, ChatError, backoff_delay, scrub
from lewisrag.eval.judges import Verdict
from lewisrag.eval.judges.llm import JudgeError, LLMJudge

KEY = "sk-fault-SECRET-7c2e91d0"
GOOD = Verdict(True, "rule")


class FaultServer:
    """A local endpoint that answers request n with `script[n]` while the script lasts, then well:
    verdicts by the rule "supported iff the statement occurs in the evidence", statements split at
    "，" and "。". Steps (dicts, key "do"): "reset" (read the request, then RST: the client's
    getresponse() raises a bare ConnectionResetError), "reset_early" (RST before reading it: the
    client's send fails, urllib wraps that in URLError), "disconnect" (read it, close without a
    reply), "incomplete" (a body shorter than its Content-Length), "slow" (a good reply after
    `sleep` s), "raw" (200 with `body`), "status" (`code` with `headers` and an error body). With
    `echo`, every reply carries the Authorization header it got: in verdict reasons, in
    statements, in error bodies. Past `limit` requests it answers 400, so a runaway retry loop
    ends."""

    def __init__(self, limit: int = 60):
        self.script: list[dict] = []
        self.auth: list[str] = []
        self.echo = self.echo_escaped = False
        self.limit = limit
        self.lock = threading.Lock()
        self.url = ""

    @property
    def requests(self) -> int:
        return len(self.auth)

    def next_step(self, auth: str) -> dict:
        with self.lock:
            self.auth.append(auth)
            if len(self.auth) > self.limit:
                return {"do": "status", "code": 400}
            return self.script.pop(0) if self.script else {"do": "ok"}

    def said(self, auth: str) -> str:
        """What an echoing endpoint puts into its replies."""
        return f"you sent Authorization: {auth}; key {auth.removeprefix('Bearer ')}" if self.echo else ""

    def content(self, body: dict, auth: str) -> str:
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        if system.startswith("Split"):
            statements = [s for s in user.replace("。", "，").split("，") if s] + ([self.said(auth)] if self.echo else [])
            return json.dumps({"statements": statements}, ensure_ascii=False)
        evidence, listing = user.split("\n\nStatements:\n")
        evidence = evidence.removeprefix("Evidence:\n")
        verdicts = []
        for line in listing.splitlines():
            n, text = line.split(". ", 1)
            verdicts.append({"id": int(n), "supported": text in evidence, "reason": f"rule {self.said(auth)}".strip()})
        content = json.dumps({"verdicts": verdicts}, ensure_ascii=False)
        if self.echo_escaped:  # the key spelled with JSON \u escapes: invisible until decoded
            content = content.replace(KEY, "".join(f"\\u{ord(c):04x}" for c in KEY))
        return content


@pytest.fixture
def server():
    state = FaultServer()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):  # noqa: N802 (http.server's naming)
            self.close_connection = True
            auth = self.headers.get("Authorization", "")
            step = state.next_step(auth)
            if step["do"] == "reset_early":
                return self.reset()
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if step["do"] == "reset":
                return self.reset()
            if step["do"] == "disconnect":
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if step["do"] == "status":
                error = {"error": {"message": f"failed {state.said(auth)}".strip()}}
                return self.reply(step["code"], json.dumps(error), step.get("headers", {}))
            if step["do"] == "raw":
                return self.reply(200, step["body"])
            if step["do"] == "incomplete":
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.write(b'{"choices": [')
                return
            time.sleep(step.get("sleep", 0.0))
            reply = {"choices": [{"message": {"role": "assistant", "content": state.content(body, auth)}}],
                     "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
            self.reply(200, json.dumps(reply))

        def reset(self) -> None:  # SO_LINGER 0: close() sends RST, the client sees ECONNRESET
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()

        def reply(self, code: int, payload: str, headers: dict | None = None) -> None:
            send_json(self, code, payload, headers)

        def log_message(self, *args):
            pass

    # a reset socket is the point, not news; stops by itself if a test hangs
    with local_server(Handler, quiet_errors=True, deadline=120.0) as url:
        state.url = url
        yield state


def _judge(server, tmp_path: Path, **kw) -> LLMJudge:
    kw = {"max_retries": 4, "backoff": 0.01, "max_backoff": 0.2, "timeout": 5.0, "seed": 0, **kw}
    return LLMJudge(server.url, "judge-model", KEY, cache_dir=tmp_path / "cache", **kw)


def _no_key_in_files(*roots: Path) -> list[Path]:
    files = [p for root in roots for p in root.rglob("*") if p.is_file()]
    for p in files:
        assert KEY.encode() not in p.read_bytes(), p
    return files


# ---------------------------------------------------------------------------------------------
# retries


def test_resets_disconnects_and_incomplete_reads_are_retried(server, tmp_path):
    server.script = [{"do": "reset"}, {"do": "reset_early"}, {"do": "disconnect"}, {"do": "incomplete"}]
    j = _judge(server, tmp_path)
    assert j.judge([("login returns 422", "returns 422")]) == [GOOD]
    assert server.requests == 5
    assert {k: j.usage[k] for k in ("calls", "retries", "failures")} == {"calls": 5, "retries": 4, "failures": 0}


def test_resets_under_concurrency_all_heal(server, tmp_path):
    server.script = [{"do": "reset"}] * 6
    j = _judge(server, tmp_path / "b", max_workers=4)
    got = j.judge([(f"premise {i} says x", "x") for i in range(8)])
    assert got == [GOOD] * 8
    assert j.usage["retries"] == 6 and j.usage["calls"] == 14 and j.usage["failures"] == 0


def test_slow_reply_beyond_the_timeout_then_a_good_one(server, tmp_path):
    server.script = [{"do": "slow", "sleep": 0.6}]
    j = _judge(server, tmp_path, timeout=0.2)
    assert j.judge([("login returns 422", "returns 422")]) == [GOOD]
    assert j.usage["retries"] == 1 and j.usage["failures"] == 0


def test_malformed_bodies_then_a_good_one(server, tmp_path):
    server.script = [{"do": "raw", "body": "<html>502 upstream hiccup</html>"}, {"do": "raw", "body": '{"error": "busy"}'},
                     {"do": "raw", "body": "[1, 2]"}, {"do": "raw", "body": '{"choices": []}'}]
    j = _judge(server, tmp_path)
    assert j.judge([("login returns 422", "returns 422")]) == [GOOD]
    assert j.usage["retries"] == 4 and j.usage["failures"] == 0


def test_429_with_retry_after_and_503(server, tmp_path):
    server.script = [{"do": "status", "code": 429, "headers": {"Retry-After": "0.4"}}, {"do": "status", "code": 503}]
    j = _judge(server, tmp_path, max_backoff=1.0)
    start = time.monotonic()
    assert j.judge([("login returns 422", "returns 422")]) == [GOOD]
    assert time.monotonic() - start >= 0.4  # the server's wait, although backoff alone is ~0.01 s
    assert j.usage["retries"] == 2
    server.script = [{"do": "status", "code": 429, "headers": {"Retry-After": "3600"}}]
    start = time.monotonic()
    assert _judge(server, tmp_path / "b").judge([("p says q", "q")]) == [GOOD]
    assert time.monotonic() - start < 2.0  # Retry-After capped at max_backoff (0.2 s)


@pytest.mark.parametrize("exc", [
    ConnectionResetError(104, "Connection reset by peer"), ConnectionAbortedError(), BrokenPipeError(),
    http.client.RemoteDisconnected("Remote end closed connection without response"),
    http.client.IncompleteRead(b'{"cho', 20), TimeoutError("timed out"), socket.timeout("timed out"),
    urllib.error.URLError(ConnectionResetError(104, "Connection reset by peer")), urllib.error.URLError(socket.timeout()),
    urllib.error.URLError(BrokenPipeError()), urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")),
], ids=repr)
def test_every_transient_exception_is_retried_and_counted(monkeypatch, exc):
    good = json.dumps({"choices": [{"message": {"content": "ok"}}]}).encode()
    raised = []

    def urlopen(req, timeout):
        if len(raised) < 2:
            raised.append(exc)
            raise exc
        return io.BytesIO(good)

    monkeypatch.setattr(chat.client, "_open", urlopen)  # the module whose _open ChatClient calls
    client = ChatClient("http://127.0.0.1:9/v1", "m", KEY, max_retries=2, backoff=0.001, seed=0)
    assert client.complete("s", "u") == "ok"
    assert client.usage["calls"] == 3 and client.usage["retries"] == 2 and client.usage["failures"] == 0
    raised.clear()
    client = ChatClient("http://127.0.0.1:9/v1", "m", KEY, max_retries=1, backoff=0.001, seed=0)
    with pytest.raises(ChatError, match=r"\(2 attempts\)") as e:  # retried to the end, then one ChatError
        client.complete("s", "u")
    inner = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    assert str(e.value).startswith("timeout" if isinstance(inner, TimeoutError) else "connection failed")
    assert client.usage["failures"] == 1 and client.usage["retries"] == 1


def test_backoff_is_bounded_jittered_and_seeded():
    def delays(seed):
        rng = random.Random(seed)
        return [backoff_delay(a, 0.1, 1.0, rng) for a in range(1, 8)]

    assert delays(3) == delays(3) != delays(4)
    for a, d in enumerate(delays(3), start=1):
        full = min(1.0, 0.1 * 2 ** (a - 1))
        assert full / 2 <= d <= full


# ---------------------------------------------------------------------------------------------
# permanent failures: NaN with a reason, never an exception


def test_permanent_failures_become_nan_with_reason(server, tmp_path):
    server.script = [{"do": "status", "code": 503}] * 3
    v = _judge(server, tmp_path / "a", max_retries=2).judge([("p", "q")])[0]
    assert v.supported is None and v.reason.startswith("HTTP 503 (3 attempts)")
    for code in (400, 404):
        server.script, n = [{"do": "status", "code": code}], server.requests
        v = _judge(server, tmp_path / str(code)).judge([("p", "q")])[0]
        assert v.supported is None and v.reason.startswith(f"HTTP {code} (1 attempt)") and server.requests == n + 1
    server.script = [{"do": "reset"}] * 3
    j = _judge(server, tmp_path / "r", max_retries=2)
    v = j.judge([("p", "q")])[0]
    assert v.supported is None and v.reason.startswith("connection failed (3 attempts)")
    assert j.usage["failures"] == 1 and j.usage["retries"] == 2
    server.script = [{"do": "raw", "body": "not json"}] * 2
    with pytest.raises(JudgeError, match="malformed reply: body is not JSON"):  # what run.py turns into a NaN reason
        _judge(server, tmp_path / "d", max_retries=1).decompose("前端弹出 toast。")


def test_rejected_key_names_the_key_but_never_shows_it(server, tmp_path):
    server.echo = True
    for code in (401, 403):
        server.script = [{"do": "status", "code": code}]
        v = _judge(server, tmp_path / str(code)).judge([("p", "q")])[0]
        assert v.supported is None and v.reason.startswith(f"HTTP {code} (1 attempt): the endpoint rejected the API key")
        assert KEY not in v.reason and "[redacted]" in v.reason  # the echoed body was scrubbed, not dropped


def test_refused_connection_is_nan(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    j = LLMJudge(f"http://127.0.0.1:{port}/v1", "m", KEY, cache_dir=tmp_path, max_retries=1, backoff=0.001)
    v = j.judge([("p", "q")])[0]
    assert v.supported is None and "ConnectionRefusedError" in v.reason and j.usage["failures"] == 1


# ---------------------------------------------------------------------------------------------
# secrets


def test_scrub_patterns():
    text = f'{{"headers": {{"Authorization": "Bearer {KEY}"}}}} authorization: basic dXNlcg== bearer tok.en-1 {KEY}'
    out = scrub(text, [KEY])
    assert KEY not in out and "dXNlcg" not in out and "tok.en" not in out
    assert json.loads(out.split(" authorization")[0]) == {"headers": {"Authorization": "[redacted]"}}  # JSON survives
    assert scrub(out, [KEY]) == out
    assert scrub('{"id": 1, "reason": "EMPTY"}', ["EMPTY"]) == '{"id": 1, "reason": "EMPTY"}'  # too short to be a secret


def test_echoing_endpoint_leaves_no_key_anywhere(server, tmp_path):
    server.echo = True
    server.script = [{"do": "status", "code": 500}, {"do": "raw", "body": json.dumps({"error": server.said(f"Bearer {KEY}")})}]
    j = _judge(server, tmp_path)
    got = j.judge([("login returns 422", "returns 422"), ("login returns 422", "toast")])
    assert [v.supported for v in got] == [True, False] and all("[redacted]" in v.reason for v in got)
    server.echo_escaped = True
    got += j.judge([("p says q", "q")])
    server.echo_escaped = False
    statements = j.decompose("前端弹出 toast，3 秒后消失。")
    assert statements[:2] == ["前端弹出 toast", "3 秒后消失"] and "[redacted]" in statements[2]
    server.script = [{"do": "status", "code": 400}]
    got += j.judge([("p2", "q")])
    assert "[redacted]" in got[-1].reason
    assert server.auth and all(a == f"Bearer {KEY}" for a in server.auth)  # it was sent ...
    for text in [v.reason for v in got] + statements + [repr(j), repr(j.client), json.dumps(j.usage), json.dumps(j.describe())]:
        assert KEY not in text, text  # ... and came back in no value
    assert len(_no_key_in_files(tmp_path / "cache")) >= 1  # nor in the cache
    again = _judge(server, tmp_path)  # warm cache: the stored reasons were scrubbed
    n = server.requests
    assert all(KEY not in v.reason for v in again.judge([("login returns 422", "returns 422")])) and server.requests == n


def test_a_cache_written_before_scrubbing_is_scrubbed_on_read(server, tmp_path):
    j = _judge(server, tmp_path)
    j.cache.put(j._key_for("judge", "p", "q"), {"supported": True, "reason": f"saw Authorization: Bearer {KEY}"})
    assert j.judge([("p", "q")]) == [Verdict(True, "saw Authorization: [redacted]")] and server.requests == 0


# ---------------------------------------------------------------------------------------------
# the CLI, end to end


def test_eval_answers_survives_resets_and_writes_no_key(server, tmp_path, monkeypatch):
    from conftest import run_cli

    server.echo = True
    server.script = [{"do": "reset"}, {"do": "reset"}]
    monkeypatch.setenv("LEWISRAG_LLM_BASE_URL", server.url)
    monkeypatch.setenv("LEWISRAG_LLM_API_KEY", KEY)
    src = tmp_path / "answers.jsonl"
    rows = [{"id": f"q{i}", "user_input": "登录返回什么？", "response": "登录失败返回 422 [1]。",
             "retrieved_contexts": ["登录失败返回 422。"], "reference_statements": ["返回 422"]} for i in range(2)]
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    out, cache = tmp_path / "run", tmp_path / "cache"
    r = run_cli("eval", "answers", "--answers", str(src), "--judge", "llm:judge-model", "--out", str(out), "--cache-dir", str(cache),
                "--concurrency", "2", "--splitter", "atomic")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and KEY not in r.stdout + r.stderr
    assert re.search(r"retries\s+2,\s+failures\s+0", r.stdout), r.stdout  # each scripted fault cost one retry
    res = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [rec["metrics"]["context_recall"] for rec in res["records"]] == [1.0, 1.0]  # the verdicts came back
    assert "[redacted]" in json.dumps(res, ensure_ascii=False)  # the echo was there, scrubbed
    written = _no_key_in_files(out, cache)
    assert {"results.json", "report.html", "report.md", "config.json", "judge.sqlite"} <= {p.name for p in written}


def test_sigterm_is_not_held_up_by_requests_in_flight_or_their_retries(tmp_path):
    """The requests ran on a ThreadPoolExecutor, whose threads Python joins at exit: SIGTERM (or
    Ctrl-C) waited for every request in flight and every retry still due, here minutes. Now the
    command ends at once, with its one line, and writes nothing."""
    import os
    import signal
    import subprocess
    import sys

    from conftest import local_server

    seen = threading.Event()

    class Stalling(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            seen.set()
            time.sleep(20)  # past the test's patience; then 503, which is retried with backoff
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    src = tmp_path / "answers.jsonl"
    rows = [{"id": f"q{i}", "user_input": "Who leads?", "response": "Ana Kel leads [1].",
             "retrieved_contexts": ["Ana Kel leads Veloria."], "reference": "Ana Kel"} for i in range(6)]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "run"
    with local_server(Stalling, quiet_errors=True, deadline=120) as url:
        proc = subprocess.Popen([sys.executable, "-m", "lewisrag", "eval", "answers", "--answers", str(src), "--judge",
                                 "llm:stub", "--llm-base-url", url, "--concurrency", "3", "--out", str(out),
                                 "--cache-dir", str(tmp_path / "cache")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        assert seen.wait(60), "no request came"
        time.sleep(0.5)
        start = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=90)
        took = time.monotonic() - start
    assert proc.returncode == 143 and err.strip().splitlines()[-1] == "terminated (SIGTERM)", (proc.returncode, err)
    assert took < 10, f"SIGTERM took {took:.1f} s"
    assert not out.exists()


class _Tricky(BaseHTTPRequestHandler):
    """/moved/... redirects to /elsewhere; /trickle/... sends its reply a byte at a time; /null/...
    answers content null once, then "ok". Every request's path and Authorization header is logged."""

    seen: list = []
    nulls = [0]

    def _log(self):
        _Tricky.seen.append((self.command, self.path, self.headers.get("Authorization")))

    def do_GET(self):  # noqa: N802
        self._log()
        self.send_response(404)
        self.end_headers()

    def do_POST(self):  # noqa: N802
        self._log()
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.path.startswith("/moved"):
            self.send_response(302)
            self.send_header("Location", "/elsewhere")
            self.end_headers()
            return
        good = json.dumps({"choices": [{"message": {"content": "ok"}}]}).encode()
        null = json.dumps({"choices": [{"message": {"content": None}}]}).encode()
        body = null if self.path.startswith("/null") and not _Tricky.nulls[0] else good
        _Tricky.nulls[0] += self.path.startswith("/null")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        for i in range(len(body)):
            self.wfile.write(body[i : i + 1])
            self.wfile.flush()
            if self.path.startswith("/trickle"):
                time.sleep(0.05)  # each byte well within the timeout; the whole reply far past it

    def log_message(self, *args):
        pass


def test_a_redirect_is_not_followed_and_the_key_goes_nowhere_else(monkeypatch):
    """urllib followed a 302 as a GET to the named host, Authorization header included."""
    _Tricky.seen = []
    with local_server(_Tricky, quiet_errors=True) as url:
        client = ChatClient(url.replace("/v1", "/moved/v1"), "m", KEY, max_retries=2, backoff=0.001, seed=0)
        with pytest.raises(ChatError) as e:
            client.complete("s", "u")
    assert str(e.value).startswith("HTTP 302 (1 attempt): redirected to /elsewhere, which lewisrag does not follow")
    assert [(m, p) for m, p, _ in _Tricky.seen] == [("POST", "/moved/v1/chat/completions")]  # not retried, not followed


def test_the_timeout_bounds_a_reply_that_trickles_in_and_null_content_is_retried():
    _Tricky.seen, _Tricky.nulls[0] = [], 0
    with local_server(_Tricky, quiet_errors=True, deadline=30) as url:
        slow = ChatClient(url.replace("/v1", "/trickle/v1"), "m", KEY, timeout=0.5, max_retries=0, seed=0)
        start = time.monotonic()
        with pytest.raises(ChatError, match=r"^timeout after 0.5s \(1 attempt\)"):
            slow.complete("s", "u")  # about 2.5 s of bytes, each 0.05 s apart
        assert time.monotonic() - start < 1.5
        client = ChatClient(url.replace("/v1", "/null/v1"), "m", KEY, max_retries=1, backoff=0.001, seed=0)
        assert client.complete("s", "u") == "ok" and client.usage["retries"] == 1
