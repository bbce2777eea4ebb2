"""host/ascend/graph_widths.py without a host: the sizing, padding and graph-params routing
rules, and the fail-closed paths. The patches themselves run against the real vllm-ascend 0.23
runner in tests/ascend_pair/test_vspec_graph_widths.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from vllm_hust_vspec.host import ascend
from vllm_hust_vspec.host.ascend import graph_widths as gw
from vllm_hust_vspec.host.ascend.graphs import BatchShape, MtpStrictGraphError, check_strict
from vllm_hust_vspec.host.patching import Patcher
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


def test_graph_per_gamma_fails_closed_on_a_native_k_host(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_hust_vspec.host.ascend import proposer

    monkeypatch.setattr(ascend, "resolve", lambda mod, name: type(name, (), {}))
    monkeypatch.setattr(proposer, "install_proposer", lambda *a, **k: "native")
    s = Settings(method="mtp", gamma=3, adaptive_speculation=True,
                 graph_mode="full-decode-only")
    assert "graph_per_gamma" in ascend.features_for(s)
    with pytest.raises(gw.GraphWidthsError, match="K channel is 'native'"):
        ascend.install(Patcher("native"), lambda: s)


def test_propose_wrapper_gives_the_drafter_the_steps_verify_width() -> None:
    seen: list[tuple[bool, int | None]] = []

    class Runner:
        pass

    runner = Runner()
    st = gw.WidthState(max_k=3, widths=(1, 2, 3, 4), sizes={}, tables={})
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
