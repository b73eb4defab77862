"""Shared fixtures: a tiny corpus and QA set, a tiny DPR checkpoint, and the CLI runner."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from lewisrag.data.threads import torch_threads  # noqa: E402  (after the environment it reads)

SYLLABLES = ["ka", "lo", "mi", "ren", "tus", "var", "dor", "el", "zan", "qui", "bro", "fen"]


def _name(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(3)).capitalize()


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> dict:
    """30 made-up countries, two passages each, and one leader question per country."""
    rng = random.Random(0)
    root = tmp_path_factory.mktemp("corpus")
    passages, questions = [], []
    names = sorted({_name(rng) for _ in range(60)})[:30]
    for i, name in enumerate(names):
        leader, capital = f"{_name(rng)} {_name(rng)}", _name(rng)
        passages.append({"id": f"c{i}-0", "title": name, "text": f"{name} is a country. Its leader is {leader}."})
        passages.append({"id": f"c{i}-1", "title": name, "text": f"The capital of {name} is {capital}, founded in {1800 + i}."})
        questions.append({"id": f"q{i}", "question": f"Who is the leader of {name}?", "answers": [leader],
                          "gold_passage_ids": [f"c{i}-0"]})
    return {
        "root": root,
        "passages": write_jsonl(root / "passages.jsonl", passages),
        "qa": write_jsonl(root / "qa.jsonl", questions),
    }


@pytest.fixture(scope="session")
def tiny_qa_run(tmp_path_factory) -> Path:
    """A finished `reproduce --preset tiny` (QA only, seed 0), trained once per test process (25 s on one
    core). Not to be changed: a module that needs a run of its own takes a copy (`copy_run`)."""
    from lewisrag.experiments.presets import PRESETS
    from lewisrag.experiments.reproduce import reproduce

    out = tmp_path_factory.mktemp("tiny_qa") / "run"
    reproduce(PRESETS["tiny"], out, seed=0)
    return out


def copy_run(run: Path, to: Path) -> Path:
    """A copy of the finished run `run` at `to`: a moved run, which lewisrag reads and resumes as it would
    the original (tests/test_run_folders.py holds it to that)."""
    shutil.copytree(run, to, symlinks=True)
    return to


@contextlib.contextmanager
def one_thread():
    """Run torch on one thread inside the block, as the subprocesses of a test do (OMP_NUM_THREADS=1):
    a float sum split over another number of threads rounds differently."""
    with torch_threads(1):
        yield


@contextlib.contextmanager
def like_the_cli():
    """Run torch inside the block as a test's `lewisrag` subprocesses do: one thread, and float32 linear
    layers through the library the command picks ($LEWISRAG_CPU_LINEAR, else auto's choice for this CPU)."""
    from lewisrag.data.cpu_linear import cpu_linear

    with torch_threads(1), cpu_linear(None):
        yield


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the installed `lewisrag` entry point in a subprocess (real exit codes, real stderr)."""
    return subprocess.run([sys.executable, "-m", "lewisrag.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


def run_main(monkeypatch, capsys, *args) -> tuple[int, str, str]:
    """Run `lewisrag ARGS` in-process through `lewisrag.cli.main` (which maps bad input to exit 2
    exactly as the console script does); return (exit code, stdout, stderr)."""
    from lewisrag.cli import main

    monkeypatch.setattr(sys, "argv", ["lewisrag", *map(str, args)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    captured = capsys.readouterr()
    return exit_info.value.code or 0, captured.out, captured.err


class Counting:
    """A judge that records each call (one call = one batch) and answers by a rule (a verdict or a bool)."""

    name, fingerprint = "counting", "0" * 64

    def __init__(self, rule):
        self.rule, self.calls = rule, []

    def judge(self, pairs):
        from lewisrag.eval.judges import Verdict

        self.calls.append(list(pairs))
        return [v if isinstance(v, Verdict) else Verdict(v) for v in (self.rule(p, h) for p, h in pairs)]


def send_json(handler, code: int, payload: str | bytes, headers: dict | None = None) -> None:
    """`payload` (text, or bytes as they are) as a BaseHTTPRequestHandler's whole JSON reply with status
    `code`; a client that timed out and left is no error."""
    data = payload if isinstance(payload, bytes) else payload.encode()
    try:
        handler.send_response(code)
        for k, v in {"Content-Type": "application/json", "Content-Length": str(len(data)), **(headers or {})}.items():
            handler.send_header(k, v)
        handler.end_headers()
        handler.wfile.write(data)
    except OSError:  # BrokenPipeError, ConnectionResetError
        pass


@contextlib.contextmanager
def local_server(handler, quiet_errors: bool = False, deadline: float | None = None):
    """A threaded HTTP server on a free local port running `handler` (a BaseHTTPRequestHandler
    class); yields its OpenAI-style base URL ("http://127.0.0.1:PORT/v1"). `quiet_errors`: a reset
    socket is not printed; `deadline`: seconds after which it stops by itself (a hung test)."""
    from http.server import ThreadingHTTPServer

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    if quiet_errors:
        httpd.handle_error = lambda request, address: None
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    stop = threading.Timer(deadline, httpd.shutdown) if deadline else None
    if stop:
        stop.daemon = True
        stop.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        if stop:
            stop.cancel()
        httpd.shutdown()
        httpd.server_close()


def canned_endpoint(replies: dict, encodings: dict | None = None):
    """A fake endpoint's handler class: POST /MODE/v1/chat/completions answers 200 with `replies[MODE]`,
    a (text, content type) pair, encoded as `encodings[MODE]` (utf-8 unless told; a surrogate escape stands
    for a raw byte); its `seen` logs the requests' modes (`endpoint_root` resets it)."""
    class Endpoint(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        seen: list[str] = []

        def do_POST(self):  # noqa: N802 (http.server's naming)
            self.close_connection = True
            self.rfile.read(int(self.headers["Content-Length"]))
            mode = self.path.split("/")[1]
            type(self).seen.append(mode)
            text, ctype = replies[mode]
            send_json(self, 200, text.encode((encodings or {}).get(mode, "utf-8"), errors="surrogateescape"),
                      {"Content-Type": ctype})

        def log_message(self, *args):
            pass

    return Endpoint


class ModeEndpoint(BaseHTTPRequestHandler):
    """The base of a fake endpoint served by `endpoint_root`: POST /MODE/v1/chat/completions logs MODE
    in `seen` and the request's JSON body in `bodies` (each subclass has its own lists), then answers
    with `self.answer(mode, body, first)`, `first` whether it is the mode's first request."""

    protocol_version = "HTTP/1.1"
    seen: list[str] = []
    bodies: list[dict] = []
    lock = threading.Lock()

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls.seen, cls.bodies = [], []

    def do_POST(self):  # noqa: N802 (http.server's naming)
        self.close_connection = True
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        mode, cls = self.path.split("/")[1], type(self)
        with cls.lock:
            cls.seen.append(mode)
            cls.bodies.append(body)
            first = cls.seen.count(mode) == 1
        self.answer(mode, body, first)

    def answer(self, mode: str, body: dict, first: bool) -> None:
        raise NotImplementedError

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def endpoint_root(handler, deadline: float = 60):
    """`local_server(handler)` for a fake endpoint that reads its mode from the path's first part:
    yields the root, f"{root}/MODE/v1" being a base URL; `handler.seen` (the requests' modes) is reset."""
    handler.seen = []
    with local_server(handler, quiet_errors=True, deadline=deadline) as url:
        yield url.removesuffix("/v1")
