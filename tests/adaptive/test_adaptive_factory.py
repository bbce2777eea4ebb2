"""build_controller: policy names, overrides and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_hust_vspec.adaptive import (
    Controller,
    FixedController,
    OnlineController,
    ProfileError,
    ProfilePolicy,
    build_controller,
)

PROFILE = {
    "schema_version": 1,
    "target": {"constant_s": 0.01, "per_batched_token_s": 1e-5},
    "draft": {"constant_s": 0.001},
}


def test_builds_each_policy(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(PROFILE))
    online = build_controller("online", min_gamma=0, max_gamma=3, hysteresis=0.1, window=None)
    assert isinstance(online, OnlineController)
    assert online.config.hysteresis == 0.1 and online.config.max_gamma == 3
    prof = build_controller("profile", min_gamma=1, max_gamma=5, profile_path=str(path),
                            max_gamma_step=1)
    assert isinstance(prof, ProfilePolicy) and prof.config.max_gamma_step == 1
    fixed = build_controller("fixed", min_gamma=0, max_gamma=4)
    assert isinstance(fixed, FixedController)
    assert fixed.decide(8, 8192) == 4
    assert fixed.decide(8, 24) == 2  # 8 * (1 + 2) = 24 fits, 8 * 4 does not
    for c in (online, prof, fixed):
        assert isinstance(c, Controller)


def test_unknown_policy_names_allowed_ones() -> None:
    with pytest.raises(ValueError, match="online, profile, fixed"):
        build_controller("ucb", min_gamma=0, max_gamma=4)


def test_unknown_override_is_named() -> None:
    with pytest.raises(ValueError, match="windw"):
        build_controller("online", min_gamma=0, max_gamma=4, windw=8)
    with pytest.raises(ValueError, match="window"):
        build_controller("profile", min_gamma=0, max_gamma=4, profile_path="x", window=8)
    with pytest.raises(ValueError, match="overrides"):
        build_controller("fixed", min_gamma=0, max_gamma=4, hysteresis=0.1)


def test_profile_policy_needs_a_valid_profile(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="profile_path"):
        build_controller("profile", min_gamma=0, max_gamma=4)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(dict(PROFILE, extra=1)))
    with pytest.raises(ProfileError, match="extra"):
        build_controller("profile", min_gamma=0, max_gamma=4, profile_path=str(bad))


def test_bad_gamma_range() -> None:
    with pytest.raises(ValueError, match="max_gamma"):
        build_controller("online", min_gamma=3, max_gamma=1)
    with pytest.raises(ValueError, match="max_gamma"):
        build_controller("fixed", min_gamma=3, max_gamma=1)
