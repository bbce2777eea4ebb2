"""Build the gamma controller from the typed settings.

The scheduler hook calls :func:`make_controller` once per Scheduler, in the EngineCore
process, with the host's upper bound (the speculative config's ``num_speculative_tokens``).
Tests (and embedders) can replace the construction with :func:`set_factory`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vllm_hust_vspec.adaptive.acceptance import halflife_from_ewma_weight
from vllm_hust_vspec.adaptive.feedback import Controller
from vllm_hust_vspec.adaptive.fixed import FixedController

if TYPE_CHECKING:
    from vllm_hust_vspec.adaptive.cost_prior import CostPrior
    from vllm_hust_vspec.settings import Settings

logger = logging.getLogger("vllm_hust_vspec.host")

ControllerFactory = Callable[[Any, int], Controller]

# adaptive_exploration is in UCB1's unit: 0.01 (UCB1's default coefficient) draws the Thompson
# samples at one posterior standard deviation (OnlineConfig.exploration, default 1).
THOMPSON_WIDTH_PER_EXPLORATION = 100.0
# adaptive_tuning key -> keyword of adaptive.build_controller (OnlineConfig field names).
_OVERRIDES = {
    "online_window": "window",
    "online_warmup_samples": "warmup_samples",
    "hysteresis": "hysteresis",
    "control_interval": "control_interval",
    "max_gamma_step": "max_gamma_step",
}
# Knobs only the profile policy has (ProfileConfig field names).
_PROFILE_OVERRIDES = {
    "latency_ewma_weight": "calibration_rate",
}

_factory_override: ControllerFactory | None = None


def set_factory(factory: ControllerFactory | None) -> None:
    """Replace how controllers are built in this process (``None`` restores the default).

    ``factory(settings, max_gamma) -> Controller``.
    """
    global _factory_override
    _factory_override = factory


def takes_cost_prior(settings: Settings) -> bool:
    """True when :func:`make_controller` builds a controller that starts from a cost prior
    for ``settings`` (the online policy's Thompson algorithm; not a replaced factory)."""
    return (_factory_override is None and settings.adaptive_speculation
            and settings.adaptive_policy == "online")


# adaptive_tuning key -> UcbConfig fields (each knob means what it meant in 0.14.3).
_UCB_OVERRIDES = {
    "online_window": "window",
    "online_warmup_samples": "warmup_samples",
    "hysteresis": "hysteresis",
    "control_interval": "control_interval",
    "max_gamma_step": "max_gamma_step",
    "ewma_weight": "ewma_weight",
}


def _ucb_anchor(method: str, arms: range) -> int | None:
    """0.14.3's graph-backed starting gamma per method (None: the middle arm)."""
    if method == "draft":
        g: int | None = 2
    elif method == "eagle3":
        g = min(arms[-1], max(arms[0], 5))
    elif method == "mtp":
        g = min(arms[-1], max(arms[0], 4))
        g -= g % 2
    else:
        g = None
    return g if g is not None and g in arms else None


def ucb_kwargs(settings: Settings, max_gamma: int) -> dict[str, Any]:
    """Keyword arguments for ``adaptive.build_controller`` for policy 'ucb1': the
    settings under 0.14.3's meanings, its per-method starting gamma and probe cost, and one
    extra hold of a first visit under asynchronous scheduling (the in-flight frame)."""
    min_gamma = min(int(settings.adaptive_min_gamma or 0), max_gamma)
    stride = int(settings.tuning("gamma_stride"))
    kwargs: dict[str, Any] = {"min_gamma": min_gamma, "max_gamma": max_gamma,
                              "algorithm": "ucb1"}
    if stride > 1:
        kwargs["gamma_stride"] = stride
    if settings.adaptive_exploration is not None:
        kwargs["exploration"] = settings.adaptive_exploration
    for key, keyword in _UCB_OVERRIDES.items():
        value = settings.tuning(key)
        if value is not None:
            kwargs[keyword] = value
    warmup_return = settings.tuning("online_warmup_return") or "best"
    if warmup_return != "best":
        kwargs["warmup_return"] = warmup_return
    anchor = _ucb_anchor(settings.method, range(min_gamma, max_gamma + 1, stride))
    if anchor is not None:
        kwargs["initial_gamma"] = anchor
    if settings.method == "eagle3":
        # a width change also rebinds EAGLE-3's graphs and recurrent state: 0.14.3 priced an
        # unplayed arm's shared cost at 8 drafter passes there (2 elsewhere)
        kwargs["probe_shared_cost_units"] = 8.0
    if settings.async_scheduling:  # (0.14.3's --adaptive-async sets it)
        kwargs["inflight_padding"] = 1
    return kwargs


def controller_kwargs(settings: Settings, max_gamma: int) -> dict[str, Any]:
    """Keyword arguments for ``adaptive.build_controller`` from the settings."""
    min_gamma = min(int(settings.adaptive_min_gamma or 0), max_gamma)
    kwargs: dict[str, Any] = {
        "min_gamma": min_gamma,
        "max_gamma": max_gamma,
        "profile_path": settings.adaptive_profile,
    }
    if int(settings.tuning("gamma_stride")) > 1:
        kwargs["gamma_stride"] = int(settings.tuning("gamma_stride"))
    if settings.adaptive_exploration is not None and settings.adaptive_policy == "online":
        # (the profile policy does not explore, as in 0.14.3, which read it under UCB1 only)
        kwargs["exploration"] = settings.adaptive_exploration * THOMPSON_WIDTH_PER_EXPLORATION
    for key, keyword in _OVERRIDES.items():
        value = settings.tuning(key)
        if value is not None:
            kwargs[keyword] = value
    policy = settings.adaptive_policy
    ewma_weight = settings.tuning("ewma_weight")
    if ewma_weight is not None:
        # 0.14.3's knob, read by both policies in their own terms (docs/controller.md):
        # the online policy takes the acceptance half-life it means (same step clamp).
        if policy == "online":
            kwargs["acceptance_halflife_requests"] = halflife_from_ewma_weight(ewma_weight)
        else:
            kwargs["ewma_weight"] = ewma_weight
    calibrate = settings.tuning("latency_ewma_weight") != 0  # 0: trust the profile as is
    profile_only = {k: settings.tuning(f) for f, k in _PROFILE_OVERRIDES.items()
                    if calibrate}
    warmup_return = settings.tuning("online_warmup_return") or "best"
    if policy == "profile":
        kwargs.update({k: v for k, v in profile_only.items() if v is not None})
        if settings.tuning("min_observations") is not None:
            # as in 0.14.3, only the profile policy waits for observations
            kwargs["min_observations"] = settings.tuning("min_observations")
        if not calibrate:
            kwargs["latency_calibration"] = False
    elif any(v is not None for v in profile_only.values()) or not calibrate:
        # The online policy measures step times directly: there is no model to calibrate.
        logger.warning("vSpec: adaptive_tuning latency_ewma_weight (0.14.3's"
                       " adaptive_latency_*) only applies to the profile policy; "
                       "ignored by policy %r", policy)
    if policy == "online":
        if warmup_return != "best":
            kwargs["warmup_return"] = warmup_return
    elif warmup_return != "best":
        logger.warning("vSpec: adaptive_tuning online_warmup_return only applies to the online "
                       "policy; ignored by policy %r", policy)
    if policy == "online" and settings.sticky_zero():
        # The host skips the drafter at a settled gamma 0: arm 0 costs a target-only step.
        kwargs["zero_skips_drafter"] = True
    return kwargs


def make_controller(settings: Settings, max_gamma: int,
                    cost_prior: CostPrior | None = None) -> Controller:
    """The controller for one scheduler, with upper bound ``max_gamma``; ``cost_prior`` (step times
    from a persisted state, host/engine/cost_prior/persisted.py) seeds its cost model when the
    policy learns step costs (:func:`takes_cost_prior`; the profile policy has its own)."""
    if _factory_override is not None:
        return _factory_override(settings, max_gamma)
    if not settings.adaptive_speculation:
        return FixedController(max_gamma, max_gamma)
    from vllm_hust_vspec.adaptive import build_controller

    policy = settings.adaptive_policy
    if policy == "ucb1":
        kwargs = ucb_kwargs(settings, max_gamma)
        policy = "online"  # the online policy's other algorithm (adaptive.build_controller)
    else:
        kwargs = controller_kwargs(settings, max_gamma)
    if not takes_cost_prior(settings):
        cost_prior = None
    if cost_prior is not None:
        kwargs["cost_prior"] = cost_prior
    controller = build_controller(policy, **kwargs)
    if settings.per_request_lengths:
        from vllm_hust_vspec.adaptive.verify_lengths import PerRequestController

        return PerRequestController(controller, kwargs["min_gamma"], max_gamma,
                                    cost_prior=cost_prior)
    return controller


__all__ = ["ControllerFactory", "controller_kwargs", "make_controller", "set_factory",
           "takes_cost_prior", "ucb_kwargs"]
