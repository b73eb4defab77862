"""A client for OpenAI-compatible chat-completions endpoints, shared by the LLM judge and the
prompt-stitching RAG's chat generator.

Standard library only. Requests in flight are bounded by a semaphore (`max_workers`). Transient
faults are retried with bounded exponential backoff and jitter: connection resets, aborts, broken
pipes, remote disconnects, incomplete reads, refused connections, timeouts, HTTP 408/429/5xx
(honouring Retry-After up to the same cap) and 200 replies whose body is not JSON or has no
message. Other HTTP errors (400, 401, 403, 404, ...) fail at once, and so does a redirect: it is not
followed, since urllib would send the Authorization header on to whatever host it names; so does a
reply the endpoint cut off (finish_reason "length" or "content_filter"): it is not the model's whole
answer, and asking again gets the same; so does one with reasoning (reasoning_content) but no content,
one that calls a tool (tool_calls) instead of answering: lewisrag offers none, and a structured refusal
(OpenAI's "refusal": "...", content null), which fails as "the model refused: ...".
Content given as an array of parts has its text parts joined; a body streamed as server-sent events
(some proxies stream though no stream was asked, OpenRouter beginning with ": OPENROUTER PROCESSING"
comment lines) has its chunks joined. A body is decoded strictly (`_decode`): in the charset its
Content-Type declares, else as UTF-8 (a BOM dropped); one that does not decode, or that names a
charset Python does not know, is a malformed reply, retried as one, never read with replacement
characters. A token count a reply reports is kept only when it is a whole number
from 0 to MAX_TOKENS (`token_count`, which also reads the answer cache's), else it is unknown.
`timeout` bounds each attempt whole: connecting, the TLS handshake, the status line and headers, and
the body. A watchdog (`_Watchdog`) shuts the attempt's socket down at its deadline, so a read blocked
on an endpoint that trickles its headers or body a byte at a time ends there as a timeout (only name
resolution, which no socket can interrupt, is outside it); an error reply's body gets a timeout of its
own and only its first 64 KiB are read. Either way a failure ends as one `ChatError` whose message
says what went wrong and after how many attempts; `usage` counts calls, retries, failures and tokens.

A failure that every later request would repeat (HTTP 401/403: the key; 404: the model or the path;
a redirect; a TLS certificate rejected; and, while no request has been answered yet, a web page on
every attempt of a request: a login page, which was retried on every request of the run; or every
attempt of a request refused or its host name not resolved: no server there, which cost every request
its retries) stops the client: it is an `EndpointError`, kept in `broken`, every later request fails
at once with the same reason, sending nothing, and a request waiting to retry stops then too. Once a
request has been answered, a refused connection is that request's failure alone, as any transient
fault: a flaky network must not end a long run. `run_error` turns a stop, or a run in which no
request got a reply, into the one-line error a command ends with (exit 2), naming the base URL
(never the key) and the flag or variable to fix.

The API key travels in the Authorization header only. Every string that comes back from the
endpoint (content, error bodies, exception messages) goes through `scrub` before it can become a
reason, a cached value or an exception message: an endpoint or proxy that echoes the header must not
put the key into results, reports or caches. It also turns lone surrogates (JSON's "\\ud83d" cut from
its pair) into U+FFFD, which no UTF-8 cache, results file or report could hold.

`url_problem` and `key_problem` say why a base URL or key cannot be used, for the commands to refuse
them up front (one line, exit 2) rather than fail every request.
"""

from __future__ import annotations

import codecs
import email.utils
import http.client
import json
import os
import random
import re
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import TypeVar

from lewisrag.data.io import InputError

T, R = TypeVar("T"), TypeVar("R")
REDACTED = "[redacted]"
MIN_SECRET_LEN = 8  # shorter keys (vLLM's "EMPTY") are no secret, and replacing them would mangle replies
_CREDENTIAL = r"(?:\[redacted\]|[A-Za-z0-9._~+/=-]+)"  # RFC 6750 token68: stops before JSON quotes and braces
# one line only: a header's value never spans lines, and "bearer" ending a sentence must not take the next one
_AUTHORIZATION = re.compile(r'(?i)(\bauthorization\\?"?[ \t]*[:=][ \t]*\\?"?[ \t]*)(?:(?:bearer|basic|token)[ \t]+)?' + _CREDENTIAL)
_BEARER = re.compile(r"(?i)(\bbearer[ \t]+)" + _CREDENTIAL)
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")  # json.loads joins a pair: what is left is alone
ERROR_BODY_LIMIT = 1 << 16  # bytes of an error reply read for its message (a 200 reply is bounded by `timeout`)
# tokens one request may report: 100 times the longest context windows offered (about 10M); past that a count is
# garbage that would swamp usage and cost sums, and one like 10**400 cannot even become a float (OverflowError)
MAX_TOKENS = 10**9


