"""A fake ACL graph for CPU: ``torch.npu.NPUGraph`` / ``torch.npu.graph`` and the graph-task
API that vllm-ascend's attention backends use to patch a captured graph between replays.

Nothing is captured for real: the code inside ``with torch.npu.graph(g):`` runs eagerly on CPU
(exactly once, as in a real capture, so the captured output tensors are real). What the fake
keeps is the *bookkeeping*: a :class:`GraphLog` of every capture (graph id, pool, stream, the
vLLM forward context's batch descriptor and runtime mode at capture time, a snapshot of
vllm-ascend's graph params) and every replay, plus the graph-task group / update calls.

Replay semantics: a real replay re-runs the recorded kernels on the same (static) input
buffers and writes into the same output buffers. ``FakeNPUGraph.replay()`` logs the replay and
then runs any replay callbacks registered during capture. :func:`replaying` wraps a runnable so
that, when it is called inside a capture, it registers a callback that re-runs it on the very
same argument objects and copies the result into the captured output tensors in place, which
emulates static-buffer replay faithfully enough for graph bookkeeping tests.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

_ids = itertools.count(1)
_state = threading.local()


@dataclass
class GraphLog:
    """Everything the fake graph layer saw, in order."""

    events: list[dict[str, Any]] = field(default_factory=list)

    def add(self, kind: str, **info: Any) -> dict[str, Any]:
        entry = {"event": kind, **info}
        self.events.append(entry)
        return entry

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == kind]

    @property
    def captures(self) -> list[dict[str, Any]]:
        return self.of("capture_end")

    @property
    def replays(self) -> list[dict[str, Any]]:
        return self.of("replay")

    def clear(self) -> None:
        self.events.clear()


LOG = GraphLog()


def _capturing_stack() -> list[FakeNPUGraph]:
    stack = getattr(_state, "capturing", None)
    if stack is None:
        stack = _state.capturing = []
    return stack


def current_capture() -> FakeNPUGraph | None:
    stack = _capturing_stack()
    return stack[-1] if stack else None


def is_current_stream_capturing() -> bool:
    return current_capture() is not None


def _describe(value: Any) -> Any:
    """A JSON-friendly description (BatchDescriptor and enums included)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "_asdict"):
        return {k: _describe(v) for k, v in value._asdict().items()}
    if hasattr(value, "__dataclass_fields__"):
        return {k: _describe(getattr(value, k)) for k in value.__dataclass_fields__}
    if hasattr(value, "name") and hasattr(value, "value"):  # enum
        return value.name
    if isinstance(value, dict):
        return {str(k): _describe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    return repr(value)


def forward_context_info() -> dict[str, Any]:
    """Batch descriptor / runtime mode of vLLM's forward context, if one is set."""
    fc_mod = sys.modules.get("vllm.forward_context")
    if fc_mod is None:
        return {}
    try:
        if not fc_mod.is_forward_context_available():
            return {}
        fc = fc_mod.get_forward_context()
    except Exception:  # pragma: no cover - older/newer vLLM layouts
        return {}
    return {
        "batch_descriptor": _describe(getattr(fc, "batch_descriptor", None)),
        "runtime_mode": _describe(getattr(fc, "cudagraph_runtime_mode", None)),
    }


def graph_params_snapshot() -> dict[str, Any]:
    """Sizes of vllm-ascend's graph params (target, draft, draft prefill), if imported."""
    mod = sys.modules.get("vllm_ascend.compilation.acl_graph")
    if mod is None:
        return {}
    out: dict[str, Any] = {}
    for label, getter in (("target", "get_graph_params"), ("draft", "get_draft_graph_params"),
                          ("draft_prefill", "get_draft_graph_prefill_params")):
        fn = getattr(mod, getter, None)
        params = fn() if fn else None
        if params is None:
            continue
        out[label] = {
            "sizes": sorted(params.workspaces),
            "attn_params": {k: len(v) for k, v in params.attn_params.items() if v},
            "handles": {k: len(v) for k, v in params.handles.items() if v},
            "events": {k: len(v) for k, v in params.events.items() if v},
            "workspaces_set": sorted(k for k, v in params.workspaces.items() if v is not None),
        }
    return out


class FakeNPUGraph:
    """``torch.npu.NPUGraph`` look-alike: records capture and replay."""

    def __init__(self, keep_graph: bool = False) -> None:
        self.id = next(_ids)
        self.keep_graph = keep_graph
        self.captured = False
        self.capture_info: dict[str, Any] = {}
        self.replay_count = 0
        self.task_groups: list[TaskGroupHandle] = []
        self._replay_callbacks: list[Callable[[], None]] = []
        self.pool: Any = None

    def __repr__(self) -> str:
        return f"FakeNPUGraph(id={self.id}, captured={self.captured}, replays={self.replay_count})"

    # -- capture ------------------------------------------------------------------------------
    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        if self.captured:
            raise RuntimeError(f"fake NPU: graph {self.id} was already captured")
        self.pool = pool
        _capturing_stack().append(self)
        LOG.add("capture_begin", graph=self.id, pool=_describe(pool),
                stream=current_stream_id(), **forward_context_info())

    def capture_end(self) -> None:
        stack = _capturing_stack()
        assert stack and stack[-1] is self, "fake NPU: capture_end without capture_begin"
        stack.pop()
        self.captured = True
        self.capture_info = {"graph": self.id, "pool": _describe(self.pool),
                             "stream": current_stream_id(), **forward_context_info(),
                             "task_groups": len(self.task_groups),
                             "graph_params": graph_params_snapshot()}
        LOG.add("capture_end", **self.capture_info)

    # -- replay -------------------------------------------------------------------------------
    def add_replay_callback(self, fn: Callable[[], None]) -> None:
        self._replay_callbacks.append(fn)

    def replay(self) -> None:
        if not self.captured:
            raise RuntimeError(f"fake NPU: replay of graph {self.id} that was never captured")
        self.replay_count += 1
        LOG.add("replay", graph=self.id, replay=self.replay_count,
                captured_for=self.capture_info.get("batch_descriptor"),
                **{f"now_{k}": v for k, v in forward_context_info().items()})
        for fn in self._replay_callbacks:
            fn()

    def reset(self) -> None:
        LOG.add("reset", graph=self.id)
        self.captured = False
        self._replay_callbacks.clear()

    def pool_handle(self) -> tuple[str, int]:
        return ("fake-pool", self.id)

    def debug_dump(self, path: str) -> None:
        raise NotImplementedError("fake NPU: NPUGraph.debug_dump has no CPU equivalent")

    def enable_debug_mode(self) -> None:
        pass


@contextlib.contextmanager
def graph(npu_graph: FakeNPUGraph, pool: Any = None, stream: Any = None,
          capture_error_mode: str = "global", auto_dispatch_capture: bool = False
          ) -> Iterator[FakeNPUGraph]:
    """``torch.npu.graph`` look-alike: the block runs eagerly; capture is recorded."""
    from . import torch_npu_stub

    ctx = torch_npu_stub.stream(stream) if stream is not None else contextlib.nullcontext()
    with ctx:
        npu_graph.capture_begin(pool=pool, capture_error_mode=capture_error_mode)
        try:
            yield npu_graph
        except BaseException:
            _capturing_stack().pop()
            LOG.add("capture_failed", graph=npu_graph.id)
            raise
        npu_graph.capture_end()


_pool_ids = itertools.count(1)


def graph_pool_handle() -> tuple[str, int]:
    handle = ("fake-pool", next(_pool_ids))
    LOG.add("graph_pool_handle", pool=list(handle))
    return handle


def current_stream_id() -> int | None:
    from . import torch_npu_stub

    return torch_npu_stub.current_stream().stream_id


# -- graph task groups (attention kernels whose args are patched before replay) ---------------
class TaskGroupHandle:
    """``torch_npu._C._NPUTaskGroupHandle`` look-alike."""

    _ids = itertools.count(1)

    def __init__(self, graph_id: int | None, stream_id: int | None) -> None:
        self.id = next(self._ids)
        self.graph_id = graph_id
        self.stream_id = stream_id
        self.updates = 0

    def __repr__(self) -> str:
        return f"TaskGroupHandle(id={self.id}, graph={self.graph_id}, updates={self.updates})"


_open_groups: list[dict[str, Any]] = []
_open_updates: list[TaskGroupHandle] = []


def graph_task_group_begin(stream: Any = None) -> None:
    g = current_capture()
    _open_groups.append({"graph": g, "stream": getattr(stream, "stream_id", None)})
    LOG.add("task_group_begin", graph=g.id if g else None,
            stream=getattr(stream, "stream_id", None))


def graph_task_group_end(stream: Any = None) -> TaskGroupHandle:
    if not _open_groups:
        raise RuntimeError("fake NPU: graph_task_group_end without graph_task_group_begin")
    opened = _open_groups.pop()
    g = opened["graph"]
    handle = TaskGroupHandle(g.id if g else None, opened["stream"])
    if g is not None:
        g.task_groups.append(handle)
    LOG.add("task_group_end", graph=handle.graph_id, handle=handle.id)
    return handle


def graph_task_update_begin(stream: Any, handle: TaskGroupHandle) -> None:
    if not isinstance(handle, TaskGroupHandle):
        raise TypeError(
            f"fake NPU: graph_task_update_begin needs a task group handle, got {handle!r}")
    _open_updates.append(handle)
    LOG.add("task_update_begin", handle=handle.id, graph=handle.graph_id,
            stream=getattr(stream, "stream_id", None))


def graph_task_update_end(stream: Any = None) -> None:
    if not _open_updates:
        raise RuntimeError("fake NPU: graph_task_update_end without graph_task_update_begin")
    handle = _open_updates.pop()
    handle.updates += 1
    LOG.add("task_update_end", handle=handle.id, graph=handle.graph_id)


# -- replay emulation --------------------------------------------------------------------------
def _copy_into(dst: Any, src: Any) -> None:
    if isinstance(dst, torch.Tensor):
        dst.copy_(src)
    elif isinstance(dst, (list, tuple)):
        for d, s in zip(dst, src, strict=True):
            _copy_into(d, s)
    elif isinstance(dst, dict):
        for k in dst:
            _copy_into(dst[k], src[k])


def replaying(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``fn`` so that a capture of it can be replayed on CPU.

    Called inside a fake capture, the wrapper runs ``fn`` once (the capture run) and registers
    on the capturing graph a callback that, at each replay, re-runs ``fn`` on the same argument
    objects and copies the new result into the captured output tensors in place.
    """

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        g = current_capture()
        if g is not None:
            g.add_replay_callback(lambda: _copy_into(out, fn(*args, **kwargs)))
        return out

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper
