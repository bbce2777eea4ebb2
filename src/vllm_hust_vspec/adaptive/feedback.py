"""Data that crosses the host/controller boundary: plain numbers only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class StepFeedback:
    """What the scheduler measured for one completed engine step.

    ``drafted[i]`` / ``accepted[i]`` are per decoding request of the step; ``committed`` is the
    number of tokens the step appended to outputs (accepted drafts plus one target/bonus token
    per decoding request). ``interval_s`` is the wall time between this step's completion and
    the previous one as the scheduler consumed them, so intervals never overlap and their sum
    is the wall time the user saw.
    """

    batch_size: int
    gamma: int
    drafted: tuple[int, ...]
    accepted: tuple[int, ...]
    committed: int
    interval_s: float
    token_budget: int
    steady: bool = True
    # accept_flags[i][k] is True when request i's draft token at position k was accepted.
    accept_flags: tuple[tuple[bool, ...], ...] | None = None
    # False when the drafter did not run in this step (a sticky gamma 0: the host skipped it).
    drafter_ran: bool = True
    # Gamma drafted after this step (what the next step verifies), as the host ran it; None:
    # the controller's own latest decision. The host reports it because it may hold gamma
    # without asking the controller (a sticky gamma 0 pins the cohort). A step whose
    # next_gamma differs from gamma mixes the costs of two arms.
    next_gamma: int | None = None

    @property
    def reward(self) -> float:
        """Goodput of the step: committed tokens per second."""
        return self.committed / self.interval_s if self.interval_s > 0 else 0.0


@runtime_checkable
class Controller(Protocol):
    """A gamma policy. ``decide`` is called once per scheduler step, ``observe`` once per
    completed step, both in the EngineCore process."""

    def decide(self, batch_size: int, token_budget: int) -> int: ...

    def observe(self, feedback: StepFeedback) -> None: ...

    def snapshot(self) -> dict[str, Any]: ...


__all__ = ["Controller", "StepFeedback"]
