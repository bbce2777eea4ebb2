"""Profile schema v1 parsing and the ProfilePolicy."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from _adaptive_env import SynthEnv, run

from vllm_hust_vspec.adaptive import (
    Profile,
    ProfileConfig,
    ProfileError,
    ProfilePolicy,
    StepFeedback,
    load_profile,
)

EXAMPLE: dict[str, Any] = {
    "schema_version": 1,
    "name": "synthetic",
    "method": "eagle",
    "target": {"constant_s": 0.010, "per_batched_token_s": 2e-5, "per_context_token_s": 0.0},
    "draft": {"constant_s": 0.001, "per_batched_token_s": 0.0, "per_context_token_s": 0.0},
    "per_gamma_overhead_s": 0.0,
    "assumed_context_tokens": 512,
    "default_acceptance": [0.8, 0.6, 0.45],
    "batch_gamma_table": [[1, 16, 4], [17, 256, 2]],
}


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "prof.json"
    path.write_text(json.dumps(data))
    return path


def test_load_and_round_trip(tmp_path: Path) -> None:
    prof = load_profile(_write(tmp_path, EXAMPLE))
    assert prof.name == "synthetic"
    assert prof.table_gamma(8) == 4
    assert prof.table_gamma(300) is None
    assert Profile.from_dict(prof.to_dict()) == prof
    # step_s = target(B*(1+g)) + g*draft
    assert prof.step_time(32, 2) == pytest.approx(0.010 + 2e-5 * 96 + 2 * 0.001)
    assert prof.acceptance(5)[:3] == (0.8, 0.6, 0.45)
    assert prof.acceptance(5)[3] == pytest.approx(0.45 * 0.75)


def test_single_acceptance_value_is_geometric() -> None:
    data = dict(EXAMPLE, default_acceptance=0.5)
    assert Profile.from_dict(data).acceptance(3) == pytest.approx((0.5, 0.25, 0.125))


@pytest.mark.parametrize(
    ("mutate", "key"),
    [
        (lambda d: d.update(bogus=1), "bogus"),
        (lambda d: d["draft"].update(per_batchd_token_s=1e-6), "draft.per_batchd_token_s"),
        (lambda d: d["target"].update(constant_s=-1.0), "target.constant_s"),
        (lambda d: d["target"].update(constant_s="fast"), "target.constant_s"),
        (lambda d: d.update(per_gamma_overhead_s=True), "per_gamma_overhead_s"),
        (lambda d: d.update(schema_version=2), "schema_version"),
        (lambda d: d.update(default_acceptance=[0.5, 0.7]), "default_acceptance[1]"),
        (lambda d: d.update(default_acceptance=1.5), "default_acceptance[0]"),
        (lambda d: d.update(batch_gamma_table=[[1, 8, 2], [4, 16, 1]]), "batch_gamma_table[1]"),
        (lambda d: d.update(assumed_context_tokens=-5), "assumed_context_tokens"),
        (lambda d: d.pop("target"), "target"),
        (lambda d: d.update(draft=[1, 2]), "draft"),
    ],
)
def test_schema_errors_name_file_and_key(tmp_path: Path, mutate: Any, key: str) -> None:
    data = copy.deepcopy(EXAMPLE)
    mutate(data)
    path = _write(tmp_path, data)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    msg = str(err.value)
    assert str(path) in msg
    assert f"'{key}'" in msg


def test_invalid_json_and_missing_file_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ProfileError, match="bad.json"):
        load_profile(bad)
    with pytest.raises(ProfileError, match="missing.json"):
        load_profile(tmp_path / "missing.json")


def _policy(**cfg: Any) -> ProfilePolicy:
    data = dict(EXAMPLE)
    data.pop("batch_gamma_table")
    return ProfilePolicy(Profile.from_dict(data), ProfileConfig(**cfg))


def test_policy_picks_predicted_best_and_follows_acceptance() -> None:
    env = SynthEnv(alpha=0.9, c=0.001, seed=20)
    pol = _policy()
    _, decisions = run(pol, env, 300)
    assert decisions[-1] == env.best_gamma() == 4

    def drop(e: SynthEnv, i: int) -> None:
        e.alpha = 0.05

    env2 = SynthEnv(alpha=0.05, c=0.001, overhead=0.0, seed=21)
    assert env2.best_gamma() == 0
    _, decisions = run(pol, env2, 200, drop)
    assert decisions[-1] == 0


def test_policy_uses_table_first_then_model() -> None:
    pol = ProfilePolicy(Profile.from_dict(EXAMPLE), ProfileConfig(table_steps=10,
                                                                  max_gamma_step=4))
    assert pol.decide(64, 8192) == 2  # table row [17, 256, 2]
    assert pol.snapshot()["source"] == "table"
    env = SynthEnv(alpha=0.95, batch=64, seed=22)
    run(pol, env, 50)
    assert pol.snapshot()["source"] == "model"
    assert pol.gamma == 4


def test_latency_calibration_is_clamped() -> None:
    pol = _policy(calibration_rate=0.5, calibration_max=2.0)
    for _ in range(40):
        g = pol.decide(32, 8192)
        pol.observe(StepFeedback(batch_size=32, gamma=g, drafted=(g,) * 32,
                                 accepted=(0,) * 32, committed=32, interval_s=10.0,
                                 token_budget=8192))
    snap = pol.snapshot()
    assert snap["calibration"] == pytest.approx(2.0)
    assert json.loads(json.dumps(snap))["policy"] == "profile"


def test_policy_respects_budget() -> None:
    pol = _policy()
    for _ in range(20):
        assert pol.decide(64, 64 * 3) <= 2


def test_profile_config_validation_names_field() -> None:
    with pytest.raises(ValueError, match="calibration_min"):
        ProfileConfig(calibration_min=0.0)
