"""ACL graphs per verify width (target) and per gamma (merged draft) on vllm-ascend.

vllm-ascend (checked: 0.23.0.post1 on vLLM 0.23.0) captures FULL decode graphs for one query
width only, ``uniform_decode_query_len = 1 + K``: the dispatcher keys, its padding table and
``_dummy_run``'s capture shape use that width, the graph parameters of the attention kernels
(``acl_graph._graph_params`` / ``_draft_graph_params``) are keyed by token count only, and the
merged draft graph (``ACLGraphWrapper(_run_merged_draft)``) bakes ``range(K - 1)`` in. A decode
step with gamma < K drafts per request (width ``1 + gamma``) therefore runs eager, target and
drafter. With graph-per-gamma on, this module makes every candidate width a first-class graph:

* **Target**: for each width ``w = 1 + gamma`` (gamma from the launcher's candidate set) FULL
  decode keys ``BatchDescriptor(num_tokens=s, num_reqs=s // w, uniform=True)`` at the capture
  sizes ``s`` that are multiples of ``w`` (``w <= s <= w * max_num_seqs``), captured by the
  host's own ``capture_model`` with ``_dummy_run`` shaped for ``w``. Widths sharing a token
  count differ in ``num_reqs``, so the ACL graph entries never collide; each width gets its own
  padding table (a batch of width ``w`` pads to the next multiple-of-``w`` size) and its own
  ``GraphParams`` (the target graph params become a router keyed by the width of the forward
  context's batch descriptor), so replay patches the kernels of the graph that is replayed.
* **Draft**: one merged draft ``ACLGraphWrapper`` per candidate gamma >= 1, captured inside the
  target capture of width ``1 + gamma`` with the drafter's step attributes at gamma
  (``num_speculative_tokens``, and ``num_draft_steps`` on vLLM-Ascend-HUST) and its own
  draft ``GraphParams`` (router keyed by the drafter's ``num_speculative_tokens``); the
  proposer's ``_runnable`` becomes :class:`GammaDraftGraphs`, which calls the wrapper of the
  step's gamma (the K backport sets ``num_speculative_tokens`` to it).
* **Switching frames**: a step whose drafted gamma differs from its verify width - 1 (the frame
  where the controller changed gamma: the target verifies the previous step's drafts) replays
  the target graph of its width but drafts eager (no graph was captured for that pair); a
  batch that is not a uniform decode, or larger than its width's largest capture size, runs
  as the host runs it (eager; piecewise under FULL_AND_PIECEWISE). Each eager draft frame is
  counted in :attr:`WidthState.eager_frames` and logged once per (width, gamma) pair.
* ``mtp_strict_graph`` is checked in the same wrapper (a decode batch that misses its graph
  stops with the batch descriptor in the message).

**Combined FULL** (``cudagraph_mode=FULL``: no separate decode routine; paths below are in the 0.23
pair's site-packages). The host's keys carry no query width: ``initialize_cudagraph_keys`` adds one
FULL key per capture size through ``_create_padded_batch_descriptor(bs, False, ...)`` (in
``vllm/v1/cudagraph_dispatcher.py``: ``num_reqs = min(size, max_num_seqs)``, ``uniform=False``) and
``dispatch`` drops the uniform flag (``normalized_uniform = uniform_decode and
separate_routine()``), so every batch up to the largest size (decode of any width, mixed, prefill)
replays the graph of its padded token count. The capture does not bake the ``1 + K`` layout:
``_dummy_run`` captures ``min(size, max_num_seqs)`` evenly split requests
(``NPUModelRunner._dummy_run``); at replay ``_pad_query_start_loc_for_fia`` keeps the real request
count and appends one dummy request for the padding, and ``update_graph_params`` re-launches every
FIA kernel with the step's ``actual_seq_lengths_q``, KV lengths and block table
(``vllm_ascend/attention/attention_v1.py``). A uniform decode of width ``w != 1 + K`` (the
target-only width 1 included) is therefore served by the shared graph correctly, and vSpec keeps the
host's dispatch for the target: no per-width keys, no per-width routing, **one shared target**
``GraphParams`` (rebuilt for the added sizes). It only adds the plan's per-width sizes (multiples of
each width, which vLLM's rounding to multiples of ``1 + K`` removed in ``CompilationConfig``) to the
shared sizes and pads on one table. The merged draft graph does bake its shape: ``dummy_run``
captures it with ``batch_size = num_tokens // (K + 1)`` rows and ``range(K - 1)`` steps (the
proposer's ``dummy_run`` and ``_propose``, ``vllm_ascend/spec_decode/llm_base_proposer.py``). So the
draft graphs stay **per gamma**, each with its own draft ``GraphParams``: at every shared key the
runner's one ``drafter.dummy_run`` call is run once per gamma that has a graph there (gamma K at
every key, as the host; gamma ``g < K`` at the sizes a steady width-``1 + g`` batch pads to, so its
``size // (1 + g)`` rows cover the batch). The drafter replays gamma ``g``'s graph only in a steady
uniform frame of width ``1 + g`` (the width comes from the step's batch decision, the key has none);
switching frames, and gamma ``< K`` after a mixed/prefill step (its request count is not bounded by
the graph's rows), draft eager; gamma K after a mixed step does what the host does.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from vllm_hust_vspec.host.patching import Patcher
from vllm_hust_vspec.host.worker.ascend.graph_params import (
    GammaDraftGraphs,
    GraphWidthsError,
    RoutedGraphParams,
    make_graph_params,
    padding_table,
    sizes_for_width,
    width_of,
)
from vllm_hust_vspec.host.worker.ascend.graphs import (
    BatchShape,
    _all_decode,
    check_strict,
    make_strict_dispatch_wrapper,
    mode_name,
)
from vllm_hust_vspec.host.worker.ascend.proposer import GAMMA_RUNNABLES_ATTR
from vllm_hust_vspec.host.worker.k_channel import drafting_steps

logger = logging.getLogger("vllm_hust_vspec.host.worker.ascend")

STATE_ATTR = "_vspec_graph_widths"  # on the runner and on its cudagraph dispatcher


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


def plan_from_settings(settings: Any) -> WidthPlan:
    """The launcher's capture plan (same function the launcher uses for the capture sizes)."""
    from vllm_hust_vspec.settings.capture import capture_plan

    plan = capture_plan(settings)
    return WidthPlan(gammas=tuple(plan.gammas), sizes=tuple(plan.sizes))


