"""The failures a chat client raises (`ChatError`, `EndpointError`) and the ones it retries or not
inside a request (`_Malformed`, `_Cut`): see the package docstring."""

from __future__ import annotations


class ChatError(Exception):
    """A request that failed for good (after retries), or a reply without a message."""


class EndpointError(ChatError):
    """A failure every later request to the endpoint would repeat; `fix` names what the user must
    change: "key" (401/403), "model" (404: the model or the path), "redirect", "tls", "page",
    "connect" (the base URL: nothing listens there, or no such host) or "unanswered" (the base URL or
    the server: a request spent its retries on timeouts, resets, 429 or 5xx before any request was
    answered)."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.fix = fix


class _Malformed(Exception):
    """A 200 reply that is not a chat completion: args are (what, body)."""


_NOT_JSON = "malformed reply: body is not JSON"
_ERROR_REPLY = "malformed reply: the endpoint sent an error"  # a 200 body or stream chunk that is an error, not an answer


class _Cut(_Malformed):
    """A 200 reply the endpoint stopped before the model's end (finish_reason): not retried."""
