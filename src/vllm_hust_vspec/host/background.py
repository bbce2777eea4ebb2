"""A background writer: one daemon thread, a bounded queue the caller never waits on.

Used by the engine's decision trace (host/engine/trace.py) and the worker's diagnostics traces
(host/worker/v1/diagnostics.py). :meth:`Background.submit` never blocks a step: when the queue
is full the item is dropped and counted. The thread hands every item already queued when it
wakes to ``handle`` in one call, so files see few, larger writes. :func:`close_at_exit` closes
an owner at interpreter exit unless it was closed before.
"""

from __future__ import annotations

import atexit
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol

_STOP = object()


class Background:
    """Runs ``handle(items)`` on one daemon thread, items in the order they were submitted."""

    def __init__(self, name: str, handle: Callable[[list[Any]], None], capacity: int) -> None:
        self._handle = handle
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, capacity))
        self.dropped = 0  # items refused because the queue was full
        self.closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, item: Any, *, wait: float = 0.0) -> bool:
        """Queue an item; False (counted in ``dropped``) when closed or the queue stays full.
        ``wait`` bounds how long to wait for room (0: not at all)."""
        if self.closed:
            return False
        try:
            if wait > 0:
                self._queue.put(item, timeout=wait)
            else:
                self._queue.put_nowait(item)
        except queue.Full:
            self.dropped += 1
            return False
        return True

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            items = [item]
            while True:  # what is already queued goes in the same call
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    self._handle(items)
                    return
                items.append(nxt)
            self._handle(items)

    def wait_idle(self, timeout: float = 5.0) -> None:
        """Wait (bounded) until the queue is empty. Polls rather than joins, which would wait
        forever if the thread died."""
        pause = threading.Event()
        waited = 0.0
        while not self._queue.empty() and waited < timeout and self._thread.is_alive():
            pause.wait(0.01)
            waited += 0.01

    def close(self, timeout: float = 5.0) -> bool:
        """Let the thread run what is queued, then stop it (bounded waits). Idempotent; False
        when the queue stayed full, so the thread was left without draining."""
        if self.closed:
            return True
        self.closed = True
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            return False
        self._thread.join(timeout)
        return True


class _Closable(Protocol):
    def close(self) -> Any: ...


def close_at_exit(owner: _Closable) -> Callable[[], None]:
    """Register ``owner.close()`` to run at exit (without keeping ``owner`` alive); returns the
    callback for ``atexit.unregister`` when the owner closes first."""
    ref = weakref.ref(owner)

    def _close_at_exit() -> None:
        alive = ref()
        if alive is not None:
            alive.close()

    atexit.register(_close_at_exit)
    return _close_at_exit


__all__ = ["Background", "close_at_exit"]
