#!/usr/bin/env python3
"""Where a policy spends its time on a simulator scenario, against a reference policy.

Runs ``scenario`` for each policy and seed (common random numbers, as bench_controller.py) and
splits every run's busy time at the given marks of committed tokens; prints, per stretch, each
policy's busy time summed over the seeds as a ratio to the first policy's and the difference
in milliseconds. The stretches line up across policies because every policy commits the same
tokens. Useful to tell a cold start from a shift from a draining tail.

    .venv/bin/python scripts/sim_time_by_stretch.py shift-code-prose-b32 \\
        --policies oracle,online,vllm-dflash-adaptive-k --marks 2000,95000,110000,150000,158000
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from vllm_hust_vspec.sim.runner import run_one, seeds_for
from vllm_hust_vspec.sim.scenario import Scenario, load_scenario


def stretch_times(scenario: Scenario, policy: str, seeds: list[int], marks: list[float]
                  ) -> list[float]:
    """Busy seconds summed over ``seeds`` in each stretch between consecutive ``marks``
    (committed tokens; the last stretch runs to the end)."""
    out = [0.0] * (len(marks) + 1)
    for seed in seeds:
        tl = run_one(scenario, policy, seed, record=True).timeline
        committed = list(itertools.accumulate(tl["committed"]))
        busy = list(itertools.accumulate(tl["dt"]))
        before = 0.0
        for i, mark in enumerate([*marks, committed[-1]]):
            j = min(bisect.bisect_left(committed, mark), len(busy) - 1)
            out[i] += busy[j] - before
            before = busy[j]
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the table; exit 2 on a bad argument."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", help="a shipped scenario name or a scenario JSON path")
    parser.add_argument("--policies", default="oracle,online",
                        help="comma-separated; the first is the reference (default oracle,online)")
    parser.add_argument("--marks", required=True,
                        help="comma-separated committed-token marks splitting each run")
    parser.add_argument("--seeds", type=int, default=6, help="seeds (default 6)")
    args = parser.parse_args(argv)
    try:
        marks = sorted(float(m) for m in args.marks.split(","))
    except ValueError:
        parser.error(f"--marks: expected comma-separated numbers, got {args.marks!r}")
    policies = [p for p in args.policies.split(",") if p]
    scenario = load_scenario(args.scenario)
    seeds = seeds_for(scenario, args.seeds)
    times = {p: stretch_times(scenario, p, seeds, marks) for p in policies}
    ref = times[policies[0]]
    edges = ["0", *(f"{m:g}" for m in marks), "end"]
    print(f"{args.scenario}: busy time per stretch of committed tokens, {args.seeds} seeds, "
          f"ratio to {policies[0]} (difference in ms)")
    print("stretch".ljust(22) + "".join(p[:22].rjust(24) for p in policies))
    for i in range(len(ref)):
        row = f"{edges[i]}..{edges[i + 1]}".ljust(22)
        for p in policies:
            t = times[p][i]
            ratio = t / ref[i] if ref[i] > 0 else float("nan")
            row += f"{ratio:.4f} ({1e3 * (t - ref[i]):+.0f})".rjust(24)
        print(row)
    total = "total".ljust(22)
    for p in policies:
        t, r = sum(times[p]), sum(ref)
        total += f"{t / r:.4f} ({1e3 * (t - r):+.0f})".rjust(24)
    print(total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
