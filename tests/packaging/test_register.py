"""The plugin entry point is inert unless enabled, and importing it pulls in nothing heavy."""

from __future__ import annotations

import json
import os
import subprocess
import sys

HEAVY = ("vllm", "torch", "vllm_ascend", "torch_npu", "numpy", "transformers")

PROBE = f"""
import json, sys
import vllm_hust_vspec
vllm_hust_vspec.register()
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))
"""


def run_probe(extra_env: dict[str, str]) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HUST_VSPEC_")}
    env.update(extra_env)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_register_is_a_noop_without_the_flag() -> None:
    assert run_probe({}) == []
    assert run_probe({"HUST_VSPEC_ENABLED": "0"}) == []


def test_register_does_not_read_settings_when_disabled() -> None:
    # a broken setting must not matter while the plugin is off
    assert run_probe({"HUST_VSPEC_GAMMA": "not-a-number"}) == []


def test_is_enabled_spellings() -> None:
    from vllm_hust_vspec import is_enabled

    assert is_enabled({"HUST_VSPEC_ENABLED": "1"})
    assert is_enabled({"HUST_VSPEC_ENABLED": "true"})
    assert not is_enabled({"HUST_VSPEC_ENABLED": "0"})
    assert not is_enabled({})