def _forward_context_width() -> int | None:
    fc_mod = sys.modules.get("vllm.forward_context")
    if fc_mod is None or not fc_mod.is_forward_context_available():
        return None
    return width_of(getattr(fc_mod.get_forward_context(), "batch_descriptor", None))


# -- the per-runner state -----------------------------------------------------------------------
@dataclass
class WidthState:
    """What was set up for one runner, and the per-step width context."""

    max_k: int
    widths: tuple[int, ...]
    sizes: dict[int, list[int]]
    tables: dict[int, list[int]]
    draft_gammas: tuple[int, ...] = ()
    drafter: Any = None
    strict: Callable[[], bool] = lambda: False
    width: int | None = None  # width of the batch being dispatched / captured
    drafting: bool = False
    drafting_width: int | None = None  # verify width of the step being drafted for
    capturing: int | None = None  # width whose graphs capture_model is capturing
    # combined FULL (cudagraph_mode FULL): shared target keys at these sizes, no per-width keys
    combined: bool = False
    shared_sizes: list[int] = field(default_factory=list)
    draft_sizes: dict[int, list[int]] = field(default_factory=dict)  # per gamma
    eager_frames: list[dict[str, Any]] = field(default_factory=list)
    logged_pairs: set[tuple[int | None, int]] = field(default_factory=set)

    def draft_gamma(self) -> int:
        return int(getattr(self.drafter, "num_speculative_tokens", self.max_k))


def _state(obj: Any) -> WidthState | None:
    return obj.__dict__.get(STATE_ATTR) if hasattr(obj, "__dict__") else None


