"""Build a controller from a policy name (the one place the host turns settings into one)."""

from __future__ import annotations

from typing import Any

from ._validate import config_field_names
from .cost_prior import CostPrior
from .feedback import Controller
from .fixed import FixedController
from .online import OnlineController
from .online_config import OnlineConfig
from .profile_file import load_profile
from .profile_policy import ProfileConfig, ProfilePolicy
from .ucb import Ucb1Controller
from .ucb_config import UcbConfig

POLICIES: tuple[str, ...] = ("online", "profile", "fixed")
# Algorithms of the 'online' policy: vSpec's Thompson sampling over its cost posterior, or
# vllm-hust-vSpec 0.14.3's UCB1 over measured rewards (adaptive/ucb.py).
ONLINE_ALGORITHMS: tuple[str, ...] = ("thompson", "ucb1")
# Keywords of the OnlineController itself (not OnlineConfig fields) an override may set.
_ONLINE_KEYWORDS: tuple[str, ...] = ("warmup_return",)


def build_controller(
    policy: str,
    *,
    min_gamma: int,
    max_gamma: int,
    profile_path: str | None = None,
    cost_prior: CostPrior | None = None,
    algorithm: str = "thompson",
    **overrides: Any,
) -> Controller:
    """A controller for ``policy`` ('online', 'profile' or 'fixed').

    ``algorithm`` picks the 'online' policy's rule (:data:`ONLINE_ALGORITHMS`): 'ucb1' takes
    the fields of :class:`UcbConfig` as overrides and no cost prior (it measures every arm).

    ``profile_path`` is read only by 'profile' (the settings layer rejects a profile given
    with another policy). ``overrides`` set fields of :class:`OnlineConfig` /
    :class:`ProfileConfig` (e.g. ``hysteresis=0.1``), and for 'online' the controller's
    ``warmup_return``; ``None`` values are skipped so unset settings keep the controller's
    defaults. Unknown policies, unknown override names and bad values raise ValueError naming
    them; a bad profile raises ProfileError naming the file and key. ``cost_prior`` (step
    times measured before, e.g. a persisted state or start-up timings) is the 'online'
    policy's cold-start cost prior; the other policies take none (ValueError).
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    if algorithm not in ONLINE_ALGORITHMS:
        raise ValueError(f"unknown online algorithm {algorithm!r}; allowed: "
                         f"{', '.join(ONLINE_ALGORITHMS)}")
    if algorithm != "thompson" and policy != "online":
        raise ValueError(f"policy {policy!r} has no algorithm choice (only 'online')")
    if policy == "online" and algorithm == "ucb1":
        if cost_prior is not None:
            raise ValueError("the 'ucb1' online algorithm takes no cost prior (it measures "
                             "every arm it plays)")
        _check_overrides("online (ucb1)", UcbConfig, given)
        return Ucb1Controller(UcbConfig(min_gamma=min_gamma, max_gamma=max_gamma, **given))
    if cost_prior is not None and policy != "online":
        raise ValueError(f"policy {policy!r} takes no cost prior (only 'online' learns "
                         "step costs online)")
    if policy == "fixed":
        if given:
            raise ValueError(f"policy 'fixed' takes no overrides, got: {', '.join(sorted(given))}")
        return FixedController(min_gamma, max_gamma)
    if policy == "online":
        _check_overrides(policy, OnlineConfig, given, _ONLINE_KEYWORDS)
        keywords = {k: given.pop(k) for k in _ONLINE_KEYWORDS if k in given}
        return OnlineController(OnlineConfig(min_gamma=min_gamma, max_gamma=max_gamma, **given),
                                cost_prior=cost_prior, **keywords)
    if policy == "profile":
        _check_overrides(policy, ProfileConfig, given)
        if not profile_path:
            raise ValueError("policy 'profile' needs profile_path (a schema-v1 profile JSON; "
                             "make one with vllm-hust-vspec-fit-profile)")
        profile = load_profile(profile_path)
        cfg = ProfileConfig(min_gamma=min_gamma, max_gamma=max_gamma, **given)
        return ProfilePolicy(profile, cfg)
    raise ValueError(f"unknown controller policy {policy!r}; allowed: {', '.join(POLICIES)}")


def _check_overrides(policy: str, cls: type, given: dict[str, Any],
                     extra: tuple[str, ...] = ()) -> None:
    allowed = [n for n in config_field_names(cls) if n not in ("min_gamma", "max_gamma")]
    allowed += extra
    unknown = sorted(k for k in given if k not in allowed)
    if unknown:
        raise ValueError(f"unknown override(s) for policy {policy!r}: {', '.join(unknown)}; "
                         f"allowed: {', '.join(allowed)}")
