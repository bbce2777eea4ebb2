#!/usr/bin/env python3
"""Where a served step's time goes, per call: target-only and vSpec servers under the same
open-loop load, each call of the step timed inside the EngineCore and the worker.

Both servers come from ``vllm-hust-vspec-bench pair --dry-run --json`` (they differ only in
speculation); repetitions alternate the arms, a fresh server each. A timing plugin
(``vllm_hust_vspec.bench.step_timers``, loaded through ``VLLM_PLUGINS`` beside vSpec) records
each call's wall time: the EngineCore's ``schedule``, ``get_grammar_bitmask`` and
``update_from_output``, and the worker's ``execute_model`` (the forward) and ``sample_tokens``.
The report gives medians per arm over the decode-only steps of the most common batch size, and
what the worker waits for the EngineCore between two steps (from its ``sample_tokens``
returning to its next ``execute_model``): the EngineCore's share of the step period, which
vSpec's scheduler hook adds to. Each figure is the median over repetitions of each run's
median, so one run that fell behind its load (near capacity a backlog feeds itself on two
cores) does not speak for all.

    .venv/bin/python scripts/profile_serve_steps.py --repetitions 2 --num-prompts 512

Unlike a sampling profiler (py-spy: which functions run) this times whole calls, and every
call: it resolves tens of microseconds in a ~2.5 ms step. The timers cost both arms
the same (~1 us a call). Any ``vllm-hust-vspec-bench pair`` server flag after ``--`` reaches
both arms' commands.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import json
import os
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_hust_vspec.bench.serve_pair import (
    ARMS,
    LABEL,
    add_load_args,
    load,
    pair_commands,
    parse_load_args,
)
from vllm_hust_vspec.bench.server import ServerProcess, for_run
from vllm_hust_vspec.bench.step_timers import ENV
from vllm_hust_vspec.launch.command import ServeCommand

PLUGIN = "vspec_step_timers"
ENGINE_CALLS = ("schedule", "update_from_output", "get_grammar_bitmask")
WORKER_CALLS = ("execute_model",)  # sample_tokens is timed too: it marks a step's end


@dataclass(frozen=True)
class Call:
    """One timed call: its name, start (perf_counter s), duration (s) and the step's size."""

    name: str
    start: float
    seconds: float
    requests: int
    tokens: int


def read_calls(paths: Iterable[Path], since: float = float("-inf")) -> list[list[Call]]:
    """The calls of each process file that started at ``since`` or later (one list per
    process, in start order). The timers' clock is ``time.perf_counter``, the system-wide
    monotonic clock on Linux, so ``since`` may come from this process."""
    out = []
    for path in paths:
        calls = [Call(*json.loads(line)) for line in path.read_text().splitlines() if line]
        out.append(sorted((c for c in calls if c.start >= since), key=lambda c: c.start))
    return out


def worker_waits(calls: Sequence[Call]) -> list[tuple[int, float, float]]:
    """Per worker step (``execute_model`` then its ``sample_tokens``): the step's requests,
    the step period (execute start to the next execute start) and the worker's wait for the
    EngineCore after it (its sample_tokens end to the next execute start), in seconds."""
    execs = [c for c in calls if c.name == "execute_model"]
    samples = [c for c in calls if c.name == "sample_tokens"]
    starts = [s.start for s in samples]
    out = []
    for ex, nxt in zip(execs, execs[1:], strict=False):
        i = bisect.bisect_left(starts, ex.start)
        if i >= len(samples) or samples[i].start > nxt.start or ex.requests != ex.tokens:
            continue  # no sample in between, or not decode-only
        out.append((ex.requests, nxt.start - ex.start,
                    nxt.start - (samples[i].start + samples[i].seconds)))
    return out


def modal_batch(processes: Sequence[Sequence[Call]]) -> int:
    """The most common size of a decode-only step (requests == tokens) in these calls."""
    sizes = collections.Counter(c.requests for calls in processes for c in calls
                                if c.name == "execute_model" and c.requests == c.tokens > 0)
    if not sizes:
        raise SystemExit("profile: no decode-only step was timed")
    return sizes.most_common(1)[0][0]


def summarize(processes: Sequence[Sequence[Call]], batch: int) -> dict[str, float]:
    """Median microseconds per call at decode-only steps of ``batch``, and the worker's period
    and wait for the EngineCore."""
    by_name: dict[str, list[float]] = collections.defaultdict(list)
    for calls in processes:
        for c in calls:
            if c.requests == c.tokens == batch:
                by_name[c.name].append(c.seconds)
        for requests, period, wait in worker_waits(calls):
            if requests == batch:
                by_name["step period"].append(period)
                by_name["worker waits for the EngineCore"].append(wait)
    return {name: statistics.median(v) * 1e6 for name, v in by_name.items() if v}


