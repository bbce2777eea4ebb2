"""The decision cadence the model-based policies share."""

from __future__ import annotations

from ._limits import budget_cap
from .feedback import StepFeedback


class CadencedPolicy:
    """``decide`` for policies that re-choose gamma every ``control_interval`` steps.

    Each call caps the current gamma by the token budget; on decision steps the subclass's
    ``_choose(batch, cap, capped_gamma)`` picks the next gamma; switches are counted and the
    previous gamma is kept (observe() uses it to spot transition steps).
    """

    def __init__(
        self, min_gamma: int, max_gamma: int, control_interval: int, initial_gamma: int,
        gamma_stride: int = 1,
    ) -> None:
        self._lo = min_gamma
        self._stride = gamma_stride
        self._hi = max_gamma
        self._interval = control_interval
        self._gamma = initial_gamma
        self._prev_gamma = initial_gamma
        self._calls = 0
        self._switches = 0

    def decide(self, batch_size: int, token_budget: int) -> int:
        """Gamma to draft after this step (verified in the next one)."""
        cap = budget_cap(batch_size, token_budget, self._lo, self._hi)
        cur = self._gamma
        calls = self._calls
        self._calls = calls + 1
        g = cur if cur <= cap else cap
        if calls % self._interval == 0:
            g = self._choose(batch_size, cap, g)
        if g != cur:
            self._switches += 1
        self._prev_gamma = cur
        self._gamma = g
        return g

    def _is_transition(self, feedback: StepFeedback) -> bool:
        """True when the step verified one gamma and drafted another (its time mixes two
        arms). The host's report wins over this policy's own bookkeeping: the host may hold
        gamma without asking (a sticky gamma 0)."""
        if feedback.next_gamma is not None:
            return feedback.next_gamma != feedback.gamma
        return self._gamma != self._prev_gamma

    def _off_grid(self, scores: list[float]) -> None:
        """Rule out (score -inf) the arms between the stride's gammas; ``scores[i]`` is arm
        ``min_gamma + i``."""
        stride = self._stride
        if stride > 1:
            for i in range(len(scores)):
                if i % stride:
                    scores[i] = -float("inf")

    def _choose(self, batch: int, cap: int, cur: int) -> int:
        """One decision; ``cur`` is the current gamma already capped by the budget."""
        raise NotImplementedError
