"""Per-key ACL graph bookkeeping for graph-per-gamma (host/worker/ascend/graph_widths.py).

Sizing helpers, the merged draft graph per gamma (:class:`GammaDraftGraphs`), and vllm-ascend's
graph params (``acl_graph.GraphParams``) kept apart per key.

vllm-ascend keeps the attention kernels' capture-time parameters (``attn_params``), task-group
``handles``, ``events`` and ``workspaces`` of every captured graph in one module global per
role (``acl_graph._graph_params`` for the target, ``_draft_graph_params`` for the merged draft
graph), each a dict keyed by token count only. Graphs that share a token count but differ in
shape (another query width, another gamma) would overwrite each other's entries there;
:class:`RoutedGraphParams` stands in for that global and forwards every access to the
``GraphParams`` of the key that ``key_fn()`` names at that moment.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

from vllm_hust_vspec.host.worker.ascend.graphs import mode_name


class GraphWidthsError(RuntimeError):
    """Per-width / per-gamma ACL graphs cannot be set up correctly on this host or config."""


def width_of(desc: Any) -> int | None:
    """Query width of a uniform batch descriptor (``num_tokens // num_reqs``), else None."""
    if desc is None or not getattr(desc, "uniform", False):
        return None
    reqs = getattr(desc, "num_reqs", None)
    if not reqs:
        return None
    return int(desc.num_tokens) // int(reqs)


def sizes_for_width(width: int, base: list[int], max_num_seqs: int, max_tokens: int) -> list[int]:
    """Capture sizes of width ``width``: multiples of it, ``width .. width * max_num_seqs``."""
    top = min(width * max_num_seqs, max_tokens)
    return sorted({s for s in base if s % width == 0 and width <= s <= top})


def padding_table(sizes: list[int], max_size: int) -> list[int]:
    """``table[n]``: the smallest size >= n (n itself beyond the largest: no graph)."""
    table = list(range(max_size + 1))
    ordered = sorted(sizes)
    j = 0
    for n in range(max_size + 1):
        while j < len(ordered) and ordered[j] < n:
            j += 1
        if j < len(ordered):
            table[n] = ordered[j]
    return table


# -- the merged draft graph per gamma --------------------------------------------------------
class GammaDraftGraphs:
    """The proposer's ``_runnable``: the merged draft graph of the current gamma."""

    def __init__(self, proposer: Any, graphs: dict[int, Any], eager: Callable[..., Any]):
        self._proposer = proposer
        self.graphs = graphs
        self.eager = eager

    def select(self) -> Any:
        gamma = int(self._proposer.num_speculative_tokens)
        graph = self.graphs.get(gamma)
        if graph is not None:
            return graph
        fc_mod = sys.modules.get("vllm.forward_context")
        if fc_mod is not None and fc_mod.is_forward_context_available():
            mode = mode_name(getattr(fc_mod.get_forward_context(), "cudagraph_runtime_mode", ""))
            if mode == "FULL":
                raise GraphWidthsError(
                    f"vSpec graph widths: the drafter was dispatched FULL at gamma {gamma}, which "
                    f"has no draft graph (captured: {sorted(self.graphs)})")
        return self.eager

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.select()(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.graphs[max(self.graphs)], name)


def make_graph_params(acl_graph: Any, sizes: list[int]) -> Any:
    """A fresh ``acl_graph.GraphParams`` for these token counts (what ``set_graph_params``
    builds, without touching the module global): every field a dict keyed by size, a list per
    size except ``workspaces`` (None). Fields are read from the host's dataclass, as lines add
    some (vLLM-Ascend-HUST keeps causal-conv1d params there too)."""
    names = [f.name for f in dataclasses.fields(acl_graph.GraphParams)]
    return acl_graph.GraphParams(**{
        name: {s: None for s in sizes} if name == "workspaces" else {s: [] for s in sizes}
        for name in names})


class _FieldView(MutableMapping):
    """One ``GraphParams`` field (``attn_params``, ``handles``, ...) of the routed key."""

    def __init__(self, router: RoutedGraphParams, name: str) -> None:
        self._router = router
        self._name = name

    def _target(self, strict: bool) -> dict[Any, Any]:
        params = self._router.current(strict=strict)
        return {} if params is None else getattr(params, self._name)

    def __getitem__(self, k: Any) -> Any:
        return self._target(True)[k]

    def __setitem__(self, k: Any, v: Any) -> None:
        self._target(True)[k] = v

    def __delitem__(self, k: Any) -> None:
        del self._target(True)[k]

    def __iter__(self) -> Iterator[Any]:  # weak_ref_workspaces iterates after every capture
        return iter(list(self._target(False)))

    def __len__(self) -> int:
        return len(self._target(False))


class RoutedGraphParams:
    """Stands in for vllm-ascend's ``GraphParams``: one real ``GraphParams`` per key.

    ``get_graph_params()`` / ``get_draft_graph_params()`` return the module global this
    replaces, so every reader (attention capture, ``update_graph_params``, workspace weak-refs)
    sees the ``GraphParams`` of the key ``key_fn()`` names at that moment.
    """

    def __init__(self, label: str, by_key: dict[Any, Any], key_fn: Callable[[], Any]) -> None:
        self.label = label
        self.by_key = by_key
        self.key_fn = key_fn
        # every field of the host's GraphParams (they differ between lines)
        for f in dataclasses.fields(next(iter(by_key.values()))):
            setattr(self, f.name, _FieldView(self, f.name))

    def current(self, strict: bool = True) -> Any:
        key = self.key_fn()
        params = self.by_key.get(key)
        if params is None and strict:
            raise GraphWidthsError(
                f"vSpec graph widths: {self.label} graph params requested for key {key!r}, but "
                f"graphs were captured only for {sorted(self.by_key)}; a graph of that shape "
                f"was never set up (this is a vSpec bug: please report it with the config)")
        return params

    def __repr__(self) -> str:
        return f"RoutedGraphParams({self.label}, keys={sorted(self.by_key)})"


__all__ = [
    "GammaDraftGraphs",
    "GraphWidthsError",
    "RoutedGraphParams",
    "make_graph_params",
    "padding_table",
    "sizes_for_width",
    "width_of",
]
