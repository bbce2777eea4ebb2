"""Bounded JSON Lines trace of controller decisions.

The engine step only appends the record (a dict, or an object with ``to_json()`` that the
writer thread calls, off the engine's path) to a list; every ``batch`` records the list goes to
a bounded queue (``put_nowait``) and a daemon thread encodes (:mod:`vllm_hust_vspec.host.jsonl`,
one C call per batch), writes and flushes the lines. The writer shares the GIL with the engine
loop, so it must be brief: waking it for every record, or encoding record by record with
:mod:`json`, cost the engine measurable time per step. When the queue is full
a batch is dropped and counted, so tracing can never block a step. :meth:`TraceWriter.close`
(scheduler shutdown, or ``atexit``) hands over the last records, drains the queue and closes
the file.

The format is :mod:`vllm_hust_vspec.adaptive.trace_record`: each run (each scheduler the
plugin attaches to) opens with a :class:`TraceHeader` line, written at once, so traces appended
across restarts stay separable (``vllm-hust-vspec-sim --trace-run``); then one
:class:`TraceRecord` line per completed engine step, in step order.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from vllm_hust_vspec.adaptive.trace_record import TraceHeader
from vllm_hust_vspec.host import startup_faults
from vllm_hust_vspec.host.background import Background, close_at_exit
from vllm_hust_vspec.host.jsonl import EncodeError, encode_lines

if TYPE_CHECKING:
    from vllm_hust_vspec.adaptive.cost_prior import CostPrior
    from vllm_hust_vspec.settings import Settings

logger = logging.getLogger("vllm_hust_vspec.trace")

LOG_SINK = "log"  # adaptive_trace given as a bare switch: the lines go to the server log
DEFAULT_CAPACITY = 65536  # records queued at most
DEFAULT_BATCH = 64  # records per hand-over to the writer thread


def _ends_mid_line(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            if fh.tell() == 0:
                return False
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) != b"\n"
    except OSError:
        return False


def run_header(settings_fingerprint: str, prior: str = "none",
               host: dict[str, Any] | None = None) -> TraceHeader:
    """The header that opens one run of the trace (``prior``: the controller's cost prior;
    ``host``: :func:`host_facts`)."""
    from vllm_hust_vspec._version import __version__

    return TraceHeader(run=uuid.uuid4().hex[:12], started=round(time.time(), 3),
                       pid=os.getpid(), vspec=__version__, settings=settings_fingerprint,
                       prior=prior, host=host)


def host_facts(scheduler: Any, max_gamma: int, refill: int) -> dict[str, Any]:
    """What a re-calibration of the step cost reads from a trace about its engine: the gamma
    range, refill, batch and token limits, and the graph capture sizes (empty when the
    engine runs no graphs, since then nothing is padded)."""
    config = getattr(scheduler, "vllm_config", None)
    compilation = getattr(config, "compilation_config", None)
    mode = getattr(compilation, "cudagraph_mode", None)
    mode_name = str(getattr(mode, "name", mode)) if mode is not None else "NONE"
    sizes = getattr(compilation, "cudagraph_capture_sizes", None) or []
    limits = getattr(config, "scheduler_config", None)
    return {
        "max_gamma": max_gamma,
        "refill": refill,
        "max_num_seqs": int(getattr(limits, "max_num_seqs", 0) or 0),
        "max_num_batched_tokens": int(getattr(limits, "max_num_batched_tokens", 0) or 0),
        "graph_mode": mode_name,
        "capture_sizes": [] if mode_name == "NONE" else sorted({int(s) for s in sizes}),
    }


def open_trace(settings: Settings, prior: CostPrior | None,
               host: dict[str, Any] | None = None) -> TraceWriter | None:
    """The trace ``settings`` ask for (None: none), its header naming the controller's
    cost prior and the engine's ``host`` facts."""
    if not settings.adaptive_trace:
        return None
    return TraceWriter(settings.adaptive_trace, header=run_header(
        settings.fingerprint(), prior.source if prior is not None else "none", host))


