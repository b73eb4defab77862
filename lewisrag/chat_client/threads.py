"""Requests in flight on threads that never hold the process at exit (`map_in_threads`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import TypeVar

T, R = TypeVar("T"), TypeVar("R")
MAX_WORKERS = 1024  # requests in flight at most (--concurrency): a thread each, and past a process's limit a traceback


def map_in_threads(fn: Callable[[T], R], items: Iterable[T], workers: int) -> list[R]:
    """`[fn(x) for x in items]`, computed on up to `workers` threads; the first failure (in the
    items' order) is raised.

    Why not `ThreadPoolExecutor.map`: Python joins an executor's threads when the process exits, so
    Ctrl-C or SIGTERM (a KeyboardInterrupt in the main thread, `lewisrag.cli`) waited for every
    request in flight and every retry of every queued item: minutes against a failing endpoint.
    These threads are daemons and take no new item once the caller is interrupted or an item has
    failed; the caller returns at once, and a request still in flight ends with the process.

    >>> map_in_threads(lambda x: x * x, range(5), workers=3)
    [0, 1, 4, 9, 16]
    """
    todo = list(enumerate(items))
    if workers <= 1 or len(todo) <= 1:
        return [fn(x) for _, x in todo]
    results: list = [None] * len(todo)
    failed: dict[int, BaseException] = {}
    lock, stop, finished = threading.Lock(), threading.Event(), threading.Event()
    running = [min(workers, len(todo))]
    todo.reverse()  # pop() from the end takes the items in order

    def work() -> None:
        try:
            while not stop.is_set():
                with lock:
                    if not todo:
                        break
                    i, x = todo.pop()
                try:
                    results[i] = fn(x)
                except BaseException as e:  # noqa: BLE001 - handed to the caller, which raises it
                    failed[i] = e
                    stop.set()
        finally:
            with lock:
                running[0] -= 1
                if not running[0]:
                    finished.set()

    for _ in range(running[0]):
        threading.Thread(target=work, daemon=True, name="lewisrag-request").start()
    try:
        finished.wait()  # a signal interrupts this wait (POSIX): Ctrl-C is not held up by the threads
    finally:
        stop.set()  # interrupted: the threads take nothing more
    if failed:
        raise failed[min(failed)]
    return results