@contextlib.contextmanager
def _swapped(obj: Any, **values: Any) -> Iterator[None]:
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
    st = _state(runner)
    if st is None:
        raise GraphWidthsError("vSpec graph widths are not set up on this runner")
    prev = (st.width, st.capturing)
    st.width = st.capturing = width
    drafter = getattr(runner, "drafter", None)
    with contextlib.ExitStack() as stack:
        if not st.combined:
            stack.enter_context(_swapped(runner, uniform_decode_query_len=width))
        if drafter is not None:
            if width - 1 in st.draft_gammas or width == st.max_k + 1:
                stack.enter_context(drafting_steps(drafter, width - 1))
            else:  # width 1 (no draft pass), or a gamma without its own draft graph
                stack.enter_context(_swapped(runner, drafter=None))
        try:
            yield st
        finally:
            st.width, st.capturing = prev


def _draft_fanout(drafter: Any, gammas: list[int]) -> Callable[..., Any]:
    """Combined FULL capture: the runner's one ``drafter.dummy_run`` call per shared key runs
    once per gamma that has a draft graph at that key (same arguments, the gamma's K)."""
    original = drafter.dummy_run

    def dummy_run(*args: Any, **kwargs: Any) -> Any:
        out = None
        for g in gammas:
            with drafting_steps(drafter, g):
                out = original(*args, **kwargs)
        return out

    return dummy_run


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
    combined = mode == CUDAGraphMode.FULL
    if not combined and not (mode.decode_mode() == CUDAGraphMode.FULL
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
    host_sizes = sorted({d.num_tokens for d in disp.cudagraph_keys[CUDAGraphMode.FULL]
                         if d.uniform != combined})
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
    if not combined:
        own[max_k + 1] = sorted(set(own[max_k + 1]) | set(host_sizes))
    empty = [w for w in widths if not own[w]]
    if empty:
        raise GraphWidthsError(
            f"vSpec graph widths: no capture size is a multiple of verify width(s) {empty} "
            f"(<= width x max_num_seqs {max_seqs}); capture sizes {base}. Use the launcher's "
            f"capture plan (--capture-policy) or add sizes batch x (1 + gamma)")
    union = sorted(set(cc.cudagraph_capture_sizes or []) | {s for v in own.values() for s in v})
    cc.cudagraph_capture_sizes = union
    cc.max_cudagraph_capture_size = union[-1]
    if combined:
        st = _setup_combined(runner, disp, union, widths, max_k, max_seqs, strict)
    else:
        st = _setup_per_width(runner, disp, own, union, widths, max_k, strict)
    disp.__dict__[STATE_ATTR] = st
    runner.__dict__[STATE_ATTR] = st
    _setup_drafter(runner, st, gammas)
    logger.info("vSpec graph widths (%s): target FULL graphs for widths %s (sizes %s); draft "
                "graphs for gamma %s (sizes %s)", mode_name(mode), widths, st.sizes,
                st.draft_gammas or "none", st.draft_sizes)
    return st


def _check_params_global(ag: Any, getter: str, name: str) -> None:
    if getattr(ag, getter)() is not getattr(ag, name):
        raise GraphWidthsError(
            f"vSpec graph widths: vllm_ascend.compilation.acl_graph.{getter}() does not "
            f"return the module global {name}; its graph params cannot be set per key")


def _setup_per_width(runner: Any, disp: Any, sizes: dict[int, list[int]], union: list[int],
                     widths: tuple[int, ...], max_k: int,
                     strict: Callable[[], bool]) -> WidthState:
    """FULL decode graphs with a separate routine: uniform keys, tables, params per width."""
    from vllm.config import CUDAGraphMode
    from vllm_ascend.compilation import acl_graph as ag

    tables = {w: padding_table(sizes[w], union[-1]) for w in widths}
    st = WidthState(max_k=max_k, widths=widths, sizes=sizes, tables=tables, strict=strict,
                    draft_sizes={w - 1: sizes[w] for w in widths if w > 1})
    # dispatcher: the host's own table stays the default (mixed / non-uniform batches pad to
    # the host's sizes, as before), extended with "no graph" up to the new largest size
    host_table = list(disp._bs_to_padded_graph_size)
    disp._bs_to_padded_graph_size = host_table + list(range(len(host_table), union[-1] + 1))
    lora_cases = disp._get_lora_cases()
    for w in widths:
        with _swapped(disp, uniform_decode_query_len=w, _bs_to_padded_graph_size=tables[w]):
            for s in sizes[w]:
                for loras in lora_cases:
                    desc = disp._create_padded_batch_descriptor(s, True, loras > 0, loras)
                    if width_of(desc) != w:
                        raise GraphWidthsError(
                            f"vSpec graph widths: the dispatcher made {desc} for width {w}, "
                            f"size {s} (expected num_reqs {s // w})")
                    disp.add_cudagraph_key(CUDAGraphMode.FULL, desc)
    # target graph params: one GraphParams per width
    ag._graph_params = RoutedGraphParams(
        "target", {w: make_graph_params(ag, sizes[w]) for w in widths}, _forward_context_width)
    _check_params_global(ag, "get_graph_params", "_graph_params")
    return st


def _setup_combined(runner: Any, disp: Any, union: list[int], widths: tuple[int, ...],
                    max_k: int, max_seqs: int, strict: Callable[[], bool]) -> WidthState:
    """Combined FULL: the host's layout-free keys at every size, one shared GraphParams."""
    from vllm.config import CUDAGraphMode
    from vllm_ascend.compilation import acl_graph as ag

    table = padding_table(union, union[-1])
    # the shared sizes a steady batch of each width pads to (batch 1..max_num_seqs)
    reach = {w: sorted({table[b * w] for b in range(1, max_seqs + 1) if b * w <= union[-1]})
             for w in widths}
    draft_sizes = {w - 1: reach[w] for w in widths if w > 1}
    # the host's own draft graph (gamma K) at every shared key, as the host captures it
    draft_sizes[max_k] = list(union)
    st = WidthState(max_k=max_k, widths=widths, sizes=reach, tables=dict.fromkeys(widths, table),
                    strict=strict, combined=True, shared_sizes=list(union),
                    draft_sizes=draft_sizes)
    disp._bs_to_padded_graph_size = table
    for s in union:
        for loras in disp._get_lora_cases():
            desc = disp._create_padded_batch_descriptor(s, False, loras > 0, loras)
            if desc.num_tokens != s or desc.uniform:
                raise GraphWidthsError(
                    f"vSpec graph widths: the dispatcher made {desc} for shared size {s}")
            disp.add_cudagraph_key(CUDAGraphMode.FULL, desc)
    # target graph params: shared, one GraphParams keyed by token count (as the host's own,
    # for the added sizes too)
    ag._graph_params = make_graph_params(ag, union)
    _check_params_global(ag, "get_graph_params", "_graph_params")
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
    _check_params_global(ag, "get_draft_graph_params", "_draft_graph_params")


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
        st = _state(self)
        if st is not None and st.combined:
            # one shared target graph per key (the host's capture), then the merged draft
            # graph of every gamma that has one at this key, inside the same dummy runs
            drafter = getattr(self, "drafter", None)
            gammas = sorted((g for g in st.draft_gammas
                             if desc.num_tokens in st.draft_sizes.get(g, ())), reverse=True)
            with contextlib.ExitStack() as stack:
                if drafter is not None and st.draft_gammas:
                    stack.enter_context(_swapped(drafter,
                                                 dummy_run=_draft_fanout(drafter, gammas)))
                return original(self, desc, *args, **kwargs)
        w = width_of(desc)
        if st is None or w is None:
            return original(self, desc, *args, **kwargs)
        with as_width(self, w):
            return original(self, desc, *args, **kwargs)

    return _warmup_and_capture


def make_dispatch_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    """``CudagraphDispatcher.dispatch``: a uniform decode dispatches at the batch's width."""
    from vllm.config import CUDAGraphMode
    from vllm.forward_context import BatchDescriptor

    sig = inspect.signature(original)

    def eager(st: WidthState, w: int | None, g: int, num_tokens: int) -> Any:
        if len(st.eager_frames) < 1000:  # a tally for tests/tools, bounded
            st.eager_frames.append({"pass": "draft", "width": w, "gamma": g,
                                    "num_tokens": num_tokens})
        if (w, g) not in st.logged_pairs:
            st.logged_pairs.add((w, g))
            logger.info("vSpec graph widths: drafting gamma %s after a verify width %s runs "
                        "eager (switching frame or no graph for that pair; logged once per "
                        "pair)", g, w)
        return CUDAGraphMode.NONE, BatchDescriptor(num_tokens)

    def dispatch(self: Any, *args: Any, **kwargs: Any) -> Any:
        st = _state(self)
        if st is None:
            return original(self, *args, **kwargs)
        a = sig.bind(self, *args, **kwargs).arguments
        num_tokens = int(a["num_tokens"])
        if st.combined:
            # the shared target keys serve every layout (module docstring): the host's own
            # dispatch; the drafter replays its gamma's graph only in a steady uniform frame
            # (or, at gamma K, wherever the host would replay its own draft graph)
            if not st.drafting:
                return original(self, *args, **kwargs)
            w, g = st.drafting_width, st.draft_gamma()
            if g not in st.draft_gammas or (w is None and g != st.max_k) \
                    or (w is not None and g + 1 != w):
                return eager(st, w, g, num_tokens)
            mode, desc = original(self, *args, **kwargs)
            if mode_name(mode) == "FULL" and desc.num_tokens not in st.draft_sizes[g]:
                return eager(st, w, g, num_tokens)
            return mode, desc
        if not a.get("uniform_decode"):
            return original(self, *args, **kwargs)
        if st.drafting:
            w, g = st.drafting_width, st.draft_gamma()
            if w is None or g + 1 != w or g not in st.draft_gammas:
                return eager(st, w, g, num_tokens)
        else:
            w = st.width or st.max_k + 1
        with _swapped(self, uniform_decode_query_len=w, _bs_to_padded_graph_size=st.tables[w]):
            return original(self, *args, **kwargs)

    return dispatch


def make_batch_wrapper(original: Callable[..., Any],
                       strict: Callable[[], bool]) -> Callable[..., Any]:
    """``_determine_batch_execution_and_padding``: a uniform decode of a candidate width is
    dispatched at that width; ``mtp_strict_graph`` checked on real steps."""
    sig = inspect.signature(original)
    # graphs off on this runner (no state): the plain strict check still applies
    plain = make_strict_dispatch_wrapper(original, strict)

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        st = _state(self)
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
            if width is not None and not st.combined:
                with _swapped(self, uniform_decode_query_len=width):
                    result = original(self, *args, **kwargs)
            else:
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
        st = _state(self)
        w = None if st is None else (st.drafting_width if st.drafting else st.width)
        # combined FULL: the host pads with one dummy request, never at a query width
        if w is None or st.combined or w == self.uniform_decode_query_len:
            return original(self, *args, **kwargs)
        with _swapped(self, uniform_decode_query_len=w):
            return original(self, *args, **kwargs)

    return _pad_query_start_loc_for_fia


def _step_width(st: WidthState, desc: Any) -> int | None:
    """The verify width of the step being drafted for: its uniform key's width; under
    combined FULL (keys without a width) the uniform-decode width the step was dispatched at
    (recorded by the ``_determine_batch_execution_and_padding`` wrapper; None otherwise)."""
    return st.width if st.combined else width_of(desc)


def make_propose_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    """``propose_draft_token_ids``: the drafter's dispatch knows the step's verify width."""
    sig = inspect.signature(original)

    def propose_draft_token_ids(self: Any, *args: Any, **kwargs: Any) -> Any:
        st = _state(self)
        if st is None:
            return original(self, *args, **kwargs)
        desc = sig.bind(self, *args, **kwargs).arguments.get("target_model_batch_desc")
        st.drafting, st.drafting_width = True, _step_width(st, desc)
        try:
            return original(self, *args, **kwargs)
        finally:
            st.drafting, st.drafting_width = False, None

    return propose_draft_token_ids


@contextlib.contextmanager
def drafting(runner: Any, target_desc: Any) -> Iterator[WidthState]:
    """What the wrapped ``propose_draft_token_ids`` sets around the drafter (tests, tools)."""
    st = _state(runner)
    if st is None:
        raise GraphWidthsError("vSpec graph widths are not set up on this runner")
    st.drafting, st.drafting_width = True, _step_width(st, target_desc)
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
    "GAMMA_RUNNABLES_ATTR",
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
    "width_of",
]
