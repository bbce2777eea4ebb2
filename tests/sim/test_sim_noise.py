"""Scenario timing noise (sim/noise.py): parsing, pairing across policies, and its effect."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from vllm_hust_vspec.sim.noise import NoiseSource, TimingNoise
from vllm_hust_vspec.sim.runner import run_one
from vllm_hust_vspec.sim.scenario import ScenarioError, load_scenario, load_scenario_file


def test_load_level_is_a_function_of_time_shared_by_every_run() -> None:
    noise = TimingNoise(load_sigma=0.3, load_period_s=0.5)
    a, b = NoiseSource(noise, 7), NoiseSource(noise, 7)
    times = [0.1, 0.7, 3.2, 0.2, 9.9]
    assert [a.load(t) for t in times] == [b.load(t) for t in reversed(times)][::-1]
    assert a.load(0.1) == a.load(0.4)  # same period
    assert len({round(a.load(t), 9) for t in (0.1, 0.6, 1.1, 1.6)}) > 1
    assert NoiseSource(noise, 8).load(0.1) != a.load(0.1)


def test_jitter_and_spikes_have_the_configured_size() -> None:
    src = NoiseSource(TimingNoise(jitter_sigma=0.1, spike_prob=0.05, spike_factor=3.0), 1)
    factors = [src.factor(0.0) for _ in range(20000)]
    spikes = sum(f > 2.0 for f in factors) / len(factors)
    assert 0.04 < spikes < 0.06
    calm = [f for f in factors if f < 2.0]
    assert statistics.median(calm) == pytest.approx(1.0, abs=0.01)
    assert statistics.pstdev(calm) == pytest.approx(0.1, rel=0.15)


def test_noise_off_by_default_and_on_in_the_noisy_scenarios() -> None:
    assert not load_scenario("b16-eagle3-h100").timing_noise.active
    noisy = load_scenario("b16-eagle3-h100-noisy")
    assert noisy.timing_noise.active
    quiet = run_one(load_scenario("b16-eagle3-h100"), "fixed:3", 1)
    shaken = run_one(noisy, "fixed:3", 1)
    # same requests and acceptance draws: only the clock differs
    assert shaken.committed_tokens == quiet.committed_tokens
    assert shaken.busy_seconds != quiet.busy_seconds


def test_unknown_noise_key_names_the_key(tmp_path: Path) -> None:
    raw = {
        "schema_version": 1, "name": "x", "min_gamma": 0, "max_gamma": 2,
        "max_num_seqs": 4, "max_num_batched_tokens": 64,
        "workload": {"num_requests": 4, "arrival": {"type": "closed", "concurrency": 4},
                     "prompt_len": {"type": "fixed", "value": 8},
                     "output_len": {"type": "fixed", "value": 8}},
        "acceptance": {"type": "iid", "alpha": 0.5},
        "cost": "mtp-head",
        "timing_noise": {"jitter_sigma": 0.1, "load_sigmaa": 0.2},
    }
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ScenarioError, match=r"timing_noise.*load_sigmaa|load_sigmaa"):
        load_scenario_file(path)
    raw["timing_noise"] = {"jitter_sigma": -1}
    path.write_text(json.dumps(raw))
    with pytest.raises(ScenarioError, match="timing_noise.jitter_sigma"):
        load_scenario_file(path)
