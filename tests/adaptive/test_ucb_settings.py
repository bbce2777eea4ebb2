"""The UCB1 online algorithm is selectable from the launcher, TOML and the environment, and the
host's factory builds it with 0.14.3's knobs in their 0.14.3 meanings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _model_folders import PREDECESSOR_MODELS, make_model_dir

from vllm_hust_vspec.adaptive import OnlineController
from vllm_hust_vspec.adaptive.ucb import Ucb1Controller
from vllm_hust_vspec.cli.launch import main
from vllm_hust_vspec.host.engine.controller_factory import make_controller, takes_cost_prior
from vllm_hust_vspec.settings import Settings, SettingsError, load_settings, resolve_settings


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key in list(__import__("os").environ):
        if key.startswith(("HUST_VSPEC_", "HUST_SPEC", "VSPEC_", "SPECSLO", "SPECASCEND")):
            monkeypatch.delenv(key)
    root = make_model_dir(tmp_path / "models", (*PREDECESSOR_MODELS, "target", "draft"))
    monkeypatch.setenv("HUST_VSPEC_MODEL_DIR", str(root))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    return tmp_path


def _ucb(settings: Settings, max_gamma: int = 4) -> Ucb1Controller:
    ctrl = make_controller(settings, max_gamma)
    assert isinstance(ctrl, Ucb1Controller)
    return ctrl


def test_default_stays_thompson() -> None:
    s = Settings()
    assert s.adaptive_policy == "online"
    assert isinstance(make_controller(s, 4), OnlineController)
    assert takes_cost_prior(s)


def test_environment_and_toml_select_ucb1(clean_env: Path) -> None:
    s = load_settings({"HUST_VSPEC_ADAPTIVE_POLICY": "ucb1"})
    assert s.adaptive_policy == "ucb1"
    assert not takes_cost_prior(s)
    _ucb(s)
    toml = clean_env / "vspec.toml"
    toml.write_text('[serve]\nadaptive_policy = "ucb1"\nadaptive_online_window = 8\n')
    s = resolve_settings(config=str(toml), env={}).settings
    assert _ucb(s).config.window == 8
    with pytest.raises(SettingsError, match="adaptive_policy"):
        load_settings({"HUST_VSPEC_ADAPTIVE_POLICY": "ucb2"})


def test_launcher_flag_reaches_the_server_environment(
        clean_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--dry-run", "--json", "--protocol", "vspec-draft-adaptive",
                 "--adaptive-policy", "ucb1"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert out["env"]["HUST_VSPEC_ADAPTIVE_POLICY"] == "ucb1"
    # the server process rebuilds its settings from that environment
    assert load_settings(out["env"]).adaptive_policy == "ucb1"


def test_knobs_mean_what_they_meant_in_0_14_3() -> None:
    base = _ucb(Settings(adaptive_policy="ucb1", method="draft",
                         adaptive_min_gamma=1))
    # 0.14.3's settings defaults, and its graph-backed start for the draft model
    assert (base.config.control_interval, base.config.hysteresis, base.config.exploration,
            base.config.window, base.config.warmup_samples, base.config.max_gamma_step,
            base.config.ewma_weight) == (4, 0.05, 0.01, 32, 1, 1, 0.1)
    assert base.config.initial_gamma == 2 and base.decide(8, 0) == 2
    tuned = _ucb(Settings(adaptive_policy="ucb1", method="eagle3", async_scheduling=True,
                          adaptive_exploration=0.15, adaptive_tuning={
                              "online_window": 16, "online_warmup_samples": 4,
                              "hysteresis": 0.2, "control_interval": 2, "ewma_weight": 0.3,
                              "online_warmup_return": "incumbent"}), 6)
    cfg = tuned.config
    assert (cfg.window, cfg.exploration, cfg.warmup_samples, cfg.hysteresis,
            cfg.control_interval, cfg.ewma_weight, cfg.warmup_return) == (
        16, 0.15, 4, 0.2, 2, 0.3, "incumbent")
    assert (cfg.initial_gamma, cfg.probe_shared_cost_units, cfg.inflight_padding) == (5, 8.0, 1)
    mtp = _ucb(Settings(adaptive_policy="ucb1", method="mtp", adaptive_min_gamma=2,
                        adaptive_tuning={"gamma_stride": 2, "max_gamma_step": 2}), 6)
    assert mtp.config.initial_gamma == 4 and mtp.config.gamma_stride == 2


def test_a_profile_is_refused_with_ucb1() -> None:
    with pytest.raises(SettingsError, match="ignores it"):
        load_settings({"HUST_VSPEC_ADAPTIVE_POLICY": "ucb1",
                       "HUST_VSPEC_ADAPTIVE_PROFILE": "p.json"})
