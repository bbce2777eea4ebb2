"""host/worker/ascend/graph_widths.py without a host: the sizing, padding and graph-params routing
rules, and the fail-closed paths. The patches themselves run against the real vllm-ascend 0.23
runner in tests/ascend_pair/test_vspec_graph_widths.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from vllm_hust_vspec.host.patching import Patcher
from vllm_hust_vspec.host.worker import ascend
from vllm_hust_vspec.host.worker.ascend import graph_widths as gw
from vllm_hust_vspec.host.worker.ascend.graph_combined import draft_fanout
from vllm_hust_vspec.host.worker.ascend.graphs import BatchShape, MtpStrictGraphError, check_strict
from vllm_hust_vspec.settings import Settings


@dataclass(frozen=True)
class Desc:
    num_tokens: int
    num_reqs: int | None = None
    uniform: bool = False


def test_sizes_per_width_are_its_multiples_within_its_batch_range() -> None:
    base = [1, 2, 3, 4, 6, 8, 9, 12, 16, 24]
    assert gw.sizes_for_width(1, base, 4, 256) == [1, 2, 3, 4]
    assert gw.sizes_for_width(2, base, 4, 256) == [2, 4, 6, 8]
    assert gw.sizes_for_width(3, base, 4, 256) == [3, 6, 9, 12]
    assert gw.sizes_for_width(4, base, 4, 256) == [4, 8, 12, 16]
    assert gw.sizes_for_width(4, base, 4, 10) == [4, 8]  # max_num_batched_tokens caps


def test_padding_table_pads_to_the_next_size_of_the_width() -> None:
    table = gw.padding_table([3, 6, 12], 16)
    assert [table[n] for n in (1, 3, 4, 7, 9, 12)] == [3, 3, 6, 12, 12, 12]
    assert table[13] == 13 and table[16] == 16  # beyond the width's largest size: no graph


def test_width_of_descriptor() -> None:
    assert gw.width_of(Desc(12, 4, True)) == 3
    assert gw.width_of(Desc(12, 3, True)) == 4
    assert gw.width_of(Desc(12, None, False)) is None
    assert gw.width_of(None) is None


def test_plan_from_settings_is_the_launchers_capture_plan() -> None:
    s = Settings(method="mtp", gamma=3, adaptive_min_gamma=0, max_num_seqs=4,
                 capture_policy="exact")
    plan = gw.plan_from_settings(s)
    assert plan.gammas == (0, 1, 2, 3)
    assert plan.widths == (1, 2, 3, 4)
    assert plan.sizes == (1, 2, 3, 4, 6, 8, 9, 12, 16)


@dataclass
class Params:
    events: dict[int, list[Any]]
    workspaces: dict[int, Any]
    handles: dict[int, list[Any]]
    attn_params: dict[int, list[Any]]


def _params(sizes: list[int]) -> Params:
    return Params({s: [] for s in sizes}, {s: None for s in sizes}, {s: [] for s in sizes},
                  {s: [] for s in sizes})


def test_routed_graph_params_isolate_keys() -> None:
    key = {"k": 2}
    by_key = {2: _params([4, 8]), 4: _params([4, 8])}
    routed = gw.RoutedGraphParams("target", by_key, lambda: key["k"])
    routed.attn_params[4].append("w2")
    routed.workspaces[4] = "ws2"
    key["k"] = 4
    routed.attn_params[4].append("w4")
    assert by_key[2].attn_params[4] == ["w2"] and by_key[4].attn_params[4] == ["w4"]
    assert by_key[2].workspaces[4] == "ws2" and by_key[4].workspaces[4] is None
    assert sorted(routed.workspaces) == [4, 8]
    key["k"] = 3  # a shape that was never set up: iteration is empty, access fails loudly
    assert list(routed.workspaces) == []
    with pytest.raises(gw.GraphWidthsError, match="key 3"):
        routed.attn_params[4]


def test_gamma_draft_graphs_select_by_num_speculative_tokens() -> None:
    class Proposer:
        num_speculative_tokens = 2

    calls: list[str] = []
    graphs = {g: (lambda g=g, **kw: calls.append(f"graph{g}")) for g in (1, 2, 3)}
    sel = gw.GammaDraftGraphs(Proposer(), graphs, lambda **kw: calls.append("eager"))
    sel(num_tokens=4)
    Proposer.num_speculative_tokens = 1
    sel(num_tokens=4)
    Proposer.num_speculative_tokens = 5  # no graph for 5, no forward context: eager
    sel(num_tokens=4)
    assert calls == ["graph2", "graph1", "eager"]


def test_strict_message_names_the_batch_descriptor() -> None:
    shape = BatchShape(num_tokens=16, num_reqs=4, max_query_len=4, all_decode=True)
    with pytest.raises(MtpStrictGraphError) as err:
        check_strict(shape, "NONE", [4, 8, 12], batch_descriptor=Desc(16, None, False))
    assert "Desc(num_tokens=16, num_reqs=None, uniform=False)" in str(err.value)
    check_strict(shape, "FULL", [16])  # a hit: nothing


@pytest.mark.parametrize("mode,on", [("full-decode-only", True), ("full-and-piecewise", True),
                                     ("full", True), ("piecewise", False),
                                     ("eager", False)])
def test_graph_per_gamma_is_on_under_every_full_graph_mode(mode: str, on: bool) -> None:
    # full is combined FULL (cudagraph_mode FULL): shared target graphs, per-gamma
    # draft graphs (tests/ascend_pair/test_vspec_graph_widths.py, mode FULL)
    s = Settings(method="mtp", gamma=3, adaptive_speculation=True, graph_mode=mode)
    assert ("graph_per_gamma" in ascend.features_for(s)) is on
    fixed = Settings(method="mtp", gamma=3, adaptive_speculation=False, graph_mode=mode)
    assert "graph_per_gamma" not in ascend.features_for(fixed)


def test_graph_per_gamma_installs_on_a_native_k_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """A K-taking _propose sets num_speculative_tokens itself, which picks the draft graph:
    the runner and dispatcher get the graph patches, the proposer none (the fork's own
    classes: tests/host/worker/ascend/test_ascend_hust_drafting.py)."""
    from vllm_hust_vspec.host.worker.ascend import proposer

    graph_methods = ("_check_and_update_cudagraph_mode", "_warmup_and_capture",
                     "_determine_batch_execution_and_padding", "_pad_query_start_loc_for_fia",
                     "propose_draft_token_ids", "dispatch")
    classes: dict[str, type] = {}

    def resolve(mod: str, name: str) -> type:
        return classes.setdefault(name, type(name, (), {m: lambda self: None
                                                         for m in graph_methods}))

    monkeypatch.setattr(ascend, "resolve", resolve)
    monkeypatch.setattr(proposer, "install_proposer", lambda *a, **k: "native")
    s = Settings(method="mtp", gamma=3, adaptive_speculation=True,
                 graph_mode="full-decode-only")
    patcher = Patcher("native")
    plan = ascend.install(patcher, lambda: s)
    assert plan.k_channel == "native" and plan.graph_widths
    patched = {r.label.rsplit(".", 1)[-1] for r in patcher.records}
    assert set(graph_methods) <= patched and "_propose" not in patched
    patcher.undo()


def test_propose_wrapper_gives_the_drafter_the_steps_verify_width() -> None:
    seen: list[tuple[bool, int | None]] = []

    class Runner:
        pass

    runner = Runner()
    st = gw.WidthState(max_k=3, widths=(1, 2, 3, 4), sizes={}, tables={}, regime=gw.PER_WIDTH)
    runner.__dict__[gw.STATE_ATTR] = st

    def propose_draft_token_ids(self: Any, valid_sampled_token_ids: Any,
                                scheduler_output: Any = None,
                                target_model_batch_desc: Any = None) -> str:
        seen.append((st.drafting, st.drafting_width))
        return "drafts"

    wrapped = gw.make_propose_wrapper(propose_draft_token_ids)
    assert wrapped(runner, [], scheduler_output=None,
                   target_model_batch_desc=Desc(12, 4, True)) == "drafts"
    wrapped(runner, [], None, Desc(7, None, False))
    assert seen == [(True, 3), (True, None)]
    assert (st.drafting, st.drafting_width) == (False, None)


@pytest.mark.slow
def test_combined_full_dispatch_keeps_the_host_target_and_gates_the_drafts() -> None:
    """Combined FULL: the target dispatch is the host's own (shared keys, no width swap);
    the drafter gets the host's FULL key only in a steady frame of its gamma's width at a size
    with that gamma's graph, or at gamma K after a non-uniform step; else eager (NONE)."""
    from vllm.config import CUDAGraphMode

    class Disp:
        uniform_decode_query_len = 4
        _bs_to_padded_graph_size = list(range(13))

    class Drafter:
        num_speculative_tokens = 3

    seen: list[tuple[int, int, list[int]]] = []

    def dispatch(self: Any, num_tokens: int, uniform_decode: bool = False,
                 has_lora: bool = False) -> tuple[Any, Desc]:
        seen.append((num_tokens, self.uniform_decode_query_len,
                     list(self._bs_to_padded_graph_size)))
        return CUDAGraphMode.FULL, Desc(num_tokens, min(num_tokens, 4), False)

    disp, drafter = Disp(), Drafter()
    st = gw.WidthState(max_k=3, widths=(1, 2, 3, 4), sizes={}, tables={w: [0] for w in range(5)},
                       draft_gammas=(1, 2, 3), drafter=drafter, regime=gw.COMBINED,
                       shared_sizes=[2, 4, 6, 8], draft_sizes={1: [2, 4], 2: [6], 3: [2, 4, 6, 8]})
    disp.__dict__[gw.STATE_ATTR] = st
    wrapped = gw.make_dispatch_wrapper(dispatch)

    def draft(width: int | None, gamma: int, n: int) -> str:
        st.drafting, st.drafting_width = True, width
        drafter.num_speculative_tokens = gamma
        try:
            return wrapped(disp, num_tokens=n, uniform_decode=False)[0].name
        finally:
            st.drafting, st.drafting_width = False, None

    assert wrapped(disp, num_tokens=6, uniform_decode=True)[0].name == "FULL"  # target
    assert seen == [(6, 4, list(range(13)))]  # the host's table and width, untouched
    assert draft(2, 1, 4) == "FULL"  # steady, 4 tokens has a gamma-1 graph
    assert draft(2, 1, 6) == "NONE"  # steady, but no gamma-1 graph at 6
    assert draft(4, 1, 8) == "NONE"  # switching frame
    assert draft(None, 1, 4) == "NONE"  # gamma < K after a mixed step
    assert draft(None, 3, 8) == "FULL"  # gamma K after a mixed step: the host's own
    assert {(f["width"], f["gamma"], f["num_tokens"]) for f in st.eager_frames} == {
        (2, 1, 6), (4, 1, 8), (None, 1, 4)}
    # the step width the drafter sees comes from the batch decision, not the (widthless) key
    st.width = 3
    assert st.regime.step_width(st, Desc(6, 4, False)) == 3
    st.regime = gw.PER_WIDTH
    assert st.regime.step_width(st, Desc(6, 2, True)) == 3
    assert st.regime.step_width(st, Desc(6, 4)) is None


