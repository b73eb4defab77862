"""A client for OpenAI-compatible chat-completions endpoints, shared by the LLM judge and the
prompt-stitching RAG's chat generator.

Standard library only. Requests in flight are bounded by a semaphore (`max_workers`). Transient
faults are retried with bounded exponential backoff and jitter: connection resets, aborts, broken
pipes, remote disconnects, incomplete reads, refused connections, timeouts, HTTP 408/429/5xx
(honouring Retry-After up to the same cap) and 200 replies whose body is not JSON, has no message,
or is an error (an "error" key or vLLM's "object": "error", in the body or in a streamed chunk, or
finish_reason "error": the provider failed mid-answer; its message is the failure's). Other HTTP
errors (400, 401, 403, 404, ...) fail at once, and so does a redirect: it is not followed, since
urllib would send the Authorization header on to whatever host it names; so does a reply the
endpoint cut off (finish_reason "length" or "content_filter"): it is not the model's whole answer,
and asking again gets the same; so does one with reasoning (reasoning_content) but no content, one
that calls a tool (tool_calls) instead of answering: lewisrag offers none, and a structured refusal
(OpenAI's "refusal": "...", content null), which fails as "the model refused: ...". Content given as
an array of parts has its text parts joined; a body streamed as server-sent events (some proxies
stream though no stream was asked, OpenRouter beginning with ": OPENROUTER PROCESSING" comment
lines) has its chunks joined. A body is decoded strictly (`_decode`): in the charset its
Content-Type declares, else as UTF-8 (a BOM dropped); one that does not decode, or that names a
charset Python does not know, is a malformed reply, retried as one, never read with replacement
characters. A token count a reply reports is kept only when it is a whole number from 0 to
MAX_TOKENS (`token_count`, which also reads the answer cache's), else it is unknown. `timeout`
bounds each attempt whole: connecting, the TLS handshake, the status line and headers, and the body.
A watchdog (`_Watchdog`) shuts the attempt's socket down at its deadline, so a read blocked on an
endpoint that trickles its headers or body a byte at a time ends there as a timeout (only name
resolution, which no socket can interrupt, is outside it); an error reply's body gets a timeout of
its own and only its first 64 KiB are read. Either way a failure ends as one `ChatError` whose
message says what went wrong and after how many attempts; `usage` counts calls, retries, failures
and tokens.

A failure that every later request would repeat (HTTP 401/403: the key; 404: the model or the path;
a redirect; a TLS certificate rejected; and, while no request has been answered yet, a web page on
every attempt of a request: a login page, which was retried on every request of the run; every
attempt of a request refused or its host name not resolved: no server there; or a request that spent
all its retries on other transient faults, timeouts, resets, 429 or 5xx, with no 200 among them: an
endpoint that accepts connections but never replies, https to an http port, a model that never
loaded; each cost every request of the run its retries, hours for a hundred requests) stops the
client: it is an `EndpointError`, kept in `broken`, every later request fails at once with the same
reason, sending nothing, and a request waiting to retry stops then too. Once a request has been
answered, a refused connection or a timeout is that request's failure alone, as any transient fault:
a flaky network must not end a long run. `run_error` turns a stop, or a run in which no request got
a reply, into the one-line error a command ends with (exit 2), naming the base URL (never the key)
and the flag or variable to fix.

The API key travels in the Authorization header only. Every string that comes back from the endpoint
(content, error bodies, exception messages) goes through `scrub` before it can become a reason, a
cached value or an exception message: an endpoint or proxy that echoes the header must not put the
key into results, reports or caches. Content asked for with `key_only` (text judged as it came: an
answer's statements and claims) goes through `scrub_key`, which redacts the key alone, so that an
answer quoting "Authorization: Bearer demo-token" keeps its words. Both also turn lone surrogates
(JSON's "\\ud83d" cut from its pair) into U+FFFD, which no UTF-8 cache, results file or report could
hold.

`url_problem` and `key_problem` say why a base URL or key cannot be used, for the commands to refuse
them up front (one line, exit 2) rather than fail every request.

The modules, one concern each: `urls` (base URLs, keys, `scrub`), `retry` (backoff and Retry-After),
`threads` (`map_in_threads`), `transport` (one attempt on the wire: the opener, the watchdog, reading
a body against the deadline), `replies` (decoding a 200 reply, token counts, content arrays, tool
calls, refusals), `stream` (server-sent events), `errors` and `client` (`ChatClient`). Import names
from `lewisrag.chat_client`; a test that patches what `ChatClient` calls patches it in `client`.
"""

from lewisrag.chat_client.client import ERROR_BODY_LIMIT, ChatClient
from lewisrag.chat_client.errors import ChatError, EndpointError
from lewisrag.chat_client.replies import MAX_TOKENS, token_count
from lewisrag.chat_client.retry import backoff_delay, retry_after_seconds
from lewisrag.chat_client.threads import MAX_WORKERS, map_in_threads
from lewisrag.chat_client.urls import MIN_SECRET_LEN, REDACTED, key_problem, scrub, scrub_key, url_problem

__all__ = ["ERROR_BODY_LIMIT", "MAX_TOKENS", "MAX_WORKERS", "MIN_SECRET_LEN", "REDACTED", "ChatClient", "ChatError",
           "EndpointError", "backoff_delay", "key_problem", "map_in_threads", "retry_after_seconds", "scrub",
           "scrub_key", "token_count", "url_problem"]
