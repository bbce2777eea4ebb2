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
from vllm_hust_vspec.host.controller_factory import controller_kwargs, make_controller
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


def _sweep(ctrl: OnlineController, env: SynthEnv, limit: int = 400) -> int:
    """Drive ``ctrl`` until it leaves the sweep; returns the number of steps it took."""
    for step in range(limit):
        if ctrl.phase == "exploit":
            return step
        g = ctrl.decide(env.batch, env.budget)
        ctrl.observe(env.step(g))
    raise AssertionError("the sweep did not end")


def _drop_acceptance(ctrl: OnlineController | ProfilePolicy) -> float:
    """Every draft accepted for 100 steps, then none for 8: returns the estimate of p[0]."""
    for _ in range(100):
        ctrl.observe(_feedback(2, 2, 0.02))
    for _ in range(8):
        ctrl.observe(_feedback(2, 0, 0.02))
    return float(ctrl.snapshot()["acceptance"][0])


# -- adaptive_min_observations ----------------------------------------------------------------


def test_min_observations_lengthens_the_online_sweep() -> None:
    default = _online()
    knob = _online(adaptive_min_observations=6)
    # 6 samples over 2 passes: 3 per visit, plus the visit's transition step.
    assert default.config.visit_samples == 2 and knob.config.visit_samples == 4
    steps_default = _sweep(default, SynthEnv(seed=3))
    steps_knob = _sweep(knob, SynthEnv(seed=3))
    assert steps_knob > steps_default
    # Arm 0 is the sticky (drafter-skipping) zero: SynthEnv never reports one, so it has no
    # samples of its own in either controller.
    samples = [arm["samples"] for arm in knob.snapshot()["arms"]][1:]
    assert min(samples) >= 6
    assert min(arm["samples"] for arm in default.snapshot()["arms"][1:]) < 6
    # 1 and 2 both need what the default sweep already gives each arm: nothing changes.
    assert _online(adaptive_min_observations=1).config.visit_samples == 2


def test_min_observations_delays_an_arms_own_calibration(profile_path: str) -> None:
    default = _profile(profile_path)
    knob = _profile(profile_path, adaptive_min_observations=5)
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
    assert _online(adaptive_ewma_weight=0.01).config.halflife_requests == pytest.approx(
        math.log(0.5) / math.log(0.99))
    assert _online().config.halflife_requests == 256.0  # unset: today's half-life


@pytest.mark.parametrize("policy", ["online", "profile"])
def test_ewma_weight_changes_how_fast_acceptance_is_forgotten(
    policy: str, profile_path: str
) -> None:
    def build(**fields: Any) -> OnlineController | ProfilePolicy:
        if policy == "online":
            return _online(**fields)
        return _profile(profile_path, **fields)

    # At batch 32 the default half-life (256 requests) is 8 steps; 0.001 gives ~21.7 steps
    # and 1 the 4-step floor: 8 rejecting steps leave p[0] at ~0.77, 0.5 and 0.25.
    slow = _drop_acceptance(build(adaptive_ewma_weight=0.001))
    default = _drop_acceptance(build())
    fast = _drop_acceptance(build(adaptive_ewma_weight=1.0))
    assert slow == pytest.approx(0.5 ** (8 / (math.log(0.5) / math.log(0.999) / BATCH)),
                                 rel=0.02)
    assert default == pytest.approx(0.5, rel=0.02)
    assert fast == pytest.approx(0.25, rel=0.02)


# -- adaptive_latency_calibration / adaptive_latency_ewma_weight ------------------------------


def test_latency_calibration_off_trusts_the_profile(profile_path: str) -> None:
    on = _profile(profile_path)
    off = _profile(profile_path, adaptive_latency_calibration=False)
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
    knob = _profile(profile_path, adaptive_latency_ewma_weight=0.5)
    assert knob.config.calibration_rate == 0.5
    slow = 1.5 * default._times(BATCH)[2]
    for ctrl in (default, knob):
        ctrl.observe(_feedback(2, 1, slow))
    assert default.snapshot()["calibration"] == pytest.approx(1.0 + 0.05 * 0.5)
    assert knob.snapshot()["calibration"] == pytest.approx(1.0 + 0.5 * 0.5)


