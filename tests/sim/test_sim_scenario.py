"""Scenario validation: strict keys and values, errors naming the file and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _sim_helpers import make, scenario_dict

from vllm_hust_vspec.sim import (
    ScenarioError,
    list_scenarios,
    load_scenario,
    load_scenario_file,
    parse_scenario,
    unconditional_to_conditional,
)


def write(tmp_path: Path, data: object) -> Path:
    p = tmp_path / "scen.json"
    p.write_text(json.dumps(data))
    return p


def test_unknown_top_level_key_names_file_and_key(tmp_path: Path) -> None:
    data = scenario_dict()
    data["max_gama"] = 3
    p = write(tmp_path, data)
    with pytest.raises(ScenarioError, match=r"scen\.json: unknown key 'max_gama'"):
        load_scenario_file(p)


def test_unknown_nested_key_names_dotted_path(tmp_path: Path) -> None:
    data = scenario_dict(workload__arrival={"type": "closed", "concurrency": 4, "rate": 2})
    with pytest.raises(ScenarioError, match=r"unknown key 'workload\.arrival\.rate'"):
        load_scenario_file(write(tmp_path, data))


@pytest.mark.parametrize(("changes", "pattern"), [
    ({"max_gamma": -1}, r"'max_gamma': must be >= 0"),
    ({"min_gamma": 3, "max_gamma": 2}, r"'max_gamma': must be >= min_gamma"),
    ({"max_num_seqs": "8"}, r"'max_num_seqs': expected an integer"),
    ({"schema_version": 2}, r"'schema_version': unsupported version 2"),
    ({"acceptance": {"type": "iid", "alpha": 1.5}}, r"'acceptance\.alpha': must be <= 1"),
    ({"acceptance": {"type": "positional", "rates": [0.5, 0.7]}},
     r"'acceptance\.rates': unconditional rates must not increase"),
    ({"acceptance": {"type": "positional", "preset": "nope"}}, r"'acceptance\.preset'"),
    ({"acceptance": {"type": "phased", "phases": [
        {"model": {"type": "iid", "alpha": 0.5}}, {"model": {"type": "iid", "alpha": 0.5}}]}},
     r"acceptance\.phases\[0\]\.tokens"),
    ({"cost": "a100-imaginary"}, r"'cost': unknown cost preset"),
    ({"cost": {"type": "table", "batch": [1, 8], "gamma": [0, 1], "ms": [[1, 2]]}},
     r"'cost\.ms': expected 2 rows"),
    ({"cost": {"type": "table", "batch": [8, 1], "gamma": [0], "ms": [[1], [2]]}},
     r"strictly increasing"),
    ({"workload__output_len": {"type": "uniform", "low": 9, "high": 3}},
     r"'workload\.output_len\.high': must be >= low"),
    ({"tags": ["stationary"], "acceptance": {"type": "phased", "phases": [
        {"tokens": 5, "model": {"type": "iid", "alpha": 0.5}},
        {"model": {"type": "iid", "alpha": 0.1}}]}}, r"'tags'"),
    ({"max_num_batched_tokens": 4}, r"'max_num_batched_tokens': must be >= max_num_seqs"),
])
def test_bad_values_are_reported_with_their_key(changes: dict[str, object], pattern: str) -> None:
    with pytest.raises(ScenarioError, match=pattern):
        parse_scenario(scenario_dict(**changes), "my.json")


def test_the_startup_calibration_is_the_host_default_unless_turned_off() -> None:
    assert make().startup_calibration == 0.0  # the host runs it by default
    assert make(startup_calibration=None).startup_calibration is None
    assert make(startup_calibration=0.1).startup_calibration == 0.1
    with pytest.raises(ScenarioError, match=r"'startup_calibration': must be <= 0.5"):
        make(startup_calibration=0.6)


def test_missing_key_and_bad_json(tmp_path: Path) -> None:
    data = scenario_dict()
    del data["workload"]["num_requests"]
    with pytest.raises(ScenarioError, match=r"missing required key 'workload\.num_requests'"):
        load_scenario_file(write(tmp_path, data))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ScenarioError, match=r"bad\.json: not valid JSON"):
        load_scenario_file(bad)


def test_unknown_name_lists_shipped_scenarios() -> None:
    with pytest.raises(ScenarioError, match="shipped scenarios: .*b64-eagle1-h100"):
        load_scenario("no-such-scenario")


def test_shipped_suite_loads_and_is_tagged() -> None:
    names = list_scenarios()
    assert 10 <= len(names) <= 24
    suite = [load_scenario(n) for n in names]
    assert all(s.name == n for s, n in zip(suite, names, strict=True))
    assert any(s.stationary for s in suite) and any(not s.stationary for s in suite)
    for s in suite:
        assert ("stationary" in s.tags) != ("non-stationary" in s.tags)
    seqs = {s.max_num_seqs for s in suite}
    assert min(seqs) == 1 and max(seqs) >= 256


def test_conditional_conversion_of_published_rates() -> None:
    cond = unconditional_to_conditional([0.68, 0.39, 0.20, 0.10, 0.05])
    assert cond[0] == pytest.approx(0.68)
    assert cond[1] == pytest.approx(0.39 / 0.68)
    assert cond[4] == pytest.approx(0.5)
    sc = make(acceptance={"type": "positional", "preset": "qwen3-next-mtp-k3"})
    model = sc.acceptance.phases[0].model
    assert model.mean_rates(4)[1] == pytest.approx(0.778 / 0.873)
    assert model.mean_rates(4)[3] == model.mean_rates(4)[2]  # last rate repeats


def test_alpha_beta_and_mixture_parse() -> None:
    sc = make(acceptance={"type": "mixture", "components": [
        {"weight": 1, "model": {"type": "iid", "alpha_beta": [8, 2]}},
        {"weight": 3, "model": {"type": "positional", "rates": [0.5, 0.25], "conditional": False}},
    ]})
    assert sc.acceptance.stationary
    rates = sc.acceptance.phases[0].model.mean_rates(2)
    assert rates[0] == pytest.approx(0.25 * 0.8 + 0.75 * 0.5)
