"""Pure-Python gamma controllers (no vllm, no torch): the public API of vSpec's adaptive layer.

* :class:`OnlineController` / :class:`OnlineConfig`: the default online policy (one cost
  posterior, Thompson sampling), with :class:`CostPrior`.
* :class:`ProfilePolicy` / :class:`ProfileConfig` with :class:`Profile`, :func:`load_profile`.
* :class:`FixedController`: always the largest eligible gamma.
* :func:`build_controller`: policy name -> controller.
* :func:`fit_profile`: fit a profile's latency model to measured steps.
* :func:`confidence_keep` / :func:`confidence_keep_batch`: per-request draft cut-off.
"""

from .confidence import RULES as CONFIDENCE_RULES
from .confidence import confidence_keep, confidence_keep_batch, position_uncertain
from .cost_prior import CostPrior, CostSample
from .factory import POLICIES, build_controller
from .feedback import Controller, ControllerSnapshot, StepFeedback
from .fitting import FitError, FitResult, FitSample, fit_profile, load_samples, parse_samples
from .fixed import FixedController
from .online import OnlineController
from .online_config import OnlineConfig
from .profile import (
    SCHEMA_VERSION,
    FitInfo,
    LatencyCoefficients,
    Profile,
    ProfileError,
    TableEntry,
)
from .profile_file import load_profile
from .profile_policy import ProfileConfig, ProfilePolicy

__all__ = [
    "CONFIDENCE_RULES",
    "POLICIES",
    "SCHEMA_VERSION",
    "Controller",
    "ControllerSnapshot",
    "CostPrior",
    "CostSample",
    "FitError",
    "FitInfo",
    "FitResult",
    "FitSample",
    "FixedController",
    "LatencyCoefficients",
    "OnlineConfig",
    "OnlineController",
    "Profile",
    "ProfileConfig",
    "ProfileError",
    "ProfilePolicy",
    "StepFeedback",
    "TableEntry",
    "build_controller",
    "confidence_keep",
    "confidence_keep_batch",
    "fit_profile",
    "load_profile",
    "load_samples",
    "parse_samples",
    "position_uncertain",
]
