"""The front end's engine-dead path, completed for utility calls (runs in the API server).

vLLM 0.32's engine clients (``vllm/v1/engine/core_client.py``) answer a utility call (a method
the front end runs in the EngineCore: ``reset_mm_cache``, ``get_supported_tasks``, ...) through
a future that only an output from the engine resolves. When the EngineCore dies, vLLM's own
engine-dead path runs (its ``ENGINE_CORE_DEAD`` message ends the client's output receiver, the
process monitor marks the engine dead and shuts the client down), but no step of it fails the
futures still waiting, so their callers wait forever.

The API server makes two such calls between the engine's READY handshake and serving
(``build_async_engine_client_from_engine_args`` awaits ``reset_mm_cache()``, ``build_and_serve``
awaits ``get_supported_tasks()``); vLLM's watchdog, which ends the server when the engine dies,
only starts once serving. An EngineCore process runs vSpec's start-up calibration in exactly
that window (in ``run_busy_loop``, before the loop reads the first input: the plugins load
inside ``EngineCore.__init__``, too late to wrap the constructor that sends READY). A fault
there killed the EngineCore and left ``vllm serve`` running with no engine, forever.

So once the output receiver stops, for whatever reason, every utility call still waiting fails
with vLLM's ``EngineDeadError``, and a call made after that fails at once: the waiting caller
raises, and the server exits as vLLM exits on any start-up error. Upstream:
vllm-project/vllm#56416 (open), which fixes the same in the client itself; with it in place
this finds nothing left to fail. Hosts without these methods are left alone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, MutableMapping
from typing import Any

from vllm_hust_vspec.host.patching import Patcher

logger = logging.getLogger("vllm_hust_vspec.host")

CLIENT_MODULE = "vllm.v1.engine.core_client"
_WATCHED = "_vspec_dead_watch"


def fail_pending(results: MutableMapping[int, Any]) -> int:
    """Fail every future in ``results`` (a client's ``utility_results``) that is still
    waiting with ``EngineDeadError``, and forget them all; returns how many it failed."""
    from vllm.v1.engine.exceptions import EngineDeadError

    failed = 0
    for call_id in list(results):
        future = results.pop(call_id, None)
        if future is None or future.done():
            continue
        try:
            future.set_exception(EngineDeadError())
            failed += 1
        except Exception:  # resolved meanwhile (InvalidStateError of either future kind)
            continue
    return failed


def _log_failed(count: int) -> None:
    if count:
        logger.error("vSpec: the EngineCore is gone; %d utility call(s) waiting for it now "
                     "fail (EngineDeadError) instead of waiting forever", count)


def make_ensure_output_task_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``AsyncMPClient._ensure_output_queue_task``: when the output task it started (or found)
    ends, the utility calls still waiting fail; when it has already ended, they fail now."""

    def _ensure_output_queue_task(self: Any) -> Any:
        out = orig(self)
        task = getattr(self.resources, "output_queue_task", None)
        results = getattr(self, "utility_results", None)
        if task is None or results is None:
            return out
        if task.done():
            _log_failed(fail_pending(results))
        elif not getattr(task, _WATCHED, False):
            setattr(task, _WATCHED, True)
            task.add_done_callback(lambda _task: _log_failed(fail_pending(results)))
        return out

    return _ensure_output_queue_task


def make_sync_init_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``SyncMPClient.__init__``: a small daemon thread waits for the output thread to end
    and then fails the utility calls still waiting (``call_utility`` blocks on
    ``future.result()``). Calls made later fail in ``ensure_alive``: both ways the output
    thread ends (the engine's dead message, the client's shutdown) mark the engine dead
    first."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        orig(self, *args, **kwargs)
        thread = getattr(self, "output_queue_thread", None)
        results = getattr(self, "utility_results", None)
        if thread is None or results is None:
            return

        def watch() -> None:
            thread.join()
            _log_failed(fail_pending(results))

        threading.Thread(target=watch, name="VSpecEngineDeadWatch", daemon=True).start()

    return __init__


def install(patcher: Patcher) -> bool:
    """Patch the engine clients where the host has them; returns whether it did."""
    import importlib

    module = importlib.import_module(CLIENT_MODULE)
    async_cls = getattr(module, "AsyncMPClient", None)
    sync_cls = getattr(module, "SyncMPClient", None)
    if async_cls is None or not hasattr(async_cls, "_ensure_output_queue_task"):
        logger.debug("vSpec: no AsyncMPClient._ensure_output_queue_task; engine clients "
                     "left unchanged")
        return False
    patcher.wrap(async_cls, "_ensure_output_queue_task", make_ensure_output_task_wrapper)
    if sync_cls is not None:
        patcher.wrap(sync_cls, "__init__", make_sync_init_wrapper)
    return True


__all__ = ["CLIENT_MODULE", "fail_pending", "install", "make_ensure_output_task_wrapper",
           "make_sync_init_wrapper"]
