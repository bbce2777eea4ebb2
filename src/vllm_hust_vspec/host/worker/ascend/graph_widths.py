"""ACL graphs per verify width (target) and per gamma (merged draft) on vllm-ascend.

vllm-ascend captures FULL decode graphs for one query width, ``1 + K``, so a decode step at
gamma < K runs eager. With graph-per-gamma on, this module makes every candidate width a graph:
:func:`setup_widths` picks the regime once from the resolved cudagraph mode (per-width keys,
:mod:`.graph_per_width`, or combined FULL's shared keys, :mod:`.graph_combined`), adds one
merged draft graph per gamma, and the wrappers installed here route each capture, batch and
draft frame through that regime. docs/hosts.md (Graphs) describes both regimes and the
vllm-ascend internals they rely on.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm_hust_vspec.host.patching import Patcher
from vllm_hust_vspec.host.worker.ascend.graph_combined import COMBINED
from vllm_hust_vspec.host.worker.ascend.graph_params import (
    GammaDraftGraphs,
    GraphWidthsError,
    RoutedGraphParams,
    make_graph_params,
    padding_table,
    sizes_for_width,
    width_of,
)
from vllm_hust_vspec.host.worker.ascend.graph_per_width import PER_WIDTH
from vllm_hust_vspec.host.worker.ascend.graph_regime import (
    STATE_ATTR,
    GraphRegime,
    WidthState,
    as_width,
    check_params_global,
    state_of,
)
from vllm_hust_vspec.host.worker.ascend.graphs import (
    BatchShape,
    _all_decode,
    check_strict,
    make_strict_dispatch_wrapper,
    mode_name,
)
from vllm_hust_vspec.host.worker.ascend.proposer import GAMMA_RUNNABLES_ATTR

if TYPE_CHECKING:
    from vllm_hust_vspec.settings import Settings

logger = logging.getLogger("vllm_hust_vspec.host.worker.ascend")


@dataclass(frozen=True)
class WidthPlan:
    """What to capture: the candidate gammas and the capture sizes (the launcher's plan)."""

    gammas: tuple[int, ...]
    # the launcher's capture sizes; intersected with the config's sizes before vLLM's rounding
    # (empty: those config sizes alone)
    sizes: tuple[int, ...] = ()

    @property
    def widths(self) -> tuple[int, ...]:
        return tuple(sorted({1 + g for g in self.gammas}))


def plan_from_settings(settings: Settings) -> WidthPlan:
    """The launcher's capture plan (same function the launcher uses for the capture sizes)."""
    from vllm_hust_vspec.settings.capture import capture_plan

    plan = capture_plan(settings)
    return WidthPlan(gammas=tuple(plan.gammas), sizes=tuple(plan.sizes))


# -- setup: after the host resolved its graph mode and sizes -----------------------------------
def setup_widths(runner: Any, plan: WidthPlan, pre_sizes: list[int],
                 strict: Callable[[], bool]) -> WidthState | None:
    """Add the per-width keys, padding tables, graph params and per-gamma draft graphs
    (combined FULL: the shared target keys at the plan's sizes, per-gamma draft graphs)."""
    from vllm.config import CUDAGraphMode

    cc = runner.compilation_config
    mode = cc.cudagraph_mode
    if mode == CUDAGraphMode.NONE or not getattr(runner, "use_aclgraph", True):
        logger.info("vSpec graph widths: graphs are off (%s); nothing to capture", mode_name(mode))
        return None
    regime: GraphRegime = COMBINED if mode == CUDAGraphMode.FULL else PER_WIDTH
    if not regime.combined and not (mode.decode_mode() == CUDAGraphMode.FULL
                                    and mode.separate_routine()):
        raise GraphWidthsError(
            f"vSpec graph-per-gamma on vLLM-Ascend: the resolved cudagraph_mode is "
            f"{mode_name(mode)}; per-gamma graphs need FULL graphs (FULL_DECODE_ONLY, "
            f"FULL_AND_PIECEWISE or combined FULL); use --graph-mode full-decode-only or "
            f"turn adaptive speculation / FULL graphs off")
    disp = runner.cudagraph_dispatcher
    max_k = int(runner.uniform_decode_query_len) - 1
    max_seqs = int(runner.scheduler_config.max_num_seqs)
    max_tokens = int(runner.scheduler_config.max_num_batched_tokens)
    too_big = [g for g in plan.gammas if g > max_k or g < 0]
    if too_big:
        raise GraphWidthsError(
            f"vSpec graph widths: candidate gamma(s) {too_big} outside 0..K = {max_k} "
            f"(num_speculative_tokens)")
    # the host's own width 1 + K always stays (its keys, its draft graph)
    gammas = tuple(sorted({*plan.gammas, max_k}))
    widths = tuple(sorted({1 + g for g in gammas}))
    # the plan's sizes that the host kept (vllm-ascend's platform may cut the configured list
    # to its ACL graph budget before this point), else whichever of the two exists
    if plan.sizes and pre_sizes:
        base = sorted(set(plan.sizes) & set(pre_sizes))
    else:
        base = sorted(set(plan.sizes or pre_sizes))
    own = {w: sizes_for_width(w, base, max_seqs, max_tokens) for w in widths}
    regime.add_host_sizes(disp, own, max_k)
    empty = [w for w in widths if not own[w]]
    if empty:
        raise GraphWidthsError(
            f"vSpec graph widths: no capture size is a multiple of verify width(s) {empty} "
            f"(<= width x max_num_seqs {max_seqs}); capture sizes {base}. Use the launcher's "
            f"capture plan (--capture-policy) or add sizes batch x (1 + gamma)")
    union = sorted(set(cc.cudagraph_capture_sizes or []) | {s for v in own.values() for s in v})
    cc.cudagraph_capture_sizes = union
    cc.max_cudagraph_capture_size = union[-1]
    st = regime.setup(runner, disp, own, union, widths, max_k, max_seqs, strict)
    disp.__dict__[STATE_ATTR] = st
    runner.__dict__[STATE_ATTR] = st
    _setup_drafter(runner, st, gammas)
    logger.info("vSpec graph widths (%s): target FULL graphs for widths %s (sizes %s); draft "
                "graphs for gamma %s (sizes %s)", mode_name(mode), widths, st.sizes,
                st.draft_gammas or "none", st.draft_sizes)
    return st


def _setup_drafter(runner: Any, st: WidthState, gammas: tuple[int, ...]) -> None:
    """A merged draft graph per gamma >= 1, with its own draft graph params."""
    from vllm.config import CUDAGraphMode
    from vllm_ascend.compilation import acl_graph as ag

    drafter = getattr(runner, "drafter", None)
    st.drafter = drafter
    runnable = getattr(drafter, "_runnable", None)
    if drafter is None or not isinstance(runnable, ag.ACLGraphWrapper):
        return
    draft_gammas = tuple(g for g in gammas if g >= 1)
    owner = next((c for c in type(drafter).__mro__ if "_propose" in vars(c)), None)
    if owner is not None and owner.__name__ != "AscendSpecDecodeBaseProposer":
        # a proposer with its own _propose (Step3p5 MTP) drafts max K whatever the
        # gamma: only the host's own draft graph (gamma = K) is ever replayed
        logger.info("vSpec graph widths: %s has its own _propose; draft graph for gamma "
                    "%s only", owner.__name__, st.max_k)
        draft_gammas = (st.max_k,)
    graphs: dict[int, Any] = {st.max_k: runnable} if st.max_k in draft_gammas else {}
    for g in draft_gammas:
        if g not in graphs:
            graphs[g] = ag.ACLGraphWrapper(
                runnable.runnable, runner.vllm_config, runtime_mode=CUDAGraphMode.FULL,
                use_eagle=runnable.use_eagle, enable_enpu=runnable.enable_enpu)
    drafter.__dict__[GAMMA_RUNNABLES_ATTR] = graphs
    drafter._runnable = GammaDraftGraphs(drafter, graphs, runnable.runnable)
    st.draft_gammas = draft_gammas
    st.draft_sizes = {g: st.draft_sizes[g] for g in draft_gammas}
    ag._draft_graph_params = RoutedGraphParams(
        "draft", {g: make_graph_params(ag, st.draft_sizes[g]) for g in draft_gammas},
        st.draft_gamma)
    check_params_global(ag, "get_draft_graph_params", "_draft_graph_params")


# -- wrappers ----------------------------------------------------------------------------------
def make_check_mode_wrapper(original: Callable[..., Any], plan: Callable[[], WidthPlan],
                            strict: Callable[[], bool]) -> Callable[..., Any]:
    def _check_and_update_cudagraph_mode(self: Any, *args: Any, **kwargs: Any) -> Any:
        pre = list(self.compilation_config.cudagraph_capture_sizes or [])
        out = original(self, *args, **kwargs)
        setup_widths(self, plan(), pre, strict)
        return out

    return _check_and_update_cudagraph_mode


def make_warmup_capture_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    def _warmup_and_capture(self: Any, desc: Any, *args: Any, **kwargs: Any) -> Any:
        st = state_of(self)
        if st is None:
            return original(self, desc, *args, **kwargs)
        return st.regime.warmup_and_capture(st, original, self, desc, *args, **kwargs)

    return _warmup_and_capture


def make_dispatch_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    """``CudagraphDispatcher.dispatch``: the regime's dispatch (a uniform decode at the
    batch's width; a draft frame without its graph eager)."""
    sig = inspect.signature(original)

    def dispatch(self: Any, *args: Any, **kwargs: Any) -> Any:
        st = state_of(self)
        if st is None:
            return original(self, *args, **kwargs)
        bound = sig.bind(self, *args, **kwargs).arguments
        return st.regime.dispatch(st, original, self, bound, *args, **kwargs)

    return dispatch


def make_batch_wrapper(original: Callable[..., Any],
                       strict: Callable[[], bool]) -> Callable[..., Any]:
    """``_determine_batch_execution_and_padding``: a uniform decode of a candidate width is
    dispatched at that width; ``mtp_strict_graph`` checked on real steps."""
    sig = inspect.signature(original)
    # graphs off on this runner (no state): the plain strict check still applies
    plain = make_strict_dispatch_wrapper(original, strict)

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        st = state_of(self)
        if st is None:
            return plain(self, *args, **kwargs)
        a = sig.bind(self, *args, **kwargs).arguments
        forced = a.get("force_eager") or a.get("force_uniform_decode") is not None
        num_reqs, num_tokens = int(a["num_reqs"]), int(a["num_tokens"])
        max_q = int(a["max_num_scheduled_tokens"])
        if a.get("force_uniform_decode"):
            width = max_q if max_q in st.widths else None
        elif a.get("force_uniform_decode") is None and max_q in st.widths and num_reqs > 0 \
                and num_tokens == max_q * num_reqs and _all_decode(self, num_reqs):
            width = max_q
        else:
            width = None
        prev = st.width
        st.width = width
        try:
            with (contextlib.nullcontext() if width is None
                  else st.regime.at_width(self, width)):
                result = original(self, *args, **kwargs)
        except BaseException:
            st.width = prev
            raise
        # keep st.width for the rest of the step (_pad_query_start_loc_for_fia reads it)
        if not forced and st.strict():
            shape = BatchShape(num_tokens=num_tokens, num_reqs=num_reqs, max_query_len=max_q,
                               all_decode=_all_decode(self, num_reqs))
            check_strict(shape, result[0], st.sizes.get(max_q) or st.shared_sizes or sorted(
                {s for v in st.sizes.values() for s in v}), batch_descriptor=result[1])
        return result

    return wrapper


def make_pad_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    """``_pad_query_start_loc_for_fia`` pads dummy requests at the batch's width."""

    def _pad_query_start_loc_for_fia(self: Any, *args: Any, **kwargs: Any) -> Any:
        st = state_of(self)
        w = None if st is None else (st.drafting_width if st.drafting else st.width)
        if st is None or w is None or w == self.uniform_decode_query_len:
            return original(self, *args, **kwargs)
        # combined FULL: the host pads with one dummy request, never at a query width
        with st.regime.at_width(self, w):
            return original(self, *args, **kwargs)

    return _pad_query_start_loc_for_fia


def make_propose_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    """``propose_draft_token_ids``: the drafter's dispatch knows the step's verify width."""
    sig = inspect.signature(original)

    def propose_draft_token_ids(self: Any, *args: Any, **kwargs: Any) -> Any:
        st = state_of(self)
        if st is None:
            return original(self, *args, **kwargs)
        desc = sig.bind(self, *args, **kwargs).arguments.get("target_model_batch_desc")
        st.drafting, st.drafting_width = True, st.regime.step_width(st, desc)
        try:
            return original(self, *args, **kwargs)
        finally:
            st.drafting, st.drafting_width = False, None

    return propose_draft_token_ids


@contextlib.contextmanager
def drafting(runner: Any, target_desc: Any) -> Iterator[WidthState]:
    """What the wrapped ``propose_draft_token_ids`` sets around the drafter (tests, tools)."""
    st = state_of(runner)
    if st is None:
        raise GraphWidthsError("vSpec graph widths are not set up on this runner")
    st.drafting, st.drafting_width = True, st.regime.step_width(st, target_desc)
    try:
        yield st
    finally:
        st.drafting, st.drafting_width = False, None


def install_graph_widths(patcher: Patcher, runner_cls: type, dispatcher_cls: type,
                         plan: Callable[[], WidthPlan], strict: Callable[[], bool]) -> None:
    """Patch the NPU runner and vLLM's dispatcher (fail closed on a missing name)."""
    patcher.wrap(runner_cls, "_check_and_update_cudagraph_mode",
                 lambda orig: make_check_mode_wrapper(orig, plan, strict))
    patcher.wrap(runner_cls, "_warmup_and_capture", make_warmup_capture_wrapper)
    patcher.wrap(runner_cls, "_determine_batch_execution_and_padding",
                 lambda orig: make_batch_wrapper(orig, strict))
    patcher.wrap(runner_cls, "_pad_query_start_loc_for_fia", make_pad_wrapper)
    patcher.wrap(runner_cls, "propose_draft_token_ids", make_propose_wrapper)
    patcher.wrap(dispatcher_cls, "dispatch", make_dispatch_wrapper)


__all__ = [
    "COMBINED",
    "GAMMA_RUNNABLES_ATTR",
    "PER_WIDTH",
    "STATE_ATTR",
    "GammaDraftGraphs",
    "GraphWidthsError",
    "RoutedGraphParams",
    "WidthPlan",
    "WidthState",
    "as_width",
    "drafting",
    "install_graph_widths",
    "padding_table",
    "plan_from_settings",
    "setup_widths",
    "sizes_for_width",
    "state_of",
    "width_of",
]
