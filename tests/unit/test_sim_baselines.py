"""Published baseline policies behave as described."""

from __future__ import annotations

import pytest
from _sim_helpers import make

from vllm_hust_vspec.adaptive.feedback import StepFeedback
from vllm_hust_vspec.sim import (
    FixedGamma,
    HfHeuristic,
    Oracle,
    SglangAdaptive,
    Ucb1,
    VllmBatchSchedule,
    make_controller,
)
from vllm_hust_vspec.sim.policies import PolicyError


def fb(gamma: int, accepted: list[int], interval: float = 0.01) -> StepFeedback:
    return StepFeedback(batch_size=len(accepted), gamma=gamma, drafted=(gamma,) * len(accepted),
                        accepted=tuple(accepted), committed=sum(accepted) + len(accepted),
                        interval_s=interval, token_budget=1024)


def test_hf_heuristic_plus_two_minus_one_floor_one() -> None:
    hf = HfHeuristic(min_gamma=0, max_gamma=7, start=3)
    hf.observe(fb(3, [3, 3]))
    assert hf.decide(2, 1024) == 5
    hf.observe(fb(5, [5, 4]))
    assert hf.decide(2, 1024) == 4
    for _ in range(10):
        hf.observe(fb(1, [0]))
    assert hf.decide(1, 1024) == 1  # never below 1
    for _ in range(10):
        hf.observe(fb(1, [1]))
    assert hf.decide(1, 1024) == 7  # capped at max


def test_sglang_ema_and_tiers() -> None:
    sg = SglangAdaptive(min_gamma=0, max_gamma=5)
    assert sg.tiers == (1, 3, 5)  # 7 clipped to max_gamma
    assert sg.decide(4, 1024) == 5
    sg.observe(fb(5, [0, 0, 0, 0]))  # EMA starts at 0 -> target 1
    assert sg.ema == 0.0 and sg.decide(4, 1024) == 1
    sg.observe(fb(1, [1, 1, 1, 1]))  # EMA = 0.2 -> round 0 -> target 1
    assert sg.ema == pytest.approx(0.2) and sg.decide(4, 1024) == 1
    for _ in range(20):
        sg.observe(fb(5, [4, 4]))
    assert sg.ema == pytest.approx(4.0, abs=0.1)
    assert sg.decide(2, 1024) == 5  # target 5 -> tier 5
    sg2 = SglangAdaptive(min_gamma=0, max_gamma=7)
    sg2.observe(fb(7, [2, 1]))  # EMA 1.5 -> round 2 -> target 3
    assert sg2.decide(2, 1024) == 3


def test_vllm_batch_schedule_lookup() -> None:
    v = VllmBatchSchedule(0, 5)
    assert [v.decide(b, 8192) for b in (1, 16, 17, 64, 65, 128, 129, 512)] == \
        [5, 5, 3, 3, 1, 1, 1, 1]
    custom = VllmBatchSchedule(0, 4, schedule=[(1, 4, 4), (8, 16, 2)])
    assert custom.decide(6, 0) == 4  # gaps carry the previous K forward
    assert custom.decide(100, 0) == 2
    with pytest.raises(ValueError, match="start at batch 1"):
        VllmBatchSchedule(0, 4, schedule=[(2, 4, 4)])


def test_ucb1_tries_every_arm_then_exploits() -> None:
    u = Ucb1(0, 3)
    seen = []
    for _ in range(4):
        g = u.decide(8, 1024)
        seen.append(g)
        u.observe(fb(g, [g] * 8, interval=0.01 if g == 2 else 0.02))
    assert sorted(seen) == [0, 1, 2, 3]
    picks = []
    for _ in range(200):
        g = u.decide(8, 1024)
        picks.append(g)
        u.observe(fb(g, [min(g, 2)] * 8, interval=0.01 if g == 2 else 0.02))
    assert picks.count(2) > 150


def test_fixed_and_factory_names() -> None:
    sc = make()
    assert isinstance(make_controller("fixed:2", sc), FixedGamma)
    assert isinstance(make_controller("oracle", sc), Oracle)
    with pytest.raises(PolicyError, match="min_gamma..max_gamma"):
        make_controller("fixed:9", sc)
    with pytest.raises(PolicyError, match="unknown policy"):
        make_controller("greedy", sc)


def test_oracle_outside_simulator_errors() -> None:
    with pytest.raises(RuntimeError, match="simulator"):
        Oracle(0, 3).decide(1, 10)
