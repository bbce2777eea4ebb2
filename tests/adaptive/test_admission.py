"""The refill hold's rule (adaptive/admission.py): what admitting costs, and when holding
the queue pays, for the host and the simulator alike."""

from __future__ import annotations

import dataclasses
import random

import pytest

from vllm_hust_vspec.adaptive.admission import RefillHold
from vllm_hust_vspec.adaptive.feedback import StepFeedback
from vllm_hust_vspec.sim import load_scenario
from vllm_hust_vspec.sim.engine import simulate
from vllm_hust_vspec.sim.policies import make_controller


def _feed(rule: RefillHold, fixed_s: float, per_token_s: float, *, gamma: int = 0,
          steps: int = 200, noise: float = 0.0, seed: int = 1) -> None:
    """Steady steps (10 ms + 0.1 ms per request) and, every 5th, an admitting one."""
    rng = random.Random(seed)
    for i in range(steps):
        batch = 32 + i % 16
        t = 0.010 + 0.0001 * batch
        prompt = 0 if i % 5 else rng.randint(20, 140)
        if prompt:
            t += fixed_s + per_token_s * prompt
        rule.observe(StepFeedback(
            batch_size=batch, gamma=gamma, drafted=(gamma,) * batch, accepted=(0,) * batch,
            committed=batch, interval_s=t * (1.0 + rng.gauss(0.0, noise)), token_budget=8192,
            steady=not prompt, drafter_ran=gamma > 0, next_gamma=gamma,
            prefill_tokens=prompt))


def _fixed_ms(rule: RefillHold) -> float:
    return float(rule.snapshot()["fixed_ms"])


def test_the_fixed_and_per_token_costs_are_told_apart() -> None:
    rule = RefillHold(8, "auto", 16)
    assert rule.snapshot()["admitting_steps"] == 0
    # nothing measured yet: no hold
    assert not rule.decide(occupied=40, free=2, waiting=50, speculating=False, gamma=0)
    _feed(rule, 0.200, 0.0005)
    # every 5th of 200 steps admits; the first, before any decode step, teaches nothing
    assert rule.snapshot()["admitting_steps"] == 39
    assert _fixed_ms(rule) == pytest.approx(200.0, rel=0.05)
    cost = rule.cost
    assert cost is not None
    per_token_s = cost.coefficients(5)["prompt"] / 64.0
    assert per_token_s == pytest.approx(0.0005, rel=0.1)
    assert rule.decide(occupied=40, free=2, waiting=50, speculating=False, gamma=0)


def test_prompt_work_alone_never_pays_for_holding() -> None:
    rule = RefillHold(8, "auto", 16)
    _feed(rule, 0.0, 0.0005, noise=0.05)
    assert _fixed_ms(rule) < 3.0
    assert not any(rule.decide(occupied=40, free=2, waiting=50, speculating=False, gamma=0)
                   for _ in range(5))


def test_a_fixed_cost_lost_in_the_noise_does_not_hold() -> None:
    rule = RefillHold(8, "auto", 16)
    _feed(rule, 0.002, 0.0005, steps=60, noise=0.5)
    assert not rule.decide(occupied=40, free=2, waiting=50, speculating=False, gamma=0)


def test_auto_holds_at_any_gamma_while_grouping_saves_more_than_idle_slots_lose() -> None:
    rule = RefillHold(8, "auto", 16)
    assert not rule.decide(occupied=120, free=2, waiting=50, speculating=True, gamma=2)
    _feed(rule, 0.200, 0.0)
    # a pinned zero (not speculating) holds too: the saving is the host's, not the drafter's
    assert rule.decide(occupied=120, free=2, waiting=50, speculating=False, gamma=0)
    assert not rule.decide(occupied=120, free=8, waiting=50, speculating=False, gamma=0)
    # a fixed cost barely above the idle slots' loss: the hold ends within a few steps, by the
    # accounting alone (no step bound)
    small = RefillHold(8, "auto", 0)
    _feed(small, 0.004, 0.0)
    held = sum(small.decide(occupied=40, free=2, waiting=50, speculating=True, gamma=0)
               for _ in range(20))
    assert 0 < held < 20


