"""Knobs of the online gamma controller (:class:`~.online.OnlineController`)."""

from __future__ import annotations

from dataclasses import dataclass

from ._validate import require_float, require_int
from .policy_config import PolicyConfig

WARMUP_RETURNS: tuple[str, ...] = ("best", "incumbent")


@dataclass(frozen=True, slots=True)
class OnlineConfig(PolicyConfig):
    """Knobs of :class:`OnlineController`: the shared ones (:class:`PolicyConfig`; there
    ``min_observations`` raises ``warmup_samples`` to at least that) and these."""

    # The shared switch margin, smaller here: it is applied to Thompson draws, so it only has
    # to stop flapping between near-ties; a larger one keeps the controller at an arm that
    # is measured to be a few percent worse (measured on the simulator suite: 0.02 > 0.05).
    hysteresis: float = 0.02
    # Steady samples discarded at start (graph capture, allocator and cache warm-up). Without
    # a cost prior the gamma is held meanwhile; with one, decisions follow it from the start.
    warmup_samples: int = 3
    # Width of the Thompson draw in posterior standard deviations: 1 samples the posterior,
    # less explores less, 0 plays the posterior mean (no exploration: an arm the data never
    # favoured is never tried). The predecessor's `--adaptive-online-exploration` sets it.
    exploration: float = 1.0
    # Steady samples per arm and bucket kept for reports (measured goodput in snapshot());
    # decisions use the posteriors, which weigh every sample.
    window: int = 32
    # 'best': the first decision may leave the initial gamma on one draw of the posterior.
    # 'incumbent': the initial gamma is the incumbent: it is left only for an arm the
    # posterior says beats it with probability settle_probability.
    warmup_return: str = "best"
    # Arm 0 skips the drafter and a settled zero pins the cohort (the vLLM host's sticky mode).
    zero_skips_drafter: bool = False
    # Posterior probability that gamma 0 is the best arm needed to play (and settle) a
    # drafter-skipping zero: a pinned cohort cannot speculate again, so this is a decision,
    # not an experiment.
    settle_probability: float = 0.9
    # Prior sd of a speculative step's fixed overhead beyond one draft increment, in units of
    # the first step time. Until a drafter-skipping step is measured, this alone says what
    # skipping saves over the speculative arms (their data cannot tell the target's constant
    # cost from the drafter's); a cost prior with drafter-skipping samples replaces it.
    overhead_sd: float = 0.05
    # Per-step growth of each cost coefficient's variance, as a share of its square (1e-6:
    # a coefficient no step has informed for 1,000 steps is uncertain by ~3%): the cost shape
    # follows slow changes and long-unplayed arms are re-checked (the level follows fast ones).
    cost_drift: float = 1e-6
    # Prior per-step growth of the load level's variance (units of the step noise) until the
    # variogram has measured it (adaptive/load.py).
    load_drift: float = 1.0
    # Per-step growth of a position's acceptance variance while it is not drafted (gamma 0,
    # or shallower drafts): acceptance is a slow random walk, so what was measured some
    # steps ago is that much less certain now. This is what re-opens a switched-off drafter
    # (gamma 0) or a deeper gamma, at a rate set by how far off they were: sd 0.03 after 100
    # steps, 0.1 after 1,000. (The discounted counts themselves forget in 4-64 steps, far
    # too fast for a posterior: at batch 256 a gamma-0 controller then drafted again every
    # ~30 steps, 4% of its goodput; 2e-5 and 5e-6 measured the same as 1e-5 on the suite.)
    acceptance_drift: float = 1e-5
    # p[0] before any verify feedback (deeper positions continue geometrically).
    prior_acceptance: float = 0.6
    # First gamma (None: max_gamma).
    initial_gamma: int | None = None
    # Seed of the Thompson sampler: decisions are reproducible.
    seed: int = 0

    def __post_init__(self) -> None:
        self.validate_shared()
        require_int(self, "warmup_samples", 0)
        require_int(self, "window", 1)
        require_int(self, "seed", 0)
        require_float(self, "exploration", 0.0, 100.0)
        require_float(self, "settle_probability", 0.5, 1.0)
        require_float(self, "overhead_sd", 0.0, 10.0)
        require_float(self, "cost_drift", 0.0, 1.0)
        require_float(self, "load_drift", 0.0, 100.0)
        require_float(self, "acceptance_drift", 0.0, 1.0)
        require_float(self, "prior_acceptance", 0.0, 1.0)
        if not isinstance(self.zero_skips_drafter, bool):
            raise ValueError(f"OnlineConfig.zero_skips_drafter must be a bool, got "
                             f"{self.zero_skips_drafter!r}")
        if self.warmup_return not in WARMUP_RETURNS:
            raise ValueError(f"OnlineConfig.warmup_return must be one of "
                             f"{', '.join(WARMUP_RETURNS)}, got {self.warmup_return!r}")
        if self.initial_gamma is not None:
            require_int(self, "initial_gamma", self.min_gamma)
            if self.initial_gamma > self.max_gamma:
                raise ValueError(f"OnlineConfig.initial_gamma={self.initial_gamma} is "
                                 f"above max_gamma={self.max_gamma}")


__all__ = ["WARMUP_RETURNS", "OnlineConfig"]
