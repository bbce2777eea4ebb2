"""Knobs of the UCB1 online policy (:class:`~.ucb.Ucb1Controller`).

The defaults are vllm-hust-vSpec 0.14.3's settings defaults (its ``adaptive_*`` options), so a
user who validated that release keeps the same rule by choosing the algorithm alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._validate import require_float, require_int

UCB_WARMUP_RETURNS: tuple[str, ...] = ("best", "incumbent")


@dataclass(frozen=True, slots=True)
class UcbConfig:
    """Knobs of :class:`~.ucb.Ucb1Controller` (each means what 0.14.3's option meant)."""

    min_gamma: int = 1
    max_gamma: int = 4
    # Scheduler steps an arm is held between two UCB comparisons.
    control_interval: int = 4
    # A challenger's UCB score must beat the current arm's by this fraction to switch; half of
    # it is the band within which measured rewards count as tied (ties go to the anchor).
    hysteresis: float = 0.05
    # Largest gamma change per decision (transitions walk through the arms between).
    max_gamma_step: int = 1
    # Arms are min_gamma + k * gamma_stride (2 for the MTP budgets 2/4/6).
    gamma_stride: int = 1
    # UCB1 coefficient, relative to the bucket's best mean reward (0: play the best mean).
    exploration: float = 0.01
    # Steady steps per (bucket, arm) whose tokens / milliseconds make the arm's reward; also
    # the acceptance samples a draft position needs before its own rate is trusted.
    window: int = 32
    # Steady steps discarded at start; an arm needs this many samples to count as measured,
    # and a first visit holds an arm this many steps (plus inflight_padding).
    warmup_samples: int = 1
    # After the first visit of every arm: 'best' moves to the best measured arm (unless it is
    # within half the hysteresis of the anchor), 'incumbent' returns to the anchor.
    warmup_return: str = "best"
    # Weight of the newest step in the acceptance rates that price an arm not yet measured.
    ewma_weight: float = 0.1
    # The graph-backed arm a run starts at and returns to (None: the middle arm; the walk
    # then starts at max_gamma, or at the middle when the range includes 0 and spans >= 4).
    initial_gamma: int | None = None
    # Extra steps a first visit is held (1 with asynchronous scheduling: the in-flight frame).
    inflight_padding: int = 0
    # A step's shared cost in drafter passes, for pricing an arm that was not played yet.
    probe_shared_cost_units: float = 2.0
    # (gamma, largest batch) pairs: the arm is not played above that batch.
    batch_limits: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        require_int(self, "min_gamma", 0)
        require_int(self, "max_gamma", self.min_gamma)
        require_int(self, "control_interval", 1)
        require_int(self, "max_gamma_step", 1)
        require_int(self, "gamma_stride", 1)
        require_int(self, "window", 1)
        require_int(self, "warmup_samples", 1)
        require_int(self, "inflight_padding", 0)
        require_float(self, "hysteresis", 0.0, 10.0)
        require_float(self, "exploration", 0.0, 100.0)
        require_float(self, "ewma_weight", 1e-9, 1.0)
        require_float(self, "probe_shared_cost_units", 1e-9, math.inf)
        if (self.max_gamma - self.min_gamma) % self.gamma_stride:
            raise ValueError(f"UcbConfig.gamma_stride={self.gamma_stride} does not divide "
                             f"max_gamma - min_gamma = {self.max_gamma - self.min_gamma}")
        if self.max_gamma > self.min_gamma and self.max_gamma_step < self.gamma_stride:
            raise ValueError(f"UcbConfig.max_gamma_step={self.max_gamma_step} cannot reach the "
                             f"next arm (gamma_stride={self.gamma_stride})")
        if self.warmup_return not in UCB_WARMUP_RETURNS:
            raise ValueError(f"UcbConfig.warmup_return must be one of {UCB_WARMUP_RETURNS}, "
                             f"got {self.warmup_return!r}")
        arms = self.arms()
        if self.initial_gamma is not None and self.initial_gamma not in arms:
            raise ValueError(f"UcbConfig.initial_gamma={self.initial_gamma} is not an arm "
                             f"({', '.join(map(str, arms))})")
        for gamma, limit in self.batch_limits:
            if gamma not in arms or limit < 1:
                raise ValueError(f"UcbConfig.batch_limits: ({gamma}, {limit}) needs an arm "
                                 "and a positive batch")

    def arms(self) -> tuple[int, ...]:
        """The playable gammas, ascending."""
        return tuple(range(self.min_gamma, self.max_gamma + 1, self.gamma_stride))


__all__ = ["UCB_WARMUP_RETURNS", "UcbConfig"]