def test_the_hold_reads_the_online_controllers_model() -> None:
    """Shared: the controller feeds the model, the hold reads it and feeds nothing itself;
    a controller without a model gives the hold its own back."""
    from vllm_hust_vspec.adaptive import OnlineConfig, OnlineController
    from vllm_hust_vspec.adaptive.fixed import FixedController

    ctrl = OnlineController(OnlineConfig(max_gamma=4, warmup_samples=0))
    rule = RefillHold(8, "auto", 16, max_gamma=4)
    rule.share(ctrl)
    assert rule.cost is ctrl.cost_model
    _feed(rule, 0.200, 0.0)  # the hold does not feed a shared model
    assert ctrl.cost_model.admissions == 0
    rule.share(FixedController(0, 4))
    assert rule.cost is not ctrl.cost_model
    _feed(rule, 0.200, 0.0)
    assert rule.snapshot()["admitting_steps"] == 39


def test_speculating_holds_only_while_speculating_and_for_a_bounded_time() -> None:
    rule = RefillHold(4, "speculating", max_hold_steps=3)
    assert not rule.decide(occupied=3, free=1, waiting=5, speculating=False, gamma=0)
    held = [rule.decide(occupied=3, free=1, waiting=5, speculating=True, gamma=2)
            for _ in range(5)]
    assert held == [True, True, True, False, True]
    with pytest.raises(ValueError, match="auto"):
        RefillHold(4, "sometimes", 16)


def test_always_holds_at_any_gamma_like_the_predecessor() -> None:
    # 0.14.3's hold never read gamma: a pinned zero (no speculation) holds too
    rule = RefillHold(8, "always", 0)
    assert all(rule.decide(occupied=120, free=3, waiting=50, speculating=False, gamma=0)
               for _ in range(40))
    assert not rule.decide(occupied=120, free=8, waiting=50, speculating=False, gamma=0)
    assert not RefillHold(1, "always", 0).decide(occupied=120, free=3, waiting=50,
                                                 speculating=False, gamma=0)


def test_the_simulated_npu_host_holds_at_gamma_zero_and_gains() -> None:
    """On the calibrated Ascend scenario an admitting step costs ~5 decode steps: target-only
    steps with auto holds beat the same steps held only while speculating (never, here)."""
    sc = load_scenario("npu-b128-gsm8k-draft")
    assert sc.refill_hold == "auto"
    old = dataclasses.replace(sc, refill_hold="speculating")
    auto = simulate(sc, make_controller("fixed:0", sc), 1).goodput
    speculating = simulate(old, make_controller("fixed:0", old), 1).goodput
    assert auto > 1.2 * speculating


@pytest.mark.slow
def test_fair_baselines_name_what_holds_are_worth_on_both_readings() -> None:
    """Target-only with the same holds is the fair baseline: on the shipped fit holds alone
    carry target-only most of the way to vSpec online; on the alternative reading (target-only
    admissions priced like the EAGLE host's) they do not, and fixed gamma 2 wins."""
    from vllm_hust_vspec.sim.calibration.fair import alternative_calibration, fair_rows
    from vllm_hust_vspec.sim.calibration.measurements import load_measurements
    from vllm_hust_vspec.sim.calibration.scenarios import load_record

    data, cal = load_measurements(), load_record()
    shipped = {r.label.split(" (")[0]: r.tok_s for r in fair_rows(cal, data, "draft", (1,))}
    alt = {r.label.split(" (")[0]: r.tok_s
           for r in fair_rows(alternative_calibration(cal, data), data, "draft", (1,))}
    held = "target-only + 0.14.3's holds"
    assert shipped[held] > 1.2 * shipped["target-only, no holds"]
    assert shipped[held] > shipped["fixed gamma 2 + vSpec's holds"]
    assert alt[held] < 0.9 * shipped[held]
    assert alt["fixed gamma 2 + vSpec's holds"] > alt[held]
