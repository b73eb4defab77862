"""Benchmark the evaluator's cost: rule-checker throughput, judge calls per question, ROUGE-L speed.

    python scripts/bench_eval.py [--seconds 2]

1. The rule checker's sentences per second on one core (target ≥ 20,000), over the BugHunt sample's
   22 sentences, repeated; the cited documents' folded forms are cached, as in a real run.
2. Judge requests per question for faithfulness, through LLMJudge against a local chat-completions
   server on 127.0.0.1 (ragas makes 2: one to split statements, one to judge them): sentence
   splitter 1 (all statements in one batch), atomic splitter 2 (decompose, then judge).
3. The same run again with a warm disk cache: 0 requests.
4. ROUGE-L microseconds per scored pair, rouge-score's scorer over lewisrag's tokens (what
   `scoring.qa.rouge_l` calls) against the hand-written rolling-row LCS it replaced, on short
   English answers with 3 references (the reproduce table, `compare`), long English answers and
   the BugHunt sample's Chinese answers against its 4 documents.
"""

from __future__ import annotations

import argparse
import json
import os
import random
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
from lewisrag.scoring.qa import rouge_l, rouge_tokens  # noqa: E402


def checker_throughput(seconds: float) -> float:
    sample = load_bughunt()
    docs = sample.doc_texts()
    rows = [(s.text, set(s.retrieved_ids)) for _, s in sample.all_sentences()]
    n, start = 0, time.perf_counter()
    while n == 0 or time.perf_counter() - start < seconds:  # one pass at least: a rate of none divides by 0
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


def lcs_rouge_l(prediction: str, references: list[str]) -> float:
    """The hand-written ROUGE-L lewisrag used before calling rouge-score: the speed baseline."""
    pred, best = rouge_tokens(prediction), 0.0
    for ref in references:
        gold = rouge_tokens(ref)
        prev = [0] * (len(gold) + 1)
        for x in pred:
            cur = [0]
            for j, y in enumerate(gold):
                cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
            prev = cur
        if prev[-1]:
            p, r = prev[-1] / len(pred), prev[-1] / len(gold)
            best = max(best, 2 * p * r / (p + r))
    return best


def rouge_sets() -> dict[str, list[tuple[str, list[str]]]]:
    """Scored pairs as ROUGE meets them in bulk; English ones drawn with a fixed seed."""
    rng = random.Random(0)
    words = "the login form returns 422 when a password is wrong and lists errors in red above it".split()

    def text(lo: int, hi: int) -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(lo, hi)))

    sample = load_bughunt()
    docs = list(sample.doc_texts().values())
    return {"short English, 3 references": [(text(1, 4), [text(1, 4) for _ in range(3)]) for _ in range(2000)],
            "long English (60-100 words)": [(text(60, 100), [text(60, 100)]) for _ in range(100)],
            "BugHunt Chinese answers, 4 documents": [(strip_citations(a.response), docs) for a in sample.answers] * 20}


def microseconds_per_pair(fn, pairs: list[tuple[str, list[str]]], seconds: float) -> float:
    n, start = 0, time.perf_counter()
    while n == 0 or time.perf_counter() - start < seconds:  # one pass at least, however short `seconds`
        for prediction, references in pairs:
            fn(prediction, references)
        n += len(pairs)
    return 1e6 * (time.perf_counter() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="how long to time the rule checker")
    args = parser.parse_args()
    if not args.seconds > 0 or args.seconds == float("inf"):  # 0 divided by the sentences timed
        parser.error(f"--seconds: must be a positive finite number, got {args.seconds}")
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
    rouge_l("warm", ["up"])  # rouge-score's import (nltk) is not part of the per-pair cost
    for name, pairs in rouge_sets().items():
        ours, before = (microseconds_per_pair(fn, pairs, args.seconds / 2) for fn in (rouge_l, lcs_rouge_l))
        t.add_row(f"ROUGE-L µs/pair, {name}", f"{ours:,.1f}", f"hand-written LCS: {before:,.1f}")
    Console().print(t)


if __name__ == "__main__":
    main()
