#!/usr/bin/env python3
"""Lockstep data parallel in the simulator: one agreed gamma vs each rank on its own vs fixed.

Prints a Markdown table (goodput of each policy over the per-rank oracle's) for every scenario
of ``vllm_hust_vspec.sim.lockstep_dp`` at 2..64 ranks.

Usage: ``python scripts/sim_lockstep_dp.py [--cost mtp-head] [--steps 40] [--seed 0]``
"""

from __future__ import annotations

import argparse
import sys

from vllm_hust_vspec.sim import COST_PRESETS
from vllm_hust_vspec.sim.lockstep_dp import SCENARIOS, table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cost", default="mtp-head", choices=sorted(COST_PRESETS))
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-gamma", type=int, default=5)
    args = ap.parse_args(argv)
    rows = table(COST_PRESETS[args.cost], steps=args.steps, seed=args.seed,
                 max_gamma=args.max_gamma)
    print(f"cost {args.cost}, gamma 0..{args.max_gamma}, fixed = {args.max_gamma}, "
          f"{args.steps} steps, seed {args.seed}\n")
    for name, sc in SCENARIOS.items():
        print(f"* {name}: {sc.describe}")
    print("\n| scenario | ranks | agreed (vote) | agreed (oracle) | fixed | per-rank oracle "
          "tok/s |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.scenario} | {r.ranks} | {r.ratio('agreed-vote'):.3f} | "
              f"{r.ratio('agreed-oracle'):.3f} | {r.ratio('fixed'):.3f} | "
              f"{r.goodput['per-rank-oracle']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
