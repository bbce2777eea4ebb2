"""Helpers of the benchmark scripts under scripts/ that decide what a report says."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from vllm_hust_vspec.sim.time_by_arm import read_steps, summarize

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _script(name: str) -> ModuleType:
    """Import ``scripts/<name>.py`` by path (scripts/ is no package), under its own name so
    that a script importing another one finds it once that one is loaded."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_trace_report_prices_steps_off_the_sticky_zero(tmp_path: Path) -> None:
    def step(t: float, gamma: int, skip: bool, interval: float) -> str:
        return json.dumps({"t": t, "step": 1, "gamma": gamma, "skip": skip, "steady": True,
                           "interval_s": interval})

    lines = [json.dumps({"run": "x"})]  # the header
    lines += [step(0.01 * i, 2, False, 0.01) for i in range(3)]  # warm-up
    lines += [step(5.0 + 0.01 * i, 0, True, 0.002) for i in range(10)]
    lines += [step(6.0, 1, False, 0.012), step(6.1, 0, True, 0.003)]
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    assert len(read_steps(trace, None)) == 15
    measured = read_steps(trace, after_idle=2.0)
    assert len(measured) == 12 and measured[0]["t"] == 5.0
    s = summarize(measured)
    assert s["zero_step_s"] == pytest.approx(0.002)
    assert s["off_zero"] == 1 and s["excess_s"] == pytest.approx(0.010)
    assert s["arms"][(0, False)] == (11, pytest.approx(0.023))
    assert s["arms"][(1, True)] == (1, pytest.approx(0.012))


def test_the_sim_cli_reports_time_by_arm(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from vllm_hust_vspec.cli.sim import main

    rec = {"t": 0.0, "step": 1, "gamma": 0, "skip": True, "steady": True, "interval_s": 0.002}
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"run": "x"}) + "\n" + json.dumps(rec) + "\n")
    assert main(["time-by-arm", str(trace), "--after-idle", "2"]) == 0
    assert "1 steps, 0.00 s (g0 skip 1 / 2 ms); 0 steps off the sticky zero" in (
        capsys.readouterr().out)
    assert main(["time-by-arm", str(tmp_path / "none.jsonl")]) == 2


def test_the_hog_report_reads_the_prior_of_the_batch_calibrated_in_the_bucket() -> None:
    _script("bench_cpu_e2e")  # bench_cpu_hog imports it
    prior_shape = _script("bench_cpu_hog").prior_shape
    rows = [{"batch": b, "gamma": g, "drafter_ran": g > 0, "seconds": (1 + g) * 0.001 * b}
            for b in (1, 3, 6, 12, 16) for g in range(5)]
    # batch 8's bucket [8, 16) was calibrated at 12
    assert prior_shape({"startup_prior": rows}, 8).startswith("batch 12: 1: 2.00, 2: 3.00")
    assert prior_shape({"startup_prior": [r for r in rows if r["batch"] != 12]}, 8) == (
        "no step timed in batch 8's bucket")
    assert prior_shape({}, 8) == "none recorded"


def test_the_step_profile_splits_each_period_into_forward_and_engine_wait(tmp_path: Path) -> None:
    steps = _script("profile_serve_steps")
    Call, read_calls, worker_waits = steps.Call, steps.read_calls, steps.worker_waits
    modal_batch, over_runs, summarize_steps = steps.modal_batch, steps.over_runs, steps.summarize
    ms = 1e-3
    # a worker: two decode steps of 8, a prefill of 3 requests (20 tokens), one more decode
    worker = [("execute_model", 0.0, 2 * ms, 8, 8), ("sample_tokens", 2.1 * ms, 0.2 * ms, -1, -1),
              ("execute_model", 2.7 * ms, 2 * ms, 8, 8),
              ("sample_tokens", 4.8 * ms, 0.2 * ms, -1, -1),
              ("execute_model", 5.5 * ms, 3 * ms, 3, 20),
              ("sample_tokens", 8.6 * ms, 0.2 * ms, -1, -1),
              ("execute_model", 9.0 * ms, 2 * ms, 8, 8)]
    engine = [("schedule", 0.0, 90e-6, 8, 8), ("update_from_output", 2.4 * ms, 60e-6, 8, 8),
              ("get_grammar_bitmask", 0.1 * ms, 30e-6, 8, 8),
              ("schedule", 2.6 * ms, 110e-6, 8, 8), ("schedule", 5.4 * ms, 80e-6, 3, 20)]
    paths = []
    for name, rows in (("w", worker), ("e", engine)):
        path = tmp_path / f"timers.{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows[::-1]))  # any order
        paths.append(path)
    processes = read_calls(paths)
    assert [c.start for c in processes[0]] == sorted(c.start for c in processes[0])
    # calls that started before the measured load (a warm-up's) are left out
    later = read_calls(paths, since=2.7 * ms)
    assert [c.start for c in later[0]] == [c.start for c in processes[0] if c.start >= 2.7 * ms]
    assert len(later[0]) == 5 and [c.start for c in later[1]] == [5.4 * ms]
    waits = worker_waits(processes[0])
    # the prefill step is left out; the last execute has no next step
    assert [w[0] for w in waits] == [8, 8]
    assert waits[0][1] == pytest.approx(2.7 * ms) and waits[0][2] == pytest.approx(0.4 * ms)
    assert modal_batch(processes) == 8
    got = summarize_steps(processes, 8)
    assert got["schedule"] == pytest.approx(100.0)  # the median of 90 and 110 us
    assert got["worker waits for the EngineCore"] == pytest.approx(450.0)
    assert got["execute_model"] == pytest.approx(2000.0)
    assert "update_from_output" in got and got["get_grammar_bitmask"] == pytest.approx(30.0)
    # over runs: the median of each run's median, so one slow run does not decide
    slow = [[Call(c.name, c.start, c.seconds * 10, c.requests, c.tokens) for c in p]
            for p in processes]
    assert over_runs([processes, processes, slow], 8)["schedule"] == pytest.approx(100.0)
    with pytest.raises(SystemExit, match="no decode-only step"):
        modal_batch([[Call("execute_model", 0.0, 1.0, 3, 20)]])
