"""Policy names -> controllers for a scenario.

Names: ``fixed:K``, ``online``, ``online-ucb1`` and ``profile`` (ours, from the adaptive
package: ``online-ucb1`` is the online policy with ``--adaptive-policy ucb1`` and its
default knobs; ``online@N`` is ``online`` with Thompson sampler seed ``N``, the host's being
0), ``oracle``,
and the published baselines ``vllm-batch-schedule``, ``sglang-adaptive``, ``hf-heuristic``,
``ucb1`` (:mod:`.baselines.reference`) and, from current upstream, ``vllm-acceptance-adaptive-k``,
``vllm-dflash-adaptive-k``, ``sglang-per-batch-ema``, ``nightjar-bandit``
(:mod:`.baselines.vllm_upstream`, :mod:`.baselines.per_batch`). 0.14.3's online controller
(``pred-ucb``; ``pred-ucb-eagle`` with its EAGLE run's knobs, :mod:`.baselines.pred_ucb`) runs
by name only, as do SpecRhythm's per-request TPOT-SLO budgets (``spec-rhythm``,
``spec-rhythm-roofline``; :mod:`.baselines.spec_rhythm`).
"""

from __future__ import annotations

from ..adaptive.feedback import Controller
from .baselines.per_batch import NightjarBandit, SglangPerBatchEma
from .baselines.pred_ucb import PredUcbKnobs, V014Ucb
from .baselines.reference import FixedGamma, HfHeuristic, SglangAdaptive, Ucb1, VllmBatchSchedule
from .baselines.spec_rhythm import make_spec_rhythm
from .baselines.vllm_upstream import AcceptanceAdaptiveK, DflashAdaptiveK, dflash_startup_cost
from .oracle import Oracle
from .per_request import PerRequestOracle, VllmAdaptiveVerification
from .scenario import Scenario

OURS = ("online", "online-ucb1", "profile")
BASELINES = ("vllm-batch-schedule", "sglang-adaptive", "hf-heuristic", "ucb1",
             "vllm-acceptance-adaptive-k", "vllm-dflash-adaptive-k", "sglang-per-batch-ema",
             "nightjar-bandit")
REFERENCE = ("oracle",)
# Per-request verify lengths (sim/per_request.py, adaptive/verify_lengths.py): run by name,
# not part of the default suite (the per-request oracle is slow at large batches).
PER_REQUEST = ("online-per-request", "per-request-oracle", "vllm-adaptive-verification")
# 0.14.3's controller (sim/baselines/pred_ucb.py): by name, for the calibrated NPU runs.
V014_POLICIES = ("pred-ucb", "pred-ucb-eagle")
# SpecRhythm's per-request SLO budgets (sim/baselines/spec_rhythm.py): by name, for TPOT-SLO
# workloads (without SLO classes every request gets the roofline cap).
SPEC_RHYTHM = ("spec-rhythm", "spec-rhythm-roofline")
# Its EAGLE run's knobs (latest_stack_eagle_online_g1to2: hysteresis 0.2, warmup return to the
# anchor, no graph-backed initial gamma).
PRED_UCB_EAGLE = PredUcbKnobs(hysteresis=0.2, warmup_return="incumbent", initial_gamma=None)


class PolicyError(ValueError):
    """Unknown or malformed policy name."""


def fixed_names(scenario: Scenario) -> list[str]:
    """``fixed:K`` for every K the scenario allows."""
    return [f"fixed:{k}" for k in range(scenario.min_gamma, scenario.max_gamma + 1)]


def all_policies(scenario: Scenario) -> list[str]:
    """Every policy, in report order."""
    return [*fixed_names(scenario), *OURS, *REFERENCE, *BASELINES]


def known_policy_help() -> str:
    """Human list of policy names for --help and errors."""
    return ", ".join(["fixed:K", *OURS, "online@N", *REFERENCE, *BASELINES, *PER_REQUEST,
                      *V014_POLICIES, *SPEC_RHYTHM])


def make_controller(name: str, scenario: Scenario, seed: int = 0) -> Controller:
    """A fresh controller for policy ``name`` on ``scenario`` (``seed``: the run's)."""
    lo, hi = scenario.min_gamma, scenario.max_gamma
    if name.startswith("fixed:"):
        try:
            k = int(name.split(":", 1)[1])
        except ValueError:
            raise PolicyError(f"bad policy {name!r}: expected fixed:K with an integer K") from None
        if not lo <= k <= hi:
            raise PolicyError(f"policy {name!r}: K must be within the scenario's "
                              f"min_gamma..max_gamma = {lo}..{hi}")
        return FixedGamma(k)
    if name == "oracle":
        return Oracle(lo, hi)
    if name == "vllm-batch-schedule":
        return VllmBatchSchedule(lo, hi)
    if name == "sglang-adaptive":
        return SglangAdaptive(lo, hi)
    if name == "hf-heuristic":
        return HfHeuristic(lo, hi)
    if name == "ucb1":
        return Ucb1(lo, hi)
    if name == "vllm-acceptance-adaptive-k":
        return AcceptanceAdaptiveK(lo, hi)
    if name == "vllm-dflash-adaptive-k":
        return DflashAdaptiveK(lo, hi, dflash_startup_cost(scenario.cost))
    if name == "sglang-per-batch-ema":
        return SglangPerBatchEma(lo, hi)
    if name == "nightjar-bandit":
        return NightjarBandit(lo, hi)
    if name == "online-ucb1":
        from ..adaptive import build_controller  # noqa: PLC0415

        return build_controller("online", min_gamma=lo, max_gamma=hi, algorithm="ucb1")
    if name == "pred-ucb":
        return V014Ucb(lo, hi)
    if name == "pred-ucb-eagle":
        return V014Ucb(lo, hi, PRED_UCB_EAGLE)
    if name == "per-request-oracle":
        return PerRequestOracle(lo, hi)
    if name in SPEC_RHYTHM:
        return make_spec_rhythm(scenario, roofline=name == "spec-rhythm-roofline")
    if name == "vllm-adaptive-verification":
        return VllmAdaptiveVerification(scenario)
    if name == "online-per-request":
        from ..adaptive.verify_lengths import PerRequestController  # noqa: PLC0415
        from .adaptive_glue import build_online, host_prior  # noqa: PLC0415

        prior = host_prior(scenario, seed)
        return PerRequestController(build_online(scenario, prior), lo, hi, cost_prior=prior)
    sampler_seed = 0
    if name.startswith("online@"):
        digits = name.split("@", 1)[1]
        if not digits.isdecimal():
            raise PolicyError(f"bad policy {name!r}: expected online@N with an integer N >= 0 "
                              "(the online controller's Thompson sampler seed)")
        sampler_seed = int(digits)
        name = "online"
    if name in OURS:
        from .adaptive_glue import build_ours  # noqa: PLC0415 - needs the adaptive package

        return build_ours(name, scenario, seed, sampler_seed)
    raise PolicyError(f"unknown policy {name!r}; known: {known_policy_help()}")
