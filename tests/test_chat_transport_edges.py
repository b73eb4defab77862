"""The chat client's transport at its edges: a rejected certificate, a Retry-After no calendar holds,
an empty data: line in a stream."""

from __future__ import annotations

import json
import ssl
import urllib.error

from conftest import local_server

from lewisrag.chat_client import ChatClient
from lewisrag.chat_client.retry import retry_after_seconds
from lewisrag.chat_client.stream import _events


def test_a_rejected_certificate_stops_the_client():
    """ssl.SSLCertVerificationError is a ValueError too: it was read as a request urllib cannot send,
    with no fix, so the client never stopped and each later request tried again."""
    c = ChatClient("https://127.0.0.1:9/v1", "m", "sk-x", max_retries=0)
    cert = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    for e in (cert, urllib.error.URLError(cert)):  # urllib wraps it
        what, _, transient, _, fix = c._failure(e)
        assert (what, transient, fix) == ("TLS certificate rejected", False, "tls")


def test_a_retry_after_date_past_any_calendar_is_no_wait():
    assert retry_after_seconds("Wed, 21 Oct 99999999999999999999 07:28:00 GMT") is None  # OverflowError before


def test_an_empty_data_line_is_no_event():
    """A keep-alive "data:" dispatched "", which failed the whole reply as "not JSON"."""
    assert list(_events('data: {"a": 1}\n\ndata:\n\ndata: [DONE]\n\n')) == [("message", '{"a": 1}'), ("message", "[DONE]")]
    assert list(_events("data:\ndata:\n\n")) == [("message", "\n")]  # two lines: the spec's one line break


def test_a_stream_with_keep_alive_data_lines_is_read():
    from http.server import BaseHTTPRequestHandler

    def chunk(text, finish=None):
        return "data: " + json.dumps({"choices": [{"delta": {"content": text}, "finish_reason": finish}]}) + "\n\n"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            body = (chunk("Ana ") + "data:\n\n" + chunk("Kel", "stop") + "data: [DONE]\n\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with local_server(Handler) as url:
        assert ChatClient(url, "m", "sk-x", max_retries=0).complete("s", "u").strip() == "Ana Kel"
