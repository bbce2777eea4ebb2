"""``vllm-hust-vspec-sim lockstep-dp``: one agreed gamma vs each rank on its own vs fixed.

Prints a Markdown table (goodput of each policy over the per-rank oracle's) for every scenario
of :mod:`vllm_hust_vspec.sim.lockstep_dp` at 2..64 ranks::

    vllm-hust-vspec-sim lockstep-dp [--cost mtp-head] [--steps 40] [--seed 0]
"""

from __future__ import annotations

import argparse

from ..sim import COST_PRESETS
from ..sim.lockstep_dp import SCENARIOS, table


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the subcommand."""
    p = argparse.ArgumentParser(
        prog="vllm-hust-vspec-sim lockstep-dp",
        description="Lockstep data parallel in the simulator (expected values per step): "
        "goodput of one agreed gamma (vSpec's vote, the best single gamma) and of a fixed "
        "gamma over the per-rank oracle's, per scenario and rank count.",
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--cost", default="mtp-head", choices=sorted(COST_PRESETS),
                   help="cost preset (default mtp-head)")
    p.add_argument("--steps", type=int, default=40, help="steps per run (default 40)")
    p.add_argument("--seed", type=int, default=0, help="seed of the ranks' loads (default 0)")
    p.add_argument("--max-gamma", type=int, default=5,
                   help="largest gamma, also the fixed policy's (default 5)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Print the scenarios and the table; returns the exit code."""
    args = build_parser().parse_args(argv)
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
