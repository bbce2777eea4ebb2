"""Step times known before the first decode step: a controller's cold-start prior.

The host measures them at start-up (real decode steps of its own,
host/engine/cost_prior/calibration.py; or vLLM's dummy batches, one per verify width and batch size,
host/engine/cost_prior/dummy_batches.py), or a controller reads them from an earlier run's persisted
state. Either way they are plain numbers: (batch, gamma, whether the drafter ran, seconds). A dummy
step has no real KV lengths and no sampling, so a controller should take them as a prior to be
corrected by the first real steps, not as measurements of equal weight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CostSample:
    """One timed step: ``batch`` decoding requests verifying ``gamma`` drafts each."""

    batch: int
    gamma: int
    seconds: float
    # False for a step that ran only the target (the drafter skipped: a sticky gamma 0).
    drafter_ran: bool = True
    # Steps ``seconds`` is the mean of (a persisted state averages many; a dummy run is one).
    count: int = 1
    # Prompt tokens the step prefilled beside its decodes (0: a decode-only step).
    prefill_tokens: int = 0

    def __post_init__(self) -> None:
        if self.batch < 1 or self.gamma < 0 or self.count < 1 or self.prefill_tokens < 0:
            raise ValueError(f"cost sample: batch and count must be >= 1, gamma and "
                             f"prefill_tokens >= 0, got batch={self.batch}, gamma={self.gamma},"
                             f" count={self.count}, prefill_tokens={self.prefill_tokens}")
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise ValueError(f"cost sample: seconds must be finite and > 0, got {self.seconds}")


@dataclass(frozen=True, slots=True)
class CostPrior:
    """Timed steps and where they came from (``source`` is shown in traces)."""

    source: str
    samples: tuple[CostSample, ...]
    # True when the times leave out what every real step adds on the host (scheduling,
    # sampling, output processing): dummy forward passes do. A controller then takes their
    # shape loosely and the level from its first real steps (cost_posterior.apply_prior).
    needs_anchor: bool = False
    # The target's forward pass alone over ``tokens`` tokens, (tokens, seconds) ascending:
    # what a verified token costs apart from drafting (a step's samples cannot separate the
    # two when verified tokens and drafter work grow together). Empty when not measured.
    verify: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        if not self.source:
            raise ValueError("cost prior: source must name where the samples came from")
        for tokens, seconds in self.verify:
            if tokens < 1 or not (math.isfinite(seconds) and seconds > 0):
                raise ValueError(f"cost prior: verify times need tokens >= 1 and finite "
                                 f"seconds > 0, got ({tokens}, {seconds})")

    def gammas(self) -> tuple[int, ...]:
        """The gammas that have at least one sample, ascending."""
        return tuple(sorted({s.gamma for s in self.samples}))


__all__ = ["CostPrior", "CostSample"]
