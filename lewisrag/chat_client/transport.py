"""One attempt on the wire: urllib's opener that follows no redirect and whose connections a
watchdog shuts down at the attempt's deadline (`_open`, `_Watchdog`), the body read against that
deadline (`_read`), and which failures found no server (`_unreachable`)."""

from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.error
import urllib.request

class _RefuseRedirect(urllib.request.HTTPRedirectHandler):
    """No redirect is followed: the 3xx reaches the caller as an HTTPError (see the package docstring)."""

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


def _unreachable(e: BaseException) -> bool:
    """Whether an attempt failed before any server was reached: the connection refused (nothing
    listens there) or the host name not resolved."""
    if isinstance(e, urllib.error.URLError) and isinstance(e.reason, Exception):
        e = e.reason
    return isinstance(e, (ConnectionRefusedError, socket.gaierror))
