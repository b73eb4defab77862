"""What a 200 reply says: its body decoded strictly (`_decode`), token counts that are counts
(`token_count`), content arrays, tool calls, structured refusals and errors sent as a 200 (`_error_of`)."""

from __future__ import annotations

import codecs

from lewisrag.chat_client.errors import _Malformed

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


def _text_parts(parts: list) -> str | None:
    """The text of a content array (`[{"type": "text", "text": "Ana"}, ...]`, joined); reasoning or
    other parts are left out. None when no part is text (the reply is then malformed)."""
    texts = [p["text"] for p in parts if isinstance(p, dict) and p.get("type", "text") in ("text", "output_text")
             and isinstance(p.get("text"), str)]
    return "".join(texts) if texts or not parts else None


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


def _calls_of(message) -> list | dict | None:
    """A message's tool calls (`tool_calls`, or the older `function_call`), if it has any."""
    return (message.get("tool_calls") or message.get("function_call")) if isinstance(message, dict) else None


def _refusal_of(message) -> str | None:
    """A message's structured refusal (OpenAI's "refusal": "I can't help with that."), if it has one."""
    refusal = message.get("refusal") if isinstance(message, dict) else None
    return refusal if isinstance(refusal, str) and refusal.strip() else None


def _error_of(reply) -> str | None:
    """The error a 200 body or a streamed chunk carries instead of an answer, as one line, or None: an
    "error" key (OpenAI's {"error": {"message": ...}}, OpenRouter's mid-stream {"error": {...}, "choices":
    [{"finish_reason": "error"}]}) or vLLM's {"object": "error", "message": ...}. Such a reply was read
    as an answer (the text before the error) or, streamed, its chunk dropped.

    >>> _error_of({"object": "error", "message": "CUDA out of memory", "code": 500})
    'CUDA out of memory'
    >>> _error_of({"error": {"code": 502, "message": "provider returned error"}}), _error_of({"error": None, "choices": []})
    ('provider returned error', None)
    """
    if not isinstance(reply, dict):
        return None
    error = reply.get("error")
    if error in (None, "", {}, []) and reply.get("object") != "error":
        return None
    if error in (None, "", {}, []):
        error = reply  # vLLM's ErrorResponse: the message is beside "object"
    message = error.get("message") if isinstance(error, dict) else error
    return " ".join(str(message if message not in (None, "") else error).split())[:500]