def test_latency_knobs_are_ignored_by_the_online_policy() -> None:
    kwargs = controller_kwargs(
        Settings(adaptive_speculation=True, adaptive_latency_calibration=False,
                 adaptive_latency_ewma_weight=0.5), 4)
    assert "calibration_rate" not in kwargs and "latency_calibration" not in kwargs
    assert isinstance(build_controller("online", **kwargs), OnlineController)


# -- adaptive_online_warmup_return ------------------------------------------------------------


def _after_sweep(warmup_return: str) -> list[int]:
    """Decisions in the 12 steps after the first post-sweep one (a one-pass sweep ends at
    gamma 0)."""
    settings = Settings(adaptive_speculation=True, adaptive_hysteresis=1.0,
                        adaptive_online_warmup_return=warmup_return)
    # One pass walks 4 -> 0, so the sweep's last arm is not the incumbent (gamma 4).
    ctrl = build_controller("online", **controller_kwargs(settings, 4), sweep_passes=1)
    assert isinstance(ctrl, OnlineController)
    env = SynthEnv(seed=5)
    _sweep(ctrl, env)
    out = []
    for _ in range(12):
        g = ctrl.decide(env.batch, env.budget)
        ctrl.observe(env.step(g))
        out.append(g)
    return out


def test_warmup_return_incumbent_goes_back_to_the_initial_gamma() -> None:
    assert _online(adaptive_online_warmup_return="incumbent").config.warmup_return == (
        "incumbent")
    assert _online().config.warmup_return == "best"
    best = _after_sweep("best")
    incumbent = _after_sweep("incumbent")
    # 'best' judges from gamma 0 and a 100% hysteresis keeps it low; 'incumbent' judges from
    # gamma 4 (reached in two decisions at max_gamma_step 2) and stays there.
    assert max(best) <= 1
    assert set(incumbent) == {4}


# -- adaptive_entropy_scale -------------------------------------------------------------------


def test_entropy_scale_multiplies_the_confidence_threshold() -> None:
    pytest.importorskip("torch")  # the draft-side config reads the backend's defaults
    from vllm_hust_vspec.host.drafting import draft_config

    base = draft_config(Settings(adaptive_entropy_stop=True))
    scaled = draft_config(Settings(adaptive_entropy_stop=True, adaptive_entropy_scale=2.0))
    margin = draft_config(Settings(adaptive_entropy_stop=True, adaptive_entropy_rule="margin",
                                   adaptive_entropy_scale=0.5))
    assert base.entropy_threshold == 1.0
    assert scaled.entropy_threshold == 2.0
    assert margin.entropy_threshold == pytest.approx(0.1)
    # Position 1's top-4 entropy is ~1.28 nats: uncertain at 1.0, certain at 2.0.
    draft = [[0.9, 0.05, 0.03, 0.02], [0.4, 0.3, 0.2, 0.1], [0.9, 0.05, 0.03, 0.02]]
    assert confidence_keep(draft, threshold=base.entropy_threshold) == 2
    assert confidence_keep(draft, threshold=scaled.entropy_threshold) == 3


# -- range checks -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ADAPTIVE_MIN_OBSERVATIONS", "0"),
        ("ADAPTIVE_EWMA_WEIGHT", "0"),
        ("ADAPTIVE_EWMA_WEIGHT", "1.5"),
        ("ADAPTIVE_LATENCY_EWMA_WEIGHT", "0"),
        ("ADAPTIVE_LATENCY_EWMA_WEIGHT", "2"),
        ("ADAPTIVE_ONLINE_WARMUP_RETURN", "worst"),
        ("ADAPTIVE_ENTROPY_SCALE", "0"),
    ],
)
def test_settings_refuse_out_of_range_knobs(name: str, value: str) -> None:
    with pytest.raises(SettingsError):
        load_settings({"HUST_VSPEC_" + name: value})


@pytest.mark.parametrize(
    ("cls", "field", "value"),
    [
        (OnlineConfig, "min_observations", 0),
        (OnlineConfig, "min_observations", 1.5),
        (OnlineConfig, "ewma_weight", 0.0),
        (OnlineConfig, "ewma_weight", 1.01),
        (OnlineConfig, "warmup_return", "worst"),
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
