"""`ChatClient`: requests with retries, the failures that stop the client, usage counts and the
one-line error a command ends with (see the package docstring)."""

from __future__ import annotations

import http.client
import json
import os
import random
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from lewisrag.chat_client.errors import _ERROR_REPLY, _NOT_JSON, ChatError, EndpointError, _Cut, _Malformed
from lewisrag.chat_client.replies import _calls_of, _decode, _error_of, _refusal_of, _text_parts, token_count
from lewisrag.chat_client.retry import backoff_delay, retry_after_seconds
from lewisrag.chat_client.stream import _from_events, _is_stream
from lewisrag.chat_client.transport import _open, _read, _unreachable, _Watchdog
from lewisrag.chat_client.urls import _LONE_SURROGATE, scrub, scrub_key
from lewisrag.data.io import InputError

ERROR_BODY_LIMIT = 1 << 16  # bytes of an error reply read for its message (a 200 reply is bounded by `timeout`)


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
        self.temperature = float(temperature) + 0.0  # 0 and -0.0 as 0.0: one setting in every cache key
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

    def complete(self, system: str, user: str, json_mode: bool = False, key_only: bool = False) -> str:
        """The assistant message's content (scrubbed) for one system + user turn; raises ChatError.
        `key_only`: only the API key is redacted from the content (`scrub_key`), for content whose
        text is judged as it came (decomposed statements, claims): "Authorization: Bearer demo-token"
        an answer quotes stays. Error messages are scrubbed whole either way."""
        return self.reply(system, user, json_mode, key_only)[0]

    def reply(self, system: str, user: str, json_mode: bool = False, key_only: bool = False) -> tuple[str, dict]:
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
        replied = False  # an attempt got a 200 whose body was malformed: the endpoint answers, if not well
        for attempt in range(self.max_retries + 1):
            if attempt:
                # woken early when another request stops the client: this one stops too, its retries unspent
                self._halt.wait(backoff_delay(attempt, self.backoff, self.max_backoff, self._rng, retry_after))
                if (stop := self._stopped()) is not None:
                    raise stop
                self.count(retries=1)
            try:
                result = self._attempt(req, key_only)
            # URLError, HTTPError, resets and timeouts are OSErrors; RemoteDisconnected and
            # IncompleteRead are HTTPExceptions raised by getresponse()/read() unwrapped; a ValueError
            # is a URL or header http.client cannot send (see url_problem, key_problem).
            except (OSError, ValueError, http.client.HTTPException, _Malformed) as e:
                what, detail, transient, retry_after, fix = self._failure(e)
                unreachable = unreachable and _unreachable(e)
                replied = replied or isinstance(e, _Malformed)
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
            if fix is None and transient and not replied and not self.answered:
                # retries spent on transient faults and nothing ever answered: every attempt refused (or no such host)
                # is no server there; timeouts, resets, 429 or 5xx are an endpoint that does not answer (one that never
                # replies, https to an http port, a model that never loaded), which cost every request of the run its
                # retries (hours for a hundred). Once one has answered, such a fault is that request's failure alone: a
                # flaky network must not end a long run. A 200 with a malformed body is an endpoint that answers (one
                # bad body is no reason to stop asking; a web page on every attempt is, above).
                fix = "connect" if unreachable else "unanswered"
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

    def _attempt(self, req: urllib.request.Request, key_only: bool = False) -> tuple[str, dict]:
        with self._slots:
            self.count(calls=1)
            with _Watchdog(self.timeout) as dog:  # bounds the attempt whole, headers included (package docstring)
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
        return self._content(_decode(body, getattr(resp, "headers", None)), key_only)

    def _content(self, text: str, key_only: bool = False) -> tuple[str, dict]:
        try:
            reply = _from_events(text) if _is_stream(text) else json.loads(text)
        except (ValueError, RecursionError):  # RecursionError: "[[[[..." nested past the parser's depth
            raise _Malformed(_NOT_JSON, text) from None
        if (error := _error_of(reply)) is not None:  # a 200 carrying an error (vLLM's {"object": "error"}, a proxy's)
            raise _Malformed(_ERROR_REPLY, error)
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
        if finish == "error":  # the provider failed mid-answer (OpenRouter): what came is no whole answer; retried
            raise _Malformed(_ERROR_REPLY, "finish_reason 'error'")
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
        if not isinstance(content, str):  # null: a reply with no message, retried as the package docstring says
            raise _Malformed("malformed reply: choices[0].message.content is not a string", text)
        # decoded JSON can spell the key with \u escapes that the raw body did not show
        return (self.scrub_key(content) if key_only else self.scrub(content)), tokens

    def _failure(self, e: Exception) -> tuple[str, str, bool, float | None, str | None]:
        """What went wrong in one attempt, a scrubbed detail, whether waiting may help, Retry-After, and
        what to fix when every later request would fail the same way (`EndpointError.fix`), else None."""
        if isinstance(e, urllib.error.HTTPError) and 300 <= e.code < 400:  # not followed: see the package docstring
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
        if isinstance(e, ssl.SSLCertVerificationError):  # before ValueError, which it subclasses too
            return "TLS certificate rejected", self._excerpt(str(e)), False, None, "tls"
        if isinstance(e, (ValueError, http.client.InvalidURL)):  # cannot be sent at all: waiting does not help
            return "request failed", self._excerpt(f"{type(e).__name__}: {e}"), False, None, None
        if isinstance(e, _Malformed):
            return e.args[0], self._excerpt(e.args[1]), not isinstance(e, _Cut), None, None
        if isinstance(e, TimeoutError):  # socket.timeout is TimeoutError
            return f"timeout after {self.timeout:g}s", "", True, None, None
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
        """`scrub(text)` with this client's key, and lone surrogates as U+FFFD (see the package docstring)."""
        return _LONE_SURROGATE.sub("\ufffd", scrub(text, [self._key]))

    def scrub_key(self, text: str) -> str:
        """`text` with this client's key alone redacted (no Authorization/Bearer pattern), and lone
        surrogates as U+FFFD: for content judged as it came (`complete(key_only=True)`)."""
        return _LONE_SURROGATE.sub("\ufffd", scrub_key(text, [self._key]))

    @property
    def where(self) -> str:
        """The base URL as a terminal line may show it: scheme, host, port and path, without user
        info, query or fragment (where a key could sit), the key scrubbed besides.

        >>> ChatClient("https://u:sk-secret-123@api.example.com:8443/v1?key=sk-secret-123", "m", "sk-secret-123").where
        'https://api.example.com:8443/v1'
        """
        parts = urllib.parse.urlsplit(self.base_url)
        return self.scrub(f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}")

    def run_error(self, *, key: str, model: str, url: str, served: int = 0, json_mode: bool = False) -> InputError | None:
        """The one-line error a command ends with instead of writing results (exit 2), else None:
        this client stopped at a failure every request would repeat (`broken`), or none of its
        requests got a reply and nothing else (`served`: cache hits) answered either. It names the base
        URL (`where`; results record reasons without it) and, as the error's source, the flag or
        variable to fix: `key` (401/403), `model` (404: the model or the path), `url` (a redirect, a
        certificate, a web page, no server reached, a request that spent its retries before any was
        answered; and a run where nothing answered), and `json_mode` where an HTTP 400 may be the
        response_format the requests asked for."""
        if (stop := self.broken) is not None:
            it = "it" if key.startswith("$") else "the variable it names"  # --api-key-env: the name may be a pasted key
            remedy = {"key": f"; set {it} to " + ("a key this endpoint accepts" if self._key else "the endpoint's API key"),
                      "model": f"; check the model name '{self.model}' and the base URL (given by {url}; it ends "
                               "where /chat/completions begins, e.g. http://localhost:8000/v1)",
                      "redirect": "",  # the reason says it: give the final URL
                      "tls": "; check the host name, or the server's certificate",
                      "page": "; check the base URL, and that a proxy lets this machine through",
                      "connect": "; check the base URL's host and port, and that the server is up",
                      "unanswered": "; check the base URL (http or https, host and port) and that the server is up "
                                    "and answers (a slow one: raise --timeout or --max-retries)"}[stop.fix]
            source = {"key": key, "model": model}.get(stop.fix, url)
            why = "no request had been answered" if stop.fix == "unanswered" else "every request would get the same"
            return InputError(source, f"stopped asking {self.where}: {stop}{remedy} ({why}: no more were sent)")
        if self.usage["failures"] and not self.answered and not served:
            n = self.usage["failures"]
            # a server that rejects response_format answers HTTP 400: the base URL is not what to fix
            hint = ("; the requests asked for JSON mode (response_format json_object), which some servers reject "
                    "with HTTP 400: try --no-llm-json-mode" if json_mode and self.first_failure.startswith("HTTP 400") else "")
            return InputError(url, f"none of the {n} request{'s' if n > 1 else ''} to {self.where} got a reply (the "
                                   f"first: {self.first_failure}){hint}; nothing was scored")
        return None

    def __repr__(self) -> str:  # never show the key
        return f"ChatClient(model={self.model!r}, max_workers={self.max_workers})"
