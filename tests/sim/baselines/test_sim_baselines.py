"""Published baseline policies behave as described."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from _sim_helpers import make

from vllm_hust_vspec.adaptive.feedback import StepFeedback
from vllm_hust_vspec.sim import (
    AcceptanceAdaptiveK,
    DflashAdaptiveK,
    FixedGamma,
    HfHeuristic,
    NightjarBandit,
    Oracle,
    SglangAdaptive,
    SglangPerBatchEma,
    Ucb1,
    VllmBatchSchedule,
    make_controller,
    simulate,
)
from vllm_hust_vspec.sim.baselines.vllm_upstream import (
    DFLASH_PROFILE_CONTEXT,
    dflash_k_candidates,
    dflash_startup_cost,
    pow2_bucket,
)
from vllm_hust_vspec.sim.policies import BASELINES, PolicyError, known_policy_help


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


def test_online_takes_a_sampler_seed_by_name() -> None:
    """``online@N`` is the online controller with Thompson sampler seed N; ``online`` is the
    host's seed 0. Another seed draws differently, so the same workload is decided apart."""
    sc = make(acceptance={"type": "iid", "alpha": 0.6, "beta_concentration": 5.0})
    assert make_controller("online@3", sc).config.seed == 3  # type: ignore[attr-defined]
    runs = {p: simulate(sc, make_controller(p, sc), seed=4, record=True)
            for p in ("online", "online@0", "online@1")}
    assert runs["online"].timeline == runs["online@0"].timeline
    assert runs["online@1"].timeline["gamma"] != runs["online"].timeline["gamma"]
    for bad in ("online@", "online@x", "online@-1"):
        with pytest.raises(PolicyError, match="online@N"):
            make_controller(bad, sc)


def test_oracle_outside_simulator_errors() -> None:
    with pytest.raises(RuntimeError, match="simulator"):
        Oracle(0, 3).decide(1, 10)


# -- baselines from current upstream (sim/baselines/vllm_upstream.py, per_batch.py) --


