"""`timeout` bounds an attempt whole: an endpoint that sends its status line and headers a byte at a
time (each byte well inside the socket's timeout) held a request for as long as it kept trickling,
since urllib reads the headers before lewisrag sees the reply. A watchdog now shuts the attempt's
socket down at its deadline: the attempt fails as a timeout (retried like any other), on every
thread at once, and no timer outlives the attempt it watched."""

from __future__ import annotations

import json
import socket
import threading
import time
from contextlib import contextmanager

import pytest

from lewisrag.chat_client import ChatClient, ChatError, map_in_threads

KEY = "sk-timeout-SECRET-3e8a1f"
GOOD = json.dumps({"choices": [{"message": {"content": "Ana Kel [1]"}, "finish_reason": "stop"}]}).encode()


@contextmanager
def raw_server(mode: str, stop_after: float = 8.0):
    """A bare TCP endpoint (no http.server: it would send its status line at once). "headers": the
    status line and headers a byte every 0.05 s, 500 bytes of them (25 s, cut at `stop_after`);
    "silent": reads the request and says nothing; "good": a whole reply at once."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(32)
    done = threading.Event()

    def handle(conn: socket.socket) -> None:
        end = time.monotonic() + stop_after
        try:
            conn.settimeout(stop_after)
            conn.recv(1 << 16)
            if mode == "good":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(GOOD)).encode() + b"\r\nConnection: close\r\n\r\n" + GOOD)
                return
            head = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 480 + b"\r\n"
            for i in range(len(head)):
                if mode == "silent" or done.is_set() or time.monotonic() > end:
                    break
                conn.sendall(head[i : i + 1])
                time.sleep(0.05)
            while mode == "silent" and not done.is_set() and time.monotonic() < end:
                time.sleep(0.05)
        except OSError:
            pass  # the client shut the connection: the point
        finally:
            conn.close()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}/v1"
    finally:
        done.set()
        srv.close()


def client(url: str, **kw) -> ChatClient:
    return ChatClient(url, "m", KEY, **{"timeout": 0.5, "max_retries": 0, "backoff": 0.001, "seed": 0, **kw})


def test_headers_that_trickle_in_are_bounded_by_the_timeout():
    """The status line and headers came a byte per 0.05 s: urllib read them for 25 s, each byte inside the socket timeout."""
    with raw_server("headers") as url:
        start = time.monotonic()
        with pytest.raises(ChatError, match=r"^timeout after 0.5s \(1 attempt\)$"):
            client(url).complete("s", "u")
        assert time.monotonic() - start < 1.0  # 2x the timeout, not the 25 s the endpoint trickles
        c = client(url, max_retries=1)
        c.count(answered=1)  # an earlier request got its reply (before any, a timed-out request stops the client)
        start = time.monotonic()
        with pytest.raises(ChatError, match=r"^timeout after 0.5s \(2 attempts\)$"):  # transient: retried
            c.complete("s", "u")
        assert time.monotonic() - start < 2.0 and c.usage["retries"] == 1 and c.usage["calls"] == 2
        assert c.broken is None  # a timeout may heal: the client goes on asking


def test_a_silent_endpoint_is_still_a_timeout():
    with raw_server("silent") as url:
        start = time.monotonic()
        with pytest.raises(ChatError, match=r"^timeout after 0.5s \(1 attempt\)$"):
            client(url).complete("s", "u")
        assert time.monotonic() - start < 1.0


def test_each_thread_is_bounded_alone_and_good_replies_on_other_threads_are_untouched():
    """Several requests at once, half to a trickling endpoint: each watchdog shuts its own attempt's
    socket only (a shutdown that hit another thread's connection would cut a good reply)."""
    with raw_server("headers") as slow, raw_server("good") as fast:
        slow_client, fast_client = client(slow, max_workers=8), client(fast, max_workers=8, timeout=5.0)

        def ask(i: int):
            start = time.monotonic()
            try:
                return (slow_client if i % 2 else fast_client).complete("s", str(i)), time.monotonic() - start
            except ChatError as e:
                return str(e), time.monotonic() - start

        got = map_in_threads(ask, range(16), workers=8)
    for i, (text, seconds) in enumerate(got):
        if i % 2:
            assert text == "timeout after 0.5s (1 attempt)" and seconds < 1.5, (i, text, seconds)
        else:
            assert text == "Ana Kel [1]", (i, text)


def test_no_watchdog_outlives_its_attempt():
    def timers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if isinstance(t, threading.Timer) and t.is_alive()]

    before = set(timers())
    with raw_server("good") as url:
        c = client(url, timeout=30.0)
        for i in range(20):
            assert c.complete("s", str(i)) == "Ana Kel [1]"
    deadline = time.monotonic() + 5
    while set(timers()) - before and time.monotonic() < deadline:  # a cancelled timer's thread ends at once
        time.sleep(0.01)
    assert not set(timers()) - before  # 20 replies, each well inside 30 s: every timer was cancelled
