"""A client for OpenAI-compatible chat-completions endpoints, shared by the LLM judge and the
prompt-stitching RAG's chat generator.

Standard library only. Requests in flight are bounded by a semaphore (`max_workers`); 429 and 5xx
replies, timeouts and refused connections are retried with exponential backoff; `usage` token
counts are summed. The API key travels in the Authorization header only and is scrubbed from
every error message.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request


class ChatError(Exception):
    """A request that failed for good (after retries), or a reply without a message."""


class ChatClient:
    """`complete(system, user)` through `POST {base_url}/chat/completions`."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, *, max_workers: int = 4,
                 timeout: float = 60.0, max_retries: int = 4, backoff: float = 1.0, temperature: float = 0.0):
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._key = api_key if api_key is not None else os.environ.get("LEWISRAG_LLM_API_KEY", "")
        self.max_workers = max_workers  # requests in flight at most, across all threads using this client
        self.timeout = timeout  # seconds per request
        self.max_retries = max_retries  # extra tries after a 429/5xx/timeout
        self.backoff = backoff  # first retry waits this many seconds, then doubles
        self.temperature = temperature
        self._slots = threading.BoundedSemaphore(max_workers)
        self._lock = threading.Lock()
        self.usage = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "retries": 0, "failures": 0}

    def count(self, **kw: int) -> None:
        with self._lock:
            for k, v in kw.items():
                self.usage[k] = self.usage.get(k, 0) + v

    def complete(self, system: str, user: str, json_mode: bool = False) -> str:
        """The assistant message's content for one system + user turn."""
        body = {"model": self.model, "temperature": self.temperature,
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
        if json_mode:
            body["response_format"] = {"type": "json_object"}
        req = urllib.request.Request(
            f"{self.base_url}/chat/completions", data=json.dumps(body).encode("utf-8"), method="POST",
            headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {self._key}"} if self._key else {})},
        )
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                self.count(retries=1)
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                with self._slots:
                    self.count(calls=1)
                    with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                        reply = json.loads(resp.read().decode("utf-8"))
                return self._content(reply)
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}"
                if e.code != 429 and e.code < 500:
                    break  # a client error will not heal by waiting
            except (TimeoutError, socket.timeout):
                last = f"timeout after {self.timeout:g}s"
            except urllib.error.URLError as e:
                last = "timeout" if isinstance(e.reason, (TimeoutError, socket.timeout)) else f"connection failed: {e.reason}"
            except (json.JSONDecodeError, UnicodeDecodeError):
                last = "malformed reply: response body is not JSON"
                break
        self.count(failures=1)
        raise ChatError(self.scrub(f"{last} ({attempt + 1} attempt{'s' if attempt else ''})"))

    def _content(self, reply) -> str:
        try:
            content = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise ChatError("malformed reply: no choices[0].message.content") from None
        usage = reply.get("usage") or {}
        self.count(prompt_tokens=int(usage.get("prompt_tokens") or 0), completion_tokens=int(usage.get("completion_tokens") or 0))
        return content if isinstance(content, str) else ""

    def scrub(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text

    def __repr__(self) -> str:  # never show the key
        return f"ChatClient(model={self.model!r}, max_workers={self.max_workers})"
