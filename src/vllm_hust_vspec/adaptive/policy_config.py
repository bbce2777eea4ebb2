"""The knobs every gamma policy shares (the online and the profile policy's configs extend it).

Decision cadence and movement (``control_interval``, ``hysteresis``, ``max_gamma_step``), the
gamma range and the half-life of the discounted acceptance estimate, in requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._validate import require_float, require_int


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Shared knobs (defaults suit max_gamma up to ~8)."""

    min_gamma: int = 0
    max_gamma: int = 4
    # Decide every ``control_interval`` steps; in between gamma is held (budget still caps it).
    control_interval: int = 1
    # A challenger must beat the current arm's score by this relative margin to switch.
    hysteresis: float = 0.05
    # Largest gamma change per decision (a budget cap may force a larger drop).
    max_gamma_step: int = 2
    # Only gammas min_gamma + k * gamma_stride are played (0.14.3's MTP budgets
    # 2/4/6 are stride 2); a budget cap may still force one in between.
    gamma_stride: int = 1
    # Acceptance discount half-life in requests (divided by the batch size, then clamped to
    # a range of steps; 0.14.3's adaptive_ewma_weight sets it through
    # acceptance.halflife_from_ewma_weight).
    acceptance_halflife_requests: float = 256.0

    def validate_shared(self) -> None:
        """Range checks of the shared knobs (called by each config's ``__post_init__``)."""
        require_int(self, "min_gamma", 0)
        require_int(self, "max_gamma", self.min_gamma)
        require_int(self, "control_interval", 1)
        require_int(self, "max_gamma_step", 1)
        require_int(self, "gamma_stride", 1)
        if (self.max_gamma - self.min_gamma) % self.gamma_stride:
            raise ValueError(f"gamma_stride={self.gamma_stride} does not divide max_gamma -"
                             f" min_gamma = {self.max_gamma - self.min_gamma}")
        if self.max_gamma_step % self.gamma_stride:
            raise ValueError(f"max_gamma_step={self.max_gamma_step} is not a multiple of"
                             f" gamma_stride={self.gamma_stride}")
        require_float(self, "hysteresis", 0.0, 10.0)
        require_float(self, "acceptance_halflife_requests", 1e-9, math.inf)


__all__ = ["PolicyConfig"]
