"""Helpers of the benchmark scripts under scripts/ that decide what a report says."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from _sim_helpers import make

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from bench_cpu_hog import prior_shape  # noqa: E402
from bench_serve_rotation import burst  # noqa: E402
from profile_serve_steps import (  # noqa: E402
    Call,
    modal_batch,
    over_runs,
    read_calls,
    worker_waits,
)
from profile_serve_steps import summarize as summarize_steps  # noqa: E402
from sim_drain_weighting import DrainWeightedOracle, busy_seconds  # noqa: E402
from sim_overhead_tails import main as overhead_tails_main  # noqa: E402
from sim_overhead_tails import table as overhead_table  # noqa: E402
from sim_time_by_stretch import stretch_times  # noqa: E402
from trace_time_by_arm import read_steps, summarize  # noqa: E402
from vllm_hust_vspec.sim.engine import simulate  # noqa: E402
from vllm_hust_vspec.sim.oracle import Oracle  # noqa: E402
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


def test_the_hog_report_reads_the_prior_of_the_batch_calibrated_in_the_bucket() -> None:
    rows = [{"batch": b, "gamma": g, "drafter_ran": g > 0, "seconds": (1 + g) * 0.001 * b}
            for b in (1, 3, 6, 12, 16) for g in range(5)]
    # batch 8's bucket [8, 16) was calibrated at 12
    assert prior_shape({"startup_prior": rows}, 8).startswith("batch 12: 1: 2.00, 2: 3.00")
    assert prior_shape({"startup_prior": [r for r in rows if r["batch"] != 12]}, 8) == (
        "no step timed in batch 8's bucket")
    assert prior_shape({}, 8) == "none recorded"


def test_the_drain_variants_are_the_oracle_until_the_batch_drains() -> None:
    sc = make(workload__num_requests=24)
    seen: list[tuple[int, int, int]] = []  # batch, decision, the plain oracle's decision

    class Recording(DrainWeightedOracle):
        def decide(self, batch_size: int, token_budget: int) -> int:
            g = super().decide(batch_size, token_budget)
            seen.append((len(self._bound().batch), g, Oracle.decide(self, batch_size,
                                                                     token_budget)))
            return g

    simulate(sc, Recording(0, 4, sc.max_num_seqs, None), 1)
    full = [(g, o) for b, g, o in seen if b >= sc.max_num_seqs]
    draining = [g for b, g, _ in seen if 0 < b < sc.max_num_seqs]
    assert full and all(g == o for g, o in full)
    assert draining and set(draining) == {1}
    assert any(o != 1 for b, _, o in seen if 0 < b < sc.max_num_seqs)  # the test can tell
    # a weighted variant is a different policy from the oracle on the same seeds
    assert busy_seconds(sc, 4.0, [1, 2]) != busy_seconds(sc, "oracle", [1, 2])


def test_a_burst_counts_the_tokens_the_server_reported(fake_server: str) -> None:
    from _fake_openai import FakeOpenAI

    rate = burst(fake_server, "m", concurrency=3, requests=2, output_len=8, seed=1)
    bodies = FakeOpenAI.bodies
    assert len(bodies) == 6 and all(b["model"] == "m" and b["ignore_eos"] for b in bodies)
    assert len({str(b["prompt"]) for b in bodies}) == 6  # every request its own prompt
    assert rate > 0
    with pytest.raises(RuntimeError, match="6 requests to http://127.0.0.1:9 failed"):
        burst("http://127.0.0.1:9", "m", concurrency=3, requests=2, output_len=8, seed=1)


def test_an_added_step_cost_grows_ttft_tails_by_more_than_the_step_time(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import argparse

    args = argparse.Namespace(num_prompts=64, request_rate=16.0, prompt_len=128,
                              output_len=128, max_num_seqs=8, max_num_batched_tokens=2048,
                              base_ms=1.85, per_token_ms=0.012, per_ctx_ktoken_ms=0.45, seeds=3)
    plain, (none, added) = overhead_table(args, [0.0, 100.0])
    assert 0 < plain["p50_ttft"] <= plain["p90_ttft"] <= plain["p99_ttft"]
    assert plain["mean_tpot"] > 1.85e-3  # at least the base cost per token
    assert all(none[k] == 1.0 for k in ("p50_ttft", "p99_ttft", "mean_tpot"))
    # ~5% slower steps: TPOT by about that, the queue behind bursts (p90 TTFT) by more
    assert 1.02 < added["mean_tpot"] < 1.08
    assert added["p90_ttft"] > added["mean_tpot"]
    assert overhead_tails_main(["--num-prompts", "16", "--seeds", "1", "--overheads-us", "50"]) == 0
    assert "| 50 us |" in capsys.readouterr().out


def test_the_step_profile_splits_each_period_into_forward_and_engine_wait(tmp_path: Path) -> None:
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