def token_count(value: object) -> int | None:
    """A token count as the endpoint reported it (or an answer cache kept it), or None (unknown) when it
    is not a whole number from 0 to MAX_TOKENS: "completion_tokens": -5 was "-4.000 forward passes /
    answer" in compare's scorecard, true counted as 1. The fresh and the cached path both read counts here.

    >>> token_count(12), token_count(0), token_count(-5), token_count(True), token_count(float("nan"))
    (12, 0, None, None, None)
    >>> token_count(7.0), token_count("7"), token_count(10**30), token_count(None)
    (None, None, None, None)
    """
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKENS
    return value if ok else None


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every secret and every Authorization / Bearer credential replaced by [redacted].

    Secrets go first, so a key with characters outside the token pattern is not half-replaced.
    A false positive ("bearer bonds") costs a word of a reason; a false negative would leak a key.

    >>> scrub('echo {"Authorization": "Bearer sk-abc.123/x="} and sk-abc.123/x=', ["sk-abc.123/x="])
    'echo {"Authorization": "[redacted]"} and [redacted]'
    >>> scrub("authorization=Basic dXNlcjpwdw== then bearer abc")
    'authorization=[redacted] then bearer [redacted]'
    """
    for s in secrets:
        if s and len(s) >= MIN_SECRET_LEN:
            text = text.replace(s, REDACTED)
    text = _AUTHORIZATION.sub(lambda m: m.group(1) + REDACTED, text)
    return _BEARER.sub(lambda m: m.group(1) + REDACTED, text)


def url_problem(url: str) -> str | None:
    """Why `url` cannot be an endpoint's base URL, or None. urllib raised a ValueError for some of
    these on every request (a traceback) and a connection failure, retried, for others.

    >>> url_problem("http://localhost:8000/v1") is None, url_problem("localhost:8000/v1")
    (True, 'expected an http:// or https:// URL')
    >>> url_problem("http://localhost:80o0/v1"), url_problem("http://[::1/v1")
    ("not a URL (Port could not be cast to integer value as '80o0')", 'not a URL (Invalid IPv6 URL)')
    >>> url_problem("https://u:pw@api.example.com/v1")
    'expected a URL without user info (user:password@): give the key through the API key variable'
    >>> url_problem("http://localhost:8000/v1?api-version=1")[:48]
    'expected a base URL without a query (?...) or fr'
    """
    if not url.startswith(("http://", "https://")):
        return "expected an http:// or https:// URL"
    if re.search(r"[\x00-\x20\x7f]", url):
        return "expected a URL without spaces or control characters (percent-encode them)"
    if "?" in url or "#" in url:  # "/chat/completions" is appended: a query swallowed it ("...?v=1/chat/completions")
        return "expected a base URL without a query (?...) or fragment (#...): lewisrag appends /chat/completions to it"
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number from 0 to 65535 raises here
        if not parts.hostname:
            return "no host name in the URL"
        if "@" in parts.netloc:  # urllib sends no user info: the host it looked up was "user:pw@host", retried as unknown
            return "expected a URL without user info (user:password@): give the key through the API key variable"
        parts.hostname.encode("idna")  # a label over 63 characters raises (a UnicodeError)
    except ValueError as e:
        return f"not a URL ({e})"
    if not (parts.path + parts.query).isascii():
        return "expected a URL path without non-ASCII characters (percent-encode them)"
    return None


def key_problem(key: str) -> str | None:
    """Why `key` cannot go in an Authorization header (never showing it), or None. A line break
    (a key file's CRLF) or a non-ASCII character made every request raise a ValueError whose
    traceback printed the key.

    >>> key_problem("sk-abc 123"), key_problem(""), key_problem("sk-abc123\\r")[:29]
    (None, None, 'holds a line break, a control')
    """
    if all(" " <= c <= "~" for c in key):
        return None
    return "holds a line break, a control character or a non-ASCII one, which no API key has and no HTTP header carries"


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random, retry_after: float | None = None) -> float:
    """Seconds to wait before retry `attempt` (1, 2, ...): base * 2**(attempt - 1) capped at `cap`,
    half of it fixed and half random, so that clients failing together do not retry together. A
    server's Retry-After wins when it is longer, up to the same cap.

    >>> rng = random.Random(0)
    >>> all(0.5 <= backoff_delay(1, 1.0, 5.0, rng) <= 1.0 and 2.0 <= backoff_delay(3, 1.0, 5.0, rng) <= 4.0 for _ in range(100))
    True
    >>> all(2.5 <= backoff_delay(9, 1.0, 5.0, rng) <= 5.0 for _ in range(100))  # 256 s capped at 5
    True
    >>> backoff_delay(1, 1.0, 5.0, rng, retry_after=3600.0)  # Retry-After honoured, capped
    5.0
    """
    full = min(cap, base * 2.0 ** min(attempt - 1, 60))
    delay = full / 2 + rng.uniform(0.0, full / 2)
    return delay if retry_after is None else max(delay, min(retry_after, cap))


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds asked for by a Retry-After header (delta-seconds or an HTTP date); None when absent or unreadable.

    >>> retry_after_seconds("3"), retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT"), retry_after_seconds("soon")
    (3.0, 0.0, None)
    """
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    when = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def map_in_threads(fn: Callable[[T], R], items: Iterable[T], workers: int) -> list[R]:
    """`[fn(x) for x in items]`, computed on up to `workers` threads; the first failure (in the
    items' order) is raised.

    Why not `ThreadPoolExecutor.map`: Python joins an executor's threads when the process exits, so
    Ctrl-C or SIGTERM (a KeyboardInterrupt in the main thread, `lewisrag.cli`) waited for every
    request in flight and every retry of every queued item: minutes against a failing endpoint.
    These threads are daemons and take no new item once the caller is interrupted or an item has
    failed; the caller returns at once, and a request still in flight ends with the process.

    >>> map_in_threads(lambda x: x * x, range(5), workers=3)
    [0, 1, 4, 9, 16]
    """
    todo = list(enumerate(items))
    if workers <= 1 or len(todo) <= 1:
        return [fn(x) for _, x in todo]
    results: list = [None] * len(todo)
    failed: dict[int, BaseException] = {}
    lock, stop, finished = threading.Lock(), threading.Event(), threading.Event()
    running = [min(workers, len(todo))]
    todo.reverse()  # pop() from the end takes the items in order

    def work() -> None:
        try:
            while not stop.is_set():
                with lock:
                    if not todo:
                        break
                    i, x = todo.pop()
                try:
                    results[i] = fn(x)
                except BaseException as e:  # noqa: BLE001 - handed to the caller, which raises it
                    failed[i] = e
                    stop.set()
        finally:
            with lock:
                running[0] -= 1
                if not running[0]:
                    finished.set()

    for _ in range(running[0]):
        threading.Thread(target=work, daemon=True, name="lewisrag-request").start()
    try:
        finished.wait()  # a signal interrupts this wait (POSIX): Ctrl-C is not held up by the threads
    finally:
        stop.set()  # interrupted: the threads take nothing more
    if failed:
        raise failed[min(failed)]
    return results


class ChatError(Exception):
    """A request that failed for good (after retries), or a reply without a message."""


class EndpointError(ChatError):
    """A failure every later request to the endpoint would repeat; `fix` names what the user must
    change: "key" (401/403), "model" (404: the model or the path), "redirect", "tls", "page" or
    "connect" (the base URL: nothing listens there, or no such host)."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.fix = fix


class _RefuseRedirect(urllib.request.HTTPRedirectHandler):
    """No redirect is followed: the 3xx reaches the caller as an HTTPError (see the module docstring)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class _Watchdog:
    """Shuts an attempt's socket down at its deadline, so that a read blocked on an endpoint that
    trickles bytes (each inside the socket's own timeout) ends there; `fired` says it did.

    The socket is held as a duplicate of its file descriptor, taken when it connects: the TLS
    wrapper detaches the original, and the duplicate cannot be closed and its number reused by
    another thread's connection while the timer may still shut it down. All under one lock: a timer
    that fires while the attempt ends either shuts the socket before `stop` or does nothing."""

    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds
        self.fired = False
        self._socks: list[socket.socket] = []
        self._done = False
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True  # a timer never holds the process at exit

    def __enter__(self) -> _Watchdog:
        _WATCH.dog = self
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """No shutdown from here on (idempotent): the timer is cancelled, the duplicates closed."""
        _WATCH.dog = None
        self._timer.cancel()
        with self._lock:
            self._done = True
            for s in self._socks:
                s.close()
            self._socks.clear()

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def attach(self, sock: socket.socket) -> None:
        with self._lock:
            if self._done:
                return
            dup = sock.dup()
            self._socks.append(dup)
            if self.fired:  # the deadline passed while connecting
                _shut(dup)

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
            for s in self._socks:
                _shut(s)


def _shut(sock: socket.socket) -> None:
    try:  # both directions: a blocked recv returns at once, on this fd and on the one urllib reads
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected (yet, or any more): nothing to interrupt


_WATCH = threading.local()  # the attempt's watchdog, for the connection urllib makes on this thread


def _connect(address, timeout, source_address=None) -> socket.socket:
    """socket.create_connection for http.client, its time taken from the attempt's deadline and its
    socket handed to the attempt's watchdog (TLS wraps it afterwards: the handshake is watched too)."""
    dog = getattr(_WATCH, "dog", None)
    if dog is not None:
        left = dog.left()
        if left <= 0:
            raise TimeoutError("the timeout passed before connecting")
        timeout = min(timeout, left) if isinstance(timeout, (int, float)) else left
    sock = socket.create_connection(address, timeout, source_address)
    if dog is not None:
        dog.attach(sock)
    return sock


def _watched(http_class):
    """`http_class` whose connections connect through `_connect` (http.client's own hook)."""
    def make(*args, **kwargs):
        conn = http_class(*args, **kwargs)
        conn._create_connection = _connect
        return conn
    return make


class _WatchedHTTP(urllib.request.HTTPHandler):
    def do_open(self, http_class, req, **kwargs):
        return super().do_open(_watched(http_class), req, **kwargs)


class _WatchedHTTPS(urllib.request.HTTPSHandler):
    def do_open(self, http_class, req, **kwargs):
        return super().do_open(_watched(http_class), req, **kwargs)


_OPENER = urllib.request.build_opener(_RefuseRedirect, _WatchedHTTP, _WatchedHTTPS)


def _open(req: urllib.request.Request, timeout: float):
    return _OPENER.open(req, timeout=timeout)


def _read(resp, deadline: float, limit: int | None = None) -> bytes:
    """A reply's body (its first `limit` bytes at most), read as it arrives so that the deadline is
    checked as bytes trickle in; IncompleteRead when the connection closes before the announced
    Content-Length (read1 ends there quietly: the cut body was reported as "not JSON")."""
    chunks, size = [], 0
    while chunk := resp.read1(1 << 16):
        chunks.append(chunk)
        size += len(chunk)
        if limit is not None and size >= limit:
            return b"".join(chunks)
        if time.monotonic() > deadline:
            raise TimeoutError("the reply took longer than the timeout")
    if getattr(resp, "length", None):  # bytes announced that never came
        raise http.client.IncompleteRead(b"".join(chunks), resp.length)
    return b"".join(chunks)


def _text_parts(parts: list) -> str | None:
    """The text of a content array (`[{"type": "text", "text": "Ana"}, ...]`, joined); reasoning or
    other parts are left out. None when no part is text (the reply is then malformed)."""
    texts = [p["text"] for p in parts if isinstance(p, dict) and p.get("type", "text") in ("text", "output_text")
             and isinstance(p.get("text"), str)]
    return "".join(texts) if texts or not parts else None


_EVENT_FIELDS = ("data:", "event:", "id:", "retry:")  # the fields a server-sent event's line may begin with
_SKIP_COMMENT = re.compile(r"\s*(?::[^\r\n]*)?")  # blank lines, then one ": comment" line (OpenRouter's keep-alives)


def _is_stream(text: str) -> bool:
    """Whether a body is server-sent events: its first line that is neither blank nor a comment
    (": OPENROUTER PROCESSING", which a proxy sends while the model thinks) is a field of an event.

    >>> _is_stream(": OPENROUTER PROCESSING\\n\\n: again\\r\\ndata: {}\\n"), _is_stream('{"choices": []}'), _is_stream(": only")
    (True, False, False)
    """
    pos = 0
    while (end := _SKIP_COMMENT.match(text, pos).end()) > pos:
        pos = end
    return text.startswith(_EVENT_FIELDS, pos)


def _from_events(text: str) -> dict:
    """A chat completion from a streamed reply (server-sent events: "data: {chunk}" lines, then
    "data: [DONE]"), which some proxies send though no stream was asked: the chunks' delta contents
    joined, the last finish_reason and usage. ValueError when a chunk is not JSON, or when the stream
    ends without [DONE] or a finish_reason (it was cut: retried)."""
    parts, finish, usage, done, calls, refusal = [], None, None, False, [], []
    for line in text.splitlines():
        if not line.startswith("data:"):
            continue  # event:, id:, retry: and ": comments"
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            continue
        chunk = json.loads(data)
        usage = chunk.get("usage") if isinstance(chunk, dict) and isinstance(chunk.get("usage"), dict) else usage
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        if not (isinstance(choices, list) and choices and isinstance(choices[0], dict)):
            continue  # a usage-only chunk
        delta = choices[0].get("delta") or choices[0].get("message") or {}
        piece = delta.get("content") if isinstance(delta, dict) else None
        piece = _text_parts(piece) if isinstance(piece, list) else piece
        if isinstance(piece, str):
            parts.append(piece)
        if isinstance(delta, dict) and isinstance(delta.get("refusal"), str):  # OpenAI streams a refusal as its own deltas
            refusal.append(delta["refusal"])
        if isinstance(delta, dict):  # a tool call streams as its own deltas: kept, so that it is not read as ""
            calls += [c for key in ("tool_calls", "function_call") if (c := delta.get(key))]
        finish = choices[0].get("finish_reason") or finish
    if not (done or finish):
        raise ValueError("the stream ended before its end")
    message = ({"content": "".join(parts)} | ({"tool_calls": calls} if calls else {})
               | ({"refusal": "".join(refusal)} if refusal else {}))
    return {"choices": [{"message": message, "finish_reason": finish}], "usage": usage}


def _decode(body: bytes, headers) -> str:
    """A 200 reply's body as text, strictly: in the charset its Content-Type declares, else UTF-8 (a BOM
    some proxies add dropped: it is no JSON). Bytes that do not decode, or a charset Python does not
    know, make the reply malformed (retried): replacement characters ("Puf\ufffd\ufffdos [1]") were
    scored and cached as the model's answer, and a latin-1 server's "café" became "caf\ufffd"."""
    declared = headers.get_content_charset() if headers is not None else None  # lower case; None when none
    try:
        codec = codecs.lookup(declared or "utf-8").name
        return body.decode("utf-8-sig" if codec == "utf-8" else codec)  # bytes.decode refuses a non-text codec (base64)
    except LookupError:
        raise _Malformed(f"malformed reply: unknown charset '{declared[:40]}'", "") from None
    except ValueError as e:  # UnicodeDecodeError, or a codec's own complaint
        detail = f"{e.reason} at byte {e.start}: " if isinstance(e, UnicodeDecodeError) else ""
        raise _Malformed(f"malformed reply: body is not {declared or 'UTF-8'}",
                         detail + body.decode("utf-8", errors="backslashreplace")) from None


def _unreachable(e: BaseException) -> bool:
    """Whether an attempt failed before any server was reached: the connection refused (nothing
    listens there) or the host name not resolved."""
    if isinstance(e, urllib.error.URLError) and isinstance(e.reason, Exception):
        e = e.reason
    return isinstance(e, (ConnectionRefusedError, socket.gaierror))


def _calls_of(message) -> list | dict | None:
    """A message's tool calls (`tool_calls`, or the older `function_call`), if it has any."""
    return (message.get("tool_calls") or message.get("function_call")) if isinstance(message, dict) else None


def _refusal_of(message) -> str | None:
    """A message's structured refusal (OpenAI's "refusal": "I can't help with that."), if it has one."""
    refusal = message.get("refusal") if isinstance(message, dict) else None
    return refusal if isinstance(refusal, str) and refusal.strip() else None


MAX_WORKERS = 1024  # requests in flight at most (--concurrency): a thread each, and past a process's limit a traceback


class _Malformed(Exception):
    """A 200 reply that is not a chat completion: args are (what, body)."""


_NOT_JSON = "malformed reply: body is not JSON"


class _Cut(_Malformed):
    """A 200 reply the endpoint stopped before the model's end (finish_reason): not retried."""


class ChatClient:
    """`complete(system, user)` through `POST {base_url}/chat/completions`."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, *, max_workers: int = 4,
                 timeout: float = 60.0, max_retries: int = 4, backoff: float = 1.0, max_backoff: float = 30.0,
                 seed: int | None = None, temperature: float = 0.0, key_hint: str = "LEWISRAG_LLM_API_KEY"):
        if max_workers < 1 or max_retries < 0:
            raise ValueError("max_workers must be at least 1 and max_retries at least 0")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._key = api_key if api_key is not None else os.environ.get("LEWISRAG_LLM_API_KEY", "")
        self.max_workers = max_workers  # requests in flight at most, across all threads using this client
        self.timeout = timeout  # seconds an attempt may take, from connecting to the reply's last byte
        self.max_retries = max_retries  # extra tries after a transient fault
        self.backoff = backoff  # first retry waits about this many seconds, then doubles
        self.max_backoff = max_backoff  # no wait is longer, Retry-After included
        self.temperature = temperature
        self.key_hint = key_hint  # where the key comes from, named in a 401/403 reason (never the key itself)
        self._rng = random.Random(seed)  # the jitter's only randomness
        self._slots = threading.BoundedSemaphore(max_workers)
        self._lock = threading.Lock()
        self.usage = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "retries": 0, "failures": 0}
        self.broken: EndpointError | None = None  # the failure every later request would repeat: nothing more is sent
        self._halt = threading.Event()  # set with `broken`: wakes the requests waiting to retry, which then stop
        self.answered = 0  # requests that got a reply
        self.first_failure: str | None = None  # the reason of the first request that failed for good

    def count(self, answered: int = 0, **kw: int) -> None:
        with self._lock:
            self.answered += answered
            for k, v in kw.items():
                self.usage[k] = self.usage.get(k, 0) + v

    def complete(self, system: str, user: str, json_mode: bool = False) -> str:
        """The assistant message's content (scrubbed) for one system + user turn; raises ChatError."""
        return self.reply(system, user, json_mode)[0]

    def reply(self, system: str, user: str, json_mode: bool = False) -> tuple[str, dict]:
        """(content, this request's usage {prompt_tokens, completion_tokens} as far as the endpoint
        reported it); for callers that account cost per answer. Raises ChatError."""
        body = {"model": self.model, "temperature": self.temperature,
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
        if json_mode:
            body["response_format"] = {"type": "json_object"}
        req = urllib.request.Request(
            f"{self.base_url}/chat/completions", data=json.dumps(body).encode("utf-8"), method="POST",
            headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {self._key}"} if self._key else {})},
        )
        if (stop := self._stopped()) is not None:  # every request would get it again: none is sent
            raise stop
        what, detail, transient, retry_after, fix = "no attempt", "", True, None, None
        unreachable = True  # every attempt so far found nothing listening (or no such host)
        for attempt in range(self.max_retries + 1):
            if attempt:
                # woken early when another request stops the client: this one stops too, its retries unspent
                self._halt.wait(backoff_delay(attempt, self.backoff, self.max_backoff, self._rng, retry_after))
                if (stop := self._stopped()) is not None:
                    raise stop
                self.count(retries=1)
            try:
                result = self._attempt(req)
            # URLError, HTTPError, resets and timeouts are OSErrors; RemoteDisconnected and
            # IncompleteRead are HTTPExceptions raised by getresponse()/read() unwrapped; a ValueError
            # is a URL or header http.client cannot send (see url_problem, key_problem).
            except (OSError, ValueError, http.client.HTTPException, _Malformed) as e:
                what, detail, transient, retry_after, fix = self._failure(e)
                unreachable = unreachable and _unreachable(e)
            else:
                self.count(answered=1)
                return result
            if not transient:
                break
        self.count(failures=1)
        if fix is None and what == _NOT_JSON and detail.lstrip()[:1] == "<" and not self.answered:
            # every attempt got a web page and nothing ever answered: a login page or a proxy's, which every
            # request would get too (one page between answers is a hiccup, retried as any malformed body)
            fix, detail = "page", f"the base URL answers with a web page, not the API (a proxy's login page?): {detail}"
        n = attempt + 1
        message = self.scrub(f"{what} ({n} attempt{'s' if n > 1 else ''})" + (f": {detail}" if detail else ""))
        with self._lock:  # `answered` read under the lock that counts it: a reply counted meanwhile keeps the client going
            if fix is None and unreachable and transient and not self.answered:
                # every attempt refused (or no such host) and nothing ever answered: no server there, which every
                # request would find too (once one has answered, a refusal is a flaky network: that request fails alone)
                fix = "connect"
            error = ChatError(message) if fix is None else EndpointError(message, fix)
            self.first_failure = self.first_failure or message
            if fix is not None and self.broken is None:
                self.broken = error
                self._halt.set()
        raise error

    def _stopped(self) -> EndpointError | None:
        """Once the client has stopped (`broken`), the error a request fails with instead of sending
        anything more, counted as its failure; else None."""
        if (stop := self.broken) is None:
            return None
        self.count(failures=1)
        return EndpointError(str(stop), stop.fix)

    def _attempt(self, req: urllib.request.Request) -> tuple[str, dict]:
        with self._slots:
            self.count(calls=1)
            with _Watchdog(self.timeout) as dog:  # bounds the attempt whole, headers included (module docstring)
                try:
                    with _open(req, timeout=self.timeout) as resp:
                        body = _read(resp, dog.deadline)
                except urllib.error.HTTPError:
                    raise  # its status and headers came whole: what it says stands
                except (OSError, http.client.HTTPException) as e:
                    if dog.fired:  # the shutdown surfaces as a disconnect, a bad status line or a cut body
                        raise TimeoutError("the attempt took longer than the timeout") from e
                    raise
            if dog.fired:  # a body read to its end by the shutdown may be cut short
                raise TimeoutError("the attempt took longer than the timeout")
        return self._content(_decode(body, getattr(resp, "headers", None)))

    def _content(self, text: str) -> tuple[str, dict]:
        try:
            reply = _from_events(text) if _is_stream(text) else json.loads(text)
        except (ValueError, RecursionError):  # RecursionError: "[[[[..." nested past the parser's depth
            raise _Malformed(_NOT_JSON, text) from None
        try:
            choice = reply["choices"][0]
            message = choice["message"]
            # a tool call or a refusal may come without a content key at all: read below, not retried as malformed
            content = message.get("content") if _calls_of(message) or _refusal_of(message) else message["content"]
        except (KeyError, IndexError, TypeError):
            raise _Malformed("malformed reply: no choices[0].message.content", text) from None
        usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
        tokens = {k: n for k in ("prompt_tokens", "completion_tokens") if (n := token_count(usage.get(k))) is not None}
        self.count(**tokens)
        finish = choice.get("finish_reason") if isinstance(choice, dict) else None
        if finish in ("length", "content_filter"):  # a truncated answer must not be scored as the model's
            raise _Cut(f"reply cut off by the endpoint (finish_reason '{finish}')", text)
        if (refusal := _refusal_of(message)) is not None:
            # OpenAI's structured refusal (content null): the model declined, and asking again gets the same
            raise _Cut(f"the model refused: {self._excerpt(refusal)}", "")
        if isinstance(content, list):  # the content-array format: [{"type": "text", "text": ...}, ...]
            content = _text_parts(content)
        thought = next((k for k in ("reasoning_content", "reasoning") if isinstance(message, dict)
                        and isinstance(message.get(k), str) and message[k].strip()), None)
        if thought is not None and not (isinstance(content, str) and content.strip()):
            # asking again gets the same: the reasoning parser took the whole reply, or thinking never ended
            raise _Cut(f"reply has no content, only reasoning ({len(message[thought])} characters in {thought})", text)
        if _calls_of(message) and not (isinstance(content, str) and content.strip()):
            # lewisrag offers no tools: a model that calls one anyway (finish_reason "tool_calls") does so again
            raise _Cut(f"reply is a tool call, not an answer (finish_reason '{finish}')", text)
        if not isinstance(content, str):  # null: a reply with no message, retried as the docstring says
            raise _Malformed("malformed reply: choices[0].message.content is not a string", text)
        # decoded JSON can spell the key with \u escapes that the raw body did not show
        return self.scrub(content), tokens

    def _failure(self, e: Exception) -> tuple[str, str, bool, float | None, str | None]:
        """What went wrong in one attempt, a scrubbed detail, whether waiting may help, Retry-After, and
        what to fix when every later request would fail the same way (`EndpointError.fix`), else None."""
        if isinstance(e, urllib.error.HTTPError) and 300 <= e.code < 400:  # not followed: see the module docstring
            where = self._excerpt((e.headers.get("Location") if e.headers else None) or "elsewhere")
            e.close()
            return f"HTTP {e.code}", f"redirected to {where}, which lewisrag does not follow (the API key would go " \
                                     "along): give the final URL as the base URL", False, None, "redirect"
        if isinstance(e, urllib.error.HTTPError):
            detail = self._error_body(e)
            if e.code in (401, 403):  # never the key itself: scrub() has seen every byte of the body
                hint = "the endpoint rejected the API key" if self._key else "no API key was sent"
                return f"HTTP {e.code}", f"{hint} ({self.key_hint})" + (f"; {detail}" if detail else ""), False, None, "key"
            transient = e.code in (408, 429) or e.code >= 500
            return (f"HTTP {e.code}", detail, transient, retry_after_seconds(e.headers.get("Retry-After") if e.headers else None),
                    "model" if e.code == 404 else None)
        if isinstance(e, urllib.error.URLError):
            if isinstance(e.reason, Exception):
                return self._failure(e.reason)  # a reset, refusal or timeout while sending
            return "request failed", self._excerpt(str(e.reason)), False, None, None  # e.g. an unknown URL scheme
        if isinstance(e, (ValueError, http.client.InvalidURL)):  # cannot be sent at all: waiting does not help
            return "request failed", self._excerpt(f"{type(e).__name__}: {e}"), False, None, None
        if isinstance(e, _Malformed):
            return e.args[0], self._excerpt(e.args[1]), not isinstance(e, _Cut), None, None
        if isinstance(e, TimeoutError):  # socket.timeout is TimeoutError
            return f"timeout after {self.timeout:g}s", "", True, None, None
        if isinstance(e, ssl.SSLCertVerificationError):
            return "TLS certificate rejected", self._excerpt(str(e)), False, None, "tls"
        # resets, aborts, broken pipes, refusals, remote disconnects, incomplete reads
        return "connection failed", self._excerpt(f"{type(e).__name__}: {e}"), True, None, None

    def _error_body(self, e: urllib.error.HTTPError) -> str:
        """The error message of an HTTP error reply (OpenAI's {"error": {"message"}} or the raw body), scrubbed."""
        try:  # bounded: an endpoint that trickles an error body forever held the request forever
            body = _read(e, time.monotonic() + self.timeout, ERROR_BODY_LIMIT).decode("utf-8", errors="replace")
        except (OSError, http.client.HTTPException):
            return ""
        finally:
            e.close()
        try:
            message = json.loads(body)["error"]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            message = body
        return self._excerpt(str(message))

    def _excerpt(self, text: str, limit: int = 200) -> str:
        return scrub(" ".join(text.split()), [self._key])[:limit]  # scrubbed before cut: no half key survives

    def scrub(self, text: str) -> str:
        """`scrub(text)` with this client's key, and lone surrogates as U+FFFD (see the module docstring)."""
        return _LONE_SURROGATE.sub("\ufffd", scrub(text, [self._key]))

    @property
    def where(self) -> str:
        """The base URL as a terminal line may show it: scheme, host, port and path, without user
        info, query or fragment (where a key could sit), the key scrubbed besides.

        >>> ChatClient("https://u:sk-secret-123@api.example.com:8443/v1?key=sk-secret-123", "m", "sk-secret-123").where
        'https://api.example.com:8443/v1'
        """
        parts = urllib.parse.urlsplit(self.base_url)
        return self.scrub(f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}")

    def run_error(self, *, key: str, model: str, url: str, served: int = 0) -> InputError | None:
        """The one-line error a command ends with instead of writing results (exit 2), else None:
        this client stopped at a failure every request would repeat (`broken`), or none of its
        requests got a reply and nothing else (`served`: cache hits) answered either. It names the base
        URL (`where`; results record reasons without it) and, as the error's source, the flag or
        variable to fix: `key` (401/403), `model` (404: the model or the path), `url` (a redirect, a
        certificate, a web page, no server reached; and a run where nothing answered)."""
        if (stop := self.broken) is not None:
            it = "it" if key.startswith("$") else "the variable it names"  # --api-key-env: the name may be a pasted key
            remedy = {"key": f"; set {it} to " + ("a key this endpoint accepts" if self._key else "the endpoint's API key"),
                      "model": f"; check the model name '{self.model}' and the base URL (given by {url}; it ends "
                               "where /chat/completions begins, e.g. http://localhost:8000/v1)",
                      "redirect": "",  # the reason says it: give the final URL
                      "tls": "; check the host name, or the server's certificate",
                      "page": "; check the base URL, and that a proxy lets this machine through",
                      "connect": "; check the base URL's host and port, and that the server is up"}[stop.fix]
            source = {"key": key, "model": model}.get(stop.fix, url)
            return InputError(source, f"stopped asking {self.where}: {stop}{remedy} (every request would get the same: "
                                      "no more were sent)")
        if self.usage["failures"] and not self.answered and not served:
            n = self.usage["failures"]
            return InputError(url, f"none of the {n} request{'s' if n > 1 else ''} to {self.where} got a reply (the "
                                   f"first: {self.first_failure}); nothing was scored")
        return None

    def __repr__(self) -> str:  # never show the key
        return f"ChatClient(model={self.model!r}, max_workers={self.max_workers})"
