#!/usr/bin/env python3
"""What a fixed cost per engine step does to latency tails under open-loop load (simulated).

A server that adds a constant cost to every step (vSpec's scheduler hook at sticky gamma 0:
tens of microseconds per step) serves slower by that share of a step. Under open-loop load
near the server's capacity, the queue a burst of arrivals builds grows by much more than that
share, and TTFT tails with it. This runs the simulator's engine (sim/engine.py: continuous
batching, ``max_num_seqs``, chunked prefill, Poisson arrivals), target-only, once per seed
with each added cost (the same arrivals for every cost), and prints the median over seeds of
each run's p50 / p90 / p99 TTFT and mean TPOT divided by those of the run without it.

    .venv/bin/python scripts/sim_overhead_tails.py                  # bench pair's 512-prompt load
    .venv/bin/python scripts/sim_overhead_tails.py --num-prompts 64 --overheads-us 25,50

The default step cost is the cpu-tiny server's at sticky gamma 0, read from a ``bench pair
--trace`` run of that load on a 2-core VM (median step: 1.94 ms at batch 1, 2.67 ms at batch
8; a step that admits a 128-token prompt about 1.7 ms more): base 1.85 ms, 0.012 ms per
scheduled token, 0.45 ms per 1000 context tokens.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from vllm_hust_vspec.bench.stats import percentile  # noqa: E402
from vllm_hust_vspec.sim.engine import RunResult, simulate  # noqa: E402
from vllm_hust_vspec.sim.policies import make_controller  # noqa: E402
from vllm_hust_vspec.sim.scenario import Scenario, parse_scenario  # noqa: E402


def scenario(args: argparse.Namespace, overhead_us: float) -> Scenario:
    """Target-only open-loop serving with ``overhead_us`` added to every step."""
    return parse_scenario({
        "schema_version": 1,
        "name": f"open-loop-overhead-{overhead_us:g}us",
        "seed": 0,
        "min_gamma": 0,
        "max_gamma": 0,
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "gamma0": "free",
        "workload": {
            "num_requests": args.num_prompts,
            "arrival": {"type": "poisson", "rate_per_s": args.request_rate},
            "prompt_len": {"type": "fixed", "value": args.prompt_len},
            "output_len": {"type": "fixed", "value": args.output_len},
        },
        "acceptance": {"type": "iid", "alpha": 0.5},
        "cost": {"type": "linear", "target_base_ms": args.base_ms + overhead_us / 1000.0,
                 "target_per_token_ms": args.per_token_ms,
                 "target_per_ctx_ktoken_ms": args.per_ctx_ktoken_ms},
        "startup_calibration": None,
    }, "<sim_overhead_tails>")


def figures(result: RunResult, output_len: int) -> dict[str, float]:
    """p50 / p90 / p99 TTFT (the percentile ``bench pair`` reports) and mean TPOT (seconds)
    of one run."""
    ttft = [first - arrival for _, arrival, first, _ in result.requests]
    tpot = [(finish - first) / max(output_len - 1, 1) for _, _, first, finish in result.requests]
    return {"p50_ttft": percentile(ttft, 50), "p90_ttft": percentile(ttft, 90),
            "p99_ttft": percentile(ttft, 99), "mean_tpot": statistics.fmean(tpot)}


def run(args: argparse.Namespace, overhead_us: float, seed: int) -> dict[str, float]:
    """One simulated run's figures."""
    sc = scenario(args, overhead_us)
    return figures(simulate(sc, make_controller("fixed:0", sc, seed), seed), args.output_len)


def table(args: argparse.Namespace, overheads: list[float]
          ) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """The run without an added cost (each figure's median over seeds), and per added cost
    the median over seeds of each figure's ratio to that seed's run without it."""
    base = [run(args, 0.0, seed) for seed in range(args.seeds)]
    plain = {key: statistics.median(b[key] for b in base) for key in base[0]}
    rows = []
    for us in overheads:
        runs = [run(args, us, seed) for seed in range(args.seeds)]
        row: dict[str, Any] = {"overhead_us": us}
        for key in ("p50_ttft", "p90_ttft", "p99_ttft", "mean_tpot"):
            ratios = [r[key] / b[key] for r, b in zip(runs, base, strict=True)
                      if b[key] > 0]
            row[key] = statistics.median(ratios)
            row[key + "_range"] = (min(ratios), max(ratios))
        rows.append(row)
    return plain, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--overheads-us", default="10,25,50,100",
                        help="added cost per step, microseconds, comma separated")
    parser.add_argument("--num-prompts", type=int, default=512)
    parser.add_argument("--request-rate", type=float, default=16.0)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--max-num-seqs", type=int, default=8)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--base-ms", type=float, default=1.85)
    parser.add_argument("--per-token-ms", type=float, default=0.012)
    parser.add_argument("--per-ctx-ktoken-ms", type=float, default=0.45)
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args(argv)
    overheads = [float(x) for x in args.overheads_us.split(",") if x]
    print(f"simulated target-only, {args.num_prompts} prompts at {args.request_rate:g} req/s "
          f"({args.prompt_len} + {args.output_len} tokens), max_num_seqs {args.max_num_seqs}, "
          f"{args.seeds} seeds; ratios to the run without an added cost (median, range)\n")
    plain, rows = table(args, overheads)
    print("| added per step | p50 TTFT | p90 TTFT | p99 TTFT | mean TPOT |")
    print("|---|---|---|---|---|")
    print("| none (ms) | " + " | ".join(f"{plain[k] * 1e3:.2f}" for k in
                                       ("p50_ttft", "p90_ttft", "p99_ttft", "mean_tpot")) + " |")
    for row in rows:
        cells = " | ".join(f"{row[k]:.3f} ({row[k + '_range'][0]:.2f}-{row[k + '_range'][1]:.2f})"
                           for k in ("p50_ttft", "p90_ttft", "p99_ttft", "mean_tpot"))
        print(f"| {row['overhead_us']:g} us | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
