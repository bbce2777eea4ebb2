"""Ascend adapter logic with stand-ins (no vllm, no vllm_ascend): the K backport wrapper and
the mtp_strict_graph check. The same code runs against the real vllm-ascend classes in
tests/host/worker/ascend/test_ascend_import.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from vllm_hust_vspec.host.patching import Patcher, PatchError  # noqa: E402
from vllm_hust_vspec.host.worker.ascend import graphs, proposer  # noqa: E402


class FakeProposer:
    """K-less _propose like vllm-ascend v0.18..v0.26: drafts self.num_speculative_tokens."""

    def __init__(self, k: int) -> None:
        self.num_speculative_tokens = k
        self.calls: list[int] = []

    def _propose(self, target_token_ids: Any, common_attn_metadata: Any,
                 scheduler_output: Any = None) -> Any:
        self.calls.append(self.num_speculative_tokens)
        b = common_attn_metadata.batch_size()
        return torch.arange(self.num_speculative_tokens).repeat(b, 1)


class GraphWrapperStandIn:
    """Named like vllm-ascend's ACLGraphWrapper: the draft K is baked in."""

    __name__ = "ACLGraphWrapper"


GraphWrapperStandIn.__name__ = "ACLGraphWrapper"


def call(p: FakeProposer, gamma: int | None, **extra: Any) -> Any:
    sched = SimpleNamespace(**({} if gamma is None else {"num_spec_tokens_to_schedule": gamma}),
                            **extra)
    cad = SimpleNamespace(batch_size=lambda: 3)
    return p._propose(target_token_ids=torch.zeros(5), common_attn_metadata=cad,
                      scheduler_output=sched)


@pytest.fixture()
def patched() -> Any:
    patcher = Patcher("test-ascend")
    mode = {"gamma0": "sticky"}
    variant = proposer.install_proposer(patcher, FakeProposer, lambda: mode["gamma0"])
    yield variant, mode
    patcher.undo()


def test_backport_drafts_exactly_gamma(patched: Any) -> None:
    variant, mode = patched
    assert variant == "backport"
    p = FakeProposer(4)
    for gamma in (4, 3, 1, 7, None):
        out = call(p, gamma)
        want = 4 if gamma is None else min(gamma, 4)
        assert tuple(out.shape) == (3, want)
        assert p.num_speculative_tokens == 4  # restored: buffers/graphs keep max K
    assert p.calls == [4, 3, 1, 4, 4]


def test_gamma_zero_sticky_skips_and_sync_keeps_kv(patched: Any) -> None:
    _, mode = patched
    p = FakeProposer(4)
    assert tuple(call(p, 0).shape) == (3, 0) and p.calls == []
    mode["gamma0"] = "sync"
    assert tuple(call(p, 0).shape) == (3, 0) and p.calls == [1]
    assert tuple(call(p, 0, vspec_skip_draft=True).shape) == (3, 0) and p.calls == [1]


def test_full_draft_graph_truncates_or_uses_gamma_graph(patched: Any) -> None:
    p = FakeProposer(4)
    p._runnable = GraphWrapperStandIn()
    out = call(p, 2)
    assert tuple(out.shape) == (3, 2) and p.calls == [4]  # drafted max K, verify gamma
    gamma_graph = object()
    seen: list[Any] = []
    orig = FakeProposer._propose.__vspec_original__

    def spy(self: Any, **kw: Any) -> Any:
        seen.append(self._runnable)
        return orig(self, **kw)

    p.__dict__[proposer.GAMMA_RUNNABLES_ATTR] = {2: gamma_graph}
    wrapper = proposer.make_propose_backport(spy, lambda: "sticky")
    out = wrapper(p, target_token_ids=torch.zeros(5),
                  common_attn_metadata=SimpleNamespace(batch_size=lambda: 3),
                  scheduler_output=SimpleNamespace(num_spec_tokens_to_schedule=2))
    assert seen == [gamma_graph] and tuple(out.shape) == (3, 2)
    assert isinstance(p._runnable, GraphWrapperStandIn)


def test_native_k_is_left_alone() -> None:
    class Native:
        def _propose(self, num_speculative_tokens: int, scheduler_output: Any = None) -> None:
            ...

    patcher = Patcher("native")
    assert proposer.install_proposer(patcher, Native, lambda: "sticky") == "native"
    assert len(patcher) == 0


def test_no_channel_fails_closed() -> None:
    class Neither:
        def _propose(self, target_token_ids: Any) -> None: ...

    with pytest.raises(PatchError, match="neither num_speculative_tokens nor scheduler_output"):
        proposer.install_proposer(Patcher("x"), Neither, lambda: "sticky")


class Mode:
    def __init__(self, name: str) -> None:
        self.name = name


class FakeRunner:
    def __init__(self, computed: list[int]) -> None:
        self.input_batch = SimpleNamespace(num_computed_tokens_cpu=np.array(computed))
        self.vllm_config = SimpleNamespace(
            compilation_config=SimpleNamespace(cudagraph_capture_sizes=[3, 6, 9]))
        self.next_mode = "FULL"

    def _determine_batch_execution_and_padding(
        self, num_tokens: int, num_reqs: int, num_scheduled_tokens_np: Any,
        max_num_scheduled_tokens: int, use_cascade_attn: bool,
        allow_microbatching: bool = False, force_eager: bool = False,
        force_uniform_decode: bool | None = None,
    ) -> tuple[Any, ...]:
        return (Mode(self.next_mode), None, False, None, None)


def test_mtp_strict_graph() -> None:
    patcher = Patcher("strict")
    on = {"v": True}
    graphs.install_strict_graph(patcher, FakeRunner, lambda: on["v"])
    try:
        r = FakeRunner([5, 5, 5])
        r._determine_batch_execution_and_padding(9, 3, None, 3, False)  # FULL: fine
        r.next_mode = "PIECEWISE"
        with pytest.raises(graphs.MtpStrictGraphError, match=r"3 requests x width 2 \(gamma 1"):
            r._determine_batch_execution_and_padding(6, 3, None, 2, False)
        # Not a decode batch (ragged / prefill) -> allowed; capture runs -> allowed.
        r._determine_batch_execution_and_padding(7, 3, None, 3, False)
        r._determine_batch_execution_and_padding(6, 3, None, 2, False, force_eager=True)
        r._determine_batch_execution_and_padding(6, 3, None, 2, False, False, False, True)
        prefilling = FakeRunner([0, 5, 5])
        prefilling.next_mode = "PIECEWISE"
        prefilling._determine_batch_execution_and_padding(6, 3, None, 2, False)
        on["v"] = False
        r._determine_batch_execution_and_padding(6, 3, None, 2, False)
    finally:
        patcher.undo()
