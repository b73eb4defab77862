"""Base URLs and API keys: whether they can be used (`url_problem`, `key_problem`), and keys kept out
of every string that comes back from an endpoint (`scrub`)."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable

REDACTED = "[redacted]"
MIN_SECRET_LEN = 8  # shorter keys (vLLM's "EMPTY") are no secret, and replacing them would mangle replies
_CREDENTIAL = r"(?:\[redacted\]|[A-Za-z0-9._~+/=-]+)"  # RFC 6750 token68: stops before JSON quotes and braces
# one line only: a header's value never spans lines, and "bearer" ending a sentence must not take the next one
_AUTHORIZATION = re.compile(r'(?i)(\bauthorization\\?"?[ \t]*[:=][ \t]*\\?"?[ \t]*)(?:(?:bearer|basic|token)[ \t]+)?' + _CREDENTIAL)
_BEARER = re.compile(r"(?i)(\bbearer[ \t]+)" + _CREDENTIAL)
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")  # json.loads joins a pair: what is left is alone


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


def scrub_key(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every secret replaced by [redacted], and nothing else: for text that is judged as it
    came (an answer's statements and claims), where a quoted "Authorization: Bearer demo-token" is
    what the answer says, not a credential of this run (`scrub` would replace it).

    >>> scrub_key("send Authorization: Bearer demo-token-123, not sk-abc.123/x=", ["sk-abc.123/x="])
    'send Authorization: Bearer demo-token-123, not [redacted]'
    """
    for s in secrets:
        if s and len(s) >= MIN_SECRET_LEN:
            text = text.replace(s, REDACTED)
    return text


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
    if "@" in url.partition("//")[2]:  # before the port, whose error quotes what follows a colon: a password
        # urllib sends no user info: the host it looked up was "user:pw@host", retried as unknown
        return "expected a URL without user info (user:password@): give the key through the API key variable"
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number from 0 to 65535 raises here
        if not parts.hostname:
            return "no host name in the URL"
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