def test_backport_pads_drafts_to_k_on_a_stride_k_async_runner() -> None:
    """Async scheduling on vLLM 0.23 reads the previous frame's drafts with row stride K
    (the V1 runner's async draft copy): the backport hands back gamma drafts zero-padded to K
    there; with sync scheduling, or a runner that keeps the last draft width (prev_num_spec_tokens,
    vLLM >= 0.31), the drafts stay [B, gamma]."""
    import torch

    from vllm_hust_vspec.host.worker.ascend import proposer

    class Proposer:
        num_speculative_tokens = 3

        def __init__(self, async_on: bool, runner: Any) -> None:
            self.use_async_scheduling = async_on
            self.runner = runner

    def original(self: Any, **kwargs: Any) -> Any:
        k = self.num_speculative_tokens
        return torch.arange(1, 2 * k + 1).view(2, k)

    backport = proposer.make_propose_backport(original, lambda: "sticky")

    def run(p: Any, gamma: int) -> Any:
        return backport(p, target_token_ids=torch.zeros(4),
                        common_attn_metadata=type("C", (), {"batch_size": lambda self: 2})(),
                        scheduler_output=type("S", (), {"num_spec_tokens_to_schedule": gamma})())

    stride_k = Proposer(True, object())
    assert run(stride_k, 1).tolist() == [[1, 0, 0], [2, 0, 0]]
    assert run(stride_k, 2).tolist() == [[1, 2, 0], [3, 4, 0]]
    assert run(stride_k, 0).tolist() == [[0, 0, 0], [0, 0, 0]]  # sticky gamma 0
    assert run(stride_k, 3).shape == (2, 3)
    keeps_width = Proposer(True, type("R", (), {"prev_num_spec_tokens": 3})())
    assert run(keeps_width, 1).tolist() == [[1], [2]]
    assert run(Proposer(False, object()), 2).tolist() == [[1, 2], [3, 4]]


