"""Graph-mode guards for vllm-ascend: ``mtp_strict_graph`` and per-gamma graph bookkeeping.

With FULL / FULL_DECODE_ONLY graphs the NPU runner decides per batch, in
``NPUModelRunner._determine_batch_execution_and_padding``, whether the step replays a full
graph, a piecewise graph or runs eager. A decode batch whose width (1 + gamma) has no full
graph silently runs slower; for MTP frontier measurements that pollutes every result. With
``mtp_strict_graph`` on, such a batch stops the server with an error naming the width, the
batch and the capture sizes instead.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vllm_hust_vspec.host.patching import Patcher


class MtpStrictGraphError(RuntimeError):
    """An MTP decode batch would run without its full graph while mtp_strict_graph is on."""


@dataclass(frozen=True)
class BatchShape:
    """What the runner is about to execute."""

    num_tokens: int
    num_reqs: int
    max_query_len: int
    all_decode: bool

    @property
    def uniform(self) -> bool:
        """Every request has the same query length."""
        return self.num_reqs > 0 and self.num_tokens == self.max_query_len * self.num_reqs

    @property
    def is_decode(self) -> bool:
        """A pure decode step (every request past prefill, same width 1 + gamma)."""
        return self.all_decode and self.uniform

    @property
    def gamma(self) -> int:
        """Draft tokens per request being verified (width - 1)."""
        return self.max_query_len - 1


def mode_name(mode: Any) -> str:
    """``CUDAGraphMode.FULL`` -> ``"FULL"`` without importing vLLM."""
    return str(getattr(mode, "name", mode)).rsplit(".", 1)[-1]


def describe_descriptor(desc: Any) -> str:
    """``BatchDescriptor(num_tokens=8, num_reqs=4, uniform=True, ...)`` without vLLM."""
    if desc is None:
        return "none"
    names = ("num_tokens", "num_reqs", "uniform", "has_lora", "num_active_loras")
    fields = [f"{n}={getattr(desc, n)!r}" for n in names if hasattr(desc, n)]
    return f"{type(desc).__name__}({', '.join(fields)})" if fields else repr(desc)


def check_strict(shape: BatchShape, mode: Any, capture_sizes: Any = None,
                 batch_descriptor: Any = None) -> None:
    """Raise :class:`MtpStrictGraphError` when a decode batch misses its full graph."""
    if not shape.is_decode or mode_name(mode) == "FULL":
        return
    sizes = sorted(capture_sizes) if capture_sizes else "unknown"
    raise MtpStrictGraphError(
        f"vSpec mtp_strict_graph: an MTP decode batch of {shape.num_reqs} requests x width "
        f"{shape.max_query_len} (gamma {shape.gamma}, {shape.num_tokens} tokens) would run "
        f"{mode_name(mode)} instead of a FULL graph (dispatched batch descriptor "
        f"{describe_descriptor(batch_descriptor)}). Capture sizes: {sizes}. Capture every "
        f"verify width the controller may pick (--graph-mode full-decode-only with "
        f"--capture-policy exact, or narrow --adaptive-min-gamma/--gamma), or pass "
        f"--no-mtp-strict-graph to allow eager fallback (results then mix graph and eager)."
    )


def _all_decode(runner: Any, num_reqs: int) -> bool:
    batch = getattr(runner, "input_batch", None)
    computed = getattr(batch, "num_computed_tokens_cpu", None)
    if computed is None:
        return False
    return bool((computed[:num_reqs] > 0).all())


def _capture_sizes(runner: Any) -> Any:
    cfg = getattr(getattr(runner, "vllm_config", None), "compilation_config", None)
    return getattr(cfg, "cudagraph_capture_sizes", None)


def make_strict_dispatch_wrapper(
    original: Callable[..., Any], enabled: Callable[[], bool]
) -> Callable[..., Any]:
    """Wrap ``_determine_batch_execution_and_padding``; check real steps, not capture/profile
    runs (those pass ``force_eager`` / ``force_uniform_decode``)."""
    sig = inspect.signature(original)

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if not enabled():
            return result
        bound = sig.bind(self, *args, **kwargs)
        a = bound.arguments
        if a.get("force_eager") or a.get("force_uniform_decode") is not None:
            return result
        num_reqs = int(a["num_reqs"])
        shape = BatchShape(
            num_tokens=int(a["num_tokens"]),
            num_reqs=num_reqs,
            max_query_len=int(a["max_num_scheduled_tokens"]),
            all_decode=_all_decode(self, num_reqs),
        )
        check_strict(shape, result[0], _capture_sizes(self), batch_descriptor=result[1])
        return result

    return wrapper


def install_strict_graph(patcher: Patcher, runner_cls: type, enabled: Callable[[], bool]) -> None:
    """Patch the NPU runner's per-batch graph decision with the strict check."""
    patcher.wrap(
        runner_cls, "_determine_batch_execution_and_padding",
        lambda orig: make_strict_dispatch_wrapper(orig, enabled),
    )


def verify_widths(gammas: tuple[int, ...]) -> tuple[int, ...]:
    """Query widths (1 + gamma) the target must have decode graphs for."""
    return tuple(sorted({1 + g for g in gammas}))


__all__ = [
    "BatchShape",
    "MtpStrictGraphError",
    "check_strict",
    "describe_descriptor",
    "install_strict_graph",
    "make_strict_dispatch_wrapper",
    "mode_name",
    "verify_widths",
]