class Recorder:
    """Wraps a controller and keeps every raw decision (the engine clips, this does not)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.decisions: list[int] = []

    def decide(self, batch_size: int, token_budget: int) -> int:
        g = int(self.inner.decide(batch_size, token_budget))
        self.decisions.append(g)
        return g

    def observe(self, feedback: StepFeedback) -> None:
        self.inner.observe(feedback)

    def settled(self) -> bool:
        return bool(self.inner.settled())

    def report(self) -> Any:
        return self.inner.report()

    def snapshot(self) -> dict[str, Any]:
        return dict(self.inner.snapshot())


def drive(ctrl: Any, batch: int, steps: int, accept: Callable[[int], int],
          seconds: Callable[[int, int], float]) -> list[int]:
    """Engine order: decide for the drafts made after this step, then observe the step that
    verified the previous decision. ``seconds(verified, drafted)`` is the step time."""
    prev = ctrl.decide(batch, 8192)
    out = [prev]
    for _ in range(steps):
        g = ctrl.decide(batch, 8192)
        acc = [min(prev, accept(prev))] * batch
        ctrl.observe(StepFeedback(batch_size=batch, gamma=prev, drafted=(prev,) * batch,
                                  accepted=tuple(acc), committed=sum(acc) + batch,
                                  interval_s=seconds(prev, g), token_budget=8192))
        out.append(g)
        prev = g
    return out


def test_acceptance_adaptive_k_warmup_then_drops_trailing_low_positions() -> None:
    ak = AcceptanceAdaptiveK(0, 4, window=10, use_schedule=False)
    assert (ak.threshold, ak.probe_interval, ak.hysteresis) == (0.4, 64, 0.05)
    # per-position acceptance of 10 drafts of 4: [1.0, 0.5, 0.3, 0.3]
    ak.observe(fb(4, [4, 4, 4, 2, 2, 1, 1, 1, 1]))
    assert ak.decide(9, 1024) == 4  # 9 < window drafts: still warming up at max
    ak.observe(fb(4, [1]))
    assert ak.rate == pytest.approx([1.0, 0.5, 0.3, 0.3])
    assert ak.decide(10, 1024) == 2  # position 2 (0.3 < 0.4) and everything after it dropped
    assert ak.enabled == [True, True, False, True]


def test_acceptance_adaptive_k_probes_full_k_every_64_steps_and_takes_schedule_min() -> None:
    ak = AcceptanceAdaptiveK(0, 4, window=4)
    ak.observe(fb(4, [1, 1, 1, 1]))  # acceptance [1, 0, 0, 0] -> K = 1
    picks = [ak.decide(8, 8192) for _ in range(70)]
    assert picks[63] == 4  # the 64th step probes the full K
    assert set(picks[:63]) == {1} and set(picks[64:]) == {1}
    # a probe is capped by the batch-size schedule (max 4: batch 65-128 -> K 1)
    ak2 = AcceptanceAdaptiveK(0, 4, window=4)
    assert [ak2.decide(b, 8192) for b in (8, 100)] == [4, 1]
    assert AcceptanceAdaptiveK(0, 4, window=4, use_schedule=False).decide(100, 8192) == 4


def test_acceptance_adaptive_k_hysteresis_and_floor() -> None:
    ak = AcceptanceAdaptiveK(0, 2, threshold=0.5, window=20, probe_interval=0,
                             hysteresis=0.1, use_schedule=False)
    ak.observe(fb(2, [2, 1] * 10))  # position 1 exactly at 0.5: kept
    assert ak.decide(1, 0) == 2
    ak.observe(fb(2, [1]))  # dips below 0.5: dropped
    assert ak.decide(1, 0) == 1
    while ak.rate[1] < 0.55:
        ak.observe(fb(2, [2]))
    assert ak.decide(1, 0) == 1  # above the threshold but inside the hysteresis band
    while ak.rate[1] < 0.6:
        ak.observe(fb(2, [2]))
    assert ak.decide(1, 0) == 2
    floor = AcceptanceAdaptiveK(1, 3, window=2, probe_interval=0)
    floor.observe(fb(3, [0, 0]))
    assert floor.decide(1, 0) == 1  # nothing clears the threshold, min_gamma holds
    with pytest.raises(ValueError, match="threshold"):
        AcceptanceAdaptiveK(0, 3, threshold=0.0)


def _profile(base: float = 0.010, per_k: float = 0.001) -> Callable[[int, int], float]:
    """A start-up profile pricing a step at ``base`` plus ``per_k`` per drafted position."""
    return lambda batch, k: base + per_k * k


def test_dflash_candidates_are_power_of_two_query_lengths() -> None:
    assert dflash_k_candidates(7) == [0, 1, 3, 7]
    assert dflash_k_candidates(5) == [0, 1, 3, 5]
    assert dflash_k_candidates(15) == [0, 1, 3, 7, 15]
    assert dflash_k_candidates(0) == [0]
    assert DflashAdaptiveK(2, 7, _profile()).candidates == [3, 7]
    assert [pow2_bucket(b) for b in (0, 1, 2, 3, 16, 17, 64)] == [0, 1, 2, 4, 16, 32, 64]


def test_dflash_picks_only_from_its_candidates_in_a_simulation() -> None:
    sc = make(max_gamma=7, max_num_seqs=32, workload__num_requests=96,
              workload__arrival={"type": "closed", "concurrency": 32})
    rec = Recorder(make_controller("vllm-dflash-adaptive-k", sc))
    simulate(sc, rec, seed=2)
    assert set(rec.decisions) <= {0, 1, 3, 7}
    assert rec.decisions[0] == 7  # full K until a decision at batch >= 16 is scored


def test_dflash_startup_profile_prices_the_scenario_at_the_profile_context() -> None:
    sc = make(max_gamma=3, cost={"type": "linear", "target_base_ms": 10.0,
                                 "target_per_token_ms": 0.1, "target_per_ctx_ktoken_ms": 0.5,
                                 "draft_step_ms": 1.0})
    price = dflash_startup_cost(sc.cost)
    # 32 requests at K = 3: 128 tokens, 32 x 8192 context tokens, three drafter passes
    want = (10.0 + 0.1 * 128 + 0.5 * 32 * DFLASH_PROFILE_CONTEXT / 1000 + 3 * 1.0) * 1e-3
    assert price(32, 3) == pytest.approx(want)
    assert price(32, 0) == pytest.approx((10.0 + 3.2 + 0.5 * 32 * 8.192) * 1e-3)


def test_dflash_scores_from_its_startup_profile_then_ratchets_down_for_good() -> None:
    d = DflashAdaptiveK(0, 7, _profile())
    assert d.decide(8, 8192) == 7 and d.settled()  # below batch 16: full K
    # drafting never accepted, each drafted token costs 1 ms on a 10 ms step
    picks = drive(d, 32, 40, accept=lambda g: 0, seconds=lambda v, g: 0.010 + 0.001 * g)
    assert picks[0] == 7  # survival starts at 1: the profile alone favours full K
    assert all(a >= b for a, b in zip(picks, picks[1:], strict=False))  # only ever down
    assert set(picks) <= {0, 1, 3, 7} and d.settled()
    assert picks[-1] == 0 and d.global_cap == 0
    assert d.decide(4, 8192) == 0  # the global cap ends speculation at every batch size
    d2 = DflashAdaptiveK(0, 7, _profile(per_k=0.0002))
    picks2 = drive(d2, 32, 40, accept=lambda g: g, seconds=lambda v, g: 0.010 + 0.0002 * g)
    assert set(picks2) == {7} and d2.survival[0] > 0.99


def test_dflash_overhead_ema_is_per_bucket_after_two_samples() -> None:
    d = DflashAdaptiveK(0, 3, _profile())
    steps = [0]

    def seconds(v: int, g: int) -> float:  # 5 ms of host work the profile does not see
        steps[0] += 1
        return 0.010 + 0.001 * g + (0.005 if steps[0] > 12 else 0.0)

    drive(d, 32, 60, accept=lambda g: g, seconds=seconds)
    assert d.overhead_n[32] >= 2 and d.overhead[32] == pytest.approx(0.005, rel=1e-3)
    assert 64 not in d.overhead
    drive(d, 64, 4, accept=lambda g: g, seconds=lambda v, g: 0.02 + 0.001 * g)
    assert d.overhead[64] == pytest.approx(0.01, rel=1e-3)  # its own EMA
    assert d.overhead[32] == pytest.approx(0.005, rel=1e-3)


def test_sglang_per_batch_slots_defaults_and_routing() -> None:
    sg = SglangPerBatchEma(0, 5)
    assert sg.keys == [1, 8, 32, 64]
    assert [sg.slot_for(b).candidates for b in (1, 7, 8, 31, 32, 64, 500)] == \
        [[1, 3, 5], [1, 3, 5], [0, 1, 3], [0, 1, 3], [0, 1], [0], [0]]
    # start at max_gamma where it is a candidate, else the middle candidate
    assert [sg.decide(b, 0) for b in (1, 8, 32, 64)] == [5, 1, 1, 0]
    assert sg.slot_for(1).ema == 4.0


def test_sglang_per_batch_warmup_interval_and_independent_slots() -> None:
    sg = SglangPerBatchEma(0, 5)
    picks = []
    for _ in range(20):
        sg.observe(fb(5, [0, 0]))  # batch 2 -> slot 1
        picks.append(sg.decide(2, 1024))
    # 10 warm-up batches, then a re-pick every 5: the 15th batch drops 5 -> 1
    assert picks[:14] == [5] * 14 and picks[14:] == [1] * 6
    assert sg.decide(8, 1024) == 1 and sg.slot_for(8).batches == 0  # slot 8 untouched
    zero = []
    for _ in range(25):
        sg.observe(fb(1, [0] * 40))  # batch 40 -> slot 32, candidates [0, 1]
        zero.append(sg.decide(40, 1024))
    assert zero[13] == 1 and zero[14] == 0  # drops to 0 at the 15th batch
    assert zero[19] == 1 and zero[24] == 0  # probes 1 at the next re-pick, drops again


def test_nightjar_buckets_are_independent() -> None:
    nj = NightjarBandit(0, 3)
    drive(nj, 4, 30, accept=lambda g: g, seconds=lambda v, g: 0.01)
    assert sum(nj.buckets[4].count.values()) == 30
    assert 64 not in nj.buckets
    assert nj.decide(64, 8192) == 3 and not nj.settled()  # a new bucket explores from max
    assert all(c == 0 for c in nj.buckets[64].count.values())


def test_nightjar_reaches_gamma_zero_when_drafting_never_pays() -> None:
    nj = NightjarBandit(0, 4)
    picks = drive(nj, 32, 400, accept=lambda g: 0, seconds=lambda v, g: 0.010 + 0.004 * v)
    assert set(picks[:10]) == {0, 1, 2, 3, 4}  # every arm, the disable switch included
    assert picks.count(0) > 250 and picks[-1] == 0
    assert nj.settled() and nj.report().gamma == 0
    assert max(nj.report().arm_goodput, key=nj.report().arm_goodput.__getitem__) == 0


@pytest.mark.parametrize("name", ["vllm-acceptance-adaptive-k", "vllm-dflash-adaptive-k",
                                  "sglang-per-batch-ema", "nightjar-bandit"])
def test_upstream_baselines_registered_and_within_gamma_bounds(name: str) -> None:
    assert name in BASELINES
    sc = make(min_gamma=1, max_gamma=3, max_num_seqs=24, workload__num_requests=72,
              workload__arrival={"type": "closed", "concurrency": 24})
    ctrl = make_controller(name, sc)
    assert isinstance(ctrl, (AcceptanceAdaptiveK, DflashAdaptiveK, SglangPerBatchEma,
                             NightjarBandit))
    rec = Recorder(ctrl)
    run = simulate(sc, rec, seed=4)
    assert run.committed_tokens == run.requested_tokens
    assert rec.decisions and all(1 <= g <= 3 for g in rec.decisions)
    assert run.controller_state["policy"] == name
    assert name in known_policy_help()


def test_dflash_small_batches_keep_full_k_without_the_ratchet() -> None:
    d = DflashAdaptiveK(0, 7, _profile(), ratchet=False)
    picks = drive(d, 16, 40, accept=lambda g: 0, seconds=lambda v, g: 0.010 + 0.001 * g)
    assert picks[-1] == 0  # batch 16 -> bucket 16, where drafting never pays
    assert [d.decide(12, 8192) for _ in range(3)][-1] == 7  # same bucket, below batch 16


def test_sglang_down_hysteresis_of_the_batch_one_slot() -> None:
    slot = SglangPerBatchEma(0, 5).slot_for(1)
    slot.steps, slot.ema = 3, 0.4
    slot._recompute()
    assert slot.steps == 3  # 0.4 > 1 - 0.5 - 0.25: holds at 3
    slot.ema = 0.2
    slot._recompute()
    assert slot.steps == 1
    slot.ema = 0.6
    slot._recompute()
    assert slot.steps == 3  # up: 0.6 > 1 - 0.5 + 0
