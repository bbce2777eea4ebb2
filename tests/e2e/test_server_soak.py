"""A short soak of the real cpu-tiny server (scripts/soak_server.py): mixed traffic with
cancels and bad requests, a second launch on the live server's port and metrics folder, and
SIGTERM while requests are in flight, with a drain timeout long enough for the wave on a slow
machine (past it vLLM SIGKILLs the EngineCore and the unwritten tails are lost); then the trace
and the metrics the dead server left must agree step for step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")

import engine_support as es  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.server]

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "soak_server.py"


def test_soak_sigterm_under_load_and_second_launch(tmp_path: Path) -> None:
    es.model("target"), es.model("draft")  # skips when the tiny models are not built
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--requests", "60", "--concurrency", "8", "--wave", "24",
         "--shutdown-timeout", "120", "--workdir", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.stdout, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    failed = [name for name, ok in summary["checks"].items() if not ok]
    assert not failed, json.dumps(summary, indent=1)[-4000:]
    assert proc.returncode == 0
    for attempt in summary["second_launch"].values():
        assert attempt["exit"] == 2
    assert "in use" in summary["second_launch"]["same_port"]["message"][0]
    assert "left untouched" in summary["second_launch"]["same_metrics_dir"]["message"][0]
    assert summary["wave"]["in_flight_at_sigterm"] > 0  # the signal met requests in flight
    assert summary["trace"]["steps"] == summary["post_mortem_metrics"]["vspec_gamma_steps_total"]
