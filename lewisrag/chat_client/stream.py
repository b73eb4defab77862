"""Replies streamed as server-sent events though no stream was asked: recognized (`_is_stream`) and
joined into one chat completion (`_from_events`)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from lewisrag.chat_client.errors import _ERROR_REPLY, _Malformed
from lewisrag.chat_client.replies import _error_of, _text_parts

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


_LINE_END = re.compile(r"\r\n|\r|\n")  # the only line ends of server-sent events (not U+2028, U+2029, U+0085)


def _events(text: str) -> Iterator[tuple[str, str]]:
    """The (type, data) of each event in a server-sent event stream, by the spec's rules: lines end at CR
    LF, CR or LF only (str.splitlines also split at U+2028, U+2029 and U+0085, which servers send raw inside
    JSON strings: a chunk cut in two was "not JSON"); an event's data: lines are joined with "\\n" up to
    the blank line that ends it; a field's value loses one leading space; ": comments", id: and retry:
    are read past. The type is "message" unless an event: line names another. An event without data is
    no event, nor is one whose data is empty (a lone "data:"), but for an error. An event the body ends inside (no blank line after it) counts too: the
    body is read whole, and a cut one fails as JSON or as a stream without its end.

    >>> list(_events('event: error\\ndata: {"a":\\ndata:1}\\n\\n: ping\\r\\rdata: x\\u2028y\\r\\ndata: [DONE]'))
    [('error', '{"a":\\n1}'), ('message', 'x\\u2028y\\n[DONE]')]
    """
    data: list[str] = []
    kind = ""
    for line in [*_LINE_END.split(text), ""]:
        if not line:  # the blank line: the event is whole
            if "\n".join(data) or kind == "error":  # an empty data buffer dispatches nothing (a keep-alive "data:")
                yield kind or "message", "\n".join(data)
            data, kind = [], ""
            continue
        name, _, value = line.partition(":")
        if not name:
            continue  # a ": comment" (OpenRouter's keep-alives)
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "event":
            kind = value


def _from_events(text: str) -> dict:
    """A chat completion from a streamed reply (server-sent events: "data: {chunk}" events, then
    "data: [DONE]"), which some proxies send though no stream was asked: the chunks' delta contents
    joined, the last finish_reason and usage. ValueError when a chunk is not JSON, or when the stream
    ends without [DONE] or a finish_reason (it was cut: retried); a malformed reply (retried) when a
    chunk is an error (`_error_of`: vLLM's {"object": "error"} mid-stream), which was dropped as a
    chunk without choices, the text before it read as the whole answer, or when an event's type is
    "error" (`event: error`, whatever its data holds): such an event was skipped, and with a [DONE]
    after it the text before it was scored and cached as the answer."""
    parts, finish, usage, done, calls, refusal = [], None, None, False, [], []
    for kind, data in _events(text):
        if kind == "error":
            try:
                detail = _error_of(json.loads(data))
            except (ValueError, RecursionError):
                detail = None
            raise _Malformed(_ERROR_REPLY, detail or data.strip() or "an error event")
        if data.strip() == "[DONE]":
            done = True
            continue
        chunk = json.loads(data)
        if (error := _error_of(chunk)) is not None:
            raise _Malformed(_ERROR_REPLY, error)
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