class JsonRecord(Protocol):
    """A record the writer thread turns into its JSON object (e.g. ``TraceRecord``)."""

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the line."""
        ...


def _as_json(record: dict[str, Any] | JsonRecord) -> dict[str, Any]:
    return record if isinstance(record, dict) else record.to_json()


class _LogLines:
    """A sink that logs each line (``adaptive_trace`` given as a switch, as 0.14.3 read it)."""

    def write(self, data: bytes) -> int:
        for line in data.decode().splitlines():
            if line:
                logger.info("vSpec adaptive trace: %s", line)
        return len(data)

    def flush(self) -> None:
        """Nothing is buffered."""

    def close(self) -> None:
        """Nothing to close."""


class TraceWriter:
    """Writes dict records as JSON lines from a background thread (to a file, or to the
    server log when the path is :data:`LOG_SINK`)."""

    def __init__(
        self,
        path: str | Path,
        *,
        capacity: int = DEFAULT_CAPACITY,
        batch: int = DEFAULT_BATCH,
        header: TraceHeader | None = None,
    ) -> None:
        self.path = Path(path)
        try:
            cut_off = False
            if str(path) == LOG_SINK:
                self._file: Any = _LogLines()
            else:
                startup_faults.inject("trace")  # test-only, off by default
                self.path.parent.mkdir(parents=True, exist_ok=True)
                cut_off = _ends_mid_line(self.path)
                self._file = self.path.open("ab")
            if header is not None:
                # after a crash mid-line, the header starts a fresh line of its own
                self._file.write((b"\n" if cut_off else b"") + encode_lines([header.to_json()]))
                self._file.flush()
        except OSError as exc:
            raise OSError(
                f"vSpec adaptive_trace: cannot open '{self.path}' for writing: {exc}. "
                f"Set HUST_VSPEC_ADAPTIVE_TRACE to a writable path or unset it."
            ) from exc
        self._batch = max(1, batch)
        self._pending: list[dict[str, Any] | JsonRecord] = []
        self.dropped = 0
        self.written = 0
        self._closed = False
        self._lock = threading.Lock()
        self._background = Background("vspec-trace", self._write_batches,
                                  capacity // self._batch)
        self._atexit = close_at_exit(self)

    def write(self, record: dict[str, Any] | JsonRecord) -> bool:
        """Buffer one record; never blocks. Returns False when the writer is closed."""
        if self._closed:
            return False
        pending = self._pending
        pending.append(record)
        if len(pending) >= self._batch:
            self.push()
        return True

    def push(self) -> None:
        """Queue the buffered records for the writer thread now (dropped and counted if the
        queue is full). The hook calls it when the engine goes idle."""
        records, self._pending = self._pending, []
        if records and not self._background.submit(records):
            self.dropped += len(records)

    def _write_batches(self, batches: list[list[Any]]) -> None:
        self._write_lines([r for b in batches for r in b])

    def _write_lines(self, batch: list[Any]) -> None:
        try:
            self._file.write(encode_lines([_as_json(r) for r in batch]))
            self._file.flush()
            self.written += len(batch)
        except (OSError, *EncodeError):
            logger.exception("vSpec trace: writing %s failed; dropping records", self.path)
            self.dropped += len(batch)

    def flush(self, timeout: float = 5.0) -> None:
        """Wait (bounded) until everything written so far is on disk; for tests/shutdown."""
        self.push()
        self._background.wait_idle(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Drain, stop the thread and close the file. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self.push()
            self._closed = True
        if not self._background.close(timeout):
            logger.warning("vSpec trace: queue stuck; closing %s without draining", self.path)
        with contextlib.suppress(OSError):
            self._file.close()
        atexit.unregister(self._atexit)
        if self.dropped:
            logger.warning("vSpec trace: %d records dropped (queue full) in %s",
                           self.dropped, self.path)


__all__ = ["DEFAULT_BATCH", "DEFAULT_CAPACITY", "LOG_SINK", "JsonRecord", "TraceWriter",
           "run_header"]
