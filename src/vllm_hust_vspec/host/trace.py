"""Bounded JSON Lines trace of controller decisions.

The engine step only appends to a bounded in-memory queue (``put_nowait``); a daemon thread
writes and flushes lines. When the queue is full records are dropped and counted, so tracing
can never block or slow a step. :meth:`TraceWriter.close` (scheduler shutdown, or ``atexit``)
drains what is queued and closes the file.

Record schema (one object per completed engine step, in step order)::

    {"t": wall-clock seconds, "step": n, "batch": decoding requests, "gamma": gamma verified
     in this step (the arm the reward belongs to), "decided": gamma chosen at this step's
     schedule (drafted after it), "drafted": draft tokens verified, "accepted": accepted
     drafts, "committed": tokens appended, "interval_s": wall interval, "reward":
     committed / interval_s, "steady": no prefill in the step, "admitted": requests admitted,
     "waiting": queue length after scheduling, "held": refill admission held the queue,
     "fallback": controller failed and the fixed upper bound is in force}
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import queue
import threading
import weakref
from pathlib import Path
from typing import Any

logger = logging.getLogger("vllm_hust_vspec.trace")

DEFAULT_CAPACITY = 65536
_CLOSE = object()


class TraceWriter:
    """Writes dict records as JSON lines from a background thread."""

    def __init__(self, path: str | Path, *, capacity: int = DEFAULT_CAPACITY) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            raise OSError(
                f"vSpec adaptive_trace: cannot open '{self.path}' for writing: {exc}. "
                f"Set HUST_VSPEC_ADAPTIVE_TRACE to a writable path or unset it."
            ) from exc
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, capacity))
        self.dropped = 0
        self.written = 0
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="vspec-trace", daemon=True)
        self._thread.start()
        ref = weakref.ref(self)

        def _close_at_exit() -> None:
            writer = ref()
            if writer is not None:
                writer.close()

        self._atexit = _close_at_exit
        atexit.register(self._atexit)

    def write(self, record: dict[str, Any]) -> bool:
        """Queue one record; never blocks. Returns False when it was dropped."""
        if self._closed:
            return False
        try:
            self._queue.put_nowait(record)
            return True
        except queue.Full:
            self.dropped += 1
            return False

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _CLOSE:
                break
            batch = [item]
            # Drain what is already queued so the file sees few, larger writes.
            while True:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _CLOSE:
                    self._write_lines(batch)
                    return
                batch.append(nxt)
            self._write_lines(batch)

    def _write_lines(self, batch: list[Any]) -> None:
        try:
            self._file.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in batch))
            self._file.flush()
            self.written += len(batch)
        except (OSError, TypeError, ValueError):
            logger.exception("vSpec trace: writing %s failed; dropping records", self.path)
            self.dropped += len(batch)

    def flush(self, timeout: float = 5.0) -> None:
        """Wait (bounded) until everything queued so far is written; for tests/shutdown."""
        deadline = threading.Event()
        # Poll the queue rather than join(): join would wait forever if the writer died.
        waited = 0.0
        while not self._queue.empty() and waited < timeout and self._thread.is_alive():
            deadline.wait(0.01)
            waited += 0.01

    def close(self, timeout: float = 5.0) -> None:
        """Drain, stop the thread and close the file. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._queue.put(_CLOSE, timeout=timeout)
        except queue.Full:
            logger.warning("vSpec trace: queue stuck; closing %s without draining", self.path)
        self._thread.join(timeout)
        with contextlib.suppress(OSError):
            self._file.close()
        atexit.unregister(self._atexit)
        if self.dropped:
            logger.warning("vSpec trace: %d records dropped (queue full) in %s",
                           self.dropped, self.path)


__all__ = ["DEFAULT_CAPACITY", "TraceWriter"]
