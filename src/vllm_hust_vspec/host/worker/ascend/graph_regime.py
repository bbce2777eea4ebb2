"""What both graph-per-gamma regimes share: the per-runner state and the regime interface.

A regime is how target graphs are keyed: per verify width (FULL decode graphs with a separate
routine, :mod:`.graph_per_width`) or shared by every layout (combined FULL,
:mod:`.graph_combined`). :func:`~.graph_widths.setup_widths` picks one from the resolved
cudagraph mode and stores it in the :class:`WidthState`; the wrappers call its methods.
docs/hosts.md (Graphs) says what each regime captures and replays.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from vllm_hust_vspec.host.worker.ascend.graph_params import GraphWidthsError
from vllm_hust_vspec.host.worker.k_channel import drafting_steps

logger = logging.getLogger("vllm_hust_vspec.host.worker.ascend")

STATE_ATTR = "_vspec_graph_widths"  # on the runner and on its cudagraph dispatcher
_MAX_EAGER_FRAMES = 1000  # eager draft frames kept in WidthState.eager_frames


class GraphRegime(Protocol):
    """How one regime keys, captures and dispatches the target graphs."""

    combined: bool

    def add_host_sizes(self, disp: Any, own: dict[int, list[int]], max_k: int) -> None:
        """Merge the host's own capture sizes into ``own`` where this regime keeps them."""

    def setup(self, runner: Any, disp: Any, own: dict[int, list[int]], union: list[int],
              widths: tuple[int, ...], max_k: int, max_seqs: int,
              strict: Callable[[], bool]) -> WidthState:
        """Add the target keys, padding tables and graph params; the state to keep."""

    def at_width(self, runner: Any, width: int) -> AbstractContextManager[object]:
        """The runner shaped for a target batch of query width ``width``."""

    def warmup_and_capture(self, st: WidthState, original: Callable[..., Any], runner: Any,
                           desc: Any, *args: Any, **kwargs: Any) -> Any:
        """The host's ``_warmup_and_capture`` of one key, with this regime's graphs."""

    def dispatch(self, st: WidthState, original: Callable[..., Any], disp: Any,
                 bound: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        """``CudagraphDispatcher.dispatch`` (``bound``: its arguments by name)."""

    def step_width(self, st: WidthState, desc: Any) -> int | None:
        """The verify width of the step being drafted for (``desc``: its target key)."""


@dataclass
class WidthState:
    """What was set up for one runner, and the per-step width context."""

    max_k: int
    widths: tuple[int, ...]
    sizes: dict[int, list[int]]
    tables: dict[int, list[int]]
    regime: GraphRegime
    draft_gammas: tuple[int, ...] = ()
    drafter: Any = None
    strict: Callable[[], bool] = lambda: False
    width: int | None = None  # width of the batch being dispatched / captured
    drafting: bool = False
    drafting_width: int | None = None  # verify width of the step being drafted for
    capturing: int | None = None  # width whose graphs capture_model is capturing
    # combined FULL: the shared target keys' sizes (no per-width keys)
    shared_sizes: list[int] = field(default_factory=list)
    draft_sizes: dict[int, list[int]] = field(default_factory=dict)  # per gamma
    eager_frames: list[dict[str, Any]] = field(default_factory=list)
    logged_pairs: set[tuple[int | None, int]] = field(default_factory=set)

    @property
    def combined(self) -> bool:
        """True under combined FULL (shared target keys)."""
        return self.regime.combined

    def draft_gamma(self) -> int:
        return int(getattr(self.drafter, "num_speculative_tokens", self.max_k))


def state_of(obj: Any) -> WidthState | None:
    """The state :func:`~.graph_widths.setup_widths` left on a runner or dispatcher."""
    return obj.__dict__.get(STATE_ATTR) if hasattr(obj, "__dict__") else None


@contextlib.contextmanager
def swapped(obj: Any, **values: Any) -> Iterator[None]:
    """Instance attributes set for the block, then restored (or removed if they were not)."""
    saved = {k: obj.__dict__[k] for k in values if k in obj.__dict__}
    missing = [k for k in values if k not in obj.__dict__]
    for k, v in values.items():
        setattr(obj, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(obj, k, v)
        for k in missing:
            obj.__dict__.pop(k, None)


@contextlib.contextmanager
def as_width(runner: Any, width: int) -> Iterator[WidthState]:
    """Run the runner's dummy/capture path shaped for query width ``width`` (drafter at
    ``width - 1`` tokens; no draft pass for width 1, where the drafter does not run).
    Combined FULL: the shared target keys have no width; only the drafter's gamma changes."""
    st = state_of(runner)
    if st is None:
        raise GraphWidthsError("vSpec graph widths are not set up on this runner")
    prev = (st.width, st.capturing)
    st.width = st.capturing = width
    drafter = getattr(runner, "drafter", None)
    with contextlib.ExitStack() as stack:
        stack.enter_context(st.regime.at_width(runner, width))
        if drafter is not None:
            if width - 1 in st.draft_gammas or width == st.max_k + 1:
                stack.enter_context(drafting_steps(drafter, width - 1))
            else:  # width 1 (no draft pass), or a gamma without its own draft graph
                stack.enter_context(swapped(runner, drafter=None))
        try:
            yield st
        finally:
            st.width, st.capturing = prev


def eager_draft(st: WidthState, w: int | None, g: int, num_tokens: int) -> Any:
    """The dispatch of a draft frame with no graph for its (width, gamma): eager, recorded in
    ``st.eager_frames`` (bounded) and logged once per pair."""
    from vllm.config import CUDAGraphMode
    from vllm.forward_context import BatchDescriptor

    if len(st.eager_frames) < _MAX_EAGER_FRAMES:
        st.eager_frames.append({"pass": "draft", "width": w, "gamma": g,
                                "num_tokens": num_tokens})
    if (w, g) not in st.logged_pairs:
        st.logged_pairs.add((w, g))
        logger.info("vSpec graph widths: drafting gamma %s after a verify width %s runs "
                    "eager (switching frame or no graph for that pair; logged once per "
                    "pair)", g, w)
    return CUDAGraphMode.NONE, BatchDescriptor(num_tokens)


def check_params_global(ag: Any, getter: str, name: str) -> None:
    """Fail closed when ``acl_graph.<getter>()`` does not read the module global we replace."""
    if getattr(ag, getter)() is not getattr(ag, name):
        raise GraphWidthsError(
            f"vSpec graph widths: vllm_ascend.compilation.acl_graph.{getter}() does not "
            f"return the module global {name}; its graph params cannot be set per key")


__all__ = ["STATE_ATTR", "GraphRegime", "WidthState", "as_width", "check_params_global",
           "eager_draft", "state_of", "swapped"]
