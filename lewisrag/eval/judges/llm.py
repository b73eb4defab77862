"""`LLMJudge`: support verdicts from an OpenAI-compatible chat-completions endpoint.

Statements that share a premise go out together in one request asking for
`{"verdicts": [{"id": 1, "supported": true, "reason": "..."}]}`, so the faithfulness of one answer
costs one call (ragas makes two). Requests run on a thread pool of `max_workers`, a semaphore holds
every request in flight to that bound, transient faults (resets, timeouts, 429, 5xx, malformed
bodies) are retried with bounded exponential backoff and jitter (all of which
`lewisrag.chat_client.ChatClient` does), and `usage` token counts are summed into a cost estimate. A
request that fails for good becomes Verdict(None, reason) or a JudgeError, never a crash.

Decided verdicts are cached on disk under sha256(judge name, model, params, prompt version,
premise, hypothesis); undecided ones are not, so the next run asks again. The API key is sent in
the Authorization header only: it is in no cache key, fingerprint, reason or result. Whatever the
endpoint says is scrubbed of it (and of any Authorization/Bearer credential) twice: by the client
on the reply's content, error bodies and exception messages, and here on every string decoded from
the content's JSON, since JSON can spell the key with \\u escapes. Cache hits are scrubbed too, for
caches written before scrubbing existed.
"""

from __future__ import annotations

import json
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor

from lewisrag.chat_client import ChatClient, ChatError
from lewisrag.data.io import InputError
from lewisrag.eval.judges.base import DEFAULT_CACHE_DIR, DiskCache, Verdict, digest

PROMPT_VERSION = "lewisrag-judge-1"  # bump whenever a prompt below changes: it changes scores

SYSTEM_JUDGE = (
    "You check statements against evidence. A statement is supported only if the evidence alone "
    "states or directly implies it; contradicted or unmentioned statements are not supported. "
    'Reply with JSON only: {"verdicts": [{"id": <statement id>, "supported": true|false, '
    '"reason": "<one short sentence>"}]}, one verdict per statement.'
)
SYSTEM_DECOMPOSE = (
    "Split the text into short atomic statements, each one self-contained fact, keeping its "
    'language. Reply with JSON only: {"statements": ["...", "..."]}.'
)
SYSTEM_QUESTIONS = (
    "Write questions that the given answer answers, in the answer's language, and mark an answer "
    "noncommittal if it is evasive or vague (e.g. 'I don't know'). Reply with JSON only: "
    '{"questions": ["..."], "noncommittal": true|false}.'
)


class JudgeError(Exception):
    """A request that failed for good (after retries); callers record the reason as a NaN."""


def _strip_fences(text: str) -> str:
    m = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
    return m.group(1) if m else text


def parse_verdicts(content: str, n: int) -> list[Verdict]:
    """Verdicts for ids 1..n from a reply; anything missing or malformed becomes Verdict(None, why).

    >>> parse_verdicts('{"verdicts": [{"id": 1, "supported": true, "reason": "stated"}]}', 2)
    [Verdict(supported=True, reason='stated'), Verdict(supported=None, reason='no verdict for statement 2 in the reply')]
    >>> parse_verdicts("yes", 1)[0].reason
    'malformed reply: not JSON'
    """
    try:
        data = json.loads(_strip_fences(content))
    except json.JSONDecodeError:
        return [Verdict(None, "malformed reply: not JSON")] * n
    items = data.get("verdicts") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return [Verdict(None, "malformed reply: no 'verdicts' list")] * n
    found: dict[int, Verdict] = {}
    for item in items:
        if not isinstance(item, dict) or str(item.get("id")).strip() not in {str(i) for i in range(1, n + 1)}:
            continue
        sup, reason = item.get("supported"), str(item.get("reason", ""))
        found[int(str(item["id"]).strip())] = Verdict(sup, reason) if isinstance(sup, bool) else Verdict(None, f"malformed verdict: supported={sup!r}")
    return [found.get(i, Verdict(None, f"no verdict for statement {i} in the reply")) for i in range(1, n + 1)]