class HustDrafter:
    """vLLM-Ascend-HUST's proposer shape: K and num_draft_steps (the tree depth, else K) set
    in __init__; dummy_run (the capture) loops num_draft_steps and shapes its query by K."""

    def __init__(self, k: int) -> None:
        self.num_speculative_tokens = k
        self.num_draft_steps = k
        self.captured: list[tuple[int, int]] = []  # (steps run, max_query_len) per capture

    def dummy_run(self, **kwargs: Any) -> None:
        steps = sum(1 for _ in range(self.num_draft_steps))
        self.captured.append((steps, self.num_speculative_tokens + 1))


def test_per_gamma_draft_graphs_capture_gamma_steps_on_a_hust_proposer() -> None:
    drafter = HustDrafter(3)
    runner = type("Runner", (), {})()
    runner.drafter = drafter
    runner.uniform_decode_query_len = 4
    runner.__dict__[gw.STATE_ATTR] = gw.WidthState(
        max_k=3, widths=(2, 3, 4), sizes={}, tables={}, regime=gw.PER_WIDTH,
        draft_gammas=(1, 2, 3), drafter=drafter)
    for width in (2, 3, 4):
        with gw.as_width(runner, width):
            runner.drafter.dummy_run(num_tokens=8)
    assert drafter.captured == [(1, 2), (2, 3), (3, 4)]
    assert (drafter.num_speculative_tokens, drafter.num_draft_steps) == (3, 3)  # restored
    drafter.captured.clear()
    draft_fanout(drafter, [1, 2, 3])(num_tokens=8)  # combined FULL: one key, each gamma
    assert drafter.captured == [(1, 2), (2, 3), (3, 4)]
