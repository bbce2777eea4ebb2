"""Graph-per-gamma with FULL decode graphs on a separate routine (FULL_DECODE_ONLY,
FULL_AND_PIECEWISE): target keys, padding tables and graph params per verify width.

docs/hosts.md (Graphs, items 1 to 3) says what is captured and how a batch finds its graph.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from vllm_hust_vspec.host.worker.ascend.graph_params import (
    GraphWidthsError,
    RoutedGraphParams,
    make_graph_params,
    padding_table,
    width_of,
)
from vllm_hust_vspec.host.worker.ascend.graph_regime import (
    WidthState,
    as_width,
    check_params_global,
    eager_draft,
    swapped,
)


def _forward_context_width() -> int | None:
    fc_mod = sys.modules.get("vllm.forward_context")
    if fc_mod is None or not fc_mod.is_forward_context_available():
        return None
    return width_of(getattr(fc_mod.get_forward_context(), "batch_descriptor", None))


class PerWidthGraphs:
    """Uniform FULL keys per width ``w``: ``BatchDescriptor(s, s // w, uniform=True)``."""

    combined = False

    def add_host_sizes(self, disp: Any, own: dict[int, list[int]], max_k: int) -> None:
        """Width ``1 + K`` keeps the host's own (rounded) uniform sizes."""
        from vllm.config import CUDAGraphMode

        host = {d.num_tokens for d in disp.cudagraph_keys[CUDAGraphMode.FULL] if d.uniform}
        own[max_k + 1] = sorted(set(own[max_k + 1]) | host)

    def setup(self, runner: Any, disp: Any, own: dict[int, list[int]], union: list[int],
              widths: tuple[int, ...], max_k: int, max_seqs: int,
              strict: Callable[[], bool]) -> WidthState:
        from vllm.config import CUDAGraphMode
        from vllm_ascend.compilation import acl_graph as ag

        tables = {w: padding_table(own[w], union[-1]) for w in widths}
        st = WidthState(max_k=max_k, widths=widths, sizes=own, tables=tables, regime=self,
                        strict=strict, draft_sizes={w - 1: own[w] for w in widths if w > 1})
        # dispatcher: the host's own table stays the default (mixed / non-uniform batches pad
        # to the host's sizes, as before), extended with "no graph" up to the new largest size
        host_table = list(disp._bs_to_padded_graph_size)
        disp._bs_to_padded_graph_size = host_table + list(range(len(host_table),
                                                                union[-1] + 1))
        lora_cases = disp._get_lora_cases()
        for w in widths:
            with swapped(disp, uniform_decode_query_len=w, _bs_to_padded_graph_size=tables[w]):
                for s in own[w]:
                    for loras in lora_cases:
                        desc = disp._create_padded_batch_descriptor(s, True, loras > 0, loras)
                        if width_of(desc) != w:
                            raise GraphWidthsError(
                                f"vSpec graph widths: the dispatcher made {desc} for width "
                                f"{w}, size {s} (expected num_reqs {s // w})")
                        disp.add_cudagraph_key(CUDAGraphMode.FULL, desc)
        # target graph params: one GraphParams per width
        ag._graph_params = RoutedGraphParams(
            "target", {w: make_graph_params(ag, own[w]) for w in widths}, _forward_context_width)
        check_params_global(ag, "get_graph_params", "_graph_params")
        return st

    def at_width(self, runner: Any, width: int) -> AbstractContextManager[object]:
        return swapped(runner, uniform_decode_query_len=width)

    def warmup_and_capture(self, st: WidthState, original: Callable[..., Any], runner: Any,
                           desc: Any, *args: Any, **kwargs: Any) -> Any:
        w = width_of(desc)
        if w is None:
            return original(runner, desc, *args, **kwargs)
        with as_width(runner, w):
            return original(runner, desc, *args, **kwargs)

    def dispatch(self, st: WidthState, original: Callable[..., Any], disp: Any,
                 bound: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        """A uniform decode dispatches at the batch's width, on that width's table."""
        if not bound.get("uniform_decode"):
            return original(disp, *args, **kwargs)
        if st.drafting:
            w, g = st.drafting_width, st.draft_gamma()
            if w is None or g + 1 != w or g not in st.draft_gammas:
                return eager_draft(st, w, g, int(bound["num_tokens"]))
        else:
            w = st.width or st.max_k + 1
        with swapped(disp, uniform_decode_query_len=w, _bs_to_padded_graph_size=st.tables[w]):
            return original(disp, *args, **kwargs)

    def step_width(self, st: WidthState, desc: Any) -> int | None:
        """The width of the step's uniform target key."""
        return width_of(desc)


PER_WIDTH = PerWidthGraphs()

__all__ = ["PER_WIDTH", "PerWidthGraphs"]
