"""Measurement noise on step times: what a real machine adds to the cost model.

Real step intervals are not the cost model's smooth function: kernels jitter from step to
step, the host's load drifts (other processes, frequency scaling, a neighbour on a shared
core), and now and then a step stalls (garbage collection, a page fault storm). A controller
that trusts a handful of samples is misled by exactly this, so scenarios can switch it on.

The slow load level is a function of *simulated time*, not of the step index: every policy
compared on one seed sees the same load at the same moment, so comparisons stay paired.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from ._strict import StrictObject


@dataclass(frozen=True, slots=True)
class TimingNoise:
    """Multiplicative noise: ``dt * load(t) * jitter * (spike_factor if spike)``.

    * ``jitter_sigma``: per-step lognormal jitter (independent draws).
    * ``load_sigma`` / ``load_period_s``: a load level, lognormal, constant over each
      ``load_period_s`` of simulated time and redrawn for the next period.
    * ``spike_prob`` / ``spike_factor``: a step stalls with this probability, taking this many
      times longer.
    * ``hog_period_s`` / ``hog_factor``: a CPU hog that switches on and off, each state
      lasting an exponential time of mean ``hog_period_s``; steps take ``hog_factor`` times
      longer while it is on (a neighbour process on a shared CPU).
    """

    jitter_sigma: float = 0.0
    load_sigma: float = 0.0
    load_period_s: float = 1.0
    spike_prob: float = 0.0
    spike_factor: float = 1.0
    hog_period_s: float = 0.0
    hog_factor: float = 1.0

    @property
    def active(self) -> bool:
        """False when every component is off (the engine then skips the noise entirely)."""
        return bool(self.jitter_sigma or self.load_sigma or self.spike_prob
                    or (self.hog_period_s and self.hog_factor != 1.0))


class NoiseSource:
    """Seeded sampler of one run's noise factors."""

    __slots__ = ("_hog_on", "_hog_rng", "_hog_until", "_levels", "_noise", "_rng", "_seed")

    def __init__(self, noise: TimingNoise, seed: int) -> None:
        self._noise = noise
        self._seed = seed
        self._rng = random.Random(f"vspec-jitter/{seed}")
        self._levels: dict[int, float] = {}
        self._hog_rng = random.Random(f"vspec-hog/{seed}")
        self._hog_on = False
        self._hog_until = (self._hog_rng.expovariate(1.0 / noise.hog_period_s)
                           if noise.hog_period_s else math.inf)

    def hog(self, t: float) -> float:
        """The hog's slowdown at simulated time ``t`` (a function of time: paired)."""
        n = self._noise
        if not n.hog_period_s:
            return 1.0
        while t >= self._hog_until:  # times only move forward within one run
            self._hog_on = not self._hog_on
            self._hog_until += self._hog_rng.expovariate(1.0 / n.hog_period_s)
        return n.hog_factor if self._hog_on else 1.0

    def load(self, t: float) -> float:
        """Load level at simulated time ``t`` (same for every policy run on this seed)."""
        n = self._noise
        if not n.load_sigma:
            return 1.0
        period = int(t / n.load_period_s)
        level = self._levels.get(period)
        if level is None:
            rng = random.Random(f"vspec-load/{self._seed}/{period}")
            level = math.exp(n.load_sigma * rng.gauss(0.0, 1.0))
            self._levels[period] = level
        return level

    def factor(self, t: float) -> float:
        """The multiplier for a step starting at simulated time ``t``."""
        n = self._noise
        f = self.load(t) * self.hog(t)
        if n.jitter_sigma:
            f *= math.exp(n.jitter_sigma * self._rng.gauss(0.0, 1.0))
        if n.spike_prob and self._rng.random() < n.spike_prob:
            f *= n.spike_factor
        return f


def parse_noise(obj: StrictObject) -> TimingNoise:
    """Read a ``timing_noise`` object (every key optional; all off by default)."""
    noise = TimingNoise(
        jitter_sigma=obj.number("jitter_sigma", 0.0, lo=0.0, hi=2.0),
        load_sigma=obj.number("load_sigma", 0.0, lo=0.0, hi=2.0),
        load_period_s=obj.number("load_period_s", 1.0, lo=1e-6),
        spike_prob=obj.number("spike_prob", 0.0, lo=0.0, hi=1.0),
        spike_factor=obj.number("spike_factor", 1.0, lo=1.0, hi=100.0),
        hog_period_s=obj.number("hog_period_s", 0.0, lo=0.0),
        hog_factor=obj.number("hog_factor", 1.0, lo=1.0, hi=100.0),
    )
    obj.finish()
    return noise
