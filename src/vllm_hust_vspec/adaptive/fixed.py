"""Fixed gamma: always the largest eligible gamma (fallback and comparison baseline)."""

from __future__ import annotations

from typing import Any

from ._limits import budget_cap
from .feedback import ControllerSnapshot, StepFeedback


class FixedController:
    """Returns ``max_gamma`` capped by the token budget; learns nothing. Implements
    ``Controller``."""

    def __init__(self, min_gamma: int, max_gamma: int) -> None:
        if min_gamma < 0 or max_gamma < min_gamma:
            raise ValueError(f"need 0 <= min_gamma <= max_gamma, got min_gamma={min_gamma}, "
                             f"max_gamma={max_gamma}")
        self.min_gamma = min_gamma
        self.max_gamma = max_gamma
        self._gamma = max_gamma
        self._observations = 0

    def decide(self, batch_size: int, token_budget: int) -> int:
        """``max_gamma``, or less when the verify width would exceed the budget."""
        self._gamma = budget_cap(batch_size, token_budget, self.min_gamma, self.max_gamma)
        return self._gamma

    def observe(self, feedback: StepFeedback) -> None:
        """Counts steps only."""
        self._observations += 1

    def settled(self) -> bool:
        """Always: a fixed policy never explores."""
        return True

    def report(self) -> ControllerSnapshot:
        """No estimates: the policy measures nothing."""
        return ControllerSnapshot("fixed", self._gamma)

    def snapshot(self) -> dict[str, Any]:
        """JSON-serialisable state."""
        return {"policy": "fixed", "gamma": self._gamma, "observations": self._observations}
