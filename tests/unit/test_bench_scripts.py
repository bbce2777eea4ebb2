"""Helpers of the benchmark scripts under scripts/ that decide what a report says."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _sim_helpers import make

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from bench_cpu_hog import prior_shape  # noqa: E402
from sim_time_by_stretch import stretch_times  # noqa: E402
from vllm_hust_vspec.sim.runner import run_one  # noqa: E402


def test_stretches_split_each_run_s_busy_time_at_the_marks() -> None:
    sc = make(workload__num_requests=24)
    whole = sum(run_one(sc, "fixed:2", s).busy_seconds for s in (1, 2))
    parts = stretch_times(sc, "fixed:2", [1, 2], [200.0, 600.0])
    assert len(parts) == 3 and all(p > 0 for p in parts)
    assert sum(parts) == pytest.approx(whole)
    # a mark past the end leaves the last stretches empty
    late = stretch_times(sc, "fixed:2", [1, 2], [200.0, 1e12])
    assert late[0] == pytest.approx(parts[0]) and late[2] == 0.0


def test_the_hog_report_reads_the_prior_of_the_batch_calibrated_in_the_bucket() -> None:
    rows = [{"batch": b, "gamma": g, "drafter_ran": g > 0, "seconds": (1 + g) * 0.001 * b}
            for b in (1, 3, 6, 12, 16) for g in range(5)]
    # batch 8's bucket [8, 16) was calibrated at 12
    assert prior_shape({"startup_prior": rows}, 8).startswith("batch 12: 1: 2.00, 2: 3.00")
    assert prior_shape({"startup_prior": [r for r in rows if r["batch"] != 12]}, 8) == (
        "no step timed in batch 8's bucket")
    assert prior_shape({}, 8) == "none recorded"
