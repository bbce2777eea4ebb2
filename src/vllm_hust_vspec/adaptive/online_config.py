"""Knobs of the online gamma controller (:class:`~.online.OnlineController`).

Twelve public knobs; the posterior's tuning constants are private to adaptive/online.py, and
where the controller starts (``initial_gamma``, ``warmup_return``) is a keyword of its
constructor. 0.14.3's ``ewma_weight`` is mapped to ``acceptance_halflife_requests``
by the settings layer (host/engine/controller_factory.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ._validate import require_float, require_int
from .policy_config import PolicyConfig

WARMUP_RETURNS: tuple[str, ...] = ("best", "incumbent")


@dataclass(frozen=True, slots=True)
class OnlineConfig(PolicyConfig):
    """Knobs of :class:`OnlineController`: the shared ones (:class:`PolicyConfig`) and these."""

    # The shared switch margin, smaller here: it is applied to Thompson draws, so it only has
    # to stop flapping between near-ties; a larger one keeps the controller at an arm that
    # is a few percent worse.
    hysteresis: float = 0.02
    # Steady samples discarded at start (graph capture, allocator and cache warm-up). Without
    # a cost prior the gamma is held meanwhile; with one, decisions follow it from the start.
    warmup_samples: int = 3
    # Width of the Thompson draw in posterior standard deviations: 1 samples the posterior,
    # less explores less, 0 plays the posterior mean (no exploration: an arm the data never
    # favoured is never tried). Settings' adaptive_exploration sets it (UCB1's unit, x 100).
    exploration: float = 1.0
    # Steady samples per arm and bucket kept for reports (measured goodput in snapshot());
    # decisions use the posteriors, which weigh every sample.
    window: int = 32
    # Arm 0 skips the drafter and a settled zero pins the cohort (the vLLM host's sticky mode).
    zero_skips_drafter: bool = False
    # Seed of the Thompson sampler: decisions are reproducible.
    seed: int = 0

    def __post_init__(self) -> None:
        self.validate_shared()
        require_int(self, "warmup_samples", 0)
        require_int(self, "window", 1)
        require_int(self, "seed", 0)
        require_float(self, "exploration", 0.0, 100.0)
        if not isinstance(self.zero_skips_drafter, bool):
            raise ValueError(f"OnlineConfig.zero_skips_drafter must be a bool, got "
                             f"{self.zero_skips_drafter!r}")


__all__ = ["WARMUP_RETURNS", "OnlineConfig"]