class LLMJudge:
    """Judge, decompose and generate questions through `POST {base_url}/chat/completions`."""

    name = "llm"
    prompt_version = PROMPT_VERSION

    def __init__(
        self,
        base_url: str | None = None,
        model: str = "",
        api_key: str | None = None,
        *,
        cache_dir: str | os.PathLike | None = None,
        max_workers: int = 4,
        batch_size: int = 16,
        timeout: float = 60.0,
        max_retries: int = 4,
        backoff: float = 1.0,
        max_backoff: float = 30.0,
        seed: int | None = None,
        temperature: float = 0.0,
        json_mode: bool = True,
        price_in: float = 0.0,
        price_out: float = 0.0,
    ):
        base_url = base_url or os.environ.get("LEWISRAG_LLM_BASE_URL")
        if not base_url:
            raise InputError("--judge", "the llm judge needs a base URL: set LEWISRAG_LLM_BASE_URL or pass --llm-base-url")
        if not model:
            raise InputError("--judge", "the llm judge needs a model name (llm:MODEL)")
        if max_workers < 1 or batch_size < 1:
            raise ValueError("max_workers and batch_size must be at least 1")
        self.model = model  # the base URL is not in the fingerprint: one model may sit behind many URLs
        # requests in flight, timeouts, retries and backoff are the client's (lewisrag.chat_client)
        self.client = ChatClient(base_url, model, api_key, max_workers=max_workers, timeout=timeout, max_retries=max_retries,
                                 backoff=backoff, max_backoff=max_backoff, seed=seed, temperature=temperature)
        self.cache = DiskCache(cache_dir or DEFAULT_CACHE_DIR)
        self.max_workers = max_workers  # requests in flight at most, across all calls on this judge
        self.batch_size = batch_size  # statements per request
        self.temperature = temperature
        self.json_mode = json_mode  # send response_format json_object (some servers reject it)
        self.price_in, self.price_out = price_in, price_out  # currency per prompt / completion token
        self._lock = threading.Lock()
        self._cache_hits = 0

    @property
    def params(self) -> dict:
        return {"temperature": self.temperature, "batch_size": self.batch_size, "json_mode": self.json_mode}

    @property
    def usage(self) -> dict:
        """Calls, retries, failures and tokens of the endpoint, and the cache hits that saved calls."""
        return {**self.client.usage, "cache_hits": self._cache_hits}

    @property
    def fingerprint(self) -> str:
        return digest("LLMJudge", self.model, self.params, PROMPT_VERSION)

    @property
    def cost(self) -> float:
        return self.usage["prompt_tokens"] * self.price_in + self.usage["completion_tokens"] * self.price_out

    def describe(self) -> dict:
        """What results.json records about this judge (no URL, no key)."""
        return {"model": self.model, "params": self.params, "prompt_version": PROMPT_VERSION,
                "usage": dict(self.usage), "cost": self.cost}

    # -- protocol ---------------------------------------------------------------------------

    def judge(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        out: list[Verdict | None] = [None] * len(pairs)
        todo: dict[str, list[int]] = {}  # premise -> positions still to judge
        for i, (premise, hypothesis) in enumerate(pairs):
            hit = self.cache.get(self._key_for("judge", premise, hypothesis))
            if hit is not None:
                out[i] = Verdict(hit["supported"], self.client.scrub(hit["reason"]))
                self._count(cache_hits=1)
            else:
                todo.setdefault(premise, []).append(i)
        batches = [(p, idx[s : s + self.batch_size]) for p, idx in todo.items() for s in range(0, len(idx), self.batch_size)]
        with ThreadPoolExecutor(max_workers=self.max_workers) as pool:
            results = pool.map(lambda b: self._judge_batch(b[0], [pairs[i][1] for i in b[1]]), batches)
            for (premise, idx), verdicts in zip(batches, results):
                for i, v in zip(idx, verdicts):
                    out[i] = v
                    if v.supported is not None:
                        self.cache.put(self._key_for("judge", premise, pairs[i][1]), {"supported": v.supported, "reason": v.reason})
        return out  # type: ignore[return-value]

    def decompose(self, text: str) -> list[str]:
        """Atomic statements of `text` (for statements.split_atomic); raises JudgeError on failure."""
        data = self._ask_json("decompose", SYSTEM_DECOMPOSE, text, "")
        items = data.get("statements")
        if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
            raise JudgeError("malformed reply: no 'statements' list of strings")
        return [s.strip() for s in items if s.strip()]

    def generate_questions(self, answer: str, n: int = 3) -> tuple[list[str], bool]:
        """`n` questions the answer answers, and whether the answer is noncommittal (for answer relevancy)."""
        data = self._ask_json("questions", SYSTEM_QUESTIONS, f"Write {n} questions.\n\nAnswer:\n{answer}", str(n))
        qs, nc = data.get("questions"), data.get("noncommittal")
        if not isinstance(qs, list) or not all(isinstance(q, str) for q in qs) or not isinstance(nc, (bool, int)):
            raise JudgeError("malformed reply: expected 'questions' (list) and 'noncommittal' (bool)")
        return qs[:n], bool(nc)

    # -- internals --------------------------------------------------------------------------

    def _key_for(self, task: str, a: str, b: str) -> str:
        return digest(self.name, self.model, self.params, PROMPT_VERSION, task, a, b)

    def _count(self, cache_hits: int) -> None:
        with self._lock:
            self._cache_hits += cache_hits

    def _judge_batch(self, premise: str, hypotheses: list[str]) -> list[Verdict]:
        listing = "\n".join(f"{i}. {h}" for i, h in enumerate(hypotheses, start=1))
        user = f"Evidence:\n{premise}\n\nStatements:\n{listing}"
        try:
            content = self._chat(SYSTEM_JUDGE, user)
        except JudgeError as e:
            return [Verdict(None, str(e))] * len(hypotheses)
        return [Verdict(v.supported, self.client.scrub(v.reason)) for v in parse_verdicts(content, len(hypotheses))]

    def _ask_json(self, task: str, system: str, user: str, extra: str) -> dict:
        key = self._key_for(task, user, extra)
        hit = self.cache.get(key)
        if hit is not None:
            self._count(cache_hits=1)
            return self._scrubbed(hit)
        try:
            data = self._scrubbed(json.loads(_strip_fences(self._chat(system, user))))
        except json.JSONDecodeError:
            raise JudgeError("malformed reply: not JSON") from None
        if not isinstance(data, dict):
            raise JudgeError("malformed reply: not a JSON object")
        self.cache.put(key, data)
        return data

    def _scrubbed(self, obj):
        """`obj` (decoded JSON) with every string scrubbed."""
        if isinstance(obj, str):
            return self.client.scrub(obj)
        if isinstance(obj, list):
            return [self._scrubbed(x) for x in obj]
        if isinstance(obj, dict):
            return {self.client.scrub(k): self._scrubbed(v) for k, v in obj.items()}
        return obj

    def _chat(self, system: str, user: str) -> str:
        try:
            return self.client.complete(system, user, json_mode=self.json_mode)
        except ChatError as e:
            raise JudgeError(str(e)) from None

    def __repr__(self) -> str:  # never show the key
        return f"LLMJudge(model={self.model!r}, max_workers={self.max_workers}, batch_size={self.batch_size})"
