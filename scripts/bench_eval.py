"""Benchmark the evaluator's cost: rule-checker throughput and judge calls per question.

    python scripts/bench_eval.py [--seconds 2]

1. The rule checker's sentences per second on one core (target ≥ 20,000), over the BugHunt sample's
   22 sentences, repeated; the cited documents' folded forms are cached, as in a real run.
2. Judge requests per question for faithfulness, through LLMJudge against a local chat-completions
   server on 127.0.0.1 (ragas makes 2: one to split statements, one to judge them): sentence
   splitter 1 (all statements in one batch), atomic splitter 2 (decompose, then judge).
3. The same run again with a warm disk cache: 0 requests.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

os.environ.setdefault("OMP_NUM_THREADS", "1")

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from lewisrag.eval import metrics  # noqa: E402
from lewisrag.eval.bughunt import load_bughunt  # noqa: E402
from lewisrag.eval.citations import check_sentence  # noqa: E402
from lewisrag.eval.judges.llm import LLMJudge  # noqa: E402
from lewisrag.eval.statements import Statement, split_sentences, strip_citations  # noqa: E402


def checker_throughput(seconds: float) -> float:
    sample = load_bughunt()
    docs = sample.doc_texts()
    rows = [(s.text, set(s.retrieved_ids)) for _, s in sample.all_sentences()]
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for text, ids in rows:
            check_sentence(text, docs, ids)
        n += len(rows)
    return n / (time.perf_counter() - start)


class _Handler(BaseHTTPRequestHandler):
    calls = 0

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls += 1
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        if system.startswith("Split"):
            content = {"statements": [s for s in user.replace("。", "，").split("，") if s.strip()]}
        else:
            listing = user.split("\n\nStatements:\n")[1].splitlines()
            content = {"verdicts": [{"id": i, "supported": True, "reason": "bench"} for i in range(1, len(listing) + 1)]}
        payload = json.dumps({"choices": [{"message": {"content": json.dumps(content, ensure_ascii=False)}}],
                              "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def calls_per_question(url: str, cache: str, atomic: bool) -> float:
    """Requests per preset answer for its faithfulness, with a fresh judge over `cache`."""
    sample = load_bughunt()
    docs = sample.doc_texts()
    judge = LLMJudge(url, "bench-model", "bench-key", cache_dir=cache)
    before = _Handler.calls
    for a in sample.answers:
        if atomic:
            statements = [Statement(s, (), ()) for s in judge.decompose(strip_citations(a.response))]
        else:
            statements = split_sentences(a.response)
        metrics.faithfulness([s.text for s in statements], [docs[i] for i in a.retrieved_ids], judge)
    return (_Handler.calls - before) / len(sample.answers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="how long to time the rule checker")
    args = parser.parse_args()
    rate = checker_throughput(args.seconds)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    t = Table(title="lewisrag evaluator cost")
    for col in ("measure", "lewisrag", "reference"):
        t.add_column(col)
    t.add_row("rule checker, sentences/s (1 core)", f"{rate:,.0f}", "target ≥ 20,000")
    with tempfile.TemporaryDirectory() as cache:
        t.add_row("faithfulness judge calls/question, sentences", f"{calls_per_question(url, cache, False):.1f}", "ragas: 2")
        t.add_row("same, warm cache", f"{calls_per_question(url, cache, False):.1f}", "0")
    with tempfile.TemporaryDirectory() as cache:
        t.add_row("faithfulness judge calls/question, atomic", f"{calls_per_question(url, cache, True):.1f}", "ragas: 2")
        t.add_row("same, warm cache", f"{calls_per_question(url, cache, True):.1f}", "0")
    httpd.shutdown()
    Console().print(t)


if __name__ == "__main__":
    main()
