"""Knobs of the online gamma controller (:class:`~.online.OnlineController`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._validate import require_float, require_int
from .policy_config import PolicyConfig

WARMUP_RETURNS: tuple[str, ...] = ("best", "incumbent")


@dataclass(frozen=True, slots=True)
class OnlineConfig(PolicyConfig):
    """Knobs of :class:`OnlineController`: the shared ones (:class:`PolicyConfig`; there
    ``min_observations`` is the steady samples each arm must get in the sweep before arms are
    compared by their own measurements, and sets ``sweep_samples`` to
    ``1 + ceil(min_observations / sweep_passes)``: each visit's first decision is a transition
    step and yields no sample) and these."""

    # Steady samples per arm and bucket kept for reports (measured goodput in snapshot()).
    window: int = 32
    # UCB coefficient, relative to the best estimate of the bucket.
    exploration: float = 0.05
    # Steady samples discarded at start (graph warm-up, cache effects). Without a cost prior
    # the gamma is held meanwhile; with one, decisions follow the prior from the first step.
    warmup_samples: int = 3
    # Steady samples discarded after the drafter is switched off (a sticky zero) or back on:
    # the first steps on the other path run slow while caches refill, and a filter that took
    # them at face value would move its load level by as much over the pinned cohort
    # (measured slow-downs: docs/controller.md).
    path_switch_discard: int = 3
    # Decisions per arm and sweep pass (the first of each visit is a mixed transition step).
    sweep_samples: int = 2
    # Sweep passes: the first walks down from the initial gamma, the next back up, and so on,
    # so a load level that drifts during the sweep biases no arm (each arm's mean sample time
    # is the same).
    sweep_passes: int = 2
    # Steps without playing an arm after which its cost is as uncertain as one sample's: the
    # arm's variance grows by 1/halflife per step (units of the noise), which both lets a
    # fresh sample move its estimate and gives it the UCB bonus that re-probes it.
    staleness_halflife: float = 256.0
    # p[0] assumed before any verify feedback (deeper positions continue geometrically).
    prior_acceptance: float = 0.6
    # Prior growth per step of the load level's variance, in units of the measurement noise
    # (how fast the load estimate follows the machine), until it is measured (adaptive/load.py).
    load_drift: float = 1.0
    # After this many decisions at one arm (gamma > min), visit the better-scored neighbour
    # for 1 + sweep_samples decisions (0 disables).
    neighbour_check_interval: int = 64
    # Arm 0 skips the drafter (the host's sticky gamma 0): its cost is learned only from steps
    # reported with drafter_ran=False. Gamma-0 steps in which the drafter still ran (zeros
    # while exploring) only set an optimistic prior for it (half their time).
    zero_skips_drafter: bool = False
    # A measured drafter-skipping zero is re-measured (one pinned cohort, on the zero
    # re-measure cadence: neighbour_check_interval decisions, doubling up to
    # max_probe_interval) while its estimate is at least this share of the best arm's.
    zero_recheck_band: float = 0.5
    # First gamma (None: max_gamma); the first sweep pass walks down from it, then up.
    initial_gamma: int | None = None
    # After the sweep: 'best' judges from the last swept arm (hysteresis measured from it);
    # 'incumbent' goes back to the initial gamma and judges from there.
    warmup_return: str = "best"

    def __post_init__(self) -> None:
        self.validate_shared()
        require_int(self, "window", 1)
        require_int(self, "warmup_samples", 0)
        require_int(self, "path_switch_discard", 0)
        require_int(self, "sweep_samples", 1)
        require_int(self, "sweep_passes", 1)
        require_int(self, "neighbour_check_interval", 0)
        require_float(self, "exploration", 0.0, 100.0)
        require_float(self, "staleness_halflife", 1e-9, math.inf)
        require_float(self, "prior_acceptance", 0.0, 1.0)
        require_float(self, "load_drift", 0.0, 100.0)
        require_float(self, "zero_recheck_band", 0.0, 1.0)
        if self.warmup_return not in WARMUP_RETURNS:
            raise ValueError(f"OnlineConfig.warmup_return must be one of "
                             f"{', '.join(WARMUP_RETURNS)}, got {self.warmup_return!r}")
        if self.initial_gamma is not None:
            require_int(self, "initial_gamma", self.min_gamma)
            if self.initial_gamma > self.max_gamma:
                raise ValueError(
                    f"OnlineConfig.initial_gamma={self.initial_gamma} is above "
                    f"max_gamma={self.max_gamma}"
                )

    @property
    def visit_samples(self) -> int:
        """Decisions per arm and sweep pass (and per re-check visit) actually used."""
        if self.min_observations is None:
            return self.sweep_samples
        return 1 + -(-self.min_observations // self.sweep_passes)


__all__ = ["WARMUP_RETURNS", "OnlineConfig"]
