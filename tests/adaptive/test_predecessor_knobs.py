"""The predecessor's controller knobs (settings fields) reach the controllers and change them.

Each test builds controllers from ``Settings`` through the host's factory, with and without the
knob, drives them with the same deterministic feedback and asserts a difference that would
vanish if the knob were ignored; range checks are tested at both the settings layer and the
controller configs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from _adaptive_env import SynthEnv

from vllm_hust_vspec.adaptive import (
    OnlineConfig,
    OnlineController,
    ProfileConfig,
    ProfilePolicy,
    StepFeedback,
    build_controller,
)
from vllm_hust_vspec.adaptive.acceptance import halflife_from_ewma_weight
from vllm_hust_vspec.adaptive.confidence import confidence_keep, scaled_threshold
from vllm_hust_vspec.host.engine.controller_factory import controller_kwargs, make_controller
from vllm_hust_vspec.settings import Settings, SettingsError, load_settings

BATCH = 32
PROFILE = {
    "schema_version": 1,
    "target": {"constant_s": 0.01, "per_batched_token_s": 1e-5},
    "draft": {"constant_s": 0.001},
}


def _online(**fields: Any) -> OnlineController:
    ctrl = make_controller(Settings(adaptive_speculation=True, **fields), 4)
    assert isinstance(ctrl, OnlineController)
    return ctrl


@pytest.fixture
def profile_path(tmp_path: Path) -> str:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(PROFILE))
    return str(path)


def _profile_config(**fields: Any) -> ProfileConfig:
    kwargs = controller_kwargs(Settings(adaptive_speculation=True, adaptive_policy="profile",
                                        **fields), 4)
    kwargs.pop("profile_path")
    return ProfileConfig(**kwargs)


def _profile(path: str, **fields: Any) -> ProfilePolicy:
    ctrl = make_controller(Settings(adaptive_speculation=True, adaptive_policy="profile",
                                    adaptive_profile=path, **fields), 4)
    assert isinstance(ctrl, ProfilePolicy)
    return ctrl


def _feedback(gamma: int, accepted: int, interval_s: float) -> StepFeedback:
    """One steady step of BATCH requests, each with ``accepted`` of ``gamma`` accepted."""
    return StepFeedback(
        batch_size=BATCH, gamma=gamma, drafted=(gamma,) * BATCH, accepted=(accepted,) * BATCH,
        committed=BATCH * (1 + accepted), interval_s=interval_s, token_budget=8192,
    )


def _drop_acceptance(ctrl: OnlineController | ProfilePolicy) -> float:
    """Half the requests accept every draft for 100 steps, then 12 of 32 for 8 steps: returns
    the share of the old rate (0.5) the estimate of p[0] still holds. (A drop small enough
    to be drift: one the acceptance model takes for a shift is followed at once, whatever
    the half-life.)"""
    def step(accepting: int) -> StepFeedback:
        accepted = (2,) * accepting + (0,) * (BATCH - accepting)
        return StepFeedback(
            batch_size=BATCH, gamma=2, drafted=(2,) * BATCH, accepted=accepted,
            committed=BATCH + 2 * accepting, interval_s=0.02, token_budget=8192,
        )

    for _ in range(100):
        ctrl.observe(step(BATCH // 2))
    for _ in range(8):
        ctrl.observe(step(BATCH * 3 // 8))
    assert ctrl.snapshot()["acceptance_shifts"] == 0
    return (float(ctrl.snapshot()["acceptance"][0]) - 0.375) / 0.125


# -- adaptive_min_observations ----------------------------------------------------------------


def test_min_observations_is_a_profile_policy_knob_only() -> None:
    """As in the predecessor, the online policy does not wait for observations: a
    recorded adaptive_min_observations = 32 under online changes nothing."""
    default = _online()
    knob = _online(adaptive_tuning={"min_observations": 32})
    assert knob.config == default.config
    for ctrl in (default, knob):
        for _ in range(10):
            ctrl.decide(BATCH, 8192)
            ctrl.observe(_feedback(4, 3, 0.02))
    assert default.snapshot()["skipped_warmup"] == knob.snapshot()["skipped_warmup"]


def test_min_observations_delays_an_arms_own_calibration(profile_path: str) -> None:
    default = _profile(profile_path)
    knob = _profile(profile_path, adaptive_tuning={"min_observations": 5})
    slow = 1.5 * default._times(BATCH)[2]
    # Same feedback, so the same acceptance and all-arms factor: only arm 2's own factor
    # (further toward 1.5 than the all-arms one) can tell the two apart.
    for _ in range(3):
        for ctrl in (default, knob):
            ctrl.observe(_feedback(2, 1, slow))
    d, k = default.predicted_goodput(BATCH), knob.predicted_goodput(BATCH)
    assert [d[i] for i in (0, 1, 3, 4)] == [k[i] for i in (0, 1, 3, 4)]
    assert k[2] > d[2] * 1.01  # 3 < 5 samples: arm 2 still uses the all-arms factor
    for _ in range(2):
        for ctrl in (default, knob):
            ctrl.observe(_feedback(2, 1, slow))
    assert knob.predicted_goodput(BATCH) == default.predicted_goodput(BATCH)  # 5: trusted


# -- adaptive_ewma_weight ---------------------------------------------------------------------


def test_ewma_weight_sets_the_acceptance_half_life() -> None:
    assert halflife_from_ewma_weight(0.5) == pytest.approx(1.0)
    assert halflife_from_ewma_weight(0.001) == pytest.approx(math.log(0.5) / math.log(0.999))
    assert _online(adaptive_tuning={"ewma_weight": 0.01}).config.acceptance_halflife_requests == (
        pytest.approx(math.log(0.5) / math.log(0.99)))
    assert _online().config.acceptance_halflife_requests == 256.0  # unset: today's half-life
    assert _profile_config(adaptive_tuning={"ewma_weight": 0.01}).halflife_requests == (
        pytest.approx(math.log(0.5) / math.log(0.99)))


@pytest.mark.parametrize("policy", ["online", "profile"])
def test_ewma_weight_changes_how_fast_acceptance_is_forgotten(
    policy: str, profile_path: str
) -> None:
    def build(**fields: Any) -> OnlineController | ProfilePolicy:
        if policy == "online":
            return _online(**fields)
        return _profile(profile_path, **fields)

    # At batch 32 the default half-life (256 requests) is 8 steps; 0.001 gives ~21.7 steps
    # and 1 the 4-step floor: 8 steps at the lower rate leave ~0.77, 0.5 and 0.25 of the
    # difference between the two rates in the estimate of p[0].
    slow = _drop_acceptance(build(adaptive_tuning={"ewma_weight": 0.001}))
    default = _drop_acceptance(build())
    fast = _drop_acceptance(build(adaptive_tuning={"ewma_weight": 1.0}))
    assert slow == pytest.approx(0.5 ** (8 / (math.log(0.5) / math.log(0.999) / BATCH)),
                                 rel=0.02)
    assert default == pytest.approx(0.5, rel=0.02)
    assert fast == pytest.approx(0.25, rel=0.02)


# -- adaptive_latency_ewma_weight (0.14.3's adaptive_latency_calibration: off is weight 0) ----


def test_latency_calibration_off_trusts_the_profile(profile_path: str) -> None:
    on = _profile(profile_path)
    off = _profile(profile_path, adaptive_tuning={"latency_ewma_weight": 0.0})
    assert off.config.latency_calibration is False and on.config.latency_calibration
    before = off.predicted_goodput(BATCH)
    slow = 1.5 * on._times(BATCH)[2]
    for _ in range(20):
        for ctrl in (on, off):
            ctrl.observe(_feedback(2, 1, slow))
    assert on.snapshot()["calibration"] > 1.2
    assert off.snapshot()["calibration"] == 1.0
    assert off.predicted_goodput(BATCH)[0] == before[0]  # arm 0: acceptance plays no part
    assert on.predicted_goodput(BATCH)[0] < before[0]


def test_latency_ewma_weight_sets_the_calibration_rate(profile_path: str) -> None:
    default = _profile(profile_path)
    knob = _profile(profile_path, adaptive_tuning={"latency_ewma_weight": 0.5})
    assert knob.config.calibration_rate == 0.5
    slow = 1.5 * default._times(BATCH)[2]
    for ctrl in (default, knob):
        ctrl.observe(_feedback(2, 1, slow))
    assert default.snapshot()["calibration"] == pytest.approx(1.0 + 0.05 * 0.5)
    assert knob.snapshot()["calibration"] == pytest.approx(1.0 + 0.5 * 0.5)


def test_latency_knobs_are_ignored_by_the_online_policy() -> None:
    kwargs = controller_kwargs(
        Settings(adaptive_speculation=True, adaptive_tuning={"latency_ewma_weight": 0.5}), 4)
    assert "calibration_rate" not in kwargs and "latency_calibration" not in kwargs
    assert isinstance(build_controller("online", **kwargs), OnlineController)


# -- adaptive_online_warmup_return ------------------------------------------------------------


def test_warmup_return_incumbent_keeps_the_initial_gamma_against_near_ties() -> None:
    incumbent = _online(adaptive_tuning={"online_warmup_return": "incumbent"})
    assert incumbent.warmup_return == "incumbent"
    assert _online().warmup_return == "best"

    def run(**fields: Any) -> list[int]:
        ctrl = _online(**fields)
        env = SynthEnv(alpha=0.75, seed=5)  # gamma 2, 3 and 4 within a few percent
        out = []
        for _ in range(80):
            g = ctrl.decide(env.batch, env.budget)
            ctrl.observe(env.step(g))
            out.append(g)
        return out

    best = run()
    incumbent = run(adaptive_tuning={"online_warmup_return": "incumbent"})
    # the initial gamma is 4: 'best' leaves it on a draw, 'incumbent' only for a sure winner
    assert incumbent.count(4) > best.count(4)
    assert incumbent.count(4) >= 70


# -- adaptive_online_window / adaptive_exploration -------------------------------------------


def test_window_and_exploration_reach_the_online_controller() -> None:
    ctrl = _online(adaptive_tuning={"online_window": 7}, adaptive_exploration=0.0)
    assert ctrl.config.window == 7 and ctrl.config.exploration == 0.0
    assert _online().config.exploration == 1.0
    for _ in range(20):
        ctrl.decide(BATCH, 8192)
        ctrl.observe(_feedback(4, 3, 0.02))
    assert {a["gamma"]: a["samples"] for a in ctrl.snapshot()["arms"]}[4] == 7
    with pytest.raises(ValueError, match="window"):
        build_controller("profile", min_gamma=0, max_gamma=4, window=3)


# -- confidence_stop_scale -------------------------------------------------------------------


def test_entropy_scale_keeps_the_predecessors_direction() -> None:
    """The predecessor stopped where entropy * scale > threshold ** 2 (top-k renormalized):
    a larger scale stops earlier, the threshold counts squared."""
    pytest.importorskip("torch")  # the draft-side config reads the backend's defaults
    from vllm_hust_vspec.host.worker.v1.drafting import draft_config

    base = draft_config(Settings(confidence_stop=True))
    eager = draft_config(Settings(confidence_stop=True, confidence_stop_scale=0.6))
    wide = draft_config(Settings(confidence_stop=True, confidence_stop_threshold=0.6))
    assert base.entropy_threshold == pytest.approx(0.09 / 0.15)
    assert eager.entropy_threshold == pytest.approx(0.09 / 0.6)
    assert wide.entropy_threshold == pytest.approx(0.36 / 0.15)
    # Renormalized top-2 entropies: 0.9/0.05 -> 0.21 nats, 0.4/0.3 -> 0.68 nats.
    draft = [[0.9, 0.05], [0.4, 0.3], [0.9, 0.05]]
    rule = "topk-entropy"
    assert confidence_keep(draft, rule=rule, threshold=base.entropy_threshold) == 2
    assert confidence_keep(draft, rule=rule, threshold=eager.entropy_threshold) == 1
    assert confidence_keep(draft, rule=rule, threshold=wide.entropy_threshold) == 3
    with pytest.raises(SettingsError, match="topk-entropy"):
        load_settings({"HUST_VSPEC_CONFIDENCE_STOP_RULE": "entropy",
                       "HUST_VSPEC_CONFIDENCE_STOP_SCALE": "0.5"})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ADAPTIVE_MIN_OBSERVATIONS", "0"),
        ("ADAPTIVE_EWMA_WEIGHT", "0"),
        ("ADAPTIVE_EWMA_WEIGHT", "1.5"),
        ("ADAPTIVE_LATENCY_EWMA_WEIGHT", "-0.1"),
        ("ADAPTIVE_LATENCY_EWMA_WEIGHT", "2"),
        ("ADAPTIVE_ONLINE_WARMUP_RETURN", "worst"),
        ("ADAPTIVE_ONLINE_EXPLORATION", "-1"),
        ("ADAPTIVE_ONLINE_WINDOW", "0"),
        ("CONFIDENCE_STOP_SCALE", "0"),
    ],
)
def test_settings_refuse_out_of_range_knobs(name: str, value: str) -> None:
    with pytest.raises(SettingsError):
        load_settings({"HUST_VSPEC_" + name: value})


@pytest.mark.parametrize(
    ("cls", "field", "value"),
    [
        (OnlineController, "warmup_return", "worst"),
        (OnlineConfig, "exploration", math.nan),
        (OnlineConfig, "window", 0),
        (ProfileConfig, "min_observations", 0),
        (ProfileConfig, "ewma_weight", 0.0),
        (ProfileConfig, "ewma_weight", math.nan),
        (ProfileConfig, "latency_calibration", "no"),
        (ProfileConfig, "calibration_rate", 1.5),
    ],
)
def test_controller_configs_refuse_bad_knobs(cls: type, field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        cls(**{field: value})


@pytest.mark.parametrize("scale", [0.0, -1.0, math.inf, math.nan])
def test_threshold_scale_refuses_bad_values(scale: float) -> None:
    with pytest.raises(ValueError, match="scale"):
        scaled_threshold(1.0, scale)
    assert scaled_threshold(0.7, None) == 0.7


def test_the_profile_policy_starts_beside_the_hosts_cost_prior(profile_path: str) -> None:
    """The host hands every engine's controller its start-up cost prior; the profile policy
    has its own latency model and must start, not refuse the prior."""
    from vllm_hust_vspec.adaptive.cost_prior import CostPrior, CostSample

    prior = CostPrior("start-up profile", (CostSample(8, 0, 0.01), CostSample(8, 2, 0.02)))
    settings = Settings(adaptive_speculation=True, adaptive_policy="profile",
                        adaptive_profile=profile_path)
    assert isinstance(make_controller(settings, 4, cost_prior=prior), ProfilePolicy)
