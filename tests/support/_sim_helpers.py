"""Small scenario builders shared by the simulator tests."""

from __future__ import annotations

import copy
from typing import Any

from vllm_hust_vspec.sim import Scenario, parse_scenario

BASE: dict[str, Any] = {
    "schema_version": 1,
    "name": "unit",
    "seed": 3,
    "min_gamma": 0,
    "max_gamma": 4,
    "max_num_seqs": 8,
    "max_num_batched_tokens": 512,
    "workload": {
        "num_requests": 24,
        "arrival": {"type": "closed", "concurrency": 8},
        "prompt_len": {"type": "uniform", "low": 16, "high": 96},
        "output_len": {"type": "uniform", "low": 1, "high": 80},
    },
    "acceptance": {"type": "iid", "alpha": 0.7},
    "cost": {"type": "linear", "target_base_ms": 10.0, "target_per_token_ms": 0.05,
             "draft_step_ms": 1.0, "draft_per_token_ms": 0.01},
}


def scenario_dict(**changes: Any) -> dict[str, Any]:
    """A deep copy of BASE with top-level keys replaced (``workload__x`` sets a nested key)."""
    data = copy.deepcopy(BASE)
    for key, value in changes.items():
        target = data
        parts = key.split("__")
        for part in parts[:-1]:
            target = target[part]
        target[parts[-1]] = value
    return data


def make(**changes: Any) -> Scenario:
    """A validated scenario from BASE + changes."""
    return parse_scenario(scenario_dict(**changes), "<test>")
