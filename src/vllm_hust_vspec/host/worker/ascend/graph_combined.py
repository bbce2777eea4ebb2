"""Graph-per-gamma under combined FULL (``cudagraph_mode=FULL``, no separate decode routine):
the host's shared target keys serve every layout; draft graphs stay per gamma.

docs/hosts.md (Graphs, item 4) says why the shared target graph is correct at every width and
why the merged draft graph is not.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from vllm_hust_vspec.host.worker.ascend.graph_params import (
    GraphWidthsError,
    make_graph_params,
    padding_table,
)
from vllm_hust_vspec.host.worker.ascend.graph_regime import (
    WidthState,
    check_params_global,
    eager_draft,
    swapped,
)
from vllm_hust_vspec.host.worker.ascend.graphs import mode_name
from vllm_hust_vspec.host.worker.k_channel import drafting_steps


def draft_fanout(drafter: Any, gammas: list[int]) -> Callable[..., Any]:
    """The runner's one ``drafter.dummy_run`` call per shared key, run once per gamma that has
    a draft graph at that key (same arguments, the gamma's K)."""
    original = drafter.dummy_run

    def dummy_run(*args: Any, **kwargs: Any) -> Any:
        out = None
        for g in gammas:
            with drafting_steps(drafter, g):
                out = original(*args, **kwargs)
        return out

    return dummy_run


class CombinedGraphs:
    """Layout-free FULL keys at every shared size and one shared target GraphParams."""

    combined = True

    def add_host_sizes(self, disp: Any, own: dict[int, list[int]], max_k: int) -> None:
        """The host's sizes are already shared by every width."""

    def setup(self, runner: Any, disp: Any, own: dict[int, list[int]], union: list[int],
              widths: tuple[int, ...], max_k: int, max_seqs: int,
              strict: Callable[[], bool]) -> WidthState:
        from vllm.config import CUDAGraphMode
        from vllm_ascend.compilation import acl_graph as ag

        table = padding_table(union, union[-1])
        # the shared sizes a steady batch of each width pads to (batch 1..max_num_seqs)
        reach = {w: sorted({table[b * w] for b in range(1, max_seqs + 1) if b * w <= union[-1]})
                 for w in widths}
        draft_sizes = {w - 1: reach[w] for w in widths if w > 1}
        # the host's own draft graph (gamma K) at every shared key, as the host captures it
        draft_sizes[max_k] = list(union)
        st = WidthState(max_k=max_k, widths=widths, sizes=reach,
                        tables=dict.fromkeys(widths, table), regime=self, strict=strict,
                        shared_sizes=list(union), draft_sizes=draft_sizes)
        disp._bs_to_padded_graph_size = table
        for s in union:
            for loras in disp._get_lora_cases():
                desc = disp._create_padded_batch_descriptor(s, False, loras > 0, loras)
                if desc.num_tokens != s or desc.uniform:
                    raise GraphWidthsError(
                        f"vSpec graph widths: the dispatcher made {desc} for shared size {s}")
                disp.add_cudagraph_key(CUDAGraphMode.FULL, desc)
        # target graph params: shared, one GraphParams keyed by token count (as the host's
        # own, for the added sizes too)
        ag._graph_params = make_graph_params(ag, union)
        check_params_global(ag, "get_graph_params", "_graph_params")
        return st

    def at_width(self, runner: Any, width: int) -> AbstractContextManager[object]:
        """The shared keys have no width: the runner stays as the host shaped it."""
        return contextlib.nullcontext()

    def warmup_and_capture(self, st: WidthState, original: Callable[..., Any], runner: Any,
                           desc: Any, *args: Any, **kwargs: Any) -> Any:
        """One shared target graph per key (the host's capture), then the merged draft graph
        of every gamma that has one at this key, inside the same dummy runs."""
        drafter = getattr(runner, "drafter", None)
        gammas = sorted((g for g in st.draft_gammas
                         if desc.num_tokens in st.draft_sizes.get(g, ())), reverse=True)
        with contextlib.ExitStack() as stack:
            if drafter is not None and st.draft_gammas:
                stack.enter_context(swapped(drafter, dummy_run=draft_fanout(drafter, gammas)))
            return original(runner, desc, *args, **kwargs)

    def dispatch(self, st: WidthState, original: Callable[..., Any], disp: Any,
                 bound: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        """The host's own dispatch for the target; the drafter replays its gamma's graph only
        in a steady uniform frame (or, at gamma K, wherever the host would replay its own)."""
        if not st.drafting:
            return original(disp, *args, **kwargs)
        num_tokens = int(bound["num_tokens"])
        w, g = st.drafting_width, st.draft_gamma()
        if g not in st.draft_gammas or (w is None and g != st.max_k) \
                or (w is not None and g + 1 != w):
            return eager_draft(st, w, g, num_tokens)
        mode, desc = original(disp, *args, **kwargs)
        if mode_name(mode) == "FULL" and desc.num_tokens not in st.draft_sizes[g]:
            return eager_draft(st, w, g, num_tokens)
        return mode, desc

    def step_width(self, st: WidthState, desc: Any) -> int | None:
        """Keys carry no width: the uniform-decode width the step was dispatched at (recorded
        by the ``_determine_batch_execution_and_padding`` wrapper; None otherwise)."""
        return st.width


COMBINED = CombinedGraphs()

__all__ = ["COMBINED", "CombinedGraphs", "draft_fanout"]