def run_arm(arm: str, cmd: ServeCommand, rep: int, args: argparse.Namespace
            ) -> tuple[list[list[Call]], dict[str, Any]]:
    """Serve one arm with the timers, warm up, load it; the calls timed during the load (per
    process) and the load's result."""
    work: Path = args.work / f"{arm}-r{rep}"
    work.mkdir(parents=True, exist_ok=True)
    for stale in work.glob("timers.*.jsonl"):
        stale.unlink()
    plugin_dir = args.work / "plugin"
    env = {
        ENV: str(work / "timers"),
        "VLLM_PLUGINS": f"{cmd.env.get('VLLM_PLUGINS', 'vspec')},{PLUGIN}",
        "PYTHONPATH": os.pathsep.join(p for p in (str(plugin_dir),
                                                  os.environ.get("PYTHONPATH", "")) if p),
        "PROMETHEUS_MULTIPROC_DIR": str(work / "prometheus"),
    }
    (work / "prometheus").mkdir(exist_ok=True)
    server = ServerProcess(arm, for_run(cmd, None, env), work / "server.log", any_port=True)
    server.start(os.environ)
    try:
        server.wait_ready(args.server_timeout)
        load(server.base_url, args, work / "warmup", warmup=True, who="profile")
        # only the measured load counts (the warm-up's last calls may still be unwritten)
        since = time.perf_counter()
        result = load(server.base_url, args, work / "load", warmup=False, who="profile")
    finally:
        server.stop()
    files = sorted(work.glob("timers.*.jsonl"))
    if not files:
        raise SystemExit(f"profile: the {arm} server wrote no timings ({work / 'server.log'})")
    return read_calls(files, since), result


def install_plugin(plugin_dir: Path) -> None:
    """The timing plugin's entry point (its module is vllm_hust_vspec.bench.step_timers)."""
    info = plugin_dir / f"{PLUGIN}-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PLUGIN}\nVersion: 0\n")
    (info / "entry_points.txt").write_text(
        f"[vllm.general_plugins]\n{PLUGIN} = vllm_hust_vspec.bench.step_timers:register\n")


def over_runs(runs: Sequence[Sequence[Sequence[Call]]], batch: int) -> dict[str, float]:
    """Per figure, the median over runs of :func:`summarize`'s medians."""
    per_run = [summarize(processes, batch) for processes in runs]
    names = {name for run in per_run for name in run}
    return {name: statistics.median(run[name] for run in per_run if name in run)
            for name in names}


def report(calls: dict[str, list[list[list[Call]]]], results: dict[str, list[dict[str, Any]]]
           ) -> None:
    """Print the per-call medians of both arms side by side."""
    batch = modal_batch([c for arm in ARMS for run in calls[arm] for c in run])
    rows = {arm: over_runs(calls[arm], batch) for arm in ARMS}
    for arm in ARMS:
        tput = [float(r["output_throughput"]) for r in results[arm]]
        p99 = [float(r.get("p99_ttft_ms", float("nan"))) for r in results[arm]]
        print(f"{LABEL[arm]}: {' '.join(f'{t:.0f}' for t in tput)} tok/s, p99 TTFT "
              f"{' '.join(f'{p:.0f}' for p in p99)} ms")
    print(f"\nmedian us per call, decode-only steps of batch {batch}, median over runs "
          f"(get_grammar_bitmask: overlaps the worker's forward)")
    print(f"{'':34s} {'target-only':>12s} {'vSpec':>10s} {'diff':>8s}")
    names = [*ENGINE_CALLS, *WORKER_CALLS, "worker waits for the EngineCore", "step period"]
    for name in names:
        a, b = rows["baseline"].get(name), rows["vspec"].get(name)
        if a is None or b is None:
            continue
        where = "EngineCore" if name in ENGINE_CALLS else "worker" if name in WORKER_CALLS \
            else ""
        label = f"{where} {name}".strip()
        print(f"{label:34s} {a:12.1f} {b:10.1f} {b - a:+8.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repetitions", type=int, default=2, help="runs per arm, alternated (2)")
    add_load_args(ap, num_prompts=512, warmup_prompts=16, work=".cache/profile-serve-steps")
    args = parse_load_args(ap)
    args.work = args.work.resolve()
    install_plugin(args.work / "plugin")
    cmds = pair_commands(["--protocol", args.protocol, *args.server_args], "profile")
    calls: dict[str, list[list[list[Call]]]] = {arm: [] for arm in ARMS}
    results: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    for rep in range(1, args.repetitions + 1):
        order = ARMS if rep % 2 else ARMS[::-1]
        for arm in order:
            print(f"profile: repetition {rep}, {LABEL[arm]}", flush=True)
            processes, result = run_arm(arm, cmds[arm], rep, args)
            calls[arm].append(processes)
            results[arm].append(result)
    report(calls, results)
    print(f"\ntimings: {args.work}/*/timers.*.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
