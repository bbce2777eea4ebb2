"""The oracle policy: knows every scheduled request's true acceptance rates.

It is an upper reference, not a bound: each step it greedily picks the gamma with the best
*expected* goodput for the current batch (expected committed tokens / steady step time), so it
does not see realised outcomes and does not plan across steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..adaptive.feedback import SettledPolicy, StepFeedback

if TYPE_CHECKING:
    from .engine import Simulation


class Oracle(SettledPolicy):
    """Greedy expected-goodput maximiser with simulator access."""

    def __init__(self, min_gamma: int, max_gamma: int) -> None:
        self.min_gamma = min_gamma
        self.max_gamma = max_gamma
        self._sim: Simulation | None = None
        self.last = min_gamma

    def bind_simulation(self, sim: Simulation) -> None:
        """Called by the engine: gives read access to the scheduled batch."""
        self._sim = sim

    def _bound(self) -> Simulation:
        if self._sim is None:
            raise RuntimeError(f"the {self.snapshot()['policy']} policy only runs inside the "
                               "simulator")
        return self._sim

    def decide(self, batch_size: int, token_budget: int) -> int:
        """Argmax over gamma of the expected goodput of the current batch."""
        sim = self._bound()
        best, best_val = self.min_gamma, -1.0
        for g in range(self.min_gamma, self.max_gamma + 1):
            val = sim.expected_goodput(g)
            if val > best_val:
                best, best_val = g, val
        self.last = best
        return best

    def observe(self, feedback: StepFeedback) -> None:
        """Nothing to learn."""

    def snapshot(self) -> dict[str, Any]:
        """State for reports."""
        return {"policy": "oracle", "gamma": self.last}
