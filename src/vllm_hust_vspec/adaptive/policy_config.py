"""The knobs every gamma policy shares (the online and the profile policy's configs extend it).

Decision cadence and movement (``control_interval``, ``hysteresis``, ``max_gamma_step``), the
gamma range, the discounted acceptance estimate (half-life in requests, clamped in steps, or
the predecessor's EWMA weight) and the predecessor's
``min_observations``. Each policy documents what ``min_observations`` means for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._validate import require_float, require_int
from .acceptance import halflife_from_ewma_weight


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
    # Only gammas min_gamma + k * gamma_stride are played (the predecessor's MTP budgets
    # 2/4/6 are stride 2); a budget cap may still force one in between.
    gamma_stride: int = 1
    # Acceptance discount half-life in requests, clamped to the step range below.
    acceptance_halflife_requests: float = 256.0
    acceptance_min_halflife_steps: float = 4.0
    acceptance_max_halflife_steps: float = 64.0
    # The predecessor's knob: steady samples an arm needs (each policy says for what).
    min_observations: int | None = None
    # Weight of the newest request in the acceptance estimate: replaces
    # acceptance_halflife_requests by ln(0.5) / ln(1 - ewma_weight) (still step-clamped).
    ewma_weight: float | None = None

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
        require_float(self, "acceptance_min_halflife_steps", 1e-9, math.inf)
        require_float(self, "acceptance_max_halflife_steps", self.acceptance_min_halflife_steps,
                      math.inf)
        if self.min_observations is not None:
            require_int(self, "min_observations", 1)
        if self.ewma_weight is not None:
            require_float(self, "ewma_weight", 1e-9, 1.0)

    @property
    def halflife_requests(self) -> float:
        """Acceptance discount half-life in requests actually used."""
        if self.ewma_weight is None:
            return self.acceptance_halflife_requests
        return halflife_from_ewma_weight(self.ewma_weight)


__all__ = ["PolicyConfig"]
