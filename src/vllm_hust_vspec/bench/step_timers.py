"""A vLLM general plugin that times each step's calls in a served engine, for
``scripts/profile_serve_steps.py`` (which registers it for the server; nothing else loads it).

With ``VSPEC_STEP_TIMERS_OUT=PREFIX`` set, every process that loads it appends one JSON line
per timed call to ``PREFIX.<pid>.jsonl``: ``[name, start_s, seconds, requests, tokens]``
(``requests`` / ``tokens``: the step's scheduled requests and tokens, -1 where unknown).
Timed: in the worker, ``Worker.execute_model`` and ``Worker.sample_tokens``; in the
EngineCore, its scheduler's ``schedule``, ``get_grammar_bitmask`` and ``update_from_output``,
wrapped on the instance once the busy loop runs, so outside whatever a plugin wrapped on the
class. Lines are written in batches of at most 1000 calls or half a second; the last batch of
a process killed at shutdown is lost.
"""

from __future__ import annotations

import atexit
import json
import os
import time
from collections.abc import Callable
from typing import Any

ENV = "VSPEC_STEP_TIMERS_OUT"
FLUSH_EVERY = 1000
# A short run never fills a batch and its processes are killed at shutdown (no atexit):
# batches are also written once they are this old.
FLUSH_AFTER_S = 0.5

_rows: list[tuple[str, float, float, int, int]] = []
_installed = False
_flushed_at = 0.0


def _flush() -> None:
    global _flushed_at
    _flushed_at = time.perf_counter()
    if not _rows:
        return
    with open(f"{os.environ[ENV]}.{os.getpid()}.jsonl", "a", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in _rows)
    _rows.clear()


def _size(scheduler_output: Any) -> tuple[int, int]:
    counts = getattr(scheduler_output, "num_scheduled_tokens", None)
    if isinstance(counts, dict):
        return len(counts), sum(counts.values())
    return -1, -1


def _timed(name: str, fn: Callable[..., Any], size_of: Callable[..., tuple[int, int]]
           ) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        result = fn(*args, **kwargs)
        _rows.append((name, start, time.perf_counter() - start, *size_of(args, result)))
        if len(_rows) >= FLUSH_EVERY or start - _flushed_at > FLUSH_AFTER_S:
            _flush()
        return result

    return timed


def _by_arg(index: int) -> Callable[..., tuple[int, int]]:
    return lambda args, result: _size(args[index] if len(args) > index else None)


def _time_engine(core: Any) -> None:
    sched = core.scheduler
    sched.schedule = _timed("schedule", sched.schedule, lambda a, r: _size(r))
    sched.get_grammar_bitmask = _timed("get_grammar_bitmask", sched.get_grammar_bitmask,
                                       _by_arg(0))
    sched.update_from_output = _timed("update_from_output", sched.update_from_output,
                                      _by_arg(0))


def register() -> None:
    """Install the timers when ``VSPEC_STEP_TIMERS_OUT`` is set (once per process)."""
    global _installed
    if _installed or not os.environ.get(ENV):
        return
    _installed = True
    from vllm.v1.engine.core import EngineCoreProc
    from vllm.v1.worker.gpu_worker import Worker

    for name in ("execute_model", "sample_tokens"):
        # args[0] is the worker itself
        setattr(Worker, name, _timed(name, getattr(Worker, name), _by_arg(1)))
    step = EngineCoreProc._process_engine_step

    def first_step(self: Any) -> Any:
        # The EngineCore loads plugins while it builds itself: its scheduler exists only now.
        if "_process_engine_step" not in vars(self):
            _time_engine(self)
            self._process_engine_step = step.__get__(self)
        return self._process_engine_step()

    EngineCoreProc._process_engine_step = first_step
    atexit.register(_flush)
